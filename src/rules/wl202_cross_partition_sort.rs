//! WL202 cross-partition-sort.
//!
//! A query with a sort and a limit that fans out to every partition is a
//! "feed" (query Q6 of the blogging platform in
//! *How to model and partition data on Azure Cosmos DB using a real-world example*: the x most recent posts): every partition sorts,
//! and the results are merged. Reported with the dedicated-feed advice.

use super::common::{CrossPartitionCounts, CROSS_PARTITION_THRESHOLDS};
use super::{Hooks, OpView, Rule, RuleContext, RuleMeta, Severity};

pub static META: RuleMeta = RuleMeta {
    id: "WL202",
    name: "cross-partition-sort",
    severity: Severity::Warning,
    summary: "A sorted, limited query (a feed) is scatter-gather: every partition sorts and the results are merged.",
    advice: "Keep a dedicated collection holding only the N most recent items in one partition, written \
             alongside the main one (the blogging platform, V3: a feed container partitioned by type, trimmed to the 100 latest posts).",
    source: concat!(cosmos_real_world!(), " (V1 Q6; V3 feed container)"),
    thresholds: CROSS_PARTITION_THRESHOLDS,
};

#[derive(Default)]
pub struct CrossPartitionSort(CrossPartitionCounts);

impl Rule for CrossPartitionSort {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        self.0.observe(&META, op, cx, |feed| feed);
    }
}
