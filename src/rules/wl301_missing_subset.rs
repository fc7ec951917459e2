//! WL301 missing-subset and WL302 slice-on-read (seed 001, subset pattern).
//!
//! WL301: a read returns documents carrying a large embedded array — 50
//! elements or more, or 64 KiB — that no projection dropped or sliced:
//! every read moves the whole array although a page shows a few elements.
//! Arrays the application bounds by design (`$push` with `$slice`, the
//! bucket pattern) are not reported.
//!
//! WL302: the same read always projects `{arr: {$slice: N}}` on an array
//! that is large in storage: the N are what the application needs, yet the
//! whole array is still stored, loaded and kept in the document.

use super::{DocSource, FindingDraft, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::{number, Kind};
use crate::analysis::state::{fold_path, Doc};
use bson::RawBsonRef;
use serde_json::json;
use std::collections::BTreeMap;

pub static MISSING: RuleMeta = RuleMeta {
    id: "WL301",
    name: "missing-subset",
    severity: Severity::Warning,
    summary: "Reads return a large embedded array whole, though the application rarely needs all of it.",
    advice: "Subset pattern: embed only the N most used elements (e.g. the 10 most recent reviews) in the document \
             and move the rest to their own collection with a reference back; or project only what the read needs.",
    seed: "seed 001 (subset pattern: 10 most recent reviews), seed 002",
    thresholds: &[
        Threshold { name: "min_elements", default: 50.0, help: "array length from which a returned array counts as large" },
        Threshold { name: "min_bytes", default: 65_536.0, help: "array size in bytes from which it counts as large" },
    ],
};

pub static SLICE: RuleMeta = RuleMeta {
    id: "WL302",
    name: "slice-on-read",
    severity: Severity::Warning,
    summary: "Reads always slice a large embedded array: the full array is stored and loaded to return a few elements.",
    advice: "Store those N elements in the document itself (subset pattern) and move the rest of the array to its \
             own collection; the read then needs no $slice and the document stays small.",
    seed: "seed 001 (subset pattern)",
    thresholds: &[
        Threshold { name: "min_reads", default: 3.0, help: "reads with the same $slice before it is reported" },
        Threshold { name: "min_elements", default: 50.0, help: "stored array length from which it counts as large" },
    ],
};

/// `{path: {$slice: N}}` or `{path: {$slice: [skip, N]}}` in a projection.
pub fn sliced_paths(projection: &bson::RawDocument) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for (path, spec) in projection.iter().flatten() {
        let RawBsonRef::Document(spec) = spec else {
            continue;
        };
        let n = match spec.get("$slice").ok().flatten() {
            Some(RawBsonRef::Array(a)) => a.into_iter().flatten().nth(1).and_then(number),
            Some(v) => number(v),
            None => None,
        };
        if let Some(n) = n {
            out.push((fold_path(path.as_str()), n.abs()));
        }
    }
    out
}

#[derive(Default)]
pub struct MissingSubset {
    /// (namespace, path) → reads that returned it whole.
    reads: BTreeMap<(String, String), u64>,
    /// (namespace, path) → the N the workload slices it to, when it does.
    slices: BTreeMap<(String, String), i64>,
}

impl Rule for MissingSubset {
    fn meta(&self) -> &'static RuleMeta {
        &MISSING
    }

    fn on_request(&mut self, op: &OpView<'_>, _cx: &mut RuleContext<'_>) {
        if let Some(p) = op.cmd.projection() {
            for (path, n) in sliced_paths(p) {
                self.slices.insert((op.namespace.to_string(), path), n);
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
            if (array.len as f64) < min_elements && (array.bytes as f64) < min_bytes {
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
            let reads = self.reads.entry(key.clone()).or_default();
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
                FindingDraft {
                    namespace: op.namespace.to_string(),
                    subject: array.path.clone(),
                    severity: MISSING.severity,
                    pattern: Some(op.pattern.to_string()),
                    shape: Some(op.shape.text.clone()),
                    message: format!(
                        "`{}` ({} elements, {}) is returned whole by {}: no projection drops or slices it; embed the {suggested} most used and move the rest",
                        array.path,
                        array.len,
                        super::wl103_large_document::human_bytes(array.bytes as u64),
                        op.cmd.name
                    ),
                    evidence,
                },
            );
        }
    }
}

#[derive(Default)]
pub struct SliceOnRead {
    /// (namespace, shape, path) → reads.
    reads: BTreeMap<(String, u64, String), u64>,
}

impl Rule for SliceOnRead {
    fn meta(&self) -> &'static RuleMeta {
        &SLICE
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let Some(p) = op.cmd.projection() else { return };
        for (path, n) in sliced_paths(p) {
            let reads = self
                .reads
                .entry((op.namespace.to_string(), op.shape.hash, path.clone()))
                .or_default();
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
                FindingDraft {
                    namespace: op.namespace.to_string(),
                    subject: path.clone(),
                    severity: SLICE.severity,
                    pattern: Some(op.pattern.to_string()),
                    shape: Some(op.shape.text.clone()),
                    message: format!(
                        "reads project `{path}` with $slice {n} ({reads} so far) while the stored array has up to {stored} elements: store those {n} in the document, the rest elsewhere"
                    ),
                    evidence,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn slice_forms() {
        let p = rawdoc! {"title": 1, "reviews": {"$slice": -10}, "comments": {"$slice": [20, 5]}, "x": {"$elemMatch": {"a": 1}}};
        assert_eq!(
            sliced_paths(&p),
            vec![("reviews".to_string(), 10), ("comments".to_string(), 5)]
        );
    }
}
