//! WL403 count-on-read (the blogging platform's V1 Q2 in
//! *How to model and partition data on Azure Cosmos DB using a real-world example*).
//!
//! Within one request of the application (an access pattern it names, or
//! a request rebuilt from the traffic: the count takes its value from a
//! result of the request, see `analysis::requests`), a count of child
//! documents by a parent's id (`count`, `countDocuments`' `$group: {$sum:
//! 1}`, `$count`) issued alongside reads of other data — the count is
//! computed again on every read instead of kept on write.
//!
//! Reads only, and per parent only. Not count-on-read:
//! - a count with the very filter (values and all) of a list read in the
//!   same request, before it or after it: that list's total (a page's
//!   `Total-Count`; paginators count first);
//! - a count in a request that also writes the counted collection
//!   (progress totals of a copy or delete, "is this blob still shared?"
//!   before deleting a record): a write path;
//! - a count its parent's document stores right after (an update of the
//!   parent by the `_id` it was counted by: a user's reuses counted and
//!   saved in the user's metrics when a reuse is written): the counter
//!   kept on write, as advised;
//! - a count keyed by the context of a list it follows (a value every
//!   listed document carries: the course's threads after its reviews),
//!   asked once per list;
//! - a count whose filter is no fixed predicate (a range, a pattern, an
//!   `$or`): the position of a document in a sorted list, what came
//!   since a date — no counter kept on the parent answers it.

use super::common::RuleTable;
use super::{
    FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, SavedPer, Severity, Threshold,
};
use crate::analysis::namespaces::value_hash;
use crate::analysis::partition::{equality_paths, filters};
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

/// Whether an operation counts documents (see `Command::counts`).
pub fn is_count(op: &OpView<'_>) -> bool {
    op.cmd.counts()
}

/// Namespaces remembered per pattern as read alongside the counts.
const MAX_READ_NAMESPACES: usize = 64;

#[derive(Default)]
pub struct CountOnRead {
    /// Pattern → (count namespace, field) → counts seen, and the requests
    /// that carried them (the last one's id, how many).
    counts: RuleTable<String, RuleTable<(String, String), Carried>>,
    /// Pattern → namespaces it reads other than by counting.
    reads: RuleTable<String, RuleTable<String, ()>>,
    /// Pattern → the namespaces it writes.
    writes: RuleTable<String, RuleTable<String, ()>>,
    /// The latest reads other than counts: (request, hash of namespace and
    /// filter), newest last: a count with the very filter of a read of its
    /// request is that read's total.
    recent_reads: std::collections::VecDeque<(u64, u64)>,
    /// The latest counts, newest last.
    recent_counts: std::collections::VecDeque<RecentCount>,
    /// Operations seen, for how recent a count is.
    ops: u64,
    /// Count shapes shown to be a list's total or a counter kept on write
    /// by what came after them.
    settled: RuleTable<u64, ()>,
}

/// Reads remembered for totals, at most.
const RECENT_READS: usize = 256;

/// Counts remembered until their request shows what they were for.
const RECENT_COUNTS: usize = 16;

/// Operations after a count within which a write of its parent stores it.
const STORED_WITHIN: u64 = 8;

/// A count, until what follows it shows what it was for.
struct RecentCount {
    /// Its request, and a hash of its namespace and filter (values and all).
    request: u64,
    filter: u64,
    /// Its key in `settled`.
    count: u64,
    /// A hash of the parent's id it counts by (0 for none).
    parent: u64,
    /// `ops` when it was seen.
    at: u64,
}

#[derive(Clone, Copy, Default)]
struct Carried {
    counts: u64,
    last_request: Option<u64>,
    requests: u64,
}

impl crate::analysis::budget::Weight for Carried {
    fn weight(&self) -> usize {
        std::mem::size_of::<Carried>()
    }
}

/// Whether a count's filter is a fixed predicate, one a counter kept on
/// the parent can stand for: equalities (and `$in`, `$ne`, `$exists`),
/// no range, pattern or alternative. A count of what sorts before a
/// document (Girder's item position: `{folderId, $or: [{lowerName: {$lt:
/// …}}, …]}`) or of what came since a date depends on the read's own
/// parameter: no stored count answers it.
fn fixed_predicate(filter: &[u8], depth: usize) -> bool {
    use crate::wire::bson_walk::{elements, values, Value};
    const VARYING: [&[u8]; 7] = [
        b"$lt",
        b"$lte",
        b"$gt",
        b"$gte",
        b"$regex",
        b"$near",
        b"$geoWithin",
    ];
    elements(filter).map_while(Result::ok).all(|e| match e.key {
        b"$and" if depth < 4 => match e.read() {
            Value::Array(a) => values(a).map_while(Result::ok).all(|b| match b {
                Value::Document(d) => fixed_predicate(d, depth + 1),
                _ => true,
            }),
            _ => true,
        },
        k if k.first() == Some(&b'$') => false,
        _ => match (e.element_type, e.read()) {
            (0x0B, _) => false,
            (_, Value::Document(d)) => elements(d)
                .map_while(Result::ok)
                .all(|op| !VARYING.contains(&op.key)),
            _ => true,
        },
    })
}

/// A read's request, with a hash of its namespace and its filter (values
/// and all): what a list and its total share.
fn filter_key(op: &OpView<'_>, filter: Option<&bson::RawDocument>) -> Option<(u64, u64)> {
    let filter = filter?;
    let h = crate::analysis::hash::fnv1a(op.namespace.as_bytes());
    Some((
        op.request?,
        h ^ crate::analysis::hash::fnv1a(filter.as_bytes()),
    ))
}

impl CountOnRead {
    /// Marks the recent counts `which` picks as settled (not on read), and
    /// forgets them.
    fn settle(&mut self, which: impl Fn(&RecentCount) -> bool, cx: &mut RuleContext<'_>) {
        while let Some(i) = self.recent_counts.iter().position(&which) {
            if let Some(c) = self.recent_counts.remove(i) {
                self.settled.insert(c.count, (), cx.pool);
            }
        }
    }
}

impl Rule for CountOnRead {
    fn meta(&self) -> &'static RuleMeta {
        &COUNT
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        self.ops += 1;
        if op.cmd.kind.is_write() {
            // A count stored in its parent right after (`$set` of the
            // parent's document, by its `_id`): the counter kept on write.
            let id = (!self.recent_counts.is_empty())
                .then(|| filters(op.cmd).first()?.get("_id").ok().flatten())
                .flatten()
                .map(value_hash);
            if let Some(id) = id {
                let since = self.ops.saturating_sub(STORED_WITHIN);
                self.settle(|c| c.parent == id && c.at >= since, cx);
            }
            let known = self
                .writes
                .get(op.pattern)
                .is_some_and(|w| w.contains_key(op.namespace));
            if !known {
                let written = self.writes.entry_ref(op.pattern, cx.pool);
                if written.len() < MAX_READ_NAMESPACES {
                    written.insert(op.namespace.to_string(), (), cx.pool);
                }
            }
            return;
        }
        if !op.cmd.kind.is_read() {
            return;
        }
        if !is_count(op) {
            let known = self
                .reads
                .get(op.pattern)
                .is_some_and(|r| r.contains_key(op.namespace));
            if !known {
                let read = self.reads.entry_ref(op.pattern, cx.pool);
                if read.len() < MAX_READ_NAMESPACES {
                    read.insert(op.namespace.to_string(), (), cx.pool);
                }
            }
            // A list's total has the list's filter (a detail read has none).
            let list = crate::analysis::follow_ups::is_list_read(op.cmd);
            if let Some(key) = filter_key(op, filters(op.cmd).first().copied()).filter(|_| list) {
                // A count before it with its filter was its total.
                self.settle(|c| (c.request, c.filter) == key, cx);
                if self.recent_reads.len() >= RECENT_READS {
                    self.recent_reads.pop_front();
                }
                self.recent_reads.push_back(key);
            }
            return;
        }
        // Parsed once: a pipeline's first `$match` is found by a walk.
        let filters = filters(op.cmd);
        let key = filter_key(op, filters.first().copied());
        let total = key.is_some_and(|k| self.recent_reads.contains(&k));
        let written = self
            .writes
            .get(op.pattern)
            .is_some_and(|w| w.contains_key(op.namespace));
        let fixed = filters
            .first()
            .is_none_or(|f| fixed_predicate(f.as_bytes(), 0));
        if op.context || total || written || !fixed {
            return;
        }
        let mut fields: Vec<String> = filters
            .iter()
            .flat_map(|f| equality_paths(f))
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
        // A flag or a missing value (`deleted: null`, `archived: false`)
        // selects among the children; it names no parent.
        let flag = |f: &String| {
            filters.iter().any(|d| {
                matches!(
                    d.get(f).ok().flatten(),
                    Some(bson::RawBsonRef::Null | bson::RawBsonRef::Boolean(_))
                )
            })
        };
        fields.retain(|f| !flag(f));
        // Settled by shape, wherever it is sent: a count that saving a
        // child stores in its parent is sent again when nothing changed,
        // and then nothing is written.
        let count = op.shape.hash;
        if let Some((request, filter)) = key {
            if self.recent_counts.len() >= RECENT_COUNTS {
                self.recent_counts.pop_front();
            }
            let parent = fields
                .first()
                .and_then(|f| filters.first()?.get(f).ok().flatten())
                .map_or(0, value_hash);
            self.recent_counts.push_back(RecentCount {
                request,
                filter,
                count,
                parent,
                at: self.ops,
            });
        }
        if self.settled.contains_key(&count) {
            return;
        }
        for field in fields {
            let c = self
                .counts
                .entry_ref(op.pattern, cx.pool)
                .entry((op.namespace.to_string(), field.clone()), cx.pool);
            c.counts += 1;
            if op.request.is_none() || c.last_request != op.request {
                c.last_request = op.request;
                c.requests += 1;
            }
            let (n, carried) = (c.counts, c.requests);
            let calls = cx
                .patterns
                .get(op.pattern)
                .map_or(0, |p| p.invocations)
                .max(carried);
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
            evidence.insert("calls_with_count".into(), json!(carried));
            evidence.insert("calls".into(), json!(calls));
            evidence.insert("read_alongside".into(), json!(parents));
            // Under request units: a counter kept in the document already
            // read costs nothing more to read; the counts cost what they
            // were estimated at.
            let per_count = if cx.target.request_units() {
                cx.patterns
                    .shapes
                    .get(&op.shape.hash)
                    .filter(|s| s.priced > 0)
                    .map_or(0.0, |s| s.request_units / s.priced as f64)
            } else {
                0.0
            };
            let saved = cx
                .request_units_saved(per_count * n as f64 / carried.max(1) as f64, SavedPer::Call);
            cx.report(
                &COUNT,
                FindingDraft::about(op, field.clone(), COUNT.severity, format!(
                        "documents are counted by `{field}` in {carried} of {calls} calls of `{}` ({n} counts), alongside its reads of {}",
                        op.pattern,
                        parents.join(", ")
                    ), evidence)
                .with_saving(saved),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixed_predicate;
    use bson::rawdoc;

    #[test]
    fn only_fixed_predicates_can_be_kept_as_a_counter() {
        let fixed = |d: bson::RawDocumentBuf| fixed_predicate(d.as_bytes(), 0);
        assert!(fixed(rawdoc! {"postId": "p1", "type": "comment"}));
        assert!(fixed(
            rawdoc! {"threadId": 3, "deleted": {"$ne": true}, "flag": {"$exists": true}}
        ));
        assert!(fixed(rawdoc! {"$and": [{"a": 1}, {"b": {"$in": [1, 2]}}]}));
        // The position of an item in its folder, sorted by name.
        assert!(!fixed(
            rawdoc! {"folderId": 1, "$or": [{"lowerName": {"$lt": "m"}}, {"lowerName": "m", "_id": {"$lt": 4}}]}
        ));
        assert!(!fixed(
            rawdoc! {"userId": 1, "created": {"$gte": bson::DateTime::now()}}
        ));
        assert!(!fixed(
            rawdoc! {"name": bson::Regex { pattern: "^a".try_into().unwrap(), options: "".try_into().unwrap() }}
        ));
        assert!(!fixed(rawdoc! {"$and": [{"a": 1}, {"b": {"$gt": 2}}]}));
    }
}
