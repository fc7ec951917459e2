//! Transparent at the edges: the newest protocol sections,
//! requests that are never answered or answered late by design, and
//! connections that send nothing.
//!
//! FerretDB v1.24.2 closes a connection on OP_MSG payload type 3, does not
//! speak OP_COMPRESSED, and has neither streaming hello nor awaitData
//! cursors. So these tests put a small front of their own between wirelint
//! and FerretDB that plays a current MongoDB server for exactly those
//! messages: it records every message wirelint sends it, drops kind-3
//! sections and inflates compressed requests before passing them on (as a
//! server that reads them would), streams hello replies every
//! `maxAwaitTimeMS`, and holds a `getMore` with `maxTimeMS` on the
//! collection "tail" for most of that time before answering it with an
//! empty batch. Everything else is FerretDB's own answer, relayed as is.

mod common;

use common::Frames;

use common::Backend;
use mongodb::bson::{self as bson, doc, rawdoc, Document, RawDocumentBuf};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wirelint::wire::compressed::{compress, OpCompressed};
use wirelint::wire::Compressor;
use wirelint::wire::{op_msg, Header, Message, OpCode};

/// What the front saw.
#[derive(Default)]
struct Seen {
    /// Every message wirelint sent, byte for byte.
    requests: Mutex<Vec<Vec<u8>>>,
    /// Every reply the front sent back, byte for byte.
    replies: Mutex<Vec<Vec<u8>>>,
    /// Connections wirelint opened to it.
    connections: AtomicUsize,
}

struct Front {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

impl Front {
    async fn start(backend: String) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let s = seen.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                s.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(conn, backend.clone(), s.clone()));
            }
        });
        Front { addr, seen }
    }

    fn uri(&self) -> String {
        format!("mongodb://{}", self.addr)
    }
}

type Writer = Arc<tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>>;

async fn send(to: &Writer, frame: Vec<u8>, seen: &Seen) {
    seen.replies.lock().unwrap().push(frame.clone());
    let _ = to.lock().await.write_all(&frame).await;
}

/// The body document of an OP_MSG (after inflating it if compressed).
fn body_of(frame: &[u8]) -> Option<RawDocumentBuf> {
    let msg = Message::parse(frame).ok()?;
    RawDocumentBuf::from_bytes(msg.command_doc()?.to_vec()).ok()
}

/// The message without its kind-3 section (the layout FerretDB reads).
fn without_trace_section(frame: &[u8]) -> Vec<u8> {
    let mut out = frame[..20].to_vec();
    let mut pos = 20;
    while pos < frame.len() {
        let kind = frame[pos];
        let size = i32::from_le_bytes(frame[pos + 1..pos + 5].try_into().unwrap()) as usize;
        if kind != 3 {
            out.extend_from_slice(&frame[pos..pos + 1 + size]);
        }
        pos += 1 + size;
    }
    let len = out.len() as i32;
    out[..4].copy_from_slice(&len.to_le_bytes());
    out
}

async fn serve(client: TcpStream, backend: String, seen: Arc<Seen>) {
    let (from_client, to_client) = client.into_split();
    let mut from_client = Frames::new(from_client);
    let to_client: Writer = Arc::new(tokio::sync::Mutex::new(to_client));
    let Ok(upstream) = TcpStream::connect(&backend).await else {
        return;
    };
    let (from_backend, mut to_backend) = upstream.into_split();
    let mut from_backend = Frames::new(from_backend);
    let (relay_to, relay_seen) = (to_client.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok(reply) = from_backend.next().await {
            send(&relay_to, reply, &relay_seen).await;
        }
    });
    let mut next_id = 1_000_000;
    while let Ok(frame) = from_client.next().await {
        seen.requests.lock().unwrap().push(frame.clone());
        let header = Header::parse(&frame).unwrap();
        let plain = match header.opcode() {
            Some(OpCode::Compressed) => OpCompressed::parse(&frame).unwrap().decompress().unwrap(),
            _ => frame.clone(),
        };
        let Some(body) = body_of(&plain) else {
            let _ = to_backend.write_all(&plain).await;
            continue;
        };
        let first = body
            .iter()
            .next()
            .and_then(|e| e.ok())
            .map(|(k, _)| k.to_string());
        let await_ms = |key| {
            body.get_i64(key)
                .ok()
                .or(body.get_i32(key).ok().map(i64::from))
        };
        match first.as_deref() {
            Some("hello") if await_ms("maxAwaitTimeMS").is_some() => {
                // A streaming hello: a reply now, then one per period, each
                // with moreToCome and answering the one before.
                let period = Duration::from_millis(await_ms("maxAwaitTimeMS").unwrap() as u64);
                let (to, seen) = (to_client.clone(), seen.clone());
                let mut respond_to = header.request_id;
                next_id += 1000;
                let mut id = next_id;
                tokio::spawn(async move {
                    loop {
                        let reply = rawdoc! {"isWritablePrimary": true, "topologyVersion": {"processId": bson::oid::ObjectId::new(), "counter": 0i64}, "maxWireVersion": 21, "ok": 1.0};
                        send(
                            &to,
                            op_msg::encode(
                                id,
                                respond_to,
                                op_msg::MORE_TO_COME,
                                reply.as_bytes(),
                                &[],
                            ),
                            &seen,
                        )
                        .await;
                        respond_to = id;
                        id += 1;
                        tokio::time::sleep(period).await;
                    }
                });
            }
            Some("getMore") if body.get_str("collection").ok() == Some("tail") => {
                // An awaitData cursor with nothing new: answered, empty,
                // near the end of maxTimeMS.
                let wait =
                    Duration::from_millis(await_ms("maxTimeMS").unwrap_or(0) as u64 * 9 / 10);
                let (to, seen) = (to_client.clone(), seen.clone());
                next_id += 1;
                let id = next_id;
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    let reply = rawdoc! {"cursor": {"nextBatch": [], "id": 77i64, "ns": "edges.tail"}, "ok": 1.0};
                    send(
                        &to,
                        op_msg::encode(id, header.request_id, 0, reply.as_bytes(), &[]),
                        &seen,
                    )
                    .await;
                });
            }
            _ => {
                let plain = match Header::parse(&plain).and_then(|h| h.opcode()) {
                    Some(OpCode::Msg) => without_trace_section(&plain),
                    _ => plain,
                };
                let _ = to_backend.write_all(&plain).await;
            }
        }
    }
}

async fn read_reply(s: &mut Frames<TcpStream>) -> Vec<u8> {
    tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("a reply within 5 s")
        .expect("a whole reply")
}

fn with_trace(body: RawDocumentBuf, request_id: i32, traceparent: &str) -> Vec<u8> {
    let mut frame = op_msg::encode(request_id, 0, 0, body.as_bytes(), &[]);
    frame.push(3);
    frame.extend_from_slice(rawdoc! {"otel": {"traceparent": traceparent}}.as_bytes());
    let len = frame.len() as i32;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    frame
}

/// A request carrying OP_MSG payload type 3 (the OpenTelemetry trace
/// context newer drivers send) reaches the backend byte for byte, the
/// backend's own answer reaches the client byte for byte, and the trace id
/// is in the report, on the pattern and on the finding raised by that
/// operation. (Before: the proxy refused section kind 3 and closed the
/// connection.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn payload_type_3_is_forwarded_and_its_trace_id_reported() {
    let backend = Backend::shared();
    let front = Front::start(backend.addr()).await;
    let proxy = common::proxy(&front.uri()).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");

    let mut s = Frames::new(TcpStream::connect(proxy.local_addr()).await.unwrap());
    // 300 tags: a large array (WL102), raised by the insert. (Strings: a
    // vector of numbers is as long as what it encodes, not reported.)
    let mut tags = bson::RawArrayBuf::new();
    for i in 0..300 {
        tags.push(format!("tag{i}"));
    }
    let insert = with_trace(
        rawdoc! {"insert": "traced", "documents": [{"_id": 1, "tags": tags}], "$db": "edges", "comment": "T1"},
        41,
        &traceparent,
    );
    s.reader.write_all(&insert).await.unwrap();
    let reply = read_reply(&mut s).await;
    assert_eq!(Header::parse(&reply).unwrap().response_to, 41);
    let body = body_of(&reply).unwrap();
    assert_eq!(body.get_i32("n").ok(), Some(1), "{body:?}");
    let find = with_trace(
        rawdoc! {"find": "traced", "filter": {"_id": 1}, "$db": "edges", "comment": "T2"},
        42,
        &traceparent,
    );
    s.reader.write_all(&find).await.unwrap();
    let found = read_reply(&mut s).await;
    let body = body_of(&found).unwrap();
    let batch = body
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch")
        .unwrap();
    assert_eq!(batch.into_iter().count(), 1);

    // Byte for byte, both ways.
    let requests = front.seen.requests.lock().unwrap().clone();
    assert!(
        requests.contains(&insert),
        "the insert was changed on its way"
    );
    assert!(requests.contains(&find), "the find was changed on its way");
    let replies = front.seen.replies.lock().unwrap().clone();
    assert!(replies.contains(&reply) && replies.contains(&found));

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = proxy.report();
    for name in ["T1", "T2"] {
        let p = report.patterns.iter().find(|p| p.name == name).unwrap();
        assert_eq!(p.last_trace_id.as_deref(), Some(trace), "{name}");
    }
    let text = serde_json::to_string(&report).unwrap();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.evidence.get("trace_id") == Some(&serde_json::json!(trace))),
        "no finding carries the trace id: {text}"
    );
    assert!(
        !text.contains("00f067aa0ba902b7"),
        "the span id is not shown"
    );
    proxy.shutdown().await;
}

/// `w: 0` writes sent compressed (the flags are inside the compressed
/// data), a streaming hello and an awaitData getMore held past the
/// upstream timeout: no connection is closed while the server is within
/// its rights, an idle connection after w: 0 writes is closed as idle, and
/// shutdown does not wait for what is not really in flight. (Before: every
/// compressed request counted as awaiting a reply forever, and the upstream
/// timeout cut monitoring connections and awaitData cursors.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn requests_are_tracked_as_what_they_are() {
    let backend = Backend::shared();
    let front = Front::start(backend.addr()).await;
    let mut settings = common::settings(&front.uri());
    settings.forward.upstream_timeout = Some(Duration::from_millis(800));
    settings.forward.idle_timeout = Some(Duration::from_millis(1500));
    settings.forward.shutdown_grace = Duration::from_secs(20);
    let proxy = common::proxy_with(settings).await;

    // Compressed w: 0 inserts, one per compressor.
    let mut w0 = TcpStream::connect(proxy.local_addr()).await.unwrap();
    for (i, c) in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd]
        .into_iter()
        .enumerate()
    {
        let insert = op_msg::encode(
            60 + i as i32,
            0,
            op_msg::MORE_TO_COME,
            rawdoc! {"insert": "w0", "documents": [{"_id": i as i32, "by": c.name()}], "writeConcern": {"w": 0}, "$db": "edges"}.as_bytes(),
            &[],
        );
        w0.write_all(&compress(&insert, c).unwrap()).await.unwrap();
    }
    let direct = common::client(&backend.uri()).await;
    let coll = direct.database("edges").collection::<Document>("w0");
    let arrived = Instant::now();
    while coll.count_documents(doc! {}).await.unwrap() < 3 {
        assert!(
            arrived.elapsed() < Duration::from_secs(5),
            "the compressed w: 0 inserts did not all arrive"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let w0_port = w0.local_addr().unwrap().port();

    // A streaming hello, every 1.2 s (longer than the upstream timeout).
    let mut monitor = Frames::new(TcpStream::connect(proxy.local_addr()).await.unwrap());
    let hello = op_msg::encode(
        70,
        0,
        op_msg::EXHAUST_ALLOWED,
        rawdoc! {"hello": 1, "topologyVersion": {"processId": bson::oid::ObjectId::new(), "counter": 0i64}, "maxAwaitTimeMS": 1200i64, "$db": "admin"}.as_bytes(),
        &[],
    );
    monitor.reader.write_all(&hello).await.unwrap();
    // An awaitData getMore held 1.8 s (maxTimeMS 2 s).
    let mut tail = Frames::new(TcpStream::connect(proxy.local_addr()).await.unwrap());
    let get_more = op_msg::encode(
        80,
        0,
        0,
        rawdoc! {"getMore": 77i64, "collection": "tail", "maxTimeMS": 2000, "$db": "edges"}
            .as_bytes(),
        &[],
    );
    let asked = Instant::now();
    tail.reader.write_all(&get_more).await.unwrap();
    let answer = read_reply(&mut tail).await;
    assert_eq!(Header::parse(&answer).unwrap().response_to, 80);
    assert!(
        asked.elapsed() >= Duration::from_millis(1700),
        "not held: {:?}",
        asked.elapsed()
    );
    let mut streamed = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let reply = read_reply(&mut monitor).await;
        assert!(wirelint::wire::frame::more_to_come(&reply));
        streamed += 1;
    }
    assert!(streamed >= 3, "{streamed} streamed hello replies");
    assert!(
        common::log_lines_with(&["upstream timeout"]).is_empty(),
        "a connection was cut by the upstream timeout"
    );
    // The w: 0 connection has been silent all along, with nothing in
    // flight: closed as idle.
    let mut sink = Vec::new();
    tokio::time::timeout(Duration::from_secs(1), w0.read_to_end(&mut sink))
        .await
        .expect("the w: 0 connection was not closed as idle")
        .ok();
    assert!(
        !common::log_lines_with(&[&format!("peer=127.0.0.1:{w0_port}"), "idle timeout"]).is_empty()
    );

    // Shutdown: the streaming hello is not waited for (grace is 20 s).
    let stopping = Instant::now();
    proxy.shutdown().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(3),
        "shutdown waited {:?}",
        stopping.elapsed()
    );
    drop((monitor, tail));
}

/// 2,000 sockets that connect and send nothing open no backend connection,
/// and a client using the proxy meanwhile sees no error. (Before: each
/// accepted socket opened its backend connection at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn idle_sockets_open_no_backend_connection() {
    let backend = Backend::shared();
    let front = Front::start(backend.addr()).await;
    let proxy = common::proxy(&front.uri()).await;
    let client = common::client(&proxy.connection_string()).await;
    let coll = client.database("edges").collection::<Document>("steady");
    coll.insert_one(doc! {"ok": true}).await.unwrap();
    let before = front.seen.connections.load(Ordering::SeqCst);
    let mut idle = Vec::new();
    for _ in 0..2_000 {
        idle.push(TcpStream::connect(proxy.local_addr()).await.unwrap());
    }
    for _ in 0..20 {
        coll.find_one(doc! {}).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(proxy.stats().connections_active >= 2_000);
    let opened = front.seen.connections.load(Ordering::SeqCst) - before;
    assert_eq!(opened, 0, "{opened} backend connections for idle sockets");
    drop(idle);
    proxy.shutdown().await;
}
