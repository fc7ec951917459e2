//! The analysis engine end to end: real drivers through wirelint to FerretDB,
//! then what wirelint learnt — patterns, round trips, documents, the first
//! two rules — in every output.

mod common;

use common::Backend;
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wirelint::report::Report;
use wirelint::rules::Severity;

/// Waits until every request the proxy forwarded has been analysed and
/// idle invocations are folded into their patterns.
async fn settled(proxy: &wirelint::Proxy) {
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let s = proxy.stats();
    assert_eq!(s.analysis_dropped, 0);
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    http_get_with(addr, path, "").await
}

async fn http_get_with(addr: std::net::SocketAddr, path: &str, headers: &str) -> (u16, String) {
    http_request(addr, &format!("GET {path} HTTP/1.1\r\n{headers}"), "").await
}

/// Sends `head` (request line and headers, without Host and Connection)
/// and `body`; the status and the body of the answer.
async fn http_request(addr: std::net::SocketAddr, head: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("{head}Host: x\r\nConnection: close\r\n\r\n{body}").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Runs an aggregate with `$lookup` to completion. FerretDB v1.24.2 does
/// not implement `$lookup` (error 238, NotImplemented); any other outcome
/// fails the test.
async fn lookup_read(result: mongodb::error::Result<mongodb::Cursor<Document>>) {
    let outcome = match result {
        Ok(cursor) => cursor.try_collect::<Vec<_>>().await.map(drop),
        Err(e) => Err(e),
    };
    if let Err(e) = outcome {
        match *e.kind {
            mongodb::error::ErrorKind::Command(ref c) if c.code == 238 => {}
            _ => panic!("unexpected error: {e}"),
        }
    }
}

fn pattern<'a>(report: &'a Report, name: &str) -> &'a wirelint::report::PatternReport {
    report
        .patterns
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| {
            panic!(
                "no pattern {name}: {:?}",
                report.patterns.iter().map(|p| &p.name).collect::<Vec<_>>()
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn patterns_count_invocations_round_trips_and_documents() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let c = common::client(&proxy.connection_string()).await;
    let db = c.database("patterns_test");
    let posts = db.collection::<Document>("posts");
    let comments = db.collection::<Document>("comments");
    let _ = posts.drop().await;
    let _ = comments.drop().await;
    posts
        .insert_many((0..50).map(|i| doc! {"_id": i, "userId": i % 5, "title": format!("t{i}")}))
        .await
        .unwrap();
    comments
        .insert_many((0..100).map(|i| doc! {"postId": i % 50, "text": "c", "approved": true}))
        .await
        .unwrap();

    // Q1: one round trip. Q2: three different operations per call, 5 calls:
    // the post, the count of all its comments, the approved ones shown.
    for i in 0..4 {
        posts.find_one(doc! {"_id": i}).comment("Q1").await.unwrap();
    }
    for i in 0..5 {
        posts.find_one(doc! {"_id": i}).comment("Q2").await.unwrap();
        comments
            .count_documents(doc! {"postId": i})
            .comment("Q2")
            .await
            .unwrap();
        comments
            .find(doc! {"postId": i, "approved": true})
            .comment("Q2")
            .await
            .unwrap()
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
    }
    // Q3: a cursor of 50 in batches of 10 — getMores are round trips of the same call.
    let all: Vec<Document> = posts
        .find(doc! {})
        .batch_size(10)
        .comment("Q3")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 50);
    settled(&proxy).await;

    let report = proxy.report();
    let q1 = pattern(&report, "Q1");
    assert_eq!(
        (q1.invocations, q1.round_trips, q1.docs_returned),
        (4, 4, 4)
    );
    let q2 = pattern(&report, "Q2");
    assert_eq!(q2.invocations, 5, "{q2:?}");
    assert_eq!(q2.round_trips_per_invocation, 3.0, "{q2:?}");
    assert_eq!(q2.sequence.len(), 3);
    assert_eq!(q2.docs_returned, 5 + 5 + 10, "{q2:?}");
    let q3 = pattern(&report, "Q3");
    assert_eq!(q3.invocations, 1);
    assert!(q3.round_trips >= 5, "{q3:?}");
    assert_eq!(q3.docs_returned, 50);
    assert!(q3.latency_us.p50 > 0 && q3.latency_us.p99 >= q3.latency_us.p50);
    assert_eq!(q1.verdict, "ok");
    // Shapes are value-free and shared across values.
    let shape = report.shape_text(&q1.shapes[0]).unwrap();
    assert_eq!(shape, "find patterns_test.posts {_id: ?int} limit");
    // Q2 counts comments on every call (WL403: not the total of the list it
    // shows, which is another filter's); with the count its own finding,
    // its two other reads are not chatty (one cause, one finding).
    let mut got: Vec<(String, String, String)> = report
        .findings
        .iter()
        .map(|f| (f.rule.clone(), f.namespace.clone(), f.subject.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![(
            "WL403".to_string(),
            "patterns_test.comments".to_string(),
            "postId".to_string()
        ),]
    );
    assert_eq!(pattern(&report, "Q2").verdict, "warn");
    // Uncommented operations are patterns named by their shape.
    assert!(report
        .patterns
        .iter()
        .any(|p| p.name.starts_with("insert patterns_test.posts")));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn wl103_large_documents_warn_and_error_and_stay_silent_on_small_ones() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let c = common::client(&proxy.connection_string()).await;
    let coll = c.database("wl103_test").collection::<Document>("files");
    let small = c.database("wl103_test").collection::<Document>("small");
    let _ = coll.drop().await;
    small
        .insert_many((0..20).map(|i| doc! {"i": i, "pad": "x".repeat(10_000)}))
        .await
        .unwrap();
    small
        .find(doc! {})
        .await
        .unwrap()
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    coll.insert_one(doc! {"_id": 1, "blob": "y".repeat(3 * 1024 * 1024)})
        .await
        .unwrap();
    coll.find_one(doc! {"_id": 1})
        .comment("read file")
        .await
        .unwrap();
    settled(&proxy).await;
    let findings = proxy.findings();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = &findings[0];
    assert_eq!(
        (f.rule.as_str(), f.namespace.as_str(), f.severity),
        ("WL103", "wl103_test.files", Severity::Warning)
    );
    assert_eq!(f.occurrences, 2, "inserted once, returned once");
    assert!(f.message.contains("3.0 MiB"), "{}", f.message);
    assert!(
        !f.evidence.contains_key("example_id"),
        "values only with --show-values"
    );

    coll.insert_one(doc! {"_id": 2, "blob": "z".repeat(11 * 1024 * 1024)})
        .await
        .unwrap();
    settled(&proxy).await;
    let findings = proxy.findings();
    assert_eq!(findings.len(), 1);
    assert_eq!(
        findings[0].severity,
        Severity::Error,
        "escalated past 10 MiB"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn wl504_lookup_heavy_reads_fire_and_occasional_lookups_do_not() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let c = common::client(&proxy.connection_string()).await;
    let db = c.database("wl504_test");
    let books = db.collection::<Document>("books");
    let authors = db.collection::<Document>("authors");
    let _ = books.drop().await;
    let _ = authors.drop().await;
    authors
        .insert_many((0..5).map(|i| doc! {"_id": i, "name": format!("a{i}")}))
        .await
        .unwrap();
    books
        .insert_many((0..10).map(|i| doc! {"_id": i, "authorId": i % 5}))
        .await
        .unwrap();
    let lookup = vec![
        doc! {"$match": {"_id": 1}},
        doc! {"$lookup": {"from": "authors", "localField": "authorId", "foreignField": "_id", "as": "author"}},
    ];
    // 25 reads of books, 20 of them with $lookup: 80 % > 50 %.
    // (FerretDB v1.24.2 answers $lookup with NotImplemented; wirelint reads
    // the request either way — the application asked for a join.)
    for i in 0..20 {
        let mut p = lookup.clone();
        p[0] = doc! {"$match": {"_id": i % 10}};
        lookup_read(books.aggregate(p).comment("Q-book-with-author").await).await;
    }
    for i in 0..5 {
        books.find_one(doc! {"_id": i}).await.unwrap();
    }
    // authors: 25 reads, 2 with $lookup: silent.
    for i in 0..23 {
        authors.find_one(doc! {"_id": i % 5}).await.unwrap();
    }
    for _ in 0..2 {
        lookup_read(
            authors
                .aggregate(vec![doc! {"$lookup": {"from": "books", "localField": "_id", "foreignField": "authorId", "as": "books"}}])
                .await,
        )
        .await;
    }
    settled(&proxy).await;
    let findings = proxy.findings();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = &findings[0];
    assert_eq!(
        (f.rule.as_str(), f.namespace.as_str()),
        ("WL504", "wl504_test.books")
    );
    assert_eq!(
        f.evidence["joined_collections"],
        serde_json::json!(["authors"])
    );
    let report = proxy.report();
    assert_eq!(pattern(&report, "Q-book-with-author").verdict, "warn");
    proxy.shutdown().await;
}

/// Rules can be switched off and tuned per namespace in wirelint.toml.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn rules_are_configured_per_rule_and_per_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wirelint.toml");
    std::fs::write(
        &path,
        "[rules.WL504]\nenabled = false\n\n[collections.\"cfg_test.tiny\".rules.WL103]\nwarn = 1000\nerror = 50000\nseverity = \"info\"\n",
    )
    .unwrap();
    let file = wirelint::config::FileConfig::load(&path).unwrap();
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.analysis.rules = wirelint::config::rule_settings(&file, &path).unwrap();
    let proxy = common::proxy_with(settings).await;
    let c = common::client(&proxy.connection_string()).await;
    let tiny = c.database("cfg_test").collection::<Document>("tiny");
    let other = c.database("cfg_test").collection::<Document>("other");
    tiny.insert_one(doc! {"pad": "x".repeat(2000)})
        .await
        .unwrap();
    other
        .insert_one(doc! {"pad": "x".repeat(2000)})
        .await
        .unwrap();
    for _ in 0..30 {
        lookup_read(tiny.aggregate(vec![doc! {"$lookup": {"from": "other", "localField": "a", "foreignField": "b", "as": "c"}}]).await).await;
    }
    settled(&proxy).await;
    let findings = proxy.findings();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(
        (
            findings[0].rule.as_str(),
            findings[0].namespace.as_str(),
            findings[0].severity
        ),
        ("WL103", "cfg_test.tiny", Severity::Info)
    );
    proxy.shutdown().await;

    // Unknown rules and thresholds are errors naming the file and key.
    std::fs::write(&path, "[rules.WL103]\nwarm = 5\n").unwrap();
    let file = wirelint::config::FileConfig::load(&path).unwrap();
    let err = wirelint::config::rule_settings(&file, &path)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rules.WL103.warm")
            && err.contains("warn")
            && err.contains(&path.display().to_string()),
        "{err}"
    );
    std::fs::write(&path, "[rules.WL999]\nenabled = false\n").unwrap();
    let file = wirelint::config::FileConfig::load(&path).unwrap();
    let err = wirelint::config::rule_settings(&file, &path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("WL999") && err.contains("WL103"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn admin_endpoints_serve_metrics_findings_patterns_and_health() {
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.admin = Some("127.0.0.1:0".into());
    let proxy = common::proxy_with(settings).await;
    let admin = proxy.admin_addr().unwrap();
    let c = common::client(&proxy.connection_string()).await;
    let coll = c.database("admin_test").collection::<Document>("big");
    coll.insert_one(doc! {"blob": "y".repeat(2 * 1024 * 1024 + 10)})
        .await
        .unwrap();
    coll.find_one(doc! {}).comment("Q-admin").await.unwrap();
    settled(&proxy).await;

    let (status, body) = http_get(admin, "/healthz").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    for needle in [
        "wirelint_findings{rule=\"WL103\",severity=\"warning\"} 1",
        "wirelint_commands_total{command=\"insert\"}",
        "wirelint_operations_total{namespace=\"admin_test.big\",command=\"find\"} 1",
        "wirelint_pattern_latency_seconds{pattern=\"Q-admin\",quantile=\"0.99\"}",
        "wirelint_analysis_queue_depth",
        "wirelint_analysis_dropped_total 0",
        "wirelint_analysis_shed_total 0",
        "wirelint_analysis_sampling_level 0",
        "wirelint_analysis_analysed_ratio 1",
    ] {
        assert!(
            metrics.contains(needle),
            "metrics lack {needle}:\n{metrics}"
        );
    }
    let (_, findings) = http_get(admin, "/findings").await;
    let findings: serde_json::Value = serde_json::from_str(&findings).unwrap();
    assert_eq!(findings[0]["rule"], "WL103");
    let (_, patterns) = http_get(admin, "/patterns").await;
    let patterns: serde_json::Value = serde_json::from_str(&patterns).unwrap();
    assert!(patterns
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "Q-admin"));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn admin_token_is_required_when_set() {
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.admin = Some("127.0.0.1:0".into());
    settings.admin_token = Some("s3cret-token".into());
    let proxy = common::proxy_with(settings).await;
    let admin = proxy.admin_addr().unwrap();
    for path in ["/metrics", "/findings", "/patterns", "/report"] {
        let (status, body) = http_get(admin, path).await;
        assert_eq!(status, 401, "{path} without a token: {body}");
        assert!(body.contains("Bearer"), "{body}");
        let (status, _) =
            http_get_with(admin, path, "Authorization: Bearer wrong-token!\r\n").await;
        assert_eq!(status, 401, "{path} with a wrong token");
        let (status, _) =
            http_get_with(admin, path, "Authorization: Bearer s3cret-token\r\n").await;
        assert_eq!(status, 200, "{path} with the token");
        let (status, _) =
            http_get_with(admin, path, "Authorization: bearer s3cret-token\r\n").await;
        assert_eq!(status, 200, "{path}: the scheme is case-insensitive");
        let (status, _) = http_get_with(admin, path, "Authorization: Basic s3cret-token\r\n").await;
        assert_eq!(status, 401, "{path}: another scheme is not a bearer token");
    }
    // Health checks stay open (load balancers carry no secrets), and so
    // does the dashboard's page, which holds no data: its script asks for
    // the token and sends it to /report.
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
    let (status, page) = http_get(admin, "/").await;
    assert_eq!(status, 200);
    assert!(page.contains("<title>wirelint</title>"), "{page}");
    proxy.shutdown().await;
}

/// The admin port cannot be held by idle or slow clients: past
/// `MAX_CONNECTIONS` open connections a new one is closed at once; a
/// request whose headers do not arrive within `HEADER_READ_TIMEOUT`, or a
/// connection that sends nothing, is closed; then the endpoints answer
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn admin_connections_are_capped_and_slow_headers_time_out() {
    use wirelint::admin::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.admin = Some("127.0.0.1:0".into());
    let proxy = common::proxy_with(settings).await;
    let admin = proxy.admin_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(tokio::net::TcpStream::connect(admin).await.unwrap());
    }
    // Half of them start a request and never finish its headers.
    for s in held.iter_mut().step_by(2) {
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
    }
    let started = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut extra = tokio::net::TcpStream::connect(admin).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(2), extra.read(&mut byte))
        .await
        .expect("a connection past the cap is closed at once");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // Every held connection is closed by the header timeout.
    for (i, s) in held.iter_mut().enumerate() {
        let mut sink = Vec::new();
        let ended = tokio::time::timeout(
            HEADER_READ_TIMEOUT + Duration::from_secs(5),
            s.read_to_end(&mut sink),
        )
        .await;
        assert!(ended.is_ok(), "held connection {i} still open");
    }
    let waited = started.elapsed();
    assert!(
        waited >= HEADER_READ_TIMEOUT - Duration::from_millis(500),
        "closed after {waited:?}, before the header timeout"
    );
    println!("{MAX_CONNECTIONS} slow admin connections closed after {waited:?}");
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn show_values_adds_example_ids_to_findings() {
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.analysis.show_values = true;
    let proxy = common::proxy_with(settings).await;
    let c = common::client(&proxy.connection_string()).await;
    let coll = c
        .database("show_values_test")
        .collection::<Document>("files");
    let _ = coll.drop().await;
    coll.insert_one(doc! {"_id": "doc-42", "blob": "y".repeat(2 * 1024 * 1024 + 1)})
        .await
        .unwrap();
    settled(&proxy).await;
    let findings = proxy.findings();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(
        findings[0].evidence["example_id"],
        serde_json::json!("\"doc-42\"")
    );
    proxy.shutdown().await;
}

/// The blogging platform's V1: posts partitioned by postId. Reads by postId
/// are single-shard; by userId they are scatter-gather (WL201); `$in` on
/// the key is multi-shard, targeted by the backend (not reported); the
/// sorted, limited feed is WL202.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn partition_keys_classify_operations_and_fan_outs_are_reported() {
    use futures_util::TryStreamExt;
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.analysis.partition_keys = vec![(
        "part_test.posts".into(),
        vec!["postId".into()],
        wirelint::analysis::partition::KeyKind::Ranged,
    )];
    let proxy = common::proxy_with(settings).await;
    let c = common::client(&proxy.connection_string()).await;
    let posts = c.database("part_test").collection::<Document>("posts");
    let _ = posts.drop().await;
    posts
        .insert_many((0..40).map(
            |i| doc! {"postId": format!("p{i}"), "userId": format!("u{}", i % 4), "createdAt": i},
        ))
        .await
        .unwrap();
    for i in 0..10 {
        posts
            .find_one(doc! {"postId": format!("p{i}")})
            .comment("Q2")
            .await
            .unwrap();
        let _: Vec<Document> = posts
            .find(doc! {"userId": format!("u{}", i % 4)})
            .comment("Q3")
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
    }
    for i in 0..3 {
        let _: Vec<Document> = posts
            .find(doc! {"postId": {"$in": [format!("p{i}"), format!("p{}", i + 1)]}})
            .comment("Q5")
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
    }
    for _ in 0..5 {
        let _: Vec<Document> = posts
            .find(doc! {})
            .sort(doc! {"createdAt": -1})
            .limit(10)
            .comment("Q6")
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
    }
    settled(&proxy).await;
    let report = proxy.report();
    let label = |name: &str| pattern(&report, name).partitions.label().to_string();
    assert_eq!(
        (label("Q2"), label("Q3"), label("Q5"), label("Q6")),
        (
            "single-shard".into(),
            "scatter-gather".into(),
            "multi-shard".into(),
            "scatter-gather".into()
        )
    );
    assert_eq!(pattern(&report, "Q2").verdict, "ok");
    assert_eq!(
        pattern(&report, "Q5").verdict,
        "ok",
        "multi-shard is targeted by the backend"
    );
    let mut got: Vec<(String, Severity, Vec<String>)> = report
        .findings
        .iter()
        .map(|f| (f.rule.clone(), f.severity, f.patterns.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "WL201".to_string(),
                Severity::Warning,
                vec!["Q3".to_string()]
            ),
            (
                "WL202".to_string(),
                Severity::Warning,
                vec!["Q6".to_string()]
            ),
        ]
    );
    assert_eq!(
        report.partition_keys["part_test.posts"].paths,
        vec!["postId"]
    );
    proxy.shutdown().await;
}

/// *Data modeling in Azure Cosmos DB*: a blog post whose comments are pushed into the post with no
/// bound (WL101, confirmed as the same post is read growing; WL102 once it
/// passes 250), against the good designs: the 10 most recent comments kept
/// with $slice, older ones in buckets of 100 — silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn unbounded_comment_arrays_are_reported_and_bounded_designs_are_not() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let c = common::client(&proxy.connection_string()).await;
    let db = c.database("growth_test");
    let bad = db.collection::<Document>("posts_bad");
    let good = db.collection::<Document>("posts_good");
    let buckets = db.collection::<Document>("comment_buckets");
    for coll in [&bad, &good, &buckets] {
        let _ = coll.drop().await;
    }
    bad.insert_one(doc! {"_id": 1, "title": "t", "comments": []})
        .await
        .unwrap();
    good.insert_one(doc! {"_id": 1, "title": "t", "recentComments": []})
        .await
        .unwrap();
    for i in 0..300 {
        let comment = doc! {"by": "someone", "text": "nice post", "n": i};
        bad.update_one(
            doc! {"_id": 1},
            doc! {"$push": {"comments": comment.clone()}},
        )
        .comment("C3 comment")
        .await
        .unwrap();
        // FerretDB v1.24.2 ignores $slice in $push (the array keeps
        // growing), so the bounded push runs 20 times only: enough for
        // WL101 to have judged it, not enough for a real WL102.
        if i < 20 {
            good.update_one(
                doc! {"_id": 1},
                doc! {"$push": {"recentComments": {"$each": [comment.clone()], "$slice": -10}}},
            )
            .comment("C3 comment (good)")
            .await
            .unwrap();
        }
        buckets
            .update_one(
                doc! {"postId": 1, "count": {"$lt": 100}},
                doc! {"$push": {"comments": comment}, "$inc": {"count": 1}},
            )
            .upsert(true)
            .comment("C3 comment (good)")
            .await
            .unwrap();
        if i % 50 == 0 {
            bad.find_one(doc! {"_id": 1})
                .comment("Q2 get post")
                .await
                .unwrap();
            good.find_one(doc! {"_id": 1})
                .comment("Q2 get post (good)")
                .await
                .unwrap();
        }
    }
    bad.find_one(doc! {"_id": 1})
        .comment("Q2 get post")
        .await
        .unwrap();
    good.find_one(doc! {"_id": 1})
        .comment("Q2 get post (good)")
        .await
        .unwrap();
    settled(&proxy).await;
    let findings = proxy.findings();
    let mut got: Vec<(String, String, String, Severity)> = findings
        .iter()
        .map(|f| {
            (
                f.rule.clone(),
                f.namespace.clone(),
                f.subject.clone(),
                f.severity,
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (
                "WL101".into(),
                "growth_test.posts_bad".into(),
                "comments".into(),
                Severity::Error
            ),
            (
                "WL102".into(),
                "growth_test.posts_bad".into(),
                "comments".into(),
                Severity::Warning
            ),
            (
                "WL301".into(),
                "growth_test.posts_bad".into(),
                "comments".into(),
                Severity::Warning
            ),
        ],
        "{findings:#?}"
    );
    let wl101 = findings.iter().find(|f| f.rule == "WL101").unwrap();
    assert_eq!(wl101.evidence["growth_confirmed"], serde_json::json!(true));
    let wl102 = findings.iter().find(|f| f.rule == "WL102").unwrap();
    assert_eq!(wl102.evidence["max_length"], serde_json::json!(300));
    proxy.shutdown().await;
}

/// The blogging platform's V1 Q4: list a post's comments, then fetch each commenter's
/// username one by one (N+1, WL401); V2 stores the username on the comment
/// and needs one query — silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn n_plus_one_follow_ups_are_linked_by_values_from_the_list() {
    use futures_util::TryStreamExt;
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;
    let c = common::client(&proxy.connection_string()).await;
    let db = c.database("nplus1_test");
    let (users, comments, comments_v2) = (
        db.collection::<Document>("users"),
        db.collection::<Document>("comments"),
        db.collection::<Document>("comments_v2"),
    );
    for coll in [&users, &comments, &comments_v2] {
        let _ = coll.drop().await;
    }
    users
        .insert_many((0..6).map(|u| doc! {"_id": format!("u{u}"), "username": format!("name{u}")}))
        .await
        .unwrap();
    comments
        .insert_many(
            (0..40).map(|i| doc! {"postId": i % 5, "userId": format!("u{}", i % 6), "text": "c"}),
        )
        .await
        .unwrap();
    comments_v2
        .insert_many((0..40).map(|i| doc! {"postId": i % 5, "userId": format!("u{}", i % 6), "userUsername": format!("name{}", i % 6), "text": "c"}))
        .await
        .unwrap();
    for post in 0..3 {
        let list: Vec<Document> = comments
            .find(doc! {"postId": post})
            .comment("Q4")
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        for comment in &list {
            users
                .find_one(doc! {"_id": comment.get_str("userId").unwrap()})
                .comment("Q4")
                .await
                .unwrap();
        }
        let _: Vec<Document> = comments_v2
            .find(doc! {"postId": post})
            .comment("Q4 v2")
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
    }
    settled(&proxy).await;
    let findings: Vec<_> = proxy
        .findings()
        .into_iter()
        .filter(|f| f.rule == "WL401")
        .collect();
    assert_eq!(findings.len(), 1, "{findings:#?}");
    let f = &findings[0];
    assert_eq!(f.namespace, "nplus1_test.users");
    assert_eq!(f.subject, "nplus1_test.comments → nplus1_test.users._id");
    assert_eq!(f.evidence["follow_ups_per_list"], serde_json::json!(8));
    assert!(f.patterns.contains(&"Q4".to_string()));
    let report = proxy.report();
    assert_eq!(pattern(&report, "Q4").verdict, "warn");
    assert_eq!(pattern(&report, "Q4 v2").verdict, "ok");
    // Values were compared, never shown.
    assert!(!serde_json::to_string(&report).unwrap().contains("name3"));
    proxy.shutdown().await;
}

async fn http_post(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    http_request(addr, &head, body).await
}

/// Two parallel workers, told apart by their clients' application names,
/// each says which test it runs: the N+1 is put on the test whose traffic
/// showed it, in the report, the text, SARIF (the test's file and line)
/// and JUnit XML, and the clean test is named nowhere near it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn findings_name_the_tests_whose_operations_showed_them() {
    use futures_util::TryStreamExt;
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.admin = Some("127.0.0.1:0".into());
    let proxy = common::proxy_with(settings).await;
    let admin = proxy.admin_addr().unwrap();
    let (status, body) = http_get(admin, "/upstream").await;
    assert_eq!(status, 200, "{body}");
    let worker = |name: &str| {
        let uri = format!("{}?appName={name}", proxy.connection_string());
        async move { common::client(&uri).await }
    };
    let (w0, w1) = (worker("wirelint-w0").await, worker("wirelint-w1").await);
    let prepare = w0.database("suite_test");
    let (orders, customers) = (
        prepare.collection::<Document>("orders"),
        prepare.collection::<Document>("customers"),
    );
    for c in [&orders, &customers] {
        let _ = c.drop().await;
    }
    customers
        .insert_many((0..8).map(|i| doc! {"_id": i, "name": format!("c{i}")}))
        .await
        .unwrap();
    orders
        .insert_many((0..24).map(|i| doc! {"shop": i % 3, "customerId": i % 8}))
        .await
        .unwrap();
    let mark = |worker: &str, test: Option<(&str, &str, u32)>| {
        let body = match test {
            Some((id, file, line)) => {
                serde_json::json!({"worker": worker, "test": id, "file": file, "line": line})
            }
            None => serde_json::json!({"worker": worker}),
        };
        async move {
            let (status, text) = http_post(admin, "/tests", &body.to_string()).await;
            assert_eq!(status, 200, "{text}");
        }
    };
    mark(
        "wirelint-w0",
        Some((
            "tests/shop.test.js > reads one customer",
            "tests/shop.test.js",
            4,
        )),
    )
    .await;
    mark(
        "wirelint-w1",
        Some((
            "tests/orders.test.js > lists orders with customers",
            "tests/orders.test.js",
            17,
        )),
    )
    .await;
    let (clean_orders, clean_customers) = (
        w0.database("suite_test").collection::<Document>("orders"),
        w0.database("suite_test")
            .collection::<Document>("customers"),
    );
    let (n1_orders, n1_customers) = (
        w1.database("suite_test").collection::<Document>("orders"),
        w1.database("suite_test")
            .collection::<Document>("customers"),
    );
    let clean = async {
        for i in 0..6 {
            clean_customers.find_one(doc! {"_id": i}).await.unwrap();
            let _: Vec<Document> = clean_orders
                .find(doc! {"shop": i % 3})
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
        }
    };
    let n_plus_one = async {
        for shop in 0..3 {
            let list: Vec<Document> = n1_orders
                .find(doc! {"shop": shop})
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            for o in &list {
                n1_customers
                    .find_one(doc! {"_id": o.get_i32("customerId").unwrap()})
                    .await
                    .unwrap();
            }
        }
    };
    tokio::join!(clean, n_plus_one);
    mark("wirelint-w0", None).await;
    mark("wirelint-w1", None).await;
    let (status, _) = http_post(admin, "/tests", "{\"tset\": 1}").await;
    assert_eq!(status, 400, "an unknown key is refused");
    settled(&proxy).await;

    let report = proxy.report();
    let n1 = report
        .findings
        .iter()
        .find(|f| f.rule == "WL401")
        .unwrap_or_else(|| panic!("no N+1: {:#?}", report.findings));
    let named: Vec<&str> = n1.tests.iter().map(|t| t.test.as_str()).collect();
    assert_eq!(
        named,
        ["tests/orders.test.js > lists orders with customers"]
    );
    for f in &report.findings {
        assert!(
            f.tests
                .iter()
                .all(|t| !t.test.contains("reads one customer")),
            "the clean test is named on {}: {:?}",
            f.rule,
            f.tests
        );
    }
    let tests: Vec<(&str, u64)> = report
        .tests
        .iter()
        .map(|t| (t.id.as_str(), t.operations))
        .collect();
    assert_eq!(
        tests,
        [
            ("tests/shop.test.js > reads one customer", 12),
            ("tests/orders.test.js > lists orders with customers", 27),
        ]
    );
    let text = wirelint::report::table::text(&report);
    let shown = format!(
        "shown by tests/orders.test.js > lists orders with customers ({} operations)",
        n1.tests[0].operations
    );
    assert!(text.contains(&shown), "{text}");
    assert!(n1.tests[0].operations >= 3, "{:?}", n1.tests);
    let sarif = wirelint::report::sarif::sarif(&report);
    let result = sarif["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ruleId"] == "WL401")
        .unwrap();
    let location = &result["locations"][0]["physicalLocation"];
    assert_eq!(location["artifactLocation"]["uri"], "tests/orders.test.js");
    assert_eq!(location["region"]["startLine"], 17);
    let junit = wirelint::report::junit::junit(&report, wirelint::rules::Severity::Warning);
    assert!(
        junit.contains("in tests/orders.test.js &gt; lists orders with customers\" file=\"tests/orders.test.js\" line=\"17\""),
        "{junit}"
    );
    assert!(!junit.contains("reads one customer"), "{junit}");
    proxy.shutdown().await;
}

/// `GET /upstream` says, before any test runs, that the database is down,
/// with the message a client would get.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_check_says_why_the_database_cannot_be_reached() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let mut settings = common::settings(&format!("mongodb://{dead_addr}/"));
    settings.admin = Some("127.0.0.1:0".into());
    let proxy = common::proxy_with(settings).await;
    let (status, body) = http_get(proxy.admin_addr().unwrap(), "/upstream").await;
    assert_eq!(status, 503, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["ok"], false);
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("cannot connect to upstream") && error.contains(&dead_addr.to_string()),
        "{error}"
    );
    proxy.shutdown().await;
}
