//! WL203 partition-key-advice: per collection, which partition key would
//! make most of the observed operations single-shard, scored over the
//! fields the workload filters on by equality. Without a key it says which
//! one wins; with a key, when another field is what most operations want
//! and the key does not already target them (a prefix of a compound
//! ranged key does), it advises a second copy partitioned by that field
//! (the blogging platform's V3). The evidence carries the current key's
//! read and write distribution as `analyzeShardKey` reports it, so the two
//! can be compared. Advice only: info. Silent until some partition key is
//! known at all (a deployment that does not partition needs no
//! partition-key advice).

use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::budget::Weight;
use crate::analysis::command::Kind;
use crate::analysis::partition::{
    equality_paths_follow_from_shape, equality_paths_into, filters, Partitioning,
};
use crate::analysis::shape::{fnv1a_continue, FNV1A_START};
use serde_json::json;
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet};

pub static META: RuleMeta = RuleMeta {
    id: "WL203",
    name: "partition-key-advice",
    severity: Severity::Info,
    summary: "Which partition key would make most of this collection's operations single-partition.",
    advice: "Partition the collection by the field most operations filter on by equality; when two frequent \
             access patterns want different keys, keep a second copy of the data partitioned by the other field, \
             maintained on write (the blogging platform, V3: posts also stored in the users container, by userId).",
    source: concat!(cosmos_real_world!(), " (choosing the partition key; V3 second copy)"),
    thresholds: &[
        Threshold { name: "min_operations", default: 20.0, help: "reads, updates and deletes on the collection before advising" },
        Threshold { name: "margin", default: 0.2, help: "how much better (as a share of operations) another key must be than the current one" },
    ],
};

/// Distinct equality-field sets remembered per collection.
const MAX_SETS: usize = 64;

/// Operations by how they met the current key: single-shard, multi-shard,
/// scatter-gather (what `analyzeShardKey` counts).
#[derive(Default)]
struct Distribution {
    counts: [u64; 3],
}

impl Distribution {
    fn count(&mut self, how: Partitioning) {
        self.counts[how as usize] += 1;
    }

    fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The share the backend targets (single- or multi-shard).
    fn targeted(&self) -> f64 {
        match self.total() {
            0 => 0.0,
            n => (self.counts[0] + self.counts[1]) as f64 / n as f64,
        }
    }

    /// `analyzeShardKey`'s readDistribution / writeDistribution fields.
    fn to_json(&self, what: &str) -> serde_json::Value {
        let total = self.total();
        let pct = |n: u64| match total {
            0 => 0.0,
            t => (n as f64 * 1000.0 / t as f64).round() / 10.0,
        };
        json!({
            "sampleSize": {"total": total},
            format!("percentageOfSingleShard{what}"): pct(self.counts[0]),
            format!("percentageOfMultiShard{what}"): pct(self.counts[1]),
            format!("percentageOfScatterGather{what}"): pct(self.counts[2]),
        })
    }
}

#[derive(Default)]
struct Workload {
    operations: u64,
    reads: Distribution,
    writes: Distribution,
    /// Equality paths of an operation (by a hash of the sorted set) →
    /// the set and how many operations had it.
    sets: RuleTable<u64, (Vec<String>, u64)>,
    last_message: String,
}

/// Its sets charge themselves; the last message is charged at its longest.
impl Weight for Workload {
    fn weight(&self) -> usize {
        std::mem::size_of::<Workload>() + 2048
    }
}

#[derive(Default)]
pub struct PartitionKeyAdvice {
    namespaces: RuleTable<String, Workload>,
    /// (shape id, equality-set id) of finds whose set follows from their
    /// shape (`equality_paths_follow_from_shape`), by the shape id's low
    /// bits: a find of a shape seen before is not walked for its set.
    /// Fixed size (allocated at the first find), so bounded by
    /// construction; a slot taken by another shape is overwritten.
    sets_by_shape: Vec<(u64, u64)>,
}

/// Slots of `PartitionKeyAdvice::sets_by_shape` (a power of two).
const SHAPE_SLOTS: usize = 256;

impl Rule for PartitionKeyAdvice {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST.and(Hooks::TICK)
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let find = op.cmd.kind == Kind::Find;
        // (A find is a read, counted whatever its filter: its filter is
        // read below, and only when its shape does not tell its set.)
        let early = (!find).then(|| filters(op.cmd));
        if early.as_ref().is_some_and(|f| f.is_empty()) && !op.cmd.kind.is_read() {
            return;
        }
        let w = self.namespaces.entry_ref(op.namespace, cx.pool);
        w.operations += 1;
        if let Some(how) = op.partitioning {
            if op.cmd.kind.is_read() {
                w.reads.count(how);
            } else {
                w.writes.count(how);
            }
        }
        // A find's set, known from its shape: counted without a walk.
        let slot = (op.shape.hash as usize) & (SHAPE_SLOTS - 1);
        if let Some(&(shape, id)) = self.sets_by_shape.get(slot).filter(|_| find) {
            if shape == op.shape.hash && shape != 0 {
                if let Some((_, n)) = w.sets.get_mut(&id) {
                    *n += 1;
                    return;
                }
            }
        }
        let filters = early.unwrap_or_else(|| filters(op.cmd));
        // The set's strings are built only the first time it is seen.
        let mut paths: SmallVec<[&str; 8]> = SmallVec::new();
        for f in &filters {
            equality_paths_into(f, &mut paths);
        }
        paths.sort_unstable();
        paths.dedup();
        let id = paths.iter().fold(FNV1A_START, |h, p| {
            fnv1a_continue(fnv1a_continue(h, p.as_bytes()), &[0])
        });
        if find && filters.iter().all(|f| equality_paths_follow_from_shape(f)) {
            if self.sets_by_shape.is_empty() {
                self.sets_by_shape = vec![(0, 0); SHAPE_SLOTS];
            }
            self.sets_by_shape[slot] = (op.shape.hash, id);
        }
        if let Some((_, n)) = w.sets.get_mut(&id) {
            *n += 1;
        } else if w.sets.len() < MAX_SETS {
            let set = paths.iter().map(|p| p.to_string()).collect();
            w.sets.insert(id, (set, 1), cx.pool);
        }
    }

    fn on_tick(&mut self, cx: &mut RuleContext<'_>) {
        // Partition advice only where the deployment partitions data: once
        // some collection's key is known (config or traffic), collections
        // without one are advised too.
        if cx.partition_keys.all().is_empty() {
            return;
        }
        for (namespace, w) in self.namespaces.iter_mut() {
            if (w.operations as f64) < cx.threshold(&META, namespace, "min_operations") {
                continue;
            }
            let score = |key: &[String]| -> f64 {
                let hits: u64 = w
                    .sets
                    .values()
                    .filter(|(set, _)| key.iter().all(|k| set.contains(k)))
                    .map(|(_, n)| n)
                    .sum();
                hits as f64 / w.operations as f64
            };
            let candidates: BTreeSet<&String> = w
                .sets
                .values()
                .flat_map(|(set, _)| set)
                .filter(|p| *p != "_id")
                .collect();
            let Some((best, best_score)) = candidates
                .iter()
                .map(|c| ((*c).clone(), score(std::slice::from_ref(*c))))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            else {
                continue;
            };
            if best_score <= 0.0 {
                continue;
            }
            let current = cx.partition_keys.get(namespace);
            let pct = |s: f64| (s * 100.0).round();
            let message = match &current {
                None => format!(
                    "partitioning by `{best}` would make {:.0} % of {} operations single-partition",
                    pct(best_score),
                    w.operations
                ),
                Some(key) => {
                    // What the backend targets with the key as it is
                    // (single- or multi-shard), not only what pins all of
                    // it: a compound key's prefix is already targeted.
                    let observed = w.reads.total() + w.writes.total();
                    let key_score = if observed > 0 {
                        let targeted = w.reads.targeted() * w.reads.total() as f64
                            + w.writes.targeted() * w.writes.total() as f64;
                        targeted / observed as f64
                    } else {
                        score(&key.paths)
                    };
                    let margin = cx.threshold(&META, namespace, "margin");
                    if key.paths.contains(&best) || best_score < key_score + margin {
                        continue;
                    }
                    format!(
                        "{:.0} % of {} operations filter on `{best}` but only {:.0} % are targeted by the key {}: keep a second copy partitioned by `{best}`",
                        pct(best_score),
                        w.operations,
                        pct(key_score),
                        key.describe()
                    )
                }
            };
            if message == w.last_message {
                continue;
            }
            w.last_message = message.clone();
            let mut evidence = BTreeMap::new();
            evidence.insert("suggested_key".into(), json!([best]));
            evidence.insert(
                "single_partition_share".into(),
                json!((best_score * 1000.0).round() / 1000.0),
            );
            evidence.insert("operations".into(), json!(w.operations));
            if let Some(key) = current {
                evidence.insert("current_key".into(), json!(key.paths));
                evidence.insert("current_key_kind".into(), json!(key.kind.as_str()));
                evidence.insert("readDistribution".into(), w.reads.to_json("Reads"));
                evidence.insert("writeDistribution".into(), w.writes.to_json("Writes"));
            }
            cx.report(
                &META,
                FindingDraft {
                    namespace: namespace.clone(),
                    subject: "(partition key)".into(),
                    severity: Severity::Info,
                    pattern: None,
                    shape: None,
                    message,
                    evidence,
                    advice: None,
                    saving: None,
                },
            );
        }
    }
}
