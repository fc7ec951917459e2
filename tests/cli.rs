//! The `wirelint` binary as a user runs it: help, config errors, flags from
//! the environment and the config file, JSON logs, SIGTERM.

mod common;

use common::Backend;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::run;
use common::wirelint_command as wirelint;

#[test]
fn help_explains_the_proxy_and_its_settings() {
    let (code, out, _) = run(wirelint().arg("--help"));
    assert_eq!(code, 0);
    assert!(
        out.contains("proxy") && out.contains("connection string"),
        "{out}"
    );
    let (code, out, _) = run(wirelint().args(["proxy", "--help"]));
    assert_eq!(code, 0);
    for needle in [
        "--upstream",
        "WIRELINT_UPSTREAM",
        "--listen",
        "--config",
        "--tls-cert",
        "--max-connections",
        "--shutdown-grace",
        "replica set",
    ] {
        assert!(out.contains(needle), "help lacks {needle}:\n{out}");
    }
}

#[test]
fn missing_upstream_says_how_to_give_one() {
    let (code, _, err) = run(wirelint().arg("proxy"));
    assert_eq!(code, 2);
    assert!(
        err.contains("--upstream") && err.contains("WIRELINT_UPSTREAM") && err.contains("[proxy]"),
        "{err}"
    );
}

#[test]
fn unknown_config_key_names_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wirelint.toml");
    std::fs::write(
        &path,
        "[proxy]\nupstream = \"mongodb://127.0.0.1:1\"\nmax_conections = 5\n",
    )
    .unwrap();
    let (code, _, err) = run(wirelint().args(["proxy", "--config"]).arg(&path));
    assert_eq!(code, 2);
    assert!(err.contains(&format!("{}:3:1", path.display())), "{err}");
    assert!(
        err.contains("max_conections") && err.contains("max_connections"),
        "{err}"
    );
}

#[test]
fn bad_values_name_their_source() {
    let (code, _, err) = run(wirelint()
        .args(["proxy", "--upstream", "mongodb://127.0.0.1:1"])
        .env("WIRELINT_CONNECT_TIMEOUT", "soon"));
    assert_eq!(code, 2);
    assert!(
        err.contains("WIRELINT_CONNECT_TIMEOUT") && err.contains("connect_timeout"),
        "{err}"
    );
    let (code, _, err) = run(wirelint().args([
        "proxy",
        "--upstream",
        "mongodb+srv://cluster0.example.net:27017",
    ]));
    assert_eq!(code, 2);
    assert!(
        err.contains("without a port") && err.contains("upstream"),
        "{err}"
    );
    let (code, _, err) = run(wirelint().args([
        "proxy",
        "--upstream",
        "mongodb://127.0.0.1:1",
        "--listen",
        "256.0.0.1:1",
    ]));
    assert_eq!(code, 1);
    assert!(err.contains("cannot listen on 256.0.0.1:1"), "{err}");
}

/// A `[proxy]` key whose value is refused: exit 2, and the error names the
/// file and the key and shows a value to write instead.
fn refused_in_the_file(key: &str, value: &str, instead: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wirelint.toml");
    std::fs::write(
        &path,
        format!("[proxy]\nupstream = \"mongodb://127.0.0.1:1\"\n{key} = \"{value}\"\n"),
    )
    .unwrap();
    let (code, _, err) = run(wirelint().args(["proxy", "--config"]).arg(&path));
    assert_eq!(code, 2);
    assert!(
        err.contains(&path.display().to_string())
            && err.contains(key)
            && err.contains(&format!("\"{instead}\"")),
        "{err}"
    );
}

#[test]
fn an_analysis_share_from_the_file_is_checked_and_named() {
    refused_in_the_file("analysis_share", "1/3", "1/4");
}

#[test]
fn an_analysis_cpu_budget_from_the_file_is_checked_and_named() {
    refused_in_the_file("analysis_cpu", "10", "10%");
}

/// Starts the binary and waits for the line that gives its address.
fn start(cmd: &mut Command) -> (Child, String, Vec<String>) {
    let mut child = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        seen.push(line.clone());
        if let Some(i) = line.find("mongodb://127.0.0.1:") {
            let uri: String = line[i..]
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '"')
                .collect();
            std::thread::spawn(move || for _ in lines.by_ref() {});
            return (child, uri, seen);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("wirelint did not print its address:\n{}", seen.join("\n"));
}

fn terminate(mut child: Child) -> i32 {
    Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        assert!(
            Instant::now() < deadline,
            "wirelint did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn runs_from_environment_and_config_file_and_stops_on_sigterm() {
    let backend = Backend::shared();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wirelint.toml");
    // The file gives the upstream; the environment gives the address and the
    // log format; the flag beats the file for max_connections.
    std::fs::write(
        &config,
        format!(
            "[proxy]\nupstream = \"{}\"\nmax_connections = 1\nlog_format = \"text\"\n",
            backend.uri()
        ),
    )
    .unwrap();
    let (child, uri, _) = start(
        wirelint()
            .args(["proxy", "--max-connections", "50", "--log-format", "json"])
            .env("WIRELINT_CONFIG", &config)
            .env("WIRELINT_LISTEN", "127.0.0.1:0"),
    );
    let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
    let coll = client
        .database("cli_test")
        .collection::<mongodb::bson::Document>("c");
    coll.insert_one(mongodb::bson::doc! {"a": 1}).await.unwrap();
    // Several pooled connections work: the flag's 50 won over the file's 1.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let coll = coll.clone();
            tokio::spawn(async move { coll.find_one(mongodb::bson::doc! {}).await.unwrap() })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().is_some());
    }
    drop(client);
    assert_eq!(terminate(child), 0);
}

#[test]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
fn json_logs_are_json() {
    let backend = Backend::shared();
    let (child, _uri, seen) = start(
        wirelint()
            .args([
                "--log-format",
                "json",
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
            ])
            .arg(backend.uri()),
    );
    let line = seen.last().unwrap();
    let parsed: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(parsed["level"], "INFO");
    assert_eq!(terminate(child), 0);
}

#[test]
fn keys_lists_partition_keys_with_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wirelint.toml");
    std::fs::write(&path, "[collections.\"blog.posts\"]\npartition_key = [\"postId\"]\n\n[collections.\"blog.users\"]\npartition_key = [\"tenant\", \"userId\"]\n").unwrap();
    let (code, out, _) = run(wirelint().args(["keys", "--config"]).arg(&path));
    assert_eq!(code, 0);
    assert!(
        out.contains("blog.posts") && out.contains("[postId]") && out.contains("from config file"),
        "{out}"
    );
    assert!(out.contains("[tenant, userId]"), "{out}");
    let (code, _, err) = run(wirelint().arg("keys"));
    assert_eq!(code, 2);
    assert!(err.contains("--config"), "{err}");
}

/// `wirelint rules | head -1`: the reader goes away before the output is
/// written; the command exits 0, quietly (it panicked on the closed pipe
/// and exited 101).
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    for args in [&["rules"][..], &["rules", "--help"][..]] {
        let mut child = wirelint()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // `head -1` reading one line and leaving, at its earliest: the
        // read end closed before wirelint writes.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// An empty admin token would turn the token check off: refused at start,
/// naming the setting.
#[test]
fn an_empty_admin_token_is_refused_at_start() {
    let (code, _, err) = run(wirelint()
        .args([
            "proxy",
            "--upstream",
            "mongodb://127.0.0.1:1/",
            "--admin",
            "127.0.0.1:0",
        ])
        .env("WIRELINT_ADMIN_TOKEN", ""));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("admin_token") && err.contains("empty"),
        "{err}"
    );
}

#[test]
fn admin_endpoints_off_loopback_need_a_token() {
    let (code, _, err) = run(wirelint()
        .args(["proxy", "--upstream", "mongodb://127.0.0.1:1/"])
        .env("WIRELINT_ADMIN", "0.0.0.0:0")
        .env_remove("WIRELINT_ADMIN_TOKEN"));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`admin`") && err.contains("WIRELINT_ADMIN_TOKEN"),
        "{err}"
    );
}
