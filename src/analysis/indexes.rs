//! Which unique indexes each collection has, as far as the traffic shows.
//! Learnt only from what the server accepted: the `createIndexes` it
//! answered `ok`, the `listIndexes` replies it sent, and drops (a collection
//! dropped, or its database, has only `_id`'s index until more are made).
//! What was not seen is not guessed: a collection whose indexes were neither
//! listed nor seen from its start is unknown, and the unique indexes seen
//! created on it are all that is known of it.
//!
//! Index fields are kept as hashes of their names, up to [`MAX_FIELDS`] an
//! index (an index of more fields cannot be inside a natural key, which
//! holds at most that many); at most [`MAX_UNIQUE`] unique indexes a
//! collection and [`MAX_COLLECTIONS`] collections, charged to the
//! namespaces' pool.

use super::budget::{Lru, Pool, ENTRY_OVERHEAD};
use super::command::{Command, Kind, Reply};
use super::hash::fnv1a;
use bson::{RawBsonRef, RawDocument};
use std::sync::Arc;

/// Fields of a unique index kept, at most.
pub const MAX_FIELDS: usize = 8;
/// Unique indexes kept per collection, at most.
pub const MAX_UNIQUE: usize = 16;
/// Collections kept, at most (least recently learnt forgotten first).
pub const MAX_COLLECTIONS: usize = 4096;
/// Databases remembered as dropped, at most.
const MAX_DROPPED_DATABASES: usize = 1024;

/// What is known of one collection's indexes.
#[derive(Clone, Debug, Default)]
struct Known {
    /// Every index of it is known (it was listed, or seen from its drop).
    complete: bool,
    /// Its unique indexes' fields (their names' hashes); `_id`'s, listed
    /// without `unique`, is not among them (no natural key holds `_id`).
    unique: Vec<Vec<u64>>,
}

/// How a collection's unique indexes meet a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// A unique index on some of the key's fields: two documents cannot
    /// share the key.
    Unique,
    /// Every index is known, and none is unique on the key's fields.
    None,
    /// Not every index is known, and none known covers the key.
    Unknown,
}

/// The unique indexes of the collections the traffic showed.
pub struct Indexes {
    collections: Lru<String, Known>,
    /// Databases dropped (as their logical names): their collections start
    /// again with `_id`'s index alone.
    dropped: Lru<String, ()>,
}

impl Default for Indexes {
    fn default() -> Self {
        Indexes::new(Pool::unbounded("indexes"))
    }
}

impl Indexes {
    pub fn new(pool: Arc<Pool>) -> Indexes {
        Indexes {
            collections: Lru::in_pool(MAX_COLLECTIONS, pool.clone(), |ns, _| {
                // Charged whole up front: a collection's unique indexes
                // grow after it is inserted.
                ns.len()
                    + std::mem::size_of::<Known>()
                    + MAX_UNIQUE * (24 + MAX_FIELDS * 8)
                    + ENTRY_OVERHEAD
            }),
            dropped: Lru::in_pool(MAX_DROPPED_DATABASES, pool, |db, _| {
                db.len() + ENTRY_OVERHEAD
            }),
        }
    }

    /// A command the server answered: what it says of indexes, if it is
    /// `createIndexes`, `listIndexes`, `drop` or `dropDatabase` and the
    /// server accepted it.
    pub fn learn(&mut self, cmd: &Command<'_>, reply: &Reply<'_>) {
        if !reply.ok() {
            return;
        }
        match cmd.kind {
            Kind::DropDatabase => {
                let db = match cmd.folded_prefix() {
                    Some(prefix) => format!("{prefix}*"),
                    None => cmd.db.to_string(),
                };
                let prefix = format!("{db}.");
                let gone: Vec<String> = self
                    .collections
                    .iter()
                    .filter(|(ns, _)| ns.starts_with(&prefix))
                    .map(|(ns, _)| ns.clone())
                    .collect();
                for ns in gone {
                    self.collections.remove(&ns);
                }
                self.dropped.get_or_insert_with(&db, || ());
            }
            Kind::Drop => {
                if let Some(ns) = cmd.namespace() {
                    *self.known_mut(&ns) = Known {
                        complete: true,
                        unique: Vec::new(),
                    };
                }
            }
            Kind::CreateIndexes => {
                let (Some(ns), Some(specs)) = (cmd.namespace(), cmd.get_array("indexes")) else {
                    return;
                };
                let known = self.known_mut(&ns);
                for spec in specs.into_iter().flatten() {
                    if let Some(fields) = spec.as_document().and_then(unique_fields) {
                        add_unique(known, fields);
                    }
                }
            }
            Kind::ListIndexes => {
                let (Some(ns), Some(batch)) = (cmd.namespace(), reply.cursor()) else {
                    return;
                };
                let known = self.known_mut(&ns);
                // The first batch holds them all unless the cursor goes on.
                if batch.id == 0 {
                    known.complete = true;
                    known.unique.clear();
                }
                for spec in &batch.documents {
                    if let Some(fields) = unique_fields(spec) {
                        add_unique(known, fields);
                    }
                }
            }
            _ => {}
        }
    }

    /// How `namespace`'s unique indexes meet a key on `fields`: a unique
    /// index whose fields are all among them covers it.
    pub fn covers(&self, namespace: &str, fields: &[&str]) -> Cover {
        let hashes: Vec<u64> = fields.iter().map(|f| fnv1a(f.as_bytes())).collect();
        let known = self.collections.get(namespace);
        if known.is_some_and(|k| {
            k.unique
                .iter()
                .any(|index| index.iter().all(|f| hashes.contains(f)))
        }) {
            return Cover::Unique;
        }
        let complete = match known {
            Some(k) => k.complete,
            None => self.database_dropped(namespace),
        };
        if complete {
            Cover::None
        } else {
            Cover::Unknown
        }
    }

    /// Whether `namespace`'s database was seen dropped.
    fn database_dropped(&self, namespace: &str) -> bool {
        namespace
            .split_once('.')
            .is_some_and(|(db, _)| self.dropped.get(db).is_some())
    }

    /// `namespace`'s entry, made (complete when its database was seen
    /// dropped) if new.
    fn known_mut(&mut self, namespace: &str) -> &mut Known {
        let complete = self.database_dropped(namespace);
        self.collections.get_or_insert_with(namespace, || Known {
            complete,
            unique: Vec::new(),
        })
    }
}

/// The fields (hashed) of an index spec (`{key: {a: 1, b: -1}, name,
/// unique: true}`) when it is unique and has at most
/// [`MAX_FIELDS`]. A partial unique index counts: it refuses a second
/// document with the key among those it indexes.
fn unique_fields(spec: &RawDocument) -> Option<Vec<u64>> {
    let unique = match spec.get("unique").ok().flatten()? {
        RawBsonRef::Boolean(b) => b,
        RawBsonRef::Int32(n) => n != 0,
        RawBsonRef::Int64(n) => n != 0,
        RawBsonRef::Double(n) => n != 0.0,
        _ => false,
    };
    if !unique {
        return None;
    }
    let key = spec.get_document("key").ok()?;
    let mut fields = Vec::new();
    for (name, _) in key.iter().flatten() {
        if fields.len() == MAX_FIELDS {
            return None;
        }
        fields.push(fnv1a(name.as_str().as_bytes()));
    }
    (!fields.is_empty()).then_some(fields)
}

fn add_unique(known: &mut Known, fields: Vec<u64>) {
    if known.unique.len() < MAX_UNIQUE && !known.unique.contains(&fields) {
        known.unique.push(fields);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{op_msg, Message};
    use bson::rawdoc;

    /// `ix` learns from `request` answered by `reply`.
    fn learn(ix: &mut Indexes, request: bson::RawDocumentBuf, reply: bson::RawDocumentBuf) {
        let request = op_msg::encode(1, 0, 0, request.as_bytes(), &[]);
        let reply = op_msg::encode(2, 1, 0, reply.as_bytes(), &[]);
        let (request, reply) = (
            Message::parse(&request).unwrap(),
            Message::parse(&reply).unwrap(),
        );
        ix.learn(
            &Command::parse(&request).unwrap(),
            &Reply::parse(&reply).unwrap(),
        );
    }

    /// A unique index created covers a key holding its fields; one not
    /// unique, one on other fields, or a refused `createIndexes` does not.
    /// Without a drop or a list the rest of the collection's indexes stay
    /// unknown; after its database's drop they are known.
    #[test]
    fn created_unique_indexes_cover_keys_holding_their_fields() {
        let mut ix = Indexes::default();
        let ok = || rawdoc! {"ok": 1.0};
        learn(
            &mut ix,
            rawdoc! {"createIndexes": "follows", "indexes": [
                {"key": {"follower": 1, "followee": 1}, "name": "f", "unique": true},
                {"key": {"followee": 1, "createdAt": -1}, "name": "g"},
            ], "$db": "app"},
            ok(),
        );
        assert_eq!(
            ix.covers("app.follows", &["follower", "followee"]),
            Cover::Unique
        );
        assert_eq!(
            ix.covers("app.follows", &["followee", "follower", "kind"]),
            Cover::Unique
        );
        assert_eq!(ix.covers("app.follows", &["followee"]), Cover::Unknown);
        assert_eq!(ix.covers("app.other", &["a"]), Cover::Unknown);
        learn(
            &mut ix,
            rawdoc! {"createIndexes": "subs", "indexes": [
                {"key": {"threadId": 1, "userId": 1}, "name": "t", "unique": true},
            ], "$db": "app"},
            rawdoc! {"ok": 0.0, "code": 11000},
        );
        assert_eq!(
            ix.covers("app.subs", &["threadId", "userId"]),
            Cover::Unknown
        );
        learn(&mut ix, rawdoc! {"dropDatabase": 1, "$db": "app"}, ok());
        assert_eq!(
            ix.covers("app.follows", &["follower", "followee"]),
            Cover::None
        );
        learn(
            &mut ix,
            rawdoc! {"createIndexes": "subs", "indexes": [
                {"key": {"threadId": 1, "userId": 1}, "name": "t"},
            ], "$db": "app"},
            ok(),
        );
        assert_eq!(ix.covers("app.subs", &["threadId", "userId"]), Cover::None);
        assert_eq!(
            ix.covers("other.subs", &["threadId", "userId"]),
            Cover::Unknown
        );
    }

    /// A collection dropped has `_id`'s index alone; a listing with no more
    /// batches is every index (`_id`'s is not a natural key's).
    #[test]
    fn drops_and_listings_make_every_index_known() {
        let mut ix = Indexes::default();
        let ok = || rawdoc! {"ok": 1.0};
        learn(&mut ix, rawdoc! {"drop": "users", "$db": "app"}, ok());
        assert_eq!(ix.covers("app.users", &["email"]), Cover::None);
        learn(
            &mut ix,
            rawdoc! {"listIndexes": "users", "$db": "app"},
            rawdoc! {"cursor": {"id": 0_i64, "ns": "app.users", "firstBatch": [
                {"v": 2, "key": {"_id": 1}, "name": "_id_"},
                {"v": 2, "key": {"email": 1}, "name": "email_1", "unique": true},
            ]}, "ok": 1.0},
        );
        assert_eq!(ix.covers("app.users", &["email"]), Cover::Unique);
        assert_eq!(ix.covers("app.users", &["name"]), Cover::None);
        learn(
            &mut ix,
            rawdoc! {"listIndexes": "users", "$db": "app"},
            rawdoc! {"cursor": {"id": 0_i64, "ns": "app.users", "firstBatch": [
                {"v": 2, "key": {"_id": 1}, "name": "_id_"},
            ]}, "ok": 1.0},
        );
        assert_eq!(ix.covers("app.users", &["email"]), Cover::None);
    }
}
