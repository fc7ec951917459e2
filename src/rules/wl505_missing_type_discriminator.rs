//! WL505 missing-type-discriminator: one collection holds documents of
//! clearly different shapes (field sets that share less than half their
//! fields, each with two fields or more the other lacks), and no field common to them has values that tell them apart.
//! *Data modeling in Azure Cosmos DB*: books and their reviews in one collection need a
//! `type` field.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::namespaces::FieldSet;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL505",
    name: "missing-type-discriminator",
    severity: Severity::Warning,
    summary: "A collection mixes documents of different kinds with no field that says which kind each is.",
    advice: "Add a field that names the kind of each document (e.g. type: \"book\" / \"review\") and filter on it, so \
             queries, indexes and the application can tell the kinds apart.",
    source: concat!(cosmos_modeling!(), " (mixing entity types in one collection; the type field)"),
    thresholds: &[
        Threshold { name: "min_documents", default: 20.0, help: "documents seen before judging" },
        Threshold { name: "min_share", default: 0.1, help: "share of the documents a shape needs to count as a kind" },
    ],
};

#[derive(Default)]
pub struct MissingTypeDiscriminator {
    reported: RuleTable<String, String>,
}

fn jaccard(a: &FieldSet, b: &FieldSet) -> f64 {
    let common = a.fields.iter().filter(|f| b.fields.contains(f)).count();
    let union = a.fields.len() + b.fields.len() - common;
    if union == 0 {
        1.0
    } else {
        common as f64 / union as f64
    }
}

/// Whether one set holds every field of the other: the same entity with
/// optional fields, or a later version of its schema (new fields added),
/// not two kinds.
fn nested(a: &FieldSet, b: &FieldSet) -> bool {
    let within = |x: &FieldSet, y: &FieldSet| x.fields.iter().all(|f| y.fields.contains(f));
    within(a, b) || within(b, a)
}

/// Fields of `a` that `b` lacks, `_id` aside.
fn own(a: &FieldSet, b: &FieldSet) -> usize {
    a.fields
        .iter()
        .filter(|f| *f != "_id" && !b.fields.contains(f))
        .count()
}

/// Whether two field sets are two kinds of document: they share less than
/// half their fields, and each has at least two fields of its own. Sets
/// that differ by one field each hold one entity with alternatives (an
/// owner that is a user or an organization), not two kinds.
fn apart(a: &FieldSet, b: &FieldSet) -> bool {
    jaccard(a, b) < 0.5 && own(a, b) >= 2 && own(b, a) >= 2
}

/// The kinds: field sets grouped so that sets which nest (one holds every
/// field of the other: the same entity with an optional field) are one
/// kind. Each kind is the list of its sets.
fn kinds_of<'a>(sets: &[&'a FieldSet]) -> Vec<Vec<&'a FieldSet>> {
    let mut kinds: Vec<Vec<&FieldSet>> = Vec::new();
    for set in sets {
        let joins: Vec<usize> = (0..kinds.len())
            .filter(|&i| kinds[i].iter().any(|k| nested(k, set)))
            .collect();
        let mut kind = vec![*set];
        for i in joins.into_iter().rev() {
            kind.extend(kinds.remove(i));
        }
        kinds.push(kind);
    }
    kinds
}

/// A field present in every kind whose values tell the kinds apart: no
/// value of it is found in two kinds (a value shared by the sets of one
/// kind is that kind's).
fn discriminator(kinds: &[Vec<&FieldSet>]) -> Option<String> {
    let first = kinds.first()?.first()?;
    first
        .fields
        .iter()
        .filter(|f| *f != "_id")
        .find_map(|field| {
            let values: Vec<Vec<u64>> = kinds
                .iter()
                .map(|sets| {
                    let mut held = Vec::new();
                    for s in sets {
                        if let Some((_, v)) = s.values.iter().find(|(f, _)| f == field) {
                            held.extend(v.iter().copied());
                        }
                    }
                    (!held.is_empty()).then_some(held)
                })
                .collect::<Option<Vec<_>>>()?;
            let disjoint = values.iter().enumerate().all(|(i, a)| {
                values
                    .iter()
                    .skip(i + 1)
                    .all(|b| a.iter().all(|h| !b.contains(h)))
            });
            disjoint.then(|| field.clone())
        })
}

impl Rule for MissingTypeDiscriminator {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::TICK
    }

    fn on_tick(&mut self, cx: &mut RuleContext<'_>) {
        let mut drafts = Vec::new();
        for (namespace, ns) in cx.namespaces.map.iter() {
            if (ns.documents_seen as f64) < cx.threshold(&META, namespace, "min_documents") {
                continue;
            }
            let min_share = cx.threshold(&META, namespace, "min_share");
            let sets: Vec<&FieldSet> = ns
                .shapes()
                .into_iter()
                .filter(|s| s.count as f64 >= min_share * ns.documents_seen as f64)
                .collect();
            let all = kinds_of(&sets);
            // Kinds that differ clearly: every set of one is apart from
            // every set of the other.
            let distinct = all.iter().enumerate().any(|(i, a)| {
                all.iter()
                    .skip(i + 1)
                    .any(|b| a.iter().all(|x| b.iter().all(|y| apart(x, y))))
            });
            if !distinct || discriminator(&all).is_some() {
                continue;
            }
            // Each kind described by its largest set.
            let kinds: Vec<&FieldSet> = all
                .iter()
                .filter_map(|k| k.iter().max_by_key(|s| (s.fields.len(), s.count)).copied())
                .collect();
            let described: Vec<String> = kinds
                .iter()
                .map(|k| format!("{{{}}}", k.fields.join(", ")))
                .collect();
            let message = format!(
                "{} kinds of documents share no field that tells them apart: {}",
                kinds.len(),
                described.join(" / ")
            );
            if self.reported.get(namespace) == Some(&message) {
                continue;
            }
            self.reported
                .insert(namespace.clone(), message.clone(), cx.pool);
            let mut evidence = BTreeMap::new();
            evidence.insert(
                "shapes".into(),
                json!(kinds
                    .iter()
                    .map(|k| json!({"fields": k.fields, "documents": k.count}))
                    .collect::<Vec<_>>()),
            );
            drafts.push(FindingDraft {
                namespace: namespace.clone(),
                subject: "(document kinds)".into(),
                severity: META.severity,
                pattern: None,
                shape: None,
                message,
                evidence,
                advice: None,
                saving: None,
            });
        }
        for d in drafts {
            cx.report(&META, d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{apart, FieldSet};

    fn set(fields: &[&str]) -> FieldSet {
        let mut s = FieldSet::default();
        s.fields = fields.iter().map(|f| f.to_string()).collect();
        s.count = 10;
        s
    }

    #[test]
    fn kinds_are_apart_by_two_fields_of_their_own_each() {
        // Books and their reviews: two kinds.
        assert!(apart(
            &set(&["_id", "title", "isbn", "authors"]),
            &set(&["_id", "bookId", "rating", "text"])
        ));
        // Owned by a user or by an organization: one kind, two references.
        assert!(!apart(
            &set(&["_id", "organization"]),
            &set(&["_id", "owner"])
        ));
        assert!(!apart(
            &set(&["_id", "name", "organization"]),
            &set(&["_id", "name", "owner", "private"])
        ));
    }
}
