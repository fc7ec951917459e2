//! The transparent proxy: listener, sessions, upstream connections, TLS and
//! the hello rewrite. It knows nothing of what reads the traffic: each
//! forwarded message is handed to a [`Tap`], whatever implements it.
//!
//! ```text
//! client ──▶ listener (connection limit, TLS accept)
//!              └─▶ session, on one forwarding thread (one per core, each
//!                  its own runtime; see `ForwardingThreads`): one upstream
//!                  connection per client connection
//!                    requests ──▶ upstream      (bytes unchanged)
//!                    replies  ◀── upstream      (bytes unchanged but
//!                                                replica-set hello replies)
//!                    every message ──▶ Tap::message (never waits)
//! ```
//!
//! [`Forwarder::start`] binds and accepts; the application (`crate::app`)
//! puts the analysis behind the tap and the admin server and reports beside.

pub mod buffer_budget;
pub mod connection;
mod requests;
pub mod session;
mod tap;
pub mod tls;
pub mod topology;
pub mod upstream;
pub mod uri;
mod x509;

pub use tap::{NoTap, Tap};

use crate::stats::{RateLimit, Stats};
use buffer_budget::BufferBudget;
use connection::tune_socket;
use session::SessionContext;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tls::ClientTls;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use upstream::Upstream;
use uri::UpstreamUri;

/// How the proxy forwards: addresses, TLS, limits and timeouts.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Address to listen on (`HOST:PORT`; port 0 picks a free one).
    pub listen: String,
    pub upstream: UpstreamUri,
    pub tls: Option<ClientTls>,
    /// Client connections held at once; more are refused with a log line.
    pub max_connections: usize,
    pub connect_timeout: Duration,
    /// Close a connection with no traffic either way for this long.
    pub idle_timeout: Option<Duration>,
    /// Close a connection whose backend has not answered an outstanding
    /// request for this long (beyond what a streaming hello or an
    /// awaitData getMore may be held by design).
    pub upstream_timeout: Option<Duration>,
    /// Close a client connection whose message, once begun, is not whole
    /// this long after its first byte; and one whose first message is not
    /// whole this long after connecting (no backend connection is opened
    /// before it is).
    pub message_timeout: Option<Duration>,
    /// On shutdown, how long connections get to finish what is in flight.
    pub shutdown_grace: Duration,
    /// Rewrite replica-set hello replies so drivers stay on the proxy.
    pub rewrite_topology: bool,
    /// Forward clients' `MONGODB-X509` authentication even though the
    /// upstream URI gives wirelint a client certificate (every client could
    /// then authenticate as that certificate's user). Off: refused.
    pub allow_x509_passthrough: bool,
    /// How often the primary is asked whether it still is one (drivers'
    /// `heartbeatFrequencyMS` default: 10 s).
    pub primary_check: Duration,
    /// How `mongodb+srv://` names are looked up.
    pub srv: upstream::SrvSettings,
    /// Bytes all connections together may buffer for messages larger than
    /// 16 KiB; past it such messages wait their turn (see
    /// [`BufferBudget`]).
    pub forward_memory: usize,
}

/// The default message timeout. Drivers send each message in one write and
/// their first (the handshake) as soon as they connect, so a minute is far
/// beyond what any pooled driver needs; a 48 MB message still fits in it at
/// 7 Mbit/s.
pub const DEFAULT_MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// The default forwarding buffer budget: twenty 48 MB messages at once.
pub const DEFAULT_FORWARD_MEMORY: usize = 1 << 30;

impl Settings {
    /// Every default, for the given listen address and upstream.
    pub fn new(listen: &str, upstream: UpstreamUri) -> Settings {
        Settings {
            listen: listen.to_string(),
            upstream,
            tls: None,
            max_connections: 10_000,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: None,
            upstream_timeout: None,
            message_timeout: Some(DEFAULT_MESSAGE_TIMEOUT),
            shutdown_grace: Duration::from_secs(10),
            rewrite_topology: true,
            allow_x509_passthrough: false,
            primary_check: Duration::from_secs(10),
            srv: upstream::SrvSettings::default(),
            forward_memory: DEFAULT_FORWARD_MEMORY,
        }
    }
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
    #[error("{0}")]
    Upstream(#[from] upstream::UpstreamError),
}

/// A running listener and its sessions.
pub struct Forwarder {
    local_addr: SocketAddr,
    /// Shared with the sessions (never the sessions' context itself: it
    /// holds the tap, whose last clone ending stops the analysis).
    upstream: Arc<Upstream>,
    shutdown: watch::Sender<bool>,
    accept_loop: Option<tokio::task::JoinHandle<()>>,
}

/// Asks the upstream a hello the way a client's connection would reach
/// it: see [`Forwarder::upstream_check`].
#[derive(Clone)]
pub struct UpstreamCheck(Arc<Upstream>);

impl UpstreamCheck {
    /// The host that answered, or what wirelint would tell a client.
    pub async fn check(&self) -> Result<String, String> {
        match self.0.check().await {
            Ok(host) => Ok(host.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Forwarder {
    /// Binds the listener and starts accepting. Fails fast on a bad address
    /// or bad TLS files; an unreachable upstream is not an error here (each
    /// client is told when its connection is made).
    pub async fn start(
        settings: Settings,
        tap: Arc<dyn Tap>,
        stats: Arc<Stats>,
    ) -> Result<Forwarder, StartError> {
        let bind_error = |source| StartError::Bind {
            addr: settings.listen.clone(),
            source,
        };
        let listener = TcpListener::bind(&settings.listen)
            .await
            .map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        let acceptor = settings.tls.as_ref().map(tls::acceptor).transpose()?;
        let upstream = Arc::new(Upstream::new(
            settings.upstream.clone(),
            settings.connect_timeout,
            &settings.srv,
        )?);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let presents_certificate = settings.upstream.tls.certificate_key_file.is_some();
        let refuse_x509 = presents_certificate && !settings.allow_x509_passthrough;
        if refuse_x509 {
            tracing::info!("wirelint presents a client certificate upstream (tlsCertificateKeyFile): clients' MONGODB-X509 authentication is refused (--allow-x509-passthrough to forward it)");
        } else if presents_certificate {
            tracing::warn!("clients' MONGODB-X509 authentication is forwarded while wirelint presents its own client certificate upstream: every client reaching wirelint can authenticate as that certificate's user (--allow-x509-passthrough)");
        }
        let ctx = Arc::new(SessionContext {
            upstream: upstream.clone(),
            tapped: tap.enabled(),
            tap,
            stats,
            shutdown: shutdown_rx.clone(),
            shutdown_grace: settings.shutdown_grace,
            idle_timeout: settings.idle_timeout,
            upstream_timeout: settings.upstream_timeout,
            message_timeout: settings.message_timeout,
            rewrite_topology: settings.rewrite_topology,
            refuse_x509,
            buffers: BufferBudget::new(settings.forward_memory),
        });
        if ctx.upstream.follows_primary() {
            tokio::spawn(check_primary(
                ctx.clone(),
                settings.primary_check,
                shutdown_rx.clone(),
            ));
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let forwarding = ForwardingThreads::start(threads)
            .inspect_err(|e| {
                tracing::warn!(
                    "cannot start the forwarding threads ({e}); forwarding on the main runtime"
                )
            })
            .ok();
        let accept_loop = tokio::spawn(accept_loop(
            listener,
            acceptor,
            forwarding,
            ctx,
            settings.max_connections,
            shutdown_rx,
        ));
        Ok(Forwarder {
            local_addr,
            upstream,
            shutdown,
            accept_loop: Some(accept_loop),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A handle that asks whether the upstream answers (for the admin
    /// endpoint a test runner's integration calls before the tests).
    pub fn upstream_check(&self) -> UpstreamCheck {
        UpstreamCheck(self.upstream.clone())
    }

    /// Stops accepting and lets connections finish what is in flight (up
    /// to the grace period); returns when every session has ended.
    pub async fn stop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(accept_loop) = self.accept_loop.take() {
            let _ = accept_loop.await;
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

static LIMIT_LOG: RateLimit = RateLimit::new();

/// Asks the cached primary every `every` whether it still is one (besides
/// what the sessions notice in replies), until shutdown.
async fn check_primary(
    ctx: Arc<SessionContext>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => ctx.upstream.check_primary().await,
            _ = shutdown.changed() => return,
        }
    }
}

/// The threads sessions run on: one per core, each a single-threaded
/// runtime of its own (HAProxy's model, one event loop per thread). A
/// connection stays on the thread it was given (round robin), so its two
/// directions, its timers and its socket readiness never wake another
/// thread: on tokio's shared multi-threaded scheduler, idle workers were
/// woken to steal each ready session (about 200,000 futex calls a minute
/// under load), which cost 12-25 % more CPU per forwarded operation.
/// Stopped when dropped, after the sessions (see `accept_loop`).
struct ForwardingThreads {
    runtimes: Vec<tokio::runtime::Handle>,
    next: std::sync::atomic::AtomicUsize,
    /// Dropping these ends each thread's runtime.
    _stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// A forwarding thread's stack (tokio's default for its own workers); the
/// fuzz targets of the forwarding path run on one as large.
pub const FORWARDING_STACK: usize = 2 << 20;

impl ForwardingThreads {
    fn start(n: usize) -> std::io::Result<ForwardingThreads> {
        let mut runtimes = Vec::with_capacity(n);
        let mut stops = Vec::with_capacity(n);
        for i in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtimes.push(runtime.handle().clone());
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("wirelint-fwd-{i}"))
                .stack_size(FORWARDING_STACK)
                .spawn(move || {
                    runtime.block_on(async {
                        let _ = stopped.await;
                    })
                })?;
        }
        Ok(ForwardingThreads {
            runtimes,
            next: Default::default(),
            _stop: stops,
        })
    }

    /// The runtime the next session goes to.
    fn next(&self) -> tokio::runtime::Handle {
        let i = self.next.fetch_add(1, Relaxed) % self.runtimes.len();
        self.runtimes[i].clone()
    }
}

/// One accepted client connection, from its TLS handshake (if any) to
/// its end.
async fn serve(
    stream: TcpStream,
    acceptor: Option<tls::TlsAcceptor>,
    peer: SocketAddr,
    conn: u64,
    ctx: &Arc<SessionContext>,
) {
    tracing::debug!(conn, %peer, "accepted");
    match acceptor {
        None => session::run(stream, peer, conn, ctx.clone()).await,
        Some(acceptor) => {
            match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(tls)) => session::run(tls, peer, conn, ctx.clone()).await,
                Ok(Err(e)) => tracing::info!(conn, %peer, "client TLS handshake failed: {e}"),
                Err(_) => tracing::info!(conn, %peer, "client TLS handshake timed out"),
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Option<tls::TlsAcceptor>,
    forwarding: Option<ForwardingThreads>,
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
        // A session runs on one forwarding thread: its socket leaves this
        // runtime and is registered with that thread's.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(conn, %peer, "closing the connection: cannot hand it to a forwarding thread: {e}");
                ctx.stats.connections_active.fetch_sub(1, Relaxed);
                continue;
            }
        };
        let thread = forwarding.as_ref().map(ForwardingThreads::next);
        let session = async move {
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream, acceptor, peer, conn, &ctx).await,
                Err(e) => tracing::warn!(conn, %peer, "closing the connection: {e}"),
            }
            ctx.stats.connections_active.fetch_sub(1, Relaxed);
            drop(permit);
        };
        match thread {
            Some(runtime) => sessions.spawn_on(session, &runtime),
            None => sessions.spawn(session),
        };
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
