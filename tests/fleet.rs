//! A fleet in Prometheus: three wirelints (one per application instance)
//! each see a slice of one application's requests, round robin, and a
//! fourth behind them sees all of it. Debian's `prometheus` server scrapes
//! the three as job `fleet` and the fourth as job `all`, with
//! `deploy/prometheus/rules.yml` loaded; PromQL over its HTTP API must name
//! every finding the all-seeing wirelint names, on the right instances,
//! since a time, and add the pattern histograms up to its counts.

mod common;

use common::Backend;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use wirelint::Proxy;

const DB: &str = "fleet_test";
/// Debian's Prometheus server.
const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A finding as the fleet view groups it: rule, namespace, pattern.
type Key = (String, String, String);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs FerretDB and Debian's prometheus"
)]
async fn prometheus_adds_a_fleet_of_wirelints_up_to_the_one_that_saw_everything() {
    assert!(
        Path::new(PROMETHEUS).exists(),
        "{PROMETHEUS} is missing: scripts/test.sh installs Debian's prometheus (apt-get install prometheus)"
    );
    let started = unix_now();
    let backend = Backend::shared();
    seed(&common::client(&backend.uri()).await).await;

    // The all-seeing wirelint in front of FerretDB; the fleet in front of it.
    let all = with_admin(&backend.uri()).await;
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(with_admin(&all.connection_string()).await);
    }
    let instances: Vec<String> = fleet
        .iter()
        .map(|p| p.admin_addr().unwrap().to_string())
        .collect();
    // One application's requests, round robin over the three instances.
    let mut clients = Vec::new();
    for p in &fleet {
        clients.push(common::client(&p.connection_string()).await);
    }
    let requests = [
        Request::PostComments(0),
        Request::PostComments(1),
        Request::OrderLines(0),
        Request::PostCommentsV2(0),
        Request::PostCommentsV2(1),
        Request::Attachment,
    ];
    for (i, request) in requests.iter().enumerate() {
        request.run(&clients[i % clients.len()].database(DB)).await;
    }

    let all_admin = all.admin_addr().unwrap().to_string();
    // The checks block on HTTP; the admin endpoints run on this runtime.
    tokio::task::block_in_place(|| check_the_fleet(&instances, &all_admin, started));
    for p in fleet {
        p.shutdown().await;
    }
    all.shutdown().await;
}

/// Prometheus scraping `fleet` (job `fleet`) and `all` (job `all`): the
/// fleet's view names what `all` found, on the right instances, since this
/// test's start; calls add up; the rules record and alert.
fn check_the_fleet(fleet: &[String], all: &str, started: u64) {
    let prometheus = Prometheus::start(Path::new(PROMETHEUS), fleet, all);
    // What the one that saw everything found, from its /findings.
    let expected: BTreeSet<Key> = [
        key("WL401", "users", "Q4 post comments"),
        key("WL401", "products", "Q7 order lines"),
        key("WL103", "attachments", "P9 attach"),
        // The comments' userId is a reference looked up per comment.
        key("WL501", "comments", "Q4 post comments"),
    ]
    .into();
    // Polled until the analyses have caught up: the all-seeing one has the
    // findings the workload raises, and the instances together have all
    // of its findings (each serves a report at most a second old).
    let (mut seen_by_all, mut per_instance) = (BTreeSet::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        seen_by_all = findings_of(all, false);
        per_instance = fleet.iter().map(|i| findings_of(i, false)).collect();
        let union: BTreeSet<Key> = per_instance.iter().flatten().cloned().collect();
        if expected.is_subset(&seen_by_all) && union == seen_by_all {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        expected.is_subset(&seen_by_all),
        "the all-seeing wirelint found {seen_by_all:#?}"
    );
    // Each instance saw some of it and missed some.
    let mut expected_counts: BTreeMap<Key, f64> =
        seen_by_all.iter().map(|k| (k.clone(), 0.0)).collect();
    for mine in per_instance {
        assert!(
            !mine.is_empty() && mine.is_subset(&seen_by_all) && mine != seen_by_all,
            "an instance found {mine:#?} of {seen_by_all:#?}"
        );
        for k in mine {
            *expected_counts.get_mut(&k).unwrap() += 1.0;
        }
    }
    // The N+1 of the two requests for post comments stands on two.
    assert_eq!(
        expected_counts[&key("WL401", "users", "Q4 post comments")],
        2.0
    );

    // The fleet view: every finding the all-seeing one names, each on as
    // many instances as name it at their /findings.
    let fleet_view = "count by (rule, namespace, pattern) (wirelint_finding{job=\"fleet\"})";
    let got = prometheus.eventually(fleet_view, |got| by_key(got) == expected_counts);
    assert_eq!(by_key(&got), expected_counts, "{fleet_view}");
    // The all-seeing one's own series agree with its /findings.
    let all_view = "count by (rule, namespace, pattern) (wirelint_finding{job=\"all\"})";
    let got = prometheus.eventually(all_view, |got| {
        by_key(got).keys().cloned().collect::<BTreeSet<_>>() == seen_by_all
    });
    assert_eq!(
        by_key(&got).keys().cloned().collect::<BTreeSet<_>>(),
        seen_by_all
    );

    // On which instances: the two that served the N+1 requests.
    let q4 = format!(
        "wirelint_finding{{job=\"fleet\",rule=\"WL401\",namespace=\"{DB}.users\",pattern=\"Q4 post comments\"}}"
    );
    let on: BTreeSet<String> = prometheus
        .query(&q4)
        .iter()
        .map(|s| s["metric"]["instance"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(on, [fleet[0].clone(), fleet[1].clone()].into());

    // Since when: first seen during this test, by the fleet's clock.
    let since = "min by (rule, namespace, pattern) (wirelint_finding_first_seen_timestamp_seconds{job=\"fleet\"})";
    let got = prometheus.query(since);
    assert_eq!(by_key(&got).len(), seen_by_all.len(), "{got:#?}");
    for (k, first) in by_key(&got) {
        assert!(
            first >= started as f64 && first <= unix_now() as f64,
            "{k:?} first seen at {first}, the test started at {started}"
        );
    }

    // Calls add up across the fleet to what the all-seeing one counted,
    // and the summed buckets give a quantile.
    let calls = |job: &str| {
        let q = format!(
            "sum by (pattern) (wirelint_pattern_call_duration_seconds_count{{job=\"{job}\"}})"
        );
        let got = prometheus.eventually(&q, |got| !got.is_empty());
        by_label(&got, "pattern")
    };
    let (fleet_calls, all_calls) = (calls("fleet"), calls("all"));
    assert_eq!(fleet_calls["Q4 post comments"], 2.0);
    assert_eq!(fleet_calls, all_calls);
    let p99 = "histogram_quantile(0.99, sum by (le, pattern) (wirelint_pattern_call_duration_seconds_bucket{job=\"fleet\"}))";
    let got = by_label(&prometheus.query(p99), "pattern");
    assert!(
        got["Q4 post comments"] > 0.0 && got["Q4 post comments"] <= 10.0,
        "{got:?}"
    );

    // The rules file: the instance count recorded, and each new
    // warning-or-worse finding alerted.
    let recorded = "wirelint:finding_instances:count{job=\"fleet\"}";
    let got = prometheus.eventually(recorded, |got| by_key(got) == expected_counts);
    assert_eq!(by_key(&got), expected_counts, "{recorded}");
    let alerts = "ALERTS{alertname=\"WirelintNewFinding\",job=\"fleet\",alertstate=\"firing\"}";
    let grave = findings_of(all, true);
    assert!(grave.contains(&key("WL401", "users", "Q4 post comments")));
    let alerted = |got: &[Value]| by_key(got).keys().cloned().collect::<BTreeSet<_>>();
    let got = prometheus.eventually(alerts, |got| alerted(got) == grave);
    assert_eq!(alerted(&got), grave, "{alerts}");

    // What each wirelint serves passes promtool's own check.
    for addr in fleet.iter().map(String::as_str).chain([all]) {
        check_metrics(&http_get(addr, "/metrics"));
    }
}

/// A wirelint in front of `upstream`, with its admin endpoints on a free port.
async fn with_admin(upstream: &str) -> Proxy {
    let mut settings = common::settings(upstream);
    settings.admin = Some("127.0.0.1:0".into());
    common::proxy_with(settings).await
}

fn key(rule: &str, collection: &str, pattern: &str) -> Key {
    (rule.into(), format!("{DB}.{collection}"), pattern.into())
}

/// One application request.
enum Request {
    /// List a post's comments, then each commenter's username one by one
    /// (N+1, WL401).
    PostComments(i32),
    /// The same, with the username stored on each comment: one query.
    PostCommentsV2(i32),
    /// List an order's lines, then each line's product one by one (N+1).
    OrderLines(i32),
    /// Store an attachment of 2 MiB in its document and read it (WL103).
    Attachment,
}

impl Request {
    async fn run(&self, db: &mongodb::Database) {
        let coll = |name: &str| db.collection::<Document>(name);
        match *self {
            Request::PostComments(post) => {
                let pattern = "Q4 post comments";
                for c in list(&coll("comments"), doc! {"postId": post}, pattern).await {
                    let user = doc! {"_id": c.get_str("userId").unwrap()};
                    get(&coll("users"), user, pattern).await;
                }
            }
            Request::PostCommentsV2(post) => {
                list(&coll("comments_v2"), doc! {"postId": post}, "Q4 v2").await;
            }
            Request::OrderLines(order) => {
                let pattern = "Q7 order lines";
                for l in list(&coll("order_lines"), doc! {"orderId": order}, pattern).await {
                    let product = doc! {"_id": l.get_i32("productId").unwrap()};
                    get(&coll("products"), product, pattern).await;
                }
            }
            Request::Attachment => {
                let blob = "y".repeat(2 * 1024 * 1024 + 10);
                let attachments = coll("attachments");
                let inserted = attachments.insert_one(doc! {"_id": 1, "blob": blob});
                inserted.comment("P9 attach").await.unwrap();
                get(&attachments, doc! {"_id": 1}, "P9 attach").await;
            }
        }
    }
}

/// One document of `coll` matching `filter`, read as `pattern`.
async fn get(coll: &mongodb::Collection<Document>, filter: Document, pattern: &str) {
    coll.find_one(filter).comment(pattern).await.unwrap();
}

/// The documents of `coll` matching `filter`, read as `pattern`.
async fn list(
    coll: &mongodb::Collection<Document>,
    filter: Document,
    pattern: &str,
) -> Vec<Document> {
    let cursor = coll.find(filter).comment(pattern).await.unwrap();
    cursor.try_collect().await.unwrap()
}

/// The application's data, written to FerretDB directly (not through any
/// wirelint).
async fn seed(client: &mongodb::Client) {
    let db = client.database(DB);
    db.drop().await.unwrap();
    let insert = |name: &'static str, docs: Vec<Document>| {
        let coll = db.collection::<Document>(name);
        async move { coll.insert_many(docs).await.unwrap() }
    };
    insert(
        "users",
        (0..6)
            .map(|u| doc! {"_id": format!("u{u}"), "username": format!("name{u}")})
            .collect(),
    )
    .await;
    insert(
        "comments",
        (0..16)
            .map(|i| doc! {"postId": i % 2, "userId": format!("u{}", i % 6)})
            .collect(),
    )
    .await;
    insert(
        "comments_v2",
        (0..16)
            .map(|i| doc! {"postId": i % 2, "userId": format!("u{}", i % 6), "username": format!("name{}", i % 6)})
            .collect(),
    )
    .await;
    insert(
        "products",
        (0..5)
            .map(|p| doc! {"_id": p, "name": format!("p{p}")})
            .collect(),
    )
    .await;
    insert(
        "order_lines",
        (0..5)
            .map(|l| doc! {"orderId": 0, "productId": l, "qty": 1})
            .collect(),
    )
    .await;
}

/// The findings a wirelint serves at `/findings` (of warning or error
/// severity only, when `grave`), one key per pattern each was seen in.
fn findings_of(admin: &str, grave: bool) -> BTreeSet<Key> {
    let body = http_get(admin, "/findings");
    let findings: Value = serde_json::from_str(&body).unwrap();
    let mut keys = BTreeSet::new();
    for f in findings.as_array().unwrap() {
        if grave && f["severity"] == "info" {
            continue;
        }
        for p in f["patterns"].as_array().unwrap() {
            let text = |v: &Value| v.as_str().unwrap().to_string();
            keys.insert((text(&f["rule"]), text(&f["namespace"]), text(p)));
        }
    }
    keys
}

/// Series of an instant query's result by (rule, namespace, pattern).
fn by_key(result: &[Value]) -> BTreeMap<Key, f64> {
    result
        .iter()
        .map(|s| {
            let label = |k: &str| s["metric"][k].as_str().unwrap_or_default().to_string();
            let key = (label("rule"), label("namespace"), label("pattern"));
            (key, value(s))
        })
        .collect()
}

/// Series of an instant query's result by one label's value.
fn by_label(result: &[Value], name: &str) -> BTreeMap<String, f64> {
    result
        .iter()
        .map(|s| {
            let label = s["metric"][name].as_str().unwrap_or_default();
            (label.to_string(), value(s))
        })
        .collect()
}

fn value(series: &Value) -> f64 {
    series["value"][1].as_str().unwrap().parse().unwrap()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `promtool check metrics` on an exposition: a scraper reads it as meant.
fn check_metrics(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A GET over HTTP/1.0 (so the body comes whole, never chunked), blocking;
/// the body, for a 200 only.
fn http_get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "GET {addr}{path}: {text}"
    );
    body.to_string()
}

/// Debian's Prometheus server in a temporary directory, scraping `fleet`
/// as job `fleet` and `all` as job `all` every second, with the rules of
/// `deploy/prometheus/rules.yml`. It runs under a small shell that kills it
/// when the test's end of its stdin closes, so it never outlives the test.
struct Prometheus {
    addr: String,
    watcher: Child,
    stdin: Option<ChildStdin>,
    dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(bin: &Path, fleet: &[String], all: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let rules = common::manifest_dir().join("deploy/prometheus/rules.yml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n\
             \x20 - job_name: fleet\n    static_configs:\n      - targets: {fleet:?}\n\
             \x20 - job_name: all\n    static_configs:\n      - targets: [\"{all}\"]\n",
            rules = rules.display(),
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let addr = format!("127.0.0.1:{}", common::free_port());
        let mut watcher = Command::new("sh")
            .arg("-c")
            .arg(r#""$@" >"$LOG" 2>&1 & child=$!; read _; kill $child; wait $child"#)
            .arg("sh")
            .arg(bin)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .env("LOG", dir.path().join("prometheus.log"))
            .stdin(Stdio::piped())
            .spawn()
            .expect("starting prometheus");
        let stdin = watcher.stdin.take();
        let prometheus = Prometheus {
            addr,
            watcher,
            stdin,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !prometheus.ready() {
            assert!(
                Instant::now() < deadline,
                "prometheus was not ready within 30 s; its log:\n{}",
                prometheus.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    fn ready(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(&self.addr) else {
            return false;
        };
        let _ = write!(s, "GET /-/ready HTTP/1.0\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text.starts_with("HTTP/1.0 200")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query's result (a vector's series).
    fn query(&self, promql: &str) -> Vec<Value> {
        let body = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", encode(promql)),
        );
        let reply: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(reply["status"], "success", "{promql}: {reply}");
        reply["data"]["result"].as_array().unwrap().clone()
    }

    /// The query's result once `done` holds of it, or the last one after
    /// 60 s (scrapes come every second; rules are evaluated every second).
    fn eventually(&self, promql: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.query(promql);
            if done(&got) || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.watcher.wait();
    }
}

/// Percent-encodes a query parameter's value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}
