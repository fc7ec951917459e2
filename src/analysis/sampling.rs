//! Load shedding by sampling whole connections.
//!
//! While the workers keep up, every connection is analysed (level 0; or
//! one in 2^floor when the user chose a share with `--analysis-share`).
//! When a tick finds messages dropped since the last one, or a queue half
//! full (by count or bytes), the level rises by one: one connection in
//! 2^level is analysed, chosen by a hash of its id, so an analysed
//! connection keeps every message — requests with their replies, cursors
//! with their getMores, an N+1's list with its follow-ups — and what the
//! rules see stays consistent. After two seconds of queues under a tenth
//! full it falls by one, down to the share the user set (all by default).
//! With a CPU budget (`--analysis-cpu`), a second in which the analysis
//! took more of wirelint's CPU time than it allows raises the level too
//! (see [`CpuBudget`]).
//!
//! Forwarding is never slowed: the check is one relaxed load per message,
//! and a sampled-out message costs a counter increment.

use super::cpu_budget::CpuBudget;
use super::engine::MAX_SAMPLING_LEVEL;
use crate::stats::Stats;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// Ticks of calm (queues under a tenth full, nothing dropped) before the
/// sampling level falls by one: two seconds.
pub(super) const CALM_TICKS_BEFORE_LOWER: u32 = 8;

/// The sampling level and what moves it, shared by every `AnalysisQueue`
/// clone.
#[derive(Default)]
pub(super) struct Sampling {
    /// One connection in 2^level is analysed: read per message.
    pub(super) level: AtomicU8,
    /// The level set by the user (`--analysis-share`): the level starts
    /// there and never falls below it.
    user_floor: u8,
    /// `Stats::analysis_dropped` as the last tick saw it.
    dropped_seen: AtomicU64,
    calm_ticks: AtomicU32,
    /// `--analysis-cpu`, when set.
    cpu: Option<CpuBudget>,
}

impl Sampling {
    pub(super) fn new(user_floor: u8, cpu_share: Option<f64>) -> Sampling {
        Sampling {
            level: AtomicU8::new(user_floor),
            user_floor,
            cpu: cpu_share.map(CpuBudget::new),
            ..Sampling::default()
        }
    }

    /// The level the calm path may not fall below: the user's share, or
    /// what the CPU budget asks for now.
    fn floor(&self) -> u8 {
        let cpu = self.cpu.as_ref().map_or(0, |c| c.floor.load(Relaxed));
        self.user_floor.max(cpu)
    }

    /// At a tick: raises the level when the analysis fell behind since the
    /// last tick (messages dropped, or `fill`, the fullest queue's share by
    /// count or bytes, at least a half) or took more CPU than its budget;
    /// lowers it after a calm spell.
    pub(super) fn adjust(&self, fill: f64, stats: &Stats) {
        let dropped = stats.analysis_dropped.load(Relaxed);
        let new_drops = dropped.saturating_sub(self.dropped_seen.swap(dropped, Relaxed));
        let level = self.level.load(Relaxed);
        let cpu_over = self.cpu.as_ref().and_then(|cpu| cpu.judge(level, stats));
        let next = if cpu_over.is_some() || new_drops > 0 || fill >= 0.5 {
            self.calm_ticks.store(0, Relaxed);
            (level + 1).min(MAX_SAMPLING_LEVEL)
        } else if fill < 0.1 && level > self.floor() {
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
        if next != level {
            self.level.store(next, Relaxed);
            stats.analysis_sampling.store(next.into(), Relaxed);
            self.log_change(level, next, cpu_over, new_drops);
        }
    }

    /// One line for each change of level, saying why.
    fn log_change(&self, level: u8, next: u8, cpu_over: Option<f64>, new_drops: u64) {
        if let (Some(took), Some(budget)) = (cpu_over, &self.cpu) {
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

/// Whether connection `conn` is left out at sampling `level`: a hash of the
/// id (independent of the shard, which is `conn % workers`), its low
/// `level` bits non-zero.
pub(super) fn sampled_out(conn: u64, level: u8) -> bool {
    let mixed = conn.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    mixed & ((1u64 << level) - 1) != 0
}
