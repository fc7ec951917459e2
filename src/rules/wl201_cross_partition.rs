//! WL201 cross-partition-query and WL202 cross-partition-sort.
//!
//! A read, update or delete whose filter does not pin every path of the
//! collection's partition key by equality has to ask every partition
//! (seed 004 V1: Q3 lists a user's posts from a container partitioned by
//! `postId`). With a sort and a limit it is a "feed" (seed 004 Q6: the x
//! most recent posts), which WL202 reports with the dedicated-feed advice
//! instead. `$in` on the key (or an `$or` whose every branch pins it) is a
//! targeted multi-partition query: info. Severity grows with the share of
//! the collection's operations that fan out.

use super::{FindingDraft, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::Kind;
use crate::analysis::partition::Partitioning;
use bson::RawBsonRef;
use serde_json::json;
use std::collections::BTreeMap;

const THRESHOLDS: &[Threshold] = &[
    Threshold { name: "error_share", default: 0.5, help: "fraction of the collection's operations fanning out with this shape from which it is an error" },
    Threshold { name: "min_operations", default: 20.0, help: "operations on the collection before the share is judged" },
];

pub static QUERY: RuleMeta = RuleMeta {
    id: "WL201",
    name: "cross-partition-query",
    severity: Severity::Warning,
    summary: "An operation's filter does not pin the collection's partition key, so it is sent to every partition.",
    advice: "Filter on the partition key, or keep a copy of the data partitioned by the field you query on \
             (seed 004 V3: posts copied into the users container, partitioned by userId).",
    seed: "seed 004 (V1 Q3; V3 denormalized copy partitioned by userId)",
    thresholds: THRESHOLDS,
};

pub static SORT: RuleMeta = RuleMeta {
    id: "WL202",
    name: "cross-partition-sort",
    severity: Severity::Warning,
    summary: "A sorted, limited query (a feed) fans out to every partition and merges their results.",
    advice: "Keep a dedicated collection holding only the N most recent items in one partition, written \
             alongside the main one (seed 004 V3: a feed container partitioned by type, trimmed to the 100 latest posts).",
    seed: "seed 004 (V1 Q6; V3 feed container)",
    thresholds: THRESHOLDS,
};

pub struct CrossPartition {
    meta: &'static RuleMeta,
    /// Operations per namespace, and fan-outs per (namespace, shape).
    operations: BTreeMap<String, u64>,
    fanouts: BTreeMap<(String, u64), u64>,
}

impl CrossPartition {
    pub fn query() -> CrossPartition {
        CrossPartition {
            meta: &QUERY,
            operations: BTreeMap::new(),
            fanouts: BTreeMap::new(),
        }
    }

    pub fn sort() -> CrossPartition {
        CrossPartition {
            meta: &SORT,
            operations: BTreeMap::new(),
            fanouts: BTreeMap::new(),
        }
    }
}

/// A query with a sort and a limit: find, or a pipeline with `$sort`
/// followed by `$limit`.
pub fn is_feed(op: &OpView<'_>) -> bool {
    match op.cmd.kind {
        Kind::Find => op.cmd.sort().is_some() && op.cmd.limit().is_some_and(|l| l != 0),
        Kind::Aggregate => {
            let Some(p) = op.cmd.pipeline() else {
                return false;
            };
            let mut sorted = false;
            for stage in p.into_iter().flatten() {
                let RawBsonRef::Document(stage) = stage else {
                    continue;
                };
                let Some(Ok((name, _))) = stage.iter().next() else {
                    continue;
                };
                match name.as_str() {
                    "$sort" => sorted = true,
                    "$limit" if sorted => return true,
                    _ => {}
                }
            }
            false
        }
        _ => false,
    }
}

impl Rule for CrossPartition {
    fn meta(&self) -> &'static RuleMeta {
        self.meta
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let Some(how) = op.partitioning else { return };
        let operations = self.operations.entry(op.namespace.to_string()).or_default();
        *operations += 1;
        let operations = *operations;
        let feed = is_feed(op);
        let mine = match self.meta.id {
            "WL202" => how == Partitioning::FanOut && feed,
            _ => how == Partitioning::Targeted || (how == Partitioning::FanOut && !feed),
        };
        if !mine {
            return;
        }
        let fanouts = self
            .fanouts
            .entry((op.namespace.to_string(), op.shape.hash))
            .or_default();
        *fanouts += 1;
        let fanouts = *fanouts;
        let share = fanouts as f64 / operations as f64;
        let min_ops = cx.threshold(self.meta, op.namespace, "min_operations");
        let error_share = cx.threshold(self.meta, op.namespace, "error_share");
        let severity = match how {
            Partitioning::Targeted => Severity::Info,
            _ if operations as f64 >= min_ops && share >= error_share => Severity::Error,
            _ => Severity::Warning,
        };
        let key = cx
            .partition_keys
            .get(op.namespace)
            .map(|k| k.paths.clone())
            .unwrap_or_default();
        let mut evidence = BTreeMap::new();
        evidence.insert("partition_key".into(), json!(key));
        evidence.insert("partitions".into(), json!(how.as_str()));
        evidence.insert("operations_on_collection".into(), json!(operations));
        evidence.insert("operations_with_this_shape".into(), json!(fanouts));
        evidence.insert("share".into(), json!((share * 1000.0).round() / 1000.0));
        let what = match (how, feed) {
            (Partitioning::Targeted, _) => {
                "reaches several partitions ($in or $or on the key)".to_string()
            }
            (_, true) => "sorts and limits across every partition (a feed)".to_string(),
            _ => "fans out to every partition".to_string(),
        };
        let why = if key.is_empty() {
            "a $lookup joins a partitioned collection on another field than its key".to_string()
        } else if how == Partitioning::Targeted {
            format!(
                "its filter lists several values of the partition key [{}]",
                key.join(", ")
            )
        } else {
            format!(
                "its filter does not pin the partition key [{}]",
                key.join(", ")
            )
        };
        let message = format!(
            "{} {what}: {why} ({fanouts} of {operations} operations on the collection)",
            op.cmd.name
        );
        cx.report(
            self.meta,
            FindingDraft {
                namespace: op.namespace.to_string(),
                subject: op.shape.text.clone(),
                severity,
                pattern: Some(op.pattern.to_string()),
                shape: Some(op.shape.text.clone()),
                message,
                evidence,
            },
        );
    }
}
