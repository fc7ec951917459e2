//! Partition (shard) keys and how an operation's filter meets them.
//!
//! A collection's key comes from, in order of precedence: the config file;
//! commands seen in traffic (`shardCollection`, Cosmos DB's `customAction:
//! "CreateCollection" | "UpdateCollection"` with `shardKey`); a sharded
//! cluster's `config.collections`. Targeting follows the backend's own
//! rules for the key's kind, and is named in `analyzeShardKey`'s words:
//!
//! | key | single-shard | multi-shard | scatter-gather |
//! |---|---|---|---|
//! | ranged (MongoDB default) | equality on every path | equality, `$in` or a range on a prefix | anything else |
//! | hashed | equality on every path | `$in` (or equality on a prefix) | ranges, anything else |
//! | Cosmos DB | equality on every path | equality on a prefix of a hierarchical key | anything else (`$in` too) |
//!
//! "Equality" is `{k: v}`, `{k: {$eq: v}}` or a one-value `$in`, at the top
//! level or inside `$and`; an `$or` whose every branch is targeted reaches
//! several partitions (multi-shard).

use super::command::{Command, Kind};
use crate::analysis::namespaces::{tuple_hash_continue, TUPLE_HASH_START};
use crate::wire::bson_walk::{elements, field, values, Value};
use bson::{RawBsonRef, RawDocument};
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::collections::BTreeMap;

/// How many partitions an operation reaches, in `analyzeShardKey`'s
/// vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partitioning {
    SingleShard,
    MultiShard,
    ScatterGather,
}

impl Partitioning {
    pub fn as_str(self) -> &'static str {
        match self {
            Partitioning::SingleShard => "single-shard",
            Partitioning::MultiShard => "multi-shard",
            Partitioning::ScatterGather => "scatter-gather",
        }
    }
}

/// How the backend places documents by the key, which decides what a
/// filter must say to be targeted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyKind {
    /// MongoDB's default (`{k: 1}`): chunks are ranges of key values.
    #[default]
    Ranged,
    /// `{k: "hashed"}`: chunks are ranges of the key's hash.
    Hashed,
    /// Azure Cosmos DB: one logical partition per key value (hierarchical
    /// keys list several paths).
    Cosmos,
}

impl KeyKind {
    pub fn parse(s: &str) -> Option<KeyKind> {
        match s {
            "ranged" => Some(KeyKind::Ranged),
            "hashed" => Some(KeyKind::Hashed),
            "cosmos" => Some(KeyKind::Cosmos),
            _ => None,
        }
    }

    /// A MongoDB key pattern's kind: hashed when any field says `"hashed"`.
    pub fn of_pattern(pattern: &RawDocument) -> KeyKind {
        let hashed = pattern
            .iter()
            .flatten()
            .any(|(_, v)| v.as_str() == Some("hashed"));
        if hashed {
            KeyKind::Hashed
        } else {
            KeyKind::Ranged
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Ranged => "ranged",
            KeyKind::Hashed => "hashed",
            KeyKind::Cosmos => "cosmos",
        }
    }
}

/// Where a key came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeySource {
    Config,
    ShardCollection,
    CosmosCustomAction,
    ConfigCollections,
}

impl KeySource {
    pub fn describe(self) -> &'static str {
        match self {
            KeySource::Config => "config file",
            KeySource::ShardCollection => "shardCollection seen in traffic",
            KeySource::CosmosCustomAction => "Cosmos DB customAction seen in traffic",
            KeySource::ConfigCollections => "the sharded cluster's config.collections",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionKey {
    pub paths: Vec<String>,
    /// Absent in reports written before key kinds were told apart.
    #[serde(default)]
    pub kind: KeyKind,
    pub source: KeySource,
}

impl PartitionKey {
    pub fn new(paths: Vec<String>, kind: KeyKind, source: KeySource) -> PartitionKey {
        PartitionKey {
            paths,
            kind,
            source,
        }
    }

    /// The key's fields, when each is a top-level field (no dot) and
    /// there are at most `MAX_KEY_FIELDS`: an inserted document's walk
    /// finds their values (`Doc::keyed`); else none.
    pub fn top_fields(&self) -> &[String] {
        let top = self.paths.len() <= crate::analysis::namespaces::MAX_KEY_FIELDS
            && self.paths.iter().all(|p| !p.contains('.'));
        if top {
            &self.paths
        } else {
            &[]
        }
    }

    /// `[a, b] (ranged)`, as messages show a key.
    pub fn describe(&self) -> String {
        format!("[{}] ({})", self.paths.join(", "), self.kind.as_str())
    }
}

/// Keys by namespace.
#[derive(Clone, Debug, Default)]
pub struct PartitionKeys {
    keys: BTreeMap<String, PartitionKey>,
}

impl PartitionKeys {
    pub fn from_config(
        keys: impl IntoIterator<Item = (String, Vec<String>, KeyKind)>,
    ) -> PartitionKeys {
        PartitionKeys {
            keys: keys
                .into_iter()
                .filter(|(_, paths, _)| !paths.is_empty())
                .map(|(ns, paths, kind)| (ns, PartitionKey::new(paths, kind, KeySource::Config)))
                .collect(),
        }
    }

    pub fn get(&self, namespace: &str) -> Option<&PartitionKey> {
        self.keys.get(namespace)
    }

    pub fn all(&self) -> &BTreeMap<String, PartitionKey> {
        &self.keys
    }

    /// A key read from a sharded cluster; the config file wins.
    pub fn discovered(&mut self, namespace: String, paths: Vec<String>, kind: KeyKind) {
        if paths.is_empty()
            || self
                .keys
                .get(&namespace)
                .is_some_and(|k| k.source == KeySource::Config)
        {
            return;
        }
        self.keys.insert(
            namespace,
            PartitionKey::new(paths, kind, KeySource::ConfigCollections),
        );
    }

    /// Learns a key from a command in traffic. The config file wins over
    /// traffic; a later command replaces what an earlier one said.
    pub fn learn(&mut self, cmd: &Command<'_>) -> Option<(String, PartitionKey)> {
        let paths = cmd.shard_key()?;
        let namespace = cmd.namespace()?;
        if paths.is_empty()
            || self
                .keys
                .get(&namespace)
                .is_some_and(|k| k.source == KeySource::Config)
        {
            return None;
        }
        let (source, kind) = match cmd.kind {
            Kind::ShardCollection => (
                KeySource::ShardCollection,
                cmd.shard_key_pattern()
                    .map_or(KeyKind::Ranged, KeyKind::of_pattern),
            ),
            _ => (KeySource::CosmosCustomAction, KeyKind::Cosmos),
        };
        let key = PartitionKey::new(paths, kind, source);
        self.keys.insert(namespace.clone(), key.clone());
        Some((namespace, key))
    }
}

/// How a data operation meets the keys of the collections it reads: its
/// own (an insert goes to its document's partition: single-shard) and, for
/// an aggregate, those of collections it joins with `$lookup` — a join on
/// the looked-up collection's key asks one partition per input document
/// (multi-shard), a join on any other field asks them all. `None` when no
/// collection involved has a known key.
pub fn classify_operation(
    cmd: &Command<'_>,
    namespace: &str,
    keys: &PartitionKeys,
) -> Option<Partitioning> {
    if keys.keys.is_empty() {
        // No collection's key known (yet): nothing to classify against.
        return None;
    }
    let own = keys
        .get(namespace)
        .map(|key| classify_command(cmd, namespace, key).unwrap_or(Partitioning::SingleShard));
    let db = namespace.split_once('.').map_or(namespace, |(db, _)| db);
    let joins = cmd
        .pipeline()
        .map(|p| lookup_partitioning(p, db, keys))
        .unwrap_or_default();
    own.into_iter().chain(joins).max()
}

fn lookup_partitioning(pipeline: &[u8], db: &str, keys: &PartitionKeys) -> Vec<Partitioning> {
    let mut out = Vec::new();
    for stage in values(pipeline).map_while(Result::ok) {
        let Value::Document(stage) = stage else {
            continue;
        };
        let Some(lookup) = field(stage, b"$lookup").filter(|l| l.element_type == 0x03) else {
            continue;
        };
        let Some(from) = field(lookup.value, b"from").and_then(|e| e.as_str()) else {
            continue;
        };
        let Some(key) = keys.get(&format!("{db}.{from}")) else {
            continue;
        };
        let on_key = match field(lookup.value, b"foreignField").and_then(|e| e.as_str()) {
            Some(f) if key.kind == KeyKind::Cosmos => key.paths.len() == 1 && key.paths[0] == f,
            Some(f) => key.paths[0] == f,
            None => false,
        };
        out.push(if on_key {
            Partitioning::MultiShard
        } else {
            Partitioning::ScatterGather
        });
    }
    out
}

/// How a data operation meets its collection's key; `None` for operations
/// that are not reads, updates or deletes by filter (inserts go to their
/// document's partition). A command with several statements (updates,
/// deletes, bulkWrite) is as wide as its widest statement on `namespace`.
pub fn classify_command(
    cmd: &Command<'_>,
    namespace: &str,
    key: &PartitionKey,
) -> Option<Partitioning> {
    let of = |f: Option<&RawDocument>| f.map_or(Partitioning::ScatterGather, |f| classify(f, key));
    match cmd.kind {
        Kind::Find | Kind::Count | Kind::Distinct | Kind::FindAndModify => Some(of(cmd.filter())),
        Kind::Aggregate => {
            cmd.pipeline()?;
            Some(of(cmd.first_match()))
        }
        Kind::Update => cmd.updates().iter().map(|u| of(u.filter)).max(),
        Kind::Delete => cmd.deletes().iter().map(|(q, _)| classify(q, key)).max(),
        Kind::BulkWrite => {
            let (spaces, ops) = cmd.bulk_write()?;
            let mine = spaces.iter().position(|ns| *ns == namespace)?;
            ops.iter()
                .filter_map(|op| {
                    let (verb, index) = op.iter().next()?.ok()?;
                    let index = match index {
                        RawBsonRef::Int32(i) => i as usize,
                        RawBsonRef::Int64(i) => i as usize,
                        _ => return None,
                    };
                    if index != mine {
                        return None;
                    }
                    Some(match verb.as_str() {
                        "insert" => Partitioning::SingleShard,
                        _ => of(op.get_document("filter").ok()),
                    })
                })
                .max()
        }
        _ => None,
    }
}

/// How one path is constrained, narrowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pin {
    Eq,
    In,
    Range,
}

/// Classifies a filter against a key.
pub fn classify(filter: &RawDocument, key: &PartitionKey) -> Partitioning {
    classify_at(filter, key, 0)
}

fn classify_at(filter: &RawDocument, key: &PartitionKey, depth: usize) -> Partitioning {
    classify_in(filter.as_bytes(), key, depth)
}

fn classify_in(filter: &[u8], key: &PartitionKey, depth: usize) -> Partitioning {
    if depth > MAX_FILTER_DEPTH {
        return Partitioning::ScatterGather;
    }
    let pins: Vec<Option<Pin>> = key
        .paths
        .iter()
        .map(|path| pinned_in(filter, path))
        .collect();
    let mut best = by_pins(&pins, key.kind);
    // Each `$and` branch is a conjunct: the narrowest one bounds the whole
    // (an `$or` nested in it included). An `$or` whose every branch is
    // targeted reaches the union of their partitions.
    for e in elements(filter).map_while(Result::ok) {
        let Value::Array(branches) = e.read() else {
            continue;
        };
        let branches = values(branches).map_while(Result::ok);
        match e.key {
            b"$and" => {
                for b in branches.filter_map(|b| b.as_document()) {
                    best = best.min(classify_in(b, key, depth + 1));
                }
            }
            b"$or" => {
                let mut n = 0;
                let mut widest = Partitioning::SingleShard;
                for b in branches {
                    n += 1;
                    widest = widest.max(match b {
                        Value::Document(b) => classify_in(b, key, depth + 1),
                        _ => Partitioning::ScatterGather,
                    });
                }
                if n > 1 {
                    widest = widest.max(Partitioning::MultiShard);
                }
                if n > 0 {
                    best = best.min(widest);
                }
            }
            _ => {}
        }
    }
    best
}

/// The backend's targeting rule for a key of `kind`, given how each of its
/// paths is pinned.
fn by_pins(pins: &[Option<Pin>], kind: KeyKind) -> Partitioning {
    if pins.iter().all(|p| *p == Some(Pin::Eq)) {
        return Partitioning::SingleShard;
    }
    let first = pins.first().copied().flatten();
    let narrowed = match kind {
        // Chunks are ranges of the key: any bound on its first path
        // (equality, a list, a range) selects the chunks that hold it.
        KeyKind::Ranged => first.is_some(),
        // Chunks are ranges of the hash: only values can be hashed.
        KeyKind::Hashed => matches!(first, Some(Pin::Eq | Pin::In)),
        // One logical partition per value of the whole key; a prefix of
        // a hierarchical key selects its sub-partitions.
        KeyKind::Cosmos => pins.len() > 1 && first == Some(Pin::Eq),
    };
    if narrowed {
        Partitioning::MultiShard
    } else {
        Partitioning::ScatterGather
    }
}

/// The paths a filter pins by equality (top level and `$and` branches):
/// the candidate partition keys this operation would be single on.
pub fn equality_paths(filter: &RawDocument) -> Vec<String> {
    let mut paths = Vec::new();
    equality_paths_into(filter, &mut paths);
    let mut out: Vec<String> = paths.into_iter().map(str::to_string).collect();
    out.sort();
    out.dedup();
    out
}

/// Whether a filter pins `path` by equality (one of [`equality_paths`]).
pub fn pins_by_equality(filter: &RawDocument, path: &str) -> bool {
    let mut pinned = false;
    walk_pins_of(filter, Some(path), 0, &mut |_, pin| {
        pinned |= pin == Pin::Eq
    });
    pinned
}

/// [`equality_paths`] appended to `out` as borrowed, unsorted (nothing
/// allocated but `out`'s growth).
pub fn equality_paths_into<'a>(filter: &'a RawDocument, out: &mut impl Extend<&'a str>) {
    walk_pins(filter, 0, &mut |path, pin| {
        if pin == Pin::Eq {
            out.extend(Some(path))
        }
    });
}

/// The filters of a read, update or delete (an aggregate's first `$match`),
/// held inline (no allocation) when there are at most two.
pub fn filters<'a>(cmd: &Command<'a>) -> SmallVec<[&'a RawDocument; 2]> {
    match cmd.kind {
        Kind::Find | Kind::Count | Kind::Distinct | Kind::FindAndModify => {
            cmd.filter().into_iter().collect()
        }
        Kind::Aggregate => cmd.first_match().into_iter().collect(),
        Kind::Update => cmd.updates().iter().filter_map(|u| u.filter).collect(),
        Kind::Delete => cmd.deletes().into_iter().map(|(q, _)| q).collect(),
        _ => SmallVec::new(),
    }
}

/// A hash of the partition-key value an operation targets, when it names
/// one whole: the equality values of every key path in its (first) filter,
/// or an insert's first document's values at those paths. `None` when a
/// path has no single value. Values are compared by hash, never kept.
pub fn key_value_hash(cmd: &Command<'_>, key: &PartitionKey) -> Option<u64> {
    let source: &RawDocument = match cmd.kind {
        Kind::Insert => cmd.documents().first().copied()?,
        _ => filters(cmd).first().copied()?,
    };
    document_key_hash(source, key)
}

/// A hash of the partition-key value of `source`, a document or a filter
/// (see [`key_value_hash`]): found by a walk of the raw bytes, and hashed
/// from them where the type allows (see `namespaces::element_hash`), else
/// decoded.
pub fn document_key_hash(source: &RawDocument, key: &PartitionKey) -> Option<u64> {
    key_hash(source, key, |path| key_element(source.as_bytes(), path))
}

/// [`document_key_hash`] of an inserted document, from the values its walk
/// hashed when it was walked for the key's fields (`Doc::keyed` with
/// [`PartitionKey::top_fields`]); else by a walk of its own.
pub fn inserted_key_hash(
    doc: &crate::analysis::namespaces::Doc<'_>,
    key: &PartitionKey,
) -> Option<u64> {
    use crate::analysis::namespaces::KeyValue;
    // Walked for `key.top_fields()`: every path, or none.
    match doc.key_value() {
        KeyValue::Absent => None,
        KeyValue::Hashed(h) => Some(h),
        KeyValue::Other | KeyValue::NotAsked => document_key_hash(doc.raw, key),
    }
}

/// The hash of `source`'s key values, each path's found by
/// `value_of(path)`.
fn key_hash<'d>(
    source: &'d RawDocument,
    key: &PartitionKey,
    mut value_of: impl FnMut(&str) -> Option<crate::wire::bson_walk::Element<'d>>,
) -> Option<u64> {
    let mut h = TUPLE_HASH_START;
    for path in &key.paths {
        let value = value_of(path)?;
        let Some(value) = crate::analysis::namespaces::element_hash(&value) else {
            return decoded_key_hash(source, key);
        };
        h = tuple_hash_continue(h, value);
    }
    Some(h)
}

/// The value at `path` of a document or a filter (`{k: v}`, `{k: {$eq:
/// v}}`, an embedded document's value), or None when it has no single one.
fn key_element<'d>(doc: &'d [u8], path: &str) -> Option<crate::wire::bson_walk::Element<'d>> {
    let mut body = doc;
    let mut parts = path.split('.').peekable();
    loop {
        let e = crate::wire::bson_walk::field(body, parts.next()?.as_bytes())?;
        match (e.element_type, parts.peek()) {
            (0x03, Some(_)) => body = e.value,
            (_, Some(_)) => return None,
            (_, None) => return single_value(e),
        }
    }
}

/// The value an element gives a key: `{k: {$eq: v}}`'s `v`, an embedded
/// document itself, none for other operators (`{$in: …}`).
fn single_value(
    e: crate::wire::bson_walk::Element<'_>,
) -> Option<crate::wire::bson_walk::Element<'_>> {
    use crate::wire::bson_walk;
    if e.element_type != 0x03 {
        return Some(e);
    }
    match bson_walk::field(e.value, b"$eq") {
        Some(eq) => Some(eq),
        None if bson_walk::first_key(e.value).is_some_and(|k| k.first() == Some(&b'$')) => None,
        None => Some(e),
    }
}

/// [`document_key_hash`] by decoded values: for the types the raw hash
/// does not take.
fn decoded_key_hash(source: &RawDocument, key: &PartitionKey) -> Option<u64> {
    let mut h = TUPLE_HASH_START;
    for path in &key.paths {
        let mut doc = source;
        let mut parts = path.split('.').peekable();
        let value = loop {
            let part = parts.next()?;
            let v = doc.get(part).ok().flatten()?;
            match (v, parts.peek()) {
                (bson::RawBsonRef::Document(d), Some(_)) => doc = d,
                (_, Some(_)) => return None,
                (bson::RawBsonRef::Document(d), None) => match d.get("$eq").ok().flatten() {
                    Some(eq) => break eq,
                    None if crate::wire::bson_walk::first_key(d.as_bytes())
                        .is_some_and(|k| k.first() == Some(&b'$')) =>
                    {
                        return None
                    }
                    None => break v,
                },
                (v, None) => break v,
            }
        };
        h = tuple_hash_continue(h, crate::analysis::namespaces::value_hash(value));
    }
    Some(h)
}

/// How `path` is pinned by `filter` (directly or in an `$and` branch).
fn pinned_in(filter: &[u8], path: &str) -> Option<Pin> {
    let mut best: Option<Pin> = None;
    walk_pins_in(filter, Some(path), 0, &mut |_, pin| {
        best = Some(best.map_or(pin, |b| b.min(pin)));
    });
    best
}

/// `$and` nests deeper than this are not followed (the server itself
/// refuses documents nested past 100 levels; filters this deep pin nothing
/// a partition key would).
const MAX_FILTER_DEPTH: usize = 32;

/// Calls `f` with each field path the filter pins at its top level or in
/// `$and` branches, and how: the one walk both questions above share.
fn walk_pins<'a>(filter: &'a RawDocument, depth: usize, f: &mut impl FnMut(&'a str, Pin)) {
    walk_pins_of(filter, None, depth, f)
}

/// [`walk_pins`], looking only at `only` when given (other fields' values
/// are not read).
fn walk_pins_of<'a>(
    filter: &'a RawDocument,
    only: Option<&str>,
    depth: usize,
    f: &mut impl FnMut(&'a str, Pin),
) {
    walk_pins_in(filter.as_bytes(), only, depth, f)
}

fn walk_pins_in<'a>(
    filter: &'a [u8],
    only: Option<&str>,
    depth: usize,
    f: &mut impl FnMut(&'a str, Pin),
) {
    if depth > MAX_FILTER_DEPTH {
        return;
    }
    for e in elements(filter).map_while(Result::ok) {
        if e.key == b"$and" {
            if let Value::Array(a) = e.read() {
                for branch in values(a).map_while(Result::ok) {
                    if let Value::Document(branch) = branch {
                        walk_pins_in(branch, only, depth + 1, f);
                    }
                }
            }
        } else if e.key.first() != Some(&b'$') && only.is_none_or(|o| o.as_bytes() == e.key) {
            if let (Some(k), Some(pin)) = (e.key_str(), value_pin(e.read())) {
                f(k, pin)
            }
        }
    }
}

/// Whether the paths `filter` pins by equality follow from what a shape
/// records of it (`shape::hash_of_command`: its keys, its operators' keys
/// and its values' types), so that every filter of one shape pins the
/// same paths: no top-level `$` key (`$and` branches past a shape's
/// sixteen items, `$or`, `$expr`), and no `$in` in a field's operators (a
/// shape does not record an `$in`'s arity: `[7]` pins by equality, `[1, 2]`
/// does not).
/// (A key that is not UTF-8 ends a shape's walk: such a filter is not
/// said to follow from it.)
pub fn equality_paths_follow_from_shape(filter: &RawDocument) -> bool {
    let plain = |key: &[u8]| crate::wire::bson_walk::utf8(key).is_some();
    elements(filter.as_bytes()).all(|e| {
        e.is_ok_and(|e| {
            e.key.first() != Some(&b'$')
                && plain(e.key)
                && (e.element_type != 0x03
                    || elements(e.value)
                        .all(|op| op.is_ok_and(|op| op.key != b"$in" && plain(op.key))))
        })
    })
}

fn value_pin(v: Value<'_>) -> Option<Pin> {
    match v {
        Value::Document(d) => {
            let mut operators = elements(d).map_while(Result::ok).peekable();
            if operators
                .peek()
                .is_none_or(|e| e.key.first() != Some(&b'$'))
            {
                // Equality with a whole embedded document.
                return Some(Pin::Eq);
            }
            let mut pin = None;
            for e in operators {
                let this = match (e.key, e.element_type) {
                    (b"$eq", 0x03 | 0x04) => None,
                    (b"$eq", _) => Some(Pin::Eq),
                    (b"$in", 0x04) => match elements(e.value).take(2).count() {
                        0 => None,
                        1 => Some(Pin::Eq),
                        _ => Some(Pin::In),
                    },
                    (b"$gt" | b"$gte" | b"$lt" | b"$lte", _) => Some(Pin::Range),
                    _ => None,
                };
                pin = match (pin, this) {
                    (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                    (a, b) => a.or(b),
                };
            }
            pin
        }
        // Equality with an array matches elements too: not one partition.
        Value::Array(_) | Value::Other(0x0B) => None,
        _ => Some(Pin::Eq),
    }
}

#[cfg(test)]
mod tests;
