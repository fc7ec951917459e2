//! The series labelled by what the traffic names: each busy access
//! pattern's latency (quantiles, and the call histogram a fleet adds up)
//! and round trips, and the open findings by rule, severity, namespace and
//! pattern, capped gravest first. The rest of `/metrics` (the counters, the
//! format, the table of families) is in the parent module.

use super::{Scrape, Series, Value, OTHER};
use crate::analysis::findings::Severity;
use std::collections::BTreeMap;

/// `wirelint_finding` label sets with series of their own, at most.
pub const MAX_FINDING_SERIES: usize = 500;

/// The upper bounds (`le`, seconds) of the call-latency histogram's
/// buckets, and the same in microseconds.
pub(super) const LATENCY_BUCKETS: [(&str, u64); 14] = [
    ("0.0005", 500),
    ("0.001", 1_000),
    ("0.0025", 2_500),
    ("0.005", 5_000),
    ("0.01", 10_000),
    ("0.025", 25_000),
    ("0.05", 50_000),
    ("0.1", 100_000),
    ("0.25", 250_000),
    ("0.5", 500_000),
    ("1", 1_000_000),
    ("2.5", 2_500_000),
    ("5", 5_000_000),
    ("10", 10_000_000),
];

/// Each busy pattern's latency quantiles (seconds) and call count; the
/// calls of the others added up under `(other)`.
pub(super) fn pattern_latency(scrape: &Scrape<'_>) -> Vec<Series> {
    let mut series = Vec::new();
    let mut other_calls = 0;
    for p in &scrape.report.patterns {
        if !scrape.patterns.contains(p.name.as_str()) {
            other_calls += p.invocations;
            continue;
        }
        for (quantile, us) in [
            ("0.5", p.latency_us.p50),
            ("0.95", p.latency_us.p95),
            ("0.99", p.latency_us.p99),
        ] {
            let labels = vec![("pattern", p.name.clone()), ("quantile", quantile.into())];
            series.push(Series::new(labels, Value::Real(us as f64 / 1e6)));
        }
        series.push(Series {
            suffix: "_count",
            labels: vec![("pattern", p.name.clone())],
            value: Value::Count(p.invocations),
        });
    }
    if other_calls > 0 {
        series.push(Series {
            suffix: "_count",
            labels: vec![("pattern", OTHER.into())],
            value: Value::Count(other_calls),
        });
    }
    series
}

/// Each busy pattern's round trips; the others' added up under `(other)`.
pub(super) fn pattern_round_trips(scrape: &Scrape<'_>) -> Vec<Series> {
    per_pattern(
        scrape,
        |p| Some(p.round_trips as f64),
        |n| Value::Count(n as u64),
    )
}

/// Each busy pattern's estimated request units (only when priced: see
/// `--target cosmos-ru`), the others' added up under `(other)`.
pub(super) fn pattern_request_units(scrape: &Scrape<'_>) -> Vec<Series> {
    per_pattern(
        scrape,
        |p| p.request_units.as_ref().map(|r| r.total),
        Value::Real,
    )
}

/// Each busy pattern's throttled operations, where there were any.
pub(super) fn pattern_throttled(scrape: &Scrape<'_>) -> Vec<Series> {
    per_pattern(
        scrape,
        |p| (p.throttled > 0).then_some(p.throttled as f64),
        |n| Value::Count(n as u64),
    )
}

/// One series per busy pattern that has a value, the other patterns'
/// values added up under `(other)`.
fn per_pattern(
    scrape: &Scrape<'_>,
    value: impl Fn(&crate::report::PatternReport) -> Option<f64>,
    shown: impl Fn(f64) -> Value,
) -> Vec<Series> {
    let mut series = Vec::new();
    let mut other = None;
    for p in &scrape.report.patterns {
        let Some(v) = value(p) else { continue };
        if scrape.patterns.contains(p.name.as_str()) {
            let labels = vec![("pattern", p.name.clone())];
            series.push(Series::new(labels, shown(v)));
        } else {
            *other.get_or_insert(0.0) += v;
        }
    }
    if let Some(v) = other.filter(|v| *v > 0.0) {
        let labels = vec![("pattern", OTHER.into())];
        series.push(Series::new(labels, shown(v)));
    }
    series
}

/// Each busy pattern's calls as a histogram of their latency (seconds):
/// cumulative `_bucket`s, `_sum` and `_count`; the other patterns' calls
/// merged into one histogram under `(other)`. A call is counted in the
/// first bucket at or above the top of its two-significant-digit range,
/// so a bucket may miss calls within 1% under its bound.
pub(super) fn pattern_call_duration(scrape: &Scrape<'_>) -> Vec<Series> {
    let mut series = Vec::new();
    let mut other = CallHistogram::default();
    for p in &scrape.report.patterns {
        if scrape.patterns.contains(p.name.as_str()) {
            let mut h = CallHistogram::default();
            h.add(p);
            h.push(&mut series, &p.name);
        } else {
            other.add(p);
        }
    }
    if other.count > 0 {
        other.push(&mut series, OTHER);
    }
    series
}

/// Calls counted into [`LATENCY_BUCKETS`] (not yet cumulative).
#[derive(Default)]
pub(super) struct CallHistogram {
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum_us: u64,
}

impl CallHistogram {
    pub(super) fn add(&mut self, p: &crate::report::PatternReport) {
        self.count += p.invocations;
        for &[us, n] in &p.latency_histogram {
            self.sum_us = self.sum_us.saturating_add(us.saturating_mul(n));
            if let Some(i) = LATENCY_BUCKETS.iter().position(|(_, le)| us <= *le) {
                self.buckets[i] += n;
            }
        }
    }

    pub(super) fn push(&self, series: &mut Vec<Series>, pattern: &str) {
        let mut cumulative = 0;
        let les = LATENCY_BUCKETS.iter().map(|(le, _)| *le).chain(["+Inf"]);
        for (i, le) in les.enumerate() {
            cumulative = match self.buckets.get(i) {
                Some(n) => cumulative + n,
                None => self.count,
            };
            series.push(Series {
                suffix: "_bucket",
                labels: vec![("pattern", pattern.into()), ("le", le.into())],
                value: Value::Count(cumulative),
            });
        }
        series.push(Series {
            suffix: "_sum",
            labels: vec![("pattern", pattern.into())],
            value: Value::Real(self.sum_us as f64 / 1e6),
        });
        series.push(Series {
            suffix: "_count",
            labels: vec![("pattern", pattern.into())],
            value: Value::Count(self.count),
        });
    }
}

/// One open finding's labels: rule, severity, namespace, pattern.
type FindingLabels<'a> = (&'a str, &'static str, &'a str, &'a str);

/// Open findings by label set (one per pattern each was seen in), with how
/// many and the earliest first sighting (Unix seconds, when known): the
/// first [`MAX_FINDING_SERIES`] label sets, gravest first, then the rest
/// added up per rule and severity under `(other)`.
fn open_findings<'a>(scrape: &Scrape<'a>) -> Vec<(FindingLabels<'a>, u64, Option<u64>)> {
    let mut sets: BTreeMap<(std::cmp::Reverse<Severity>, FindingLabels<'a>), (u64, Option<u64>)> =
        BTreeMap::new();
    for f in &scrape.report.findings {
        let first = humantime::parse_rfc3339(&f.first_seen)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        let mut patterns: Vec<&str> = f.patterns.iter().map(String::as_str).collect();
        if let Some(p) = &f.pattern {
            if !patterns.contains(&p.as_str()) {
                patterns.push(p);
            }
        }
        if patterns.is_empty() {
            patterns.push("");
        }
        for pattern in patterns {
            let labels = (
                f.rule.as_str(),
                f.severity.as_str(),
                f.namespace.as_str(),
                pattern,
            );
            let entry = sets
                .entry((std::cmp::Reverse(f.severity), labels))
                .or_default();
            entry.0 += 1;
            entry.1 = earliest(entry.1, first);
        }
    }
    let mut open = Vec::new();
    let mut others: BTreeMap<(&str, &'static str), (u64, Option<u64>)> = BTreeMap::new();
    for (i, ((_, labels), (n, first))) in sets.into_iter().enumerate() {
        if i < MAX_FINDING_SERIES {
            open.push((labels, n, first));
        } else {
            let other = others.entry((labels.0, labels.1)).or_default();
            other.0 += n;
            other.1 = earliest(other.1, first);
        }
    }
    for ((rule, severity), (n, first)) in others {
        open.push(((rule, severity, OTHER, OTHER), n, first));
    }
    open
}

/// The earlier of two times, either of which may be unknown.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A finding series' labels, in the exposition's order.
fn finding_labels(labels: FindingLabels<'_>) -> Vec<(&'static str, String)> {
    let (rule, severity, namespace, pattern) = labels;
    vec![
        ("rule", rule.into()),
        ("severity", severity.into()),
        ("namespace", namespace.into()),
        ("pattern", pattern.into()),
    ]
}

/// One series per open finding's label set: how many findings stand there.
pub(super) fn finding(scrape: &Scrape<'_>) -> Vec<Series> {
    open_findings(scrape)
        .into_iter()
        .map(|(labels, n, _)| Series::new(finding_labels(labels), Value::Count(n)))
        .collect()
}

/// When each open finding's label set was first seen (Unix seconds).
pub(super) fn finding_first_seen(scrape: &Scrape<'_>) -> Vec<Series> {
    open_findings(scrape)
        .into_iter()
        .filter_map(|(labels, _, first)| {
            Some(Series::new(finding_labels(labels), Value::Count(first?)))
        })
        .collect()
}

/// Distinct findings by rule and severity.
pub(super) fn findings(scrape: &Scrape<'_>) -> Vec<Series> {
    let mut by_rule: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for f in &scrape.report.findings {
        *by_rule.entry((&f.rule, f.severity.as_str())).or_default() += 1;
    }
    by_rule
        .into_iter()
        .map(|((rule, severity), n)| {
            let labels = vec![("rule", rule.to_string()), ("severity", severity.into())];
            Series::new(labels, Value::Count(n))
        })
        .collect()
}
