//! `/metrics`: the counters and the report in the Prometheus text format
//! (version 0.0.4), for scrapers.
//!
//! Every family is one row of [`FAMILIES`]: its name, type, help, and a
//! function that gives its series from what a scrape sees (the counters'
//! snapshot and the report). One writer turns the rows into text, so the
//! format's rules (a `# HELP` and `# TYPE` line before each family's
//! series, label values escaped) are kept in one place, and adding a metric
//! is adding a row.
//!
//! Why not the `prometheus-client` crate: it writes OpenMetrics only, where
//! a counter's family is named without `_total`; served as the text format
//! (which every scraper reads), such counters lose their type and help
//! (`promtool check metrics` calls them untyped), and served as OpenMetrics
//! the Content-Type changes under existing scrapers. It has no summary type
//! either, which `wirelint_pattern_latency_seconds` is, and leaves label
//! values to the caller to escape.
//!
//! Labels that come from the traffic (namespaces, pattern names) are
//! capped: only the busiest [`MAX_LABELS`] get series of their own, the rest
//! are added up under `(other)`, so a scrape stays small however many a
//! client makes up. Findings are capped by their own count instead (a
//! finding on a quiet namespace matters as much as one on a busy one): the
//! first [`MAX_FINDING_SERIES`] label sets, gravest first, get series of
//! their own; the rest are added up per rule and severity under
//! `namespace="(other)", pattern="(other)"`.
//!
//! For a fleet (one wirelint per application instance, scraped together),
//! every family adds up across instances: counters and gauges by `sum`, a
//! pattern's latency through the `wirelint_pattern_call_duration_seconds`
//! histogram's buckets (the older summary's quantiles cannot be added), an
//! open finding by `count` of its `wirelint_finding` series.

use super::AdminState;
use crate::analysis::budget::PoolUsage;
use crate::analysis::findings::Severity;
use crate::report::Report;
use crate::stats::StatsSnapshot;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};

/// The Content-Type of [`render_metrics`]' text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Namespaces and patterns with series of their own in `/metrics`, at most.
pub const MAX_LABELS: usize = 100;
/// The label the others are added up under.
const OTHER: &str = "(other)";
/// Label values are cut to this many characters.
const MAX_LABEL_CHARS: usize = 160;
/// `wirelint_finding` label sets with series of their own, at most.
pub const MAX_FINDING_SERIES: usize = 500;
/// The upper bounds (`le`, seconds) of the call-latency histogram's
/// buckets, and the same in microseconds.
const LATENCY_BUCKETS: [(&str, u64); 14] = [
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

/// The whole exposition for one scrape: the counters as they are now and
/// `report` (the analysis' view, rebuilt at most once a second).
pub fn render_metrics(state: &AdminState, report: &Report) -> String {
    let mut scrape = Scrape::new(state.stats.snapshot(), report);
    scrape.otlp = state.otlp.as_deref();
    let mut out = String::with_capacity(4096);
    for family in FAMILIES {
        // Writing to a String cannot fail.
        let _ = family.write(&mut out, &scrape);
    }
    out
}

/// What a scrape reads: the counters, the report, and which traffic labels
/// have series of their own.
struct Scrape<'a> {
    stats: StatsSnapshot,
    report: &'a Report,
    namespaces: BTreeSet<&'a str>,
    patterns: BTreeSet<&'a str>,
    /// The OTLP export's counters, when it runs.
    otlp: Option<&'a super::otlp::Counters>,
}

impl<'a> Scrape<'a> {
    fn new(stats: StatsSnapshot, report: &'a Report) -> Scrape<'a> {
        let mut by_namespace: BTreeMap<&str, u64> = BTreeMap::new();
        for shape in &report.shapes {
            *by_namespace.entry(&shape.namespace).or_default() += shape.count;
        }
        let by_pattern = report
            .patterns
            .iter()
            .map(|p| (p.name.as_str(), p.round_trips))
            .collect();
        Scrape {
            stats,
            report,
            namespaces: busiest(by_namespace),
            patterns: busiest(by_pattern),
            otlp: None,
        }
    }
}

/// The `MAX_LABELS` busiest names (ties broken by name, so scrapes agree).
fn busiest(counts: BTreeMap<&str, u64>) -> BTreeSet<&str> {
    let mut ranked: Vec<(&str, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked
        .into_iter()
        .take(MAX_LABELS)
        .map(|(k, _)| k)
        .collect()
}

/// A metric family's type.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Summary,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample's value, written as Rust writes the number (integers without
/// a point; `1` for a float that is whole).
#[derive(Clone, Copy)]
enum Value {
    Count(u64),
    Signed(i64),
    Real(f64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Count(v) => v.fmt(f),
            Value::Signed(v) => v.fmt(f),
            Value::Real(v) => v.fmt(f),
        }
    }
}

/// One sample: a suffix to the family's name (`_count` of a summary), its
/// labels (values unescaped) and its value.
struct Series {
    suffix: &'static str,
    labels: Vec<(&'static str, String)>,
    value: Value,
}

impl Series {
    fn new(labels: Vec<(&'static str, String)>, value: Value) -> Series {
        Series {
            suffix: "",
            labels,
            value,
        }
    }
}

/// One row of [`FAMILIES`].
struct Family {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    series: fn(&Scrape<'_>) -> Vec<Series>,
}

impl Family {
    /// The family's `# HELP` and `# TYPE` lines, then its series.
    fn write(&self, out: &mut String, scrape: &Scrape<'_>) -> fmt::Result {
        let name = self.name;
        writeln!(out, "# HELP {name} {}", self.help)?;
        writeln!(out, "# TYPE {name} {}", self.kind.as_str())?;
        for series in (self.series)(scrape) {
            out.push_str(name);
            out.push_str(series.suffix);
            for (i, (key, value)) in series.labels.iter().enumerate() {
                out.push(if i == 0 { '{' } else { ',' });
                out.push_str(key);
                out.push_str("=\"");
                escape_label(out, value);
                out.push('"');
            }
            if !series.labels.is_empty() {
                out.push('}');
            }
            writeln!(out, " {}", series.value)?;
        }
        Ok(())
    }
}

/// Writes a label value escaped for the text format (`\`, `"` and newlines),
/// cut to [`MAX_LABEL_CHARS`].
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars().take(MAX_LABEL_CHARS) {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A family's one series, without labels.
fn one(value: Value) -> Vec<Series> {
    vec![Series::new(Vec::new(), value)]
}

/// One of the OTLP export's counters, when it runs; no series otherwise.
fn otlp(
    scrape: &Scrape<'_>,
    counter: fn(&super::otlp::Counters) -> &std::sync::atomic::AtomicU64,
) -> Vec<Series> {
    scrape.otlp.map_or_else(Vec::new, |c| {
        one(Value::Count(
            counter(c).load(std::sync::atomic::Ordering::Relaxed),
        ))
    })
}

/// One series per entry of `counts`, labelled `key`.
fn by(key: &'static str, counts: &BTreeMap<String, u64>) -> Vec<Series> {
    counts
        .iter()
        .map(|(k, v)| Series::new(vec![(key, k.clone())], Value::Count(*v)))
        .collect()
}

/// Two series, labelled `direction`: requests and replies.
fn by_direction(request: u64, reply: u64) -> Vec<Series> {
    vec![
        Series::new(vec![("direction", "request".into())], Value::Count(request)),
        Series::new(vec![("direction", "reply".into())], Value::Count(reply)),
    ]
}

/// One series per share of the analysis memory budget, labelled `table`.
fn by_table(scrape: &Scrape<'_>, field: fn(&PoolUsage) -> u64) -> Vec<Series> {
    let tables = &scrape.report.counters.tables;
    tables
        .iter()
        .map(|t| Series::new(vec![("table", t.table.clone())], Value::Count(field(t))))
        .collect()
}

/// Analysed messages by direction and opcode (counted as `"request OP_MSG"`).
fn messages(scrape: &Scrape<'_>) -> Vec<Series> {
    let messages = &scrape.stats.messages;
    messages
        .iter()
        .map(|(k, v)| {
            let (direction, opcode) = k.split_once(' ').unwrap_or((k, ""));
            let labels = vec![
                ("direction", direction.to_string()),
                ("opcode", opcode.to_string()),
            ];
            Series::new(labels, Value::Count(*v))
        })
        .collect()
}

/// Data operations by namespace (the busiest, the rest as `(other)`) and
/// command.
fn operations(scrape: &Scrape<'_>) -> Vec<Series> {
    let mut ops: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for shape in &scrape.report.shapes {
        let namespace = match scrape.namespaces.contains(shape.namespace.as_str()) {
            true => shape.namespace.as_str(),
            false => OTHER,
        };
        *ops.entry((namespace, &shape.command)).or_default() += shape.count;
    }
    ops.into_iter()
        .map(|((namespace, command), n)| {
            let labels = vec![
                ("namespace", namespace.to_string()),
                ("command", command.to_string()),
            ];
            Series::new(labels, Value::Count(n))
        })
        .collect()
}

/// Each busy pattern's latency quantiles (seconds) and call count; the
/// calls of the others added up under `(other)`.
fn pattern_latency(scrape: &Scrape<'_>) -> Vec<Series> {
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
fn pattern_round_trips(scrape: &Scrape<'_>) -> Vec<Series> {
    let mut series = Vec::new();
    let mut other = 0;
    for p in &scrape.report.patterns {
        if scrape.patterns.contains(p.name.as_str()) {
            let labels = vec![("pattern", p.name.clone())];
            series.push(Series::new(labels, Value::Count(p.round_trips)));
        } else {
            other += p.round_trips;
        }
    }
    if other > 0 {
        let labels = vec![("pattern", OTHER.into())];
        series.push(Series::new(labels, Value::Count(other)));
    }
    series
}

/// Each busy pattern's calls as a histogram of their latency (seconds):
/// cumulative `_bucket`s, `_sum` and `_count`; the other patterns' calls
/// merged into one histogram under `(other)`. A call is counted in the
/// first bucket at or above the top of its two-significant-digit range,
/// so a bucket may miss calls within 1% under its bound.
fn pattern_call_duration(scrape: &Scrape<'_>) -> Vec<Series> {
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
struct CallHistogram {
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum_us: u64,
}

impl CallHistogram {
    fn add(&mut self, p: &crate::report::PatternReport) {
        self.count += p.invocations;
        for &[us, n] in &p.latency_histogram {
            self.sum_us = self.sum_us.saturating_add(us.saturating_mul(n));
            if let Some(i) = LATENCY_BUCKETS.iter().position(|(_, le)| us <= *le) {
                self.buckets[i] += n;
            }
        }
    }

    fn push(&self, series: &mut Vec<Series>, pattern: &str) {
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
fn finding(scrape: &Scrape<'_>) -> Vec<Series> {
    open_findings(scrape)
        .into_iter()
        .map(|(labels, n, _)| Series::new(finding_labels(labels), Value::Count(n)))
        .collect()
}

/// When each open finding's label set was first seen (Unix seconds).
fn finding_first_seen(scrape: &Scrape<'_>) -> Vec<Series> {
    open_findings(scrape)
        .into_iter()
        .filter_map(|(labels, _, first)| {
            Some(Series::new(finding_labels(labels), Value::Count(first?)))
        })
        .collect()
}

/// Distinct findings by rule and severity.
fn findings(scrape: &Scrape<'_>) -> Vec<Series> {
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

/// Every family, in the order of the exposition.
const FAMILIES: &[Family] = &[
    Family {
        name: "wirelint_connections_accepted_total",
        kind: Kind::Counter,
        help: "Client connections accepted.",
        series: |s| one(Value::Count(s.stats.connections_accepted)),
    },
    Family {
        name: "wirelint_connections_active",
        kind: Kind::Gauge,
        help: "Client connections open now.",
        series: |s| one(Value::Signed(s.stats.connections_active)),
    },
    Family {
        name: "wirelint_connections_refused_total",
        kind: Kind::Counter,
        help: "Connections refused at the connection limit.",
        series: |s| one(Value::Count(s.stats.connections_refused)),
    },
    Family {
        name: "wirelint_upstream_connect_failures_total",
        kind: Kind::Counter,
        help: "Failed connections to the upstream.",
        series: |s| one(Value::Count(s.stats.upstream_connect_failures)),
    },
    Family {
        name: "wirelint_forwarded_messages_total",
        kind: Kind::Counter,
        help: "Messages forwarded, by direction.",
        series: |s| by_direction(s.stats.requests_forwarded, s.stats.replies_forwarded),
    },
    Family {
        name: "wirelint_forwarded_bytes_total",
        kind: Kind::Counter,
        help: "Bytes forwarded, by direction.",
        series: |s| by_direction(s.stats.request_bytes, s.stats.reply_bytes),
    },
    Family {
        name: "wirelint_frame_errors_total",
        kind: Kind::Counter,
        help: "Connections closed for invalid framing, by kind.",
        series: |s| by("kind", &s.stats.frame_errors),
    },
    Family {
        name: "wirelint_messages_total",
        kind: Kind::Counter,
        help: "Messages analysed, by direction and opcode.",
        series: messages,
    },
    Family {
        name: "wirelint_commands_total",
        kind: Kind::Counter,
        help: "Requests analysed, by command name.",
        series: |s| by("command", &s.stats.commands),
    },
    Family {
        name: "wirelint_analysis_queue_depth",
        kind: Kind::Gauge,
        help: "Messages waiting for analysis.",
        series: |s| {
            let waiting = s.stats.analysis_enqueued.saturating_sub(s.stats.analysis_processed);
            one(Value::Count(waiting))
        },
    },
    Family {
        name: "wirelint_forward_buffer_bytes",
        kind: Kind::Gauge,
        help: "Bytes reserved by connections receiving messages larger than 16 KiB (at most --forward-memory).",
        series: |s| one(Value::Count(s.stats.buffer_bytes)),
    },
    Family {
        name: "wirelint_forward_buffer_waits_total",
        kind: Kind::Counter,
        help: "Large messages that waited for the forwarding buffer budget (--forward-memory).",
        series: |s| one(Value::Count(s.stats.buffer_waits)),
    },
    Family {
        name: "wirelint_analysis_dropped_total",
        kind: Kind::Counter,
        help: "Messages not analysed because the queue was full.",
        series: |s| one(Value::Count(s.stats.analysis_dropped)),
    },
    Family {
        name: "wirelint_analysis_shed_total",
        kind: Kind::Counter,
        help: "Messages not analysed because their connection was sampled out (by --analysis-share, over --analysis-cpu, or while the analysis was behind).",
        series: |s| one(Value::Count(s.stats.analysis_shed)),
    },
    Family {
        name: "wirelint_analysis_sampling_level",
        kind: Kind::Gauge,
        help: "Load shedding now: one client connection in 2^level is analysed (0: all of them).",
        series: |s| one(Value::Count(s.stats.analysis_sampling)),
    },
    Family {
        name: "wirelint_analysis_analysed_ratio",
        kind: Kind::Gauge,
        help: "Share of forwarded messages the analysis saw since start (1 less shed and dropped over all).",
        series: |s| one(Value::Real(s.report.counters.analysed_share)),
    },
    Family {
        name: "wirelint_analysis_cpu_seconds_total",
        kind: Kind::Counter,
        help: "CPU time the analysis threads ran (decoding, the engine and the rules); over process_cpu_seconds_total it is the analysis's share of wirelint's CPU, the figure --analysis-cpu bounds.",
        series: |s| one(Value::Real(s.report.counters.analysis_cpu.analysis_seconds)),
    },
    Family {
        name: "process_cpu_seconds_total",
        kind: Kind::Counter,
        help: "CPU time wirelint ran in all (user and system, every thread).",
        series: |s| one(Value::Real(s.report.counters.analysis_cpu.process_seconds)),
    },
    Family {
        name: "wirelint_analysis_cpu_budget_ratio",
        kind: Kind::Gauge,
        help: "--analysis-cpu: the most of wirelint's CPU time the analysis may take (0: no budget).",
        series: |s| one(Value::Real(s.stats.analysis_cpu_budget)),
    },
    Family {
        name: "wirelint_analysis_cpu_ratio",
        kind: Kind::Gauge,
        help: "The analysis's share of wirelint's CPU time since start (for a window: rate(wirelint_analysis_cpu_seconds_total) / rate(process_cpu_seconds_total)).",
        series: |s| one(Value::Real(s.report.counters.analysis_cpu.share)),
    },
    Family {
        name: "wirelint_analysis_cpu_per_request_seconds",
        kind: Kind::Gauge,
        help: "CPU time of analysis per analysed request, its reply included, since start.",
        series: |s| one(Value::Real(s.report.counters.analysis_cpu.us_per_request / 1e6)),
    },
    Family {
        name: "wirelint_otlp_records_sent_total",
        kind: Kind::Counter,
        help: "Findings sent to the OpenTelemetry Collector as log records (only with --otlp-endpoint).",
        series: |s| otlp(s, |c| &c.records_sent),
    },
    Family {
        name: "wirelint_otlp_records_dropped_total",
        kind: Kind::Counter,
        help: "Finding records the collector did not take (down, refusing): dropped, never retried (only with --otlp-endpoint).",
        series: |s| otlp(s, |c| &c.records_dropped),
    },
    Family {
        name: "wirelint_otlp_metric_exports_failed_total",
        kind: Kind::Counter,
        help: "Pattern metric exports the collector did not take (only with --otlp-endpoint).",
        series: |s| otlp(s, |c| &c.metric_exports_failed),
    },
    Family {
        name: "wirelint_analysis_decode_errors_total",
        kind: Kind::Counter,
        help: "Messages the analysis skipped, by kind (too_deep: a request nested past the server's limit of 200 levels; invalid_bson, checksum_mismatch, bad_compressed, ...).",
        series: |s| by("kind", &s.stats.decode_errors),
    },
    Family {
        name: "wirelint_analysis_panics_total",
        kind: Kind::Counter,
        help: "Panics caught while analysing a message (the message is skipped; traffic is unaffected).",
        series: |s| one(Value::Count(s.report.counters.analysis_panics)),
    },
    Family {
        name: "wirelint_rule_panics_total",
        kind: Kind::Counter,
        help: "Panics caught inside a rule, by rule: that rule skipped the message, the others ran.",
        series: |s| by("rule", &s.report.counters.rule_panics),
    },
    Family {
        name: "wirelint_operations_total",
        kind: Kind::Counter,
        help: "Data operations, by namespace and command.",
        series: operations,
    },
    Family {
        name: "wirelint_pattern_latency_seconds",
        kind: Kind::Summary,
        help: "Latency per call of each access pattern, at the proxy.",
        series: pattern_latency,
    },
    Family {
        name: "wirelint_pattern_round_trips_total",
        kind: Kind::Counter,
        help: "Round trips of each access pattern.",
        series: pattern_round_trips,
    },
    Family {
        name: "wirelint_analysis_table_entries",
        kind: Kind::Gauge,
        help: "Entries held in each share of the analysis memory budget ([limits] analysis_memory).",
        series: |s| by_table(s, |t| t.entries as u64),
    },
    Family {
        name: "wirelint_analysis_table_bytes",
        kind: Kind::Gauge,
        help: "Bytes held in each share of the analysis memory budget (estimated per entry at its largest).",
        series: |s| by_table(s, |t| t.bytes as u64),
    },
    Family {
        name: "wirelint_analysis_table_max_bytes",
        kind: Kind::Gauge,
        help: "Each share's limit: its part of [limits] analysis_memory.",
        series: |s| by_table(s, |t| t.max_bytes as u64),
    },
    Family {
        name: "wirelint_analysis_table_evictions_total",
        kind: Kind::Counter,
        help: "Entries forgotten (least recently used first) to stay within a share.",
        series: |s| by_table(s, |t| t.evicted),
    },
    Family {
        name: "wirelint_analysis_forgotten_requests_total",
        kind: Kind::Counter,
        help: "Requests kept for pairing and forgotten before their reply (unanswered 10 min, 1,024 awaiting on one connection, closed, or the budget full).",
        series: |s| one(Value::Count(s.report.counters.forgotten_requests)),
    },
    Family {
        name: "wirelint_pattern_call_duration_seconds",
        kind: Kind::Histogram,
        help: "Calls of each access pattern by latency per call, at the proxy (a histogram: add it up across instances by le).",
        series: pattern_call_duration,
    },
    Family {
        name: "wirelint_findings",
        kind: Kind::Gauge,
        help: "Distinct findings, by rule and severity.",
        series: findings,
    },
    Family {
        name: "wirelint_finding",
        kind: Kind::Gauge,
        help: "Open findings by rule, severity, namespace and each access pattern they were seen in (1 for most; past 500 label sets the rest add up under (other)).",
        series: finding,
    },
    Family {
        name: "wirelint_finding_first_seen_timestamp_seconds",
        kind: Kind::Gauge,
        help: "When the earliest open finding of each wirelint_finding label set was first seen (Unix seconds).",
        series: finding_first_seen,
    },
];

#[cfg(test)]
mod tests {
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
        assert!(
            text.contains("wirelint_pattern_latency_seconds{pattern=\"P1\",quantile=\"0.99\"} ")
        );
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
            .filter(|l| {
                l.starts_with("wirelint_pattern_call_duration_seconds_bucket{pattern=\"P1\"")
            })
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
}
