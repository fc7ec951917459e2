//! WL402 chatty-request.
//!
//! An application request needs 3 or more operations per call on
//! average: a pattern the application names (`comment`), or a request
//! rebuilt from the traffic (a root and the operations that take their
//! values from its results, see `analysis::requests`), named by its root.
//! Batched fetches for a whole list (an `$in` of its references, WL401's
//! fix) are not counted. The blogging platform of *How
//! to model and partition data on Azure Cosmos DB using a real-world
//! example*, V1, query Q2, fetches the post, its author's name, its
//! comment count and its like count: four round trips for one page.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, Rule, RuleContext, RuleMeta, Severity, Threshold};
use serde_json::json;
use std::collections::BTreeMap;

pub static CHATTY: RuleMeta = RuleMeta {
    id: "WL402",
    name: "chatty-request",
    severity: Severity::Warning,
    summary: "One request of the application needs several round trips to the database.",
    advice: "Denormalize what the request assembles into the document it reads (e.g. the author's username and the \
             comment and like counts on the post), so one read answers it (the blogging platform, V2).",
    source: concat!(cosmos_real_world!(), " (V1 Q2: four operations per post; V2 denormalization)"),
    thresholds: &[
        Threshold { name: "min_operations", default: 3.0, help: "operations per call from which it is reported" },
        Threshold { name: "min_calls", default: 3.0, help: "calls of the pattern before it is judged" },
    ],
};

#[derive(Default)]
pub struct ChattyRequest {
    /// Pattern → operations per call last reported (re-reported on change).
    reported: RuleTable<String, String>,
}

impl Rule for ChattyRequest {
    fn meta(&self) -> &'static RuleMeta {
        &CHATTY
    }

    fn hooks(&self) -> Hooks {
        Hooks::TICK
    }

    fn on_tick(&mut self, cx: &mut RuleContext<'_>) {
        let mut drafts = Vec::new();
        for (name, p) in cx.patterns.patterns.iter() {
            if p.invocations == 0 {
                continue;
            }
            let Some(namespace) = p.namespaces.first() else {
                continue;
            };
            // A batched fetch for a whole list (one `$in` per referenced
            // collection, as `populate` or `select_related` send) is
            // WL401's fix, not chattiness: not counted.
            let per_call = p.operations.saturating_sub(p.batches) as f64 / p.invocations as f64;
            if (p.invocations as f64) < cx.threshold(&CHATTY, namespace, "min_calls")
                || per_call < cx.threshold(&CHATTY, namespace, "min_operations")
            {
                continue;
            }
            let sequence: Vec<String> = p
                .sequence
                .iter()
                .filter_map(|h| cx.patterns.shapes.get(h).map(|s| s.shape.text.to_string()))
                .collect();
            let summary = format!("{per_call:.1}");
            if self.reported.get(&**name) == Some(&summary) {
                continue;
            }
            self.reported.insert(name.to_string(), summary, cx.pool);
            let mut evidence = BTreeMap::new();
            evidence.insert(
                "operations_per_call".into(),
                json!((per_call * 10.0).round() / 10.0),
            );
            evidence.insert("calls".into(), json!(p.invocations));
            evidence.insert("batched_fetches".into(), json!(p.batches));
            evidence.insert("sequence".into(), json!(sequence));
            evidence.insert("namespaces".into(), json!(p.namespaces));
            drafts.push(FindingDraft {
                namespace: namespace.clone(),
                subject: format!("pattern {name}"),
                severity: CHATTY.severity,
                pattern: Some(name.to_string()),
                shape: None,
                message: format!(
                    "`{name}` needs {per_call:.1} operations per call ({} calls): {}",
                    p.invocations,
                    sequence
                        .iter()
                        .map(|s| s.split(' ').next().unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join(" → ")
                ),
                evidence,
            });
        }
        for draft in drafts {
            cx.report(&CHATTY, draft);
        }
    }
}
