//! The outputs a user reads, produced by the real binary in front of
//! FerretDB: the JSON report, `wirelint report` as text, Markdown, SARIF
//! (validated against the SARIF 2.1.0 schema) and JSON, `wirelint diff`,
//! `--fail-on`, the admin endpoints — and none of them, nor the logs,
//! carrying a value from the traffic.

mod common;

use common::Backend;
use mongodb::bson::{doc, Document};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "s3cr3t-4111-1111-1111-1111";
/// Secrets planted in every position of the upstream URI.
const URI_SECRETS: [&str; 6] = [
    "plantUser",
    "plantPw/x",
    "plantPw%2Fx",
    "plantToken",
    "plantProxyPw",
    "plantKeyPw",
];

fn wirelint() -> Command {
    common::wirelint_command()
}

struct Running {
    child: Child,
    uri: String,
    admin: String,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

fn start(args: &[&str]) -> Running {
    let mut child = wirelint()
        .args(args)
        .env("RUST_LOG", "wirelint=debug")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let captured = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = captured.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("connect your application to") || line.contains("admin endpoints on") {
                let _ = tx.send(line.clone());
            }
            sink.lock().unwrap().push_str(&line);
            sink.lock().unwrap().push('\n');
        }
    });
    let (mut uri, mut admin) = (String::new(), String::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while (uri.is_empty() || admin.is_empty()) && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            if let Some(i) = line.find("mongodb://") {
                uri = line[i..].split_whitespace().next().unwrap().to_string();
            }
            if let Some(i) = line.find("http://") {
                admin = line[i + 7..].split('/').next().unwrap().to_string();
            }
        }
    }
    assert!(
        !uri.is_empty() && !admin.is_empty(),
        "wirelint did not start:\n{}",
        captured.lock().unwrap()
    );
    Running {
        child,
        uri,
        admin,
        stderr: captured,
    }
}

fn stop(mut r: Running) -> (i32, String) {
    Command::new("kill")
        .arg("-TERM")
        .arg(r.child.id().to_string())
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = r.child.try_wait().unwrap() {
            break status.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "wirelint did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(100));
    let err = r.stderr.lock().unwrap().clone();
    (code, err)
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn run(args: &[&str]) -> (i32, String) {
    let out = wirelint().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Traffic with the secret in documents, filters, updates, a large
/// document, a `$lookup` read and a malformed message.
async fn secret_traffic(uri: &str) {
    use futures_util::TryStreamExt;
    let c = mongodb::Client::with_uri_str(uri).await.unwrap();
    let db = c.database("privacy_test");
    let users = db.collection::<Document>("users");
    let _ = users.drop().await;
    users
        .insert_many(
            (0..30).map(
                |i| doc! {"_id": i, "email": format!("{SECRET}-{i}@example.com"), "card": SECRET},
            ),
        )
        .await
        .unwrap();
    users
        .find_one(doc! {"email": format!("{SECRET}-3@example.com")})
        .comment("Q-user-by-email")
        .await
        .unwrap();
    users
        .update_one(
            doc! {"card": SECRET},
            doc! {"$set": {"note": SECRET}, "$push": {"tags": SECRET}},
        )
        .await
        .unwrap();
    users
        .insert_one(doc! {"blob": SECRET.repeat(100_000)})
        .await
        .unwrap();
    for _ in 0..25 {
        let r = users
            .aggregate(vec![doc! {"$match": {"card": SECRET}}, doc! {"$lookup": {"from": "orders", "localField": "_id", "foreignField": "userId", "as": "o"}}])
            .comment("Q-user-orders")
            .await;
        if let Ok(cursor) = r {
            let _ = cursor.try_collect::<Vec<_>>().await;
        }
    }
    // A malformed message carrying the secret: logged, never quoted.
    let body =
        mongodb::bson::rawdoc! {"find": "users", "filter": {"card": SECRET}, "$db": "privacy_test"};
    let mut frame = wirelint::wire::op_msg::encode(9, 0, 0, body.as_bytes(), &[]);
    let at = 21 + 4 + 1 + "find".len() + 1;
    frame[at..at + 4].copy_from_slice(&9999i32.to_le_bytes());
    let addr = uri.trim_start_matches("mongodb://").trim_end_matches('/');
    if let Ok(mut s) = std::net::TcpStream::connect(addr) {
        use std::io::Write;
        let _ = s.write_all(&frame);
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(SECRET) && !text.contains("s3cr3t"),
        "{what} leaks a value:\n{}",
        &text[..text.len().min(4000)]
    );
    for planted in URI_SECRETS {
        assert!(
            !text.contains(planted),
            "{what} leaks {planted} from the upstream URI:\n{}",
            &text[..text.len().min(4000)]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn every_output_is_complete_valid_and_free_of_values() {
    let backend = Backend::shared();
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let report_arg = report_path.display().to_string();
    // Credentials and secret options in the upstream URI: unused for
    // proxied traffic, and shown nowhere.
    let upstream = format!(
        "mongodb://plantUser:plantPw%2Fx@{}/?authMechanismProperties=AWS_SESSION_TOKEN:plantToken&proxyPassword=plantProxyPw&tlsCertificateKeyFilePassword=plantKeyPw",
        backend.addr()
    );
    let r = start(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
        "--admin",
        "127.0.0.1:0",
        "--report",
        &report_arg,
        "--fail-on",
        "warning",
        "--summary-interval",
        "1s",
    ]);
    secret_traffic(&r.uri).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let metrics = http_get(&r.admin, "/metrics");
    assert!(
        metrics.contains("wirelint_findings{rule=\"WL103\""),
        "{metrics}"
    );
    assert_no_secret("/metrics", &metrics);
    for path in ["/findings", "/patterns"] {
        let body = http_get(&r.admin, path);
        assert!(body.contains("200 OK"), "{body}");
        assert_no_secret(path, &body);
    }

    let admin = r.admin.clone();
    let (code, stderr) = stop(r);
    assert_eq!(
        code, 3,
        "--fail-on warning with warnings present exits 3\n{stderr}"
    );
    assert!(
        stderr.contains("WARNING WL103 large-document privacy_test.users"),
        "live line missing:\n{stderr}"
    );
    assert!(
        stderr.contains("WARNING WL504 lookup-heavy privacy_test.users"),
        "live line missing:\n{stderr}"
    );
    assert!(
        stderr.contains("ops/s") && stderr.contains("patterns"),
        "summary line missing:\n{stderr}"
    );
    assert!(
        stderr.contains("analysis could not decode a request"),
        "{stderr}"
    );
    assert_no_secret("stderr", &stderr);
    assert!(
        std::net::TcpStream::connect(&admin).is_err(),
        "admin still up after shutdown"
    );

    let json = std::fs::read_to_string(&report_path).unwrap();
    assert_no_secret("report.json", &json);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["schema"], "wirelint.report/1");
    assert!(report["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "Q-user-orders" && p["verdict"] == "warn"));

    for format in ["text", "markdown", "sarif", "json"] {
        let (code, out) = run(&["report", &report_arg, "--format", format]);
        assert_eq!(code, 0, "{format}: {out}");
        assert_no_secret(format, &out);
        match format {
            "text" => {
                assert!(
                    out.contains("Access patterns")
                        && out.contains("Q-user-orders")
                        && out.contains("⚠ WL504"),
                    "{out}"
                );
                assert!(out.contains("→ Split the document"), "{out}");
            }
            "markdown" => assert!(
                out.contains("| Pattern | Calls | Round trips/call |")
                    && out.contains("### ⚠ WL103"),
                "{out}"
            ),
            "sarif" => validate_sarif(&out),
            _ => assert!(out.contains("\"schema\": \"wirelint.report/1\"")),
        }
    }
    let (code, _) = run(&["report", &report_arg, "--fail-on", "error"]);
    assert_eq!(code, 0, "no error-level finding");
    let (code, _) = run(&["report", &report_arg, "--fail-on", "warning"]);
    assert_eq!(code, 3);
    let (code, diff) = run(&["diff", &report_arg, &report_arg]);
    assert_eq!(code, 0);
    assert!(
        diff.contains("Q-user-orders") && diff.contains("⚠→⚠"),
        "{diff}"
    );
}

fn validate_sarif(text: &str) {
    let schema_path = common::manifest_dir().join("fixtures/sarif-2.1.0-rtm.5.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let instance: serde_json::Value = serde_json::from_str(text).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("SARIF schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "SARIF invalid:\n{}", errors.join("\n"));
    // The validator does reject what is not SARIF.
    let mut broken = instance.clone();
    broken["runs"][0]["results"][0]["level"] = serde_json::json!("bogus");
    assert!(!validator.is_valid(&broken));
    let results = instance["runs"][0]["results"].as_array().unwrap();
    assert!(results
        .iter()
        .all(|r| r["partialFingerprints"]["wirelintFinding/v1"].is_string()));
    assert!(results.iter().any(|r| r["ruleId"] == "WL103"
        && r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            == "mongodb/privacy_test/users"));
    let rules = instance["runs"][0]["tool"]["driver"]["rules"]
        .as_array()
        .unwrap();
    assert!(rules.iter().all(|r| r["help"]["text"].is_string()));
}

#[test]
fn report_and_diff_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let (code, out) = run(&["report", missing.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        out.contains("cannot read") && out.contains("nope.json"),
        "{out}"
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"schema\": \"something-else\"}").unwrap();
    let (code, out) = run(&["diff", bad.to_str().unwrap(), bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(out.contains("not a wirelint report"), "{out}");
    let _ = Path::new("");
}

/// A bad upstream URI is refused with an error that names the problem and
/// quotes none of the secrets in it, whatever position they are in.
#[test]
fn upstream_errors_quote_no_secret() {
    for bad in [
        "plantUser:plantPw/x@127.0.0.1:1",
        "postgres://plantUser:plantPw/x@127.0.0.1",
        "mongodb://plantUser:plantPw/x@127.0.0.1:99999",
        "mongodb://127.0.0.1/?proxyPassword=plantProxyPw%zz",
        "mongodb://127.0.0.1/?tlsCertificateKeyFilePassword=plantKeyPw%ff&tls=maybe",
        "mongodb://127.0.0.1/?authMechanismProperties=AWS_SESSION_TOKEN:plantToken&directConnection=x",
    ] {
        let (code, out) = run(&["proxy", "--listen", "127.0.0.1:0", "--upstream", bad]);
        assert_eq!(code, 2, "{bad}: {out}");
        assert!(out.contains("upstream"), "{bad}: {out}");
        assert_no_secret(bad, &out);
    }
}
