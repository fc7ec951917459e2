//! Request units (RU), the currency of Azure Cosmos DB for MongoDB
//! (RU-based), estimated from what the traffic shows. Every constant is a
//! figure Microsoft publishes; nothing is fitted to an example:
//!
//! - *Optimize request cost in Azure Cosmos DB*: a point read of a 1 KB
//!   item costs 1 RU and of a 100 KB item 10 RU; a query's sample metrics
//!   (one 9,963-byte document retrieved through the index) come to 3.19 RU;
//!   a query returning 1,000 1 KB items costs about 1,000 RU.
//! - *Understand request units consumption in Azure Cosmos DB*: a write's
//!   charge by document size (1 KB: 4.95 RU … 2,048 KB: 1,250 RU), 0.2 RU
//!   per indexed term added or removed, a replace as a delete plus an
//!   insert, a patch 0.4 RU more per property it changes.
//! - *Query an Azure Cosmos DB container*: a cross-partition query runs
//!   once per physical partition, against each one's index.
//!
//! The model, per operation:
//!
//! - **point read** (a find by `_id`, and by the partition key's value
//!   when the key is another field, returning at most one document): the
//!   point-read line through the two published figures, by size;
//! - **query** (any other read): a base per physical partition it runs on
//!   (the published sample less its one document), plus each document
//!   loaded charged as a point read of its size; a count loads the
//!   documents it counts, at the collection's typical size;
//! - **insert**: the size charge of each document plus 0.2 RU per indexed
//!   term (every leaf value under the index policy's paths);
//! - **update**: a patch of each modified document (delete plus insert of
//!   its typical size, 0.2 RU per changed term each way, 0.4 RU per changed
//!   property); an upsert that inserts, an insert of what it sets;
//! - **delete**: the size charge and the terms of each document removed.
//!
//! Consistency is taken as session (the default; strong and bounded
//! staleness double reads) and the account as single-region.

use super::command::{Command, Kind, Reply};
use super::namespaces::NamespaceState;
use super::partition::{PartitionKey, Partitioning};
use crate::wire::bson_walk;
use bson::RawDocument;
use std::collections::HashMap;

/// RU of a point read of a 1 KB item (*Optimize request cost in Azure
/// Cosmos DB*, "Point reads").
pub const POINT_READ_1KB: f64 = 1.0;
/// RU of a point read of a 100 KB item (the same table).
pub const POINT_READ_100KB: f64 = 10.0;
/// The published query sample: one document of 9,963 bytes retrieved,
/// 100 % index utilization, 3.19 RU (*Optimize request cost in Azure
/// Cosmos DB*, "Metrics for troubleshooting queries").
pub const QUERY_SAMPLE_BYTES: u64 = 9_963;
pub const QUERY_SAMPLE_RU: f64 = 3.19;
/// RU per indexed term written or removed (*Understand request units
/// consumption*, "Create": 0.2 × 10 for ten terms).
pub const INDEX_TERM: f64 = 0.2;
/// RU per property a patch changes, on top of a replace ("Patch": 0.4 × 2).
pub const PATCH_PROPERTY: f64 = 0.4;
/// A write's charge by document size, (KB, RU): *Understand request units
/// consumption*, "Document size".
pub const WRITE_BY_SIZE: [(f64, f64); 12] = [
    (1.0, 4.95),
    (2.0, 6.29),
    (4.0, 6.67),
    (8.0, 7.04),
    (16.0, 9.52),
    (32.0, 11.23),
    (64.0, 22.67),
    (128.0, 48.19),
    (256.0, 98.29),
    (512.0, 184.57),
    (1024.0, 625.00),
    (2048.0, 1250.00),
];
/// A read's charge by document size, (KB, RU), from the same table: not
/// used by the model (point reads follow the point-read figures above),
/// kept to check the model against it.
pub const READ_BY_SIZE: [(f64, f64); 12] = [
    (1.0, 1.00),
    (2.0, 1.04),
    (4.0, 1.14),
    (8.0, 1.33),
    (16.0, 1.67),
    (32.0, 2.19),
    (64.0, 4.76),
    (128.0, 9.95),
    (256.0, 20.28),
    (512.0, 40.95),
    (1024.0, 145.90),
    (2048.0, 291.80),
];
/// The document size assumed where none was seen: 1 KB, the size every
/// published figure starts from.
pub const TYPICAL_BYTES: u64 = 1024;
/// Terms counted per document at most (the walk's bound).
const MAX_TERMS: u64 = 100_000;
/// Nesting the term count follows (deeper values count as one term).
const MAX_DEPTH: usize = 16;

/// The RU of reading one document of `bytes`, as a point read: the line
/// through the two published point reads, and never under 1 RU.
pub fn read_charge(bytes: u64) -> f64 {
    let kb = bytes as f64 / 1024.0;
    let slope = (POINT_READ_100KB - POINT_READ_1KB) / 99.0;
    (POINT_READ_1KB + (kb - 1.0) * slope).max(POINT_READ_1KB)
}

/// What a query costs on each physical partition it runs on, less the
/// documents it loads: the published sample less its one document.
pub fn query_base() -> f64 {
    QUERY_SAMPLE_RU - query_document(QUERY_SAMPLE_BYTES)
}

/// What a query pays for loading one document of `bytes`: 1 RU per KB up
/// to 1 KB (a query returning 1,000 1 KB items costs about 1,000 RU, and
/// its charge follows the data it loads), the point-read line above.
pub fn query_document(bytes: u64) -> f64 {
    if bytes < 1024 {
        bytes as f64 / 1024.0 * POINT_READ_1KB
    } else {
        read_charge(bytes)
    }
}

/// The size part of a write of a document of `bytes`: the published table,
/// linear between its rows, its first row under 1 KB and its last slope
/// past 2 MB.
pub fn write_charge(bytes: u64) -> f64 {
    let kb = bytes as f64 / 1024.0;
    let t = &WRITE_BY_SIZE;
    if kb <= t[0].0 {
        return t[0].1;
    }
    for w in t.windows(2) {
        let ((k0, r0), (k1, r1)) = (w[0], w[1]);
        if kb <= k1 {
            return r0 + (kb - k0) * (r1 - r0) / (k1 - k0);
        }
    }
    let ((k0, r0), (k1, r1)) = (t[t.len() - 2], t[t.len() - 1]);
    r1 + (kb - k1) * (r1 - r0) / (k1 - k0)
}

/// An insert of one document of `bytes` with `terms` indexed terms.
pub fn insert(bytes: u64, terms: u64) -> f64 {
    write_charge(bytes) + INDEX_TERM * terms as f64
}

/// A delete of one document of `bytes` with `terms` indexed terms.
pub fn delete(bytes: u64, terms: u64) -> f64 {
    write_charge(bytes) + INDEX_TERM * terms as f64
}

/// A replace of a document of `bytes` whose `changed` indexed terms change:
/// a delete and an insert of the document, each changed term removed and
/// added.
pub fn replace(bytes: u64, changed: u64) -> f64 {
    2.0 * write_charge(bytes) + 2.0 * INDEX_TERM * changed as f64
}

/// A patch (an update by operators) of a document of `bytes` changing
/// `changed` properties, all indexed.
pub fn patch(bytes: u64, changed: u64) -> f64 {
    replace(bytes, changed) + PATCH_PROPERTY * changed as f64
}

/// A query run on `partitions` physical partitions loading documents of
/// the sizes `loaded`.
pub fn query(partitions: u32, loaded: impl IntoIterator<Item = u64>) -> f64 {
    f64::from(partitions.max(1)) * query_base()
        + loaded.into_iter().map(query_document).sum::<f64>()
}

/// A collection's index policy, as far as writes pay for it: everything
/// (Cosmos DB's default), or the listed paths (`_id` always).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum IndexPolicy {
    #[default]
    Everything,
    Paths(Vec<String>),
}

impl IndexPolicy {
    /// Whether the value at dotted `path` is indexed.
    fn covers(&self, path: &str) -> bool {
        match self {
            IndexPolicy::Everything => true,
            IndexPolicy::Paths(paths) => {
                path == "_id"
                    || paths.iter().any(|p| {
                        path == p
                            || (path.starts_with(p.as_str())
                                && path.as_bytes().get(p.len()) == Some(&b'.'))
                    })
            }
        }
    }

    /// Whether anything under dotted `path` may be indexed (a prefix of an
    /// indexed path, or under one).
    fn may_cover_below(&self, path: &str) -> bool {
        match self {
            IndexPolicy::Everything => true,
            IndexPolicy::Paths(paths) => paths.iter().any(|p| {
                p.starts_with(path) && p.as_bytes().get(path.len()) == Some(&b'.')
                    || self.covers(path)
            }),
        }
    }
}

/// What the estimate knows of one collection beyond the traffic: its
/// index policy and how many physical partitions its data spans.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collection {
    pub index: IndexPolicy,
    /// Physical partitions (`[collections.X] physical_partitions`); unset,
    /// one per 50 GB of the data size seen.
    pub physical_partitions: Option<u32>,
}

/// Per-collection inputs, by namespace (`"db.collection"`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub collections: HashMap<String, Collection>,
}

impl Settings {
    pub fn collection(&self, namespace: &str) -> Option<&Collection> {
        self.collections.get(namespace)
    }
}

/// The most one physical partition of Azure Cosmos DB stores: 50 GB
/// (*Partitioning and horizontal scaling in Azure Cosmos DB*).
pub const PHYSICAL_PARTITION_BYTES: u64 = 50 * 1024 * 1024 * 1024;

/// Physical partitions `namespace` spans: as set, else one per 50 GB of
/// the data seen (see [`Known::partitions`]).
pub fn partitions_of(
    settings: &Settings,
    namespaces: &super::namespaces::Namespaces,
    namespace: &str,
) -> u32 {
    Known {
        state: Lazy::known(namespaces.get(namespace)),
        collection: Lazy::known(settings.collection(namespace)),
        key: Lazy::known(None),
        inserted: None,
        modified: None,
        shape: ShapePrice::default(),
    }
    .partitions()
}

/// What one query saves by running on one partition instead of
/// `partitions` (its base charge on each of the others).
pub fn fan_out_saving(partitions: u32) -> f64 {
    f64::from(partitions.saturating_sub(1)) * query_base()
}

/// What fetching `n` documents with one `$in` saves over `n` queries of
/// one each: all but one query's base charge.
pub fn batch_saving(n: u64) -> f64 {
    n.saturating_sub(1) as f64 * query_base()
}

/// Physical partitions a collection of `data_bytes` spans at least.
pub fn partitions_for(data_bytes: u64) -> u32 {
    u32::try_from(data_bytes.div_ceil(PHYSICAL_PARTITION_BYTES))
        .unwrap_or(u32::MAX)
        .max(1)
}

/// The indexed terms of a document under `policy`: its leaf values (each
/// array element one), at most [`MAX_TERMS`], nesting followed to
/// [`MAX_DEPTH`].
pub fn indexed_terms(doc: &RawDocument, policy: &IndexPolicy) -> u64 {
    let mut path = String::new();
    let mut n = 0;
    count_terms(doc.as_bytes(), policy, &mut path, 0, false, &mut n);
    n
}

fn count_terms(
    body: &[u8],
    policy: &IndexPolicy,
    path: &mut String,
    depth: usize,
    in_array: bool,
    n: &mut u64,
) {
    for e in bson_walk::elements(body) {
        let Ok(e) = e else { return };
        if *n >= MAX_TERMS {
            return;
        }
        let len = path.len();
        if !in_array {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(bson_walk::utf8(e.key).unwrap_or("?"));
        }
        let nested = matches!(e.element_type, 0x03 | 0x04);
        if nested && depth < MAX_DEPTH {
            if policy.may_cover_below(path) {
                count_terms(e.value, policy, path, depth + 1, e.element_type == 0x04, n);
            }
        } else if policy.covers(path) {
            *n += 1;
        }
        path.truncate(len);
    }
}

/// Top-level fields an update document's operators change (`{$set: {a: 1,
/// b: 2}, $inc: {c: 1}}`: 3), or a replacement's fields.
pub fn changed_properties(update: &RawDocument) -> u64 {
    let mut n = 0u64;
    for e in bson_walk::elements(update.as_bytes()) {
        let Ok(e) = e else { break };
        if e.key.first() == Some(&b'$') {
            if e.element_type == 0x03 {
                n += bson_walk::elements(e.value).filter(|x| x.is_ok()).count() as u64;
            } else {
                n += 1;
            }
        } else {
            n += 1;
        }
    }
    n
}

/// What pricing needs of an operation that its shape decides (the same
/// for every operation of the shape): worked out once per shape, and only
/// under a priced target.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShapePrice {
    /// Properties its first update changes ([`changed_properties`]).
    pub changed: Option<u64>,
    /// Whether its filter is all equalities, `_id` among them: the only
    /// finds that may be point reads.
    pub id_equality: bool,
    /// Whether that filter has other fields than `_id` (the partition key
    /// decides whether they make it a point read).
    pub other_equalities: bool,
    /// Whether it counts documents (`count`, a counting pipeline).
    pub counts: bool,
}

impl ShapePrice {
    pub fn of(cmd: &Command<'_>) -> ShapePrice {
        let changed = cmd
            .updates()
            .first()
            .and_then(|u| u.update)
            .map(changed_properties);
        let (mut id_equality, mut other_equalities) = (false, false);
        if cmd.kind == Kind::Find {
            if let Some(filter) = cmd.filter() {
                let mut all = true;
                for e in bson_walk::elements(filter.as_bytes()) {
                    let Ok(e) = e else {
                        all = false;
                        break;
                    };
                    all &= is_equality(&e);
                    match e.key {
                        b"_id" => id_equality = true,
                        _ => other_equalities = true,
                    }
                }
                id_equality &= all;
            }
        }
        ShapePrice {
            changed,
            id_equality,
            other_equalities,
            counts: matches!(cmd.kind, Kind::Count | Kind::Aggregate) && cmd.counts(),
        }
    }
}

/// A look-up made the first time it is needed, and kept.
pub struct Lazy<'k, T> {
    cell: std::cell::OnceCell<Option<&'k T>>,
    find: Option<&'k dyn Fn() -> Option<&'k T>>,
}

impl<'k, T> Lazy<'k, T> {
    /// Looked up by `find`, when asked.
    pub fn new(find: &'k dyn Fn() -> Option<&'k T>) -> Lazy<'k, T> {
        Lazy {
            cell: std::cell::OnceCell::new(),
            find: Some(find),
        }
    }

    /// Already known.
    pub fn known(value: Option<&'k T>) -> Lazy<'k, T> {
        Lazy {
            cell: std::cell::OnceCell::from(value),
            find: None,
        }
    }

    pub fn get(&self) -> Option<&'k T> {
        *self.cell.get_or_init(|| self.find.and_then(|f| f()))
    }
}

/// What the analysis knows of an operation's collection when it prices it.
/// Each look-up (the collection's state, its configuration, its partition
/// key) is made only by the operations whose charge needs it.
pub struct Known<'k> {
    /// The collection's state as seen (None: nothing seen of it yet).
    pub state: Lazy<'k, NamespaceState>,
    /// What is configured of the collection.
    pub collection: Lazy<'k, Collection>,
    pub key: Lazy<'k, PartitionKey>,
    /// What an insert stored, as its documents were walked.
    pub inserted: Option<Inserted>,
    /// An update's `nModified`, as the reply says.
    pub modified: Option<i64>,
    /// What the operation's shape decides.
    pub shape: ShapePrice,
}

/// What an insert stored, added up as its documents were walked: the size
/// charge of each ([`write_charge`]) and their indexed terms under the
/// default policy (`Doc::terms`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Inserted {
    pub size_charge: f64,
    pub terms: u64,
}

impl Inserted {
    /// One more document of `bytes` with `terms`.
    pub fn add(&mut self, bytes: u64, terms: u64) {
        self.size_charge += write_charge(bytes);
        self.terms += terms;
    }
}

impl Known<'_> {
    /// Its documents' typical (median) size, as seen; [`TYPICAL_BYTES`]
    /// when none was seen.
    pub fn typical_bytes(&self) -> u64 {
        self.state
            .get()
            .filter(|s| s.doc_sizes.count > 0)
            .map_or(TYPICAL_BYTES, |s| s.doc_sizes.median().max(1))
    }

    /// Its documents' typical count of top-level fields (that of its
    /// commonest field set; 10 when none was seen: the published
    /// examples' figure).
    pub fn typical_fields(&self) -> u64 {
        self.state
            .get()
            .and_then(|s| s.field_sets.iter().map(|(_, f)| f).max_by_key(|f| f.count))
            .map(|f| f.fields.len() as u64)
            .filter(|n| *n > 0)
            .unwrap_or(10)
    }

    /// Physical partitions its data spans: as set, else one per 50 GB of
    /// the data seen (its documents seen times their median size).
    pub fn partitions(&self) -> u32 {
        self.collection
            .get()
            .and_then(|c| c.physical_partitions)
            .unwrap_or_else(|| {
                let data = self
                    .state
                    .get()
                    .filter(|s| s.doc_sizes.count > 0)
                    .map_or(0, |s| {
                        // Within one partition even at the largest size
                        // seen: no median needed (it is never above it).
                        let most = s.doc_sizes.max.max(1).saturating_mul(s.documents_seen);
                        if most <= PHYSICAL_PARTITION_BYTES {
                            return most;
                        }
                        s.doc_sizes.median().max(1).saturating_mul(s.documents_seen)
                    });
                partitions_for(data)
            })
    }

    /// The collection's index policy (every path unless configured).
    pub fn index(&self) -> &IndexPolicy {
        self.collection
            .get()
            .map_or(&IndexPolicy::Everything, |c| &c.index)
    }
}

/// The estimated RU of one answered operation (a round trip): `cmd`, the
/// server's `reply`, the documents it returned, whether it is a getMore
/// of an earlier query, and how it met the partition key.
pub fn of_operation(
    cmd: &Command<'_>,
    reply: Option<&Reply<'_>>,
    returned: &[&RawDocument],
    getmore: bool,
    partitioning: Option<Partitioning>,
    known: &Known<'_>,
) -> f64 {
    let sizes = || returned.iter().map(|d| d.as_bytes().len() as u64);
    if getmore {
        // A later page of a query: charged for what it loads (*Optimize
        // request cost*: the pages add up to the whole query's charge).
        return sizes().map(query_document).sum();
    }
    // A partitioned collection's query runs on the partitions its filter
    // targets; an unpartitioned one has one.
    let fan_out = || match (known.key.get(), partitioning) {
        (None, _) | (_, Some(Partitioning::SingleShard)) => 1,
        _ => known.partitions(),
    };
    let n = |r: Option<&Reply<'_>>| r.and_then(|r| r.n()).unwrap_or(0).max(0) as u64;
    match cmd.kind {
        Kind::Find if returned.len() <= 1 && is_point_read(cmd, known) => {
            sizes().map(read_charge).sum::<f64>().max(POINT_READ_1KB)
        }
        Kind::Find => {
            // A projection returns less than it loads: each document is
            // loaded whole, at the collection's typical size.
            let whole = cmd.projection().is_none_or(|p| p.is_empty());
            let typical = if whole { 0 } else { known.typical_bytes() };
            query(fan_out(), sizes().map(|b| b.max(typical)))
        }
        // A count loads what it counts, at the collection's typical size.
        Kind::Count | Kind::Aggregate if known.shape.counts => {
            let counted = match cmd.kind {
                Kind::Count => n(reply),
                _ => returned.first().map_or(0, |d| first_number(d)),
            };
            query(
                fan_out(),
                std::iter::repeat_n(known.typical_bytes(), counted.min(MAX_COUNTED) as usize),
            )
        }
        Kind::Aggregate | Kind::Count => query(fan_out(), sizes()),
        Kind::Distinct => query(fan_out(), std::iter::empty()),
        Kind::Insert => match (known.inserted, known.index()) {
            // Every path indexed: what the documents' walk added up.
            (Some(inserted), IndexPolicy::Everything) => {
                inserted.size_charge + INDEX_TERM * inserted.terms as f64
            }
            (_, policy) => cmd
                .documents()
                .iter()
                .map(|d| insert(d.as_bytes().len() as u64, indexed_terms(d, policy)))
                .sum(),
        },
        Kind::Update | Kind::FindAndModify => {
            let updates = cmd.updates();
            let Some(first) = updates.first() else {
                // findAndModify with remove.
                let removed = u64::from(reply.and_then(|r| r.value()).is_some());
                return removed as f64 * delete(known.typical_bytes(), known.typical_fields());
            };
            let changed = known
                .shape
                .changed
                .unwrap_or_else(|| known.typical_fields())
                .max(1);
            // Only an upsert's reply can say it inserted, and only when it
            // counts more documents (`n`: matched and upserted) than it
            // modified: `n` comes first in a reply, `upserted` may not.
            let upserted = match (cmd.kind, reply) {
                (Kind::Update, Some(r))
                    if updates.iter().any(|u| u.upsert)
                        && r.n().unwrap_or(0) > known.modified.unwrap_or(0) =>
                {
                    r.upserted()
                }
                (Kind::FindAndModify, Some(r)) if updates.iter().any(|u| u.upsert) => r.upserted(),
                _ => 0,
            };
            let modified = match cmd.kind {
                Kind::FindAndModify => {
                    u64::from(upserted == 0 && reply.and_then(|r| r.value()).is_some())
                }
                _ => known.modified.unwrap_or(0).max(0) as u64,
            };
            let typical_bytes = known.typical_bytes();
            let one = if first.is_operator_update() {
                patch(typical_bytes, changed)
            } else {
                let bytes = first
                    .update
                    .map_or(typical_bytes, |u| u.as_bytes().len() as u64);
                replace(bytes, changed)
            };
            // What an upsert inserts: the fields it sets, its filter's
            // equalities and an `_id`.
            let inserted = insert(typical_bytes.min(TYPICAL_BYTES), changed + 2);
            modified as f64 * one + upserted as f64 * inserted
        }
        Kind::Delete => n(reply) as f64 * delete(known.typical_bytes(), known.typical_fields()),
        _ => 0.0,
    }
}

/// Documents a count is charged for at most (past it, the same charge:
/// a bound on the sum, not on what the server did).
const MAX_COUNTED: u64 = 1_000_000;

/// The first number of a document (a counting pipeline's `{_id: 1, n: 3}`
/// or `{count: 3}`), 0 when none.
fn first_number(doc: &RawDocument) -> u64 {
    bson_walk::elements(doc.as_bytes())
        .map_while(Result::ok)
        .filter(|e| e.key != b"_id")
        .find_map(|e| e.read().number())
        .map_or(0, |n| n.max(0) as u64)
}

/// Whether a filter's value is an equality: a scalar, a document that is
/// not an operator, or `{$eq: v}`.
fn is_equality(e: &bson_walk::Element<'_>) -> bool {
    match e.element_type {
        0x03 => {
            bson_walk::first_key(e.value).is_none_or(|k| k.first() != Some(&b'$'))
                || bson_walk::field(e.value, b"$eq").is_some()
        }
        0x04 => false,
        _ => true,
    }
}

/// A find by `_id` (an equality), and by the partition key's value when
/// the key is another field: what Cosmos DB serves as a point read.
fn is_point_read(cmd: &Command<'_>, known: &Known<'_>) -> bool {
    let key = known.key.get();
    if !known.shape.id_equality {
        return false;
    }
    let key_paths = key.map_or(0, |k| k.paths.iter().filter(|p| *p != "_id").count());
    if !known.shape.other_equalities {
        return key_paths == 0;
    }
    let Some(filter) = cmd.filter() else {
        return false;
    };
    let mut keyed = 0;
    for e in bson_walk::elements(filter.as_bytes()) {
        let Ok(e) = e else { return false };
        match e.key {
            b"_id" => {}
            k if key.is_some_and(|key| key.paths.iter().any(|p| p.as_bytes() == k)) => keyed += 1,
            _ => return false,
        }
    }
    keyed == key_paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn within(got: f64, want: f64, share: f64) -> bool {
        (got - want).abs() <= want * share
    }

    #[test]
    fn point_reads_match_the_published_figures() {
        assert!(within(read_charge(1024), 1.0, 0.2), "{}", read_charge(1024));
        assert!(within(read_charge(100 * 1024), 10.0, 0.2));
        // Exactly, since the line goes through both.
        assert!((read_charge(1024) - POINT_READ_1KB).abs() < 1e-9);
        assert!((read_charge(100 * 1024) - POINT_READ_100KB).abs() < 1e-9);
        // Never under the 1 KB figure.
        assert_eq!(read_charge(10), 1.0);
    }

    #[test]
    fn point_reads_stay_within_twice_the_size_table() {
        for (kb, ru) in READ_BY_SIZE {
            let got = read_charge((kb * 1024.0) as u64);
            assert!(got <= 2.0 * ru && got >= ru / 2.0, "{kb} KB: {got} vs {ru}");
        }
    }

    #[test]
    fn writes_follow_the_size_table_and_the_worked_examples() {
        for (kb, ru) in WRITE_BY_SIZE {
            assert!(within(write_charge((kb * 1024.0) as u64), ru, 1e-9), "{kb}");
        }
        // Under 1 KB, the first row; between rows, between their charges.
        assert_eq!(write_charge(200), 4.95);
        let mid = write_charge(96 * 1024);
        assert!(mid > 22.67 && mid < 48.19, "{mid}");
        // "A 1-KB document with 10 indexed terms: 5.0 + 0.2 × 10 = 7 RUs".
        assert!(within(insert(1024, 10), 7.0, 0.02), "{}", insert(1024, 10));
        // "Updating a 1-KB document with two modified indexed terms: 10.8".
        assert!(within(replace(1024, 2), 10.8, 0.02), "{}", replace(1024, 2));
        // The same as a patch: 11.6.
        assert!(within(patch(1024, 2), 11.6, 0.02), "{}", patch(1024, 2));
        // "Deleting a 1-KB document with 10 indexed terms: 7.0".
        assert!(within(delete(1024, 10), 7.0, 0.02));
        // "Inserting a 1 KB item without indexing costs around ~5.5 RUs."
        assert!(within(insert(1024, 0), 5.5, 0.15));
        // "Replacing an item costs two times … inserting the same item."
        assert!(within(replace(1024, 0), 2.0 * insert(1024, 0), 1e-9));
    }

    #[test]
    fn queries_follow_the_published_sample() {
        // One 9,963-byte document through the index: 3.19 RU.
        assert!(within(query(1, [QUERY_SAMPLE_BYTES]), 3.19, 1e-9));
        // "A query returns 1000 1-KB items, the cost … is 1000."
        assert!(within(
            query(1, std::iter::repeat_n(1024, 1000)),
            1000.0,
            0.01
        ));
        // A cross-partition query pays its base on every partition.
        let one = query(1, [1024]);
        let ten = query(10, [1024]);
        assert!(within(ten - one, 9.0 * query_base(), 1e-9));
        assert!(query_base() > 1.0 && query_base() < 2.0, "{}", query_base());
    }

    #[test]
    fn terms_follow_the_index_policy() {
        let doc = rawdoc! {"_id": 1, "a": 1, "b": {"c": 1, "d": [1, 2, 3]}, "e": "x"};
        assert_eq!(indexed_terms(&doc, &IndexPolicy::Everything), 7);
        let only = IndexPolicy::Paths(vec!["b.d".into()]);
        assert_eq!(indexed_terms(&doc, &only), 4);
        let top = IndexPolicy::Paths(vec!["b".into(), "e".into()]);
        assert_eq!(indexed_terms(&doc, &top), 6);
        assert_eq!(indexed_terms(&doc, &IndexPolicy::Paths(vec![])), 1);
    }

    /// Under the default policy an insert is priced by the terms its
    /// documents' walk counted (`Doc::terms`), not by a second walk: the
    /// same count where the walk visits every value, and where it walks
    /// only the first elements of a long array of alike documents.
    #[test]
    fn the_documents_walk_counts_the_same_terms() {
        use crate::analysis::namespaces::{Caps, Doc};
        let caps = Caps::default();
        let comments: Vec<bson::Bson> = (0..100)
            .map(|i| bson::bson!({"by": i, "text": "t", "likes": [1, 2]}))
            .collect();
        let docs = [
            rawdoc! {"_id": 1, "a": 1, "b": {"c": 1, "d": [1, 2, 3]}, "e": "x"},
            rawdoc! {"_id": 2, "tags": ["a", "bb", "ccc"], "scores": [1.5, 2.5], "empty": []},
            bson::RawDocumentBuf::try_from(&bson::doc! {"_id": 3, "comments": comments}).unwrap(),
        ];
        for doc in &docs {
            assert_eq!(
                Doc::new(doc, &caps).terms,
                indexed_terms(doc, &IndexPolicy::Everything),
                "{doc:?}"
            );
        }
    }

    #[test]
    fn terms_of_a_deep_document_are_bounded() {
        let mut doc = rawdoc! {"x": 1};
        for _ in 0..100 {
            doc = rawdoc! {"n": doc};
        }
        assert_eq!(indexed_terms(&doc, &IndexPolicy::Everything), 1);
    }

    #[test]
    fn changed_properties_of_updates() {
        let u = rawdoc! {"$set": {"a": 1, "b": 2}, "$inc": {"c": 1}};
        assert_eq!(changed_properties(&u), 3);
        assert_eq!(changed_properties(&rawdoc! {"a": 1, "b": 2}), 2);
    }

    #[test]
    fn partitions_by_data_size() {
        assert_eq!(partitions_for(0), 1);
        assert_eq!(partitions_for(PHYSICAL_PARTITION_BYTES), 1);
        assert_eq!(partitions_for(PHYSICAL_PARTITION_BYTES + 1), 2);
    }
}
