//! The corpus applications' captured traffic (fixtures/captures/, made by
//! scripts/captures.sh with `wirelint proxy --capture` during
//! tests/realworld.rs) analysed offline: each gives exactly the findings
//! its application expects (`expected.json`), with nothing lost in the
//! reading. No backend is needed, so `cargo test` alone runs it: a change
//! to the analysis that changes what the corpus is told shows here first.
//!
//! And `wirelint analyse` as a user runs it: the report, SARIF, JSON,
//! `--fail-on`, and the errors that say what to do.

mod common;

use std::path::{Path, PathBuf};

fn captures() -> Vec<(String, PathBuf)> {
    let dir = common::manifest_dir().join("fixtures/captures");
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.strip_suffix(".pcapng.gz")?;
            Some((name.to_string(), p.clone()))
        })
        .collect();
    found.sort();
    found
}

/// The application a capture is of: its folder and the analysis it runs
/// with (its wirelint.toml).
fn application(name: &str) -> (PathBuf, wirelint::analysis::Settings) {
    let dir = common::applications::dir(name)
        .unwrap_or_else(|| panic!("fixtures/captures/{name}: no such application"));
    let analysis = common::applications::analysis(&dir, None);
    (dir, analysis)
}

#[test]
fn every_capture_gives_its_applications_findings() {
    let captures = captures();
    assert!(
        captures.len() >= 30,
        "fixtures/captures/ holds {} captures (scripts/captures.sh makes them)",
        captures.len()
    );
    let mut failures = Vec::new();
    for (name, path) in &captures {
        let (dir, settings) = application(name);
        let analysed = wirelint::app::offline::analyse(
            &settings,
            std::slice::from_ref(path),
            Default::default(),
        )
        .unwrap();
        let a = &analysed.account;
        if !a.describe().is_empty() || a.requests == 0 || a.requests != a.replies {
            failures.push(format!("{name}: read {a:?}: {:?}", a.describe()));
        }
        if !analysed.report.patterns.iter().any(|p| p.analysis_us > 0.0) {
            failures.push(format!(
                "{name}: no pattern was charged the analysis's time"
            ));
        }
        let expected = common::expected::load(&dir.join("expected.json"));
        let comparison = common::expected::compare(&expected, &analysed.report.findings);
        if !comparison.is_exact() {
            failures.push(format!(
                "{name}:\n{}\n\n{}",
                comparison.describe(),
                wirelint::report::table::text(&analysed.report)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

use common::run;
use common::wirelint_command as wirelint;

fn capture_of(name: &str) -> PathBuf {
    common::manifest_dir()
        .join("fixtures/captures")
        .join(format!("{name}.pcapng.gz"))
}

#[test]
fn analyse_prints_the_report_and_fails_on_findings() {
    let problem = capture_of("problem-mongoose-n-plus-one");
    let (code, out, err) = run(wirelint()
        .arg("analyse")
        .arg(&problem)
        .args(["--fail-on", "warning"]));
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(out.contains("WL401"), "{out}");
    assert!(err.contains("requests") && err.contains("MB/s"), "{err}");
    // A good design: silent, status 0.
    let good = capture_of("good-embeddings");
    let (code, out, err) = run(wirelint()
        .arg("analyse")
        .arg(&good)
        .args(["--fail-on", "info"]));
    assert_eq!(code, 0, "{out}\n{err}");
    // SARIF on stdout, the JSON report beside it, readable by `report`.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let (code, out, _) = run(wirelint()
        .arg("analyse")
        .arg(&problem)
        .args(["--format", "sarif", "--report"])
        .arg(&json));
    assert_eq!(code, 0);
    let sarif: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    let (code, out, _) = run(wirelint().arg("report").arg(&json));
    assert_eq!(code, 0);
    assert!(out.contains("WL401"), "{out}");
}

#[test]
fn analyse_help_says_what_it_reads() {
    let (code, out, _) = run(wirelint().args(["analyse", "--help"]));
    assert_eq!(code, 0);
    for needle in [
        "pcapng",
        "tcpdump",
        "--server-port",
        "27017,10255",
        "TLS",
        "--fail-on",
        "--config",
    ] {
        assert!(out.contains(needle), "{needle} missing from:\n{out}");
    }
    let (_, out, _) = run(wirelint().args(["proxy", "--help"]));
    assert!(out.contains("--capture") && out.contains("0600"), "{out}");
}

#[test]
fn analyse_says_what_is_wrong_with_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a capture").unwrap();
    let (code, _, err) = run(wirelint().arg("analyse").arg(&notes));
    assert_eq!(code, 2);
    assert!(
        err.contains("notes.txt is not a pcap or pcapng capture"),
        "{err}"
    );
    // The server on another port than the one asked for.
    let capture = capture_of("good-embeddings");
    let (code, _, err) = run(wirelint()
        .arg("analyse")
        .arg(&capture)
        .args(["--server-port", "27018"]));
    assert_eq!(code, 0);
    assert!(
        err.contains("no MongoDB requests were found") && err.contains("--server-port"),
        "{err}"
    );
    let (code, _, err) = run(wirelint()
        .arg("analyse")
        .arg(Path::new("/nonexistent.pcap")));
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent.pcap"), "{err}");
}
