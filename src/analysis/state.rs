//! What wirelint has learnt about each namespace, for rules to read:
//! document sizes, array lengths per field path (array elements folded as
//! `arr.$`), arrays seen growing in the same document, and write operators
//! per path. Everything is capped: namespaces, paths per namespace and
//! documents remembered per namespace are bounded and the least recently
//! used entries are evicted, so memory stays flat however long it runs.

pub use super::budget::Lru;
use super::budget::{self, short_key, HashCache, Pool, ENTRY_OVERHEAD};
use super::command::{fold_path, is_bucketed, is_sliced_element};
use super::shape::{fnv1a, FNV1A_START};
use crate::wire::bson_walk;
use bson::{RawBsonRef, RawDocument};
use smallvec::SmallVec;
use std::sync::Arc;

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
    /// Observations of a document seen before that showed no growth, since
    /// the last one that did: a set that stopped growing (every value of
    /// its vocabulary added) keeps counting up.
    pub since_growth: u64,
}

impl ArrayStats {
    /// One more observation of a document whose length at `path` was
    /// known: `before` → `len`.
    fn observed(&mut self, before: u32, len: u32) {
        if len > before {
            self.growth_events += 1;
            self.max_growth = self.max_growth.max((len - before) as u64);
            self.since_growth = 0;
        } else {
            self.since_growth += 1;
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
    /// Its name (shortened), shared by the inserted ids it owns.
    name: Arc<str>,
}

/// Documents with one set of top-level field names.
#[derive(Clone, Debug, Default)]
pub struct FieldSet {
    pub fields: Vec<String>,
    pub count: u64,
    /// Whether every non-`_id` value was a scalar (id-like: not a document
    /// or array) in every such document.
    pub all_scalar: bool,
    /// Bit `i` set: `fields[i]` held an ObjectId or a binary (UUID) in
    /// every such document — a reference by its type.
    pub id_typed: u64,
    /// Per field, hashes of the string values seen (up to 8): what tells
    /// documents apart.
    pub values: Vec<(String, Vec<u64>)>,
    /// The field order last seen: for the document's `i`-th field, its
    /// index in `fields` and in `values` ([`UNKNOWN`] for none yet), and
    /// a hash of that order. A document in the same order (nearly every
    /// one an application writes) finds its fields' entries without a
    /// search by name.
    order: Vec<(u8, u8)>,
    order_hash: u64,
}

/// No entry (yet) in a field set's `fields` or `values`.
const UNKNOWN: u8 = u8::MAX;

/// Distinct values remembered per field of a field set.
const VALUES_PER_FIELD: usize = 8;

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
            field_sets: Lru::in_pool(FIELD_SETS_PER_NAMESPACE, p(), |_, set| {
                // Its names, and at most VALUES_PER_FIELD hashes per name.
                let per_field = 2 * std::mem::size_of::<String>()
                    + std::mem::size_of::<Vec<u64>>()
                    + VALUES_PER_FIELD * 8;
                // (and its place in the order last seen)
                let per_field = per_field + std::mem::size_of::<(u8, u8)>();
                std::mem::size_of::<(u64, FieldSet)>()
                    + set
                        .fields
                        .iter()
                        .map(|f| 2 * f.len() + per_field)
                        .sum::<usize>()
                    + ENTRY_OVERHEAD
            }),
            documents_seen: 0,
            name: Arc::from(name),
        }
    }
}

/// Heap bytes of a [`SizeHist`] (368 u32 counts; see `tests/memory_budget.rs`).
pub const SIZE_HIST_HEAP: usize = 1536;
/// Arrays remembered per document for growth detection.
const ARRAYS_PER_DOCUMENT: usize = 16;

/// A document's arrays' lengths when last seen, by a hash of their paths:
/// inline up to two, so that remembering a document allocates nothing for
/// most documents.
type LastLengths = SmallVec<[(u64, u32); 2]>;

/// Distinct top-level field sets remembered per namespace.
const FIELD_SETS_PER_NAMESPACE: usize = 64;
/// Top-level fields of a document looked at for its field set.
const FIELDS_PER_SET: usize = 64;

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
        self.observe_inserted_all(namespace, std::slice::from_ref(doc))
    }

    /// An insert's documents: the namespace looked up once, not per
    /// document.
    pub fn observe_inserted_all(&mut self, namespace: &str, docs: &[Doc<'_>]) {
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
        self.observe_document_with_id(namespace, doc, id)
    }

    fn observe_document_with_id(&mut self, namespace: &str, doc: &Doc<'_>, id: Option<u64>) {
        observe_in(self.state(namespace), doc, id)
    }

    /// What an update document tells: the array lengths it makes known
    /// (when its filter pins one document) and the paths it bounds.
    pub fn observe_update(
        &mut self,
        namespace: &str,
        filter: Option<&RawDocument>,
        update: &RawDocument,
    ) {
        let bucketed = is_bucketed(filter, Some(update));
        let id = filter.and_then(pinned_id);
        let state = self.state(namespace);
        if let Some(id) = id {
            record_written_lengths(state, id, update);
        }
        for (op, fields) in bson_walk::pairs(update.as_bytes()).map_while(Result::ok) {
            if !op.starts_with('$') {
                return;
            }
            let bson_walk::Value::Document(fields) = fields else {
                continue;
            };
            if !matches!(op, "$push" | "$addToSet") {
                continue;
            }
            for e in bson_walk::elements(fields).map_while(Result::ok) {
                let Some(path) = e.key_str() else {
                    continue;
                };
                if bucketed || is_sliced_element(&e) {
                    let folded = fold_path(path);
                    state
                        .bounded_paths
                        .get_or_insert_with(&*short_key(&folded), || ());
                }
            }
        }
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

/// The hashed `_id` a filter pins by equality (`{_id: v}`, `{_id: {$eq: v}}`):
/// the one document an update writes.
fn pinned_id(filter: &RawDocument) -> Option<u64> {
    match filter.get("_id").ok()?? {
        RawBsonRef::Document(d) => match d.iter().next()?.ok()? {
            (op, v) if op.as_str() == "$eq" && d.iter().count() == 1 => match v {
                RawBsonRef::Document(_) | RawBsonRef::Array(_) => None,
                v => Some(value_hash(v)),
            },
            (op, _) if op.as_str().starts_with('$') => None,
            _ => Some(value_hash(RawBsonRef::Document(d))),
        },
        RawBsonRef::Array(_) | RawBsonRef::RegularExpression(_) => None,
        v => Some(value_hash(v)),
    }
}

/// Array lengths one update of one document makes known: a whole-array
/// `$set` gives the length; a `$push` without `$slice` adds its elements
/// to a length already known. (`$addToSet` may add nothing: only reads
/// tell.) Each is recorded as an observation of that document's array.
fn record_written_lengths(state: &mut NamespaceState, id: u64, update: &RawDocument) {
    for (op, fields) in bson_walk::pairs(update.as_bytes()).map_while(Result::ok) {
        let bson_walk::Value::Document(fields) = fields else {
            continue;
        };
        for e in bson_walk::elements(fields).map_while(Result::ok) {
            let Some(path) = e.key_str() else {
                continue;
            };
            let path = fold_path(path);
            if path.contains('$') {
                continue;
            }
            let count = |array: &[u8]| bson_walk::elements(array).map_while(Result::ok).count();
            let len =
                match (op, e.element_type) {
                    ("$set", 0x04) => count(e.value),
                    ("$push", _) if !is_sliced_element(&e) => {
                        // `{$each: [...]}` adds its elements; anything else, one.
                        let each = (e.element_type == 0x03)
                            .then(|| bson_walk::field(e.value, b"$each"))
                            .flatten();
                        let added = match each {
                            Some(each) if each.element_type == 0x04 => count(each.value),
                            _ => 1,
                        };
                        let h = fnv1a(path.as_bytes());
                        let Some(before) = state.documents.map_get_mut(&id).and_then(|arrays| {
                            arrays.iter().find(|(p, _)| *p == h).map(|(_, l)| *l)
                        }) else {
                            continue;
                        };
                        before as usize + added
                    }
                    _ => continue,
                };
            record_length(state, id, &path, len.min(u32::MAX as usize) as u32);
        }
    }
}

/// One document's array at `path` is `len` long: recorded in the path's
/// lengths, and as growth when it is longer than last seen.
fn record_length(state: &mut NamespaceState, id: u64, path: &str, len: u32) {
    let h = fnv1a(path.as_bytes());
    let arrays = state.documents.get_or_insert_with(&id, LastLengths::new);
    let before = match arrays.iter_mut().find(|(p, _)| *p == h) {
        Some((_, l)) => Some(std::mem::replace(l, len)),
        None => {
            if arrays.len() < ARRAYS_PER_DOCUMENT {
                arrays.push((h, len));
            }
            None
        }
    };
    let stats = state.arrays.get_or_insert_with(path, ArrayStats::default);
    stats.lengths.record(len as u64);
    if let Some(before) = before {
        stats.observed(before, len);
    }
}

/// What a document tells about its namespace: its size, its field set,
/// its arrays' lengths, and (by its `_id`) how they grew since last seen.
fn observe_in(state: &mut NamespaceState, doc: &Doc<'_>, id: Option<u64>) {
    state.doc_sizes.record(doc.raw.as_bytes().len() as u64);
    state.documents_seen += 1;
    record_field_set(state, doc.raw);
    // Growth: what this document's arrays were last time, swapped for
    // what they are now (one lookup of the document).
    let previous = match id {
        Some(id) if !doc.arrays.is_empty() => {
            let now: LastLengths = doc
                .arrays
                .iter()
                .filter(|a| !a.path.contains('$'))
                .take(ARRAYS_PER_DOCUMENT)
                .map(|a| (fnv1a(a.path.as_bytes()), a.len))
                .collect();
            let last = state.documents.get_or_insert_with(&id, LastLengths::new);
            Some(std::mem::replace(last, now))
        }
        Some(id) => {
            // Nothing to compare next time: no entry (most documents; in
            // most namespaces the table stays empty and is not even hashed
            // into).
            if !state.documents.is_empty() {
                state.documents.remove(&id);
            }
            None
        }
        None => None,
    };
    // Each array's lengths, and its growth since the document was last
    // seen (a document seen for the first time has no previous lengths).
    for ArrayInDoc { path, len, .. } in &doc.arrays {
        let stats = state.arrays.get_or_insert_with(path, ArrayStats::default);
        stats.lengths.record(*len as u64);
        let Some(previous) = previous.as_ref().filter(|p| !p.is_empty()) else {
            continue;
        };
        let h = fnv1a(path.as_bytes());
        if let Some((_, before)) = previous.iter().find(|(p, _)| *p == h) {
            stats.observed(*before, *len);
        }
    }
}

fn record_field_set(state: &mut NamespaceState, doc: &RawDocument) {
    // (name, held an ObjectId or binary, a short scalar value),
    // on the stack for most documents (filled as read, not zeroed to the
    // cap first): a document allocates nothing here once its set is known.
    let mut fields: SmallVec<[(&str, bool, Option<RawBsonRef<'_>>); 16]> = SmallVec::new();
    let mut all_scalar = true;
    // The set's key does not depend on the fields' order (a wrapping sum
    // of their names' hashes, and their number), so a document's fields
    // are not sorted; the names are, once, when the set is new. The
    // order's own hash finds the fields' entries (below).
    let mut key = 0u64;
    let mut order_hash = FNV1A_START;
    // Raw bytes: no decoding of values that are not hashed (a large
    // string is skipped by its length, not validated).
    for e in bson_walk::elements(doc.as_bytes())
        .map_while(Result::ok)
        .take(FIELDS_PER_SET)
    {
        let Some(key_str) = bson_walk::utf8(e.key) else {
            continue;
        };
        let name_hash = fnv1a(e.key);
        key = key.wrapping_add(name_hash);
        order_hash = (order_hash ^ name_hash).wrapping_mul(0x0100_0000_01b3);
        let is_id = key_str == "_id";
        if !is_id && matches!(e.element_type, 0x03 | 0x04) {
            all_scalar = false;
        }
        // (`_id`'s values are never compared: unique per document, they
        // tell nothing apart.)
        let scalar = match e.element_type {
            _ if is_id => None,
            0x02 if e.value.len() <= MAX_TAG_BYTES + 5 => e.as_str().map(RawBsonRef::String),
            0x10 => e
                .value
                .try_into()
                .ok()
                .map(|b| RawBsonRef::Int32(i32::from_le_bytes(b))),
            0x08 => e.value.first().map(|b| RawBsonRef::Boolean(*b != 0)),
            _ => None,
        };
        fields.push((key_str, matches!(e.element_type, 0x05 | 0x07), scalar));
    }
    let fields = &fields[..];
    let key = key.wrapping_add(fields.len() as u64);
    let set = state.field_sets.get_or_insert_with(&key, || {
        let mut names: Vec<String> = fields.iter().map(|f| short_key(f.0).into_owned()).collect();
        names.sort_unstable();
        FieldSet {
            fields: names,
            count: 0,
            all_scalar: true,
            id_typed: u64::MAX,
            values: Vec::new(),
            order: Vec::new(),
            order_hash: 0,
        }
    });
    set.count += 1;
    set.all_scalar &= all_scalar;
    if !fields.iter().any(|f| f.1 || f.2.is_some()) {
        // No reference by type, no value to remember.
        set.id_typed = 0;
        return;
    }
    // Each field's entries, searched by name only when the order is new.
    if set.order_hash != order_hash || set.order.len() != fields.len() {
        let order = fields
            .iter()
            .map(|f| {
                let name = short_key(f.0);
                (
                    index_of(set.fields.iter(), &name),
                    index_of(set.values.iter().map(|v| &v.0), &name),
                )
            })
            .collect();
        set.order = order;
        set.order_hash = order_hash;
    }
    // Bit i: the set's i-th (sorted) field held an ObjectId or binary.
    let mask = fields
        .iter()
        .zip(&set.order)
        .filter(|(f, (i, _))| f.1 && *i < 64)
        .fold(0u64, |m, (_, (i, _))| m | 1 << i);
    set.id_typed &= mask;
    // A value is hashed only while its field has room for it (a field
    // of many values, a name or a count, costs no hash once full).
    for (i, f) in fields.iter().enumerate() {
        let Some(value) = f.2 else {
            continue;
        };
        let mut slot = set.order[i].1;
        if slot == UNKNOWN {
            // A field whose first value this is (or one named twice).
            let field = short_key(f.0);
            slot = index_of(set.values.iter().map(|v| &v.0), &field);
            if slot == UNKNOWN {
                if set.values.len() >= usize::from(UNKNOWN) {
                    continue;
                }
                set.values.push((field.into_owned(), Vec::new()));
                slot = (set.values.len() - 1) as u8;
            }
            set.order[i].1 = slot;
        }
        let hashes = &mut set.values[usize::from(slot)].1;
        if hashes.len() < VALUES_PER_FIELD {
            let hash = value_hash(value);
            if !hashes.contains(&hash) {
                hashes.push(hash);
            }
        }
    }
}

/// Where `name` first is among `names`, or [`UNKNOWN`].
fn index_of<'a>(mut names: impl Iterator<Item = &'a String>, name: &str) -> u8 {
    names
        .position(|s| s == name)
        .map_or(UNKNOWN, |i| i.min(usize::from(UNKNOWN)) as u8)
}

/// A hash of a value for equality tests inside wirelint (values are never
/// kept or shown, only compared; the hashes stay in this process).
/// Hashes the value's own encoding (type tag + bytes) with foldhash at a
/// fixed seed: the same value hashes the same on every worker, and a long
/// string costs a fraction of what a byte-at-a-time hash did.
pub fn value_hash(v: RawBsonRef<'_>) -> u64 {
    let h = |bytes: &[u8]| tagged_hash(v.element_type() as u8, bytes);
    match v {
        RawBsonRef::String(s) => h(s.as_bytes()),
        RawBsonRef::ObjectId(o) => h(&o.bytes()),
        RawBsonRef::Int32(i) => h(&i.to_le_bytes()),
        RawBsonRef::Int64(i) => h(&i.to_le_bytes()),
        RawBsonRef::Double(d) => h(&d.to_le_bytes()),
        RawBsonRef::Binary(b) => h(b.bytes),
        RawBsonRef::Document(d) => h(d.as_bytes()),
        RawBsonRef::Array(a) => h(a.as_bytes()),
        RawBsonRef::DateTime(d) => h(&d.timestamp_millis().to_le_bytes()),
        // A flag (`active`, `deleted`) is a field set's commonest scalar:
        // hashed as its byte, not formatted.
        RawBsonRef::Boolean(b) => h(&[u8::from(b)]),
        other => h(format!("{other:?}").as_bytes()),
    }
}

/// [`value_hash`] of `doc`'s first `_id`, walked to already.
fn hash_of_id(doc: &RawDocument, e: &bson_walk::Element<'_>) -> Option<u64> {
    element_hash(e).or_else(|| doc.get("_id").ok().flatten().map(value_hash))
}

/// [`value_hash`] of a walked element, from its bytes (the same type tag
/// and bytes `value_hash` hashes); `None` for the types `value_hash`
/// decodes first, which the caller hands to bson.
pub fn element_hash(e: &bson_walk::Element<'_>) -> Option<u64> {
    let bytes = match e.element_type {
        0x02 => e.as_str()?.as_bytes(),
        0x01 | 0x03 | 0x04 | 0x07 | 0x09 | 0x10 | 0x12 => e.value,
        // Binary (not the old subtype 2, which nests a second length).
        0x05 if e.value.get(4).is_some_and(|s| *s != 0x02) => &e.value[5..],
        _ => return None,
    };
    Some(tagged_hash(e.element_type, bytes))
}

fn tagged_hash(element_type: u8, bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(VALUE_HASH_SEED).hash_one((element_type, bytes))
}

/// `value_hash`'s seed (any constant: the hashes never leave the process).
const VALUE_HASH_SEED: u64 = 0x7769_7265_6c69_6e74;

/// Strings longer than this are not remembered as a field's values: a type
/// tag or status is short, and hashing every long text of every document
/// read is what the analysis cannot afford.
const MAX_TAG_BYTES: usize = 64;

/// One array in a document: its folded path, length and encoded size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayInDoc {
    pub path: String,
    pub len: u32,
    pub bytes: usize,
    /// Every element a number, or an array of numbers: a vector (an
    /// embedding) or coordinates, whose size is fixed by what it encodes,
    /// not by related entities that keep coming.
    pub numeric: bool,
}

/// A document the analysis saw, walked once: its arrays are found here and
/// shared by the namespace state and every rule.
pub struct Doc<'a> {
    pub raw: &'a RawDocument,
    pub arrays: Vec<ArrayInDoc>,
    /// [`value_hash`] of its first top-level `_id`, found in the same walk.
    pub id: Option<u64>,
}

impl<'a> Doc<'a> {
    pub fn new(raw: &'a RawDocument, caps: &Caps) -> Doc<'a> {
        let mut arrays = Vec::new();
        let mut id = None;
        PATH.with_borrow_mut(|path| {
            path.clear();
            walk_arrays(raw.as_bytes(), path, 0, caps, &mut arrays, Some(&mut id));
            // A document with huge keys does not leave its buffer behind.
            if path.capacity() > MAX_KEPT_PATH {
                *path = String::new();
            }
        });
        Doc {
            raw,
            arrays,
            id: id.and_then(|e| hash_of_id(raw, &e)),
        }
    }
}

thread_local! {
    /// The path being walked by [`Doc::new`]: one buffer per thread, not
    /// one per document with an embedded document or array.
    static PATH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The most a thread's path buffer keeps between documents.
const MAX_KEPT_PATH: usize = 4096;

/// BSON double, int32, int64, decimal128.
fn is_number(element_type: u8) -> bool {
    matches!(element_type, 0x01 | 0x10 | 0x12 | 0x13)
}

/// Collects (path, length) for every array, elements folded as `path.$`.
/// `path` is the prefix so far; it is restored before returning. Walks the
/// raw bytes (no UTF-8 or value decoding) and builds a path only for
/// documents and arrays.
fn walk_arrays<'d>(
    doc: &'d [u8],
    path: &mut String,
    depth: usize,
    caps: &Caps,
    out: &mut Vec<ArrayInDoc>,
    mut id: Option<&mut Option<bson_walk::Element<'d>>>,
) {
    if depth >= caps.depth || out.len() >= caps.paths_per_namespace {
        return;
    }
    for element in bson_walk::elements(doc) {
        let Ok(element) = element else { return };
        // The top level's first `_id` (a repeated key: the first counts).
        if let Some(id) = id.as_deref_mut() {
            if id.is_none() && element.key == b"_id" {
                *id = Some(element);
            }
        }
        if !matches!(element.element_type, 0x03 | 0x04) {
            continue;
        }
        let mark = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&String::from_utf8_lossy(element.key));
        if element.element_type == 0x03 {
            walk_arrays(element.value, path, depth + 1, caps, out, None);
        } else {
            let array_path = short_key(path).into_owned();
            path.push_str(".$");
            let mut len = 0u32;
            let mut numeric = true;
            for item in bson_walk::elements(element.value) {
                let Ok(item) = item else { break };
                if item.element_type == 0x03 && (len as usize) < caps.elements_sampled {
                    walk_arrays(item.value, path, depth + 1, caps, out, None);
                }
                numeric = numeric
                    && (is_number(item.element_type)
                        || (item.element_type == 0x04
                            && bson_walk::elements(item.value)
                                .all(|e| e.is_ok_and(|e| is_number(e.element_type)))));
                len += 1;
            }
            out.push(ArrayInDoc {
                path: array_path,
                len,
                bytes: element.value.len(),
                numeric: numeric && len > 0,
            });
        }
        path.truncate(mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    /// The hashed `_id` of a document, found by a walk of its own: what
    /// [`Doc::id`] must agree with.
    fn id_hash(doc: &RawDocument) -> Option<u64> {
        let e = bson_walk::field(doc.as_bytes(), b"_id")?;
        hash_of_id(doc, &e)
    }

    /// A document with a huge key does not leave a huge path buffer
    /// behind on its thread; an ordinary one keeps the buffer for reuse.
    #[test]
    fn the_path_buffer_stays_small() {
        let caps = Caps::default();
        let mut big = bson::RawDocumentBuf::new();
        let key = bson::raw::CString::try_from("k".repeat(100_000).as_str()).unwrap();
        big.append(key, rawdoc! {"a": [1]});
        Doc::new(&big, &caps);
        assert!(PATH.with_borrow(|p| p.capacity()) <= MAX_KEPT_PATH);
        Doc::new(&rawdoc! {"tags": ["a"], "sub": {"list": [1]}}, &caps);
        assert!(PATH.with_borrow(|p| p.capacity()) > 0);
    }

    /// The walked hash of an `_id` is the decoded one, for every type
    /// `element_hash` reads itself; the others go to bson.
    #[test]
    fn element_hash_is_value_hash() {
        let oid = bson::oid::ObjectId::from_bytes([7; 12]);
        let doc = rawdoc! {
            "s": "text", "d": 2.5, "o": {"a": 1}, "a": [1, "x"], "oid": oid,
            "t": bson::DateTime::from_millis(1_700_000_000_000), "i": 42i32, "l": 1i64 << 40,
            "u": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![1; 16] },
            "old": bson::Binary { subtype: bson::spec::BinarySubtype::BinaryOld, bytes: vec![2; 4] },
            "n": bson::RawBson::Null, "ts": bson::Timestamp { time: 1, increment: 2 },
        };
        let mut read = 0;
        for (e, (key, value)) in bson_walk::elements(doc.as_bytes()).zip(doc.iter().flatten()) {
            let e = e.unwrap();
            assert_eq!(e.key, key.as_str().as_bytes());
            if let Some(h) = element_hash(&e) {
                assert_eq!(h, value_hash(value), "{}", key.as_str());
                read += 1;
            }
        }
        assert_eq!(read, 9, "all but the old binary, null and timestamp");
        let caps = Caps::default();
        let with_id = |id: bson::RawBson| {
            let d =
                rawdoc! {"a": [{"_id": 1}], "x": {"_id": 2}, "_id": id.clone(), "_id": "second"};
            // A document's walk finds the same `_id` as `id_hash`'s own.
            assert_eq!(Doc::new(&d, &caps).id, id_hash(&d));
            (id_hash(&d), value_hash(id.as_raw_bson_ref()))
        };
        for id in [
            bson::RawBson::Int32(5),
            bson::RawBson::Null,
            bson::RawBson::String("k".into()),
            bson::RawBson::Document(bson::rawdoc! {"k": 1}),
        ] {
            let (walked, decoded) = with_id(id);
            assert_eq!(walked, Some(decoded), "the first top-level _id counts");
        }
        assert_eq!(Doc::new(&rawdoc! {"a": {"_id": 1}}, &caps).id, None);
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
    fn writes_that_make_a_length_known_count_as_observations() {
        let mut ns = Namespaces::default();
        let caps = Caps::default();
        let stats = |ns: &Namespaces, path: &str| {
            let a = ns
                .get("app.posts")
                .unwrap()
                .arrays
                .get(&path.to_string())
                .unwrap();
            (a.lengths.max, a.growth_events)
        };
        ns.observe_document(
            "app.posts",
            &Doc::new(&rawdoc! {"_id": 7, "comments": [], "tags": ["a"]}, &caps),
        );
        // $push onto a length known from the insert: 0 → 1 → 3.
        let filter = rawdoc! {"_id": 7};
        ns.observe_update(
            "app.posts",
            Some(&filter),
            &rawdoc! {"$push": {"comments": {"t": 1}}},
        );
        ns.observe_update(
            "app.posts",
            Some(&filter),
            &rawdoc! {"$push": {"comments": {"$each": [{"t": 2}, {"t": 3}]}}},
        );
        assert_eq!(stats(&ns, "comments"), (3, 2));
        // Another document's push, or one with $slice, or $addToSet, says
        // nothing about this one's length.
        ns.observe_update(
            "app.posts",
            Some(&rawdoc! {"_id": 8}),
            &rawdoc! {"$push": {"comments": 1}},
        );
        ns.observe_update(
            "app.posts",
            Some(&filter),
            &rawdoc! {"$push": {"comments": {"$each": [1], "$slice": -2}}, "$addToSet": {"tags": "b"}},
        );
        assert_eq!(stats(&ns, "comments"), (3, 2));
        assert_eq!(stats(&ns, "tags"), (1, 0));
        // A whole-array $set (what an ODM's save sends) gives the length.
        ns.observe_update(
            "app.posts",
            Some(&rawdoc! {"_id": {"$eq": 7}}),
            &rawdoc! {"$set": {"tags": ["a", "b", "c"]}},
        );
        assert_eq!(stats(&ns, "tags"), (3, 1));
        // A replacement without _id is the filter's document.
        ns.observe_replacement(
            "app.posts",
            Some(&filter),
            &Doc::new(&rawdoc! {"comments": [1, 2, 3, 4, 5], "tags": []}, &caps),
        );
        assert_eq!(stats(&ns, "comments"), (5, 3));
        // Reads that show no growth count towards "stopped growing"; the
        // next growth starts the count again.
        let since = |ns: &Namespaces| {
            ns.get("app.posts")
                .unwrap()
                .arrays
                .get(&"comments".to_string())
                .unwrap()
                .since_growth
        };
        assert_eq!(since(&ns), 0);
        for _ in 0..3 {
            ns.observe_document(
                "app.posts",
                &Doc::new(&rawdoc! {"_id": 7, "comments": [1, 2, 3, 4, 5]}, &caps),
            );
        }
        assert_eq!(since(&ns), 3);
        ns.observe_document(
            "app.posts",
            &Doc::new(&rawdoc! {"_id": 7, "comments": [1, 2, 3, 4, 5, 6]}, &caps),
        );
        assert_eq!(since(&ns), 0);
    }

    #[test]
    fn vectors_and_coordinates_are_numeric_arrays() {
        let caps = Caps::default();
        let embedding: Vec<f64> = (0..1536).map(|i| i as f64 / 1536.0).collect();
        let line: Vec<Vec<f64>> = (0..500).map(|i| vec![i as f64, -(i as f64)]).collect();
        let doc = bson::RawDocumentBuf::try_from(&bson::doc! {
            "embedding": embedding, "route": {"type": "LineString", "coordinates": line},
            "tags": ["a", "b"], "ids": [1, "x"], "empty": [], "comments": [{"t": 1}]
        })
        .unwrap();
        let arrays = Doc::new(&doc, &caps).arrays;
        let numeric = |path: &str| arrays.iter().find(|a| a.path == path).unwrap().numeric;
        assert!(numeric("embedding") && numeric("route.coordinates"));
        assert!(!numeric("tags") && !numeric("ids") && !numeric("empty") && !numeric("comments"));
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
        batch.observe_inserted_all("blog.posts", &parsed);
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

    /// A field set remembers up to eight distinct values per short scalar
    /// field (a flag's two, a kind's few), none of `_id`'s (unique, they
    /// tell nothing apart), and a value past the eighth changes nothing.
    #[test]
    fn a_field_set_remembers_a_few_values_per_field_and_none_of_the_ids() {
        let caps = Caps::default();
        let docs: Vec<bson::RawDocumentBuf> = (0..20)
            .map(|i| {
                bson::RawDocumentBuf::try_from(&bson::doc! {
                    "_id": i, "n": i, "active": i % 2 == 0, "kind": if i < 3 { "a" } else { "b" }
                })
                .unwrap()
            })
            .collect();
        let parsed: Vec<Doc<'_>> = docs.iter().map(|d| Doc::new(d, &caps)).collect();
        let mut ns = Namespaces::default();
        ns.observe_documents("d.c", &parsed);
        let state = ns.get("d.c").unwrap();
        let set = state.shapes()[0];
        assert_eq!(set.count, 20);
        let values = |field: &str| {
            set.values
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(values("_id"), None);
        let first_eight: Vec<u64> = (0..8).map(|i| value_hash(RawBsonRef::Int32(i))).collect();
        assert_eq!(values("n"), Some(first_eight));
        let flags = [true, false].map(|b| value_hash(RawBsonRef::Boolean(b)));
        assert_eq!(values("active"), Some(flags.to_vec()));
        assert_ne!(flags[0], flags[1]);
        assert_ne!(flags[0], value_hash(RawBsonRef::Int32(1)));
        assert_eq!(values("kind").map(|v| v.len()), Some(2));
    }

    /// A set's fields are found by the order they were last seen in; a
    /// document of the same fields in another order, or naming one twice,
    /// records the same as a search by name would.
    #[test]
    fn a_field_set_reads_the_same_whatever_the_order_of_its_fields() {
        let caps = Caps::default();
        let oid = bson::oid::ObjectId::new();
        let raw = |d: bson::Document| bson::RawDocumentBuf::try_from(&d).unwrap();
        let docs = [
            raw(bson::doc! {"_id": 1, "owner": oid, "kind": "a", "n": 1}),
            raw(bson::doc! {"n": 2, "kind": "b", "owner": oid, "_id": 2}),
            raw(bson::doc! {"_id": 3, "owner": oid, "kind": "c", "n": 3}),
            raw(bson::doc! {"kind": "d", "_id": 4, "n": 4, "owner": oid}),
        ];
        let mut ns = Namespaces::default();
        for d in &docs {
            ns.observe_documents("d.c", &[Doc::new(d, &caps)]);
        }
        // A key named twice (BSON allows it): its values join one entry.
        let mut twice = bson::RawDocumentBuf::new();
        twice.append(bson::raw::cstr!("_id"), 5);
        twice.append(bson::raw::cstr!("owner"), oid);
        twice.append(bson::raw::cstr!("kind"), "e");
        twice.append(bson::raw::cstr!("kind"), "f");
        let mut other = bson::RawDocumentBuf::new();
        other.append(bson::raw::cstr!("kind"), "g");
        other.append(bson::raw::cstr!("kind"), "h");
        other.append(bson::raw::cstr!("owner"), oid);
        other.append(bson::raw::cstr!("_id"), 6);
        for d in [&twice, &other] {
            ns.observe_documents("d.c", &[Doc::new(d, &caps)]);
        }
        let state = ns.get("d.c").unwrap();
        let sets = state.shapes();
        assert_eq!(sets.len(), 2);
        let four = sets.iter().find(|s| s.count == 4).unwrap();
        assert_eq!(four.count, 4);
        assert_eq!(four.fields, ["_id", "kind", "n", "owner"]);
        // `owner` (index 3) always an ObjectId; `_id`, `kind`, `n` not.
        assert_eq!(four.id_typed, 1 << 3);
        let values = |set: &FieldSet, field: &str| {
            let v = set.values.iter().filter(|(f, _)| f == field);
            v.map(|(_, h)| h.len()).collect::<Vec<_>>()
        };
        assert_eq!(values(four, "kind"), [4]);
        assert_eq!(values(four, "n"), [4]);
        assert_eq!(values(four, "_id"), Vec::<usize>::new());
        let dup = sets.iter().find(|s| s.count == 2).unwrap();
        assert_eq!(dup.fields, ["_id", "kind", "kind", "owner"]);
        assert_eq!(dup.id_typed, 1 << 3);
        assert_eq!(values(dup, "kind"), [4]);
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
    }
}
