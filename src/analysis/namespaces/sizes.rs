//! Sizes a namespace has seen (document bytes, array lengths per path),
//! kept as histograms: findings quote a quantile and the largest seen, and
//! a histogram keeps both in a fixed size however many values come.

/// Sizes seen (array lengths, document bytes): an hdrhistogram — the
/// histogram latencies use too — for quantiles, at one significant digit
/// (within 10 %) up to 2^26, beyond any length or size a 48 MB message
/// can carry, in u32 counts (about 1.5 KiB); with the exact maximum and
/// count beside it, since findings quote them.
#[derive(Clone, Debug)]
pub struct SizeHist {
    quantiles: hdrhistogram::Histogram<u32>,
    pub count: u64,
    pub max: u64,
    /// The median as last worked out, and the count it was worked out at
    /// (see [`SizeHist::median`]).
    median: std::cell::Cell<(u64, u64)>,
}

const SIZE_HIST_TOP: u64 = 1 << 26;

impl Default for SizeHist {
    fn default() -> Self {
        SizeHist {
            quantiles: hdrhistogram::Histogram::new_with_bounds(1, SIZE_HIST_TOP, 1)
                .expect("valid histogram bounds"),
            count: 0,
            max: 0,
            median: std::cell::Cell::new((0, 0)),
        }
    }
}

impl SizeHist {
    pub fn record(&mut self, v: u64) {
        self.quantiles.saturating_record(v.min(SIZE_HIST_TOP));
        self.count += 1;
        self.max = self.max.max(v);
    }

    /// The value at quantile `q` (0..=1), within 10 % and never above the
    /// largest value seen.
    pub fn quantile(&self, q: f64) -> u64 {
        self.quantiles.value_at_quantile(q).min(self.max)
    }

    /// The median, for callers that ask per operation: worked out again
    /// only once the count has grown by a sixteenth since it last was (or
    /// while there are fewer than 64 values), so it may lag the exact
    /// median by what the last sixteenth of the values moved it.
    pub fn median(&self) -> u64 {
        let (at, median) = self.median.get();
        if at == self.count || (self.count >= 64 && self.count < at + at / 16) {
            return median;
        }
        let median = self.quantile(0.5);
        self.median.set((self.count, median));
        median
    }
}

/// Heap bytes of a [`SizeHist`] (368 u32 counts; see `tests/memory_budget.rs`).
pub const SIZE_HIST_HEAP: usize = 1536;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_bound_the_value() {
        let mut h = SizeHist::default();
        for v in 1..=1000 {
            h.record(v);
        }
        assert_eq!(h.max, 1000);
        let p99 = h.quantile(0.99);
        assert!((990..=1000).contains(&p99), "{p99}");
        assert!(
            h.quantile(0.5) >= 500 && h.quantile(0.5) < 768,
            "{}",
            h.quantile(0.5)
        );
        let before = h.median();
        assert_eq!(before, h.quantile(0.5));
        // Fewer than a sixteenth more values: the median is not worked out
        // again; past it, it is.
        for _ in 0..60 {
            h.record(1 << 20);
        }
        assert_eq!(h.median(), before);
        assert_ne!(h.quantile(0.5), before);
        for _ in 0..2000 {
            h.record(1000);
        }
        assert_ne!(h.median(), before);
        assert_eq!(h.median(), h.quantile(0.5));
        // Zero counts; past the top is clamped for quantiles, kept as max.
        h.record(0);
        h.record(1 << 40);
        assert_eq!((h.count, h.max), (3062, 1 << 40));
    }
}
