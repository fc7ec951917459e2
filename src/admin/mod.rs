//! The admin HTTP server (`--admin HOST:PORT`, loopback by default):
//! `/metrics` in the Prometheus text format, `/findings` and `/patterns` as
//! JSON, `/healthz` (200 while the upstream answers a hello, 503 when it
//! does not). It only reads; it shares nothing with the forwarding path but
//! the counters. With a token (`--admin-token`), every endpoint but
//! `/healthz` asks for `Authorization: Bearer <token>`.

use crate::analysis::knowledge::Knowledge;
use crate::report::Report;
use crate::stats::Stats;
use axum::extract::State;
use axum::http::header;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;

mod metrics;
pub mod otlp;

pub use metrics::{render_metrics, MAX_LABELS};

#[derive(Clone)]
pub struct AdminState {
    pub stats: Arc<Stats>,
    pub knowledge: Arc<Mutex<Knowledge>>,
    pub upstream: String,
    /// The bearer token the endpoints require, when one is set.
    pub token: Option<Arc<str>>,
    /// The last report the endpoints built, and when.
    snapshot: Arc<Mutex<Option<Snapshot>>>,
    /// What the OTLP export sent and lost, when it runs.
    pub otlp: Option<Arc<otlp::Counters>>,
    /// Asks the upstream a hello (`GET /upstream`, `/healthz`), when a
    /// proxy runs.
    pub upstream_check: Option<crate::proxy::UpstreamCheck>,
    /// `/healthz`'s last answer and when: however often it is asked, the
    /// upstream is asked at most once per [`HEALTH_AGE`].
    health: Arc<tokio::sync::Mutex<Option<(Instant, bool)>>>,
}

/// How old an upstream check `/healthz` may answer with.
const HEALTH_AGE: Duration = Duration::from_secs(2);

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
            otlp: None,
            upstream_check: None,
            health: Arc::default(),
        }
    }

    /// The same, with the counters of an OTLP export to come (which
    /// `/metrics` then shows).
    pub fn exporting_otlp(mut self) -> AdminState {
        self.otlp = Some(Arc::default());
        self
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
    tracing::info!("admin endpoints on http://{local}/ (the dashboard; metrics, findings, patterns, report, tests, upstream, healthz)");
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
        .route("/tests", post(mark_test))
        .route("/upstream", get(check_upstream))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
        .route("/healthz", get(healthz))
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

/// A test runner's integration says which test a worker starts, or that
/// its test ended (see `analysis::suite`): `{"worker": APP_NAME?, "test":
/// ID?, "file": PATH?, "line": N?}`. Answered once noted, so the test's
/// operations, sent after the answer, come after the marker.
async fn mark_test(State(state): State<AdminState>, body: axum::body::Bytes) -> impl IntoResponse {
    let at = Instant::now();
    let marker: crate::analysis::suite::Marker = match serde_json::from_slice(&body) {
        Ok(m) => m,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!(
                    "a test marker is a JSON object {{\"worker\": APP_NAME, \"test\": ID, \"file\": PATH, \"line\": N}}, each optional (no test: the worker's test ended): {e}\n"
                ),
            )
        }
    };
    let knowledge = state.knowledge.clone();
    // Off the runtime: the analysis may hold the lock a moment.
    let noted = tokio::task::spawn_blocking(move || {
        let mut k = knowledge.lock().unwrap_or_else(|e| e.into_inner());
        k.suite.mark(&marker, at);
    })
    .await;
    match noted {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the marker could not be noted\n".to_string(),
        ),
    }
}

/// Whether the upstream answers a hello now, asked the way a client's
/// connection reaches it: `{"ok": true, "host": H}`, or 503 with `{"ok":
/// false, "error": WHY}`, the message a client would get. A test runner's
/// integration asks before the first test, so a database that is down
/// stops the run with this message instead of a test's timeout.
async fn check_upstream(State(state): State<AdminState>) -> impl IntoResponse {
    let Some(check) = state.upstream_check.clone() else {
        return (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"ok": false, "error": "no proxy runs here"})),
        );
    };
    match check.check().await {
        Ok(host) => (
            StatusCode::OK,
            Json(serde_json::json!({"ok": true, "host": host})),
        ),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"ok": false, "error": error})),
        ),
    }
}

/// For health checks (a container's, a load balancer's, a Kubernetes
/// probe's): 200 `ok` while the upstream answers a hello, 503 when it does
/// not, with no detail (the endpoint is open; `/upstream` says why, behind
/// the token). Where no proxy runs, 200.
async fn healthz(State(state): State<AdminState>) -> impl IntoResponse {
    let Some(check) = state.upstream_check.clone() else {
        return (StatusCode::OK, "ok\n");
    };
    // One check at a time; the others wait for it and take its answer.
    let mut last = state.health.lock().await;
    let up = match *last {
        Some((at, up)) if at.elapsed() < HEALTH_AGE => up,
        _ => {
            let up = check.check().await.is_ok();
            *last = Some((Instant::now(), up));
            up
        }
    };
    if up {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "upstream unreachable\n")
    }
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
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        render_metrics(&state, &report),
    )
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
