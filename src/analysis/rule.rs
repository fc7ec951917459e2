//! The contract between the engine and the rules: the [`Rule`] trait and
//! its hooks, what a hook sees ([`OpView`], [`CompletedOp`], [`RuleContext`])
//! and the per-rule settings the engine applies ([`RuleSettings`]).
//!
//! The engine calls a rule's hooks as traffic is decoded — a request, each
//! document it sees (inserted, replaced or returned), a paired operation,
//! and a periodic tick — only those the rule names in [`Rule::hooks`] (all
//! of them when it names none: naming fewer saves the calls, never a
//! finding, as long as the names match what the rule implements). The
//! rules themselves live in `crate::rules`, above this layer; the
//! application hands them to the engine.

use super::catalogue::Severity;
use super::command::Command;
use super::findings::{Change, FindingDraft, FindingEvent, FindingStore, SavedPer, Saving};
use super::namespaces::{Doc, Namespaces};
use super::partition::{PartitionKeys, Partitioning};
use super::patterns::{NamedBy, PatternTable};
use super::shape::Shape;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

/// What a rule is and what it lets users tune: part of the contract, so
/// rules name them here.
pub use super::catalogue::{RuleMeta, Threshold};

/// A data operation as rules see it.
pub struct OpView<'a> {
    pub cmd: &'a Command<'a>,
    pub namespace: &'a str,
    pub shape: &'a Shape,
    /// The access pattern's name (the `comment`, or the shape).
    pub pattern: &'a str,
    /// Whether that name is the application's (`comment`) or the shape.
    pub named_by: NamedBy,
    /// How it meets the collection's partition key, when one is known.
    pub partitioning: Option<Partitioning>,
    /// When this is a single-document query whose filter value came from
    /// the documents a previous read on the connection returned.
    pub follow_up: Option<&'a FollowUp>,
    /// The application request it belongs to (see `analysis::requests`),
    /// once placed.
    pub request: Option<u64>,
    /// Whether its filter's value is the context of a list it follows: a
    /// reference (not the documents' own `_id`) every listed document of
    /// several carries, asked for once (a course's threads after its
    /// reviews).
    pub context: bool,
    /// When it reads the document the previous one named, one level up a
    /// tree stored as parent references (see `parent_walk::ParentWalk`).
    pub walk: Option<&'a crate::analysis::parent_walk::WalkStep>,
}

/// A query that follows a list read, fetching documents for one of its
/// elements by a value taken from it (linked by provenance inside the
/// engine, see `analysis::follow_ups`; no value is kept).
#[derive(Clone, Debug)]
pub struct FollowUp {
    pub leading_pattern: String,
    pub leading_shape: String,
    pub leading_namespace: String,
    /// The filter field whose value came from the list.
    pub field: String,
    /// The listed documents' field the value was taken from.
    pub source_field: String,
    /// Per-element follow-ups with this link after this list so far
    /// (this one included).
    pub count: u64,
    /// Documents the list returned so far (every batch of its cursor).
    pub leading_docs: u64,
    /// The distinct values those follow-ups asked for, up to 4 (4: as many
    /// or more).
    pub distinct: u64,
    /// The list's documents that hold a value in the source field, and the
    /// distinct values they hold there: what per-row work covers.
    pub list_rows: u64,
    pub list_values: u64,
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

/// Which of a rule's hooks do something: the engine calls a rule only for
/// the hooks it names (a rule that names none is called for all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hooks(u8);

impl Hooks {
    /// Called for nothing (a rule the settings disable).
    pub const NONE: Hooks = Hooks(0);
    pub const REQUEST: Hooks = Hooks(1);
    pub const DOCUMENT: Hooks = Hooks(2);
    pub const OPERATION: Hooks = Hooks(4);
    pub const TICK: Hooks = Hooks(8);
    pub const ALL: Hooks = Hooks(15);

    pub const fn and(self, other: Hooks) -> Hooks {
        Hooks(self.0 | other.0)
    }

    /// These and `other` when `also` holds.
    pub const fn and_if(self, also: bool, other: Hooks) -> Hooks {
        if also {
            self.and(other)
        } else {
            self
        }
    }

    pub const fn meets(self, other: Hooks) -> bool {
        self.0 & other.0 != 0
    }
}

pub trait Rule: Send {
    fn meta(&self) -> &'static RuleMeta;
    /// The hooks this rule implements; the others are not called.
    fn hooks(&self) -> Hooks {
        Hooks::ALL
    }
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

/// Per-rule overrides from `wirelint.toml`.
#[derive(Clone, Debug, Default)]
pub struct RuleOverrides {
    pub enabled: Option<bool>,
    pub severity: Option<Severity>,
    pub thresholds: BTreeMap<String, f64>,
}

/// A map looked up per operation: foldhash, as the analysis's other
/// tables (seeded per process, so a replay counts the same instructions
/// on every run under callgrind).
pub type SettingsMap<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// `[rules.ID]` and `[collections."db.coll".rules.ID]`, validated.
#[derive(Clone, Debug, Default)]
pub struct RuleSettings {
    pub rules: SettingsMap<RuleOverrides>,
    /// By namespace, then rule id (looked up without allocating).
    pub per_namespace: SettingsMap<SettingsMap<RuleOverrides>>,
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
        self.configured(meta, namespace, name)
            .or_else(|| {
                meta.thresholds
                    .iter()
                    .find(|t| same_name(t.name, name))
                    .map(|t| t.default)
            })
            .unwrap_or(f64::INFINITY)
    }

    /// A threshold the user set (for `namespace`, else for the rule), if
    /// any.
    #[inline]
    pub fn configured(&self, meta: &RuleMeta, namespace: &str, name: &str) -> Option<f64> {
        // Rules ask per document: with nothing configured (the common
        // case) there is nothing to find, and the question is answered
        // where it is asked.
        if self.rules.is_empty() && self.per_namespace.is_empty() {
            return None;
        }
        self.configured_here(meta, namespace, name)
    }

    #[inline(never)]
    fn configured_here(&self, meta: &RuleMeta, namespace: &str, name: &str) -> Option<f64> {
        let pick = |o: Option<&RuleOverrides>| o.and_then(|o| o.thresholds.get(name).copied());
        pick(self.for_namespace(namespace, meta.id)).or_else(|| pick(self.rules.get(meta.id)))
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

/// Whether a rule's question names this threshold. Rules ask by the literal
/// their `META` lists, which the compiler stores once: the same address
/// answers without comparing bytes (a call to `memcmp` per threshold per
/// document before).
fn same_name(listed: &str, asked: &str) -> bool {
    std::ptr::eq(listed, asked) || listed == asked
}

impl FindingDraft {
    /// A finding about `subject` in the operation's namespace, seen in its
    /// access pattern and shape: what most rules report.
    pub fn about(
        op: &OpView<'_>,
        subject: impl Into<String>,
        severity: Severity,
        message: String,
        evidence: BTreeMap<String, serde_json::Value>,
    ) -> FindingDraft {
        FindingDraft {
            namespace: op.namespace.to_string(),
            subject: subject.into(),
            severity,
            pattern: Some(op.pattern.to_string()),
            shape: Some(op.shape.text.to_string()),
            message,
            evidence,
            advice: None,
            saving: None,
        }
    }
}

/// What a rule's hook can see and do.
pub struct RuleContext<'a> {
    /// What the rules' own tables are charged to (their share of the
    /// memory budget).
    pub pool: &'a std::sync::Arc<super::budget::Pool>,
    pub namespaces: &'a Namespaces,
    pub patterns: &'a PatternTable,
    pub partition_keys: &'a PartitionKeys,
    /// The unique indexes the traffic showed.
    pub indexes: &'a super::indexes::Indexes,
    pub settings: &'a RuleSettings,
    pub findings: &'a mut FindingStore,
    pub events: &'a mut Vec<FindingEvent>,
    /// The time findings reported in this pass are stamped with, read from
    /// the clock at the first report (most passes report nothing).
    pub now: Option<SystemTime>,
    pub show_values: bool,
    /// The trace context of the operation being looked at, if its driver
    /// sent one: its trace id is added to the evidence of what is reported
    /// about it, and the finding it raises keeps both ids.
    pub trace: Option<super::trace_context::TraceContext>,
    /// The test that operation came from, when a runner said (see
    /// `suite`): the finding counts it.
    pub test: Option<&'a str>,
    /// The real database of that operation (a hash of its name), when its
    /// namespace folds several: the finding counts the databases.
    pub database: Option<u32>,
    /// The platform whose limits apply (see `target`).
    pub target: super::target::Target,
    /// What the request-unit estimate knows of each collection.
    pub request_units: &'a super::request_units::Settings,
}

impl RuleContext<'_> {
    /// Under a platform priced in request units, what fixing it saves
    /// (`request_units` RU per list, query or call), for the finding to
    /// carry (see `FindingDraft::with_saving`); else nothing.
    pub fn request_units_saved(&self, request_units: f64, per: SavedPer) -> Option<Saving> {
        if !self.target.request_units() {
            return None;
        }
        Saving::of(request_units, per)
    }
}

impl RuleContext<'_> {
    pub fn threshold(&self, meta: &RuleMeta, namespace: &str, name: &str) -> f64 {
        self.settings.threshold(meta, namespace, name)
    }

    /// Withdraws this rule's finding on `subject` in `namespace`, if any:
    /// later evidence showed it wrong.
    pub fn retract(&mut self, meta: &'static RuleMeta, namespace: &str, subject: &str) {
        if self.findings.retract(meta.id, namespace, subject).is_some() {
            tracing::info!(
                rule = meta.id,
                %namespace,
                %subject,
                "finding withdrawn: later traffic no longer supports it"
            );
        }
    }

    /// As [`RuleContext::report`], for an operation that only adds to a
    /// finding others showed (its own request would not raise it): the
    /// finding is updated, but the operation's test is not counted among
    /// the tests that showed it.
    pub fn report_again(&mut self, meta: &'static RuleMeta, draft: FindingDraft) {
        let test = self.test.take();
        self.report(meta, draft);
        self.test = test;
    }

    pub fn report(&mut self, meta: &'static RuleMeta, mut draft: FindingDraft) {
        if !self.settings.enabled_for(meta.id, &draft.namespace) {
            return;
        }
        draft.severity = self
            .settings
            .severity(meta, &draft.namespace, draft.severity);
        if let Some(trace) = self.trace {
            draft.evidence.insert(
                "trace_id".into(),
                serde_json::json!(trace.trace.to_string()),
            );
        }
        let now = *self.now.get_or_insert_with(SystemTime::now);
        if let (change @ (Change::New | Change::Escalated), Some(finding)) =
            self.findings
                .record(meta, draft, now, self.trace, self.test, self.database)
        {
            self.events.push(FindingEvent {
                change,
                finding: finding.clone(),
            });
        }
    }
}
