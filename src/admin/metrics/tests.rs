//! The tests of `/metrics`: every family written, well formed, capped.

use super::labelled::{CallHistogram, LATENCY_BUCKETS};
use super::*;
use crate::analysis::engine::Engine;
use crate::analysis::findings::{Finding, Severity};
use crate::analysis::knowledge::Knowledge;
use crate::analysis::namespaces::Caps;
use crate::analysis::rule::RuleSettings;
use crate::stats::{Direction, Stats};
use crate::wire::op_msg::encode;
use crate::wire::OpCode;
use bson::rawdoc;
use bytes::Bytes;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A scrape of counters and a report that have a value in every family,
/// with label values that need escaping.
fn sample() -> String {
    let (state, report) = sample_report();
    render_metrics(&state, &report)
}

/// The counters and report [`sample`] renders.
fn sample_report() -> (AdminState, Report) {
    let knowledge = Arc::new(Mutex::new(Knowledge::new(
        crate::rules::all(),
        RuleSettings::default(),
        false,
        Caps::default(),
    )));
    let mut engine = Engine::new(knowledge.clone(), None);
    let t = Instant::now();
    for (id, pattern) in [(1, "P1"), (3, "say \"hi\"\\n")] {
        let find = rawdoc! {"find": "c", "filter": {"a": 1}, "comment": pattern, "$db": "d"};
        let request = encode(id, 0, 0, find.as_bytes(), &[]);
        engine.message(1, Direction::Request, t, Bytes::from(request));
        let reply = rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": []}, "ok": 1.0};
        let reply = encode(id + 1, id, 0, reply.as_bytes(), &[]);
        engine.message(1, Direction::Reply, t, Bytes::from(reply));
    }
    engine.flush();

    let stats = Arc::new(Stats::default());
    stats.connections_accepted.store(7, Relaxed);
    stats.connections_active.store(-1, Relaxed);
    stats.frames[Direction::Request.index()].store(11, Relaxed);
    stats.bytes[Direction::Reply.index()].store(4096, Relaxed);
    stats.buffer_bytes.store(65536, Relaxed);
    stats.frame_error("length_too_short");
    {
        let mut analysis = stats.analysis.lock().unwrap();
        analysis
            .messages
            .insert((Direction::Request, OpCode::Msg), 5);
        analysis.commands.insert("find".into(), 5);
        analysis.decode_errors.insert("too_deep", 2);
    }
    let state = AdminState::new(stats, knowledge, "u".into(), None).exporting_otlp();
    state
        .otlp
        .as_ref()
        .unwrap()
        .records_dropped
        .store(4, Relaxed);
    let mut report = state.report();
    report.counters.rule_panics.insert("R\"1".into(), 3);
    report
        .findings
        .push(finding("WL103", Severity::Warning, "d.c", &[], "t"));
    report.findings.push(finding(
        "WL401",
        Severity::Warning,
        "d.u\"s",
        &["Q4", "Q\n5"],
        "2023-11-14T22:13:20Z",
    ));
    report.findings.push(finding(
        "WL401",
        Severity::Warning,
        "d.u\"s",
        &["Q4"],
        "2023-11-14T22:13:10Z",
    ));
    (state, report)
}

/// A finding of `rule` in `namespace`, seen in `patterns` first at
/// `first_seen`.
fn finding(
    rule: &str,
    severity: Severity,
    namespace: &str,
    patterns: &[&str],
    first_seen: &str,
) -> Finding {
    Finding {
        rule: rule.into(),
        name: "n".into(),
        severity,
        namespace: namespace.into(),
        subject: format!("{namespace} {patterns:?}"),
        pattern: patterns.first().map(|p| p.to_string()),
        shape: None,
        patterns: patterns.iter().map(|p| p.to_string()).collect(),
        message: "m".into(),
        evidence: Default::default(),
        advice: "a".into(),
        source: "s".into(),
        docs: "d".into(),
        occurrences: 1,
        first_seen: first_seen.into(),
        last_seen: first_seen.into(),
        fix_first: None,
        databases: None,
        tests: Vec::new(),
    }
}

#[test]
fn every_family_has_its_help_type_and_series() {
    let text = sample();
    for line in [
        "# HELP wirelint_connections_accepted_total Client connections accepted.",
        "# TYPE wirelint_connections_accepted_total counter",
        "wirelint_connections_accepted_total 7",
        "wirelint_connections_active -1",
        "wirelint_forwarded_messages_total{direction=\"request\"} 11",
        "wirelint_forwarded_bytes_total{direction=\"reply\"} 4096",
        "wirelint_frame_errors_total{kind=\"length_too_short\"} 1",
        "wirelint_messages_total{direction=\"request\",opcode=\"OP_MSG\"} 5",
        "wirelint_commands_total{command=\"find\"} 5",
        "wirelint_forward_buffer_bytes 65536",
        "wirelint_analysis_analysed_ratio 1",
        "wirelint_otlp_records_sent_total 0",
        "wirelint_otlp_records_dropped_total 4",
        "wirelint_analysis_decode_errors_total{kind=\"too_deep\"} 2",
        "wirelint_rule_panics_total{rule=\"R\\\"1\"} 3",
        "wirelint_operations_total{namespace=\"d.c\",command=\"find\"} 2",
        "# TYPE wirelint_pattern_latency_seconds summary",
        "wirelint_pattern_latency_seconds_count{pattern=\"P1\"} 1",
        "wirelint_pattern_latency_seconds_count{pattern=\"say \\\"hi\\\"\\\\n\"} 1",
        "wirelint_pattern_round_trips_total{pattern=\"P1\"} 1",
        "# TYPE wirelint_analysis_table_evictions_total counter",
        "wirelint_findings{rule=\"WL103\",severity=\"warning\"} 1",
        "wirelint_findings{rule=\"WL401\",severity=\"warning\"} 2",
        "# TYPE wirelint_pattern_call_duration_seconds histogram",
        "wirelint_pattern_call_duration_seconds_count{pattern=\"P1\"} 1",
        "wirelint_pattern_call_duration_seconds_bucket{pattern=\"P1\",le=\"+Inf\"} 1",
        "wirelint_pattern_call_duration_seconds_bucket{pattern=\"say \\\"hi\\\"\\\\n\",le=\"10\"} 1",
        "# TYPE wirelint_finding gauge",
        "wirelint_finding{rule=\"WL103\",severity=\"warning\",namespace=\"d.c\",pattern=\"\"} 1",
        "wirelint_finding{rule=\"WL401\",severity=\"warning\",namespace=\"d.u\\\"s\",pattern=\"Q4\"} 2",
        "wirelint_finding{rule=\"WL401\",severity=\"warning\",namespace=\"d.u\\\"s\",pattern=\"Q\\n5\"} 1",
        "wirelint_finding_first_seen_timestamp_seconds{rule=\"WL401\",severity=\"warning\",namespace=\"d.u\\\"s\",pattern=\"Q4\"} 1699999990",
        "wirelint_finding_first_seen_timestamp_seconds{rule=\"WL401\",severity=\"warning\",namespace=\"d.u\\\"s\",pattern=\"Q\\n5\"} 1700000000",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
    assert!(text.contains("wirelint_pattern_latency_seconds{pattern=\"P1\",quantile=\"0.99\"} "));
    assert!(text.contains("wirelint_analysis_table_entries{table=\"patterns\"} "));
    // A finding whose first sighting is unknown has no timestamp.
    assert!(!text.contains("wirelint_finding_first_seen_timestamp_seconds{rule=\"WL103\""));
}

/// Each pattern's histogram is cumulative, ends with its call count,
/// and its buckets hold the calls at or under their bound.
#[test]
fn call_histograms_are_cumulative_up_to_the_calls() {
    let text = sample();
    let buckets: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("wirelint_pattern_call_duration_seconds_bucket{pattern=\"P1\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1);
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(buckets.last(), Some(&1));

    let mut h = CallHistogram::default();
    let mut p = sample_report().1.patterns[0].clone();
    p.invocations = 4;
    p.latency_histogram = vec![[400, 1], [1_000, 2], [20_000_000, 1]];
    h.add(&p);
    let mut series = Vec::new();
    h.push(&mut series, "p");
    let value = |le: &str| {
        series
            .iter()
            .find(|s| s.labels.iter().any(|(k, v)| *k == "le" && v == le))
            .map(|s| s.value.to_string())
            .unwrap()
    };
    assert_eq!(value("0.0005"), "1");
    assert_eq!(value("0.001"), "3");
    assert_eq!(
        value("10"),
        "3",
        "a call over the last bound is only in +Inf"
    );
    assert_eq!(value("+Inf"), "4");
    let sum = series.iter().find(|s| s.suffix == "_sum").unwrap();
    assert_eq!(sum.value.to_string(), "20.0024");
}

/// Past `MAX_FINDING_SERIES` label sets, the rest are added up per rule
/// and severity: errors keep their own series before warnings.
#[test]
fn finding_series_are_capped_gravest_first() {
    let (state, mut report) = sample_report();
    report.findings.clear();
    for i in 0..MAX_FINDING_SERIES + 50 {
        let ns = format!("d.c{i:04}");
        let t = "2023-11-14T22:13:20Z";
        report
            .findings
            .push(finding("WL401", Severity::Warning, &ns, &["Q"], t));
    }
    let t = "2023-11-14T22:13:00Z";
    report
        .findings
        .push(finding("WL101", Severity::Error, "d.zzz", &["Q"], t));
    let text = render_metrics(&state, &report);
    let finding_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("wirelint_finding{"))
        .collect();
    assert_eq!(finding_lines.len(), MAX_FINDING_SERIES + 1);
    assert!(text.contains(
        "wirelint_finding{rule=\"WL101\",severity=\"error\",namespace=\"d.zzz\",pattern=\"Q\"} 1"
    ));
    assert!(text.contains(
        "wirelint_finding{rule=\"WL401\",severity=\"warning\",namespace=\"(other)\",pattern=\"(other)\"} 51"
    ));
    assert!(text.contains(
        "wirelint_finding_first_seen_timestamp_seconds{rule=\"WL401\",severity=\"warning\",namespace=\"(other)\",pattern=\"(other)\"} 1700000000"
    ));
    assert!(text.contains("wirelint_findings{rule=\"WL401\",severity=\"warning\"} 550"));
}

/// The text format's syntax, as far as scrapers rely on it: each
/// family's HELP and TYPE come once, before its series, and every
/// series line is a known family's name, optional labels, and a number.
#[test]
fn the_exposition_is_well_formed() {
    let text = sample();
    let mut families: Vec<&str> = Vec::new();
    let mut current = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(!families.contains(&name), "{name} twice");
            families.push(name);
            current = name;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert_eq!(name, current, "TYPE after its own HELP");
            assert!(
                ["counter", "gauge", "summary", "histogram"].contains(&kind),
                "{line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("value of {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name == current
                || ["_count", "_sum", "_bucket"]
                    .iter()
                    .any(|suffix| name.strip_suffix(suffix) == Some(current)),
            "{line:?} outside its family {current}"
        );
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            assert!(
                labels.starts_with('{') && labels.ends_with("\"}"),
                "{line:?}"
            );
        }
    }
    assert_eq!(families.len(), FAMILIES.len());
}

/// The analysis's own cost: its CPU, wirelint's, the share and the
/// cost per request, from the report's counters.
#[test]
fn the_analysis_cost_is_exposed() {
    let (state, mut report) = sample_report();
    report.counters.analysis_cpu = crate::report::AnalysisCpu::new(0.5, 2.0, 250_000);
    assert!(render_metrics(&state, &report)
        .lines()
        .any(|l| l == "wirelint_analysis_cpu_budget_ratio 0"));
    state.stats.analysis_cpu_budget_ppm.store(100_000, Relaxed);
    let text = render_metrics(&state, &report);
    for line in [
        "wirelint_analysis_cpu_budget_ratio 0.1",
        "wirelint_analysis_cpu_seconds_total 0.5",
        "process_cpu_seconds_total 2",
        "wirelint_analysis_cpu_ratio 0.25",
        "wirelint_analysis_cpu_per_request_seconds 0.000002",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    }
}
