//! Backend faults: FerretDB killed under load (with a ledger of every
//! acknowledged write), restarted mid-cursor, half-closed sockets and
//! clients that vanish in the middle of a reply. Slow and silent backends
//! (connect, upstream and idle timeouts) are in proxy_e2e.rs.

mod common;

use common::{eventually, Backend, BackendOptions};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wirelint::wire::{op_msg, Header};

async fn fast_failing_client(proxy: &wirelint::Proxy) -> mongodb::Client {
    mongodb::Client::with_uri_str(format!(
        "{}?serverSelectionTimeoutMS=1000&connectTimeoutMS=1000&maxPoolSize=16",
        proxy.connection_string()
    ))
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn backend_killed_under_load_then_back_loses_no_acknowledged_write() {
    let mut backend = Backend::start(BackendOptions::default());
    let proxy = common::proxy(&backend.uri()).await;
    let client = fast_failing_client(&proxy).await;
    let coll = client.database("faults").collection::<Document>("ledger");
    coll.insert_one(doc! {"seq": -1i64}).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicI64::new(0));
    let acked = Arc::new(Mutex::new(Vec::<i64>::new()));
    // Per writer: when it saw its first error.
    let first_error = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let mut writers = Vec::new();
    for _ in 0..8 {
        let (stop, next, acked, first_error, coll) = (
            stop.clone(),
            next.clone(),
            acked.clone(),
            first_error.clone(),
            coll.clone(),
        );
        writers.push(tokio::spawn(async move {
            let mut failed = false;
            while !stop.load(Ordering::Relaxed) {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                match coll.insert_one(doc! {"seq": seq}).await {
                    Ok(_) => acked.lock().unwrap().push(seq),
                    Err(_) => {
                        if !failed {
                            failed = true;
                            first_error.lock().unwrap().push(Instant::now());
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before_crash = acked.lock().unwrap().len();
    assert!(
        before_crash > 20,
        "only {before_crash} writes before the crash"
    );

    let crashed_at = Instant::now();
    backend.crash();
    assert!(
        eventually(Duration::from_secs(5), || first_error.lock().unwrap().len()
            == 8)
        .await,
        "writers still waiting 5 s after the backend died: {} of 8 saw an error",
        first_error.lock().unwrap().len()
    );
    let slowest = first_error
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.saturating_duration_since(crashed_at))
        .max()
        .unwrap();
    println!("every writer saw an error within {slowest:?} of the crash");
    assert!(slowest < Duration::from_secs(3), "{slowest:?}");

    // wirelint is still up: a new connection is answered with an error
    // naming the cause, at once.
    let started = Instant::now();
    let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let ping = op_msg::encode(
        3,
        0,
        0,
        mongodb::bson::rawdoc! {"ping": 1i32, "$db": "admin"}.as_bytes(),
        &[],
    );
    s.write_all(&ping).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut reply))
        .await
        .expect("wirelint answers while the backend is down")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&reply).contains("wirelint"),
        "{reply:?}"
    );
    println!(
        "a new connection got wirelint's error in {:?}",
        started.elapsed()
    );

    backend.restart();
    let acked_before = acked.lock().unwrap().len();
    assert!(
        eventually(Duration::from_secs(20), || acked.lock().unwrap().len()
            > acked_before + 20)
        .await,
        "writes did not resume through the same wirelint after the backend came back"
    );
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }

    // The ledger: every acknowledged write is in the backend, once.
    let direct = common::client(&backend.uri()).await;
    let mut counts: HashMap<i64, u32> = HashMap::new();
    let mut cursor = direct
        .database("faults")
        .collection::<Document>("ledger")
        .find(doc! {})
        .await
        .unwrap();
    while let Some(d) = cursor.try_next().await.unwrap() {
        *counts.entry(d.get_i64("seq").unwrap()).or_default() += 1;
    }
    let acked = acked.lock().unwrap();
    let lost: Vec<_> = acked.iter().filter(|s| !counts.contains_key(s)).collect();
    let doubled: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    println!(
        "ledger: {} writes acknowledged, {} documents stored, {} lost, {} applied twice",
        acked.len(),
        counts.len(),
        lost.len(),
        doubled.len()
    );
    assert!(lost.is_empty(), "acknowledged but missing: {lost:?}");
    assert!(doubled.is_empty(), "applied twice: {doubled:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn backend_restarted_mid_cursor_gives_an_error_then_recovers() {
    let mut backend = Backend::start(BackendOptions::default());
    let proxy = common::proxy(&backend.uri()).await;
    let client = fast_failing_client(&proxy).await;
    let coll = client.database("faults").collection::<Document>("cursor");
    coll.insert_many((0..20).map(|i| doc! {"i": i}))
        .await
        .unwrap();
    let mut cursor = coll.find(doc! {}).batch_size(2).await.unwrap();
    for _ in 0..2 {
        cursor.try_next().await.unwrap().unwrap();
    }
    backend.restart();
    let started = Instant::now();
    let next = tokio::time::timeout(Duration::from_secs(10), async {
        // The rest of the batch may be buffered; the getMore must fail.
        loop {
            match cursor.try_next().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the cursor hung after the backend restarted");
    assert!(next.is_err(), "the cursor outlived its server: {next:?}");
    println!(
        "getMore after the restart failed in {:?}: {}",
        started.elapsed(),
        next.unwrap_err()
    );
    let mut recovered = false;
    for _ in 0..30 {
        if coll.count_documents(doc! {}).await.is_ok_and(|n| n == 20) {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(recovered, "queries did not work again after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn a_half_closed_client_still_gets_its_reply() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
    let ping = op_msg::encode(
        77,
        0,
        0,
        mongodb::bson::rawdoc! {"ping": 1i32, "$db": "admin"}.as_bytes(),
        &[],
    );
    s.write_all(&ping).await.unwrap();
    s.shutdown().await.unwrap(); // FIN: no more requests, still reading
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut reply))
        .await
        .expect("the connection was neither answered nor closed")
        .unwrap();
    let header = Header::parse(&reply).expect("a reply before the close");
    assert_eq!(header.response_to, 77);
    assert_eq!(header.message_length as usize, reply.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn clients_vanishing_mid_reply_affect_nobody_else() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let client = common::client(&proxy.connection_string()).await;
    let coll = client.database("faults").collection::<Document>("vanish");
    coll.insert_one(doc! {"_id": 1, "blob": "v".repeat(4 << 20)})
        .await
        .unwrap();
    let find = op_msg::encode(
        5,
        0,
        0,
        mongodb::bson::rawdoc! {"find": "vanish", "filter": {"_id": 1}, "$db": "faults"}.as_bytes(),
        &[],
    );
    // The driver's own connections (pool and monitors).
    let baseline = proxy.stats().connections_active;
    for _ in 0..20 {
        let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
        s.write_all(&find).await.unwrap();
        let mut some = [0u8; 100];
        s.read_exact(&mut some).await.unwrap();
        drop(s); // gone, with most of a 4 MiB reply still on its way
    }
    let n = coll.count_documents(doc! {}).await.unwrap();
    assert_eq!(n, 1);
    assert!(
        eventually(Duration::from_secs(10), || proxy.stats().connections_active
            <= baseline)
        .await,
        "abandoned connections still open: {} (the driver holds {baseline})",
        proxy.stats().connections_active
    );
    let stats = proxy.shutdown().await;
    assert_eq!(stats.analysis_panics, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_never_accepts_trips_the_connect_timeout() {
    // A listener whose accept queue is full: further SYNs go unanswered,
    // as with an overloaded or half-dead server.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    socket.listen(0).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await
        {
            fillers.push(s);
        }
    }
    let mut settings = common::settings(&format!("mongodb://{addr}/"));
    settings.forward.connect_timeout = Duration::from_secs(1);
    let proxy = common::proxy_with(settings).await;
    let started = Instant::now();
    // The driver retries until its server-selection timeout (2 s here);
    // what it reports is wirelint's answer to each attempt.
    let err = common::ping(&proxy.connection_string(), Duration::from_secs(2))
        .await
        .unwrap_err();
    let took = started.elapsed();
    let text = err.to_string();
    println!("after {took:?}: {text}");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(
        text.contains(&format!(
            "wirelint: upstream {addr} did not accept a connection within 1s"
        )),
        "{text}"
    );
    drop(fillers);
}
