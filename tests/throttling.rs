//! Azure Cosmos DB's throttling, end to end: a fault injector
//! (`common::fault::CosmosThrottle`, test support) in front of a real
//! FerretDB answers chosen calls as Cosmos DB does when the request units
//! run out (error 16500, HTTP 429) — the command refused, or a write
//! accepted with its statements failed in `writeErrors` — or a
//! rate-limited request times out (error 50). wirelint (target `cosmos-ru`) sits in front of it: the
//! client must receive the injected reply byte for byte, and the report
//! must count it against the right pattern as throttling.

mod common;

use common::fault::{CosmosThrottle, Fault, Throttling, MAX_MESSAGE_BYTES};
use common::{Backend, Frames};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, rawdoc, Bson, Document, RawDocument};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wirelint::analysis::target::{Target, TargetChoice, TargetSource};
use wirelint::report::{PatternReport, Report};
use wirelint::wire::{op_msg, Header};

const RETRY_AFTER_MS: u32 = 34;
const TOO_MANY: Fault = Fault::RequestRateTooLarge {
    retry_after_ms: RETRY_AFTER_MS,
};
const WRITE_TOO_MANY: Fault = Fault::WriteRequestRateTooLarge {
    retry_after_ms: RETRY_AFTER_MS,
};

/// FerretDB, the fault injector in front of it with `rules`, and wirelint
/// in front of that with the target set to Cosmos DB (RU).
async fn cosmos_through_wirelint(
    rules: Vec<Throttling>,
) -> (Backend, CosmosThrottle, wirelint::Proxy) {
    let backend = Backend::start(Default::default());
    let injector = CosmosThrottle::start(&backend.addr(), rules).await;
    let mut settings = common::settings(&injector.uri());
    settings.analysis.target = Some(Target::CosmosRu);
    let proxy = common::proxy_with(settings).await;
    (backend, injector, proxy)
}

/// A driver through wirelint that never retries a read (each call is one
/// request, so the injector's call numbers are the test's).
async fn driver(proxy: &wirelint::Proxy) -> mongodb::Client {
    common::client(&format!(
        "{}?retryReads=false&retryWrites=false",
        proxy.connection_string()
    ))
    .await
}

/// The `feed` and `archive` collections of database `db`, each holding
/// `n` documents `{_id: i, n: i}`.
async fn feed_and_archive(
    client: &mongodb::Client,
    db: &str,
    n: i32,
) -> (mongodb::Collection<Document>, mongodb::Collection<Document>) {
    let db = client.database(db);
    let (feed, archive) = (db.collection("feed"), db.collection("archive"));
    for coll in [&feed, &archive] {
        coll.insert_many((0..n).map(|i| doc! {"_id": i, "n": i}))
            .await
            .unwrap();
    }
    (feed, archive)
}

/// Runs a `find` with `comment` to its end: the documents, or the error.
async fn find(
    coll: &mongodb::Collection<Document>,
    filter: Document,
    comment: &str,
) -> mongodb::error::Result<Vec<Document>> {
    coll.find(filter)
        .comment(comment)
        .await?
        .try_collect()
        .await
}

/// The server error a failed call carries (panics on any other error).
fn command_error(e: &mongodb::error::Error) -> &mongodb::error::CommandError {
    match &*e.kind {
        mongodb::error::ErrorKind::Command(c) => c,
        other => panic!("expected a server error, got {other:?}"),
    }
}

/// Asserts that the driver received `fault` exactly as injected.
fn assert_is_fault(call: usize, e: &mongodb::error::Error, fault: &Fault) {
    let c = command_error(e);
    assert_eq!(
        (c.code, c.code_name.as_str(), c.message.as_str()),
        (fault.code(), fault.code_name(), fault.errmsg().as_str()),
        "call {call}: the driver did not get the reply Cosmos DB sends"
    );
}

/// Asserts that the driver received `fault` as the write error of a
/// one-document insert (`insert_one`), code and message as injected.
fn assert_is_write_fault(call: i32, e: &mongodb::error::Error, fault: &Fault) {
    use mongodb::error::{ErrorKind, WriteFailure};
    match &*e.kind {
        ErrorKind::Write(WriteFailure::WriteError(w)) => assert_eq!(
            (w.code, w.message.as_str()),
            (fault.code(), fault.errmsg().as_str()),
            "call {call}: the driver did not get the write error Cosmos DB sends"
        ),
        other => panic!("call {call}: expected a write error, got {other:?}"),
    }
}

fn pattern<'a>(report: &'a Report, name: &str) -> &'a PatternReport {
    report
        .patterns
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| {
            panic!(
                "no pattern {name}: {:?}",
                report.patterns.iter().map(|p| &p.name).collect::<Vec<_>>()
            )
        })
}

fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// Ends the driver and wirelint (the analysis drained) and returns the
/// report, after checking the analysis saw every message.
async fn final_report(client: mongodb::Client, proxy: &mut wirelint::Proxy) -> Report {
    client.shutdown().await;
    let stats = proxy.stop().await;
    assert_eq!(
        (stats.analysis_dropped, stats.analysis_panics),
        (0, 0),
        "the analysis lost messages: its counts cannot be checked"
    );
    let report = proxy.report();
    println!("{}", wirelint::report::table::text(&report));
    report
}

fn find_request(request_id: i32, db: &str, collection: &str) -> Vec<u8> {
    op_msg::encode(
        request_id,
        0,
        0,
        rawdoc! {"find": collection, "filter": {}, "$db": db}.as_bytes(),
        &[],
    )
}

fn document(raw: &RawDocument) -> Document {
    Document::try_from(raw).unwrap()
}

fn body_of(frame: &[u8]) -> Document {
    let msg = op_msg::OpMsg::parse(frame).expect("an OP_MSG reply");
    document(RawDocument::from_bytes(msg.body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn a_throttled_reply_reaches_a_raw_client_byte_for_byte() {
    let (_backend, injector, mut proxy) =
        cosmos_through_wirelint(vec![Throttling::new("find", "raw", 3..=3, TOO_MANY)]).await;
    let stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (reader, mut writer) = stream.into_split();
    let mut frames = Frames::new(reader);
    let mut replies = Vec::new();
    for request_id in 101..=104 {
        writer
            .write_all(&find_request(request_id, "throttling_raw", "raw"))
            .await
            .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(10), frames.next())
            .await
            .expect("no reply within 10 s")
            .unwrap();
        let header = Header::parse(&reply).unwrap();
        assert_eq!(header.response_to, request_id, "a reply to another request");
        replies.push(reply);
    }
    drop(writer);
    drop(frames);

    let injected = injector.injected();
    assert_eq!(
        injected
            .iter()
            .map(|i| (i.call, i.request_id))
            .collect::<Vec<_>>(),
        [(3, 103)],
        "the injector answered other calls than the third"
    );
    // wirelint forwards replies as they came (requestID included): the
    // third reply is the injector's, whole.
    assert!(
        replies[2] == injected[0].frame,
        "the reply differs from the one injected:\nreceived {:?}\ninjected {:?}",
        replies[2],
        injected[0].frame
    );
    assert_eq!(body_of(&replies[2]), document(&TOO_MANY.body()));
    // The others are FerretDB's own, before and after.
    for i in [0, 1, 3] {
        let body = body_of(&replies[i]);
        assert_eq!(body.get_f64("ok").ok(), Some(1.0), "reply {i}: {body}");
        assert!(body.contains_key("cursor"), "reply {i}: {body}");
    }
    assert_eq!(injector.calls("find", "raw"), 4);

    let stats = proxy.stop().await;
    assert_eq!((stats.analysis_dropped, stats.analysis_panics), (0, 0));
    let report = proxy.report();
    let throttled: u64 = report
        .patterns
        .iter()
        .filter(|p| p.namespaces.iter().any(|n| n == "throttling_raw.raw"))
        .map(|p| p.throttled)
        .sum();
    assert_eq!(
        throttled,
        1,
        "throttled replies counted on throttling_raw.raw:\n{}",
        wirelint::report::table::text(&report)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn cosmos_429_reaches_the_driver_and_counts_as_throttling() {
    // Calls 4 to 8 of the hot feed are throttled; 1–3 and 9–10 are not.
    let (_backend, injector, mut proxy) =
        cosmos_through_wirelint(vec![Throttling::new("find", "feed", 4..=8, TOO_MANY)]).await;
    let client = driver(&proxy).await;
    let (feed, archive) = feed_and_archive(&client, "throttling_429", 5).await;

    for call in 1..=10 {
        let result = find(&feed, doc! {"n": {"$gte": 0}}, "hot-feed").await;
        match call {
            4..=8 => assert_is_fault(call, &result.unwrap_err(), &TOO_MANY),
            _ => assert_eq!(result.unwrap().len(), 5, "call {call}"),
        }
    }
    for _ in 0..4 {
        let docs = find(&archive, doc! {"n": {"$gte": 0}}, "cold")
            .await
            .unwrap();
        assert_eq!(docs.len(), 5);
    }
    // A pattern with errors that are not throttling: an unknown operator,
    // refused by FerretDB itself.
    find(&archive, doc! {"n": {"$gte": 0}}, "broken-filter")
        .await
        .unwrap();
    let mut other_codes = Vec::new();
    for _ in 0..2 {
        let e = find(&archive, doc! {"n": {"$bogus": 1}}, "broken-filter")
            .await
            .unwrap_err();
        other_codes.push(command_error(&e).code);
    }
    assert!(
        other_codes.iter().all(|c| ![16500, 50].contains(c)),
        "{other_codes:?}"
    );

    // Every call reached the injector once (none retried) and exactly the
    // chosen ones were answered by it.
    assert_eq!(injector.calls("find", "feed"), 10);
    assert_eq!(injector.calls("find", "archive"), 7);
    assert_eq!(
        injector
            .injected()
            .iter()
            .map(|i| i.call)
            .collect::<Vec<_>>(),
        [4, 5, 6, 7, 8]
    );

    let report = final_report(client, &mut proxy).await;
    assert_eq!(
        report.target,
        TargetChoice {
            target: Target::CosmosRu,
            source: TargetSource::Set,
        }
    );
    let hot = pattern(&report, "hot-feed");
    assert_eq!(hot.throttled, 5, "hot-feed: throttled");
    assert_eq!(hot.errors, counts(&[("16500", 5)]), "hot-feed: errors");
    let cold = pattern(&report, "cold");
    assert_eq!(cold.throttled, 0, "cold: throttled");
    assert_eq!(cold.errors, counts(&[]), "cold: errors");
    let broken = pattern(&report, "broken-filter");
    assert_eq!(
        broken.throttled, 0,
        "broken-filter: a server error that is not throttling counted as throttling"
    );
    assert_eq!(
        broken.errors.values().sum::<u64>(),
        2,
        "broken-filter: errors {:?}",
        broken.errors
    );
    assert!(
        broken.errors.contains_key(&other_codes[0].to_string()),
        "broken-filter: errors {:?}, FerretDB said {other_codes:?}",
        broken.errors
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn cosmos_timeout_50_counts_as_throttling_too() {
    // Calls 4–5 time out under rate limiting (50), 6–7 are refused (16500)
    // with a longer RetryAfterMs, 8 succeeds again.
    let too_many = Fault::RequestRateTooLarge {
        retry_after_ms: 1250,
    };
    let (_backend, injector, mut proxy) = cosmos_through_wirelint(vec![
        Throttling::new("find", "feed", 4..=5, Fault::ExceededTimeLimit),
        Throttling::new("find", "feed", 6..=7, too_many.clone()),
    ])
    .await;
    let client = driver(&proxy).await;
    let (feed, archive) = feed_and_archive(&client, "throttling_50", 3).await;

    for call in 1..=8 {
        let result = find(&feed, doc! {"n": {"$gte": 0}}, "hot-feed").await;
        match call {
            4..=5 => assert_is_fault(call, &result.unwrap_err(), &Fault::ExceededTimeLimit),
            6..=7 => assert_is_fault(call, &result.unwrap_err(), &too_many),
            _ => assert_eq!(result.unwrap().len(), 3, "call {call}"),
        }
    }
    for _ in 0..3 {
        let docs = find(&archive, doc! {}, "cold").await.unwrap();
        assert_eq!(docs.len(), 3);
    }
    assert_eq!(injector.calls("find", "feed"), 8);
    assert_eq!(
        injector
            .injected()
            .iter()
            .map(|i| (i.call, i.fault.code()))
            .collect::<Vec<_>>(),
        [(4, 50), (5, 50), (6, 16500), (7, 16500)]
    );

    let report = final_report(client, &mut proxy).await;
    assert_eq!(
        report.target,
        TargetChoice {
            target: Target::CosmosRu,
            source: TargetSource::Set,
        }
    );
    let hot = pattern(&report, "hot-feed");
    assert_eq!(
        hot.throttled, 4,
        "hot-feed: throttled (2 × 50 ExceededTimeLimit, 2 × 16500)"
    );
    assert_eq!(hot.errors, counts(&[("16500", 2), ("50", 2)]));
    let cold = pattern(&report, "cold");
    assert_eq!((cold.throttled, cold.errors.len()), (0, 0), "cold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn cosmos_throttled_writes_count_as_throttling() {
    // Inserts 3 to 5 of the hot writes are accepted with their statement
    // throttled (`ok: 1`, `n: 0`, a 16500 in `writeErrors`); 1–2 and 6–7
    // reach FerretDB.
    let (_backend, injector, mut proxy) = cosmos_through_wirelint(vec![Throttling::new(
        "insert",
        "events",
        3..=5,
        WRITE_TOO_MANY,
    )])
    .await;
    let client = driver(&proxy).await;
    let db = client.database("throttling_writes");
    let events = db.collection::<Document>("events");
    let catalog = db.collection::<Document>("catalog");
    catalog
        .insert_many((0..4).map(|i| doc! {"_id": i, "n": i}))
        .await
        .unwrap();

    for call in 1..=7 {
        let result = events
            .insert_one(doc! {"_id": call, "n": call})
            .comment("hot-writes")
            .await;
        match call {
            3..=5 => assert_is_write_fault(call, &result.unwrap_err(), &WRITE_TOO_MANY),
            _ => assert_eq!(
                result.unwrap().inserted_id,
                Bson::Int32(call),
                "call {call}"
            ),
        }
    }
    for _ in 0..4 {
        let docs = find(&catalog, doc! {"n": {"$gte": 0}}, "catalog-reads")
            .await
            .unwrap();
        assert_eq!(docs.len(), 4);
    }

    // Every insert reached the injector once (none retried), the chosen
    // ones were answered by it, one write error each (one document each),
    // and none of those reached FerretDB.
    assert_eq!(injector.calls("insert", "events"), 7);
    assert_eq!(
        injector
            .injected()
            .iter()
            .map(|i| (i.call, i.statements, i.fault.code()))
            .collect::<Vec<_>>(),
        [(3, 1, 16500), (4, 1, 16500), (5, 1, 16500)]
    );
    let mut stored: Vec<i32> = find(&events, doc! {}, "check-writes")
        .await
        .unwrap()
        .iter()
        .map(|d| d.get_i32("_id").unwrap())
        .collect();
    stored.sort_unstable();
    assert_eq!(stored, [1, 2, 6, 7], "documents stored by FerretDB");

    let report = final_report(client, &mut proxy).await;
    assert_eq!(
        report.target,
        TargetChoice {
            target: Target::CosmosRu,
            source: TargetSource::Set,
        }
    );
    let hot = pattern(&report, "hot-writes");
    assert_eq!(
        hot.throttled, 3,
        "hot-writes: throttled (16500 in writeErrors of accepted inserts)"
    );
    assert_eq!(hot.errors, counts(&[("16500", 3)]), "hot-writes: errors");
    let reads = pattern(&report, "catalog-reads");
    assert_eq!(reads.throttled, 0, "catalog-reads: throttled");
    assert_eq!(reads.errors, counts(&[]), "catalog-reads: errors");
    // The test throttled nothing else.
    assert_eq!(
        report.counters.throttled_operations, 3,
        "counters.throttled_operations"
    );
}

/// A backend that answers each request with `{ok: 1, seen: <requestID>}`
/// and hands over the requests it received: its address, the requests,
/// and its task (to abort).
async fn echo_backend() -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    let (received_tx, received) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let backend = tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            let received_tx = received_tx.clone();
            tokio::spawn(async move {
                let (reader, mut writer) = socket.into_split();
                let mut frames = Frames::new(reader);
                while let Ok(frame) = frames.next().await {
                    let id = Header::parse(&frame).unwrap().request_id;
                    let _ = received_tx.send(frame);
                    let reply =
                        op_msg::encode(9, id, 0, rawdoc! {"ok": 1.0, "seen": id}.as_bytes(), &[]);
                    if writer.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (backend_addr, received, backend)
}

/// The injector itself, without FerretDB: it answers exactly the chosen
/// calls, forwards the rest to the backend, and closes a connection that
/// announces a message over 48 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_injector_answers_only_the_chosen_calls() {
    let (backend_addr, mut received, backend) = echo_backend().await;
    let injector = CosmosThrottle::start(
        &backend_addr.to_string(),
        vec![Throttling::new("find", "feed", 2..=2, TOO_MANY)],
    )
    .await;

    let stream = TcpStream::connect(injector.addr()).await.unwrap();
    let (reader, mut writer) = stream.into_split();
    let mut frames = Frames::new(reader);
    // find feed (1st), find other, find feed (2nd: throttled), find feed (3rd).
    let requests = [
        find_request(1, "db", "feed"),
        find_request(2, "db", "other"),
        find_request(3, "db", "feed"),
        find_request(4, "db", "feed"),
    ];
    let mut replies = Vec::new();
    for request in &requests {
        writer.write_all(request).await.unwrap();
        replies.push(frames.next().await.unwrap());
    }
    let injected = injector.injected();
    assert_eq!(injected.len(), 1);
    assert_eq!((injected[0].call, injected[0].request_id), (2, 3));
    assert_eq!(replies[2], injected[0].frame);
    let header = Header::parse(&replies[2]).unwrap();
    assert_eq!(
        (
            header.response_to,
            header.op_code,
            header.message_length as usize
        ),
        (3, 2013, replies[2].len())
    );
    assert_eq!(
        op_msg::OpMsg::parse(&replies[2]).unwrap().flags,
        0,
        "flagBits"
    );
    assert_eq!(
        body_of(&replies[2]),
        doc! {
            "ok": 0.0,
            "errmsg": TOO_MANY.errmsg(),
            "code": 16500,
            "codeName": "RequestRateTooLarge",
        }
    );
    assert!(TOO_MANY
        .errmsg()
        .starts_with("Error=16500, RetryAfterMs=34, Details='Response status code"));
    for (i, id) in [(0, 1), (1, 2), (3, 4)] {
        assert_eq!(body_of(&replies[i]), doc! {"ok": 1.0, "seen": id});
    }
    // The backend received every request but the throttled one, unchanged.
    let mut forwarded = Vec::new();
    while let Ok(frame) = received.try_recv() {
        forwarded.push(frame);
    }
    assert_eq!(
        forwarded,
        [
            requests[0].clone(),
            requests[1].clone(),
            requests[3].clone()
        ]
    );
    assert_eq!(
        (
            injector.calls("find", "feed"),
            injector.calls("find", "other")
        ),
        (3, 1)
    );

    // A header announcing more than 48 MB: the connection is closed, and
    // nothing reaches the backend.
    let mut s = TcpStream::connect(injector.addr()).await.unwrap();
    let mut header = Vec::new();
    Header {
        message_length: (MAX_MESSAGE_BYTES + 1) as i32,
        request_id: 5,
        response_to: 0,
        op_code: 2013,
    }
    .write(&mut header);
    s.write_all(&header).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
        .await
        .expect("the connection stayed open");
    assert!(
        closed.is_err() || rest.is_empty(),
        "an answer to an oversized message: {rest:?}"
    );
    assert!(
        received.try_recv().is_err(),
        "the oversized message was forwarded"
    );

    // Dropped, it stops listening.
    let addr = injector.addr();
    drop(injector);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(TcpStream::connect(addr).await.is_err(), "still listening");
    backend.abort();
}

/// The injector's throttled writes, without FerretDB: `n: 0`, `ok: 1` and
/// one write error per statement, whether the statements come in the body
/// or in a kind-1 document sequence (as drivers send an insert's
/// documents); other calls forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fault_injector_fails_every_statement_of_a_throttled_write() {
    let (backend_addr, mut received, backend) = echo_backend().await;
    let injector = CosmosThrottle::start(
        &backend_addr.to_string(),
        vec![
            Throttling::new("insert", "events", 1..=2, WRITE_TOO_MANY),
            Throttling::new("update", "events", 1..=1, WRITE_TOO_MANY),
        ],
    )
    .await;
    let stream = TcpStream::connect(injector.addr()).await.unwrap();
    let (reader, mut writer) = stream.into_split();
    let mut frames = Frames::new(reader);

    let docs: Vec<_> = (0..3).map(|i| rawdoc! {"_id": i}).collect();
    let doc_bytes: Vec<&[u8]> = docs.iter().map(|d| d.as_bytes()).collect();
    let requests = [
        // Three documents in a kind-1 sequence.
        op_msg::encode(
            1,
            0,
            0,
            rawdoc! {"insert": "events", "$db": "db"}.as_bytes(),
            &[("documents", &doc_bytes)],
        ),
        // Two in the body.
        op_msg::encode(
            2,
            0,
            0,
            rawdoc! {"insert": "events", "documents": [{"_id": 3}, {"_id": 4}], "$db": "db"}
                .as_bytes(),
            &[],
        ),
        // Two updates in the body.
        op_msg::encode(
            3,
            0,
            0,
            rawdoc! {
                "update": "events",
                "updates": [
                    {"q": {"_id": 0}, "u": {"$set": {"a": 1}}},
                    {"q": {"_id": 1}, "u": {"$set": {"a": 1}}},
                ],
                "$db": "db",
            }
            .as_bytes(),
            &[],
        ),
        // The third insert: forwarded.
        op_msg::encode(
            4,
            0,
            0,
            rawdoc! {"insert": "events", "$db": "db"}.as_bytes(),
            &[("documents", &doc_bytes[..1])],
        ),
    ];
    let mut replies = Vec::new();
    for request in &requests {
        writer.write_all(request).await.unwrap();
        replies.push(frames.next().await.unwrap());
    }

    let injected = injector.injected();
    assert_eq!(
        injected
            .iter()
            .map(|i| (i.command.as_str(), i.call, i.request_id, i.statements))
            .collect::<Vec<_>>(),
        [
            ("insert", 1, 1, 3),
            ("insert", 2, 2, 2),
            ("update", 1, 3, 2)
        ]
    );
    let write_error = |index: i32| {
        doc! {
            "index": index,
            "code": 16500,
            "errmsg": WRITE_TOO_MANY.errmsg(),
        }
    };
    for (i, statements) in [(0, 3), (1, 2), (2, 2)] {
        assert_eq!(replies[i], injected[i].frame, "reply {i}");
        let header = Header::parse(&replies[i]).unwrap();
        assert_eq!(
            (header.response_to, header.op_code),
            (i as i32 + 1, 2013),
            "reply {i}"
        );
        assert_eq!(
            body_of(&replies[i]),
            doc! {
                "n": 0,
                "writeErrors": (0..statements).map(write_error).collect::<Vec<_>>(),
                "ok": 1.0,
            },
            "reply {i}"
        );
    }
    assert_eq!(
        WRITE_TOO_MANY.errmsg(),
        TOO_MANY.errmsg(),
        "the write error's errmsg is the 429's"
    );
    assert_eq!(body_of(&replies[3]), doc! {"ok": 1.0, "seen": 4});

    let mut forwarded = Vec::new();
    while let Ok(frame) = received.try_recv() {
        forwarded.push(frame);
    }
    assert_eq!(forwarded, [requests[3].clone()]);
    assert_eq!(
        (
            injector.calls("insert", "events"),
            injector.calls("update", "events")
        ),
        (3, 1)
    );
    backend.abort();
}

/// A pattern throttled again and again is a finding (WL204); when most of
/// its throttled calls carry one partition-key value, the finding names a
/// hot partition. A pattern throttled once or twice, and one spread over
/// many key values, are said as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn repeated_throttling_is_a_finding_naming_the_hot_partition() {
    let backend = Backend::start(Default::default());
    let injector = CosmosThrottle::start(
        &backend.addr(),
        vec![
            Throttling::new("find", "orders", 3.., TOO_MANY),
            Throttling::new("find", "events", 2..=3, TOO_MANY),
        ],
    )
    .await;
    let mut settings = common::settings(&injector.uri());
    settings.analysis.target = Some(Target::CosmosRu);
    settings.analysis.partition_keys = vec![(
        "throttling_hot.orders".into(),
        vec!["tenant".into()],
        wirelint::analysis::partition::KeyKind::Cosmos,
    )];
    let mut proxy = common::proxy_with(settings).await;
    let client = driver(&proxy).await;
    let db = client.database("throttling_hot");
    let orders = db.collection::<Document>("orders");
    let events = db.collection::<Document>("events");
    orders
        .insert_many((0..6).map(|i| doc! {"_id": i, "tenant": if i < 3 { "big" } else { "small" }}))
        .await
        .unwrap();
    events.insert_one(doc! {"_id": 1}).await.unwrap();
    // Calls 3-10 of the tenant lookup are throttled: seven for one tenant,
    // one for another.
    for call in 1..=10 {
        let tenant = if call == 6 { "small" } else { "big" };
        let result = find(&orders, doc! {"tenant": tenant}, "tenant-orders").await;
        assert_eq!(result.is_err(), call >= 3, "call {call}");
    }
    // Throttled twice: under the rule's threshold.
    for _ in 1..=4 {
        let _ = find(&events, doc! {}, "recent-events").await;
    }
    let report = final_report(client, &mut proxy).await;
    let wl204: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.rule == "WL204")
        .collect();
    assert_eq!(wl204.len(), 1, "{wl204:#?}");
    let f = wl204[0];
    assert_eq!(f.namespace, "throttling_hot.orders");
    assert_eq!(f.pattern.as_deref(), Some("tenant-orders"));
    assert_eq!(f.evidence["throttled"], 8);
    assert_eq!(f.evidence["hot_partition_key_value_operations"], 7);
    assert!(
        f.message.contains("throttled 8 times")
            && f.message.contains("7 of the throttled operations carried the same value of the partition key [tenant]: a hot partition")
            && f.message.contains("RU per call"),
        "{}",
        f.message
    );
    // No literal value of the key in what is reported.
    let json = serde_json::to_string(f).unwrap();
    assert!(!json.contains("\"big\""), "{json}");
    assert_eq!(pattern(&report, "recent-events").throttled, 2);
}
