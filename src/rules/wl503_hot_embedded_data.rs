//! WL503 hot-embedded-data: the same embedded value is updated across many
//! documents (a multi-document update on an embedded path), and often.
//! *Data modeling in Azure Cosmos DB*: a stock's price embedded in every user's holdings, so each
//! price tick rewrites every holder. A rare fan-out update (a username
//! copied into many documents changes) is information; a frequent one is a
//! warning.

use super::common::RuleTable;
use super::{CompletedOp, FindingDraft, Hooks, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::fold_path;
use crate::analysis::command::Kind;
use bson::RawBsonRef;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL503",
    name: "hot-embedded-data",
    severity: Severity::Warning,
    summary: "A value embedded in many documents is updated in all of them, often.",
    advice: "Reference data that changes often instead of embedding it (holdings refer to the stock, whose \
             price lives in one document); embed only data that rarely changes.",
    source: concat!(cosmos_modeling!(), " (stock holdings: embed what changes rarely, reference what changes often)"),
    thresholds: &[
        Threshold { name: "min_documents", default: 10.0, help: "documents an update must touch to count as a fan-out" },
        Threshold { name: "min_updates", default: 5.0, help: "fan-out updates of the same paths from which it is a warning" },
    ],
};

#[derive(Default)]
pub struct HotEmbeddedData {
    /// (namespace, paths) → (fan-out updates, documents touched).
    seen: RuleTable<(String, String), (u64, u64)>,
}

impl Rule for HotEmbeddedData {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::OPERATION
    }

    fn on_operation(&mut self, done: &CompletedOp<'_>, cx: &mut RuleContext<'_>) {
        let op = done.op;
        if op.cmd.kind != Kind::Update || !done.ok {
            return;
        }
        let Some(n) = done.matched else { return };
        let namespace = op.namespace;
        if (n as f64) < cx.threshold(&META, namespace, "min_documents") {
            return;
        }
        let mut paths: Vec<String> = Vec::new();
        for u in op
            .cmd
            .updates()
            .iter()
            .filter(|u| u.multi && u.is_operator_update())
        {
            let Some(doc) = u.update else { continue };
            for (_, fields) in doc.iter().flatten() {
                if let RawBsonRef::Document(fields) = fields {
                    for (path, _) in fields.iter().flatten() {
                        if path.as_str().contains('.') {
                            paths.push(fold_path(path.as_str()).into_owned());
                        }
                    }
                }
            }
        }
        if paths.is_empty() {
            return;
        }
        paths.sort();
        paths.dedup();
        let subject = paths.join(", ");
        let entry = self
            .seen
            .entry((namespace.to_string(), subject.clone()), cx.pool);
        entry.0 += 1;
        entry.1 += n as u64;
        let (updates, touched) = *entry;
        let severity = if (updates as f64) >= cx.threshold(&META, namespace, "min_updates") {
            Severity::Warning
        } else {
            Severity::Info
        };
        let mut evidence = BTreeMap::new();
        evidence.insert("fan_out_updates".into(), json!(updates));
        evidence.insert("documents_touched".into(), json!(touched));
        evidence.insert("paths".into(), json!(paths));
        cx.report(
            &META,
            FindingDraft {
                namespace: namespace.to_string(),
                subject: subject.clone(),
                severity,
                pattern: Some(op.pattern.to_string()),
                shape: Some(op.shape.text.to_string()),
                message: format!(
                    "embedded `{subject}` updated in many documents at once: {updates} updates touched {touched} documents"
                ),
                evidence,
                advice: None,
                saving: None,
            },
        );
    }
}
