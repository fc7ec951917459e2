//! The partition targeting tests: filters against keys of each kind and
//! shape, lookups into partitioned collections, bulk writes.

use super::*;
use bson::rawdoc;
use Partitioning::*;

fn key(paths: &[&str], kind: KeyKind) -> PartitionKey {
    PartitionKey::new(
        paths.iter().map(|s| s.to_string()).collect(),
        kind,
        KeySource::Config,
    )
}

/// A key of one path, of each kind: what equality, `$in`, ranges and
/// `$or` reach under a ranged key, a hashed one and Cosmos DB's.
#[test]
fn a_single_path_key_of_each_kind() {
    let same = |p| [p, p, p];
    // (filter, [ranged, hashed, cosmos])
    let cases = [
        (rawdoc! {"userId": "u1"}, same(SingleShard)),
        (
            rawdoc! {"userId": {"$eq": "u1"}, "n": {"$gt": 1}},
            same(SingleShard),
        ),
        (
            rawdoc! {"$and": [{"userId": "u1"}, {"n": 1}]},
            same(SingleShard),
        ),
        (rawdoc! {"userId": {"$in": ["u1"]}}, same(SingleShard)),
        (
            rawdoc! {"userId": {"$in": ["u1", "u2"]}},
            [MultiShard, MultiShard, ScatterGather],
        ),
        (
            rawdoc! {"userId": {"$gte": "a", "$lt": "b"}},
            [MultiShard, ScatterGather, ScatterGather],
        ),
        (
            rawdoc! {"$or": [{"userId": "u1"}, {"userId": "u2"}]},
            same(MultiShard),
        ),
        (rawdoc! {"$or": [{"userId": "u1"}]}, same(SingleShard)),
        (
            rawdoc! {"$or": [{"userId": "u1"}, {"title": "x"}]},
            same(ScatterGather),
        ),
        // An $or inside $and is still a conjunct of the whole.
        (
            rawdoc! {"$and": [{"n": 1}, {"$or": [{"userId": "u1"}, {"userId": "u2"}]}]},
            same(MultiShard),
        ),
        (rawdoc! {"title": "x"}, same(ScatterGather)),
        (rawdoc! {}, same(ScatterGather)),
        (rawdoc! {"userId": {"$ne": "a"}}, same(ScatterGather)),
        (rawdoc! {"userId": ["a", "b"]}, same(ScatterGather)),
    ];
    let kinds = [KeyKind::Ranged, KeyKind::Hashed, KeyKind::Cosmos];
    for (filter, expected) in cases {
        for (kind, expected) in kinds.into_iter().zip(expected) {
            let got = classify(&filter, &key(&["userId"], kind));
            assert_eq!(got, expected, "{} {filter:?}", kind.as_str());
        }
    }
}

/// A dotted key path is met by the dotted field, not by a whole embedded
/// document that happens to hold it.
#[test]
fn a_dotted_key_path_is_met_by_the_dotted_field() {
    let dotted = key(&["tenant.id"], KeyKind::Ranged);
    assert_eq!(classify(&rawdoc! {"tenant.id": 4}, &dotted), SingleShard);
    assert_eq!(
        classify(&rawdoc! {"tenant": {"id": 4}}, &dotted),
        ScatterGather,
        "a whole-document match is not a path match"
    );
}

/// A compound ranged key `[tenantId, userId]`: equality or a range on
/// the prefix targets the chunks of that tenant; a hierarchical Cosmos
/// DB key reaches the sub-partitions of a pinned prefix.
#[test]
fn compound_keys_and_their_prefixes() {
    let ranged = key(&["tenantId", "userId"], KeyKind::Ranged);
    let cosmos = key(&["tenantId", "userId"], KeyKind::Cosmos);
    let cases = [
        (
            rawdoc! {"tenantId": 1, "userId": 2},
            SingleShard,
            SingleShard,
        ),
        (rawdoc! {"tenantId": 1}, MultiShard, MultiShard),
        (
            rawdoc! {"tenantId": 1, "status": "open"},
            MultiShard,
            MultiShard,
        ),
        (
            rawdoc! {"tenantId": {"$gte": 1, "$lt": 5}},
            MultiShard,
            ScatterGather,
        ),
        (
            rawdoc! {"tenantId": 1, "userId": {"$in": [2, 3]}},
            MultiShard,
            MultiShard,
        ),
        (rawdoc! {"userId": 2}, ScatterGather, ScatterGather),
    ];
    for (filter, r, c) in cases {
        assert_eq!(classify(&filter, &ranged), r, "ranged {filter:?}");
        assert_eq!(classify(&filter, &cosmos), c, "cosmos {filter:?}");
    }
}

/// What `equality_paths_follow_from_shape` promises (WL203 counts a
/// find's equality set by its shape on that promise): finds of one
/// shape for which it holds pin the same paths by equality. The pairs
/// differ only in values, so each pair has one shape; the filters it
/// must refuse are those whose paths differ within their shape.
#[test]
fn equality_paths_that_follow_from_the_shape_are_the_same_for_every_value() {
    use crate::analysis::shape;
    use crate::wire::{op_msg, Message};
    let paths_and_shape = |filter: &bson::RawDocumentBuf| {
        let body = rawdoc! {"find": "c", "filter": filter.clone(), "$db": "d"};
        let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
        let msg = Message::parse(&frame).unwrap();
        let cmd = Command::parse(&msg).unwrap();
        let mut paths: Vec<String> = Vec::new();
        let filter = cmd.filter().unwrap();
        walk_pins(filter, 0, &mut |p, pin| {
            if pin == Pin::Eq {
                paths.push(p.to_string())
            }
        });
        (
            paths,
            shape::hash_of_command(&cmd),
            equality_paths_follow_from_shape(filter),
        )
    };
    let follow = [
        (rawdoc! {"_id": 1}, rawdoc! {"_id": 2}),
        (rawdoc! {}, rawdoc! {}),
        (
            rawdoc! {"userId": "u1", "n": {"$gt": 1}},
            rawdoc! {"userId": "u2", "n": {"$gt": 9}},
        ),
        (rawdoc! {"a": {"$eq": 1}}, rawdoc! {"a": {"$eq": 2}}),
        (rawdoc! {"a": {"b": 1}}, rawdoc! {"a": {"c": [1]}}),
        (rawdoc! {"tags": ["x"]}, rawdoc! {"tags": ["y", "z"]}),
    ];
    for (one, other) in &follow {
        let (a, b) = (paths_and_shape(one), paths_and_shape(other));
        assert_eq!(a.1, b.1, "one shape: {one:?} {other:?}");
        assert!(a.2 && b.2, "follows from the shape: {one:?}");
        assert_eq!(a.0, b.0, "same paths: {one:?} {other:?}");
    }
    // One shape, other paths: refused.
    let differ = [
        (rawdoc! {"a": {"$in": [1]}}, rawdoc! {"a": {"$in": [1, 2]}}),
        (
            rawdoc! {"$and": [{"a": {"$in": [1]}}]},
            rawdoc! {"$and": [{"a": {"$in": [1, 2]}}]},
        ),
    ];
    for (one, other) in &differ {
        let (a, b) = (paths_and_shape(one), paths_and_shape(other));
        assert_eq!(a.1, b.1, "one shape: {one:?} {other:?}");
        assert_ne!(a.0, b.0, "other paths: {one:?} {other:?}");
        assert!(!a.2 && !b.2, "refused: {one:?} {other:?}");
    }
}

fn classify_body(
    body: bson::RawDocumentBuf,
    ns: &str,
    keys: &PartitionKeys,
) -> Option<Partitioning> {
    use crate::wire::{op_msg, Message};
    let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
    let msg = Message::parse(&frame).unwrap();
    let cmd = Command::parse(&msg).unwrap();
    classify_operation(&cmd, ns, keys)
}

#[test]
fn lookups_into_partitioned_collections() {
    let keys = PartitionKeys::from_config([(
        "blog.users".to_string(),
        vec!["userId".to_string()],
        KeyKind::Ranged,
    )]);
    let pipeline = |lookup: bson::RawDocumentBuf| {
        rawdoc! {"aggregate": "posts", "pipeline": [{"$lookup": lookup}], "cursor": {}, "$db": "blog"}
    };
    let on_key =
        rawdoc! {"from": "users", "localField": "authorId", "foreignField": "userId", "as": "a"};
    let off_key =
        rawdoc! {"from": "users", "localField": "authorName", "foreignField": "name", "as": "a"};
    let unkeyed = rawdoc! {"from": "tags", "localField": "t", "foreignField": "name", "as": "a"};
    assert_eq!(
        classify_body(pipeline(on_key), "blog.posts", &keys),
        Some(MultiShard)
    );
    assert_eq!(
        classify_body(pipeline(off_key), "blog.posts", &keys),
        Some(ScatterGather)
    );
    assert_eq!(classify_body(pipeline(unkeyed), "blog.posts", &keys), None);
}

/// bulkWrite is as wide as its widest statement on the collection;
/// statements on other collections do not count.
#[test]
fn bulk_write_statements_are_classified() {
    let keys = PartitionKeys::from_config([(
        "app.orders".to_string(),
        vec!["customerId".to_string()],
        KeyKind::Hashed,
    )]);
    let body = |ops: bson::RawArrayBuf| {
        rawdoc! {"bulkWrite": 1, "nsInfo": [{"ns": "app.orders"}, {"ns": "app.logs"}], "ops": ops, "$db": "admin"}
    };
    let targeted = bson::rawdoc! {"a": [
        {"insert": 0, "document": {"customerId": 1}},
        {"update": 0, "filter": {"customerId": 1}, "updateMods": {"$set": {"x": 1}}},
        {"delete": 1, "filter": {"level": "debug"}, "multi": true},
    ]};
    let scattered = bson::rawdoc! {"a": [
        {"insert": 0, "document": {"customerId": 1}},
        {"update": 0, "filter": {"status": "open"}, "updateMods": {"$set": {"x": 1}}, "multi": true},
    ]};
    let arr = |d: &bson::RawDocumentBuf| d.get_array("a").unwrap().to_owned();
    assert_eq!(
        classify_body(body(arr(&targeted)), "app.orders", &keys),
        Some(SingleShard)
    );
    assert_eq!(
        classify_body(body(arr(&scattered)), "app.orders", &keys),
        Some(ScatterGather)
    );
}

/// A key value's hash from the raw bytes is the one from decoded values,
/// for every type and form a key takes (a document's value, a filter's
/// equality or `$eq`, a nested path); none where there is no single value.
#[test]
fn key_hashes_from_raw_bytes_match_decoded_ones() {
    let one = key(&["userId"], KeyKind::Cosmos);
    let two = key(&["tenant.id", "day"], KeyKind::Ranged);
    let oid = bson::oid::ObjectId::new();
    let docs = [
        rawdoc! {"_id": 1, "userId": "u1"},
        rawdoc! {"userId": {"$eq": "u1"}},
        rawdoc! {"userId": 42_i64},
        rawdoc! {"userId": oid},
        rawdoc! {"userId": true},
        rawdoc! {"userId": bson::RawBson::Null, "day": bson::Decimal128::from_bytes([1; 16])},
        rawdoc! {"userId": {"name": "embedded"}},
        rawdoc! {"tenant": {"id": 7}, "day": 3.5},
        rawdoc! {"tenant": {"id": {"$eq": 7}}, "day": bson::DateTime::from_millis(5)},
    ];
    for doc in &docs {
        for k in [&one, &two] {
            assert_eq!(
                document_key_hash(doc, k),
                decoded_key_hash(doc, k),
                "{doc:?} {:?}",
                k.paths
            );
        }
    }
    assert_eq!(
        document_key_hash(&docs[0], &one),
        document_key_hash(&docs[1], &one)
    );
    assert!(document_key_hash(&rawdoc! {"userId": {"$in": ["a"]}}, &one).is_none());
    assert!(document_key_hash(&rawdoc! {"tenant": 1, "day": 1}, &two).is_none());
    assert!(document_key_hash(&rawdoc! {"_id": 1}, &one).is_none());
}

/// An inserted document's key hash from its walk (`Doc::keyed`) is the
/// one a walk of its own gives, for every type a key value takes; a key
/// on `_id`, a nested key and a missing value too.
#[test]
fn inserted_key_hashes_from_the_walk_match_their_own_walk() {
    use crate::analysis::namespaces::{Caps, Doc};
    let caps = Caps::default();
    let oid = bson::oid::ObjectId::new();
    let docs = [
        rawdoc! {"_id": 1, "userId": "u1", "tags": ["a"]},
        rawdoc! {"userId": 42_i64, "userId2": 1},
        rawdoc! {"userId": oid},
        rawdoc! {"userId": true},
        rawdoc! {"userId": bson::RawBson::Null, "day": bson::Decimal128::from_bytes([1; 16])},
        rawdoc! {"userId": {"name": "embedded"}},
        rawdoc! {"userId": {"$eq": "u1"}},
        rawdoc! {"tenant": {"id": 7}, "day": 3.5, "userId": "x"},
        rawdoc! {"_id": "only"},
        rawdoc! {"day": 3, "userId": "u", "a": 1, "b": 2, "c": 3, "d": 4},
    ];
    for k in [
        key(&["userId"], KeyKind::Cosmos),
        key(&["_id"], KeyKind::Hashed),
        key(&["tenant.id", "day"], KeyKind::Ranged),
        key(&["day", "userId"], KeyKind::Ranged),
        key(&["a", "b", "c", "d", "userId"], KeyKind::Ranged),
    ] {
        for raw in &docs {
            let doc = Doc::keyed(raw, &caps, k.top_fields());
            assert_eq!(
                inserted_key_hash(&doc, &k),
                document_key_hash(raw, &k),
                "{raw:?} {:?}",
                k.paths
            );
        }
    }
}
