//! WL104 values-as-keys: updates that use ids (or hashes, or dates) as
//! field names: `{$inc: {"newMessages.<groupId>": 1}}`, `{$set:
//! {"members.<userId>": {…}}}`. Each new id adds a field to the document,
//! so it grows with the number of ids, and no index can serve a query on
//! one of them (an index names a field, and each id is another field).
//!
//! Which keys are values is `command::is_value_key`'s: an ObjectId, a UUID,
//! a hash, a long number, a date, a generated token. A field is reported
//! once updates have written it under `min_values` different ids; a map
//! keyed by a handful of fixed names (`title.en`, `title.fr`) never
//! qualifies, since those names are not values. The ids themselves are
//! never kept: only a hash of each, to count them.

use super::common::RuleTable;
use super::{FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold};
use crate::analysis::budget::Weight;
use crate::analysis::command::{fold_path, is_value_key, Kind, VALUE_KEY};
use crate::analysis::hash::fnv1a;
use crate::wire::bson_walk::elements;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL104",
    name: "values-as-keys",
    severity: Severity::Warning,
    summary: "Updates use ids as field names: each new id adds a field, so documents grow with the ids and no index can serve them.",
    advice: "Keep the pairs as an array of {k, v} (the attribute pattern: `newMessages: [{k: groupId, v: 3}]`, \
             one index on `newMessages.k`, updated through the positional `$` or arrayFilters) when they are \
             few per document; when they have no bound, give them a collection of their own, one document per \
             pair (`{userId, groupId, unread}`, indexed on both).",
    source: "MongoDB, “Group Data with the Attribute Pattern”",
    thresholds: &[Threshold {
        name: "min_values",
        default: 3.0,
        help: "different ids written under one field before it is reported",
    }],
};

/// Ids told apart per field, at most: enough to pass any sensible
/// `min_values`.
const KEPT: usize = 8;

/// The ids a field was written under (their hashes), and the updates.
#[derive(Default)]
struct Seen {
    ids: [u32; KEPT],
    distinct: usize,
    updates: u64,
}

impl Weight for Seen {
    fn weight(&self) -> usize {
        std::mem::size_of::<Seen>()
    }
}

impl Seen {
    /// Counts `id` (its hash) unless seen; how many are known now.
    fn add(&mut self, id: u32) -> usize {
        if self.distinct < KEPT && !self.ids[..self.distinct].contains(&id) {
            self.ids[self.distinct] = id;
            self.distinct += 1;
        }
        self.distinct
    }
}

#[derive(Default)]
pub struct ValuesAsKeys {
    /// (namespace, field) → what was seen.
    fields: RuleTable<(String, String), Seen>,
}

/// For each path of an operator update with a key that is a value: the
/// field the ids sit under (folded, `quest.members`), the first id's hash,
/// and the operator.
fn id_keyed_paths(update: &bson::RawDocument) -> Vec<(String, u32, String)> {
    let mut out = Vec::new();
    for op in elements(update.as_bytes()).map_while(Result::ok) {
        if op.element_type != 0x03 {
            continue;
        }
        // On the raw keys: most hold no digit, and are passed over
        // without decoding (`is_value_key` looks for one first).
        for e in elements(op.value).map_while(Result::ok) {
            let Some(at) = e.key.split(|b| *b == b'.').position(is_value_key) else {
                continue;
            };
            let (Ok(path), Ok(op)) = (std::str::from_utf8(e.key), std::str::from_utf8(op.key))
            else {
                continue;
            };
            let parts: Vec<&str> = path.split('.').collect();
            let field = fold_path(&parts[..at].join(".")).into_owned();
            let id = fnv1a(parts[at].as_bytes()) as u32;
            out.push((field, id, op.to_string()));
        }
    }
    out
}

impl Rule for ValuesAsKeys {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::REQUEST
    }

    fn on_request(&mut self, op: &OpView<'_>, cx: &mut RuleContext<'_>) {
        // The shape writes a key that is a value as `<id>`: an update
        // whose shape has none is passed over without a walk.
        if !matches!(op.cmd.kind, Kind::Update | Kind::FindAndModify) || !op.shape.value_keys {
            return;
        }
        for u in op.cmd.updates() {
            let Some(doc) = u.update.filter(|_| u.is_operator_update()) else {
                continue;
            };
            for (field, id, operator) in id_keyed_paths(doc) {
                if field.is_empty() {
                    // The ids are top-level fields: named by the document.
                    continue;
                }
                let seen = self
                    .fields
                    .entry((op.namespace.to_string(), field.clone()), cx.pool);
                seen.updates += 1;
                let distinct = seen.add(id);
                let updates = seen.updates;
                if (distinct as f64) < cx.threshold(&META, op.namespace, "min_values") {
                    continue;
                }
                let mut evidence = BTreeMap::new();
                evidence.insert("operator".into(), json!(operator));
                evidence.insert("updates".into(), json!(updates));
                evidence.insert(
                    "distinct_ids".into(),
                    json!(if distinct >= KEPT {
                        format!("{KEPT} or more")
                    } else {
                        distinct.to_string()
                    }),
                );
                let more = if distinct >= KEPT { " or more" } else { "" };
                cx.report(
                    &META,
                    FindingDraft::about(
                        op,
                        field.clone(),
                        Severity::Warning,
                        format!(
                            "`{field}.{VALUE_KEY}`: ids used as field names ({operator}, {distinct}{more} different ids in {updates} updates): \
                             each new id adds a field, so the document grows with the ids, and no index can serve a query on one"
                        ),
                        evidence,
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::RawDocumentBuf;

    fn update(set: &[(&str, i32)]) -> RawDocumentBuf {
        let mut fields = bson::Document::new();
        for (k, v) in set {
            fields.insert(*k, *v);
        }
        RawDocumentBuf::try_from(&bson::doc! {"$inc": fields, "$set": {"seen": true}}).unwrap()
    }

    #[test]
    fn fields_under_ids_are_found_and_names_are_not() {
        let u = update(&[
            ("newMessages.65a0c0ffee00112233445566", 1),
            (
                "quest.members.3fa85f64-5717-4562-b3fc-2c963f66afa6.score",
                2,
            ),
            ("title.en", 1),
            ("items.3.qty", 1),
            ("count", 1),
        ]);
        let got: Vec<(String, String)> = id_keyed_paths(&u)
            .into_iter()
            .map(|(f, _, op)| (f, op))
            .collect();
        assert_eq!(
            got,
            [
                ("newMessages".to_string(), "$inc".to_string()),
                ("quest.members".to_string(), "$inc".to_string())
            ]
        );
    }

    #[test]
    fn ids_are_counted_once_up_to_the_kept() {
        let mut seen = Seen::default();
        assert_eq!(seen.add(1), 1);
        assert_eq!(seen.add(1), 1);
        assert_eq!(seen.add(2), 2);
        for id in 3..20 {
            seen.add(id);
        }
        assert_eq!(seen.distinct, KEPT);
    }
}
