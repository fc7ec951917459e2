//! The Python package and its pytest plugin, as a user gets them: the wheel
//! built by `scripts/wheel.sh` (maturin, the binary inside), installed into
//! a fresh virtual environment with pytest and pymongo from PyPI, running
//! the example suite `examples/pytest/` against FerretDB through the
//! plugin. With the N+1 test in the suite the session fails on
//! `--wirelint-fail-on warning` though every test passes; without it the
//! session passes. The terminal summary and the SARIF file are checked,
//! and a test whose client bypasses wirelint is said to have been seen by
//! nothing (failing the session when a level to fail on is set). The
//! findings name the N+1's test and not the clean ones, in the report, the
//! summary, SARIF (the test's file and line) and JUnit XML, with one worker
//! and with two (pytest-xdist); a database that is down stops the session
//! before its first test, with wirelint's message.

mod common;

use common::{containers, Backend};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

/// pip, pytest: fifteen minutes at most (the first pip install fetches from PyPI).
fn run(command: &mut Command) -> Output {
    common::output_within(command, Duration::from_secs(900))
}

fn pytest(venv: &Path, suite: &Path, upstream: &str, args: &[&str]) -> (i32, String) {
    pytest_with(venv, suite, upstream, args, &[])
}

fn pytest_with(
    venv: &Path,
    suite: &Path,
    upstream: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (i32, String) {
    let mut all = vec!["--wirelint-upstream", upstream];
    all.extend_from_slice(args);
    pytest_in(venv, suite, &all, env)
}

/// pytest in `suite` with `args` and `env` (and no `WIRELINT_BINARY` or
/// `WIRELINT_UPSTREAM` inherited): its exit status and stdout.
fn pytest_in(venv: &Path, suite: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = run(Command::new(venv.join("bin/pytest"))
        .current_dir(suite)
        .env_remove("WIRELINT_BINARY")
        .env_remove("WIRELINT_UPSTREAM")
        .envs(env.iter().copied())
        .args(["-p", "no:cacheprovider"])
        .args(args));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn sarif_results(suite: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(suite.join("wirelint.sarif")).unwrap();
    let sarif: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    sarif["runs"][0]["results"].as_array().unwrap().clone()
}

/// The report, the summary, the SARIF result and the JUnit XML of a run
/// of the example name its N+1 test, and none of its clean tests.
fn names_the_n_plus_one_test(suite: &Path, out: &str, sarif: &[serde_json::Value]) {
    const N_PLUS_ONE: &str = "test_front_page.py::test_front_page_names_every_author";
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(suite.join("wirelint-report.json")).unwrap())
            .unwrap();
    assert_eq!(report["findings"][0]["rule"], "WL401");
    let (tests, named) = common::report_tests(&report, "WL401");
    assert_eq!(tests.len(), 4, "every test was told: {tests:?}");
    assert_eq!(named, [N_PLUS_ONE]);
    assert!(out.contains(&format!("shown by {N_PLUS_ONE} (")), "{out}");
    assert_eq!(
        common::sarif_location(sarif, "WL401"),
        ("test_front_page.py".to_string(), 8),
        "the test function's line"
    );
    let junit = std::fs::read_to_string(suite.join("wirelint-junit.xml")).unwrap();
    assert!(
        junit.contains(&format!(
            "in {N_PLUS_ONE}\" file=\"test_front_page.py\" line=\"8\""
        )),
        "{junit}"
    );
    assert!(junit.contains("failures=\"1\""), "{junit}");
    assert!(!junit.contains("test_posts.py"), "{junit}");
}

/// The wheel's absolute path, built once per test binary by
/// `scripts/wheel.sh` (without the variables `cargo test` sets: see
/// `common::outside_cargo_test`).
fn wheel() -> &'static str {
    static WHEEL: OnceLock<String> = OnceLock::new();
    WHEEL.get_or_init(|| {
        let mut build = Command::new("bash");
        build.arg(common::manifest_dir().join("scripts/wheel.sh"));
        common::outside_cargo_test(&mut build);
        let wheel = run(&mut build);
        assert!(wheel.status.success(), "scripts/wheel.sh failed");
        let wheel = String::from_utf8(wheel.stdout).unwrap().trim().to_string();
        assert!(wheel.ends_with(".whl"), "{wheel}");
        // It prints the path from the repository's root.
        common::manifest_dir()
            .join(wheel)
            .to_string_lossy()
            .into_owned()
    })
}

/// A fresh virtual environment in `dir` with `wheel` (the wheel, with
/// extras if any) and `packages` installed from PyPI.
fn venv(dir: &Path, wheel: &str, packages: &[&str]) -> PathBuf {
    let venv = dir.join("venv");
    let python = std::env::var("WIRELINT_PYTHON").unwrap_or_else(|_| "python3".into());
    assert!(run(Command::new(python).args(["-m", "venv"]).arg(&venv))
        .status
        .success());
    assert!(run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(wheel)
        .args(packages))
    .status
    .success());
    venv
}

/// A copy of the example in `dir`, so that its outputs stay out of the tree.
fn copy_suite(dir: &Path) -> PathBuf {
    let suite = dir.join("suite");
    std::fs::create_dir(&suite).unwrap();
    for entry in std::fs::read_dir(common::manifest_dir().join("examples/pytest")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py" || e == "ini") {
            std::fs::copy(&path, suite.join(path.file_name().unwrap())).unwrap();
        }
    }
    suite
}

#[test]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB, wheel, PyPI")]
fn the_pytest_plugin_fails_the_session_on_an_anti_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let venv = venv(
        dir.path(),
        wheel(),
        &["pytest>=7,<10", "pymongo>=4.6,<5", "pytest-xdist>=3,<4"],
    );
    // The wheel put the binary in the environment.
    let version = run(Command::new(venv.join("bin/wirelint")).arg("--version"));
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("wirelint "));

    // The URI handed to the tests keeps credentials, database and options,
    // and drops what only concerns the way to the database.
    let check = run(Command::new(venv.join("bin/python")).args([
        "-c",
        r#"
from wirelint import client_uri
got = client_uri("mongodb+srv://app:p%2Fw@db.example.com/shop?replicaSet=rs0&tls=true&authSource=admin&retryWrites=true", "127.0.0.1:4000")
assert got == "mongodb://app:p%2Fw@127.0.0.1:4000/shop?authSource=admin&retryWrites=true", got
assert client_uri("mongodb://a:1,b:2", "127.0.0.1:9") == "mongodb://127.0.0.1:9/"
"#,
    ]));
    assert!(check.status.success());

    let suite = copy_suite(dir.path());

    let backend = Backend::start(Default::default());
    let upstream = backend.uri();

    // The whole suite: the tests pass, the N+1 fails the session.
    let (status, out) = pytest(&venv, &suite, &upstream, &[]);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("4 passed"), "{out}");
    assert!(out.contains("= wirelint ="), "the summary section: {out}");
    assert!(out.contains("WL401 n-plus-one"), "{out}");
    assert!(
        out.contains("reached --wirelint-fail-on warning: the session fails"),
        "{out}"
    );
    let results = sarif_results(&suite);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["ruleId"], "WL401");
    assert_eq!(results[0]["level"], "warning");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(suite.join("wirelint-report.json")).unwrap())
            .unwrap();
    assert_eq!(report["schema"], "wirelint.report/1");
    names_the_n_plus_one_test(&suite, &out, &results);

    // Two workers (pytest-xdist), one wirelint: the same test is named.
    let (status, out) = pytest(&venv, &suite, &upstream, &["-n", "2"]);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("4 passed"), "{out}");
    let results = sarif_results(&suite);
    assert_eq!(results.len(), 1, "{results:?}");
    names_the_n_plus_one_test(&suite, &out, &results);

    // The database down: no test runs, and wirelint says why.
    let (status, out) = pytest(&venv, &suite, "mongodb://127.0.0.1:1/", &[]);
    assert_eq!(status, 4, "{out}");
    assert!(
        out.contains(
            "the database does not answer through wirelint: cannot connect to upstream 127.0.0.1:1"
        ),
        "{out}"
    );
    assert!(!out.contains("passed"), "{out}");

    // Without the anti-pattern the session passes, with nothing to report,
    // and leaves nothing in the temporary directory (the report path is
    // given).
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let tmp_env = [("TMPDIR", tmp.to_str().unwrap())];
    let (status, out) = pytest_with(&venv, &suite, &upstream, &["test_posts.py"], &tmp_env);
    assert_eq!(status, 0, "{out}");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("wirelint-"))
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    assert!(out.contains("3 passed"), "{out}");
    assert!(out.contains("wirelint: 0 finding(s)"), "{out}");
    assert!(sarif_results(&suite).is_empty());

    // A bad level is a usage error naming the option.
    let (status, out) = pytest(
        &venv,
        &suite,
        &upstream,
        &["--wirelint-fail-on", "sometimes"],
    );
    assert_eq!(status, 4, "pytest's usage-error status: {out}");

    // A test whose client comes from a URI of its own (not the variable
    // the plugin repoints): wirelint sees no data operation and says so;
    // with a level to fail on, the session fails though the test passed,
    // and without one it passes with the warning.
    std::fs::write(
        suite.join("test_own_uri.py"),
        "import os\nimport pymongo\n\n\ndef test_reads_its_own_database():\n    \
         client = pymongo.MongoClient(os.environ[\"APP_DB_URI\"])\n    \
         client.own_uri.things.insert_one({\"a\": 1})\n    \
         assert client.own_uri.things.count_documents({}) >= 1\n",
    )
    .unwrap();
    let own = [("APP_DB_URI", upstream.as_str())];
    let args = ["--wirelint-env", "MONGODB_URI", "test_own_uri.py"];
    let (status, out) = pytest_with(&venv, &suite, &upstream, &args, &own);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("1 passed"), "{out}");
    assert!(out.contains("wirelint saw no data operations"), "{out}");
    assert!(out.contains("--wirelint-fail-on warning is set"), "{out}");
    let args = [
        "-o",
        "addopts=",
        "--wirelint-env",
        "MONGODB_URI",
        "test_own_uri.py",
    ];
    let (status, out) = pytest_with(&venv, &suite, &upstream, &args, &own);
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("wirelint saw no data operations"), "{out}");
}

/// No upstream: the plugin starts the FerretDB image in a container and
/// wirelint's image in another, both on the host's network, with the
/// `testcontainers` extra (`wirelint[testcontainers]`). The example suite
/// fails the session on its N+1 and names the test, as it does with the
/// binary; without the N+1 it passes; a wirelint image that is not there
/// fails the session before any test passes. Every container a session
/// started is removed by its end (Testcontainers' Ryuk, which would
/// otherwise clean up, cannot be pulled here and is off).
#[test]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
fn without_an_upstream_the_plugin_runs_ferretdb_and_wirelint_in_containers() {
    let (wirelint, ferretdb) = containers::images();
    let (wirelint, ferretdb) = (wirelint.as_str(), ferretdb.as_str());
    let dir = tempfile::tempdir().unwrap();
    let venv = venv(
        dir.path(),
        &format!("wirelint[testcontainers] @ file://{}", wheel()),
        &["pytest>=7,<10", "pymongo>=4.6,<5", "testcontainers==4.15.0"],
    );
    let suite = copy_suite(dir.path());
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let env = [
        ("TESTCONTAINERS_RYUK_DISABLED", "true"),
        ("TMPDIR", tmp.to_str().unwrap()),
    ];

    // The whole suite: the tests pass, the N+1 fails the session and the
    // findings name its test.
    let since = containers::unix_now();
    let (status, out) = pytest_in(&venv, &suite, &[], &env);
    assert_eq!(status, 1, "{out}");
    assert!(out.contains("4 passed"), "{out}");
    assert!(out.contains("WL401 n-plus-one"), "{out}");
    assert!(
        out.contains("reached --wirelint-fail-on warning: the session fails"),
        "{out}"
    );
    let results = sarif_results(&suite);
    assert_eq!(results.len(), 1, "{results:?}");
    names_the_n_plus_one_test(&suite, &out, &results);
    containers::started_and_removed(since, "python", &[ferretdb, wirelint], &out);

    // Without the anti-pattern: the session passes with nothing to
    // report, and leaves nothing behind.
    let since = containers::unix_now();
    let (status, out) = pytest_in(&venv, &suite, &["test_posts.py"], &env);
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("3 passed"), "{out}");
    assert!(out.contains("wirelint: 0 finding(s)"), "{out}");
    assert!(sarif_results(&suite).is_empty());
    containers::started_and_removed(since, "python", &[ferretdb, wirelint], &out);
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("wirelint-"))
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");

    // A wirelint image that is not there (nothing can be pulled): no test
    // passes, the error says which image, and the database's container
    // is removed.
    let since = containers::unix_now();
    let args = ["--wirelint-proxy-image", "wirelint:no-such-version"];
    let (status, out) = pytest_in(&venv, &suite, &args, &env);
    assert_ne!(status, 0, "{out}");
    assert!(
        out.contains("the wirelint container (wirelint:no-such-version) did not start"),
        "{out}"
    );
    assert!(!out.contains("passed"), "{out}");
    containers::started_and_removed(since, "python", &[ferretdb], &out);
}
