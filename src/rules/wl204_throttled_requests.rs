//! WL204 throttled-requests: an access pattern the server throttles again
//! and again. Azure Cosmos DB for MongoDB answers a request that would take
//! the collection past its provisioned request units per second with error
//! 16500 (TooManyRequests, `RetryAfterMs` in its message), and one that
//! could not finish within its time under rate limiting with 50
//! (ExceededTimeLimit) (*Troubleshoot common issues in Azure Cosmos DB's
//! API for MongoDB*). A pattern throttled repeatedly costs more than its
//! throughput allows; when most of its throttled operations carry one
//! partition-key value, the load falls on one logical partition, and so
//! on the one physical partition that holds it, which gets only its share
//! of the container's throughput (*Partitioning and horizontal scaling in
//! Azure Cosmos DB*): a hot partition.

use super::{FindingDraft, Hooks, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::rules::common::RuleTable;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL204",
    name: "throttled-requests",
    severity: Severity::Warning,
    summary: "An access pattern is throttled by the server again and again (Azure Cosmos DB's 16500 TooManyRequests, 50 ExceededTimeLimit).",
    advice: "Make the request cheaper or spread it: see its RU/call (point reads by _id and partition key, \
             projections, an index policy over the paths you query), and if one partition-key value takes \
             the throttling, choose a key with more values the load spreads over (or add a suffix to the hot \
             value). Raise the provisioned throughput (or autoscale) if the cost is right, and retry 16500 \
             after its RetryAfterMs (or turn on server-side retry).",
    source: "Azure Cosmos DB, “Troubleshoot common issues in Azure Cosmos DB's API for MongoDB” (16500, 50); \
             “Prevent rate-limiting errors for Azure Cosmos DB for MongoDB operations”; \
             “Partitioning and horizontal scaling in Azure Cosmos DB” (hot partitions)",
    thresholds: &[
        Threshold { name: "min_throttled", default: 3.0, help: "throttled operations of a pattern before it is reported" },
        Threshold { name: "hot_share", default: 0.5, help: "share of the throttled operations one partition-key value must carry to be called a hot partition" },
    ],
};

#[derive(Default)]
pub struct ThrottledRequests {
    /// Pattern → throttled operations last reported (re-reported as they
    /// double).
    reported: RuleTable<String, u64>,
}

impl Rule for ThrottledRequests {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::TICK
    }

    fn on_tick(&mut self, cx: &mut RuleContext<'_>) {
        let mut drafts = Vec::new();
        for (name, p) in cx.patterns.patterns.iter() {
            if p.throttled == 0 {
                continue;
            }
            let Some(namespace) = p.namespaces.first() else {
                continue;
            };
            if (p.throttled as f64) < cx.threshold(&META, namespace, "min_throttled") {
                continue;
            }
            // Once, then again each time the count doubles.
            let last = self.reported.get_mut(&**name).map_or(0, |n| *n);
            if last > 0 && p.throttled < 2 * last {
                continue;
            }
            self.reported.insert(name.to_string(), p.throttled, cx.pool);
            let codes: BTreeMap<String, u64> = p
                .errors
                .iter()
                .filter(|(c, _)| crate::analysis::target::is_throttling(**c, cx.target))
                .map(|(c, n)| (c.to_string(), *n))
                .collect();
            let hottest = p.throttled_keys.iter().map(|(_, n)| u64::from(*n)).max();
            let hot_share = cx.threshold(&META, namespace, "hot_share");
            let hot = hottest.filter(|n| *n >= 2 && *n as f64 >= hot_share * p.throttled as f64);
            let calls = p.invocations.max(1);
            // What a call that went through cost (a throttled one costs
            // little: Cosmos DB refuses it before doing the work).
            let ru = (p.request_units > 0.0).then(|| p.request_units / calls as f64);
            let mut evidence = BTreeMap::new();
            evidence.insert("throttled".into(), json!(p.throttled));
            evidence.insert("calls_through".into(), json!(p.invocations));
            evidence.insert("codes".into(), json!(codes));
            if let Some(ru) = ru {
                evidence.insert(
                    "request_units_per_call".into(),
                    json!((ru * 100.0).round() / 100.0),
                );
            }
            if let Some(key) = cx.partition_keys.get(namespace) {
                evidence.insert("partition_key".into(), json!(key.paths));
            }
            if let Some(n) = hot {
                evidence.insert("hot_partition_key_value_operations".into(), json!(n));
            }
            let cost = match ru {
                Some(ru) => format!("; it costs about {ru:.1} RU per call"),
                None => String::new(),
            };
            let partition = match (hot, cx.partition_keys.get(namespace)) {
                (Some(n), Some(key)) => format!(
                    "; {n} of the throttled operations carried the same value of the partition key [{}]: a hot partition",
                    key.paths.join(", ")
                ),
                _ => String::new(),
            };
            drafts.push(FindingDraft {
                namespace: namespace.clone(),
                subject: format!("pattern {name}"),
                severity: META.severity,
                pattern: Some(name.to_string()),
                shape: None,
                message: format!(
                    "`{name}` was throttled {} times ({}) while {} of its calls went through{cost}{partition}",
                    p.throttled,
                    codes
                        .iter()
                        .map(|(c, n)| format!(
                            "{n} × {}",
                            match c.as_str() {
                                "16500" => "16500 TooManyRequests",
                                _ => "50 ExceededTimeLimit",
                            }
                        ))
                        .collect::<Vec<_>>()
                        .join(", "),
                    p.invocations
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
