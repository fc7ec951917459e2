//! The knowledge store: everything learnt from the traffic — access
//! patterns, shapes, namespace state, cursors, partition keys, findings —
//! shared by the analysis workers (which lock it per message) and read by
//! reports, the admin endpoints and the command line. It also holds the
//! rules the application handed in, and runs their hooks.

use super::findings::{FindingEvent, FindingStore};
use super::partition::{PartitionKeys, Partitioning};
use super::patterns::PatternTable;
use super::rule::{Rule, RuleContext, RuleSettings};
use super::shape::Shape;
use super::state::{Caps, Lru, Namespaces};
use std::time::SystemTime;

/// Where a cursor (and so its getMores) came from.
#[derive(Clone, Debug)]
pub struct Origin {
    pub pattern: String,
    pub shape: Shape,
    pub namespace: String,
    pub partitioning: Option<Partitioning>,
}

/// Everything learnt from the traffic, shared by the workers.
pub struct Knowledge {
    pub patterns: PatternTable,
    pub namespaces: Namespaces,
    pub findings: FindingStore,
    pub cursors: Lru<i64, Origin>,
    pub partition_keys: PartitionKeys,
    pub settings: RuleSettings,
    pub show_values: bool,
    pub started: SystemTime,
    /// Data operations analysed (requests with a pattern).
    pub operations: u64,
    /// Replies whose request was never seen (or already answered).
    pub unpaired_replies: u64,
    rules: Vec<Box<dyn Rule>>,
}

impl Knowledge {
    /// Entries held per table (each capped by `[limits]`): what a soak
    /// watches to see that memory stays bounded.
    pub fn table_sizes(&self) -> [(&'static str, usize); 6] {
        [
            ("patterns", self.patterns.patterns.len()),
            ("shapes", self.patterns.shapes.len()),
            ("namespaces", self.namespaces.map.len()),
            ("document_ids", self.namespaces.ids.len()),
            ("cursors", self.cursors.len()),
            ("findings", self.findings.len()),
        ]
    }

    /// An empty store that will run `rules` (the application passes
    /// `crate::rules::all()`; the analysis itself knows no rule).
    pub fn new(
        rules: Vec<Box<dyn Rule>>,
        settings: RuleSettings,
        show_values: bool,
        caps: Caps,
    ) -> Knowledge {
        Knowledge::with_keys(rules, settings, show_values, caps, PartitionKeys::default())
    }

    pub fn with_keys(
        rules: Vec<Box<dyn Rule>>,
        settings: RuleSettings,
        show_values: bool,
        caps: Caps,
        partition_keys: PartitionKeys,
    ) -> Knowledge {
        Knowledge {
            partition_keys,
            patterns: PatternTable::default(),
            namespaces: Namespaces::new(caps),
            findings: FindingStore::default(),
            cursors: Lru::new(100_000),
            settings,
            show_values,
            started: SystemTime::now(),
            operations: 0,
            unpaired_replies: 0,
            rules,
        }
    }

    /// Runs `f` for every enabled rule with a fresh context; returns the
    /// findings that are new or got worse.
    pub(crate) fn with_rules(
        &mut self,
        mut f: impl FnMut(&mut dyn Rule, &mut RuleContext<'_>),
    ) -> Vec<FindingEvent> {
        let mut events = Vec::new();
        let mut rules = std::mem::take(&mut self.rules);
        {
            let mut cx = RuleContext {
                namespaces: &self.namespaces,
                patterns: &self.patterns,
                partition_keys: &self.partition_keys,
                settings: &self.settings,
                findings: &mut self.findings,
                events: &mut events,
                now: SystemTime::now(),
                show_values: self.show_values,
            };
            for rule in rules.iter_mut() {
                if self.settings.enabled(rule.meta().id) {
                    f(rule.as_mut(), &mut cx);
                }
            }
        }
        self.rules = rules;
        events
    }
}
