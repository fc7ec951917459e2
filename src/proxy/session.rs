//! One client connection and its upstream connection: two loops, one per
//! direction, each reading whole messages and forwarding the original bytes
//! at once.
//!
//! Per read, a loop finds every complete message at the front of its buffer
//! (`wire::frame::check`), splits them off as one frozen `Bytes` (no copy),
//! writes them in one call, then offers each message to the analysis queue
//! as a slice of that same `Bytes`. Replies that describe a replica set are
//! the one exception to byte-transparency (`topology`). The directions are
//! independent, so exhaust replies and fire-and-forget requests need no
//! special case.

use super::topology;
use super::upstream::UpstreamStream;
use super::SessionContext;
use crate::stats::Direction;
use crate::wire::{frame, FrameError, Header, HEADER_LEN};
use bytes::{Bytes, BytesMut};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

/// Bytes asked of the socket per read when no larger message is pending.
const READ_CHUNK: usize = 16 * 1024;
/// A message announced larger than this is buffered in steps of this size,
/// so memory follows the bytes actually received, not the bytes announced.
const MAX_READ_STEP: usize = 1024 * 1024;
/// Messages up to this size are copied for analysis (see `account`).
const COPY_FOR_ANALYSIS: usize = 4096;

/// The forwarding buffers' global budget (`--forward-memory`): a message
/// larger than [`READ_CHUNK`] is buffered only once its whole length is
/// reserved here, in [`BUDGET_UNIT`]s, and the reservation is given back
/// when it has been written on. A connection that cannot reserve waits —
/// its peer's bytes stay in the kernel, back-pressured by TCP — until
/// others' large messages are written; it holds nothing while it waits, so
/// waiting cannot deadlock. Messages up to [`READ_CHUNK`] (nearly all of
/// them) never wait. A message larger than the whole budget reserves all
/// of it.
pub struct BufferBudget {
    units: Arc<tokio::sync::Semaphore>,
    total: u32,
}

/// What the buffer budget counts in.
const BUDGET_UNIT: usize = 64 * 1024;

impl BufferBudget {
    pub fn new(bytes: usize) -> BufferBudget {
        let total = (bytes / BUDGET_UNIT).clamp(1, tokio::sync::Semaphore::MAX_PERMITS) as u32;
        BufferBudget {
            units: Arc::new(tokio::sync::Semaphore::new(total as usize)),
            total,
        }
    }

    /// Reserves room for a message of `len` bytes, waiting for it if the
    /// budget is spent.
    async fn reserve(&self, len: usize, stats: &Arc<crate::stats::Stats>) -> Reservation {
        let units = (len.div_ceil(BUDGET_UNIT) as u32).min(self.total);
        let permit = match self.units.clone().try_acquire_many_owned(units) {
            Ok(p) => p,
            Err(_) => {
                stats.buffer_waits.fetch_add(1, Relaxed);
                self.units
                    .clone()
                    .acquire_many_owned(units)
                    .await
                    .expect("the budget's semaphore is never closed")
            }
        };
        let bytes = units as u64 * BUDGET_UNIT as u64;
        stats.buffer_bytes.fetch_add(bytes, Relaxed);
        Reservation {
            _permit: permit,
            bytes,
            stats: stats.clone(),
        }
    }
}

/// Room reserved for one large message; given back on drop (written on,
/// or the connection ended).
struct Reservation {
    _permit: tokio::sync::OwnedSemaphorePermit,
    bytes: u64,
    stats: Arc<crate::stats::Stats>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.stats.buffer_bytes.fetch_sub(self.bytes, Relaxed);
    }
}

/// State the two loops share.
struct Shared {
    /// Requests sent upstream that still await their (final) reply.
    in_flight: AtomicI64,
    idle_notify: Notify,
    /// Milliseconds since `epoch` of the last read, per direction.
    last_read: [AtomicU64; 2],
    epoch: Instant,
}

impl Shared {
    fn touch(&self, direction: Direction) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_read[direction.index()].store(ms, Relaxed);
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
    #[error("read failed: {0}")]
    Read(io::Error),
    #[error("write failed: {0}")]
    Write(io::Error),
}

pub(crate) async fn run<C>(client: C, peer: SocketAddr, conn: u64, ctx: Arc<SessionContext>)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let upstream = match ctx.upstream.connect().await {
        Ok((stream, _host)) => stream,
        Err(e) => {
            ctx.stats.upstream_connect_failures.fetch_add(1, Relaxed);
            tracing::warn!(conn, %peer, "{e}; answering the client's first message with this error and closing");
            refuse(
                &mut client_read,
                &mut client_write,
                &format!("wirelint: {e}"),
            )
            .await;
            return;
        }
    };
    let (upstream_read, upstream_write) = split_upstream(upstream);
    let shared = Arc::new(Shared {
        in_flight: AtomicI64::new(0),
        idle_notify: Notify::new(),
        last_read: [AtomicU64::new(0), AtomicU64::new(0)],
        epoch: Instant::now(),
    });

    let mut shutdown = ctx.shutdown.clone();
    let requests = pump(
        client_read,
        upstream_write,
        Direction::Request,
        conn,
        &ctx,
        &shared,
        Some(&mut shutdown),
    );
    let replies = pump(
        upstream_read,
        client_write,
        Direction::Reply,
        conn,
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
                let deadline = tokio::time::sleep(ctx.shutdown_grace);
                tokio::pin!(deadline);
                loop {
                    if shared.in_flight.load(Relaxed) <= 0 {
                        tracing::debug!(conn, %peer, "closed with nothing in flight");
                        break;
                    }
                    tokio::select! {
                        _ = shared.idle_notify.notified() => {}
                        _ = &mut replies => break,
                        _ = &mut deadline => {
                            tracing::info!(conn, %peer, in_flight = shared.in_flight.load(Relaxed), "grace period over; closing with requests in flight");
                            break;
                        }
                    }
                }
            }
            Err(PumpError::Frame(e)) => {
                tracing::warn!(conn, %peer, "closing the connection: invalid message from the client: {e}");
            }
            Err(e @ PumpError::MidFrameEof(_)) => tracing::info!(conn, %peer, "client {e}"),
            Err(e) => tracing::debug!(conn, %peer, "client side ended: {e}"),
        },
        end = &mut replies => match end {
            Ok(_) => {
                let pending = shared.in_flight.load(Relaxed);
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
        },
        reason = &mut watchdog => {
            tracing::warn!(conn, %peer, "closing the connection: {reason}");
        }
    }
}

/// The upstream could not be reached: answer the client's first message
/// with an error naming the cause, then close. Only the header is kept (the
/// reply needs its requestID and opcode); the body is read into a small
/// scratch buffer and dropped, so a client announcing a large message costs
/// nothing here.
async fn refuse<R, W>(reader: &mut R, writer: &mut W, message: &str)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let answer = async {
        let mut header = [0u8; HEADER_LEN];
        reader.read_exact(&mut header).await?;
        let len = frame::expected_len(&header)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
            .unwrap_or(HEADER_LEN);
        writer
            .write_all(&topology::error_reply(&header, message))
            .await?;
        writer.flush().await?;
        // Read the rest before closing: closing with unread bytes would
        // reset the connection and could lose the answer on its way.
        let mut left = len - HEADER_LEN;
        let mut scratch = [0u8; 4096];
        while left > 0 {
            let n = reader.read(&mut scratch[..left.min(4096)]).await?;
            if n == 0 {
                break;
            }
            left -= n;
        }
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), answer).await;
    let _ = writer.shutdown().await;
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
            if quiet >= idle && shared.in_flight.load(Relaxed) <= 0 {
                return format!(
                    "idle for {} (idle timeout)",
                    humantime::format_duration(idle)
                );
            }
        }
        if let Some(limit) = ctx.upstream_timeout {
            if shared.in_flight.load(Relaxed) > 0 && shared.since_read(Direction::Reply) >= limit {
                return format!(
                    "the upstream has not answered for {} (upstream timeout); the client gets a closed connection",
                    humantime::format_duration(limit)
                );
            }
        }
    }
}

async fn pump<R, W>(
    mut reader: R,
    mut writer: W,
    direction: Direction,
    conn: u64,
    ctx: &SessionContext,
    shared: &Shared,
    mut shutdown: Option<&mut tokio::sync::watch::Receiver<bool>>,
) -> Result<End, PumpError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut first = true;
    let rewrite = direction == Direction::Reply && ctx.rewrite_topology;
    // The budget held for the large message being received, if any.
    let mut reserved: Option<Reservation> = None;
    loop {
        // The length of the message being received, read once per pass.
        let announced = frame::expected_len(&buf).ok().flatten();
        if reserved.is_none() {
            if let Some(len) = announced {
                if len > READ_CHUNK {
                    let reserve = ctx.buffers.reserve(len, &ctx.stats);
                    reserved = Some(match shutdown.as_deref_mut() {
                        Some(stop) => tokio::select! {
                            r = reserve => r,
                            _ = stop.changed() => return Ok(End::Shutdown),
                        },
                        None => reserve.await,
                    });
                }
            }
        }
        buf.reserve(read_step(buf.len(), announced));
        let n = match shutdown.as_deref_mut() {
            Some(stop) => {
                if *stop.borrow() {
                    return Ok(End::Shutdown);
                }
                tokio::select! {
                    r = reader.read_buf(&mut buf) => r.map_err(PumpError::Read)?,
                    _ = stop.changed() => return Ok(End::Shutdown),
                }
            }
            None => reader.read_buf(&mut buf).await.map_err(PumpError::Read)?,
        };
        if n == 0 {
            return if buf.is_empty() {
                Ok(End::Eof)
            } else {
                Err(PumpError::MidFrameEof(buf.len()))
            };
        }
        let at = Instant::now();
        shared.touch(direction);

        let mut end = 0;
        let mut failure = None;
        loop {
            match frame::check(&buf[end..]) {
                Ok(Some(len)) => end += len,
                Ok(None) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if end > 0 {
            let chunk = buf.split_to(end).freeze();
            if rewrite {
                write_rewriting_hellos(&mut writer, &chunk, ctx).await?;
            } else {
                writer.write_all(&chunk).await.map_err(PumpError::Write)?;
            }
            account(&chunk, direction, conn, at, ctx, shared);
            first = false;
            // Written on: its room goes back to the budget.
            reserved = None;
        }
        if let Some(e) = failure {
            let e = match (first, frame::sniff_foreign(&buf)) {
                (true, Some(what)) => FrameError::Foreign(what),
                _ => e,
            };
            ctx.stats.frame_error(e.kind());
            return Err(PumpError::Frame(e));
        }
    }
}

/// How much room to make before the next read: the rest of the message
/// being received, in steps of at most `MAX_READ_STEP` (memory follows the
/// bytes that arrive, not the length a peer announces), else a chunk.
/// `announced`: the length the message being received gives itself, once
/// its header is in.
fn read_step(have: usize, announced: Option<usize>) -> usize {
    match announced {
        Some(len) if len > have => (len - have).min(MAX_READ_STEP),
        _ => READ_CHUNK,
    }
}

/// Reads one whole, checked message for a one-shot exchange (the upstream
/// probe, tests). Grows its buffer as `pump` does, by what has arrived plus
/// one step. Bytes after the message, if the peer sent any, are dropped.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Bytes> {
    let mut buf = BytesMut::new();
    loop {
        match frame::check(&buf) {
            Ok(Some(len)) => return Ok(buf.split_to(len).freeze()),
            Ok(None) => {}
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
        buf.reserve(read_step(
            buf.len(),
            frame::expected_len(&buf).ok().flatten(),
        ));
        if reader.read_buf(&mut buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// Writes a run of replies, replacing replica-set hello replies by their
/// rewritten form and copying every other byte through unchanged.
async fn write_rewriting_hellos<W: AsyncWrite + Unpin>(
    writer: &mut W,
    chunk: &Bytes,
    ctx: &SessionContext,
) -> Result<(), PumpError> {
    let mut from = 0;
    for (start, len) in frames(chunk) {
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

/// Counts the messages of a forwarded chunk, tracks what is in flight and
/// hands each message to the analysis queue.
fn account(
    chunk: &Bytes,
    direction: Direction,
    conn: u64,
    at: Instant,
    ctx: &SessionContext,
    shared: &Shared,
) {
    let mut count = 0;
    let mut in_flight_delta = 0i64;
    for (start, len) in frames(chunk) {
        count += 1;
        let message = &chunk[start..start + len];
        match direction {
            Direction::Request if frame::expects_reply(message) => in_flight_delta += 1,
            Direction::Reply if !frame::more_to_come(message) => in_flight_delta -= 1,
            _ => {}
        }
        if ctx.tapped {
            // A small message is copied, so the read buffer is free to be
            // reused at once instead of staying pinned until analysed.
            let frame = if len <= COPY_FOR_ANALYSIS {
                Bytes::copy_from_slice(message)
            } else {
                chunk.slice(start..start + len)
            };
            ctx.tap.message(conn, direction, at, frame);
        }
    }
    ctx.stats.frames[direction.index()].fetch_add(count, Relaxed);
    ctx.stats.bytes[direction.index()].fetch_add(chunk.len() as u64, Relaxed);
    if in_flight_delta != 0 {
        let now = shared.in_flight.fetch_add(in_flight_delta, Relaxed) + in_flight_delta;
        if now <= 0 {
            shared.in_flight.store(0, Relaxed);
            shared.idle_notify.notify_one();
        }
    }
}

/// (offset, length) of each message in a chunk of whole, checked messages.
fn frames(chunk: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let header = Header::parse(chunk.get(pos..)?)?;
        let start = pos;
        pos += header.message_length as usize;
        Some((start, header.message_length as usize))
    })
}
