//! Expected findings of a workload (`expected.json` in a fixture) and the
//! exact comparison the scenario and real-world suites share: a missing
//! finding and a finding not listed are both failures.

use serde::Deserialize;
use wirelint::rules::{Finding, Severity};

/// An expected finding: every field given must match.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    pub rule: String,
    pub namespace: String,
    #[serde(default)]
    pub subject: Option<String>,
    /// One of the access patterns the finding was seen in.
    #[serde(default)]
    pub pattern: Option<String>,
    #[serde(default)]
    pub severity: Option<Severity>,
    /// The key of the finding it follows from (`rule:namespace:subject`).
    #[serde(default)]
    pub fix_first: Option<String>,
    /// Words the finding's message must contain (the advice it gives).
    #[serde(default)]
    pub message_contains: Option<String>,
    /// Storages of FerretDB (`sqlite`, `postgresql`) on which the workload
    /// cannot produce this finding, each with why: a gap of the backend.
    /// Or `wirelint`: a finding an expert expects that wirelint does not
    /// make yet (a known miss, counted against recall). Either way the
    /// finding must be absent, so a gap that closes fails the test until
    /// its note is removed.
    #[serde(default)]
    pub missing_on: std::collections::BTreeMap<String, String>,
}

impl Expected {
    pub fn matches(&self, f: &Finding) -> bool {
        f.rule == self.rule
            && f.namespace == self.namespace
            && self.subject.as_ref().is_none_or(|s| *s == f.subject)
            && self.pattern.as_ref().is_none_or(|p| f.patterns.contains(p))
            && self.severity.is_none_or(|s| s == f.severity)
            && self
                .message_contains
                .as_ref()
                .is_none_or(|m| f.message.contains(m.as_str()))
            && self
                .fix_first
                .as_ref()
                .is_none_or(|k| f.fix_first.as_ref() == Some(k))
    }
}

/// Runs a fixture's workload to completion (it must succeed), then gives
/// the analysis a moment to settle.
pub async fn run_workload(name: &str, mut command: std::process::Command) {
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: the workload failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
}

pub fn load(path: &std::path::Path) -> Vec<Expected> {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What a run found against what was expected.
pub struct Comparison<'a> {
    /// Of the gaps, wirelint's own (expected by an expert, not made yet).
    pub known_misses: usize,
    pub missing: Vec<&'a Expected>,
    pub unexpected: Vec<&'a Finding>,
    /// Expected findings that were found.
    pub found: usize,
    /// Findings this storage cannot produce (`missing_on`), with why.
    pub gaps: Vec<(&'a Expected, &'a str)>,
    /// Of those, the ones found all the same: the note is stale.
    pub stale_gaps: Vec<&'a Expected>,
}

/// The storage the tests' FerretDB runs on (`WIRELINT_BACKEND`).
fn storage_name() -> &'static str {
    match super::storage() {
        super::Storage::Sqlite => "sqlite",
        super::Storage::Postgresql => "postgresql",
    }
}

pub fn compare<'a>(expected: &'a [Expected], findings: &'a [Finding]) -> Comparison<'a> {
    let storage = storage_name();
    let gap_of = |e: &Expected| {
        [storage, "wirelint"]
            .into_iter()
            .find(|k| e.missing_on.contains_key(*k))
    };
    let (gaps, expected): (Vec<&Expected>, Vec<&Expected>) =
        expected.iter().partition(|e| gap_of(e).is_some());
    let missing: Vec<&Expected> = expected
        .iter()
        .copied()
        .filter(|e| !findings.iter().any(|f| e.matches(f)))
        .collect();
    let stale_gaps: Vec<&Expected> = gaps
        .iter()
        .copied()
        .filter(|e| findings.iter().any(|f| e.matches(f)))
        .collect();
    let gaps: Vec<(&Expected, &str)> = gaps
        .into_iter()
        .map(|e| (e, e.missing_on[gap_of(e).expect("a gap")].as_str()))
        .collect();
    for (e, why) in &gaps {
        let whose = if e.missing_on.contains_key("wirelint") {
            "a known miss of wirelint".to_string()
        } else {
            format!("not expected on FerretDB/{storage}")
        };
        eprintln!("{whose}: {} {}: {why}", e.rule, e.namespace);
    }
    Comparison {
        known_misses: gaps
            .iter()
            .filter(|(e, _)| e.missing_on.contains_key("wirelint"))
            .count(),
        found: expected.len() - missing.len(),
        missing,
        unexpected: findings
            .iter()
            .filter(|f| {
                !expected.iter().any(|e| e.matches(f)) && !stale_gaps.iter().any(|e| e.matches(f))
            })
            .collect(),
        gaps,
        stale_gaps,
    }
}

impl Comparison<'_> {
    pub fn is_exact(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.stale_gaps.is_empty()
    }

    /// The lists, one line per finding not listed.
    pub fn describe(&self) -> String {
        let stale = if self.stale_gaps.is_empty() {
            String::new()
        } else {
            format!(
                "found, though `missing_on` says FerretDB/{} or wirelint cannot produce it \
                 (the gap is gone: remove the note): {:#?}\n",
                storage_name(),
                self.stale_gaps
            )
        };
        format!(
            "{stale}missing: {:#?}\nnot expected: {:#?}",
            self.missing,
            self.unexpected
                .iter()
                .map(|f| format!(
                    "{} {} {} {:?} [{}] {}",
                    f.rule,
                    f.severity.as_str(),
                    f.namespace,
                    f.patterns,
                    f.subject,
                    f.message
                ))
                .collect::<Vec<_>>()
        )
    }
}
