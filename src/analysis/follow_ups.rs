//! Follow-up linking: which queries take their filter values from a
//! result an earlier read returned. A [`ListRead`] is one such result (a
//! list or a detail read, its whole cursor: getMore batches extend it) as
//! hashes of its documents' values, each with the field it came from and
//! the document it was in; a later query [`ListRead::link`]s to it when
//! its filter matches such a value. `requests` keeps the results of each
//! request and tries them all.
//!
//! Provenance decides, not coincidence:
//! - a link names the result's field and the filter's field, and only
//!   references link (see `is_reference`): null, boolean and empty values
//!   never do, and numbers need both fields named like references;
//! - a follow-up is *per element* (the "+1" of an N+1) when its values all
//!   come from one listed document: an equality (`{authorId: v}`), or an
//!   `$in` / `$or` of one element's values (its tags) when the list had
//!   several elements. An `$in` gathering values of several elements is
//!   the batched fetch (what Mongoose `populate` sends) — the fix, not the
//!   problem: it follows the result, not one element. A value every
//!   element carries (a tenant) is the request's context, per element
//!   only when asked for again;
//! - follow-ups may return any number of documents.
//!
//! Values are hashed inside wirelint; none is kept. The hashing waits
//! until a query could follow up: a result's reply batches are held as
//! they came (shared with the reply, not copied, charged to the
//! connections pool) and indexed when a query on another collection asks;
//! most lists are never followed up and are never hashed.

use super::budget::short_key;
use super::command::{Command, Kind, Reply};
use super::namespaces::{element_hash, value_hash};
use super::origin::RequestOrigin;
use crate::wire::{bson_walk, Message};
use bson::{RawBsonRef, RawDocument};
use bytes::Bytes;
use std::collections::HashMap;
use std::time::Instant;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// (value hash, field, document) entries kept per list, at most.
pub const MAX_LEAD_VALUES: usize = 4096;
/// Fields told apart per list, at most (values of others are not kept).
const MAX_LEAD_FIELDS: usize = 64;
/// Follow-up links counted per list, at most.
pub const MAX_FOLLOW_UPS: usize = 64;
/// Scalars of one array field hashed per document, at most.
const ARRAY_ELEMENTS: usize = 256;
/// `$or` branches and `$in` values looked at in a follow-up's filter.
const FILTER_VALUES: usize = 256;
/// Reply bytes a list holds unindexed, at most; past this its batches are
/// indexed as they come.
pub const MAX_HELD_BYTES: usize = 1 << 20;
/// Distinct values told apart per follow-up link of a result (beyond:
/// "more").
pub const DISTINCT_KEPT: usize = 4;
/// Values of the filter that read a result kept, at most.
const MAX_SELECTED: usize = 16;

/// Follow-ups of one link so far, and the distinct values they asked for.
type FollowedBy = (u64, smallvec::SmallVec<[u64; DISTINCT_KEPT]>);

/// The last list read on a connection.
pub struct ListRead {
    pub at: Instant,
    pub origin: RequestOrigin,
    /// Whether it came from a list read (see [`is_list_read`]), which an
    /// N+1 follows; else from a detail read, whose follow-ups belong to the
    /// same request but are never per element.
    pub list: bool,
    pub docs: u64,
    /// (value hash, field index in `fields`, document index), sorted: one
    /// value may sit in several fields and documents (post 3's `_id`, post
    /// 0's `tagIds`).
    values: Vec<(u64, u8, u32)>,
    fields: Vec<String>,
    /// (follow-up namespace, filter field, source field) → follow-ups so
    /// far, and the distinct values they asked for (hashes, the first
    /// [`DISTINCT_KEPT`]).
    follow_ups: FastMap<(String, String, String), FollowedBy>,
    /// Reply batches not indexed yet, with the index of their first
    /// document (see the module docs).
    held: Vec<(Bytes, u32)>,
    held_bytes: usize,
    /// Hashes of the values its own filter selected it by (a course's id
    /// for its reviews): the request's parameters, context for whatever
    /// follows, however many elements carry them.
    selected_by: smallvec::SmallVec<[u64; 4]>,
    /// The filter itself (a slice of its request's bytes, shared, not
    /// copied) until a query could follow and it is hashed into
    /// `selected_by`, as the reply is held.
    selection: Option<Bytes>,
    /// What `selection` keeps alive: its request's bytes.
    selection_bytes: usize,
    /// Its documents followed by an operation of the request's root shape
    /// (see [`ListRead::link`]'s `strict`).
    strictly_followed: Vec<u32>,
    /// The last [`ListRead::spread`] asked: (field, entries in `values`
    /// then, rows, distinct values); a list's per-row follow-ups all ask
    /// for the same field.
    spread: Option<(u8, usize, u64, u64)>,
}

/// A follow-up of a result: a query whose values came from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The follow-up's filter field.
    pub field: String,
    /// The listed documents' field its value came from.
    pub source_field: String,
    /// Follow-ups with this link after this result so far.
    pub count: u64,
    /// The distinct values (or value sets) they asked for, up to
    /// [`DISTINCT_KEPT`] (that many: as many or more).
    pub distinct: u64,
    /// Whether it fetches for one element of the result (an N+1's "+1"),
    /// not for the result as a whole: not a batch over several elements,
    /// not a one-to-one split by the same `_id`, and not a value every
    /// element carries (the request's context, a tenant or owner) unless
    /// it is asked for again and again.
    pub per_element: bool,
    /// Whether it fetches for the result as a whole in one query (an `$in`
    /// of several elements' values: the batched fetch, WL401's fix).
    pub batch: bool,
    /// Whether its value is the result's context: one every element of
    /// several carries, or one the result was selected by (see
    /// `ListRead::came_from`), not one the result taught.
    pub context: bool,
    /// The result's documents that hold a value in the source field, and
    /// the distinct values there: what per-row work would cover.
    pub rows: u64,
    pub values: u64,
}

/// Where a follow-up's values lie in a result (see [`ListRead::came_from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// In one element (or a few), as that element's own values.
    OneElement,
    /// In every element, or in what the result was selected by: the
    /// request's context, per element only when asked for again.
    Context,
    /// Several elements' values at once (a batch), or a one-to-one split.
    Whole,
}

/// Whether a read is a list read (a find or aggregate that is not a
/// detail read): what leads an N+1. Decided by the shape, not by one
/// reply: a list of one or two items is still a list.
pub fn is_list_read(cmd: &Command<'_>) -> bool {
    match cmd.kind {
        Kind::Aggregate => true,
        Kind::Find => !is_detail_read(cmd),
        _ => false,
    }
}

/// A detail read: a find of one document by `_id`, or with a limit of
/// one or two (`findOne`, `find_one`; Spring Data's single-entity
/// queries ask for two to tell a unique result from a duplicate).
fn is_detail_read(cmd: &Command<'_>) -> bool {
    matches!(cmd.limit(), Some(-2..=-1) | Some(1..=2))
        || cmd
            .filter()
            .is_some_and(|f| super::partition::pins_by_equality(f, "_id"))
}

/// What a follow-up asks for, read once and matched against every result
/// of the open requests: its namespace and its filter's values, field by
/// field, hashed.
pub struct FollowUpQuery<'a> {
    namespace: &'a str,
    /// Its shape's hash: a query never follows a result of its own shape.
    shape: u64,
    asked: Vec<Asked<'a>>,
    /// Whether it counts documents (`Command::counts`, which the caller
    /// has worked out already).
    pub counts: bool,
    /// Whether its shape starts many requests of its own (the tenant or
    /// the signed-in user every page reads first; see `requests`).
    pub root_like: bool,
}

impl<'a> FollowUpQuery<'a> {
    /// The query `cmd` on `namespace` as a follow-up: a find, count,
    /// distinct, or an aggregate's first `$match`, asking for values that
    /// could have come from an earlier result (nulls, booleans and empty
    /// strings never link).
    pub fn of(cmd: &Command<'a>, namespace: &'a str, shape: u64) -> Option<FollowUpQuery<'a>> {
        let filter = match cmd.kind {
            Kind::Find | Kind::Count | Kind::Distinct => cmd.filter()?,
            Kind::Aggregate => cmd.first_match()?,
            _ => return None,
        };
        FollowUpQuery::of_filter(namespace, shape, filter)
    }

    /// A query of shape `shape` on `namespace` with `filter`.
    pub fn of_filter(
        namespace: &'a str,
        shape: u64,
        filter: &'a RawDocument,
    ) -> Option<FollowUpQuery<'a>> {
        let asked = asked(filter);
        (!asked.is_empty()).then_some(FollowUpQuery {
            namespace,
            shape,
            asked,
            counts: false,
            root_like: false,
        })
    }
}

/// What one filter field asks for.
struct Asked<'a> {
    field: String,
    values: Vec<RawBsonRef<'a>>,
    /// `values`' hashes, in the same order.
    hashes: Vec<u64>,
    /// `$in` or `$or`: several values at once (any `$in` is the batched
    /// form, even of one value).
    batched: bool,
}

impl ListRead {
    pub fn new(at: Instant, origin: RequestOrigin, list: bool) -> ListRead {
        ListRead {
            at,
            origin,
            list,
            docs: 0,
            values: Vec::new(),
            fields: Vec::new(),
            follow_ups: FastMap::default(),
            held: Vec::new(),
            held_bytes: 0,
            selected_by: smallvec::SmallVec::new(),
            selection: None,
            selection_bytes: 0,
            strictly_followed: Vec::new(),
            spread: None,
        }
    }

    /// Notes the values of `filter`, the query that read this result: a
    /// follow-up asking for them again took them from the request, not
    /// from an element.
    /// `filter` shares the bytes of its request, `keeps` of them.
    pub fn selected_by(&mut self, (filter, keeps): (Bytes, usize)) {
        self.selection = Some(filter);
        self.selection_bytes = keeps;
    }

    /// Hashes the held filter into `selected_by`: the top level's
    /// equalities and `$eq`/`$in` values, hashed as `asked` hashes them.
    fn index_selection(&mut self) {
        let Some(bytes) = self.selection.take() else {
            return;
        };
        self.selection_bytes = 0;
        let Ok(filter) = RawDocument::from_bytes(&bytes) else {
            return;
        };
        let mut keep = |v: RawBsonRef<'_>| {
            if linkable(v) && self.selected_by.len() < MAX_SELECTED {
                self.selected_by.push(value_hash(v));
            }
        };
        for (k, v) in filter.iter().flatten() {
            if k.as_str().starts_with('$') {
                continue;
            }
            match v {
                RawBsonRef::Document(d) => {
                    if let Ok(Some(v)) = d.get("$eq") {
                        keep(v);
                    } else if let Ok(values) = d.get_array("$in") {
                        values
                            .into_iter()
                            .flatten()
                            .take(MAX_SELECTED)
                            .for_each(&mut keep);
                    }
                }
                RawBsonRef::Array(_) => {}
                v => keep(v),
            }
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

    /// Bytes it holds now (what it is charged while it lives): its
    /// values, field names, follow-up counts and the replies it holds.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<ListRead>()
            + self.values.capacity() * std::mem::size_of::<(u64, u8, u32)>()
            + self.fields.len() * (super::budget::MAX_KEY + 24)
            + self.follow_ups.len() * (3 * super::budget::MAX_KEY + 80 + 8 * DISTINCT_KEPT)
            + self.held.capacity() * std::mem::size_of::<(Bytes, u32)>()
            + self.held_bytes
            + self.strictly_followed.capacity() * 4
            + self.selection_bytes
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

    /// Hashes one listed document's values (left unsorted), on the raw
    /// bytes: a value is hashed from its encoding, never decoded, and one
    /// of a type no query links by is skipped by its length.
    fn index(&mut self, doc: &RawDocument, index: u32) {
        let mut path = String::new();
        for e in bson_walk::elements(doc.as_bytes()).map_while(Result::ok) {
            let Some(key) = bson_walk::utf8(e.key) else {
                continue;
            };
            match e.element_type {
                0x04 => {
                    for e in bson_walk::elements(e.value)
                        .map_while(Result::ok)
                        .take(ARRAY_ELEMENTS)
                    {
                        self.keep(key, &e, index);
                    }
                }
                // One level down: a DBRef's `$id`, `author: {id, name}`.
                0x03 => {
                    for sub in bson_walk::elements(e.value).map_while(Result::ok) {
                        let Some(sub_key) = bson_walk::utf8(sub.key) else {
                            continue;
                        };
                        path.clear();
                        path.push_str(key);
                        path.push('.');
                        path.push_str(sub_key);
                        self.keep(&path, &sub, index);
                    }
                }
                _ => self.keep(key, &e, index),
            }
        }
    }

    fn keep(&mut self, field: &str, e: &bson_walk::Element<'_>, doc: u32) {
        if !linkable_type(e) || self.values.len() >= MAX_LEAD_VALUES {
            return;
        }
        let Some(hash) = element_hash(e) else {
            return;
        };
        let field = short_key(field);
        let index = match self.fields.iter().position(|f| *f == field) {
            Some(i) => i,
            None if self.fields.len() < MAX_LEAD_FIELDS => {
                self.fields.push(field.into_owned());
                self.fields.len() - 1
            }
            None => return,
        };
        self.values.push((hash, index as u8, doc));
    }

    /// Where a value was in the list: its (hash, field, document) entries.
    fn sources(&self, h: u64) -> &[(u64, u8, u32)] {
        let start = self.values.partition_point(|e| e.0 < h);
        let end = self.values.partition_point(|e| e.0 <= h);
        &self.values[start..end]
    }

    /// Links `query` to this result when its values came from it (see
    /// [`Link`] for when the link is per element). A query of the result's
    /// own shape never follows it; one on its own collection follows it
    /// by one element's value of another field than `_id` (a post's
    /// comments counted in the posts container, by the post's `postId` and
    /// another `type`), never per element. With `strict`, only a link by
    /// one element's own values of a list of several counts (see
    /// `requests`: an operation of the request's root shape). With
    /// `elsewhere` (the result is another connection's request's), a value
    /// every element carries, or the result was selected by, links
    /// nothing: concurrent visitors of one tenant, one project, share
    /// those, and the operation is its own request's context (a visitor's
    /// project read while another lists that project's tasks).
    pub fn link(
        &mut self,
        query: &FollowUpQuery<'_>,
        strict: bool,
        elsewhere: bool,
    ) -> Option<Link> {
        if query.shape == self.origin.shape.hash {
            return None;
        }
        let same_collection = *query.namespace == *self.origin.namespace;
        self.index_held();
        self.index_selection();
        let (asked, source, per_element, docs) = query.asked.iter().find_map(|a| {
            if same_collection && a.field == "_id" {
                return None;
            }
            match self.came_from(a, query.namespace, same_collection)? {
                // In its own collection only by one element's value: by a
                // value every element carries, or a batch, it is the same
                // data read another way (a tenant's dashboard widgets).
                (s, Source::OneElement, d) if same_collection => Some((a, s, Source::Whole, d)),
                _ if same_collection => None,
                (s, p, d) => Some((a, s, p, d)),
            }
        })?;
        let (asked, source, per_element, docs) = (asked, source, per_element, docs);
        if elsewhere && per_element == Source::Context {
            return None;
        }
        // A list of one row holds only its context: a read that starts
        // requests of its own (the next page's tenant, asked by the id the
        // one listed task carries) does not follow it.
        if query.root_like && self.list && self.docs < 2 {
            return None;
        }
        if strict {
            // One element's own value, of a list of several, and an element
            // not followed this way yet: each row is looked up once, so the
            // next call asking for the same value again is not this one's.
            if !(per_element == Source::OneElement && self.list && self.docs >= 2) {
                return None;
            }
            let fresh = docs.iter().find(|d| !self.strictly_followed.contains(d))?;
            if self.strictly_followed.len() < MAX_LEAD_VALUES {
                self.strictly_followed.push(*fresh);
            }
        }
        let field = short_key(&asked.field).into_owned();
        let source_field = self.fields[source as usize].clone();
        let key = (
            short_key(query.namespace).into_owned(),
            field.clone(),
            source_field.clone(),
        );
        if self.follow_ups.len() >= MAX_FOLLOW_UPS && !self.follow_ups.contains_key(&key) {
            return None;
        }
        let (count, distinct) = self.follow_ups.entry(key).or_default();
        // The context's total beside its page (a count, then the read, of
        // one filter: a paginator) is one question, not asked twice.
        if !(query.counts && per_element == Source::Context) {
            *count += 1;
        }
        let count = (*count).max(1);
        let value = asked
            .hashes
            .iter()
            .fold(0u64, |acc, h| acc.rotate_left(5) ^ h);
        if !distinct.contains(&value) && distinct.len() < DISTINCT_KEPT {
            distinct.push(value);
        }
        let distinct = distinct.len() as u64;
        let context = per_element == Source::Context;
        let per_element = per_element == Source::OneElement || (context && count > 1);
        let (rows, values) = if per_element {
            self.spread(source)
        } else {
            (0, 0)
        };
        Some(Link {
            field,
            source_field,
            count,
            distinct,
            per_element,
            batch: asked.batched && !per_element,
            context,
            rows,
            values,
        })
    }

    /// How many documents hold a value in field `field` (its index), and
    /// how many distinct values they hold there (up to the values kept).
    fn spread(&mut self, field: u8) -> (u64, u64) {
        if let Some((f, n, rows, values)) = self.spread {
            if f == field && n == self.values.len() {
                return (rows, values);
            }
        }
        let mut docs: smallvec::SmallVec<[u32; 64]> = smallvec::SmallVec::new();
        let mut values = 0u64;
        let mut last = None;
        // Sorted by hash, then field: one value's entries are together.
        for &(h, f, d) in &self.values {
            if f != field {
                continue;
            }
            if last != Some(h) {
                values += 1;
                last = Some(h);
            }
            docs.push(d);
        }
        docs.sort_unstable();
        docs.dedup();
        let rows = docs.len() as u64;
        self.spread = Some((field, self.values.len(), rows, values));
        (rows, values)
    }

    /// The source field through which what `a` asks for came from this
    /// result, if any, and how (see [`Source`]).
    ///
    /// An equality: any element holding the value; the request's context
    /// when every element of several holds it, or when the result was
    /// selected by it (a course's reviews, then the course's threads). A
    /// batch (`$in`, `$or`): one element's when some element of several
    /// holds every value and the values are not all the result holds in
    /// that field (one post's tags, however many of them other posts
    /// share); the whole result's when they cover the field (what
    /// `populate` sends), or when one element holds them all.
    /// Only references link: a value of reference type (ObjectId, UUID),
    /// or fields named like one (`_id`, `authorId`, `author_id`, a DBRef's
    /// `$id`, the follow-up collection's name).
    fn came_from(
        &self,
        a: &Asked<'_>,
        namespace: &str,
        same_collection: bool,
    ) -> Option<(u8, Source, Vec<u32>)> {
        let first = self.sources(*a.hashes.first()?);
        let mut candidates: Vec<u8> = first.iter().map(|e| e.1).collect();
        candidates.sort_unstable();
        candidates.dedup();
        // (In the result's own collection, a value it was selected by ties
        // the query to one element as before: a post's comments counted in
        // the posts container by the `postId` the post was read by.)
        let selected = !same_collection && a.hashes.iter().all(|h| self.selected_by.contains(h));
        candidates.into_iter().find_map(|source| {
            let source_field = &self.fields[source as usize];
            if !is_reference(&a.field, source_field, a.values[0], namespace) {
                return None;
            }
            // The result's own `_id` as another collection's `_id`: a
            // one-to-one split when it is an ObjectId or UUID; numbers and
            // strings 1, 2, 3… of two collections merely coincide.
            let one_to_one = a.field == "_id" && source_field == "_id";
            if one_to_one && !is_typed_reference(a.values[0]) {
                return None;
            }
            let mut docs: Vec<u32> = first
                .iter()
                .filter(|e| e.1 == source)
                .map(|e| e.2)
                .collect();
            if one_to_one {
                return Some((source, Source::Whole, docs));
            }
            if !a.batched {
                let every = self.docs >= 2 && docs.len() as u64 >= self.docs;
                let how = if every || selected {
                    Source::Context
                } else {
                    Source::OneElement
                };
                return Some((source, how, docs));
            }
            for h in &a.hashes[1..] {
                let here = self.sources(*h);
                docs.retain(|d| here.iter().any(|e| e.1 == source && e.2 == *d));
                if !here.iter().any(|e| e.1 == source) {
                    return None;
                }
            }
            // One element holds them all, of a list of several, and they
            // are not everything the list holds in that field.
            let one_element = !docs.is_empty() && self.docs >= 2;
            let how = if one_element && !selected && !self.covers_field(source, &a.hashes) {
                Source::OneElement
            } else {
                Source::Whole
            };
            Some((source, how, docs))
        })
    }

    /// Whether `hashes` include every value the result holds in field
    /// `source` (a batch over the whole result).
    fn covers_field(&self, source: u8, hashes: &[u64]) -> bool {
        let held = self.values.iter().filter(|e| e.1 == source).map(|e| e.0);
        let mut last = None;
        for h in held {
            if last == Some(h) {
                continue;
            }
            last = Some(h);
            if !hashes.contains(&h) {
                return false;
            }
        }
        true
    }
}

/// Whether a value can tie a follow-up to a result: not null, a boolean,
/// an empty string or a min/max key (a missing reference resolved as
/// `{_id: null}` ties nothing).
fn linkable(v: RawBsonRef<'_>) -> bool {
    !matches!(
        v,
        RawBsonRef::Document(_)
            | RawBsonRef::Array(_)
            | RawBsonRef::Null
            | RawBsonRef::Undefined
            | RawBsonRef::Boolean(_)
            | RawBsonRef::MinKey
            | RawBsonRef::MaxKey
            | RawBsonRef::String("")
    )
}

/// The longest string a result's values are linked by: ids, keys, slugs,
/// names, e-mail addresses and URLs are shorter.
const MAX_LINKED_STRING: usize = 256;

/// [`linkable`] of a walked element: a scalar a query can ask for (the
/// types [`element_hash`] hashes as [`value_hash`] does; the others are
/// never the value of a reference).
fn linkable_type(e: &bson_walk::Element<'_>) -> bool {
    match e.element_type {
        // Not an empty string (4 bytes of length and the terminating
        // zero), nor one longer than a reference is: a body or a
        // description is skipped by its length, never hashed.
        0x02 => e.value.len() > 5 && e.value.len() <= MAX_LINKED_STRING + 5,
        0x01 | 0x05 | 0x07 | 0x09 | 0x10 | 0x12 => true,
        _ => false,
    }
}

/// An ObjectId or a UUID: values two collections never share by chance.
fn is_typed_reference(value: RawBsonRef<'_>) -> bool {
    matches!(
        value,
        RawBsonRef::ObjectId(_)
            | RawBsonRef::Binary(bson::RawBinaryRef {
                subtype: bson::spec::BinarySubtype::Uuid | bson::spec::BinarySubtype::UuidOld,
                ..
            })
    )
}

/// Whether a follow-up's `field` asking for `value`, taken from the
/// result's `source` field, is a reference (see [`ListRead::came_from`]):
/// a value of reference type; a string with either field named like a
/// reference or the source after the follow-up's collection
/// (`{_id: post.author}`, `{_id: ticket.event}` on `event`); a number with
/// both (`{_id: post.authorId}`, `{postId: post._id}`). A number that
/// happens to equal a listed `_id` (`{level: 2}`) ties nothing.
fn is_reference(field: &str, source: &str, value: RawBsonRef<'_>, namespace: &str) -> bool {
    if is_typed_reference(value) {
        return true;
    }
    let collection = namespace
        .split_once('.')
        .map_or(namespace, |(_, c)| c)
        .to_ascii_lowercase();
    // `authorId`, `author_id`, `tagIds`, `tag_ids`, `_id`, a DBRef's `$id`.
    let named = |f: &str| {
        let last = f.rsplit('.').next().unwrap_or(f);
        let one = last.strip_suffix('s').unwrap_or(last);
        matches!(last, "_id" | "id" | "$id")
            || (one.len() > 2
                && (one.ends_with("Id")
                    || one.ends_with("ID")
                    || one.to_ascii_lowercase().ends_with("_id")))
    };
    // A listed field named after the follow-up's collection (`event` of
    // the `event` collection, `author` of `authors`).
    let names_collection = |f: &str| {
        let last = f.rsplit('.').next().unwrap_or(f).to_ascii_lowercase();
        last.len() > 2 && collection.starts_with(&last)
    };
    let source_named = named(source) || names_collection(source);
    match value {
        // Strings rarely coincide: one side named like a reference will
        // do (Spring Data's `@DocumentReference User author` stores the
        // user's id under `author`).
        RawBsonRef::String(_) => named(field) || source_named,
        // Numbers do (invoice 2, level 2): both sides.
        _ => named(field) && source_named,
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
                                x.hashes.append(&mut one.hashes);
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
    let values: Vec<RawBsonRef<'a>> = values.into_iter().filter(|v| linkable(*v)).collect();
    let hashes = values.iter().map(|v| value_hash(*v)).collect();
    (!values.is_empty()).then(|| Asked {
        field: field.to_string(),
        values,
        hashes,
        batched,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::origin::ShapeFacts;
    use crate::analysis::shape::Shape;
    use bson::rawdoc;

    fn list_read(docs: &[bson::RawDocumentBuf]) -> ListRead {
        let origin = RequestOrigin::new(ShapeFacts {
            pattern: "list".into(),
            named_by: crate::analysis::patterns::NamedBy::Shape,
            shape: Shape::new("find blog.posts {}".into()),
            namespace: "blog.posts".into(),
            whole: true,
            list: true,
            by_id: false,
            priced: Default::default(),
        });
        let mut l = ListRead::new(Instant::now(), origin, true);
        let refs: Vec<&RawDocument> = docs.iter().map(|d| d.as_ref()).collect();
        l.add(Instant::now(), &refs);
        l
    }

    /// The per-element link `filter` on `namespace` makes, if any.
    fn per_element(l: &mut ListRead, namespace: &str, filter: &RawDocument) -> Option<Link> {
        let q = FollowUpQuery::of_filter(namespace, 1, filter)?;
        l.link(&q, false, false).filter(|link| link.per_element)
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
        let a = per_element(&mut l, "blog.users", &rawdoc! {"_id": 100}).unwrap();
        assert_eq!(
            (a.field.as_str(), a.source_field.as_str()),
            ("_id", "authorId")
        );
        assert_eq!(l.held_bytes(), 0, "indexed when a query asked");
        // The batch of every author (values of two documents) is not a
        // follow-up; one post's tags are.
        assert_eq!(
            per_element(&mut l, "blog.users", &rawdoc! {"_id": {"$in": [100, 101]}}),
            None
        );
        assert_eq!(
            per_element(&mut l, "blog.tags", &rawdoc! {"_id": {"$in": [8, 9]}})
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
        let a = per_element(&mut l, "blog.users", &rawdoc! {"_id": 100}).unwrap();
        assert_eq!(
            (a.field.as_str(), a.source_field.as_str(), a.count),
            ("_id", "authorId", 1)
        );
        let c = per_element(&mut l, "blog.comments", &rawdoc! {"postId": {"$eq": 2}}).unwrap();
        assert_eq!(
            (c.field.as_str(), c.source_field.as_str()),
            ("postId", "_id")
        );
        // One post's tags by $in, and a Spring Data-style $or of _ids.
        let t = per_element(&mut l, "blog.tags", &rawdoc! {"_id": {"$in": [8, 9]}}).unwrap();
        assert_eq!(t.source_field, "tagIds");
        let o = per_element(
            &mut l,
            "blog.tags",
            &rawdoc! {"$or": [{"_id": 7}, {"_id": 8}]},
        )
        .unwrap();
        assert_eq!((o.source_field.as_str(), o.count), ("tagIds", 2));
    }

    /// Values are read from the raw bytes: strings in embedded documents
    /// link by their dotted path, and a string longer than a reference
    /// (a body) is never indexed.
    #[test]
    fn embedded_strings_link_and_bodies_are_skipped() {
        let long = "k".repeat(MAX_LINKED_STRING + 1);
        let docs = [
            rawdoc! {"_id": 1, "author": {"userId": "ada"}, "keyId": long.clone()},
            rawdoc! {"_id": 2, "author": {"userId": "bob"}, "keyId": "short"},
        ];
        let mut l = list_read(&docs);
        let a = per_element(&mut l, "blog.users", &rawdoc! {"userId": "ada"}).unwrap();
        assert_eq!(a.source_field, "author.userId");
        assert!(per_element(&mut l, "blog.keys", &rawdoc! {"keyId": long}).is_none());
        let s = per_element(&mut l, "blog.keys", &rawdoc! {"keyId": "short"}).unwrap();
        assert_eq!(s.source_field, "keyId");
    }

    #[test]
    fn batches_same_keys_and_strangers_do_not_link() {
        let mut l = list_read(&posts());
        // populate: every author at once; or the one author two posts
        // share.
        assert_eq!(
            per_element(&mut l, "blog.users", &rawdoc! {"_id": {"$in": [100, 101]}}),
            None
        );
        let mut shared = list_read(&[
            rawdoc! {"_id": 1, "authorId": 5},
            rawdoc! {"_id": 2, "authorId": 5},
        ]);
        assert_eq!(
            per_element(&mut shared, "blog.users", &rawdoc! {"_id": {"$in": [5]}}),
            None
        );
        // The list's own _id as another collection's _id (a 1:1 split).
        assert_eq!(per_element(&mut l, "blog.stats", &rawdoc! {"_id": 1}), None);
        // A value the list does not hold; the list's own collection.
        assert_eq!(
            per_element(&mut l, "blog.users", &rawdoc! {"_id": 555}),
            None
        );
        assert_eq!(
            per_element(&mut l, "blog.posts", &rawdoc! {"authorId": 100}),
            None
        );
        // With one listed document, an $in is indistinguishable from a
        // batch: not linked; an equality is.
        let mut one = list_read(&posts()[..1]);
        assert_eq!(
            per_element(&mut one, "blog.users", &rawdoc! {"_id": {"$in": [100]}}),
            None
        );
        assert!(per_element(&mut one, "blog.users", &rawdoc! {"_id": 100}).is_some());
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

    /// Provenance needs a reference: nulls and booleans never tie, numbers
    /// need both fields named like references, strings one, and the list's
    /// own numeric `_id` never ties to another collection's `_id`.
    #[test]
    fn only_references_tie_a_query_to_a_list() {
        let docs = [
            rawdoc! {"_id": 1, "author": "ann", "parentId": bson::RawBson::Null, "level": 2, "flag": true},
            rawdoc! {"_id": 2, "author": "bob", "parentId": bson::RawBson::Null, "level": 3, "flag": false},
        ];
        let mut l = list_read(&docs);
        let link = |l: &mut ListRead, ns: &str, f: bson::RawDocumentBuf| {
            FollowUpQuery::of_filter(ns, 1, &f).and_then(|q| l.link(&q, false, false))
        };
        assert_eq!(
            link(&mut l, "d.posts", rawdoc! {"_id": bson::RawBson::Null}),
            None
        );
        assert_eq!(link(&mut l, "d.flags", rawdoc! {"on": true}), None);
        assert_eq!(
            link(&mut l, "d.levels", rawdoc! {"level": 2}),
            None,
            "no name"
        );
        assert_eq!(
            link(&mut l, "d.users", rawdoc! {"_id": 2}),
            None,
            "ids coincide"
        );
        assert_eq!(
            link(&mut l, "d.users", rawdoc! {"_id": "ann"}).map(|k| k.source_field),
            Some("author".to_string()),
            "a string looked up by _id"
        );
        assert_eq!(
            link(&mut l, "d.comments", rawdoc! {"postId": 1}).map(|k| k.source_field),
            Some("_id".to_string())
        );
    }

    /// A value every element carries is the request's context: it ties the
    /// query to the list, but per element only once asked for again.
    #[test]
    fn a_value_every_element_carries_is_per_element_only_when_repeated() {
        let docs: Vec<_> = (0..5)
            .map(|i| rawdoc! {"_id": i, "tenantId": "t1", "modelId": "m1"})
            .collect();
        let mut l = list_read(&docs);
        let q = rawdoc! {"_id": "t1"};
        let first = l
            .link(
                &FollowUpQuery::of_filter("d.tenants", 1, &q).unwrap(),
                false,
                false,
            )
            .unwrap();
        assert!(!first.per_element, "{first:?}");
        let again = l
            .link(
                &FollowUpQuery::of_filter("d.tenants", 1, &q).unwrap(),
                false,
                false,
            )
            .unwrap();
        assert!(again.per_element && again.count == 2, "{again:?}");
        // Another connection's list links by such a value nothing: its
        // tenant is every visitor's of that tenant.
        assert!(l
            .link(
                &FollowUpQuery::of_filter("d.tenants", 1, &q).unwrap(),
                false,
                true,
            )
            .is_none());
    }
}
