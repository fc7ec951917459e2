//! `wirelint report merge A B … -o ALL`: one report from several runs — the
//! shards of a CI suite, or the sidecars of a fleet, each of which saw part
//! of the traffic. What merges how is in `docs/report-schema.md`:
//! - counters, pattern and shape counts, errors and partitions add up;
//! - latency histograms merge (percentiles are read from the merged
//!   histogram; older reports have none, and then each
//!   percentile is the largest of the runs', an upper bound);
//! - findings are deduplicated by key: occurrences add, the severity is
//!   the highest seen, first/last seen widen, the patterns where it was
//!   seen are united, and its evidence is combined (numbers: the largest,
//!   as evidence records a worst case; lists: united; the rest from the
//!   worst, latest sighting); `evidence.runs` says in how many runs it was
//!   found;
//! - verdicts and `fix_first` are worked out again over the merged
//!   findings, as for one run.
//!
//! A merge does not run the rules again: a finding that needs evidence no
//! single run had (an N+1 whose lists were split across two shards) is not
//! raised by merging.

use super::{
    buckets, group, link, per_invocation, sort_patterns, Latency, PatternReport, Report, Run,
};
use crate::analysis::suite::TestCount;
use crate::rules::Finding;
use hdrhistogram::Histogram;
use serde_json::Value;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// Lists in evidence keep at most this many entries when united.
const MAX_EVIDENCE_LIST: usize = 16;
/// A finding lists at most this many patterns (as in one run).
const MAX_PATTERNS: usize = 16;

/// Merges reports into one. `None` for an empty list.
pub fn merge(reports: &[Report]) -> Option<Report> {
    let first = reports.first()?;
    let mut runs: Vec<Run> = Vec::new();
    for r in reports {
        if r.runs.is_empty() {
            runs.push(Run {
                started_at: r.started_at.clone(),
                generated_at: r.generated_at.clone(),
                upstream: r.upstream.clone(),
                wirelint_version: r.wirelint_version.clone(),
            });
        } else {
            runs.extend(r.runs.iter().cloned());
        }
    }
    let mut upstreams: Vec<&str> = runs.iter().map(|r| r.upstream.as_str()).collect();
    upstreams.sort_unstable();
    upstreams.dedup();

    // By key; with how many runs found each (a merged report says so in
    // `evidence.runs`, a single run's finding counts once).
    let mut findings: BTreeMap<String, (Finding, u64)> = BTreeMap::new();
    for f in reports.iter().flat_map(|r| &r.findings) {
        let runs = f.evidence.get("runs").and_then(Value::as_u64).unwrap_or(1);
        match findings.entry(f.key()) {
            Entry::Vacant(e) => {
                e.insert((f.clone(), runs));
            }
            Entry::Occupied(mut e) => {
                let (kept, n) = e.get_mut();
                *n += runs;
                merge_finding(kept, f);
            }
        }
    }
    let mut findings: Vec<Finding> = findings
        .into_values()
        .map(|(mut f, n)| {
            f.fix_first = None;
            if n > 1 || f.evidence.contains_key("runs") {
                f.evidence.insert("runs".into(), Value::from(n));
            }
            f
        })
        .collect();
    group(&mut findings);

    // Keyed (up to 2,000 patterns and 10,000 shapes per report), then put
    // in the report's order.
    let mut patterns: BTreeMap<&str, PatternReport> = BTreeMap::new();
    for p in reports.iter().flat_map(|r| &r.patterns) {
        match patterns.entry(&p.name) {
            Entry::Vacant(e) => {
                e.insert(p.clone());
            }
            Entry::Occupied(mut e) => merge_pattern(e.get_mut(), p),
        }
    }
    let mut patterns: Vec<PatternReport> = patterns.into_values().collect();
    link(&mut patterns, &findings);
    sort_patterns(&mut patterns);

    let mut shapes: BTreeMap<&str, super::ShapeReport> = BTreeMap::new();
    for s in reports.iter().flat_map(|r| &r.shapes) {
        shapes
            .entry(&s.id)
            .and_modify(|t| {
                // Per operation, weighted by each run's count.
                t.request_units_per_operation =
                    match (t.request_units_per_operation, s.request_units_per_operation) {
                        (Some(a), Some(b)) if t.count + s.count > 0 => Some(
                            ((a * t.count as f64 + b * s.count as f64)
                                / (t.count + s.count) as f64
                                * 100.0)
                                .round()
                                / 100.0,
                        ),
                        (a, b) => a.or(b),
                    };
                t.count += s.count;
            })
            .or_insert_with(|| s.clone());
    }
    let mut shapes: Vec<super::ShapeReport> = shapes.into_values().collect();
    shapes.sort_by(|a, b| b.count.cmp(&a.count).then(a.text.cmp(&b.text)));

    let mut counters = first.counters.clone();
    for r in &reports[1..] {
        add_counters(&mut counters, &r.counters);
    }
    counters.set_analysed_share();
    // A key from a config file wins over one learnt from traffic; among
    // equals, the later run's.
    let mut partition_keys: BTreeMap<String, crate::analysis::partition::PartitionKey> =
        BTreeMap::new();
    for r in reports {
        for (ns, key) in &r.partition_keys {
            let config = crate::analysis::partition::KeySource::Config;
            let kept_from_config = partition_keys.get(ns).is_some_and(|k| k.source == config);
            if key.source == config || !kept_from_config {
                partition_keys.insert(ns.clone(), key.clone());
            }
        }
    }

    // Each run saw its own databases (one per worker, say): added up.
    let mut folded: BTreeMap<String, crate::analysis::databases::FoldedDatabase> = BTreeMap::new();
    for f in reports.iter().flat_map(|r| &r.folded_databases) {
        folded
            .entry(f.name.clone())
            .and_modify(|t| {
                t.databases += f.databases;
                t.at_least |= f.at_least;
            })
            .or_insert_with(|| f.clone());
    }

    // Each run's tests: a test run by two workers' proxies adds up.
    let mut tests: Vec<crate::analysis::suite::TestInfo> = Vec::new();
    for t in reports.iter().flat_map(|r| &r.tests) {
        match tests.iter_mut().find(|k| k.id == t.id) {
            Some(k) => k.operations += t.operations,
            None => tests.push(t.clone()),
        }
    }

    Some(Report {
        tests,
        folded_databases: folded.into_values().collect(),
        schema: super::SCHEMA.to_string(),
        wirelint_version: env!("CARGO_PKG_VERSION").to_string(),
        generated_at: runs
            .iter()
            .map(|r| r.generated_at.clone())
            .max()
            .unwrap_or_default(),
        started_at: runs
            .iter()
            .map(|r| r.started_at.clone())
            .min()
            .unwrap_or_default(),
        upstream: upstreams.join(", "),
        counters,
        patterns,
        shapes,
        findings,
        partition_keys,
        runs,
        // Set over detected over the default; among equals, the last run's.
        target: reports
            .iter()
            .map(|r| r.target)
            .max_by_key(|t| match t.source {
                crate::analysis::target::TargetSource::Set => 2,
                crate::analysis::target::TargetSource::Detected => 1,
                crate::analysis::target::TargetSource::Default => 0,
            })
            .unwrap_or_default(),
    })
}

fn add_map(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, n) in from {
        *into.entry(k.clone()).or_default() += n;
    }
}

fn add_counters(into: &mut super::Counters, from: &super::Counters) {
    into.connections += from.connections;
    into.requests += from.requests;
    into.replies += from.replies;
    into.operations += from.operations;
    into.analysis_dropped += from.analysis_dropped;
    into.analysis_shed += from.analysis_shed;
    into.analysis_cpu.add(&from.analysis_cpu);
    into.forgotten_requests += from.forgotten_requests;
    into.decode_errors += from.decode_errors;
    into.findings_dropped += from.findings_dropped;
    into.rejected_operations += from.rejected_operations;
    into.throttled_operations += from.throttled_operations;
    into.analysis_panics += from.analysis_panics;
    add_map(&mut into.commands, &from.commands);
    add_map(&mut into.skipped, &from.skipped);
    add_map(&mut into.rule_panics, &from.rule_panics);
    // Memory tables are per process: entries, bytes and evictions add up
    // (the fleet's total), the limit is the largest one process had.
    for t in &from.tables {
        match into.tables.iter_mut().find(|u| u.table == t.table) {
            None => into.tables.push(t.clone()),
            Some(u) => {
                u.entries += t.entries;
                u.bytes += t.bytes;
                u.evicted += t.evicted;
                u.max_bytes = u.max_bytes.max(t.max_bytes);
            }
        }
    }
}

fn union<T: PartialEq + Clone>(into: &mut Vec<T>, from: &[T], cap: usize) {
    for x in from {
        if into.len() >= cap {
            break;
        }
        if !into.contains(x) {
            into.push(x.clone());
        }
    }
}

fn merge_pattern(into: &mut PatternReport, from: &PatternReport) {
    union(&mut into.namespaces, &from.namespaces, usize::MAX);
    union(&mut into.shapes, &from.shapes, usize::MAX);
    if into.sequence.is_empty() {
        into.sequence = from.sequence.clone();
        into.follow_ups = from.follow_ups.clone();
    }
    let both_measured = (into.invocations == 0 || !into.latency_histogram.is_empty())
        && (from.invocations == 0 || !from.latency_histogram.is_empty());
    if both_measured {
        let mut h = histogram(&into.latency_histogram);
        for [value, count] in &from.latency_histogram {
            let _ = h.record_n(*value, *count);
        }
        into.latency_us = Latency::of(&h);
        into.latency_histogram = buckets(&h);
    } else {
        // A report without buckets: the largest of each, an upper bound.
        let (a, b) = (&mut into.latency_us, &from.latency_us);
        a.p50 = a.p50.max(b.p50);
        a.p95 = a.p95.max(b.p95);
        a.p99 = a.p99.max(b.p99);
        a.max = a.max.max(b.max);
        into.latency_histogram.clear();
    }
    // Older reports have no estimate: their calls are all they saw.
    let before = into.estimated_invocations.max(into.invocations);
    into.invocations += from.invocations;
    into.estimated_invocations = before + from.estimated_invocations.max(from.invocations);
    into.analysis_us += from.analysis_us;
    into.set_analysed_share();
    into.round_trips += from.round_trips;
    into.round_trips_per_invocation = per_invocation(into.round_trips, into.invocations);
    into.docs_returned += from.docs_returned;
    into.bytes_returned += from.bytes_returned;
    add_map(&mut into.errors, &from.errors);
    into.throttled += from.throttled;
    // Request units add up; a run that priced none adds nothing.
    into.request_units = match (&into.request_units, &from.request_units) {
        (None, None) => None,
        (a, b) => {
            let total = |r: &Option<super::RequestUnits>| r.as_ref().map_or(0.0, |r| r.total);
            Some(super::RequestUnits::of(
                total(a) + total(b),
                into.invocations,
            ))
        }
    };
    let (p, q) = (&mut into.partitions, &from.partitions);
    p.single_shard += q.single_shard;
    p.multi_shard += q.multi_shard;
    p.scatter_gather += q.scatter_gather;
    p.unknown += q.unknown;
    if from.last_trace_id.is_some() {
        into.last_trace_id = from.last_trace_id.clone();
    }
    add_tests(&mut into.tests, &from.tests);
}

/// Adds `from`'s test counts to `into`'s, most first.
fn add_tests(into: &mut Vec<TestCount>, from: &[TestCount]) {
    for t in from {
        match into.iter_mut().find(|c| c.test == t.test) {
            Some(c) => c.operations += t.operations,
            None => into.push(t.clone()),
        }
    }
    *into = super::most_first(std::mem::take(into));
}

fn histogram(buckets: &[[u64; 2]]) -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, crate::analysis::patterns::LATENCY_MAX_MICROS, 2)
        .expect("valid histogram bounds");
    for [value, count] in buckets {
        let _ = h.record_n(*value, *count);
    }
    h
}

/// Combines a sighting of the same finding (same key) from another run.
fn merge_finding(kept: &mut Finding, other: &Finding) {
    // The base (message, advice, pattern, shape, non-numeric evidence) is
    // the worst sighting, the latest among equals.
    let other_is_base = (other.severity, &other.last_seen) > (kept.severity, &kept.last_seen);
    let (mut base, extra) = if other_is_base {
        (other.clone(), &*kept)
    } else {
        (kept.clone(), other)
    };
    for (k, v) in &extra.evidence {
        if k == "runs" {
            continue;
        }
        match (base.evidence.get_mut(k), v) {
            (None, v) => {
                base.evidence.insert(k.clone(), v.clone());
            }
            (Some(Value::Number(a)), Value::Number(b)) if b.as_f64() > a.as_f64() => {
                *a = b.clone();
            }
            (Some(Value::Array(a)), Value::Array(b)) => union(a, b, MAX_EVIDENCE_LIST),
            _ => {}
        }
    }
    base.occurrences = kept.occurrences + other.occurrences;
    base.databases = match (kept.databases, other.databases) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    base.first_seen = kept.first_seen.clone().min(other.first_seen.clone());
    base.last_seen = kept.last_seen.clone().max(other.last_seen.clone());
    let mut patterns = base.patterns.clone();
    union(&mut patterns, &extra.patterns, MAX_PATTERNS);
    base.patterns = patterns;
    let mut tests = kept.tests.clone();
    add_tests(&mut tests, &other.tests);
    base.tests = tests;
    *kept = base;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::patterns::{NamedBy, Partitions};
    use crate::rules::Severity;

    pub(crate) fn report(patterns: Vec<PatternReport>, findings: Vec<Finding>) -> Report {
        Report {
            schema: crate::report::SCHEMA.into(),
            wirelint_version: "0".into(),
            generated_at: "2026-01-01T00:00:10Z".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            upstream: "mongodb://db:27017/".into(),
            counters: Default::default(),
            patterns,
            shapes: Vec::new(),
            findings,
            partition_keys: Default::default(),
            runs: Vec::new(),
            folded_databases: Vec::new(),
            tests: Vec::new(),
            target: Default::default(),
        }
    }

    fn pattern(name: &str, invocations: u64, latencies: &[u64]) -> PatternReport {
        let mut h = histogram(&[]);
        for l in latencies {
            h.record(*l).unwrap();
        }
        PatternReport {
            name: name.into(),
            named_by: NamedBy::Comment,
            namespaces: vec!["db.c".into()],
            shapes: vec!["a".into()],
            sequence: vec!["a".into()],
            follow_ups: Vec::new(),
            invocations,
            estimated_invocations: invocations,
            analysed_share: 1.0,
            round_trips: invocations * 2,
            round_trips_per_invocation: 2.0,
            latency_us: Latency::of(&h),
            latency_histogram: buckets(&h),
            docs_returned: invocations,
            bytes_returned: 100 * invocations,
            errors: Default::default(),
            partitions: Partitions {
                single_shard: invocations,
                ..Default::default()
            },
            findings: Vec::new(),
            verdict: "ok".into(),
            last_trace_id: None,
            tests: Vec::new(),
            analysis_us: 2.0 * invocations as f64,
            analysis_us_per_invocation: 2.0,
            request_units: None,
            throttled: 0,
        }
    }

    pub(crate) fn finding(
        severity: Severity,
        occurrences: u64,
        seen: &str,
        n: u64,
        pattern: &str,
    ) -> Finding {
        Finding {
            rule: "WL102".into(),
            name: "large-array".into(),
            severity,
            namespace: "db.c".into(),
            subject: "tags".into(),
            pattern: Some(pattern.into()),
            shape: None,
            patterns: vec![pattern.into()],
            message: format!("seen {n}"),
            evidence: [("max_length".to_string(), Value::from(n))].into(),
            advice: String::new(),
            source: String::new(),
            docs: String::new(),
            occurrences,
            first_seen: seen.into(),
            last_seen: seen.into(),
            fix_first: None,
            databases: None,
            tests: Vec::new(),
        }
    }

    #[test]
    fn counts_add_and_latency_merges_exactly() {
        let a = report(vec![pattern("Q1", 3, &[100, 200, 300])], vec![]);
        let b = report(vec![pattern("Q1", 2, &[400, 50_000])], vec![]);
        let whole = pattern("Q1", 5, &[100, 200, 300, 400, 50_000]);
        let m = merge(&[a, b]).unwrap();
        let q = &m.patterns[0];
        assert_eq!(q.invocations, 5);
        assert_eq!(q.round_trips, 10);
        assert_eq!(q.partitions.single_shard, 5);
        assert_eq!((q.analysis_us, q.analysis_us_per_invocation), (10.0, 2.0));
        assert_eq!(q.latency_us, whole.latency_us);
        assert_eq!(q.latency_histogram, whole.latency_histogram);
        assert_eq!(m.runs.len(), 2);
        assert_eq!(m.upstream, "mongodb://db:27017/");
    }

    /// Two proxies' analysis CPU adds up, and the share and the cost per
    /// request are those of the sums, not an average of the ratios.
    #[test]
    fn the_analysis_cpu_of_two_runs_adds_up() {
        let mut a = report(vec![], vec![]);
        let mut b = report(vec![], vec![]);
        a.counters.analysis_cpu = super::super::AnalysisCpu::new(1.0, 4.0, 1_000_000);
        b.counters.analysis_cpu = super::super::AnalysisCpu::new(3.0, 6.0, 1_000_000);
        assert_eq!(
            (
                a.counters.analysis_cpu.share,
                a.counters.analysis_cpu.us_per_request
            ),
            (0.25, 1.0)
        );
        let cpu = merge(&[a, b]).unwrap().counters.analysis_cpu;
        assert_eq!((cpu.analysis_seconds, cpu.process_seconds), (4.0, 10.0));
        assert_eq!(cpu.analysed_requests, 2_000_000);
        assert_eq!((cpu.share, cpu.us_per_request), (0.4, 2.0));
    }

    #[test]
    fn findings_deduplicate_with_evidence_combined() {
        let a = report(
            vec![pattern("Q1", 1, &[10])],
            vec![finding(
                Severity::Info,
                2,
                "2026-01-01T00:00:05Z",
                400,
                "Q1",
            )],
        );
        let b = report(
            vec![pattern("Q2", 1, &[10])],
            vec![finding(
                Severity::Warning,
                3,
                "2026-01-01T00:00:01Z",
                90,
                "Q2",
            )],
        );
        let m = merge(&[a.clone(), b]).unwrap();
        assert_eq!(m.findings.len(), 1);
        let f = &m.findings[0];
        assert_eq!(f.occurrences, 5);
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.message, "seen 90", "the worst sighting is the base");
        assert_eq!(f.evidence["max_length"], Value::from(400));
        assert_eq!(f.evidence["runs"], Value::from(2));
        assert_eq!(f.first_seen, "2026-01-01T00:00:01Z");
        assert_eq!(f.last_seen, "2026-01-01T00:00:05Z");
        assert_eq!(f.patterns, vec!["Q2".to_string(), "Q1".to_string()]);
        // The warning now marks both patterns ⚠.
        assert!(m.patterns.iter().all(|p| p.verdict == "warn"));
        // Merging a merged report with another run counts runs, not reports.
        let again = merge(&[m, a]).unwrap();
        assert_eq!(again.findings[0].evidence["runs"], Value::from(3));
        assert_eq!(again.runs.len(), 3);
    }

    #[test]
    fn reports_without_histograms_give_an_upper_bound() {
        let mut a = pattern("Q1", 1, &[100]);
        a.latency_histogram.clear();
        let b = pattern("Q1", 1, &[900]);
        let slower = b.latency_us.p50;
        assert!(slower > a.latency_us.p50);
        let m = merge(&[report(vec![a], vec![]), report(vec![b], vec![])]).unwrap();
        assert_eq!(m.patterns[0].latency_us.p50, slower);
        assert!(m.patterns[0].latency_histogram.is_empty());
    }

    /// Each run's folded databases add up, a finding on a folded namespace
    /// says how many databases showed it, and the text says what was
    /// folded and how many patterns the memory limit dropped.
    #[test]
    fn folded_databases_add_up_and_the_text_says_so() {
        use crate::analysis::databases::FoldedDatabase;
        let folded = |n| FoldedDatabase {
            name: "app_test_*".into(),
            databases: n,
            at_least: false,
        };
        let mut f = finding(Severity::Warning, 1, "2026-01-01T00:00:05Z", 3, "Q1");
        f.namespace = "app_test_*.c".into();
        f.databases = Some(4);
        let mut a = report(vec![pattern("Q1", 1, &[10])], vec![f.clone()]);
        a.folded_databases = vec![folded(4)];
        a.counters.tables = vec![crate::analysis::budget::PoolUsage {
            table: "patterns".into(),
            entries: 10,
            bytes: 100,
            max_bytes: 100,
            evicted: 7,
        }];
        f.databases = Some(3);
        let mut b = report(vec![pattern("Q1", 1, &[10])], vec![f]);
        b.folded_databases = vec![folded(3)];
        let m = merge(&[a, b]).unwrap();
        assert_eq!(m.folded_databases, vec![folded(7)]);
        assert_eq!(m.findings[0].databases, Some(7));
        let text = crate::report::table::text(&m);
        assert!(
            text.contains("Folded 7 databases named per test or per worker into app_test_*"),
            "{text}"
        );
        assert!(text.contains("app_test_*.c (in 7 databases)"), "{text}");
        assert!(text.contains("dropped 7 patterns"), "{text}");
    }
}
