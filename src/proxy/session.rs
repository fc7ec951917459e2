//! One client connection and its upstream connection: two loops, one per
//! direction, each reading whole messages and forwarding the original bytes
//! at once.
//!
//! The upstream connection is opened once the client's first message is
//! whole (idle sockets hold none). Per read, a loop finds every complete
//! message at the front of its buffer (`connection`, from headers alone),
//! splits them off as one frozen `Bytes` (no copy), notes what it sends or
//! answers (`requests`: requestID/responseTo, exhaust streams,
//! fire-and-forget writes, awaitable requests), writes them in one call,
//! then offers each message to the analysis queue as a slice of that same
//! `Bytes`. Replies to hellos that describe a replica set are the one
//! exception to byte-transparency (`topology`); requests for X.509
//! authentication may be refused instead of forwarded (`x509`). A message
//! larger than a read chunk waits for room in the shared `buffer_budget`
//! before it is buffered.
//!
//! Timeouts: a client message must be whole within `message_timeout` of its
//! first byte; `idle_timeout` closes a connection with nothing in flight;
//! `upstream_timeout` closes one whose backend is late with an answer due.

use super::buffer_budget::Reservation;
use super::connection::{self, end_of_stream, frames, EndOfStream, READ_CHUNK};
use super::requests::Requests;
use super::tap::Tap;
use super::topology;
use super::upstream::{Upstream, UpstreamStream, NOT_PRIMARY_CODES};
use super::uri::HostPort;
use super::x509::{asks_for_x509, write_refusing_x509};
use crate::stats::{Direction, Stats};
use crate::wire::{frame, FrameError, Header};
use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Notify};

/// The forwarding buffer budget, also under the name it had when it lived
/// beside the loops that reserve from it.
pub use super::buffer_budget::BufferBudget;
/// The one-shot message reader, also under this name for the callers (tests
/// among them) that read a reply the way a session does.
pub use super::connection::read_frame;

/// What every session needs, shared.
pub(crate) struct SessionContext {
    pub upstream: Arc<Upstream>,
    pub tap: Arc<dyn Tap>,
    /// `tap.enabled()`, asked once at start instead of per message.
    pub tapped: bool,
    pub stats: Arc<Stats>,
    pub shutdown: watch::Receiver<bool>,
    pub shutdown_grace: Duration,
    pub idle_timeout: Option<Duration>,
    pub upstream_timeout: Option<Duration>,
    pub message_timeout: Option<Duration>,
    pub rewrite_topology: bool,
    /// Answer clients' `MONGODB-X509` authentication with an error instead
    /// of forwarding it (wirelint presents its own certificate upstream).
    pub refuse_x509: bool,
    pub buffers: BufferBudget,
}

/// State the two loops share.
struct Shared {
    /// The connection's number (in logs and for the analysis).
    conn: u64,
    /// The backend host this connection went to.
    host: HostPort,
    /// Where the request side sends replies of the proxy's own for the
    /// reply side to write (X.509 refusals), when it may give any.
    answers: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
    /// Requests sent upstream that still await their (final) reply.
    requests: Mutex<Requests>,
    /// Notified when no request awaiting a prompt answer is left.
    idle_notify: Notify,
    /// Milliseconds since `epoch` of the last read, per direction.
    last_read: [AtomicU64; 2],
    epoch: Instant,
}

impl Shared {
    fn new(
        conn: u64,
        host: HostPort,
        answers: Option<tokio::sync::mpsc::Sender<Vec<u8>>>,
    ) -> Shared {
        Shared {
            conn,
            host,
            answers,
            requests: Mutex::new(Requests::default()),
            idle_notify: Notify::new(),
            last_read: [AtomicU64::new(0), AtomicU64::new(0)],
            epoch: Instant::now(),
        }
    }

    /// A read at `at` in `direction`.
    fn touch(&self, direction: Direction, at: Instant) {
        self.last_read[direction.index()].store(self.millis(at), Relaxed);
    }

    /// Milliseconds on the session's clock.
    fn now(&self) -> u64 {
        self.millis(Instant::now())
    }

    /// `at` on the session's clock, in milliseconds.
    fn millis(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_millis() as u64
    }

    fn requests(&self) -> std::sync::MutexGuard<'_, Requests> {
        // Held for a few instructions and never across an await; a panic
        // while held would be a bug in `Requests`, whose state stays valid.
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Requests awaiting a prompt answer (what shutdown waits for).
    fn prompt_in_flight(&self) -> usize {
        self.requests().prompt()
    }

    fn since_read(&self, direction: Direction) -> Duration {
        let ms = self.epoch.elapsed().as_millis() as u64;
        Duration::from_millis(ms.saturating_sub(self.last_read[direction.index()].load(Relaxed)))
    }
}

/// How one direction's loop ended.
enum End {
    /// The peer closed cleanly between messages.
    Eof,
    /// Shutdown was requested (request direction only).
    Shutdown,
}

#[derive(Debug, thiserror::Error)]
enum PumpError {
    #[error("{0}")]
    Frame(FrameError),
    #[error("closed in the middle of a message ({0} bytes of it received)")]
    MidFrameEof(usize),
    #[error("the client sent {have} bytes of a message in {} and no more (message timeout)", humantime::format_duration(*.limit))]
    Stalled { have: usize, limit: Duration },
    #[error("idle for {} before its first message (idle timeout)", humantime::format_duration(*.0))]
    Idle(Duration),
    #[error("upstream {0} is not the writable primary (it answered a hello as a secondary); the driver reconnects, and wirelint connects it to the primary")]
    NotPrimary(HostPort),
    #[error("read failed: {0}")]
    Read(io::Error),
    #[error("write failed: {0}")]
    Write(io::Error),
}

/// Serves one client connection until either side ends it, a timeout
/// fires, the primary moves, or shutdown's grace period is over.
pub(crate) async fn run<C>(client: C, peer: SocketAddr, conn: u64, ctx: Arc<SessionContext>)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let mut shutdown = ctx.shutdown.clone();
    // No backend connection is opened before the client has sent one whole
    // message: idle or slow sockets hold none.
    let mut incoming = Incoming::new(Instant::now());
    let Some(first_len) = read_first_message(
        &mut incoming,
        &mut client_read,
        conn,
        peer,
        &ctx,
        &mut shutdown,
    )
    .await
    else {
        return;
    };
    let mut primary_changes = ctx.upstream.changes();
    let first = &incoming.buf[..first_len];
    let Some((upstream, host)) =
        connect_or_refuse(&mut client_write, first, conn, peer, &ctx).await
    else {
        return;
    };
    let (upstream_read, upstream_write) = split_upstream(upstream);
    let mut reply_side = Incoming::new(Instant::now());
    let answers = ctx.refuse_x509.then(|| {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        reply_side.answers = Some(rx);
        tx
    });
    let shared = Arc::new(Shared::new(conn, host.clone(), answers));

    let requests = pump(
        client_read,
        upstream_write,
        incoming,
        Direction::Request,
        &ctx,
        &shared,
        Some(&mut shutdown),
    );
    let replies = pump(
        upstream_read,
        client_write,
        reply_side,
        Direction::Reply,
        &ctx,
        &shared,
        None,
    );
    let watchdog = watchdog(&ctx, &shared);
    tokio::pin!(requests, replies, watchdog);
    let _closed = scopeguard::guard((), |()| ctx.tap.closed(conn));

    tokio::select! {
        end = &mut requests => match end {
            Ok(end) => {
                // Client done (a half-close still waits for its answers) or
                // shutdown: take no more requests; let the ones in flight
                // be answered.
                if matches!(end, End::Eof) {
                    tracing::debug!(conn, %peer, "client closed its side of the connection");
                }
                let_in_flight_finish(&shared, peer, ctx.shutdown_grace, replies.as_mut()).await;
            }
            Err(e) => log_client_end(conn, peer, &e),
        },
        end = &mut replies => log_upstream_end(&shared, peer, end),
        reason = &mut watchdog => {
            tracing::warn!(conn, %peer, "closing the connection: {reason}");
        }
        () = primary_moved(&ctx, &host, &mut primary_changes) => {
            tracing::info!(conn, %peer, upstream = %host, "closing the connection: the upstream primary changed; the driver reconnects to the new one");
        }
    }
}

/// Reads the client's first message whole into `incoming` and returns its
/// length; `None` if the client left, or shutdown came, first, or if what
/// it sent is not a message (logged and counted here).
async fn read_first_message<R: AsyncRead + Unpin>(
    incoming: &mut Incoming,
    client_read: &mut R,
    conn: u64,
    peer: SocketAddr,
    ctx: &SessionContext,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<usize> {
    match incoming.fill_until_whole(client_read, ctx, shutdown).await {
        Ok(Some(len)) => Some(len),
        Ok(None) => None,
        Err(e) => {
            log_client_end(conn, peer, &e);
            if let PumpError::Frame(e) = &e {
                ctx.stats.frame_error(e.kind());
            }
            None
        }
    }
}

/// Opens the connection to the upstream; when it cannot be reached, answers
/// the client's `first` message with the cause, closes, and returns `None`.
async fn connect_or_refuse<W: AsyncWrite + Unpin>(
    client_write: &mut W,
    first: &[u8],
    conn: u64,
    peer: SocketAddr,
    ctx: &SessionContext,
) -> Option<(UpstreamStream, HostPort)> {
    match ctx.upstream.connect().await {
        Ok(connected) => Some(connected),
        Err(e) => {
            ctx.stats.upstream_connect_failures.fetch_add(1, Relaxed);
            tracing::warn!(conn, %peer, "{e}; answering the client's first message with this error and closing");
            refuse(client_write, first, &format!("wirelint: {e}")).await;
            None
        }
    }
}

/// Once the client side has ended: waits until no request awaits a prompt
/// answer, the upstream side ends (`replies`), or `grace` is over,
/// whichever comes first.
async fn let_in_flight_finish<F: Future + Unpin>(
    shared: &Shared,
    peer: SocketAddr,
    grace: Duration,
    mut replies: F,
) {
    let conn = shared.conn;
    let deadline = tokio::time::sleep(grace);
    tokio::pin!(deadline);
    loop {
        if shared.prompt_in_flight() == 0 {
            tracing::debug!(conn, %peer, "closed with nothing in flight");
            break;
        }
        tokio::select! {
            _ = shared.idle_notify.notified() => {}
            _ = &mut replies => break,
            _ = &mut deadline => {
                tracing::info!(conn, %peer, in_flight = shared.prompt_in_flight(), "grace period over; closing with requests in flight");
                break;
            }
        }
    }
}

/// The log line for an upstream side that ended first.
fn log_upstream_end(shared: &Shared, peer: SocketAddr, end: Result<End, PumpError>) {
    let conn = shared.conn;
    match end {
        Ok(_) => {
            let pending = shared.prompt_in_flight();
            if pending > 0 {
                tracing::warn!(conn, %peer, pending, "upstream closed the connection with requests in flight; closing the client connection");
            } else {
                tracing::debug!(conn, %peer, "upstream closed the connection");
            }
        }
        Err(PumpError::Frame(e)) => {
            tracing::warn!(conn, %peer, "closing the connection: invalid message from the upstream: {e}");
        }
        Err(e) => tracing::info!(conn, %peer, "upstream side ended: {e}"),
    }
}

/// Completes once `host` is no longer the primary connections go to.
async fn primary_moved(
    ctx: &SessionContext,
    host: &HostPort,
    changes: &mut tokio::sync::watch::Receiver<u64>,
) {
    loop {
        if !ctx.upstream.is_current(host) {
            return;
        }
        if changes.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// The upstream could not be reached: answer the client's first message
/// (read whole already) with an error naming the cause, then close.
async fn refuse<W: AsyncWrite + Unpin>(writer: &mut W, first: &[u8], message: &str) {
    let answer = async {
        writer
            .write_all(&topology::error_reply(
                first,
                message,
                topology::HOST_UNREACHABLE,
            ))
            .await?;
        writer.flush().await?;
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), answer).await;
    let _ = writer.shutdown().await;
}

/// The log line for a client side that ended with an error.
fn log_client_end(conn: u64, peer: SocketAddr, e: &PumpError) {
    match e {
        PumpError::Frame(e) => {
            tracing::warn!(conn, %peer, "closing the connection: invalid message from the client: {e}")
        }
        PumpError::MidFrameEof(_) => tracing::info!(conn, %peer, "client {e}"),
        PumpError::Stalled { .. } | PumpError::Idle(_) => {
            tracing::warn!(conn, %peer, "closing the connection: {e}")
        }
        e => tracing::debug!(conn, %peer, "client side ended: {e}"),
    }
}

fn split_upstream(
    stream: UpstreamStream,
) -> (
    Box<dyn AsyncRead + Send + Unpin>,
    Box<dyn AsyncWrite + Send + Unpin>,
) {
    match stream {
        UpstreamStream::Plain(tcp) => {
            let (r, w) = tcp.into_split();
            (Box::new(r), Box::new(w))
        }
        other => {
            let (r, w) = tokio::io::split(other);
            (Box::new(r), Box::new(w))
        }
    }
}

/// Fires when a configured timeout is exceeded; pending forever otherwise.
async fn watchdog(ctx: &SessionContext, shared: &Shared) -> String {
    let limits = [ctx.idle_timeout, ctx.upstream_timeout];
    let Some(tick) = limits.iter().flatten().min().copied() else {
        return std::future::pending().await;
    };
    let tick = (tick / 4).max(Duration::from_millis(25));
    loop {
        tokio::time::sleep(tick).await;
        if let Some(idle) = ctx.idle_timeout {
            let quiet = shared
                .since_read(Direction::Request)
                .min(shared.since_read(Direction::Reply));
            if quiet >= idle && !shared.requests().any() {
                return format!(
                    "idle for {} (idle timeout)",
                    humantime::format_duration(idle)
                );
            }
        }
        if let Some(limit) = ctx.upstream_timeout {
            let late = shared
                .requests()
                .overdue(shared.now(), limit.as_millis() as u64);
            if late && shared.since_read(Direction::Reply) >= limit {
                return format!(
                    "the upstream has not answered for {} (upstream timeout); the client gets a closed connection",
                    humantime::format_duration(limit)
                );
            }
        }
    }
}

/// A direction's read buffer: bytes received and not yet forwarded, the
/// budget held for the large message among them, and when the message
/// being received began (for the message timeout).
struct Incoming {
    buf: BytesMut,
    reserved: Option<Reservation>,
    /// When the first byte of the message at the front arrived (for the
    /// client's first message: when it connected).
    started: Instant,
    /// Replies the proxy gives itself (refusals), written on this side
    /// between whole messages.
    answers: Option<tokio::sync::mpsc::Receiver<Vec<u8>>>,
}

/// What one `Incoming::fill` brought.
enum Filled {
    /// This many bytes (0: end of stream).
    Read(usize),
    /// Shutdown was requested.
    Stop,
    /// A reply of the proxy's own to write.
    Answer(Vec<u8>),
}

impl Incoming {
    fn new(started: Instant) -> Incoming {
        Incoming {
            buf: BytesMut::with_capacity(READ_CHUNK),
            reserved: None,
            started,
            answers: None,
        }
    }

    /// Reads once into the buffer: reserves budget first when a large
    /// message is being received, and waits no later than the message
    /// timeout since the last byte), or until a reply of the proxy's own
    /// is to be written.
    async fn fill<R: AsyncRead + Unpin, S: Future<Output = ()>>(
        &mut self,
        reader: &mut R,
        ctx: &SessionContext,
        stop: Pin<&mut S>,
        timed: bool,
        idle_since: Option<Instant>,
    ) -> Result<Filled, PumpError> {
        let Incoming {
            buf,
            reserved,
            started,
            answers,
        } = self;
        let announced = frame::expected_len(buf).ok().flatten();
        let message = ctx.message_timeout.filter(|_| timed).map(|limit| {
            (
                *started + limit,
                PumpError::Stalled {
                    have: buf.len(),
                    limit,
                },
            )
        });
        let idle = ctx
            .idle_timeout
            .zip(idle_since)
            .map(|(limit, since)| (since + limit, PumpError::Idle(limit)));
        let deadline = match (message, idle) {
            (Some(m), Some(i)) => Some(if i.0 < m.0 { i } else { m }),
            (m, i) => m.or(i),
        };
        let read = async {
            if reserved.is_none() {
                if let Some(len) = announced.filter(|len| *len > READ_CHUNK) {
                    *reserved = Some(ctx.buffers.reserve(len, &ctx.stats).await);
                }
            }
            connection::reserve_next_read(buf, announced);
            reader.read_buf(buf).await.map_err(PumpError::Read)
        };
        let answer = async {
            match answers {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        let (late_at, late) = match deadline {
            Some((at, error)) => (Some(at), Some(error)),
            None => (None, None),
        };
        let stalled = async {
            match late_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        // In this order (no random start per read): shutdown, then a reply
        // of the proxy's own, then the bytes, then the deadline.
        tokio::select! {
            biased;
            _ = stop => Ok(Filled::Stop),
            Some(frame) = answer => Ok(Filled::Answer(frame)),
            n = read => n.map(Filled::Read),
            _ = stalled => Err(late.expect("a deadline was set")),
        }
    }

    /// Reads until the buffer holds one whole message (the client's first)
    /// and returns its length; `Ok(None)` if the client left (or shutdown
    /// came) first.
    async fn fill_until_whole<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
        ctx: &SessionContext,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Option<usize>, PumpError> {
        let mut last_byte = self.started;
        let mut stop = std::pin::pin!(stopped(Some(shutdown)));
        loop {
            match frame::check(&self.buf) {
                Ok(Some(len)) => return Ok(Some(len)),
                Ok(None) => {}
                Err(e) => {
                    return Err(PumpError::Frame(
                        frame::sniff_foreign(&self.buf).map_or(e, FrameError::Foreign),
                    ))
                }
            }
            match self
                .fill(reader, ctx, stop.as_mut(), true, Some(last_byte))
                .await?
            {
                Filled::Stop | Filled::Answer(_) => return Ok(None),
                Filled::Read(0) => {
                    return match end_of_stream(&self.buf) {
                        EndOfStream::Clean => Ok(None),
                        EndOfStream::MidFrame(have) => Err(PumpError::MidFrameEof(have)),
                    }
                }
                Filled::Read(_) => last_byte = Instant::now(),
            }
        }
    }
}

/// Completes when shutdown is asked for (never, without a receiver). One
/// per pump, kept across reads: a fresh `changed()` per read would enter
/// and leave the waiter list every session shares, under its lock.
async fn stopped(shutdown: Option<&mut tokio::sync::watch::Receiver<bool>>) {
    match shutdown {
        Some(stop) if *stop.borrow() => {}
        Some(stop) => {
            let _ = stop.changed().await;
        }
        None => std::future::pending().await,
    }
}

async fn pump<R, W>(
    mut reader: R,
    mut writer: W,
    mut incoming: Incoming,
    direction: Direction,
    ctx: &SessionContext,
    shared: &Shared,
    shutdown: Option<&mut tokio::sync::watch::Receiver<bool>>,
) -> Result<End, PumpError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Whether nothing has come yet: a first message that is not the wire
    // protocol is named (HTTP, TLS) in the log line.
    let mut first = incoming.buf.is_empty();
    // Messages set aside: replies to hellos to rewrite, requests for X.509
    // authentication to refuse.
    let special = match direction {
        Direction::Reply => ctx.rewrite_topology,
        Direction::Request => ctx.refuse_x509,
    };
    // The message timeout is the client's: the upstream's pace is the
    // upstream timeout's business.
    let timed = direction == Direction::Request;
    let mut stop = std::pin::pin!(stopped(shutdown));
    let mut at = Instant::now();
    loop {
        // Forward every whole message at the front of the buffer.
        let whole = connection::whole_messages(&incoming.buf);
        if whole.len > 0 {
            let chunk = incoming.buf.split_to(whole.len).freeze();
            // Tracked before it is written: a reply can come back as soon
            // as the first bytes are out.
            let set_aside = track(&chunk, direction, ctx, shared, special, at);
            if set_aside.is_empty() {
                writer.write_all(&chunk).await.map_err(PumpError::Write)?;
            } else if direction == Direction::Reply {
                write_rewriting_hellos(&mut writer, &chunk, &set_aside, ctx, shared).await?;
            } else {
                let answers = shared.answers.as_ref();
                write_refusing_x509(&mut writer, &chunk, &set_aside, shared.conn, answers)
                    .await
                    .map_err(PumpError::Write)?;
            }
            hand_off(&chunk, direction, shared.conn, at, ctx);
            first = false;
            // Written on: its room goes back to the budget, and the message
            // after it (if begun) started with this read.
            incoming.reserved = None;
            incoming.started = at;
        }
        if let Some(e) = whole.then {
            let e = match (first, frame::sniff_foreign(&incoming.buf)) {
                (true, Some(what)) => FrameError::Foreign(what),
                _ => e,
            };
            ctx.stats.frame_error(e.kind());
            return Err(PumpError::Frame(e));
        }

        // Then read more.
        let mid_message = !incoming.buf.is_empty();
        let n = match incoming
            .fill(&mut reader, ctx, stop.as_mut(), timed && mid_message, None)
            .await?
        {
            Filled::Read(n) => n,
            Filled::Stop => return Ok(End::Shutdown),
            Filled::Answer(frame) => {
                // Between whole messages: the buffer may hold the start of
                // the next one, which stays there.
                writer.write_all(&frame).await.map_err(PumpError::Write)?;
                continue;
            }
        };
        if n == 0 {
            return match end_of_stream(&incoming.buf) {
                EndOfStream::Clean => Ok(End::Eof),
                EndOfStream::MidFrame(have) => Err(PumpError::MidFrameEof(have)),
            };
        }
        at = Instant::now();
        if !mid_message {
            incoming.started = at;
        }
        shared.touch(direction, at);
    }
}

/// Writes a run of replies, replacing replica-set hello replies (among the
/// replies to hellos, at `hellos`: (offset, length)) by their rewritten
/// form and copying every other byte through unchanged.
async fn write_rewriting_hellos<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunk: &Bytes,
    hellos: &[(usize, usize)],
    ctx: &SessionContext,
    shared: &Shared,
) -> Result<(), PumpError> {
    let mut from = 0;
    for &(start, len) in hellos {
        if topology::says_not_primary(&chunk[start..start + len]) {
            // Never presented as a router: the replies before it go out,
            // this one does not, and the connection closes (the driver
            // reconnects, to the primary).
            writer
                .write_all(&chunk[from..start])
                .await
                .map_err(PumpError::Write)?;
            ctx.upstream
                .demote(&shared.host, "it answered a hello as a non-primary");
            return Err(PumpError::NotPrimary(shared.host.clone()));
        }
        if let Some(rewritten) = topology::rewrite_hello_reply(&chunk[start..start + len]) {
            writer
                .write_all(&chunk[from..start])
                .await
                .map_err(PumpError::Write)?;
            writer
                .write_all(&rewritten)
                .await
                .map_err(PumpError::Write)?;
            ctx.stats.hello_rewrites.fetch_add(1, Relaxed);
            from = start + len;
        }
    }
    writer
        .write_all(&chunk[from..])
        .await
        .map_err(PumpError::Write)
}

/// Tracks the requests of a chunk about to be written, or matches its
/// replies to them. For replies, returns where the replies to `hello`s are
/// (offset, length) when `rewrite` asks for them.
///
/// What it returns, as (offset, length): for replies, the replies to
/// `hello`s when `special` (the topology rewrite is on); for requests, those
/// asking for X.509 authentication when `special` (they must be refused,
/// see [`asks_for_x509`]), which are then not tracked. `read_at`: when the
/// chunk's last bytes were read (the time its messages are tracked at).
fn track(
    chunk: &[u8],
    direction: Direction,
    ctx: &SessionContext,
    shared: &Shared,
    special: bool,
    read_at: Instant,
) -> Vec<(usize, usize)> {
    let follows_primary = direction == Direction::Reply && ctx.upstream.follows_primary();
    // The clock is read once per read, not per message.
    let now = shared.millis(read_at);
    let mut set_aside = Vec::new();
    let mut requests = shared.requests();
    for (start, len) in frames(chunk) {
        let message = &chunk[start..start + len];
        let Some(header) = Header::parse(message) else {
            continue;
        };
        match direction {
            Direction::Request => {
                let peek = frame::peek(message);
                if special && asks_for_x509(message, &peek) {
                    set_aside.push((start, len));
                } else {
                    requests.sent(header.request_id, &peek, now);
                }
            }
            Direction::Reply => {
                if follows_primary {
                    if let Some(code) = frame::error_code(message) {
                        if NOT_PRIMARY_CODES.contains(&code) {
                            ctx.upstream.demote(
                                &shared.host,
                                &format!("it answered a request with error {code} (not primary)"),
                            );
                        }
                    }
                }
                let more = frame::more_to_come(message);
                if requests.replied(header.response_to, header.request_id, more, now) && special {
                    set_aside.push((start, len));
                }
            }
        }
    }
    if direction == Direction::Reply && requests.prompt() == 0 {
        shared.idle_notify.notify_one();
    }
    set_aside
}

/// Counts the messages of a forwarded chunk and hands each to the analysis
/// queue.
fn hand_off(chunk: &Bytes, direction: Direction, conn: u64, at: Instant, ctx: &SessionContext) {
    let mut count = 0;
    for (start, len) in frames(chunk) {
        count += 1;
        if ctx.tapped {
            ctx.tap
                .message(conn, direction, at, chunk.slice(start..start + len));
        }
    }
    ctx.stats.frames[direction.index()].fetch_add(count, Relaxed);
    ctx.stats.bytes[direction.index()].fetch_add(chunk.len() as u64, Relaxed);
}
