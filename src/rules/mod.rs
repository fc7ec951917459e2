//! Rules: each in its own file, behind one trait with no-op default hooks.
//!
//! The engine calls a rule's hooks as traffic is decoded — a request, each
//! document it sees (inserted, replaced or returned), a paired operation,
//! and a periodic tick — with a [`RuleContext`] that gives read access to
//! what wirelint knows (namespaces, patterns), the rule's thresholds for the
//! namespace at hand, and a way to report a finding. Findings are
//! deduplicated by (rule, namespace, subject) in the [`FindingStore`].

mod wl101_unbounded_array_growth;
mod wl102_large_array;
mod wl103_large_document;
mod wl201_cross_partition;
mod wl203_partition_key_advice;
mod wl301_missing_subset;
mod wl401_n_plus_one;
mod wl402_chatty_request;
mod wl501_join_collection;
mod wl502_growing_reference_array;
mod wl503_hot_embedded_data;
mod wl504_lookup_heavy;
mod wl505_missing_type_discriminator;

use crate::analysis::command::Command;
use crate::analysis::shape::Shape;
use crate::analysis::state::{Doc, Namespaces};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
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

/// A tunable number of a rule, with its default and meaning.
pub struct Threshold {
    pub name: &'static str,
    pub default: f64,
    pub help: &'static str,
}

/// What a rule is, for docs, SARIF and config validation.
pub struct RuleMeta {
    pub id: &'static str,
    pub name: &'static str,
    pub severity: Severity,
    /// One sentence: what it detects.
    pub summary: &'static str,
    /// What to do, naming the seed's pattern.
    pub advice: &'static str,
    /// Where the rule comes from (seed documents in ../shared/seeds).
    pub seed: &'static str,
    pub thresholds: &'static [Threshold],
}

impl RuleMeta {
    pub fn docs_path(&self) -> String {
        format!("docs/rules/{}.md", self.id)
    }
}

/// A data operation as rules see it.
pub struct OpView<'a> {
    pub cmd: &'a Command<'a>,
    pub namespace: &'a str,
    pub shape: &'a Shape,
    /// The access pattern's name (the `comment`, or the shape).
    pub pattern: &'a str,
    /// How it meets the collection's partition key, when one is known.
    pub partitioning: Option<crate::analysis::partition::Partitioning>,
    /// When this is a single-document query whose filter value came from
    /// the documents a previous read on the connection returned.
    pub follow_up: Option<&'a FollowUp>,
}

/// A query that follows a list read, fetching one document per element
/// (the engine links them by comparing value hashes; no value is kept).
#[derive(Clone, Debug)]
pub struct FollowUp {
    pub leading_pattern: String,
    pub leading_shape: String,
    pub leading_namespace: String,
    /// The filter field whose value came from the leading reply.
    pub field: String,
    /// Follow-ups so far after this leading reply (this one included).
    pub count: u64,
    /// Documents the leading reply returned.
    pub leading_docs: u64,
}

/// Where a document was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DocSource {
    Inserted,
    Replaced,
    Returned,
}

impl DocSource {
    pub fn as_str(self) -> &'static str {
        match self {
            DocSource::Inserted => "inserted",
            DocSource::Replaced => "replaced",
            DocSource::Returned => "returned",
        }
    }
}

/// One paired request and reply.
pub struct CompletedOp<'a> {
    pub op: &'a OpView<'a>,
    pub latency_micros: u64,
    pub docs_returned: u64,
    pub ok: bool,
    /// The reply's `n` (documents matched by an update or delete).
    pub matched: Option<i64>,
}

pub trait Rule: Send {
    fn meta(&self) -> &'static RuleMeta;
    fn on_request(&mut self, _op: &OpView<'_>, _cx: &mut RuleContext<'_>) {}
    fn on_document(
        &mut self,
        _op: &OpView<'_>,
        _doc: &Doc<'_>,
        _source: DocSource,
        _cx: &mut RuleContext<'_>,
    ) {
    }
    fn on_operation(&mut self, _done: &CompletedOp<'_>, _cx: &mut RuleContext<'_>) {}
    fn on_tick(&mut self, _cx: &mut RuleContext<'_>) {}
}

/// Every rule wirelint ships, in id order.
pub fn all() -> Vec<Box<dyn Rule>> {
    vec![
        Box::new(wl101_unbounded_array_growth::UnboundedArrayGrowth::default()),
        Box::new(wl102_large_array::LargeArray),
        Box::new(wl103_large_document::LargeDocument::default()),
        Box::new(wl201_cross_partition::CrossPartition::query()),
        Box::new(wl201_cross_partition::CrossPartition::sort()),
        Box::new(wl203_partition_key_advice::PartitionKeyAdvice::default()),
        Box::new(wl301_missing_subset::MissingSubset::default()),
        Box::new(wl301_missing_subset::SliceOnRead::default()),
        Box::new(wl401_n_plus_one::NPlusOne::default()),
        Box::new(wl402_chatty_request::ChattyRequest::default()),
        Box::new(wl402_chatty_request::CountOnRead::default()),
        Box::new(wl501_join_collection::JoinCollection::default()),
        Box::new(wl502_growing_reference_array::GrowingReferenceArray::default()),
        Box::new(wl503_hot_embedded_data::HotEmbeddedData::default()),
        Box::new(wl504_lookup_heavy::LookupHeavy::default()),
        Box::new(wl505_missing_type_discriminator::MissingTypeDiscriminator::default()),
    ]
}

pub fn catalogue() -> Vec<&'static RuleMeta> {
    all().iter().map(|r| r.meta()).collect()
}

/// Per-rule overrides from `wirelint.toml`.
#[derive(Clone, Debug, Default)]
pub struct RuleOverrides {
    pub enabled: Option<bool>,
    pub severity: Option<Severity>,
    pub thresholds: BTreeMap<String, f64>,
}

/// `[rules.ID]` and `[collections."db.coll".rules.ID]`, validated.
#[derive(Clone, Debug, Default)]
pub struct RuleSettings {
    pub rules: HashMap<String, RuleOverrides>,
    /// By namespace, then rule id (looked up without allocating).
    pub per_namespace: HashMap<String, HashMap<String, RuleOverrides>>,
}

impl RuleSettings {
    pub fn enabled(&self, id: &str) -> bool {
        self.rules.get(id).and_then(|o| o.enabled).unwrap_or(true)
    }

    pub fn enabled_for(&self, id: &str, namespace: &str) -> bool {
        self.for_namespace(namespace, id)
            .and_then(|o| o.enabled)
            .unwrap_or_else(|| self.enabled(id))
    }

    fn for_namespace(&self, namespace: &str, id: &str) -> Option<&RuleOverrides> {
        self.per_namespace.get(namespace)?.get(id)
    }

    pub fn threshold(&self, meta: &RuleMeta, namespace: &str, name: &str) -> f64 {
        let pick = |o: Option<&RuleOverrides>| o.and_then(|o| o.thresholds.get(name).copied());
        pick(self.for_namespace(namespace, meta.id))
            .or_else(|| pick(self.rules.get(meta.id)))
            .or_else(|| {
                meta.thresholds
                    .iter()
                    .find(|t| t.name == name)
                    .map(|t| t.default)
            })
            .unwrap_or(f64::INFINITY)
    }

    /// The severity to report, given what the rule judged: a configured
    /// severity replaces the rule's default one.
    pub fn severity(&self, meta: &RuleMeta, namespace: &str, judged: Severity) -> Severity {
        let configured = self
            .for_namespace(namespace, meta.id)
            .and_then(|o| o.severity)
            .or_else(|| self.rules.get(meta.id).and_then(|o| o.severity));
        match configured {
            // A configured level shifts the rule's scale: its default maps
            // to the configured one, escalations keep their distance.
            Some(level) if judged == meta.severity => level,
            Some(level) => level.max(judged),
            None => judged,
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
    pub seed: String,
    pub docs: String,
    pub occurrences: u64,
    pub first_seen: String,
    pub last_seen: String,
}

impl Finding {
    /// A stable id: rule, namespace and subject.
    pub fn key(&self) -> String {
        format!("{}:{}:{}", self.rule, self.namespace, self.subject)
    }

    /// A short stable fingerprint of the key, for SARIF.
    pub fn fingerprint(&self) -> String {
        format!(
            "{:016x}",
            crate::analysis::shape::fnv1a(self.key().as_bytes())
        )
    }
}

/// What happened to the store on a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    New,
    Escalated,
    Repeated,
}

/// Findings, deduplicated. Bounded: past `cap` distinct findings, new ones
/// are counted in `dropped` instead of stored.
#[derive(Default)]
pub struct FindingStore {
    findings: BTreeMap<(String, String, String), Finding>,
    pub dropped: u64,
}

pub const MAX_FINDINGS: usize = 10_000;

impl FindingStore {
    pub fn record(&mut self, meta: &RuleMeta, draft: FindingDraft, now: SystemTime) -> Change {
        let stamp = humantime::format_rfc3339_seconds(now).to_string();
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
                if !existing.patterns.contains(p) && existing.patterns.len() < 16 {
                    existing.patterns.push(p.clone());
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
        if self.findings.len() >= MAX_FINDINGS {
            self.dropped += 1;
            return Change::Repeated;
        }
        self.findings.insert(
            key,
            Finding {
                rule: meta.id.to_string(),
                name: meta.name.to_string(),
                severity: draft.severity,
                namespace: draft.namespace,
                subject: draft.subject,
                patterns: draft.pattern.iter().cloned().collect(),
                pattern: draft.pattern,
                shape: draft.shape,
                message: draft.message,
                evidence: draft.evidence,
                advice: meta.advice.to_string(),
                seed: meta.seed.to_string(),
                docs: meta.docs_path(),
                occurrences: 1,
                first_seen: stamp.clone(),
                last_seen: stamp,
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

    pub fn get(&self, rule: &str, namespace: &str, subject: &str) -> Option<&Finding> {
        self.findings
            .get(&(rule.to_string(), namespace.to_string(), subject.to_string()))
    }
}

/// A finding that is new or got worse: what the live output prints.
#[derive(Clone, Debug)]
pub struct FindingEvent {
    pub change: Change,
    pub finding: Finding,
}

/// What a rule's hook can see and do.
pub struct RuleContext<'a> {
    pub namespaces: &'a Namespaces,
    pub patterns: &'a crate::analysis::patterns::PatternTable,
    pub partition_keys: &'a crate::analysis::partition::PartitionKeys,
    pub settings: &'a RuleSettings,
    pub findings: &'a mut FindingStore,
    pub events: &'a mut Vec<FindingEvent>,
    pub now: SystemTime,
    pub show_values: bool,
}

impl RuleContext<'_> {
    pub fn threshold(&self, meta: &RuleMeta, namespace: &str, name: &str) -> f64 {
        self.settings.threshold(meta, namespace, name)
    }

    pub fn report(&mut self, meta: &'static RuleMeta, mut draft: FindingDraft) {
        if !self.settings.enabled_for(meta.id, &draft.namespace) {
            return;
        }
        draft.severity = self
            .settings
            .severity(meta, &draft.namespace, draft.severity);
        let (namespace, subject) = (draft.namespace.clone(), draft.subject.clone());
        let change = self.findings.record(meta, draft, self.now);
        if change != Change::Repeated {
            if let Some(finding) = self.findings.get(meta.id, &namespace, &subject) {
                self.events.push(FindingEvent {
                    change,
                    finding: finding.clone(),
                });
            }
        }
    }
}

/// Validates `[rules.*]` and `[collections.*.rules.*]` against the
/// catalogue: unknown rules, unknown thresholds and bad severities are
/// errors naming the file and the key.
pub fn settings_from_config(
    config: &crate::config::FileConfig,
    path: &std::path::Path,
) -> Result<RuleSettings, crate::config::ConfigError> {
    let catalogue = catalogue();
    let invalid = |key: String, message: String| crate::config::ConfigError::Invalid {
        origin: path.display().to_string(),
        key,
        message,
    };
    let convert = |prefix: &str,
                   id: &str,
                   section: &crate::config::RuleSection|
     -> Result<RuleOverrides, crate::config::ConfigError> {
        let meta = catalogue.iter().find(|m| m.id == id).ok_or_else(|| {
            invalid(
                format!("{prefix}{id}"),
                format!(
                    "is not a rule (known: {})",
                    catalogue
                        .iter()
                        .map(|m| m.id)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        let severity = match &section.severity {
            Some(s) => Some(Severity::parse(s).ok_or_else(|| {
                invalid(
                    format!("{prefix}{id}.severity"),
                    format!("must be \"info\", \"warning\" or \"error\", not {s:?}"),
                )
            })?),
            None => None,
        };
        let mut thresholds = BTreeMap::new();
        for (name, value) in &section.thresholds {
            if !meta.thresholds.iter().any(|t| t.name == name) {
                return Err(invalid(
                    format!("{prefix}{id}.{name}"),
                    format!(
                        "is not a setting of {id} (it has: enabled, severity{})",
                        meta.thresholds
                            .iter()
                            .map(|t| format!(", {}", t.name))
                            .collect::<String>()
                    ),
                ));
            }
            let number = value
                .as_float()
                .or_else(|| value.as_integer().map(|i| i as f64));
            let number = number.ok_or_else(|| {
                invalid(
                    format!("{prefix}{id}.{name}"),
                    "must be a number".to_string(),
                )
            })?;
            thresholds.insert(name.clone(), number);
        }
        Ok(RuleOverrides {
            enabled: section.enabled,
            severity,
            thresholds,
        })
    };
    let mut settings = RuleSettings::default();
    for (id, section) in &config.rules {
        settings
            .rules
            .insert(id.clone(), convert("rules.", id, section)?);
    }
    for (namespace, collection) in &config.collections {
        for (id, section) in &collection.rules {
            let prefix = format!("collections.\"{namespace}\".rules.");
            settings
                .per_namespace
                .entry(namespace.clone())
                .or_default()
                .insert(id.clone(), convert(&prefix, id, section)?);
        }
    }
    Ok(settings)
}
