//! The seeds' examples as scenarios: `fixtures/scenarios/<name>/` holds a
//! pymongo workload (`workload.py URI`), the `wirelint.toml` it needs and
//! `expected.json`, the findings that must appear. Each runs through
//! wirelint against a fresh FerretDB; a missing finding and a finding not
//! listed both fail (precision matters as much as recall). Each run, tagged
//! and untagged, also replays its traffic at another speed to the same
//! findings (`common::recording`); the untagged run, which must find what
//! the tagged one does, runs with every core kept busy.

mod common;

use common::recording::{steadiness, under_contention, Relay};
use common::Backend;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn python() -> Command {
    Command::new(std::env::var("WIRELINT_PYTHON").unwrap_or_else(|_| "python3".into()))
}

/// Runs `script URI args…` through a wirelint configured by the scenario's
/// `wirelint.toml`, in front of `backend`; returns its report. With
/// `steady`, the same traffic must also give the same findings at another
/// speed (`common::recording::steadiness`); untagged, it runs under CPU
/// contention (and must match the tagged run's findings).
async fn run_through_wirelint(
    name: &str,
    backend: &Backend,
    script: &std::path::Path,
    args: &[&str],
    tagged: bool,
    steady: bool,
) -> wirelint::report::Report {
    let scenario = common::manifest_dir().join("fixtures/scenarios").join(name);
    let settings = wirelint::config::ProxySettings {
        analysis: common::applications::analysis(&scenario, None),
        ..common::settings(&backend.uri())
    };
    let workload = |uri: String| {
        let mut workload = python();
        workload.arg(script).arg(uri).args(args);
        if !tagged {
            // No `comment` on any operation: pymongo's encoder loses it (see
            // `tests/untagged/sitecustomize.py`).
            workload.env("PYTHONPATH", common::manifest_dir().join("tests/untagged"));
        }
        workload
    };
    let proxy = common::proxy_with(settings.clone()).await;
    let relay = Relay::start(proxy.local_addr()).await;
    if tagged {
        common::expected::run_workload(name, workload(relay.uri())).await;
    } else {
        // Untagged, requests are rebuilt from the values: on a loaded
        // machine, every core kept busy.
        under_contention(common::expected::run_workload(name, workload(relay.uri()))).await;
    }
    let report = proxy.report();
    proxy.shutdown().await;
    let events = relay.events();
    drop(relay);
    if steady {
        // Run again from the start: the workload drops its database first.
        // (The untagged run is the one under contention: no rerun.)
        let rerun: Option<fn() -> std::future::Ready<Vec<wirelint::rules::Finding>>> = None;
        let unsteady = steadiness(name, &settings, &report.findings, &events, rerun).await;
        assert!(unsteady.is_none(), "{}", unsteady.unwrap_or_default());
    }
    report
}

async fn run(name: &str) -> wirelint::report::Report {
    let dir: PathBuf = common::manifest_dir().join("fixtures/scenarios").join(name);
    let expected = common::expected::load(&dir.join("expected.json"));
    let backend = Backend::start(Default::default());
    let report =
        run_through_wirelint(name, &backend, &dir.join("workload.py"), &[], true, true).await;

    // The seed's ✅/⚠ column, when the scenario states it.
    let verdicts = dir.join("verdicts.json");
    if verdicts.exists() {
        let want: std::collections::BTreeMap<String, Vec<String>> =
            serde_json::from_str(&std::fs::read_to_string(&verdicts).unwrap()).unwrap();
        for (verdict, names) in &want {
            for name in names {
                let got = report
                    .patterns
                    .iter()
                    .find(|p| &p.name == name)
                    .map(|p| p.verdict.clone());
                assert_eq!(
                    got.as_deref(),
                    Some(verdict.as_str()),
                    "{name}: ⚠/✅ differs from the blogging platform's page\n{}",
                    wirelint::report::table::text(&report)
                );
            }
        }
        let named: Vec<&String> = report
            .patterns
            .iter()
            .filter(|p| p.named_by == wirelint::analysis::patterns::NamedBy::Comment)
            .map(|p| &p.name)
            .collect();
        assert_eq!(
            named.len(),
            want.values().map(Vec::len).sum::<usize>(),
            "patterns: {named:?}"
        );
    }
    let comparison = common::expected::compare(&expected, &report.findings);
    assert!(
        comparison.is_exact(),
        "{name}:\n{}\n\n{}",
        comparison.describe(),
        wirelint::report::table::text(&report)
    );
    same_untagged(name, &backend, &dir, &report, verdicts.exists()).await;
    report
}

/// The (rule, namespace, severity) of each finding.
fn judged(report: &wirelint::report::Report) -> BTreeSet<String> {
    report
        .findings
        .iter()
        .map(|f| format!("{} {} {:?}", f.rule, f.namespace, f.severity))
        .collect()
}

/// The scenario run again with no `comment` on any operation gives the
/// same (rule, namespace, severity) findings as its tagged run. For the
/// blogging platform (`verdicts`: its ✅/⚠ column), each named request's
/// ✅/⚠ is also that of the request rebuilt from its first operation,
/// named by that operation's shape. (Elsewhere a request the scenario names
/// apart may be rebuilt as part of another: a product page's reviews read
/// by the product's id follow the product.)
async fn same_untagged(
    name: &str,
    backend: &Backend,
    dir: &std::path::Path,
    tagged: &wirelint::report::Report,
    verdicts: bool,
) {
    let named: Vec<_> = tagged
        .patterns
        .iter()
        .filter(|p| p.named_by == wirelint::analysis::patterns::NamedBy::Comment)
        .collect();
    if named.is_empty() {
        return;
    }
    let untagged =
        run_through_wirelint(name, backend, &dir.join("workload.py"), &[], false, true).await;
    let table = wirelint::report::table::text(&untagged);
    assert_eq!(
        judged(tagged),
        judged(&untagged),
        "{name}: untagged findings differ from tagged ones\n{table}"
    );
    if !verdicts {
        return;
    }
    for p in named {
        let root = tagged
            .shapes
            .iter()
            .find(|s| Some(&s.id) == p.sequence.first())
            .map(|s| s.text.as_str());
        let rebuilt = untagged
            .patterns
            .iter()
            .find(|u| Some(u.name.as_str()) == root);
        assert_eq!(
            rebuilt.map(|u| u.verdict.as_str()),
            Some(p.verdict.as_str()),
            "{name}: {} (root {root:?}) untagged\n{table}",
            p.name
        );
    }
}

/// `wirelint diff` between the three versions prints the blogging platform page's comparison:
/// round trips fall and the ⚠ go away, request by request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB and pymongo")]
async fn seed004_blog_v1_v2_v3_diff() {
    let v1 = run("seed004-blog-v1").await;
    let v2 = run("seed004-blog-v2").await;
    let v3 = run("seed004-blog-v3").await;
    let a = wirelint::report::diff::diff(&v1, &v2);
    let b = wirelint::report::diff::diff(&v2, &v3);
    let line = |text: &str, name: &str| -> String {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_default()
            .to_string()
    };
    let q2 = line(&a, "Q2");
    assert!(
        q2.contains("4 → 1") && q2.contains("⚠→✅") && q2.contains("-WL403"),
        "{a}"
    );
    let q3 = line(&a, "Q3");
    assert!(
        q3.contains("scatter-gather → scatter-gather") && q3.contains("⚠→⚠"),
        "{a}"
    );
    let q3 = line(&b, "Q3");
    assert!(
        q3.contains("scatter-gather → single-shard")
            && q3.contains("⚠→✅")
            && q3.contains("-WL201"),
        "{b}"
    );
    let q6 = line(&b, "Q6");
    assert!(
        q6.contains("scatter-gather → single-shard") && q6.contains("-WL202"),
        "{b}"
    );
    let c1 = line(&a, "C1");
    assert!(c1.contains("✅→✅"), "{a}");
}

/// The blogging platform page's table: each request's latency and request
/// units (RU) in V1, V2 and V3, as the page measured them.
const PAGE_RU: [(&str, [f64; 3]); 10] = [
    ("C1", [5.71, 5.71, 5.71]),
    ("Q1", [1.0, 1.0, 1.0]),
    ("C2", [8.76, 8.76, 8.76]),
    ("Q2", [19.54, 1.0, 1.0]),
    ("Q3", [619.41, 201.54, 6.46]),
    ("C3", [8.57, 15.27, 15.27]),
    ("Q4", [27.72, 7.72, 7.72]),
    ("C4", [7.05, 14.67, 14.67]),
    ("Q5", [58.92, 8.92, 8.92]),
    ("Q6", [2063.54, 532.33, 16.97]),
];

/// Up, down or flat: a change within a quarter either way is flat (every
/// change the page calls one is at least 75 %).
fn direction(from: f64, to: f64) -> &'static str {
    if to > from * 1.25 {
        "up"
    } else if to < from / 1.25 {
        "down"
    } else {
        "flat"
    }
}

/// Runs the blogging platform's version `v` on a page-sized data set
/// through wirelint under its scenario's config (target cosmos-ru); the
/// RU per call of each of the page's requests, found by name when tagged,
/// else by the shape its tagged run starts with (`roots`).
async fn page_sized_ru(
    v: usize,
    tagged: bool,
    roots: &std::collections::BTreeMap<String, String>,
) -> (
    std::collections::BTreeMap<String, f64>,
    wirelint::report::Report,
) {
    let name = format!("seed004-blog-v{v}");
    let backend = Backend::start(Default::default());
    let script = common::manifest_dir().join("fixtures/blog/blogging.py");
    let version = v.to_string();
    let args = [version.as_str(), "0:2", "--page-sized"];
    let report = run_through_wirelint(&name, &backend, &script, &args, tagged, false).await;
    assert_eq!(
        report.target.target,
        wirelint::analysis::target::Target::CosmosRu
    );
    let mut ru = std::collections::BTreeMap::new();
    for (request, _) in PAGE_RU {
        let wanted = if tagged {
            Some(request.to_string())
        } else {
            roots.get(request).cloned()
        };
        let found = report
            .patterns
            .iter()
            .find(|p| Some(&p.name) == wanted.as_ref())
            .and_then(|p| p.request_units.as_ref());
        if let Some(r) = found {
            ru.insert(request.to_string(), r.per_invocation);
        }
    }
    (ru, report)
}

/// The page's table with an RU column: its ten requests run on a data set
/// shaped as the page's (5–50 posts per user, up to 25 comments and 100
/// likes per post) in V1, V2 and V3 under target cosmos-ru. Each request's
/// estimate moves as the page's does from version to version (up, down or
/// flat), the list requests Q3 and Q6 fall at least tenfold from V1 to V3,
/// and at least 8 of the 10 V1 and of the 10 V3 estimates are within 3×
/// of the page's figure. Untagged, the requests rebuilt from the traffic
/// show the same tenfold falls. (docs/cosmos.md shows the table.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB and pymongo")]
async fn seed004_blog_request_units_follow_the_page() {
    use std::collections::BTreeMap;
    let none = BTreeMap::new();
    let mut got: Vec<BTreeMap<String, f64>> = Vec::new();
    let mut roots: Vec<BTreeMap<String, String>> = Vec::new();
    for v in 1..=3 {
        let (ru, report) = page_sized_ru(v, true, &none).await;
        // Each request's first shape: its name once untagged.
        let mut first = BTreeMap::new();
        for p in &report.patterns {
            let root = report
                .shapes
                .iter()
                .find(|s| Some(&s.id) == p.sequence.first());
            if let Some(s) = root {
                first.insert(p.name.clone(), s.text.clone());
            }
        }
        got.push(ru);
        roots.push(first);
    }
    let mut table = String::from("request   V1 page  V1 est   V2 page  V2 est   V3 page  V3 est\n");
    for (request, page) in PAGE_RU {
        let est = |v: usize| got[v].get(request).copied().unwrap_or(f64::NAN);
        table.push_str(&format!(
            "{request:<8}{:>9.2}{:>8.2}{:>10.2}{:>8.2}{:>10.2}{:>8.2}\n",
            page[0],
            est(0),
            page[1],
            est(1),
            page[2],
            est(2)
        ));
    }
    println!("{table}");
    for (request, page) in PAGE_RU {
        let est: Vec<f64> = (0..3)
            .map(|v| {
                *got[v]
                    .get(request)
                    .unwrap_or_else(|| panic!("{request} V{}: no RU\n{table}", v + 1))
            })
            .collect();
        for (a, b) in [(0, 1), (1, 2)] {
            assert_eq!(
                direction(est[a], est[b]),
                direction(page[a], page[b]),
                "{request} V{} → V{}: the estimate moves unlike the page's\n{table}",
                a + 1,
                b + 1
            );
        }
    }
    for request in ["Q3", "Q6"] {
        let (v1, v3) = (got[0][request], got[2][request]);
        assert!(v1 >= 10.0 * v3, "{request}: {v1} → {v3}\n{table}");
    }
    for v in [0, 2] {
        let close = PAGE_RU
            .iter()
            .filter(|(request, page)| {
                let (est, page) = (got[v][*request], page[v]);
                est <= 3.0 * page && est >= page / 3.0
            })
            .count();
        assert!(close >= 8, "V{}: {close} of 10 within 3×\n{table}", v + 1);
    }

    // Untagged: the same requests rebuilt from the traffic, named by their
    // first shape.
    let (u1, _) = page_sized_ru(1, false, &roots[0]).await;
    let (u3, _) = page_sized_ru(3, false, &roots[2]).await;
    println!("untagged V1: {u1:?}\nuntagged V3: {u3:?}");
    for request in ["Q3", "Q6"] {
        let (v1, v3) = (u1[request], u3[request]);
        assert!(v1 >= 10.0 * v3, "untagged {request}: {v1} → {v3}");
    }
}

/// Two instances of the V1 application share one database, each behind its
/// own wirelint (a fleet of sidecars, or two CI shards): the first writes
/// the data and serves calls 0–2, the second serves calls 3–4. `wirelint
/// report merge` of their two reports gives what one wirelint in front of
/// the whole workload gives: the same patterns with the same ✅/⚠, their
/// counts added up, the same findings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB and pymongo")]
async fn seed004_v1_halves_merge_into_the_whole() {
    let name = "seed004-blog-v1";
    let whole = run(name).await;

    let script = common::manifest_dir().join("fixtures/blog/blogging.py");
    let backend = Backend::start(Default::default());
    let first = run_through_wirelint(name, &backend, &script, &["1", "0:3"], true, false).await;
    let second = run_through_wirelint(
        name,
        &backend,
        &script,
        &["1", "3:5", "no-setup"],
        true,
        false,
    )
    .await;
    // Each half counts only its own calls: the merge must add them up.
    let calls = |r: &wirelint::report::Report, name: &str| {
        r.patterns
            .iter()
            .find(|p| p.name == name)
            .map_or(0, |p| p.invocations)
    };
    assert!(
        calls(&second, "Q2") < calls(&whole, "Q2") && calls(&first, "Q2") < calls(&whole, "Q2"),
        "each half alone must count fewer calls, else this test shows nothing"
    );

    let dir = tempfile::tempdir().unwrap();
    let (a, b, all) = (
        dir.path().join("a.json"),
        dir.path().join("b.json"),
        dir.path().join("all.json"),
    );
    first.write(&a).unwrap();
    second.write(&b).unwrap();
    let bin = env!("CARGO_BIN_EXE_wirelint");
    let out = Command::new(bin)
        .args(["report", "merge"])
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&all)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged = wirelint::report::Report::load(&all).unwrap();
    assert_eq!(merged.runs.len(), 2);

    let table = || {
        format!(
            "whole:\n{}\nmerged:\n{}",
            wirelint::report::table::text(&whole),
            wirelint::report::table::text(&merged)
        )
    };
    let names = |r: &wirelint::report::Report| -> Vec<String> {
        r.patterns.iter().map(|p| p.name.clone()).collect()
    };
    assert_eq!(names(&merged), names(&whole), "{}", table());
    for w in &whole.patterns {
        let m = merged.patterns.iter().find(|p| p.name == w.name).unwrap();
        assert_eq!(
            (
                &m.verdict,
                m.invocations,
                m.round_trips,
                m.docs_returned,
                &m.partitions
            ),
            (
                &w.verdict,
                w.invocations,
                w.round_trips,
                w.docs_returned,
                &w.partitions
            ),
            "{}: {}",
            w.name,
            table()
        );
        let histogram_total: u64 = m.latency_histogram.iter().map(|[_, n]| n).sum();
        assert_eq!(histogram_total, w.invocations, "{}", w.name);
    }
    let findings = |r: &wirelint::report::Report| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = r
            .findings
            .iter()
            .map(|f| (f.key(), f.severity.as_str().to_string()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(findings(&merged), findings(&whole), "{}", table());
    assert_eq!(merged.counters.operations, whole.counters.operations);
    for command in ["find", "insert", "update", "aggregate"] {
        assert_eq!(
            merged.counters.commands.get(command),
            whole.counters.commands.get(command),
            "{command}"
        );
    }

    // The merged report renders, converts to SARIF and fails a build like
    // a single run's.
    for (format, status) in [("text", 0), ("sarif", 0)] {
        let out = Command::new(bin)
            .args(["report", "--format", format])
            .arg(&all)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(status), "{format}");
    }
    let out = Command::new(bin)
        .args(["report", "--fail-on", "warning"])
        .arg(&all)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let sarif = Command::new(bin)
        .args(["report", "--format", "sarif"])
        .arg(&all)
        .output()
        .unwrap();
    let sarif: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    assert_eq!(
        sarif["runs"][0]["results"].as_array().unwrap().len(),
        whole.findings.len()
    );
}

macro_rules! scenarios {
    ($($test:ident => $dir:literal,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB and pymongo")]
            async fn $test() {
                run($dir).await;
            }
        )*

        /// Every scenario directory has a test.
        #[test]
        fn every_scenario_directory_is_run() {
            let mut dirs: Vec<String> = std::fs::read_dir(common::manifest_dir().join("fixtures/scenarios"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            dirs.sort();
            let mut listed = vec![$($dir.to_string()),*];
            listed.sort();
            assert_eq!(dirs, listed);
        }
    };
}

scenarios! {
    seed000_blog_comments_embedded => "seed000-blog-comments-embedded",
    seed000_blog_comments_subset_and_buckets => "seed000-blog-comments-subset-buckets",
    seed000_person_addresses => "seed000-person-addresses",
    seed000_stock_holdings_embedded => "seed000-stock-holdings-embedded",
    seed000_stock_holdings_referenced => "seed000-stock-holdings-referenced",
    seed000_publisher_books_array => "seed000-publisher-books-array",
    seed000_publisher_books_reference => "seed000-publisher-books-reference",
    seed000_authors_books_join => "seed000-authors-books-join",
    seed000_authors_books_arrays => "seed000-authors-books-arrays",
    seed000_authors_books_hybrid => "seed000-authors-books-hybrid",
    seed003_library_no_type => "seed003-library-no-type",
    seed003_library_with_type => "seed003-library-with-type",
    seed001_product_reviews_embedded => "seed001-product-reviews-embedded",
    seed001_product_reviews_subset => "seed001-product-reviews-subset",
    seed002_book_reviews_unbounded => "seed002-book-reviews-unbounded",
    seed002_book_reviews_subset => "seed002-book-reviews-subset",
    seed002_book_reviews_lookup => "seed002-book-reviews-lookup",
    seed004_partitioned_queries => "seed004-partitioned-queries",
    seed004_partitioned_queries_by_key => "seed004-partitioned-queries-by-key",
    seed004_blog_v1 => "seed004-blog-v1",
    seed004_blog_v2 => "seed004-blog-v2",
    seed004_blog_v3 => "seed004-blog-v3",
}
