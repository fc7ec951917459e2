//! The proxy benchmark: direct vs through wirelint, in one run.
//!
//! ```sh
//! scripts/bench.sh            # or: cargo bench --bench proxy -- [--seconds 3] [--conns 1,16,64]
//! ```
//!
//! Targets, interleaved round by round so machine drift cancels out:
//! - `direct`: the backend itself;
//! - `tcp-relay`: socat relaying bytes (when installed: the floor for any hop);
//! - `wirelint-off`: the wirelint binary with `--no-analysis`;
//! - `wirelint-on`: the wirelint binary with analysis on.
//!
//! Backends: an in-process wire responder that answers hello, ping, find
//! and insert with prepared replies at memory speed — a benchmark fixture,
//! never used to test correctness — so the proxy's own cost is visible; and
//! FerretDB on SQLite when `WIRELINT_FERRETDB` or scripts/ferretdb.sh
//! provides it (what users see: a realistic, slower backend).
//!
//! The load generator is closed-loop: N connections, each sending a request
//! and waiting for its reply, over a fixed duration after a warm-up;
//! latencies go into an HdrHistogram. Figures are printed, never asserted.

use bson::rawdoc;
use hdrhistogram::Histogram;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wirelint::wire::{op_msg, Header, HEADER_LEN};

/// Reads one whole message.
async fn read_message(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.resize(HEADER_LEN, 0);
    s.read_exact(&mut buf[..HEADER_LEN]).await?;
    let len = i32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
    buf.resize(len, 0);
    s.read_exact(&mut buf[HEADER_LEN..]).await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The responder (benchmark fixture).

fn reply_for(request: &[u8]) -> Vec<u8> {
    let header = Header::parse(request).unwrap();
    let name = wirelint::wire::Message::parse(request)
        .ok()
        .and_then(|m| wirelint::wire::command_name(&m).map(str::to_string))
        .unwrap_or_default();
    let body = match name.as_str() {
        "hello" | "isMaster" | "ismaster" => rawdoc! {
            "isWritablePrimary": true, "maxBsonObjectSize": 16777216i32, "maxMessageSizeBytes": 48000000i32,
            "maxWriteBatchSize": 100000i32, "logicalSessionTimeoutMinutes": 30i32, "minWireVersion": 0i32,
            "maxWireVersion": 21i32, "ok": 1.0,
        },
        "find" => {
            rawdoc! {"cursor": {"id": 0i64, "ns": "bench.c", "firstBatch": [{"_id": 1i32, "pad": "x".repeat(1000)}]}, "ok": 1.0}
        }
        "insert" => rawdoc! {"n": 1i32, "ok": 1.0},
        _ => rawdoc! {"ok": 1.0},
    };
    op_msg::encode(0, header.request_id, 0, body.as_bytes(), &[])
}

async fn responder() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(4096);
                while read_message(&mut s, &mut buf).await.is_ok() {
                    if s.write_all(&reply_for(&buf)).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

// ---------------------------------------------------------------------------
// Targets.

struct Wirelint(Child, SocketAddr);

impl Drop for Wirelint {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wirelint(upstream: SocketAddr, analysis: bool) -> Wirelint {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let bin = std::env::var("WIRELINT_BIN")
        .unwrap_or_else(|_| format!("{}/target/release/wirelint", env!("CARGO_MANIFEST_DIR")));
    let mut cmd = Command::new(&bin);
    cmd.args([
        "proxy",
        "--listen",
        &listen,
        "--upstream",
        &format!("mongodb://{upstream}/"),
        "--summary-interval",
        "off",
    ])
    .env("RUST_LOG", "wirelint=warn")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if !analysis {
        cmd.arg("--no-analysis");
    }
    let child = cmd.spawn().unwrap_or_else(|e| {
        panic!("cannot start {bin} (build it with cargo build --release): {e}")
    });
    let addr: SocketAddr = listen.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "wirelint did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Wirelint(child, addr)
}

/// A plain TCP relay (socat from Debian, when installed): the floor for any
/// proxy hop.
fn relay(upstream: SocketAddr) -> Option<Wirelint> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new("socat")
        .arg(format!(
            "TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr,nodelay"
        ))
        .arg(format!("TCP:{upstream},nodelay"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Wirelint(child, addr))
}

// ---------------------------------------------------------------------------
// Load.

#[derive(Clone, Copy)]
enum Workload {
    Ping,
    FindOne,
    Insert1KiB,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Ping => "ping",
            Workload::FindOne => "find one by _id",
            Workload::Insert1KiB => "insert 1 KiB",
        }
    }

    fn request(self, id: i32) -> Vec<u8> {
        let body = match self {
            Workload::Ping => rawdoc! {"ping": 1i32, "$db": "admin"},
            Workload::FindOne => {
                rawdoc! {"find": "c", "filter": {"_id": id}, "limit": 1i32, "singleBatch": true, "$db": "bench"}
            }
            Workload::Insert1KiB => {
                rawdoc! {"insert": "c", "documents": [{"n": id, "pad": "y".repeat(1000)}], "$db": "bench"}
            }
        };
        op_msg::encode(id, 0, 0, body.as_bytes(), &[])
    }
}

struct Result {
    ops: u64,
    seconds: f64,
    latency: Histogram<u64>,
}

async fn load(
    addr: SocketAddr,
    workload: Workload,
    conns: usize,
    warmup: Duration,
    duration: Duration,
) -> Result {
    let start = Instant::now() + warmup;
    let end = start + duration;
    let mut tasks = Vec::new();
    for c in 0..conns {
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
            let mut buf = Vec::with_capacity(4096);
            let mut ops = 0u64;
            let mut id = (c as i32) << 20;
            loop {
                id += 1;
                let req = workload.request(id);
                let t = Instant::now();
                if t >= end {
                    break;
                }
                s.write_all(&req).await.unwrap();
                read_message(&mut s, &mut buf).await.unwrap();
                if t >= start {
                    ops += 1;
                    let _ = h.record(t.elapsed().as_micros().max(1) as u64);
                }
            }
            (ops, h)
        }));
    }
    let mut total = Result {
        ops: 0,
        seconds: duration.as_secs_f64(),
        latency: Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap(),
    };
    for t in tasks {
        let (ops, h) = t.await.unwrap();
        total.ops += ops;
        total.latency.add(h).unwrap();
    }
    total
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn start_ferretdb() -> Option<(Child, SocketAddr, tempfile::TempDir)> {
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
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
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some((child, addr, dir))
}

#[tokio::main]
async fn main() {
    let seconds: f64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let rounds: usize = arg("--rounds").and_then(|s| s.parse().ok()).unwrap_or(2);
    let conns: Vec<usize> = arg("--conns")
        .map(|s| s.split(',').filter_map(|c| c.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 64]);
    let duration = Duration::from_secs_f64(seconds);
    let warmup = Duration::from_millis(300);

    let mut backends: Vec<(&str, SocketAddr)> = vec![("responder", responder().await)];
    let ferret = if std::env::args().any(|a| a == "--no-ferretdb") {
        None
    } else {
        start_ferretdb()
    };
    if let Some((_, addr, _)) = &ferret {
        backends.push(("ferretdb", *addr));
    }
    println!(
        "wirelint proxy benchmark · {} · {} cores · {seconds} s per measurement, {rounds} interleaved rounds",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!(
        "{:<10} {:<16} {:>5}  {:<13} {:>10} {:>9} {:>9} {:>8} {:>9} {:>9}",
        "backend",
        "workload",
        "conns",
        "target",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "× direct",
        "+p50 µs",
        "+p99 µs"
    );
    for (backend, addr) in &backends {
        let off = wirelint(*addr, false);
        let on = wirelint(*addr, true);
        let socat = relay(*addr);
        let mut targets = vec![("direct", *addr)];
        if let Some(r) = &socat {
            targets.push(("tcp-relay", r.1));
        }
        targets.extend([("wirelint-off", off.1), ("wirelint-on", on.1)]);
        let workloads: &[Workload] = if *backend == "ferretdb" {
            &[Workload::Ping, Workload::FindOne]
        } else {
            &[Workload::Ping, Workload::FindOne, Workload::Insert1KiB]
        };
        for &workload in workloads {
            for &n in &conns {
                let mut sums: Vec<(u64, f64, Histogram<u64>)> = targets
                    .iter()
                    .map(|_| {
                        (
                            0,
                            0.0,
                            Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap(),
                        )
                    })
                    .collect();
                for _ in 0..rounds {
                    for (i, (_, target)) in targets.iter().enumerate() {
                        let r = load(*target, workload, n, warmup, duration).await;
                        sums[i].0 += r.ops;
                        sums[i].1 += r.seconds;
                        sums[i].2.add(&r.latency).unwrap();
                    }
                }
                let direct_rate = sums[0].0 as f64 / sums[0].1;
                let (d50, d99) = (
                    sums[0].2.value_at_quantile(0.5),
                    sums[0].2.value_at_quantile(0.99),
                );
                for (i, (name, _)) in targets.iter().enumerate() {
                    let rate = sums[i].0 as f64 / sums[i].1;
                    let (p50, p99) = (
                        sums[i].2.value_at_quantile(0.5),
                        sums[i].2.value_at_quantile(0.99),
                    );
                    println!(
                        "{:<10} {:<16} {:>5}  {:<13} {:>10.0} {:>9} {:>9} {:>8.3} {:>9} {:>9}",
                        backend,
                        workload.name(),
                        n,
                        name,
                        rate,
                        p50,
                        p99,
                        rate / direct_rate,
                        p50 as i64 - d50 as i64,
                        p99 as i64 - d99 as i64
                    );
                }
            }
        }
    }
    if let Some((mut child, _, _)) = ferret {
        let _ = child.kill();
        let _ = child.wait();
    }
}
