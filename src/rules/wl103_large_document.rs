//! WL103 large-document: a document over 2 MiB (Atlas "bloated documents";
//! the Azure Cosmos DB for NoSQL item limit) is a warning, over 10 MiB (most
//! of the way to the 16 MiB BSON limit) an error. Seen on inserts,
//! replacements and reads alike. On a platform with a smaller document
//! limit (Azure Cosmos DB for MongoDB, RU: 2 MB items) the default
//! thresholds shrink in proportion (256 KiB and 1.25 MiB there); thresholds
//! the user set are kept as set.

use super::common::human_bytes;
use super::common::RuleTable;
use super::{
    DocSource, FindingDraft, Hooks, OpView, Rule, RuleContext, RuleMeta, Severity, Threshold,
};
use crate::analysis::namespaces::Doc;
use crate::analysis::target::MONGODB_MAX_DOCUMENT;
use serde_json::json;
use std::collections::BTreeMap;

pub static META: RuleMeta = RuleMeta {
    id: "WL103",
    name: "large-document",
    severity: Severity::Warning,
    summary: "Documents are large enough to cost on every read and write, and to approach the 16 MiB BSON limit.",
    advice: "Split the document: keep in it only what is read together (subset pattern) and move the rest — \
             large arrays, rarely used detail — to its own collection with a reference back.",
    source: concat!(mongodb_unbounded!(), " (subset and reference patterns)"),
    thresholds: &[
        Threshold { name: "warn", default: 2_097_152.0, help: "bytes; a warning from this size" },
        Threshold { name: "error", default: 10_485_760.0, help: "bytes; an error from this size" },
    ],
};

/// A namespace's documents over the warning size: each counted once,
/// however often it is inserted, read or replaced (by its `_id`'s hash).
#[derive(Default)]
struct Large {
    ids: RuleTable<u64, ()>,
    largest: u64,
}

/// Its id table charges itself.
impl crate::analysis::budget::Weight for Large {
    fn weight(&self) -> usize {
        std::mem::size_of::<Large>()
    }
}

#[derive(Default)]
pub struct LargeDocument {
    seen: RuleTable<String, Large>,
}

impl Rule for LargeDocument {
    fn meta(&self) -> &'static RuleMeta {
        &META
    }

    fn hooks(&self) -> Hooks {
        Hooks::DOCUMENT
    }

    fn on_document(
        &mut self,
        op: &OpView<'_>,
        doc: &Doc<'_>,
        source: DocSource,
        cx: &mut RuleContext<'_>,
    ) {
        let size = doc.raw.as_bytes().len() as u64;
        let limit = cx.target.max_document_bytes();
        // The defaults are for MongoDB's 16 MiB; a smaller limit scales them.
        let scaled = |name: &str| {
            cx.settings
                .configured(&META, op.namespace, name)
                .unwrap_or_else(|| {
                    cx.threshold(&META, op.namespace, name) * limit as f64
                        / MONGODB_MAX_DOCUMENT as f64
                })
        };
        let warn = scaled("warn");
        if (size as f64) < warn {
            return;
        }
        let error = scaled("error");
        let severity = if size as f64 >= error {
            Severity::Error
        } else {
            Severity::Warning
        };
        let entry = self.seen.entry_ref(op.namespace, cx.pool);
        let id = doc.raw.get("_id").ok().flatten().map_or_else(
            || crate::analysis::shape::fnv1a(doc.raw.as_bytes()),
            crate::analysis::namespaces::value_hash,
        );
        entry.ids.entry(id, cx.pool);
        entry.largest = entry.largest.max(size);
        let (over, largest) = (entry.ids.len() as u64, entry.largest);
        let mut evidence = BTreeMap::new();
        evidence.insert("largest_bytes".into(), json!(largest));
        evidence.insert("documents_over_warn".into(), json!(over));
        evidence.insert("warn_bytes".into(), json!(warn as u64));
        evidence.insert("error_bytes".into(), json!(error as u64));
        evidence.insert("seen_when".into(), json!(source.as_str()));
        evidence.insert("platform_limit_bytes".into(), json!(limit));
        if cx.show_values {
            // Only with --show-values: the id of one such document. Its
            // conversion recurses, so an id nested past the server's limit
            // (only a reply could bring one) is not shown.
            let id = doc.raw.get("_id").ok().flatten().filter(|id| {
                let bytes = match id {
                    bson::RawBsonRef::Document(d) => d.as_bytes(),
                    bson::RawBsonRef::Array(a) => a.as_bytes(),
                    _ => &[],
                };
                crate::wire::bson_walk::check_nesting(bytes, crate::analysis::MAX_NESTING).is_ok()
            });
            if let Some(id) = id {
                if let Ok(id) = bson::Bson::try_from(id) {
                    evidence.insert("example_id".into(), json!(id.to_string()));
                }
            }
        }
        cx.report(
            &META,
            FindingDraft::about(
                op,
                "(documents)",
                severity,
                format!(
                    "{} document of {} (largest so far {}; {over} over {}{})",
                    source.as_str(),
                    human_bytes(size),
                    human_bytes(largest),
                    human_bytes(warn as u64),
                    // Said where the limit is not MongoDB's 16 MiB.
                    if limit == MONGODB_MAX_DOCUMENT {
                        String::new()
                    } else {
                        format!(
                            "; {} stores items of at most {}",
                            cx.target.title(),
                            human_bytes(limit)
                        )
                    }
                ),
                evidence,
            ),
        );
    }
}
