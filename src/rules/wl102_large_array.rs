//! WL102 large-array: an array in a document (inserted, replaced, upserted
//! or returned) longer than 250 elements (warning) or 10,000 (error), the
//! thresholds of MongoDB Compass's and Atlas's schema advice. Per field
//! path, array elements folded as `path.$`.

use super::{
    DocSource, FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold,
};
use crate::analysis::namespaces::Doc;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL102",
    name: "large-array",
    severity: Severity::Warning,
    summary: "An embedded array is large: every read and write of the document carries all of it.",
    advice: "Bound it: keep the N most used elements in the document (subset pattern) and the rest in their own \
             collection, or reference from the child side, or group children in bucket documents of N \
             (e.g. comments in batches of 100).",
    source: concat!(mongodb_unbounded!(), "; ", cosmos_modeling!(), " (one-to-many, batches of 100)"),
    thresholds: &[
        Threshold { name: "warn", default: 250.0, help: "elements; a warning from this length" },
        Threshold { name: "error", default: 10_000.0, help: "elements; an error from this length" },
    ],
};

#[derive(Default)]
pub struct LargeArray;

impl Rule for LargeArray {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::DOCUMENT
    }

    fn on_document(
        &mut self,
        op: &OpView<'_>,
        doc: &Doc<'_>,
        source: DocSource,
        cx: &mut RuleContext<'_>,
    ) {
        if doc.arrays.is_empty() {
            return;
        }
        let warn = cx.threshold(&META, op.namespace, "warn");
        for array in &doc.arrays {
            let (path, len) = (&array.path, array.len);
            if (len as f64) < warn {
                continue;
            }
            let error = cx.threshold(&META, op.namespace, "error");
            // A vector or coordinates is as long as what it encodes: no
            // subset to keep. Beyond Atlas's 10,000 it is still worth a note.
            let severity = match (array.numeric, len as f64 >= error) {
                (true, false) => continue,
                (true, true) => Severity::Info,
                (false, true) => Severity::Error,
                (false, false) => Severity::Warning,
            };
            let stats = cx
                .namespaces
                .get(op.namespace)
                .and_then(|ns| ns.arrays.get(path))
                .map(|a| {
                    (
                        a.lengths.max,
                        a.lengths.quantile(0.99),
                        a.lengths.count,
                        a.growth_events,
                    )
                });
            let (max, p99, seen, growth) = stats.unwrap_or((len as u64, len as u64, 1, 0));
            let mut evidence = BTreeMap::new();
            evidence.insert("max_length".into(), json!(max));
            evidence.insert("p99_length".into(), json!(p99));
            evidence.insert("arrays_observed".into(), json!(seen));
            evidence.insert("growth_events".into(), json!(growth));
            evidence.insert("seen_when".into(), json!(source.as_str()));
            cx.report(
                &META,
                FindingDraft::about(op, path.clone(), severity, format!(
                        "array `{path}` has {len} elements in a {} document (max seen {max}, p99 ≤ {p99}; warn ≥ {})",
                        source.as_str(),
                        warn as u64
                    ), evidence),
            );
        }
    }
}
