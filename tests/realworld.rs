//! Real application code through wirelint: `fixtures/realworld/<name>/`
//! holds an application written the way its community writes it — pymongo
//! or MongoEngine (`app.py`), the Node driver or Mongoose (`app.js`), the Go
//! driver (`main.go`), Spring Data MongoDB (`pom.xml`) — the
//! `wirelint.toml` it needs (partition keys), and `expected.json`, its exact
//! findings. `good-*` applications are designs an expert would approve and
//! must stay silent; `problem-*` ones must be found. Each runs through its
//! own wirelint against FerretDB; the test prints precision and recall over
//! the corpus, then fails on any difference.
//!
//! `fixtures/requests/` holds applications of the same layout that name no
//! operation (no `comment`): their requests must be rebuilt from the
//! traffic. Every application that does name its operations also runs
//! untagged — `comment` taken out on the client side, by the driver
//! hooks of `tests/untagged/` — and must give the same (rule, namespace,
//! severity) findings as its tagged run (a subject may name a request,
//! and the untagged run names it by its shape).
//!
//! Steadiness: every application's traffic is recorded on its way in
//! (`common::recording`) and replayed into a fresh engine twice as it
//! came, which must give the same report apart from timings, and once with
//! a second of application work before each operation, which must give the
//! same (rule, namespace, subject, severity) as the live run. Each
//! application also runs live once more with every core kept busy, to the
//! same findings: its untagged run when it names its operations, else (on
//! SQLite) a run of its own, with the same subjects too.
//!
//! Offline: each application's live run is also captured by tcpdump on
//! loopback and by the proxy itself (`--capture`), and `wirelint
//! analyse` of each capture must read every message and give the same
//! (rule, namespace, subject, severity) as the proxy. `WIRELINT_KEEP_CAPTURES=DIR`
//! keeps the proxy's captures there (scripts/captures.sh makes
//! fixtures/captures/ that way).
//!
//! `WIRELINT_REALWORLD=name[,name…]` runs those applications only.

mod common;

use common::recording::{judged, judged_placed, steadiness, under_contention, Relay};
use common::tcpdump::Tcpdump;
use common::Backend;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Outcome {
    name: String,
    expected: usize,
    found: usize,
    unexpected: usize,
    failure: Option<String>,
}

fn applications() -> Vec<PathBuf> {
    let only = std::env::var("WIRELINT_REALWORLD").ok();
    let mut dirs: Vec<PathBuf> = ["fixtures/realworld", "fixtures/requests"]
        .iter()
        .flat_map(|root| std::fs::read_dir(common::manifest_dir().join(root)).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|o| p.ends_with(o)))
        })
        .collect();
    dirs.sort_by_key(|d| d.file_name().map(|n| n.to_owned()));
    dirs
}

/// Whether the application in `dir` names operations (`comment`), so
/// that its untagged run differs from its tagged one. (A Python or Node
/// application; the Go and Java ones name nothing.)
fn names_operations(dir: &Path) -> bool {
    ["app.py", "app.js"].iter().any(|f| {
        std::fs::read_to_string(dir.join(f))
            .is_ok_and(|s| s.contains("comment=") || s.contains("comment:"))
    })
}

/// `command` made to send no `comment`: the driver hooks of
/// `tests/untagged/` (a `sitecustomize` for pymongo, a `--require` for
/// the Node driver) take it out of every command before it is encoded.
fn untagged(mut command: Command) -> Command {
    let hooks = common::manifest_dir().join("tests/untagged");
    command.env("PYTHONPATH", &hooks).env(
        "NODE_OPTIONS",
        format!("--require {}", hooks.join("untagged.js").display()),
    );
    command
}

/// The command that runs the application in `dir` against `uri`.
fn app_command(dir: &Path, uri: &str) -> Command {
    if dir.join("app.py").exists() {
        let mut c =
            Command::new(std::env::var("WIRELINT_PYTHON").unwrap_or_else(|_| "python3".into()));
        c.arg(dir.join("app.py")).arg(uri);
        c
    } else if dir.join("app.js").exists() {
        let mut c = Command::new("node");
        c.arg(dir.join("app.js")).arg(uri).env(
            "NODE_PATH",
            common::manifest_dir().join("tests/drivers/node/node_modules"),
        );
        c
    } else if dir.join("main.go").exists() {
        // The Go module is fixtures/realworld/go.mod; modules come from
        // the Go module proxy (go.sum pins them).
        let mut c = Command::new("go");
        c.args(["run", "."]).arg(uri).current_dir(dir);
        c
    } else if dir.join("pom.xml").exists() {
        // Spring Data MongoDB from Maven Central, compiled and run by Maven.
        let mut c = Command::new("mvn");
        c.args(["-q", "-B", "compile", "exec:java"])
            .arg(format!("-Dexec.args={uri}"))
            .current_dir(dir);
        c
    } else {
        panic!("{}: no app.py, app.js, main.go or pom.xml", dir.display())
    }
}

async fn run(dir: &Path, backend: &Backend) -> Outcome {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let settings = wirelint::config::ProxySettings {
        analysis: common::applications::analysis(dir, None),
        ..common::settings(&backend.uri())
    };
    let captures = tempfile::tempdir().unwrap();
    let own_capture = captures.path().join(format!("{name}.pcapng"));
    let proxy = common::proxy_with(wirelint::config::ProxySettings {
        capture: Some(own_capture.clone()),
        ..settings.clone()
    })
    .await;
    let relay = Relay::start(proxy.local_addr()).await;
    let port = proxy.local_addr().port();
    let tcpdump = Tcpdump::start(port, &captures.path().join(format!("{name}.pcap")));
    common::expected::run_workload(&name, app_command(dir, &relay.uri())).await;
    let report = proxy.report();
    proxy.shutdown().await;
    let (capture, _) = tcpdump.stop();
    let events = relay.events();
    drop(relay);
    let expected = common::expected::load(&dir.join("expected.json"));
    let comparison = common::expected::compare(&expected, &report.findings);
    let mut failure = (!comparison.is_exact()).then(|| {
        format!(
            "{name}:\n{}\n\n{}",
            comparison.describe(),
            wirelint::report::table::text(&report)
        )
    });
    for (capture, port) in [(&capture, port), (&own_capture, 27017)] {
        if let Some(differs) = offline_differs(&name, &settings, capture, port, &report) {
            failure.get_or_insert_with(String::new).push_str(&differs);
        }
    }
    if let Some(dir) = std::env::var_os("WIRELINT_KEEP_CAPTURES") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&own_capture, dir.join(format!("{name}.pcapng"))).unwrap();
    }
    let rerun = || async {
        let proxy = common::proxy_with(settings.clone()).await;
        let command = app_command(dir, &proxy.connection_string());
        common::expected::run_workload(&name, command).await;
        let findings = proxy.report().findings;
        proxy.shutdown().await;
        findings
    };
    // An application that names its operations runs again untagged under
    // contention below; the others, here.
    let rerun = (!names_operations(dir)).then_some(rerun);
    if let Some(unsteady) = steadiness(&name, &settings, &report.findings, &events, rerun).await {
        failure.get_or_insert_with(String::new).push_str(&unsteady);
    }
    if names_operations(dir) {
        let proxy = common::proxy_with(settings.clone()).await;
        let command = untagged(app_command(dir, &proxy.connection_string()));
        under_contention(common::expected::run_workload(&name, command)).await;
        let untagged_report = proxy.report();
        proxy.shutdown().await;
        let (tagged, untagged) = (
            judged_placed(&report.findings),
            judged_placed(&untagged_report.findings),
        );
        if tagged != untagged {
            failure.get_or_insert_with(String::new).push_str(&format!(
                "\n{name}, untagged: only tagged {:?}, only untagged {:?}\n\n{}",
                tagged.difference(&untagged).collect::<Vec<_>>(),
                untagged.difference(&tagged).collect::<Vec<_>>(),
                wirelint::report::table::text(&untagged_report)
            ));
        }
    }
    if dir.join("expected-shared.json").exists() {
        if let Some(f) = suite_folds(dir, &name, &settings, &report).await {
            failure.get_or_insert_with(String::new).push_str(&f);
        }
    }
    Outcome {
        failure,
        name,
        // wirelint's known misses count as expected and not found.
        expected: expected.len() - comparison.gaps.len() + comparison.known_misses,
        found: comparison.found,
        unexpected: comparison.unexpected.len(),
    }
}

/// `wirelint analyse` on a capture of the live run (tcpdump's, or the
/// proxy's own `--capture`, whose server is port 27017): the same (rule,
/// namespace, subject, severity) as the proxy, every message read.
fn offline_differs(
    name: &str,
    settings: &wirelint::config::ProxySettings,
    capture: &Path,
    port: u16,
    live: &wirelint::report::Report,
) -> Option<String> {
    let reader = wirelint::capture::ReaderSettings {
        server_ports: vec![port],
        ..Default::default()
    };
    let offline =
        match wirelint::app::offline::analyse(&settings.analysis, &[capture.to_owned()], reader) {
            Ok(a) => a,
            Err(e) => return Some(format!("\n{name}, wirelint analyse: {e:#}")),
        };
    let a = &offline.account;
    let mut failure = String::new();
    if a.gaps + a.messages_lost + a.tls_connections + a.not_wire_protocol > 0 || a.requests == 0 {
        failure.push_str(&format!("\n{name}, wirelint analyse: {:?}", a.describe()));
    }
    let (proxy, capture) = (judged(&live.findings), judged(&offline.report.findings));
    if proxy != capture {
        failure.push_str(&format!(
            "\n{name}, wirelint analyse of its tcpdump capture: only live {:?}, only offline {:?}\n\n{}",
            proxy.difference(&capture).collect::<Vec<_>>(),
            capture.difference(&proxy).collect::<Vec<_>>(),
            wirelint::report::table::text(&offline.report)
        ));
    }
    (!failure.is_empty()).then_some(failure)
}

/// An application whose tests each make a database of their own
/// (`expected-shared.json` beside `expected.json`): the report says how
/// many databases it folded; with every test in one database
/// (`WIRELINT_SHARED_DB=1`) it gets the same findings, named by that
/// database; with the fold off, the per-test databases split the evidence
/// again and none of them is found.
async fn suite_folds(
    dir: &Path,
    name: &str,
    settings: &wirelint::config::ProxySettings,
    report: &wirelint::report::Report,
) -> Option<String> {
    let mut failure = String::new();
    if !report.folded_databases.iter().any(|f| f.databases >= 2) {
        failure.push_str(&format!(
            "\n{name}: no database folded: {:?}",
            report.folded_databases
        ));
    }
    let run_with = |settings: wirelint::config::ProxySettings, shared: bool| async move {
        let proxy = common::proxy_with(settings).await;
        let mut command = app_command(dir, &proxy.connection_string());
        if shared {
            command.env("WIRELINT_SHARED_DB", "1");
        }
        common::expected::run_workload(name, command).await;
        let report = proxy.report();
        proxy.shutdown().await;
        report
    };
    let shared = run_with(settings.clone(), true).await;
    let expected = common::expected::load(&dir.join("expected-shared.json"));
    let c = common::expected::compare(&expected, &shared.findings);
    if !c.is_exact() {
        failure.push_str(&format!(
            "\n{name}, one database for all tests:\n{}",
            c.describe()
        ));
    }
    let mut off = settings.clone();
    off.analysis.fold = wirelint::analysis::databases::Fold::Off;
    let apart = run_with(off, false).await;
    let expected = common::expected::load(&dir.join("expected.json"));
    let c = common::expected::compare(&expected, &apart.findings);
    if c.found > 0 || !apart.folded_databases.is_empty() {
        failure.push_str(&format!(
            "\n{name}, --fold-databases off: found {} of the folded findings, folded {:?}",
            c.found, apart.folded_databases
        ));
    }
    (!failure.is_empty()).then_some(failure)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, Py/Node/Go/Java")]
async fn real_applications_get_exactly_their_findings() {
    let backend = Backend::start(Default::default());
    let mut outcomes = Vec::new();
    for dir in applications() {
        outcomes.push(run(&dir, &backend).await);
    }
    assert!(!outcomes.is_empty(), "no application in fixtures/realworld");
    let (mut tp, mut fp, mut fn_) = (0, 0, 0);
    println!(
        "{:<32} {:>8} {:>6} {:>10}",
        "application", "expected", "found", "unexpected"
    );
    for o in &outcomes {
        println!(
            "{:<32} {:>8} {:>6} {:>10}",
            o.name, o.expected, o.found, o.unexpected
        );
        tp += o.found;
        fp += o.unexpected;
        fn_ += o.expected - o.found;
    }
    let ratio = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
    let good = outcomes
        .iter()
        .filter(|o| o.name.starts_with("good-"))
        .count();
    let silent = outcomes
        .iter()
        .filter(|o| o.name.starts_with("good-") && o.unexpected == 0)
        .count();
    println!(
        "precision {:.3} ({tp} of {} findings expected), recall {:.3} ({tp} of {} expected found); good designs silent: {silent} of {good}",
        ratio(tp, tp + fp),
        tp + fp,
        ratio(tp, tp + fn_),
        tp + fn_
    );
    let failures: Vec<&String> = outcomes.iter().filter_map(|o| o.failure.as_ref()).collect();
    assert!(
        failures.is_empty(),
        "{}",
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}
