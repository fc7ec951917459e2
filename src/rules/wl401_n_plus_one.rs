//! WL401 n-plus-one: a read returns a list, then the application fetches,
//! per element, documents of another collection by a value taken from that
//! element (the blogging platform's V1 Q4: list a post's comments, then
//! each commenter's username). The engine links follow-ups to the list by
//! provenance (`analysis::follow_ups`): the filter's value came from one
//! listed document's field; follow-ups may return any number of documents;
//! a batched `$in` over the list is the fix and never counts.
//!
//! Reported when one list is followed `min_follow_ups` times with the same
//! link, by per-row work that covers the list (half its rows or more, or
//! every distinct value of its field), or — lists of one or two items, as
//! in CI fixtures — when `min_lists` lists of the same shape each had
//! every element followed. A few lookups whose values merely lie in a long
//! list are evidence of nothing: in a small vocabulary of users, one
//! visitor's own profile read matches another's listed authors. Nor is
//! one row's value asked again and again, when each row holds its own
//! (the signed-in user's notifications, request after request, after a
//! list of users).

use super::common::RuleTable;
use super::{
    FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, SavedPer, Severity, Threshold,
};
use crate::analysis::follow_ups::DISTINCT_KEPT;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL401",
    name: "n-plus-one",
    severity: Severity::Warning,
    summary: "A list read is followed by one query per element to fetch related documents.",
    advice: "Denormalize what each element needs into it (the blogging platform, V2: the username stored on each comment and \
             like), or fetch the related documents in one query with $in.",
    source: concat!(cosmos_real_world!(), " (V1 Q3–Q6; V2 denormalized usernames)"),
    thresholds: &[
        Threshold { name: "min_follow_ups", default: 3.0, help: "per-element queries after one list read from which it is reported" },
        Threshold { name: "min_lists", default: 3.0, help: "lists whose every element was followed by a query, from which it is reported whatever their size" },
    ],
};

/// Distinct values, at most, for which per-row lookups are the same few
/// documents fetched again (cache or embed them).
const FEW_VALUES: u64 = 3;

/// One link (follow-up namespace, leading shape, source field, filter
/// field) over the lists seen.
#[derive(Default)]
struct Seen {
    /// Most per-element follow-ups after one list, and that list's size.
    most: u64,
    most_of: u64,
    /// The distinct values that list's follow-ups asked for (up to 4).
    most_distinct: u64,
    /// Lists whose every element was followed.
    complete: u64,
}

impl crate::analysis::budget::Weight for Seen {
    fn weight(&self) -> usize {
        std::mem::size_of::<Seen>()
    }
}

/// ((follow-up namespace, leading shape), (source field, filter field)).
type LinkKey = ((String, String), (String, String));

#[derive(Default)]
pub struct NPlusOne {
    links: RuleTable<LinkKey, Seen>,
}

impl Rule for NPlusOne {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        let Some(f) = op.follow_up else { return };
        let seen = self.links.entry(
            (
                (op.namespace.to_string(), f.leading_shape.clone()),
                (f.source_field.clone(), f.field.clone()),
            ),
            cx.pool,
        );
        // Per-row work covers its list: half its rows or more, or every
        // distinct value of the field, when the list holds no more than
        // the follow-ups' distinct values told apart. A few lookups whose
        // values merely lie in a long list (other visitors' own profile
        // reads, whose ids are also listed authors') are not the list's
        // rows' work, however many distinct values they ask for.
        //
        // When each row holds a value of its own (a list of users by
        // `_id`), lookups beyond the distinct values asked for are one
        // row's again: one visitor's own notifications read request after
        // request, not work per row.
        let count = if f.list_values >= f.list_rows && f.distinct < DISTINCT_KEPT as u64 {
            f.count.min(f.distinct)
        } else {
            f.count
        };
        let covers = 2 * count >= f.list_rows
            || (f.list_values <= DISTINCT_KEPT as u64 && f.distinct >= f.list_values);
        if covers && count > seen.most {
            seen.most = count;
            seen.most_of = f.leading_docs;
            seen.most_distinct = f.distinct;
        }
        if count == f.leading_docs {
            seen.complete += 1;
        }
        let (most, most_of, complete) = (seen.most, seen.most_of, seen.complete);
        let distinct = seen.most_distinct;
        let many = most as f64 >= cx.threshold(&META, op.namespace, "min_follow_ups");
        let every = complete as f64 >= cx.threshold(&META, op.namespace, "min_lists");
        if !many && !every {
            return;
        }
        let mut evidence = BTreeMap::new();
        evidence.insert("leading_shape".into(), json!(f.leading_shape));
        evidence.insert("leading_pattern".into(), json!(f.leading_pattern));
        evidence.insert("follow_up_shape".into(), json!(&*op.shape.text));
        evidence.insert("linking_field".into(), json!(f.field));
        evidence.insert("source_field".into(), json!(f.source_field));
        evidence.insert("follow_ups_per_list".into(), json!(most));
        evidence.insert("lists_fully_followed".into(), json!(complete));
        evidence.insert("list_documents".into(), json!(f.leading_docs));
        // The same few documents fetched again and again (every file's
        // assetstore): a cache, or the few embedded, not a join per row.
        let few = many && distinct <= FEW_VALUES && most >= 2 * distinct;
        if few {
            evidence.insert("distinct_values".into(), json!(distinct));
        }
        let how = if few {
            format!(
                "after a list of {most_of} documents from {}, {most} queries fetch from {} by `{}`, one per listed document's `{}`, \
                 for only {distinct} distinct value{}: cache or embed the few (they are the same documents fetched again on every row)",
                f.leading_namespace,
                op.namespace,
                f.field,
                f.source_field,
                if distinct == 1 { "" } else { "s" }
            )
        } else if many {
            format!(
                "after a list of {most_of} documents from {}, {most} queries fetch from {} by `{}`, one per listed document's `{}`",
                f.leading_namespace, op.namespace, f.field, f.source_field
            )
        } else {
            format!(
                "{complete} lists from {} had every document followed by a query on {} by `{}` (its `{}`)",
                f.leading_namespace, op.namespace, f.field, f.source_field
            )
        };
        // Under request units: one `$in` for the list instead of a query
        // per row saves all but one query's base charge.
        let saved = cx.request_units_saved(
            crate::analysis::request_units::batch_saving(most),
            SavedPer::List,
        );
        let draft = FindingDraft::about(
            op,
            format!("{} → {}.{}", f.leading_namespace, op.namespace, f.field),
            META.severity,
            how,
            evidence,
        )
        .with_saving(saved);
        // Its own request shows the pattern (many follow-ups, or its
        // whole list followed), or it only adds to what others showed: a
        // test that reads one document after a list is not an N+1's test.
        let shown_here = (covers
            && f.count as f64 >= cx.threshold(&META, op.namespace, "min_follow_ups"))
            || (f.count == f.leading_docs && f.leading_docs >= 2);
        if shown_here {
            cx.report(&META, draft);
        } else {
            cx.report_again(&META, draft);
        }
    }
}
