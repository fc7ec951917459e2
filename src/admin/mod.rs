//! The admin HTTP server (`--admin HOST:PORT`, loopback by default):
//! `/metrics` in the Prometheus text format, `/findings` and `/patterns` as
//! JSON, `/healthz`. It only reads; it shares nothing with the forwarding
//! path but the counters. With a token (`--admin-token`), every endpoint
//! but `/healthz` asks for `Authorization: Bearer <token>`.

use crate::analysis::knowledge::Knowledge;
use crate::report::Report;
use crate::stats::Stats;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;

#[derive(Clone)]
pub struct AdminState {
    pub stats: Arc<Stats>,
    pub knowledge: Arc<Mutex<Knowledge>>,
    pub upstream: String,
    /// The bearer token the endpoints require, when one is set.
    pub token: Option<Arc<str>>,
    /// The last report the endpoints built, and when.
    snapshot: Arc<Mutex<Option<Snapshot>>>,
}

/// A report and when it was built.
type Snapshot = (Instant, Arc<Report>);

/// How old a report the endpoints may serve: however often they are
/// scraped, the knowledge store (which the analysis workers lock per
/// message) is read for them at most once a second.
const SNAPSHOT_AGE: Duration = Duration::from_secs(1);

impl AdminState {
    pub fn new(
        stats: Arc<Stats>,
        knowledge: Arc<Mutex<Knowledge>>,
        upstream: String,
        token: Option<Arc<str>>,
    ) -> AdminState {
        AdminState {
            stats,
            knowledge,
            upstream,
            token,
            snapshot: Arc::default(),
        }
    }

    /// A report of everything learnt so far, built now.
    pub fn report(&self) -> Report {
        let snapshot = self.stats.snapshot();
        let k = self.knowledge.lock().unwrap_or_else(|p| p.into_inner());
        Report::build(&k, &snapshot, &self.upstream)
    }

    /// The report the endpoints serve: rebuilt when the last one is older
    /// than a second (one rebuild at a time; concurrent requests share it).
    pub fn snapshot(&self) -> Arc<Report> {
        let mut cached = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        match &*cached {
            Some((at, report)) if at.elapsed() < SNAPSHOT_AGE => report.clone(),
            _ => {
                let report = Arc::new(self.report());
                *cached = Some((Instant::now(), report.clone()));
                report
            }
        }
    }

    /// [`AdminState::snapshot`] on a blocking thread, so building a large
    /// report never holds up the runtime's threads.
    async fn snapshot_off_runtime(&self) -> Arc<Report> {
        let state = self.clone();
        match tokio::task::spawn_blocking(move || state.snapshot()).await {
            Ok(report) => report,
            Err(_) => Arc::new(self.report()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot serve the admin HTTP endpoints on {addr}: {source}")]
pub struct BindError {
    addr: String,
    source: std::io::Error,
}

/// Binds the admin HTTP server and serves it until shutdown.
pub async fn serve(
    addr: &str,
    state: AdminState,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, BindError> {
    let listener = TcpListener::bind(addr).await.map_err(|source| BindError {
        addr: addr.to_string(),
        source,
    })?;
    let local = listener.local_addr().map_err(|source| BindError {
        addr: addr.to_string(),
        source,
    })?;
    if !local.ip().is_loopback() && state.token.is_none() {
        tracing::warn!(%local, "the admin endpoints are reachable from other hosts without a token; they show namespaces, shapes and findings (set WIRELINT_ADMIN_TOKEN to require one)");
    }
    let app = router(state);
    tokio::spawn(async move {
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors, most likely: wait, go on.
                        tracing::warn!("admin endpoints: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = shutdown.changed() => break,
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "admin endpoints: {MAX_CONNECTIONS} connections open already; this one is closed");
                continue;
            };
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                let _slot = slot;
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                // However the peer behaves, the connection ends.
                let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
            });
        }
    });
    tracing::info!("admin endpoints on http://{local}/ (the dashboard; metrics, findings, patterns, report, healthz)");
    Ok(local)
}

/// Admin connections open at once, at most; more are closed at accept (the
/// endpoints serve scrapers and people, not crowds).
pub const MAX_CONNECTIONS: usize = 64;
/// A request's headers must arrive within this, or the connection closes.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest an admin connection stays open, whatever it does.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/findings", get(findings))
        .route("/patterns", get(patterns))
        .route("/report", get(report))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
        .route("/healthz", get(|| async { "ok\n" }))
        // The page holds no data: it fetches /report with the token.
        .route("/", get(dashboard))
        .route("/dashboard", get(dashboard))
        .with_state(state)
}

/// The dashboard: one page, no external assets (it works offline), every
/// value from the traffic set as text by its script, never as HTML.
const DASHBOARD: &str = include_str!("dashboard.html");

async fn dashboard() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        DASHBOARD,
    )
}

async fn report(State(state): State<AdminState>) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(state.snapshot_off_runtime().await.as_ref().clone()),
    )
}

async fn require_token(
    State(state): State<AdminState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if let Some(token) = &state.token {
        // The scheme is case-insensitive (RFC 9110 §11.1).
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map_or("", |(_, token)| token.trim());
        if !same_secret(given.as_bytes(), token.as_bytes()) {
            return (
                axum::http::StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "wirelint admin: send Authorization: Bearer <the --admin-token value>\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Whether `given` is `secret`, in time that depends on the length of
/// `given` only (`subtle`): every byte given is compared, against the
/// secret's bytes in turn, and the lengths are compared the same way, so
/// neither the secret's bytes nor its length show in the timing.
fn same_secret(given: &[u8], secret: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    if secret.is_empty() {
        return false;
    }
    let mut equal = (given.len() as u64).ct_eq(&(secret.len() as u64));
    for (i, byte) in given.iter().enumerate() {
        equal &= byte.ct_eq(&secret[i % secret.len()]);
    }
    equal.into()
}

async fn findings(State(state): State<AdminState>) -> impl IntoResponse {
    Json(state.snapshot_off_runtime().await.findings.clone())
}

async fn patterns(State(state): State<AdminState>) -> impl IntoResponse {
    Json(state.snapshot_off_runtime().await.patterns.clone())
}

async fn metrics(State(state): State<AdminState>) -> impl IntoResponse {
    let report = state.snapshot_off_runtime().await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render_metrics(&state, &report),
    )
}

/// Escapes a label value for the Prometheus text format.
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars().take(160) {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Namespaces and patterns with series of their own in `/metrics`, at most.
pub const MAX_LABELS: usize = 100;
/// The label the others are added up under.
const OTHER: &str = "(other)";

/// The `MAX_LABELS` busiest names (ties broken by name, so scrapes agree).
fn busiest(counts: BTreeMap<&str, u64>) -> std::collections::BTreeSet<&str> {
    let mut ranked: Vec<(&str, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked
        .into_iter()
        .take(MAX_LABELS)
        .map(|(k, _)| k)
        .collect()
}

pub fn render_metrics(state: &AdminState, report: &Report) -> String {
    let s = state.stats.snapshot();
    let mut out = String::with_capacity(4096);
    family(
        &mut out,
        "wirelint_connections_accepted_total",
        "counter",
        "Client connections accepted.",
    );
    let _ = writeln!(
        out,
        "wirelint_connections_accepted_total {}",
        s.connections_accepted
    );
    family(
        &mut out,
        "wirelint_connections_active",
        "gauge",
        "Client connections open now.",
    );
    let _ = writeln!(out, "wirelint_connections_active {}", s.connections_active);
    family(
        &mut out,
        "wirelint_connections_refused_total",
        "counter",
        "Connections refused at the connection limit.",
    );
    let _ = writeln!(
        out,
        "wirelint_connections_refused_total {}",
        s.connections_refused
    );
    family(
        &mut out,
        "wirelint_upstream_connect_failures_total",
        "counter",
        "Failed connections to the upstream.",
    );
    let _ = writeln!(
        out,
        "wirelint_upstream_connect_failures_total {}",
        s.upstream_connect_failures
    );
    family(
        &mut out,
        "wirelint_forwarded_messages_total",
        "counter",
        "Messages forwarded, by direction.",
    );
    let _ = writeln!(
        out,
        "wirelint_forwarded_messages_total{{direction=\"request\"}} {}",
        s.requests_forwarded
    );
    let _ = writeln!(
        out,
        "wirelint_forwarded_messages_total{{direction=\"reply\"}} {}",
        s.replies_forwarded
    );
    family(
        &mut out,
        "wirelint_forwarded_bytes_total",
        "counter",
        "Bytes forwarded, by direction.",
    );
    let _ = writeln!(
        out,
        "wirelint_forwarded_bytes_total{{direction=\"request\"}} {}",
        s.request_bytes
    );
    let _ = writeln!(
        out,
        "wirelint_forwarded_bytes_total{{direction=\"reply\"}} {}",
        s.reply_bytes
    );
    family(
        &mut out,
        "wirelint_frame_errors_total",
        "counter",
        "Connections closed for invalid framing, by kind.",
    );
    for (k, v) in &s.frame_errors {
        let _ = writeln!(
            out,
            "wirelint_frame_errors_total{{kind=\"{}\"}} {v}",
            label(k)
        );
    }
    family(
        &mut out,
        "wirelint_messages_total",
        "counter",
        "Messages analysed, by direction and opcode.",
    );
    for (k, v) in &s.messages {
        let (dir, op) = k.split_once(' ').unwrap_or((k, ""));
        let _ = writeln!(
            out,
            "wirelint_messages_total{{direction=\"{dir}\",opcode=\"{op}\"}} {v}"
        );
    }
    family(
        &mut out,
        "wirelint_commands_total",
        "counter",
        "Requests analysed, by command name.",
    );
    for (k, v) in &s.commands {
        let _ = writeln!(
            out,
            "wirelint_commands_total{{command=\"{}\"}} {v}",
            label(k)
        );
    }
    family(
        &mut out,
        "wirelint_analysis_queue_depth",
        "gauge",
        "Messages waiting for analysis.",
    );
    let _ = writeln!(
        out,
        "wirelint_analysis_queue_depth {}",
        s.analysis_enqueued.saturating_sub(s.analysis_processed)
    );
    family(
        &mut out,
        "wirelint_forward_buffer_bytes",
        "gauge",
        "Bytes reserved by connections receiving messages larger than 16 KiB (at most --forward-memory).",
    );
    let _ = writeln!(out, "wirelint_forward_buffer_bytes {}", s.buffer_bytes);
    family(
        &mut out,
        "wirelint_forward_buffer_waits_total",
        "counter",
        "Large messages that waited for the forwarding buffer budget (--forward-memory).",
    );
    let _ = writeln!(
        out,
        "wirelint_forward_buffer_waits_total {}",
        s.buffer_waits
    );
    family(
        &mut out,
        "wirelint_analysis_dropped_total",
        "counter",
        "Messages not analysed because the queue was full.",
    );
    let _ = writeln!(
        out,
        "wirelint_analysis_dropped_total {}",
        s.analysis_dropped
    );
    family(
        &mut out,
        "wirelint_analysis_shed_total",
        "counter",
        "Messages not analysed because their connection was sampled out (by --analysis-share, over --analysis-cpu, or while the analysis was behind).",
    );
    let _ = writeln!(out, "wirelint_analysis_shed_total {}", s.analysis_shed);
    family(
        &mut out,
        "wirelint_analysis_sampling_level",
        "gauge",
        "Load shedding now: one client connection in 2^level is analysed (0: all of them).",
    );
    let _ = writeln!(
        out,
        "wirelint_analysis_sampling_level {}",
        s.analysis_sampling
    );
    family(
        &mut out,
        "wirelint_analysis_analysed_ratio",
        "gauge",
        "Share of forwarded messages the analysis saw since start (1 less shed and dropped over all).",
    );
    let _ = writeln!(
        out,
        "wirelint_analysis_analysed_ratio {}",
        report.counters.analysed_share
    );
    family(
        &mut out,
        "wirelint_analysis_decode_errors_total",
        "counter",
        "Messages the analysis skipped, by kind (too_deep: a request nested past the server's limit of 200 levels; invalid_bson, checksum_mismatch, bad_compressed, ...).",
    );
    for (k, v) in &s.decode_errors {
        let _ = writeln!(
            out,
            "wirelint_analysis_decode_errors_total{{kind=\"{}\"}} {v}",
            label(k)
        );
    }

    family(
        &mut out,
        "wirelint_analysis_panics_total",
        "counter",
        "Panics caught while analysing a message (the message is skipped; traffic is unaffected).",
    );
    let _ = writeln!(
        out,
        "wirelint_analysis_panics_total {}",
        report.counters.analysis_panics
    );
    family(
        &mut out,
        "wirelint_rule_panics_total",
        "counter",
        "Panics caught inside a rule, by rule: that rule skipped the message, the others ran.",
    );
    for (rule, n) in &report.counters.rule_panics {
        let _ = writeln!(
            out,
            "wirelint_rule_panics_total{{rule=\"{}\"}} {n}",
            label(rule)
        );
    }
    family(
        &mut out,
        "wirelint_operations_total",
        "counter",
        "Data operations, by namespace and command.",
    );
    // Labels come from the traffic (namespaces, pattern names): only the
    // busiest MAX_LABELS get series of their own, the rest are added up
    // under `(other)`, so a scrape stays small however many there are.
    let mut by_namespace: BTreeMap<&str, u64> = BTreeMap::new();
    for shape in &report.shapes {
        *by_namespace.entry(&shape.namespace).or_default() += shape.count;
    }
    let namespaces = busiest(by_namespace);
    let mut ops: BTreeMap<(String, String), u64> = BTreeMap::new();
    for shape in &report.shapes {
        let ns = match namespaces.contains(shape.namespace.as_str()) {
            true => shape.namespace.clone(),
            false => OTHER.to_string(),
        };
        *ops.entry((ns, shape.command.clone())).or_default() += shape.count;
    }
    for ((ns, cmd), n) in ops {
        let _ = writeln!(
            out,
            "wirelint_operations_total{{namespace=\"{}\",command=\"{}\"}} {n}",
            label(&ns),
            label(&cmd)
        );
    }
    let patterns = busiest(
        report
            .patterns
            .iter()
            .map(|p| (p.name.as_str(), p.round_trips))
            .collect(),
    );
    family(
        &mut out,
        "wirelint_pattern_latency_seconds",
        "summary",
        "Latency per call of each access pattern, at the proxy.",
    );
    let mut other_calls = 0;
    for p in &report.patterns {
        if !patterns.contains(p.name.as_str()) {
            other_calls += p.invocations;
            continue;
        }
        let name = label(&p.name);
        for (q, v) in [
            ("0.5", p.latency_us.p50),
            ("0.95", p.latency_us.p95),
            ("0.99", p.latency_us.p99),
        ] {
            let _ = writeln!(
                out,
                "wirelint_pattern_latency_seconds{{pattern=\"{name}\",quantile=\"{q}\"}} {}",
                v as f64 / 1e6
            );
        }
        let _ = writeln!(
            out,
            "wirelint_pattern_latency_seconds_count{{pattern=\"{name}\"}} {}",
            p.invocations
        );
    }
    if other_calls > 0 {
        let _ = writeln!(
            out,
            "wirelint_pattern_latency_seconds_count{{pattern=\"{OTHER}\"}} {other_calls}"
        );
    }
    family(
        &mut out,
        "wirelint_pattern_round_trips_total",
        "counter",
        "Round trips of each access pattern.",
    );
    let mut other_round_trips = 0;
    for p in &report.patterns {
        if !patterns.contains(p.name.as_str()) {
            other_round_trips += p.round_trips;
            continue;
        }
        let _ = writeln!(
            out,
            "wirelint_pattern_round_trips_total{{pattern=\"{}\"}} {}",
            label(&p.name),
            p.round_trips
        );
    }
    if other_round_trips > 0 {
        let _ = writeln!(
            out,
            "wirelint_pattern_round_trips_total{{pattern=\"{OTHER}\"}} {other_round_trips}"
        );
    }
    let tables = &report.counters.tables;
    type Field = fn(&crate::analysis::budget::PoolUsage) -> u64;
    let gauges: [(&str, &str, &str, Field); 4] = [
        (
            "wirelint_analysis_table_entries",
            "gauge",
            "Entries held in each share of the analysis memory budget ([limits] analysis_memory).",
            |t| t.entries as u64,
        ),
        (
            "wirelint_analysis_table_bytes",
            "gauge",
            "Bytes held in each share of the analysis memory budget (estimated per entry at its largest).",
            |t| t.bytes as u64,
        ),
        (
            "wirelint_analysis_table_max_bytes",
            "gauge",
            "Each share's limit: its part of [limits] analysis_memory.",
            |t| t.max_bytes as u64,
        ),
        (
            "wirelint_analysis_table_evictions_total",
            "counter",
            "Entries forgotten (least recently used first) to stay within a share.",
            |t| t.evicted,
        ),
    ];
    for (name, kind, help, field) in gauges {
        family(&mut out, name, kind, help);
        for t in tables {
            let _ = writeln!(out, "{name}{{table=\"{}\"}} {}", t.table, field(t));
        }
    }
    family(
        &mut out,
        "wirelint_analysis_forgotten_requests_total",
        "counter",
        "Requests kept for pairing and forgotten before their reply (unanswered 10 min, 1,024 awaiting on one connection, closed, or the budget full).",
    );
    let _ = writeln!(
        out,
        "wirelint_analysis_forgotten_requests_total {}",
        report.counters.forgotten_requests
    );
    family(
        &mut out,
        "wirelint_findings",
        "gauge",
        "Distinct findings, by rule and severity.",
    );
    let mut by_rule: BTreeMap<(String, &str), u64> = BTreeMap::new();
    for f in &report.findings {
        *by_rule
            .entry((f.rule.clone(), f.severity.as_str()))
            .or_default() += 1;
    }
    for ((rule, severity), n) in by_rule {
        let _ = writeln!(
            out,
            "wirelint_findings{{rule=\"{rule}\",severity=\"{severity}\"}} {n}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        for wrong in [&b""[..], b"s3cre", b"s3cret!", b"s3creT", b"s3crets3cret"] {
            assert!(!same_secret(wrong, b"s3cret"), "{wrong:?}");
        }
        assert!(!same_secret(b"", b""), "an empty secret matches nothing");
    }
}
