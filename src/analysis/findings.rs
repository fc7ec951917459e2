//! Findings: what the rules report, deduplicated by (rule, namespace,
//! subject) in the [`FindingStore`].

use super::budget::{short_key, shorten, Pool};
use super::rule::RuleMeta;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn parse(s: &str) -> Option<Severity> {
        match s {
            "info" => Some(Severity::Info),
            "warning" | "warn" => Some(Severity::Warning),
            "error" => Some(Severity::Error),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

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
        format!("{:016x}", super::shape::fnv1a(self.key().as_bytes()))
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
        }
    }

    pub fn record(&mut self, meta: &RuleMeta, mut draft: FindingDraft, now: SystemTime) -> Change {
        let stamp = humantime::format_rfc3339_seconds(now).to_string();
        draft.namespace = short_key(&draft.namespace).into_owned();
        draft.subject = short_key(&draft.subject).into_owned();
        draft.message = shorten(&draft.message, MAX_MESSAGE).into_owned();
        let key = (
            meta.id.to_string(),
            draft.namespace.clone(),
            draft.subject.clone(),
        );
        if let Some(existing) = self.findings.get_mut(&key) {
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
            if draft.severity > existing.severity {
                existing.severity = draft.severity;
                return Change::Escalated;
            }
            return Change::Repeated;
        }
        if self.findings.len() >= MAX_FINDINGS || self.pool.full() {
            self.dropped += 1;
            self.pool.evicted();
            return Change::Repeated;
        }
        self.pool.charge(FINDING_BYTES);
        self.findings.insert(
            key,
            Finding {
                rule: meta.id.to_string(),
                name: meta.name.to_string(),
                severity: draft.severity,
                namespace: draft.namespace,
                subject: draft.subject,
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
            },
        );
        Change::New
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
