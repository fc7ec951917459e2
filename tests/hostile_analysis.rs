//! The hostile-analysis suite, against the release binary: traffic built
//! to break the analysis — nesting thousands deep through every construct
//! the analysis walks, 10^5 new keys of every kind, compression bombs, a
//! rule that panics, unauthenticated clients, bare headers with the
//! backend down — while a steady client (the Rust driver) works through
//! the same wirelint. For every case: the steady client sees no error, the
//! process stays up, its RSS stays under the analysis budget plus the
//! forwarding budget plus what it held at start (figures printed), and at
//! the end every share of the budget sits within its limit, the ones the
//! keys were aimed at evicting.
//!
//! It runs `target/release/wirelint`, which must be built and newer than
//! the sources (`cargo build --release`; scripts/test.sh builds it first).

mod common;

use common::{Backend, BackendOptions};
use mongodb::bson::{doc, Document};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wirelint::wire::compressed::{self, Compressor};
use wirelint::wire::op_msg;

const ANALYSIS_MIB: u64 = 32;
const FORWARD_MIB: u64 = 64;
const MIB: f64 = (1 << 20) as f64;

/// The release binary, checked to be newer than every source file.
fn release_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::manifest_dir().join("target"));
    let bin = target.join("release/wirelint");
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: this suite runs against the release binary; build it with \
                 `cargo build --release` (scripts/test.sh does)",
                bin.display()
            )
        });
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut dirs = vec![common::manifest_dir().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(t) = entry.metadata().and_then(|m| m.modified()) {
                newest = newest.max(t);
            }
        }
    }
    assert!(
        built >= newest,
        "{} is older than the sources: rebuild it with `cargo build --release`",
        bin.display()
    );
    bin
}

/// The release binary running as a proxy.
struct Wirelint {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
}

impl Wirelint {
    fn start(upstream: &str) -> Wirelint {
        let (port, admin_port) = (common::free_port(), common::free_port());
        let log = std::env::temp_dir().join(format!("wirelint-hostile-{port}.log"));
        let child = std::process::Command::new(release_binary())
            .args(["proxy", "--upstream", upstream, "--summary-interval", "off"])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin", &format!("127.0.0.1:{admin_port}")])
            .args(["--analysis-memory", &format!("{ANALYSIS_MIB}MiB")])
            .args(["--forward-memory", &format!("{FORWARD_MIB}MiB")])
            .env(wirelint::app::TEST_PANICKING_RULE, "1")
            // The worst case for panics: backtraces asked for.
            .env("RUST_BACKTRACE", "1")
            .env("RUST_LOG", "wirelint=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting the release binary");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "wirelint did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Wirelint {
            child,
            addr,
            admin: format!("127.0.0.1:{admin_port}").parse().unwrap(),
        }
    }

    fn rss(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .unwrap_or(0)
            * 1024
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    async fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.admin).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        String::from_utf8_lossy(&buf).into_owned()
    }

    async fn metric(&self, line_start: &str) -> u64 {
        self.metrics()
            .await
            .lines()
            .find(|l| l.starts_with(line_start))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    }
}

impl Drop for Wirelint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// Raw BSON, built by hand: thousands of levels deep without recursion
// (the bson crate's builders and drops recurse).

fn cstring(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// A document of `(key, type, value bytes)` elements.
fn document(elements: &[(&str, u8, &[u8])]) -> Vec<u8> {
    let mut out = vec![0; 4];
    for (key, kind, value) in elements {
        out.push(*kind);
        cstring(&mut out, key);
        out.extend_from_slice(value);
    }
    out.push(0);
    let len = out.len() as i32;
    out[..4].copy_from_slice(&len.to_le_bytes());
    out
}

fn string(s: &str) -> Vec<u8> {
    let mut out = ((s.len() + 1) as i32).to_le_bytes().to_vec();
    cstring(&mut out, s);
    out
}

const DOC: u8 = 0x03;
const ARRAY: u8 = 0x04;
const STR: u8 = 0x02;
const INT: u8 = 0x10;

/// `leaf` wrapped `depth` times by `wrap`.
fn nest(depth: usize, leaf: Vec<u8>, wrap: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut v = leaf;
    for _ in 0..depth {
        v = wrap(&v);
    }
    v
}

fn one(i: i32) -> Vec<u8> {
    document(&[("a", INT, &i.to_le_bytes())])
}

/// `{ <key>: [ inner ] }`
fn op_of_one(key: &'static str) -> impl Fn(&[u8]) -> Vec<u8> {
    move |inner| document(&[(key, ARRAY, &document(&[("0", DOC, inner)]))])
}

fn command(name: &str, coll: &str, rest: &[(&str, u8, &[u8])]) -> Vec<u8> {
    let coll = string(coll);
    let db = string("hostile");
    let mut elements: Vec<(&str, u8, &[u8])> = vec![(name, STR, &coll)];
    elements.extend_from_slice(rest);
    elements.push(("$db", STR, &db));
    document(&elements)
}

fn find(filter: &[u8]) -> Vec<u8> {
    command("find", "c", &[("filter", DOC, filter)])
}

fn aggregate(stage: &[u8]) -> Vec<u8> {
    let pipeline = document(&[("0", DOC, stage)]);
    let cursor = document(&[]);
    command(
        "aggregate",
        "c",
        &[("pipeline", ARRAY, &pipeline), ("cursor", DOC, &cursor)],
    )
}

/// A command document as an OP_MSG.
fn msg(id: i32, body: &[u8]) -> Vec<u8> {
    op_msg::encode(id, 0, 0, body, &[])
}

fn bson_msg(id: i32, body: Document) -> Vec<u8> {
    msg(
        id,
        mongodb::bson::RawDocumentBuf::try_from(&body)
            .unwrap()
            .as_bytes(),
    )
}

/// The deep constructs: each builds a command nested about `levels` BSON
/// levels (documents and arrays; a `$and` level is two of them, a
/// sub-pipeline three).
fn deep_cases(levels: usize) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add = |name: &str, body: Vec<u8>| out.push((format!("{name}, {levels} levels"), body));
    let depth = levels - 4;
    for op in ["$and", "$or", "$nor"] {
        add(
            &format!("filter {op}"),
            find(&nest(depth / 2, one(1), op_of_one(op))),
        );
    }
    let not = nest(
        depth,
        document(&[("$eq", INT, &1i32.to_le_bytes())]),
        |inner| document(&[("$not", DOC, inner)]),
    );
    add("filter $not", find(&document(&[("a", DOC, &not)])));
    let elem = nest(depth / 2, one(1), |inner| {
        document(&[("b", DOC, &document(&[("$elemMatch", DOC, inner)]))])
    });
    add("filter $elemMatch", find(&elem));
    let arrays = nest(
        depth,
        document(&[("0", INT, &1i32.to_le_bytes())]),
        |inner| document(&[("0", ARRAY, inner)]),
    );
    add(
        "filter nested arrays",
        find(&document(&[("a", ARRAY, &arrays)])),
    );
    let docs = nest(depth, one(1), |inner| document(&[("a", DOC, inner)]));
    add("filter nested documents", find(&docs));
    add(
        "projection",
        command(
            "find",
            "c",
            &[("filter", DOC, &one(1)), ("projection", DOC, &docs)],
        ),
    );
    add(
        "sort",
        command(
            "find",
            "c",
            &[("filter", DOC, &one(1)), ("sort", DOC, &docs)],
        ),
    );
    let set = document(&[("$set", DOC, &document(&[("x", DOC, &docs)]))]);
    let statement = document(&[("q", DOC, &one(1)), ("u", DOC, &set)]);
    add(
        "update $set",
        command(
            "update",
            "c",
            &[("updates", ARRAY, &document(&[("0", DOC, &statement)]))],
        ),
    );
    add(
        "pipeline $match",
        aggregate(&document(&[("$match", DOC, &docs)])),
    );
    let from = string("c");
    let as_ = string("x");
    let lookup = nest(depth / 3, document(&[("$match", DOC, &one(1))]), |stage| {
        let pipeline = document(&[("0", DOC, stage)]);
        document(&[(
            "$lookup",
            DOC,
            &document(&[
                ("from", STR, &from),
                ("pipeline", ARRAY, &pipeline),
                ("as", STR, &as_),
            ]),
        )])
    });
    add("$lookup sub-pipelines", aggregate(&lookup));
    let facet = nest(depth / 3, document(&[("$match", DOC, &one(1))]), |stage| {
        let pipeline = document(&[("0", DOC, stage)]);
        document(&[("$facet", DOC, &document(&[("f", ARRAY, &pipeline)]))])
    });
    add("$facet sub-pipelines", aggregate(&facet));
    let union = nest(depth / 3, document(&[("$match", DOC, &one(1))]), |stage| {
        let pipeline = document(&[("0", DOC, stage)]);
        document(&[(
            "$unionWith",
            DOC,
            &document(&[("coll", STR, &from), ("pipeline", ARRAY, &pipeline)]),
        )])
    });
    add("$unionWith sub-pipelines", aggregate(&union));
    let id = document(&[("_id", DOC, &docs)]);
    add(
        "_id value",
        command(
            "insert",
            "ids",
            &[("documents", ARRAY, &document(&[("0", DOC, &id)]))],
        ),
    );
    out
}

/// Sends `messages` on one connection, `window` at a time, reading a reply
/// for each. Returns the replies read; stops at the first close (a backend
/// may close on what it refuses).
async fn exchange(addr: SocketAddr, messages: &[Vec<u8>], window: usize) -> usize {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut replies = 0;
    for batch in messages.chunks(window) {
        let bytes: Vec<u8> = batch.concat();
        if s.write_all(&bytes).await.is_err() {
            return replies;
        }
        for _ in batch {
            let read = tokio::time::timeout(Duration::from_secs(30), read_reply(&mut s)).await;
            match read {
                Ok(Ok(_)) => replies += 1,
                _ => return replies,
            }
        }
    }
    replies
}

/// One reply, read exactly (pipelined replies follow it on the stream).
async fn read_reply(s: &mut TcpStream) -> std::io::Result<()> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = i32::from_le_bytes(len).max(4) as usize;
    let mut rest = vec![0u8; len - 4];
    s.read_exact(&mut rest).await?;
    Ok(())
}

/// The steady client: the Rust driver, inserting and reading back, for as
/// long as the suite runs.
fn steady(
    uri: String,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = common::client(&uri).await;
        let coll = client.database("steady").collection::<Document>("c");
        let mut n = 0i64;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let done = async {
                coll.insert_one(doc! {"_id": n, "v": n}).await?;
                coll.find_one(doc! {"_id": n}).await
            }
            .await;
            match done {
                Ok(Some(_)) => ok.fetch_add(1, Ordering::Relaxed),
                other => {
                    eprintln!("steady client: {other:?}");
                    failed.fetch_add(1, Ordering::Relaxed)
                }
            };
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

struct Case {
    name: String,
    messages: Vec<Vec<u8>>,
    window: usize,
}

fn case(name: impl Into<String>, messages: Vec<Vec<u8>>) -> Case {
    Case {
        name: name.into(),
        messages,
        window: 500,
    }
}

const KEYS: i32 = 100_000;

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for depth in [190, 5_000] {
        for (name, body) in deep_cases(depth) {
            out.push(case(name, vec![msg(1, &body)]));
        }
    }
    // 10^5 distinct `$slice` projection keys, 20,000 to a find.
    out.push(case(
        "10^5 distinct projection keys",
        (0..5)
            .map(|j| {
                let mut projection = Document::new();
                for i in 0..KEYS / 5 {
                    projection.insert(format!("k{j}_{i}"), doc! {"$slice": 5});
                }
                bson_msg(j, doc! {"find": "c", "filter": {"a": 1}, "projection": projection, "$db": "hostile"})
            })
            .collect(),
    ));
    out.push(case(
        "10^5 distinct comments",
        (0..KEYS)
            .map(|i| bson_msg(i, doc! {"find": "c", "filter": {"a": 1}, "comment": format!("comment {i}"), "$db": "hostile"}))
            .collect(),
    ));
    out.push(case(
        "10^5 namespaces",
        (0..KEYS)
            .map(|i| {
                bson_msg(
                    i,
                    doc! {"find": format!("ns{i}"), "filter": {"a": 1}, "$db": "hostile"},
                )
            })
            .collect(),
    ));
    out.push(case(
        "10^5 distinct shapes",
        (0..KEYS)
            .map(|i| {
                bson_msg(
                    i,
                    doc! {"find": "c", "filter": {format!("f{i}"): 1}, "$db": "hostile"},
                )
            })
            .collect(),
    ));
    out.push(case(
        "10^4 inserts, each a new field set, path and id",
        (0..KEYS / 10)
            .map(|i| bson_msg(i, doc! {"insert": "fields", "documents": [{"_id": i, format!("f{i}"): 1, format!("a{i}"): [1, 2]}], "$db": "hostile"}))
            .collect(),
    ));
    let ping = bson_msg(1, doc! {"ping": 1, "$db": "admin"});
    for compressor in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
        // 40 MB of zeros in a few KB, declared as such: inflated by the
        // analysis (outside any lock), within the declared size.
        let mut big = Vec::new();
        wirelint::wire::Header {
            message_length: 16 + 40_000_000,
            request_id: 1,
            response_to: 0,
            op_code: 2013,
        }
        .write(&mut big);
        big.resize(16 + 40_000_000, 0);
        out.push(case(
            format!("{} bomb: 40 MB of zeros", compressor.name()),
            vec![
                compressed::compress(&big, compressor).unwrap(),
                ping.clone(),
            ],
        ));
    }
    out.push(case(
        "a rule that panics, 1,000 times",
        (0..1_000)
            .map(|i| bson_msg(i, doc! {"find": "c", "filter": {"a": i}, "comment": wirelint::app::PANIC_MARKER, "$db": "hostile"}))
            .collect(),
    ));
    out.push(case(
        "10^4 refused requests with new keys (not learnt)",
        (0..KEYS / 10)
            .map(|i| bson_msg(i, doc! {"find": "c", "filter": {format!("r{i}"): {"$bogus": 1}}, "comment": format!("refused {i}"), "$db": "hostile"}))
            .collect(),
    ));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, release binary")]
async fn hostile_traffic_cannot_stop_slow_or_bloat_wirelint() {
    let backend = Backend::shared();
    let mut proxy = Wirelint::start(&backend.uri());
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let steady = steady(
        format!("mongodb://{}/?directConnection=true", proxy.addr),
        stop.clone(),
        ok.clone(),
        failed.clone(),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start_rss = proxy.rss();
    let limit = start_rss + ((ANALYSIS_MIB + FORWARD_MIB) << 20);
    let cases = cases();
    assert!(cases.len() >= 25, "{} cases", cases.len());
    println!(
        "release binary; budget: analysis {ANALYSIS_MIB} MiB + forwarding {FORWARD_MIB} MiB; RSS at start {:.1} MiB, limit {:.1} MiB",
        start_rss as f64 / MIB,
        limit as f64 / MIB
    );
    println!(
        "{:>52} {:>8} {:>8} {:>9} {:>7}",
        "case", "sent", "replies", "RSS MiB", "s"
    );
    let mut peak = 0;
    for c in &cases {
        let started = Instant::now();
        let replies = exchange(proxy.addr, &c.messages, c.window).await;
        // Let the analysis catch up before measuring.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let rss = proxy.rss();
        peak = peak.max(rss);
        println!(
            "{:>52} {:>8} {:>8} {:>9.1} {:>7.1}",
            c.name,
            c.messages.len(),
            replies,
            rss as f64 / MIB,
            started.elapsed().as_secs_f64()
        );
        assert!(proxy.alive(), "{}: wirelint stopped", c.name);
        assert_eq!(
            failed.load(Ordering::Relaxed),
            0,
            "{}: the steady client saw errors",
            c.name
        );
        assert!(
            rss <= limit,
            "{}: RSS {:.1} MiB above {:.1} MiB",
            c.name,
            rss as f64 / MIB,
            limit as f64 / MIB
        );
    }
    stop.store(true, Ordering::Relaxed);
    steady.await.unwrap();
    let steady_ops = ok.load(Ordering::Relaxed);
    assert!(steady_ops > 100, "the steady client ran: {steady_ops}");

    let metrics = proxy.metrics().await;
    let too_deep = proxy
        .metric("wirelint_analysis_decode_errors_total{kind=\"too_deep\"}")
        .await;
    assert!(
        too_deep >= 15,
        "messages 5,000 deep skipped as too_deep: {too_deep}"
    );
    let panics = proxy
        .metric("wirelint_rule_panics_total{rule=\"TEST-PANIC\"}")
        .await;
    assert!(panics >= 1_000, "the test rule's panics counted: {panics}");
    assert!(
        proxy.metric("wirelint_findings{").await > 0
            || metrics.contains("wirelint_operations_total"),
        "the other rules kept working"
    );
    let table = |field: &str, name: &str| -> u64 {
        let key = format!("wirelint_analysis_table_{field}{{table=\"{name}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(key.as_str())?.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in /metrics"))
    };
    for name in [
        "patterns",
        "shapes",
        "namespaces",
        "document_ids",
        "cursors",
        "connections",
        "findings",
        "rules",
    ] {
        let (bytes, max) = (table("bytes", name), table("max_bytes", name));
        println!(
            "{name:>13}: {} entries, {:.1} of {:.1} MiB, {} evicted",
            table("entries", name),
            bytes as f64 / MIB,
            max as f64 / MIB,
            table("evictions_total", name)
        );
        assert!(
            bytes <= max + (64 << 10),
            "{name}: {bytes} bytes, limit {max}"
        );
    }
    for name in ["patterns", "shapes", "namespaces", "rules"] {
        assert!(
            table("evictions_total", name) > 0,
            "{name}: the keys sent never filled it"
        );
    }
    println!(
        "steady client: {steady_ops} round trips, 0 errors; RSS peak {:.1} MiB (limit {:.1})",
        peak as f64 / MIB,
        limit as f64 / MIB
    );
}

/// Unauthenticated clients on a backend that requires authentication:
/// every request is refused, so nothing is learnt — the tables stay empty
/// however many new keys are sent — and the refusals are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, release binary")]
async fn unauthenticated_clients_teach_nothing() {
    let backend = Backend::start(BackendOptions {
        user: Some(("admin".into(), "pw-hostile".into())),
        ..Default::default()
    });
    let mut proxy = Wirelint::start(&backend.uri());
    // A steady client beside them: pings, which need no login (the Rust
    // driver cannot log in to FerretDB v1.24.2 even directly; see
    // tests/drivers.rs), each checked for `ok: 1`.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let steady = {
        let (addr, stop, ok, failed) = (proxy.addr, stop.clone(), ok.clone(), failed.clone());
        tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let ping = bson_msg(1, doc! {"ping": 1, "$db": "admin"});
            while !stop.load(Ordering::Relaxed) {
                let answered = async {
                    s.write_all(&ping).await?;
                    let mut len = [0u8; 4];
                    s.read_exact(&mut len).await?;
                    let mut rest = vec![0u8; i32::from_le_bytes(len).max(4) as usize - 4];
                    s.read_exact(&mut rest).await?;
                    std::io::Result::Ok(rest)
                }
                .await;
                // The body follows the 12 header bytes left, flags and kind.
                let good = answered.ok().and_then(|r| {
                    let body = mongodb::bson::RawDocument::from_bytes(r.get(17..)?).ok()?;
                    body.get("ok").ok().flatten()?.as_f64()
                }) == Some(1.0);
                let counter = if good { &ok } else { &failed };
                counter.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let messages: Vec<Vec<u8>> = (0..10_000)
        .map(|i| bson_msg(i, doc! {"find": format!("ns{i}"), "filter": {format!("k{i}"): 1}, "comment": format!("c{i}"), "$db": "hostile"}))
        .collect();
    let replies = exchange(proxy.addr, &messages, 500).await;
    assert_eq!(replies, 10_000, "every request answered (refused)");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(proxy.alive());
    let metrics = proxy.metrics().await;
    // The authenticated client's own patterns and shapes (an insert and a
    // find) are there; none of the 10,000 refused ones (each had its own
    // comment and filter key).
    for name in ["patterns", "shapes"] {
        let entries = metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "wirelint_analysis_table_entries{{table=\"{name}\"}} "
                ))?
                .parse::<u64>()
                .ok()
            })
            .unwrap();
        assert!(
            entries <= 2,
            "{name}: {entries} entries: learnt from refused requests"
        );
    }
    stop.store(true, Ordering::Relaxed);
    steady.await.unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "the steady client saw errors"
    );
    assert!(ok.load(Ordering::Relaxed) > 10, "the steady client ran");
    println!(
        "10,000 unauthenticated finds with new keys: refused, nothing learnt; RSS {:.1} MiB; a pinging client beside them: {} round trips, 0 errors",
        proxy.rss() as f64 / MIB,
        ok.load(Ordering::Relaxed)
    );
}

/// With the backend down, 200 connections that each send a bare 16-byte
/// header announcing 48 MB cost the release binary almost nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs the release binary")]
async fn bare_headers_with_the_backend_down_cost_the_release_binary_nothing() {
    let dead = format!("mongodb://127.0.0.1:{}/", common::free_port());
    let mut proxy = Wirelint::start(&dead);
    let before = proxy.rss();
    let mut held = Vec::new();
    for i in 0..200 {
        let mut s = TcpStream::connect(proxy.addr).await.unwrap();
        let mut header = Vec::new();
        wirelint::wire::Header {
            message_length: 48_000_000,
            request_id: i,
            response_to: 0,
            op_code: 2013,
        }
        .write(&mut header);
        s.write_all(&header).await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let grown = proxy.rss().saturating_sub(before);
    println!(
        "200 bare headers announcing 48 MB, backend down: RSS grew {} KiB",
        grown >> 10
    );
    assert!(proxy.alive());
    assert!(grown < 32 << 20, "RSS grew {:.1} MiB", grown as f64 / MIB);
    drop(held);
}
