//! The dashboard in a real browser: Debian's chromium, headless, driven by
//! playwright-core (`tests/drivers/node/dashboard.js`), against a live
//! wirelint with its admin token set, in front of FerretDB, with Node
//! driver traffic that raises findings. The page asks for the token, shows
//! the N+1, the ⚠ on its pattern and the request's follow-ups (rebuilt
//! from untagged traffic), then shows a new finding on its own
//! refresh; no request leaves wirelint. Screenshots are kept in
//! `target/screenshots/` for the docs.

mod common;

use common::Backend;
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, Chromium, npm")]
async fn the_dashboard_shows_findings_and_updates_in_a_browser() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&chromium).exists(),
        "{chromium} is missing: scripts/test.sh installs Debian's chromium (apt-get install chromium)"
    );
    let backend = Backend::start(Default::default());
    let mut settings = common::settings(&backend.uri());
    settings.admin = Some("127.0.0.1:0".into());
    settings.admin_token = Some("dashboard-test-token".into());
    // Priced as Azure Cosmos DB for MongoDB (RU): the table's RU column.
    settings.analysis.target = Some(wirelint::analysis::target::Target::CosmosRu);
    let proxy = common::proxy_with(settings).await;
    let url = format!("http://{}/", proxy.admin_addr().unwrap());
    let shots = common::manifest_dir().join("target/screenshots");

    let uri = proxy.connection_string();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .current_dir(common::manifest_dir().join("tests/drivers/node"))
            .env("CHROMIUM", chromium)
            .arg("dashboard.js")
            .arg(&url)
            .arg(&uri)
            .arg("dashboard-test-token")
            .arg(&shots)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the browser test failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}");
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(seen["asked_for_token"], true);
    assert!(
        seen["n_plus_one"].as_str().unwrap().contains("WL401"),
        "{seen}"
    );
    assert!(
        seen["large_document"].as_str().unwrap().contains("WL103"),
        "{seen}"
    );
    // The list request shows its five lookups of users.
    assert!(
        seen["follow_ups"].as_str().unwrap().contains("5 × find ")
            && seen["follow_ups"].as_str().unwrap().contains(".users"),
        "{seen}"
    );
    // The analysis's own cost: its share of wirelint's CPU and its CPU
    // per request, measured (the Node traffic cost it something).
    let cpu = seen["analysis_cpu"].as_str().unwrap();
    let (share, per_request) = cpu
        .strip_suffix(" µs/request")
        .and_then(|c| c.split_once(" % · "))
        .unwrap_or_else(|| panic!("{seen}"));
    let (share, per_request): (f64, f64) = (share.parse().unwrap(), per_request.parse().unwrap());
    assert!(share > 0.0 && share <= 100.0 && per_request > 0.0, "{seen}");
    // What the page showed is what wirelint found.
    let rules: Vec<String> = proxy.findings().iter().map(|f| f.rule.clone()).collect();
    assert!(
        rules.contains(&"WL401".to_string()) && rules.contains(&"WL103".to_string()),
        "{rules:?}"
    );
    for shot in ["dashboard.png", "dashboard-new-finding.png"] {
        let path = common::manifest_dir().join("target/screenshots").join(shot);
        assert!(
            std::fs::metadata(&path).unwrap().len() > 10_000,
            "{}",
            path.display()
        );
    }
    proxy.shutdown().await;
}
