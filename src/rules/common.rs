//! What several rules share: reading update operators, projections and
//! feeds off a command, and formatting sizes. No rule imports another; what
//! two need lives here.

use super::{FindingDraft, OpView, RuleContext, RuleMeta, SavedPer, Severity, Threshold};
use crate::analysis::budget::{Pool, Weight};
use crate::analysis::command::{fold_path, Kind};
use crate::analysis::namespaces::Namespaces;
use crate::analysis::partition::{KeyKind, Partitioning};
use crate::wire::bson_walk::{elements, field, pairs, values, Value};
use bson::RawDocument;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Entries each table of a rule's own keeps, at most (keys come from the
/// traffic: namespaces, paths, shapes, pattern names).
pub const RULE_TABLE_CAP: usize = 10_000;

/// A rule's own table: a `BTreeMap` whose entries are charged, at their
/// weight, to the rules' share of the memory budget (`cx.pool`). Past
/// [`RULE_TABLE_CAP`] entries, or while that share is full, it forgets its
/// first entry in key order — an arbitrary one, as far as the traffic is
/// concerned — before adding a new one, so a client sending ever-new keys
/// cannot grow a rule's memory. A table inside a table charges its own
/// entries the same way. Read it as the map it derefs to; change it only
/// through these methods (values updated in place keep their weight).
pub struct RuleTable<K: Ord + Weight, V: Weight> {
    map: BTreeMap<K, V>,
    /// Set at the first insert: what the entries are charged to.
    pool: Option<Arc<Pool>>,
}

impl<K: Ord + Weight, V: Weight> Default for RuleTable<K, V> {
    fn default() -> Self {
        RuleTable {
            map: BTreeMap::new(),
            pool: None,
        }
    }
}

impl<K: Ord + Weight, V: Weight> std::ops::Deref for RuleTable<K, V> {
    type Target = BTreeMap<K, V>;
    fn deref(&self) -> &BTreeMap<K, V> {
        &self.map
    }
}

/// A table inside a table charges its entries itself.
impl<K: Ord + Weight, V: Weight> Weight for RuleTable<K, V> {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

/// Per-entry overhead of a B-tree node slot.
const NODE: usize = 16;

fn entry_weight<K: Weight, V: Weight>(k: &K, v: &V) -> usize {
    k.weight() + v.weight() + NODE
}

impl<K: Ord + Weight, V: Weight> RuleTable<K, V> {
    fn make_room(&mut self, key: &K, pool: &Arc<Pool>) {
        let pool = self.pool.get_or_insert_with(|| pool.clone());
        if self.map.contains_key(key) {
            return;
        }
        while !self.map.is_empty() && (self.map.len() >= RULE_TABLE_CAP || pool.full()) {
            if let Some((k, v)) = self.map.pop_first() {
                pool.release(entry_weight(&k, &v));
                pool.evicted();
            }
        }
    }

    /// `map.entry(key).or_default()`, within the cap and the budget.
    pub fn entry(&mut self, key: K, pool: &Arc<Pool>) -> &mut V
    where
        V: Default,
    {
        self.make_room(&key, pool);
        let charged = self.pool.as_ref().expect("set by make_room");
        match self.map.entry(key) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let v = V::default();
                charged.charge(entry_weight(e.key(), &v));
                e.insert(v)
            }
        }
    }

    /// [`RuleTable::entry`] by a borrowed key: the owned key is built only
    /// when the entry is new (a hit costs two lookups and no allocation).
    pub fn entry_ref<Q>(&mut self, key: &Q, pool: &Arc<Pool>) -> &mut V
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
        V: Default,
    {
        if self.map.contains_key(key) {
            return self.map.get_mut(key).expect("just found");
        }
        self.entry(key.to_owned(), pool)
    }

    /// `map.insert(key, value)`, within the cap and the budget.
    pub fn insert(&mut self, key: K, value: V, pool: &Arc<Pool>) {
        self.make_room(&key, pool);
        let charged = self.pool.as_ref().expect("set by make_room");
        charged.charge(entry_weight(&key, &value));
        if let Some((k, old)) = self.map.remove_entry(&key) {
            charged.release(entry_weight(&k, &old));
        }
        self.map.insert(key, value);
    }

    /// An entry, mutable in place, found by a borrowed key (no key built
    /// to look it up). Its charge stays what it was at insertion.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get_mut(key)
    }

    /// Takes an entry out, giving its charge back.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (k, v) = self.map.remove_entry(key)?;
        if let Some(pool) = &self.pool {
            pool.release(entry_weight(&k, &v));
        }
        Some(v)
    }

    /// Takes every entry out, giving their charges back.
    pub fn clear(&mut self) {
        let map = std::mem::take(&mut self.map);
        if let Some(pool) = &self.pool {
            for (k, v) in &map {
                pool.release(entry_weight(k, v));
            }
        }
    }

    /// Every entry, values mutable in place.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.map.iter_mut()
    }
}

impl<K: Ord + Weight, V: Weight> Drop for RuleTable<K, V> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A size for people: `512 B`, `3.0 KiB`, `1.5 MiB`.
pub fn human_bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if f >= KIB * KIB {
        format!("{:.1} MiB", f / KIB / KIB)
    } else if f >= KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{n} B")
    }
}

/// Where the ids a `$push`/`$addToSet` appends to `path` live, when they
/// are `_id`s of documents of another collection.
pub fn pushed_child_ids<'a>(
    update: &RawDocument,
    namespace: &str,
    namespaces: &'a Namespaces,
) -> Vec<(String, &'a str)> {
    let mut out = Vec::new();
    fn db(ns: &str) -> &str {
        ns.split_once('.').map_or("", |(db, _)| db)
    }
    for (op, fields) in pairs(update.as_bytes()).map_while(Result::ok) {
        if !matches!(op, "$push" | "$addToSet") {
            continue;
        }
        let Value::Document(fields) = fields else {
            continue;
        };
        for e in elements(fields).map_while(Result::ok) {
            let Some(path) = e.key_str() else {
                break;
            };
            // The value appended, or the first of `$each`'s.
            let first = match e.element_type {
                0x03 => field(e.value, b"$each")
                    .filter(|each| each.element_type == 0x04)
                    .and_then(|each| elements(each.value).next()?.ok()),
                0x04 => None,
                _ => Some(e),
            };
            let Some(v) = first.filter(|v| !matches!(v.element_type, 0x03 | 0x04)) else {
                continue;
            };
            if let Some(owner) = namespaces
                .id_owner_of(&v)
                .filter(|owner| *owner != namespace && db(owner) == db(namespace))
            {
                out.push((fold_path(path).into_owned(), owner));
            }
        }
    }
    out
}

/// `{path: {$slice: N}}` or `{path: {$slice: [skip, N]}}` in a projection.
pub fn sliced_paths(projection: &bson::RawDocument) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for e in elements(projection.as_bytes()).map_while(Result::ok) {
        let Value::Document(spec) = e.read() else {
            continue;
        };
        let slice = pairs(spec)
            .map_while(Result::ok)
            .find(|(k, _)| *k == "$slice");
        let n = match slice {
            Some((_, Value::Array(a))) => values(a)
                .map_while(Result::ok)
                .nth(1)
                .and_then(|v| v.number()),
            Some((_, v)) => v.number(),
            None => None,
        };
        if let (Some(n), Some(path)) = (n, e.key_str()) {
            out.push((fold_path(path).into_owned(), n.abs()));
        }
    }
    out
}

/// A query with a sort and a limit: find, or a pipeline with `$sort`
/// followed by `$limit`.
pub fn is_feed(op: &OpView<'_>) -> bool {
    match op.cmd.kind {
        Kind::Find => op.cmd.sort().is_some() && op.cmd.limit().is_some_and(|l| l != 0),
        Kind::Aggregate => op.cmd.pipeline().is_some_and(sorts_then_limits),
        _ => false,
    }
}

/// A pipeline with a `$sort` stage and a `$limit` stage after it.
fn sorts_then_limits(pipeline: &[u8]) -> bool {
    let mut sorted = false;
    for stage in values(pipeline).map_while(Result::ok) {
        let Value::Document(stage) = stage else {
            continue;
        };
        let Some(Ok(first)) = elements(stage).next() else {
            continue;
        };
        match first.key {
            b"$sort" => sorted = true,
            b"$limit" if sorted => return true,
            _ => {}
        }
    }
    false
}

/// WL201 and WL202 judge the same share with the same settings.
pub const CROSS_PARTITION_THRESHOLDS: &[Threshold] = &[
    Threshold { name: "error_share", default: 0.5, help: "fraction of the collection's operations fanning out with this shape from which it is an error" },
    Threshold { name: "min_operations", default: 20.0, help: "operations on the collection before the share is judged" },
];

/// Operations per namespace, and per (namespace, shape) those that are
/// scatter-gather: what WL201 and WL202 judge their share by. Single-shard
/// and multi-shard operations (equality or a range on a prefix of a ranged
/// key, `$in` on the key) are targeted by the backend and never reported.
#[derive(Default)]
pub struct CrossPartitionCounts {
    operations: RuleTable<String, u64>,
    scattered: RuleTable<(String, u64), u64>,
}

impl CrossPartitionCounts {
    /// Counts the operation and, when it is scatter-gather and `mine` says
    /// (given whether it is a feed) that it is the rule's, reports it
    /// under `meta`.
    pub fn observe(
        &mut self,
        meta: &'static RuleMeta,
        op: &OpView<'_>,
        cx: &mut RuleContext<'_>,
        mine: fn(bool) -> bool,
    ) {
        let Some(how) = op.partitioning else { return };
        let operations = self.operations.entry_ref(op.namespace, cx.pool);
        *operations += 1;
        let operations = *operations;
        let feed = is_feed(op);
        if how != Partitioning::ScatterGather || !mine(feed) {
            return;
        }
        let scattered = self
            .scattered
            .entry((op.namespace.to_string(), op.shape.hash), cx.pool);
        *scattered += 1;
        let scattered = *scattered;
        let share = scattered as f64 / operations as f64;
        let min_ops = cx.threshold(meta, op.namespace, "min_operations");
        let error_share = cx.threshold(meta, op.namespace, "error_share");
        let severity = if operations as f64 >= min_ops && share >= error_share {
            Severity::Error
        } else {
            Severity::Warning
        };
        let key = cx.partition_keys.get(op.namespace);
        let mut evidence = BTreeMap::new();
        evidence.insert(
            "partition_key".into(),
            json!(key.map(|k| k.paths.clone()).unwrap_or_default()),
        );
        if let Some(k) = key {
            evidence.insert("partition_key_kind".into(), json!(k.kind.as_str()));
        }
        evidence.insert("partitions".into(), json!(how.as_str()));
        evidence.insert("operations_on_collection".into(), json!(operations));
        evidence.insert("operations_with_this_shape".into(), json!(scattered));
        evidence.insert("share".into(), json!((share * 1000.0).round() / 1000.0));
        let what = if feed {
            "is a scatter-gather sort and limit (a feed: every partition sorts, the results are merged)"
        } else {
            "is scatter-gather (sent to every partition)"
        };
        let why = match key {
            None => {
                "a $lookup joins a partitioned collection on another field than its key".to_string()
            }
            Some(k) => format!(
                "its filter does not target the partition key {}{}",
                k.describe(),
                match k.kind {
                    KeyKind::Ranged => " (equality, $in or a range on its first field would)",
                    KeyKind::Hashed => " (equality or $in on it would)",
                    KeyKind::Cosmos => " (equality on it would)",
                }
            ),
        };
        // Under request units: a targeted query runs on one partition,
        // not on every one. Over one partition (the common case) there is
        // nothing to save, and the count is not written either.
        let saved = if cx.target.request_units() {
            let partitions = crate::analysis::request_units::partitions_of(
                cx.request_units,
                cx.namespaces,
                op.namespace,
            );
            if partitions > 1 {
                evidence.insert("physical_partitions".into(), json!(partitions));
            }
            cx.request_units_saved(
                crate::analysis::request_units::fan_out_saving(partitions),
                SavedPer::Query,
            )
        } else {
            None
        };
        let message = format!(
            "{} {what}: {why} ({scattered} of {operations} operations on the collection)",
            op.cmd.name
        );
        cx.report(
            meta,
            FindingDraft::about(op, op.shape.text.to_string(), severity, message, evidence)
                .with_saving(saved),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn slice_forms() {
        let p = rawdoc! {"title": 1, "reviews": {"$slice": -10}, "comments": {"$slice": [20, 5]}, "x": {"$elemMatch": {"a": 1}}};
        assert_eq!(
            sliced_paths(&p),
            vec![("reviews".to_string(), 10), ("comments".to_string(), 5)]
        );
    }

    /// A feed's pipeline sorts, then limits.
    #[test]
    fn feeds_sort_then_limit() {
        let feed =
            |d: bson::RawDocumentBuf| sorts_then_limits(d.get_array("p").unwrap().as_bytes());
        assert!(feed(
            rawdoc! {"p": [{"$match": {"a": 1}}, {"$sort": {"t": -1}}, {"$skip": 5}, {"$limit": 10}]}
        ));
        assert!(!feed(rawdoc! {"p": [{"$limit": 10}, {"$sort": {"t": -1}}]}));
        assert!(!feed(rawdoc! {"p": [{"$sort": {"t": -1}}]}));
        assert!(!feed(rawdoc! {"p": [1, {"$sort": {"t": -1}}]}));
    }

    /// An id pushed alone or first in `$each` is a child's when a document
    /// of another collection of the same database was inserted with it;
    /// sub-documents, ids of this collection or of another database, and
    /// ids never inserted are not.
    #[test]
    fn pushed_child_ids_are_ids_inserted_elsewhere_in_the_database() {
        use crate::analysis::namespaces::Doc;
        let caps = Default::default();
        let mut ns = Namespaces::default();
        let user = bson::oid::ObjectId::from_bytes([1; 12]);
        let tag = bson::oid::ObjectId::from_bytes([2; 12]);
        let post = bson::oid::ObjectId::from_bytes([3; 12]);
        ns.observe_inserted("blog.users", &Doc::new(&rawdoc! {"_id": user}, &caps));
        ns.observe_inserted("other.tags", &Doc::new(&rawdoc! {"_id": tag}, &caps));
        ns.observe_inserted("blog.posts", &Doc::new(&rawdoc! {"_id": post}, &caps));
        ns.observe_inserted("blog.users", &Doc::new(&rawdoc! {"_id": "u7"}, &caps));
        let update = rawdoc! {
            "$set": {"x": user},
            "$push": {
                "likes": user,
                "readers.0": {"$each": ["u7", user], "$slice": -5},
                "tags": tag,
                "related": post,
                "profiles": {"_id": user},
                "unknown": bson::oid::ObjectId::from_bytes([9; 12]),
            },
            "$addToSet": {"fans": {"$each": [user]}},
        };
        assert_eq!(
            pushed_child_ids(&update, "blog.posts", &ns),
            vec![
                ("likes".to_string(), "blog.users"),
                ("readers.$".to_string(), "blog.users"),
                ("fans".to_string(), "blog.users"),
            ]
        );
    }
}

#[cfg(test)]
mod bounded_tests {
    use super::*;

    /// Ever-new keys never grow a rule's table past its cap or past the
    /// rules' share of the budget; a key already there is updated in place;
    /// tables inside tables are charged too, and everything is given back
    /// when the tables go.
    #[test]
    fn rule_tables_stay_within_their_cap_and_budget() {
        let pool = Pool::new("rules", usize::MAX);
        let mut m: RuleTable<String, u64> = RuleTable::default();
        for i in 0..RULE_TABLE_CAP + 5_000 {
            *m.entry(format!("k{i}"), &pool) += 1;
        }
        assert_eq!(m.len(), RULE_TABLE_CAP);
        let last = format!("k{}", RULE_TABLE_CAP + 4_999);
        *m.entry(last.clone(), &pool) += 1;
        assert_eq!((m.len(), m[&last]), (RULE_TABLE_CAP, 2));
        // By a borrowed key: the same entry, or a new one within the cap.
        *m.entry_ref(last.as_str(), &pool) += 1;
        *m.entry_ref("new", &pool) += 1;
        assert_eq!((m.len(), m[&last], m["new"]), (RULE_TABLE_CAP, 3, 1));
        assert_eq!(pool.usage().entries, RULE_TABLE_CAP);
        for i in 0..RULE_TABLE_CAP + 5_000 {
            m.insert(format!("j{i}"), 0, &pool);
        }
        assert_eq!(m.len(), RULE_TABLE_CAP);
        assert_eq!(pool.usage().entries, RULE_TABLE_CAP);
        drop(m);
        assert_eq!((pool.usage().entries, pool.usage().bytes), (0, 0));

        let small = Pool::new("rules", 100_000);
        let mut nested: RuleTable<String, RuleTable<String, u64>> = RuleTable::default();
        for i in 0..50_000 {
            let long = format!("{i}{}", "x".repeat(500));
            *nested
                .entry(format!("p{}", i % 100), &small)
                .entry(long, &small) += 1;
            assert!(small.usage().bytes < 100_000 + 2_000, "{:?}", small.usage());
        }
        assert!(small.usage().evicted > 0);
        drop(nested);
        assert_eq!((small.usage().entries, small.usage().bytes), (0, 0));
    }
}
