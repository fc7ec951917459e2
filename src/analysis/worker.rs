//! The analysis workers: plain threads, one per queue shard, each taking
//! its shard's events in order and handing them to its own engine.
//!
//! A worker drains its queue and, when it is empty, sleeps and looks
//! again every [`IDLE_POLL`] (up to [`MAX_IDLE_POLL`] while each look
//! finds only a few messages) instead of being woken per message: waking
//! a thread would cost the forwarding side a system call per message, the
//! analysis can afford to be a fraction of a second late, and each wake-up
//! refills the caches the forwarding threads took over, so larger batches
//! cost less per message. After [`PARK_AFTER`] without traffic it parks
//! until the next event (see `shard` for the handshake): one system call
//! per pause, none per message. Once ticks have nothing left to do it
//! parks deeply and ticks stop waking it, so an idle proxy sleeps.
//!
//! A panic while analysing one message is caught and counted; the worker
//! goes on with the next, and the forwarding path never sees it.

use super::decode::{Decoder, COUNT_EVERY};
use super::engine::Engine;
use super::shard::{Event, Shard, WORKER_AWAKE, WORKER_DEEP_PARKED, WORKER_PARKED};
use crate::stats::thread_cpu_nanos;
use crate::stats::Stats;
use std::sync::atomic::{fence, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Analysis threads get a generous stack of their own: messages reach the
/// walks at most [`MAX_NESTING`](super::decode::MAX_NESTING) deep, and the deepest
/// walk (the bson crate's conversion of an `_id` for `--show-values`)
/// needs far less than this at that depth. Only the pages touched are
/// ever resident.
pub const ANALYSIS_STACK: usize = 16 << 20;

/// The analysis threads' names start with this.
pub(super) const ANALYSIS_THREAD_PREFIX: &str = "wirelint-analysis-";

/// How long a worker with an empty queue sleeps before looking again while
/// traffic flows (a batch of ~50 ms of messages per wake-up). A wake-up
/// that found fewer than [`FEW_MESSAGES`] doubles the sleep, up to
/// [`MAX_IDLE_POLL`]; one that found more starts again from here. Each
/// wake-up finds the engine's tables evicted from the caches by the other
/// threads on shared cores, and costs more than the messages it finds
/// when they are few: on the corpus applications' test traffic, sleeping
/// 50–200 ms instead of 5–20 halves the analysis's CPU in place (its share
/// of wirelint's, 17–34 % to 9–16 %). The queue holds what arrives
/// meanwhile: 50 ms of 200,000 messages a second, more than two cores
/// forward, is 10,000 of its 16,384.
const IDLE_POLL: Duration = Duration::from_millis(50);
const MAX_IDLE_POLL: Duration = Duration::from_millis(200);
const FEW_MESSAGES: u32 = 16;
/// Time without a message after which a worker parks until woken.
const PARK_AFTER: Duration = Duration::from_millis(500);
/// The longest a parked worker sleeps without being woken: a backstop,
/// not a schedule.
const PARK_TIMEOUT: Duration = Duration::from_secs(1);
/// The same, once parked deeply (ticks no longer wake it).
const DEEP_PARK_TIMEOUT: Duration = Duration::from_secs(60);

/// Ticks after the last message after which a parked worker has nothing
/// left for ticks to do (invocations end 500 ms after their last message):
/// it parks deeply and only a message or a close wakes it.
const TICKS_BEFORE_DEEP_PARK: u32 = 4;

/// The worker threads; joined at shutdown so final counts are complete.
pub struct AnalysisWorkers(pub(super) Vec<JoinHandle<()>>);

impl AnalysisWorkers {
    /// Waits for the workers to drain their queues. They stop once every
    /// `AnalysisQueue` clone is dropped.
    pub fn join(self) {
        for handle in self.0 {
            let _ = handle.join();
        }
    }
}

/// Starts worker `index` on `shard`, analysing with `engine`.
pub(super) fn spawn(
    index: usize,
    shard: Shard,
    stats: Arc<Stats>,
    queued_bytes: Arc<AtomicUsize>,
    engine: Engine,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("{ANALYSIS_THREAD_PREFIX}{index}"))
        .stack_size(ANALYSIS_STACK)
        .spawn(move || run(shard, stats, queued_bytes, engine))
        .expect("spawning an analysis thread")
}

/// Messages a worker has taken off its queue and not yet counted in the
/// shared counters: added in bulk (every [`COUNT_EVERY`] messages, past
/// [`COUNT_BYTES`], and whenever its queue runs empty), so the cache lines
/// the forwarding threads write per message are not written per message
/// from another core too.
#[derive(Default)]
struct UncountedMessages {
    messages: u64,
    bytes: usize,
}

/// Bytes taken off the queue after which they are counted (and given back
/// to the queue's byte budget) whatever the number of messages.
const COUNT_BYTES: usize = 1 << 20;

impl UncountedMessages {
    fn add(&mut self, bytes: usize, stats: &Stats, queued_bytes: &AtomicUsize) {
        self.messages += 1;
        self.bytes += bytes;
        if self.messages >= COUNT_EVERY || self.bytes >= COUNT_BYTES {
            self.flush(stats, queued_bytes);
        }
    }

    /// Counts them as processed and gives their bytes back to the queue.
    fn flush(&mut self, stats: &Stats, queued_bytes: &AtomicUsize) {
        if self.messages > 0 {
            queued_bytes.fetch_sub(self.bytes, Relaxed);
            stats.analysis_processed.fetch_add(self.messages, Relaxed);
            *self = UncountedMessages::default();
        }
    }
}

/// How long a worker has gone without messages, and how it waits for the
/// next.
struct Idle {
    /// Time slept since the last message.
    quiet: Duration,
    /// The next sleep.
    poll: Duration,
    /// Messages taken since the last sleep.
    batch: u32,
    ticks_since_message: u32,
}

impl Idle {
    fn new() -> Idle {
        Idle {
            quiet: Duration::ZERO,
            poll: IDLE_POLL,
            batch: 0,
            ticks_since_message: 0,
        }
    }

    /// An event was taken. Ticks keep an idle worker parked between them.
    fn saw(&mut self, tick: bool) {
        if tick {
            self.ticks_since_message = self.ticks_since_message.saturating_add(1);
        } else {
            self.quiet = Duration::ZERO;
            self.batch += 1;
            self.ticks_since_message = 0;
        }
    }

    /// The queue is empty: sleeps for the next poll, or parks once quiet
    /// long enough.
    fn wait(&mut self, shard: &Shard) {
        if self.quiet < PARK_AFTER {
            self.poll = if self.batch >= FEW_MESSAGES {
                IDLE_POLL
            } else {
                (self.poll * 2).min(MAX_IDLE_POLL)
            };
            self.batch = 0;
            std::thread::sleep(self.poll);
            self.quiet += self.poll;
            return;
        }
        // Park: say so, then look once more (a push between the last
        // look and the flag would otherwise wait for the backstop).
        let deep = self.ticks_since_message >= TICKS_BEFORE_DEEP_PARK;
        let state = if deep {
            WORKER_DEEP_PARKED
        } else {
            WORKER_PARKED
        };
        shard.worker_state.store(state, SeqCst);
        fence(SeqCst);
        if shard.queue.is_empty() && Arc::strong_count(shard) > 1 {
            std::thread::park_timeout(if deep {
                DEEP_PARK_TIMEOUT
            } else {
                PARK_TIMEOUT
            });
        }
        shard.worker_state.store(WORKER_AWAKE, SeqCst);
    }
}

/// A worker's life: takes its shard's events until every `AnalysisQueue`
/// is gone and the queue is empty, then flushes the engine.
fn run(shard: Shard, stats: Arc<Stats>, queued_bytes: Arc<AtomicUsize>, mut engine: Engine) {
    let _ = shard.thread.set(std::thread::current());
    let mut idle = Idle::new();
    let mut uncounted = UncountedMessages::default();
    let mut decoder = Decoder::default();
    let mut cpu_seen = thread_cpu_nanos();
    loop {
        let Some(event) = shard.queue.pop() else {
            // The decoding counted before the messages taken: whoever sees
            // them all processed sees them counted.
            decoder.flush(&stats);
            uncounted.flush(&stats, &queued_bytes);
            // Once the count is 1 nothing can be pushed any more.
            if Arc::strong_count(&shard) == 1 && shard.queue.is_empty() {
                break;
            }
            idle.wait(&shard);
            continue;
        };
        let tick = matches!(event, Event::Tick(_));
        idle.saw(tick);
        if let Event::Message { frame, .. } = &event {
            uncounted.add(frame.len(), &stats, &queued_bytes);
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match event {
            Event::Message {
                conn,
                direction,
                at,
                frame,
                keep,
            } => {
                if let Some(decoded) = decoder.decode(conn, direction, frame, &stats) {
                    engine.set_sampling(keep);
                    engine.decoded(conn, at, decoded);
                }
            }
            Event::Closed { conn } => engine.closed(conn),
            Event::Tick(at) => engine.tick(at),
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
