//! WL504 lookup-heavy: reads on a collection lean on `$lookup` — more than
//! half of them (once there are enough to judge), or more than 100 in all,
//! the thresholds Atlas's schema advisor uses. Each `$lookup` is a join done
//! on every read; the seeds' answer is to embed or denormalize what is
//! joined.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::command::Kind;
use crate::wire::bson_walk::{field, pairs, values, Value};
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
fn lookups<'a>(pipeline: &'a [u8], out: &mut BTreeSet<&'a str>, depth: usize) {
    if depth > 4 {
        return;
    }
    let sub_pipeline = |doc: &'a [u8]| field(doc, b"pipeline").filter(|e| e.element_type == 0x04);
    for stage in values(pipeline).map_while(Result::ok) {
        let Value::Document(stage) = stage else {
            continue;
        };
        for (name, body) in pairs(stage).map_while(Result::ok) {
            match (name, body) {
                ("$lookup" | "$graphLookup", Value::Document(l)) => {
                    out.insert(field(l, b"from").and_then(|e| e.as_str()).unwrap_or("?"));
                    if let Some(p) = sub_pipeline(l) {
                        lookups(p.value, out, depth + 1);
                    }
                }
                ("$facet", Value::Document(f)) => {
                    for sub in values(f).map_while(Result::ok) {
                        if let Value::Array(p) = sub {
                            lookups(p, out, depth + 1);
                        }
                    }
                }
                ("$unionWith", Value::Document(u)) => {
                    if let Some(p) = sub_pipeline(u) {
                        lookups(p.value, out, depth + 1);
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
            if counts.joined.contains(from) {
                continue;
            }
            if counts.joined.len() >= MAX_JOINED {
                break;
            }
            counts.joined.insert(from.to_string());
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
        let mut joined = String::new();
        for (i, name) in counts.joined.iter().enumerate() {
            if i > 0 {
                joined.push_str(", ");
            }
            joined.push_str(name);
        }
        // The percentage as `{:.0}` writes it (to the nearest, ties to
        // even), as an integer: reported on every such read, and a float's
        // formatting is most of the message's cost.
        let percent = (share * 100.0).round_ties_even() as u64;
        let message = format!(
            "{} of {} reads ({percent} %) join with $lookup ({joined})",
            counts.with_lookup, counts.reads,
        );
        cx.report(
            &META,
            FindingDraft::about(op, "(reads)", META.severity, message, evidence),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    /// Every collection a pipeline joins, at any depth up to the bound:
    /// `$lookup` and `$graphLookup` (and their own pipelines), `$facet`'s
    /// and `$unionWith`'s pipelines; a `$lookup` without `from` reads `?`.
    #[test]
    fn lookups_finds_every_joined_collection() {
        let doc = rawdoc! {"pipeline": [
            {"$match": {"userId": "u1"}},
            {"$lookup": {"from": "users", "localField": "userId", "foreignField": "_id", "as": "a",
                         "pipeline": [{"$lookup": {"from": "avatars", "pipeline": [], "as": "v"}}]}},
            {"$facet": {"x": [{"$graphLookup": {"from": "follows", "startWith": "$a"}}], "y": [{"$limit": 1}]}},
            {"$unionWith": {"coll": "archive", "pipeline": [{"$lookup": {"as": "w"}}]}},
        ]};
        let pipeline = doc.get_array("pipeline").unwrap();
        let mut joined = BTreeSet::new();
        lookups(pipeline.as_bytes(), &mut joined, 0);
        assert_eq!(
            joined.into_iter().collect::<Vec<_>>(),
            vec!["?", "avatars", "follows", "users"]
        );
    }

    /// The percentage written as an integer reads as `{:.0}` of the share
    /// would (every share of up to 1,000 reads checked).
    #[test]
    fn percent_is_what_float_formatting_writes() {
        for reads in 1u64..=1_000 {
            for with_lookup in 0..=reads {
                let share = with_lookup as f64 / reads as f64;
                let percent = (share * 100.0).round_ties_even() as u64;
                assert_eq!(percent.to_string(), format!("{:.0}", share * 100.0));
            }
        }
    }

    /// Nesting past the bound is not followed.
    #[test]
    fn lookups_stops_at_its_depth_bound() {
        let mut inner = rawdoc! {"$lookup": {"from": "deepest"}};
        for _ in 0..6 {
            inner = rawdoc! {"$facet": {"f": [inner]}};
        }
        let doc = rawdoc! {"pipeline": [inner, {"$lookup": {"from": "top"}}]};
        let mut joined = BTreeSet::new();
        lookups(
            doc.get_array("pipeline").unwrap().as_bytes(),
            &mut joined,
            0,
        );
        assert_eq!(joined.into_iter().collect::<Vec<_>>(), vec!["top"]);
    }
}
