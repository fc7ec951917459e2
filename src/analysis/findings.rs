//! Findings: what the rules report, deduplicated by (rule, namespace,
//! subject) in the [`FindingStore`].

use super::budget::{short_key, shorten, Pool};
use super::catalogue::RuleMeta;
use super::hash::fnv1a;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

/// A finding's severity: rules and the configuration name it through
/// this module too.
pub use super::catalogue::Severity;

/// What a rule reports.
pub struct FindingDraft {
    pub namespace: String,
    /// What the finding is about within the namespace (a field path, a
    /// shape, the collection itself): part of the dedup key.
    pub subject: String,
    pub severity: Severity,
    pub pattern: Option<String>,
    pub shape: Option<String>,
    pub message: String,
    pub evidence: BTreeMap<String, serde_json::Value>,
}

/// A finding as stored, reported and serialized.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Finding {
    pub rule: String,
    pub name: String,
    pub severity: Severity,
    pub namespace: String,
    pub subject: String,
    /// The access pattern where it was last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// That operation's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    /// Every access pattern where it was seen (up to 16).
    #[serde(default)]
    pub patterns: Vec<String>,
    pub message: String,
    pub evidence: BTreeMap<String, serde_json::Value>,
    pub advice: String,
    /// The public pages the rule comes from, by title (`seed` in reports
    /// written before 0.2).
    #[serde(alias = "seed")]
    pub source: String,
    pub docs: String,
    pub occurrences: u64,
    pub first_seen: String,
    pub last_seen: String,
    /// The key of the finding to fix first, when this one follows from it
    /// (set when a report is built; see `report::group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix_first: Option<String>,
}

impl Finding {
    /// A stable id: rule, namespace and subject.
    pub fn key(&self) -> String {
        format!("{}:{}:{}", self.rule, self.namespace, self.subject)
    }

    /// A short stable fingerprint of the key, for SARIF.
    pub fn fingerprint(&self) -> String {
        format!("{:016x}", fnv1a(self.key().as_bytes()))
    }
}

/// What happened to the store on a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    New,
    Escalated,
    Repeated,
}

/// Findings, deduplicated. Bounded: past [`MAX_FINDINGS`] distinct
/// findings, or once its pool is full, new ones are counted in `dropped`
/// instead of stored (the ones already found keep being updated).
pub struct FindingStore {
    findings: BTreeMap<(String, String, String), Finding>,
    pool: Arc<Pool>,
    pub dropped: u64,
    /// The last time stamp written and its second (see `stamp`).
    stamp: Option<(u64, String)>,
}

impl Default for FindingStore {
    fn default() -> Self {
        FindingStore::new(Pool::unbounded("findings"))
    }
}

impl Drop for FindingStore {
    fn drop(&mut self) {
        let n = self.findings.len();
        self.pool.give_back(n * FINDING_BYTES, n);
    }
}

pub const MAX_FINDINGS: usize = 10_000;

/// What one finding is charged: its strings are bounded (namespace,
/// subject and pattern names at `budget::MAX_KEY`, the shape at
/// `budget::MAX_SHAPE_TEXT`, the message at [`MAX_MESSAGE`], up to 16
/// patterns), so this covers the largest.
pub const FINDING_BYTES: usize = 8 << 10;
/// Longest message kept.
const MAX_MESSAGE: usize = 2048;

impl FindingStore {
    pub fn new(pool: Arc<Pool>) -> FindingStore {
        FindingStore {
            findings: BTreeMap::new(),
            pool,
            dropped: 0,
            stamp: None,
        }
    }

    /// Records a finding (new, or one more occurrence of a known one, whose
    /// message and evidence it replaces); returns what changed and the
    /// finding as stored, if it is.
    pub fn record(
        &mut self,
        meta: &RuleMeta,
        mut draft: FindingDraft,
        now: SystemTime,
    ) -> (Change, Option<&Finding>) {
        let stamp = self.stamp(now);
        // Replaced only when shortened: most are short already.
        if let Cow::Owned(short) = short_key(&draft.namespace) {
            draft.namespace = short;
        }
        if let Cow::Owned(short) = short_key(&draft.subject) {
            draft.subject = short;
        }
        if let Cow::Owned(short) = shorten(&draft.message, MAX_MESSAGE) {
            draft.message = short;
        }
        let key = (
            meta.id.to_string(),
            std::mem::take(&mut draft.namespace),
            std::mem::take(&mut draft.subject),
        );
        let full = self.findings.len() >= MAX_FINDINGS || self.pool.full();
        match self.findings.entry(key) {
            Entry::Occupied(entry) => {
                let existing = entry.into_mut();
                existing.occurrences += 1;
                existing.last_seen = stamp;
                existing.message = draft.message;
                existing.evidence = draft.evidence;
                if let Some(p) = &draft.pattern {
                    let p = short_key(p);
                    if !existing.patterns.iter().any(|e| *e == p) && existing.patterns.len() < 16 {
                        existing.patterns.push(p.into_owned());
                    }
                    existing.pattern = draft.pattern;
                    existing.shape = draft.shape;
                }
                let change = if draft.severity > existing.severity {
                    existing.severity = draft.severity;
                    Change::Escalated
                } else {
                    Change::Repeated
                };
                (change, Some(existing))
            }
            Entry::Vacant(_) if full => {
                self.dropped += 1;
                self.pool.evicted();
                (Change::Repeated, None)
            }
            Entry::Vacant(entry) => {
                self.pool.charge(FINDING_BYTES);
                let (_, namespace, subject) = entry.key().clone();
                let finding = entry.insert(Finding {
                    rule: meta.id.to_string(),
                    name: meta.name.to_string(),
                    severity: draft.severity,
                    namespace,
                    subject,
                    patterns: draft
                        .pattern
                        .iter()
                        .map(|p| short_key(p).into_owned())
                        .collect(),
                    pattern: draft.pattern,
                    shape: draft.shape,
                    message: draft.message,
                    evidence: draft.evidence,
                    advice: meta.advice.to_string(),
                    source: meta.source.to_string(),
                    docs: meta.docs_path(),
                    occurrences: 1,
                    first_seen: stamp.clone(),
                    last_seen: stamp,
                    fix_first: None,
                });
                (Change::New, Some(finding))
            }
        }
    }

    /// `now` as RFC 3339 to the second, formatted once per second.
    fn stamp(&mut self, now: SystemTime) -> String {
        let second = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        match &self.stamp {
            Some((at, text)) if *at == second => text.clone(),
            _ => {
                let text = humantime::format_rfc3339_seconds(now).to_string();
                self.stamp = Some((second, text.clone()));
                text
            }
        }
    }

    pub fn all(&self) -> impl Iterator<Item = &Finding> {
        self.findings.values()
    }

    pub fn len(&self) -> usize {
        self.findings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.findings.is_empty()
    }

    /// Withdraws a finding the evidence no longer supports (a set that
    /// stopped growing): it leaves the store, the report and the exit code.
    pub fn retract(&mut self, rule: &str, namespace: &str, subject: &str) -> Option<Finding> {
        let gone = self.findings.remove(&(
            rule.to_string(),
            short_key(namespace).into_owned(),
            short_key(subject).into_owned(),
        ));
        if gone.is_some() {
            self.pool.release(FINDING_BYTES);
        }
        gone
    }

    pub fn get(&self, rule: &str, namespace: &str, subject: &str) -> Option<&Finding> {
        self.findings.get(&(
            rule.to_string(),
            short_key(namespace).into_owned(),
            short_key(subject).into_owned(),
        ))
    }
}

/// A finding that is new or got worse: what the live output prints.
#[derive(Clone, Debug)]
pub struct FindingEvent {
    pub change: Change,
    pub finding: Finding,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    static META: RuleMeta = RuleMeta {
        id: "WL101",
        name: "unbounded-array-growth",
        severity: Severity::Warning,
        summary: "s",
        advice: "a",
        source: "src",
        thresholds: &[],
    };

    fn draft(namespace: &str, severity: Severity, message: &str) -> FindingDraft {
        FindingDraft {
            namespace: namespace.to_string(),
            subject: "comments".to_string(),
            severity,
            pattern: Some("update blog.posts".to_string()),
            shape: None,
            message: message.to_string(),
            evidence: BTreeMap::from([("n".to_string(), serde_json::json!(message.len()))]),
        }
    }

    /// A finding is new once, then repeated (counted, its message and
    /// evidence the latest, its last-seen stamp moved), escalated when a
    /// report is more severe; a namespace longer than a key may be is
    /// shortened the same way every time, so it stays one finding.
    #[test]
    fn record_counts_repeats_and_escalations_of_one_finding() {
        let meta = &META;
        let mut store = FindingStore::default();
        let long = format!("blog.{}", "c".repeat(400));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (change, found) = store.record(meta, draft(&long, Severity::Warning, "a"), t0);
        assert_eq!(change, Change::New);
        let first = found.unwrap().clone();
        assert!(first.namespace.len() < long.len());
        let later = t0 + Duration::from_millis(1_500);
        let (change, found) = store.record(meta, draft(&long, Severity::Warning, "bb"), later);
        assert_eq!(change, Change::Repeated);
        let again = found.unwrap();
        assert_eq!(again.occurrences, 2);
        assert_eq!(again.message, "bb");
        assert_eq!(again.evidence["n"], serde_json::json!(2));
        assert_eq!(again.first_seen, "2023-11-14T22:13:20Z");
        assert_eq!(again.last_seen, "2023-11-14T22:13:21Z");
        let (change, found) = store.record(meta, draft(&long, Severity::Error, "c"), later);
        assert_eq!(change, Change::Escalated);
        assert_eq!(found.unwrap().severity, Severity::Error);
        assert_eq!(store.len(), 1);
        assert!(store.get("WL101", &long, "comments").is_some());
    }

    /// Past its cap new findings are counted as dropped, not stored.
    #[test]
    fn a_full_store_drops_new_findings() {
        let meta = &META;
        let mut store = FindingStore::default();
        let now = SystemTime::now();
        for i in 0..MAX_FINDINGS {
            store.record(
                meta,
                draft(&format!("db.c{i}"), Severity::Warning, "m"),
                now,
            );
        }
        let (change, found) = store.record(meta, draft("db.more", Severity::Warning, "m"), now);
        assert_eq!((change, found.is_none()), (Change::Repeated, true));
        assert_eq!((store.len(), store.dropped), (MAX_FINDINGS, 1));
    }
}
