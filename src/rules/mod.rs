//! The rules: exactly one file per rule id, named after it, each a
//! [`Rule`] (the trait and what its hooks see are defined by the analysis,
//! in [`crate::analysis::rule`]). What two rules share lives in `common`; no
//! rule imports another. [`all`] is the catalogue the application hands to
//! the analysis engine.

/// The public pages the rules come from, cited by title in everything a
/// user reads (advice, `wirelint rules`, SARIF, docs/rules).
macro_rules! cosmos_modeling {
    () => {
        "Azure Cosmos DB, “Data modeling in Azure Cosmos DB”"
    };
}
macro_rules! mongodb_subset {
    () => {
        "MongoDB, “Model One-to-Many Relationships with Embedded Documents”"
    };
}
macro_rules! mongodb_unbounded {
    () => {
        "MongoDB, “Avoid Unbounded Arrays”"
    };
}
macro_rules! cosmos_real_world {
    () => {
        "Azure Cosmos DB, “How to model and partition data on Azure Cosmos DB using a real-world example”"
    };
}

mod common;
mod wl101_unbounded_array_growth;
mod wl102_large_array;
mod wl103_large_document;
mod wl104_values_as_keys;
mod wl201_cross_partition_query;
mod wl202_cross_partition_sort;
mod wl203_partition_key_advice;
mod wl204_throttled_requests;
mod wl205_logical_partition_growth;
mod wl301_missing_subset;
mod wl302_slice_on_read;
mod wl401_n_plus_one;
mod wl402_chatty_request;
mod wl403_count_on_read;
mod wl404_read_then_write;
mod wl405_tree_walk;
mod wl501_join_collection;
mod wl502_growing_reference_array;
mod wl503_hot_embedded_data;
mod wl504_lookup_heavy;
mod wl505_missing_type_discriminator;

pub use crate::analysis::findings::{
    Change, Finding, FindingDraft, FindingEvent, FindingStore, SavedPer, Saving, Severity,
};
pub use crate::analysis::rule::{
    CompletedOp, DocSource, FollowUp, Hooks, OpView, Rule, RuleContext, RuleMeta, RuleOverrides,
    RuleSettings, Threshold,
};

/// Every rule wirelint ships, in id order.
pub fn all() -> Vec<Box<dyn Rule>> {
    vec![
        Box::new(wl101_unbounded_array_growth::UnboundedArrayGrowth::default()),
        Box::new(wl102_large_array::LargeArray),
        Box::new(wl103_large_document::LargeDocument::default()),
        Box::new(wl104_values_as_keys::ValuesAsKeys::default()),
        Box::new(wl201_cross_partition_query::CrossPartitionQuery::default()),
        Box::new(wl202_cross_partition_sort::CrossPartitionSort::default()),
        Box::new(wl203_partition_key_advice::PartitionKeyAdvice::default()),
        Box::new(wl204_throttled_requests::ThrottledRequests::default()),
        Box::new(wl205_logical_partition_growth::LogicalPartitionGrowth::default()),
        Box::new(wl301_missing_subset::MissingSubset::default()),
        Box::new(wl302_slice_on_read::SliceOnRead::default()),
        Box::new(wl401_n_plus_one::NPlusOne::default()),
        Box::new(wl402_chatty_request::ChattyRequest::default()),
        Box::new(wl403_count_on_read::CountOnRead::default()),
        Box::new(wl404_read_then_write::ReadThenWrite::default()),
        Box::new(wl405_tree_walk::TreeWalk::default()),
        Box::new(wl501_join_collection::JoinCollection::default()),
        Box::new(wl502_growing_reference_array::GrowingReferenceArray::default()),
        Box::new(wl503_hot_embedded_data::HotEmbeddedData::default()),
        Box::new(wl504_lookup_heavy::LookupHeavy::default()),
        Box::new(wl505_missing_type_discriminator::MissingTypeDiscriminator::default()),
    ]
}

pub fn catalogue() -> Vec<&'static RuleMeta> {
    all().iter().map(|r| r.meta()).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_file_per_rule_id() {
        let mut ids: Vec<&str> = super::catalogue().iter().map(|m| m.id).collect();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "each rule id once, in order");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/rules");
        for meta in super::catalogue() {
            let file = format!(
                "{}_{}.rs",
                meta.id.to_lowercase(),
                meta.name.replace('-', "_")
            );
            assert!(
                dir.join(&file).exists(),
                "{} lives in src/rules/{file}",
                meta.id
            );
        }
    }

    /// What users read cites the public pages by title: never a seed's
    /// file number, which they cannot look up.
    #[test]
    fn sources_are_cited_by_title() {
        let seed_number = |text: &str| {
            let lower = text.to_lowercase();
            lower.match_indices("seed").any(|(i, _)| {
                lower[i + 4..]
                    .trim_start_matches(['s', ' '])
                    .starts_with(|c: char| c.is_ascii_digit())
            })
        };
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/rules");
        for meta in super::catalogue() {
            for text in [meta.summary, meta.advice, meta.source] {
                assert!(!seed_number(text), "{}: {text}", meta.id);
            }
            assert!(
                meta.source.contains('“'),
                "{} names its source page: {}",
                meta.id,
                meta.source
            );
            let page = std::fs::read_to_string(docs.join(format!("{}.md", meta.id))).unwrap();
            assert!(
                !seed_number(&page),
                "docs/rules/{}.md cites a seed number",
                meta.id
            );
            assert!(!page.contains("(coming)"), "docs/rules/{}.md", meta.id);
        }
        assert!(seed_number("as in seed 004 V3") && seed_number("seeds 000, 002"));
    }
}
