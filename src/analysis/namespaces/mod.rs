//! What wirelint has learnt about each namespace, for rules to read:
//! document sizes, array lengths per field path (array elements folded as
//! `arr.$`), arrays seen growing in the same document, and write operators
//! per path. Everything is capped: namespaces, paths per namespace and
//! documents remembered per namespace are bounded and the least recently
//! used entries are evicted, so memory stays flat however long it runs.
//!
//! This file holds the namespaces' table (capped, least recently used
//! first out) and each namespace's state; what a document tells that state
//! is worked out in the files beside it, one concept each:
//! - [`doc_walk`]: a document walked once for its arrays and `_id`;
//! - [`sizes`]: the histograms of document sizes and array lengths;
//! - [`arrays`]: array lengths per path, growth in one document, the paths
//!   bounded by design;
//! - [`field_sets`]: the top-level field sets and a few of their values;
//! - [`value_hash`]: the hashes values are compared by.

mod arrays;
mod doc_walk;
mod field_sets;
mod sizes;
mod value_hash;

pub use super::budget::Lru;
pub use arrays::ArrayStats;
pub use doc_walk::{ArrayInDoc, Doc, KeyValue, MAX_KEY_FIELDS};
pub use field_sets::FieldSet;
pub use sizes::{SizeHist, SIZE_HIST_HEAP};
pub use value_hash::{element_hash, tuple_hash_continue, value_hash, TUPLE_HASH_START};

use super::budget::{self, short_key, HashCache, Pool, ENTRY_OVERHEAD};
use super::command::is_bucketed;
use crate::wire::bson_walk;
use arrays::{
    pinned_id, record_arrays, record_bounded_paths, record_written_lengths, LastLengths,
    ARRAYS_PER_DOCUMENT,
};
use bson::{RawBsonRef, RawDocument};
use field_sets::{field_set_bytes, record_field_set, FIELD_SETS_PER_NAMESPACE};
use std::sync::Arc;

/// Limits on what is remembered.
#[derive(Clone, Debug)]
pub struct Caps {
    pub namespaces: usize,
    pub paths_per_namespace: usize,
    pub documents_per_namespace: usize,
    /// Nesting followed when walking a document.
    pub depth: usize,
    /// Elements of an array looked into (for arrays inside them, and
    /// whether they are numbers: the last is judged too).
    pub elements_sampled: usize,
    /// Bytes all the analysis tables may hold together (`[limits]
    /// analysis_memory`; see `budget`).
    pub memory: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            namespaces: 1_000,
            paths_per_namespace: 256,
            documents_per_namespace: 10_000,
            depth: 8,
            elements_sampled: 16,
            memory: budget::DEFAULT_ANALYSIS_MEMORY,
        }
    }
}

#[derive(Debug)]
pub struct NamespaceState {
    pub doc_sizes: SizeHist,
    pub arrays: Lru<String, ArrayStats>,
    /// Hashed document id → (hashed path, length) of its arrays.
    documents: Lru<u64, LastLengths>,
    /// Array paths the application bounds by design: `$push` with `$each`
    /// and `$slice`, or the bucket pattern (a counter bound in the filter).
    pub bounded_paths: Lru<String, ()>,
    /// Top-level field sets of the documents seen (WL501, WL505).
    pub field_sets: Lru<u64, FieldSet>,
    pub documents_seen: u64,
    /// Bytes inserted per partition-key value (hashed), for the values
    /// seen growing most (see [`KeyGrowth`]); only where a platform limits
    /// a logical partition's size.
    pub key_growth: Lru<u64, KeyGrowth>,
    /// Bytes inserted in all while `key_growth` was kept.
    pub key_growth_bytes: u64,
    /// Its name (shortened), shared by the inserted ids it owns.
    name: Arc<str>,
}

/// What one partition-key value of a collection has grown by, and over
/// how long: the bytes inserted with it, and when the first and the
/// latest were.
#[derive(Clone, Copy, Debug)]
pub struct KeyGrowth {
    pub bytes: u64,
    pub first: std::time::Instant,
    pub last: std::time::Instant,
}

/// Partition-key values whose growth a collection keeps (the least
/// recently grown forgotten first).
pub const KEY_GROWTH_VALUES: usize = 64;

impl NamespaceState {
    /// Field sets seen, most common first.
    pub fn shapes(&self) -> Vec<&FieldSet> {
        let mut v: Vec<&FieldSet> = self.field_sets.iter().map(|(_, f)| f).collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then(a.fields.cmp(&b.fields)));
        v
    }

    /// Empty state whose tables charge `pool`.
    fn new(name: &str, caps: &Caps, pool: &Arc<Pool>) -> Self {
        let p = || pool.clone();
        NamespaceState {
            doc_sizes: SizeHist::default(),
            arrays: Lru::in_pool(caps.paths_per_namespace, p(), |k, _| {
                k.len()
                    + std::mem::size_of::<(String, ArrayStats)>()
                    + SIZE_HIST_HEAP
                    + ENTRY_OVERHEAD
            }),
            documents: Lru::in_pool(caps.documents_per_namespace, p(), |_, _| {
                // A document's arrays, up to ARRAYS_PER_DOCUMENT of them.
                std::mem::size_of::<(u64, LastLengths)>()
                    + ARRAYS_PER_DOCUMENT * std::mem::size_of::<(u64, u32)>()
                    + ENTRY_OVERHEAD
            }),
            bounded_paths: Lru::in_pool(caps.paths_per_namespace, p(), |k, _| {
                k.len() + std::mem::size_of::<String>() + ENTRY_OVERHEAD
            }),
            field_sets: Lru::in_pool(FIELD_SETS_PER_NAMESPACE, p(), field_set_bytes),
            documents_seen: 0,
            key_growth: Lru::in_pool(KEY_GROWTH_VALUES, p(), |_, _| {
                std::mem::size_of::<(u64, KeyGrowth)>() + ENTRY_OVERHEAD
            }),
            key_growth_bytes: 0,
            name: Arc::from(name),
        }
    }
}

/// All namespaces.
#[derive(Debug)]
pub struct Namespaces {
    pub map: Lru<String, NamespaceState>,
    pub caps: Caps,
    /// What the namespace state (with every table inside it) is charged to.
    pool: Arc<Pool>,
    /// Hashes of inserted documents' `_id`s → their namespace: where the
    /// children an array refers to live (WL502). One per insert, most new:
    /// a [`HashCache`], not an [`Lru`].
    pub ids: HashCache<Arc<str>>,
}

impl Default for Namespaces {
    fn default() -> Self {
        Namespaces::new(
            Caps::default(),
            Pool::unbounded("namespaces"),
            Pool::unbounded("document_ids"),
        )
    }
}

impl Namespaces {
    /// Namespace state charged to `pool`, inserted ids to `ids`.
    pub fn new(caps: Caps, pool: Arc<Pool>, ids: Arc<Pool>) -> Namespaces {
        Namespaces {
            map: Lru::in_pool(caps.namespaces, pool.clone(), |k, _| {
                k.len()
                    + std::mem::size_of::<(String, NamespaceState)>()
                    + SIZE_HIST_HEAP
                    + ENTRY_OVERHEAD
            }),
            // The namespace's name is shared with its state.
            ids: HashCache::in_pool(caps.documents_per_namespace * 10, ids),
            caps,
            pool,
        }
    }

    pub fn get(&self, namespace: &str) -> Option<&NamespaceState> {
        self.map.get(&*short_key(namespace))
    }

    fn state(&mut self, namespace: &str) -> &mut NamespaceState {
        let Namespaces {
            map, caps, pool, ..
        } = self;
        state_in(map, caps, pool, namespace)
    }

    /// An inserted document: observed as any document, and its `_id`
    /// (hashed) remembered as living here.
    pub fn observe_inserted(&mut self, namespace: &str, doc: &Doc<'_>) {
        let at = std::time::Instant::now();
        self.observe_inserted_all(namespace, std::slice::from_ref(doc), [], at)
    }

    /// An insert's documents, and what they grew their logical partitions
    /// by (see [`Namespaces::observe_key_growth`]; none where no key or
    /// limit is known): the namespace looked up once, not per document.
    pub fn observe_inserted_all(
        &mut self,
        namespace: &str,
        docs: &[Doc<'_>],
        grown: impl IntoIterator<Item = (u64, u64)>,
        at: std::time::Instant,
    ) {
        if docs.is_empty() {
            return;
        }
        let Namespaces {
            map,
            caps,
            pool,
            ids,
        } = self;
        let state = state_in(map, caps, pool, namespace);
        for doc in docs {
            observe_in(state, doc, doc.id);
            if let Some(id) = doc.id {
                ids.insert(id, state.name.clone());
            }
        }
        grow_keys(state, grown, at);
    }

    /// Documents inserted at `at`, each as the hash of its partition-key
    /// value and its bytes: what those logical partitions grew by (the
    /// namespace looked up once, not per document).
    pub fn observe_key_growth(
        &mut self,
        namespace: &str,
        inserted: impl IntoIterator<Item = (u64, u64)>,
        at: std::time::Instant,
    ) {
        let mut inserted = inserted.into_iter().peekable();
        if inserted.peek().is_none() {
            return;
        }
        grow_keys(self.state(namespace), inserted, at);
    }

    /// The namespace whose document has this `_id`, if one was inserted.
    pub fn id_owner(&self, value: RawBsonRef<'_>) -> Option<&str> {
        self.ids.get(value_hash(value)).map(|name| &**name)
    }

    /// [`id_owner`](Self::id_owner) of a walked element, hashed from its
    /// bytes; `None` for the types [`element_hash`] leaves to bson
    /// (booleans, null, regular expressions…), which no application uses
    /// as the ids of the documents it references.
    pub fn id_owner_of(&self, e: &bson_walk::Element<'_>) -> Option<&str> {
        self.ids.get(element_hash(e)?).map(|name| &**name)
    }

    pub fn observe_document(&mut self, namespace: &str, doc: &Doc<'_>) {
        self.observe_document_with_id(namespace, doc, doc.id)
    }

    /// A batch of documents of one namespace (a cursor's): the namespace
    /// is looked up once, not per document.
    pub fn observe_documents(&mut self, namespace: &str, docs: &[Doc<'_>]) {
        if docs.is_empty() {
            return;
        }
        let state = self.state(namespace);
        for doc in docs {
            observe_in(state, doc, doc.id);
        }
    }

    /// A replacement (an update without operators): its `_id` is the
    /// filter's when the document does not carry one.
    pub fn observe_replacement(
        &mut self,
        namespace: &str,
        filter: Option<&RawDocument>,
        doc: &Doc<'_>,
    ) {
        let id = doc.id.or_else(|| filter.and_then(pinned_id));
        let state = self.state(namespace);
        // Its size and arrays, not its field set: the body is not the
        // stored document (the server keeps the `_id`, and an upsert's
        // body may never be stored), so it is no kind of its own.
        state.doc_sizes.record(doc.raw.as_bytes().len() as u64);
        record_arrays(state, doc, id);
    }

    fn observe_document_with_id(&mut self, namespace: &str, doc: &Doc<'_>, id: Option<u64>) {
        observe_in(self.state(namespace), doc, id)
    }

    /// What an update document tells: the array lengths it makes known
    /// and the paths it bounds. The lengths are known when its filter pins
    /// one document, or lists several by `_id` (`{_id: {$in: ids}}`: a
    /// fan-out on write, one notification pushed to every subscriber) and
    /// the server modified every one of them (`modified`: the statement's
    /// own `nModified`, when it is the write's only statement).
    pub fn observe_update(
        &mut self,
        namespace: &str,
        filter: Option<&RawDocument>,
        update: &RawDocument,
        modified: Option<i64>,
    ) {
        let bucketed = is_bucketed(filter, Some(update));
        let state = self.state(namespace);
        if let Some(filter) = filter {
            if let Some(id) = pinned_id(filter) {
                record_written_lengths(state, id, update);
                if let Some(m) = modified {
                    arrays::record_set_growth(state, id, update, m > 0);
                }
            } else if let Some(m) = modified.filter(|m| *m > 0) {
                let listed = || arrays::listed_ids(filter).filter(|ids| ids.len() as i64 == m);
                if let Some(ids) = arrays::changes_lengths(update).then(listed).flatten() {
                    for id in ids {
                        record_written_lengths(state, id, update);
                        arrays::record_set_growth(state, id, update, true);
                    }
                }
            }
        }
        record_bounded_paths(state, update, bucketed);
    }
}

/// Adds each inserted document's bytes (`(key hash, bytes)`) to its
/// logical partition's growth in `state`.
fn grow_keys(
    state: &mut NamespaceState,
    inserted: impl IntoIterator<Item = (u64, u64)>,
    at: std::time::Instant,
) {
    let mut add = |key: u64, bytes: u64| {
        state.key_growth_bytes += bytes;
        let g = state.key_growth.get_or_insert_with(&key, || KeyGrowth {
            bytes: 0,
            first: at,
            last: at,
        });
        g.bytes += bytes;
        g.last = g.last.max(at);
    };
    // The documents of a few values (a batch for one tenant, orders of
    // a few customers, a run of one value's documents) added up per
    // value first: a look-up per value, not per document. The latest
    // value is looked at first: a batch's documents come in runs.
    let mut sums: smallvec::SmallVec<[(u64, u64); 8]> = smallvec::SmallVec::new();
    for (key, bytes) in inserted {
        if let Some((_, sum)) = sums.iter_mut().rev().find(|(k, _)| *k == key) {
            *sum += bytes;
            continue;
        }
        if sums.len() == sums.inline_size() {
            for (key, sum) in sums.drain(..) {
                add(key, sum);
            }
        }
        sums.push((key, bytes));
    }
    for (key, sum) in sums {
        add(key, sum);
    }
}

/// A namespace's state (made when new), from the namespaces' fields, so
/// that the table of inserted ids can be written while it is held.
fn state_in<'m>(
    map: &'m mut Lru<String, NamespaceState>,
    caps: &Caps,
    pool: &Arc<Pool>,
    namespace: &str,
) -> &'m mut NamespaceState {
    let key = short_key(namespace);
    map.get_or_insert_with(&*key, || NamespaceState::new(&key, caps, pool))
}

/// What a document tells about its namespace: its size, its field set,
/// its arrays' lengths, and (by its `_id`) how they grew since last seen.
fn observe_in(state: &mut NamespaceState, doc: &Doc<'_>, id: Option<u64>) {
    state.doc_sizes.record(doc.raw.as_bytes().len() as u64);
    state.documents_seen += 1;
    record_field_set(state, doc.raw);
    record_arrays(state, doc, id);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each partition-key value grows by the bytes of its documents, runs
    /// of one value and values that come back later alike.
    #[test]
    fn key_growth_adds_each_values_documents() {
        let mut ns = Namespaces::default();
        let at = std::time::Instant::now();
        ns.observe_key_growth("d.c", [(1, 10), (1, 5), (2, 3), (1, 2)], at);
        ns.observe_key_growth("d.c", [], at);
        let state = ns.get("d.c").unwrap();
        let bytes = |k: u64| state.key_growth.get(&k).map(|g| g.bytes);
        assert_eq!((bytes(1), bytes(2), bytes(3)), (Some(17), Some(3), None));
        assert_eq!(state.key_growth_bytes, 20);
        // More values in one insert than are summed at once.
        ns.observe_key_growth("d.e", (0..40).map(|i| (100 + i % 10, 1)), at);
        let state = ns.get("d.e").unwrap();
        assert!((100..110).all(|k| state.key_growth.get(&k).map(|g| g.bytes) == Some(4)));
        assert_eq!(state.key_growth_bytes, 40);
    }

    /// A cursor's batch observed at once leaves what observing its
    /// documents one by one does: sizes, field sets, lengths and growth.
    #[test]
    fn a_batch_is_observed_as_its_documents_one_by_one() {
        let caps = Caps::default();
        let docs: Vec<bson::RawDocumentBuf> = [1, 3, 2, 5]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let tags: Vec<i32> = (0..*n).collect();
                bson::RawDocumentBuf::try_from(
                    &bson::doc! {"_id": (i % 2) as i32, "tags": tags, "kind": "post"},
                )
                .unwrap()
            })
            .collect();
        let parsed: Vec<Doc<'_>> = docs.iter().map(|d| Doc::new(d, &caps)).collect();
        let (mut batch, mut single) = (Namespaces::default(), Namespaces::default());
        batch.observe_documents("blog.posts", &parsed);
        for d in &parsed {
            single.observe_document("blog.posts", d);
        }
        let seen = |ns: &Namespaces| {
            let s = ns.get("blog.posts").unwrap();
            let tags = s.arrays.get(&"tags".to_string()).unwrap();
            (
                s.documents_seen,
                s.doc_sizes.count,
                s.field_sets.len(),
                tags.lengths.max,
                tags.growth_events,
                tags.max_growth,
            )
        };
        assert_eq!(seen(&batch), seen(&single));
        assert_eq!(seen(&batch), (4, 4, 1, 5, 2, 2));

        // An insert's documents likewise, their ids remembered as living
        // here either way.
        let (mut batch, mut single) = (Namespaces::default(), Namespaces::default());
        batch.observe_inserted_all("blog.posts", &parsed, [], std::time::Instant::now());
        for d in &parsed {
            single.observe_inserted("blog.posts", d);
        }
        assert_eq!(seen(&batch), seen(&single));
        for ns in [&batch, &single] {
            for id in [0, 1] {
                let owner = ns.id_owner(RawBsonRef::Int32(id));
                assert_eq!(owner, Some("blog.posts"));
            }
            assert_eq!(ns.id_owner(RawBsonRef::Int32(2)), None);
        }
    }
}
