//! The knowledge store: everything learnt from the traffic — access
//! patterns, shapes, namespace state, cursors, partition keys, findings —
//! shared by the analysis workers (which lock it per message) and read by
//! reports, the admin endpoints and the command line. It also holds the
//! rules the application handed in, and runs their hooks.

use super::budget::{self, Lru, PoolUsage, Pools};
use super::databases::{Databases, Fold};
use super::findings::{FindingEvent, FindingStore};
use super::namespaces::{Caps, Namespaces};
use super::origin::RequestOrigin;
use super::partition::PartitionKeys;
use super::patterns::PatternTable;
use super::request_units::Settings as RuSettings;
use super::rule::{Hooks, Rule, RuleContext, RuleSettings};
use super::suite::{Suite, TestRef};
use super::target::{Target, TargetChoice, TargetSource};
use std::time::SystemTime;

/// Everything learnt from the traffic, shared by the workers.
pub struct Knowledge {
    pub patterns: PatternTable,
    /// The logical databases that fold others (see `databases`), and how
    /// names are folded (set before the engines are made).
    pub databases: Databases,
    /// The tests a runner said were running, and when (see `suite`).
    pub suite: Suite,
    pub namespaces: Namespaces,
    pub findings: FindingStore,
    pub cursors: Lru<i64, RequestOrigin>,
    pub partition_keys: PartitionKeys,
    /// The unique indexes the traffic showed (see `indexes`).
    pub indexes: super::indexes::Indexes,
    /// Fixed at creation: which rules run is decided once (see `hooks`).
    settings: RuleSettings,
    pub show_values: bool,
    pub started: SystemTime,
    /// Data operations analysed (requests with a pattern).
    pub operations: u64,
    /// Requests kept for pairing that were forgotten before their reply
    /// came (unanswered for 10 minutes, more than 1,024 awaiting on one
    /// connection, the connection closed, or the budget full): their
    /// operations taught nothing.
    pub forgotten_requests: u64,
    /// The memory budget's shares, which every table charges.
    pub pools: Pools,
    /// Data operations the server refused (`ok: 0`): not learnt from.
    pub rejected_operations: u64,
    /// Data operations the server throttled (Cosmos DB's 16500
    /// TooManyRequests, 50 ExceededTimeLimit).
    pub throttled_operations: u64,
    /// The platform in force and how it was chosen.
    pub target: TargetChoice,
    /// Whether a hello reply was looked at for the platform.
    target_looked: bool,
    /// What the request-unit estimate knows of each collection.
    pub request_units: RuSettings,
    /// Panics caught inside a rule's hook, by rule id.
    pub rule_panics: std::collections::BTreeMap<&'static str, u64>,
    /// The trace context of the operation the engine is handling (set and
    /// cleared around it by `Engine`): the rules' findings carry it.
    pub(crate) trace: Option<super::trace_context::TraceContext>,
    /// The test the operation the engine is handling came from (set and
    /// cleared around it, as `trace`): the findings count it.
    pub(crate) test: Option<TestRef>,
    /// The real database of that operation (its name's hash), when its
    /// namespace folds several (set and cleared around it, as `trace`):
    /// the findings count the databases that showed them.
    pub(crate) database: Option<u32>,
    rules: Vec<Box<dyn Rule>>,
    /// Each rule's [`Rule::hooks`], asked once (they never change), none
    /// for a rule the settings disable: a call finds the rules it concerns
    /// without a virtual call or a settings lookup per rule.
    hooks: Vec<Hooks>,
}

impl Knowledge {
    /// Entries, bytes and evictions of each share of the memory budget
    /// (`[limits] analysis_memory`): what `/metrics`, the report and a soak
    /// watch to see that memory stays bounded.
    pub fn tables(&self) -> Vec<PoolUsage> {
        self.pools.usage()
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
        let pools = Pools::new(caps.memory);
        Knowledge {
            databases: Databases::new(Fold::Auto, &pools.patterns),
            suite: Suite::new(&pools.findings),
            partition_keys,
            indexes: super::indexes::Indexes::new(pools.namespaces.clone()),
            patterns: PatternTable::new(pools.patterns.clone(), pools.shapes.clone()),
            namespaces: Namespaces::new(caps, pools.namespaces.clone(), pools.document_ids.clone()),
            findings: FindingStore::new(pools.findings.clone()),
            cursors: Lru::in_pool(100_000, pools.cursors.clone(), |_, o: &RequestOrigin| {
                o.pattern.len()
                    + o.shape.text.len()
                    + o.namespace.len()
                    + std::mem::size_of::<(i64, RequestOrigin)>()
                    + budget::ENTRY_OVERHEAD
            }),
            pools,
            show_values,
            started: SystemTime::now(),
            operations: 0,
            forgotten_requests: 0,
            rule_panics: Default::default(),
            rejected_operations: 0,
            throttled_operations: 0,
            target: TargetChoice::default(),
            target_looked: false,
            request_units: RuSettings::default(),
            trace: None,
            test: None,
            database: None,
            hooks: rules
                .iter()
                .map(|r| {
                    if settings.enabled(r.meta().id) {
                        r.hooks()
                    } else {
                        Hooks::NONE
                    }
                })
                .collect(),
            settings,
            rules,
        }
    }

    /// Sets how database names are folded (before any engine is made:
    /// each engine takes the setting when it is made).
    pub fn fold_databases(&mut self, fold: Fold) {
        self.databases = Databases::new(fold, &self.pools.patterns);
    }

    /// Takes what `settings` says beyond the rules (before any engine is
    /// made): how database names are folded, the platform when it is set,
    /// and what the request-unit estimate knows of each collection.
    pub fn configure(&mut self, settings: &super::Settings) {
        self.fold_databases(settings.fold.clone());
        if let Some(target) = settings.target {
            self.target = TargetChoice {
                target,
                source: TargetSource::Set,
            };
        }
        self.request_units = settings.request_units.clone();
    }

    /// The platform a hello reply names, when none was set: taken once,
    /// and logged (an unknown platform keeps MongoDB's, said once too).
    pub fn detected(&mut self, target: Option<Target>) {
        if self.target.source != TargetSource::Default || self.target_looked {
            return;
        }
        self.target_looked = true;
        match target {
            Some(target) => {
                self.target = TargetChoice {
                    target,
                    source: TargetSource::Detected,
                };
                tracing::info!(
                    target = target.name(),
                    "platform detected from the upstream's hello: {}",
                    target.title()
                );
            }
            None => tracing::info!(
                "the upstream's hello names no platform: taking MongoDB's limits \
                 (set --target cosmos-ru, cosmos-vcore or documentdb if it is one of those)"
            ),
        }
    }

    /// Whether a hello reply is still wanted (no target set or detected).
    pub fn wants_hello(&self) -> bool {
        self.target.source == TargetSource::Default && !self.target_looked
    }

    /// Runs `f` for every enabled rule that implements one of `hooks`, with
    /// a fresh context; returns the findings that are new or got worse. A rule that panics is stopped
    /// for this call only: the panic is caught around that one rule,
    /// counted under its id in `rule_panics`, and the other rules run.
    pub(crate) fn with_rules(
        &mut self,
        hooks: Hooks,
        mut f: impl FnMut(&mut dyn Rule, &mut RuleContext<'_>),
    ) -> Vec<FindingEvent> {
        let mut events = Vec::new();
        let Knowledge {
            rules,
            hooks: rule_hooks,
            namespaces,
            patterns,
            partition_keys,
            indexes,
            settings,
            findings,
            show_values,
            rule_panics,
            pools,
            trace,
            test,
            database,
            suite,
            target,
            request_units,
            ..
        } = self;
        let mut cx = RuleContext {
            pool: &pools.rules,
            namespaces,
            patterns,
            partition_keys,
            indexes,
            settings,
            findings,
            events: &mut events,
            now: None,
            show_values: *show_values,
            trace: *trace,
            test: test.map(|t| suite.name(t)),
            database: *database,
            target: target.target,
            request_units,
        };
        for (rule, rule_hooks) in rules.iter_mut().zip(rule_hooks.iter()) {
            if !rule_hooks.meets(hooks) {
                continue;
            }
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                f(rule.as_mut(), &mut cx)
            }));
            if ran.is_err() {
                let id = rule.meta().id;
                let n = rule_panics.entry(id).or_default();
                *n += 1;
                if n.is_power_of_two() {
                    tracing::error!(
                        rule = id,
                        panics = *n,
                        "a rule panicked on a message; that rule skipped it, the others ran (traffic is unaffected)"
                    );
                }
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::rule::RuleMeta;

    static PANICS: RuleMeta = RuleMeta {
        id: "T1",
        name: "panics",
        severity: crate::analysis::findings::Severity::Info,
        summary: "",
        advice: "",
        source: "",
        thresholds: &[],
    };
    static COUNTS: RuleMeta = RuleMeta {
        id: "T2",
        name: "counts",
        ..PANICS
    };

    struct Panics;
    impl Rule for Panics {
        fn meta(&self) -> &'static RuleMeta {
            &PANICS
        }
        fn on_tick(&mut self, _: &mut RuleContext<'_>) {
            panic!("a bug in a rule");
        }
    }

    struct Counts(std::sync::Arc<std::sync::atomic::AtomicU64>);
    impl Rule for Counts {
        fn meta(&self) -> &'static RuleMeta {
            &COUNTS
        }
        fn on_tick(&mut self, _: &mut RuleContext<'_>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A panic in one rule is contained to that rule and that call: the
    /// rule after it still runs, every time, and the panics are counted.
    #[test]
    fn a_panicking_rule_stops_only_itself() {
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut k = Knowledge::new(
            vec![Box::new(Panics), Box::new(Counts(ticks.clone()))],
            RuleSettings::default(),
            false,
            Caps::default(),
        );
        for _ in 0..3 {
            k.with_rules(Hooks::TICK, |rule, cx| rule.on_tick(cx));
        }
        assert_eq!(ticks.load(std::sync::atomic::Ordering::Relaxed), 3);
        assert_eq!(k.rule_panics.get("T1"), Some(&3));
        assert_eq!(k.rules.len(), 2, "no rule is lost");
    }

    /// A rule that names its hooks is called for those alone; one that
    /// names none (the default) is called for every hook.
    #[test]
    fn rules_are_called_for_the_hooks_they_name() {
        struct TickOnly;
        impl Rule for TickOnly {
            fn meta(&self) -> &'static RuleMeta {
                &COUNTS
            }
            fn hooks(&self) -> Hooks {
                Hooks::TICK
            }
        }
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut k = Knowledge::new(
            vec![Box::new(TickOnly), Box::new(Counts(ticks))],
            RuleSettings::default(),
            false,
            Caps::default(),
        );
        let calls = |k: &mut Knowledge, hooks| {
            let mut ids = Vec::new();
            k.with_rules(hooks, |rule, _| ids.push(rule.meta().id));
            ids.len()
        };
        assert_eq!(calls(&mut k, Hooks::TICK), 2);
        assert_eq!(calls(&mut k, Hooks::REQUEST), 1, "only the unnamed one");
        assert_eq!(calls(&mut k, Hooks::DOCUMENT.and(Hooks::OPERATION)), 1);
        assert_eq!(calls(&mut k, Hooks::ALL), 2);
    }
}
