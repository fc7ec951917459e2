//! The transparent proxy: listener, sessions, upstream connections, TLS and
//! the hello rewrite.
//!
//! ```text
//! client ──▶ listener (connection limit, TLS accept)
//!              └─▶ session: one upstream connection per client connection
//!                    requests ──▶ upstream      (bytes unchanged)
//!                    replies  ◀── upstream      (bytes unchanged but
//!                                                replica-set hello replies)
//!                    every message ──▶ analysis queue (try_send, never waits)
//! ```
//!
//! [`Proxy::start`] is also the library API: tests and applications start a
//! proxy in-process, read its address and its counters, and shut it down.

pub mod discovery;
pub mod session;
pub mod tls;
pub mod topology;
pub mod upstream;
pub mod uri;

use crate::analysis::engine::Knowledge;
use crate::analysis::{AnalysisQueue, AnalysisWorkers};
use crate::config::ProxySettings;
use crate::stats::{RateLimit, Stats, StatsSnapshot};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use upstream::Upstream;

/// What every session needs, shared.
pub(crate) struct SessionContext {
    pub upstream: Upstream,
    pub analysis: AnalysisQueue,
    pub stats: Arc<Stats>,
    pub shutdown: watch::Receiver<bool>,
    pub shutdown_grace: Duration,
    pub idle_timeout: Option<Duration>,
    pub upstream_timeout: Option<Duration>,
    pub rewrite_topology: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Tls(#[from] tls::TlsError),
    #[error("cannot serve the admin HTTP endpoints on {addr}: {source}")]
    Admin {
        addr: String,
        source: std::io::Error,
    },
}

/// A running proxy.
pub struct Proxy {
    local_addr: SocketAddr,
    stats: Arc<Stats>,
    shutdown: watch::Sender<bool>,
    accept_loop: Option<tokio::task::JoinHandle<()>>,
    workers: Option<AnalysisWorkers>,
    upstream: String,
    knowledge: Arc<Mutex<Knowledge>>,
    report_path: Option<std::path::PathBuf>,
    admin_addr: Option<SocketAddr>,
    /// Read-only access to counters and knowledge (reports, admin).
    observed: crate::admin::AdminState,
}

impl Proxy {
    /// Binds the listener and starts accepting. Fails fast on a bad address
    /// or bad TLS files; an unreachable upstream is not an error here (each
    /// client is told when its connection is made).
    pub async fn start(settings: ProxySettings) -> Result<Proxy, StartError> {
        let listener = TcpListener::bind(&settings.listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: settings.listen.clone(),
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: settings.listen.clone(),
            source,
        })?;
        let acceptor = settings.tls.as_ref().map(tls::acceptor).transpose()?;
        let upstream_display = settings.upstream.to_string();
        let upstream = Upstream::new(settings.upstream.clone(), settings.connect_timeout)?;
        let stats = Arc::new(Stats::default());
        let knowledge = Arc::new(Mutex::new(Knowledge::with_keys(
            settings.analysis.rules.clone(),
            settings.analysis.show_values,
            settings.analysis.caps.clone(),
            crate::analysis::partition::PartitionKeys::from_config(
                settings.analysis.partition_keys.clone(),
            ),
        )));
        let (analysis, workers) =
            AnalysisQueue::start(&settings.analysis, stats.clone(), knowledge.clone());
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        tokio::spawn(tick(analysis.clone(), shutdown_rx.clone()));
        if settings.analysis.enabled && settings.discover_partition_keys {
            tokio::spawn(discover_keys(
                settings.upstream_raw.clone(),
                settings.connect_timeout,
                knowledge.clone(),
            ));
        }
        let admin_state = crate::admin::AdminState {
            stats: stats.clone(),
            knowledge: knowledge.clone(),
            upstream: upstream_display.clone(),
            token: settings.admin_token.as_deref().map(Arc::from),
        };
        let admin_addr = match &settings.admin {
            Some(addr) => Some(serve_admin(addr, admin_state.clone(), shutdown_rx.clone()).await?),
            None => None,
        };
        if let Some(path) = settings.report.clone() {
            tokio::spawn(write_reports(
                path,
                settings.report_interval,
                admin_state.clone(),
                shutdown_rx.clone(),
            ));
        }
        let ctx = Arc::new(SessionContext {
            upstream,
            analysis,
            stats: stats.clone(),
            shutdown: shutdown_rx.clone(),
            shutdown_grace: settings.shutdown_grace,
            idle_timeout: settings.idle_timeout,
            upstream_timeout: settings.upstream_timeout,
            rewrite_topology: settings.rewrite_topology,
        });
        let accept_loop = tokio::spawn(accept_loop(
            listener,
            acceptor,
            ctx,
            settings.max_connections,
            shutdown_rx,
        ));
        Ok(Proxy {
            local_addr,
            stats,
            shutdown: shutdown_tx,
            accept_loop: Some(accept_loop),
            workers: Some(workers),
            upstream: upstream_display,
            knowledge,
            report_path: settings.report.clone(),
            admin_addr,
            observed: admin_state,
        })
    }

    /// Where the admin HTTP server listens, when one was asked for.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// A report of everything learnt so far.
    pub fn report(&self) -> crate::report::Report {
        self.observed.report()
    }

    /// What the analysis has learnt so far: patterns, shapes, namespaces
    /// and findings. Lock it briefly; the analysis workers need it too.
    pub fn knowledge(&self) -> Arc<Mutex<Knowledge>> {
        self.knowledge.clone()
    }

    /// The findings so far.
    pub fn findings(&self) -> Vec<crate::rules::Finding> {
        let k = self.knowledge.lock().unwrap_or_else(|p| p.into_inner());
        k.findings.all().cloned().collect()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The connection string a driver should use to reach this proxy.
    pub fn connection_string(&self) -> String {
        format!("mongodb://{}/", self.local_addr)
    }

    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The live counters (for a caller that samples them over time).
    pub fn stats_handle(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Stops accepting, lets connections finish what is in flight (up to the
    /// grace period), closes them, waits for the analysis to drain, and
    /// returns the final counters.
    pub async fn shutdown(mut self) -> StatsSnapshot {
        self.stop().await
    }

    /// As [`Proxy::shutdown`], keeping the proxy's knowledge readable
    /// afterwards (findings, report).
    pub async fn stop(&mut self) -> StatsSnapshot {
        let _ = self.shutdown.send(true);
        if let Some(accept_loop) = self.accept_loop.take() {
            let _ = accept_loop.await;
        }
        if let Some(workers) = self.workers.take() {
            let _ = tokio::task::spawn_blocking(move || workers.join()).await;
        }
        if let Some(path) = &self.report_path {
            match self.report().write(path) {
                Ok(()) => tracing::info!(report = %path.display(), "report written"),
                Err(e) => tracing::error!(report = %path.display(), "cannot write the report: {e}"),
            }
        }
        self.stats.snapshot()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// Low latency for small request/reply messages, and keepalive so a
/// vanished peer is noticed.
pub(crate) fn tune_socket(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(120))
        .with_interval(Duration::from_secs(10));
    let _ = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive);
}

static LIMIT_LOG: RateLimit = RateLimit::new();

/// Binds the admin HTTP server and serves it until shutdown.
async fn serve_admin(
    addr: &str,
    state: crate::admin::AdminState,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, StartError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Admin {
            addr: addr.to_string(),
            source,
        })?;
    let local = listener.local_addr().map_err(|source| StartError::Admin {
        addr: addr.to_string(),
        source,
    })?;
    if !local.ip().is_loopback() && state.token.is_none() {
        tracing::warn!(%local, "the admin endpoints are reachable from other hosts without a token; they show namespaces, shapes and findings (set WIRELINT_ADMIN_TOKEN to require one)");
    }
    let app = crate::admin::router(state);
    tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.changed().await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!("admin HTTP server failed: {e}");
        }
    });
    tracing::info!("admin endpoints on http://{local}/ (metrics, findings, patterns, healthz)");
    Ok(local)
}

/// Rewrites the report file every `interval` until shutdown (the final
/// one is written by `Proxy::shutdown`, after the analysis has drained).
async fn write_reports(
    path: std::path::PathBuf,
    interval: Duration,
    state: crate::admin::AdminState,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut every = tokio::time::interval(interval.max(Duration::from_secs(1)));
    every.tick().await;
    loop {
        tokio::select! {
            _ = every.tick() => {
                if let Err(e) = state.report().write(&path) {
                    tracing::warn!(report = %path.display(), "cannot write the report: {e}");
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Adds the keys of a sharded upstream's `config.collections` (fails soft).
async fn discover_keys(uri: String, timeout: Duration, knowledge: Arc<Mutex<Knowledge>>) {
    match discovery::discover(&uri, timeout).await {
        Ok(keys) if keys.is_empty() => {
            tracing::debug!("upstream is not a sharded cluster (or has no sharded collections): no partition keys discovered")
        }
        Ok(keys) => {
            let n = keys.len();
            let mut k = knowledge.lock().unwrap_or_else(|p| p.into_inner());
            for (namespace, paths) in keys {
                k.partition_keys.discovered(namespace, paths);
            }
            tracing::info!(
                collections = n,
                "partition keys discovered from config.collections"
            );
        }
        Err(e) => tracing::warn!(
            "partition key discovery from config.collections failed (carrying on without it): {e}"
        ),
    }
}

/// Ticks the analysis four times a second until shutdown.
async fn tick(analysis: AnalysisQueue, mut shutdown: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_millis(250));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = every.tick() => analysis.tick(),
            _ = shutdown.changed() => return,
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tls::TlsAcceptor>,
    ctx: Arc<SessionContext>,
    max_connections: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let limit = Arc::new(Semaphore::new(max_connections));
    let mut sessions = JoinSet::new();
    let next_id = AtomicU64::new(1);
    loop {
        while sessions.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            ctx.stats.connections_refused.fetch_add(1, Relaxed);
            if LIMIT_LOG.allow() {
                tracing::warn!(%peer, max_connections, "connection limit reached: refusing new connections (raise --max-connections if the backend can take more)");
            }
            drop(stream);
            continue;
        };
        tune_socket(&stream);
        let conn = next_id.fetch_add(1, Relaxed);
        ctx.stats.connections_accepted.fetch_add(1, Relaxed);
        ctx.stats.connections_active.fetch_add(1, Relaxed);
        let ctx = ctx.clone();
        let acceptor = acceptor.clone();
        sessions.spawn(async move {
            tracing::debug!(conn, %peer, "accepted");
            match acceptor {
                None => session::run(stream, peer, conn, ctx.clone()).await,
                Some(acceptor) => {
                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => session::run(tls, peer, conn, ctx.clone()).await,
                        Ok(Err(e)) => {
                            tracing::info!(conn, %peer, "client TLS handshake failed: {e}")
                        }
                        Err(_) => tracing::info!(conn, %peer, "client TLS handshake timed out"),
                    }
                }
            }
            ctx.stats.connections_active.fetch_sub(1, Relaxed);
            drop(permit);
        });
    }
    drop(listener);
    while sessions.try_join_next().is_some() {}
    let open = sessions.len();
    if open > 0 {
        tracing::info!(open, grace = ?ctx.shutdown_grace, "stopped accepting; letting open connections finish");
    }
    // Sessions end themselves within the grace period; this is the backstop.
    let backstop = ctx.shutdown_grace + Duration::from_secs(1);
    if tokio::time::timeout(backstop, async {
        while sessions.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        tracing::warn!(
            left = sessions.len(),
            "connections still open after the grace period; closing them"
        );
        sessions.abort_all();
        while sessions.join_next().await.is_some() {}
    }
}
