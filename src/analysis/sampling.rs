//! Load shedding by sampling whole connections.
//!
//! While the workers keep up, every connection is analysed (or one in
//! 2^floor when the user chose a share with `--analysis-share`). Which
//! connections are analysed is a hash of the connection id: each lands in
//! one of 64 slots, and the first `keep` slots are analysed, so an analysed
//! connection keeps every message — requests with their replies, cursors
//! with their getMores, an N+1's list with its follow-ups — and what the
//! rules see stays consistent; with fewer slots kept, the connections left
//! are among those analysed before.
//!
//! Two things set `keep`. When a tick finds messages dropped since the
//! last one, or a queue half full (by count or bytes), the level rises by
//! one: half the slots (one connection in 2^level). After two seconds of
//! queues under a tenth full it falls by one, down to the share the user
//! set. With a CPU budget (`--analysis-cpu`), [`CpuBudget`] sets the most
//! slots the analysis may take, in steps as fine as one slot, so that its
//! share of wirelint's CPU stays within the budget.
//!
//! Forwarding is never slowed: the check is one relaxed load per message,
//! and a sampled-out message costs a counter increment.

use super::cpu_budget::{CpuBudget, CpuChange};
pub(super) use super::engine::KEEP_ALL;
use super::engine::MAX_SAMPLING_LEVEL;
use crate::stats::Stats;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// Ticks of calm (queues under a tenth full, nothing dropped) before the
/// sampling level falls by one: two seconds.
pub(super) const CALM_TICKS_BEFORE_LOWER: u32 = 8;

/// The sampling level and what moves it, shared by every `AnalysisQueue`
/// clone.
pub(super) struct Sampling {
    /// Slots (of [`KEEP_ALL`]) analysed: read per message.
    pub(super) keep: AtomicU8,
    /// One connection in 2^level is analysed, as far as drops and queues
    /// are concerned.
    level: AtomicU8,
    /// The level set by the user (`--analysis-share`): the level starts
    /// there and never falls below it.
    user_floor: u8,
    /// `Stats::analysis_dropped` as the last tick saw it.
    dropped_seen: AtomicU64,
    calm_ticks: AtomicU32,
    /// `--analysis-cpu`, when set.
    cpu: Option<CpuBudget>,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling::new(0, None)
    }
}

impl Sampling {
    pub(super) fn new(user_floor: u8, cpu_share: Option<f64>) -> Sampling {
        Sampling {
            keep: AtomicU8::new(KEEP_ALL >> user_floor),
            level: AtomicU8::new(user_floor),
            user_floor,
            dropped_seen: AtomicU64::new(0),
            calm_ticks: AtomicU32::new(0),
            cpu: cpu_share.map(CpuBudget::new),
        }
    }

    /// At a tick: raises the level when the analysis fell behind since the
    /// last tick (messages dropped, or `fill`, the fullest queue's share by
    /// count or bytes, at least a half); lowers it after a calm spell; lets
    /// the CPU budget judge its window; and sets the slots analysed.
    pub(super) fn adjust(&self, fill: f64, stats: &Stats) {
        let dropped = stats.analysis_dropped.load(Relaxed);
        let new_drops = dropped.saturating_sub(self.dropped_seen.swap(dropped, Relaxed));
        let level = self.level.load(Relaxed);
        let next = if new_drops > 0 || fill >= 0.5 {
            self.calm_ticks.store(0, Relaxed);
            (level + 1).min(MAX_SAMPLING_LEVEL)
        } else if fill < 0.1 && level > self.user_floor {
            if self.calm_ticks.fetch_add(1, Relaxed) + 1 >= CALM_TICKS_BEFORE_LOWER {
                self.calm_ticks.store(0, Relaxed);
                level - 1
            } else {
                level
            }
        } else {
            self.calm_ticks.store(0, Relaxed);
            level
        };
        let kept = self.keep.load(Relaxed);
        let cpu_change = self.cpu.as_ref().and_then(|cpu| cpu.judge(kept, stats));
        let cpu_keep = self.cpu.as_ref().map_or(KEEP_ALL, |c| c.keep.load(Relaxed));
        let keep = (KEEP_ALL >> next).min(cpu_keep).max(1);
        if next != level {
            self.level.store(next, Relaxed);
            self.log_level(level, next, new_drops);
        }
        if let (Some(change), Some(cpu)) = (cpu_change, &self.cpu) {
            log_cpu_change(change, cpu.share);
        }
        if keep != kept {
            self.keep.store(keep, Relaxed);
            stats
                .analysis_sampling
                .store(level_of(keep).into(), Relaxed);
        }
    }

    /// One line for each change of level, saying why.
    fn log_level(&self, level: u8, next: u8, new_drops: u64) {
        if next > level {
            tracing::warn!(
                analysed = format!("1 connection in {}", 1u32 << next),
                dropped = new_drops,
                "the analysis is behind the traffic: it now analyses fewer connections (forwarding is unaffected; wirelint_analysis_sampling_level shows it)"
            );
        } else {
            tracing::info!(
                analysed = format!("1 connection in {}", 1u32 << next),
                "the analysis keeps up: more connections analysed again"
            );
        }
    }
}

/// One line for each change the CPU budget makes.
fn log_cpu_change(change: CpuChange, budget: f64) {
    tracing::info!(
        analysed = format!(
            "{} in {KEEP_ALL} connections (was {})",
            change.to, change.from
        ),
        took = format!("{:.1} %", change.took * 100.0),
        budget = format!("{:.1} %", budget * 100.0),
        "the analysis's share of wirelint's CPU time moved away from --analysis-cpu: it now analyses another share of the connections (forwarding is unaffected; wirelint_analysis_analysed_ratio shows it)"
    );
}

/// The sampling level `keep` slots stand for: one connection in
/// 2^level, rounded down.
fn level_of(keep: u8) -> u8 {
    (KEEP_ALL / keep.max(1)).ilog2() as u8
}

/// Whether connection `conn` is left out when `keep` slots of
/// [`KEEP_ALL`] are analysed: a hash of the id (independent of the shard,
/// which is `conn % workers`) picks its slot.
pub(super) fn sampled_out(conn: u64, keep: u8) -> bool {
    let mixed = conn.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (mixed % u64::from(KEEP_ALL)) >= u64::from(keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fewer slots keep a subset of the connections kept before, and a
    /// share of the slots keeps about that share of the connections.
    #[test]
    fn slots_nest_and_keep_their_share() {
        for keep in 1..KEEP_ALL {
            for conn in 0..4096 {
                if !sampled_out(conn, keep) {
                    assert!(!sampled_out(conn, keep + 1), "conn {conn} keep {keep}");
                }
            }
        }
        for keep in [1, 16, 32, 48] {
            let kept = (0..6400).filter(|c| !sampled_out(*c, keep)).count();
            let expected = 100 * usize::from(keep);
            assert!(
                kept.abs_diff(expected) <= expected / 5 + 20,
                "{keep} slots kept {kept} of 6400"
            );
        }
        assert_eq!((0..64).filter(|c| sampled_out(*c, KEEP_ALL)).count(), 0);
        assert_eq!(level_of(64), 0);
        assert_eq!(level_of(32), 1);
        assert_eq!(level_of(20), 1);
        assert_eq!(level_of(1), 6);
    }
}
