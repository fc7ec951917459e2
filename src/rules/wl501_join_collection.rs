//! WL501 join-collection: a collection whose documents are just two
//! references (plus `_id`), read by one of them and followed by lookups of
//! the other — a relational join table (the many-to-many between authors and
//! books of *Data modeling in Azure Cosmos DB*).

use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::Kind;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL501",
    name: "join-collection",
    severity: Severity::Warning,
    summary: "A collection holds only pairs of references and is used as a join table.",
    advice: "Model the many-to-many with arrays of ids on both sides (authors with book ids, books with author \
             ids), or embed the few fields shown with each side (the hybrid model: author name and thumbnail on the book).",
    source: concat!(cosmos_modeling!(), " (many-to-many: join collection vs id arrays; hybrid model)"),
    thresholds: &[Threshold { name: "min_follow_ups", default: 3.0, help: "lookups after one read of the join collection before it is reported" }],
};

#[derive(Default)]
pub struct JoinCollection {
    reported: RuleTable<String, u64>,
}

/// Whether most documents seen in `namespace` are two references + `_id`:
/// two scalar fields, each an ObjectId or binary (UUID) by type or named
/// as a reference (`author_id`, `bookId`, `userRef`). A list view's
/// `{title, authorId}` is not a join table.
pub fn is_join_shaped(cx: &RuleContext<'_>, namespace: &str) -> Option<Vec<String>> {
    let ns = cx.namespaces.get(namespace)?;
    let shapes = ns.shapes();
    let top = shapes.first()?;
    let dominant = top.count * 10 >= ns.documents_seen * 9;
    if !dominant || !top.all_scalar {
        return None;
    }
    let mut fields = Vec::new();
    for (i, field) in top.fields.iter().enumerate() {
        if field == "_id" {
            continue;
        }
        let by_type = i < 64 && top.id_typed >> i & 1 == 1;
        if !by_type && !reference_name(field) {
            return None;
        }
        fields.push(field.clone());
    }
    (fields.len() == 2).then_some(fields)
}

/// A field named as a reference: ends in `id`, `ids` or `ref`, in any
/// case and spelling (`author_id`, `bookId`, `userRef`).
fn reference_name(field: &str) -> bool {
    let f = field.to_ascii_lowercase();
    f.ends_with("id") || f.ends_with("ids") || f.ends_with("ref")
}

impl Rule for JoinCollection {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let Some(f) = op.follow_up else { return };
        if op.cmd.kind != Kind::Find
            || (f.count as f64) < cx.threshold(&META, &f.leading_namespace, "min_follow_ups")
        {
            return;
        }
        let Some(fields) = is_join_shaped(cx, &f.leading_namespace) else {
            return;
        };
        let n = self.reported.entry(f.leading_namespace.clone(), cx.pool);
        *n += 1;
        let mut evidence = BTreeMap::new();
        evidence.insert("fields".into(), json!(fields));
        evidence.insert("looked_up_in".into(), json!(op.namespace));
        evidence.insert("lookups_per_read".into(), json!(f.count));
        cx.report(
            &META,
            FindingDraft {
                namespace: f.leading_namespace.clone(),
                subject: "(join collection)".into(),
                severity: META.severity,
                pattern: Some(op.pattern.to_string()),
                shape: Some(f.leading_shape.clone()),
                message: format!(
                    "documents hold only `{}` and `{}`; each read is followed by lookups in {} ({} after one read)",
                    fields[0], fields[1], op.namespace, f.count
                ),
                evidence,
                advice: None,
                saving: None,
            },
        );
    }
}
