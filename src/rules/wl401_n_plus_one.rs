//! WL401 n-plus-one: a read returns a list, then the application fetches
//! one document of another collection per element, by a value taken from
//! that list (seed 004 V1 Q4: list a post's comments, then each
//! commenter's username). The engine links the follow-ups to the leading
//! reply by comparing value hashes inside wirelint; no value is kept or
//! shown.

use super::common::RuleTable;
use super::{FindingDraft, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL401",
    name: "n-plus-one",
    severity: Severity::Warning,
    summary: "A list read is followed by one query per element to fetch related documents.",
    advice: "Denormalize what each element needs into it (the blogging platform, V2: the username stored on each comment and \
             like), or fetch the related documents in one query with $in.",
    source: concat!(cosmos_real_world!(), " (V1 Q3–Q6; V2 denormalized usernames)"),
    thresholds: &[Threshold { name: "min_follow_ups", default: 3.0, help: "single-document queries after one list read before it is reported" }],
};

#[derive(Default)]
pub struct NPlusOne {
    /// (namespace, leading shape, field) → most follow-ups after one list.
    most: RuleTable<(String, String, String), u64>,
}

impl Rule for NPlusOne {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let Some(f) = op.follow_up else { return };
        if (f.count as f64) < cx.threshold(&META, op.namespace, "min_follow_ups") {
            return;
        }
        let most = self.most.entry(
            (
                op.namespace.to_string(),
                f.leading_shape.clone(),
                f.field.clone(),
            ),
            cx.pool,
        );
        *most = (*most).max(f.count);
        let most = *most;
        let mut evidence = BTreeMap::new();
        evidence.insert("leading_shape".into(), json!(f.leading_shape));
        evidence.insert("leading_pattern".into(), json!(f.leading_pattern));
        evidence.insert("follow_up_shape".into(), json!(op.shape.text));
        evidence.insert("linking_field".into(), json!(f.field));
        evidence.insert("follow_ups_per_list".into(), json!(most));
        evidence.insert("list_documents".into(), json!(f.leading_docs));
        cx.report(
            &META,
            FindingDraft::about(op, format!("{} → {}.{}", f.leading_namespace, op.namespace, f.field), META.severity, format!(
                    "after a list of {} documents from {}, {} queries fetch one document each from {} by `{}` taken from that list",
                    f.leading_docs, f.leading_namespace, f.count, op.namespace, f.field
                ), evidence),
        );
    }
}
