//! WL302 slice-on-read (the subset pattern of MongoDB's
//! *Model One-to-Many Relationships with Embedded Documents*).
//!
//! The same read always projects `{arr: {$slice: N}}` on an array that is
//! large in storage: the N are what the application needs, yet the whole
//! array is still stored, loaded and kept in the document.

use super::common::sliced_paths;
use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use serde_json::json;
use std::collections::BTreeMap;

pub static SLICE: RuleMeta = RuleMeta {
    id: "WL302",
    name: "slice-on-read",
    severity: Severity::Warning,
    summary: "Reads always slice a large embedded array: the full array is stored and loaded to return a few elements.",
    advice: "Store those N elements in the document itself (subset pattern) and move the rest of the array to its \
             own collection; the read then needs no $slice and the document stays small.",
    source: concat!(mongodb_subset!(), " (subset pattern)"),
    thresholds: &[
        Threshold { name: "min_reads", default: 3.0, help: "reads with the same $slice before it is reported" },
        Threshold { name: "min_elements", default: 50.0, help: "stored array length from which it counts as large" },
    ],
};

#[derive(Default)]
pub struct SliceOnRead {
    /// (namespace, shape, path) → reads.
    reads: RuleTable<(String, u64, String), u64>,
}

impl Rule for SliceOnRead {
    fn meta(&self) -> &'static RuleMeta {
        &SLICE
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let Some(p) = op.cmd.projection() else { return };
        for (path, n) in sliced_paths(p) {
            let reads = self.reads.entry(
                (op.namespace.to_string(), op.shape.hash, path.clone()),
                cx.pool,
            );
            *reads += 1;
            let reads = *reads;
            if (reads as f64) < cx.threshold(&SLICE, op.namespace, "min_reads") {
                continue;
            }
            let stored = cx
                .namespaces
                .get(op.namespace)
                .and_then(|ns| ns.arrays.get(&path))
                .map_or(0, |a| a.lengths.max);
            if (stored as f64) < cx.threshold(&SLICE, op.namespace, "min_elements") {
                continue;
            }
            let mut evidence = BTreeMap::new();
            evidence.insert("slice".into(), json!(n));
            evidence.insert("reads".into(), json!(reads));
            evidence.insert("stored_max_length".into(), json!(stored));
            cx.report(
                &SLICE,
                FindingDraft::about(op, path.clone(), SLICE.severity, format!(
                        "reads project `{path}` with $slice {n} ({reads} so far) while the stored array has up to {stored} elements: store those {n} in the document, the rest elsewhere"
                    ), evidence),
            );
        }
    }
}
