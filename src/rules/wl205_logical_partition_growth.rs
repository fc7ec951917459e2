//! WL205 logical-partition-growth: on a platform that limits a logical
//! partition's size (Azure Cosmos DB: the documents sharing one
//! partition-key value hold at most 20 GB, *Azure Cosmos DB service
//! quotas*), a partition-key value whose documents, inserted at the rate
//! seen, would reach the limit within the horizon. The rate is each
//! value's bytes inserted over the time between its first and its latest
//! insert seen, so it takes time to judge: a value watched for less than
//! `min_hours` is not (a test suite's minutes say nothing of a year). The
//! values are compared by hash and never shown.

use super::common::human_bytes;
use super::{FindingDraft, Hooks, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::rules::common::RuleTable;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL205",
    name: "logical-partition-growth",
    severity: Severity::Warning,
    summary: "A partition-key value's documents grow fast enough to reach Azure Cosmos DB's 20 GB logical-partition limit.",
    advice: "Give the growing value's documents more partition-key values to spread over: a hierarchical \
             partition key (tenant, then user or month), or a synthetic key that adds a bucket (a date, a \
             hash suffix) to the value; or move what keeps growing (events, history) to a collection of \
             its own, partitioned by a key with many values, and expire what is no longer read (TTL).",
    source: "Azure Cosmos DB, “Azure Cosmos DB service quotas” (20 GB per logical partition); \
             “Partitioning and horizontal scaling in Azure Cosmos DB” (choosing a partition key, \
             hierarchical and synthetic keys)",
    thresholds: &[
        Threshold { name: "min_hours", default: 1.0, help: "hours a value must be seen growing before it is judged" },
        Threshold { name: "horizon_days", default: 365.0, help: "reported when the limit would be reached within this many days" },
    ],
};

#[derive(Default)]
pub struct LogicalPartitionGrowth {
    /// Namespace → days to the limit last reported (re-reported when the
    /// projection halves).
    reported: RuleTable<String, u64>,
}

impl Rule for LogicalPartitionGrowth {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::TICK
    }

    fn on_tick(&mut self, cx: &mut RuleContext<'_>) {
        let Some(limit) = cx.target.logical_partition_limit() else {
            return;
        };
        let mut drafts = Vec::new();
        for (namespace, state) in cx.namespaces.map.iter() {
            if state.key_growth.is_empty() {
                continue;
            }
            let min_hours = cx.threshold(&META, namespace, "min_hours");
            let horizon = cx.threshold(&META, namespace, "horizon_days");
            // The value that reaches the limit first, at its own rate.
            let soonest = state
                .key_growth
                .iter()
                .filter_map(|(_, g)| {
                    let hours = g.last.saturating_duration_since(g.first).as_secs_f64() / 3600.0;
                    if hours < min_hours.max(1e-3) || g.bytes == 0 {
                        return None;
                    }
                    let per_day = g.bytes as f64 / hours * 24.0;
                    let days = limit.saturating_sub(g.bytes) as f64 / per_day;
                    Some((days, per_day, hours, g.bytes))
                })
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let Some((days, per_day, hours, bytes)) = soonest else {
                continue;
            };
            if days > horizon {
                continue;
            }
            let whole_days = days.ceil() as u64;
            let last = self.reported.get_mut(namespace.as_str()).map(|d| *d);
            if last.is_some_and(|d| whole_days * 2 > d) {
                continue;
            }
            self.reported.insert(namespace.clone(), whole_days, cx.pool);
            let share = bytes as f64 / state.key_growth_bytes.max(1) as f64;
            let key = cx
                .partition_keys
                .get(namespace)
                .map(|k| k.paths.join(", "))
                .unwrap_or_default();
            let mut evidence = BTreeMap::new();
            evidence.insert("partition_key".into(), json!(key));
            evidence.insert("value_bytes".into(), json!(bytes));
            evidence.insert("hours_seen".into(), json!((hours * 10.0).round() / 10.0));
            evidence.insert("bytes_per_day".into(), json!(per_day.round() as u64));
            evidence.insert("days_to_limit".into(), json!(whole_days));
            evidence.insert("limit_bytes".into(), json!(limit));
            evidence.insert(
                "share_of_inserted_bytes".into(),
                json!((share * 1000.0).round() / 1000.0),
            );
            drafts.push(FindingDraft {
                namespace: namespace.clone(),
                subject: format!("partition key [{key}]"),
                severity: META.severity,
                pattern: None,
                shape: None,
                message: format!(
                    "one value of the partition key [{key}] grew by {} in {hours:.1} h ({:.0} % of the bytes inserted): \
                     at {} a day it reaches the {} logical-partition limit of {} in about {whole_days} days",
                    human_bytes(bytes),
                    share * 100.0,
                    human_bytes(per_day as u64),
                    human_bytes(limit),
                    cx.target.title(),
                ),
                evidence,
                advice: None,
                saving: None,
            });
        }
        for draft in drafts {
            cx.report(&META, draft);
        }
    }
}
