//! Partition (shard) keys and how an operation's filter meets them.
//!
//! A collection's key comes from, in order of precedence: the config file;
//! commands seen in traffic (`shardCollection`, Cosmos DB's `customAction:
//! "CreateCollection" | "UpdateCollection"` with `shardKey`). A filter is
//! *single-partition* when it pins every key path by equality (`{k: v}`,
//! `{k: {$eq: v}}`, inside `$and` too), *targeted* when every path is pinned
//! but some by a short list (`$in`, or an `$or` whose every branch pins the
//! key), and *fan-out* otherwise: the query has to ask every partition.

use super::command::{Command, Kind};
use bson::{RawBsonRef, RawDocument};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partitioning {
    Single,
    Targeted,
    FanOut,
}

impl Partitioning {
    pub fn as_str(self) -> &'static str {
        match self {
            Partitioning::Single => "single",
            Partitioning::Targeted => "targeted",
            Partitioning::FanOut => "fan-out",
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
    pub source: KeySource,
}

/// Keys by namespace.
#[derive(Clone, Debug, Default)]
pub struct PartitionKeys {
    keys: BTreeMap<String, PartitionKey>,
}

impl PartitionKeys {
    pub fn from_config(keys: impl IntoIterator<Item = (String, Vec<String>)>) -> PartitionKeys {
        PartitionKeys {
            keys: keys
                .into_iter()
                .filter(|(_, paths)| !paths.is_empty())
                .map(|(ns, paths)| {
                    (
                        ns,
                        PartitionKey {
                            paths,
                            source: KeySource::Config,
                        },
                    )
                })
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
    pub fn discovered(&mut self, namespace: String, paths: Vec<String>) {
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
            PartitionKey {
                paths,
                source: KeySource::ConfigCollections,
            },
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
        let source = match cmd.kind {
            Kind::ShardCollection => KeySource::ShardCollection,
            _ => KeySource::CosmosCustomAction,
        };
        let key = PartitionKey { paths, source };
        self.keys.insert(namespace.clone(), key.clone());
        Some((namespace, key))
    }
}

/// How a data operation meets the keys of the collections it reads: its
/// own (an insert goes to its document's partition: single) and, for an
/// aggregate, those of collections it joins with `$lookup` — one looked-up
/// key per input document is *targeted*, a join on any other field fans
/// out. `None` when no collection involved has a known key.
pub fn classify_operation(
    cmd: &Command<'_>,
    namespace: &str,
    keys: &PartitionKeys,
) -> Option<Partitioning> {
    let own = keys
        .get(namespace)
        .map(|key| classify_command(cmd, &key.paths).unwrap_or(Partitioning::Single));
    let db = namespace.split_once('.').map_or(namespace, |(db, _)| db);
    let joins = cmd
        .pipeline()
        .map(|p| lookup_partitioning(p, db, keys))
        .unwrap_or_default();
    own.into_iter().chain(joins).max()
}

fn lookup_partitioning(
    pipeline: &bson::RawArray,
    db: &str,
    keys: &PartitionKeys,
) -> Vec<Partitioning> {
    let mut out = Vec::new();
    for stage in pipeline
        .into_iter()
        .flatten()
        .filter_map(RawBsonRef::as_document)
    {
        let Ok(lookup) = stage.get_document("$lookup") else {
            continue;
        };
        let Ok(from) = lookup.get_str("from") else {
            continue;
        };
        let Some(key) = keys.get(&format!("{db}.{from}")) else {
            continue;
        };
        let on_key = matches!(lookup.get_str("foreignField"), Ok(f) if key.paths.len() == 1 && key.paths[0] == f);
        out.push(if on_key {
            Partitioning::Targeted
        } else {
            Partitioning::FanOut
        });
    }
    out
}

/// How a data operation meets its collection's key; `None` for operations
/// that are not reads, updates or deletes by filter (inserts go to their
/// document's partition).
pub fn classify_command(cmd: &Command<'_>, key: &[String]) -> Option<Partitioning> {
    match cmd.kind {
        Kind::Find | Kind::Count | Kind::Distinct | Kind::FindAndModify => {
            Some(match cmd.filter() {
                Some(f) => classify(f, key),
                None => Partitioning::FanOut,
            })
        }
        Kind::Aggregate => {
            let first = cmd.pipeline()?.into_iter().next();
            Some(match first {
                Some(Ok(RawBsonRef::Document(stage))) => match stage.get_document("$match") {
                    Ok(f) => classify(f, key),
                    Err(_) => Partitioning::FanOut,
                },
                _ => Partitioning::FanOut,
            })
        }
        Kind::Update => {
            let updates = cmd.updates();
            worst(
                updates
                    .iter()
                    .map(|u| u.filter.map_or(Partitioning::FanOut, |f| classify(f, key))),
            )
        }
        Kind::Delete => worst(cmd.deletes().iter().map(|(q, _)| classify(q, key))),
        _ => None,
    }
}

fn worst(it: impl Iterator<Item = Partitioning>) -> Option<Partitioning> {
    it.max()
}

/// How one path is constrained.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pin {
    Eq,
    In,
}

/// Classifies a filter against a key (a list of paths).
pub fn classify(filter: &RawDocument, key: &[String]) -> Partitioning {
    classify_at(filter, key, 0)
}

fn classify_at(filter: &RawDocument, key: &[String], depth: usize) -> Partitioning {
    if depth > MAX_FILTER_DEPTH {
        return Partitioning::FanOut;
    }
    let pins: Vec<Option<Pin>> = key.iter().map(|path| pinned(filter, path)).collect();
    if pins.iter().all(|p| *p == Some(Pin::Eq)) {
        return Partitioning::Single;
    }
    if pins.iter().all(Option::is_some) {
        return Partitioning::Targeted;
    }
    // A top-level $or whose every branch pins the key reaches a few
    // partitions, one per branch.
    if let Ok(branches) = filter.get_array("$or") {
        let mut all = true;
        let mut any = false;
        for branch in branches.into_iter().flatten() {
            any = true;
            match branch {
                RawBsonRef::Document(b)
                    if classify_at(b, key, depth + 1) != Partitioning::FanOut => {}
                _ => all = false,
            }
        }
        if any && all {
            return Partitioning::Targeted;
        }
    }
    Partitioning::FanOut
}

/// The paths a filter pins by equality (top level and `$and` branches):
/// the candidate partition keys this operation would be single on.
pub fn equality_paths(filter: &RawDocument) -> Vec<String> {
    let mut out = Vec::new();
    walk_pins(filter, 0, &mut |path, pin| {
        if pin == Pin::Eq {
            out.push(path.to_string())
        }
    });
    out.sort();
    out.dedup();
    out
}

/// The filters of a read, update or delete (an aggregate's first `$match`).
pub fn filters<'a>(cmd: &Command<'a>) -> Vec<&'a RawDocument> {
    match cmd.kind {
        Kind::Find | Kind::Count | Kind::Distinct | Kind::FindAndModify => {
            cmd.filter().into_iter().collect()
        }
        Kind::Aggregate => cmd
            .pipeline()
            .and_then(|p| p.into_iter().next())
            .and_then(|s| s.ok())
            .and_then(RawBsonRef::as_document)
            .and_then(|s| s.get_document("$match").ok())
            .into_iter()
            .collect(),
        Kind::Update => cmd.updates().into_iter().filter_map(|u| u.filter).collect(),
        Kind::Delete => cmd.deletes().into_iter().map(|(q, _)| q).collect(),
        _ => Vec::new(),
    }
}

/// How `path` is pinned by `filter` (directly or in an `$and` branch).
fn pinned(filter: &RawDocument, path: &str) -> Option<Pin> {
    let mut best: Option<Pin> = None;
    walk_pins(filter, 0, &mut |p, pin| {
        if p == path {
            best = Some(best.map_or(pin, |b| b.min(pin)));
        }
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
    if depth > MAX_FILTER_DEPTH {
        return;
    }
    for (k, v) in filter.iter().flatten() {
        match (k.as_str(), v) {
            ("$and", RawBsonRef::Array(a)) => {
                for branch in a.into_iter().flatten().filter_map(RawBsonRef::as_document) {
                    walk_pins(branch, depth + 1, f);
                }
            }
            (k, v) if !k.starts_with('$') => {
                if let Some(pin) = value_pin(v) {
                    f(k, pin)
                }
            }
            _ => {}
        }
    }
}

fn value_pin(v: RawBsonRef<'_>) -> Option<Pin> {
    match v {
        RawBsonRef::Document(d) => {
            let first = d.iter().next().and_then(|e| e.ok());
            match first {
                Some((op, _)) if op.as_str().starts_with('$') => {
                    let mut pin = None;
                    for (op, arg) in d.iter().flatten() {
                        let this = match (op.as_str(), arg) {
                            ("$eq", RawBsonRef::Document(_) | RawBsonRef::Array(_)) => None,
                            ("$eq", _) => Some(Pin::Eq),
                            ("$in", RawBsonRef::Array(a)) => match a.into_iter().count() {
                                0 => None,
                                1 => Some(Pin::Eq),
                                _ => Some(Pin::In),
                            },
                            _ => None,
                        };
                        pin = match (pin, this) {
                            (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                            (a, b) => a.or(b),
                        };
                    }
                    pin
                }
                // Equality with a whole embedded document.
                _ => Some(Pin::Eq),
            }
        }
        // Equality with an array matches elements too: not one partition.
        RawBsonRef::Array(_) | RawBsonRef::RegularExpression(_) => None,
        _ => Some(Pin::Eq),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn key(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn equality_in_and_or_and_dotted_paths() {
        let k = key(&["userId"]);
        use Partitioning::*;
        let cases = [
            (rawdoc! {"userId": "u1"}, Single),
            (rawdoc! {"userId": {"$eq": "u1"}, "n": {"$gt": 1}}, Single),
            (rawdoc! {"$and": [{"userId": "u1"}, {"n": 1}]}, Single),
            (rawdoc! {"userId": {"$in": ["u1", "u2"]}}, Targeted),
            (rawdoc! {"userId": {"$in": ["u1"]}}, Single),
            (
                rawdoc! {"$or": [{"userId": "u1"}, {"userId": "u2"}]},
                Targeted,
            ),
            (rawdoc! {"$or": [{"userId": "u1"}, {"title": "x"}]}, FanOut),
            (rawdoc! {"title": "x"}, FanOut),
            (rawdoc! {}, FanOut),
            (rawdoc! {"userId": {"$gt": "a"}}, FanOut),
            (rawdoc! {"userId": {"$ne": "a"}}, FanOut),
            (rawdoc! {"userId": ["a", "b"]}, FanOut),
        ];
        for (filter, want) in cases {
            assert_eq!(classify(&filter, &k), want, "{filter:?}");
        }
        let dotted = key(&["tenant.id"]);
        assert_eq!(classify(&rawdoc! {"tenant.id": 4}, &dotted), Single);
        assert_eq!(
            classify(&rawdoc! {"tenant": {"id": 4}}, &dotted),
            FanOut,
            "a whole-document match is not a path match"
        );
    }

    #[test]
    fn lookups_into_partitioned_collections() {
        use crate::wire::{op_msg, Message};
        let keys =
            PartitionKeys::from_config([("blog.users".to_string(), vec!["userId".to_string()])]);
        let classify_pipeline = |lookup: bson::RawDocumentBuf| {
            let body = rawdoc! {"aggregate": "posts", "pipeline": [{"$lookup": lookup}], "cursor": {}, "$db": "blog"};
            let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
            let msg = Message::parse(&frame).unwrap();
            let cmd = Command::parse(&msg).unwrap();
            classify_operation(&cmd, "blog.posts", &keys)
        };
        let on_key = rawdoc! {"from": "users", "localField": "authorId", "foreignField": "userId", "as": "a"};
        let off_key = rawdoc! {"from": "users", "localField": "authorName", "foreignField": "name", "as": "a"};
        let unkeyed =
            rawdoc! {"from": "tags", "localField": "t", "foreignField": "name", "as": "a"};
        assert_eq!(classify_pipeline(on_key), Some(Partitioning::Targeted));
        assert_eq!(classify_pipeline(off_key), Some(Partitioning::FanOut));
        assert_eq!(classify_pipeline(unkeyed), None);
    }

    #[test]
    fn compound_and_hierarchical_keys_need_every_path() {
        let k = key(&["tenantId", "userId"]);
        assert_eq!(
            classify(&rawdoc! {"tenantId": 1, "userId": 2}, &k),
            Partitioning::Single
        );
        assert_eq!(classify(&rawdoc! {"tenantId": 1}, &k), Partitioning::FanOut);
        assert_eq!(
            classify(&rawdoc! {"tenantId": 1, "userId": {"$in": [2, 3]}}, &k),
            Partitioning::Targeted
        );
    }
}
