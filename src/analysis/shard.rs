//! One worker's queue, and the handshake that wakes the worker when it
//! is parked.
//!
//! Each analysis worker owns one shard: a bounded lock-free queue of
//! [`Event`]s, and a state word that says whether the worker is awake. The
//! forwarding threads push and never wait; the worker pops. A worker with
//! nothing to do parks (see `worker`), and whoever pushes next unparks it.
//! The handshake costs the pushing side one fence and one load per
//! message: a system call only for the first message after a pause.

use crate::stats::Direction;
use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{fence, AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Instant;

/// What a worker receives.
pub enum Event {
    /// One forwarded message.
    Message {
        conn: u64,
        direction: Direction,
        /// When the proxy read it (latency is measured between these).
        at: Instant,
        frame: Bytes,
        /// The connections in 64 analysed when it was taken (64: every
        /// connection).
        keep: u8,
    },
    /// The connection ended: its state can go.
    Closed { conn: u64 },
    /// Time passed: finish idle invocations, run periodic rule checks,
    /// as of when the tick was taken (the messages queued before it were
    /// read before then; a worker that takes it later must not judge
    /// them by the time it wakes).
    Tick(Instant),
}

/// The worker's state, as those who push see it: awake (pushing wakes
/// nobody).
pub(super) const WORKER_AWAKE: u8 = 0;
/// The worker is parked: the next event wakes it.
pub(super) const WORKER_PARKED: u8 = 1;
/// The worker is parked with nothing for ticks to do: ticks are not even
/// queued, only a message or a close wakes it.
pub(super) const WORKER_DEEP_PARKED: u8 = 2;

/// One worker's queue, and how to wake it when it is parked.
pub(super) struct ShardQueue {
    pub(super) queue: ArrayQueue<Event>,
    /// One of the `WORKER_*` values: set by the worker before it parks;
    /// whoever pushes next sets it back to awake and unparks the worker.
    pub(super) worker_state: AtomicU8,
    /// The worker's thread, once it runs.
    pub(super) thread: OnceLock<Thread>,
}

impl ShardQueue {
    /// An empty queue of `capacity` events, its worker awake.
    pub(super) fn new(capacity: usize) -> ShardQueue {
        ShardQueue {
            queue: ArrayQueue::new(capacity),
            worker_state: AtomicU8::new(WORKER_AWAKE),
            thread: OnceLock::new(),
        }
    }

    pub(super) fn push(&self, event: Event) -> Result<(), Event> {
        self.queue.push(event)?;
        // The push, then the look at the state (the worker does the
        // opposite: state, then a look at the queue), so one of the two
        // sees the other. One fence and one load per message.
        fence(SeqCst);
        if self.worker_state.load(SeqCst) != WORKER_AWAKE
            && self.worker_state.swap(WORKER_AWAKE, SeqCst) != WORKER_AWAKE
        {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
        Ok(())
    }

    /// A tick, unless the worker is parked with nothing for it to do.
    pub(super) fn tick(&self) {
        if self.worker_state.load(SeqCst) != WORKER_DEEP_PARKED {
            let _ = self.push(Event::Tick(Instant::now()));
        }
    }
}

/// The worker holds one reference to its shard; when it is the last one,
/// every `AnalysisQueue` is gone and the worker finishes.
pub(super) type Shard = Arc<ShardQueue>;
