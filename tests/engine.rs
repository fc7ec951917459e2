//! The analysis engine on hand-made messages: pairing (exhaust streams),
//! partition keys learnt from accepted commands, invocations of named
//! patterns.
use bson::rawdoc;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wirelint::analysis::engine::Engine;
use wirelint::analysis::knowledge::Knowledge;
use wirelint::analysis::namespaces::Caps;
use wirelint::analysis::rule::RuleSettings;
use wirelint::stats::Direction;
use wirelint::wire::op_msg::{encode, EXHAUST_ALLOWED, MORE_TO_COME};

fn knowledge() -> Arc<Mutex<Knowledge>> {
    Arc::new(Mutex::new(Knowledge::new(
        wirelint::rules::all(),
        RuleSettings::default(),
        false,
        Caps::default(),
    )))
}

fn batch(n: i32) -> bson::RawArrayBuf {
    let mut a = bson::RawArrayBuf::new();
    for i in 0..n {
        a.push(rawdoc! {"i": i});
    }
    a
}

/// Request `id` on connection `conn` carrying `body`, answered with a
/// closed cursor whose first batch is `docs`.
fn round_trip(
    e: &mut Engine,
    conn: u64,
    id: i32,
    body: &bson::RawDocumentBuf,
    docs: bson::RawArrayBuf,
) {
    round_trip_at(e, conn, id, body, docs, Instant::now())
}

/// A request and its reply at `t`.
fn round_trip_at(
    e: &mut Engine,
    conn: u64,
    id: i32,
    body: &bson::RawDocumentBuf,
    docs: bson::RawArrayBuf,
    t: Instant,
) {
    e.message(
        conn,
        Direction::Request,
        t,
        Bytes::from(encode(id, 0, 0, body.as_bytes(), &[])),
    );
    let reply = rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": docs}, "ok": 1.0};
    e.message(
        conn,
        Direction::Reply,
        t,
        Bytes::from(encode(1000 + id, id, 0, reply.as_bytes(), &[])),
    );
}

#[test]
fn exhaust_replies_are_followed_to_the_end_of_the_cursor() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let find = encode(
        10,
        0,
        0,
        rawdoc! {"find": "c", "filter": {"a": 1}, "comment": "Q", "$db": "d"}.as_bytes(),
        &[],
    );
    e.message(1, Direction::Request, t, Bytes::from(find));
    let first = encode(
        90,
        10,
        0,
        rawdoc! {"cursor": {"id": 77i64, "ns": "d.c", "firstBatch": batch(2)}, "ok": 1.0}
            .as_bytes(),
        &[],
    );
    e.message(1, Direction::Reply, t, Bytes::from(first));
    let more = encode(
        11,
        0,
        EXHAUST_ALLOWED,
        rawdoc! {"getMore": 77i64, "collection": "c", "$db": "d"}.as_bytes(),
        &[],
    );
    e.message(1, Direction::Request, t, Bytes::from(more));
    // Three replies to one request: each answers the previous reply.
    for (id, to, flags, cursor, n) in [
        (500, 11, MORE_TO_COME, 77i64, 3),
        (501, 500, MORE_TO_COME, 77, 3),
        (502, 501, 0, 0, 1),
    ] {
        let reply = encode(
            id,
            to,
            flags,
            rawdoc! {"cursor": {"id": cursor, "ns": "d.c", "nextBatch": batch(n)}, "ok": 1.0}
                .as_bytes(),
            &[],
        );
        e.message(1, Direction::Reply, t, Bytes::from(reply));
    }
    e.closed(1);
    let k = k.lock().unwrap();
    let q = k.patterns.get("Q").unwrap();
    assert_eq!((q.invocations, q.round_trips, q.docs_returned), (1, 2, 9));
    assert_eq!(k.forgotten_requests, 0);
    assert!(
        k.cursors.get(&77).is_none(),
        "an exhausted cursor is forgotten"
    );
}

#[test]
fn partition_keys_are_learnt_from_accepted_commands_only() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let send = |e: &mut Engine, id: i32, body: bson::RawDocumentBuf, ok: f64| {
        e.message(
            3,
            Direction::Request,
            t,
            Bytes::from(encode(id, 0, 0, body.as_bytes(), &[])),
        );
        let reply = rawdoc! {"ok": ok};
        e.message(
            3,
            Direction::Reply,
            t,
            Bytes::from(encode(100 + id, id, 0, reply.as_bytes(), &[])),
        );
    };
    send(
        &mut e,
        1,
        rawdoc! {"shardCollection": "blog.refused", "key": {"x": 1}, "$db": "admin"},
        0.0,
    );
    send(
        &mut e,
        2,
        rawdoc! {"shardCollection": "blog.posts", "key": {"postId": "hashed"}, "$db": "admin"},
        1.0,
    );
    send(
        &mut e,
        3,
        rawdoc! {"customAction": "CreateCollection", "collection": "users", "shardKey": "userId", "$db": "blog"},
        1.0,
    );
    send(
        &mut e,
        4,
        rawdoc! {"find": "posts", "filter": {"userId": "u"}, "comment": "Q3", "$db": "blog"},
        1.0,
    );
    send(
        &mut e,
        5,
        rawdoc! {"find": "posts", "filter": {"postId": "p"}, "comment": "Q2", "$db": "blog"},
        1.0,
    );
    e.flush();
    let k = k.lock().unwrap();
    assert!(k.partition_keys.get("blog.refused").is_none());
    assert_eq!(
        k.partition_keys.get("blog.posts").unwrap().paths,
        vec!["postId"]
    );
    assert_eq!(
        k.partition_keys.get("blog.users").unwrap().paths,
        vec!["userId"]
    );
    assert_eq!(k.patterns.get("Q3").unwrap().partitions.scatter_gather, 1);
    assert_eq!(k.patterns.get("Q2").unwrap().partitions.single_shard, 1);
    let f = k.findings.all().next().expect("WL201 for Q3");
    assert_eq!(
        (f.rule.as_str(), f.namespace.as_str()),
        ("WL201", "blog.posts")
    );
}

/// Under `cosmos-ru` a scatter-gather query says what targeting it saves
/// (its base charge on every physical partition but one) only when its
/// collection spans more than one: over one there is nothing to save, and
/// neither the saving nor the partition count is written.
#[test]
fn a_scatter_gather_saves_only_over_several_physical_partitions() {
    use wirelint::analysis::request_units as ru;
    use wirelint::analysis::target::Target;
    let run = |partitions: Option<u32>| {
        let k = knowledge();
        let mut request_units = ru::Settings::default();
        if let Some(n) = partitions {
            request_units.collections.insert(
                "blog.posts".into(),
                ru::Collection {
                    physical_partitions: Some(n),
                    ..Default::default()
                },
            );
        }
        k.lock().unwrap().configure(&wirelint::analysis::Settings {
            target: Some(Target::CosmosRu),
            request_units,
            ..Default::default()
        });
        let mut e = Engine::new(k.clone(), None);
        let t = Instant::now();
        let shard =
            rawdoc! {"shardCollection": "blog.posts", "key": {"postId": "hashed"}, "$db": "admin"};
        e.message(
            3,
            Direction::Request,
            t,
            Bytes::from(encode(50, 0, 0, shard.as_bytes(), &[])),
        );
        let ok = rawdoc! {"ok": 1.0};
        e.message(
            3,
            Direction::Reply,
            t,
            Bytes::from(encode(150, 50, 0, ok.as_bytes(), &[])),
        );
        for id in 1..=3 {
            let find = rawdoc! {"find": "posts", "filter": {"userId": "u"}, "$db": "blog"};
            e.message(
                3,
                Direction::Request,
                t,
                Bytes::from(encode(id, 0, 0, find.as_bytes(), &[])),
            );
            let reply =
                rawdoc! {"cursor": {"id": 0_i64, "ns": "blog.posts", "firstBatch": []}, "ok": 1.0};
            e.message(
                3,
                Direction::Reply,
                t,
                Bytes::from(encode(100 + id, id, 0, reply.as_bytes(), &[])),
            );
        }
        e.flush();
        let k = k.lock().unwrap();
        let f = k.findings.all().find(|f| f.rule == "WL201").cloned();
        f.expect("WL201")
    };
    let spread = run(Some(4));
    assert_eq!(spread.evidence["physical_partitions"], 4);
    let saved = spread.evidence["request_units_saved_per_query"]
        .as_f64()
        .unwrap();
    let want = (3.0 * ru::query_base() * 10.0).round() / 10.0;
    assert!((saved - want).abs() < 1e-9, "{saved} {want}");
    assert!(
        spread.message.contains("RU per query"),
        "{}",
        spread.message
    );
    let one = run(None);
    assert!(!one.evidence.contains_key("physical_partitions"));
    assert!(!one.evidence.contains_key("request_units_saved_per_query"));
    assert!(!one.message.contains("RU"), "{}", one.message);
}

#[test]
fn a_named_pattern_groups_its_operations_into_calls() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let mut id = 0;
    let mut op = |e: &mut Engine, body: bson::RawDocumentBuf| {
        id += 1;
        e.message(
            7,
            Direction::Request,
            t,
            Bytes::from(encode(id, 0, 0, body.as_bytes(), &[])),
        );
        let reply =
            rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": batch(1)}, "ok": 1.0};
        e.message(
            7,
            Direction::Reply,
            t,
            Bytes::from(encode(1000 + id, id, 0, reply.as_bytes(), &[])),
        );
    };
    for post in 0..3 {
        op(
            &mut e,
            rawdoc! {"find": "posts", "filter": {"_id": post}, "comment": "Q2", "$db": "d"},
        );
        op(
            &mut e,
            rawdoc! {"aggregate": "comments", "pipeline": [{"$match": {"postId": post}}, {"$count": "n"}], "cursor": {}, "comment": "Q2", "$db": "d"},
        );
        op(
            &mut e,
            rawdoc! {"find": "users", "filter": {"_id": "u"}, "comment": "Q2", "$db": "d"},
        );
    }
    op(
        &mut e,
        rawdoc! {"find": "posts", "filter": {"_id": 1}, "$db": "d"},
    );
    op(
        &mut e,
        rawdoc! {"find": "posts", "filter": {"_id": 2}, "$db": "d"},
    );
    e.flush();
    let k = k.lock().unwrap();
    let q2 = k.patterns.get("Q2").unwrap();
    assert_eq!(
        (q2.invocations, q2.round_trips, q2.docs_returned),
        (3, 9, 9)
    );
    assert_eq!(q2.sequence.len(), 3);
    let by_shape = k.patterns.get("find d.posts {_id: ?int}").unwrap();
    assert_eq!((by_shape.invocations, by_shape.round_trips), (2, 2));
}

/// A filter nested `$and` 5,000 deep (100 KB) goes through the whole
/// analysis, rules included, on a thread with the analysis workers' 2 MiB
/// stack: the walks over filters are depth-bounded, so nothing overflows
/// (an overflow aborts the process; no `catch_unwind` would see it).
/// Analyses one request and its reply on a thread with a 2 MiB stack (an
/// eighth of an analysis thread's): whether it finished (a walk without
/// a bound overflows and aborts the test process).
fn round_trip_on_small_stack(k: &Arc<Mutex<Knowledge>>, request: Vec<u8>, reply: Vec<u8>) -> bool {
    let k = k.clone();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let mut e = Engine::new(k, None);
            let t = Instant::now();
            e.message(1, Direction::Request, t, Bytes::from(request));
            e.message(1, Direction::Reply, t, Bytes::from(reply));
            e.flush();
        })
        .unwrap()
        .join()
        .is_ok()
}

#[test]
fn a_filter_nested_thousands_deep_is_analysed_without_overflow() {
    fn element(kind: u8, key: &str, value: &[u8], out: &mut Vec<u8>) {
        out.push(kind);
        out.extend_from_slice(key.as_bytes());
        out.push(0);
        out.extend_from_slice(value);
    }
    fn document(elements: &[u8]) -> Vec<u8> {
        let mut d = ((elements.len() + 5) as i32).to_le_bytes().to_vec();
        d.extend_from_slice(elements);
        d.push(0);
        d
    }
    let mut filter = document(&[0x10, b'a', 0, 1, 0, 0, 0]);
    for _ in 0..5_000 {
        let mut array = Vec::new();
        element(0x03, "0", &filter, &mut array);
        let mut and = Vec::new();
        element(0x04, "$and", &document(&array), &mut and);
        filter = document(&and);
    }
    let mut body = Vec::new();
    element(0x02, "find", &[2, 0, 0, 0, b'c', 0], &mut body);
    element(0x03, "filter", &filter, &mut body);
    element(0x02, "$db", &[2, 0, 0, 0, b'd', 0], &mut body);
    let request = encode(1, 0, 0, &document(&body), &[]);
    let k = knowledge();
    k.lock().unwrap().partition_keys.discovered(
        "d.c".into(),
        vec!["a".into()],
        wirelint::analysis::partition::KeyKind::Ranged,
    );
    let reply = rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": batch(0)}, "ok": 1.0};
    let reply = encode(2, 1, 0, reply.as_bytes(), &[]);
    assert!(round_trip_on_small_stack(&k, request, reply));
    let k = k.lock().unwrap();
    assert_eq!(k.operations, 1, "the request was analysed, not skipped");
}

/// Connection state does not depend on the `Closed` event arriving (it is
/// dropped when a queue is full): a request left unanswered for ten minutes
/// is forgotten at the next tick (counted), its late reply teaches nothing, and the
/// pattern's invocation is committed.
#[test]
fn state_of_a_connection_whose_close_was_lost_is_forgotten() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let find = encode(
        10,
        0,
        0,
        rawdoc! {"find": "c", "filter": {"a": 1}, "comment": "lost", "$db": "d"}.as_bytes(),
        &[],
    );
    e.message(5, Direction::Request, t, Bytes::from(find));
    e.tick(t + std::time::Duration::from_secs(60));
    e.tick(t + std::time::Duration::from_secs(601));
    let reply = rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": batch(1)}, "ok": 1.0};
    e.message(
        5,
        Direction::Reply,
        t,
        Bytes::from(encode(11, 10, 0, reply.as_bytes(), &[])),
    );
    let k = k.lock().unwrap();
    assert_eq!(k.forgotten_requests, 1, "the stale request was forgotten");
    assert!(
        k.patterns.get("lost").is_none(),
        "an unanswered request is not learnt from"
    );
}

/// Only what the server accepted is learnt: a refused request (an
/// unauthorized client's, say) adds no pattern, state or finding; the same
/// request accepted does.
#[test]
fn requests_are_learnt_only_when_the_server_accepts_them() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let big = "x".repeat(3 << 20);
    let mut send = |id: i32, ok: bool| {
        let insert = rawdoc! {"insert": "files", "documents": [{"_id": id, "blob": big.clone()}], "comment": "upload", "$db": "d"};
        e.message(
            9,
            Direction::Request,
            t,
            Bytes::from(encode(id, 0, 0, insert.as_bytes(), &[])),
        );
        let reply = if ok {
            rawdoc! {"n": 1, "ok": 1.0}
        } else {
            rawdoc! {"ok": 0.0, "code": 13, "codeName": "Unauthorized", "errmsg": "not authorized"}
        };
        e.message(
            9,
            Direction::Reply,
            t,
            Bytes::from(encode(100 + id, id, 0, reply.as_bytes(), &[])),
        );
    };
    send(1, false);
    {
        let k = k.lock().unwrap();
        assert!(k.patterns.get("upload").is_none());
        assert_eq!(k.findings.len(), 0, "no finding from a refused request");
        assert_eq!((k.operations, k.rejected_operations), (0, 1));
    }
    send(2, true);
    send(3, false);
    e.flush();
    let k = k.lock().unwrap();
    assert_eq!((k.operations, k.rejected_operations), (1, 2));
    let upload = k.patterns.get("upload").unwrap();
    assert_eq!(
        upload.errors.get(&13),
        Some(&1),
        "refused after the pattern was known: counted"
    );
    assert!(
        k.findings.all().any(|f| f.rule == "WL103"),
        "the accepted 3 MiB insert is a large document"
    );
}

/// WL504 on joins the server accepted: 20 of 25 reads of books use
/// `$lookup` (80 % > 50 %): reported; 2 of 25 reads of authors: silent.
/// (FerretDB v1.24.2 refuses `$lookup`, so the end-to-end test shows the
/// other half: refused joins are not learnt.)
#[test]
fn lookup_heavy_reads_fire_and_occasional_lookups_do_not() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let mut id = 0;
    let mut read = |e: &mut Engine, body: bson::RawDocumentBuf, ns: &str| {
        id += 1;
        e.message(
            2,
            Direction::Request,
            t,
            Bytes::from(encode(id, 0, 0, body.as_bytes(), &[])),
        );
        let reply = rawdoc! {"cursor": {"id": 0i64, "ns": ns, "firstBatch": batch(1)}, "ok": 1.0};
        e.message(
            2,
            Direction::Reply,
            t,
            Bytes::from(encode(1000 + id, id, 0, reply.as_bytes(), &[])),
        );
    };
    for i in 0..20 {
        read(
            &mut e,
            rawdoc! {"aggregate": "books", "pipeline": [{"$match": {"_id": i % 10}}, {"$lookup": {"from": "authors", "localField": "authorId", "foreignField": "_id", "as": "author"}}], "cursor": {}, "comment": "Q-book-with-author", "$db": "d"},
            "d.books",
        );
    }
    for i in 0..5 {
        read(
            &mut e,
            rawdoc! {"find": "books", "filter": {"_id": i}, "$db": "d"},
            "d.books",
        );
    }
    for i in 0..23 {
        read(
            &mut e,
            rawdoc! {"find": "authors", "filter": {"_id": i % 5}, "$db": "d"},
            "d.authors",
        );
    }
    for _ in 0..2 {
        read(
            &mut e,
            rawdoc! {"aggregate": "authors", "pipeline": [{"$lookup": {"from": "books", "localField": "_id", "foreignField": "authorId", "as": "books"}}], "cursor": {}, "$db": "d"},
            "d.authors",
        );
    }
    e.flush();
    let k = k.lock().unwrap();
    let wl504: Vec<_> = k.findings.all().filter(|f| f.rule == "WL504").collect();
    assert_eq!(wl504.len(), 1, "{wl504:#?}");
    assert_eq!(wl504[0].namespace, "d.books");
    assert_eq!(
        wl504[0].evidence["joined_collections"],
        serde_json::json!(["authors"])
    );
}

/// Documents the server reported in `writeErrors` were not stored, and in
/// an ordered write neither were those after the first failure: the
/// analysis records only what was written (a replacement the server
/// refused is not a stored document either).
#[test]
fn documents_in_write_errors_are_not_recorded_as_stored() {
    let seen = |ordered: bool, docs: usize, errors: &[i32]| -> u64 {
        let k = knowledge();
        let mut e = Engine::new(k.clone(), None);
        let t = Instant::now();
        let documents: Vec<bson::Bson> = (0..docs as i32)
            .map(|i| bson::bson!({"_id": i, "v": i}))
            .collect();
        let insert =
            bson::doc! {"insert": "c", "documents": documents, "ordered": ordered, "$db": "d"};
        let insert = bson::RawDocumentBuf::try_from(&insert).unwrap();
        e.message(
            1,
            Direction::Request,
            t,
            Bytes::from(encode(10, 0, 0, insert.as_bytes(), &[])),
        );
        let write_errors: Vec<bson::Bson> = errors
            .iter()
            .map(|i| bson::bson!({"index": i, "code": 11000, "errmsg": "E11000 duplicate key"}))
            .collect();
        let reply =
            bson::doc! {"n": (docs - errors.len()) as i32, "writeErrors": write_errors, "ok": 1.0};
        let reply = bson::RawDocumentBuf::try_from(&reply).unwrap();
        e.message(
            1,
            Direction::Reply,
            t,
            Bytes::from(encode(11, 10, 0, reply.as_bytes(), &[])),
        );
        let k = k.lock().unwrap();
        k.namespaces.get("d.c").map_or(0, |n| n.documents_seen)
    };
    assert_eq!(seen(true, 3, &[]), 3);
    assert_eq!(
        seen(true, 3, &[1]),
        1,
        "ordered: stops at the first failure"
    );
    assert_eq!(seen(false, 3, &[1]), 2, "unordered: all but the failed one");
    assert_eq!(seen(false, 4, &[0, 3]), 2);

    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let update = rawdoc! {"update": "r", "updates": [{"q": {"_id": 1}, "u": {"_id": 1, "big": "x"}}], "$db": "d"};
    e.message(
        2,
        Direction::Request,
        t,
        Bytes::from(encode(20, 0, 0, update.as_bytes(), &[])),
    );
    let reply = rawdoc! {"n": 0, "nModified": 0, "writeErrors": [{"index": 0, "code": 66, "errmsg": "immutable"}], "ok": 1.0};
    e.message(
        2,
        Direction::Reply,
        t,
        Bytes::from(encode(21, 20, 0, reply.as_bytes(), &[])),
    );
    let k = k.lock().unwrap();
    assert_eq!(
        k.namespaces.get("d.r").map_or(0, |n| n.documents_seen),
        0,
        "a refused replacement is not a stored document"
    );
}

/// Two pages of five posts, each followed by a lookup of its author by
/// `_id` and of its tags by `$in`, then a batched page: two N+1s.
fn posts_then_per_row_lookups(e: &mut Engine) {
    let mut id = 0;
    let mut op = |e: &mut Engine, body: bson::RawDocumentBuf, docs: bson::RawArrayBuf| {
        id += 1;
        round_trip(e, 9, id, &body, docs);
    };
    let posts = |from: i32| {
        let mut a = bson::RawArrayBuf::new();
        for p in from..from + 5 {
            a.push(rawdoc! {"_id": p, "authorId": format!("u{}", p % 3), "tagIds": [p % 7, (p + 3) % 7]});
        }
        a
    };
    for page in 0..2 {
        op(
            e,
            rawdoc! {"find": "posts", "filter": {}, "limit": 5, "skip": page * 5, "$db": "d"},
            posts(page * 5),
        );
        for p in page * 5..page * 5 + 5 {
            let mut author = bson::RawArrayBuf::new();
            author.push(rawdoc! {"_id": format!("u{}", p % 3)});
            op(
                e,
                rawdoc! {"find": "users", "filter": {"_id": format!("u{}", p % 3)}, "limit": 1, "$db": "d"},
                author,
            );
            op(
                e,
                rawdoc! {"find": "tags", "filter": {"_id": {"$in": [p % 7, (p + 3) % 7]}}, "$db": "d"},
                batch(2),
            );
        }
        op(
            e,
            rawdoc! {"find": "posts", "filter": {}, "limit": 5, "$db": "d"},
            posts(0),
        );
        op(
            e,
            rawdoc! {"find": "authors", "filter": {"_id": {"$in": ["u0", "u1", "u2"]}}, "$db": "d"},
            batch(3),
        );
    }
}

/// N+1 whose follow-ups return several documents: per listed post, its
/// author by `_id` and its tags by `$in` of the post's `tagIds`; the tags
/// query (a list read itself) does not replace the post list it follows.
/// A batched `$in` over every author (what `populate` sends) is silent.
#[test]
fn per_element_follow_ups_of_any_size_are_linked_to_the_list() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    posts_then_per_row_lookups(&mut e);
    e.flush();
    let k = k.lock().unwrap();
    let mut subjects: Vec<String> = k
        .findings
        .all()
        .filter(|f| f.rule == "WL401")
        .map(|f| f.subject.clone())
        .collect();
    subjects.sort();
    assert_eq!(
        subjects,
        vec!["d.posts → d.tags._id", "d.posts → d.users._id"]
    );
}

/// Under `cosmos-ru` an N+1 says what one `$in` per list saves: all but
/// one query's base charge per list, in its message and its evidence; under
/// MongoDB's target it says nothing of request units.
#[test]
fn an_n_plus_one_says_what_batching_saves_under_request_units() {
    use wirelint::analysis::target::Target;
    let run = |target: Option<Target>| {
        let k = knowledge();
        k.lock().unwrap().configure(&wirelint::analysis::Settings {
            target,
            ..Default::default()
        });
        let mut e = Engine::new(k.clone(), None);
        posts_then_per_row_lookups(&mut e);
        e.flush();
        let found: Vec<_> = k
            .lock()
            .unwrap()
            .findings
            .all()
            .filter(|f| f.rule == "WL401" && f.subject == "d.posts → d.users._id")
            .cloned()
            .collect();
        found.into_iter().next().expect("the users N+1")
    };
    let priced = run(Some(Target::CosmosRu));
    let saved = priced.evidence["request_units_saved_per_list"]
        .as_f64()
        .unwrap();
    // Five rows a list: four queries' base charge, to the tenth.
    let want = wirelint::analysis::request_units::batch_saving(5);
    assert!(
        (saved - (want * 10.0).round() / 10.0).abs() < 1e-9,
        "{saved} {want}"
    );
    let clause =
        format!("; fixing it saves about {want:.1} RU per list (estimated: docs/cosmos.md)");
    assert!(priced.message.ends_with(&clause), "{}", priced.message);
    let plain = run(None);
    assert!(!plain.message.contains("RU"), "{}", plain.message);
    assert!(!plain.evidence.contains_key("request_units_saved_per_list"));
}

/// The whole cursor is the list: follow-ups of documents from a getMore
/// batch link to it, and the finding counts every batch's documents.
#[test]
fn a_list_is_its_whole_cursor() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let mut id = 0;
    let mut op = |e: &mut Engine, body: bson::RawDocumentBuf, reply: bson::RawDocumentBuf| {
        id += 1;
        e.message(
            3,
            Direction::Request,
            t,
            Bytes::from(encode(id, 0, 0, body.as_bytes(), &[])),
        );
        e.message(
            3,
            Direction::Reply,
            t,
            Bytes::from(encode(1000 + id, id, 0, reply.as_bytes(), &[])),
        );
    };
    let comments = |from: i32| {
        let mut a = bson::RawArrayBuf::new();
        for c in from..from + 2 {
            a.push(rawdoc! {"_id": c, "userId": format!("u{c}")});
        }
        a
    };
    op(
        &mut e,
        rawdoc! {"find": "comments", "filter": {"postId": 1}, "batchSize": 2, "$db": "d"},
        rawdoc! {"cursor": {"id": 77i64, "ns": "d.comments", "firstBatch": comments(0)}, "ok": 1.0},
    );
    op(
        &mut e,
        rawdoc! {"getMore": 77i64, "collection": "comments", "$db": "d"},
        rawdoc! {"cursor": {"id": 0i64, "ns": "d.comments", "nextBatch": comments(2)}, "ok": 1.0},
    );
    for c in 0..4 {
        let mut user = bson::RawArrayBuf::new();
        user.push(rawdoc! {"_id": format!("u{c}")});
        op(
            &mut e,
            rawdoc! {"find": "users", "filter": {"_id": format!("u{c}")}, "limit": 1, "$db": "d"},
            rawdoc! {"cursor": {"id": 0i64, "ns": "d.users", "firstBatch": user}, "ok": 1.0},
        );
    }
    e.flush();
    let k = k.lock().unwrap();
    let f = k
        .findings
        .get("WL401", "d.users", "d.comments → d.users._id")
        .expect("WL401 over both batches");
    assert_eq!(f.evidence["follow_ups_per_list"], serde_json::json!(4));
    assert_eq!(f.evidence["list_documents"], serde_json::json!(4));
}

/// WL501 wants two references: a join table `{author, book}` of ObjectIds
/// (Mongoose's way, references by type) read by author and followed by
/// book lookups is one; a list view's `{title, authorId}` followed by
/// author lookups is an N+1 (WL401), not a join table.
#[test]
fn a_join_collection_holds_two_references_not_a_title() {
    let run = |list_doc: &dyn Fn(i32) -> bson::RawDocumentBuf, link: &str| {
        let k = knowledge();
        let mut e = Engine::new(k.clone(), None);
        let mut id = 0;
        let mut op = |e: &mut Engine, body: bson::RawDocumentBuf, docs: bson::RawArrayBuf| {
            id += 1;
            round_trip(e, 4, id, &body, docs);
        };
        for view in 0..4 {
            let mut list = bson::RawArrayBuf::new();
            let docs: Vec<bson::RawDocumentBuf> = (0..5).map(|i| list_doc(view * 5 + i)).collect();
            for d in &docs {
                list.push(d.clone());
            }
            op(
                &mut e,
                rawdoc! {"find": "links", "filter": {"owner": view}, "$db": "d"},
                list,
            );
            for d in &docs {
                let target = d.get_object_id(link).unwrap();
                let mut one = bson::RawArrayBuf::new();
                one.push(rawdoc! {"_id": target, "name": "x"});
                op(
                    &mut e,
                    rawdoc! {"find": "targets", "filter": {"_id": target}, "limit": 1, "$db": "d"},
                    one,
                );
            }
        }
        e.flush();
        let k = k.lock().unwrap();
        let mut rules: Vec<String> = k.findings.all().map(|f| f.rule.clone()).collect();
        rules.sort();
        rules.dedup();
        rules
    };
    let oid = |i: i32| bson::oid::ObjectId::from_bytes([i as u8; 12]);
    let join = run(
        &|i| rawdoc! {"_id": i, "author": oid(100), "book": oid(i)},
        "book",
    );
    assert!(join.contains(&"WL501".to_string()), "{join:?}");
    let list_view = run(
        &|i| rawdoc! {"_id": i, "title": format!("Post {i}"), "authorId": oid(i)},
        "authorId",
    );
    assert!(list_view.contains(&"WL401".to_string()), "{list_view:?}");
    assert!(!list_view.contains(&"WL501".to_string()), "{list_view:?}");
}

/// A call seen while one connection in 4 was analysed (16 of 64) stands
/// for 4, one seen under 20 of 64 for 3 (3.2): the pattern's estimated
/// calls, and its analysed share, say so.
#[test]
fn calls_seen_under_sampling_count_for_the_connections_left_out() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    for (id, keep) in [(1, 64u8), (2, 16), (3, 20)] {
        e.set_sampling(keep);
        let find = rawdoc! {"find": "c", "filter": {"_id": 1}, "comment": "Q1", "$db": "d"};
        round_trip(&mut e, id as u64, id, &find, batch(1));
        e.closed(id as u64);
    }
    e.flush();
    let k = k.lock().unwrap();
    let q1 = k
        .patterns
        .patterns
        .iter()
        .find(|(name, _)| name.as_ref() == "Q1")
        .map(|(_, p)| p)
        .unwrap();
    assert_eq!((q1.invocations, q1.estimated_invocations), (3, 8));
}

/// A list read holds its cursor reply (charged to the connections share)
/// until a query could follow up on it; indexing it then gives the bytes
/// back (at the next tick). (That the follow-up still links is the realworld corpus's N+1
/// applications.)
#[test]
fn a_list_holds_its_reply_until_a_follow_up_indexes_it() {
    let k = knowledge();
    let pool = k.lock().unwrap().pools.connections.clone();
    let mut e = Engine::new(k.clone(), None);
    let before = pool.usage().bytes;
    let mut posts = bson::RawArrayBuf::new();
    for i in 0..200 {
        posts.push(rawdoc! {"_id": i, "authorId": 10_000 + i, "body": "x".repeat(200)});
    }
    let list = rawdoc! {"find": "posts", "filter": {}, "$db": "d"};
    round_trip(&mut e, 1, 1, &list, posts);
    let holding = pool.usage().bytes;
    assert!(
        holding > before + 40_000,
        "the ~46 KB reply is held and charged: {before} -> {holding}"
    );
    // The author of one post: a follow-up of the list.
    let author = rawdoc! {"find": "users", "filter": {"_id": 10_007}, "$db": "d"};
    round_trip(&mut e, 1, 2, &author, batch(1));
    // (Charged at their most between ticks, like requests awaiting
    // replies.)
    e.tick(Instant::now());
    let indexed = pool.usage().bytes;
    // (What stays is the index: 16 bytes per value of the 600.)
    assert!(
        indexed + 25_000 < holding,
        "indexing gives the reply's bytes back: {holding} -> {indexed}"
    );
    // A list nobody follows up: held until its follow-up window has passed,
    // then indexed at the next tick.
    let mut posts = bson::RawArrayBuf::new();
    for i in 0..200 {
        posts.push(rawdoc! {"_id": i, "authorId": 20_000 + i, "body": "y".repeat(200)});
    }
    round_trip(&mut e, 2, 3, &list, posts);
    let holding = pool.usage().bytes;
    assert!(holding > indexed + 40_000, "{indexed} -> {holding}");
    e.tick(Instant::now());
    assert!(
        pool.usage().bytes + 40_000 > holding,
        "within the window: still held"
    );
    e.tick(Instant::now() + std::time::Duration::from_secs(3));
    let settled = pool.usage().bytes;
    assert!(
        settled + 25_000 < holding,
        "past the window the tick gives the bytes back: {holding} -> {settled}"
    );
}

/// Replies are not depth-checked before the analysis (a server never
/// sends BSON nested past its own limit, and walking a whole reply for it
/// cost more than the rest of the analysis of a large batch): every walk
/// of a reply's documents is bounded by its own depth. A returned document
/// whose `_id` and fields nest 320,000 levels (2.5 MB, over the 2 MiB at
/// which WL103 reports it, showing its `_id` with `--show-values`) is
/// analysed by every rule on a 2 MiB stack.
#[test]
fn a_reply_nested_hundreds_of_thousands_deep_is_analysed_without_overflow() {
    const LEVELS: usize = 320_000;
    // {a: {a: … {}}}: each level's length and element header, the
    // innermost empty document, then each level's terminating NUL.
    let mut deep = Vec::with_capacity(5 + 8 * LEVELS);
    for level in (1..=LEVELS).rev() {
        deep.extend_from_slice(&((5 + 8 * level) as i32).to_le_bytes());
        deep.extend_from_slice(&[0x03, b'a', 0]);
    }
    deep.extend_from_slice(&[5, 0, 0, 0, 0]);
    deep.resize(5 + 8 * LEVELS, 0);
    let element = |kind: u8, key: &str, value: &[u8], out: &mut Vec<u8>| {
        out.push(kind);
        out.extend_from_slice(key.as_bytes());
        out.push(0);
        out.extend_from_slice(value);
    };
    let document = |elements: &[u8]| {
        let mut d = ((elements.len() + 5) as i32).to_le_bytes().to_vec();
        d.extend_from_slice(elements);
        d.push(0);
        d
    };
    let mut returned = Vec::new();
    element(0x03, "_id", &deep, &mut returned);
    element(0x04, "tags", &deep, &mut returned);
    element(0x03, "profile", &deep, &mut returned);
    let mut first_batch = Vec::new();
    element(0x03, "0", &document(&returned), &mut first_batch);
    let mut cursor = Vec::new();
    element(0x12, "id", &0i64.to_le_bytes(), &mut cursor);
    element(0x02, "ns", &[4, 0, 0, 0, b'd', b'.', b'c', 0], &mut cursor);
    element(0x04, "firstBatch", &document(&first_batch), &mut cursor);
    let mut reply = Vec::new();
    element(0x03, "cursor", &document(&cursor), &mut reply);
    element(0x01, "ok", &1f64.to_le_bytes(), &mut reply);
    let reply = encode(2, 1, 0, &document(&reply), &[]);
    let request = encode(
        1,
        0,
        0,
        rawdoc! {"find": "c", "filter": {"a": 1}, "$db": "d"}.as_bytes(),
        &[],
    );
    let k = Arc::new(Mutex::new(Knowledge::new(
        wirelint::rules::all(),
        RuleSettings::default(),
        true,
        Caps::default(),
    )));
    assert!(round_trip_on_small_stack(&k, request, reply));
    let k = k.lock().unwrap();
    assert_eq!(k.operations, 1, "the round trip was analysed");
    assert!(
        k.findings.all().any(|f| f.rule == "WL103"),
        "the large document was reported"
    );
}

/// WL203 counts a find's equality set by its shape once the shape has
/// shown that its set follows from it: repeated finds of one shape count as
/// the walk would count them, and `$in` (whose arity its shape does not
/// record: `[x]` pins by equality, `[a, b]` does not) is walked every time.
#[test]
fn partition_key_advice_counts_equality_sets_by_shape_and_in_by_its_values() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let mut id = 0;
    let mut send = |e: &mut Engine, body: bson::RawDocumentBuf| {
        id += 1;
        e.message(
            5,
            Direction::Request,
            t,
            Bytes::from(encode(id, 0, 0, body.as_bytes(), &[])),
        );
        let reply =
            rawdoc! {"cursor": {"id": 0i64, "ns": "blog.posts", "firstBatch": []}, "ok": 1.0};
        e.message(
            5,
            Direction::Reply,
            t,
            Bytes::from(encode(1000 + id, id, 0, reply.as_bytes(), &[])),
        );
    };
    send(
        &mut e,
        rawdoc! {"shardCollection": "blog.posts", "key": {"postId": 1}, "$db": "admin"},
    );
    for i in 0..30 {
        send(
            &mut e,
            rawdoc! {"find": "posts", "filter": {"userId": format!("u{i}")}, "$db": "blog"},
        );
    }
    for _ in 0..10 {
        send(
            &mut e,
            rawdoc! {"find": "posts", "filter": {"postId": "p"}, "$db": "blog"},
        );
    }
    for _ in 0..5 {
        send(
            &mut e,
            rawdoc! {"find": "posts", "filter": {"userId": {"$in": ["x"]}}, "$db": "blog"},
        );
    }
    for _ in 0..10 {
        send(
            &mut e,
            rawdoc! {"find": "posts", "filter": {"userId": {"$in": ["a", "b"]}}, "$db": "blog"},
        );
    }
    e.tick(Instant::now());
    let k = k.lock().unwrap();
    let f = k
        .findings
        .all()
        .find(|f| f.rule == "WL203")
        .expect("WL203 on blog.posts");
    assert_eq!(f.namespace, "blog.posts");
    assert_eq!(f.evidence["suggested_key"], serde_json::json!(["userId"]));
    assert_eq!(f.evidence["operations"], serde_json::json!(55));
    // 30 equalities and 5 one-value $in of 55 finds.
    assert_eq!(
        f.evidence["single_partition_share"],
        serde_json::json!(0.636),
        "{}",
        f.message
    );
}

/// Requests awaiting replies are charged to the connections share: the
/// most a connection's have come to, kept while it keeps sending, so that
/// a connection in the steady state charges nothing per request; requests
/// sent without waiting grow the charge, and a tick that finds none
/// pending gives it all back.
#[test]
fn pending_requests_are_charged_at_their_most_until_a_tick_finds_none() {
    let k = knowledge();
    let pool = k.lock().unwrap().pools.connections.clone();
    let mut e = Engine::new(k.clone(), None);
    let find = |id: i32| {
        let body = rawdoc! {"find": "c", "filter": {"_id": id}, "limit": 1, "$db": "d"};
        Bytes::from(encode(id, 0, 0, body.as_bytes(), &[]))
    };
    let reply = |id: i32| {
        let body = rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": batch(1)}, "ok": 1.0};
        Bytes::from(encode(1000 + id, id, 0, body.as_bytes(), &[]))
    };
    let t = Instant::now();
    // The first request of a shape also leaves what its shape decided,
    // and the open application requests (see `analysis::requests`) fill
    // their table: from then on one closes as the next opens.
    for id in 1..=wirelint::analysis::requests::MAX_OPEN as i32 + 1 {
        e.message(1, Direction::Request, t, find(id));
        e.message(1, Direction::Reply, t, reply(id));
    }
    e.tick(t);
    let at_rest = pool.usage();
    e.message(1, Direction::Request, t, find(100));
    let one = pool.usage();
    assert!(one.bytes > at_rest.bytes, "{at_rest:?} -> {one:?}");
    assert_eq!(
        one.entries,
        at_rest.entries + 1,
        "one charge per connection"
    );
    e.message(1, Direction::Reply, t, reply(100));
    assert_eq!(pool.usage(), one, "answered: kept for the next request");
    for id in 3..50 {
        let id = id + 100;
        e.message(1, Direction::Request, t, find(id));
        assert_eq!(pool.usage(), one, "request {id}: nothing new to charge");
        e.message(1, Direction::Reply, t, reply(id));
    }
    // Three sent before any reply: charged for all three.
    for id in 150..153 {
        e.message(1, Direction::Request, t, find(id));
    }
    let three = pool.usage();
    let each = one.bytes - at_rest.bytes;
    assert_eq!(
        three.bytes,
        at_rest.bytes + 3 * each,
        "{one:?} -> {three:?}"
    );
    assert_eq!(three.entries, one.entries);
    e.tick(t);
    assert_eq!(pool.usage(), three, "still pending: still charged");
    for id in 150..153 {
        e.message(1, Direction::Reply, t, reply(id));
    }
    e.tick(t);
    assert_eq!(
        pool.usage().bytes,
        at_rest.bytes,
        "none pending: all given back"
    );
    assert_eq!(pool.usage().entries, at_rest.entries);
}

/// What an engine fed `ops` in order found, and its patterns' (name,
/// invocations, operations), after every request closed.
struct Run {
    rules: Vec<(String, String)>,
    patterns: Vec<(String, u64, u64)>,
    /// Each finding's rule and the patterns it names.
    named: Vec<(String, Vec<String>)>,
    /// Each finding's rule and message.
    messages: Vec<(String, String)>,
}

impl Run {
    /// The messages of `rule`'s findings.
    fn said(&self, rule: &str) -> Vec<&String> {
        self.messages
            .iter()
            .filter(|(r, _)| r == rule)
            .map(|(_, m)| m)
            .collect()
    }
}

/// One operation of an untagged application: connection, command, reply
/// documents.
type Op = (u64, bson::RawDocumentBuf, Vec<bson::RawDocumentBuf>);

/// Runs `ops` as they come, then again with a second of the application's
/// own work before each operation (the engine ticking meanwhile, as on a
/// slow handler or a loaded machine): both must find the same, since
/// values link operations and wall-clock time does not decide.
fn run_ops(ops: Vec<Op>) -> Run {
    let fast = run_paced(ops.clone(), Duration::ZERO);
    let slow = run_paced(ops, Duration::from_secs(1));
    assert_eq!(fast.rules, slow.rules, "at full speed, and a second apart");
    fast
}

fn run_paced(ops: Vec<Op>, gap: Duration) -> Run {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let start = Instant::now();
    let mut t = start;
    for (i, (conn, body, docs)) in ops.into_iter().enumerate() {
        let mut a = bson::RawArrayBuf::new();
        for d in docs {
            a.push(d);
        }
        if !gap.is_zero() {
            // Ticks every 100 ms of the gap, as the proxy's tick does.
            let ticks = (gap.as_millis() / 100).max(1) as u32;
            for _ in 0..ticks {
                t += gap / ticks;
                e.tick(t);
            }
        }
        round_trip_at(&mut e, conn, i as i32 + 1, &body, a, t);
    }
    e.flush();
    e.tick(t.max(Instant::now()));
    let k = k.lock().unwrap();
    let mut rules: Vec<(String, String)> = k
        .findings
        .all()
        .map(|f| (f.rule.to_string(), f.namespace.clone()))
        .collect();
    rules.sort();
    rules.dedup();
    let mut patterns: Vec<(String, u64, u64)> = k
        .patterns
        .patterns
        .iter()
        .map(|(n, p)| (n.to_string(), p.invocations, p.operations))
        .collect();
    patterns.sort();
    let named = k
        .findings
        .all()
        .map(|f| (f.rule.clone(), f.patterns.clone()))
        .collect();
    let messages = k
        .findings
        .all()
        .map(|f| (f.rule.clone(), f.message.clone()))
        .collect();
    Run {
        rules,
        patterns,
        named,
        messages,
    }
}

/// A board page, untagged: the cards of a board, then per card its
/// assignee (a detail read) and a count of its comments, interleaved. The
/// request is rebuilt from the values (the assignee's id and the card's
/// id come from the list), named by its root, and judged as a named one
/// would be: N+1 on users, count on read on comments. One cause, one
/// finding: the page is chatty only through those two, so no WL402.
#[test]
fn untagged_requests_are_rebuilt_from_the_values_they_carry() {
    let mut ops = Vec::new();
    for board in 0..3 {
        let cards: Vec<_> = (0..5)
            .map(|c| rawdoc! {"_id": format!("card-{board}-{c}"), "boardId": format!("b{board}"), "title": "t", "assigneeId": format!("u{c}")})
            .collect();
        ops.push((
            1,
            rawdoc! {"find": "cards", "filter": {"boardId": format!("b{board}")}, "$db": "d"},
            cards.clone(),
        ));
        for card in &cards {
            let (id, user) = (
                card.get_str("_id").unwrap(),
                card.get_str("assigneeId").unwrap(),
            );
            ops.push((
                1,
                rawdoc! {"find": "users", "filter": {"_id": user}, "limit": 1, "$db": "d"},
                vec![rawdoc! {"_id": user, "name": "n"}],
            ));
            ops.push((
                1,
                rawdoc! {"aggregate": "comments", "pipeline": [{"$match": {"cardId": id}}, {"$group": {"_id": 1, "n": {"$sum": 1}}}], "cursor": {}, "$db": "d"},
                vec![rawdoc! {"_id": 1, "n": 1}],
            ));
        }
    }
    let run = run_ops(ops);
    let root = "find d.cards {boardId: ?string}";
    assert_eq!(
        run.patterns,
        vec![(root.to_string(), 3, 33)],
        "one request per page, of 1 + 2 × 5 operations"
    );
    for (rule, ns) in [("WL401", "d.users"), ("WL403", "d.comments")] {
        assert!(
            run.rules.contains(&(rule.into(), ns.into())),
            "{rule} on {ns}: {:?}",
            run.rules
        );
    }
    assert_eq!(run.rules.len(), 2, "{:?}", run.rules);
}

/// A profile page counts the user's reuses, `{owner, deleted: null}`: a
/// count on read by `owner`. The null flag names no parent, so it is not
/// a second finding.
#[test]
fn a_count_on_read_is_by_its_parent_not_by_a_flag() {
    let mut ops = Vec::new();
    for u in 0..4 {
        let user = bson::oid::ObjectId::from_bytes([u, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4]);
        ops.push((
            1,
            rawdoc! {"find": "users", "filter": {"_id": user}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": user, "name": "n"}],
        ));
        ops.push((
            1,
            rawdoc! {"aggregate": "reuses", "pipeline": [{"$match": {"owner": user, "deleted": bson::RawBson::Null}}, {"$group": {"_id": 1, "n": {"$sum": 1}}}], "cursor": {}, "$db": "d"},
            vec![rawdoc! {"_id": 1, "n": 2}],
        ));
    }
    let run = run_ops(ops);
    let counts = run.said("WL403");
    assert!(
        counts.len() == 1 && counts[0].contains("counted by `owner`"),
        "{counts:?}"
    );
}

/// A notifications page counts the user's notifications, then reads the
/// page with the same filter (a paginator's total, counted first); a
/// reuse's save counts its owner's reuses and stores the count on the
/// owner (a counter kept on write). Neither counts on read; a profile
/// that counts the user's datasets beside its reads does.
#[test]
fn totals_counted_first_and_counts_kept_on_write_are_not_on_read() {
    let count = |coll: &str, field: &str, user: bson::oid::ObjectId, n: i32| {
        let filter = bson::doc! {field: user};
        let filter = bson::RawDocumentBuf::try_from(&filter).unwrap();
        (
            1,
            rawdoc! {"aggregate": coll, "pipeline": [{"$match": filter}, {"$group": {"_id": 1, "n": {"$sum": 1}}}], "cursor": {}, "$db": "d"},
            vec![rawdoc! {"_id": 1, "n": n}],
        )
    };
    let mut ops = Vec::new();
    for u in 0..4u8 {
        let user = bson::oid::ObjectId::from_bytes([u, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
        let me = rawdoc! {"find": "users", "filter": {"_id": user}, "limit": 1, "$db": "d"};
        let profile = vec![rawdoc! {"_id": user, "name": "n"}];
        // The notifications page.
        ops.push((1, me.clone(), profile.clone()));
        ops.push(count("notifications", "user", user, 2));
        ops.push((
            1,
            rawdoc! {"find": "notifications", "filter": {"user": user}, "sort": {"at": -1}, "skip": 0, "limit": 20, "$db": "d"},
            vec![rawdoc! {"_id": u as i32 * 10, "user": user}, rawdoc! {"_id": u as i32 * 10 + 1, "user": user}],
        ));
        // A reuse saved: its owner's reuses counted, the count stored on
        // the owner.
        let reuse = bson::oid::ObjectId::from_bytes([u, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 5]);
        ops.push((
            3,
            rawdoc! {"find": "reuses", "filter": {"_id": reuse}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": reuse, "owner": user, "title": "t"}],
        ));
        ops.push((
            3,
            rawdoc! {"find": "users", "filter": {"_id": user}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": user, "name": "n"}],
        ));
        let mut c = count("reuses", "owner", user, 3);
        c.0 = 3;
        ops.push(c);
        ops.push((
            3,
            rawdoc! {"update": "users", "updates": [{"q": {"_id": user}, "u": {"$set": {"metrics.reuses": 3}}}], "$db": "d"},
            vec![],
        ));
        // The profile: the user, their organizations, their datasets counted.
        ops.push((2, me, profile));
        ops.push((
            2,
            rawdoc! {"find": "organizations", "filter": {"members.user": user}, "$db": "d"},
            vec![rawdoc! {"_id": u as i32, "name": "o"}],
        ));
        let mut c = count("datasets", "owner", user, 4);
        c.0 = 2;
        ops.push(c);
    }
    let run = run_ops(ops);
    let counts = run.said("WL403");
    assert!(
        counts.len() == 1
            && counts[0].starts_with("documents are counted by `owner`")
            && run.rules.contains(&("WL403".into(), "d.datasets".into())),
        "{counts:?} {:?}",
        run.rules
    );
}

/// An order page: the order by `_id`, then its customer, its shipment and
/// its invoice, each read by a value of the order: four round trips on
/// every call, none of them a list's per-element follow-up or a count.
/// That is chatty (WL402), naming the queries a denormalisation removes.
#[test]
fn a_request_of_distinct_detail_reads_is_chatty() {
    let mut ops = Vec::new();
    for o in 0..4 {
        let order = rawdoc! {"_id": format!("o{o}"), "customerId": format!("c{o}"), "total": 3};
        ops.push((
            1,
            rawdoc! {"find": "orders", "filter": {"_id": format!("o{o}")}, "limit": 1, "$db": "d"},
            vec![order],
        ));
        ops.push((
            1,
            rawdoc! {"find": "customers", "filter": {"_id": format!("c{o}")}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": format!("c{o}"), "name": "n"}],
        ));
        for c in ["shipments", "invoices"] {
            ops.push((
                1,
                rawdoc! {"find": c, "filter": {"orderId": format!("o{o}")}, "limit": 1, "$db": "d"},
                vec![rawdoc! {"_id": o, "orderId": format!("o{o}")}],
            ));
        }
    }
    let run = run_ops(ops);
    assert_eq!(
        run.patterns,
        vec![("find d.orders {_id: ?string} limit".to_string(), 4, 16)],
        "one request of four operations per call"
    );
    assert_eq!(run.rules, vec![("WL402".into(), "d.orders".into())]);
    let (_, message) = &run.messages[0];
    assert!(
        message
            .contains("4.0 queries per call (4 calls; each query below in more than half of them)")
            && !message.contains("more than once"),
        "{message}"
    );
}

/// A request that reads the same folder and item twice per call (an
/// access check, then a validation, each loading them) is said to read
/// the same thing again, and told to read it once.
#[test]
fn a_read_repeated_within_a_request_is_named_as_such() {
    let mut ops = Vec::new();
    for call in 0..4 {
        let folder = rawdoc! {"_id": format!("f{call}"), "name": "docs", "parentId": "root"};
        let item = rawdoc! {"_id": format!("i{call}"), "folderId": format!("f{call}"), "size": 3};
        ops.push((
            1,
            rawdoc! {"find": "tokens", "filter": {"_id": "t"}, "limit": 1, "comment": "item page", "$db": "d"},
            vec![rawdoc! {"_id": "t", "userId": "u"}],
        ));
        for _ in 0..2 {
            ops.push((
                1,
                rawdoc! {"find": "folders", "filter": {"_id": format!("f{call}")}, "limit": 1, "comment": "item page", "$db": "d"},
                vec![folder.clone()],
            ));
            ops.push((
                1,
                rawdoc! {"find": "items", "filter": {"_id": format!("i{call}")}, "limit": 1, "comment": "item page", "$db": "d"},
                vec![item.clone()],
            ));
        }
    }
    let run = run_ops(ops);
    let chatty = run.said("WL402");
    assert_eq!(chatty.len(), 1, "{:?}", run.messages);
    assert!(
        chatty[0].contains("reads the same thing more than once per call")
            && chatty[0].contains("find d.folders {_id: ?string} limit (×2.0)")
            && chatty[0].contains("read it once and pass it along"),
        "{}",
        chatty[0]
    );
}

/// Untagged, an item's position: the item, its folder read twice (an
/// access check, then a validation) and a count of what sorts before it:
/// three reads, yet the folder is asked for again with the same id in
/// every call. A transfer page reading two accounts of one shape (from,
/// to) asks for two things, not one twice: silent.
#[test]
fn a_read_asked_again_with_the_same_values_is_reported_at_any_size() {
    let mut ops = Vec::new();
    for call in 0..4 {
        let (item, folder) = (format!("i{call}"), format!("f{call}"));
        ops.push((
            1,
            rawdoc! {"find": "items", "filter": {"_id": item.clone()}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": item.clone(), "folderId": folder.clone(), "lowerName": "b"}],
        ));
        for _ in 0..2 {
            ops.push((
                1,
                rawdoc! {"find": "folders", "filter": {"_id": folder.clone()}, "limit": 1, "$db": "d"},
                vec![rawdoc! {"_id": folder.clone(), "name": "docs", "public": true}],
            ));
        }
        ops.push((
            1,
            rawdoc! {"count": "items", "query": {"folderId": folder.clone(), "lowerName": {"$lt": "b"}}, "$db": "d"},
            vec![],
        ));
        let (from, to) = (format!("a{call}"), format!("a{}", call + 10));
        ops.push((
            2,
            rawdoc! {"find": "transfers", "filter": {"_id": call}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": call, "fromId": from.clone(), "toId": to.clone(), "amount": 5}],
        ));
        for account in [from, to] {
            ops.push((
                2,
                rawdoc! {"find": "accounts", "filter": {"_id": account.clone()}, "limit": 1, "$db": "d"},
                vec![rawdoc! {"_id": account, "balance": 10}],
            ));
        }
    }
    let run = run_ops(ops);
    let chatty = run.said("WL402");
    assert_eq!(chatty.len(), 1, "{:?} {:?}", run.messages, run.patterns);
    assert!(
        chatty[0].starts_with(
            "`find d.items {_id: ?string} limit` reads the same thing more than once per call"
        ) && chatty[0].contains("find d.folders {_id: ?string} limit (again in 4 of 4 calls)"),
        "{}",
        chatty[0]
    );
}

/// A driver spreads one request over its pool: the list on one
/// connection, its follow-ups on others, with another page's list in
/// between. Each follow-up joins the request whose result holds its value.
#[test]
fn follow_ups_on_other_connections_join_their_request() {
    let mut ops = Vec::new();
    let parcels = |depot: i32| -> Vec<bson::RawDocumentBuf> {
        (0..4)
            .map(|p| rawdoc! {"_id": depot * 100 + p, "depot": depot, "courierId": bson::oid::ObjectId::from_bytes([depot as u8, p as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])})
            .collect()
    };
    for depot in 0..3 {
        let (a, b) = (parcels(2 * depot), parcels(2 * depot + 1));
        ops.push((
            1,
            rawdoc! {"find": "parcels", "filter": {"depot": 2 * depot}, "$db": "d"},
            a.clone(),
        ));
        ops.push((
            2,
            rawdoc! {"find": "parcels", "filter": {"depot": 2 * depot + 1}, "$db": "d"},
            b.clone(),
        ));
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            for (conn, p) in [(3 + i as u64 % 2, x), (1 + i as u64 % 3, y)] {
                let courier = p.get_object_id("courierId").unwrap();
                ops.push((
                    conn,
                    rawdoc! {"find": "couriers", "filter": {"_id": courier}, "limit": 1, "$db": "d"},
                    vec![rawdoc! {"_id": courier}],
                ));
            }
        }
    }
    let run = run_ops(ops);
    assert_eq!(
        run.patterns,
        vec![("find d.parcels {depot: ?int}".to_string(), 6, 30)],
        "six pages of 1 + 4 operations"
    );
    assert!(
        run.rules.contains(&("WL401".into(), "d.couriers".into())),
        "{:?}",
        run.rules
    );
}

/// Two visitors of one tenant on one pool: one lists their tasks (each
/// carries the tenant's and the project's ids), then the other's request
/// starts with its tenant and project reads on another connection. Those
/// reads share the list's ids by coincidence of scope: they start a
/// request of their own, and do not join the list's.
#[test]
fn a_value_every_row_carries_joins_no_other_connections_request() {
    let mut ops = Vec::new();
    for tenant in 0..3 {
        let t = format!("t{tenant}");
        let tasks: Vec<_> = (0..4)
            .map(|i| rawdoc! {"_id": tenant * 10 + i, "tenantId": t.as_str(), "projectId": format!("p{tenant}"), "assignee": "u"})
            .collect();
        ops.push((
            1,
            rawdoc! {"find": "tasks", "filter": {"tenantId": t.as_str(), "assignee": "u"}, "$db": "d"},
            tasks,
        ));
        ops.push((
            2,
            rawdoc! {"find": "tenants", "filter": {"_id": t.as_str()}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": t.as_str(), "name": "acme"}],
        ));
        ops.push((
            2,
            rawdoc! {"find": "projects", "filter": {"_id": format!("p{tenant}"), "tenantId": t.as_str()}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": format!("p{tenant}"), "tenantId": t.as_str()}],
        ));
    }
    let run = run_ops(ops);
    assert_eq!(
        run.patterns,
        vec![
            (
                "find d.tasks {tenantId: ?string, assignee: ?string}".to_string(),
                3,
                3
            ),
            ("find d.tenants {_id: ?string} limit".to_string(), 3, 6),
        ],
        "each list a request of its own, each tenant read one with its project"
    );
    assert!(run.rules.is_empty(), "{:?}", run.rules);
}

/// A thread page lists 15 replies by 10 authors; then, on other
/// connections, four other visitors' own profile reads ask for users
/// whose ids happen to be listed authors, one at a time. Four lookups of
/// four distinct values do not cover a list of ten: no N+1. Before, any
/// four distinct values "covered" a list, whatever it held.
#[test]
fn a_few_lookups_of_listed_values_are_no_n_plus_one() {
    let author = |a: u8| bson::oid::ObjectId::from_bytes([a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7]);
    let replies: Vec<_> = (0..15u8)
        .map(|i| rawdoc! {"_id": i as i32, "threadId": 1, "authorId": author(i % 10)})
        .collect();
    let mut ops = vec![(
        1,
        rawdoc! {"find": "replies", "filter": {"threadId": 1}, "limit": 20, "$db": "d"},
        replies,
    )];
    for (conn, a) in [(2, 3u8), (3, 5), (2, 7), (4, 9)] {
        ops.push((
            conn,
            rawdoc! {"find": "users", "filter": {"_id": author(a)}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": author(a), "notifications": []}],
        ));
    }
    let run = run_ops(ops);
    assert!(
        !run.rules.contains(&("WL401".into(), "d.users".into())),
        "{:?}",
        run.rules
    );
}

/// A list of six users, each by its own `_id`; then three reads of one
/// listed user's notifications (the signed-in user, request after
/// request): one row's value asked three times is not per-row work. The
/// same three reads for three listed users are an N+1.
#[test]
fn one_rows_value_asked_again_is_no_n_plus_one() {
    let user = |u: u8| bson::oid::ObjectId::from_bytes([u, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5]);
    let run = |asked: [u8; 3]| {
        let users: Vec<_> = (0..6u8)
            .map(|u| rawdoc! {"_id": user(u), "name": format!("user {u}")})
            .collect();
        let ids: Vec<_> = (0..6u8).map(|u| bson::RawBson::ObjectId(user(u))).collect();
        let mut in_ = bson::RawArrayBuf::new();
        for id in ids {
            in_.push(id);
        }
        let mut ops = vec![(
            1,
            rawdoc! {"find": "users", "filter": {"_id": {"$in": in_}}, "$db": "d"},
            users,
        )];
        for u in asked {
            ops.push((
                1,
                rawdoc! {"find": "notifications", "filter": {"user": user(u)}, "$db": "d"},
                vec![rawdoc! {"_id": i32::from(u), "user": user(u), "read": false}],
            ));
        }
        run_ops(ops).rules
    };
    let n_plus_one = ("WL401".to_string(), "d.notifications".to_string());
    assert!(
        !run([2, 2, 2]).contains(&n_plus_one),
        "{:?}",
        run([2, 2, 2])
    );
    assert!(run([1, 2, 3]).contains(&n_plus_one), "{:?}", run([1, 2, 3]));
}

/// A list's request is followed from other connections while it is live.
/// A thread page lists 10 comments by 3 authors; three lookups of those
/// authors right after it, on other connections, are its N+1. The same
/// three lookups each coming after 13 other visitors' operations are
/// those visitors' own reads (their signed-in user), whose values happen
/// to be listed authors: the page was over, nothing follows it.
#[test]
fn a_request_is_followed_from_elsewhere_only_while_it_is_live() {
    let author = |a: u8| bson::oid::ObjectId::from_bytes([a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    let run = |padding: usize| {
        let comments: Vec<_> = (0..10u8)
            .map(|i| rawdoc! {"_id": i as i32, "taskId": 1, "authorId": author(i % 3)})
            .collect();
        let mut ops = vec![(
            1,
            rawdoc! {"find": "comments", "filter": {"taskId": 1}, "limit": 10, "$db": "d"},
            comments,
        )];
        let mut tenant = 0;
        for a in 0..3u8 {
            for _ in 0..padding {
                tenant += 1;
                let t = format!("t{tenant}");
                ops.push((
                    5,
                    rawdoc! {"find": "tenants", "filter": {"_id": t.as_str()}, "limit": 1, "$db": "d"},
                    vec![rawdoc! {"_id": t.as_str()}],
                ));
            }
            ops.push((
                2 + u64::from(a),
                rawdoc! {"find": "users", "filter": {"_id": author(a)}, "limit": 1, "$db": "d"},
                vec![rawdoc! {"_id": author(a)}],
            ));
        }
        run_ops(ops).rules
    };
    let n_plus_one = ("WL401".to_string(), "d.users".to_string());
    assert!(run(0).contains(&n_plus_one), "{:?}", run(0));
    assert!(!run(13).contains(&n_plus_one), "{:?}", run(13));
}

/// Good designs stay silent: a per-request tenant read whose id every
/// listed ticket carries (the next request's first read, not a per-row
/// lookup), a batched `$in` over the page, references that are null, and
/// values of fields that are no references.
#[test]
fn context_values_batches_and_nulls_do_not_make_an_n_plus_one() {
    let mut ops = Vec::new();
    for page in 0..6 {
        let tenant = format!("t{}", page % 2);
        ops.push((
            1,
            rawdoc! {"find": "tenants", "filter": {"_id": tenant.as_str()}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": tenant.as_str(), "plan": "pro"}],
        ));
        // (Odd pages list a project's tickets and their owners in one
        // `$in`: 2 operations per request either way.)
        let (tickets_of, by) = if page % 2 == 0 {
            ("tickets", "tenantId")
        } else {
            ("projects", "projectId")
        };
        if page % 2 == 1 {
            ops.pop();
        }
        let tickets: Vec<_> = (0..8)
            .map(|t| rawdoc! {"_id": page * 10 + t, "tenantId": tenant.as_str(), "ownerId": format!("u{t}"), "parentId": bson::RawBson::Null, "priority": t % 3})
            .collect();
        ops.push((
            1,
            if by == "tenantId" {
                rawdoc! {"find": tickets_of, "filter": {"tenantId": tenant.as_str(), "open": true}, "$db": "d"}
            } else {
                rawdoc! {"find": tickets_of, "filter": {"projectId": tenant.as_str(), "open": true}, "$db": "d"}
            },
            tickets.clone(),
        ));
        if page % 2 == 1 {
            let mut owners = bson::RawArrayBuf::new();
            for t in &tickets {
                owners.push(t.get_str("ownerId").unwrap());
            }
            ops.push((
                1,
                rawdoc! {"find": "users", "filter": {"_id": {"$in": owners}}, "$db": "d"},
                vec![rawdoc! {"_id": "u0"}],
            ));
        }
        // A missing parent resolved as {_id: null}; a lookup by a
        // priority number.
        ops.push((
            1,
            rawdoc! {"find": "tickets_archive", "filter": {"_id": bson::RawBson::Null}, "$db": "d"},
            vec![],
        ));
        ops.push((
            1,
            rawdoc! {"find": "levels", "filter": {"level": 2}, "$db": "d"},
            vec![],
        ));
    }
    let run = run_ops(ops);
    assert_eq!(run.rules, vec![], "{:?}", run.patterns);
    let tenants = run
        .patterns
        .iter()
        .find(|p| p.0.starts_with("find d.tenants"))
        .expect("the tenant read roots each request");
    assert_eq!((tenants.1, tenants.2), (3, 6), "{:?}", run.patterns);
}

/// Operations of one trace are one request whatever their values, and a
/// comment that carries the trace context names no pattern.
#[test]
fn operations_of_one_trace_are_one_request() {
    let mut ops = Vec::new();
    for t in 0..4 {
        let comment = format!("traceparent='00-{:032x}-00f067aa0ba902b7-01'", t + 1);
        for coll in ["a", "b", "c"] {
            ops.push((
                1 + t as u64 % 2,
                rawdoc! {"find": coll, "filter": {"k": t}, "comment": comment.as_str(), "$db": "d"},
                vec![rawdoc! {"_id": t}],
            ));
        }
    }
    let run = run_ops(ops);
    assert_eq!(
        run.patterns,
        vec![("find d.a {k: ?int}".to_string(), 4, 12)],
        "four traces of three operations"
    );
}

/// A comment on every operation of a service (more shapes than any request
/// has) names no request: past the line, its operations are named by
/// their shapes and rebuilt into requests like untagged ones.
#[test]
fn a_comment_on_every_operation_of_a_service_names_no_request() {
    let mut ops = Vec::new();
    for round in 0..2 {
        for coll in 0..40 {
            ops.push((
                1,
                rawdoc! {"find": format!("c{coll}"), "filter": {"k": round}, "comment": "billing-service", "$db": "d"},
                vec![rawdoc! {"_id": coll}],
            ));
        }
    }
    let run = run_ops(ops);
    let service = run.patterns.iter().find(|p| p.0 == "billing-service");
    assert!(
        service.is_none_or(|p| p.2 <= 32),
        "the tag names at most the shapes seen before it was told apart: {service:?}"
    );
    let by_shape = run
        .patterns
        .iter()
        .filter(|p| p.0.starts_with("find d.c"))
        .count();
    assert_eq!(by_shape, 40, "{:?}", run.patterns);
}

/// A list page that fetches what its rows reference with one `$in` per
/// collection (`populate`, `select_related`) makes 3 round trips per call
/// and is not chatty: the batches are WL401's fix. The same page looking
/// up each row's author is.
#[test]
fn batched_fetches_for_a_list_are_not_chatty() {
    let page = |batched: bool| -> Vec<Op> {
        let mut ops = Vec::new();
        for p in 0..4 {
            let posts: Vec<_> = (0..5)
                .map(|i| rawdoc! {"_id": p * 10 + i, "title": "t", "authorId": format!("u{i}"), "tagIds": [format!("t{i}"), format!("t{}", i + 1)]})
                .collect();
            ops.push((
                1,
                rawdoc! {"find": "posts", "filter": {"blog": p}, "$db": "d"},
                posts.clone(),
            ));
            if batched {
                let (mut authors, mut tags) = (bson::RawArrayBuf::new(), bson::RawArrayBuf::new());
                for post in &posts {
                    authors.push(post.get_str("authorId").unwrap());
                    for t in post.get_array("tagIds").unwrap() {
                        tags.push(t.unwrap().as_str().unwrap());
                    }
                }
                ops.push((
                    1,
                    rawdoc! {"find": "users", "filter": {"_id": {"$in": authors}}, "$db": "d"},
                    vec![rawdoc! {"_id": "u0"}],
                ));
                ops.push((
                    1,
                    rawdoc! {"find": "tags", "filter": {"_id": {"$in": tags}}, "$db": "d"},
                    vec![rawdoc! {"_id": "t0"}],
                ));
            } else {
                for post in &posts {
                    let author = post.get_str("authorId").unwrap();
                    ops.push((1, rawdoc! {"find": "users", "filter": {"_id": author}, "limit": 1, "$db": "d"}, vec![rawdoc! {"_id": author}]));
                }
            }
        }
        ops
    };
    let batched = run_ops(page(true));
    assert_eq!(
        batched.patterns,
        vec![("find d.posts {blog: ?int}".to_string(), 4, 12)],
        "one request of three operations per page"
    );
    assert_eq!(batched.rules, vec![], "{:?}", batched.patterns);
    // The same page looking up each row's author: the N+1, and only the
    // N+1 (it is the whole of the page's cost).
    let looped = run_ops(page(false));
    assert_eq!(
        looped.rules,
        vec![("WL401".into(), "d.users".into())],
        "{:?}",
        looped.patterns
    );
}

/// A task page behind an auth step: the signed-in user read by `_id`, the
/// workspace's tasks, then each task's assignee read by `_id` with the
/// auth read's very shape. Values decide before shapes: the per-row reads
/// take one task's own value and follow the list; the next page's auth
/// read asks for the signed-in user again (what the root returned) and
/// starts the next call. An N+1 on users, one request per page.
#[test]
fn a_root_shaped_read_by_one_elements_value_follows_the_list() {
    let mut ops = Vec::new();
    for page in 0..4 {
        let me = "u0";
        ops.push((
            1,
            rawdoc! {"find": "users", "filter": {"_id": me}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": me, "workspaceId": "w1", "name": "me"}],
        ));
        // The signed-in user is the assignee of one task of each page.
        let tasks: Vec<_> = (0..5)
            .map(|t| rawdoc! {"_id": format!("t{page}-{t}"), "workspaceId": "w1", "title": "fix it", "assigneeId": format!("u{}", (t + page) % 6)})
            .collect();
        ops.push((
            1,
            rawdoc! {"find": "tasks", "filter": {"workspaceId": "w1", "page": page}, "$db": "d"},
            tasks.clone(),
        ));
        for task in &tasks {
            let who = task.get_str("assigneeId").unwrap();
            ops.push((
                1,
                rawdoc! {"find": "users", "filter": {"_id": who}, "limit": 1, "$db": "d"},
                vec![rawdoc! {"_id": who, "name": "n"}],
            ));
        }
    }
    let run = run_ops(ops);
    assert_eq!(run.rules, vec![("WL401".into(), "d.users".into())]);
    let root = run
        .patterns
        .iter()
        .find(|p| p.0.starts_with("find d.users"))
        .unwrap();
    assert_eq!(root.1, 4, "one call per page: {:?}", run.patterns);
}

/// Posts whose tags come from a small shared vocabulary, each post's tags
/// fetched with an `$in` of its own `tagIds`: per element, however many
/// of those tags other posts share. The one `$in` of every post's tags is
/// the batch.
#[test]
fn an_in_of_one_elements_array_is_per_element_whatever_others_share() {
    let posts = |p: i32| -> Vec<bson::RawDocumentBuf> {
        (0..6)
            .map(|i| rawdoc! {"_id": format!("p{p}-{i}"), "tagIds": [format!("t{}", i % 4), format!("t{}", (i + 1) % 4)]})
            .collect()
    };
    let page = |batched: bool| -> Vec<Op> {
        let mut ops = Vec::new();
        for p in 0..3 {
            let list = posts(p);
            ops.push((
                1,
                rawdoc! {"find": "posts", "filter": {"blog": p}, "$db": "d"},
                list.clone(),
            ));
            if batched {
                let mut all = bson::RawArrayBuf::new();
                for t in 0..4 {
                    all.push(format!("t{t}"));
                }
                ops.push((
                    1,
                    rawdoc! {"find": "tags", "filter": {"_id": {"$in": all}}, "$db": "d"},
                    vec![rawdoc! {"_id": "t0"}],
                ));
            } else {
                for post in &list {
                    let ids = post.get_array("tagIds").unwrap().to_owned();
                    ops.push((
                        1,
                        rawdoc! {"find": "tags", "filter": {"_id": {"$in": ids}}, "$db": "d"},
                        vec![rawdoc! {"_id": "t0"}],
                    ));
                }
            }
        }
        ops
    };
    assert_eq!(
        run_ops(page(false)).rules,
        vec![("WL401".into(), "d.tags".into())]
    );
    assert_eq!(run_ops(page(true)).rules, vec![]);
}

/// A course page: the course's reviews, then the course's discussion
/// threads by the `courseId` the reviews were read by (and every review
/// carries), once per page, whatever the number of reviews: the page's
/// context, not an N+1, even over many one-review pages.
#[test]
fn a_value_the_list_was_selected_by_is_context_once_per_list() {
    let mut ops = Vec::new();
    for view in 0..12 {
        let course = format!("c{}", view % 4);
        let reviews: Vec<_> = (0..(1 + view % 3))
            .map(
                |r| rawdoc! {"_id": format!("r{view}-{r}"), "courseId": course.clone(), "stars": 4},
            )
            .collect();
        ops.push((
            1,
            rawdoc! {"find": "reviews", "filter": {"courseId": course.clone()}, "$db": "d"},
            reviews,
        ));
        ops.push((
            1,
            rawdoc! {"find": "threads", "filter": {"courseId": course.clone()}, "$db": "d"},
            vec![rawdoc! {"_id": view, "courseId": course.clone()}],
        ));
    }
    let run = run_ops(ops);
    assert_eq!(run.rules, vec![], "{:?}", run.patterns);
}

/// A feed importer: per item, a find by its natural key, then an insert
/// when nothing was found or an update of the document found (WL404); the
/// same feed written with one upsert per item, items whose update keeps a
/// value the read returned (the read feeds the write), a check that only
/// ever inserts, and edits that never insert are silent.
#[test]
fn a_read_by_key_then_insert_or_update_is_one_upsert() {
    // Item 0 is new; items 1 to 7 were stored by an earlier run.
    let feed = |how: &str| -> Vec<Op> {
        let mut ops = Vec::new();
        for i in 0..8 {
            let sku = format!("A-{}", i % 5);
            let key = rawdoc! {"supplierId": "s1", "sku": sku.clone()};
            let stored = how != "names" && i >= 1;
            if how == "upsert" {
                ops.push((1, rawdoc! {"update": "products", "updates": [{"q": key.clone(), "u": {"$set": {"price": i}}, "upsert": true}], "$db": "d"}, vec![]));
                continue;
            }
            let found = if stored {
                vec![
                    rawdoc! {"_id": i % 5, "supplierId": "s1", "sku": sku.clone(), "price": 100 + i % 5},
                ]
            } else {
                vec![]
            };
            ops.push((
                1,
                rawdoc! {"find": "products", "filter": key.clone(), "limit": 1, "$db": "d"},
                found,
            ));
            if !stored {
                ops.push((1, rawdoc! {"insert": "products", "documents": [{"supplierId": "s1", "sku": sku.clone(), "price": i}], "$db": "d"}, vec![]));
            } else if how == "fed" {
                // The old price kept as history: the read is needed.
                ops.push((1, rawdoc! {"update": "products", "updates": [{"q": {"_id": i % 5}, "u": {"$set": {"price": i, "previousPrice": 100 + i % 5}}}], "$db": "d"}, vec![]));
            } else {
                ops.push((1, rawdoc! {"update": "products", "updates": [{"q": {"_id": i % 5}, "u": {"$set": {"price": i}}}], "$db": "d"}, vec![]));
            }
        }
        ops
    };
    let read = run_ops(feed("read"));
    assert_eq!(read.rules, vec![("WL404".into(), "d.products".into())]);
    // It names the pattern of the writes it is about, as the other
    // findings name theirs (the read's shape is its `shape`).
    let (_, named) = &read.named[0];
    assert!(
        !named.is_empty()
            && named
                .iter()
                .all(|p| p.starts_with("update d.products") || p.starts_with("insert d.products")),
        "{named:?}"
    );
    assert_eq!(run_ops(feed("upsert")).rules, vec![]);
    assert_eq!(run_ops(feed("fed")).rules, vec![]);
    // A name checked free before each insert, never an update: a
    // uniqueness check, not an insert-or-update.
    assert_eq!(run_ops(feed("names")).rules, vec![]);
    // Loads by key then edits, never an insert: not a de-duplication.
    let edits: Vec<Op> = feed("read").into_iter().skip(2).collect();
    assert_eq!(run_ops(edits).rules, vec![]);
}

/// Subscribing to threads, get-or-create: per click a find by {threadId,
/// userId}, an insert when nothing was found, nothing written when it
/// was (an item left as found is counted at the next read). A race unless a unique index covers the key: silent with one
/// (created, or listed), a warning when every index is known (the
/// database dropped, then a plain index created), a note when no index
/// traffic was seen; an `$or` key is judged by each branch.
#[test]
fn a_get_or_create_is_judged_by_the_unique_indexes_seen() {
    let clicks = |indexes: Vec<Op>, or: bool| -> Vec<Op> {
        let mut ops = indexes;
        for i in 0..8 {
            let (thread, user) = (i % 3, format!("u{}", i % 4));
            let key = if or {
                rawdoc! {"$or": [{"identifier": format!("t{thread}{user}")}, {"threadId": thread, "userId": user.clone()}]}
            } else {
                rawdoc! {"threadId": thread, "userId": user.clone()}
            };
            // Clicks 1, 4 and 6 find a subscription already; the others
            // subscribe.
            let found = if [1, 4, 6].contains(&i) {
                vec![
                    rawdoc! {"_id": i, "identifier": format!("t{thread}{user}"), "threadId": thread, "userId": user.clone()},
                ]
            } else {
                vec![]
            };
            ops.push((
                1,
                rawdoc! {"find": "subs", "filter": key, "limit": 1, "$db": "d"},
                found.clone(),
            ));
            if found.is_empty() {
                ops.push((1, rawdoc! {"insert": "subs", "documents": [{"identifier": format!("t{thread}{user}"), "threadId": thread, "userId": user.clone()}], "$db": "d"}, vec![]));
            }
        }
        ops
    };
    let create = |unique: bool, fields: &[&str]| -> Op {
        let mut key = bson::Document::new();
        for f in fields {
            key.insert(*f, 1);
        }
        let body = bson::doc! {"createIndexes": "subs", "indexes": [{"key": key, "name": "k", "unique": unique}], "$db": "d"};
        (1, bson::RawDocumentBuf::try_from(&body).unwrap(), vec![])
    };
    let drop_db = || -> Op { (1, rawdoc! {"dropDatabase": 1, "$db": "d"}, vec![]) };
    let said = |run: &Run| -> Vec<String> { run.said("WL404").into_iter().cloned().collect() };
    // A unique index created on the pair, or on a field of it: silent.
    let unique = run_ops(clicks(
        vec![drop_db(), create(true, &["threadId", "userId"])],
        false,
    ));
    assert_eq!(unique.rules, vec![], "{:?}", unique.messages);
    // The same index, not unique, every index known: a warning.
    let plain = run_ops(clicks(
        vec![drop_db(), create(false, &["threadId", "userId"])],
        false,
    ));
    let m = said(&plain);
    assert!(
        m.len() == 1
            && m[0].contains("left as found (3)")
            && m[0].contains("no unique index covers"),
        "{m:?}"
    );
    // No index traffic: said so.
    let m = said(&run_ops(clicks(vec![], false)));
    assert!(
        m.len() == 1 && m[0].contains("has seen neither a unique index"),
        "{m:?}"
    );
    // A listing with the unique index: silent.
    let listed: Op = (
        1,
        rawdoc! {"listIndexes": "subs", "$db": "d"},
        vec![
            rawdoc! {"v": 2, "key": {"_id": 1}, "name": "_id_"},
            rawdoc! {"v": 2, "key": {"threadId": 1, "userId": 1}, "name": "k", "unique": true},
        ],
    );
    assert_eq!(run_ops(clicks(vec![listed.clone()], false)).rules, vec![]);
    // An `$or` key: covered on one branch only, not covered.
    let m = said(&run_ops(clicks(
        vec![drop_db(), create(true, &["threadId", "userId"])],
        true,
    )));
    assert!(
        m.len() == 1 && m[0].contains("no unique index covers"),
        "{m:?}"
    );
    let both = vec![
        drop_db(),
        create(true, &["threadId", "userId"]),
        create(true, &["identifier"]),
    ];
    assert_eq!(run_ops(clicks(both, true)).rules, vec![]);
    // A plain index created on the key (not waited for), or a unique one
    // on other fields, the others unknown: said as it is, never that no
    // createIndexes went by.
    let m = said(&run_ops(clicks(
        vec![create(false, &["threadId", "userId"])],
        false,
    )));
    assert!(
        m.len() == 1
            && m[0].contains("has seen neither a unique index")
            && !m[0].contains("no createIndexes"),
        "{m:?}"
    );
    let m = said(&run_ops(clicks(vec![create(true, &["identifier"])], false)));
    assert!(
        m.len() == 1 && m[0].contains("none of the unique indexes seen created"),
        "{m:?}"
    );
}

/// A test suite empties its collections between tests, and a later test
/// inserts the very key an earlier one missed (a token made of the same
/// user and second): the emptying ends the read, so the insert is no
/// get-or-create. Without the emptying the same traffic is one.
#[test]
fn an_insert_after_the_collection_was_emptied_does_not_answer_the_read() {
    let tests = |emptied: bool| -> Vec<Op> {
        let mut ops = Vec::new();
        for i in 0..6 {
            let token = format!("jwt{}", i / 2);
            // Odd tests find their token (it was inserted by the test);
            // even ones miss it.
            let found = if i % 2 == 1 {
                vec![rawdoc! {"_id": i, "token": token.clone(), "type": "refresh"}]
            } else {
                vec![]
            };
            ops.push((
                1,
                rawdoc! {"find": "tokens", "filter": {"token": token.clone(), "type": "refresh"}, "limit": 1, "$db": "d"},
                found,
            ));
            if emptied {
                ops.push((
                    2,
                    rawdoc! {"delete": "tokens", "deletes": [{"q": {}, "limit": 0}], "$db": "d"},
                    vec![],
                ));
            }
            ops.push((
                2,
                rawdoc! {"insert": "tokens", "documents": [{"token": format!("jwt{}", (i + 1) / 2), "type": "refresh"}], "$db": "d"},
                vec![],
            ));
        }
        ops
    };
    let wl404 = |run: Run| run.rules.into_iter().filter(|(r, _)| r == "WL404").count();
    assert_eq!(wl404(run_ops(tests(false))), 1);
    assert_eq!(wl404(run_ops(tests(true))), 0);
}

/// Treatments of two kinds told apart by `eventType`, one of them with an
/// optional field (two field sets of one kind, sharing its `eventType`
/// value), and replacements without `_id` (what a save sends, not a
/// stored kind): one discriminator, nothing to report. The same kinds
/// without the field are reported.
#[test]
fn nested_field_sets_are_one_kind_and_replacements_no_kind() {
    let events = |discriminated: bool| -> Vec<Op> {
        let mut ops = Vec::new();
        for i in 0..30 {
            let mut doc = match i % 3 {
                0 => rawdoc! {"_id": i, "notes": "n", "created_at": "t"},
                1 => rawdoc! {"_id": i, "notes": "n", "created_at": "t", "glucose": 5},
                _ => rawdoc! {"_id": i, "carbs": 30, "insulin": 2, "food": "f", "absorption": 3},
            };
            if discriminated {
                doc.append(
                    bson::cstr!("eventType"),
                    if i % 3 == 2 { "Meal" } else { "Note" },
                );
            }
            ops.push((
                1,
                rawdoc! {"insert": "treatments", "documents": [doc.clone()], "$db": "d"},
                vec![],
            ));
            // An upsert's replacement: the document without its `_id`.
            let mut full = bson::Document::try_from(doc.as_ref()).unwrap();
            full.remove("_id");
            let body = bson::RawDocumentBuf::try_from(&full).unwrap();
            ops.push((1, rawdoc! {"update": "treatments", "updates": [{"q": {"_id": i}, "u": body, "upsert": true}], "$db": "d"}, vec![]));
        }
        ops
    };
    assert_eq!(run_ops(events(true)).rules, vec![]);
    assert_eq!(
        run_ops(events(false)).rules,
        vec![("WL505".into(), "d.treatments".into())]
    );
}

/// A dashboard's `Promise.all`: six counts of one shape, one per status,
/// sent on six pooled connections before any is answered, on every call
/// (each call's "since" moment its own): one `$group` answers them
/// (WL402, naming the burst). The same
/// concurrency with constants that change every call (six visitors'
/// counts at once) is no burst.
#[test]
fn one_shape_sent_at_once_with_the_same_constants_is_a_burst() {
    let run = |same: bool, latest: bool| -> Vec<(String, String, String, String)> {
        let k = knowledge();
        let mut e = Engine::new(k.clone(), None);
        let t = Instant::now();
        let mut id = 0;
        for call in 0..5 {
            let mut sent = Vec::new();
            for (i, status) in ["new", "paid", "packed", "shipped", "delivered", "returned"]
                .iter()
                .enumerate()
            {
                id += 1;
                let value = if same {
                    status.to_string()
                } else {
                    format!("{status}-{call}")
                };
                // Every member of a call asks since the same moment, a
                // new one each call (computed from the clock).
                let body = if latest {
                    // The latest order of each status: one limited read each.
                    rawdoc! {"find": "orders", "filter": {"status": value}, "sort": {"at": -1}, "limit": 1, "$db": "d"}
                } else {
                    rawdoc! {"aggregate": "orders", "pipeline": [{"$match": {"status": value, "since": {"$gte": call}}}, {"$group": {"_id": 1, "n": {"$sum": 1}}}], "cursor": {}, "$db": "d"}
                };
                let conn = i as u64 + 1;
                e.message(
                    conn,
                    Direction::Request,
                    t,
                    Bytes::from(encode(id, 0, 0, body.as_bytes(), &[])),
                );
                sent.push((conn, id));
            }
            for (conn, id) in sent {
                let reply = rawdoc! {"cursor": {"id": 0i64, "ns": "d.orders", "firstBatch": [{"_id": 1, "n": 3}]}, "ok": 1.0};
                e.message(
                    conn,
                    Direction::Reply,
                    t,
                    Bytes::from(encode(1000 + id, id, 0, reply.as_bytes(), &[])),
                );
            }
        }
        e.flush();
        e.tick(t);
        let k = k.lock().unwrap();
        k.findings
            .all()
            .map(|f| {
                (
                    f.rule.to_string(),
                    f.namespace.clone(),
                    f.message.clone(),
                    f.advice.clone(),
                )
            })
            .collect()
    };
    let counts = run(true, false);
    assert_eq!(counts.len(), 1);
    assert_eq!((&*counts[0].0, &*counts[0].1), ("WL402", "d.orders"));
    assert!(
        counts[0].2.contains("an $in, or one $group") && counts[0].2.contains(" times at once ("),
        "{}",
        counts[0].2
    );
    // The advice is the burst's, not the rule's every case.
    assert!(
        counts[0].3.starts_with("Send one query") && !counts[0].3.contains("Denormalize"),
        "{}",
        counts[0].3
    );
    // Each cut with a limit: not an $in, one aggregate.
    let latest = run(true, true);
    assert_eq!(latest.len(), 1, "{latest:?}");
    assert!(
        latest[0].2.contains("not an $in")
            && latest[0].2.contains("$group by that field with $first"),
        "{}",
        latest[0].2
    );
    assert!(
        latest[0].3.starts_with("Send one aggregate"),
        "{}",
        latest[0].3
    );
    assert_eq!(run(false, false), vec![]);
}

/// An API whose every request reads its token, then the token's user,
/// then does one endpoint's work by the user's id: the user's folders, or
/// the user's items. Untagged, each request is rooted at the token read;
/// once that root has been seen followed by the same user read in every
/// request and by different work in different ones, each request is
/// named by its first operation that is not that context, so each
/// endpoint is its own pattern (the first requests, before that is
/// known, stay on the token's).
#[test]
fn requests_after_the_same_context_reads_are_named_by_their_own_work() {
    let mut ops = Vec::new();
    for i in 0..24 {
        let token = format!("tok{}", i % 3);
        let user = format!("u{}", i % 3);
        ops.push((
            1,
            rawdoc! {"find": "tokens", "filter": {"_id": token.as_str()}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": token.as_str(), "userId": user.as_str()}],
        ));
        ops.push((
            1,
            rawdoc! {"find": "users", "filter": {"_id": user.as_str()}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": user.as_str(), "login": "l"}],
        ));
        let raw = |d: bson::Document| bson::RawDocumentBuf::try_from(&d).unwrap();
        let (coll, field) = if i % 2 == 0 {
            ("folders", "ownerId")
        } else {
            ("items", "creatorId")
        };
        ops.push((
            1,
            raw(bson::doc! {"find": coll, "filter": {field: user.as_str()}, "$db": "d"}),
            vec![
                raw(bson::doc! {"_id": format!("{coll}{i}"), field: user.as_str()}),
                raw(bson::doc! {"_id": format!("{coll}x{i}"), field: user.as_str()}),
            ],
        ));
    }
    let run = run_ops(ops);
    let calls = |name: &str| run.patterns.iter().find(|p| p.0 == name).map_or(0, |p| p.1);
    let (tokens, folders, items) = (
        calls("find d.tokens {_id: ?string} limit"),
        calls("find d.folders {ownerId: ?string}"),
        calls("find d.items {creatorId: ?string}"),
    );
    assert_eq!(tokens + folders + items, 24, "{:?}", run.patterns);
    assert!(folders >= 6 && items >= 6, "{:?}", run.patterns);
    assert!(tokens <= 10, "{:?}", run.patterns);
    assert!(run.rules.is_empty(), "{:?}", run.rules);
}

/// The handshake's application name tells a test runner's workers apart
/// (see `analysis::suite`): it stays with its connection across the sweep
/// of idle connections that may come before the first operation, and a
/// claimed request gives its connection to a test until its next claim.
#[test]
fn operations_go_to_the_test_of_their_worker_or_their_claim() {
    use wirelint::analysis::suite::Marker;
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let at = |ms: u64| t + Duration::from_millis(ms);
    let mark = |worker: &str, test: Option<&str>, request_id: Option<i32>, when: Instant| {
        let marker = Marker {
            worker: Some(worker.to_string()),
            test: test.map(str::to_string),
            request_id,
            ..Marker::default()
        };
        k.lock().unwrap().suite.mark(&marker, when);
    };
    let hello =
        rawdoc! {"hello": 1, "client": {"application": {"name": "wirelint-gw1"}}, "$db": "admin"};
    e.message(
        1,
        Direction::Request,
        at(0),
        Bytes::from(encode(1, 0, 0, hello.as_bytes(), &[])),
    );
    let ok = rawdoc! {"ok": 1.0};
    e.message(
        1,
        Direction::Reply,
        at(0),
        Bytes::from(encode(2, 1, 0, ok.as_bytes(), &[])),
    );
    // A sweep of idle connections between the handshake and the first
    // operation.
    e.tick(at(1000));
    let later = at(2000);
    mark("wirelint-gw1", Some("test_orders"), None, later);
    let find = rawdoc! {"find": "orders", "filter": {"shop": 1}, "$db": "d"};
    round_trip_at(
        &mut e,
        1,
        10,
        &find,
        batch(2),
        later + Duration::from_millis(1),
    );
    // Connection 2 has no name: a claim on its request 20 gives it a test.
    mark("anything", Some("test_claimed"), Some(20), later);
    round_trip_at(
        &mut e,
        2,
        20,
        &find,
        batch(2),
        later + Duration::from_millis(2),
    );
    round_trip_at(
        &mut e,
        2,
        21,
        &find,
        batch(2),
        later + Duration::from_millis(3),
    );
    let k = k.lock().unwrap();
    let ops: Vec<(&str, u64)> = k
        .suite
        .tests()
        .iter()
        .map(|t| (t.id.as_str(), t.operations))
        .collect();
    assert_eq!(ops, [("test_orders", 1), ("test_claimed", 2)]);
}

/// A hello and its reply on connection `conn`.
fn hello(e: &mut Engine, conn: u64, id: i32, reply: &bson::RawDocumentBuf) {
    let t = Instant::now();
    let request = rawdoc! {"hello": 1, "$db": "admin"};
    e.message(
        conn,
        Direction::Request,
        t,
        Bytes::from(encode(id, 0, 0, request.as_bytes(), &[])),
    );
    e.message(
        conn,
        Direction::Reply,
        t,
        Bytes::from(encode(1000 + id, id, 0, reply.as_bytes(), &[])),
    );
}

/// The first hello reply that names a platform sets the target (RU are
/// estimated from then on), and no later one changes it; a reply that
/// names none keeps MongoDB's, said once; a target that was set is never
/// replaced by a detected one. Nothing is priced outside `cosmos-ru`.
#[test]
fn the_target_is_detected_from_the_first_hello_reply() {
    use wirelint::analysis::target::{Target, TargetSource};
    let cosmos = rawdoc! {
        "ismaster": true, "maxWireVersion": 13, "minWireVersion": 0,
        "hosts": ["acct-westus.mongo.cosmos.azure.com:10255"], "setName": "globaldb",
        "me": "acct-westus.mongo.cosmos.azure.com:10255", "ok": 1.0
    };
    let find = rawdoc! {"find": "c", "filter": {"a": 1}, "comment": "Q", "$db": "d"};

    // Unknown first: MongoDB's, and the question is settled.
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    hello(
        &mut e,
        1,
        1,
        &rawdoc! {"isWritablePrimary": true, "maxWireVersion": 21, "ok": 1.0},
    );
    hello(&mut e, 2, 2, &cosmos);
    round_trip(&mut e, 1, 3, &find, batch(2));
    e.flush();
    {
        let k = k.lock().unwrap();
        assert_eq!(k.target.target, Target::MongoDb);
        assert_eq!(k.target.source, TargetSource::Default);
        assert_eq!(k.patterns.get("Q").unwrap().request_units, 0.0);
    }

    // Cosmos DB first: detected, and its operations priced.
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    hello(&mut e, 1, 1, &cosmos);
    round_trip(&mut e, 1, 3, &find, batch(2));
    e.flush();
    {
        let k = k.lock().unwrap();
        assert_eq!(k.target.target, Target::CosmosRu);
        assert_eq!(k.target.source, TargetSource::Detected);
        let ru = k.patterns.get("Q").unwrap().request_units;
        assert!(ru > 1.0 && ru < 3.0, "{ru}");
    }

    // Set: a Cosmos DB hello does not change it.
    let k = knowledge();
    let settings = wirelint::analysis::Settings {
        target: Some(Target::DocumentDb),
        ..Default::default()
    };
    k.lock().unwrap().configure(&settings);
    let mut e = Engine::new(k.clone(), None);
    hello(&mut e, 1, 1, &cosmos);
    round_trip(&mut e, 1, 3, &find, batch(2));
    e.flush();
    let k = k.lock().unwrap();
    assert_eq!(k.target.target, Target::DocumentDb);
    assert_eq!(k.target.source, TargetSource::Set);
    assert_eq!(k.patterns.get("Q").unwrap().request_units, 0.0);
}

/// Under Cosmos DB (RU), a partition-key value whose documents, at the
/// rate seen over hours, would reach the 20 GB logical-partition limit
/// within a year is reported (WL205), without its value; the same inserts
/// spread over many values, or seen for minutes only (a test suite), are
/// not; under MongoDB nothing is judged.
#[test]
fn a_logical_partition_growing_towards_20_gb_is_reported() {
    use wirelint::analysis::partition::KeyKind;
    use wirelint::analysis::target::Target;
    // 1,000 inserts of a 100 KB document, one a minute from `start`:
    // about 100 MB in 16.6 h, 145 MB a day, 20 GB in about 140 days.
    let run = |target: Target, tenants: u32, seconds_apart: u64| {
        let k = Arc::new(Mutex::new(Knowledge::with_keys(
            wirelint::rules::all(),
            RuleSettings::default(),
            false,
            Caps::default(),
            wirelint::analysis::partition::PartitionKeys::from_config([(
                "d.events".to_string(),
                vec!["tenant".to_string()],
                KeyKind::Cosmos,
            )]),
        )));
        k.lock().unwrap().configure(&wirelint::analysis::Settings {
            target: Some(target),
            ..Default::default()
        });
        let mut e = Engine::new(k.clone(), None);
        let start = Instant::now();
        let payload = "x".repeat(100 * 1024);
        for i in 0..1000u32 {
            let t = start + Duration::from_secs(seconds_apart * u64::from(i));
            let insert = rawdoc! {
                "insert": "events",
                "documents": [{"_id": i as i64, "tenant": format!("t{}", i % tenants), "body": payload.as_str()}],
                "$db": "d"
            };
            e.message(
                1,
                Direction::Request,
                t,
                Bytes::from(encode(i as i32 + 1, 0, 0, insert.as_bytes(), &[])),
            );
            let ok = rawdoc! {"n": 1, "ok": 1.0};
            e.message(
                1,
                Direction::Reply,
                t,
                Bytes::from(encode(
                    100_000 + i as i32,
                    i as i32 + 1,
                    0,
                    ok.as_bytes(),
                    &[],
                )),
            );
        }
        e.flush();
        let k = k.lock().unwrap();
        let found: Vec<_> = k
            .findings
            .all()
            .filter(|f| f.rule == "WL205")
            .cloned()
            .collect();
        found
    };
    let hot = run(Target::CosmosRu, 1, 60);
    assert_eq!(hot.len(), 1, "{hot:#?}");
    let f = &hot[0];
    assert_eq!(f.namespace, "d.events");
    let days = f.evidence["days_to_limit"].as_u64().unwrap();
    assert!((120..=160).contains(&days), "{days}: {}", f.message);
    assert!(
        f.message
            .contains("one value of the partition key [tenant]")
            && f.message.contains("100 % of the bytes inserted"),
        "{}",
        f.message
    );
    assert!(!serde_json::to_string(f).unwrap().contains("\"t0\""));
    // Spread over 100 tenants: each would take about 38 years.
    assert!(run(Target::CosmosRu, 100, 60).is_empty());
    // The same bytes in 17 minutes: too short to judge a rate by.
    assert!(run(Target::CosmosRu, 1, 1).is_empty());
    // No such limit on MongoDB.
    assert!(run(Target::MongoDb, 1, 60).is_empty());
}

/// An update of `coll` with `update`, answered `nModified: 1`.
fn update_at(e: &mut Engine, id: i32, coll: &str, update: bson::Document, t: Instant) {
    let body = bson::RawDocumentBuf::try_from(&bson::doc! {
        "update": coll, "updates": [{"q": {"_id": id}, "u": update}], "$db": "chat"
    })
    .unwrap();
    e.message(
        1,
        Direction::Request,
        t,
        Bytes::from(encode(id, 0, 0, body.as_bytes(), &[])),
    );
    let reply = rawdoc! {"n": 1, "nModified": 1, "ok": 1.0};
    e.message(
        1,
        Direction::Reply,
        t,
        Bytes::from(encode(1000 + id, id, 0, reply.as_bytes(), &[])),
    );
}

/// Ids used as field names (`newMessages.<groupId>`): one pattern for all
/// of them, WL104 on the field, and no id anywhere in the report; a map
/// keyed by a few fixed names (`title.en`) stays silent.
#[test]
fn ids_as_field_names_are_one_pattern_a_finding_and_never_shown() {
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    let groups: Vec<String> = (0..6)
        .map(|i| format!("65a0c0ffee0011223344{i:04x}"))
        .collect();
    for (i, g) in groups.iter().enumerate() {
        let mut inc = bson::Document::new();
        inc.insert(format!("newMessages.{g}"), 1);
        update_at(&mut e, i as i32 + 1, "users", bson::doc! {"$inc": inc}, t);
        let mut set = bson::Document::new();
        set.insert(["title.en", "title.fr"][i % 2], "x");
        update_at(&mut e, i as i32 + 100, "pages", bson::doc! {"$set": set}, t);
    }
    e.flush();
    let k = k.lock().unwrap();
    let report = wirelint::report::Report::build(&k, &Default::default(), "test");
    let found: Vec<(&str, &str, &str)> = report
        .findings
        .iter()
        .map(|f| (f.rule.as_str(), f.namespace.as_str(), f.subject.as_str()))
        .collect();
    assert_eq!(found, [("WL104", "chat.users", "newMessages")]);
    let users: Vec<&str> = report
        .patterns
        .iter()
        .map(|p| p.name.as_str())
        .filter(|n| n.contains("chat.users"))
        .collect();
    assert_eq!(
        users,
        ["update chat.users {_id: ?int} {$inc: {newMessages.<id>: ?int}}"]
    );
    let json = serde_json::to_string(&report).unwrap();
    let text = wirelint::report::table::text(&report);
    for g in &groups {
        assert!(
            !json.contains(g.as_str()) && !text.contains(g.as_str()),
            "{g} shown"
        );
    }
}

/// The text report leads with the findings; past 20 patterns it lists
/// those with findings and sums up the rest in one line, which
/// `--all-patterns` lists; with no partition key known anywhere, no
/// Partitions column says `unknown` on every row, one line says why.
#[test]
fn the_text_report_leads_with_findings_and_sums_up_quiet_patterns() {
    use wirelint::report::table::{text, text_with, Layout, PATTERNS_SHOWN};
    let k = knowledge();
    let mut e = Engine::new(k.clone(), None);
    let t = Instant::now();
    // 30 quiet patterns: finds on 30 collections.
    for i in 0..30 {
        let body = bson::RawDocumentBuf::try_from(
            &bson::doc! {"find": format!("quiet{i}"), "filter": {"a": 1}, "$db": "shop"},
        )
        .unwrap();
        round_trip_at(&mut e, 1, i + 1, &body, batch(1), t);
    }
    // And one with a finding: ids as field names.
    for i in 0..4 {
        let mut inc = bson::Document::new();
        inc.insert(format!("unread.65a0c0ffee0011223344{i:04x}"), 1);
        update_at(&mut e, 200 + i, "users", bson::doc! {"$inc": inc}, t);
    }
    e.flush();
    let k = k.lock().unwrap();
    let report = wirelint::report::Report::build(&k, &Default::default(), "test");
    assert!(report.patterns.len() > PATTERNS_SHOWN);
    let out = text(&report);
    println!("{out}");
    let findings = out.find("Findings").unwrap();
    let table = out.find("Access patterns with findings").unwrap();
    assert!(findings < table, "{out}");
    assert!(
        out.contains("and 30 more patterns without findings (30 calls)"),
        "{out}"
    );
    assert!(!out.contains("quiet7"), "{out}");
    assert!(out.contains("unread.<id>"), "{out}");
    assert!(
        !out.contains("Partitions  ") && !out.contains(" unknown "),
        "{out}"
    );
    assert!(
        out.contains("Partitions: no partition key is known"),
        "{out}"
    );
    let all = text_with(&report, Layout { all_patterns: true });
    assert!(
        all.contains("quiet7") && !all.contains("more patterns without findings"),
        "{all}"
    );
}

/// A handshake on connection `conn` naming the application `name`.
fn hello_as(e: &mut Engine, conn: u64, id: i32, name: &str, t: Instant) {
    let hello = bson::RawDocumentBuf::try_from(
        &bson::doc! {"hello": 1, "client": {"application": {"name": name}}, "$db": "admin"},
    )
    .unwrap();
    e.message(
        conn,
        Direction::Request,
        t,
        Bytes::from(encode(id, 0, 0, hello.as_bytes(), &[])),
    );
    let ok = rawdoc! {"ok": 1.0};
    e.message(
        conn,
        Direction::Reply,
        t,
        Bytes::from(encode(1000 + id, id, 0, ok.as_bytes(), &[])),
    );
}

/// Lookups whose values lie in another client's open list (two test
/// workers, each a client of its own, reading the same data at once) do
/// not follow it: a request is one client's, spread over its own pool.
/// From a connection of the same client they would.
#[test]
fn another_clients_lookups_do_not_join_a_request() {
    for (other, joins) in [("wirelint-w1", false), ("wirelint-w0", true)] {
        let k = knowledge();
        let mut e = Engine::new(k.clone(), None);
        let t = Instant::now();
        hello_as(&mut e, 1, 1, "wirelint-w0", t);
        hello_as(&mut e, 2, 2, other, t);
        let orders: Vec<bson::RawDocumentBuf> = (0..6)
            .map(|i| rawdoc! {"_id": i, "shop": 1, "customerId": bson::oid::ObjectId::from_bytes([i as u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7])})
            .collect();
        let mut list = bson::RawArrayBuf::new();
        for o in &orders {
            list.push(o.clone());
        }
        let find = rawdoc! {"find": "orders", "filter": {"shop": 1}, "$db": "d"};
        round_trip_at(&mut e, 1, 10, &find, list, t);
        for (i, o) in orders.iter().enumerate() {
            let id = o.get_object_id("customerId").unwrap();
            let lookup =
                rawdoc! {"find": "customers", "filter": {"_id": id}, "limit": 1, "$db": "d"};
            round_trip_at(&mut e, 2, 20 + i as i32, &lookup, batch(1), t);
        }
        e.flush();
        let k = k.lock().unwrap();
        let n_plus_one = k.findings.all().any(|f| f.rule == "WL401");
        assert_eq!(n_plus_one, joins, "from {other}");
    }
}

/// The signed-in user's notifications page: the user loaded as a list
/// (`_id: {$in: [me]}`, as MongoEngine dereferences; first with another
/// user beside, so the shape is a list's), then the user's
/// notifications counted and read with one filter (a paginator's total,
/// then the page), request after request. The notifications are asked
/// for once per list, by the value the list was selected by: the
/// request's context, not a follow-up of each listed user.
#[test]
fn a_contexts_total_and_page_are_one_question() {
    let mut ops = Vec::new();
    for u in 0..4u8 {
        let user = bson::oid::ObjectId::from_bytes([u, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
        // Once, a membership request's two users (the admin signed in).
        let requester = bson::oid::ObjectId::from_bytes([u, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 9]);
        let (ids, users) = if u == 0 {
            (
                vec![user, requester],
                vec![
                    rawdoc! {"_id": user, "name": "n"},
                    rawdoc! {"_id": requester, "name": "r"},
                ],
            )
        } else {
            (vec![user], vec![rawdoc! {"_id": user, "name": "n"}])
        };
        let ids: bson::RawArrayBuf = ids.into_iter().collect();
        ops.push((
            1,
            rawdoc! {"find": "user", "filter": {"_id": {"$in": ids}}, "$db": "d"},
            users,
        ));
        ops.push((
            1,
            rawdoc! {"aggregate": "notification", "pipeline": [{"$match": {"user": user}}, {"$group": {"_id": 1, "n": {"$sum": 1}}}], "cursor": {}, "$db": "d"},
            vec![rawdoc! {"_id": 1, "n": 1}],
        ));
        ops.push((
            1,
            rawdoc! {"find": "notification", "filter": {"user": user}, "sort": {"created_at": -1}, "limit": 20, "$db": "d"},
            vec![rawdoc! {"_id": u as i32, "user": user}],
        ));
    }
    let run = run_ops(ops);
    assert_eq!(run.rules, vec![], "{:?}", run.messages);
}

/// A page of one tenant's project: the tenant, then the project and the
/// signed-in member each by its own `_id` and scoped to the tenant, then
/// the project's open tasks. The project and the member join the request
/// only by the tenant it was selected by: entities the page was about
/// from the start (its URL, its session), each read once, not documents
/// a result referred it to. Its context and one list: not chatty.
#[test]
fn reads_by_id_joined_only_by_the_context_are_not_chatty() {
    let oid = |a: u8, b: u8| bson::oid::ObjectId::from_bytes([a, b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8]);
    let mut ops = Vec::new();
    for page in 0..6u8 {
        let (tenant, project, member) = (oid(1, page % 3), oid(2, page), oid(3, page));
        ops.push((
            1,
            rawdoc! {"find": "tenants", "filter": {"_id": tenant}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": tenant, "plan": "pro"}],
        ));
        ops.push((
            1,
            rawdoc! {"find": "projects", "filter": {"_id": project, "tenantId": tenant}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": project, "tenantId": tenant, "name": "p"}],
        ));
        ops.push((
            1,
            rawdoc! {"find": "members", "filter": {"_id": member, "tenantId": tenant}, "limit": 1, "$db": "d"},
            vec![rawdoc! {"_id": member, "tenantId": tenant, "role": "dev"}],
        ));
        ops.push((
            1,
            rawdoc! {"find": "tasks", "filter": {"tenantId": tenant, "projectId": project, "done": false}, "sort": {"dueAt": 1}, "limit": 50, "$db": "d"},
            vec![rawdoc! {"_id": oid(4, page), "tenantId": tenant, "projectId": project, "title": "t"}, rawdoc! {"_id": oid(5, page), "tenantId": tenant, "projectId": project, "title": "u"}],
        ));
    }
    let run = run_ops(ops);
    assert_eq!(run.patterns.len(), 1, "{:?}", run.patterns);
    assert_eq!(run.rules, vec![], "{:?} {:?}", run.messages, run.patterns);
}
