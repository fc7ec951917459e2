//! Partition keys discovered from a sharded cluster: a read-only side
//! connection (the `mongodb` driver, with the upstream URI's own options and
//! credentials) reads `config.collections` once at start. It fails soft: an
//! error is logged and the proxy carries on with what the config file and
//! the traffic say.

use crate::analysis::partition::KeyKind;
use mongodb::bson::{doc, Document};
use mongodb::options::ClientOptions;
use std::time::Duration;

/// `(namespace, key paths, kind)` from `config.collections` documents
/// (`{_id: "db.coll", key: {field: 1 | "hashed", …}, dropped?: bool}`).
pub fn keys_from_config_collections(docs: &[Document]) -> Vec<DiscoveredKey> {
    docs.iter()
        .filter(|d| !d.get_bool("dropped").unwrap_or(false))
        .filter_map(|d| {
            let ns = d.get_str("_id").ok()?;
            let pattern = d.get_document("key").ok()?;
            let key: Vec<String> = pattern.keys().cloned().collect();
            let hashed = pattern.values().any(|v| v.as_str() == Some("hashed"));
            let kind = if hashed {
                KeyKind::Hashed
            } else {
                KeyKind::Ranged
            };
            (!key.is_empty() && !ns.starts_with("config.")).then(|| (ns.to_string(), key, kind))
        })
        .collect()
}

/// Reads the keys of every sharded collection, when the upstream is a
/// sharded cluster (its hello says `msg: "isdbgrid"`); an empty list
/// otherwise.
/// A discovered key: namespace, paths, kind.
pub type DiscoveredKey = (String, Vec<String>, KeyKind);

pub async fn discover(uri: &str, timeout: Duration) -> Result<Vec<DiscoveredKey>, String> {
    let mut options = ClientOptions::parse(uri).await.map_err(|e| e.to_string())?;
    options.app_name = Some("wirelint-partition-key-discovery".into());
    options.server_selection_timeout = Some(timeout);
    options.connect_timeout = Some(timeout);
    options.max_pool_size = Some(1);
    let client = mongodb::Client::with_options(options).map_err(|e| e.to_string())?;
    let hello = client
        .database("admin")
        .run_command(doc! {"hello": 1})
        .await
        .map_err(|e| e.to_string())?;
    if hello.get_str("msg").ok() != Some("isdbgrid") {
        return Ok(Vec::new());
    }
    let mut cursor = client
        .database("config")
        .collection::<Document>("collections")
        .find(doc! {})
        .projection(doc! {"_id": 1, "key": 1, "dropped": 1})
        .await
        .map_err(|e| e.to_string())?;
    let mut docs = Vec::new();
    while cursor.advance().await.map_err(|e| e.to_string())? {
        docs.push(cursor.deserialize_current().map_err(|e| e.to_string())?);
    }
    client.shutdown().await;
    Ok(keys_from_config_collections(&docs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_collections_documents() {
        let docs = vec![
            doc! {"_id": "blog.posts", "key": {"postId": "hashed"}, "unique": false},
            doc! {"_id": "blog.events", "key": {"tenant": 1, "at": 1}},
            doc! {"_id": "blog.old", "key": {"x": 1}, "dropped": true},
            doc! {"_id": "config.system.sessions", "key": {"_id": 1}},
        ];
        assert_eq!(
            keys_from_config_collections(&docs),
            vec![
                (
                    "blog.posts".to_string(),
                    vec!["postId".to_string()],
                    KeyKind::Hashed
                ),
                (
                    "blog.events".to_string(),
                    vec!["tenant".to_string(), "at".to_string()],
                    KeyKind::Ranged
                ),
            ]
        );
    }
}
