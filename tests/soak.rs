//! The soak: the wirelint binary in front of FerretDB under steady mixed
//! load with connection churn, its resident memory, open descriptors and
//! analysis tables sampled as it goes; then the analysis queue flooded with
//! large documents. CI runs one minute; `scripts/soak.sh` runs thirty
//! (WIRELINT_SOAK_SECONDS, with the release binary).
//!
//! One client is adversarial: every operation brings a namespace, a
//! comment (pattern name), a filter key (shape) and a field name never seen
//! before, so every analysis table keeps meeting new keys.
//!
//! Memory and descriptors must not grow by more than 10 % after the
//! warm-up; every share of the analysis memory budget stays within its
//! limit (and the adversarial keys keep evicting); a flood is dropped and
//! counted, never buffered.

mod common;

use common::{Backend, BackendOptions};
use mongodb::bson::{doc, rawdoc};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wirelint::wire::op_msg;

/// `[limits] documents_per_namespace` for the soak (the document-id table
/// holds ten times as many).
const DOCUMENTS_CAP: u64 = 200;
/// `[limits] analysis_memory` for the soak: the smallest accepted.
const BUDGET_MIB: u64 = 8;

/// One share of the analysis budget, from `/metrics`.
#[derive(Debug, Default, Clone)]
struct Table {
    entries: u64,
    bytes: u64,
    max_bytes: u64,
    evicted: u64,
}

struct Wirelint {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
}

impl Drop for Wirelint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Wirelint {
    fn start(upstream: &str) -> Wirelint {
        let (port, admin_port) = (common::free_port(), common::free_port());
        // The release binary for long runs (scripts/soak.sh), else the one
        // cargo test built.
        let mut cmd = match std::env::var("WIRELINT_SOAK_BIN") {
            Ok(bin) => std::process::Command::new(bin),
            Err(_) => common::wirelint_command(),
        };
        // Small caps and the smallest budget, so the analysis tables reach
        // them within the warm-up and what grows afterwards would be a
        // leak, not a table filling.
        let config = std::env::temp_dir().join(format!("wirelint-soak-{port}.toml"));
        std::fs::write(
            &config,
            format!(
                "[limits]\ndocuments_per_namespace = {DOCUMENTS_CAP}\nanalysis_memory = \"{BUDGET_MIB}MiB\"\n"
            ),
        )
        .unwrap();
        let child = cmd
            .args(["proxy", "--upstream", upstream, "--summary-interval", "off"])
            .arg("--config")
            .arg(&config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin", &format!("127.0.0.1:{admin_port}")])
            .env("RUST_LOG", "wirelint=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting wirelint");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(admin).is_err() {
            assert!(Instant::now() < deadline, "wirelint did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Wirelint { child, addr, admin }
    }

    fn proc_status(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap()
    }

    fn rss(&self) -> u64 {
        self.proc_status("VmRSS:") * 1024
    }

    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }

    async fn metrics(&self) -> String {
        let mut s = TcpStream::connect(self.admin).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    async fn metric(&self, name: &str) -> u64 {
        self.metrics()
            .await
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    }

    async fn tables(&self) -> std::collections::BTreeMap<String, Table> {
        let mut out: std::collections::BTreeMap<String, Table> = Default::default();
        for l in self.metrics().await.lines() {
            let Some(rest) = l.strip_prefix("wirelint_analysis_table_") else {
                continue;
            };
            let Some((field, rest)) = rest.split_once("{table=\"") else {
                continue;
            };
            let Some((table, n)) = rest.split_once("\"} ") else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            let t = out.entry(table.to_string()).or_default();
            match field {
                "entries" => t.entries = n,
                "bytes" => t.bytes = n,
                "max_bytes" => t.max_bytes = n,
                "evictions_total" => t.evicted = n,
                _ => {}
            }
        }
        out
    }
}

/// Sends a request and reads its reply (wirelint's own frame reader).
async fn round_trip(s: &mut TcpStream, request: &[u8]) -> std::io::Result<()> {
    s.write_all(request).await?;
    wirelint::proxy::session::read_frame(s).await.map(drop)
}

/// Sends `body` as request `n`, reads its reply and counts the outcome;
/// false when the connection failed.
async fn counted(
    s: &mut TcpStream,
    n: u64,
    body: &mongodb::bson::Document,
    ops: &AtomicU64,
    errors: &AtomicU64,
) -> bool {
    let body = mongodb::bson::RawDocumentBuf::try_from(body).unwrap();
    let request = op_msg::encode(n as i32, 0, 0, body.as_bytes(), &[]);
    let ok = round_trip(s, &request).await.is_ok();
    let counter = if ok { ops } else { errors };
    counter.fetch_add(1, Ordering::Relaxed);
    ok
}

/// One client: a mixed workload over many shapes, reconnecting every 200
/// operations (connection churn).
async fn client(
    addr: SocketAddr,
    id: u64,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
) {
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        for _ in 0..200 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            n += 1;
            let key = (id * 1_000_000 + n) as i64;
            let coll = format!("c{}", n % 7);
            let field = format!("f{}", n % 40);
            let body = match n % 5 {
                0 => {
                    doc! {"insert": coll, "documents": [{"_id": key, field: n as i64, "tags": ["a", "b"], "pad": "p".repeat(300)}], "$db": "soak"}
                }
                1 => doc! {"find": coll, "filter": {"_id": key - 1}, "$db": "soak"},
                2 => {
                    doc! {"update": coll, "updates": [{"q": {"_id": key - 2}, "u": {"$push": {"tags": "c"}}}], "$db": "soak"}
                }
                3 => {
                    doc! {"find": coll, "filter": {field: {"$gt": 5i32}}, "limit": 5i32, "$db": "soak"}
                }
                _ => {
                    doc! {"aggregate": coll, "pipeline": [{"$match": {field: 1i32}}, {"$limit": 3i32}], "cursor": {}, "$db": "soak"}
                }
            };
            if !counted(&mut s, n, &body, &ops, &errors).await {
                break;
            }
        }
    }
}

/// The adversarial client: every operation carries keys never seen before
/// — a namespace (a `find` on a collection that does not exist, which
/// creates nothing on the backend), a comment, a filter key, and, in the
/// inserts, a field name and an array path.
async fn adversary(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
) {
    let mut n: u64 = 0;
    let Ok(mut s) = TcpStream::connect(addr).await else {
        errors.fetch_add(1, Ordering::Relaxed);
        return;
    };
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let body = if n % 2 == 0 {
            // A 1 KB key: the shapes share fills within the warm-up.
            doc! {"find": format!("adv{n}"), "filter": {format!("k{n}{}", "x".repeat(1000)): 1i32}, "comment": format!("adversary {n}"), "$db": "soak"}
        } else {
            doc! {"insert": "adversary", "documents": [{"_id": n as i64, format!("f{n}"): 1i32, format!("a{n}"): [1i32, 2i32]}], "comment": format!("adversary {n}"), "$db": "soak"}
        };
        if !counted(&mut s, n, &body, &ops, &errors).await {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn soak_then_flood_memory_and_descriptors_stay_flat() {
    let seconds: u64 = std::env::var("WIRELINT_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let total = Duration::from_secs(seconds);
    let every = (total / 6).min(Duration::from_secs(60));
    let backend = Backend::start(BackendOptions::default());
    let proxy = Wirelint::start(&backend.uri());

    let stop = Arc::new(AtomicBool::new(false));
    let (ops, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for id in 0..8 {
        clients.push(tokio::spawn(client(
            proxy.addr,
            id,
            stop.clone(),
            ops.clone(),
            errors.clone(),
        )));
    }
    clients.push(tokio::spawn(adversary(
        proxy.addr,
        stop.clone(),
        ops.clone(),
        errors.clone(),
    )));
    println!("soak: {seconds} s, sampled every {every:?}");
    println!(
        "{:>6} {:>10} {:>9} {:>5}  tables",
        "t s", "ops", "RSS MiB", "fds"
    );
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < total {
        tokio::time::sleep(every).await;
        let (rss, fds, tables) = (proxy.rss(), proxy.fds(), proxy.tables().await);
        println!(
            "{:>6} {:>10} {:>9.1} {:>5}  {}",
            started.elapsed().as_secs(),
            ops.load(Ordering::Relaxed),
            rss as f64 / 1048576.0,
            fds,
            tables
                .iter()
                .map(|(name, t)| format!("{name}={}/{}K", t.entries, t.bytes >> 10))
                .collect::<Vec<_>>()
                .join(" ")
        );
        samples.push((rss, fds, tables));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let ops = ops.load(Ordering::Relaxed);
    assert!(ops > 1000, "only {ops} operations in {seconds} s");
    assert_eq!(errors.load(Ordering::Relaxed), 0, "clients saw errors");
    // After the warm-up (the first third), growth stays under 10 %.
    let warm = &samples[samples.len() / 3];
    let last = samples.last().unwrap();
    let rss_growth = last.0 as f64 / warm.0 as f64 - 1.0;
    println!(
        "soak: {ops} operations; RSS {:.1} → {:.1} MiB after warm-up ({:+.1} %), fds {} → {}",
        warm.0 as f64 / 1048576.0,
        last.0 as f64 / 1048576.0,
        rss_growth * 100.0,
        warm.1,
        last.1
    );
    assert!(
        rss_growth < 0.10,
        "RSS grew {:.1} % after warm-up",
        rss_growth * 100.0
    );
    assert!(
        last.1 <= warm.1 + 4,
        "descriptors grew: {} → {}",
        warm.1,
        last.1
    );
    assert!(last.2.len() >= 8, "every share in /metrics: {:?}", last.2);
    for (name, t) in &last.2 {
        // A share passes its limit by at most the entry being stored.
        assert!(
            t.bytes <= t.max_bytes + (64 << 10),
            "{name}: {t:?} above its share"
        );
        if name == "document_ids" {
            assert!(
                t.entries <= DOCUMENTS_CAP * 10,
                "{name}: {t:?} above its cap"
            );
        }
    }
    // The adversary's new keys kept the shares it fills evicting after
    // the warm-up: the bound is what held memory flat, not a quiet client.
    for name in ["patterns", "shapes", "namespaces"] {
        assert!(
            last.2[name].evicted > warm.2[name].evicted,
            "{name}: no eviction after the warm-up ({:?} → {:?})",
            warm.2[name],
            last.2[name]
        );
    }

    // The flood: 4 MiB documents from 6 connections, as fast as they go,
    // while a probe pings.
    let dropped_before = proxy.metric("wirelint_analysis_dropped_total").await;
    let rss_before = proxy.rss();
    let stop = Arc::new(AtomicBool::new(false));
    let mut flooders = Vec::new();
    for i in 0..6 {
        let (addr, stop) = (proxy.addr, stop.clone());
        flooders.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let body = rawdoc! {"insert": "flood", "documents": [{"_id": i * 100_000 + n, "blob": "z".repeat(4 << 20)}], "$db": "soak"};
                let request = op_msg::encode(n, 0, 0, body.as_bytes(), &[]);
                round_trip(&mut s, &request).await.unwrap();
            }
            n
        }));
    }
    let ping = op_msg::encode(
        1,
        0,
        0,
        rawdoc! {"ping": 1i32, "$db": "admin"}.as_bytes(),
        &[],
    );
    let mut probe = TcpStream::connect(proxy.addr).await.unwrap();
    let mut worst_rss = rss_before;
    let mut pings = Vec::new();
    let flood_for = Duration::from_secs((seconds / 4).clamp(10, 120));
    let flood_started = Instant::now();
    while flood_started.elapsed() < flood_for {
        let t = Instant::now();
        round_trip(&mut probe, &ping).await.unwrap();
        pings.push(t.elapsed());
        worst_rss = worst_rss.max(proxy.rss());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut inserted = 0;
    for f in flooders {
        inserted += f.await.unwrap();
    }
    pings.sort();
    let dropped = proxy.metric("wirelint_analysis_dropped_total").await - dropped_before;
    let shed = proxy.metric("wirelint_analysis_shed_total").await;
    println!(
        "flood: {inserted} documents of 4 MiB in {:?}; analysis dropped {dropped} messages, sampled out {shed}; probe ping p50 {:?} max {:?}; RSS {:.1} → worst {:.1} MiB",
        flood_for,
        pings[pings.len() / 2],
        pings.last().unwrap(),
        rss_before as f64 / 1048576.0,
        worst_rss as f64 / 1048576.0
    );
    // The analysis queue holds at most 64 MiB; the forwarding buffers a
    // few messages per connection.
    assert!(
        worst_rss < rss_before + (64 << 20) + 6 * (12 << 20),
        "memory followed the flood: {} MiB",
        worst_rss >> 20
    );
}
