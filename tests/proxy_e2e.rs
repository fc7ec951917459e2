//! End-to-end: the Rust driver against real FerretDB, once directly and once
//! through wirelint, with the results compared.

mod common;

use common::{eventually, Backend, BackendOptions};
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};
use mongodb::Client;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn crud_through_wirelint_matches_direct() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let direct = common::crud(&common::client(&backend.uri()).await, "crud_direct").await;
    let through = common::crud(
        &common::client(&proxy.connection_string()).await,
        "crud_proxy",
    )
    .await;
    assert_eq!(direct, through);
    assert!(direct.iter().any(|l| l.starts_with("find [")), "{direct:?}");

    let ok = eventually(Duration::from_secs(5), || {
        let s = proxy.stats();
        [
            "insert",
            "find",
            "update",
            "delete",
            "findAndModify",
            "aggregate",
            "distinct",
        ]
        .iter()
        .all(|c| s.commands.get(*c).copied().unwrap_or(0) > 0)
    })
    .await;
    let stats = proxy.shutdown().await;
    assert!(
        ok,
        "analysis did not count every command: {:?}",
        stats.commands
    );
    assert_eq!(stats.analysis_dropped, 0);
    assert!(stats.decode_errors.is_empty(), "{:?}", stats.decode_errors);
    assert_eq!(
        stats.requests_forwarded,
        stats.messages["request OP_MSG"]
            + stats.messages.get("request OP_QUERY").copied().unwrap_or(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn cursor_of_1000_in_batches_of_7_with_getmore_and_killcursors() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let client = common::client(&proxy.connection_string()).await;
    let coll = client.database("cursor_test").collection::<Document>("c");
    let _ = coll.drop().await;
    coll.insert_many((0..1000).map(|i| doc! {"_id": i, "pad": "x".repeat(20)}))
        .await
        .unwrap();
    let all: Vec<Document> = coll
        .find(doc! {})
        .batch_size(7)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 1000);
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, d)| d.get_i32("_id").unwrap() == i as i32));

    // Abandon a cursor half-way: the driver kills it.
    {
        let mut cursor = coll.find(doc! {}).batch_size(7).await.unwrap();
        for _ in 0..10 {
            cursor.try_next().await.unwrap().unwrap();
        }
    }
    let counted = eventually(Duration::from_secs(10), || {
        let s = proxy.stats();
        s.commands.get("getMore").copied().unwrap_or(0) >= 143
            && s.commands.get("killCursors").copied().unwrap_or(0) >= 1
    })
    .await;
    let stats = proxy.shutdown().await;
    assert!(
        counted,
        "getMore/killCursors not seen: {:?}",
        stats.commands
    );
}

/// Ordered and unordered bulk inserts with a duplicate key: the error and
/// what was written are the same through wirelint as directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn bulk_write_duplicate_key_error_passes_through_unchanged() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    async fn run(client: &Client, db: &str) -> Vec<String> {
        let mut out = Vec::new();
        for ordered in [true, false] {
            let coll = client
                .database(db)
                .collection::<Document>(&format!("bulk_{ordered}"));
            let _ = coll.drop().await;
            let docs = vec![
                doc! {"_id": 1},
                doc! {"_id": 2},
                doc! {"_id": 2},
                doc! {"_id": 3},
            ];
            let err = coll
                .insert_many(docs)
                .ordered(ordered)
                .await
                .expect_err("duplicate key must fail");
            let mongodb::error::ErrorKind::InsertMany(e) = *err.kind else {
                panic!("unexpected error {err:?}");
            };
            let we = e.write_errors.expect("write errors");
            out.push(format!(
                "ordered={ordered} errors={:?} count={}",
                we.iter()
                    .map(|w| (w.index, w.code, w.message.clone()))
                    .collect::<Vec<_>>(),
                coll.count_documents(doc! {}).await.unwrap()
            ));
        }
        out
    }
    let direct = run(&common::client(&backend.uri()).await, "bulk_direct").await;
    let through = run(
        &common::client(&proxy.connection_string()).await,
        "bulk_proxy",
    )
    .await;
    // The message names the namespace; compare with it normalised.
    let norm = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .map(|s| s.replace("bulk_direct", "DB").replace("bulk_proxy", "DB"))
            .collect()
    };
    assert_eq!(norm(direct.clone()), norm(through));
    assert!(
        direct[0].contains("11000") && direct[0].contains("count=2"),
        "{direct:?}"
    );
    assert!(direct[1].contains("count=3"), "{direct:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn a_15_mb_document_round_trips() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let client = common::client(&proxy.connection_string()).await;
    let coll = client.database("big_doc").collection::<Document>("c");
    let _ = coll.drop().await;
    let payload: String = (0..15_000_000u32)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    coll.insert_one(doc! {"_id": 1, "payload": &payload})
        .await
        .unwrap();
    let back = coll.find_one(doc! {"_id": 1}).await.unwrap().unwrap();
    assert_eq!(back.get_str("payload").unwrap(), payload);
    let stats = proxy.shutdown().await;
    assert!(
        stats.request_bytes > 15_000_000 && stats.reply_bytes > 15_000_000,
        "{stats:?}"
    );
}

/// The driver asks for snappy, zlib and zstd. wirelint passes the
/// negotiation through untouched: the hello reply through wirelint offers
/// exactly what the backend offers (FerretDB v1.24.2 implements no
/// compression, so nothing is negotiated with it; the
/// testcontainers suite covers a backend that does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn compression_negotiation_passes_through() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let with = |uri: &str| format!("{uri}?compressors=snappy,zlib,zstd");
    let direct = common::client(&with(&backend.uri())).await;
    let through = common::client(&with(&proxy.connection_string())).await;
    let hello = doc! {"hello": 1, "compression": ["snappy", "zlib", "zstd"]};
    let a = direct
        .database("admin")
        .run_command(hello.clone())
        .await
        .unwrap();
    let b = through.database("admin").run_command(hello).await.unwrap();
    assert_eq!(a.get("compression"), b.get("compression"));
    through
        .database("compress")
        .collection::<Document>("c")
        .insert_one(doc! {"a": 1})
        .await
        .unwrap();
}

/// Messages compressed by each real compressor library, sent through
/// wirelint: the analysis side inflates them, checks the declared size and
/// counts them per compressor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn compressed_messages_are_decoded_by_the_analysis_side() {
    use tokio::io::AsyncWriteExt;
    use wirelint::wire::{compressed, op_msg, Compressor};
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    for (i, c) in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd]
        .into_iter()
        .enumerate()
    {
        let body = mongodb::bson::rawdoc! {"insert": "c", "documents": [{"_id": i as i32, "text": "y".repeat(2000)}], "$db": "compressed_test"};
        let frame = op_msg::encode(i as i32 + 1, 0, 0, body.as_bytes(), &[]);
        let z = compressed::compress(&frame, c).unwrap();
        assert!(z.len() < frame.len() / 2, "{c:?} did not compress");
        let mut s = tokio::net::TcpStream::connect(proxy.local_addr())
            .await
            .unwrap();
        s.write_all(&z).await.unwrap();
        s.flush().await.unwrap();
        // The backend does what it does with it; wirelint forwards it.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counted = eventually(Duration::from_secs(5), || {
        let s = proxy.stats();
        ["snappy", "zlib", "zstd"]
            .iter()
            .all(|c| s.compressed.get(*c) == Some(&1))
            && s.commands.get("insert") == Some(&3)
    })
    .await;
    let stats = proxy.shutdown().await;
    assert!(counted, "{:?} {:?}", stats.compressed, stats.commands);
    assert!(stats.decode_errors.is_empty(), "{:?}", stats.decode_errors);
    assert_eq!(stats.messages["request OP_COMPRESSED"], 3);
}

/// wirelint with a TLS listener (the shared FerretDB behind it).
async fn tls_proxy(
    certs: &common::Certs,
    client_ca: Option<std::path::PathBuf>,
) -> wirelint::Proxy {
    let mut settings = common::settings(&Backend::shared().uri());
    settings.forward.tls = Some(wirelint::config::ClientTls {
        cert: certs.server_cert.clone(),
        key: certs.server_key.clone(),
        client_ca,
    });
    common::proxy_with(settings).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn tls_on_the_client_side() {
    let certs = common::make_certs();
    let proxy = tls_proxy(&certs, None).await;
    let port = proxy.local_addr().port();
    let uri = format!(
        "mongodb://localhost:{port}/?tls=true&tlsCAFile={}",
        certs.ca.display()
    );
    let c = common::client(&uri).await;
    c.database("tls_client")
        .collection::<Document>("c")
        .insert_one(doc! {"a": 1})
        .await
        .unwrap();
    let n = c
        .database("tls_client")
        .collection::<Document>("c")
        .count_documents(doc! {})
        .await
        .unwrap();
    assert!(n >= 1);

    // A plain client on the TLS port is refused, quickly.
    let plain = format!("mongodb://localhost:{port}/");
    assert!(common::ping(&plain, Duration::from_millis(1500))
        .await
        .is_err());
    proxy.shutdown().await;
}

/// What `openssl s_client` negotiates with wirelint's TLS port when
/// limited to `version` (e.g. "-tls1_1"): the protocol and cipher, or None
/// when the handshake fails.
fn openssl_handshake(port: u16, version: &str, ca: &std::path::Path) -> Option<String> {
    // SECLEVEL=0: Debian's OpenSSL would otherwise refuse TLS 1.0/1.1 on
    // the client side, and a refusal must come from wirelint to mean
    // anything (with it, `openssl s_server -tls1_1` is reached).
    let out = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            version,
        ])
        .args(["-cipher", "DEFAULT:@SECLEVEL=0"])
        .arg("-CAfile")
        .arg(ca)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl (Debian's openssl package) runs the TLS version checks");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains("Cipher is"))?
        .trim()
        .to_string();
    (!line.contains("(NONE)")).then_some(line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn tls_client_side_speaks_only_tls_1_2_and_1_3_with_aead_ciphers() {
    let certs = common::make_certs();
    let proxy = tls_proxy(&certs, None).await;
    let port = proxy.local_addr().port();
    let ca = certs.ca.clone();
    let results = tokio::task::spawn_blocking(move || {
        ["-tls1", "-tls1_1", "-tls1_2", "-tls1_3"].map(|v| (v, openssl_handshake(port, v, &ca)))
    })
    .await
    .unwrap();
    for (version, negotiated) in &results {
        println!("{version}: {negotiated:?}");
    }
    assert!(
        results[0].1.is_none() && results[1].1.is_none(),
        "TLS 1.0/1.1 accepted: {results:?}"
    );
    for (version, negotiated) in &results[2..] {
        let line = negotiated
            .as_deref()
            .unwrap_or_else(|| panic!("{version} refused"));
        assert!(
            line.contains("GCM") || line.contains("CHACHA20"),
            "{version}: not an AEAD cipher: {line}"
        );
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn tls_client_certificates_when_a_client_ca_is_set() {
    let certs = common::make_certs();
    let proxy = tls_proxy(&certs, Some(certs.ca.clone())).await;
    let port = proxy.local_addr().port();
    let with_cert = format!(
        "mongodb://localhost:{port}/?tls=true&tlsCAFile={}&tlsCertificateKeyFile={}",
        certs.ca.display(),
        certs.client_pem.display()
    );
    common::client(&with_cert)
        .await
        .database("admin")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap();
    let without = format!(
        "mongodb://localhost:{port}/?tls=true&tlsCAFile={}",
        certs.ca.display()
    );
    assert!(common::ping(&without, Duration::from_millis(1500))
        .await
        .is_err());
    proxy.shutdown().await;
}

/// With TLS on both sides and wirelint presenting its own client
/// certificate upstream (a backend that requires one), a client asking for
/// MONGODB-X509 authentication — in the handshake (speculative, as drivers
/// do) or with an explicit `authenticate` — gets AuthenticationFailed with
/// wirelint's reason, and nothing reaches the backend; SCRAM-less clients
/// work as before. With `allow_x509_passthrough`, the backend answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn x509_impersonation_is_refused() {
    let certs = common::make_certs();
    let backend = Backend::start(BackendOptions {
        tls: Some((certs.server_cert.clone(), certs.server_key.clone())),
        tls_client_ca: Some(certs.ca.clone()),
        ..Default::default()
    });
    let upstream = format!(
        "mongodb://localhost:{}/?tls=true&tlsCAFile={}&tlsCertificateKeyFile={}",
        backend.tls_port.unwrap(),
        certs.ca.display(),
        certs.client_pem.display()
    );
    for allow in [false, true] {
        let mut settings = common::settings(&upstream);
        settings.forward.tls = Some(wirelint::config::ClientTls {
            cert: certs.server_cert.clone(),
            key: certs.server_key.clone(),
            client_ca: None,
        });
        settings.forward.allow_x509_passthrough = allow;
        let proxy = common::proxy_with(settings).await;
        let port = proxy.local_addr().port();
        let tls = format!(
            "mongodb://localhost:{port}/?tls=true&tlsCAFile={}",
            certs.ca.display()
        );
        // An ordinary client works: the guard leaves other traffic alone.
        let plain = common::client(&tls).await;
        let coll = plain.database("x509").collection::<Document>("c");
        coll.insert_one(doc! {"a": 1}).await.unwrap();
        // An explicit authenticate.
        let explicit = plain
            .database("$external")
            .run_command(doc! {"authenticate": 1, "mechanism": "MONGODB-X509"})
            .await
            .unwrap_err()
            .to_string();
        // The handshake's speculative authentication (the driver's way).
        let x509 = format!(
            "{tls}&tlsCertificateKeyFile={}&authMechanism=MONGODB-X509",
            certs.client_pem.display()
        );
        let speculative = match mongodb::Client::with_uri_str(&x509).await {
            Ok(c) => c
                .database("admin")
                .run_command(doc! {"ping": 1})
                .await
                .unwrap_err()
                .to_string(),
            Err(e) => e.to_string(),
        };
        for (how, error) in [("explicit", &explicit), ("speculative", &speculative)] {
            if allow {
                assert!(
                    !error.contains("wirelint refuses"),
                    "{how}, passthrough allowed: {error}"
                );
            } else {
                assert!(
                    error.contains("wirelint refuses MONGODB-X509 authentication")
                        && error.contains("--allow-x509-passthrough"),
                    "{how}: {error}"
                );
            }
        }
        assert!(coll.count_documents(doc! {}).await.unwrap() >= 1);
        proxy.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn tls_on_the_upstream_side() {
    let certs = common::make_certs();
    let backend = Backend::start(BackendOptions {
        tls: Some((certs.server_cert.clone(), certs.server_key.clone())),
        ..Default::default()
    });
    let tls_port = backend.tls_port.unwrap();
    let upstream = format!(
        "mongodb://localhost:{tls_port}/?tls=true&tlsCAFile={}",
        certs.ca.display()
    );
    let proxy = common::proxy(&upstream).await;
    let c = common::client(&proxy.connection_string()).await;
    let coll = c.database("tls_upstream").collection::<Document>("c");
    coll.insert_one(doc! {"over": "tls"}).await.unwrap();
    assert_eq!(coll.count_documents(doc! {"over": "tls"}).await.unwrap(), 1);
    proxy.shutdown().await;

    // The wrong CA: the upstream handshake fails and the client is told so.
    let upstream = format!(
        "mongodb://localhost:{tls_port}/?tls=true&tlsCAFile={}",
        certs.other_ca.display()
    );
    let proxy = common::proxy(&upstream).await;
    let err = common::ping(&proxy.connection_string(), Duration::from_millis(1500))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("TLS handshake with upstream"),
        "{err}"
    );
    proxy.shutdown().await;
}

/// The backend answers hello as a replica-set member listing its own
/// address. A driver given only wirelint's address, with default options,
/// must never open a connection anywhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn replica_set_upstream_keeps_drivers_on_wirelint() {
    let backend = Backend::start(BackendOptions {
        repl_set: Some("rs0".into()),
        ..Default::default()
    });

    let upstream = format!("mongodb://{}/?replicaSet=rs0", backend.addr());
    let proxy = common::proxy(&upstream).await;
    let proxy_addr = proxy.local_addr().to_string();
    assert_eq!(
        common::servers_seen(&proxy.connection_string()).await,
        vec![proxy_addr.clone()]
    );
    let stats = proxy.shutdown().await;
    assert!(stats.hello_rewrites > 0);

    // Control: without the rewrite the same driver finds the member and
    // connects to it directly — the check above can fail.
    let mut settings = common::settings(&upstream);
    settings.forward.rewrite_topology = false;
    let plain = common::proxy_with(settings).await;
    let seen = common::servers_seen(&plain.connection_string()).await;
    assert!(seen.contains(&backend.addr()), "{seen:?}");
    plain.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_upstream_gives_the_client_an_error_fast() {
    let dead = common::free_port();
    let proxy = common::proxy(&format!("mongodb://127.0.0.1:{dead}/")).await;
    let started = Instant::now();
    let err = common::ping(&proxy.connection_string(), Duration::from_millis(1000))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let text = err.to_string();
    assert!(
        text.contains("wirelint") && text.contains(&dead.to_string()),
        "{text}"
    );
    let stats = proxy.shutdown().await;
    assert!(stats.upstream_connect_failures >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn connection_limit_refuses_extra_connections_with_a_log_line() {
    use tokio::io::AsyncReadExt;
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.forward.max_connections = 2;
    let proxy = common::proxy_with(settings).await;
    let _a = tokio::net::TcpStream::connect(proxy.local_addr())
        .await
        .unwrap();
    let _b = tokio::net::TcpStream::connect(proxy.local_addr())
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || proxy.stats().connections_active
            == 2)
        .await
    );
    let mut c = tokio::net::TcpStream::connect(proxy.local_addr())
        .await
        .unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .unwrap();
    assert!(
        matches!(n, Ok(0) | Err(_)),
        "third connection should be closed"
    );
    assert_eq!(proxy.stats().connections_refused, 1);
    assert!(!common::log_lines_with(&["connection limit reached", "max_connections=2"]).is_empty());
    proxy.shutdown().await;
}

/// A request really in flight when shutdown starts: the backend (a stand-in
/// that answers each message 400 ms late; FerretDB has no slow command to
/// use) is still working on it, and shutdown waits for its reply to reach
/// the client before closing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_lets_in_flight_requests_finish_then_closes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const LATE: Duration = Duration::from_millis(400);
    let slow = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow_addr = slow.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = slow.accept().await {
            tokio::spawn(async move {
                let mut header = [0u8; 16];
                while s.read_exact(&mut header).await.is_ok() {
                    let h = wirelint::wire::Header::parse(&header).unwrap();
                    let mut body = vec![0u8; h.message_length as usize - 16];
                    s.read_exact(&mut body).await.unwrap();
                    tokio::time::sleep(LATE).await;
                    let reply = wirelint::wire::op_msg::encode(
                        1,
                        h.request_id,
                        0,
                        bson::rawdoc! {"ok": 1.0}.as_bytes(),
                        &[],
                    );
                    s.write_all(&reply).await.unwrap();
                }
            });
        }
    });
    // A direct connection: the stand-in answers no isMaster worth the name.
    let proxy = common::proxy(&format!("mongodb://{slow_addr}/?directConnection=true")).await;
    let addr = proxy.local_addr();
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    let ping = wirelint::wire::op_msg::encode(
        77,
        0,
        0,
        bson::rawdoc! {"ping": 1, "$db": "admin"}.as_bytes(),
        &[],
    );
    client.write_all(&ping).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let stats = proxy.shutdown().await;
    let waited = started.elapsed();
    assert!(
        waited >= LATE - Duration::from_millis(150) && waited < Duration::from_secs(5),
        "shutdown took {waited:?}: it should wait for the request in flight, and no longer"
    );
    assert_eq!(stats.replies_forwarded, 1);
    // The reply reached the client (not a cut connection), then the close.
    let mut reply = [0u8; 16];
    client.read_exact(&mut reply).await.unwrap();
    assert_eq!(
        wirelint::wire::Header::parse(&reply).unwrap().response_to,
        77
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}

/// A backend that accepts connections and never answers: the upstream
/// timeout closes the client's connection with a log line saying why,
/// instead of leaving it hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_timeout_fires_when_the_backend_stops_answering() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let mut settings = common::settings(&format!("mongodb://{silent_addr}/?directConnection=true"));
    settings.forward.upstream_timeout = Some(Duration::from_millis(300));
    let proxy = common::proxy_with(settings).await;
    let mut s = tokio::net::TcpStream::connect(proxy.local_addr())
        .await
        .unwrap();
    let port = s.local_addr().unwrap().port();
    let ping = wirelint::wire::op_msg::encode(
        1,
        0,
        0,
        mongodb::bson::rawdoc! {"ping": 1, "$db": "admin"}.as_bytes(),
        &[],
    );
    s.write_all(&ping).await.unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(ended.is_ok(), "connection left hanging");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let peer = format!("peer=127.0.0.1:{port}");
    assert!(
        common::eventually(Duration::from_secs(2), || !common::log_lines_with(&[
            &peer,
            "upstream timeout"
        ])
        .is_empty())
        .await
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn idle_timeout_closes_silent_connections() {
    use tokio::io::AsyncReadExt;
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.forward.idle_timeout = Some(Duration::from_millis(300));
    let proxy = common::proxy_with(settings).await;
    let mut s = tokio::net::TcpStream::connect(proxy.local_addr())
        .await
        .unwrap();
    let port = s.local_addr().unwrap().port();
    let mut buf = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(ended.is_ok(), "idle connection not closed");
    let peer = format!("peer=127.0.0.1:{port}");
    assert!(
        common::eventually(Duration::from_secs(2), || !common::log_lines_with(&[
            &peer,
            "idle timeout"
        ])
        .is_empty())
        .await
    );
    proxy.shutdown().await;
}
