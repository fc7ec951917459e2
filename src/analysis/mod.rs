//! The analysis side: everything that reads messages, off the hot path.
//!
//! Sessions hand each forwarded message (a refcounted `Bytes`, no copy) to
//! [`AnalysisQueue::offer`], which never waits: when a worker's queue is full
//! the message is dropped and counted. Workers are plain threads; the queue
//! is sharded by connection, so one connection's messages are analysed in
//! the order the client sent them. A panic while analysing one message is
//! caught and counted; it never reaches the forwarding path.
//!
//! For now a worker decodes each message (inflating OP_COMPRESSED, verifying
//! OP_MSG checksums) and counts it by opcode, command name and compressor.
//! Sensitive commands are counted by name and never looked into.

pub mod command;
pub mod shape;

use crate::config::AnalysisSettings;
use crate::stats::{AnalysisCounters, Direction, Stats};
use crate::wire::{self, Message};
use bytes::Bytes;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::mpsc;

/// One forwarded message, as the analysis side receives it.
pub struct Event {
    pub conn: u64,
    pub direction: Direction,
    /// When the proxy read it (for latency once requests and replies pair).
    pub at: Instant,
    pub frame: Bytes,
}

/// The sending side; cheap to clone, one per session.
#[derive(Clone)]
pub struct AnalysisQueue {
    shards: Arc<[mpsc::Sender<Event>]>,
    stats: Arc<Stats>,
}

/// The worker threads; joined at shutdown so final counts are complete.
pub struct AnalysisWorkers(Vec<JoinHandle<()>>);

impl AnalysisWorkers {
    /// Waits for the workers to drain their queues. They stop once every
    /// [`AnalysisQueue`] clone is dropped.
    pub fn join(self) {
        for handle in self.0 {
            let _ = handle.join();
        }
    }
}

impl AnalysisQueue {
    pub fn start(
        settings: &AnalysisSettings,
        stats: Arc<Stats>,
    ) -> (AnalysisQueue, AnalysisWorkers) {
        if !settings.enabled {
            return (
                AnalysisQueue {
                    shards: Arc::from(Vec::new()),
                    stats,
                },
                AnalysisWorkers(Vec::new()),
            );
        }
        let workers = settings.workers.max(1);
        let per_shard = (settings.queue_capacity / workers).max(1);
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers {
            let (tx, rx) = mpsc::channel(per_shard);
            senders.push(tx);
            let stats = stats.clone();
            let handle = std::thread::Builder::new()
                .name(format!("wirelint-analysis-{i}"))
                .spawn(move || worker(rx, stats))
                .expect("spawning an analysis thread");
            handles.push(handle);
        }
        (
            AnalysisQueue {
                shards: Arc::from(senders),
                stats,
            },
            AnalysisWorkers(handles),
        )
    }

    /// Hands a message to its connection's worker, or drops it if that
    /// worker is behind. Never blocks.
    pub fn offer(&self, conn: u64, direction: Direction, at: Instant, frame: Bytes) {
        if self.shards.is_empty() {
            return;
        }
        let shard = &self.shards[(conn % self.shards.len() as u64) as usize];
        let event = Event {
            conn,
            direction,
            at,
            frame,
        };
        match shard.try_send(event) {
            Ok(()) => self.stats.analysis_enqueued.fetch_add(1, Relaxed),
            Err(_) => self.stats.analysis_dropped.fetch_add(1, Relaxed),
        };
    }
}

fn worker(mut rx: mpsc::Receiver<Event>, stats: Arc<Stats>) {
    while let Some(event) = rx.blocking_recv() {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            analyse(&event, &stats);
        }));
        if outcome.is_err() {
            stats
                .analysis
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .panics += 1;
            tracing::error!(
                conn = event.conn,
                "analysis panicked on a message; it was skipped (traffic is unaffected)"
            );
        }
    }
}

/// Commands whose bodies carry credentials: counted by name only.
pub const SENSITIVE_COMMANDS: &[&str] = &[
    "authenticate",
    "saslStart",
    "saslContinue",
    "getnonce",
    "copydbgetnonce",
    "copydbsaslstart",
    "copydb",
    "copydbnonce",
    "createUser",
    "updateUser",
];

pub fn is_sensitive(name: &str) -> bool {
    SENSITIVE_COMMANDS
        .iter()
        .any(|s| s.eq_ignore_ascii_case(name))
}

fn analyse(event: &Event, stats: &Stats) {
    let mut counters = stats.analysis.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(error) = analyse_frame(&event.frame, event.direction, &mut counters) {
        *counters.decode_errors.entry(error.kind()).or_default() += 1;
        let log = counters.log_allowed(error.kind());
        drop(counters);
        if log {
            let side = match event.direction {
                Direction::Request => "request",
                Direction::Reply => "reply",
            };
            tracing::warn!(
                conn = event.conn,
                "analysis could not decode a {side}: {error} (forwarded unchanged; at most one such line a second per kind of error)"
            );
        }
    }
}

/// Decodes and counts one message. A compressed message is counted as
/// OP_COMPRESSED and then again as the message it carries.
fn analyse_frame(
    frame: &[u8],
    direction: Direction,
    counters: &mut AnalysisCounters,
) -> Result<(), wire::WireError> {
    let message = Message::parse(frame)?;
    *counters
        .messages
        .entry((direction, message.opcode()))
        .or_default() += 1;
    match &message {
        Message::Compressed(c) => {
            *counters.compressed.entry(c.compressor).or_default() += 1;
            // The parser refuses compressed-in-compressed, so this recursion
            // is one level deep at most.
            return analyse_frame(&c.decompress()?, direction, counters);
        }
        Message::Msg(msg) => {
            if msg.checksum.is_some() {
                wire::op_msg::verify_checksum(frame)?;
                counters.checksums_verified += 1;
            }
            validate_bson(msg.body)?;
        }
        _ => {}
    }
    if direction == Direction::Request {
        if let Some(name) = wire::command_name(&message) {
            counters.count_command(name);
            if is_sensitive(name) {
                // Counted by name; the body is never read.
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A top-level walk: catches documents whose elements do not add up.
fn validate_bson(doc: &[u8]) -> Result<(), wire::WireError> {
    for element in wire::bson_walk::elements(doc) {
        element?;
    }
    Ok(())
}
