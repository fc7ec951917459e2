//! Text and Markdown renderings: the access-pattern table as *How to
//! model and partition data on Azure Cosmos DB using a real-world example*
//! draws it (pattern, round trips, latency, documents, partitions, ✅/⚠),
//! then the findings with their advice.

use super::{human_micros, PatternReport, Report};
use crate::analysis::patterns::NamedBy;
use crate::rules::{Finding, Severity};
use std::fmt::Write;

const NAME_WIDTH: usize = 56;

fn verdict(p: &PatternReport, report: &Report) -> String {
    if p.verdict == "ok" {
        return "✅".to_string();
    }
    let mut rules: Vec<&str> = p
        .findings
        .iter()
        .filter_map(|key| report.findings.iter().find(|f| &f.key() == key))
        .filter(|f| f.severity >= Severity::Warning)
        .map(|f| f.rule.as_str())
        .collect();
    rules.sort_unstable();
    rules.dedup();
    format!("⚠ {}", rules.join(" "))
}

fn per_call(n: u64, calls: u64) -> String {
    if calls == 0 {
        return "-".into();
    }
    let v = n as f64 / calls as f64;
    if (v - v.round()).abs() < 0.05 {
        format!("{:.0}", v)
    } else {
        format!("{v:.1}")
    }
}

fn short(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        name.to_string()
    } else {
        let mut s: String = name.chars().take(width - 1).collect();
        s.push('…');
        s
    }
}

struct Row {
    cells: Vec<String>,
    /// A request's follow-ups, one call's (see [`follow_ups`]).
    follows: Option<String>,
    /// Its operations the server throttled, said under it.
    throttled: Option<String>,
}

/// Whether the report prices patterns in request units (`--target
/// cosmos-ru`): the table then has an RU/call column.
fn priced(report: &Report) -> bool {
    report.target.target.request_units()
        || report.patterns.iter().any(|p| p.request_units.is_some())
}

/// A pattern's estimated request units per call, as the RU column shows it.
fn ru_per_call(p: &PatternReport) -> String {
    match &p.request_units {
        Some(ru) if p.invocations > 0 => {
            let v = ru.per_invocation;
            if v >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        }
        _ => "-".into(),
    }
}

/// What the table says under a throttled pattern.
fn throttled(p: &PatternReport) -> Option<String> {
    (p.throttled > 0).then(|| {
        format!(
            "throttled {} time{} (error 16500 TooManyRequests or 50 ExceededTimeLimit): the request units provisioned ran out",
            p.throttled,
            if p.throttled == 1 { "" } else { "s" }
        )
    })
}

/// What one call of a request does after its root: "then 5 × find
/// rq_board.users, 5 × aggregate rq_board.comments". None for a request
/// of one operation.
fn follow_ups(p: &PatternReport) -> Option<String> {
    (!p.follow_ups.is_empty()).then(|| {
        let parts: Vec<String> = p
            .follow_ups
            .iter()
            .map(|s| match s.count {
                1 => format!("{} {}", s.command, s.namespace),
                n => format!("{n} × {} {}", s.command, s.namespace),
            })
            .collect();
        format!("then {}", parts.join(", "))
    })
}

/// Patterns the text and Markdown tables list in full; past this, those
/// that carry no finding are summed up in one line (`--all-patterns`
/// lists them).
pub const PATTERNS_SHOWN: usize = 20;

/// How the text and Markdown renderings lay the report out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layout {
    /// Every pattern in the table, however many.
    pub all_patterns: bool,
}

/// The patterns the table lists, and those it sums up: (how many, their
/// calls). All of them when there are few or `all` is asked; else those
/// that carry a finding, in the report's order.
fn shown(report: &Report, layout: Layout) -> (Vec<&PatternReport>, Option<(usize, u64)>) {
    if layout.all_patterns || report.patterns.len() <= PATTERNS_SHOWN {
        return (report.patterns.iter().collect(), None);
    }
    let (with, without): (Vec<&PatternReport>, Vec<&PatternReport>) = report
        .patterns
        .iter()
        .partition(|p| p.verdict != "ok" || !p.findings.is_empty());
    let calls = without.iter().map(|p| p.invocations).sum();
    (
        with,
        (!without.is_empty()).then_some((without.len(), calls)),
    )
}

/// Whether any pattern's partitions are known: without a partition key
/// (or a sharded upstream) the column would say `unknown` on every row.
fn partitions_known(report: &Report) -> bool {
    report
        .patterns
        .iter()
        .any(|p| p.partitions.label() != "unknown")
}

fn rows(report: &Report, patterns: &[&PatternReport], width: usize) -> Vec<Row> {
    let priced = priced(report);
    let partitions = partitions_known(report);
    patterns
        .iter()
        .map(|p| {
            let mut cells = vec![
                match p.named_by {
                    NamedBy::Comment => p.name.clone(),
                    NamedBy::Shape => short(&p.name, width),
                },
                p.invocations.to_string(),
                per_call(p.round_trips, p.invocations),
                human_micros(p.latency_us.p50),
                human_micros(p.latency_us.p99),
                per_call(p.docs_returned, p.invocations),
            ];
            if priced {
                cells.push(ru_per_call(p));
            }
            if partitions {
                cells.push(p.partitions.label().to_string());
            }
            cells.push(verdict(p, report));
            Row {
                cells,
                follows: follow_ups(p),
                throttled: throttled(p),
            }
        })
        .collect()
}

/// The table's headers (with `RU/call` when priced) and how many of the
/// columns after the name are numbers, right-aligned.
fn headers(priced: bool, partitions: bool) -> (Vec<&'static str>, usize) {
    let mut h = vec![
        "Pattern",
        "Calls",
        "Round trips/call",
        "p50",
        "p99",
        "Docs/call",
    ];
    if priced {
        h.push("RU/call");
    }
    let numbers = h.len() - 1;
    if partitions {
        h.push("Partitions");
    }
    h.push("");
    (h, numbers)
}

/// The platform line: which target the figures are for, and how it was
/// chosen.
fn target_line(report: &Report) -> Option<String> {
    use crate::analysis::target::TargetSource;
    let t = report.target;
    let how = match t.source {
        TargetSource::Set => "set",
        TargetSource::Detected => "detected from the upstream's hello",
        TargetSource::Default => return None,
    };
    let ru = if t.target.request_units() {
        "; RU/call is an estimate from the traffic (docs/cosmos.md says how far to trust it)"
    } else {
        ""
    };
    Some(format!("Target: {} ({how}){ru}", t.target.title()))
}

/// A line saying how much of the traffic the analysis saw, when it
/// sampled connections out (by the user's share or to shed load) or
/// dropped messages.
fn sampled(report: &Report) -> Option<String> {
    let c = &report.counters;
    (c.analysis_shed + c.analysis_dropped > 0).then(|| {
        format!(
            "Analysed {:.1} % of the messages: {} left out with their connection (sampled out by --analysis-share, over --analysis-cpu, or while the analysis was behind the traffic) and {} dropped; calls are counted as seen",
            c.analysed_share * 100.0,
            c.analysis_shed,
            c.analysis_dropped
        )
    })
}

/// The lines that say what the report stands for beyond its rows: the
/// share analysed, the databases folded, the patterns the memory limit
/// dropped.
fn notes(report: &Report) -> Vec<String> {
    let mut lines: Vec<String> = target_line(report).into_iter().collect();
    lines.extend(sampled(report));
    if report.counters.throttled_operations > 0 {
        lines.push(format!(
            "The server throttled {} operations (Azure Cosmos DB's 16500 TooManyRequests or 50 ExceededTimeLimit)",
            report.counters.throttled_operations
        ));
    }
    for f in report.folded_databases.iter().filter(|f| f.databases > 1) {
        lines.push(format!(
            "Folded {}{} databases named per test or per worker into {} (--fold-databases off keeps them apart)",
            if f.at_least { "at least " } else { "" },
            f.databases,
            f.name
        ));
    }
    if !report.patterns.is_empty() && !partitions_known(report) {
        lines.push(
            "Partitions: no partition key is known, so no pattern is judged single-shard or scatter-gather (set one under [collections.\"db.coll\"] partition_key, or put wirelint in front of a sharded cluster)".to_string(),
        );
    }
    let evicted = |name: &str| {
        report
            .counters
            .tables
            .iter()
            .find(|t| t.table == name)
            .map_or(0, |t| t.evicted)
    };
    if evicted("patterns") > 0 {
        lines.push(format!(
            "The patterns table reached its memory limit and dropped {} patterns, the least recently used (findings are kept; --analysis-memory raises the limit)",
            evicted("patterns")
        ));
    }
    lines
}

/// How many databases showed the finding, when its namespace is a logical
/// one folding several: ` (in 7 databases)`.
fn in_databases(f: &Finding) -> String {
    match f.databases {
        Some(n) if n > 1 => format!(" (in {n} databases)"),
        _ => String::new(),
    }
}

pub fn text(report: &Report) -> String {
    text_with(report, Layout::default())
}

/// The text report: the findings first, then the access patterns (those
/// with findings, or all of them when they are few or `layout` asks).
pub fn text_with(report: &Report, layout: Layout) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "wirelint report · {} · upstream {} · {} operations · {} findings",
        report.generated_at,
        report.upstream,
        report.counters.operations,
        report.findings.len()
    );
    for line in notes(report) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "\nFindings\n");
    if report.findings.is_empty() {
        let _ = writeln!(out, "  none\n");
    }
    for f in sorted(&report.findings) {
        let _ = writeln!(
            out,
            "  {} {} {} · {}{} · {}",
            icon(f.severity),
            f.rule,
            f.name,
            f.namespace,
            in_databases(f),
            f.severity.as_str()
        );
        let _ = writeln!(out, "    {}", f.message);
        for p in &f.patterns {
            let _ = writeln!(out, "    pattern: {}", short(p, 100));
        }
        if let Some(s) = &f.shape {
            if !f.patterns.contains(s) {
                let _ = writeln!(out, "    shape:   {}", short(s, 100));
            }
        }
        if let Some(tests) = tests_line(f) {
            let _ = writeln!(out, "    shown by {tests}");
        }
        if let Some(root) = &f.fix_first {
            let _ = writeln!(out, "    follows from {root}: fix that first");
        }
        let _ = writeln!(out, "    → {}", f.advice);
        let _ = writeln!(
            out,
            "      {} · {} · reported on {} operations, {} – {}\n",
            f.source, f.docs, f.occurrences, f.first_seen, f.last_seen
        );
    }
    let (patterns, rest) = shown(report, layout);
    let _ = writeln!(
        out,
        "Access patterns{} (latency per call, measured at the proxy)\n",
        if rest.is_some() { " with findings" } else { "" }
    );
    let rows = rows(report, &patterns, NAME_WIDTH);
    let (headers, numbers) = headers(priced(report), partitions_known(report));
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.cells.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut l = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
            if (1..=numbers).contains(&i) {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            } else {
                l.push_str(c);
                l.push_str(&" ".repeat(pad));
            }
            l.push_str("  ");
        }
        l.trim_end().to_string()
    };
    if !rows.is_empty() {
        let headers: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
        let _ = writeln!(out, "{}", line(&headers));
    }
    for r in &rows {
        let _ = writeln!(out, "{}", line(&r.cells));
        if let Some(follows) = &r.follows {
            let _ = writeln!(out, "    ↳ {follows}");
        }
        if let Some(throttled) = &r.throttled {
            let _ = writeln!(out, "    ↳ {throttled}");
        }
    }
    if report.patterns.is_empty() {
        let _ = writeln!(out, "  (no data operations seen)");
    }
    if let Some(line) = rest_line(rest) {
        let _ = writeln!(out, "  {line}");
    }
    out
}

/// The line that sums up the patterns the table leaves out.
fn rest_line(rest: Option<(usize, u64)>) -> Option<String> {
    rest.map(|(n, calls)| {
        format!(
            "and {n} more pattern{} without findings ({calls} calls): `wirelint report --all-patterns` lists them",
            if n == 1 { "" } else { "s" }
        )
    })
}

pub fn markdown(report: &Report) -> String {
    markdown_with(report, Layout::default())
}

/// The Markdown report, laid out as [`text_with`]'s.
pub fn markdown_with(report: &Report, layout: Layout) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# wirelint report\n");
    let _ = writeln!(
        out,
        "{} · upstream `{}` · {} operations · {} findings\n",
        report.generated_at,
        report.upstream,
        report.counters.operations,
        report.findings.len()
    );
    for line in notes(report) {
        let _ = writeln!(out, "{line}\n");
    }
    let _ = writeln!(out, "## Findings\n");
    if report.findings.is_empty() {
        let _ = writeln!(out, "None.");
    }
    for f in sorted(&report.findings) {
        let _ = writeln!(
            out,
            "### {} {} {} — `{}`{}\n",
            icon(f.severity),
            f.rule,
            f.name,
            f.namespace,
            in_databases(f)
        );
        let _ = writeln!(out, "**{}**: {}\n", f.severity.as_str(), f.message);
        if let Some(root) = &f.fix_first {
            let _ = writeln!(out, "Follows from `{root}`: fix that first.\n");
        }
        for p in &f.patterns {
            let _ = writeln!(out, "- pattern: `{}`", p.replace('`', "'"));
        }
        if let Some(s) = &f.shape {
            let _ = writeln!(out, "- shape: `{}`", s.replace('`', "'"));
        }
        if let Some(tests) = tests_line(f) {
            let _ = writeln!(out, "- shown by {tests}");
        }
        let _ = writeln!(
            out,
            "- reported on {} operations, {} – {}",
            f.occurrences, f.first_seen, f.last_seen
        );
        let _ = writeln!(
            out,
            "\n**What to do:** {}\n\n_{}_ · [{}]({})\n",
            f.advice, f.source, f.rule, f.docs
        );
    }
    let (patterns, rest) = shown(report, layout);
    let _ = writeln!(
        out,
        "## Access patterns{}\n",
        if rest.is_some() { " with findings" } else { "" }
    );
    let (headers, numbers) = headers(priced(report), partitions_known(report));
    let _ = writeln!(out, "| {} |", headers.join(" | "));
    let _ = writeln!(
        out,
        "|---|{}{}",
        "--:|".repeat(numbers),
        "---|".repeat(headers.len() - 1 - numbers)
    );
    for r in rows(report, &patterns, usize::MAX) {
        let mut cells = r.cells.clone();
        let code = |s: &str| format!("`{}`", s.replace('|', "\\|").replace('`', "'"));
        cells[0] = match &r.follows {
            Some(f) => format!("{}<br>↳ {}", code(&cells[0]), code(f)),
            None => code(&cells[0]),
        };
        if let Some(t) = &r.throttled {
            cells[0] = format!("{}<br>↳ {t}", cells[0]);
        }
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    if let Some(line) = rest_line(rest) {
        let _ = writeln!(out, "\n{line}");
    }
    let _ = writeln!(
        out,
        "\nLatency is per call (all of its round trips), measured at the proxy.\n"
    );
    out
}

/// Tests named at most in a finding's line (the report lists them all).
const TESTS_SHOWN: usize = 3;

/// The tests whose operations showed `f`, the first few with their
/// operations: `test_a (32 operations), test_b (2 operations) and 3 more`.
pub fn tests_line(f: &Finding) -> Option<String> {
    if f.tests.is_empty() {
        return None;
    }
    let named: Vec<String> = f
        .tests
        .iter()
        .take(TESTS_SHOWN)
        .map(|t| {
            let s = if t.operations == 1 { "" } else { "s" };
            format!("{} ({} operation{s})", t.test, t.operations)
        })
        .collect();
    let more = f.tests.len().saturating_sub(TESTS_SHOWN);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    Some(named.join(", ") + &tail)
}

fn icon(s: Severity) -> &'static str {
    match s {
        Severity::Info => "ℹ",
        Severity::Warning => "⚠",
        Severity::Error => "✖",
    }
}

fn sorted(findings: &[Finding]) -> Vec<&Finding> {
    let mut v: Vec<&Finding> = findings.iter().collect();
    v.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.rule.cmp(&b.rule))
            .then(a.namespace.cmp(&b.namespace))
    });
    v
}
