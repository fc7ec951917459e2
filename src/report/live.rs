//! What the proxy prints while it runs: one line per new (or worse)
//! finding on stderr, coloured on a terminal, and a periodic one-line
//! summary.

use crate::rules::{Change, FindingEvent, Severity};
use std::io::{IsTerminal, Write};

pub fn print_finding(event: &FindingEvent) {
    let f = &event.finding;
    let color = std::io::stderr().is_terminal();
    let (paint, reset) = match (color, f.severity) {
        (false, _) => ("", ""),
        (true, Severity::Info) => ("\x1b[36m", "\x1b[0m"),
        (true, Severity::Warning) => ("\x1b[33m", "\x1b[0m"),
        (true, Severity::Error) => ("\x1b[31;1m", "\x1b[0m"),
    };
    let what = match event.change {
        Change::Escalated => " (now worse)",
        _ => "",
    };
    let line = format!(
        "{paint}{} {} {}{reset} {} · {}{what} → {} [{}]\n",
        f.severity.as_str().to_uppercase(),
        f.rule,
        f.name,
        f.namespace,
        f.message,
        f.advice,
        f.docs
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// The periodic line: the traffic since the last one, what the analysis
/// knows, and what it cost over the same interval (`cost`).
pub fn summary_line(
    ops_per_sec: f64,
    patterns: usize,
    findings: usize,
    dropped: u64,
    cost: &crate::report::AnalysisCpu,
    analysed_share: f64,
) -> String {
    format!(
        "wirelint: {ops_per_sec:.0} ops/s · {patterns} patterns · {findings} findings · {dropped} dropped by analysis · {:.0} % analysed · analysis {:.1} % of wirelint's CPU, {:.1} µs/request",
        analysed_share * 100.0,
        cost.share * 100.0,
        cost.us_per_request
    )
}
