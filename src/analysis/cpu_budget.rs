//! The CPU budget (`--analysis-cpu`): the most of wirelint's CPU time the
//! analysis threads may take.
//!
//! The analysis threads' CPU time is compared with the whole process's
//! once a second (each worker adds its own thread's time to
//! `Stats::analysis_cpu_nanos` at every tick). Over the budget, the
//! sampling level rises by one at once and stays at least there; once a
//! second finds that twice the analysis would still be under four fifths
//! of the budget (two seconds running), it may fall by one again through
//! the calm path of [`Sampling`](super::sampling). A window in which
//! wirelint spent less than [`MIN_WINDOW_CPU`] is not judged: idle, there
//! is nothing to save.

use super::engine::MAX_SAMPLING_LEVEL;
use crate::stats::Stats;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

/// `--analysis-cpu`, and the level it asks for now.
pub(super) struct CpuBudget {
    /// The fraction of wirelint's CPU time allowed to the analysis.
    pub(super) share: f64,
    /// The level the budget asks for: the calm path does not go below it.
    pub(super) floor: AtomicU8,
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
pub(super) const CPU_WINDOW_TICKS: u32 = 4;
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

impl CpuBudget {
    /// A budget of `share` of wirelint's CPU time; its first window starts
    /// now.
    pub(super) fn new(share: f64) -> CpuBudget {
        CpuBudget {
            share,
            floor: AtomicU8::new(0),
            window: Mutex::new(CpuWindow {
                process: process_cpu_nanos(),
                ..CpuWindow::default()
            }),
        }
    }

    /// Called at every tick; once a CPU window is complete, judges it:
    /// when it was over, holds the budget's floor at the level above
    /// `level` and returns the share the analysis took (the caller raises
    /// the level); after enough roomy windows, lowers the floor by one.
    pub(super) fn judge(&self, level: u8, stats: &Stats) -> Option<f64> {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        w.ticks += 1;
        if w.ticks < CPU_WINDOW_TICKS {
            return None;
        }
        let (process, analysis) = (process_cpu_nanos(), stats.analysis_cpu_nanos.load(Relaxed));
        let (spent, analysed) = (
            process.saturating_sub(w.process),
            analysis.saturating_sub(w.analysis),
        );
        let verdict = cpu_verdict(spent, analysed, self.share);
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
                let above = (level + 1).min(MAX_SAMPLING_LEVEL);
                self.floor.store(above, Relaxed);
                Some(analysed as f64 / spent as f64)
            }
            CpuVerdict::Roomy if w.roomy >= ROOMY_WINDOWS_BEFORE_LOWER => {
                w.roomy = 0;
                let floor = self.floor.load(Relaxed);
                self.floor.store(floor.saturating_sub(1), Relaxed);
                None
            }
            _ => None,
        }
    }
}

/// CPU time the calling thread has run, in nanoseconds.
pub(super) fn thread_cpu_nanos() -> u64 {
    timespec_nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::ThreadCPUTime,
    ))
}

/// CPU time every thread of this process has run, in nanoseconds.
fn process_cpu_nanos() -> u64 {
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

    /// A window is judged only when wirelint worked (10 ms of CPU in it);
    /// over the budget it asks for a level more, and for one less only
    /// when twice the analysis would stay under four fifths of it. (The
    /// budget at work, through the queue: `queue`'s tests.)
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
}
