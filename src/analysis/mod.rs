//! The analysis side: everything that reads messages, off the hot path.
//!
//! Sessions hand each forwarded message (a `Bytes`) to the proxy's [`Tap`],
//! which [`AnalysisQueue`] implements: it never waits and never makes a
//! system call, but pushes onto a bounded lock-free queue, and when a
//! worker's queue is full the message is dropped and counted. Workers are
//! plain threads that drain their queue and, when it is empty, poll it
//! every 5 ms (up to 20 ms while each look finds only a few messages)
//! instead of being woken per message (waking a thread costs the
//! forwarding side a system call; the analysis can afford to be a few
//! milliseconds late, and each wake-up refills the caches the forwarding
//! threads took over, so larger batches cost less per message: 1 → 5 ms
//! measured −0.3 to −1.7 µs of analysis CPU per operation, 7 cells of 8,
//! `benches/proxy.rs`). After 50 ms without traffic a worker parks until the
//! next event: the first message (or the 250 ms tick) after a pause wakes
//! it — one system call per pause, none per message; a second after the
//! last message ticks have nothing left to do and stop waking it — so an
//! idle proxy sleeps. The queue is sharded by connection, so one
//! connection's messages are analysed in the order the client sent them. A
//! panic while analysing one message is caught and counted; it never
//! reaches the forwarding path.
//!
//! Per message a worker: decodes it (inflating OP_COMPRESSED, verifying
//! OP_MSG checksums) and counts it by opcode, command name and compressor;
//! then hands it to its [`engine::Engine`]: the [`command`] model, pairing
//! with replies, [`shape`]s, access [`patterns`], namespace [`state`], and the
//! hooks of the rules it was handed ([`rule::Rule`]), whose [`findings`]
//! land in the shared [`knowledge::Knowledge`].

pub mod budget;
pub mod catalogue;
pub mod command;
pub mod engine;
pub mod findings;
pub mod follow_ups;
pub mod hash;
pub mod knowledge;
pub mod partition;
pub mod patterns;
pub mod rule;
pub mod shape;
pub mod state;

use crate::proxy::Tap;
use crate::stats::{Direction, Stats};
use crate::wire::{self, Message};
use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use engine::{Decoded, Engine, ParsedRequest};
use knowledge::Knowledge;
use std::sync::atomic::{
    fence, AtomicU8, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// The analysis side's resources.
#[derive(Clone, Debug)]
pub struct Settings {
    pub enabled: bool,
    /// Messages waiting for analysis, across all workers. When it is full,
    /// new messages are dropped (and counted), never waited for.
    pub queue_capacity: usize,
    /// Bytes of messages waiting for analysis, at most (beyond, dropped and
    /// counted): what bounds memory when large documents flood in. Never
    /// more than the queue's share of the memory budget (an eighth).
    pub queue_bytes: usize,
    /// Worker threads; each owns the connections hashed to it, so the
    /// messages of one connection are analysed in order.
    pub workers: usize,
    /// Rules enabled, their severities and thresholds.
    pub rules: rule::RuleSettings,
    /// Allow literal values (e.g. example ids) in findings.
    pub show_values: bool,
    /// Called for each new or escalated finding (the CLI prints a line).
    pub live: Option<fn(&findings::FindingEvent)>,
    /// How much per-namespace state is kept (LRU-capped).
    pub caps: state::Caps,
    /// Partition keys from the config file: namespace → key paths.
    pub partition_keys: Vec<(String, Vec<String>, partition::KeyKind)>,
    /// The sampling level never goes under: one connection in 2^this is
    /// analysed even while the analysis keeps up (`--analysis-share`; 0,
    /// every connection, unless set).
    pub min_sampling: u8,
    /// The most of wirelint's CPU time the analysis threads may take, as
    /// a fraction (`--analysis-cpu`; none: no cap): past it the sampling
    /// level rises as under overload (see [`CpuBudget`]).
    pub cpu_share: Option<f64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            queue_capacity: 16_384,
            queue_bytes: 64 << 20,
            workers: 1,
            rules: rule::RuleSettings::default(),
            show_values: false,
            live: None,
            caps: state::Caps::default(),
            partition_keys: Vec::new(),
            min_sampling: 0,
            cpu_share: None,
        }
    }
}

/// Analysis threads get a generous stack of their own: messages reach the
/// walks at most [`MAX_NESTING`] deep, and the deepest walk (the bson
/// crate's conversion of an `_id` for `--show-values`) needs far less than
/// this at that depth. Only the pages touched are ever resident.
pub const ANALYSIS_STACK: usize = 16 << 20;

/// The analysis threads' names start with this.
const ANALYSIS_THREAD: &str = "wirelint-analysis-";

/// Replaces the process's panic hook so that a panic on an analysis thread
/// (caught there, counted, and the message skipped) logs one line, at most
/// once a second, instead of the default report — which, with
/// `RUST_BACKTRACE` set, symbolizes a backtrace per panic: measured at
/// +138 MiB of RSS on the first and a log flood after. Panics elsewhere go
/// to the previous hook. For the command line; a library user keeps its
/// own hook.
pub fn install_panic_hook() {
    static LOG: crate::stats::RateLimit = crate::stats::RateLimit::new();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let analysis = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with(ANALYSIS_THREAD));
        if !analysis {
            return previous(info);
        }
        if LOG.allow() {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(
                %location,
                "analysis panicked: {message} (caught: that message is skipped, traffic is unaffected; counted in wirelint_rule_panics_total and wirelint_analysis_panics_total; at most one such line a second)"
            );
        }
    }));
}

/// What a worker receives.
pub enum Event {
    /// One forwarded message.
    Message {
        conn: u64,
        direction: Direction,
        /// When the proxy read it (latency is measured between these).
        at: Instant,
        frame: Bytes,
        /// The sampling level it was taken under (0: every connection).
        sampling: u8,
    },
    /// The connection ended: its state can go.
    Closed { conn: u64 },
    /// Time passed: finish idle invocations, run periodic rule checks.
    Tick,
}

/// How long a worker with an empty queue sleeps before looking again while
/// traffic flows (a batch of ~5 ms of messages per wake-up; see the module
/// notes). A wake-up that found fewer than `FEW_MESSAGES` doubles the
/// sleep, up to `MAX_IDLE_POLL`; one that found more starts again from
/// `IDLE_POLL`: a worker that sees little traffic (a small share analysed,
/// a quiet application) wakes four times less often, where each wake-up
/// cost more than its messages. After `PARK_AFTER` without a message it
/// parks until woken (at most `PARKED` — a backstop, not a schedule).
const IDLE_POLL: Duration = Duration::from_millis(5);
const MAX_IDLE_POLL: Duration = Duration::from_millis(20);
const FEW_MESSAGES: u32 = 16;
const PARK_AFTER: Duration = Duration::from_millis(50);
const PARKED: Duration = Duration::from_secs(1);
const DEEP_PARKED: Duration = Duration::from_secs(60);

/// Ticks after the last message after which a parked worker has nothing
/// left for ticks to do (invocations end 500 ms after their last message):
/// it parks deeply and only a message or a close wakes it.
const TICKS_BEFORE_DEEP_PARK: u32 = 4;

/// A worker's state, as those who push see it.
const AWAKE: u8 = 0;
/// Parked: the next event wakes it.
const PARKED_STATE: u8 = 1;
/// Parked with nothing for ticks to do: ticks are not even queued.
const DEEP: u8 = 2;

/// One worker's queue, and how to wake it when it is parked.
struct ShardQueue {
    queue: ArrayQueue<Event>,
    /// Set by the worker before it parks; whoever pushes next clears it
    /// and unparks the worker.
    state: AtomicU8,
    thread: OnceLock<Thread>,
}

impl ShardQueue {
    fn push(&self, event: Event) -> Result<(), Event> {
        self.queue.push(event)?;
        // The push, then the look at the state (the worker does the
        // opposite: state, then a look at the queue), so one of the two
        // sees the other. One fence and one load per message.
        fence(SeqCst);
        if self.state.load(SeqCst) != AWAKE && self.state.swap(AWAKE, SeqCst) != AWAKE {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
        Ok(())
    }

    /// A tick, unless the worker is parked with nothing for it to do.
    fn tick(&self) {
        if self.state.load(SeqCst) != DEEP {
            let _ = self.push(Event::Tick);
        }
    }
}

/// The worker holds one reference to its shard; when it is the last one,
/// every [`AnalysisQueue`] is gone and the worker finishes.
type Shard = Arc<ShardQueue>;

/// The shards, shared by every [`AnalysisQueue`] clone. When the last one
/// goes, the workers are woken to see that nothing can come any more.
struct Senders(Vec<Shard>);

impl Drop for Senders {
    fn drop(&mut self) {
        let threads: Vec<Thread> = self
            .0
            .iter()
            .filter_map(|s| s.thread.get().cloned())
            .collect();
        self.0.clear();
        for t in threads {
            t.unpark();
        }
    }
}

/// The sending side; cheap to clone, one per session.
#[derive(Clone)]
pub struct AnalysisQueue {
    shards: Arc<Senders>,
    stats: Arc<Stats>,
    /// Bytes of the messages waiting, across shards, and the most allowed:
    /// a flood of large documents is dropped, not buffered.
    queued_bytes: Arc<AtomicUsize>,
    max_bytes: usize,
    sampling: Arc<Sampling>,
}

/// Load shedding by sampling whole connections. While the workers keep
/// up, every connection is analysed (level 0; or one in 2^floor when the
/// user chose a share with `--analysis-share`). When a tick finds messages
/// dropped since the last one, or a queue half full (by count or bytes),
/// the level rises by one: one connection in 2^level is analysed, chosen by
/// a hash of its id, so an analysed connection keeps every message —
/// requests with their replies, cursors with their getMores, an N+1's list
/// with its follow-ups — and what the rules see stays consistent. After
/// two seconds of queues under a tenth full it falls by one, down to the
/// share the user set (`--analysis-share`, all by default). With a CPU
/// budget (`--analysis-cpu`), a second in which the analysis took more of
/// wirelint's CPU time than it allows raises the level too (see
/// [`CpuBudget`]). Forwarding is
/// never slowed: the check is one relaxed load per message, and a
/// sampled-out message costs a counter increment.
#[derive(Default)]
struct Sampling {
    level: AtomicU8,
    /// The level set by the user (`--analysis-share`): the level starts
    /// there and never falls below it.
    floor: u8,
    dropped_seen: std::sync::atomic::AtomicU64,
    calm_ticks: std::sync::atomic::AtomicU32,
    /// `--analysis-cpu`, when set.
    cpu: Option<CpuBudget>,
}

impl Sampling {
    fn new(floor: u8, cpu_share: Option<f64>) -> Sampling {
        Sampling {
            level: AtomicU8::new(floor),
            floor,
            cpu: cpu_share.map(|share| CpuBudget {
                share,
                floor: AtomicU8::new(0),
                window: Mutex::new(CpuWindow {
                    process: process_cpu_nanos(),
                    ..CpuWindow::default()
                }),
            }),
            ..Sampling::default()
        }
    }

    /// The level the calm path may not fall below: the user's share, or
    /// what the CPU budget asks for now.
    fn floor(&self) -> u8 {
        let cpu = self.cpu.as_ref().map_or(0, |c| c.floor.load(Relaxed));
        self.floor.max(cpu)
    }
}

/// `--analysis-cpu`: the analysis threads' CPU time is compared with the
/// whole process's once a second (each worker adds its own thread's time
/// to `Stats::analysis_cpu_nanos` at every tick). Over the budget, the
/// level rises by one at once and stays at least there; once a second
/// finds that twice the analysis would still be under four fifths of the
/// budget (two seconds running), it may fall by one again through the
/// calm path. A window in which wirelint spent less than
/// [`MIN_WINDOW_CPU`] is not judged: idle, there is nothing to save.
struct CpuBudget {
    /// The fraction of wirelint's CPU time allowed to the analysis.
    share: f64,
    /// The level the budget asks for: the calm path does not go below it.
    floor: AtomicU8,
    window: Mutex<CpuWindow>,
}

/// CPU times (ns) when the window began, and how far it has come.
#[derive(Default)]
struct CpuWindow {
    process: u64,
    analysis: u64,
    ticks: u32,
    /// Windows in a row that found room for twice the analysis.
    roomy: u32,
}

/// Ticks per CPU window: one second.
const CPU_WINDOW_TICKS: u32 = 4;
/// Roomy windows in a row before the budget lets the level fall by one.
const ROOMY_WINDOWS_BEFORE_LOWER: u32 = 2;
/// Least CPU time (ns) wirelint must have spent in a window for it to be
/// judged: 10 ms a second, 1 % of a core.
const MIN_WINDOW_CPU: u64 = 10_000_000;

/// What a window's CPU times say: the analysis's share over the budget,
/// room for twice it (under four fifths of the budget), or neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CpuVerdict {
    Over,
    Roomy,
    Within,
}

fn cpu_verdict(process: u64, analysis: u64, budget: f64) -> CpuVerdict {
    if process < MIN_WINDOW_CPU {
        return CpuVerdict::Within;
    }
    let share = analysis as f64 / process as f64;
    if share > budget {
        CpuVerdict::Over
    } else if 2.0 * share <= 0.8 * budget {
        CpuVerdict::Roomy
    } else {
        CpuVerdict::Within
    }
}

/// CPU time the calling thread has run, in nanoseconds.
fn thread_cpu_nanos() -> u64 {
    nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::ThreadCPUTime,
    ))
}

/// CPU time every thread of this process has run, in nanoseconds.
fn process_cpu_nanos() -> u64 {
    nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::ProcessCPUTime,
    ))
}

fn nanos(t: rustix::time::Timespec) -> u64 {
    (t.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec.max(0) as u64)
}

/// Ticks of calm (queues under a tenth full, nothing dropped) before the
/// sampling level falls by one: two seconds.
const CALM_TICKS_BEFORE_LOWER: u32 = 8;

/// Whether connection `conn` is left out at sampling `level`: a hash of the
/// id (independent of the shard, which is `conn % workers`), its low
/// `level` bits non-zero.
fn sampled_out(conn: u64, level: u8) -> bool {
    let mixed = conn.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    mixed & ((1u64 << level) - 1) != 0
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
        settings: &Settings,
        stats: Arc<Stats>,
        knowledge: Arc<Mutex<Knowledge>>,
    ) -> (AnalysisQueue, AnalysisWorkers) {
        if !settings.enabled {
            return (
                AnalysisQueue {
                    shards: Arc::new(Senders(Vec::new())),
                    stats,
                    queued_bytes: Arc::default(),
                    max_bytes: 0,
                    sampling: Arc::default(),
                },
                AnalysisWorkers(Vec::new()),
            );
        }
        let workers = settings.workers.max(1);
        let floor = settings.min_sampling.min(engine::MAX_SAMPLING_LEVEL);
        stats.analysis_sampling.store(floor.into(), Relaxed);
        if floor > 0 {
            tracing::info!(
                analysed = format!("1 connection in {}", 1u32 << floor),
                "analysing a share of the connections, as --analysis-share asks"
            );
        }
        if let Some(share) = settings.cpu_share {
            tracing::info!(
                budget = format!("{:.1} %", share * 100.0),
                "the analysis may take this share of wirelint's CPU time (--analysis-cpu); past it, it samples connections"
            );
        }
        let per_shard = (settings.queue_capacity / workers).max(1);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers {
            let shard: Shard = Arc::new(ShardQueue {
                queue: ArrayQueue::new(per_shard),
                state: AtomicU8::new(AWAKE),
                thread: OnceLock::new(),
            });
            senders.push(shard.clone());
            let (stats, queued) = (stats.clone(), queued_bytes.clone());
            let engine = Engine::new(knowledge.clone(), settings.live);
            let handle = std::thread::Builder::new()
                .name(format!("{ANALYSIS_THREAD}{i}"))
                .stack_size(ANALYSIS_STACK)
                .spawn(move || worker(shard, stats, queued, engine))
                .expect("spawning an analysis thread");
            handles.push(handle);
        }
        (
            AnalysisQueue {
                shards: Arc::new(Senders(senders)),
                stats,
                queued_bytes,
                max_bytes: settings
                    .queue_bytes
                    .min(budget::queue_share(settings.caps.memory)),
                sampling: Arc::new(Sampling::new(floor, settings.cpu_share)),
            },
            AnalysisWorkers(handles),
        )
    }

    /// Sends a tick to every worker, after adjusting the sampling level.
    pub fn tick(&self) {
        self.adjust_sampling();
        for shard in self.shards.0.iter() {
            shard.tick();
        }
    }

    /// Raises the sampling level when the analysis fell behind since the
    /// last tick, lowers it after a calm spell (see [`Sampling`]).
    fn adjust_sampling(&self) {
        let s = &self.sampling;
        let dropped = self.stats.analysis_dropped.load(Relaxed);
        let new_drops = dropped.saturating_sub(s.dropped_seen.swap(dropped, Relaxed));
        let count_fill = self
            .shards
            .0
            .iter()
            .map(|q| q.queue.len() as f64 / q.queue.capacity() as f64)
            .fold(0.0, f64::max);
        let byte_fill = if self.max_bytes == 0 {
            0.0
        } else {
            self.queued_bytes.load(Relaxed) as f64 / self.max_bytes as f64
        };
        let fill = count_fill.max(byte_fill);
        let level = s.level.load(Relaxed);
        let cpu_over = self.judge_cpu(level);
        let next = if cpu_over.is_some() || new_drops > 0 || fill >= 0.5 {
            s.calm_ticks.store(0, Relaxed);
            (level + 1).min(engine::MAX_SAMPLING_LEVEL)
        } else if fill < 0.1 && level > s.floor() {
            if s.calm_ticks.fetch_add(1, Relaxed) + 1 >= CALM_TICKS_BEFORE_LOWER {
                s.calm_ticks.store(0, Relaxed);
                level - 1
            } else {
                level
            }
        } else {
            s.calm_ticks.store(0, Relaxed);
            level
        };
        if next != level {
            s.level.store(next, Relaxed);
            self.stats.analysis_sampling.store(next.into(), Relaxed);
            if let (Some(took), Some(budget)) = (cpu_over, &s.cpu) {
                tracing::warn!(
                    analysed = format!("1 connection in {}", 1u32 << next),
                    took = format!("{:.1} %", took * 100.0),
                    budget = format!("{:.1} %", budget.share * 100.0),
                    "the analysis took more of wirelint's CPU time than --analysis-cpu allows: it now analyses fewer connections (forwarding is unaffected; wirelint_analysis_sampling_level shows it)"
                );
            } else if next > level {
                tracing::warn!(
                    analysed = format!("1 connection in {}", 1u32 << next),
                    dropped = new_drops,
                    "the analysis is behind the traffic: it now analyses fewer connections (forwarding is unaffected; wirelint_analysis_sampling_level shows it)"
                );
            } else {
                tracing::info!(
                    analysed = format!("1 connection in {}", 1u32 << next),
                    "the analysis keeps up (within --analysis-cpu, when set): more connections analysed again"
                );
            }
        }
    }

    /// Once a CPU window is complete, judges it against `--analysis-cpu`:
    /// when it was over, holds the budget's floor at the level above
    /// `level` and returns the share the analysis took (the caller raises
    /// the level); after enough roomy windows, lowers the floor by one.
    fn judge_cpu(&self, level: u8) -> Option<f64> {
        let budget = self.sampling.cpu.as_ref()?;
        let mut w = budget.window.lock().unwrap_or_else(|p| p.into_inner());
        w.ticks += 1;
        if w.ticks < CPU_WINDOW_TICKS {
            return None;
        }
        let (process, analysis) = (
            process_cpu_nanos(),
            self.stats.analysis_cpu_nanos.load(Relaxed),
        );
        let (spent, analysed) = (
            process.saturating_sub(w.process),
            analysis.saturating_sub(w.analysis),
        );
        let verdict = cpu_verdict(spent, analysed, budget.share);
        *w = CpuWindow {
            process,
            analysis,
            ticks: 0,
            roomy: if verdict == CpuVerdict::Roomy {
                w.roomy + 1
            } else {
                0
            },
        };
        match verdict {
            CpuVerdict::Over => {
                let above = (level + 1).min(engine::MAX_SAMPLING_LEVEL);
                budget.floor.store(above, Relaxed);
                Some(analysed as f64 / spent as f64)
            }
            CpuVerdict::Roomy if w.roomy >= ROOMY_WINDOWS_BEFORE_LOWER => {
                w.roomy = 0;
                let floor = budget.floor.load(Relaxed);
                budget.floor.store(floor.saturating_sub(1), Relaxed);
                None
            }
            _ => None,
        }
    }

    /// The worker that analyses connection `conn`.
    fn shard_index(&self, conn: u64) -> usize {
        (conn % self.shards.0.len() as u64) as usize
    }

    fn shard(&self, conn: u64) -> &ShardQueue {
        &self.shards.0[self.shard_index(conn)]
    }
}

/// The proxy hands every forwarded message to the analysis through this.
impl Tap for AnalysisQueue {
    /// Whether analysis is on (a session skips the hand-off otherwise).
    fn enabled(&self) -> bool {
        !self.shards.0.is_empty()
    }

    /// Hands a message to its connection's worker, or drops it if that
    /// worker is behind. Never blocks.
    fn message(&self, conn: u64, direction: Direction, at: Instant, frame: Bytes) {
        if self.shards.0.is_empty() {
            return;
        }
        let sampling = self.sampling.level.load(Relaxed);
        if sampling > 0 && sampled_out(conn, sampling) {
            self.stats.analysis_shed.fetch_add(1, Relaxed);
            return;
        }
        let len = frame.len();
        if self.queued_bytes.fetch_add(len, Relaxed) + len > self.max_bytes {
            self.queued_bytes.fetch_sub(len, Relaxed);
            self.stats.analysis_dropped.fetch_add(1, Relaxed);
            return;
        }
        let index = self.shard_index(conn);
        let frame = if len <= COPY_SMALLER_THAN {
            copy_for_analysis(index, &frame)
        } else {
            frame
        };
        let event = Event::Message {
            conn,
            direction,
            at,
            frame,
            sampling,
        };
        match self.shards.0[index].push(event) {
            Ok(()) => self.stats.analysis_enqueued.fetch_add(1, Relaxed),
            Err(_) => {
                self.queued_bytes.fetch_sub(len, Relaxed);
                self.stats.analysis_dropped.fetch_add(1, Relaxed)
            }
        };
    }

    /// The connection ended. (If the queue is full this is dropped too; the
    /// engine's state is capped either way.)
    fn closed(&self, conn: u64) {
        if !self.shards.0.is_empty() {
            let _ = self.shard(conn).push(Event::Closed { conn });
        }
    }
}

/// Messages up to this size are copied out of the read buffer they came
/// in, so that buffer is free to be reused at once instead of staying
/// pinned until analysed; larger ones keep their slice of it.
const COPY_SMALLER_THAN: usize = 4096;
/// The blocks those copies are made in.
const COPY_BLOCK: usize = 64 * 1024;

thread_local! {
    /// Per worker (by shard index), the rest of this thread's current block
    /// for copies of the messages that worker will analyse.
    static COPIES: std::cell::RefCell<Vec<bytes::BytesMut>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A copy of a small message for worker `shard`, taken from the calling
/// (forwarding) thread's current block for that worker: one allocation per
/// 64 KiB of messages instead of one per message. Freeing on the analysis
/// thread memory a forwarding thread allocated is what the allocator does
/// worst (the allocating arena's lock, taken from the other side, per
/// message). A block is freed when its last copy has been analysed; as one
/// worker takes its messages in order, what its queue pins is its queued
/// bytes, what is left unused at the end of each block, and at most two
/// blocks more per forwarding thread (the one partly analysed, the one
/// being filled).
fn copy_for_analysis(shard: usize, message: &[u8]) -> Bytes {
    COPIES.with_borrow_mut(|blocks| {
        if blocks.len() <= shard {
            blocks.resize_with(shard + 1, bytes::BytesMut::new);
        }
        let block = &mut blocks[shard];
        if block.capacity() < message.len() {
            *block = bytes::BytesMut::with_capacity(COPY_BLOCK);
        }
        block.extend_from_slice(message);
        block.split().freeze()
    })
}

/// Messages a worker has taken off its queue and not yet counted in the
/// shared counters: added in bulk (every [`COUNT_EVERY`] messages, past
/// [`COUNT_BYTES`], and whenever its queue runs empty), so the cache lines
/// the forwarding threads write per message are not written per message
/// from another core too.
#[derive(Default)]
struct Taken {
    messages: u64,
    bytes: usize,
}

const COUNT_EVERY: u64 = 64;
const COUNT_BYTES: usize = 1 << 20;

impl Taken {
    fn add(&mut self, bytes: usize, stats: &Stats, queued_bytes: &AtomicUsize) {
        self.messages += 1;
        self.bytes += bytes;
        if self.messages >= COUNT_EVERY || self.bytes >= COUNT_BYTES {
            self.count(stats, queued_bytes);
        }
    }

    fn count(&mut self, stats: &Stats, queued_bytes: &AtomicUsize) {
        if self.messages > 0 {
            queued_bytes.fetch_sub(self.bytes, Relaxed);
            stats.analysis_processed.fetch_add(self.messages, Relaxed);
            *self = Taken::default();
        }
    }
}

fn worker(shard: Shard, stats: Arc<Stats>, queued_bytes: Arc<AtomicUsize>, mut engine: Engine) {
    let _ = shard.thread.set(std::thread::current());
    // Time slept since the last message, the next sleep, and the messages
    // taken since the last one.
    let mut quiet = Duration::ZERO;
    let mut poll = IDLE_POLL;
    let mut batch = 0u32;
    let mut ticks_since_message = 0u32;
    let mut taken = Taken::default();
    let mut decoder = Decoder::default();
    let mut cpu_seen = thread_cpu_nanos();
    loop {
        let Some(event) = shard.queue.pop() else {
            // The decoding counted before the messages taken: whoever sees
            // them all processed sees them counted.
            decoder.flush(&stats);
            taken.count(&stats, &queued_bytes);
            // Once the count is 1 nothing can be pushed any more.
            if Arc::strong_count(&shard) == 1 && shard.queue.is_empty() {
                break;
            }
            if quiet < PARK_AFTER {
                poll = if batch >= FEW_MESSAGES {
                    IDLE_POLL
                } else {
                    (poll * 2).min(MAX_IDLE_POLL)
                };
                batch = 0;
                std::thread::sleep(poll);
                quiet += poll;
                continue;
            }
            // Park: say so, then look once more (a push between the last
            // look and the flag would otherwise wait for the backstop).
            let deep = ticks_since_message >= TICKS_BEFORE_DEEP_PARK;
            shard
                .state
                .store(if deep { DEEP } else { PARKED_STATE }, SeqCst);
            fence(SeqCst);
            if shard.queue.is_empty() && Arc::strong_count(&shard) > 1 {
                std::thread::park_timeout(if deep { DEEP_PARKED } else { PARKED });
            }
            shard.state.store(AWAKE, SeqCst);
            continue;
        };
        // Ticks keep an idle worker parked between them.
        let tick = matches!(event, Event::Tick);
        if tick {
            ticks_since_message = ticks_since_message.saturating_add(1);
        } else {
            quiet = Duration::ZERO;
            batch += 1;
            ticks_since_message = 0;
        }
        if let Event::Message { frame, .. } = &event {
            taken.add(frame.len(), &stats, &queued_bytes);
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match event {
            Event::Message {
                conn,
                direction,
                at,
                frame,
                sampling,
            } => {
                if let Some(decoded) = decoder.decode(conn, direction, frame, &stats) {
                    engine.set_sampling(sampling);
                    engine.decoded(conn, at, decoded);
                }
            }
            Event::Closed { conn } => engine.closed(conn),
            Event::Tick => engine.tick(Instant::now()),
        }));
        if tick {
            // This thread's CPU time, for `--analysis-cpu`.
            let cpu = thread_cpu_nanos();
            stats
                .analysis_cpu_nanos
                .fetch_add(cpu.saturating_sub(cpu_seen), Relaxed);
            cpu_seen = cpu;
        }
        if outcome.is_err() {
            stats
                .analysis
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .panics += 1;
            tracing::error!(
                "analysis panicked on a message; it was skipped (traffic is unaffected)"
            );
        }
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.flush()));
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

/// Requests nested deeper than this are not analysed (counted as
/// `too_deep`): it is the server's own limit (`bsonValidate` refuses BSON
/// nested past 200 levels), so the server refuses such a message too.
/// Replies are not walked for it: a server never sends BSON nested past
/// its limit, and checking a whole batch cost more than all the rest of
/// its analysis (a 10-document batch: 3,900 instructions of 8,800). Every
/// walk of the analysis is bounded by its own depth anyway (shapes 12
/// levels, document state `Caps::depth`, filters and pipelines theirs);
/// the one conversion that recurses without a bound (an `_id` shown with
/// `--show-values`) checks its value against this limit first.
pub const MAX_NESTING: usize = 200;

/// What decoding one message found, gathered without holding any lock and
/// recorded into the counters at once afterwards.
#[derive(Default)]
struct Tally {
    /// The message's opcode, then the inner one of an OP_COMPRESSED.
    opcodes: [Option<wire::OpCode>; 2],
    compressor: Option<wire::Compressor>,
    checksum_verified: bool,
    /// A request: its command name is counted (a reply has none) and its
    /// documents' depth checked (see [`MAX_NESTING`]).
    request: bool,
    /// Where the command name lies in the returned frame (requests).
    command: Option<std::ops::Range<usize>>,
}

/// Decodes and counts one message; returns it uncompressed for the engine,
/// or `None` (counted and logged) when it cannot be decoded or (a request)
/// nests deeper than [`MAX_NESTING`]. Counted at once (a worker counts
/// through its [`Decoder`], in bulk).
pub fn decode(conn: u64, direction: Direction, frame: &Bytes, stats: &Stats) -> Option<Decoded> {
    let mut decoder = Decoder::default();
    let decoded = decoder.decode(conn, direction, frame.clone(), stats);
    decoder.flush(stats);
    decoded
}

/// Command names a [`Decoder`] counts by itself before it adds them up.
const DECODER_NAMES: usize = 16;

/// A worker's decoding: what it counts (messages by opcode, compressors,
/// verified checksums, command names) is kept here, without a lock, and
/// added to the shared counters (`Stats::analysis`) every [`COUNT_EVERY`]
/// messages and whenever the worker's queue runs empty, so a message costs
/// no lock and no map lookup. A decoding error is counted at once.
#[derive(Default)]
pub struct Decoder {
    /// By direction, then opcode (`OpCode as usize`, the order of
    /// `OpCode::ALL`).
    messages: [[u64; wire::OpCode::ALL.len()]; 2],
    compressed: [u64; wire::Compressor::ALL.len()],
    checksums_verified: u64,
    /// Command names (UTF-8, as sent) and their counts.
    commands: Vec<(String, u64)>,
    /// Messages decoded since the counts were last added.
    pending: u64,
}

impl Decoder {
    /// [`decode`], counted here. The frame is taken, not cloned: its
    /// reference count lives in the block a forwarding thread is filling,
    /// a cache line each count taken or given back here would pull from
    /// the other core.
    pub fn decode(
        &mut self,
        conn: u64,
        direction: Direction,
        frame: Bytes,
        stats: &Stats,
    ) -> Option<Decoded> {
        let mut tally = Tally {
            request: direction == Direction::Request,
            ..Tally::default()
        };
        let result = decode_frame(frame, &mut tally, 0);
        for opcode in tally.opcodes.into_iter().flatten() {
            self.messages[direction.index()][opcode as usize] += 1;
        }
        if let Some(c) = tally.compressor {
            self.compressed[c as usize] += 1;
        }
        self.checksums_verified += u64::from(tally.checksum_verified);
        self.pending += 1;
        let error = match result {
            Ok(decoded) => {
                if let (Some(range), Decoded::Request(parsed)) = (tally.command, &decoded) {
                    self.count_command(&parsed.borrow_owner()[range], stats);
                }
                if self.pending >= COUNT_EVERY {
                    self.flush(stats);
                }
                return Some(decoded);
            }
            Err(error) => error,
        };
        self.flush(stats);
        let mut counters = stats.analysis.lock().unwrap_or_else(|p| p.into_inner());
        *counters.decode_errors.entry(error.kind()).or_default() += 1;
        let log = counters.log_allowed(error.kind());
        drop(counters);
        if log {
            let side = match direction {
                Direction::Request => "request",
                Direction::Reply => "reply",
            };
            tracing::warn!(
                conn,
                "analysis could not decode a {side}: {error} (forwarded unchanged; at most one such line a second per kind of error)"
            );
        }
        None
    }

    fn count_command(&mut self, name: &[u8], stats: &Stats) {
        if let Some((_, n)) = self.commands.iter_mut().find(|(c, _)| c.as_bytes() == name) {
            *n += 1;
            return;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        if self.commands.len() >= DECODER_NAMES {
            self.flush(stats);
        }
        self.commands.push((name.to_string(), 1));
    }

    /// Adds what was counted here to the shared counters.
    pub fn flush(&mut self, stats: &Stats) {
        if self.pending == 0 {
            return;
        }
        let mut counters = stats.analysis.lock().unwrap_or_else(|p| p.into_inner());
        for (direction, by_opcode) in [Direction::Request, Direction::Reply]
            .into_iter()
            .zip(&self.messages)
        {
            for (opcode, n) in wire::OpCode::ALL.into_iter().zip(by_opcode) {
                if *n > 0 {
                    *counters.messages.entry((direction, opcode)).or_default() += n;
                }
            }
        }
        for (c, n) in wire::Compressor::ALL.into_iter().zip(&self.compressed) {
            if *n > 0 {
                *counters.compressed.entry(c).or_default() += n;
            }
        }
        counters.checksums_verified += self.checksums_verified;
        for (name, n) in self.commands.drain(..) {
            counters.count_command(&name, n);
        }
        drop(counters);
        *self = Decoder {
            commands: std::mem::take(&mut self.commands),
            ..Decoder::default()
        };
    }
}

/// A compressed message is counted as OP_COMPRESSED and then again as the
/// message it carries (the parser refuses compressed-in-compressed, so
/// `level` is 0 or 1). A request is parsed once, checked in the same pass,
/// and handed to the engine parsed.
fn decode_frame(frame: Bytes, tally: &mut Tally, level: usize) -> Result<Decoded, wire::WireError> {
    let opcode = wire::Header::parse(&frame).and_then(|h| h.opcode());
    if opcode == Some(wire::OpCode::Compressed) {
        if let Message::Compressed(c) = Message::parse(&frame)? {
            tally.opcodes[level.min(1)] = Some(wire::OpCode::Compressed);
            tally.compressor = Some(c.compressor);
            let inner = Bytes::from(c.decompress()?);
            return decode_frame(inner, tally, level + 1);
        }
    }
    if tally.request {
        let check =
            |message: &Message<'_>, bytes: &[u8]| check_message(message, bytes, tally, level);
        return ParsedRequest::checked(frame, check).map(Decoded::Request);
    }
    let message = Message::parse(&frame)?;
    check_message(&message, &frame, tally, level)?;
    // The reply's one walk: its top level checked and its fields found.
    let index = command::ReplyIndex::of(&message, &frame, true)?;
    Ok(Decoded::Reply(frame, index))
}

/// Counts one uncompressed message's opcode and checks it: its checksum,
/// and a request's documents' depth (a reply's top level is checked by
/// `ReplyIndex::of`, not its depth: see [`MAX_NESTING`]); finds where a
/// request's command name lies in `frame`.
fn check_message(
    message: &Message<'_>,
    frame: &[u8],
    tally: &mut Tally,
    level: usize,
) -> Result<(), wire::WireError> {
    tally.opcodes[level.min(1)] = Some(message.opcode());
    match message {
        Message::Msg(msg) => {
            if msg.checksum.is_some() {
                wire::op_msg::verify_checksum(frame)?;
                tally.checksum_verified = true;
            }
            // (A reply's top level is checked where its fields are found:
            // `ReplyIndex::of`.)
            // (A request body's top level is checked by the walk that
            // indexes its command: `Command::parse_checked`.)
            if tally.request {
                wire::bson_walk::check_nesting(msg.body, MAX_NESTING)?;
                for sequence in msg.sequences() {
                    for doc in sequence.documents() {
                        wire::bson_walk::check_nesting(doc?, MAX_NESTING)?;
                    }
                }
            }
        }
        Message::Query(q) => {
            wire::bson_walk::check_nesting(q.command(), MAX_NESTING)?;
        }
        // OP_REPLY: a reply. (An OP_COMPRESSED was inflated before.)
        Message::Reply(_) | Message::Compressed(_) | Message::Other(..) => {}
    }
    if tally.request {
        // A slice of `frame`: its place, not a second parse. Its bytes:
        // the decoder compares them with the names it has counted and
        // checks a name as UTF-8 only when it is new (see `count_command`).
        tally.command = wire::command_name_bytes(message).map(|name| {
            let start = name.as_ptr() as usize - frame.as_ptr() as usize;
            start..start + name.len()
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_messages_are_copied_into_one_block_per_worker() {
        // On a thread of its own: the blocks are per thread.
        std::thread::spawn(|| {
            let read_buffer = Bytes::from(vec![7u8; 3000]);
            let a = copy_for_analysis(0, &read_buffer[..1000]);
            let b = copy_for_analysis(0, &read_buffer[1000..3000]);
            let other = copy_for_analysis(1, &read_buffer[..1000]);
            assert_eq!(
                (&a[..], &b[..]),
                (&read_buffer[..1000], &read_buffer[1000..])
            );
            assert_eq!(&other[..], &read_buffer[..1000]);
            // Copies, not slices of the read buffer...
            let within = |c: &Bytes| read_buffer.as_ptr_range().contains(&c.as_ptr());
            assert!(!within(&a) && !within(&b) && !within(&other));
            // ...one after the other in the same block for one worker...
            assert_eq!(b.as_ptr(), a.as_ptr().wrapping_add(a.len()));
            // ...and in another block for another worker.
            let block_of_a = a.as_ptr()..a.as_ptr().wrapping_add(COPY_BLOCK);
            assert!(!block_of_a.contains(&other.as_ptr()));
            // A copy that does not fit the rest of the block starts a new one.
            let mut copies = vec![a, b];
            let mut new_blocks = 0;
            for _ in 0..100 {
                let next = copy_for_analysis(0, &read_buffer[..1000]);
                let last = copies.last().unwrap();
                if next.as_ptr() != last.as_ptr().wrapping_add(last.len()) {
                    new_blocks += 1;
                }
                copies.push(next);
            }
            // 103,000 bytes in all: two blocks of 64 KiB.
            assert_eq!(new_blocks, 1);
        })
        .join()
        .unwrap();
    }

    fn knowledge() -> Arc<Mutex<Knowledge>> {
        Arc::new(Mutex::new(Knowledge::new(
            Vec::new(),
            Default::default(),
            false,
            Default::default(),
        )))
    }

    /// A worker's decoder adds up, in bulk, exactly what decoding each
    /// message at once counts: opcodes by direction, a compressor, command
    /// names (more distinct ones than it keeps), and an error at once.
    #[test]
    fn a_decoder_counts_in_bulk_what_decoding_at_once_counts() {
        use crate::wire::{compressed, op_msg};
        let mut frames = Vec::new();
        for i in 0..100 {
            let body = bson::RawDocumentBuf::try_from(
                &bson::doc! {format!("cmd{}", i % 40): 1, "$db": "d"},
            )
            .unwrap();
            frames.push((
                Direction::Request,
                op_msg::encode(i, 0, 0, body.as_bytes(), &[]),
            ));
            let reply = bson::rawdoc! {"ok": 1.0};
            frames.push((
                Direction::Reply,
                op_msg::encode(i + 1000, i, 0, reply.as_bytes(), &[]),
            ));
        }
        let find = op_msg::encode(
            7,
            0,
            0,
            bson::rawdoc! {"find": "c", "$db": "d"}.as_bytes(),
            &[],
        );
        let zipped = compressed::compress(&find, wire::Compressor::Zlib).unwrap();
        frames.push((Direction::Request, zipped));
        frames.push((
            Direction::Request,
            vec![
                21, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xdd, 7, 0, 0, 0, 0, 0, 0, 0,
            ],
        ));
        let (at_once, bulk) = (Stats::default(), Stats::default());
        let mut decoder = Decoder::default();
        for (direction, frame) in &frames {
            let frame = Bytes::from(frame.clone());
            let bytes = |d: Option<Decoded>| match d? {
                Decoded::Request(parsed) => Some(parsed.borrow_owner().clone()),
                Decoded::Reply(frame, _) => Some(frame),
            };
            let a = bytes(decode(1, *direction, &frame, &at_once));
            let b = bytes(decoder.decode(1, *direction, frame.clone(), &bulk));
            assert_eq!(a, b);
        }
        // Errors are counted at once; the rest once added up.
        assert_eq!(
            bulk.snapshot().decode_errors,
            at_once.snapshot().decode_errors
        );
        assert_eq!(bulk.snapshot().decode_errors.values().sum::<u64>(), 1);
        decoder.flush(&bulk);
        let (a, b) = (at_once.snapshot(), bulk.snapshot());
        assert_eq!(b.messages, a.messages);
        assert_eq!(b.commands, a.commands);
        assert_eq!(b.compressed, a.compressed);
        assert_eq!(a.commands.len(), 41, "{:?}", a.commands);
        assert_eq!(a.commands["cmd0"], 3);
        assert_eq!(a.compressed["zlib"], 1);
        assert_eq!(a.messages["reply OP_MSG"], 100);
    }

    /// A request body's top level is checked by the walk that indexes its
    /// command: every element, past the fields a command keeps too; a
    /// broken one is an `invalid_bson` decode error and nothing is handed
    /// to the engine. A whole body decodes to the command a lenient parse
    /// reads.
    #[test]
    fn a_request_body_is_checked_by_the_walk_that_indexes_its_command() {
        use crate::analysis::command::Command;
        let stats = Stats::default();
        let decoded_command = |body: &bson::RawDocumentBuf| {
            let frame = Bytes::from(wire::op_msg::encode(1, 0, 0, body.as_bytes(), &[]));
            match decode(1, Direction::Request, &frame, &stats) {
                Some(Decoded::Request(parsed)) => {
                    let msg = Message::parse(parsed.borrow_owner()).unwrap();
                    let lenient = Command::parse(&msg).map(|c| format!("{c:?}"));
                    let checked = parsed.borrow_dependent().as_ref().map(|c| format!("{c:?}"));
                    assert_eq!(checked, lenient);
                    checked.is_some()
                }
                _ => false,
            }
        };
        let good = bson::rawdoc! {"find": "c", "filter": {"a": 1}, "limit": 1, "$db": "d"};
        assert!(decoded_command(&good));
        assert!(stats.snapshot().decode_errors.is_empty());

        // 70 fields (a command keeps 64), the last one's string length
        // running past the document.
        let mut wide = bson::doc! {"find": "c"};
        for i in 0..68 {
            wide.insert(format!("f{i}"), i);
        }
        wide.insert("$db", "d");
        let mut bytes = bson::RawDocumentBuf::try_from(&wide).unwrap().into_bytes();
        let len_at = bytes.len() - 1 - 2 - 4;
        assert_eq!(
            &bytes[len_at..len_at + 4],
            &2i32.to_le_bytes(),
            "$db's length"
        );
        bytes[len_at..len_at + 4].copy_from_slice(&200i32.to_le_bytes());
        let broken = bson::RawDocumentBuf::from_bytes(bytes).unwrap();
        assert!(!decoded_command(&broken));
        assert_eq!(stats.snapshot().decode_errors.get("invalid_bson"), Some(&1));
    }

    /// A worker that falls behind makes the queue drop (and count) what
    /// exceeds its byte budget; nothing waits and memory stays bounded.
    #[test]
    fn a_flood_of_large_messages_is_dropped_beyond_the_byte_budget() {
        let stats = Arc::new(Stats::default());
        let settings = Settings {
            queue_bytes: 1 << 20,
            ..Settings::default()
        };
        let knowledge = knowledge();
        let (queue, workers) = AnalysisQueue::start(&settings, stats.clone(), knowledge);
        let big = Bytes::from(vec![0u8; 512 << 10]);
        {
            // The worker stalls on this lock, as a slow analysis would.
            let _stalled = stats.analysis.lock().unwrap();
            for _ in 0..10 {
                queue.message(1, Direction::Request, Instant::now(), big.clone());
            }
            let (enqueued, dropped) = (
                stats.analysis_enqueued.load(Relaxed),
                stats.analysis_dropped.load(Relaxed),
            );
            assert_eq!(enqueued + dropped, 10);
            // One taken by the stalled worker, two waiting (1 MiB), the rest dropped.
            assert!(dropped >= 7, "dropped {dropped}");
            assert!(queue.queued_bytes.load(Relaxed) <= 1 << 20);
        }
        drop(queue);
        workers.join();
        assert_eq!(
            stats.analysis_processed.load(Relaxed),
            stats.analysis_enqueued.load(Relaxed)
        );
    }

    /// A share the user set (`--analysis-share 1/2`): from the start one
    /// connection in two is analysed, whole, and calm never lowers the
    /// level below it; the shed messages are counted.
    #[test]
    fn a_share_set_by_the_user_is_kept_while_the_analysis_keeps_up() {
        let stats = Arc::new(Stats::default());
        let settings = Settings {
            min_sampling: 1,
            ..Settings::default()
        };
        let (queue, workers) = AnalysisQueue::start(&settings, stats.clone(), knowledge());
        assert_eq!(stats.analysis_sampling.load(Relaxed), 1);
        let ping = Bytes::from_static(&[0u8; 16]);
        let left_out = (0..64).filter(|c| sampled_out(*c, 1)).count() as u64;
        assert!((16..=48).contains(&left_out), "about half: {left_out}");
        for conn in 0..64 {
            queue.message(conn, Direction::Request, Instant::now(), ping.clone());
            queue.message(conn, Direction::Reply, Instant::now(), ping.clone());
        }
        assert_eq!(stats.analysis_shed.load(Relaxed), 2 * left_out);
        assert_eq!(stats.analysis_enqueued.load(Relaxed), 2 * (64 - left_out));
        for _ in 0..2 * CALM_TICKS_BEFORE_LOWER {
            queue.tick();
        }
        assert_eq!(
            stats.analysis_sampling.load(Relaxed),
            1,
            "calm keeps the share"
        );
        drop(queue);
        workers.join();
    }

    /// A window is judged only when wirelint worked (10 ms of CPU in it);
    /// over the budget it asks for a level more, and for one less only
    /// when twice the analysis would stay under four fifths of it.
    #[test]
    fn a_cpu_window_is_over_roomy_or_within_the_budget() {
        let ms = |n: u64| n * 1_000_000;
        assert_eq!(cpu_verdict(ms(100), ms(11), 0.10), CpuVerdict::Over);
        assert_eq!(cpu_verdict(ms(100), ms(10), 0.10), CpuVerdict::Within);
        assert_eq!(cpu_verdict(ms(100), ms(5), 0.10), CpuVerdict::Within);
        assert_eq!(cpu_verdict(ms(100), ms(4), 0.10), CpuVerdict::Roomy);
        assert_eq!(cpu_verdict(ms(100), 0, 0.10), CpuVerdict::Roomy);
        // Idle: nothing to judge, whatever the share.
        assert_eq!(cpu_verdict(ms(9), ms(9), 0.10), CpuVerdict::Within);
        assert_eq!(cpu_verdict(ms(9), 0, 0.10), CpuVerdict::Within);
    }

    /// Runs this thread for `ms` of CPU time, so that a CPU window has
    /// something to judge.
    fn spin_cpu(ms: u64) {
        let until = thread_cpu_nanos() + ms * 1_000_000;
        let mut x = 0u64;
        while thread_cpu_nanos() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    /// `--analysis-cpu`: a second in which the analysis threads took more
    /// of wirelint's CPU time than the budget raises the level at once and
    /// whole connections are shed; two seconds with room for twice the
    /// analysis let the budget go, and the calm path then analyses every
    /// connection again. Workers add their own thread's CPU time at ticks.
    #[test]
    fn over_its_cpu_budget_the_analysis_sheds_connections_until_there_is_room() {
        let stats = Arc::new(Stats::default());
        let settings = Settings {
            cpu_share: Some(0.10),
            ..Settings::default()
        };
        let (queue, workers) = AnalysisQueue::start(&settings, stats.clone(), knowledge());
        // The worker reports its CPU time at ticks.
        let deadline = Instant::now() + Duration::from_secs(5);
        while stats.analysis_cpu_nanos.load(Relaxed) == 0 && Instant::now() < deadline {
            queue.shards.0[0].tick();
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(stats.analysis_cpu_nanos.load(Relaxed) > 0);
        let window = |analysis_ns: u64| {
            for i in 0..CPU_WINDOW_TICKS {
                if i == CPU_WINDOW_TICKS - 1 {
                    spin_cpu(15);
                    stats.analysis_cpu_nanos.fetch_add(analysis_ns, Relaxed);
                }
                queue.tick();
            }
        };
        // Over: ten seconds of analysis in a window of milliseconds.
        window(10_000_000_000);
        assert_eq!(stats.analysis_sampling.load(Relaxed), 1);
        let ping = Bytes::from_static(&[0u8; 16]);
        let left_out = (0..64).filter(|c| sampled_out(*c, 1)).count() as u64;
        for conn in 0..64 {
            queue.message(conn, Direction::Request, Instant::now(), ping.clone());
        }
        assert_eq!(stats.analysis_shed.load(Relaxed), left_out);
        // Roomy, but one window is not enough, and calm alone does not
        // take the level below the budget's.
        window(0);
        for _ in 0..CALM_TICKS_BEFORE_LOWER {
            queue.tick();
        }
        assert_eq!(stats.analysis_sampling.load(Relaxed), 1);
        // A second roomy window in a row lets the budget go; calm follows.
        window(0);
        window(0);
        for _ in 0..CALM_TICKS_BEFORE_LOWER {
            queue.tick();
        }
        assert_eq!(stats.analysis_sampling.load(Relaxed), 0);
        drop(queue);
        workers.join();
    }

    /// Behind the traffic, the analysis sheds whole connections: a tick
    /// after drops raises the level, then each connection is either kept
    /// (every message) or left out (every message, counted as shed); after
    /// a calm spell the level falls back to all connections.
    #[test]
    fn behind_the_traffic_whole_connections_are_sampled_out() {
        let stats = Arc::new(Stats::default());
        let settings = Settings {
            queue_capacity: 32,
            workers: 1,
            ..Settings::default()
        };
        let knowledge = knowledge();
        let (queue, workers) = AnalysisQueue::start(&settings, stats.clone(), knowledge);
        let ping = Bytes::from_static(&[0u8; 16]);
        {
            let _stalled = stats.analysis.lock().unwrap();
            for conn in 0..64 {
                queue.message(conn, Direction::Request, Instant::now(), ping.clone());
            }
            assert!(stats.analysis_dropped.load(Relaxed) > 0);
            queue.tick();
            assert_eq!(stats.analysis_sampling.load(Relaxed), 1);
            let left_out: Vec<u64> = (0..64).filter(|c| sampled_out(*c, 1)).collect();
            assert!(
                (16..=48).contains(&left_out.len()),
                "about half: {left_out:?}"
            );
            let (shed, dropped) = (
                stats.analysis_shed.load(Relaxed),
                stats.analysis_dropped.load(Relaxed),
            );
            for conn in 0..64 {
                for direction in [Direction::Request, Direction::Reply, Direction::Request] {
                    queue.message(conn, direction, Instant::now(), ping.clone());
                }
            }
            assert_eq!(
                stats.analysis_shed.load(Relaxed) - shed,
                3 * left_out.len() as u64,
                "every message of a left-out connection, and only those"
            );
            // Still behind: the level keeps rising, to its cap.
            assert!(stats.analysis_dropped.load(Relaxed) > dropped);
            for _ in 0..10 {
                queue.message(0, Direction::Request, Instant::now(), ping.clone());
                stats.analysis_dropped.fetch_add(1, Relaxed);
                queue.tick();
            }
            assert_eq!(
                stats.analysis_sampling.load(Relaxed),
                u64::from(engine::MAX_SAMPLING_LEVEL)
            );
        }
        // Caught up: one level down per two calm seconds of ticks.
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while !queue.shards.0[0].queue.is_empty() && Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        for _ in 0..CALM_TICKS_BEFORE_LOWER {
            // Ticks come every 250 ms; a few ms let the worker take each.
            std::thread::sleep(std::time::Duration::from_millis(20));
            queue.tick();
        }
        assert_eq!(
            stats.analysis_sampling.load(Relaxed),
            u64::from(engine::MAX_SAMPLING_LEVEL) - 1
        );
        drop(queue);
        workers.join();
    }
}
