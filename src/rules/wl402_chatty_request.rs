//! WL402 chatty-request.
//!
//! An application request needs 3 or more operations per call on
//! average: a pattern the application names (`comment`), or a request
//! rebuilt from the traffic (a root and the operations that take their
//! values from its results, see `analysis::requests`), named by its root.
//! One cause, one finding: a list's per-element follow-ups (WL401's) and
//! counts of what a result holds (WL403's) are not counted, nor batched
//! fetches for a whole list (an `$in` of its references, WL401's fix);
//! of the rest, only the queries sent in most calls, and only when most
//! calls send that many (the median call, not the average a few merged
//! calls raise). A list page that is chatty only because of its N+1 gets
//! the N+1. Also reported, at any number of queries: a read sent again
//! with the same values within a call, in most calls (an access check and
//! a validation that each load the same folder). Also reported: one shape
//! sent several times at once, differing only in a constant, call after
//! call with the same constants (a `Promise.all` of one count per status,
//! see `analysis::bursts`): one `$in` or `$group` answers it. The blogging platform of *How
//! to model and partition data on Azure Cosmos DB using a real-world
//! example*, V1, query Q2, fetches the post, its author's name, its
//! comment count and its like count: four round trips for one page.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::patterns::ChattyShape;
use serde_json::json;
use std::collections::BTreeMap;

/// What to change for each kind of finding (a finding says its own; the
/// rule's advice is all of them).
macro_rules! denormalize {
    () => {
        "Denormalize what the request assembles into the document it reads (e.g. the author's username and the \
         comment and like counts on the post), so one read answers it (the blogging platform, V2)."
    };
}
macro_rules! read_once {
    () => {
        "Read it once per request and pass the document along: a read repeated within one request fetches the \
         same answer again (an access check and a validation that each load the same folder)."
    };
}
macro_rules! one_query {
    () => {
        "Send one query: an $in over the constants, or one $group by that field, answers a query shape sent \
         several times at once that differs only in a constant."
    };
}
macro_rules! one_aggregate {
    () => {
        "Send one aggregate: $match with $in over the constants, $sort, then $group by the field with $first \
         ($topN for more than one). Queries that differ only in a constant and are each cut with a limit (the \
         latest of each kind) cannot be one $in: its limit would cut them all together."
    };
}

pub static CHATTY: RuleMeta = RuleMeta {
    id: "WL402",
    name: "chatty-request",
    severity: Severity::Warning,
    summary: "One request of the application needs several round trips to the database.",
    advice: concat!(
        denormalize!(),
        " ",
        read_once!(),
        " ",
        one_query!(),
        " ",
        one_aggregate!()
    ),
    source: concat!(
        cosmos_real_world!(),
        " (V1 Q2: four operations per post; V2 denormalization)"
    ),
    thresholds: &[
        Threshold {
            name: "min_operations",
            default: 4.0,
            help: "queries per call (beyond what WL401 and WL403 report) from which it is reported",
        },
        Threshold {
            name: "min_calls",
            default: 3.0,
            help: "calls of the pattern before it is judged",
        },
    ],
};

#[derive(Default)]
pub struct ChattyRequest {
    /// Pattern → operations per call last reported (re-reported on change).
    reported: RuleTable<String, String>,
}

impl ChattyRequest {
    /// Reads of one shape sent several at once on call after call with
    /// the same constants, following nothing and led by nothing (see
    /// `analysis::bursts`): one query split in many.
    fn bursts(&mut self, cx: &mut RuleContext<'_>) -> Vec<FindingDraft> {
        let mut drafts = Vec::new();
        for (hash, info) in cx.patterns.shapes.iter() {
            let b = &info.bursts;
            let recurring = b.recurring();
            if info.led
                || b.groups == 0
                || (recurring as f64) < cx.threshold(&CHATTY, &info.namespace, "min_calls")
                || (b.largest as f64) < 3.0
            {
                continue;
            }
            let shape = info.shape.text.to_string();
            let subject = format!("burst {shape}");
            let per_call = b.members as f64 / b.groups as f64;
            let summary = format!("{per_call:.1} {recurring}");
            if self.reported.get(&subject) == Some(&summary) {
                continue;
            }
            self.reported.insert(subject.clone(), summary, cx.pool);
            let pattern = cx
                .patterns
                .patterns
                .iter()
                .find(|(_, p)| p.shapes.contains(hash))
                .map(|(name, _)| name.to_string());
            let mut evidence = BTreeMap::new();
            evidence.insert(
                "sent_at_once".into(),
                json!((per_call * 10.0).round() / 10.0),
            );
            evidence.insert("largest_burst".into(), json!(b.largest));
            evidence.insert("bursts".into(), json!(b.groups));
            evidence.insert("same_constants_again".into(), json!(recurring));
            // Each cut with a limit (the latest of each kind): an `$in`
            // would cut them all together; a `$group` keeps one per value.
            let limited = is_limited(&shape);
            evidence.insert("each_limited".into(), json!(limited));
            let (answer, advice) = if limited {
                (
                    "each is cut with a limit, so not an $in: one aggregate answers them — $match with $in over \
                     the constants, $sort, then $group by that field with $first ($topN for more than one)",
                    one_aggregate!(),
                )
            } else {
                (
                    "one query answers them — an $in, or one $group by that field",
                    one_query!(),
                )
            };
            drafts.push(FindingDraft {
                namespace: info.namespace.clone(),
                subject,
                severity: CHATTY.severity,
                pattern,
                shape: Some(shape.clone()),
                message: format!(
                    "`{shape}` is sent up to {} times at once ({per_call:.1} on average), differing only in a \
                     constant, in {} bursts ({recurring} with the same constants): {answer}",
                    b.largest, b.groups
                ),
                evidence,
                advice: Some(advice),
                saving: None,
            });
        }
        drafts
    }
}

/// Whether a shape's query is cut with a limit: a find's ` limit`, a
/// pipeline's `$limit` (see `analysis::shape`).
fn is_limited(shape: &str) -> bool {
    shape.starts_with("find ") && shape.ends_with(" limit") || shape.contains("{$limit: ")
}

/// Whether a shape is a read (what a request can fetch once and pass
/// along), not a write.
fn is_read(shape: &str) -> bool {
    ["find ", "aggregate ", "count ", "distinct "]
        .iter()
        .any(|k| shape.starts_with(k))
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
            // What remains once WL401 and WL403 have their share (a list's
            // per-element follow-ups, counts of what a result holds) and
            // batched fetches (WL401's fix) are set aside: the queries sent
            // in most calls, each as often as it is sent. Most calls must
            // send that many too: a few calls made of two requests sent
            // together (two pages of one visitor at once) raise the
            // average, not the median.
            let recurring: Vec<&ChattyShape> = p
                .chatty_shapes
                .iter()
                .filter(|c| 2 * c.calls > p.invocations)
                .collect();
            let per_call =
                recurring.iter().map(|c| c.sent).sum::<u64>() as f64 / p.invocations as f64;
            let min_operations = cx.threshold(&CHATTY, namespace, "min_operations");
            let chatty = per_call >= min_operations && p.chatty_median() as f64 >= min_operations;
            // A read asked again with the same values in most calls: the
            // same answer fetched twice, at any number of queries.
            let again: Vec<&ChattyShape> = p
                .chatty_shapes
                .iter()
                .filter(|c| 2 * c.calls_again > p.invocations)
                .filter(|c| {
                    cx.patterns
                        .shapes
                        .get(&c.shape)
                        .is_some_and(|s| is_read(&s.shape.text))
                })
                .collect();
            if (p.invocations as f64) < cx.threshold(&CHATTY, namespace, "min_calls")
                || (!chatty && again.is_empty())
            {
                continue;
            }
            let repeated: Vec<String> = again
                .iter()
                .filter_map(|c| {
                    let shape = cx.patterns.shapes.get(&c.shape)?;
                    Some(format!(
                        "{} (again in {} of {} calls)",
                        shape.shape.text, c.calls_again, p.invocations
                    ))
                })
                .collect();
            let queries: Vec<String> = recurring
                .iter()
                .filter_map(|c| {
                    let shape = cx.patterns.shapes.get(&c.shape)?;
                    let times = c.sent as f64 / p.invocations as f64;
                    Some(if times >= 1.5 {
                        format!("{} (×{times:.1})", shape.shape.text)
                    } else {
                        shape.shape.text.to_string()
                    })
                })
                .collect();
            let sequence: Vec<String> = p
                .sequence
                .iter()
                .filter_map(|h| cx.patterns.shapes.get(h).map(|s| s.shape.text.to_string()))
                .collect();
            let summary = format!("{per_call:.1} {}", repeated.len());
            if self.reported.get(&**name) == Some(&summary) {
                continue;
            }
            self.reported.insert(name.to_string(), summary, cx.pool);
            let all = p.operations as f64 / p.invocations as f64;
            let mut evidence = BTreeMap::new();
            evidence.insert(
                "operations_per_call".into(),
                json!((per_call * 10.0).round() / 10.0),
            );
            evidence.insert(
                "all_operations_per_call".into(),
                json!((all * 10.0).round() / 10.0),
            );
            evidence.insert("calls".into(), json!(p.invocations));
            evidence.insert("batched_fetches".into(), json!(p.batches));
            evidence.insert(
                "explained_by_n_plus_one_or_counts".into(),
                json!(p.explained),
            );
            evidence.insert("queries".into(), json!(queries));
            evidence.insert("repeated_within_a_call".into(), json!(repeated));
            evidence.insert("sequence".into(), json!(sequence));
            evidence.insert("namespaces".into(), json!(p.namespaces));
            drafts.push(FindingDraft {
                namespace: namespace.clone(),
                subject: format!("pattern {name}"),
                severity: CHATTY.severity,
                pattern: Some(name.to_string()),
                shape: None,
                message: if repeated.is_empty() {
                    format!(
                        "`{name}` sends {per_call:.1} queries per call ({} calls; each query below in more than \
                         half of them), {} distinct: {}",
                        p.invocations,
                        queries.len(),
                        queries.join(" · ")
                    )
                } else {
                    format!(
                        "`{name}` reads the same thing more than once per call, with the same values ({} calls): \
                         {}: read it once and pass it along. In all {per_call:.1} queries per call, {} distinct: {}",
                        p.invocations,
                        repeated.join(" · "),
                        queries.len(),
                        queries.join(" · ")
                    )
                },
                advice: Some(if repeated.is_empty() {
                    denormalize!()
                } else {
                    read_once!()
                }),
                evidence,
                saving: None,
            });
        }
        drafts.extend(self.bursts(cx));
        for draft in drafts {
            cx.report(&CHATTY, draft);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{is_limited, is_read};

    #[test]
    fn limits_and_reads_are_told_from_the_shape() {
        assert!(is_limited(
            "find d.entries {type: ?string} sort {date: -1} limit"
        ));
        assert!(is_limited(
            "aggregate d.entries [{$match: {type: ?string}}, {$limit: ?int}]"
        ));
        assert!(!is_limited(
            "find d.entries {type: ?string} sort {date: -1}"
        ));
        assert!(!is_limited("find d.limits {a: ?int}"));
        assert!(is_read("find d.folders {_id: ?objectId} limit"));
        assert!(is_read("count d.items {folderId: ?objectId}"));
        assert!(!is_read(
            "update d.items {_id: ?objectId} {$set: {a: ?int}}"
        ));
    }
}
