//! The platform the application runs on: what its limits are, and whether
//! its operations are priced in request units (Azure Cosmos DB for MongoDB,
//! RU-based). Set by `--target`, or detected from the upstream's hello (see
//! `hello`), else MongoDB's.

mod hello;

pub use hello::detect;

use serde::{Deserialize, Serialize};

/// A platform that speaks MongoDB's wire protocol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Target {
    /// MongoDB itself (and FerretDB, which follows its limits).
    #[default]
    #[serde(rename = "mongodb")]
    MongoDb,
    /// Azure Cosmos DB for MongoDB, request-unit (RU) based: operations
    /// are priced in RU, items are at most 2 MB, a logical partition at
    /// most 20 GB.
    #[serde(rename = "cosmos-ru")]
    CosmosRu,
    /// Azure Cosmos DB for MongoDB vCore: MongoDB's limits, priced by
    /// cluster tier, not per operation.
    #[serde(rename = "cosmos-vcore")]
    CosmosVcore,
    /// DocumentDB (Amazon DocumentDB, and the open-source DocumentDB on
    /// PostgreSQL): MongoDB's document limit.
    #[serde(rename = "documentdb")]
    DocumentDb,
}

/// How the target in force was chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetSource {
    /// `--target`, `WIRELINT_TARGET` or `[proxy] target`.
    Set,
    /// From the upstream's reply to a hello.
    Detected,
    /// Nothing set and nothing detected (yet): MongoDB's.
    #[default]
    Default,
}

/// The target in force and how it was chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetChoice {
    pub target: Target,
    pub source: TargetSource,
}

/// Every target, by the name `--target` takes.
pub const ALL: [Target; 4] = [
    Target::MongoDb,
    Target::CosmosRu,
    Target::CosmosVcore,
    Target::DocumentDb,
];

/// The largest document MongoDB (and a platform following it) stores.
pub const MONGODB_MAX_DOCUMENT: u64 = 16 * 1024 * 1024;
/// The largest item Azure Cosmos DB for MongoDB (RU) stores: 2 MB
/// (*Azure Cosmos DB service quotas*, per-item limits).
pub const COSMOS_RU_MAX_ITEM: u64 = 2 * 1024 * 1024;
/// The most one logical partition (the documents sharing a partition-key
/// value) of Azure Cosmos DB may hold: 20 GB (*Azure Cosmos DB service
/// quotas*; *Partitioning and horizontal scaling in Azure Cosmos DB*).
pub const COSMOS_LOGICAL_PARTITION_BYTES: u64 = 20 * 1024 * 1024 * 1024;

/// Azure Cosmos DB for MongoDB's throttling error: the request rate is
/// larger than the throughput provisioned (*Troubleshoot common issues in
/// Azure Cosmos DB's API for MongoDB*).
pub const TOO_MANY_REQUESTS: i32 = 16500;
/// The request ran past its time limit: on Cosmos DB, among other causes,
/// when the provisioned request units cannot complete it (the same page).
pub const EXCEEDED_TIME_LIMIT: i32 = 50;

/// Whether a server error code says the request was throttled: 16500
/// anywhere (only Cosmos DB sends it), 50 on Cosmos DB (RU) only
/// (elsewhere it is MongoDB's MaxTimeMSExpired, a query's own time limit).
pub fn is_throttling(code: i32, target: Target) -> bool {
    code == TOO_MANY_REQUESTS || (code == EXCEEDED_TIME_LIMIT && target == Target::CosmosRu)
}

impl Target {
    /// The name `--target` takes and the report shows.
    pub fn name(self) -> &'static str {
        match self {
            Target::MongoDb => "mongodb",
            Target::CosmosRu => "cosmos-ru",
            Target::CosmosVcore => "cosmos-vcore",
            Target::DocumentDb => "documentdb",
        }
    }

    /// What it is called in advice.
    pub fn title(self) -> &'static str {
        match self {
            Target::MongoDb => "MongoDB",
            Target::CosmosRu => "Azure Cosmos DB for MongoDB (RU)",
            Target::CosmosVcore => "Azure Cosmos DB for MongoDB vCore",
            Target::DocumentDb => "DocumentDB",
        }
    }

    pub fn parse(text: &str) -> Option<Target> {
        let text = text.trim();
        ALL.into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(text))
    }

    /// The largest document the platform stores.
    pub fn max_document_bytes(self) -> u64 {
        match self {
            Target::CosmosRu => COSMOS_RU_MAX_ITEM,
            _ => MONGODB_MAX_DOCUMENT,
        }
    }

    /// Whether operations are priced in request units.
    pub fn request_units(self) -> bool {
        self == Target::CosmosRu
    }

    /// Whether a logical partition has a size limit (Cosmos DB's 20 GB).
    pub fn logical_partition_limit(self) -> Option<u64> {
        (self == Target::CosmosRu).then_some(COSMOS_LOGICAL_PARTITION_BYTES)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in ALL {
            assert_eq!(Target::parse(t.name()), Some(t));
            assert_eq!(
                serde_json::to_string(&t).unwrap(),
                format!("\"{}\"", t.name())
            );
        }
        assert_eq!(Target::parse(" Cosmos-RU "), Some(Target::CosmosRu));
        assert_eq!(Target::parse("cosmos"), None);
    }

    #[test]
    fn limits_by_target() {
        assert_eq!(Target::CosmosRu.max_document_bytes(), 2 << 20);
        assert_eq!(Target::MongoDb.max_document_bytes(), 16 << 20);
        assert_eq!(Target::DocumentDb.max_document_bytes(), 16 << 20);
        assert!(Target::CosmosRu.request_units());
        assert!(!Target::CosmosVcore.request_units());
        assert_eq!(Target::MongoDb.logical_partition_limit(), None);
    }
}
