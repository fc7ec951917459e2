//! The command model against what real drivers sent: requests and replies
//! captured from PyMongo and the Node.js driver (`fixtures/wire/`), read
//! through both halves of the model and the shape built from them. Unit
//! tests beside each part check its edges; these check that the parts
//! agree on real traffic.

use super::test_support::with_command;
use super::{Command, Kind, Reply};
use crate::analysis::shape;
use crate::wire::bson_walk::values;
use crate::wire::Message;

/// A captured request's shape, checking that its id computed without
/// the text is the same.
fn shape_text(c: &Command<'_>) -> String {
    let s = shape::of_command(c);
    assert_eq!(shape::hash_of_command(c), s.hash);
    s.text.to_string()
}

fn with_reply<T>(frame: &[u8], f: impl FnOnce(&Reply<'_>) -> T) -> T {
    let msg = Message::parse(frame).unwrap();
    f(&Reply::parse(&msg).unwrap())
}

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!("../../../fixtures/wire/", $name, ".bin"))
    };
}

#[test]
fn pymongo_find_with_projection_sort_limit_and_comment() {
    with_command(fixture!("pymongo-find"), |c| {
        assert_eq!(c.kind, Kind::Find);
        assert_eq!(c.namespace().as_deref(), Some("fixtures.posts"));
        assert_eq!(c.comment(), Some("Q3"));
        assert_eq!(c.limit(), Some(20));
        assert!(c.lsid().is_some());
        assert_eq!(
            shape_text(c),
            "find fixtures.posts {userId: ?string, n: {$gt: ?int}} project {title: 1, comments: {$slice: 10}} sort {createdAt: -1} limit"
        );
    });
    with_reply(fixture!("pymongo-find.reply"), |r| {
        assert!(!r.ok());
        assert_eq!(r.code(), Some(238));
    });
}

#[test]
fn pymongo_insert_many_uses_a_document_sequence() {
    with_command(fixture!("pymongo-insert"), |c| {
        assert_eq!(c.kind, Kind::Insert);
        assert!(
            c.get_array("documents").is_none(),
            "documents travel in a kind-1 section"
        );
        assert_eq!(c.documents().len(), 30);
        assert_eq!(shape_text(c), "insert fixtures.posts");
    });
    with_reply(fixture!("pymongo-insert.reply"), |r| {
        assert_eq!((r.ok(), r.n()), (true, Some(30)))
    });
}

#[test]
fn pymongo_update_with_push_each_slice() {
    with_command(fixture!("pymongo-update"), |c| {
        let u = c.updates();
        assert_eq!(u.len(), 1);
        assert!(u[0].upsert && !u[0].multi && u[0].is_operator_update());
        assert_eq!(
            shape_text(c),
            "update fixtures.posts {_id: ?int} {$push: {comments: {$each: [?object], $slice: -100}}, $inc: {commentCount: ?int}} upsert"
        );
    });
}

#[test]
fn pymongo_delete_find_and_modify_distinct_and_indexes() {
    with_command(fixture!("pymongo-delete"), |c| {
        let d = c.deletes();
        assert_eq!(d.len(), 1);
        assert!(d[0].1, "delete_many has limit 0");
        assert_eq!(
            shape_text(c),
            "delete fixtures.posts {userId: ?string} multi"
        );
    });
    with_command(fixture!("pymongo-findAndModify"), |c| {
        assert_eq!(c.kind, Kind::FindAndModify);
        assert_eq!(c.updates().len(), 1);
        assert_eq!(
            shape_text(c),
            "findAndModify fixtures.posts {_id: ?int} sort {_id: 1} update {$set: {title: ?string}}"
        );
    });
    with_reply(fixture!("pymongo-findAndModify.reply"), |r| {
        assert_eq!(r.value().unwrap().get_i32("_id").unwrap(), 3);
    });
    with_command(fixture!("pymongo-distinct"), |c| {
        assert_eq!(
            shape_text(c),
            "distinct fixtures.posts key userId {title: {$exists: true}}"
        );
    });
    with_command(fixture!("pymongo-createIndexes"), |c| {
        assert_eq!(c.kind, Kind::CreateIndexes);
        assert!(!c.kind.is_data());
    });
}

#[test]
fn pymongo_aggregate_with_lookup() {
    with_command(fixture!("pymongo-aggregate"), |c| {
        assert_eq!(c.kind, Kind::Aggregate);
        assert_eq!(c.comment(), Some("Q2"));
        assert_eq!(values(c.pipeline().unwrap()).count(), 2);
        assert!(shape_text(c).contains(
            r#"{$lookup: {from: "users", localField: "userId", foreignField: "_id", as: "author"}}"#
        ));
    });
}

#[test]
fn pymongo_cursor_get_more_and_kill_cursors() {
    let id = with_command(fixture!("pymongo-getMore"), |c| {
        assert_eq!(c.kind, Kind::GetMore);
        assert_eq!(c.namespace().as_deref(), Some("fixtures.posts"));
        c.cursor_id().unwrap()
    });
    assert_ne!(id, 0);
    with_reply(fixture!("pymongo-getMore.reply"), |r| {
        let batch = r.cursor().unwrap();
        assert_eq!(batch.documents.len(), 5);
    });
    with_command(fixture!("pymongo-killCursors"), |c| {
        assert_eq!(c.killed_cursors().len(), 1);
    });
}

#[test]
fn node_driver_messages() {
    with_command(fixture!("node-insert"), |c| {
        assert_eq!(c.documents().len(), 2)
    });
    with_command(fixture!("node-find"), |c| {
        assert_eq!(
            shape_text(c),
            "find fixtures.nodeposts {a: {$in: [?int]}} project {a: 1}"
        );
    });
    with_reply(fixture!("node-find.reply"), |r| {
        assert_eq!(r.cursor().unwrap().documents.len(), 2)
    });
    with_command(fixture!("node-update"), |c| {
        let u = c.updates();
        assert!(u[0].multi);
        assert_eq!(
            shape_text(c),
            "update fixtures.nodeposts {a: {$gte: ?int}} {$addToSet: {tags: ?string}} multi"
        );
    });
}
