//! WL504 lookup-heavy: reads on a collection lean on `$lookup` — more than
//! half of them (once there are enough to judge), or more than 100 in all,
//! the thresholds Atlas's schema advisor uses. Each `$lookup` is a join done
//! on every read; the seeds' answer is to embed or denormalize what is
//! joined.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::Kind;
use bson::{RawArray, RawBsonRef};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

pub static META: RuleMeta = RuleMeta {
    id: "WL504",
    name: "lookup-heavy",
    severity: Severity::Warning,
    summary: "Reads of this collection join another with $lookup most of the time.",
    advice: "Embed the joined data, or denormalize the few fields the reads need (e.g. the author's name \
             on each post), so one read answers the request without a join.",
    source: concat!(mongodb_unbounded!(), " ($lookup, subset and reference patterns)"),
    thresholds: &[
        Threshold { name: "share", default: 0.5, help: "fraction of reads using $lookup above which it fires" },
        Threshold { name: "min_reads", default: 20.0, help: "reads needed before the share is judged" },
        Threshold { name: "max_lookups", default: 100.0, help: "reads using $lookup above which it fires whatever the share" },
    ],
};

/// Joined collections named per namespace, at most.
const MAX_JOINED: usize = 32;

#[derive(Default)]
struct Counts {
    reads: u64,
    with_lookup: u64,
    joined: BTreeSet<String>,
}

/// Charged at its largest: [`MAX_JOINED`] names of at most 255 bytes (the
/// server's longest namespace).
impl crate::analysis::budget::Weight for Counts {
    fn weight(&self) -> usize {
        std::mem::size_of::<Counts>() + MAX_JOINED * (255 + 48)
    }
}

#[derive(Default)]
pub struct LookupHeavy {
    namespaces: RuleTable<String, Counts>,
}

/// The collections a pipeline joins, looking into nested pipelines.
fn lookups(pipeline: &RawArray, out: &mut BTreeSet<String>, depth: usize) {
    if depth > 4 {
        return;
    }
    for stage in pipeline.into_iter().flatten() {
        let RawBsonRef::Document(stage) = stage else {
            continue;
        };
        for (name, body) in stage.iter().flatten() {
            match (name.as_str(), body) {
                ("$lookup" | "$graphLookup", RawBsonRef::Document(l)) => {
                    out.insert(l.get_str("from").unwrap_or("?").to_string());
                    if let Ok(p) = l.get_array("pipeline") {
                        lookups(p, out, depth + 1);
                    }
                }
                ("$facet", RawBsonRef::Document(f)) => {
                    for (_, sub) in f.iter().flatten() {
                        if let RawBsonRef::Array(p) = sub {
                            lookups(p, out, depth + 1);
                        }
                    }
                }
                ("$unionWith", RawBsonRef::Document(u)) => {
                    if let Ok(p) = u.get_array("pipeline") {
                        lookups(p, out, depth + 1);
                    }
                }
                _ => {}
            }
        }
    }
}

impl Rule for LookupHeavy {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        if !matches!(op.cmd.kind, Kind::Find | Kind::Aggregate) {
            return;
        }
        let mut joined = BTreeSet::new();
        if let Some(p) = op.cmd.pipeline() {
            lookups(p, &mut joined, 0);
        }
        let counts = self.namespaces.entry_ref(op.namespace, cx.pool);
        counts.reads += 1;
        if joined.is_empty() {
            return;
        }
        counts.with_lookup += 1;
        for from in joined {
            if counts.joined.len() >= MAX_JOINED && !counts.joined.contains(&from) {
                break;
            }
            counts.joined.insert(from);
        }
        let share = counts.with_lookup as f64 / counts.reads as f64;
        let min_reads = cx.threshold(&META, op.namespace, "min_reads");
        let share_limit = cx.threshold(&META, op.namespace, "share");
        let max_lookups = cx.threshold(&META, op.namespace, "max_lookups");
        let by_share = counts.reads as f64 >= min_reads && share > share_limit;
        let by_count = counts.with_lookup as f64 > max_lookups;
        if !(by_share || by_count) {
            return;
        }
        let mut evidence = BTreeMap::new();
        evidence.insert("reads".into(), json!(counts.reads));
        evidence.insert("reads_with_lookup".into(), json!(counts.with_lookup));
        evidence.insert("share".into(), json!((share * 1000.0).round() / 1000.0));
        evidence.insert(
            "joined_collections".into(),
            json!(counts.joined.iter().collect::<Vec<_>>()),
        );
        let message = format!(
            "{} of {} reads ({:.0} %) join with $lookup ({})",
            counts.with_lookup,
            counts.reads,
            share * 100.0,
            counts.joined.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        cx.report(
            &META,
            FindingDraft::about(op, "(reads)", META.severity, message, evidence),
        );
    }
}
