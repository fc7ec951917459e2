//! WL405 tree-walk (MongoDB's *Model Tree Structures*: *with Parent
//! References*, *with an Array of Ancestors*, *with Materialized Paths*).
//!
//! A tree stored as parent references only (each folder names its
//! `parentId`) is climbed one read per level: a breadcrumb, a permission
//! inherited from the root, a path shown on every page. The engine links
//! each read of exactly `{_id: v}` to the single document read before it
//! on the connection when `v` is one of its references
//! (`parent_walk::ParentWalk`); a chain of `min_depth` such reads through
//! the same field, seen `min_walks` times, is reported. One level (a
//! folder and its parent) is not a walk; documents that already carry an
//! array of ancestors or a materialized path are read otherwise.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL405",
    name: "tree-walk",
    severity: Severity::Warning,
    summary: "A tree stored as parent references is climbed one read per level.",
    advice: "Store each node's ancestors with it — an array of ancestors (`ancestors: [rootId, …, parentId]`, indexed) or a \
             materialized path (`path: \",root,…,parent,\"`) — so the whole path is one query ({_id: {$in: ancestors}}) \
             and the subtree one indexed match, instead of one read per level.",
    source: "MongoDB, “Model Tree Structures” (with Parent References; with an Array of Ancestors; with Materialized Paths)",
    thresholds: &[
        Threshold { name: "min_depth", default: 3.0, help: "reads, each of the document the previous one named, that make a walk" },
        Threshold { name: "min_walks", default: 3.0, help: "walks of that depth seen before it is reported" },
    ],
};

/// One parent field of one namespace.
#[derive(Default)]
struct Walks {
    /// Walks that reached `min_depth`.
    walks: u64,
    deepest: u32,
}

impl crate::analysis::budget::Weight for Walks {
    fn weight(&self) -> usize {
        std::mem::size_of::<Walks>()
    }
}

#[derive(Default)]
pub struct TreeWalk {
    /// (namespace, parent field) → walks.
    walks: RuleTable<(String, String), Walks>,
}

impl Rule for TreeWalk {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let Some(step) = op.walk else { return };
        if step.ancestors {
            return;
        }
        let min_depth = cx.threshold(&META, op.namespace, "min_depth").max(2.0) as u32;
        if step.depth < min_depth {
            return;
        }
        let w = self
            .walks
            .entry((op.namespace.to_string(), step.field.clone()), cx.pool);
        if step.depth == min_depth {
            w.walks += 1;
        }
        w.deepest = w.deepest.max(step.depth);
        let (walks, deepest) = (w.walks, w.deepest);
        if (walks as f64) < cx.threshold(&META, op.namespace, "min_walks") {
            return;
        }
        let mut evidence = BTreeMap::new();
        evidence.insert("parent_field".into(), json!(step.field));
        evidence.insert("walks".into(), json!(walks));
        evidence.insert("deepest".into(), json!(deepest));
        cx.report(
            &META,
            FindingDraft::about(
                op,
                step.field.clone(),
                META.severity,
                format!(
                    "a tree is climbed one read per level: {walks} walks of {min_depth} or more reads of {} by `_id`, \
                     each the `{}` of the document read before (deepest {deepest})",
                    op.namespace, step.field
                ),
                evidence,
            ),
        );
    }
}
