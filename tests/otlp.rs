//! OTLP export against a real OpenTelemetry Collector (built by
//! `scripts/otelcol.sh`: the core OTLP receiver and the contrib file
//! exporter): the wirelint binary in front of FerretDB with
//! `--otlp-endpoint`, an application whose traffic raises known findings
//! (a large array inserted by a traced request, an N+1), and what the
//! collector wrote checked against wirelint's own `/findings`.
//!
//! FerretDB v1.24.2 closes a connection on OP_MSG payload type 3 (where
//! drivers put the W3C trace context), so the application reaches wirelint
//! through nothing special, but wirelint reaches FerretDB through a small
//! relay here that drops kind-3 sections, as a server that reads them
//! would.

mod common;

use common::{Backend, Frames};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, rawdoc, Document, RawArrayBuf};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wirelint::wire::op_msg;

/// A string the application stores: it must never reach the collector.
const SECRET: &str = "zz-otlp-literal-7741";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN: &str = "00f067aa0ba902b7";

/// The collector binary: `WIRELINT_OTELCOL`, else built (once) by
/// `scripts/otelcol.sh install`.
fn otelcol_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("WIRELINT_OTELCOL") {
            return PathBuf::from(p);
        }
        let script = common::manifest_dir().join("scripts/otelcol.sh");
        let status = Command::new("bash")
            .arg(&script)
            .arg("install")
            .status()
            .expect("running scripts/otelcol.sh");
        assert!(
            status.success(),
            "scripts/otelcol.sh install failed: the OpenTelemetry Collector is required for these tests"
        );
        let out = Command::new("bash").arg(&script).arg("path").output().unwrap();
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// A collector: OTLP/HTTP on a free port, everything it receives written
/// as JSON lines to `out`.
struct Collector {
    child: Child,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Collector {
    fn start() -> Collector {
        let dir = tempfile::tempdir().unwrap();
        let port = common::free_port();
        let out = dir.path().join("received.json");
        let config = dir.path().join("otelcol.yaml");
        std::fs::write(
            &config,
            format!(
                r#"receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
exporters:
  file:
    path: {out}
    format: json
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file]
    metrics:
      receivers: [otlp]
      exporters: [file]
"#,
                out = out.display()
            ),
        )
        .unwrap();
        let child = Command::new(otelcol_bin())
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("otelcol.log")).unwrap(),
            ))
            .spawn()
            .expect("starting the collector");
        let collector = Collector {
            child,
            port,
            out,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the collector did not listen within 30 s: {}",
                collector.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        collector
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("otelcol.log")).unwrap_or_default()
    }

    /// What the collector wrote so far, one JSON document a line.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("the file exporter writes JSON lines"))
            .collect()
    }

    fn raw(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A relay to FerretDB that drops OP_MSG kind-3 sections (see the top).
async fn strip_trace_sections(backend: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let backend = backend.clone();
            tokio::spawn(async move {
                let Ok(upstream) = TcpStream::connect(&backend).await else {
                    return;
                };
                let (from_client, mut to_client) = client.into_split();
                let (mut from_backend, mut to_backend) = upstream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_backend, &mut to_client).await;
                });
                let mut frames = Frames::new(from_client);
                while let Ok(frame) = frames.next().await {
                    if to_backend.write_all(&without_kind_3(frame)).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("mongodb://{addr}/")
}

fn without_kind_3(frame: Vec<u8>) -> Vec<u8> {
    // OP_MSG (2013) only; flags at 16..20, sections after.
    if frame.len() < 21 || i32::from_le_bytes(frame[12..16].try_into().unwrap()) != 2013 {
        return frame;
    }
    let mut out = frame[..20].to_vec();
    let mut pos = 20;
    while pos + 5 <= frame.len() {
        let kind = frame[pos];
        let size = i32::from_le_bytes(frame[pos + 1..pos + 5].try_into().unwrap()) as usize;
        let end = pos + 1 + size;
        if kind != 3 {
            out.extend_from_slice(&frame[pos..end.min(frame.len())]);
        }
        pos = end;
    }
    let len = out.len() as i32;
    out[..4].copy_from_slice(&len.to_le_bytes());
    out
}

/// Starts the binary and waits for the line with its address.
fn start(cmd: &mut Command) -> (Child, String, std::sync::mpsc::Receiver<String>) {
    let mut child = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if let Some(i) = line.find("mongodb://127.0.0.1:") {
            let uri: String = line[i..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '"')
                .collect();
            return (child, uri, rx);
        }
        seen.push(line);
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("wirelint did not print its address:\n{}", seen.join("\n"));
}

/// SIGTERM, then how long wirelint took to exit (and its status).
fn terminate(mut child: Child) -> (Duration, i32) {
    let began = Instant::now();
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (began.elapsed(), status.code().unwrap_or(-1));
        }
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "wirelint did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn http_get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// The application: one traced insert of a document with a large array
/// (WL102, raised by that request), then a list read followed by one read
/// per element (N+1, WL401). Every value it stores carries [`SECRET`].
async fn run_application(uri: &str, db: &str) {
    // The traced request, as a driver with OpenTelemetry on sends it: the
    // trace context in an OP_MSG payload type 3 section.
    let addr = uri
        .trim_start_matches("mongodb://")
        .trim_end_matches('/')
        .to_string();
    let mut s = Frames::new(TcpStream::connect(&addr).await.unwrap());
    let mut tags = RawArrayBuf::new();
    for i in 0..300 {
        tags.push(format!("{SECRET}-{i}"));
    }
    let body = rawdoc! {"insert": "traced", "documents": [{"_id": 1, "tags": tags}], "$db": db};
    let mut frame = op_msg::encode(7, 0, 0, body.as_bytes(), &[]);
    frame.push(3);
    let context = rawdoc! {"otel": {"traceparent": format!("00-{TRACE}-{SPAN}-01")}};
    frame.extend_from_slice(context.as_bytes());
    let len = frame.len() as i32;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    s.reader.write_all(&frame).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("a reply to the traced insert")
        .unwrap();
    assert!(reply.len() > 16);

    // The N+1: comments of a post, then each commenter one by one.
    let client = common::client(uri).await;
    let d = client.database(db);
    let (users, comments) = (
        d.collection::<Document>("users"),
        d.collection::<Document>("comments"),
    );
    users
        .insert_many(
            (0..6).map(|u| doc! {"_id": format!("u{u}"), "username": format!("{SECRET}-name{u}")}),
        )
        .await
        .unwrap();
    comments
        .insert_many(
            (0..40)
                .map(|i| doc! {"postId": i % 5, "userId": format!("u{}", i % 6), "text": SECRET}),
        )
        .await
        .unwrap();
    for post in 0..3 {
        let list: Vec<Document> = comments
            .find(doc! {"postId": post})
            .comment("Q4")
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        for comment in &list {
            users
                .find_one(doc! {"_id": comment.get_str("userId").unwrap()})
                .comment("Q4")
                .await
                .unwrap();
        }
    }
}

/// A log record with its resource's attributes.
struct Record {
    attributes: BTreeMap<String, Value>,
    resource: BTreeMap<String, Value>,
    trace_id: String,
    span_id: String,
    severity_number: i64,
    severity_text: String,
}

/// `[{key, value: {stringValue: …}}]` as key → the value's JSON.
fn attributes(list: &Value) -> BTreeMap<String, Value> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let v = &kv["value"];
            let v = v
                .get("stringValue")
                .or_else(|| v.get("intValue"))
                .or_else(|| v.get("doubleValue"))
                .or_else(|| v.get("boolValue"))
                .cloned()
                .unwrap_or(Value::Null);
            (kv["key"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

fn log_records(received: &[Value]) -> Vec<Record> {
    let mut out = Vec::new();
    for doc in received {
        for rl in doc["resourceLogs"].as_array().into_iter().flatten() {
            let resource = attributes(&rl["resource"]["attributes"]);
            for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                for r in sl["logRecords"].as_array().into_iter().flatten() {
                    out.push(Record {
                        attributes: attributes(&r["attributes"]),
                        resource: resource.clone(),
                        trace_id: r["traceId"].as_str().unwrap_or("").to_string(),
                        span_id: r["spanId"].as_str().unwrap_or("").to_string(),
                        severity_number: r["severityNumber"].as_i64().unwrap_or(0),
                        severity_text: r["severityText"].as_str().unwrap_or("").to_string(),
                    });
                }
            }
        }
    }
    out
}

/// Metric name → the attributes of each of its data points.
fn metric_points(received: &[Value]) -> BTreeMap<String, Vec<BTreeMap<String, Value>>> {
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for doc in received {
        for rm in doc["resourceMetrics"].as_array().into_iter().flatten() {
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                for m in sm["metrics"].as_array().into_iter().flatten() {
                    let name = m["name"].as_str().unwrap().to_string();
                    for kind in ["sum", "gauge"] {
                        for p in m[kind]["dataPoints"].as_array().into_iter().flatten() {
                            out.entry(name.clone())
                                .or_default()
                                .push(attributes(&p["attributes"]));
                        }
                    }
                }
            }
        }
    }
    out
}

fn s(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

/// Every finding `/findings` lists reaches the collector once per raising
/// as a log record with its rule, severity, database attributes and query
/// summary; the finding raised by the traced request carries its trace id;
/// pattern metrics arrive; no value the application stored does; and
/// shutdown is not held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs FerretDB and the OpenTelemetry Collector (scripts/otelcol.sh)"
)]
async fn findings_and_pattern_metrics_reach_a_real_collector() {
    let backend = Backend::shared();
    let collector = Collector::start();
    let upstream = strip_trace_sections(backend.addr()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wirelint.toml");
    // The endpoint from the flag; the interval from the file's [otlp].
    std::fs::write(&config, "[otlp]\nmetrics_interval = \"1s\"\n").unwrap();
    let admin = format!("127.0.0.1:{}", common::free_port());
    let (child, uri, logs) = start(
        common::wirelint_command()
            .args(["proxy", "--listen", "127.0.0.1:0", "--admin", &admin])
            .args([
                "--upstream",
                &upstream,
                "--otlp-endpoint",
                &collector.endpoint(),
            ])
            .arg("--config")
            .arg(&config),
    );
    run_application(&uri, "otlp_test").await;

    // Wait for wirelint's own findings to settle, then for the collector.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let findings: Vec<Value> =
            serde_json::from_str(&http_get(&admin, "/findings").await).unwrap();
        let rules: Vec<_> = findings.iter().map(|f| s(f.get("rule"))).collect();
        if (rules.contains(&"WL102") && rules.contains(&"WL401")) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let findings: Vec<Value> = serde_json::from_str(&http_get(&admin, "/findings").await).unwrap();
    // /metrics counts what the export sent, and that it lost nothing.
    let metrics = http_get(&admin, "/metrics").await;
    let counter = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    assert!(
        counter("wirelint_otlp_records_sent_total") >= findings.len() as u64,
        "{metrics}"
    );
    assert_eq!(counter("wirelint_otlp_records_dropped_total"), 0);
    let (took, status) = terminate(child);
    assert_eq!(status, 0);
    let logged: Vec<String> = logs.try_iter().collect();
    // Let the collector's file exporter flush.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let received = collector.received();
    let records = log_records(&received);
    let described = || {
        format!(
            "/findings: {}\ncollector: {}\nwirelint: {}\ncollector log: {}",
            serde_json::to_string_pretty(&findings).unwrap(),
            collector.raw(),
            logged.join("\n"),
            collector.log()
        )
    };

    for rule in ["WL102", "WL401"] {
        assert!(
            findings.iter().any(|f| s(f.get("rule")) == rule),
            "the application should raise {rule}: {}",
            described()
        );
    }
    for f in &findings {
        let (rule, namespace, subject) =
            (s(f.get("rule")), s(f.get("namespace")), s(f.get("subject")));
        let key = format!("{rule}:{namespace}:{subject}");
        let mine: Vec<_> = records
            .iter()
            .filter(|r| s(r.attributes.get("wirelint.finding.key")) == key)
            .collect();
        assert!(!mine.is_empty(), "{key} was not sent: {}", described());
        // Once per raising: never twice at one severity.
        let mut severities: Vec<_> = mine.iter().map(|r| r.severity_text.clone()).collect();
        severities.sort();
        severities.dedup();
        assert_eq!(
            severities.len(),
            mine.len(),
            "{key} sent again: {}",
            described()
        );
        let last = mine.last().unwrap();
        let a = &last.attributes;
        assert_eq!(s(a.get("wirelint.rule.id")), rule);
        assert_eq!(s(a.get("wirelint.rule.name")), s(f.get("name")));
        assert_eq!(s(a.get("wirelint.severity")), s(f.get("severity")));
        assert_eq!(last.severity_text, s(f.get("severity")));
        let number = match s(f.get("severity")) {
            "info" => 9,
            "warning" => 13,
            _ => 17,
        };
        assert_eq!(last.severity_number, number, "{key}");
        assert_eq!(s(a.get("db.system.name")), "mongodb");
        let (db, coll) = namespace.split_once('.').unwrap();
        assert_eq!(s(a.get("db.namespace")), db, "{key}");
        assert_eq!(s(a.get("db.collection.name")), coll, "{key}");
        if let Some(shape) = f.get("shape").and_then(Value::as_str) {
            assert_eq!(s(a.get("db.query.summary")), shape, "{key}");
            assert_eq!(
                s(a.get("db.operation.name")),
                shape.split_whitespace().next().unwrap(),
                "{key}"
            );
        }
        if let Some(pattern) = f.get("pattern").and_then(Value::as_str) {
            assert_eq!(s(a.get("wirelint.pattern")), pattern, "{key}");
        }
        assert_eq!(s(last.resource.get("service.name")), "wirelint");
        assert!(!s(last.resource.get("service.instance.id")).is_empty());
    }
    // The traced request's finding carries its trace id; the N+1, raised
    // by untraced requests, none.
    let traced = records
        .iter()
        .find(|r| s(r.attributes.get("wirelint.rule.id")) == "WL102")
        .unwrap();
    assert_eq!(traced.trace_id, TRACE, "{}", described());
    assert_eq!(traced.span_id, SPAN, "the driver's span");
    let n_plus_one = records
        .iter()
        .find(|r| s(r.attributes.get("wirelint.rule.id")) == "WL401")
        .unwrap();
    assert_eq!((&*n_plus_one.trace_id, &*n_plus_one.span_id), ("", ""));

    // Pattern metrics, per pattern.
    let metrics = metric_points(&received);
    for name in [
        "wirelint.pattern.calls",
        "wirelint.pattern.round_trips",
        "wirelint.pattern.latency",
    ] {
        let points = metrics
            .get(name)
            .unwrap_or_else(|| panic!("no {name}: {}", described()));
        assert!(
            points.iter().any(|p| s(p.get("wirelint.pattern")) == "Q4"
                && s(p.get("db.namespace")) == "otlp_test"
                && s(p.get("db.system.name")) == "mongodb"),
            "{name} has no point for Q4: {points:?}"
        );
    }

    // Shapes only: nothing the application stored.
    assert!(
        !collector.raw().contains(SECRET),
        "a literal value was sent: {}",
        described()
    );
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
}

/// Without an endpoint nothing is sent, even with the standard
/// `OTEL_EXPORTER_OTLP_*` variables pointing at a collector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs FerretDB and the OpenTelemetry Collector (scripts/otelcol.sh)"
)]
async fn nothing_is_sent_without_an_endpoint() {
    let backend = Backend::shared();
    let collector = Collector::start();
    let upstream = strip_trace_sections(backend.addr()).await;
    let admin = format!("127.0.0.1:{}", common::free_port());
    let (child, uri, _logs) = start(
        common::wirelint_command()
            .args(["proxy", "--listen", "127.0.0.1:0", "--admin", &admin])
            .args(["--upstream", &upstream])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
            .env(
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
                format!("{}/v1/logs", collector.endpoint()),
            ),
    );
    run_application(&uri, "otlp_off_test").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let findings: Vec<Value> =
            serde_json::from_str(&http_get(&admin, "/findings").await).unwrap();
        if findings.iter().any(|f| s(f.get("rule")) == "WL401") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no findings raised: {findings:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, status) = terminate(child);
    assert_eq!(status, 0);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        collector.raw(),
        "",
        "something was sent without an endpoint"
    );
}

/// A collector that accepts connections, reads, and never answers: its
/// address.
async fn dead_collector() -> std::net::SocketAddr {
    let hole = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = hole.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = hole.accept().await {
            held.push(conn);
        }
    });
    addr
}

/// A collector that accepts connections and never answers: findings are
/// dropped and counted, wirelint says so, and shutdown is held up by the
/// last export for at most about a second and a half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn a_dead_collector_neither_blocks_nor_delays_shutdown() {
    let backend = Backend::shared();
    let upstream = strip_trace_sections(backend.addr()).await;
    let hole_addr = dead_collector().await;
    let admin = format!("127.0.0.1:{}", common::free_port());
    let (child, uri, logs) = start(
        common::wirelint_command()
            .args(["proxy", "--listen", "127.0.0.1:0", "--upstream", &upstream])
            .args(["--admin", &admin])
            .args(["--otlp-endpoint", &format!("http://{hole_addr}")]),
    );
    let began = Instant::now();
    run_application(&uri, "otlp_dead_test").await;
    let worked = began.elapsed();
    // Long enough for a batch to be tried and fail.
    tokio::time::sleep(Duration::from_secs(4)).await;
    // The loss shows on /metrics too.
    let metrics = http_get(&admin, "/metrics").await;
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("wirelint_otlp_records_dropped_total ")?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    assert!(dropped > 0, "{metrics}");
    let (took, status) = terminate(child);
    assert_eq!(status, 0);
    let logged: Vec<String> = logs.try_iter().collect();
    assert!(
        logged.iter().any(|l| l.contains("OTLP export failed")),
        "no word of the dropped export: {}",
        logged.join("\n")
    );
    assert!(
        took < Duration::from_secs(3),
        "shutdown took {took:?} with a dead collector"
    );
    assert!(
        worked < Duration::from_secs(15),
        "the application took {worked:?}"
    );
}

/// A proxy of the library API dropped without being stopped, with a
/// collector that never answers: the drop does not wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn dropping_an_unstopped_proxy_does_not_wait_for_the_collector() {
    let backend = Backend::shared();
    let upstream = strip_trace_sections(backend.addr()).await;
    let hole_addr = dead_collector().await;
    let mut settings = common::settings(&upstream);
    settings.otlp = Some(wirelint::admin::otlp::Settings::new(format!(
        "http://{hole_addr}"
    )));
    let proxy = common::proxy_with(settings).await;
    run_application(&proxy.connection_string(), "otlp_drop_test").await;
    // A batch on its way to the collector when the proxy goes.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let began = Instant::now();
    tokio::task::block_in_place(|| drop(proxy));
    assert!(
        began.elapsed() < Duration::from_millis(500),
        "dropping the proxy took {:?}",
        began.elapsed()
    );
}
