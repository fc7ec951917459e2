//! Real drivers in other languages, each running a scenario directly against
//! FerretDB and through wirelint; the outputs must be the same.
//! `scripts/test.sh` installs them (pymongo from PyPI; the Node driver and
//! mongosh from npm into tests/drivers/node).

mod common;

use common::{eventually, Backend, BackendOptions};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn drivers_dir() -> PathBuf {
    common::manifest_dir().join("tests/drivers")
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {what}: {e} (scripts/test.sh installs the driver tools)")
    });
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}\n(is the driver installed? scripts/test.sh installs it)",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn python() -> String {
    std::env::var("WIRELINT_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn pymongo(args: &[&str]) -> String {
    run(
        Command::new(python())
            .arg(drivers_dir().join("python/scenario.py"))
            .args(args),
        "pymongo scenario",
    )
}

/// The suites run on each of FerretDB's storages (`WIRELINT_BACKEND`,
/// scripts/test.sh): this shows the one asked for is the one written to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn the_backend_stores_where_wirelint_backend_says() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let client = common::client(&proxy.connection_string()).await;
    assert!(!backend.storage_holds("storage_check"));
    client
        .database("storage_check")
        .collection::<mongodb::bson::Document>("c")
        .insert_one(mongodb::bson::doc! {"a": 1})
        .await
        .unwrap();
    assert!(
        backend.storage_holds("storage_check"),
        "WIRELINT_BACKEND={:?}: the insert is not in that storage",
        std::env::var("WIRELINT_BACKEND").unwrap_or_default()
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, pymongo, Node")]
async fn pymongo_crud_through_wirelint_matches_direct() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let direct = pymongo(&["crud", &backend.uri(), "py_direct"]);
    let through = pymongo(&["crud", &proxy.connection_string(), "py_proxy"]);
    // The one expected difference: through wirelint the driver sees a
    // single server (Single topology) either way for a standalone backend.
    assert_eq!(direct, through);
    assert!(direct.contains("\"dup\": [[1, 11000]]"), "{direct}");
    let counted = eventually(Duration::from_secs(5), || {
        proxy.stats().commands.get("getMore").copied().unwrap_or(0) >= 10
    })
    .await;
    let stats = proxy.shutdown().await;
    assert!(counted, "{:?}", stats.commands);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, pymongo, Node")]
async fn pymongo_sees_a_replica_set_backend_as_one_router() {
    let backend = Backend::start(BackendOptions {
        repl_set: Some("rs0".into()),
        ..Default::default()
    });
    let proxy = common::proxy(&format!("mongodb://{}/?replicaSet=rs0", backend.addr())).await;
    let out = pymongo(&["crud", &proxy.connection_string(), "py_rs"]);
    assert!(out.contains("\"topology\": \"Sharded\""), "{out}");
    proxy.shutdown().await;
}

/// SCRAM-SHA-256 end to end with pymongo: the login succeeds through
/// wirelint, and a wrong password gets the backend's own error, unchanged.
/// (pymongo here: the Rust driver 3.9 fails SCRAM against FerretDB v1.24.2
/// even directly, "expected SCRAM authentication to have completed".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, pymongo, Node")]
async fn scram_sha_256_login_passes_through() {
    let backend = Backend::start(BackendOptions {
        user: Some(("alice".into(), "s3cret-pw".into())),
        ..Default::default()
    });
    // wirelint itself is given the password too (in its upstream URI, as
    // an operator might), so there is a password that could leak into its
    // logs and reports, besides the ones in the clients' SASL payloads.
    let proxy = common::proxy(&format!(
        "mongodb://alice:s3cret-pw@{}/?authSource=admin",
        backend.addr()
    ))
    .await;
    let port = proxy.local_addr().port();
    let uri =
        |host: &str, pw: &str| format!("mongodb://alice:{pw}@{host}/?authMechanism=SCRAM-SHA-256");
    let through_host = format!("127.0.0.1:{port}");

    let good = pymongo(&["login", &uri(&through_host, "s3cret-pw")]);
    assert!(good.contains("\"user\": \"alice\""), "{good}");

    let direct = pymongo(&["login", &uri(&backend.addr(), "wrong")]);
    let through = pymongo(&["login", &uri(&through_host, "wrong")]);
    assert_eq!(direct, through);
    assert!(
        through.contains("\"error\": 18") && through.contains("AuthenticationFailed"),
        "{through}"
    );

    let report = serde_json::to_string(&proxy.report()).unwrap();
    assert!(
        !report.contains("s3cret-pw"),
        "a password reached the report"
    );
    assert!(
        proxy.upstream().contains(&backend.addr()) && !proxy.upstream().contains("s3cret-pw"),
        "{}",
        proxy.upstream()
    );
    let stats = proxy.shutdown().await;
    assert!(
        stats.commands.get("saslStart").copied().unwrap_or(0) >= 2,
        "{:?}",
        stats.commands
    );
    assert!(
        !common::log_lines_with(&[&backend.addr()]).is_empty(),
        "the log never mentions the upstream, so the check below could not fail"
    );
    assert!(
        common::log_lines_with(&["s3cret-pw"]).is_empty(),
        "a password reached the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, pymongo, Node")]
async fn node_driver_through_wirelint_matches_direct() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let node = |uri: &str, db: &str| {
        run(
            Command::new("node")
                .current_dir(drivers_dir().join("node"))
                .arg("scenario.js")
                .arg(uri)
                .arg(db),
            "Node driver scenario",
        )
    };
    let direct = node(&backend.uri(), "node_direct");
    let through = node(&proxy.connection_string(), "node_proxy");
    assert_eq!(direct, through);
    assert!(direct.contains("\"dup\":11000"), "{direct}");
    assert!(
        eventually(Duration::from_secs(5), || proxy
            .stats()
            .commands
            .get("insert")
            .copied()
            .unwrap_or(0)
            >= 2)
        .await
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, pymongo, Node")]
async fn mongosh_through_wirelint_matches_direct() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let script = r#"
        const d = db.getSiblingDB(DBNAME);
        d.shell.drop();
        d.shell.insertMany([{_id: 1, v: "a"}, {_id: 2, v: "b"}, {_id: 3, v: "c"}]);
        d.shell.updateOne({_id: 2}, {$set: {v: "B"}});
        print(EJSON.stringify(d.shell.find().sort({_id: 1}).toArray()));
        print(d.shell.countDocuments({}));
    "#;
    let mongosh = |uri: &str, db: &str| {
        run(
            Command::new(drivers_dir().join("node/node_modules/.bin/mongosh"))
                .arg(uri)
                .arg("--quiet")
                .arg("--norc")
                .arg("--eval")
                .arg(format!("const DBNAME = '{db}'; {script}"))
                .env("MONGOSH_SKIP_NODE_VERSION_CHECK", "1")
                .env("DO_NOT_TRACK", "1"),
            "mongosh",
        )
    };
    let direct = mongosh(&backend.uri(), "sh_direct");
    let through = mongosh(&proxy.connection_string(), "sh_proxy");
    assert_eq!(direct, through);
    assert!(
        direct.contains(r#""v":"B""#) && direct.trim_end().ends_with('3'),
        "{direct}"
    );
    proxy.shutdown().await;
}
