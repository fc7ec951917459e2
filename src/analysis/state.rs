//! What wirelint has learnt about each namespace, for rules to read:
//! document sizes, array lengths per field path (array elements folded as
//! `arr.$`), arrays seen growing in the same document, and write operators
//! per path. Everything is capped: namespaces, paths per namespace and
//! documents remembered per namespace are bounded and the least recently
//! used entries are evicted, so memory stays flat however long it runs.

use super::command::{fold_path, is_bucketed, is_sliced};
use super::shape::{fnv1a, fnv1a_continue, FNV1A_START};
use crate::wire::bson_walk;
use bson::{RawBsonRef, RawDocument};
use std::hash::Hash;

/// Limits on what is remembered.
#[derive(Clone, Debug)]
pub struct Caps {
    pub namespaces: usize,
    pub paths_per_namespace: usize,
    pub documents_per_namespace: usize,
    /// Nesting followed when walking a document.
    pub depth: usize,
    /// Elements of an array looked into (for arrays inside arrays).
    pub elements_sampled: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            namespaces: 1_000,
            paths_per_namespace: 256,
            documents_per_namespace: 10_000,
            depth: 8,
            elements_sampled: 16,
        }
    }
}

/// A map that forgets its least recently used entries past a capacity:
/// the `lru` crate (O(1) per access; a full table reuses the evicted entry's
/// node, so a table at its cap allocates nothing), hashed with foldhash —
/// several times faster than SipHash on short keys, and randomly seeded, so
/// crafted keys cannot pile into one bucket — and counting what it forgets.
pub struct Lru<K: Hash + Eq, V> {
    cache: lru::LruCache<K, V, foldhash::fast::RandomState>,
    pub evicted: u64,
}

impl<K: Hash + Eq, V> std::fmt::Debug for Lru<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lru")
            .field("len", &self.cache.len())
            .field("cap", &self.cache.cap())
            .field("evicted", &self.evicted)
            .finish()
    }
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    pub fn new(cap: usize) -> Self {
        let cap = std::num::NonZeroUsize::new(cap.max(1)).expect("at least 1");
        Lru {
            cache: lru::LruCache::with_hasher(cap, foldhash::fast::RandomState::default()),
            evicted: 0,
        }
    }

    /// The entry for `key`, made fresh (most recently used); inserted with
    /// `make` when absent, forgetting the least recently used one when full.
    pub fn get_or_insert_with(&mut self, key: &K, make: impl FnOnce() -> V) -> &mut V {
        if self.cache.len() == self.cache.cap().get() && !self.cache.contains(key) {
            self.evicted += 1;
        }
        self.cache.get_or_insert_mut_ref(key, make)
    }

    /// Read access without refreshing recency.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.cache.peek(key)
    }

    /// Mutable access without refreshing recency or inserting.
    pub fn map_get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.cache.peek_mut(key)
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.cache.pop(key)
    }

    /// Every entry, most recently used first.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.cache.iter()
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

/// Sizes seen (array lengths, document bytes): an hdrhistogram — the
/// histogram latencies use too — for quantiles, at one significant digit
/// (within 10 %) up to 2^26, beyond any length or size a 48 MB message
/// can carry, in u32 counts (about 1.5 KiB); with the exact maximum and
/// count beside it, since findings quote them.
#[derive(Clone, Debug)]
pub struct SizeHist {
    quantiles: hdrhistogram::Histogram<u32>,
    pub count: u64,
    pub max: u64,
}

const SIZE_HIST_TOP: u64 = 1 << 26;

impl Default for SizeHist {
    fn default() -> Self {
        SizeHist {
            quantiles: hdrhistogram::Histogram::new_with_bounds(1, SIZE_HIST_TOP, 1)
                .expect("valid histogram bounds"),
            count: 0,
            max: 0,
        }
    }
}

impl SizeHist {
    pub fn record(&mut self, v: u64) {
        self.quantiles.saturating_record(v.min(SIZE_HIST_TOP));
        self.count += 1;
        self.max = self.max.max(v);
    }

    /// The value at quantile `q` (0..=1), within 10 % and never above the
    /// largest value seen.
    pub fn quantile(&self, q: f64) -> u64 {
        self.quantiles.value_at_quantile(q).min(self.max)
    }
}

/// Array lengths seen at one field path.
#[derive(Debug, Default)]
pub struct ArrayStats {
    pub lengths: SizeHist,
    /// Times the same document's array was seen longer than before.
    pub growth_events: u64,
    /// The largest increase seen between two observations of one document.
    pub max_growth: u64,
}

#[derive(Debug)]
pub struct NamespaceState {
    pub doc_sizes: SizeHist,
    pub arrays: Lru<String, ArrayStats>,
    /// Hashed document id → (hashed path, length) of its arrays.
    documents: Lru<u64, Vec<(u64, u32)>>,
    /// (operator, path) → count, from updates.
    pub write_ops: Lru<(String, String), u64>,
    /// Array paths the application bounds by design: `$push` with `$each`
    /// and `$slice`, or the bucket pattern (a counter bound in the filter).
    pub bounded_paths: Lru<String, ()>,
    /// Top-level field sets of the documents seen (WL501, WL505).
    pub field_sets: Lru<u64, FieldSet>,
    pub documents_seen: u64,
}

/// Documents with one set of top-level field names.
#[derive(Clone, Debug, Default)]
pub struct FieldSet {
    pub fields: Vec<String>,
    pub count: u64,
    /// Whether every non-`_id` value was a scalar (id-like: not a document
    /// or array) in every such document.
    pub all_scalar: bool,
    /// Per field, hashes of the string values seen (up to 8): what tells
    /// documents apart.
    pub values: Vec<(String, Vec<u64>)>,
}

/// Distinct values remembered per field of a field set.
const VALUES_PER_FIELD: usize = 8;

impl NamespaceState {
    /// Field sets seen, most common first.
    pub fn shapes(&self) -> Vec<&FieldSet> {
        let mut v: Vec<&FieldSet> = self.field_sets.iter().map(|(_, f)| f).collect();
        v.sort_by(|a, b| b.count.cmp(&a.count).then(a.fields.cmp(&b.fields)));
        v
    }

    fn new(caps: &Caps) -> Self {
        NamespaceState {
            doc_sizes: SizeHist::default(),
            arrays: Lru::new(caps.paths_per_namespace),
            documents: Lru::new(caps.documents_per_namespace),
            write_ops: Lru::new(caps.paths_per_namespace),
            bounded_paths: Lru::new(caps.paths_per_namespace),
            field_sets: Lru::new(64),
            documents_seen: 0,
        }
    }
}

/// All namespaces.
#[derive(Debug)]
pub struct Namespaces {
    pub map: Lru<String, NamespaceState>,
    pub caps: Caps,
    /// Hashes of inserted documents' `_id`s → their namespace: where the
    /// children an array refers to live (WL502).
    pub ids: Lru<u64, String>,
}

impl Default for Namespaces {
    fn default() -> Self {
        Namespaces::new(Caps::default())
    }
}

impl Namespaces {
    pub fn new(caps: Caps) -> Namespaces {
        Namespaces {
            map: Lru::new(caps.namespaces),
            ids: Lru::new(caps.documents_per_namespace * 10),
            caps,
        }
    }

    pub fn get(&self, namespace: &str) -> Option<&NamespaceState> {
        self.map.get(&namespace.to_string())
    }

    fn state(&mut self, namespace: &str) -> &mut NamespaceState {
        let caps = self.caps.clone();
        self.map
            .get_or_insert_with(&namespace.to_string(), || NamespaceState::new(&caps))
    }

    /// Records a document: its size, and the length of every array in it.
    /// Remembers an inserted document's `_id` (hashed) as living here.
    pub fn observe_inserted_id(&mut self, namespace: &str, doc: &RawDocument) {
        if let Some(id) = doc.get("_id").ok().flatten() {
            *self.ids.get_or_insert_with(&value_hash(id), String::new) = namespace.to_string();
        }
    }

    /// The namespace whose document has this `_id`, if one was inserted.
    pub fn id_owner(&self, value: RawBsonRef<'_>) -> Option<&str> {
        self.ids.get(&value_hash(value)).map(String::as_str)
    }

    pub fn observe_document(&mut self, namespace: &str, doc: &Doc<'_>) {
        let state = self.state(namespace);
        state.doc_sizes.record(doc.raw.as_bytes().len() as u64);
        state.documents_seen += 1;
        record_field_set(state, doc.raw);
        for array in &doc.arrays {
            state
                .arrays
                .get_or_insert_with(&array.path, ArrayStats::default)
                .lengths
                .record(array.len as u64);
        }
        // Growth: compare with what this document's arrays were last time.
        let Some(id) = doc.raw.get("_id").ok().flatten() else {
            return;
        };
        let id = value_hash(id);
        let now: Vec<(u64, u32)> = doc
            .arrays
            .iter()
            .filter(|a| !a.path.contains('$'))
            .take(16)
            .map(|a| (fnv1a(a.path.as_bytes()), a.len))
            .collect();
        let previous = state.documents.get(&id).cloned();
        if let Some(previous) = previous {
            for ArrayInDoc { path, len, .. } in &doc.arrays {
                let h = fnv1a(path.as_bytes());
                if let Some((_, before)) = previous.iter().find(|(p, _)| *p == h) {
                    if len > before {
                        let stats = state.arrays.get_or_insert_with(path, ArrayStats::default);
                        stats.growth_events += 1;
                        stats.max_growth = stats.max_growth.max((len - before) as u64);
                    }
                }
            }
        }
        *state.documents.get_or_insert_with(&id, Vec::new) = now;
    }

    /// Records the operators and paths of an update document.
    pub fn observe_update(
        &mut self,
        namespace: &str,
        filter: Option<&RawDocument>,
        update: &RawDocument,
    ) {
        let bucketed = is_bucketed(filter, Some(update));
        let state = self.state(namespace);
        for (op, fields) in update.iter().flatten() {
            if !op.as_str().starts_with('$') {
                return;
            }
            if let RawBsonRef::Document(fields) = fields {
                for (path, value) in fields.iter().flatten() {
                    *state.write_ops.get_or_insert_with(
                        &(op.as_str().to_string(), path.as_str().to_string()),
                        || 0,
                    ) += 1;
                    let appends = matches!(op.as_str(), "$push" | "$addToSet");
                    if appends && (bucketed || is_sliced(value)) {
                        state
                            .bounded_paths
                            .get_or_insert_with(&fold_path(path.as_str()), || ());
                    }
                }
            }
        }
    }
}

fn record_field_set(state: &mut NamespaceState, doc: &RawDocument) {
    let mut fields: Vec<&str> = Vec::new();
    let mut all_scalar = true;
    let mut values: Vec<(&str, u64)> = Vec::new();
    // Raw bytes: no decoding of values that are not hashed (a large
    // string is skipped by its length, not validated).
    for e in bson_walk::elements(doc.as_bytes())
        .map_while(Result::ok)
        .take(64)
    {
        let Ok(key) = std::str::from_utf8(e.key) else {
            continue;
        };
        fields.push(key);
        if key != "_id" && matches!(e.element_type, 0x03 | 0x04) {
            all_scalar = false;
        }
        let scalar = match e.element_type {
            0x02 => e.as_str().map(RawBsonRef::String),
            0x10 => e
                .value
                .try_into()
                .ok()
                .map(|b| RawBsonRef::Int32(i32::from_le_bytes(b))),
            0x08 => e.value.first().map(|b| RawBsonRef::Boolean(*b != 0)),
            _ => None,
        };
        if let Some(v) = scalar {
            values.push((key, value_hash(v)));
        }
    }
    fields.sort_unstable();
    let mut key = FNV1A_START;
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            key = fnv1a_continue(key, &[0]);
        }
        key = fnv1a_continue(key, field.as_bytes());
    }
    let set = state.field_sets.get_or_insert_with(&key, || FieldSet {
        fields: fields.iter().map(|f| f.to_string()).collect(),
        count: 0,
        all_scalar: true,
        values: Vec::new(),
    });
    set.count += 1;
    set.all_scalar &= all_scalar;
    for (field, hash) in values {
        match set.values.iter_mut().find(|(f, _)| *f == field) {
            Some((_, hashes)) => {
                if !hashes.contains(&hash) && hashes.len() < VALUES_PER_FIELD {
                    hashes.push(hash);
                }
            }
            None => set.values.push((field.to_string(), vec![hash])),
        }
    }
}

/// A hash of a value for equality tests inside wirelint (values are never
/// kept or shown, only compared).
/// Hashes the value's own encoding (type tag + bytes), piece by piece.
pub fn value_hash(v: RawBsonRef<'_>) -> u64 {
    let h = fnv1a_continue(FNV1A_START, &[v.element_type() as u8]);
    match v {
        RawBsonRef::String(s) => fnv1a_continue(h, s.as_bytes()),
        RawBsonRef::ObjectId(o) => fnv1a_continue(h, &o.bytes()),
        RawBsonRef::Int32(i) => fnv1a_continue(h, &i.to_le_bytes()),
        RawBsonRef::Int64(i) => fnv1a_continue(h, &i.to_le_bytes()),
        RawBsonRef::Double(d) => fnv1a_continue(h, &d.to_le_bytes()),
        RawBsonRef::Binary(b) => fnv1a_continue(h, b.bytes),
        RawBsonRef::Document(d) => fnv1a_continue(h, d.as_bytes()),
        RawBsonRef::Array(a) => fnv1a_continue(h, a.as_bytes()),
        RawBsonRef::DateTime(d) => fnv1a_continue(h, &d.timestamp_millis().to_le_bytes()),
        other => fnv1a_continue(h, format!("{other:?}").as_bytes()),
    }
}

/// One array in a document: its folded path, length and encoded size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayInDoc {
    pub path: String,
    pub len: u32,
    pub bytes: usize,
}

/// Every array in `doc`, elements folded as `path.$`.
pub fn arrays_in(doc: &RawDocument, caps: &Caps) -> Vec<ArrayInDoc> {
    let mut found = Vec::new();
    walk_arrays(doc.as_bytes(), &mut String::new(), 0, caps, &mut found);
    found
}

/// A document the analysis saw, walked once: its arrays are found here and
/// shared by the namespace state and every rule.
pub struct Doc<'a> {
    pub raw: &'a RawDocument,
    pub arrays: Vec<ArrayInDoc>,
}

impl<'a> Doc<'a> {
    pub fn new(raw: &'a RawDocument, caps: &Caps) -> Doc<'a> {
        Doc {
            raw,
            arrays: arrays_in(raw, caps),
        }
    }
}

/// Collects (path, length) for every array, elements folded as `path.$`.
/// `path` is the prefix so far; it is restored before returning. Walks the
/// raw bytes (no UTF-8 or value decoding) and builds a path only for
/// documents and arrays.
fn walk_arrays(
    doc: &[u8],
    path: &mut String,
    depth: usize,
    caps: &Caps,
    out: &mut Vec<ArrayInDoc>,
) {
    if depth >= caps.depth || out.len() >= caps.paths_per_namespace {
        return;
    }
    for element in bson_walk::elements(doc) {
        let Ok(element) = element else { return };
        if !matches!(element.element_type, 0x03 | 0x04) {
            continue;
        }
        let mark = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&String::from_utf8_lossy(element.key));
        if element.element_type == 0x03 {
            walk_arrays(element.value, path, depth + 1, caps, out);
        } else {
            let array_path = path.clone();
            path.push_str(".$");
            let mut len = 0u32;
            for item in bson_walk::elements(element.value) {
                let Ok(item) = item else { break };
                if item.element_type == 0x03 && (len as usize) < caps.elements_sampled {
                    walk_arrays(item.value, path, depth + 1, caps, out);
                }
                len += 1;
            }
            out.push(ArrayInDoc {
                path: array_path,
                len,
                bytes: element.value.len(),
            });
        }
        path.truncate(mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn lru_forgets_the_least_recently_used() {
        let mut lru = Lru::new(10);
        for i in 0..10 {
            *lru.get_or_insert_with(&i, || 0) += 1;
        }
        lru.get_or_insert_with(&0, || 0); // 0 is fresh again
        lru.get_or_insert_with(&10, || 0);
        assert_eq!(lru.len(), 10);
        assert!(lru.get(&0).is_some() && lru.get(&1).is_none());
        for i in 100..10_000 {
            lru.get_or_insert_with(&i, || 0);
        }
        assert!(lru.len() <= 10);
    }

    #[test]
    fn histogram_quantiles_bound_the_value() {
        let mut h = SizeHist::default();
        for v in 1..=1000 {
            h.record(v);
        }
        assert_eq!(h.max, 1000);
        let p99 = h.quantile(0.99);
        assert!((990..=1000).contains(&p99), "{p99}");
        assert!(
            h.quantile(0.5) >= 500 && h.quantile(0.5) < 768,
            "{}",
            h.quantile(0.5)
        );
        // Zero counts; past the top is clamped for quantiles, kept as max.
        h.record(0);
        h.record(1 << 40);
        assert_eq!((h.count, h.max), (1002, 1 << 40));
    }

    #[test]
    fn arrays_are_measured_per_folded_path_and_growth_is_seen() {
        let mut ns = Namespaces::default();
        let doc = |n: i32| {
            let comments: Vec<bson::Bson> = (0..n)
                .map(|i| bson::bson!({"t": i, "likes": [1, 2]}))
                .collect();
            bson::RawDocumentBuf::try_from(
                &bson::doc! {"_id": 1, "comments": comments, "meta": {"tags": ["a"]}},
            )
            .unwrap()
        };
        let caps = Caps::default();
        ns.observe_document("blog.posts", &Doc::new(&doc(3), &caps));
        ns.observe_document("blog.posts", &Doc::new(&doc(5), &caps));
        let state = ns.get("blog.posts").unwrap();
        let comments = state.arrays.get(&"comments".to_string()).unwrap();
        assert_eq!(comments.lengths.max, 5);
        assert_eq!(comments.growth_events, 1);
        assert_eq!(comments.max_growth, 2);
        assert!(state.arrays.get(&"comments.$.likes".to_string()).is_some());
        assert!(state.arrays.get(&"meta.tags".to_string()).is_some());
        assert_eq!(state.doc_sizes.count, 2);
        ns.observe_update(
            "blog.posts",
            None,
            &rawdoc! {"$push": {"comments": {"t": 1}}, "$inc": {"n": 1}},
        );
        assert!(ns.get("blog.posts").unwrap().bounded_paths.is_empty());
        ns.observe_update(
            "blog.posts",
            None,
            &rawdoc! {"$push": {"recent": {"$each": [1], "$slice": -10}}},
        );
        ns.observe_update(
            "blog.buckets",
            Some(&rawdoc! {"postId": 1, "count": {"$lt": 100}}),
            &rawdoc! {"$push": {"comments": 1}, "$inc": {"count": 1}},
        );
        assert!(ns
            .get("blog.posts")
            .unwrap()
            .bounded_paths
            .get(&"recent".to_string())
            .is_some());
        assert!(ns
            .get("blog.buckets")
            .unwrap()
            .bounded_paths
            .get(&"comments".to_string())
            .is_some());
        let state = ns.get("blog.posts").unwrap();
        assert_eq!(
            state
                .write_ops
                .get(&("$push".to_string(), "comments".to_string())),
            Some(&1)
        );
    }
}
