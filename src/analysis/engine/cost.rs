//! What the analysis spends per access pattern: the time the engine takes
//! over each message, charged to the pattern of the operation the message
//! belongs to (a request's, or the request a reply answers), gathered here
//! and added to the pattern table at each tick (one lock for all).
//!
//! The time is the analysis thread's wall clock around the message (two
//! reads of the monotonic clock, no system call): while the thread is not
//! preempted, the time it spends. `/patterns`, the dashboard and the
//! report show it per pattern (`analysis_us`, and per call).

use crate::analysis::patterns::PatternTable;
use std::sync::Arc;
use std::time::Duration;

/// Patterns charged between two ticks, at most: past it, the charges are
/// added at once.
const MAX_PENDING: usize = 256;

/// Charges not yet added to the pattern table.
#[derive(Default)]
pub(super) struct Costs {
    /// The pattern the message being analysed belongs to, once known.
    pub(super) pattern: Option<Arc<str>>,
    pending: Vec<(Arc<str>, u64)>,
}

impl Costs {
    /// Charges `took` to the pattern the message was found to belong to
    /// (none: the message is not charged). `true` when the charges should
    /// be added now.
    pub(super) fn charge(&mut self, took: Duration) -> bool {
        let Some(pattern) = self.pattern.take() else {
            return false;
        };
        let nanos = took.as_nanos() as u64;
        match self
            .pending
            .iter_mut()
            .find(|(p, _)| Arc::ptr_eq(p, &pattern) || **p == *pattern)
        {
            Some((_, n)) => *n += nanos,
            None => self.pending.push((pattern, nanos)),
        }
        self.pending.len() >= MAX_PENDING
    }

    /// Adds the charges to their patterns.
    pub(super) fn add_to(&mut self, patterns: &mut PatternTable) {
        for (pattern, nanos) in self.pending.drain(..) {
            patterns.charge(&pattern, nanos);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_per_pattern_and_only_when_known() {
        let mut costs = Costs::default();
        let a: Arc<str> = Arc::from("a");
        costs.pattern = Some(a.clone());
        assert!(!costs.charge(Duration::from_nanos(100)));
        costs.pattern = Some(Arc::from("a"));
        costs.charge(Duration::from_nanos(50));
        // No pattern: nothing charged.
        costs.charge(Duration::from_nanos(1_000));
        assert_eq!(costs.pending, vec![(a, 150)]);
        for i in 0..MAX_PENDING {
            costs.pattern = Some(Arc::from(format!("p{i}")));
            if costs.charge(Duration::from_nanos(1)) {
                assert_eq!(i, MAX_PENDING - 2);
                return;
            }
        }
        panic!("the charges never asked to be added");
    }
}
