//! WL201 cross-partition-query.
//!
//! A read, update or delete that the backend must send to every partition
//! (scatter-gather, by the targeting rules of the key's kind, see
//! `analysis::partition`): the blogging platform's V1 Q3 lists a user's
//! posts from a container partitioned by `postId`. A sorted, limited query
//! is WL202's instead. Multi-shard operations (a prefix of a compound
//! ranged key, a range on a ranged key, `$in` on the key) are targeted and
//! not reported. Severity grows with the share of the collection's
//! operations that are scatter-gather with this shape.

use super::common::{CrossPartitionCounts, CROSS_PARTITION_THRESHOLDS};
use super::{Hooks, OpView, Rule, RuleContext, RuleMeta, Severity};

pub static META: RuleMeta = RuleMeta {
    id: "WL201",
    name: "cross-partition-query",
    severity: Severity::Warning,
    summary: "An operation's filter does not target the collection's partition key, so it is sent to every partition (scatter-gather).",
    advice: "Filter on the partition key, or keep a copy of the data partitioned by the field you query on \
             (the blogging platform, V3: posts copied into the users container, partitioned by userId).",
    source: concat!(cosmos_real_world!(), " (V1 Q3; V3 copy partitioned by userId)"),
    thresholds: CROSS_PARTITION_THRESHOLDS,
};

#[derive(Default)]
pub struct CrossPartitionQuery(CrossPartitionCounts);

impl Rule for CrossPartitionQuery {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        self.0.observe(&META, op, cx, |feed| !feed);
    }
}
