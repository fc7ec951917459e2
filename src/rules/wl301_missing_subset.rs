//! WL301 missing-subset (the subset pattern of MongoDB's
//! *Model One-to-Many Relationships with Embedded Documents*).
//!
//! A read returns documents carrying a large embedded array — 50
//! elements or more, or 64 KiB — that no projection dropped or sliced:
//! every read moves the whole array although a page shows a few elements.
//! Arrays the application bounds by design (`$push` with `$slice`, the
//! bucket pattern) are not reported.

use super::common::sliced_paths;
use super::common::RuleTable;
use super::{
    DocSource, FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold,
};
use crate::analysis::command::Kind;
use crate::analysis::namespaces::Doc;
use serde_json::json;
use std::collections::BTreeMap;

pub static MISSING: RuleMeta = RuleMeta {
    id: "WL301",
    name: "missing-subset",
    severity: Severity::Warning,
    summary: "Reads return a large embedded array whole, though the application rarely needs all of it.",
    advice: "Subset pattern: embed only the N most used elements (e.g. the 10 most recent reviews) in the document \
             and move the rest to their own collection with a reference back; or project only what the read needs.",
    source: concat!(mongodb_subset!(), " (subset pattern: the 10 most recent reviews); ", mongodb_unbounded!()),
    thresholds: &[
        Threshold { name: "min_elements", default: 50.0, help: "array length from which a returned array counts as large" },
        Threshold { name: "min_bytes", default: 65_536.0, help: "array size in bytes from which it counts as large" },
    ],
};

#[derive(Default)]
pub struct MissingSubset {
    /// (namespace, path) → reads that returned it whole.
    reads: RuleTable<(String, String), u64>,
    /// (namespace, path) → the N the workload slices it to, when it does.
    slices: RuleTable<(String, String), i64>,
}

impl Rule for MissingSubset {
    fn meta(&self) -> &'static RuleMeta {
        &MISSING
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST.and(Hooks::DOCUMENT)
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        if let Some(p) = op.cmd.projection() {
            for (path, n) in sliced_paths(p) {
                self.slices
                    .insert((op.namespace.to_string(), path), n, cx.pool);
            }
        }
    }

    fn on_document(
        &mut self,
        op: &OpView<'_>,
        doc: &Doc<'_>,
        source: DocSource,
        cx: &mut RuleContext<'_>,
    ) {
        if source != DocSource::Returned
            || !matches!(
                op.cmd.kind,
                Kind::Find | Kind::Aggregate | Kind::FindAndModify
            )
        {
            return;
        }
        let min_elements = cx.threshold(&MISSING, op.namespace, "min_elements");
        let min_bytes = cx.threshold(&MISSING, op.namespace, "min_bytes");
        for array in &doc.arrays {
            // Vectors and coordinates have no "most used" elements.
            if array.numeric
                || ((array.len as f64) < min_elements && (array.bytes as f64) < min_bytes)
            {
                continue;
            }
            let bounded = cx
                .namespaces
                .get(op.namespace)
                .is_some_and(|ns| ns.bounded_paths.get(&array.path).is_some());
            if bounded {
                continue;
            }
            let key = (op.namespace.to_string(), array.path.clone());
            let reads = self.reads.entry(key.clone(), cx.pool);
            *reads += 1;
            let reads = *reads;
            let suggested = self.slices.get(&key).copied().unwrap_or(10);
            let mut evidence = BTreeMap::new();
            evidence.insert("elements".into(), json!(array.len));
            evidence.insert("bytes".into(), json!(array.bytes));
            evidence.insert("reads_returning_it_whole".into(), json!(reads));
            evidence.insert("suggested_subset".into(), json!(suggested));
            cx.report(
                &MISSING,
                FindingDraft::about(op, array.path.clone(), MISSING.severity, format!(
                        "`{}` ({} elements, {}) is returned whole by {}: no projection drops or slices it; embed the {suggested} most used and move the rest",
                        array.path,
                        array.len,
                        super::common::human_bytes(array.bytes as u64),
                        op.cmd.name
                    ), evidence),
            );
        }
    }
}
