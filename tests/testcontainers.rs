//! The end-to-end checks against real MongoDB (standalone and a one-member
//! replica set) in containers. They need a Docker engine, so they are
//! `#[ignore]`d: `scripts/test.sh` runs them with `--ignored` when `docker
//! info` answers, and otherwise prints that they were skipped and why. They
//! are never counted as passed when skipped.

mod common;

use mongodb::bson::{doc, Document};
use mongodb::options::ClientOptions;
use mongodb::Client;
use std::time::Duration;
use testcontainers_modules::mongo::Mongo;
use testcontainers_modules::testcontainers::runners::AsyncRunner;

async fn client(uri: &str) -> Client {
    let mut options = ClientOptions::parse(uri).await.unwrap();
    options.server_selection_timeout = Some(Duration::from_secs(20));
    Client::with_options(options).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; scripts/test.sh runs it with --ignored when one is reachable"]
async fn mongodb_standalone_through_wirelint_matches_direct_and_compresses() {
    let node = Mongo::default()
        .start()
        .await
        .expect("starting mongo:5 container");
    let port = node.get_host_port_ipv4(27017).await.unwrap();
    let upstream = format!("mongodb://127.0.0.1:{port}/");
    let proxy = common::proxy(&upstream).await;
    let direct = common::crud(&client(&upstream).await, "tc_direct").await;
    let through = common::crud(&client(&proxy.connection_string()).await, "tc_proxy").await;
    assert_eq!(direct, through);

    // Real MongoDB negotiates compression: wirelint's analysis inflates it.
    for compressor in ["snappy", "zlib", "zstd"] {
        let c = client(&format!(
            "{}?compressors={compressor}",
            proxy.connection_string()
        ))
        .await;
        let coll = c.database("tc_compress").collection::<Document>("c");
        coll.insert_one(doc! {"text": "z".repeat(4000)})
            .await
            .unwrap();
        coll.find_one(doc! {}).await.unwrap();
        let seen = common::eventually(Duration::from_secs(5), || {
            proxy
                .stats()
                .compressed
                .get(compressor)
                .copied()
                .unwrap_or(0)
                > 0
        })
        .await;
        assert!(seen, "{compressor}: {:?}", proxy.stats().compressed);
    }
    let stats = proxy.shutdown().await;
    assert!(stats.decode_errors.is_empty(), "{:?}", stats.decode_errors);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine; scripts/test.sh runs it with --ignored when one is reachable"]
async fn mongodb_replica_set_keeps_the_driver_on_wirelint() {
    let node = Mongo::repl_set()
        .start()
        .await
        .expect("starting mongo:5 replica set");
    let port = node.get_host_port_ipv4(27017).await.unwrap();
    let proxy = common::proxy(&format!("mongodb://127.0.0.1:{port}/?replicaSet=rs")).await;
    let seen = common::servers_seen(&proxy.connection_string()).await;
    assert_eq!(seen, vec![proxy.local_addr().to_string()]);
    proxy.shutdown().await;
}
