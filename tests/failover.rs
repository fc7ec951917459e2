//! A primary stepdown behind wirelint, with real drivers writing through it.
//!
//! FerretDB has no replica sets, so the test puts two "members" of its own
//! in front of one FerretDB: each answers hello itself as a member of `rs0`
//! (writable primary or secondary, naming the current primary) and passes
//! every other command to FerretDB while it is primary; as a secondary it
//! answers them `NotWritablePrimary` (10107). The stepdown: member A stops
//! being primary (hello says so; writes get 10107), no member is primary for
//! an election of 1 s, then B takes over. A stays reachable throughout, as a
//! stepped-down MongoDB primary does (since 4.2 a stepdown closes no
//! connection).
//!
//! pymongo and the Node driver insert numbered documents through wirelint
//! (upstream `mongodb://A,B/?replicaSet=rs0`) across the switch. Errors are
//! allowed only during the switch (≤ 2 s), and every write the server
//! acknowledged is stored exactly once (the write ledger).

mod common;

use common::{Backend, Frames};
use mongodb::bson::{doc, rawdoc, Document, RawDocumentBuf};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use wirelint::wire::{op_msg, op_query, Header, Message, OpCode};

/// Which member is primary (by index), if any; and the members' addresses.
struct Cluster {
    primary: Mutex<Option<usize>>,
    members: Vec<SocketAddr>,
    backend: String,
}

impl Cluster {
    fn hello(&self, me: usize, request_id: i32) -> RawDocumentBuf {
        let primary = *self.primary.lock().unwrap();
        let hosts: Vec<String> = self.members.iter().map(|a| a.to_string()).collect();
        let mut doc = rawdoc! {
            "hosts": [hosts[0].clone(), hosts[1].clone()],
            "setName": "rs0",
            "setVersion": 1,
            "isWritablePrimary": primary == Some(me),
            "ismaster": primary == Some(me),
            "secondary": primary != Some(me),
            "me": hosts[me].clone(),
            "maxBsonObjectSize": 16_777_216,
            "maxMessageSizeBytes": 48_000_000,
            "maxWriteBatchSize": 100_000,
            "localTime": mongodb::bson::DateTime::now(),
            "logicalSessionTimeoutMinutes": 30,
            "connectionId": request_id,
            "minWireVersion": 0,
            // 5.0, and no topologyVersion: drivers poll hello (every
            // heartbeatFrequencyMS) instead of streaming it.
            "maxWireVersion": 13,
            "readOnly": false,
            "ok": 1.0,
        };
        if let Some(p) = primary {
            doc.append(mongodb::bson::raw::cstr!("primary"), hosts[p].clone());
        }
        doc
    }
}

/// One member: answers hello, relays the rest to FerretDB while primary.
async fn member(cluster: Arc<Cluster>, me: usize, listener: TcpListener) {
    while let Ok((conn, _)) = listener.accept().await {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let mut client = Frames::new(conn);
            let mut backend: Option<Frames<TcpStream>> = None;
            while let Ok(request) = client.next().await {
                let header = Header::parse(&request).unwrap();
                let Ok(message) = Message::parse(&request) else {
                    return;
                };
                let name = message
                    .command_doc()
                    .and_then(|d| mongodb::bson::RawDocument::from_bytes(d).ok())
                    .and_then(|d| d.iter().next()?.ok().map(|(k, _)| k.to_string()))
                    .unwrap_or_default();
                let answer = |doc: RawDocumentBuf| match header.opcode() {
                    Some(OpCode::Query) => {
                        op_query::encode_reply(0, header.request_id, 0, 0, 0, &[doc.as_bytes()])
                    }
                    _ => op_msg::encode(0, header.request_id, 0, doc.as_bytes(), &[]),
                };
                let reply = if matches!(name.as_str(), "hello" | "isMaster" | "ismaster") {
                    answer(cluster.hello(me, header.request_id))
                } else if *cluster.primary.lock().unwrap() != Some(me) {
                    answer(
                        rawdoc! {"ok": 0.0, "errmsg": "not primary", "code": 10107, "codeName": "NotWritablePrimary"},
                    )
                } else {
                    if backend.is_none() {
                        let Ok(s) = TcpStream::connect(&cluster.backend).await else {
                            return;
                        };
                        backend = Some(Frames::new(s));
                    }
                    let b = backend.as_mut().unwrap();
                    if b.reader.write_all(&request).await.is_err() {
                        return;
                    }
                    match b.next().await {
                        Ok(reply) => reply,
                        Err(_) => return,
                    }
                };
                if client.reader.write_all(&reply).await.is_err() {
                    return;
                }
            }
        });
    }
}

#[derive(serde::Deserialize, Debug)]
struct WriterError {
    at: f64,
    error: String,
}

#[derive(serde::Deserialize)]
struct Ledger {
    acked: Vec<i64>,
    errors: Vec<WriterError>,
    tried: u64,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} tried, {} acknowledged, {} errors (first: {:?})",
            self.tried,
            self.acked.len(),
            self.errors.len(),
            self.errors.iter().take(3).collect::<Vec<_>>()
        )
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn python() -> String {
    std::env::var("WIRELINT_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, pymongo, Node")]
async fn drivers_keep_writing_across_a_stepdown() {
    let backend = Backend::shared();
    let (a, b) = (
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    );
    let cluster = Arc::new(Cluster {
        primary: Mutex::new(Some(0)),
        members: vec![a.local_addr().unwrap(), b.local_addr().unwrap()],
        backend: backend.addr(),
    });
    tokio::spawn(member(cluster.clone(), 0, a));
    tokio::spawn(member(cluster.clone(), 1, b));
    let upstream = format!(
        "mongodb://{},{}/?replicaSet=rs0",
        cluster.members[0], cluster.members[1]
    );
    let mut settings = common::settings(&upstream);
    settings.forward.primary_check = Duration::from_millis(500);
    let proxy = common::proxy_with(settings).await;
    let uri = proxy.connection_string();
    let direct = common::client(&backend.uri()).await;
    let db = direct.database("failover");
    for coll in ["pymongo", "node"] {
        let _ = db.collection::<Document>(coll).drop().await;
    }

    let drivers = common::manifest_dir().join("tests/drivers");
    let seconds = "7";
    let pymongo = Command::new(python())
        .arg(drivers.join("python/writer.py"))
        .args([&uri, "failover", "pymongo", seconds])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 with pymongo (scripts/test.sh installs it)");
    let node = Command::new("node")
        .current_dir(drivers.join("node"))
        .args(["writer.js", &uri, "failover", "node", seconds])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node with the mongodb driver (scripts/test.sh installs it)");

    // Wait for wirelint to know A as the primary (on a loaded machine that
    // can take longer than the writers' first seconds: stepping A down
    // before would test the machine's speed, not failover). Then let them
    // write through A, step A down, and elect B a second later.
    let first = cluster.members[0].to_string();
    assert!(
        common::eventually(Duration::from_secs(120), || {
            !common::log_lines_with(&["upstream primary found", &first]).is_empty()
        })
        .await,
        "wirelint never found the first primary {first}"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let switch = now();
    *cluster.primary.lock().unwrap() = None;
    tokio::time::sleep(Duration::from_secs(1)).await;
    *cluster.primary.lock().unwrap() = Some(1);
    let elected = Instant::now();

    let ledgers = tokio::task::spawn_blocking(move || {
        [("pymongo", pymongo), ("node", node)].map(|(name, child)| {
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{name} writer failed:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let ledger: Ledger = serde_json::from_slice(&out.stdout).unwrap();
            (name, ledger)
        })
    })
    .await
    .unwrap();
    assert!(
        elected.elapsed() >= Duration::from_secs(2),
        "writers stopped early"
    );

    for (name, ledger) in &ledgers {
        // Writes went on after the switch.
        assert!(
            ledger.acked.len() as u64 + ledger.errors.len() as u64 <= ledger.tried
                && ledger.acked.len() >= 50,
            "{name}: {ledger:?}"
        );
        // Errors only during the switch: from the stepdown to 2 s later.
        for e in &ledger.errors {
            let after = e.at - switch;
            assert!(
                (-0.1..=2.0).contains(&after),
                "{name}: an error {after:.2} s after the stepdown: {}",
                e.error
            );
        }
        // The ledger: each acknowledged write stored, once.
        let coll = db.collection::<Document>(name);
        let stored = coll.count_documents(doc! {}).await.unwrap();
        let mut lost = 0;
        for id in &ledger.acked {
            if coll.count_documents(doc! {"_id": id}).await.unwrap() != 1 {
                lost += 1;
            }
        }
        assert_eq!(lost, 0, "{name}: acknowledged writes lost");
        assert!(
            stored <= ledger.tried,
            "{name}: {stored} stored for {} tried",
            ledger.tried
        );
        let after_switch = ledger
            .acked
            .iter()
            .filter(|id| **id as u64 > ledger.tried / 2)
            .count();
        assert!(after_switch > 0, "{name}: no write after the switch");
        println!(
            "{name}: {} tried, {} acknowledged, {} errors within {:.2} s of the stepdown",
            ledger.tried,
            ledger.acked.len(),
            ledger.errors.len(),
            ledger
                .errors
                .iter()
                .map(|e| e.at - switch)
                .fold(0.0, f64::max)
        );
    }
    // wirelint said what happened, and now sends connections to B.
    assert!(!common::log_lines_with(&["upstream primary changed"]).is_empty());
    assert!(
        !common::log_lines_with(&["upstream primary found", &cluster.members[1].to_string()])
            .is_empty()
    );
    proxy.shutdown().await;
}

/// A single-host upstream that is a secondary leads to its primary (as a
/// driver's single seed does), instead of being presented as a router
/// that refuses every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, pymongo, Node")]
async fn a_secondary_given_as_the_only_host_leads_to_the_primary() {
    let backend = Backend::shared();
    let (a, b) = (
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
    );
    let cluster = Arc::new(Cluster {
        primary: Mutex::new(Some(0)),
        members: vec![a.local_addr().unwrap(), b.local_addr().unwrap()],
        backend: backend.addr(),
    });
    tokio::spawn(member(cluster.clone(), 0, a));
    tokio::spawn(member(cluster.clone(), 1, b));
    let proxy = common::proxy(&format!("mongodb://{}", cluster.members[1])).await;
    let client = common::client(&proxy.connection_string()).await;
    let coll = client
        .database("failover")
        .collection::<Document>("single_seed");
    coll.insert_one(doc! {"through": "the primary"})
        .await
        .unwrap();
    assert!(!common::log_lines_with(&[
        "upstream primary found",
        &format!("primary={}", cluster.members[0]),
        &format!("via={}", cluster.members[1]),
    ])
    .is_empty());
    proxy.shutdown().await;
}
