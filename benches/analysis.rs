//! Micro-benchmarks (divan): what wirelint spends per message.
//!
//! - `analysis`: what a worker does per message — decode and count
//!   (`analysis::Decoder`: framing, checksum, nesting, counters added in bulk), then the
//!   engine (command model, shape, pairing, state, every rule) — on
//!   request/reply pairs captured from real drivers (fixtures/wire/), one
//!   thread. Time and allocations are per pair (two messages).
//! - `forward`: one ping through an in-process wirelint to an in-process
//!   responder with prepared replies, everything on one thread, so the
//!   allocation counts are the proxy's own per forwarded request/reply.
//!
//! - `replay` (its own harness, not divan's): the captured traffic of the
//!   corpus applications (fixtures/captures/, scripts/captures.sh) through
//!   the analysis, as `wirelint analyse` runs it, beside a plain walk of
//!   every BSON element of the same messages (the floor): microseconds
//!   per request and per returned KiB, medians of runs with their spread.
//!
//! ```sh
//! cargo bench --bench analysis                  # divan's table
//! WIRELINT_REPLAY=1 [WIRELINT_REPLAY_ONLY=app,…] cargo bench --bench analysis
//!                                               # the replay's figures
//! WIRELINT_CALLGRIND_REPLAY=1 valgrind --tool=callgrind \
//!     --toggle-collect='*callgrind_measured*' --dump-before='*replay_boundary*' \
//!     target/release/deps/analysis-* --bench   # instructions per application
//! WIRELINT_CALLGRIND=20000 [WIRELINT_CALLGRIND_ONLY=find] \
//!     valgrind --tool=callgrind target/release/deps/analysis-* --bench
//!                                               # a fixed loop: instructions per pair
//! scripts/icount.sh                             # the same per workload, against
//!                                               # benches/icount-baseline.tsv
//! ```
//!
//! `WIRELINT_TARGET=cosmos-ru` (as `wirelint --target`) runs every
//! workload and replay under that platform, request-unit pricing included
//! (`scripts/icount.sh --target cosmos-ru` compares it with the baseline,
//! measured under the platform each capture's hello names).
//!
//! Figures are printed, never asserted here; scripts/icount.sh fails on
//! instruction counts more than 3 % above its baseline.

#[path = "../tests/common/applications.rs"]
mod applications;

use bytes::Bytes;
use divan::{AllocProfiler, Bencher};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wirelint::analysis::engine::Engine;
use wirelint::analysis::knowledge::Knowledge;
use wirelint::analysis::namespaces::Caps;
use wirelint::analysis::Decoder;
use wirelint::rules::RuleSettings;
use wirelint::stats::{Direction, Stats};

#[global_allocator]
static ALLOC: AllocProfiler = AllocProfiler::system();

const PAIRS: [(&str, &[u8], &[u8]); 4] = [
    (
        "find",
        include_bytes!("../fixtures/wire/node-find.bin"),
        include_bytes!("../fixtures/wire/node-find.reply.bin"),
    ),
    (
        "update",
        include_bytes!("../fixtures/wire/pymongo-update.bin"),
        include_bytes!("../fixtures/wire/pymongo-update.reply.bin"),
    ),
    (
        "insert_30_docs",
        include_bytes!("../fixtures/wire/pymongo-insert.bin"),
        include_bytes!("../fixtures/wire/pymongo-insert.reply.bin"),
    ),
    (
        "aggregate_lookup",
        include_bytes!("../fixtures/wire/pymongo-aggregate.bin"),
        include_bytes!("../fixtures/wire/pymongo-aggregate.reply.bin"),
    ),
];

/// What an analysis worker holds: its engine and decoder, and the
/// counters they add to.
struct Worker {
    engine: Engine,
    decoder: Decoder,
    stats: Stats,
    knowledge: Arc<Mutex<Knowledge>>,
}

/// The platform set with `WIRELINT_TARGET`, if any (a name `--target`
/// takes); unset, the one each capture's hello names.
fn target() -> Option<wirelint::analysis::target::Target> {
    let text = std::env::var("WIRELINT_TARGET").ok()?;
    let target = wirelint::analysis::target::Target::parse(&text);
    assert!(target.is_some(), "WIRELINT_TARGET={text}: not a target");
    target
}

impl Worker {
    fn new() -> Worker {
        let mut knowledge = Knowledge::new(
            wirelint::rules::all(),
            RuleSettings::default(),
            false,
            Caps::default(),
        );
        if let Some(target) = target() {
            knowledge.configure(&wirelint::analysis::Settings {
                target: Some(target),
                ..Default::default()
            });
        }
        let knowledge = Arc::new(Mutex::new(knowledge));
        Worker {
            engine: Engine::new(knowledge.clone(), None),
            decoder: Decoder::default(),
            stats: Stats::default(),
            knowledge,
        }
    }

    /// Refuses to measure a workload whose replies answer nothing (the
    /// engine skips those at once, so only requests would be measured):
    /// after its first 1,000 pairs, operations must have been learnt and,
    /// for getMores, cursors left open.
    fn check_paired(&self, name: &str) {
        let k = self.knowledge.lock().unwrap();
        let paired = if name.starts_with("getmore_") {
            k.cursors.len() as u64 == CONNS
        } else {
            k.operations > 0
        };
        assert!(paired, "{name}: its replies do not answer its requests");
    }

    /// A request and its reply on connection `conn`, each as a worker
    /// takes it at `at`: decoded and counted, then analysed.
    fn pair(&mut self, conn: u64, request: &Bytes, reply: &Bytes, at: Instant) {
        for (direction, frame) in [(Direction::Request, request), (Direction::Reply, reply)] {
            if let Some(decoded) = self
                .decoder
                .decode(conn, direction, frame.clone(), &self.stats)
            {
                self.engine.decoded(conn, at, decoded);
            }
        }
    }
}

/// Connections the typical traffic is spread over, and distinct
/// request/reply pairs it cycles through.
const CONNS: u64 = 16;
const DISTINCT: usize = 1000;

/// The typical messages the issue names, as `benches/proxy.rs`'s
/// generator and responder send them, values varying from one request to
/// the next and spread over 16 connections: `find_by_id` (a find of one
/// `_id`, replied with one 1 KiB document), `insert_1kib` (one 1 KiB
/// document with an ObjectId `_id` as drivers add, a new one on every
/// iteration (see [`Ids`]); replied `{n: 1}`), `getmore_batch` (a getMore,
/// replied with 10 documents of 1 KiB), `getmore_app_docs` (the same with
/// 10 documents as applications store them: a dozen fields of the common
/// types, an embedded document and an array, ~1 KiB each).
fn typical(workload: &str) -> (Vec<Pair>, Vec<Pair>) {
    let pad = |n: usize| "x".repeat(n);
    // A reply answers its request (`responseTo`), as a server's does:
    // one that answers nothing is skipped by the engine at once.
    let encode = |id: i32, response_to: i32, doc: bson::RawDocumentBuf| {
        Bytes::from(wirelint::wire::op_msg::encode(
            id,
            response_to,
            0,
            doc.as_bytes(),
            &[],
        ))
    };
    let cursor = |conn: u64| 77i64 + conn as i64;
    let app = workload == "getmore_app_docs";
    let docs = |first: i32| {
        let mut batch = bson::RawArrayBuf::new();
        for k in 0..10 {
            let id = first + k;
            batch.push(if app {
                bson::rawdoc! {
                    "_id": bson::oid::ObjectId::from_bytes([(id % 251) as u8; 12]),
                    "userId": format!("user-{}", id % 97),
                    "title": format!("A post title number {id}"),
                    "status": if id % 3 == 0 { "draft" } else { "published" },
                    "active": id % 2 == 0,
                    "views": id * 7,
                    "score": 4.5,
                    "createdAt": bson::DateTime::from_millis(1_700_000_000_000 + id as i64),
                    "tags": ["rust", "mongodb", "modelling"],
                    "author": {"name": "Ada", "email": "ada@example.com"},
                    "body": pad(700),
                }
            } else {
                bson::rawdoc! {"_id": id, "pad": pad(994)}
            });
        }
        batch
    };
    // The getMores' cursors, each opened by a find on its connection.
    let setup = match workload {
        "getmore_batch" | "getmore_app_docs" => (1..=CONNS)
            .map(|conn| {
                let id = -(conn as i32);
                let request = bson::rawdoc! {"find": "cursor", "filter": {}, "batchSize": 10i32, "$db": "bench"};
                let reply = bson::rawdoc! {"cursor": {"id": cursor(conn), "ns": "bench.cursor", "firstBatch": docs(0)}, "ok": 1.0};
                (conn, encode(id, 0, request), encode(0, id, reply))
            })
            .collect(),
        _ => Vec::new(),
    };
    let pairs = (0..DISTINCT as i32)
        .map(|id| {
            let conn = 1 + id as u64 % CONNS;
            let (request, reply) = match workload {
                "find_by_id" => (
                    bson::rawdoc! {"find": "c", "filter": {"_id": id}, "limit": 1i32, "singleBatch": true, "$db": "bench"},
                    bson::rawdoc! {"cursor": {"id": 0i64, "ns": "bench.c", "firstBatch": [{"_id": id, "pad": pad(994)}]}, "ok": 1.0},
                ),
                "insert_1kib" => (
                    bson::rawdoc! {"insert": "ins", "documents": [{"_id": bson::oid::ObjectId::from_bytes(ID_MARK), "n": id, "pad": pad(970)}], "$db": "bench"},
                    bson::rawdoc! {"n": 1i32, "ok": 1.0},
                ),
                "getmore_batch" | "getmore_app_docs" => (
                    bson::rawdoc! {"getMore": cursor(conn), "collection": "cursor", "batchSize": 10i32, "$db": "bench"},
                    bson::rawdoc! {"cursor": {"id": cursor(conn), "ns": "bench.cursor", "nextBatch": docs(id * 10)}, "ok": 1.0},
                ),
                other => panic!("no typical workload {other}"),
            };
            (conn, encode(id, 0, request), encode(0, id, reply))
        })
        .collect();
    (setup, pairs)
}

fn main() {
    if std::env::var_os("WIRELINT_REPLAY").is_some() {
        replay::figures();
        return;
    }
    if std::env::var_os("WIRELINT_CALLGRIND_REPLAY").is_some() {
        replay::callgrind();
        return;
    }
    if let Some(n) = std::env::var("WIRELINT_CALLGRIND")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        // A fixed amount of work for `valgrind --tool=callgrind`, whose
        // instruction count is the same on every run of the same binary:
        // the clock is a counter (see [`Clock`]).
        let only = std::env::var("WIRELINT_CALLGRIND_ONLY").ok();
        let names = PAIRS.iter().map(|p| p.0).chain(TYPICAL);
        for name in names.filter(|name| only.as_deref().is_none_or(|o| o == *name)) {
            let mut worker = Worker::new();
            let (setup, mut pairs) = workload(name);
            let mut ids = Ids::of(&pairs);
            let mut clock = Clock::new();
            for (conn, request, reply) in &setup {
                worker.pair(*conn, request, reply, clock.tick());
            }
            let warm = ids.warm_up();
            for i in 0..warm {
                let (conn, request, reply) = ids.fresh(&mut pairs, i);
                worker.pair(*conn, request, reply, clock.tick());
            }
            worker.check_paired(name);
            callgrind_measured(&mut worker, &mut ids, &mut pairs, &mut clock, warm, n);
            println!("{name}: {n} pairs");
        }
        return;
    }
    divan::main();
}

/// The `n` pairs after the warm-up, alone in a function of their own:
/// `valgrind --tool=callgrind --toggle-collect='*callgrind_measured*'`
/// counts them and nothing else (scripts/icount.sh).
#[inline(never)]
fn callgrind_measured(
    worker: &mut Worker,
    ids: &mut Ids,
    pairs: &mut [Pair],
    clock: &mut Clock,
    warm: usize,
    n: u64,
) {
    for i in warm..warm + n as usize {
        let (conn, request, reply) = ids.fresh(pairs, i);
        worker.pair(*conn, request, reply, clock.tick());
    }
}

/// The callgrind mode's clock: one microsecond per pair from the first,
/// whatever the time. A real clock under valgrind runs 50 times slower
/// than the proxy, and how long the machine keeps the process waiting
/// would decide which results outlive their follow-up window, and so the
/// count.
struct Clock {
    start: Instant,
    pairs: u64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            start: Instant::now(),
            pairs: 0,
        }
    }

    fn tick(&mut self) -> Instant {
        self.pairs += 1;
        self.start + std::time::Duration::from_micros(self.pairs)
    }
}

const TYPICAL: [&str; 4] = [
    "find_by_id",
    "insert_1kib",
    "getmore_batch",
    "getmore_app_docs",
];

/// The ObjectId a typical insert is built with, rewritten before each use.
const ID_MARK: [u8; 12] = [0xA5; 12];

/// Fresh `_id`s: a driver gives every inserted document a new ObjectId,
/// so the table of inserted ids is full and forgets one per insert in the
/// steady state. Cycling through the same 1,000 ids would keep it small
/// and warm, and measure less than a proxy does.
struct Ids {
    /// Where each pair's request holds its ObjectId, if it has one.
    at: Vec<Option<usize>>,
    next: u64,
}

impl Ids {
    fn of(pairs: &[Pair]) -> Ids {
        let at = pairs
            .iter()
            .map(|(_, request, _)| request.windows(12).position(|w| w == ID_MARK))
            .collect();
        Ids { at, next: 0 }
    }

    /// Pairs to run before measuring: 1,000, or enough inserts to fill
    /// the table of inserted ids (10 × the documents per namespace).
    fn warm_up(&self) -> usize {
        if self.at.iter().any(Option::is_some) {
            Caps::default().documents_per_namespace * 10 + 1000
        } else {
            1000
        }
    }

    /// Pair `i` of `pairs`, its ObjectId (if any) a new one.
    fn fresh<'p>(&mut self, pairs: &'p mut [Pair], i: usize) -> &'p Pair {
        let i = i % pairs.len();
        if let Some(at) = self.at[i] {
            self.next += 1;
            let request = std::mem::take(&mut pairs[i].1);
            // The engine keeps no copy of a request once its reply came.
            let mut bytes = request.try_into_mut().expect("no other handle");
            bytes[at + 4..at + 12].copy_from_slice(&self.next.to_be_bytes());
            pairs[i].1 = bytes.freeze();
        }
        &pairs[i]
    }
}

type Pair = (u64, Bytes, Bytes);

/// The pairs a workload cycles through: a captured pair alone on
/// connection 1, or the typical traffic (see [`typical`]); and the pairs
/// that come first, once (the finds that open the getMores' cursors).
fn workload(name: &str) -> (Vec<Pair>, Vec<Pair>) {
    match PAIRS.iter().find(|p| p.0 == name) {
        Some((_, request, reply)) => (
            Vec::new(),
            vec![(1, Bytes::from_static(request), Bytes::from_static(reply))],
        ),
        None => typical(name),
    }
}

/// One pair per iteration through the whole analysis, cycling through the
/// workload's pairs, after 1,000 pairs first (101,000 for inserts, to
/// fill the inserted ids): the steady state a long-running proxy is in
/// (per pair).
fn bench_workload(bencher: Bencher, name: &str) {
    let (setup, mut pairs) = workload(name);
    let mut ids = Ids::of(&pairs);
    let mut worker = Worker::new();
    for (conn, request, reply) in &setup {
        worker.pair(*conn, request, reply, Instant::now());
    }
    let warm = ids.warm_up();
    for i in 0..warm {
        let (conn, request, reply) = ids.fresh(&mut pairs, i);
        worker.pair(*conn, request, reply, Instant::now());
    }
    worker.check_paired(name);
    let mut i = warm;
    bencher.bench_local(|| {
        let (conn, request, reply) = ids.fresh(&mut pairs, i);
        i += 1;
        worker.pair(*conn, request, reply, Instant::now())
    });
}

/// One captured request and its reply through the whole analysis.
#[divan::bench(args = ["find", "update", "insert_30_docs", "aggregate_lookup"])]
fn analysis(bencher: Bencher, name: &str) {
    bench_workload(bencher, name)
}

/// The typical messages: 1,000 distinct pairs over 16 connections.
#[divan::bench(args = TYPICAL)]
fn typical_traffic(bencher: Bencher, name: &str) {
    bench_workload(bencher, name)
}

mod forward {
    use super::*;
    use bson::rawdoc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use wirelint::wire::{op_msg, HEADER_LEN};
    use wirelint::{Proxy, ProxySettings};

    async fn read_message(s: &mut TcpStream, buf: &mut [u8]) -> usize {
        s.read_exact(&mut buf[..HEADER_LEN]).await.unwrap();
        let len = i32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        s.read_exact(&mut buf[HEADER_LEN..len]).await.unwrap();
        len
    }

    /// A responder with one prepared reply and a reused buffer: it
    /// allocates nothing per message, so what is counted is the proxy's.
    async fn responder() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reply = op_msg::encode(0, 0, 0, rawdoc! {"ok": 1.0}.as_bytes(), &[]);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let reply = reply.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while s.read_exact(&mut buf[..HEADER_LEN]).await.is_ok() {
                        let len = i32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
                        if s.read_exact(&mut buf[HEADER_LEN..len]).await.is_err() {
                            break;
                        }
                        if s.write_all(&reply).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    /// A ping through wirelint: client → proxy → responder → proxy →
    /// client, one thread (so every allocation on the path is counted).
    #[divan::bench(args = [false, true])]
    fn ping_through_wirelint(bencher: Bencher, analysis: bool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (_proxy, mut client) = rt.block_on(async {
            let backend = responder().await;
            let mut settings =
                ProxySettings::new("127.0.0.1:0", &format!("mongodb://{backend}/")).unwrap();
            settings.analysis.enabled = analysis;
            settings.discover_partition_keys = false;
            let proxy = Proxy::start(settings).await.unwrap();
            let client = TcpStream::connect(proxy.local_addr()).await.unwrap();
            client.set_nodelay(true).unwrap();
            (proxy, client)
        });
        let ping = op_msg::encode(
            1,
            0,
            0,
            rawdoc! {"ping": 1i32, "$db": "admin"}.as_bytes(),
            &[],
        );
        let mut buf = vec![0u8; 64 * 1024];
        bencher.bench_local(|| {
            rt.block_on(async {
                client.write_all(&ping).await.unwrap();
                read_message(&mut client, &mut buf).await
            })
        });
    }
}

/// The corpus applications' captured traffic, replayed.
mod replay {
    use super::applications;
    use applications::fixtures;
    use std::path::PathBuf;
    use std::time::Instant;
    use wirelint::app::offline::Offline;
    use wirelint::capture::{Event, Reader, ReaderSettings};
    use wirelint::stats::Direction;
    use wirelint::wire::bson_walk;
    use wirelint::wire::message::Message;

    /// One application's capture, read into memory.
    pub struct Capture {
        pub name: String,
        pub events: Vec<Event>,
        pub requests: u64,
        /// Bytes of the replies (what the server returned).
        pub returned: u64,
        analysis: wirelint::analysis::Settings,
    }

    /// Every capture of fixtures/captures/ (`WIRELINT_REPLAY_ONLY=a,b`:
    /// those), with its application's wirelint.toml when it has one.
    pub fn load() -> Vec<Capture> {
        let only = std::env::var("WIRELINT_REPLAY_ONLY").ok();
        let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures().join("captures"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        let mut captures = Vec::new();
        for file in files {
            let Some(name) = file
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".pcapng.gz"))
                .map(str::to_string)
            else {
                continue;
            };
            if only
                .as_deref()
                .is_some_and(|o| !o.split(',').any(|o| o == name))
            {
                continue;
            }
            let mut events = Vec::new();
            let mut reader = Reader::new(ReaderSettings::default());
            reader
                .read_file(&file, &mut |e| events.push(e))
                .unwrap_or_else(|e| panic!("{}: {e:#}", file.display()));
            reader.finish(&mut |e| events.push(e));
            let (mut requests, mut returned) = (0, 0);
            for e in &events {
                if let Event::Message {
                    direction, frame, ..
                } = e
                {
                    match direction {
                        Direction::Request => requests += 1,
                        Direction::Reply => returned += frame.len() as u64,
                    }
                }
            }
            captures.push(Capture {
                analysis: analysis_of(&name),
                name,
                events,
                requests,
                returned,
            });
        }
        assert!(
            !captures.is_empty(),
            "no capture in fixtures/captures/ (scripts/captures.sh makes them)"
        );
        captures
    }

    /// The analysis the application runs with (its wirelint.toml), under
    /// `WIRELINT_TARGET`.
    fn analysis_of(name: &str) -> wirelint::analysis::Settings {
        let target = std::env::var("WIRELINT_TARGET").ok();
        match applications::dir(name) {
            Some(dir) => applications::analysis(&dir, target.as_deref()),
            None => panic!("fixtures/captures/{name}: no such application"),
        }
    }

    /// The analysis of one capture, as `wirelint analyse` runs it (the
    /// report is not built).
    pub fn analyse(capture: &Capture) -> Offline {
        let mut offline = Offline::new(&capture.analysis, capture.name.clone());
        for e in &capture.events {
            offline.event(e.clone());
        }
        offline
    }

    /// The floor: every element of every document of every message,
    /// visited once (nested ones too, to 100 levels), nothing else.
    pub fn walk(capture: &Capture) -> u64 {
        let mut elements = 0;
        for e in &capture.events {
            let Event::Message { frame, .. } = e else {
                continue;
            };
            match Message::parse(frame) {
                Ok(Message::Msg(m)) => {
                    elements += walk_doc(m.body, 0);
                    for seq in m.sequences() {
                        for doc in seq.documents().flatten() {
                            elements += walk_doc(doc, 0);
                        }
                    }
                }
                Ok(Message::Reply(r)) => {
                    for doc in r.documents() {
                        elements += walk_doc(doc, 0);
                    }
                }
                Ok(Message::Query(q)) => elements += walk_doc(q.query, 0),
                _ => {}
            }
        }
        elements
    }

    fn walk_doc(doc: &[u8], depth: usize) -> u64 {
        let mut n = 0;
        for e in bson_walk::elements(doc).map_while(Result::ok) {
            n += 1;
            if depth < 100 && matches!(e.element_type, 0x03 | 0x04) {
                n += walk_doc(e.value, depth + 1);
            }
        }
        n
    }

    /// Runs of each measurement (the median and the spread are printed).
    const RUNS: usize = 5;

    fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
        v.sort_by(|a, b| a.total_cmp(b));
        (v[v.len() / 2], v[0], v[v.len() - 1])
    }

    /// `WIRELINT_REPLAY=1`: per application, the analysis and the walk
    /// timed over [`RUNS`] runs each.
    pub fn figures() {
        let captures = load();
        println!(
            "{:<40} {:>8} {:>10} {:>22} {:>12} {:>12} {:>6}",
            "application (median of 5 runs)",
            "requests",
            "returned",
            "µs/request [min-max]",
            "µs/KiB",
            "walk µs/KiB",
            "×walk"
        );
        let mut per_request = Vec::new();
        for c in &captures {
            let mut analysis = Vec::new();
            let mut walking = Vec::new();
            for _ in 0..RUNS {
                let began = Instant::now();
                let offline = std::hint::black_box(analyse(c));
                analysis.push(began.elapsed().as_secs_f64() * 1e6);
                drop(offline);
                let began = Instant::now();
                std::hint::black_box(walk(c));
                walking.push(began.elapsed().as_secs_f64() * 1e6);
            }
            let (a, lo, hi) = median(analysis);
            let (w, _, _) = median(walking);
            let kib = (c.returned as f64 / 1024.0).max(1e-9);
            let requests = c.requests.max(1) as f64;
            per_request.push(a / requests);
            println!(
                "{:<40} {:>8} {:>9.0}K {:>8.1} [{:.1}-{:.1}] {:>12.2} {:>12.2} {:>6.1}",
                c.name,
                c.requests,
                kib,
                a / requests,
                lo / requests,
                hi / requests,
                a / kib,
                w / kib,
                a / w.max(1e-9)
            );
        }
        let (m, lo, hi) = median(per_request);
        println!(
            "median over {} applications: {m:.1} µs/request (applications from {lo:.1} to {hi:.1})",
            captures.len()
        );
    }

    /// `WIRELINT_CALLGRIND_REPLAY=1`: each application's analysis, then
    /// its walk, each in [`super::callgrind_measured_replay`] after a
    /// [`replay_boundary`] (`--dump-before` splits the counts there), in
    /// the order of the lines printed.
    pub fn callgrind() {
        let captures = load();
        for c in &captures {
            replay_boundary();
            super::callgrind_measured_replay(|| {
                std::hint::black_box(analyse(c));
            });
            println!("analysis\t{}\t{}\t{}", c.name, c.requests, c.returned);
            replay_boundary();
            super::callgrind_measured_replay(|| {
                std::hint::black_box(walk(c));
            });
            println!("walk\t{}\t{}\t{}", c.name, c.requests, c.returned);
        }
        replay_boundary();
    }

    /// Where callgrind starts a new part of its counts.
    #[inline(never)]
    pub fn replay_boundary() {
        std::hint::black_box(());
    }
}

/// A replay's measured part, alone in a function whose name callgrind
/// collects (`--toggle-collect='*callgrind_measured*'`).
#[inline(never)]
fn callgrind_measured_replay(f: impl FnOnce()) {
    f()
}
