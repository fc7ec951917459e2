//! `wirelint diff BEFORE AFTER`: per access pattern, what changed between two
//! runs — round trips, latency, partitions, verdict and findings — the way
//! *How to model and partition data on Azure Cosmos DB using a real-world example*
//! compares its V1, V2 and V3 designs.

use super::{human_micros, PatternReport, Report};
use crate::analysis::patterns::NamedBy;
use std::fmt::Write;

fn verdict(p: Option<&PatternReport>) -> &'static str {
    match p {
        None => "—",
        Some(p) if p.verdict == "ok" => "✅",
        Some(_) => "⚠",
    }
}

fn rt(p: Option<&PatternReport>) -> String {
    p.map(|p| format!("{}", p.round_trips_per_invocation))
        .unwrap_or_else(|| "—".into())
}

fn p50(p: Option<&PatternReport>) -> String {
    p.map(|p| human_micros(p.latency_us.p50))
        .unwrap_or_else(|| "—".into())
}

fn parts(p: Option<&PatternReport>) -> String {
    p.map(|p| p.partitions.label().to_string())
        .unwrap_or_else(|| "—".into())
}

fn ru(p: Option<&PatternReport>) -> String {
    match p.and_then(|p| p.request_units.as_ref()) {
        Some(r) => format!("{:.2}", r.per_invocation),
        None => "—".into(),
    }
}

fn rules_of(report: &Report, p: Option<&PatternReport>) -> Vec<String> {
    let Some(p) = p else { return Vec::new() };
    let mut v: Vec<String> = p
        .findings
        .iter()
        .filter_map(|k| report.findings.iter().find(|f| &f.key() == k))
        .map(|f| f.rule.clone())
        .collect();
    v.sort();
    v.dedup();
    v
}

pub fn diff(before: &Report, after: &Report) -> String {
    // Named patterns (by comment) are compared by name; patterns named by
    // their shape only match when the shape is the same.
    let mut names: Vec<(String, NamedBy)> = Vec::new();
    for p in before.patterns.iter().chain(after.patterns.iter()) {
        if !names.iter().any(|(n, _)| n == &p.name) {
            names.push((p.name.clone(), p.named_by));
        }
    }
    // Request units per call, when either run priced them.
    let priced = before
        .patterns
        .iter()
        .chain(&after.patterns)
        .any(|p| p.request_units.is_some());
    let mut out = String::new();
    let ru_header = if priced {
        format!(" {:>20}", "RU/call")
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{:<24} {:>14} {:>22}{ru_header} {:>22} {:>6}  findings",
        "pattern", "round trips", "p50", "partitions", ""
    );
    for (name, named_by) in names {
        let a = before.patterns.iter().find(|p| p.name == name);
        let b = after.patterns.iter().find(|p| p.name == name);
        let label = match named_by {
            NamedBy::Comment => name.clone(),
            NamedBy::Shape => {
                let mut s: String = name.chars().take(23).collect();
                if name.chars().count() > 23 {
                    s.pop();
                    s.push('…');
                }
                s
            }
        };
        let (ra, rb) = (rules_of(before, a), rules_of(after, b));
        let mut findings: Vec<String> = ra.iter().filter(|r| rb.contains(r)).cloned().collect();
        findings.extend(
            ra.iter()
                .filter(|r| !rb.contains(r))
                .map(|r| format!("-{r}")),
        );
        findings.extend(
            rb.iter()
                .filter(|r| !ra.contains(r))
                .map(|r| format!("+{r}")),
        );
        let findings = findings.join(" ");
        let ru_cell = if priced {
            format!(" {:>20}", format!("{} → {}", ru(a), ru(b)))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:<24} {:>14} {:>22}{ru_cell} {:>22} {:>6}  {}",
            label,
            format!("{} → {}", rt(a), rt(b)),
            format!("{} → {}", p50(a), p50(b)),
            format!("{} → {}", parts(a), parts(b)),
            format!("{}→{}", verdict(a), verdict(b)),
            findings
        );
    }
    let _ = writeln!(
        out,
        "\nfindings: {} → {} · operations: {} → {}",
        before.findings.len(),
        after.findings.len(),
        before.counters.operations,
        after.counters.operations
    );
    out
}
