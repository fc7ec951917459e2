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
//! first [`MAX_FINDING_SERIES`](labelled::MAX_FINDING_SERIES) label sets, gravest first, get series of
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
use crate::report::Report;
use crate::stats::StatsSnapshot;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};

mod labelled;
#[cfg(test)]
use labelled::MAX_FINDING_SERIES;
use labelled::{
    finding, finding_first_seen, findings, pattern_call_duration, pattern_latency,
    pattern_request_units, pattern_round_trips, pattern_throttled,
};

/// The Content-Type of [`render_metrics`]' text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Namespaces and patterns with series of their own in `/metrics`, at most.
pub const MAX_LABELS: usize = 100;
/// The label the others are added up under.
const OTHER: &str = "(other)";
/// Label values are cut to this many characters.
const MAX_LABEL_CHARS: usize = 160;

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
        name: "wirelint_pattern_request_units_total",
        kind: Kind::Counter,
        help: "Estimated request units (RU) of each access pattern's operations, priced as Azure Cosmos DB for MongoDB (RU) would (only with target cosmos-ru; an estimate: docs/cosmos.md).",
        series: pattern_request_units,
    },
    Family {
        name: "wirelint_pattern_throttled_total",
        kind: Kind::Counter,
        help: "Operations of each access pattern the server throttled (Azure Cosmos DB's 16500 TooManyRequests, 50 ExceededTimeLimit).",
        series: pattern_throttled,
    },
    Family {
        name: "wirelint_throttled_operations_total",
        kind: Kind::Counter,
        help: "Data operations the server throttled (16500 TooManyRequests, 50 ExceededTimeLimit), all patterns.",
        series: |s| one(Value::Count(s.report.counters.throttled_operations)),
    },
    Family {
        name: "wirelint_target_info",
        kind: Kind::Gauge,
        help: "The platform whose limits and prices the analysis uses (target) and how it was chosen (source: set, detected from the upstream's hello, or default).",
        series: |s| {
            let t = s.report.target;
            let source = match t.source {
                crate::analysis::target::TargetSource::Set => "set",
                crate::analysis::target::TargetSource::Detected => "detected",
                crate::analysis::target::TargetSource::Default => "default",
            };
            vec![Series::new(
                vec![("target", t.target.name().into()), ("source", source.into())],
                Value::Count(1),
            )]
        },
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
mod tests;
