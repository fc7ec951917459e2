//! The analysis memory budget (`[limits] analysis_memory`): what bounds
//! every table the analysis keeps, in entries and in bytes, whatever the
//! traffic brings.
//!
//! An eighth of the budget bounds the messages waiting in the analysis
//! queue; the rest is split into one [`Pool`] per kind of table (patterns,
//! shapes, namespace state, document ids, cursors, per-connection state
//! (requests awaiting replies), findings). Every entry is charged to its pool when it is
//! stored, at a weight that covers what it can grow to (keys are shortened
//! past [`MAX_KEY`] bytes, shape text past [`MAX_SHAPE_TEXT`], and every
//! list inside an entry has a fixed cap), and given back when it is
//! forgotten. A table that wants to store while its pool is full first
//! forgets its own least recently used entries, so a pool's bytes stay
//! under its share plus the one entry being stored. Evictions are counted
//! per pool and shown, with entries and bytes, in `/metrics`, the report
//! and the shutdown line.
//!
//! Weights are estimates of heap use (the entry's own bytes, its heap
//! strings and vectors at capacity, and the table's per-entry overhead),
//! checked against a counting allocator in `tests/memory_budget.rs`.

use super::hash::fnv1a;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// The default budget: small enough for a sidecar, large enough that an
/// application with hundreds of collections and thousands of query shapes
/// never meets it.
pub const DEFAULT_ANALYSIS_MEMORY: usize = 256 << 20;

/// The smallest budget accepted (below it the caps would be too small to
/// learn anything).
pub const MIN_ANALYSIS_MEMORY: usize = 8 << 20;

/// Longest key (namespace, field path, pattern name, field name) kept as
/// sent; longer ones keep their first bytes and a hash of the whole, so two
/// long keys stay apart and no key costs more than this.
pub const MAX_KEY: usize = 128;

/// Longest shape text kept (the shape's identity is a hash of the whole).
pub const MAX_SHAPE_TEXT: usize = 1024;

/// What one stored entry costs beyond its key and value: the LRU node's
/// two links, the hash table's slot and control byte, and the allocator's
/// header, rounded up.
pub const ENTRY_OVERHEAD: usize = 64;

/// `s` if it is at most [`MAX_KEY`] bytes, else its first bytes (cut at a
/// character boundary), `…` and 16 hex digits of a hash of the whole.
pub fn short_key(s: &str) -> Cow<'_, str> {
    shorten(s, MAX_KEY)
}

/// `s` within `max` bytes (`max` ≥ 24), as [`short_key`] does.
pub fn shorten(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let hash = fnv1a(s.as_bytes());
    // "…" is 3 bytes, the hash 16.
    let mut cut = max.saturating_sub(19);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    Cow::Owned(format!("{}…{hash:016x}", &s[..cut]))
}

/// One share of the budget, charged by the tables of one kind.
#[derive(Debug)]
pub struct Pool {
    pub name: &'static str,
    pub max: usize,
    bytes: AtomicUsize,
    entries: AtomicUsize,
    evicted: AtomicU64,
}

/// How a pool stands, for `/metrics`, the report and the shutdown line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PoolUsage {
    pub table: String,
    pub entries: usize,
    pub bytes: usize,
    pub max_bytes: usize,
    pub evicted: u64,
}

impl Pool {
    pub fn new(name: &'static str, max: usize) -> Arc<Pool> {
        Arc::new(Pool {
            name,
            max,
            bytes: AtomicUsize::new(0),
            entries: AtomicUsize::new(0),
            evicted: AtomicU64::new(0),
        })
    }

    /// An unshared pool that never fills (for tables built in tests).
    pub fn unbounded(name: &'static str) -> Arc<Pool> {
        Pool::new(name, usize::MAX)
    }

    pub fn full(&self) -> bool {
        self.bytes.load(Relaxed) >= self.max
    }

    pub fn charge(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Relaxed);
        self.entries.fetch_add(1, Relaxed);
    }

    pub fn release(&self, bytes: usize) {
        self.give_back(bytes, 1);
    }

    /// Bytes held with no entry in them yet (a fixed array).
    pub fn reserve(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Relaxed);
    }

    /// Entries stored in bytes reserved already.
    pub fn entries_added(&self, entries: usize) {
        self.entries.fetch_add(entries, Relaxed);
    }

    /// Gives back `entries` entries of `bytes` in all (a table dropped).
    pub fn give_back(&self, bytes: usize, entries: usize) {
        self.bytes.fetch_sub(bytes, Relaxed);
        self.entries.fetch_sub(entries, Relaxed);
    }

    /// Counts an entry forgotten to make room (or not stored, for tables
    /// that keep what they have: findings, requests awaiting replies).
    pub fn evicted(&self) {
        self.evicted.fetch_add(1, Relaxed);
    }

    pub fn usage(&self) -> PoolUsage {
        PoolUsage {
            table: self.name.to_string(),
            entries: self.entries.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            max_bytes: self.max,
            evicted: self.evicted.load(Relaxed),
        }
    }
}

/// The budget split into its pools.
#[derive(Clone, Debug)]
pub struct Pools {
    pub patterns: Arc<Pool>,
    pub shapes: Arc<Pool>,
    pub namespaces: Arc<Pool>,
    pub document_ids: Arc<Pool>,
    pub cursors: Arc<Pool>,
    pub connections: Arc<Pool>,
    pub findings: Arc<Pool>,
    pub rules: Arc<Pool>,
}

/// The analysis queue's part of the budget: messages waiting for analysis
/// (an eighth; 32 MiB of the default 256 MiB). The tables share the rest.
pub fn queue_share(total: usize) -> usize {
    total / 8
}

impl Pools {
    /// `total` bytes less the queue's share, split by share: namespace state (paths, documents,
    /// field sets) 35 %, per-connection state (requests awaiting replies,
    /// N+1 leads) 25 %, patterns 15 %, and
    /// shapes, document ids, cursors, findings and the rules' own tables
    /// 5 % each.
    pub fn new(total: usize) -> Pools {
        let tables = total - queue_share(total);
        let share = |percent: usize| tables / 100 * percent;
        Pools {
            patterns: Pool::new("patterns", share(15)),
            shapes: Pool::new("shapes", share(5)),
            namespaces: Pool::new("namespaces", share(35)),
            document_ids: Pool::new("document_ids", share(5)),
            cursors: Pool::new("cursors", share(5)),
            connections: Pool::new("connections", share(25)),
            findings: Pool::new("findings", share(5)),
            rules: Pool::new("rules", share(5)),
        }
    }

    pub fn usage(&self) -> Vec<PoolUsage> {
        [
            &self.patterns,
            &self.shapes,
            &self.namespaces,
            &self.document_ids,
            &self.cursors,
            &self.connections,
            &self.findings,
            &self.rules,
        ]
        .into_iter()
        .map(|p| p.usage())
        .collect()
    }
}

/// Bytes charged to a pool for as long as this lives (state that is not
/// in an [`Lru`]: a request awaiting its reply, an N+1 lead).
#[derive(Debug)]
pub struct Charge {
    pool: Arc<Pool>,
    bytes: usize,
}

impl Charge {
    pub fn new(pool: &Arc<Pool>, bytes: usize) -> Charge {
        pool.charge(bytes);
        Charge {
            pool: pool.clone(),
            bytes,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Charges `bytes` from now on, the same entry: only the difference
    /// moves (no second entry counted and given back, no reference count).
    pub fn resize(&mut self, bytes: usize) {
        if bytes > self.bytes {
            self.pool.reserve(bytes - self.bytes);
        } else {
            self.pool.give_back(self.bytes - bytes, 0);
        }
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.pool.release(self.bytes);
    }
}

/// Values under keys hashed already (64-bit hashes), in a fixed array of
/// two-entry sets: an entry lives in the set its hash picks, the most
/// recent of the two first, and a new hash pushes out the older one there
/// (the least recently stored of its set, not of the whole table). One
/// look at one cache line per access, no allocation per entry, nothing to
/// unlink: for tables written on every operation and far larger than the
/// processor's caches (every inserted `_id`), where an [`Lru`] costs a
/// hash-table removal and a list unlink per entry forgotten, each a cache
/// miss. The array starts at [`HASH_CACHE_FIRST`] slots when the first
/// entry comes and doubles, up to `cap` entries and what the pool holds,
/// whenever a new entry finds its set full: a short run (a test suite, a
/// capture of a few hundred operations) neither allocates, clears nor
/// frees the whole bound, and a long one reaches it after a handful of
/// doublings. Each array is charged to the pool as it is allocated.
pub struct HashCache<V> {
    slots: Vec<Option<(u64, V)>>,
    /// Entries at most (even, ≥ 2).
    cap: usize,
    len: usize,
    pool: Arc<Pool>,
    pub evicted: u64,
}

impl<V> std::fmt::Debug for HashCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashCache")
            .field("pool", &self.pool.name)
            .field("len", &self.len)
            .field("cap", &self.cap)
            .field("evicted", &self.evicted)
            .finish()
    }
}

impl<V> Drop for HashCache<V> {
    fn drop(&mut self) {
        self.pool.give_back(self.bytes(), self.len);
    }
}

/// The slots of a [`HashCache`]'s first array (fewer if its cap is lower).
pub const HASH_CACHE_FIRST: usize = 256;

impl<V> HashCache<V> {
    const SLOT: usize = std::mem::size_of::<Option<(u64, V)>>();

    /// At most `cap` entries, and no more than `pool` holds.
    pub fn in_pool(cap: usize, pool: Arc<Pool>) -> Self {
        let cap = cap.min(pool.max / Self::SLOT).max(2) & !1;
        HashCache {
            slots: Vec::new(),
            cap,
            len: 0,
            pool,
            evicted: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held (and charged): the whole array once it exists.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * Self::SLOT
    }

    /// The first slot of the set `hash` picks in the array as it is now
    /// (its bits mixed first, so hashes that differ only in their high
    /// bits spread too).
    fn set(&self, hash: u64) -> usize {
        let sets = (self.slots.len() / 2) as u128;
        let mixed = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) as u128;
        2 * ((mixed * sets) >> 64) as usize
    }

    /// Moves the entries into an array of `slots` slots (even), the older
    /// of each set first, so each set keeps its newest first; one that no
    /// longer fits (a cap that is not a doubling) is counted as evicted.
    fn grow_to(&mut self, slots: usize) {
        let mut fresh = Vec::with_capacity(slots);
        fresh.resize_with(slots, || None);
        let mut old = std::mem::replace(&mut self.slots, fresh);
        self.pool.reserve(self.bytes());
        self.pool
            .give_back(old.capacity() * Self::SLOT, std::mem::take(&mut self.len));
        for i in (0..old.len()).step_by(2) {
            for j in [i + 1, i] {
                if let Some((hash, value)) = old[j].take() {
                    self.place(hash, value);
                }
            }
        }
    }

    pub fn get(&self, hash: u64) -> Option<&V> {
        let i = self.set(hash);
        self.slots
            .get(i..i + 2)?
            .iter()
            .flatten()
            .find(|(h, _)| *h == hash)
            .map(|(_, v)| v)
    }

    /// Stores `value` under `hash`, the most recent of its set. A new
    /// hash whose set is full doubles the array while it is under its cap;
    /// at the cap, the older entry of the set is forgotten (counted as
    /// evicted).
    pub fn insert(&mut self, hash: u64, value: V) {
        if self.slots.is_empty() {
            self.grow_to(HASH_CACHE_FIRST.min(self.cap));
        }
        while self.slots.len() < self.cap {
            let i = self.set(hash);
            let set = &self.slots[i..i + 2];
            if set[1].is_none() || set.iter().flatten().any(|(h, _)| *h == hash) {
                break;
            }
            self.grow_to((self.slots.len() * 2).min(self.cap));
        }
        self.place(hash, value);
    }

    fn place(&mut self, hash: u64, value: V) {
        let i = self.set(hash);
        let set = &mut self.slots[i..i + 2];
        let here = |slot: &Option<(u64, V)>| matches!(slot, Some((h, _)) if *h == hash);
        if here(&set[1]) {
            set.swap(0, 1);
        } else if !here(&set[0]) {
            // New: the first moves second, pushing out the older one.
            if set[1].take().is_some() {
                self.evicted += 1;
                self.pool.evicted();
            } else {
                self.len += 1;
                self.pool.entries_added(1);
            }
            set.swap(0, 1);
        }
        set[0] = Some((hash, value));
    }
}

/// What an entry weighs: its key and value, given the table's bounds.
pub type Weigh<K, V> = fn(&K, &V) -> usize;

/// Bytes a value takes: its own size and its heap. Used by the rules'
/// tables, whose keys and values are plain data.
pub trait Weight {
    fn weight(&self) -> usize;
}

macro_rules! plain_weight {
    ($($t:ty),*) => {$(
        impl Weight for $t {
            fn weight(&self) -> usize {
                std::mem::size_of::<$t>()
            }
        }
    )*};
}
plain_weight!((), bool, i32, i64, u32, u64, usize, f64);

impl Weight for String {
    fn weight(&self) -> usize {
        std::mem::size_of::<String>() + self.capacity()
    }
}

impl<T: Weight> Weight for Vec<T> {
    fn weight(&self) -> usize {
        std::mem::size_of::<Vec<T>>()
            + self.iter().map(Weight::weight).sum::<usize>()
            + (self.capacity() - self.len()) * std::mem::size_of::<T>()
    }
}

impl<A: Weight, B: Weight> Weight for (A, B) {
    fn weight(&self) -> usize {
        self.0.weight() + self.1.weight()
    }
}

impl<A: Weight, B: Weight, C: Weight> Weight for (A, B, C) {
    fn weight(&self) -> usize {
        self.0.weight() + self.1.weight() + self.2.weight()
    }
}

struct Weighed<V> {
    value: V,
    bytes: usize,
}

/// A map that forgets its least recently used entries past a number of
/// entries, or while its [`Pool`] is full: the `lru` crate (O(1) per
/// access), hashed with foldhash — several times faster than SipHash on
/// short keys, and randomly seeded, so crafted keys cannot pile into one
/// bucket — charging each entry's weight to the pool and counting what it
/// forgets.
pub struct Lru<K: Hash + Eq, V> {
    cache: lru::LruCache<K, Weighed<V>, foldhash::fast::RandomState>,
    /// Entries at most. (The cache itself is unbounded so that it grows
    /// its hash table as entries come rather than sizing it for the cap
    /// up front; this type enforces the cap.)
    cap: usize,
    pool: Arc<Pool>,
    weigh: Weigh<K, V>,
    /// Bytes this table charged to its pool.
    bytes: usize,
    pub evicted: u64,
}

impl<K: Hash + Eq, V> std::fmt::Debug for Lru<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lru")
            .field("pool", &self.pool.name)
            .field("len", &self.cache.len())
            .field("cap", &self.cap)
            .field("bytes", &self.bytes)
            .field("evicted", &self.evicted)
            .finish()
    }
}

impl<K: Hash + Eq, V> Drop for Lru<K, V> {
    fn drop(&mut self) {
        // Gives back what this table holds (a namespace forgotten gives
        // back its paths and documents too).
        self.pool.give_back(self.bytes, self.cache.len());
    }
}

/// The weight of an entry with no heap of its own.
pub fn fixed<K, V>(_: &K, _: &V) -> usize {
    std::mem::size_of::<K>() + std::mem::size_of::<V>() + ENTRY_OVERHEAD
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// At most `cap` entries of fixed size, in a pool of their own that
    /// never fills (tests, and tables bounded by their caller).
    pub fn new(cap: usize) -> Self {
        Lru::in_pool(cap, Pool::unbounded("unpooled"), fixed::<K, V>)
    }

    /// At most `cap` entries, each weighed by `weigh` and charged to `pool`.
    pub fn in_pool(cap: usize, pool: Arc<Pool>, weigh: Weigh<K, V>) -> Self {
        Lru {
            cache: lru::LruCache::unbounded_with_hasher(foldhash::fast::RandomState::default()),
            cap: cap.max(1),
            pool,
            weigh,
            bytes: 0,
            evicted: 0,
        }
    }

    /// Forgets the least recently used entry, giving its bytes back.
    pub fn pop_lru(&mut self) -> Option<(K, V)> {
        let (k, w) = self.cache.pop_lru()?;
        self.bytes -= w.bytes;
        self.pool.release(w.bytes);
        self.evicted += 1;
        self.pool.evicted();
        Some((k, w.value))
    }

    /// The entry for `key`, made fresh (most recently used); inserted with
    /// `make` when absent, first forgetting the least recently used ones
    /// while the table is at its cap or its pool is full. The key may be
    /// borrowed (`&str` for a `String` key): the owned key is built only
    /// when the entry is new.
    pub fn get_or_insert_with<Q>(&mut self, key: &Q, make: impl FnOnce() -> V) -> &mut V
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if (self.cache.len() >= self.cap || self.pool.full()) && !self.cache.contains(key) {
            while self.cache.len() >= self.cap || self.pool.full() {
                if self.pop_lru().is_none() {
                    break;
                }
            }
        }
        let Lru {
            cache,
            pool,
            weigh,
            bytes,
            ..
        } = self;
        &mut cache
            .get_or_insert_mut_ref(key, || {
                let value = make();
                let w = weigh(&key.to_owned(), &value);
                *bytes += w;
                pool.charge(w);
                Weighed { value, bytes: w }
            })
            .value
    }

    /// Mutable access by a borrowed key (no key built to look), making the
    /// entry the most recently used.
    pub fn get_mut_refreshed<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.cache.get_mut(key).map(|w| &mut w.value)
    }

    /// Read access without refreshing recency.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.cache.peek(key).map(|w| &w.value)
    }

    /// Mutable access without refreshing recency or inserting.
    pub fn map_get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.cache.peek_mut(key).map(|w| &mut w.value)
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let w = self.cache.pop(key)?;
        self.bytes -= w.bytes;
        self.pool.release(w.bytes);
        Some(w.value)
    }

    /// Every entry, most recently used first.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.cache.iter().map(|(k, w)| (k, &w.value))
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Bytes this table charged to its pool.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A borrowed key finds an entry and refreshes it; what is absent is
    /// inserted (once), within the cap.
    #[test]
    fn get_or_insert_with_takes_a_borrowed_key() {
        let mut lru: Lru<String, u32> = Lru::new(2);
        *lru.get_or_insert_with("a", || 1) += 10;
        lru.get_or_insert_with("b", || 2);
        assert_eq!(*lru.get_or_insert_with("a", || 99), 11);
        lru.get_or_insert_with("c", || 3);
        assert_eq!(lru.len(), 2);
        assert!(lru.get("b").is_none(), "b was the least recently used");
        assert_eq!((lru.get("a"), lru.get("c")), (Some(&11), Some(&3)));
    }

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

    /// Tables sharing a pool stay within it together: each forgets its own
    /// oldest entries while the pool is full, and a table dropped gives
    /// back everything it held.
    #[test]
    fn tables_sharing_a_pool_stay_within_it() {
        let pool = Pool::new("test", 10_000);
        let weigh: Weigh<String, u64> = |k, _| k.len() + 8 + ENTRY_OVERHEAD;
        let mut a = Lru::in_pool(1_000_000, pool.clone(), weigh);
        let mut b = Lru::in_pool(1_000_000, pool.clone(), weigh);
        for i in 0..100_000 {
            a.get_or_insert_with(&format!("a{i:0>100}"), || 0);
            b.get_or_insert_with(&format!("b{i}"), || 0);
            let u = pool.usage();
            assert!(u.bytes < 10_000 + 200, "{u:?}");
        }
        let u = pool.usage();
        assert_eq!(u.bytes, a.bytes() + b.bytes());
        assert_eq!(u.entries, a.len() + b.len());
        assert!(u.evicted > 190_000, "{u:?}");
        assert!(!a.is_empty() && !b.is_empty());
        drop(a);
        let u = pool.usage();
        assert_eq!((u.bytes, u.entries), (b.bytes(), b.len()));
        b.remove(&"b99999".to_string()).unwrap();
        drop(b);
        assert_eq!((pool.usage().bytes, pool.usage().entries), (0, 0));
    }

    /// A hash cache keeps the newest of each set, counts what it forgets,
    /// holds no more than its cap or its pool, and gives the pool back
    /// its bytes and entries when dropped.
    #[test]
    fn hash_cache_keeps_the_newest_within_its_cap_and_pool() {
        let pool = Pool::new("ids", 1 << 20);
        let mut ids = HashCache::in_pool(1000, pool.clone());
        assert_eq!(
            pool.usage().bytes,
            0,
            "nothing allocated before the first entry"
        );
        for h in 0..1000u64 {
            ids.insert(h, h * 2);
        }
        // Sets of two: some of the first thousand collided and went.
        assert!(ids.len() + ids.evicted as usize == 1000, "{ids:?}");
        assert!(ids.len() > 500 && ids.len() <= 1000, "{ids:?}");
        // The newest is always there; rewriting keeps one entry.
        ids.insert(7, 1);
        ids.insert(7, 2);
        assert_eq!(ids.get(7), Some(&2));
        for h in 10_000..200_000u64 {
            ids.insert(h, h);
            assert_eq!(ids.get(h), Some(&h));
        }
        assert!(ids.len() <= 1000);
        let u = pool.usage();
        assert_eq!((u.entries, u.bytes), (ids.len(), ids.bytes()));
        assert_eq!(u.evicted, ids.evicted);
        assert!(u.evicted >= 190_000, "{u:?}");
        // Of the last 500 stored, most are still there (sets of two, not a
        // strict LRU: a few went with their set's neighbour).
        let kept = (199_500..200_000u64)
            .filter(|h| ids.get(*h).is_some())
            .count();
        assert!(kept > 350, "{kept} of the last 500");
        drop(ids);
        assert_eq!((pool.usage().bytes, pool.usage().entries), (0, 0));

        // The array starts small and doubles as entries come: under its
        // cap nothing is forgotten, and the pool is charged what is held.
        let pool = Pool::new("growing", 1 << 30);
        let mut ids = HashCache::in_pool(1_000_000, pool.clone());
        ids.insert(1, 1u64);
        assert_eq!(ids.bytes(), HASH_CACHE_FIRST * HashCache::<u64>::SLOT);
        for h in 2..=5000u64 {
            ids.insert(h.wrapping_mul(0x2545_F491_4F6C_DD1D), h);
        }
        assert_eq!((ids.len(), ids.evicted), (5000, 0), "{ids:?}");
        assert!(ids.bytes() < 1_000_000 * HashCache::<u64>::SLOT / 10);
        assert!((2..=5000u64).all(|h| ids.get(h.wrapping_mul(0x2545_F491_4F6C_DD1D)) == Some(&h)));
        assert_eq!(ids.get(1), Some(&1));
        assert_eq!(
            (pool.usage().entries, pool.usage().bytes),
            (5000, ids.bytes())
        );
        drop(ids);
        assert_eq!((pool.usage().bytes, pool.usage().entries), (0, 0));

        // A small pool bounds the array, whatever the cap.
        let small = Pool::new("small", 4096);
        let mut ids = HashCache::in_pool(1_000_000, small.clone());
        ids.insert(1, 1u64);
        assert!(small.usage().bytes <= 4096, "{:?}", small.usage());
    }

    #[test]
    fn long_keys_are_shortened_and_stay_apart() {
        assert_eq!(short_key("blog.posts"), "blog.posts");
        let a = "é".repeat(200);
        let b = format!("{}x", "é".repeat(199));
        let (sa, sb) = (short_key(&a), short_key(&b));
        assert!(sa.len() <= MAX_KEY && sb.len() <= MAX_KEY, "{}", sa.len());
        assert_ne!(sa, sb);
        assert!(sa.starts_with("éé") && sa.contains('…'));
        assert_eq!(short_key(&a), sa, "the same key shortens the same way");
    }
}
