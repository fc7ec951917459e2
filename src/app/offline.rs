//! `wirelint analyse FILE…`: the analysis of packet captures, on this
//! thread, with the rules, thresholds and partition keys a proxy would
//! run with.
//!
//! Each message a capture yields goes through the same decoding and
//! engine as a worker's, at the time the capture gives it (the clock of
//! the analysis is the capture's, ticked every [`TICK`] of it), and none is
//! dropped or sampled out: an offline analysis has no traffic to keep up
//! with. The report is the one the proxy writes, its counters those of
//! the capture.

use crate::admin::AdminState;
use crate::analysis::engine::Engine;
use crate::analysis::knowledge::Knowledge;
use crate::analysis::partition::PartitionKeys;
use crate::analysis::Decoder;
use crate::capture::{Account, Event, Reader, ReaderSettings};
use crate::report::Report;
use crate::stats::{thread_cpu_nanos, Stats};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often, in the capture's time, the analysis is ticked (as the
/// proxy's is, four times a second).
pub const TICK: Duration = Duration::from_millis(250);
/// The longest stretch without traffic that is ticked through: past it,
/// what the analysis holds for a while (replies for 2 s, idle requests
/// after 500 ms) is over, and the ticks a quiet hour (or the gap between
/// two captures made on different days) would take find nothing new.
const TICKED_IDLE: Duration = Duration::from_secs(30);

/// The capture times after `ticked` (the last tick) up to `now` that the
/// analysis is ticked at: every [`TICK`], but over a quiet stretch longer
/// than [`TICKED_IDLE`] only its first [`TICKED_IDLE`] and its last tick.
fn ticks(ticked: Duration, now: Duration) -> impl Iterator<Item = Duration> {
    let tick = TICK.as_nanos() as u64;
    let due = now.saturating_sub(ticked).as_nanos() as u64 / tick;
    let through = TICKED_IDLE.as_nanos() as u64 / tick;
    (1..=due.min(through))
        .chain((due > through).then_some(due))
        .map(move |k| ticked + Duration::from_nanos(k * tick))
}

/// The analysis of captures, fed one event at a time.
pub struct Offline {
    stats: Arc<Stats>,
    knowledge: Arc<Mutex<Knowledge>>,
    engine: Engine,
    decoder: Decoder,
    /// The analysis clock's origin: the capture's first packet.
    start: Instant,
    ticked: Duration,
    now: Duration,
    label: String,
}

/// What an offline analysis produced.
pub struct Analysed {
    pub report: Report,
    pub account: Account,
    /// Bytes of capture read (uncompressed).
    pub bytes: u64,
}

impl Offline {
    /// An analysis with the rules and settings of `analysis`; `label`
    /// names the captures in the report (where a proxy's names its
    /// upstream).
    pub fn new(analysis: &crate::analysis::Settings, label: String) -> Offline {
        let knowledge = Arc::new(Mutex::new(Knowledge::with_keys(
            crate::rules::all(),
            analysis.rules.clone(),
            analysis.show_values,
            analysis.caps.clone(),
            PartitionKeys::from_config(analysis.partition_keys.clone()),
        )));
        knowledge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .configure(analysis);
        Offline {
            stats: Arc::new(Stats::default()),
            engine: Engine::new(knowledge.clone(), None),
            knowledge,
            decoder: Decoder::default(),
            start: Instant::now(),
            ticked: Duration::ZERO,
            now: Duration::ZERO,
            label,
        }
    }

    /// One event of a capture, in capture order.
    pub fn event(&mut self, event: Event) {
        match event {
            Event::Message {
                conn,
                direction,
                at,
                frame,
            } => {
                self.advance(at);
                let s = &self.stats;
                s.frames[direction.index()].fetch_add(1, Relaxed);
                s.bytes[direction.index()].fetch_add(frame.len() as u64, Relaxed);
                s.analysis_enqueued.fetch_add(1, Relaxed);
                s.analysis_processed.fetch_add(1, Relaxed);
                let at = self.start + at;
                let (engine, decoder) = (&mut self.engine, &mut self.decoder);
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    if let Some(decoded) = decoder.decode(conn, direction, frame, s) {
                        engine.decoded(conn, at, decoded);
                    }
                }));
                if outcome.is_err() {
                    self.stats
                        .analysis
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .panics += 1;
                }
            }
            Event::Closed { conn } => self.engine.closed(conn),
        }
    }

    /// Ticks the engine up to the capture time `at`.
    fn advance(&mut self, at: Duration) {
        self.now = self.now.max(at);
        for t in ticks(self.ticked, self.now) {
            self.engine.tick(self.start + t);
            self.ticked = t;
        }
    }

    /// Completes every request and builds the report; `cpu_nanos`: what
    /// the analysis took (its thread's CPU time, the caller's to measure).
    pub fn finish(mut self, account: Account, cpu_nanos: u64) -> Analysed {
        self.decoder.flush(&self.stats);
        // The flush completes every request and runs the rules' tick
        // hooks a last time, as a proxy's shutdown does.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.engine.flush()));
        self.stats.analysis_cpu_nanos.store(cpu_nanos, Relaxed);
        self.stats
            .connections_accepted
            .store(account.connections, Relaxed);
        let state = AdminState::new(self.stats.clone(), self.knowledge.clone(), self.label, None);
        Analysed {
            report: state.report(),
            account,
            bytes: 0,
        }
    }
}

/// Reads `files` in order and analyses what they hold.
pub fn analyse(
    settings: &crate::analysis::Settings,
    files: &[PathBuf],
    reader: ReaderSettings,
) -> anyhow::Result<Analysed> {
    let label = format!(
        "capture {}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let began = thread_cpu_nanos();
    let mut offline = Offline::new(settings, label);
    let mut reader = Reader::new(reader);
    for file in files {
        reader.read_file(file, &mut |e| offline.event(e))?;
    }
    let bytes = reader.bytes_read();
    let account = reader.finish(&mut |e| offline.event(e));
    // (The reading's CPU time too: offline, they are one job.)
    let mut analysed = offline.finish(account, thread_cpu_nanos().saturating_sub(began));
    analysed.bytes = bytes;
    Ok(analysed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tick while traffic comes; over a quiet hour (or the gap
    /// between captures of different days), its first 30 s of ticks and
    /// its last, on the same grid.
    #[test]
    fn a_quiet_stretch_is_ticked_through_its_first_seconds_only() {
        let ms = Duration::from_millis;
        let busy: Vec<_> = ticks(ms(250), ms(1_400)).collect();
        assert_eq!(busy, vec![ms(500), ms(750), ms(1_000), ms(1_250)]);
        let quiet: Vec<_> = ticks(ms(0), Duration::from_secs(3_600) + ms(100)).collect();
        assert_eq!(quiet.len(), 121);
        assert_eq!(quiet[119], TICKED_IDLE);
        assert_eq!(quiet[120], Duration::from_secs(3_600));
        assert_eq!(ticks(ms(500), ms(700)).count(), 0);
    }
}
