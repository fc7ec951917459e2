//! The proxy benchmark: direct vs through a plain relay vs through wirelint
//! (analysis off and on) vs mongobetween, in one run.
//!
//! ```sh
//! scripts/bench.sh    # or: cargo bench --bench proxy -- [--seconds 2] [--rounds 2] [--budgets 5,10,25]
//!                     #   [--conns 1,16,64,256] [--ferretdb-conns 1,16,64]
//!                     #   [--no-ferretdb] [--scale 9000]
//!                     #   [--workloads ping,find,insert,cursor,read,mixed]
//!                     #   [--go] [--idle]
//! ```
//!
//! Targets, interleaved round by round (A B C D A B C D …) so machine drift
//! cancels out:
//! - `direct`: the backend itself;
//! - `tcp-relay`: socat relaying bytes (when installed; it forks per
//!   connection, so its CPU is not measured);
//! - `haproxy`: HAProxy in TCP mode (when installed): the relay to beat —
//!   `×relay` and `cpu×relay` are against it when it runs;
//! - `wirelint-off`: the wirelint binary with `--no-analysis`;
//! - `wirelint-on`: the wirelint binary with analysis on (all rules);
//! - `mongobetween`: when a `mongobetween` binary is on PATH or in ~/go/bin;
//! - `baseline-on`: with `WIRELINT_BASELINE=/path/to/wirelint` (another
//!   build, e.g. the commit before a change), analysis on.
//!
//! Backends: a wire responder (this binary re-run with `--responder`, so
//! it is a process of its own like any database) that answers hello, ping,
//! find, getMore and insert with prepared replies at memory speed — a
//! benchmark fixture, never used to test correctness — so the proxy's own
//! cost is visible; and FerretDB on SQLite (what users see).
//!
//! The generator is closed-loop: N connections, each sending a request and
//! waiting for its reply (a cursor workload follows its getMores), over a
//! fixed duration after a warm-up; latencies go into an HdrHistogram.
//! Proxy CPU per operation is read from /proc (all threads), and for
//! wirelint the analysis threads' part of it apart (`anl µs/op`), so a
//! difference between analysis on and off splits into the analysis itself
//! and what handing messages to it costs the forwarding threads. Figures
//! are printed, never asserted.

use bson::rawdoc;
use hdrhistogram::Histogram;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wirelint::wire::{op_msg, Header, HEADER_LEN};

/// Reads one whole message into `buf`.
async fn read_message(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.resize(HEADER_LEN, 0);
    s.read_exact(&mut buf[..HEADER_LEN]).await?;
    let len = i32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
    if !(HEADER_LEN..=48_000_000).contains(&len) {
        return Err(std::io::Error::other(format!("bad message length {len}")));
    }
    buf.resize(len, 0);
    s.read_exact(&mut buf[HEADER_LEN..]).await?;
    Ok(())
}

const KIB: usize = 1024;
/// Documents per cursor batch, and batches per cursor (100 documents).
const BATCH: usize = 10;
const BATCHES: i64 = 10;

fn pad(n: usize) -> String {
    "x".repeat(n)
}

// ---------------------------------------------------------------------------
// The responder (benchmark fixture), run as its own process.

struct Replies {
    hello: Vec<u8>,
    ok: Vec<u8>,
    insert: Vec<u8>,
    find_one: Vec<u8>,
    big: Vec<u8>,
    /// `cursor_first`, then `get_more[k]` answers a getMore on cursor k.
    cursor_first: Vec<u8>,
    get_more: Vec<Vec<u8>>,
}

fn replies() -> Replies {
    let encode = |doc: bson::RawDocumentBuf| op_msg::encode(0, 0, 0, doc.as_bytes(), &[]);
    let docs = |n: usize| {
        let mut a = bson::RawArrayBuf::new();
        for i in 0..n {
            a.push(rawdoc! {"_id": i as i32, "pad": pad(KIB - 30)});
        }
        a
    };
    Replies {
        hello: encode(rawdoc! {
            "isWritablePrimary": true, "maxBsonObjectSize": 16777216i32, "maxMessageSizeBytes": 48000000i32,
            "maxWriteBatchSize": 100000i32, "logicalSessionTimeoutMinutes": 30i32, "minWireVersion": 0i32,
            "maxWireVersion": 21i32, "ok": 1.0,
        }),
        ok: encode(rawdoc! {"ok": 1.0}),
        insert: encode(rawdoc! {"n": 1i32, "ok": 1.0}),
        find_one: encode(
            rawdoc! {"cursor": {"id": 0i64, "ns": "bench.c", "firstBatch": docs(1)}, "ok": 1.0},
        ),
        big: encode(rawdoc! {"cursor": {"id": 0i64, "ns": "bench.big", "firstBatch": [
            {"_id": 1i32, "pad": pad(1024 * KIB)}
        ]}, "ok": 1.0}),
        cursor_first: encode(
            rawdoc! {"cursor": {"id": BATCHES - 1, "ns": "bench.cursor", "firstBatch": docs(BATCH)}, "ok": 1.0},
        ),
        get_more: (0..BATCHES)
            .map(|k| {
                encode(rawdoc! {"cursor": {"id": k - 1, "ns": "bench.cursor", "nextBatch": docs(BATCH)}, "ok": 1.0})
            })
            .collect(),
    }
}

fn reply_for<'r>(replies: &'r Replies, request: &[u8]) -> &'r [u8] {
    let Ok(message) = wirelint::wire::Message::parse(request) else {
        return &replies.ok;
    };
    let body = match &message {
        wirelint::wire::Message::Msg(m) => bson::RawDocument::from_bytes(m.body).ok(),
        wirelint::wire::Message::Query(q) => bson::RawDocument::from_bytes(q.command()).ok(),
        _ => None,
    };
    let Some((name, value)) = body.and_then(|b| b.iter().next()).and_then(Result::ok) else {
        return &replies.ok;
    };
    match (name.as_str(), value) {
        ("hello" | "isMaster" | "ismaster", _) => &replies.hello,
        ("find", bson::RawBsonRef::String("big")) => &replies.big,
        ("find", bson::RawBsonRef::String("cursor")) => &replies.cursor_first,
        ("find", _) => &replies.find_one,
        ("getMore", bson::RawBsonRef::Int64(k)) => replies
            .get_more
            .get(k.clamp(0, BATCHES - 1) as usize)
            .unwrap(),
        ("insert", _) => &replies.insert,
        _ => &replies.ok,
    }
}

/// `--responder`: serve on a free port, print it, run until stdin closes.
fn run_responder() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap());
        let replies: &'static Replies = Box::leak(Box::new(replies()));
        std::thread::spawn(|| {
            // The parent closes our stdin when it is done (or dies).
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            std::process::exit(0);
        });
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                let mut out = Vec::with_capacity(4096);
                while read_message(&mut s, &mut buf).await.is_ok() {
                    let request_id = Header::parse(&buf).unwrap().request_id;
                    out.clear();
                    out.extend_from_slice(reply_for(replies, &buf));
                    out[8..12].copy_from_slice(&request_id.to_le_bytes());
                    if s.write_all(&out).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
}

// ---------------------------------------------------------------------------
// Processes: backends and targets.

/// A child process, killed when dropped; for wirelint, its admin address.
struct Proc(Child, SocketAddr, Option<SocketAddr>);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// For wirelint: messages forwarded, and of them those the analysis
    /// did not see (dropped with its queue full, or shed by sampling), from
    /// its `/metrics`.
    fn coverage(&self) -> Option<Coverage> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.2?).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let sum = |prefix: &str| -> u64 {
            text.lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
                .sum()
        };
        Some(Coverage {
            forwarded: sum("wirelint_forwarded_messages_total{"),
            unanalysed: sum("wirelint_analysis_dropped_total ")
                + sum("wirelint_analysis_shed_total "),
        })
    }

    /// CPU time of every thread, from /proc (Linux).
    fn cpu(&self) -> Option<Duration> {
        self.cpu_split().map(|c| c.all)
    }

    /// CPU time of every thread, and of wirelint's analysis threads among
    /// them (named `wirelint-analysis-N`, which the kernel cuts to 15
    /// bytes), from /proc (Linux).
    fn cpu_split(&self) -> Option<Cpu> {
        let mut cpu = Cpu::default();
        for task in std::fs::read_dir(format!("/proc/{}/task", self.0.id())).ok()? {
            let path = task.ok()?.path();
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            let ns = Duration::from_nanos(stat.split_whitespace().next()?.parse::<u64>().ok()?);
            cpu.all += ns;
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if comm.starts_with("wirelint-analys") {
                cpu.analysis += ns;
            }
        }
        Some(cpu)
    }

    /// Resident memory (VmRSS), bytes.
    fn rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    }
}

/// A process's CPU time: all threads, and the analysis threads' share.
#[derive(Clone, Copy, Default)]
struct Cpu {
    all: Duration,
    analysis: Duration,
}

impl Cpu {
    /// What was spent between `before` and `self`, scaled by `share` (the
    /// measured part of a run that includes its warm-up).
    fn since(self, before: Cpu, share: f64) -> Cpu {
        Cpu {
            all: self.all.saturating_sub(before.all).mul_f64(share),
            analysis: self.analysis.saturating_sub(before.analysis).mul_f64(share),
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_listening(addr: SocketAddr, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn responder() -> Proc {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--responder")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    Proc(child, line.trim().parse().unwrap(), None)
}

fn wirelint_bin() -> String {
    std::env::var("WIRELINT_BIN")
        .unwrap_or_else(|_| format!("{}/target/release/wirelint", env!("CARGO_MANIFEST_DIR")))
}

fn wirelint(upstream: SocketAddr, analysis: bool) -> Proc {
    wirelint_binary(&wirelint_bin(), upstream, analysis, &[])
}

fn wirelint_binary(bin: &str, upstream: SocketAddr, analysis: bool, extra: &[&str]) -> Proc {
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cmd = Command::new(bin);
    cmd.args([
        "proxy",
        "--listen",
        &listen.to_string(),
        "--admin",
        &admin.to_string(),
        "--upstream",
        &format!("mongodb://{upstream}/"),
        "--summary-interval",
        "off",
        "--max-connections",
        "20000",
    ])
    .env("RUST_LOG", "wirelint=warn")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if !analysis {
        cmd.arg("--no-analysis");
    }
    cmd.args(extra);
    let child = cmd.spawn().unwrap_or_else(|e| {
        panic!("cannot start {bin} (build it with cargo build --release): {e}")
    });
    assert!(
        wait_listening(listen, Duration::from_secs(10)),
        "wirelint did not start"
    );
    Proc(child, listen, Some(admin))
}

/// Starts a relay listening on 127.0.0.1:`port`; `None` when it is not
/// installed or does not listen.
fn spawn_relay(command: &mut Command, port: u16) -> Option<Proc> {
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    wait_listening(addr, Duration::from_secs(5)).then_some(Proc(child, addr, None))
}

/// socat from Debian (scripts/bench.sh installs it when it can).
fn relay(upstream: SocketAddr) -> Option<Proc> {
    let port = free_port();
    spawn_relay(
        Command::new("socat")
            .arg(format!(
                "TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr,nodelay,backlog=1024"
            ))
            .arg(format!("TCP:{upstream},nodelay")),
        port,
    )
}

/// HAProxy in TCP mode (Debian's package; scripts/bench.sh installs it
/// when it can): the relay to beat — one multi-threaded process, so its
/// CPU per operation is measured like wirelint's.
fn haproxy(upstream: SocketAddr) -> Option<Proc> {
    let port = free_port();
    let config = std::env::temp_dir().join(format!("wirelint-bench-haproxy-{port}.cfg"));
    std::fs::write(
        &config,
        format!(
            "global\n  maxconn 4096\n\ndefaults\n  mode tcp\n  timeout connect 5s\n  \
             timeout client 1h\n  timeout server 1h\n\nfrontend wirelint_bench\n  \
             bind 127.0.0.1:{port}\n  default_backend upstream\n\nbackend upstream\n  \
             server s1 {upstream}\n"
        ),
    )
    .ok()?;
    spawn_relay(
        Command::new("haproxy").arg("-db").arg("-f").arg(&config),
        port,
    )
}

/// mongobetween (github.com/coinbase/mongobetween), when installed.
fn mongobetween(upstream: SocketAddr) -> Option<Proc> {
    let home = std::env::var("HOME").unwrap_or_default();
    let bin = [
        "mongobetween".to_string(),
        format!("{home}/go/bin/mongobetween"),
    ]
    .into_iter()
    .find(|b| {
        Command::new(b)
            .arg("-h")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    })?;
    let port = free_port();
    let child = Command::new(bin)
        .args(["-network", "tcp", "-loglevel", "error"])
        .arg(format!(
            "127.0.0.1:{port}=mongodb://{upstream}/?directConnection=true"
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    wait_listening(addr, Duration::from_secs(10)).then_some(Proc(child, addr, None))
}

fn ferretdb() -> Option<(Proc, tempfile::TempDir)> {
    let bin = std::env::var("WIRELINT_FERRETDB").ok().or_else(|| {
        let out = Command::new("bash")
            .arg(format!(
                "{}/scripts/ferretdb.sh",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg("path")
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    })?;
    let dir = tempfile::tempdir().ok()?;
    let port = free_port();
    let child = Command::new(bin)
        .args([
            "--handler=sqlite",
            &format!("--sqlite-url=file:{}/", dir.path().display()),
            &format!("--state-dir={}", dir.path().display()),
            &format!("--listen-addr=127.0.0.1:{port}"),
            "--debug-addr=127.0.0.1:0",
            "--telemetry=disable",
            "--log-level=error",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    wait_listening(addr, Duration::from_secs(20)).then_some((Proc(child, addr, None), dir))
}

/// Loads FerretDB with what the workloads read.
async fn seed(addr: SocketAddr) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut buf = Vec::new();
    let send = |body: bson::RawDocumentBuf| op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
    let mut batches = Vec::new();
    for chunk in 0..10 {
        let mut docs = bson::RawArrayBuf::new();
        for i in 0..100 {
            docs.push(rawdoc! {"_id": chunk * 100 + i, "pad": pad(KIB - 30)});
        }
        batches.push(send(
            rawdoc! {"insert": "c", "documents": docs, "$db": "bench"},
        ));
    }
    let mut docs = bson::RawArrayBuf::new();
    for i in 0..(BATCH as i64 * BATCHES) {
        docs.push(rawdoc! {"_id": i, "pad": pad(KIB - 30)});
    }
    batches.push(send(
        rawdoc! {"insert": "cursor", "documents": docs, "$db": "bench"},
    ));
    batches.push(send(rawdoc! {"insert": "big", "documents": [{"_id": 1i32, "pad": pad(1024 * KIB)}], "$db": "bench"}));
    for request in batches {
        s.write_all(&request).await.unwrap();
        read_message(&mut s, &mut buf).await.unwrap();
    }
}

// ---------------------------------------------------------------------------
// Load.

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Ping,
    FindOne,
    Insert1KiB,
    Cursor100,
    Read1MiB,
    Mixed,
}

const WORKLOADS: [Workload; 6] = [
    Workload::Ping,
    Workload::FindOne,
    Workload::Insert1KiB,
    Workload::Cursor100,
    Workload::Read1MiB,
    Workload::Mixed,
];

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Ping => "ping",
            Workload::FindOne => "find one by _id",
            Workload::Insert1KiB => "insert 1 KiB",
            Workload::Cursor100 => "cursor 100×1 KiB",
            Workload::Read1MiB => "read 1 MiB doc",
            Workload::Mixed => "mixed 90/5/5",
        }
    }

    /// The operation number `n` of this workload (the mixed blend: 90 %
    /// finds, 5 % inserts, 5 % cursors).
    fn op(self, n: u64) -> Workload {
        match (self, n % 20) {
            (Workload::Mixed, 0) => Workload::Insert1KiB,
            (Workload::Mixed, 10) => Workload::Cursor100,
            (Workload::Mixed, _) => Workload::FindOne,
            (w, _) => w,
        }
    }

    fn request(self, id: i32) -> Vec<u8> {
        let body = match self {
            Workload::Ping => rawdoc! {"ping": 1i32, "$db": "admin"},
            Workload::FindOne => {
                rawdoc! {"find": "c", "filter": {"_id": id % 1000}, "limit": 1i32, "singleBatch": true, "$db": "bench"}
            }
            Workload::Insert1KiB => {
                rawdoc! {"insert": "ins", "documents": [{"n": id, "pad": pad(KIB - 30)}], "$db": "bench"}
            }
            Workload::Cursor100 => {
                rawdoc! {"find": "cursor", "filter": {}, "batchSize": BATCH as i32, "$db": "bench"}
            }
            Workload::Read1MiB => rawdoc! {"find": "big", "filter": {"_id": 1i32}, "$db": "bench"},
            Workload::Mixed => unreachable!("mixed picks one of the others per operation"),
        };
        op_msg::encode(id, 0, 0, body.as_bytes(), &[])
    }
}

fn get_more(id: i32, cursor: i64) -> Vec<u8> {
    let body = rawdoc! {"getMore": cursor, "collection": "cursor", "batchSize": BATCH as i32, "$db": "bench"};
    op_msg::encode(id, 0, 0, body.as_bytes(), &[])
}

/// The cursor id of a find/getMore reply (0 when exhausted or absent).
fn cursor_id(reply: &[u8]) -> i64 {
    let Ok(wirelint::wire::Message::Msg(m)) = wirelint::wire::Message::parse(reply) else {
        return 0;
    };
    bson::RawDocument::from_bytes(m.body)
        .ok()
        .and_then(|b| b.get_document("cursor").ok())
        .and_then(|c| c.get_i64("id").ok())
        .unwrap_or(0)
}

/// Messages a wirelint forwarded, and of them those not analysed.
#[derive(Clone, Copy, Default)]
struct Coverage {
    forwarded: u64,
    unanalysed: u64,
}

impl Coverage {
    /// What `proc` forwarded and left unanalysed since it stood at `before`.
    fn since_in(proc: Option<&Proc>, before: Option<Coverage>) -> Option<Coverage> {
        let (before, now) = (before?, proc?.coverage()?);
        Some(Coverage {
            forwarded: now.forwarded.saturating_sub(before.forwarded),
            unanalysed: now.unanalysed.saturating_sub(before.unanalysed),
        })
    }
}

#[derive(Default)]
struct Measured {
    /// For wirelint with analysis on: what it analysed of what it forwarded.
    coverage: Option<Coverage>,
    ops: u64,
    seconds: f64,
    cpu: Duration,
    /// Of `cpu`, what wirelint's analysis threads spent.
    analysis: Duration,
    latency: Option<Histogram<u64>>,
    /// CPU µs per operation of each round added, in order (none when CPU
    /// is not measured).
    round_cpu: Vec<f64>,
}

impl Measured {
    fn add(&mut self, other: Measured) {
        if let Some(c) = other.coverage {
            let sum = self.coverage.get_or_insert_with(Coverage::default);
            sum.forwarded += c.forwarded;
            sum.unanalysed += c.unanalysed;
        }
        if other.ops > 0 && !other.cpu.is_zero() {
            self.round_cpu
                .push(other.cpu.as_secs_f64() * 1e6 / other.ops as f64);
        }
        self.ops += other.ops;
        self.seconds += other.seconds;
        self.cpu += other.cpu;
        self.analysis += other.analysis;
        match (&mut self.latency, other.latency) {
            (Some(a), Some(b)) => a.add(b).unwrap(),
            (a, b) => *a = a.take().or(b),
        }
    }

    fn rate(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }

    fn quantile(&self, q: f64) -> u64 {
        self.latency.as_ref().map_or(0, |h| h.value_at_quantile(q))
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap()
}

async fn load(
    addr: SocketAddr,
    workload: Workload,
    conns: usize,
    warmup: Duration,
    duration: Duration,
) -> Measured {
    let start = Instant::now() + warmup;
    let end = start + duration;
    let mut tasks = Vec::new();
    for c in 0..conns {
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut h = histogram();
            let mut buf = Vec::with_capacity(4096);
            let mut ops = 0u64;
            let mut n = c as u64;
            let mut id = (c as i32) << 16;
            loop {
                n += 1;
                id = id.wrapping_add(1);
                let op = workload.op(n);
                let req = op.request(id);
                let t = Instant::now();
                if t >= end {
                    break;
                }
                s.write_all(&req).await.unwrap();
                read_message(&mut s, &mut buf).await.unwrap();
                if op == Workload::Cursor100 {
                    let mut cursor = cursor_id(&buf);
                    while cursor != 0 {
                        id = id.wrapping_add(1);
                        s.write_all(&get_more(id, cursor)).await.unwrap();
                        read_message(&mut s, &mut buf).await.unwrap();
                        cursor = cursor_id(&buf);
                    }
                }
                if t >= start {
                    ops += 1;
                    let _ = h.record(t.elapsed().as_micros().max(1) as u64);
                }
            }
            (ops, h)
        }));
    }
    let mut total = Measured {
        seconds: duration.as_secs_f64(),
        latency: Some(histogram()),
        ..Measured::default()
    };
    for t in tasks {
        let (ops, h) = t.await.unwrap();
        total.ops += ops;
        total.latency.as_mut().unwrap().add(h).unwrap();
    }
    total
}

/// Whether `--workloads` (names' first words, comma-separated: `find,insert`)
/// keeps `w`; all by default.
fn chosen(w: Workload) -> bool {
    arg("--workloads").is_none_or(|list| {
        list.split(',')
            .any(|first| w.name().split(' ').next() == Some(first.trim()))
    })
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

struct Target {
    name: &'static str,
    addr: SocketAddr,
    proc: Option<Proc>,
}

/// The targets in front of `addr`, direct first (socat and mongobetween
/// only with `all`); peers that cannot run are added to `missing`.
fn targets(addr: SocketAddr, all: bool, missing: &mut Vec<&'static str>) -> Vec<Target> {
    let mut targets = vec![Target {
        name: "direct",
        addr,
        proc: None,
    }];
    let mut add = |name, proc: Option<Proc>, why| match proc {
        Some(p) => targets.push(Target {
            name,
            addr: p.1,
            proc: Some(p),
        }),
        None => missing.push(why),
    };
    if all {
        add("tcp-relay", relay(addr), "tcp-relay (socat not installed)");
    }
    add("haproxy", haproxy(addr), "haproxy (not installed)");
    add("wirelint-off", Some(wirelint(addr, false)), "");
    add("wirelint-on", Some(wirelint(addr, true)), "");
    // Another build (an earlier commit), analysis on, in the same run.
    if let Ok(bin) = std::env::var("WIRELINT_BASELINE") {
        add(
            "baseline-on",
            Some(wirelint_binary(&bin, addr, true, &[])),
            "",
        );
    }
    if all {
        add(
            "mongobetween",
            mongobetween(addr),
            "mongobetween (not installed)",
        );
    }
    targets
}

/// `--go`: find and insert through the official Go driver
/// (benches/go-load, built here with `go build`), against the responder,
/// interleaved over direct, HAProxy and wirelint; proxy CPU as above.
async fn go_driver(
    responder: SocketAddr,
    conns: &[usize],
    rounds: usize,
    seconds: f64,
    warmup: Duration,
    missing: &mut Vec<&'static str>,
) {
    let root = env!("CARGO_MANIFEST_DIR");
    let binary = format!("{root}/target/go-load");
    let built = Command::new("go")
        .args(["build", "-o", &binary, "."])
        .current_dir(format!("{root}/benches/go-load"))
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        missing.push("the Go driver generator (go build benches/go-load failed)");
        return;
    }
    println!();
    println!("Go driver generator (go.mongodb.org/mongo-driver/v2, one process, closed loop), responder backend:");
    let targets = targets(responder, false, missing);
    for (workload, arg) in [
        (Workload::FindOne, "find"),
        (Workload::Insert1KiB, "insert"),
    ] {
        if !chosen(workload) {
            continue;
        }
        for &n in conns.iter().filter(|&&n| n > 1) {
            let mut sums: Vec<Measured> = targets.iter().map(|_| Measured::default()).collect();
            for _ in 0..rounds {
                for (i, t) in targets.iter().enumerate() {
                    let before = t.proc.as_ref().and_then(Proc::cpu_split);
                    let covered = t.proc.as_ref().and_then(Proc::coverage);
                    let uri = format!("mongodb://{}/?directConnection=true", t.addr);
                    let run = Command::new(&binary)
                        .args(["-uri", &uri, "-workload", arg, "-conns", &n.to_string()])
                        .args(["-seconds", &seconds.to_string()])
                        .args(["-warmup", &warmup.as_secs_f64().to_string()])
                        .stderr(Stdio::inherit())
                        .output();
                    let after = t.proc.as_ref().and_then(Proc::cpu_split);
                    let Some(mut m) = run.ok().and_then(|o| go_measured(&o.stdout)) else {
                        println!("go-load failed against {}", t.name);
                        continue;
                    };
                    m.coverage = Coverage::since_in(t.proc.as_ref(), covered);
                    if let (Some(before), Some(after)) = (before, after) {
                        let share = seconds / (seconds + warmup.as_secs_f64());
                        let spent = after.since(before, share);
                        (m.cpu, m.analysis) = (spent.all, spent.analysis);
                    }
                    sums[i].add(m);
                }
            }
            print_rows("responder", workload, n, &targets, &sums);
        }
    }
}

/// go-load's JSON line as a measurement.
fn go_measured(stdout: &[u8]) -> Option<Measured> {
    let v: serde_json::Value = serde_json::from_slice(stdout).ok()?;
    let mut latency = histogram();
    for pair in v["latency_us"].as_array()? {
        let (us, n) = (pair[0].as_u64()?, pair[1].as_u64()?);
        latency.record_n(us.max(1), n).ok()?;
    }
    Some(Measured {
        ops: v["ops"].as_u64()?,
        seconds: v["seconds"].as_f64()?,
        latency: Some(latency),
        ..Measured::default()
    })
}

/// One row per target: the figures, then ratios to direct and to the relay.
fn print_rows(
    backend: &str,
    workload: Workload,
    conns: usize,
    targets: &[Target],
    sums: &[Measured],
) {
    // The relay to beat: HAProxy when it runs, else socat.
    let relay = targets
        .iter()
        .position(|t| t.name == "haproxy")
        .or_else(|| targets.iter().position(|t| t.name == "tcp-relay"));
    // socat forks a process per connection, which /proc of the listener
    // does not count: no figure rather than a wrong one.
    let cpu_per_op = |t: &Target, m: &Measured| {
        (t.proc.is_some() && t.name != "tcp-relay" && m.ops > 0 && !m.cpu.is_zero())
            .then(|| m.cpu.as_secs_f64() * 1e6 / m.ops as f64)
    };
    let relay_cpu = relay.and_then(|r| cpu_per_op(&targets[r], &sums[r]));
    for (t, m) in targets.iter().zip(sums) {
        let vs_relay = relay.map_or("-".to_string(), |r| {
            format!("{:.3}", m.rate() / sums[r].rate())
        });
        let own = cpu_per_op(t, m);
        let cpu = own.map_or("-".to_string(), |c| format!("{c:.1}"));
        // Each round's CPU per operation against HAProxy's in the same
        // round: the median, and the lowest and highest.
        let (cpu_vs_relay, spread) = match (own, relay) {
            (Some(_), Some(r)) if relay_cpu.is_some() => {
                let ratios: Vec<f64> = m
                    .round_cpu
                    .iter()
                    .zip(&sums[r].round_cpu)
                    .map(|(c, r)| c / r)
                    .collect();
                median_spread(&ratios).map_or(("-".into(), "-".into()), |(med, lo, hi)| {
                    (format!("{med:.2}"), format!("{lo:.2}–{hi:.2}"))
                })
            }
            _ => ("-".to_string(), "-".to_string()),
        };
        let analysis = if own.is_some() && !m.analysis.is_zero() {
            format!("{:.1}", m.analysis.as_secs_f64() * 1e6 / m.ops as f64)
        } else {
            "-".to_string()
        };
        // Of the messages forwarded, the share the analysis saw: under
        // 100 % it shed load (sampling) or dropped messages (queue full).
        let analysed = match m.coverage {
            Some(c) if !m.analysis.is_zero() && c.forwarded > 0 => format!(
                "{:.1}%",
                100.0 * (c.forwarded - c.unanalysed.min(c.forwarded)) as f64 / c.forwarded as f64
            ),
            _ => "-".to_string(),
        };
        println!(
            "{:<10} {:<17} {:>5}  {:<13} {:>9.0} {:>8} {:>8} {:>8.3} {:>8} {:>8} {:>8} {:>8} {:>9} {:>11} {:>9} {:>9}",
            backend,
            workload.name(),
            conns,
            t.name,
            m.rate(),
            m.quantile(0.5),
            m.quantile(0.99),
            m.rate() / sums[0].rate(),
            vs_relay,
            m.quantile(0.5) as i64 - sums[0].quantile(0.5) as i64,
            m.quantile(0.99) as i64 - sums[0].quantile(0.99) as i64,
            cpu,
            cpu_vs_relay,
            spread,
            analysis,
            analysed,
        );
    }
    in_place(targets, sums);
}

/// The median of `xs`, with the lowest and highest; `None` when empty.
fn median_spread(xs: &[f64]) -> Option<(f64, f64, f64)> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let (lo, hi) = (*v.first()?, *v.last()?);
    let mid = v.len() / 2;
    let med = if v.len() % 2 == 0 {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    };
    Some((med, lo, hi))
}

/// Where the analysis's cost goes in place: wirelint-on's CPU per
/// operation less wirelint-off's (same rounds), split into the analysis
/// threads' own time and the rest (the forwarding threads' hand-off:
/// copies, queue pushes, wake-ups; and the tick), each per operation and
/// per analysed operation (scaled by the share analysed).
fn in_place(targets: &[Target], sums: &[Measured]) {
    let find = |name| targets.iter().position(|t| t.name == name);
    let (Some(off), Some(on)) = (find("wirelint-off"), find("wirelint-on")) else {
        return;
    };
    let per_op = |m: &Measured, d: Duration| d.as_secs_f64() * 1e6 / m.ops.max(1) as f64;
    let (off, on) = (&sums[off], &sums[on]);
    if off.cpu.is_zero() || on.cpu.is_zero() {
        return;
    }
    let gap = per_op(on, on.cpu) - per_op(off, off.cpu);
    let threads = per_op(on, on.analysis);
    let analysed = on.coverage.map_or(1.0, |c| {
        (c.forwarded - c.unanalysed.min(c.forwarded)) as f64 / c.forwarded.max(1) as f64
    });
    // Per-round gaps, for their spread.
    let gaps: Vec<f64> = on
        .round_cpu
        .iter()
        .zip(&off.round_cpu)
        .map(|(a, b)| a - b)
        .collect();
    let spread = median_spread(&gaps).map_or(String::new(), |(m, lo, hi)| {
        format!(" (rounds: median {m:.1}, {lo:.1} to {hi:.1})")
    });
    println!(
        "           in place: analysis on costs {gap:.1} µs/op more than forwarding alone{spread}: analysis threads {threads:.1}, forwarding threads and the rest {:.1}; per analysed operation ({:.0} % analysed) {:.1}",
        gap - threads,
        analysed * 100.0,
        gap / analysed.max(1e-9),
    );
}

/// `--scale N`: N connections held through wirelint (analysis on) to the
/// responder: resident memory per idle connection, then one ping on each.
async fn scale(n: usize) {
    let backend = responder();
    let proxy = wirelint(backend.1, true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = proxy.rss().unwrap_or(0);
    let hello = op_msg::encode(
        1,
        0,
        0,
        rawdoc! {"hello": 1i32, "$db": "admin"}.as_bytes(),
        &[],
    );
    let ping = op_msg::encode(
        2,
        0,
        0,
        rawdoc! {"ping": 1i32, "$db": "admin"}.as_bytes(),
        &[],
    );
    let started = Instant::now();
    let mut conns = Vec::with_capacity(n);
    let mut buf = Vec::new();
    for i in 0..n {
        match TcpStream::connect(proxy.1).await {
            Ok(mut s) => {
                // A first exchange, so the upstream connection exists too.
                if s.write_all(&hello).await.is_ok() && read_message(&mut s, &mut buf).await.is_ok()
                {
                    conns.push(s);
                }
            }
            Err(e) => {
                println!("scale: connection {i} failed: {e} (raise `ulimit -n`?)");
                break;
            }
        }
    }
    let opened = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = proxy.rss().unwrap_or(0);
    let cpu_before = proxy.cpu().unwrap_or_default();
    let started = Instant::now();
    let mut served = 0;
    for s in &mut conns {
        if s.write_all(&ping).await.is_ok() && read_message(s, &mut buf).await.is_ok() {
            served += 1;
        }
    }
    let pinged = started.elapsed();
    let cpu = proxy.cpu().unwrap_or_default().saturating_sub(cpu_before);
    let per_conn = held.saturating_sub(before) as f64 / conns.len().max(1) as f64;
    println!(
        "scale      {} connections held through wirelint-on (opened in {:.1} s): RSS {:.1} MiB → {:.1} MiB, {:.1} KiB per idle connection (client + upstream side); a ping on each: {served} answered in {:.2} s, proxy CPU {:.1} µs per ping",
        conns.len(),
        opened.as_secs_f64(),
        before as f64 / 1048576.0,
        held as f64 / 1048576.0,
        per_conn / 1024.0,
        pinged.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / served.max(1) as f64,
    );
}

fn main() {
    if std::env::args().any(|a| a == "--responder") {
        return run_responder();
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

async fn bench() {
    let seconds: f64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let rounds: usize = arg("--rounds").and_then(|s| s.parse().ok()).unwrap_or(2);
    let list = |name: &str, default: &[usize]| -> Vec<usize> {
        arg(name)
            .map(|s| s.split(',').filter_map(|c| c.parse().ok()).collect())
            .unwrap_or_else(|| default.to_vec())
    };
    let conns = list("--conns", &[1, 16, 64, 256]);
    // FerretDB on SQLite serves a 100-document cursor in tens of
    // milliseconds: 256 closed-loop connections would measure its queue.
    let ferretdb_conns = list("--ferretdb-conns", &[1, 16, 64]);
    let duration = Duration::from_secs_f64(seconds);
    let warmup = Duration::from_millis(300);

    println!(
        "wirelint proxy benchmark · {} · {} cores · {seconds} s per measurement, {rounds} interleaved rounds",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let responder = responder();
    let mut backends: Vec<(&str, SocketAddr)> = vec![("responder", responder.1)];
    let ferret = if std::env::args().any(|a| a == "--no-ferretdb") {
        None
    } else {
        ferretdb()
    };
    if let Some((p, _)) = &ferret {
        seed(p.1).await;
        backends.push(("ferretdb", p.1));
    }
    println!(
        "{:<10} {:<17} {:>5}  {:<13} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>11} {:>9} {:>9}",
        "backend",
        "workload",
        "conns",
        "target",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "×direct",
        "×relay",
        "+p50 µs",
        "+p99 µs",
        "cpu µs/op",
        "cpu×relay",
        "min–max",
        "anl µs/op",
        "analysed"
    );
    println!("(×relay: against HAProxy in TCP mode when it runs, else socat; cpu×relay: each round's CPU per operation over HAProxy's in the same round, the median of the rounds, and min–max their lowest and highest; anl µs/op: the part of cpu µs/op spent on wirelint's analysis threads; analysed: the share of the messages wirelint forwarded that its analysis saw, from its /metrics)");
    let mut missing_peers = Vec::new();
    for (backend, addr) in &backends {
        let targets = targets(*addr, true, &mut missing_peers);
        let conns = if *backend == "ferretdb" {
            &ferretdb_conns
        } else {
            &conns
        };
        for workload in WORKLOADS.into_iter().filter(|w| chosen(*w)) {
            for &n in conns {
                let mut sums: Vec<Measured> = targets.iter().map(|_| Measured::default()).collect();
                for _ in 0..rounds {
                    for (i, t) in targets.iter().enumerate() {
                        let cpu = t.proc.as_ref().and_then(Proc::cpu_split);
                        let covered = t.proc.as_ref().and_then(Proc::coverage);
                        let mut m = load(t.addr, workload, n, warmup, duration).await;
                        m.coverage = Coverage::since_in(t.proc.as_ref(), covered);
                        if let (Some(before), Some(after)) =
                            (cpu, t.proc.as_ref().and_then(Proc::cpu_split))
                        {
                            // Includes the warm-up; scaled to the measured part.
                            let share = duration.as_secs_f64() / (duration + warmup).as_secs_f64();
                            let spent = after.since(before, share);
                            (m.cpu, m.analysis) = (spent.all, spent.analysis);
                        }
                        sums[i].add(m);
                    }
                }
                print_rows(backend, workload, n, &targets, &sums);
            }
        }
    }
    if let Some(list) = arg("--budgets") {
        let budgets: Vec<u32> = list
            .split(',')
            .filter_map(|b| b.trim().parse().ok())
            .collect();
        budget_cells(responder.1, &conns, &budgets, seconds).await;
    }
    if std::env::args().any(|a| a == "--go") {
        go_driver(
            responder.1,
            &conns,
            rounds,
            seconds,
            warmup,
            &mut missing_peers,
        )
        .await;
    }
    missing_peers.dedup();
    for m in missing_peers {
        println!("not measured: {m}");
    }
    drop(ferret);
    drop(responder);
    if let Some(n) = arg("--scale").and_then(|n| n.parse().ok()) {
        scale(n).await;
    }
    if std::env::args().any(|a| a == "--idle") {
        idle(100, Duration::from_secs(10)).await;
    }
}

/// `--budgets 5,10,25`: for each budget, a wirelint with `--analysis-cpu
/// X%` alone in front of the responder, find and insert at each of
/// `conns` above one; after `--budget-warmup` seconds (8 by default) for
/// the budget to settle, `seconds` (at least 5) measured: the share of
/// messages analysed, and the analysis threads' share of the process's
/// CPU, over the whole and second by second (median, lowest, highest),
/// and whether it lies within [X/2, X].
async fn budget_cells(responder: SocketAddr, conns: &[usize], budgets: &[u32], seconds: f64) {
    let settle = Duration::from_secs_f64(
        arg("--budget-warmup")
            .and_then(|s| s.parse().ok())
            .unwrap_or(8.0),
    );
    let measure = seconds.max(5.0).round() as u64;
    println!();
    println!(
        "The CPU budget (--analysis-cpu), raw-wire generator, responder backend: {:.0} s to settle, then {measure} s measured (analysis: its threads' share of wirelint's CPU, from /proc; per second: median, lowest–highest):",
        settle.as_secs_f64()
    );
    for workload in [Workload::FindOne, Workload::Insert1KiB] {
        if !chosen(workload) {
            continue;
        }
        for &n in conns.iter().filter(|&&n| n > 1) {
            for &budget in budgets {
                let flag = format!("{budget}%");
                let proc =
                    wirelint_binary(&wirelint_bin(), responder, true, &["--analysis-cpu", &flag]);
                let task = tokio::spawn(load(
                    proc.1,
                    workload,
                    n,
                    settle,
                    Duration::from_secs(measure),
                ));
                tokio::time::sleep(settle).await;
                let (first, covered) = (proc.cpu_split(), proc.coverage());
                let mut last = first;
                let mut seconds_share = Vec::new();
                for _ in 0..measure {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let now = proc.cpu_split();
                    if let (Some(a), Some(b)) = (last, now) {
                        let d = b.since(a, 1.0);
                        if !d.all.is_zero() {
                            seconds_share.push(d.analysis.as_secs_f64() / d.all.as_secs_f64());
                        }
                    }
                    last = now;
                }
                let coverage = Coverage::since_in(Some(&proc), covered);
                let m = task.await.unwrap();
                let (Some(first), Some(last)) = (first, last) else {
                    continue;
                };
                let spent = last.since(first, 1.0);
                let share = spent.analysis.as_secs_f64() / spent.all.as_secs_f64().max(1e-9);
                let analysed = coverage.map_or(f64::NAN, |c| {
                    (c.forwarded - c.unanalysed.min(c.forwarded)) as f64 / c.forwarded.max(1) as f64
                });
                let x = f64::from(budget) / 100.0;
                let verdict = if share > x {
                    "over the budget"
                } else if share >= x / 2.0 {
                    "within [X/2, X]"
                } else if analysed >= 0.999 {
                    "under X/2, everything analysed"
                } else {
                    "under X/2"
                };
                let per_second =
                    median_spread(&seconds_share).map_or(String::new(), |(m, lo, hi)| {
                        format!(
                            " (per second {:.1}, {:.1}–{:.1})",
                            m * 100.0,
                            lo * 100.0,
                            hi * 100.0
                        )
                    });
                println!(
                    "budget     {:<17} {:>5}  --analysis-cpu {budget:>2}%: analysed {:>5.1} %, analysis {:>5.1} % of wirelint's CPU{per_second}: {verdict}; {:.0} ops/s, {:.1} µs CPU/op",
                    workload.name(),
                    n,
                    analysed * 100.0,
                    share * 100.0,
                    m.rate(),
                    spent.all.as_secs_f64() * 1e6 / m.ops.max(1) as f64,
                );
            }
        }
    }
}

/// `--idle`: CPU per second of each proxy with `n` pooled connections open
/// and idle (each has done its handshake; one sends a monitoring hello
/// every 10 s, as a driver's monitor does), over `over`.
async fn idle(n: usize, over: Duration) {
    let backend = responder();
    let mut missing = Vec::new();
    let targets = targets(backend.1, false, &mut missing);
    let hello = op_msg::encode(
        1,
        0,
        0,
        rawdoc! {"hello": 1i32, "$db": "admin"}.as_bytes(),
        &[],
    );
    println!();
    for t in targets.iter().filter(|t| t.proc.is_some()) {
        let mut conns = Vec::with_capacity(n);
        let mut buf = Vec::new();
        for _ in 0..n {
            let Ok(mut s) = TcpStream::connect(t.addr).await else {
                break;
            };
            if s.write_all(&hello).await.is_ok() && read_message(&mut s, &mut buf).await.is_ok() {
                conns.push(s);
            }
        }
        // Past start-up and the connections' first exchange.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let proc = t.proc.as_ref().expect("filtered");
        let before = proc.cpu().unwrap_or_default();
        let started = Instant::now();
        let mut monitor = tokio::time::interval(Duration::from_secs(10));
        while started.elapsed() < over {
            tokio::select! {
                _ = monitor.tick() => {
                    if let Some(s) = conns.first_mut() {
                        let _ = s.write_all(&hello).await;
                        let _ = read_message(s, &mut buf).await;
                    }
                }
                _ = tokio::time::sleep(over.saturating_sub(started.elapsed())) => {}
            }
        }
        let cpu = proc.cpu().unwrap_or_default().saturating_sub(before);
        println!(
            "idle       {:<13} {} connections open and idle for {:.0} s: {:.2} ms CPU per second",
            t.name,
            conns.len(),
            over.as_secs_f64(),
            cpu.as_secs_f64() * 1e3 / started.elapsed().as_secs_f64()
        );
    }
    for m in missing {
        println!("not measured: {m}");
    }
}
