//! WL404 read-then-write: per incoming item, the application finds a
//! document by a natural key (`{supplierId, sku}`, an email) and then
//! inserts it when nothing was found or updates the document it found —
//! a de-duplication done in the application. That is two round trips where
//! one upsert is one, and a race besides: two writers can both find nothing
//! and both insert. MongoDB's `updateOne` with `upsert: true` on a uniquely
//! indexed key (or `findOneAndUpdate` with `upsert`, when the application
//! needs the document back) lets the server decide insert-or-update.
//!
//! Reported for a read shape on a collection once `min_items` items went
//! read-then-write, at least one of them inserted and one updated: both
//! branches of insert-or-update. A load then a save never inserts (an
//! edit); a check that only ever inserts (a name must be free, else the
//! application refuses or renames) is no insert-or-update an upsert could
//! replace. Silent where the read feeds the write: an update that sets a
//! value the read returned (the previous price kept as history) needs the
//! read.

use super::common::RuleTable;
use super::{
    CompletedOp, DocSource, FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity,
    Threshold,
};
use crate::analysis::command::Kind;
use crate::analysis::namespaces::{value_hash, Doc};
use crate::analysis::shape::fnv1a;
use bson::{RawBsonRef, RawDocument};
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL404",
    name: "read-then-write",
    severity: Severity::Warning,
    summary: "Each item is read by its key, then inserted or updated: two round trips and a race where one upsert does.",
    advice: "Write once and let the server decide: updateOne(filter on the key, {$set: …, $setOnInsert: …}, {upsert: true}) \
             — or findOneAndUpdate with upsert: true when the document is needed back — with a unique index on the key \
             fields, so two writers cannot both insert.",
    source: "MongoDB, “db.collection.updateOne()” (upsert; Upsert with Unique Index); MongoDB, “db.collection.findOneAndUpdate()” (upsert)",
    thresholds: &[Threshold { name: "min_items", default: 3.0, help: "items read then written before it is reported" }],
};

/// Values of a found document remembered to tell a write that copies
/// them (the read feeds it), at most.
const MAX_VALUES: usize = 32;
/// Key fields of a read remembered, at most.
const MAX_KEYS: usize = 8;

/// The last read by a natural key on a collection.
struct LastRead {
    shape: u64,
    /// Its filter's (field, value hash), `_id` excluded.
    keys: Vec<(String, u64)>,
    /// Whether it found a document (known once answered).
    found: Option<bool>,
    /// The found document's `_id` (hashed) and other values, each with
    /// its field's name (hashed).
    id: Option<u64>,
    values: Vec<(u64, u64)>,
}

impl crate::analysis::budget::Weight for LastRead {
    fn weight(&self) -> usize {
        std::mem::size_of::<LastRead>()
            + self.keys.iter().map(|(k, _)| k.len() + 32).sum::<usize>()
            + self.values.capacity() * 16
    }
}

/// What the items of one read shape went on to do.
#[derive(Default)]
struct Items {
    inserted: u64,
    updated: u64,
    /// Updates that set a value the read returned: the read was needed.
    fed: u64,
}

impl crate::analysis::budget::Weight for Items {
    fn weight(&self) -> usize {
        std::mem::size_of::<Items>()
    }
}

#[derive(Default)]
pub struct ReadThenWrite {
    last: RuleTable<String, LastRead>,
    /// (namespace, read shape) → items.
    items: RuleTable<(String, String), Items>,
}

/// A filter's equality values on plain fields (not `_id`, not operators):
/// none when it has anything else, or only `_id`.
fn natural_key(filter: &RawDocument) -> Option<Vec<(String, u64)>> {
    let mut keys = Vec::new();
    for (k, v) in filter.iter().flatten() {
        let k = k.as_str();
        if k.starts_with('$') || keys.len() >= MAX_KEYS {
            return None;
        }
        let v = match v {
            RawBsonRef::Document(d) => d.get("$eq").ok().flatten()?,
            RawBsonRef::Array(_) | RawBsonRef::Null | RawBsonRef::RegularExpression(_) => {
                return None
            }
            v => v,
        };
        if k == "_id" {
            return None;
        }
        keys.push((k.to_string(), value_hash(v)));
    }
    (!keys.is_empty()).then_some(keys)
}

/// Whether `doc` holds every key value.
fn holds(doc: &RawDocument, keys: &[(String, u64)]) -> bool {
    keys.iter().all(|(k, h)| {
        doc.get(k)
            .ok()
            .flatten()
            .is_some_and(|v| value_hash(v) == *h)
    })
}

/// The scalar values an operator update `$set`s, each with its field's
/// name (hashed).
fn set_values(update: &RawDocument) -> Vec<(u64, u64)> {
    let Ok(set) = update.get_document("$set") else {
        return Vec::new();
    };
    set.iter()
        .flatten()
        .filter(|(_, v)| {
            !matches!(
                v,
                RawBsonRef::Document(_) | RawBsonRef::Array(_) | RawBsonRef::Null
            )
        })
        .map(|(k, v)| (fnv1a(k.as_str().as_bytes()), value_hash(v)))
        .collect()
}

/// Whether an update sets a field to what the read returned in another
/// field (`previousPrice` to the found `price`): the read feeds the write.
/// The same value in the same field is only data that did not change (a
/// feed row written whole).
fn fed_by(set: &[(u64, u64)], read: &[(u64, u64)]) -> bool {
    set.iter()
        .any(|(field, value)| read.iter().any(|(f, v)| v == value && f != field))
}

impl ReadThenWrite {
    fn record(
        &mut self,
        namespace: &str,
        shape: &str,
        pattern: &str,
        cx: &mut RuleContext<'_>,
        f: impl FnOnce(&mut Items),
    ) {
        let items = self
            .items
            .entry((namespace.to_string(), shape.to_string()), cx.pool);
        f(items);
        let (inserted, updated, fed) = (items.inserted, items.updated, items.fed);
        let written = inserted + updated;
        if inserted == 0
            || updated == 0
            || (written as f64) < cx.threshold(&META, namespace, "min_items")
            || fed > updated
        {
            return;
        }
        let keys = shape
            .split_once('{')
            .and_then(|(_, rest)| rest.split_once('}'))
            .map_or(String::new(), |(k, _)| k.to_string());
        let mut evidence = BTreeMap::new();
        evidence.insert("read_shape".into(), json!(shape));
        evidence.insert("inserted_after_read".into(), json!(inserted));
        evidence.insert("updated_after_read".into(), json!(updated));
        evidence.insert("updates_fed_by_the_read".into(), json!(fed));
        cx.report(
            &META,
            FindingDraft {
                namespace: namespace.to_string(),
                subject: format!("read then write {{{keys}}}"),
                severity: META.severity,
                // The pattern of the write (the read's is `shape`): the
                // table's row the finding is about.
                pattern: Some(pattern.to_string()),
                shape: Some(shape.to_string()),
                message: format!(
                    "items are found by {{{keys}}}, then inserted when missing ({inserted}) or updated ({updated}): \
                     two round trips per item where one upsert is one, and two writers can both insert"
                ),
                evidence,
                saving: None,
            },
        );
    }
}

impl Rule for ReadThenWrite {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST.and(Hooks::DOCUMENT).and(Hooks::OPERATION)
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let ns = op.namespace;
        match op.cmd.kind {
            Kind::Find => {
                let single = matches!(op.cmd.limit(), Some(-2..=-1) | Some(1..=2));
                match op.cmd.filter().filter(|_| single).and_then(natural_key) {
                    Some(keys) => {
                        self.last.insert(
                            ns.to_string(),
                            LastRead {
                                shape: op.shape.hash,
                                keys,
                                found: None,
                                id: None,
                                // Charged whole when inserted.
                                values: Vec::with_capacity(MAX_VALUES),
                            },
                            cx.pool,
                        );
                    }
                    None if !self.last.is_empty() => {
                        self.last.remove(ns);
                    }
                    None => {}
                }
            }
            Kind::Insert => {
                let Some(read) = self.last.remove(ns) else {
                    return;
                };
                if read.found != Some(false) {
                    return;
                }
                if op.cmd.documents().into_iter().any(|d| holds(d, &read.keys)) {
                    let shape = shape_text(cx, read.shape);
                    self.record(ns, &shape, op.pattern, cx, |i| i.inserted += 1);
                }
            }
            Kind::Update | Kind::FindAndModify => {
                let Some(read) = self.last.remove(ns) else {
                    return;
                };
                let [u] = op.cmd.updates() else {
                    return;
                };
                if read.found != Some(true) || u.upsert || u.multi {
                    return;
                }
                let Some(filter) = u.filter else {
                    return;
                };
                let by_id = filter
                    .get("_id")
                    .ok()
                    .flatten()
                    .is_some_and(|v| Some(value_hash(v)) == read.id);
                if !by_id && !holds(filter, &read.keys) {
                    return;
                }
                let fed = u
                    .update
                    .filter(|_| u.is_operator_update())
                    .is_some_and(|d| fed_by(&set_values(d), &read.values));
                let shape = shape_text(cx, read.shape);
                self.record(ns, &shape, op.pattern, cx, |i| {
                    if fed {
                        i.fed += 1;
                    } else {
                        i.updated += 1;
                    }
                });
            }
            _ => {}
        }
    }

    fn on_document(
        &mut self,
        op: &OpView<'_>,
        doc: &Doc<'_>,
        source: DocSource,
        _cx: &mut RuleContext<'_>,
    ) {
        if source != DocSource::Returned || self.last.is_empty() {
            return;
        }
        let Some(read) = self.last.get_mut(op.namespace) else {
            return;
        };
        if read.shape != op.shape.hash || read.id.is_some() {
            return;
        }
        for (k, v) in doc.raw.iter().flatten() {
            if k == "_id" {
                read.id = Some(value_hash(v));
            } else if read.values.len() < MAX_VALUES
                && !read.keys.iter().any(|(key, _)| key.as_str() == k.as_str())
                && !matches!(
                    v,
                    RawBsonRef::Document(_) | RawBsonRef::Array(_) | RawBsonRef::Null
                )
            {
                read.values
                    .push((fnv1a(k.as_str().as_bytes()), value_hash(v)));
            }
        }
    }

    fn on_operation(&mut self, done: &CompletedOp<'_>, _cx: &mut RuleContext<'_>) {
        if done.op.cmd.kind != Kind::Find || self.last.is_empty() {
            return;
        }
        if let Some(read) = self.last.get_mut(done.op.namespace) {
            if read.shape == done.op.shape.hash && read.found.is_none() {
                read.found = Some(done.docs_returned > 0);
            }
        }
    }
}

/// The text of the shape hashed `hash`, as the pattern table knows it.
fn shape_text(cx: &RuleContext<'_>, hash: u64) -> String {
    cx.patterns
        .shapes
        .get(&hash)
        .map_or_else(|| format!("{hash:016x}"), |s| s.shape.text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    /// A natural key is plain equalities, not `_id`, not operators.
    #[test]
    fn natural_keys_are_plain_equalities() {
        let keys = |d: bson::RawDocumentBuf| natural_key(&d).map(|k| k.len());
        assert_eq!(keys(rawdoc! {"supplierId": "s1", "sku": "A-1"}), Some(2));
        assert_eq!(keys(rawdoc! {"email": {"$eq": "a@b.c"}}), Some(1));
        assert_eq!(keys(rawdoc! {"_id": 3}), None);
        assert_eq!(keys(rawdoc! {"sku": "A", "_id": 3}), None);
        assert_eq!(keys(rawdoc! {"price": {"$gt": 3}}), None);
        assert_eq!(keys(rawdoc! {"$or": [{"a": 1}]}), None);
        assert_eq!(keys(rawdoc! {}), None);
    }

    #[test]
    fn set_values_are_the_scalars_set() {
        let u = rawdoc! {"$set": {"price": 3, "name": "x", "tags": ["a"]}, "$inc": {"n": 1}};
        assert_eq!(set_values(&u).len(), 2);
        assert!(set_values(&rawdoc! {"$inc": {"n": 1}}).is_empty());
        // The found price kept as the previous one feeds the write; the
        // same name written again does not.
        let read = set_values(&rawdoc! {"$set": {"price": 100, "name": "x"}});
        assert!(fed_by(
            &set_values(&rawdoc! {"$set": {"previousPrice": 100}}),
            &read
        ));
        assert!(!fed_by(
            &set_values(&rawdoc! {"$set": {"name": "x", "price": 90}}),
            &read
        ));
    }
}
