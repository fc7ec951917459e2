//! N+1 linking: which queries fetch, per element of a list the application
//! just read, documents of another collection by a value taken from that
//! element. A [`ListRead`] is the last list read on a connection (its whole
//! cursor: getMore batches extend it) as hashes of its documents' values,
//! each with the field it came from and the document it was in; a later
//! query [`ListRead::link`]s to it when its filter matches such a value.
//!
//! Provenance decides, not coincidence:
//! - a link names the listed documents' field and the filter's field; the
//!   list's own `_id` used as another collection's `_id` is a one-to-one
//!   split, not a reference, and does not link;
//! - a follow-up is *per element* when its values all come from one listed
//!   document: an equality (`{authorId: v}`), or an `$in` / `$or` of one
//!   element's values (its tags) when the list had several elements. An
//!   `$in` gathering values of several elements is the batched fetch (what
//!   Mongoose `populate` sends) — the fix, not the problem;
//! - follow-ups may return any number of documents.
//!
//! Values are hashed inside wirelint; none is kept. The hashing waits
//! until a query could follow up: a list's reply batches are held as they
//! came (shared with the reply, not copied, charged to the connections
//! pool) and indexed when the next find on the connection asks; most lists
//! are never followed up and are never hashed.

use super::budget::short_key;
use super::command::{Command, Kind, Reply};
use super::knowledge::RequestOrigin;
use super::namespaces::value_hash;
use crate::wire::Message;
use bson::{RawBsonRef, RawDocument};
use bytes::Bytes;
use std::collections::HashMap;
use std::time::{Duration, Instant};

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// (value hash, field, document) entries kept per list, at most.
pub const MAX_LEAD_VALUES: usize = 4096;
/// Fields told apart per list, at most (values of others are not kept).
const MAX_LEAD_FIELDS: usize = 64;
/// Follow-up links counted per list, at most.
pub const MAX_FOLLOW_UPS: usize = 64;
/// Follow-ups must come this soon after the list's last batch.
pub const FOLLOW_UP_WINDOW: Duration = Duration::from_secs(2);
/// Scalars of one array field hashed per document, at most.
const ARRAY_ELEMENTS: usize = 256;
/// `$or` branches and `$in` values looked at in a follow-up's filter.
const FILTER_VALUES: usize = 256;
/// Reply bytes a list holds unindexed, at most; past this its batches are
/// indexed as they come.
pub const MAX_HELD_BYTES: usize = 1 << 20;

/// The last list read on a connection.
pub struct ListRead {
    pub at: Instant,
    pub origin: RequestOrigin,
    pub docs: u64,
    /// (value hash, field index in `fields`, document index), sorted: one
    /// value may sit in several fields and documents (post 3's `_id`, post
    /// 0's `tagIds`).
    values: Vec<(u64, u8, u32)>,
    fields: Vec<String>,
    /// (follow-up namespace, filter field, source field) → per-element
    /// follow-ups so far.
    follow_ups: FastMap<(String, String, String), u64>,
    /// Reply batches not indexed yet, with the index of their first
    /// document (see the module docs).
    held: Vec<(Bytes, u32)>,
    held_bytes: usize,
}

/// A per-element follow-up of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The follow-up's filter field.
    pub field: String,
    /// The listed documents' field its value came from.
    pub source_field: String,
    /// Per-element follow-ups with this link after this list so far.
    pub count: u64,
}

/// Whether a read is a list read (a find or aggregate that is not a
/// single-document lookup): what leads an N+1.
pub fn is_list_read(cmd: &Command<'_>) -> bool {
    match cmd.kind {
        Kind::Aggregate => true,
        Kind::Find => !is_single_lookup(cmd),
        _ => false,
    }
}

fn is_single_lookup(cmd: &Command<'_>) -> bool {
    matches!(cmd.limit(), Some(1) | Some(-1))
        || cmd
            .filter()
            .is_some_and(|f| super::partition::pins_by_equality(f, "_id"))
}

/// What one filter field asks for.
struct Asked<'a> {
    field: String,
    values: Vec<RawBsonRef<'a>>,
    /// `$in` or `$or`: several values at once (any `$in` is the batched
    /// form, even of one value).
    batched: bool,
}

impl ListRead {
    pub fn new(at: Instant, origin: RequestOrigin) -> ListRead {
        ListRead {
            at,
            origin,
            docs: 0,
            values: Vec::new(),
            fields: Vec::new(),
            follow_ups: FastMap::default(),
            held: Vec::new(),
            held_bytes: 0,
        }
    }

    /// Reply bytes held unindexed.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Adds a batch of the list's `docs` documents by holding its `reply`
    /// (a cursor reply: find, aggregate, getMore) until a query could
    /// follow up; false (nothing done) when that would hold more than
    /// [`MAX_HELD_BYTES`].
    pub fn hold(&mut self, at: Instant, reply: &Bytes, docs: usize) -> bool {
        if self.held_bytes + reply.len() > MAX_HELD_BYTES {
            return false;
        }
        self.at = at;
        self.held
            .push((reply.clone(), self.docs.min(u32::MAX as u64) as u32));
        self.held_bytes += reply.len();
        self.docs += docs as u64;
        true
    }

    /// Hashes the held batches' values (what `add` does as they come) and
    /// lets the replies go.
    pub fn index_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let before = self.values.len();
        for (reply, first) in std::mem::take(&mut self.held) {
            if self.full() {
                break;
            }
            let Ok(message) = Message::parse(&reply) else {
                continue;
            };
            let Some(cursor) = Reply::parse(&message).and_then(|r| r.cursor()) else {
                continue;
            };
            for (i, doc) in cursor.documents.iter().enumerate() {
                self.index(doc, first.saturating_add(i as u32));
            }
        }
        self.held_bytes = 0;
        self.settle(before);
    }

    /// Bytes it may hold at most (charged while it lives).
    pub fn max_bytes(origin: &RequestOrigin) -> usize {
        std::mem::size_of::<ListRead>()
            + MAX_LEAD_VALUES * std::mem::size_of::<(u64, u8, u32)>()
            + MAX_LEAD_FIELDS * (super::budget::MAX_KEY + 24)
            + MAX_FOLLOW_UPS * (3 * super::budget::MAX_KEY + 80)
            + origin.pattern.len()
            + origin.shape.text.len()
            + origin.namespace.len()
    }

    /// Adds a batch of the list's documents (the first, or a getMore's).
    pub fn add(&mut self, at: Instant, docs: &[&RawDocument]) {
        self.at = at;
        let before = self.values.len();
        for doc in docs {
            let index = self.docs.min(u32::MAX as u64) as u32;
            self.docs += 1;
            if !self.full() {
                self.index(doc, index);
            }
        }
        self.settle(before);
    }

    /// Whether it holds as many values as it may: the documents of a long
    /// cursor past that point are counted, not walked.
    fn full(&self) -> bool {
        self.values.len() >= MAX_LEAD_VALUES
    }

    /// Sorts the values added since there were `before` of them into the
    /// rest (sorted already), in one pass from the back: a batch costs its
    /// own values and the moves its merge needs, not a sort of the whole
    /// list. Entries of different documents never compare equal (each
    /// document has its own index), so only the new ones are deduplicated.
    fn settle(&mut self, before: usize) {
        if self.values.len() == before {
            return;
        }
        let mut new = self.values.split_off(before);
        new.sort_unstable();
        new.dedup();
        let (mut old, mut added) = (before, new.len());
        self.values.resize(before + added, (0, 0, 0));
        let mut at = self.values.len();
        while added > 0 {
            at -= 1;
            if old > 0 && self.values[old - 1] > new[added - 1] {
                old -= 1;
                self.values[at] = self.values[old];
            } else {
                added -= 1;
                self.values[at] = new[added];
            }
        }
    }

    /// Hashes one listed document's values (left unsorted).
    fn index(&mut self, doc: &RawDocument, index: u32) {
        for (k, v) in doc.iter().flatten() {
            match v {
                RawBsonRef::Array(a) => {
                    for e in a.into_iter().flatten().take(ARRAY_ELEMENTS) {
                        self.keep(k.as_str(), e, index);
                    }
                }
                // One level down: a DBRef's `$id`, `author: {id, name}`.
                RawBsonRef::Document(d) => {
                    for (sub, e) in d.iter().flatten() {
                        self.keep(&format!("{}.{}", k.as_str(), sub.as_str()), e, index);
                    }
                }
                v => self.keep(k.as_str(), v, index),
            }
        }
    }

    fn keep(&mut self, field: &str, v: RawBsonRef<'_>, doc: u32) {
        if matches!(v, RawBsonRef::Document(_) | RawBsonRef::Array(_))
            || self.values.len() >= MAX_LEAD_VALUES
        {
            return;
        }
        let field = short_key(field);
        let index = match self.fields.iter().position(|f| *f == field) {
            Some(i) => i,
            None if self.fields.len() < MAX_LEAD_FIELDS => {
                self.fields.push(field.into_owned());
                self.fields.len() - 1
            }
            None => return,
        };
        self.values.push((value_hash(v), index as u8, doc));
    }

    /// Where a value was in the list: its (hash, field, document) entries.
    fn sources(&self, v: RawBsonRef<'_>) -> &[(u64, u8, u32)] {
        let h = value_hash(v);
        let start = self.values.partition_point(|e| e.0 < h);
        let end = self.values.partition_point(|e| e.0 <= h);
        &self.values[start..end]
    }

    /// Links a query on `namespace` with `filter` to this list when it is a
    /// per-element follow-up (see the module docs).
    pub fn link(&mut self, namespace: &str, filter: &RawDocument) -> Option<Link> {
        if *namespace == *self.origin.namespace {
            return None;
        }
        self.index_held();
        let (field, source) = asked(filter)
            .into_iter()
            .find_map(|a| self.one_element(&a).map(|s| (a.field, s)))?;
        let field = short_key(&field).into_owned();
        let source_field = self.fields[source as usize].clone();
        let key = (
            short_key(namespace).into_owned(),
            field.clone(),
            source_field.clone(),
        );
        if self.follow_ups.len() >= MAX_FOLLOW_UPS && !self.follow_ups.contains_key(&key) {
            return None;
        }
        let count = self.follow_ups.entry(key).or_default();
        *count += 1;
        Some(Link {
            field,
            source_field,
            count: *count,
        })
    }

    /// The source field through which what `a` asks for came from one
    /// listed element, if any. An equality: any element holding the value.
    /// A batch: one element must hold every value, and the list must have
    /// several elements with the values not shared between them (with one
    /// element, or one value two posts share, a per-element `$in` and the
    /// batched fetch of the whole list look the same: not linked). The
    /// list's own `_id` as another collection's `_id` never links.
    fn one_element(&self, a: &Asked<'_>) -> Option<u8> {
        let first = self.sources(*a.values.first()?);
        let mut candidates: Vec<u8> = first.iter().map(|e| e.1).collect();
        candidates.sort_unstable();
        candidates.dedup();
        candidates.into_iter().find(|&source| {
            if a.field == "_id" && self.fields[source as usize] == "_id" {
                return false;
            }
            let mut docs: Vec<u32> = first
                .iter()
                .filter(|e| e.1 == source)
                .map(|e| e.2)
                .collect();
            if !a.batched {
                return true;
            }
            if self.docs < 2 || (a.values.len() == 1 && docs.len() > 1) {
                return false;
            }
            for v in &a.values[1..] {
                let here = self.sources(*v);
                docs.retain(|d| here.iter().any(|e| e.1 == source && e.2 == *d));
                if docs.is_empty() {
                    return false;
                }
            }
            true
        })
    }
}

/// What a filter asks for, field by field: its top-level fields, then the
/// fields of its `$and` / `$or` branches (Spring Data resolves a list of
/// references as an `$or` of `_id`s: one batch per field).
fn asked(filter: &RawDocument) -> Vec<Asked<'_>> {
    let mut out: Vec<Asked<'_>> = Vec::new();
    for (k, v) in filter.iter().flatten() {
        match (k.as_str(), v) {
            (op @ ("$or" | "$and"), RawBsonRef::Array(branches)) => {
                let mut by_field: Vec<Asked<'_>> = Vec::new();
                for b in branches
                    .into_iter()
                    .flatten()
                    .filter_map(RawBsonRef::as_document)
                    .take(FILTER_VALUES)
                {
                    for (bk, bv) in b.iter().flatten() {
                        let Some(mut one) = field_asks(bk.as_str(), bv) else {
                            continue;
                        };
                        match by_field.iter_mut().find(|x| x.field == one.field) {
                            Some(x) => {
                                x.values.append(&mut one.values);
                                x.batched |= op == "$or";
                            }
                            None => by_field.push(one),
                        }
                    }
                }
                out.extend(by_field);
            }
            (k, v) => out.extend(field_asks(k, v)),
        }
    }
    out
}

fn field_asks<'a>(field: &str, v: RawBsonRef<'a>) -> Option<Asked<'a>> {
    if field.starts_with('$') {
        return None;
    }
    let (values, batched) = match v {
        RawBsonRef::Document(d) => {
            if let Ok(Some(v)) = d.get("$eq") {
                (vec![v], false)
            } else if let Ok(values) = d.get_array("$in") {
                let values: Vec<_> = values.into_iter().flatten().take(FILTER_VALUES).collect();
                (values, true)
            } else {
                return None;
            }
        }
        RawBsonRef::Array(_) => return None,
        v => (vec![v], false),
    };
    (!values.is_empty()).then(|| Asked {
        field: field.to_string(),
        values,
        batched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::knowledge::ShapeFacts;
    use crate::analysis::shape::Shape;
    use bson::rawdoc;

    fn list_read(docs: &[bson::RawDocumentBuf]) -> ListRead {
        let origin = RequestOrigin::new(ShapeFacts {
            pattern: "list".into(),
            named_by: crate::analysis::patterns::NamedBy::Shape,
            shape: Shape::new("find blog.posts {}".into()),
            namespace: "blog.posts".into(),
            whole: true,
        });
        let mut l = ListRead::new(Instant::now(), origin);
        let refs: Vec<&RawDocument> = docs.iter().map(|d| d.as_ref()).collect();
        l.add(Instant::now(), &refs);
        l
    }

    /// The same list, its replies held (two batches: a find and a
    /// getMore) instead of indexed as they come.
    fn held_list_read(docs: &[bson::RawDocumentBuf]) -> ListRead {
        let mut l = list_read(&[]);
        for (i, batch) in docs.chunks(1).enumerate() {
            let mut array = bson::RawArrayBuf::new();
            for d in batch {
                array.push(d.clone());
            }
            let cursor = if i == 0 {
                rawdoc! {"id": 0_i64, "ns": "blog.posts", "firstBatch": array}
            } else {
                rawdoc! {"id": 0_i64, "ns": "blog.posts", "nextBatch": array}
            };
            let body = rawdoc! {"cursor": cursor, "ok": 1.0};
            let frame = Bytes::from(crate::wire::op_msg::encode(2, 1, 0, body.as_bytes(), &[]));
            assert!(l.hold(Instant::now(), &frame, batch.len()));
        }
        assert!(l.held_bytes() > 0);
        l
    }

    #[test]
    fn held_batches_link_like_indexed_ones() {
        let mut l = held_list_read(&posts());
        assert_eq!(l.docs, 2);
        let a = l.link("blog.users", &rawdoc! {"_id": 100}).unwrap();
        assert_eq!(
            (a.field.as_str(), a.source_field.as_str()),
            ("_id", "authorId")
        );
        assert_eq!(l.held_bytes(), 0, "indexed when a query asked");
        // The batch of every author (values of two documents) is not a
        // follow-up; one post's tags are.
        assert_eq!(
            l.link("blog.users", &rawdoc! {"_id": {"$in": [100, 101]}}),
            None
        );
        assert_eq!(
            l.link("blog.tags", &rawdoc! {"_id": {"$in": [8, 9]}})
                .unwrap()
                .source_field,
            "tagIds"
        );
        // Past the cap, a batch is refused (the caller indexes it).
        let big = Bytes::from(vec![0u8; MAX_HELD_BYTES + 1]);
        assert!(!l.hold(Instant::now(), &big, 1));
    }

    fn posts() -> Vec<bson::RawDocumentBuf> {
        vec![
            rawdoc! {"_id": 1, "authorId": 100, "tagIds": [7, 8], "author": {"$ref": "users", "$id": 100}},
            rawdoc! {"_id": 2, "authorId": 101, "tagIds": [8, 9]},
        ]
    }

    #[test]
    fn per_element_follow_ups_link_by_provenance() {
        let mut l = list_read(&posts());
        // The author by reference, the comments by the post's id.
        let a = l.link("blog.users", &rawdoc! {"_id": 100}).unwrap();
        assert_eq!(
            (a.field.as_str(), a.source_field.as_str(), a.count),
            ("_id", "authorId", 1)
        );
        let c = l
            .link("blog.comments", &rawdoc! {"postId": {"$eq": 2}})
            .unwrap();
        assert_eq!(
            (c.field.as_str(), c.source_field.as_str()),
            ("postId", "_id")
        );
        // One post's tags by $in, and a Spring Data-style $or of _ids.
        let t = l
            .link("blog.tags", &rawdoc! {"_id": {"$in": [8, 9]}})
            .unwrap();
        assert_eq!(t.source_field, "tagIds");
        let o = l
            .link("blog.tags", &rawdoc! {"$or": [{"_id": 7}, {"_id": 8}]})
            .unwrap();
        assert_eq!((o.source_field.as_str(), o.count), ("tagIds", 2));
    }

    #[test]
    fn batches_same_keys_and_strangers_do_not_link() {
        let mut l = list_read(&posts());
        // populate: every author at once; or the one author two posts
        // share.
        assert_eq!(
            l.link("blog.users", &rawdoc! {"_id": {"$in": [100, 101]}}),
            None
        );
        let mut shared = list_read(&[
            rawdoc! {"_id": 1, "authorId": 5},
            rawdoc! {"_id": 2, "authorId": 5},
        ]);
        assert_eq!(
            shared.link("blog.users", &rawdoc! {"_id": {"$in": [5]}}),
            None
        );
        // The list's own _id as another collection's _id (a 1:1 split).
        assert_eq!(l.link("blog.stats", &rawdoc! {"_id": 1}), None);
        // A value the list does not hold; the list's own collection.
        assert_eq!(l.link("blog.users", &rawdoc! {"_id": 555}), None);
        assert_eq!(l.link("blog.posts", &rawdoc! {"authorId": 100}), None);
        // With one listed document, an $in is indistinguishable from a
        // batch: not linked; an equality is.
        let mut one = list_read(&posts()[..1]);
        assert_eq!(
            one.link("blog.users", &rawdoc! {"_id": {"$in": [100]}}),
            None
        );
        assert!(one.link("blog.users", &rawdoc! {"_id": 100}).is_some());
    }

    /// A long cursor's batches, indexed as they come and held then
    /// indexed, keep the values exactly as one sort of them all would
    /// (sorted, no duplicate); past the cap documents are counted, not
    /// walked.
    #[test]
    fn batches_merge_into_the_sorted_values_and_stop_at_the_cap() {
        let batch = |first: i32| -> Vec<bson::RawDocumentBuf> {
            (first..first + 10)
                .map(|i| rawdoc! {"_id": i, "authorId": i % 7, "tags": [i, i, i + 1]})
                .collect()
        };
        let mut l = list_read(&batch(0));
        let mut first = 10;
        while !l.full() {
            let docs = batch(first);
            let refs: Vec<&RawDocument> = docs.iter().map(|d| d.as_ref()).collect();
            // What the batch brings, hashed apart (same field order, so
            // the same field numbers), then one sort of everything.
            let mut expected = l.values.clone();
            let mut alone = list_read(&batch(0));
            alone.values.clear();
            for (i, d) in refs.iter().enumerate() {
                alone.index(d, first as u32 + i as u32);
            }
            // (A batch that meets the cap is taken in part.)
            let whole = expected.len() + alone.values.len() < MAX_LEAD_VALUES;
            expected.extend(alone.values);
            expected.sort_unstable();
            expected.dedup();
            l.add(Instant::now(), &refs);
            if whole {
                assert_eq!(l.values, expected, "after the batch at {first}");
            }
            first += 10;
        }
        assert!(l.values.windows(2).all(|w| w[0] < w[1]));
        let values = l.values.clone();
        let docs = batch(first);
        let refs: Vec<&RawDocument> = docs.iter().map(|d| d.as_ref()).collect();
        l.add(Instant::now(), &refs);
        assert_eq!(l.values, values, "a full list takes no more values");
        assert_eq!(l.docs, first as u64 + 10, "but counts the documents");
    }
}
