//! WL502 growing-reference-array: the "one" side of a one-to-many keeps an
//! array of its children's ids and `$push`es each new one (*Data modeling in Azure Cosmos DB*:
//! `publisher.books: [isbn, …]`). The ids are recognised as `_id`s of
//! documents inserted into another collection of the same database
//! (compared as hashes; a value that merely equals an id elsewhere — a
//! small integer, a common word — in another database is no reference).
//! An array never seen longer than `small_length` is a small bounded set
//! of references (a post's three categories), not reported.

use super::common::pushed_child_ids;
use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::Kind;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL502",
    name: "growing-reference-array",
    severity: Severity::Warning,
    summary: "A parent document keeps an ever-growing array of its children's ids.",
    advice: "Reference from the child side instead: store the parent's id in each child (pub_id in each \
             book) and find the children by it; the parent no longer grows with every child.",
    source: concat!(cosmos_modeling!(), " (publisher.books vs pub_id on each book)"),
    thresholds: &[
        Threshold { name: "min_updates", default: 3.0, help: "pushes of child ids before it is reported" },
        Threshold { name: "small_length", default: 10.0, help: "arrays never seen longer than this are small bounded sets: not reported" },
    ],
};

#[derive(Default)]
pub struct GrowingReferenceArray {
    counts: RuleTable<(String, String), u64>,
}

impl Rule for GrowingReferenceArray {
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
        let mut found = Vec::new();
        for u in op.cmd.updates() {
            if let Some(doc) = u.update.filter(|_| u.is_operator_update()) {
                found.extend(
                    pushed_child_ids(doc, op.namespace, cx.namespaces)
                        .into_iter()
                        .map(|(p, o)| (p, o.to_string())),
                );
            }
        }
        for (path, children) in found {
            let n = self
                .counts
                .entry((op.namespace.to_string(), path.clone()), cx.pool);
            *n += 1;
            let n = *n;
            if (n as f64) < cx.threshold(&META, op.namespace, "min_updates") {
                continue;
            }
            let array = cx
                .namespaces
                .get(op.namespace)
                .and_then(|ns| ns.arrays.get(&path));
            let longest = array.map_or(0, |a| a.lengths.max);
            let lengths_known = array.is_some_and(|a| a.lengths.count > 0);
            if lengths_known && longest as f64 <= cx.threshold(&META, op.namespace, "small_length")
            {
                continue;
            }
            let mut evidence = BTreeMap::new();
            evidence.insert("children_collection".into(), json!(children));
            evidence.insert("pushes".into(), json!(n));
            evidence.insert("longest_array_seen".into(), json!(longest));
            cx.report(
                &META,
                FindingDraft::about(op, path.clone(), META.severity, format!("`{path}` collects the ids of {children} documents, one $push per child ({n} so far)"), evidence),
            );
        }
    }
}
