//! The hand-off from the proxy to the analysis: [`AnalysisQueue`], the
//! proxy's [`Tap`].
//!
//! A session hands every forwarded message (a `Bytes`) to its connection's
//! worker through this queue. It never waits and never makes a system
//! call on its own account: it pushes onto that worker's bounded
//! lock-free [`shard`](super::shard), and when the shard is full, or the
//! messages waiting exceed their byte budget, the message is dropped and
//! counted. The queue is sharded by connection, so one connection's
//! messages are analysed in the order the client sent them. Which
//! connections are analysed at all is [`sampling`](super::sampling)'s
//! call, read with one load per message.

use super::budget;
use super::engine::{self, Engine};
use super::knowledge::Knowledge;
use super::sampling::{sampled_out, Sampling, KEEP_ALL};
use super::shard::{Event, Shard, ShardQueue};
use super::worker::{self, AnalysisWorkers};
use super::Settings;
use crate::proxy::Tap;
use crate::stats::{Direction, Stats};
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::Instant;

/// The shards, shared by every [`AnalysisQueue`] clone. When the last one
/// goes, the workers are woken to see that nothing can come any more.
struct Shards(Vec<Shard>);

impl Drop for Shards {
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
    shards: Arc<Shards>,
    stats: Arc<Stats>,
    /// Bytes of the messages waiting, across shards, and the most allowed:
    /// a flood of large documents is dropped, not buffered.
    queued_bytes: Arc<AtomicUsize>,
    max_bytes: usize,
    sampling: Arc<Sampling>,
}

impl AnalysisQueue {
    /// The queue, and the workers it feeds (none when the analysis is
    /// off: then the queue takes nothing).
    pub fn start(
        settings: &Settings,
        stats: Arc<Stats>,
        knowledge: Arc<Mutex<Knowledge>>,
    ) -> (AnalysisQueue, AnalysisWorkers) {
        if !settings.enabled {
            return (
                AnalysisQueue {
                    shards: Arc::new(Shards(Vec::new())),
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
        if let Some(share) = settings.cpu_share {
            let ppm = (share * 1e6).round() as u64;
            stats.analysis_cpu_budget_ppm.store(ppm, Relaxed);
        }
        log_settings(floor, settings.cpu_share);
        let per_shard = (settings.queue_capacity / workers).max(1);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let mut shards = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers {
            let shard: Shard = Arc::new(ShardQueue::new(per_shard));
            shards.push(shard.clone());
            let (stats, queued) = (stats.clone(), queued_bytes.clone());
            let engine = Engine::new(knowledge.clone(), settings.live);
            handles.push(worker::spawn(i, shard, stats, queued, engine));
        }
        (
            AnalysisQueue {
                shards: Arc::new(Shards(shards)),
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
        self.sampling.adjust(self.fill(), &self.stats);
        for shard in self.shards.0.iter() {
            shard.tick();
        }
    }

    /// How full the fullest queue is, by count or by the byte budget
    /// (0 to 1): what tells [`Sampling`] the analysis is behind.
    fn fill(&self) -> f64 {
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
        count_fill.max(byte_fill)
    }

    /// The worker that analyses connection `conn`.
    fn shard_index(&self, conn: u64) -> usize {
        (conn % self.shards.0.len() as u64) as usize
    }

    fn shard(&self, conn: u64) -> &ShardQueue {
        &self.shards.0[self.shard_index(conn)]
    }
}

/// Says at start what share of the connections and of the CPU the
/// analysis may take, when the user limited them.
fn log_settings(floor: u8, cpu_share: Option<f64>) {
    if floor > 0 {
        tracing::info!(
            analysed = format!("1 connection in {}", 1u32 << floor),
            "analysing a share of the connections, as --analysis-share asks"
        );
    }
    if let Some(share) = cpu_share {
        tracing::info!(
            budget = format!("{:.1} %", share * 100.0),
            "the analysis may take this share of wirelint's CPU time (--analysis-cpu); past it, it samples connections"
        );
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
        let keep = self.sampling.keep.load(Relaxed);
        if keep < KEEP_ALL && sampled_out(conn, keep) {
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
            keep,
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
    static COPY_BLOCKS: std::cell::RefCell<Vec<bytes::BytesMut>> = const { std::cell::RefCell::new(Vec::new()) };
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
    COPY_BLOCKS.with_borrow_mut(|blocks| {
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

#[cfg(test)]
mod tests {
    use super::super::cpu_budget::CPU_WINDOW_TICKS;
    use super::super::sampling::CALM_TICKS_BEFORE_LOWER;
    use super::*;
    use crate::stats::thread_cpu_nanos;
    use std::time::Duration;

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
        let left_out = (0..64).filter(|c| sampled_out(*c, 32)).count() as u64;
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

    /// Runs this thread for `ms` of CPU time, so that a CPU window has
    /// something to judge.
    fn spin_cpu(ms: u64) {
        let until = thread_cpu_nanos() + ms * 1_000_000;
        let mut x = 0u64;
        while thread_cpu_nanos() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    /// `--analysis-cpu`: a second in which the analysis threads took far
    /// more of wirelint's CPU time than the budget halves the connections
    /// analysed (no more at once), and whole connections are shed; a
    /// second with room for twice the analysis doubles them again.
    /// Workers add their own thread's CPU time at ticks.
    #[test]
    fn over_its_cpu_budget_the_analysis_sheds_connections_until_there_is_room() {
        let stats = Arc::new(Stats::default());
        let settings = Settings {
            cpu_share: Some(0.10),
            ..Settings::default()
        };
        let (queue, workers) = AnalysisQueue::start(&settings, stats.clone(), knowledge());
        assert_eq!(stats.snapshot().analysis_cpu_budget, 0.10, "for /metrics");
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
        assert_eq!(queue.sampling.keep.load(Relaxed), 32, "a halving at most");
        assert_eq!(stats.analysis_sampling.load(Relaxed), 1);
        let ping = Bytes::from_static(&[0u8; 16]);
        let left_out = (0..64).filter(|c| sampled_out(*c, 32)).count() as u64;
        for conn in 0..64 {
            queue.message(conn, Direction::Request, Instant::now(), ping.clone());
        }
        assert_eq!(stats.analysis_shed.load(Relaxed), left_out);
        // Room: every connection again.
        window(0);
        assert_eq!(queue.sampling.keep.load(Relaxed), 64);
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
            let left_out: Vec<u64> = (0..64).filter(|c| sampled_out(*c, 32)).collect();
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
            // Ticks come every 250 ms, and a worker keeping up takes each
            // before the next (it looks every 50-200 ms).
            let deadline = Instant::now() + std::time::Duration::from_secs(2);
            while !queue.shards.0[0].queue.is_empty() && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
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
