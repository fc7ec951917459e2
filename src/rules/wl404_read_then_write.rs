//! WL404 read-then-write: per incoming item, the application finds a
//! document by a natural key (`{supplierId, sku}`, an email) and then
//! writes by what it found — a de-duplication done in the application.
//!
//! - **Insert or update**: inserted when nothing was found, the found
//!   document updated otherwise. Two round trips where one upsert is one,
//!   and a race besides: two writers can both find nothing and both
//!   insert. MongoDB's `updateOne` with `upsert: true` on a uniquely indexed
//!   key (or `findOneAndUpdate` with `upsert`, when the application needs
//!   the document back) lets the server decide insert-or-update. Reported
//!   once `min_items` items went read-then-write, at least one inserted and
//!   one updated.
//! - **Get or create** (subscribe to a thread, follow a user, a name that
//!   must be free): inserted when nothing was found, nothing written when
//!   something was. A race unless a unique index on the key refuses the
//!   second insert, so it is judged by the collection's unique indexes
//!   (`analysis::indexes`): silent when one covers the key's fields, a
//!   warning when every index is known and none does, and a note (info)
//!   when the indexes were not seen, saying so rather than guessing.
//!   Reported once `min_items` items were inserted or left as found, at
//!   least one of each, and none updated.
//!
//! A natural key is plain equalities (not `_id`), or an `$or` of such
//! branches (found by one identifier or by another): an item is the
//! branch's when a write holds every value of one branch; a unique index
//! covers an `$or` key when it covers every branch. A load then a save
//! never inserts (an edit). A delete or drop of the collection between
//! the read and the insert ends the read: the insert no longer answers
//! what it missed. Silent where the read feeds the write: an
//! update that sets a value the read returned (the previous price kept as
//! history) needs the read.

use super::common::RuleTable;
use super::{
    CompletedOp, DocSource, FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity,
    Threshold,
};
use crate::analysis::command::Kind;
use crate::analysis::indexes::Cover;
use crate::analysis::namespaces::{value_hash, Doc};
use crate::analysis::shape::fnv1a;
use bson::{RawBsonRef, RawDocument};
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL404",
    name: "read-then-write",
    severity: Severity::Warning,
    summary: "Each item is read by its key, then inserted when missing: two round trips and a race where one upsert with a unique index does.",
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
/// Branches of an `$or` natural key, at most.
const MAX_BRANCHES: usize = 4;

/// One way a read names an item: (field, value hash) pairs, `_id`
/// excluded.
type Key = Vec<(String, u64)>;

/// The last read by a natural key on a collection.
struct LastRead {
    shape: u64,
    /// Its filter's key, or the branches of its `$or`.
    keys: Vec<Key>,
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
            + self
                .keys
                .iter()
                .flatten()
                .map(|(k, _)| k.len() + 32)
                .sum::<usize>()
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
    /// Found, and nothing written by their key after.
    kept: u64,
}

impl crate::analysis::budget::Weight for Items {
    fn weight(&self) -> usize {
        std::mem::size_of::<Items>()
    }
}

#[derive(Default)]
pub struct ReadThenWrite {
    last: RuleTable<String, LastRead>,
    /// (namespace, read shape), hashed → items.
    items: RuleTable<(u64, u64), Items>,
}

/// A filter's natural key: its equality values on plain fields (not
/// `_id`, not operators), or the branches of an `$or` that is its only
/// field, each such a key. None when it has anything else, or only `_id`.
fn natural_key(filter: &RawDocument) -> Option<Vec<Key>> {
    if crate::wire::bson_walk::first_key(filter.as_bytes()) != Some(b"$or") {
        return plain_key(filter).map(|k| vec![k]);
    }
    let mut fields = filter.iter().flatten();
    if let (Some(("$or", RawBsonRef::Array(branches))), None) =
        (fields.next().map(|(k, v)| (k.as_str(), v)), fields.next())
    {
        let mut keys = Vec::new();
        for branch in branches {
            let RawBsonRef::Document(branch) = branch.ok()? else {
                return None;
            };
            if keys.len() == MAX_BRANCHES {
                return None;
            }
            keys.push(plain_key(branch)?);
        }
        return (!keys.is_empty()).then_some(keys);
    }
    None
}

/// A filter's equality values on plain fields: none when it has anything
/// else, or only `_id`.
fn plain_key(filter: &RawDocument) -> Option<Key> {
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

/// Whether `doc` holds every value of one of the keys.
fn holds(doc: &RawDocument, keys: &[Key]) -> bool {
    keys.iter().any(|key| {
        key.iter().all(|(k, h)| {
            doc.get(k)
                .ok()
                .flatten()
                .is_some_and(|v| value_hash(v) == *h)
        })
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
    /// Counts an item of `read`'s shape by `f` and reports the shape when
    /// its items make the case (see the module's words).
    fn record(
        &mut self,
        namespace: &str,
        read: &LastRead,
        pattern: &str,
        cx: &mut RuleContext<'_>,
        f: impl FnOnce(&mut Items),
    ) {
        let items = self.items_of(namespace, read, cx);
        f(items);
        let Items {
            inserted,
            updated,
            fed,
            kept,
        } = *items;
        let min_items = cx.threshold(&META, namespace, "min_items");
        // Any update makes it an insert-or-update (silent when the reads
        // fed the updates); none, a get-or-create.
        let shown = if updated + fed > 0 {
            (inserted + updated) as f64 >= min_items && fed <= updated
        } else {
            kept > 0 && (inserted + kept) as f64 >= min_items
        };
        if inserted == 0 || !shown {
            return;
        }
        let shape = shape_text(cx, read.shape);
        let keys = shape
            .split_once('{')
            .and_then(|(_, rest)| rest.rsplit_once('}'))
            .map_or(String::new(), |(k, _)| k.to_string());
        let mut evidence = BTreeMap::new();
        evidence.insert("read_shape".into(), json!(shape));
        evidence.insert("inserted_after_read".into(), json!(inserted));
        let (subject, severity, message) = if updated + fed > 0 {
            evidence.insert("updated_after_read".into(), json!(updated));
            evidence.insert("updates_fed_by_the_read".into(), json!(fed));
            (
                format!("read then write {{{keys}}}"),
                META.severity,
                format!(
                    "items are found by {{{keys}}}, then inserted when missing ({inserted}) or updated ({updated}): \
                     two round trips per item where one upsert is one, and two writers can both insert"
                ),
            )
        } else {
            // By the fields of every branch: each must be covered.
            let covers: Vec<Cover> = read
                .keys
                .iter()
                .map(|key| {
                    let fields: Vec<&str> = key.iter().map(|(f, _)| f.as_str()).collect();
                    cx.indexes.covers(namespace, &fields)
                })
                .collect();
            let (severity, indexes) = if covers.iter().all(|c| *c == Cover::Unique) {
                return;
            } else if covers.contains(&Cover::Unknown) {
                (
                    Severity::Info,
                    "wirelint has seen neither a unique index created on this collection nor a listing of its \
                     indexes (no listIndexes or drop of it went by): unless a unique index covers the key, two \
                     writers can both find nothing and both insert",
                )
            } else if covers.contains(&Cover::Partly) {
                (
                    Severity::Info,
                    "none of the unique indexes seen created on this collection covers the key, and its others \
                     are not known (no listIndexes or drop of it went by): unless a unique index covers the key, \
                     two writers can both find nothing and both insert",
                )
            } else {
                (
                    Severity::Warning,
                    "no unique index covers the key (its indexes were seen): two writers can both find nothing \
                     and both insert, and nothing refuses the second",
                )
            };
            evidence.insert("left_as_found".into(), json!(kept));
            evidence.insert(
                "unique_index".into(),
                json!(if severity == Severity::Info {
                    "unknown"
                } else {
                    "none"
                }),
            );
            (
                format!("get or create {{{keys}}}"),
                severity,
                format!(
                    "items are found by {{{keys}}}, then inserted when missing ({inserted}) and left as found ({kept}); \
                     {indexes}"
                ),
            )
        };
        cx.report(
            &META,
            FindingDraft {
                namespace: namespace.to_string(),
                subject,
                severity,
                // The pattern of the write (the read's is `shape`): the
                // table's row the finding is about.
                pattern: Some(pattern.to_string()),
                shape: Some(shape),
                message,
                evidence,
                advice: None,
                saving: None,
            },
        );
    }

    /// The last read on `namespace` is done with and nothing wrote its
    /// item: when it found a document, the item was left as found.
    fn retire(&mut self, namespace: &str, cx: &mut RuleContext<'_>) {
        let Some(read) = self.last.remove(namespace) else {
            return;
        };
        if read.found == Some(true) {
            // Counted, not reported: a finding names its writes' pattern.
            self.items_of(namespace, &read, cx).kept += 1;
        }
    }

    /// The items of `read`'s shape on `namespace`.
    fn items_of(&mut self, namespace: &str, read: &LastRead, cx: &RuleContext<'_>) -> &mut Items {
        self.items
            .entry((fnv1a(namespace.as_bytes()), read.shape), cx.pool)
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
        if self.last.is_empty() && !matches!(op.cmd.kind, Kind::Find) {
            return;
        }
        match op.cmd.kind {
            Kind::Find => {
                let single = matches!(op.cmd.limit(), Some(-2..=-1) | Some(1..=2));
                let keys = op.cmd.filter().filter(|_| single).and_then(natural_key);
                if !self.last.is_empty() {
                    self.retire(ns, cx);
                }
                if let Some(keys) = keys {
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
            }
            Kind::Insert => {
                let holds_key = self.last.get(ns).is_some_and(|read| {
                    op.cmd.documents().into_iter().any(|d| holds(d, &read.keys))
                });
                if !holds_key {
                    // Another item's document: this read's stays open.
                    return;
                }
                let Some(read) = self.last.remove(ns) else {
                    return;
                };
                if read.found == Some(false) {
                    self.record(ns, &read, op.pattern, cx, |i| i.inserted += 1);
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
                self.record(ns, &read, op.pattern, cx, |i| {
                    if fed {
                        i.fed += 1;
                    } else {
                        i.updated += 1;
                    }
                });
            }
            // The collection's items were removed since the read: what it
            // found (or missed) is over, and a later insert of its key
            // starts anew (a suite's tests empty their collections between
            // them, and a test may insert the very key an earlier one
            // missed).
            Kind::Delete | Kind::Drop => {
                self.last.remove(ns);
            }
            // (Every open read, not only its database's: a drop is rare,
            // and a read it ends wrongly only loses one item's count.)
            Kind::DropDatabase => self.last.clear(),
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
                && !read
                    .keys
                    .iter()
                    .flatten()
                    .any(|(key, _)| key.as_str() == k.as_str())
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

    /// A natural key is plain equalities, not `_id`, not operators, or an
    /// `$or` alone of such branches.
    #[test]
    fn natural_keys_are_plain_equalities() {
        let keys = |d: bson::RawDocumentBuf| {
            natural_key(&d).map(|k| k.iter().map(|b| b.len()).collect::<Vec<_>>())
        };
        assert_eq!(
            keys(rawdoc! {"supplierId": "s1", "sku": "A-1"}),
            Some(vec![2])
        );
        assert_eq!(keys(rawdoc! {"email": {"$eq": "a@b.c"}}), Some(vec![1]));
        assert_eq!(keys(rawdoc! {"_id": 3}), None);
        assert_eq!(keys(rawdoc! {"sku": "A", "_id": 3}), None);
        assert_eq!(keys(rawdoc! {"price": {"$gt": 3}}), None);
        assert_eq!(
            keys(rawdoc! {"$or": [{"identifier": "x"}, {"created_at": 1, "eventType": "Bolus"}]}),
            Some(vec![1, 2])
        );
        assert_eq!(keys(rawdoc! {"$or": [{"a": 1}, {"_id": 2}]}), None);
        assert_eq!(keys(rawdoc! {"$or": [{"a": 1}], "b": 2}), None);
        assert_eq!(keys(rawdoc! {"$or": []}), None);
        assert_eq!(keys(rawdoc! {}), None);
        // A document holds an `$or` key when it holds one branch whole.
        let or =
            natural_key(&rawdoc! {"$or": [{"identifier": "x"}, {"at": 1, "type": "B"}]}).unwrap();
        assert!(holds(&rawdoc! {"identifier": "x", "at": 9}, &or));
        assert!(holds(
            &rawdoc! {"identifier": "y", "at": 1, "type": "B"},
            &or
        ));
        assert!(!holds(&rawdoc! {"identifier": "y", "at": 1}, &or));
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
