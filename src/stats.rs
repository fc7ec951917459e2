//! Counters shared by the forwarding path and the analysis side.
//!
//! The forwarding path only touches atomics; the analysis side keeps its
//! richer counters behind a mutex its workers lock to add up what they
//! counted (every 64 messages, see `analysis::Decoder`). A
//! [`StatsSnapshot`] is what tests, logs and (later) `/metrics` read.

use crate::wire::{Compressor, OpCode};
use crossbeam_utils::CachePadded;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Which way a message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client to backend.
    Request,
    /// Backend to client.
    Reply,
}

impl Direction {
    pub fn index(self) -> usize {
        match self {
            Direction::Request => 0,
            Direction::Reply => 1,
        }
    }
}

/// Distinct command names kept; further names are counted as `(other)`, so
/// a client sending random names cannot grow memory.
pub const MAX_COMMAND_NAMES: usize = 512;
/// Longest command name kept as sent (the longest real one, e.g.
/// `getDefaultRWConcern`, is far shorter); longer ones count as `(other)`.
pub const MAX_COMMAND_NAME: usize = 64;

#[derive(Default)]
pub struct Stats {
    pub connections_accepted: AtomicU64,
    pub connections_active: AtomicI64,
    pub connections_refused: AtomicU64,
    pub upstream_connect_failures: AtomicU64,
    pub frames: [AtomicU64; 2],
    pub bytes: [AtomicU64; 2],
    pub hello_rewrites: AtomicU64,
    pub analysis_enqueued: AtomicU64,
    /// Taken off the queue by a worker (enqueued − processed = queue depth);
    /// written by the workers, so on a cache line of its own (the
    /// forwarding threads write the counters beside it per message).
    pub analysis_processed: CachePadded<AtomicU64>,
    pub analysis_dropped: AtomicU64,
    /// Messages not analysed because their connection was sampled out
    /// (by `--analysis-share`, over `--analysis-cpu`, or while the analysis was behind; see
    /// `analysis::AnalysisQueue`).
    pub analysis_shed: AtomicU64,
    /// The sampling level now: one connection in 2^level analysed.
    pub analysis_sampling: AtomicU64,
    /// CPU time the analysis threads have run (ns), as each adds its own
    /// at every tick (see `--analysis-cpu`).
    pub analysis_cpu_nanos: AtomicU64,
    /// `--analysis-cpu`, in millionths of wirelint's CPU (0: no budget).
    pub analysis_cpu_budget_ppm: AtomicU64,
    /// Bytes the forwarding buffers hold for large messages (see
    /// `proxy::buffer_budget::BufferBudget`).
    pub buffer_bytes: AtomicU64,
    /// Large messages that waited for the forwarding buffer budget.
    pub buffer_waits: AtomicU64,
    /// Connections closed for a framing error, by kind. Rare: a mutex is fine.
    pub frame_errors: Mutex<BTreeMap<&'static str, u64>>,
    /// Taken by the workers to add up their counts: on a cache line of
    /// its own.
    pub analysis: CachePadded<Mutex<AnalysisCounters>>,
}

/// What the analysis side has decoded.
#[derive(Default)]
pub struct AnalysisCounters {
    pub messages: BTreeMap<(Direction, OpCode), u64>,
    pub commands: BTreeMap<String, u64>,
    pub compressed: BTreeMap<Compressor, u64>,
    pub decode_errors: BTreeMap<&'static str, u64>,
    pub checksums_verified: u64,
    pub panics: u64,
    /// The second each kind of decode error was last logged.
    last_logged: BTreeMap<&'static str, u64>,
}

impl AnalysisCounters {
    /// At most one log line a second per kind of decode error.
    pub fn log_allowed(&mut self, kind: &'static str) -> bool {
        let now = unix_seconds();
        let last = self.last_logged.insert(kind, now);
        last != Some(now)
    }

    /// Counts `n` requests of the command `name`.
    pub fn count_command(&mut self, name: &str, n: u64) {
        if let Some(count) = self.commands.get_mut(name) {
            *count += n;
        } else if self.commands.len() < MAX_COMMAND_NAMES && name.len() <= MAX_COMMAND_NAME {
            self.commands.insert(name.to_string(), n);
        } else {
            *self.commands.entry("(other)".to_string()).or_default() += n;
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct StatsSnapshot {
    pub connections_accepted: u64,
    pub connections_active: i64,
    pub connections_refused: u64,
    pub upstream_connect_failures: u64,
    pub requests_forwarded: u64,
    pub replies_forwarded: u64,
    pub request_bytes: u64,
    pub reply_bytes: u64,
    pub hello_rewrites: u64,
    pub analysis_enqueued: u64,
    pub analysis_processed: u64,
    pub analysis_dropped: u64,
    pub analysis_shed: u64,
    pub analysis_sampling: u64,
    /// CPU time the analysis threads have run (ns).
    pub analysis_cpu_nanos: u64,
    /// `--analysis-cpu` as a share of wirelint's CPU (0: no budget).
    pub analysis_cpu_budget: f64,
    /// CPU time the whole process has run (ns): forwarding, analysis and
    /// the rest.
    pub process_cpu_nanos: u64,
    /// Requests the analysis decoded (every command, each with its reply).
    pub analysed_requests: u64,
    pub buffer_bytes: u64,
    pub buffer_waits: u64,
    pub frame_errors: BTreeMap<String, u64>,
    /// `"request OP_MSG"` → count.
    pub messages: BTreeMap<String, u64>,
    /// Request command names (first key of the command document).
    pub commands: BTreeMap<String, u64>,
    /// OP_COMPRESSED messages by compressor, both directions.
    pub compressed: BTreeMap<String, u64>,
    pub decode_errors: BTreeMap<String, u64>,
    pub checksums_verified: u64,
    pub analysis_panics: u64,
}

impl Stats {
    pub fn frame_error(&self, kind: &'static str) {
        *self
            .frame_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(kind)
            .or_default() += 1;
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let analysis = self.analysis.lock().unwrap_or_else(|p| p.into_inner());
        let dir = |d: Direction| match d {
            Direction::Request => "request",
            Direction::Reply => "reply",
        };
        StatsSnapshot {
            connections_accepted: self.connections_accepted.load(Relaxed),
            connections_active: self.connections_active.load(Relaxed),
            connections_refused: self.connections_refused.load(Relaxed),
            upstream_connect_failures: self.upstream_connect_failures.load(Relaxed),
            requests_forwarded: self.frames[0].load(Relaxed),
            replies_forwarded: self.frames[1].load(Relaxed),
            request_bytes: self.bytes[0].load(Relaxed),
            reply_bytes: self.bytes[1].load(Relaxed),
            hello_rewrites: self.hello_rewrites.load(Relaxed),
            analysis_enqueued: self.analysis_enqueued.load(Relaxed),
            analysis_processed: self.analysis_processed.load(Relaxed),
            analysis_dropped: self.analysis_dropped.load(Relaxed),
            analysis_shed: self.analysis_shed.load(Relaxed),
            analysis_sampling: self.analysis_sampling.load(Relaxed),
            analysis_cpu_nanos: self.analysis_cpu_nanos.load(Relaxed),
            analysis_cpu_budget: self.analysis_cpu_budget_ppm.load(Relaxed) as f64 / 1e6,
            process_cpu_nanos: process_cpu_nanos(),
            analysed_requests: analysis
                .messages
                .iter()
                .filter(|((d, _), _)| *d == Direction::Request)
                .map(|(_, n)| n)
                .sum(),
            buffer_bytes: self.buffer_bytes.load(Relaxed),
            buffer_waits: self.buffer_waits.load(Relaxed),
            frame_errors: self
                .frame_errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            messages: analysis
                .messages
                .iter()
                .map(|((d, op), n)| (format!("{} {}", dir(*d), op.name()), *n))
                .collect(),
            commands: analysis.commands.clone(),
            compressed: analysis
                .compressed
                .iter()
                .map(|(c, n)| (c.name().to_string(), *n))
                .collect(),
            decode_errors: analysis
                .decode_errors
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            checksums_verified: analysis.checksums_verified,
            analysis_panics: analysis.panics,
        }
    }
}

/// Allows one log line a second, so a misbehaving peer cannot flood logs
/// (the counters still count every event).
pub struct RateLimit {
    last_second: AtomicU64,
}

impl RateLimit {
    pub const fn new() -> RateLimit {
        RateLimit {
            last_second: AtomicU64::new(0),
        }
    }

    pub fn allow(&self) -> bool {
        let now = unix_seconds();
        let last = self.last_second.load(Relaxed);
        now != last
            && self
                .last_second
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit::new()
    }
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// CPU time the calling thread has run, in nanoseconds.
pub fn thread_cpu_nanos() -> u64 {
    timespec_nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::ThreadCPUTime,
    ))
}

/// CPU time every thread of this process has run, in nanoseconds.
pub fn process_cpu_nanos() -> u64 {
    timespec_nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::ProcessCPUTime,
    ))
}

fn timespec_nanos(t: rustix::time::Timespec) -> u64 {
    (t.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Command names come from clients: at most 512 distinct ones of at
    /// most 64 bytes are kept, whatever is sent; the rest are `(other)`.
    #[test]
    fn command_names_are_bounded_in_number_and_length() {
        let mut c = AnalysisCounters::default();
        c.count_command("find", 1);
        c.count_command(&"x".repeat(10_000), 1);
        for i in 0..10_000 {
            c.count_command(&format!("cmd{i}"), 1);
        }
        c.count_command("find", 1);
        // "(other)" took one of the 512 places (the long name came early).
        assert_eq!(c.commands.len(), MAX_COMMAND_NAMES);
        assert_eq!(c.commands["find"], 2);
        assert!(c.commands.keys().all(|k| k.len() <= MAX_COMMAND_NAME));
        let named = MAX_COMMAND_NAMES as u64 - 2;
        assert_eq!(c.commands["(other)"], 1 + 10_000 - named);
    }
}
