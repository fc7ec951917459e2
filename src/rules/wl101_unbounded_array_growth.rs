//! WL101 unbounded-array-growth: updates that grow an array with no bound
//! — `$push` / `$addToSet` (with or without `$each`) with no `$slice`, a
//! pipeline `$concatArrays` not wrapped in `$slice`, or the whole array
//! rewritten longer each time (`$set: {comments: [...]}`, a replacement:
//! what ODMs send on save) — seen repeatedly with the same shape.
//!
//! Lengths come from every write that makes one document's array length
//! known (a `$push` onto a known length, a whole-array `$set`, an insert or
//! replacement) and from every full read of it. An array that every
//! observation shows small (≤ `small_length`) is a small bounded set and
//! stays silent, and so does an `$addToSet` set seen `settled_after` times
//! without growing since it last grew (every value of its vocabulary is in);
//! one seen growing past `error_length` is an error. `$push`
//! with `$each` and `$slice`, and the bucket pattern, are never reported.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::Kind;
use crate::analysis::command::{fold_path, is_bucketed, is_sliced_element};
use crate::analysis::target::Target;
use crate::wire::bson_walk::{elements, field, pairs, values, Value};
use bson::RawDocument;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL101",
    name: "unbounded-array-growth",
    severity: Severity::Warning,
    summary: "Updates keep appending to an embedded array with nothing that bounds it.",
    advice: "Bound the array: keep only the N most recent with $push {$each: [...], $slice: -N} and store the \
             rest in their own collection (subset pattern), reference from the child side, or bucket the \
             children in documents of N (comments in documents of 100, as in “Data modeling in Azure Cosmos DB”). \
             Left to grow, the document fails its writes at the size limit: 16 MB on MongoDB, 2 MB per item on \
             Azure Cosmos DB for MongoDB (RU).",
    source: concat!(mongodb_unbounded!(), " (book reviews); ", cosmos_modeling!(), " (comments in batches of 100)"),
    thresholds: &[
        Threshold { name: "min_updates", default: 3.0, help: "updates with the same shape before it is reported" },
        Threshold { name: "small_length", default: 10.0, help: "arrays never seen longer than this are small bounded sets: not reported" },
        Threshold { name: "error_length", default: 50.0, help: "length from which an array seen growing is an error" },
        Threshold { name: "settled_after", default: 10.0, help: "observations without growth after which an $addToSet set has stopped growing: not reported" },
    ],
};

#[derive(Default)]
pub struct UnboundedArrayGrowth {
    /// (namespace, shape, path) → updates seen.
    counts: RuleTable<(String, u64, String), u64>,
}

/// Paths an operator update appends to without a bound, with the operator.
pub fn unbounded_appends(update: &RawDocument) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for (op, fields) in pairs(update.as_bytes()).map_while(Result::ok) {
        let op = match op {
            "$push" => "$push",
            "$addToSet" => "$addToSet",
            _ => continue,
        };
        let Value::Document(fields) = fields else {
            continue;
        };
        for e in elements(fields).map_while(Result::ok) {
            let Some(path) = e.key_str() else {
                break;
            };
            if !is_sliced_element(&e) {
                out.push((fold_path(path).into_owned(), op));
            }
        }
    }
    out
}

/// Fields a pipeline update grows with `$concatArrays` outside a `$slice`.
pub fn unbounded_concats(pipeline: &bson::RawArray) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for stage in values(pipeline.as_bytes()).map_while(Result::ok) {
        let Value::Document(stage) = stage else {
            continue;
        };
        for (name, body) in pairs(stage).map_while(Result::ok) {
            if !matches!(name, "$set" | "$addFields") {
                continue;
            }
            let Value::Document(fields) = body else {
                continue;
            };
            for (path, expr) in pairs(fields).map_while(Result::ok) {
                let Value::Document(e) = expr else {
                    continue;
                };
                if elements(e)
                    .next()
                    .and_then(Result::ok)
                    .is_some_and(|op| op.key == b"$concatArrays")
                {
                    out.push((fold_path(path).into_owned(), "$concatArrays"));
                }
            }
        }
    }
    out
}

/// Top-level (folded) paths a whole-array `$set` or a replacement writes:
/// growth through them shows only in the lengths seen.
fn rewritten_arrays(update: &RawDocument, operator_update: bool) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    if operator_update {
        // The first `$set`, as the server reads it.
        let set = field(update.as_bytes(), b"$set");
        if let Some(fields) = set.filter(|e| e.element_type == 0x03) {
            for (path, value) in pairs(fields.value).map_while(Result::ok) {
                if matches!(value, Value::Array(_)) {
                    out.push((fold_path(path).into_owned(), "$set"));
                }
            }
        }
    } else {
        for (path, value) in pairs(update.as_bytes()).map_while(Result::ok) {
            if matches!(value, Value::Array(_)) {
                out.push((path.to_string(), "replacement"));
            }
        }
    }
    out
}

impl Rule for UnboundedArrayGrowth {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        if !matches!(op.cmd.kind, Kind::Update | Kind::FindAndModify) {
            return;
        }
        let mut candidates = Vec::new();
        for u in op.cmd.updates() {
            if is_bucketed(u.filter, u.update) {
                continue;
            }
            if let Some(doc) = u.update {
                if u.is_operator_update() {
                    let appends = unbounded_appends(doc);
                    if !appends.is_empty() {
                        // Arrays of child ids are WL502's, with its own advice.
                        let ids: Vec<String> =
                            super::common::pushed_child_ids(doc, op.namespace, cx.namespaces)
                                .into_iter()
                                .map(|(p, _)| p)
                                .collect();
                        candidates.extend(appends.into_iter().filter(|(p, _)| !ids.contains(p)));
                    }
                }
                candidates.extend(rewritten_arrays(doc, u.is_operator_update()));
            }
            if let Some(p) = u.pipeline {
                candidates.extend(unbounded_concats(p));
            }
        }
        for (path, operator) in candidates {
            let count = self.counts.entry(
                (op.namespace.to_string(), op.shape.hash, path.clone()),
                cx.pool,
            );
            *count += 1;
            let count = *count;
            if (count as f64) < cx.threshold(&META, op.namespace, "min_updates") {
                continue;
            }
            let array = cx
                .namespaces
                .get(op.namespace)
                .and_then(|ns| ns.arrays.get(&path));
            let growth = array.map_or(0, |a| a.growth_events);
            let regrowth = array.map_or(0, |a| a.regrowth_events);
            let max_len = array.map_or(0, |a| a.lengths.max);
            let lengths_known = array.is_some_and(|a| a.lengths.count > 0);
            let rewrite = matches!(operator, "$set" | "replacement");
            // A set that every value of its vocabulary has reached.
            let settled = operator == "$addToSet"
                && array.is_some_and(|a| {
                    a.since_growth as f64 >= cx.threshold(&META, op.namespace, "settled_after")
                });
            // A rewritten array is only a problem once seen growing from a
            // length it had (an array filled once, when its document is
            // first saved whole, is not growing); any array only once it is
            // not a small bounded set.
            if settled {
                // Reported while it was still growing, perhaps: withdrawn.
                cx.retract(&META, op.namespace, &path);
                continue;
            }
            if (rewrite && regrowth == 0)
                || (lengths_known
                    && max_len as f64 <= cx.threshold(&META, op.namespace, "small_length"))
            {
                continue;
            }
            // What the documents seen growing reached, not an array inserted
            // long elsewhere in the collection.
            // (A set grown by `$addToSet` replies alone has no known
            // length: the longest seen stands for it.)
            let grown_to = array
                .map(|a| a.grown_to)
                .filter(|&g| g > 0)
                .unwrap_or(max_len);
            let severity = if growth > 0
                && grown_to as f64 >= cx.threshold(&META, op.namespace, "error_length")
            {
                Severity::Error
            } else {
                Severity::Warning
            };
            let mut evidence = BTreeMap::new();
            evidence.insert("operator".into(), json!(operator));
            evidence.insert("updates".into(), json!(count));
            evidence.insert("growth_confirmed".into(), json!(growth > 0));
            evidence.insert("growth_events".into(), json!(growth));
            evidence.insert("max_length_seen".into(), json!(max_len));
            evidence.insert("longest_seen_growing".into(), json!(grown_to));
            let what = match operator {
                "$push" => format!("$push onto `{path}` with no $slice"),
                "$addToSet" => format!(
                    "$addToSet onto `{path}`: every new value grows the set, and nothing bounds it"
                ),
                "$concatArrays" => format!("$concatArrays onto `{path}` with no $slice"),
                "$set" => format!("`{path}` is rewritten whole with $set, longer each time"),
                _ => format!("documents are replaced with `{path}` longer each time"),
            };
            let seen = match (growth, lengths_known) {
                (0, false) => String::new(),
                (0, true) => format!("; the longest seen has {max_len} elements"),
                (g, _) => {
                    // A rewrite counts growth from a length the array had.
                    let g = if rewrite { regrowth } else { g };
                    format!("; the same documents were seen growing {g} times, up to {grown_to} elements")
                }
            };
            cx.report(
                &META,
                FindingDraft::about(
                    op,
                    path.clone(),
                    severity,
                    format!("{what}, {count} updates so far{seen}{}", limit_clause(cx)),
                    evidence,
                ),
            );
        }
    }
}

/// Where the document stops, on a platform whose limit is not MongoDB's
/// 16 MB (its advice names both): a constant per platform, since the
/// message is made again on every update that reports.
fn limit_clause(cx: &RuleContext<'_>) -> &'static str {
    limit_clause_of(cx.target)
}

fn limit_clause_of(target: Target) -> &'static str {
    match target {
        Target::CosmosRu => " (a document stops at 2.0 MiB on Azure Cosmos DB for MongoDB (RU))",
        Target::MongoDb | Target::CosmosVcore | Target::DocumentDb => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    /// The clause is written out per platform; it says what the
    /// platform's limit is.
    #[test]
    fn the_limit_clause_names_the_platform_limit() {
        use crate::analysis::target::{ALL, MONGODB_MAX_DOCUMENT};
        for target in ALL {
            let limit = target.max_document_bytes();
            let want = if limit == MONGODB_MAX_DOCUMENT {
                String::new()
            } else {
                format!(
                    " (a document stops at {} on {})",
                    crate::rules::common::human_bytes(limit),
                    target.title()
                )
            };
            assert_eq!(limit_clause_of(target), want, "{target:?}");
        }
    }

    #[test]
    fn buckets_bound_the_array_through_the_filter() {
        let push = rawdoc! {"$push": {"comments": {"t": 1}}, "$inc": {"count": 1}};
        assert!(is_bucketed(
            Some(&rawdoc! {"postId": 1, "count": {"$lt": 100}}),
            Some(&push)
        ));
        assert!(is_bucketed(
            Some(&rawdoc! {"postId": 1, "comments.99": {"$exists": false}}),
            Some(&push)
        ));
        assert!(!is_bucketed(Some(&rawdoc! {"postId": 1}), Some(&push)));
        assert!(
            !is_bucketed(Some(&rawdoc! {"other": {"$lt": 100}}), Some(&push)),
            "the bound must be on the counter it increments"
        );
    }

    #[test]
    fn bounded_and_unbounded_appends() {
        let u = rawdoc! {"$push": {"comments": {"t": 1}, "recent": {"$each": [1], "$slice": -10}, "log": {"$each": [1, 2]}},
        "$addToSet": {"tags": "x"}, "$inc": {"n": 1}};
        let got = unbounded_appends(&u);
        assert_eq!(
            got,
            vec![
                ("comments".to_string(), "$push"),
                ("log".to_string(), "$push"),
                ("tags".to_string(), "$addToSet")
            ]
        );
        let u = rawdoc! {"$push": {"items.$[i].history": 1, "rows.3.cells": 2}};
        let got: Vec<String> = unbounded_appends(&u).into_iter().map(|(p, _)| p).collect();
        assert_eq!(got, vec!["items.$.history", "rows.$.cells"]);
        let p = bson::rawdoc! {"p": [{"$set": {"c": {"$concatArrays": ["$c", ["x"]]}, "d": {"$slice": [{"$concatArrays": ["$d", ["y"]]}, -5]}}}]};
        assert_eq!(
            unbounded_concats(p.get_array("p").unwrap()),
            vec![("c".to_string(), "$concatArrays")]
        );
    }
}
