//! WL201 cross-partition-query.
//!
//! A read, update or delete whose filter does not pin every path of the
//! collection's partition key by equality has to ask every partition
//! (seed 004 V1: Q3 lists a user's posts from a container partitioned by
//! `postId`). A sorted, limited query is WL202's instead. `$in` on the key
//! (or an `$or` whose every branch pins it) is a targeted multi-partition
//! query: info. Severity grows with the share of the collection's
//! operations that fan out.

use super::common::{CrossPartitionCounts, CROSS_PARTITION_THRESHOLDS};
use super::{OpView, Rule, RuleContext, RuleMeta, Severity};
use crate::analysis::partition::Partitioning;

pub static META: RuleMeta = RuleMeta {
    id: "WL201",
    name: "cross-partition-query",
    severity: Severity::Warning,
    summary: "An operation's filter does not pin the collection's partition key, so it is sent to every partition.",
    advice: "Filter on the partition key, or keep a copy of the data partitioned by the field you query on \
             (seed 004 V3: posts copied into the users container, partitioned by userId).",
    seed: "seed 004 (V1 Q3; V3 denormalized copy partitioned by userId)",
    thresholds: CROSS_PARTITION_THRESHOLDS,
};

#[derive(Default)]
pub struct CrossPartitionQuery(CrossPartitionCounts);

impl Rule for CrossPartitionQuery {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        self.0.observe(&META, op, cx, |how, feed| {
            how == Partitioning::Targeted || (how == Partitioning::FanOut && !feed)
        });
    }
}
