//! wirelint's image as its users run it, in front of the FerretDB image,
//! both built here by `scripts/image.sh` (nothing is pulled):
//!
//! - `docker run --network host wirelint:VERSION proxy --upstream …`: a
//!   real driver's CRUD through it is what it is direct; the health check
//!   turns healthy, then unhealthy when the upstream goes; `docker stop`
//!   ends it within the grace period with a final report; a wrong upstream
//!   gives the client wirelint's error fast; admin endpoints on every
//!   address with no token stop the container at start, saying why.
//! - The Rust runner's helper (`wirelint::app::container`, the
//!   testcontainers crate): a suite with an N+1 gets the finding in the
//!   report `finish` returns, the batched one none, and no container is
//!   left behind.
//!
//! They need a Docker engine: with the `containers` feature (which
//! `scripts/test.sh` turns on once `docker info` answers, starting an
//! engine if it can) they run, and a missing engine fails them; without
//! it they are listed as ignored.

mod common;

use common::containers::{docker, images};
#[cfg(feature = "testcontainers")]
use futures_util::TryStreamExt;
use mongodb::bson::{doc, Document};
use mongodb::options::ClientOptions;
use mongodb::Client;
use std::process::Command;
use std::time::{Duration, Instant};

async fn client(uri: &str) -> Client {
    let mut options = ClientOptions::parse(uri).await.unwrap();
    options.server_selection_timeout = Some(Duration::from_secs(20));
    Client::with_options(options).unwrap()
}

/// `docker logs` of a container, both streams.
fn logs(id: &str) -> String {
    let out = Command::new("docker").args(["logs", id]).output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Containers this test started, removed however it ends.
struct Started(Vec<String>);

impl Drop for Started {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
    }
}

/// The FerretDB image on a free port; returns its id and URI once it
/// listens.
fn ferretdb(image: &str, started: &mut Started) -> (String, String) {
    let port = common::free_port();
    let id = docker(&[
        "run",
        "-d",
        "--network",
        "host",
        "-e",
        &format!("FERRETDB_LISTEN_ADDR=127.0.0.1:{port}"),
        image,
    ]);
    started.0.push(id.clone());
    let began = Instant::now();
    while !logs(&id).contains("Listening on") {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "FerretDB never listened: {}",
            logs(&id)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (id, format!("mongodb://127.0.0.1:{port}/"))
}

fn health(id: &str) -> String {
    docker(&["inspect", id, "--format", "{{.State.Health.Status}}"])
}

/// Waits for the container's health to be `want`.
fn wait_health(id: &str, want: &str, within: Duration) {
    let began = Instant::now();
    loop {
        let now = health(id);
        if now == want {
            return;
        }
        assert!(
            began.elapsed() < within,
            "still {now}, not {want}, after {within:?}: {}",
            docker(&["inspect", id, "--format", "{{json .State.Health}}"])
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
async fn docker_run_in_front_of_ferretdb() {
    let (wirelint, ferretdb_image) = images();
    let mut started = Started(Vec::new());
    let (database, upstream) = ferretdb(&ferretdb_image, &mut started);

    // As the README runs it, with the health check asked every second
    // (the image's own interval is 10 s) and the report in a directory of
    // the host.
    let out = tempfile::tempdir().unwrap();
    let (listen, admin) = (common::free_port(), common::free_port());
    let user = {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(out.path()).unwrap();
        format!("{}:{}", meta.uid(), meta.gid())
    };
    let id = docker(&[
        "run",
        "-d",
        "--network",
        "host",
        "--user",
        &user,
        "-v",
        &format!("{}:/out", out.path().display()),
        "-e",
        &format!("WIRELINT_LISTEN=127.0.0.1:{listen}"),
        "-e",
        &format!("WIRELINT_ADMIN=127.0.0.1:{admin}"),
        "--health-interval",
        "1s",
        "--health-retries",
        "2",
        &wirelint,
        "proxy",
        "--upstream",
        &upstream,
        "--report",
        "/out/report.json",
    ]);
    started.0.push(id.clone());
    wait_health(&id, "healthy", Duration::from_secs(30));

    let through = format!("mongodb://127.0.0.1:{listen}/");
    let direct = common::crud(&client(&upstream).await, "image_direct").await;
    let proxied = common::crud(&client(&through).await, "image_proxy").await;
    assert_eq!(direct, proxied);

    // The upstream goes: unhealthy, and a client gets an error, not a hang.
    docker(&["stop", &database]);
    wait_health(&id, "unhealthy", Duration::from_secs(30));
    let asked = Instant::now();
    let mut options = ClientOptions::parse(&through).await.unwrap();
    options.server_selection_timeout = Some(Duration::from_secs(5));
    let failed = Client::with_options(options)
        .unwrap()
        .database("image_proxy")
        .collection::<Document>("items")
        .find_one(doc! {})
        .await;
    assert!(failed.is_err(), "{failed:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    // It comes back: healthy again.
    docker(&["start", &database]);
    wait_health(&id, "healthy", Duration::from_secs(30));

    // docker stop: SIGTERM, a drain within the image's grace (5 s) well
    // inside docker's 10 s, the final report, status 0.
    let stopping = Instant::now();
    docker(&["stop", &id]);
    let took = stopping.elapsed();
    assert!(took < Duration::from_secs(9), "docker stop took {took:?}");
    assert_eq!(
        docker(&["inspect", &id, "--format", "{{.State.ExitCode}}"]),
        "0",
        "{}",
        logs(&id)
    );
    let log = logs(&id);
    assert!(log.contains("shutting down"), "{log}");
    assert!(log.contains("stopped connections="), "{log}");
    let report = wirelint::report::Report::load(&out.path().join("report.json")).unwrap();
    assert!(
        report
            .patterns
            .iter()
            .any(|p| p.name.contains("image_proxy.items")),
        "{:?}",
        report.patterns.iter().map(|p| &p.name).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
async fn bad_input_in_the_container_is_said_not_hung() {
    let (wirelint, _) = images();
    let mut started = Started(Vec::new());

    // A wrong upstream: the client gets wirelint's error, fast.
    let listen = common::free_port();
    let id = docker(&[
        "run",
        "-d",
        "--network",
        "host",
        "-e",
        &format!("WIRELINT_LISTEN=127.0.0.1:{listen}"),
        "-e",
        &format!("WIRELINT_ADMIN=127.0.0.1:{}", common::free_port()),
        &wirelint,
        "proxy",
        "--upstream",
        // Nothing listens on port 1.
        "mongodb://127.0.0.1:1/",
    ]);
    started.0.push(id.clone());
    let began = Instant::now();
    while !logs(&id).contains("wirelint is forwarding") {
        assert!(began.elapsed() < Duration::from_secs(30), "{}", logs(&id));
        std::thread::sleep(Duration::from_millis(100));
    }
    let asked = Instant::now();
    let mut options = ClientOptions::parse(format!(
        "mongodb://127.0.0.1:{listen}/?directConnection=true"
    ))
    .await
    .unwrap();
    // The driver asks again until its selection timeout: each hello got
    // wirelint's answer, which the error carries (a hang would carry none).
    options.server_selection_timeout = Some(Duration::from_secs(5));
    let error = Client::with_options(options)
        .unwrap()
        .database("x")
        .run_command(doc! {"ping": 1})
        .await
        .unwrap_err()
        .to_string();
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "{:?}: {error}",
        asked.elapsed()
    );
    assert!(
        error.contains("wirelint: cannot connect to upstream"),
        "{error}"
    );

    // Admin endpoints on every address (the image's default) and no
    // token: the container stops at once, saying what to set.
    let out = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "host",
            "-e",
            &format!("WIRELINT_LISTEN=127.0.0.1:{}", common::free_port()),
            &wirelint,
            "proxy",
            "--upstream",
            "mongodb://127.0.0.1:1/",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("WIRELINT_ADMIN_TOKEN"), "{err}");
}

/// A suite's reads of posts and then their authors, one query per post
/// (`batched`: one `$in` for all of them). Only the Rust helper's test
/// runs it, built with the `testcontainers` feature.
#[cfg(feature = "testcontainers")]
async fn front_page(uri: &str, batched: bool) {
    let db = client(uri).await.database("tc_blog");
    let (posts, authors) = (
        db.collection::<Document>("posts"),
        db.collection::<Document>("authors"),
    );
    let _ = posts.drop().await;
    let _ = authors.drop().await;
    authors
        .insert_many((0..6).map(|a| doc! {"_id": format!("a{a}"), "name": format!("author {a}")}))
        .await
        .unwrap();
    posts
        .insert_many(
            (0..30).map(|i| doc! {"day": i % 3, "authorId": format!("a{}", i % 6), "title": "t"}),
        )
        .await
        .unwrap();
    for day in 0..3 {
        let list: Vec<Document> = posts
            .find(doc! {"day": day})
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let ids: Vec<String> = list
            .iter()
            .map(|p| p.get_str("authorId").unwrap().to_string())
            .collect();
        if batched {
            let _: Vec<Document> = authors
                .find(doc! {"_id": {"$in": &ids}})
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
        } else {
            for id in &ids {
                authors.find_one(doc! {"_id": id}).await.unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
async fn the_rust_helper_reports_what_the_suite_did() {
    #[cfg(feature = "testcontainers")]
    {
        use wirelint::app::container::Wirelint;
        let (_, ferretdb_image) = images();
        let mut started = Started(Vec::new());
        let (_, upstream) = ferretdb(&ferretdb_image, &mut started);
        let mut ids = Vec::new();
        for batched in [false, true] {
            let wirelint = Wirelint::in_front_of(&upstream).start().await.unwrap();
            ids.push(wirelint.id().to_string());
            front_page(&wirelint.connection_string(), batched).await;
            let report = wirelint.finish().await.unwrap();
            let n_plus_one: Vec<_> = report
                .findings
                .iter()
                .filter(|f| f.rule == "WL401")
                .collect();
            if batched {
                assert!(report.findings.is_empty(), "{:?}", report.findings);
            } else {
                assert_eq!(n_plus_one.len(), 1, "{:?}", report.findings);
                assert!(
                    n_plus_one[0].namespace.ends_with("tc_blog.authors"),
                    "{:?}",
                    n_plus_one[0]
                );
            }
        }
        // finish removed each container.
        let left = docker(&["ps", "-a", "--format", "{{.ID}}", "--no-trunc"]);
        for id in ids {
            assert!(!left.contains(&id), "{id} left behind:\n{left}");
        }
    }
    #[cfg(not(feature = "testcontainers"))]
    panic!("run with --features containers");
}
