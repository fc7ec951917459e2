//! Reports: a versioned JSON snapshot of what wirelint learnt, and its
//! renderings (text and Markdown tables in the manner of
//! *How to model and partition data on Azure Cosmos DB using a real-world example*, SARIF
//! 2.1.0 for code scanning), the comparison of two reports, and the live
//! lines printed while the proxy runs.
//!
//! The JSON format is documented in `docs/report-schema.md`; `schema`
//! changes its number whenever a field changes meaning or disappears.

pub mod diff;
pub mod junit;
pub mod live;
pub mod merge;
pub mod sarif;
pub mod table;

use crate::analysis::budget::Lru;
use crate::analysis::knowledge::Knowledge;
use crate::analysis::patterns::{NamedBy, Partitions, ShapeInfo};
use crate::analysis::suite::{TestCount, TestInfo};
use crate::analysis::target::TargetChoice;
use crate::rules::{Finding, Severity};
use crate::stats::StatsSnapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

pub const SCHEMA: &str = "wirelint.report/1";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub schema: String,
    pub wirelint_version: String,
    pub generated_at: String,
    pub started_at: String,
    pub upstream: String,
    pub counters: Counters,
    pub patterns: Vec<PatternReport>,
    pub shapes: Vec<ShapeReport>,
    pub findings: Vec<Finding>,
    /// Partition keys known at the time, by namespace, with their source.
    #[serde(default)]
    pub partition_keys: BTreeMap<String, crate::analysis::partition::PartitionKey>,
    /// The runs combined by `wirelint report merge`, one per proxy (empty
    /// for a report written by one proxy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<Run>,
    /// Logical databases that stand for several named per test or per
    /// worker (`app_test_*`), with how many each folds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folded_databases: Vec<crate::analysis::databases::FoldedDatabase>,
    /// The tests a test runner said were running (its integration tells
    /// wirelint; see `analysis::suite`), with their file and line where
    /// known and the operations each sent. Findings and patterns name them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<TestInfo>,
    /// The platform whose limits and prices the analysis used, and
    /// whether it was set or detected from the upstream's hello.
    #[serde(default)]
    pub target: TargetChoice,
}

/// One proxy's run inside a merged report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Run {
    pub started_at: String,
    pub generated_at: String,
    pub upstream: String,
    pub wirelint_version: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Counters {
    pub connections: u64,
    pub requests: u64,
    pub replies: u64,
    pub operations: u64,
    pub analysis_dropped: u64,
    /// Messages not analysed because their connection was sampled out
    /// (by `--analysis-share`, over `--analysis-cpu`, or while the analysis was behind).
    #[serde(default)]
    pub analysis_shed: u64,
    /// The share of forwarded messages the analysis saw: 1 less the shed
    /// and dropped ones over all.
    #[serde(default = "one")]
    pub analysed_share: f64,
    /// What the analysis cost in CPU, beside what wirelint spent in all.
    #[serde(default)]
    pub analysis_cpu: AnalysisCpu,
    /// Requests kept for pairing and forgotten before their reply came.
    #[serde(default)]
    pub forgotten_requests: u64,
    pub decode_errors: u64,
    pub findings_dropped: u64,
    pub commands: BTreeMap<String, u64>,
    /// Messages skipped by the analysis, by reason (`too_deep`,
    /// `invalid_bson`, …): the detail of `decode_errors`.
    #[serde(default)]
    pub skipped: BTreeMap<String, u64>,
    /// Data operations the server refused (`ok: 0`): counted, not learnt.
    #[serde(default)]
    pub rejected_operations: u64,
    /// Data operations the server throttled (Cosmos DB's 16500
    /// TooManyRequests, and 50 ExceededTimeLimit under target cosmos-ru),
    /// refused or as write errors of an accepted write.
    #[serde(default)]
    pub throttled_operations: u64,
    /// Panics caught while analysing a message (outside any rule).
    #[serde(default)]
    pub analysis_panics: u64,
    /// Panics caught inside a rule, by rule id (that rule skipped that
    /// message; the others ran).
    #[serde(default)]
    pub rule_panics: BTreeMap<String, u64>,
    /// Each share of the analysis memory budget: entries, bytes, its
    /// limit and the entries evicted to stay within it.
    #[serde(default)]
    pub tables: Vec<crate::analysis::budget::PoolUsage>,
}

/// The analysis's own CPU since start: its threads' time, wirelint's
/// whole time (forwarding, analysis and the rest), and what the two say.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct AnalysisCpu {
    /// Seconds of CPU the analysis threads ran.
    pub analysis_seconds: f64,
    /// Seconds of CPU wirelint ran in all.
    pub process_seconds: f64,
    /// Requests the analysis decoded (every command, with its reply).
    pub analysed_requests: u64,
    /// `analysis_seconds` over `process_seconds` (0 before any CPU).
    pub share: f64,
    /// Microseconds of analysis per analysed request, its reply included
    /// (0 before any).
    pub us_per_request: f64,
}

impl AnalysisCpu {
    pub fn new(analysis_seconds: f64, process_seconds: f64, analysed_requests: u64) -> AnalysisCpu {
        let mut cpu = AnalysisCpu {
            analysis_seconds,
            process_seconds,
            analysed_requests,
            ..AnalysisCpu::default()
        };
        cpu.set_ratios();
        cpu
    }

    /// Works out `share` and `us_per_request` from the totals.
    pub fn set_ratios(&mut self) {
        let round = |x: f64, places: i32| {
            let k = 10f64.powi(places);
            (x * k).round() / k
        };
        self.share = if self.process_seconds > 0.0 {
            round(self.analysis_seconds / self.process_seconds, 4)
        } else {
            0.0
        };
        self.us_per_request = if self.analysed_requests > 0 {
            round(
                self.analysis_seconds * 1e6 / self.analysed_requests as f64,
                2,
            )
        } else {
            0.0
        };
    }

    /// Another run's totals added to these (a merged report).
    pub fn add(&mut self, other: &AnalysisCpu) {
        self.analysis_seconds += other.analysis_seconds;
        self.process_seconds += other.process_seconds;
        self.analysed_requests += other.analysed_requests;
        self.set_ratios();
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
    pub max: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PatternReport {
    pub name: String,
    pub named_by: NamedBy,
    pub namespaces: Vec<String>,
    /// Shape ids, in the order first seen.
    pub shapes: Vec<String>,
    /// The shapes of one invocation, in order.
    pub sequence: Vec<String>,
    /// What one call does after its first operation (a request's
    /// follow-ups), from `sequence`: each command and namespace with how
    /// many times, in the order first seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub follow_ups: Vec<FollowUpStep>,
    pub invocations: u64,
    /// Calls estimated with those of connections left out by sampling
    /// (equal to `invocations` when nothing was sampled out).
    #[serde(default)]
    pub estimated_invocations: u64,
    /// `invocations` over `estimated_invocations`: the share of this
    /// pattern's calls the analysis saw.
    #[serde(default = "one")]
    pub analysed_share: f64,
    pub round_trips: u64,
    pub round_trips_per_invocation: f64,
    /// Per invocation, microseconds, measured at the proxy.
    pub latency_us: Latency,
    /// The same latencies as `[value_us, count]` buckets (two significant
    /// digits), so that reports can be merged exactly. Absent in reports
    /// written before `report merge` existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_histogram: Vec<[u64; 2]>,
    pub docs_returned: u64,
    pub bytes_returned: u64,
    pub errors: BTreeMap<String, u64>,
    pub partitions: Partitions,
    /// Keys of the findings about this pattern.
    pub findings: Vec<String>,
    /// "ok" (✅) or "warn" (⚠: a finding of warning or error severity).
    pub verdict: String,
    /// The W3C trace id of the latest operation of this pattern that
    /// carried one (drivers with OpenTelemetry on send it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_trace_id: Option<String>,
    /// The tests whose operations it saw, most first (see `Report::tests`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<TestCount>,
    /// What the analysis spent on this pattern's messages, in
    /// microseconds: in all, and per call.
    #[serde(default)]
    pub analysis_us: f64,
    #[serde(default)]
    pub analysis_us_per_invocation: f64,
    /// Estimated request units, when the platform is priced in them
    /// (`--target cosmos-ru`; see `docs/cosmos.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_units: Option<RequestUnits>,
    /// Its operations the server throttled (error 16500 or 50).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub throttled: u64,
}

/// A pattern's estimated request units: in all, and per call.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RequestUnits {
    pub total: f64,
    pub per_invocation: f64,
}

impl RequestUnits {
    /// From a total over `invocations` calls, rounded to hundredths.
    pub fn of(total: f64, invocations: u64) -> RequestUnits {
        let round = |x: f64| (x * 100.0).round() / 100.0;
        RequestUnits {
            total: round(total),
            per_invocation: if invocations > 0 {
                round(total / invocations as f64)
            } else {
                0.0
            },
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FollowUpStep {
    pub command: String,
    pub namespace: String,
    /// Operations of one call with this command and namespace.
    pub count: u64,
}

/// The steps after the first of a call whose shapes are `sequence`.
fn follow_up_steps(sequence: &[u64], shapes: &Lru<u64, ShapeInfo>) -> Vec<FollowUpStep> {
    let mut steps: Vec<FollowUpStep> = Vec::new();
    for info in sequence.iter().skip(1).filter_map(|h| shapes.get(h)) {
        match steps
            .iter_mut()
            .find(|s| s.command == info.command && s.namespace == info.namespace)
        {
            Some(s) => s.count += 1,
            None => steps.push(FollowUpStep {
                command: info.command.clone(),
                namespace: info.namespace.clone(),
                count: 1,
            }),
        }
    }
    steps
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShapeReport {
    pub id: String,
    pub text: String,
    pub command: String,
    pub namespace: String,
    pub count: u64,
    /// Estimated request units per operation, when priced in them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_units_per_operation: Option<f64>,
}

/// Marks each finding that follows from another on the same design with
/// `fix_first`, the key of that one — what to fix first:
/// - a hot embedded value (WL503) explains the scatter-gather (WL201) of
///   the same multi-update;
/// - an array that grows without bound (WL101, WL502) explains it being
///   large (WL102) and read whole (WL301);
/// - an N+1 (WL401) or counts on read (WL403) explain a chatty request
///   (WL402) of the same access pattern.
pub fn group(findings: &mut [Finding]) {
    fn explains(root: &Finding, f: &Finding) -> bool {
        let same_ns = root.namespace == f.namespace;
        match (root.rule.as_str(), f.rule.as_str()) {
            ("WL503", "WL201") => same_ns && root.shape.is_some() && root.shape == f.shape,
            ("WL101" | "WL502", "WL102" | "WL301") => same_ns && root.subject == f.subject,
            ("WL401" | "WL403", "WL402") => f.patterns.iter().any(|p| root.patterns.contains(p)),
            _ => false,
        }
    }
    // Only findings of the root rules can explain another: compare the
    // others with those few, not every pair of up to 10,000 findings.
    let roots: Vec<Finding> = findings
        .iter()
        .filter(|f| {
            matches!(
                f.rule.as_str(),
                "WL503" | "WL101" | "WL502" | "WL401" | "WL403"
            )
        })
        .cloned()
        .collect();
    for f in findings.iter_mut() {
        f.fix_first = roots.iter().find(|r| explains(r, f)).map(Finding::key);
    }
}

fn one() -> f64 {
    1.0
}

/// A share to four decimals (1.0 when there is nothing to share).
fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 1.0;
    }
    (part as f64 / whole as f64 * 10_000.0).round() / 10_000.0
}

impl Counters {
    /// Works out `analysed_share` from the message counts.
    pub fn set_analysed_share(&mut self) {
        let messages = self.requests + self.replies;
        let missed = (self.analysis_shed + self.analysis_dropped).min(messages);
        self.analysed_share = share(messages - missed, messages);
    }
}

impl PatternReport {
    /// Works out `analysed_share` from the call counts, and the
    /// analysis's cost per call.
    pub fn set_analysed_share(&mut self) {
        self.estimated_invocations = self.estimated_invocations.max(self.invocations);
        self.analysed_share = share(self.invocations, self.estimated_invocations);
        self.analysis_us = (self.analysis_us * 10.0).round() / 10.0;
        self.analysis_us_per_invocation = if self.invocations > 0 {
            (self.analysis_us / self.invocations as f64 * 10.0).round() / 10.0
        } else {
            0.0
        };
    }
}

/// Sets each pattern's `findings` (the keys of the findings listing it)
/// and its verdict: ⚠ when one of them is a warning or an error.
fn link(patterns: &mut [PatternReport], findings: &[Finding]) {
    for p in patterns {
        // Findings keep long names (a request named by a long shape) cut
        // as every key is.
        let name = crate::analysis::budget::short_key(&p.name);
        let linked: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.patterns.iter().any(|n| *n == name))
            .collect();
        let warn = linked.iter().any(|f| f.severity >= Severity::Warning);
        p.findings = linked.iter().map(|f| f.key()).collect();
        p.verdict = if warn { "warn" } else { "ok" }.to_string();
    }
}

/// Named patterns first, in name order (C1, Q1, Q2…), then by traffic.
fn sort_patterns(patterns: &mut [PatternReport]) {
    patterns.sort_by(|a, b| {
        let named = |p: &PatternReport| p.named_by != NamedBy::Comment;
        named(a).cmp(&named(b)).then_with(|| match a.named_by {
            NamedBy::Comment => natural(&a.name).cmp(&natural(&b.name)),
            NamedBy::Shape => b.round_trips.cmp(&a.round_trips).then(a.name.cmp(&b.name)),
        })
    });
}

/// Round trips per invocation, to two decimals.
fn per_invocation(round_trips: u64, invocations: u64) -> f64 {
    if invocations == 0 {
        return 0.0;
    }
    (round_trips as f64 / invocations as f64 * 100.0).round() / 100.0
}

/// A latency histogram as the report carries it: `[value_us, count]`
/// for each recorded bucket.
fn buckets(h: &hdrhistogram::Histogram<u64>) -> Vec<[u64; 2]> {
    h.iter_recorded()
        .map(|v| [v.value_iterated_to(), v.count_at_value()])
        .collect()
}

impl Latency {
    fn of(h: &hdrhistogram::Histogram<u64>) -> Latency {
        Latency {
            p50: h.value_at_quantile(0.5),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
        }
    }
}

fn timestamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl Report {
    pub fn build(knowledge: &Knowledge, stats: &StatsSnapshot, upstream: &str) -> Report {
        // A finding counts the databases that showed it (see
        // `FindingStore::record`); on a namespace that does not fold, none.
        let mut findings: Vec<Finding> = knowledge.findings.all().cloned().collect();
        for f in &mut findings {
            if knowledge.databases.count_of(&f.namespace).is_none() {
                f.databases = None;
            }
        }
        group(&mut findings);
        let priced = knowledge.target.target.request_units();
        let mut shapes: Vec<ShapeReport> = knowledge
            .patterns
            .shapes
            .iter()
            .map(|(_, s)| ShapeReport {
                id: s.shape.id(),
                text: s.shape.text.to_string(),
                command: s.command.clone(),
                namespace: s.namespace.clone(),
                count: s.count,
                request_units_per_operation: (s.priced > 0)
                    .then(|| (s.request_units / s.priced as f64 * 100.0).round() / 100.0),
            })
            .collect();
        shapes.sort_by(|a, b| b.count.cmp(&a.count).then(a.text.cmp(&b.text)));
        let id = |h: &u64| format!("{h:016x}");
        let mut patterns: Vec<PatternReport> = knowledge
            .patterns
            .patterns
            .iter()
            .filter(|(_, p)| p.invocations > 0 || p.round_trips > 0)
            .map(|(_, p)| PatternReport {
                name: p.name.clone(),
                named_by: p.named_by,
                namespaces: p.namespaces.clone(),
                shapes: p.shapes.iter().map(id).collect(),
                sequence: p.sequence.iter().map(id).collect(),
                follow_ups: follow_up_steps(&p.sequence, &knowledge.patterns.shapes),
                invocations: p.invocations,
                estimated_invocations: p.estimated_invocations,
                analysed_share: 1.0,
                round_trips: p.round_trips,
                round_trips_per_invocation: per_invocation(p.round_trips, p.invocations),
                latency_us: Latency::of(&p.latency),
                latency_histogram: buckets(&p.latency),
                docs_returned: p.docs_returned,
                bytes_returned: p.bytes_returned,
                errors: p
                    .errors
                    .iter()
                    .map(|(c, n)| match *c {
                        crate::analysis::patterns::OTHER_ERROR => ("other".to_string(), *n),
                        c => (c.to_string(), *n),
                    })
                    .collect(),
                partitions: p.partitions.clone(),
                findings: Vec::new(),
                verdict: String::new(),
                last_trace_id: p.last_trace_id.map(|t| t.to_string()),
                tests: most_first(
                    p.tests
                        .iter()
                        .map(|(t, n)| TestCount {
                            test: knowledge.suite.name(*t).to_string(),
                            operations: *n,
                        })
                        .collect(),
                ),
                analysis_us: p.analysis_nanos as f64 / 1e3,
                analysis_us_per_invocation: 0.0,
                request_units: priced.then(|| RequestUnits::of(p.request_units, p.invocations)),
                throttled: p.throttled,
            })
            .collect();
        tests_from_patterns(&mut findings, &patterns);
        patterns
            .iter_mut()
            .for_each(PatternReport::set_analysed_share);
        link(&mut patterns, &findings);
        sort_patterns(&mut patterns);
        let mut report = Report {
            schema: SCHEMA.to_string(),
            wirelint_version: env!("CARGO_PKG_VERSION").to_string(),
            generated_at: timestamp(SystemTime::now()),
            started_at: timestamp(knowledge.started),
            upstream: upstream.to_string(),
            counters: Counters {
                connections: stats.connections_accepted,
                requests: stats.requests_forwarded,
                replies: stats.replies_forwarded,
                operations: knowledge.operations,
                analysis_dropped: stats.analysis_dropped,
                analysis_shed: stats.analysis_shed,
                analysed_share: 1.0,
                analysis_cpu: AnalysisCpu::new(
                    stats.analysis_cpu_nanos as f64 / 1e9,
                    stats.process_cpu_nanos as f64 / 1e9,
                    stats.analysed_requests,
                ),
                forgotten_requests: knowledge.forgotten_requests,
                decode_errors: stats.decode_errors.values().sum(),
                findings_dropped: knowledge.findings.dropped,
                commands: stats.commands.clone(),
                skipped: stats.decode_errors.clone(),
                rejected_operations: knowledge.rejected_operations,
                throttled_operations: knowledge.throttled_operations,
                analysis_panics: stats.analysis_panics,
                rule_panics: knowledge
                    .rule_panics
                    .iter()
                    .map(|(id, n)| (id.to_string(), *n))
                    .collect(),
                tables: knowledge.tables(),
            },
            patterns,
            shapes,
            findings,
            partition_keys: knowledge.partition_keys.all().clone(),
            runs: Vec::new(),
            folded_databases: knowledge.databases.folded(),
            tests: knowledge.suite.tests().to_vec(),
            target: knowledge.target,
        };
        report.counters.set_analysed_share();
        report
    }

    pub fn load(path: &Path) -> Result<Report, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let report: Report = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a wirelint report: {e}", path.display()))?;
        if report.schema != SCHEMA {
            return Err(format!(
                "{} has report schema {:?}; this wirelint reads {SCHEMA:?}",
                path.display(),
                report.schema
            ));
        }
        Ok(report)
    }

    /// Writes the report as JSON, atomically (a reader never sees half).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("json.tmp");
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, path)
    }

    /// The highest severity among the findings.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    pub fn shape_text(&self, id: &str) -> Option<&str> {
        self.shapes
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.text.as_str())
    }
}

/// Sort key that puts "Q2" before "Q10".
fn natural(s: &str) -> (String, u64, String) {
    let digits_at = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
    let (head, rest) = s.split_at(digits_at);
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let number = rest[..end].parse().unwrap_or(0);
    (head.to_string(), number, rest[end..].to_string())
}

/// `tests` with the most operations first (then by name).
pub fn most_first(mut tests: Vec<TestCount>) -> Vec<TestCount> {
    tests.sort_by(|a, b| b.operations.cmp(&a.operations).then(a.test.cmp(&b.test)));
    tests
}

/// A finding no operation of a known test raised (one a rule raises when
/// it looks over a pattern's calls) names the tests of its patterns.
fn tests_from_patterns(findings: &mut [Finding], patterns: &[PatternReport]) {
    for f in findings.iter_mut() {
        if f.tests.is_empty() {
            let mut tests: Vec<TestCount> = Vec::new();
            for p in patterns.iter().filter(|p| f.patterns.contains(&p.name)) {
                for t in &p.tests {
                    match tests.iter_mut().find(|c| c.test == t.test) {
                        Some(c) => c.operations += t.operations,
                        None => tests.push(t.clone()),
                    }
                }
            }
            f.tests = tests;
        }
        f.tests = most_first(std::mem::take(&mut f.tests));
    }
}

pub fn human_micros(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2} s", us as f64 / 1e6)
    } else if us >= 1_000 {
        format!("{:.1} ms", us as f64 / 1e3)
    } else {
        format!("{us} µs")
    }
}
