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
use super::hash::{fnv1a, fnv1a_continue};
use crate::wire::bson_walk;
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
    /// Unique indexes on other fields were seen created; the others are
    /// not known.
    Partly,
    /// No unique index of it was seen, nor all of its indexes (a plain
    /// `createIndexes` is not waited for).
    Unknown,
}

/// The unique indexes of the collections the traffic showed.
pub struct Indexes {
    collections: Lru<String, Known>,
    /// Databases dropped (their logical names, hashed): their collections
    /// start again with `_id`'s index alone.
    dropped: Lru<u64, ()>,
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
            dropped: Lru::in_pool(MAX_DROPPED_DATABASES, pool, |_, _| 8 + ENTRY_OVERHEAD),
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
                // The logical database: `app_test_*` when folded.
                let (db, star) = match cmd.folded_prefix() {
                    Some(prefix) => (prefix, "*"),
                    None => (cmd.db, ""),
                };
                let of_db = |ns: &str| {
                    ns.strip_prefix(db)
                        .and_then(|rest| rest.strip_prefix(star))
                        .is_some_and(|rest| rest.starts_with('.'))
                };
                let gone: Vec<String> = self
                    .collections
                    .iter()
                    .filter(|(ns, _)| of_db(ns))
                    .map(|(ns, _)| ns.clone())
                    .collect();
                for ns in gone {
                    self.collections.remove(&ns);
                }
                let hash = fnv1a_continue(fnv1a(db.as_bytes()), star.as_bytes());
                self.dropped.get_or_insert_with(&hash, || ());
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
                let (Some(ns), Some(specs)) = (cmd.namespace(), index_specs(cmd)) else {
                    return;
                };
                // Known in part from now on.
                let known = self.known_mut(&ns);
                for spec in specs {
                    if let Some(fields) = unique_fields(spec) {
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
                    if let Some(fields) = unique_fields(spec.as_bytes()) {
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
        match known {
            Some(k) if k.complete => Cover::None,
            Some(_) => Cover::Partly,
            None if self.database_dropped(namespace) => Cover::None,
            None => Cover::Unknown,
        }
    }

    /// Whether `namespace`'s database was seen dropped.
    fn database_dropped(&self, namespace: &str) -> bool {
        namespace
            .split_once('.')
            .is_some_and(|(db, _)| self.dropped.get(&fnv1a(db.as_bytes())).is_some())
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
/// unique: true}`) when it is unique and has at most [`MAX_FIELDS`]. A
/// partial unique index counts: it refuses a second document with the key
/// among those it indexes. Read on the raw bytes.
fn unique_fields(spec: &[u8]) -> Option<Vec<u64>> {
    if !is_unique(spec) {
        return None;
    }
    let key = bson_walk::field(spec, b"key").filter(|e| e.element_type == 0x03)?;
    let key = key.value;
    let mut fields = Vec::new();
    for e in bson_walk::elements(key) {
        if fields.len() == MAX_FIELDS {
            return None;
        }
        fields.push(fnv1a(e.ok()?.key));
    }
    (!fields.is_empty()).then_some(fields)
}

/// Whether an index spec says `unique` (true, or a non-zero number).
fn is_unique(spec: &[u8]) -> bool {
    bson_walk::field(spec, b"unique").is_some_and(|e| match e.element_type {
        0x08 => e.as_bool() == Some(true),
        // A number: any non-zero bytes (int32, int64, double).
        0x01 | 0x10 | 0x12 => e.value.iter().any(|b| *b != 0),
        _ => false,
    })
}

/// The commands whose accepted replies say something of indexes.
pub fn is_about_indexes(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::CreateIndexes | Kind::ListIndexes | Kind::Drop | Kind::DropDatabase
    )
}

/// Whether the server's answer to `cmd` can teach anything of indexes: a
/// `listIndexes`, a drop, or a `createIndexes` of at least one unique
/// index (most create none: their replies are not waited for, since a
/// test suite may send thousands).
pub fn teaches(cmd: &Command<'_>) -> bool {
    match cmd.kind {
        Kind::ListIndexes | Kind::Drop | Kind::DropDatabase => true,
        Kind::CreateIndexes => index_specs(cmd).is_some_and(|mut specs| specs.any(is_unique)),
        _ => false,
    }
}

/// A `createIndexes`' index specs, as raw documents.
fn index_specs<'a>(cmd: &Command<'a>) -> Option<impl Iterator<Item = &'a [u8]>> {
    let Some(bson_walk::Value::Array(specs)) = cmd.value("indexes") else {
        return None;
    };
    Some(
        bson_walk::elements(specs)
            .map_while(Result::ok)
            .filter(|spec| spec.element_type == 0x03)
            .map(|spec| spec.value),
    )
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
        learn_folded(ix, request, reply, &crate::analysis::databases::Fold::Off);
    }

    /// [`learn`], its database folded by `fold`.
    fn learn_folded(
        ix: &mut Indexes,
        request: bson::RawDocumentBuf,
        reply: bson::RawDocumentBuf,
        fold: &crate::analysis::databases::Fold,
    ) {
        let request = op_msg::encode(1, 0, 0, request.as_bytes(), &[]);
        let reply = op_msg::encode(2, 1, 0, reply.as_bytes(), &[]);
        let (request, reply) = (
            Message::parse(&request).unwrap(),
            Message::parse(&reply).unwrap(),
        );
        let mut cmd = Command::parse(&request).unwrap();
        cmd.fold_db(fold);
        ix.learn(&cmd, &Reply::parse(&reply).unwrap());
    }

    /// A test's database dropped, folded with the others of its suite
    /// (`app_test_*`): what was known of the suite's collections is
    /// forgotten, and they start again with `_id`'s index alone; other
    /// databases are untouched.
    #[test]
    fn a_folded_database_dropped_is_every_tests_database() {
        use crate::analysis::databases::Fold;
        let mut ix = Indexes::default();
        let fold = Fold::Auto;
        let ok = || rawdoc! {"ok": 1.0};
        let unique = |db: &str| {
            rawdoc! {"createIndexes": "members", "indexes": [{"key": {"email": 1}, "name": "e", "unique": true}], "$db": db}
        };
        learn_folded(&mut ix, unique("app_test_1a2b3c4d"), ok(), &fold);
        learn_folded(&mut ix, unique("app"), ok(), &fold);
        let ns = "app_test_*.members";
        assert_eq!(ix.covers(ns, &["email"]), Cover::Unique);
        learn_folded(
            &mut ix,
            rawdoc! {"dropDatabase": 1, "$db": "app_test_9f8e7d6c"},
            ok(),
            &fold,
        );
        assert_eq!(ix.covers(ns, &["email"]), Cover::None);
        assert_eq!(ix.covers("app_test_*.loans", &["memberId"]), Cover::None);
        assert_eq!(ix.covers("app.members", &["email"]), Cover::Unique);
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
        assert_eq!(ix.covers("app.follows", &["followee"]), Cover::Partly);
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

    /// Only commands that can change what is known are waited for: a
    /// `createIndexes` of plain indexes is not.
    #[test]
    fn replies_worth_waiting_for() {
        let teaches_it = |body: bson::RawDocumentBuf| {
            let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
            let msg = Message::parse(&frame).unwrap();
            teaches(&Command::parse(&msg).unwrap())
        };
        let create = |unique: bson::RawBson| {
            rawdoc! {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a"}, {"key": {"b": 1}, "name": "b", "unique": unique}], "$db": "d"}
        };
        assert!(teaches_it(create(bson::RawBson::Boolean(true))));
        assert!(teaches_it(create(bson::RawBson::Int32(1))));
        assert!(!teaches_it(create(bson::RawBson::Boolean(false))));
        assert!(!teaches_it(create(bson::RawBson::Double(0.0))));
        assert!(teaches_it(rawdoc! {"drop": "c", "$db": "d"}));
        assert!(teaches_it(rawdoc! {"dropDatabase": 1, "$db": "d"}));
        assert!(teaches_it(rawdoc! {"listIndexes": "c", "$db": "d"}));
        assert!(!teaches_it(rawdoc! {"find": "c", "$db": "d"}));
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
