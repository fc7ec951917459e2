//! WL403 count-on-read (the blogging platform's V1 Q2 in
//! *How to model and partition data on Azure Cosmos DB using a real-world example*).
//!
//! Within one request of the application (an access pattern it names, or
//! a request rebuilt from the traffic: the count takes its value from a
//! result of the request, see `analysis::requests`), a count of child
//! documents by a parent's id (`count`, `countDocuments`' `$group: {$sum:
//! 1}`, `$count`) issued alongside reads of other data — the count is
//! computed again on every read instead of kept on write.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::Kind;
use crate::analysis::partition::{equality_paths, filters};
use crate::wire::bson_walk::{field, values, Value};
use serde_json::json;
use std::collections::BTreeMap;

pub static COUNT: RuleMeta = RuleMeta {
    id: "WL403",
    name: "count-on-read",
    severity: Severity::Warning,
    summary: "A count of child documents is computed on every read of their parent.",
    advice: "Keep the count in the parent and update it when a child is written (pre-computed aggregate: \
             the blogging platform's commentCount / likeCount, incremented when a comment or like is written; a publisher's countOfBooks).",
    source: concat!(cosmos_real_world!(), " (V1 Q2 counts; V2 commentCount); ", cosmos_modeling!(), " (countOfBooks)"),
    thresholds: &[Threshold { name: "min_calls", default: 3.0, help: "counts seen with the same read before it is reported" }],
};

/// Whether an operation counts documents: `count`, or a pipeline with
/// `$count` or a `$group` summing 1 (what drivers send for countDocuments).
pub fn is_count(op: &OpView<'_>) -> bool {
    match op.cmd.kind {
        Kind::Count => true,
        Kind::Aggregate => op.cmd.pipeline().is_some_and(counts_in),
        _ => false,
    }
}

/// Whether a pipeline counts: a `$count` stage, or a `$group` summing 1.
fn counts_in(pipeline: &[u8]) -> bool {
    values(pipeline)
        .map_while(Result::ok)
        .filter_map(|stage| stage.as_document())
        .any(|stage| {
            field(stage, b"$count").is_some()
                || field(stage, b"$group")
                    .filter(|g| g.element_type == 0x03)
                    .is_some_and(|g| {
                        values(g.value).map_while(Result::ok).any(|acc| match acc {
                            Value::Document(a) => field(a, b"$sum").is_some_and(|s| {
                                matches!(s.read(), Value::Int32(1) | Value::Int64(1))
                            }),
                            _ => false,
                        })
                    })
        })
}

/// Namespaces remembered per pattern as read alongside the counts.
const MAX_READ_NAMESPACES: usize = 64;

#[derive(Default)]
pub struct CountOnRead {
    /// Pattern → (count namespace, field) → counts seen.
    counts: RuleTable<String, RuleTable<(String, String), u64>>,
    /// Pattern → namespaces it reads other than by counting.
    reads: RuleTable<String, RuleTable<String, ()>>,
}

impl Rule for CountOnRead {
    fn meta(&self) -> &'static RuleMeta {
        &COUNT
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        if !op.cmd.kind.is_read() {
            return;
        }
        if !is_count(op) {
            let read = self.reads.entry_ref(op.pattern, cx.pool);
            if read.len() < MAX_READ_NAMESPACES {
                read.insert(op.namespace.to_string(), (), cx.pool);
            }
            return;
        }
        let mut fields: Vec<String> = filters(op.cmd)
            .into_iter()
            .flat_map(equality_paths)
            .filter(|f| f != "_id")
            .collect();
        // Children are counted by their parent's id: when some counted field
        // is named like a reference (postId, author_id), the others are
        // discriminators or flags (type: "comment"), not parents.
        let is_ref = |f: &String| {
            let last = f.rsplit('.').next().unwrap_or(f);
            last.len() > 2
                && (last.ends_with("Id")
                    || last.ends_with("ID")
                    || last.to_ascii_lowercase().ends_with("_id"))
        };
        if fields.iter().any(is_ref) {
            fields.retain(is_ref);
        }
        for field in fields {
            let n = self
                .counts
                .entry_ref(op.pattern, cx.pool)
                .entry((op.namespace.to_string(), field.clone()), cx.pool);
            *n += 1;
            let n = *n;
            let parents: Vec<String> = self
                .reads
                .get(op.pattern)
                .map(|r| r.keys().filter(|ns| *ns != op.namespace).cloned().collect())
                .unwrap_or_default();
            if parents.is_empty() || (n as f64) < cx.threshold(&COUNT, op.namespace, "min_calls") {
                continue;
            }
            let mut evidence = BTreeMap::new();
            evidence.insert("counted_by".into(), json!(field));
            evidence.insert("counts".into(), json!(n));
            evidence.insert("read_alongside".into(), json!(parents));
            cx.report(
                &COUNT,
                FindingDraft::about(op, field.clone(), COUNT.severity, format!(
                        "documents are counted by `{field}` on every `{}` call ({n} so far), alongside reads of {}",
                        op.pattern,
                        parents.join(", ")
                    ), evidence),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    /// A `$count` stage or a `$group` summing 1 counts; a sum of a field,
    /// or a pipeline that only filters, does not.
    #[test]
    fn counts_in_recognises_counting_pipelines() {
        let counts = |d: bson::RawDocumentBuf| counts_in(d.get_array("p").unwrap().as_bytes());
        assert!(counts(
            rawdoc! {"p": [{"$match": {"postId": 1}}, {"$count": "n"}]}
        ));
        assert!(counts(
            rawdoc! {"p": [{"$group": {"_id": "$postId", "n": {"$sum": 1}}}]}
        ));
        assert!(counts(
            rawdoc! {"p": [{"$group": {"_id": null, "n": {"$sum": 1i64}}}]}
        ));
        assert!(!counts(
            rawdoc! {"p": [{"$group": {"_id": "$postId", "t": {"$sum": "$likes"}}}]}
        ));
        assert!(!counts(
            rawdoc! {"p": [{"$match": {"postId": 1}}, {"$limit": 5}]}
        ));
        assert!(!counts(rawdoc! {"p": []}));
    }
}
