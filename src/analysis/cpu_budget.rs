//! The CPU budget (`--analysis-cpu`): the most of wirelint's CPU time the
//! analysis threads may take.
//!
//! Once a second the analysis threads' CPU time is compared with the whole
//! process's (each worker adds its own thread's time to
//! `Stats::analysis_cpu_nanos` at every tick). The share is smoothed over
//! the seconds since the last change (each new second weighs half), and
//! while it stays between [`LOW`] and [`HIGH`] of the budget nothing
//! moves. Outside that band the budget sets how many of every 64
//! connections are analysed so that the share lands on [`TARGET`] of the
//! budget, assuming the analysis's CPU follows the connections analysed;
//! one change at most halves or doubles them, so no one-second spike can
//! move the sampling far, and the second after a change is judged on its
//! own. A window in which wirelint spent less than [`MIN_WINDOW_CPU`] is
//! not judged: idle, there is nothing to save.

use super::engine::KEEP_ALL;
use crate::stats::{process_cpu_nanos, Stats};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

/// `--analysis-cpu`, and how many connections in 64 it lets the analysis
/// take now.
pub(super) struct CpuBudget {
    /// The fraction of wirelint's CPU time allowed to the analysis.
    pub(super) share: f64,
    /// Connections analysed in every [`KEEP_ALL`] (64), as the budget sees
    /// it: the sampling never analyses more.
    pub(super) keep: AtomicU8,
    window: Mutex<CpuWindow>,
}

/// CPU times (ns) when the window began, how far it has come, and the
/// smoothed share since the last change.
#[derive(Default)]
struct CpuWindow {
    process: u64,
    analysis: u64,
    ticks: u32,
    smoothed: Option<f64>,
}

/// Ticks per CPU window: one second.
pub(super) const CPU_WINDOW_TICKS: u32 = 4;
/// Least CPU time (ns) wirelint must have spent in a window for it to be
/// judged: 10 ms a second, 1 % of a core.
const MIN_WINDOW_CPU: u64 = 10_000_000;
/// Under this share of the budget (smoothed), more connections are
/// analysed.
const LOW: f64 = 0.55;
/// Over this share of the budget (smoothed), fewer connections are
/// analysed.
const HIGH: f64 = 0.95;
/// Where a change aims: the middle of the band.
const TARGET: f64 = 0.75;

/// What a change of the budget's share did: the analysis's smoothed share
/// of wirelint's CPU that called for it, and the connections in 64
/// analysed before and after.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct CpuChange {
    pub(super) took: f64,
    pub(super) from: u8,
    pub(super) to: u8,
}

/// The connections in 64 to analyse next, given that `keep` of them took
/// `share` of wirelint's CPU (smoothed) against a budget of `budget`; the
/// same `keep` when the share is within the band.
fn next_keep(keep: u8, share: f64, budget: f64) -> u8 {
    if (LOW * budget..=HIGH * budget).contains(&share) {
        return keep;
    }
    let keep = keep.max(1);
    let wanted = if share <= 0.0 {
        f64::from(KEEP_ALL)
    } else {
        f64::from(keep) * TARGET * budget / share
    };
    let (least, most) = ((keep / 2).max(1), (keep.saturating_mul(2)).min(KEEP_ALL));
    (wanted.round().clamp(1.0, 255.0) as u8).clamp(least, most)
}

impl CpuBudget {
    /// A budget of `share` of wirelint's CPU time; its first window starts
    /// now, with every connection allowed.
    pub(super) fn new(share: f64) -> CpuBudget {
        CpuBudget {
            share,
            keep: AtomicU8::new(KEEP_ALL),
            window: Mutex::new(CpuWindow {
                process: process_cpu_nanos(),
                ..CpuWindow::default()
            }),
        }
    }

    /// Called at every tick with `analysed`, the connections in 64 the
    /// sampling analysed during the window; once a window is complete,
    /// judges it, and returns the change it made to [`keep`](Self::keep).
    pub(super) fn judge(&self, analysed: u8, stats: &Stats) -> Option<CpuChange> {
        self.judge_at(analysed, stats, process_cpu_nanos)
    }

    /// [`judge`](Self::judge), with the process's CPU clock given.
    fn judge_at(
        &self,
        analysed: u8,
        stats: &Stats,
        process_clock: impl Fn() -> u64,
    ) -> Option<CpuChange> {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        w.ticks += 1;
        if w.ticks < CPU_WINDOW_TICKS {
            return None;
        }
        let (process, analysis) = (process_clock(), stats.analysis_cpu_nanos.load(Relaxed));
        let (spent, took) = (
            process.saturating_sub(w.process),
            analysis.saturating_sub(w.analysis),
        );
        (w.process, w.analysis, w.ticks) = (process, analysis, 0);
        if spent < MIN_WINDOW_CPU {
            return None;
        }
        let share = took as f64 / spent as f64;
        let smoothed = w.smoothed.map_or(share, |s| (s + share) / 2.0);
        let next = next_keep(analysed, smoothed, self.share);
        if next == analysed {
            w.smoothed = Some(smoothed);
            return None;
        }
        // Drop and queue pressure may analyse fewer than the budget allows;
        // the budget never asks for more than it saw work plus a doubling.
        w.smoothed = None;
        self.keep.store(next, Relaxed);
        Some(CpuChange {
            took: smoothed,
            from: analysed,
            to: next,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within 55–95 % of the budget nothing moves; outside it the next
    /// share aims at 75 % of the budget, assuming the analysis's CPU
    /// follows the connections analysed, by at most a halving or a
    /// doubling at a time.
    #[test]
    fn the_budget_aims_at_three_quarters_of_itself_a_step_at_a_time() {
        // 10 % budget.
        assert_eq!(next_keep(64, 0.09, 0.10), 64);
        assert_eq!(next_keep(20, 0.06, 0.10), 20);
        // Over: 64 connections took 12 %; 7.5 % wants 40.
        assert_eq!(next_keep(64, 0.12, 0.10), 40);
        // Far over: no more than a halving at once.
        assert_eq!(next_keep(64, 0.90, 0.10), 32);
        assert_eq!(next_keep(1, 0.90, 0.10), 1);
        // Under: 16 connections took 3 %; 7.5 % wants 40, a doubling is 32.
        assert_eq!(next_keep(16, 0.03, 0.10), 32);
        assert_eq!(next_keep(20, 0.05, 0.10), 30);
        // Nothing analysed took nothing: double, up to all.
        assert_eq!(next_keep(40, 0.0, 0.10), 64);
        assert_eq!(next_keep(64, 0.0, 0.10), 64);
    }

    /// A window is judged only when wirelint worked (10 ms of CPU in it),
    /// and the second after a change is judged on its own.
    #[test]
    fn windows_are_smoothed_between_changes() {
        let stats = Stats::default();
        let budget = CpuBudget::new(0.10);
        let ms = |n: u64| n * 1_000_000;
        // A window in which wirelint spent `spent` and the analysis
        // `analysis`, `keep` connections in 64 analysed; its judgement.
        // (The process clock is the test's own: other tests run beside
        // this one, and the process may not have run 100 ms yet.)
        let clock = std::cell::Cell::new(0u64);
        budget.window.lock().unwrap().process = 0;
        let window = |analysis: u64, spent: u64, keep: u8| {
            clock.set(clock.get() + spent);
            stats.analysis_cpu_nanos.fetch_add(analysis, Relaxed);
            (0..CPU_WINDOW_TICKS)
                .map(|_| budget.judge_at(keep, &stats, || clock.get()))
                .last()
                .flatten()
        };
        // 64 connections took 20 %: aim at 7.5 %, at most a halving.
        let change = window(ms(20), ms(100), 64).expect("over the budget");
        assert_eq!((change.from, change.to), (64, 32));
        assert_eq!(budget.keep.load(Relaxed), 32);
        // Within the band: nothing moves, and smoothing starts.
        assert_eq!(window(ms(8), ms(100), 32), None);
        // One spike averaged with the 8 % before it: 10 %, over the band
        // (95 % of the budget), one step down.
        let change = window(ms(12), ms(100), 32).expect("one spike, one step");
        assert_eq!(change.to, 24);
        // Idle: not judged.
        assert_eq!(window(0, ms(5), 24), None);
    }
}
