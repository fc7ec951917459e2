//! The npm package and its Jest and Vitest global setups, as a user gets
//! them: the tarball packed by `scripts/npm-pack.sh` (the binary inside),
//! installed beside the example suites `examples/jest/` and
//! `examples/vitest/` (their own dependencies from their lock files, with
//! `npm ci`), each run against FerretDB with `MONGODB_URI` pointing at it,
//! as the suite would run without wirelint.
//!
//! With the front page's N+1 the run fails though every test passes, the
//! output names WL401 and its namespace, and the SARIF file carries it;
//! with the N+1 switched off (`BLOG_AUTHORS=batched`, no test changes) the
//! run passes with nothing to report; a bad option stops the run before
//! any test with a message naming it. The bin shim is checked on its own:
//! arguments, output, exit status, signals, `WIRELINT_BINARY`.
//!
//! Without `MONGODB_URI` the setups start the FerretDB image and
//! wirelint's image in containers with `testcontainers`: those tests need
//! a Docker engine and run with the `containers` feature (where no engine
//! answers they fail, rather than pass).

mod common;

use common::{containers, Backend};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// npm, a test runner: five minutes at most (a run takes seconds; an install, under a minute).
fn run(command: &mut Command) -> Output {
    common::output_within(command, Duration::from_secs(300))
}

/// The tarball, packed once per test binary. Without the variables `cargo
/// test` sets for a test (ring's build script watches CARGO_MANIFEST_DIR):
/// with them, a missing release binary would be built from scratch twice.
fn tarball() -> &'static Path {
    static TARBALL: OnceLock<PathBuf> = OnceLock::new();
    TARBALL.get_or_init(|| {
        let mut pack = Command::new("bash");
        pack.arg(common::manifest_dir().join("scripts/npm-pack.sh"));
        common::outside_cargo_test(&mut pack);
        let out = run(&mut pack);
        assert!(out.status.success(), "scripts/npm-pack.sh failed");
        let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        assert!(
            path.is_file() && path.to_string_lossy().ends_with("wirelint-0.1.0.tgz"),
            "{path:?}"
        );
        path
    })
}

/// `npm ARGS --prefer-offline --no-audit --no-fund` in `dir`. npm's cache
/// makes a second run fast; but where the lock files carry no tarball URLs
/// (`omit-lockfile-registry-resolved`) a stale cached package list can lack
/// a version the lock names, so a failure is retried online once.
fn npm(dir: &Path, args: &[&str]) {
    let command = |offline: bool| {
        let mut c = Command::new("npm");
        c.current_dir(dir)
            .args(args)
            .args(["--no-audit", "--no-fund"]);
        if offline {
            c.arg("--prefer-offline");
        }
        c
    };
    if run(&mut command(true)).status.success() {
        return;
    }
    eprintln!("npm {args:?} failed with --prefer-offline: again, online");
    assert!(
        run(&mut command(false)).status.success(),
        "npm {args:?} failed"
    );
}

#[derive(Clone, Copy)]
enum Runner {
    Jest,
    Vitest,
}

impl Runner {
    fn example(self) -> &'static str {
        match self {
            Runner::Jest => "jest",
            Runner::Vitest => "vitest",
        }
    }

    /// One of this runner's suites at a time: they share its example's
    /// databases (the tests of this file run on parallel threads).
    fn alone(self) -> std::sync::MutexGuard<'static, ()> {
        static JEST: std::sync::Mutex<()> = std::sync::Mutex::new(());
        static VITEST: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let lock = match self {
            Runner::Jest => &JEST,
            Runner::Vitest => &VITEST,
        };
        lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The database of the front page's test file (`posts.test.js` uses
    /// this name with `_posts`).
    fn db(self) -> &'static str {
        match self {
            Runner::Jest => "blog_jest",
            Runner::Vitest => "blog_vitest",
        }
    }

    fn command(self, suite: &Path) -> Command {
        let mut c = Command::new("npx");
        match self {
            // Its own cache, empty at first: with no timings from earlier
            // runs Jest runs the two files in worker processes.
            Runner::Jest => c
                .args(["--no", "--", "jest", "--maxWorkers=2", "--cacheDirectory"])
                .arg(suite.join(".jest-cache"))
                .args(["--json", "--outputFile"])
                .arg(suite.join("jest-results.json")),
            Runner::Vitest => c.args(["--no", "--", "vitest", "run"]),
        };
        c
    }

    /// How many tests passed and how many there were, from the runner's
    /// own summary line; None when it printed none (no test ran).
    fn tests(self, out: &str) -> Option<(u32, u32)> {
        let line = out.lines().find(|l| match self {
            Runner::Jest => l.starts_with("Tests:"),
            Runner::Vitest => l.trim_start().starts_with("Tests "),
        })?;
        let number_before = |word: &str| -> u32 {
            let words: Vec<&str> = line.split_whitespace().collect();
            words
                .iter()
                .position(|w| w.trim_end_matches(',') == word)
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| words[i].parse().ok())
                .unwrap_or(0)
        };
        let total = match self {
            // "Tests:       1 failed, 2 passed, 3 total"
            Runner::Jest => number_before("total"),
            // "      Tests  1 failed | 2 passed (3)"
            Runner::Vitest => line
                .rsplit('(')
                .next()
                .and_then(|t| t.trim_end_matches(')').trim().parse().ok())
                .unwrap_or(0),
        };
        Some((number_before("passed"), total))
    }
}

/// A copy of the example with its locked dependencies and the tarball
/// installed: what a user has after `npm ci` and `npm install wirelint`.
/// `extra` are further packages installed with it (in one command: a
/// later `npm install` would remove what an earlier one added unsaved).
fn prepare(runner: Runner, dir: &Path, extra: &[&str]) -> PathBuf {
    let suite = dir.join(runner.example());
    std::fs::create_dir(&suite).unwrap();
    let example = common::manifest_dir()
        .join("examples")
        .join(runner.example());
    for entry in std::fs::read_dir(&example).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_file()
            && (name.ends_with(".js") || name.ends_with(".json"))
            && !name.starts_with("wirelint")
        {
            std::fs::copy(&path, suite.join(&name)).unwrap();
        }
    }
    assert!(suite.join("package-lock.json").is_file());
    npm(&suite, &["ci"]);
    // --no-save: the lock stays as committed; wirelint is not in it.
    let mut install = vec!["install", "--no-save", tarball().to_str().unwrap()];
    install.extend_from_slice(extra);
    npm(&suite, &install);
    suite
}

struct Run {
    status: i32,
    out: String,
}

/// Runs the suite as CI would, with `MONGODB_URI` (unless None) and
/// `env`; the files a run writes are removed first.
fn run_suite(runner: Runner, suite: &Path, uri: Option<&str>, env: &[(&str, &str)]) -> Run {
    for file in [
        "wirelint.sarif",
        "wirelint-report.json",
        "wirelint-junit.xml",
        "jest-results.json",
    ] {
        let _ = std::fs::remove_file(suite.join(file));
    }
    let mut command = runner.command(suite);
    command.current_dir(suite);
    for (key, _) in std::env::vars() {
        if key.starts_with("WIRELINT_") {
            command.env_remove(key);
        }
    }
    command
        .env_remove("MONGODB_URI")
        .env_remove("BLOG_AUTHORS")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env("CI", "true");
    if let Some(uri) = uri {
        command.env("MONGODB_URI", uri);
    }
    command.envs(env.iter().copied());
    let began = Instant::now();
    let out = run(&mut command);
    eprintln!(
        "-- {} {:?} took {:.1} s",
        runner.example(),
        env,
        began.elapsed().as_secs_f64()
    );
    Run {
        status: out.status.code().unwrap_or(-1),
        // Jest prints its summary on stderr, Vitest on stdout: both,
        // stdout first.
        out: String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr),
    }
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn sarif_results(suite: &Path) -> Vec<serde_json::Value> {
    let sarif = json(&suite.join("wirelint.sarif"));
    assert_eq!(sarif["version"], "2.1.0");
    sarif["runs"][0]["results"].as_array().unwrap().clone()
}

/// The namespaces of every access pattern in the JSON report.
fn report_namespaces(suite: &Path) -> Vec<String> {
    let report = json(&suite.join("wirelint-report.json"));
    assert_eq!(report["schema"], "wirelint.report/1");
    let mut found: Vec<String> = report["patterns"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["namespaces"].as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The report, the summary, SARIF and JUnit XML of a run with the N+1
/// name the front page's test (with its file and line), and none of the
/// post list's tests.
fn names_the_n_plus_one_test(runner: Runner, suite: &Path, out: &str, sarif: &[serde_json::Value]) {
    const TITLE: &str = "the front page names every author, newest first";
    let test = format!("front-page.test.js > {TITLE}");
    let line = std::fs::read_to_string(suite.join("front-page.test.js"))
        .unwrap()
        .lines()
        .position(|l| l.contains(TITLE))
        .unwrap()
        + 1;
    let report = json(&suite.join("wirelint-report.json"));
    let (tests, named) = common::report_tests(&report, "WL401");
    assert_eq!(tests.len(), 3, "every test was told: {tests:?}");
    assert_eq!(named, [test.as_str()], "{}", runner.example());
    assert!(out.contains(&format!("shown by {test} (")), "{out}");
    assert_eq!(
        common::sarif_location(sarif, "WL401"),
        ("front-page.test.js".to_string(), line as u64),
        "the test's line"
    );
    let junit = std::fs::read_to_string(suite.join("wirelint-junit.xml")).unwrap();
    assert!(
        junit.contains(&format!(
            "in {}\" file=\"front-page.test.js\" line=\"{line}\"",
            test.replace('>', "&gt;")
        )),
        "{junit}"
    );
    assert!(!junit.contains("posts.test.js"), "{junit}");
}

fn the_suite_fails_on_the_n_plus_one_and_passes_without(runner: Runner) {
    let _alone = runner.alone();
    let began = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let suite = prepare(runner, dir.path(), &[]);
    eprintln!(
        "-- {}: installed in {:.1} s",
        runner.example(),
        began.elapsed().as_secs_f64()
    );
    let uri = Backend::shared().uri();
    let db = runner.db();
    let front = format!("{db}.posts");
    let posts = format!("{db}_posts.posts");

    // With the N+1: every test passes, the run fails on WL401.
    let r = run_suite(runner, &suite, Some(&uri), &[]);
    assert_ne!(r.status, 0, "{}", r.out);
    assert_eq!(
        runner.tests(&r.out),
        Some((3, 3)),
        "every test passed: {}",
        r.out
    );
    assert!(
        r.out.contains(&format!("WL401 n-plus-one · {db}.users")),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("reached failOn warning: the run fails"),
        "{}",
        r.out
    );
    let results = sarif_results(&suite);
    assert!(
        results.iter().any(
            |r| r["ruleId"] == "WL401" && r["properties"]["namespace"] == format!("{db}.users")
        ),
        "{results:#?}"
    );
    // Nothing on the clean page's database.
    for result in &results {
        let namespace = result["properties"]["namespace"].as_str().unwrap();
        assert!(namespace.starts_with(&format!("{db}.")), "{result:#?}");
    }
    // Both test files went through wirelint: each one's worker had the
    // repointed MONGODB_URI.
    let seen = report_namespaces(&suite);
    assert!(seen.contains(&front) && seen.contains(&posts), "{seen:?}");
    names_the_n_plus_one_test(runner, &suite, &r.out, &results);
    if let Runner::Jest = runner {
        // The gate tripped, and Jest still wrote its results file.
        let written = json(&suite.join("jest-results.json"));
        assert_eq!(written["numPassedTests"], 3, "{written}");
    }

    // An empty WIRELINT_FAIL_ON= switches off package.json's failOn: the
    // N+1 is reported and the run passes.
    let r = run_suite(runner, &suite, Some(&uri), &[("WIRELINT_FAIL_ON", "")]);
    assert_eq!(r.status, 0, "{}", r.out);
    assert!(r.out.contains("WL401"), "{}", r.out);

    // The same suite without the N+1: the run passes, nothing reported,
    // and nothing is left in the temporary directory (the report path is
    // given).
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let r = run_suite(
        runner,
        &suite,
        Some(&uri),
        &[
            ("BLOG_AUTHORS", "batched"),
            ("TMPDIR", tmp.to_str().unwrap()),
        ],
    );
    assert_eq!(r.status, 0, "{}", r.out);
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("wirelint-"))
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    assert_eq!(runner.tests(&r.out), Some((3, 3)), "{}", r.out);
    assert!(r.out.contains("wirelint: 0 finding(s)"), "{}", r.out);
    assert!(!r.out.contains("WL401"), "{}", r.out);
    assert_eq!(sarif_results(&suite), Vec::<serde_json::Value>::new());
    let seen = report_namespaces(&suite);
    assert!(seen.contains(&front) && seen.contains(&posts), "{seen:?}");

    // The suite's client bypasses wirelint (it reads MONGODB_URI, and
    // wirelint was told to repoint another variable): wirelint saw no data
    // operation and says so, and the run fails (failOn is set) though
    // every test passed.
    let r = run_suite(
        runner,
        &suite,
        Some(&uri),
        &[
            ("BLOG_AUTHORS", "batched"),
            ("WIRELINT_ENV", "APP_OTHER_URI"),
            ("WIRELINT_UPSTREAM", &uri),
        ],
    );
    assert_ne!(r.status, 0, "{}", r.out);
    assert_eq!(runner.tests(&r.out), Some((3, 3)), "{}", r.out);
    assert!(
        r.out.contains("wirelint saw no data operations"),
        "{}",
        r.out
    );

    // Bad options stop the run before any test, naming the option.
    let stopped = |r: &Run, message: &str| {
        assert_ne!(r.status, 0, "{}", r.out);
        assert!(
            r.out.contains(message),
            "expected {message:?} in: {}",
            r.out
        );
        assert_eq!(runner.tests(&r.out), None, "no test ran: {}", r.out);
        assert!(
            !r.out.contains("names every author"),
            "no test ran: {}",
            r.out
        );
        assert!(!suite.join("wirelint-report.json").exists());
    };
    let r = run_suite(
        runner,
        &suite,
        Some(&uri),
        &[("WIRELINT_FAIL_ON", "sometimes")],
    );
    stopped(
        &r,
        r#"WIRELINT_FAIL_ON must be one of info, warning, error, not "sometimes""#,
    );
    let r = run_suite(runner, &suite, None, &[]);
    stopped(&r, "no database to run in front of: MONGODB_URI is not set");
    // The database down: wirelint's message before any test, not a
    // test's timeout.
    let r = run_suite(runner, &suite, Some("mongodb://127.0.0.1:1/"), &[]);
    stopped(
        &r,
        "the database does not answer through wirelint: cannot connect to upstream 127.0.0.1:1",
    );
    if let Runner::Jest = runner {
        // The global setup without its teardown would pass saying nothing.
        let config = suite.join("jest.config.js");
        let original = std::fs::read_to_string(&config).unwrap();
        let edited: String = original
            .lines()
            .filter(|l| !l.contains("globalTeardown"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&config, edited).unwrap();
        let r = run_suite(runner, &suite, Some(&uri), &[]);
        stopped(
            &r,
            r#"add globalTeardown: "wirelint/jest/global-teardown" to the Jest configuration"#,
        );
        std::fs::write(&config, original).unwrap();
    }

    let manifest = suite.join("package.json");
    let original = std::fs::read_to_string(&manifest).unwrap();
    let mut edited: serde_json::Value = serde_json::from_str(&original).unwrap();
    edited["wirelint"]["fail_on"] = "error".into();
    std::fs::write(&manifest, edited.to_string()).unwrap();
    let r = run_suite(runner, &suite, Some(&uri), &[]);
    stopped(
        &r,
        r#""wirelint": unknown option "fail_on"; the options are env, upstream, failOn, report, sarif, junit, config, image, proxyImage, showValues"#,
    );
    std::fs::write(&manifest, original).unwrap();

    eprintln!(
        "-- {}: {:.1} s in all",
        runner.example(),
        began.elapsed().as_secs_f64()
    );
}

#[test]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs FerretDB, npm registry, release binary"
)]
fn jest_global_setup_fails_the_run_on_an_anti_pattern() {
    the_suite_fails_on_the_n_plus_one_and_passes_without(Runner::Jest);
}

#[test]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs FerretDB, npm registry, release binary"
)]
fn vitest_global_setup_fails_the_run_on_an_anti_pattern() {
    the_suite_fails_on_the_n_plus_one_and_passes_without(Runner::Vitest);
}

/// The `wirelint` command the package installs, unpacked from the
/// tarball: run against a stand-in binary (`WIRELINT_BINARY`), it passes
/// the arguments, the output and the exit status through, and a SIGTERM
/// it gets reaches the binary; run alone, it is the bundled binary.
#[test]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs the release binary and npm")]
fn the_bin_shim_runs_the_bundled_binary() {
    let dir = tempfile::tempdir().unwrap();
    assert!(run(Command::new("tar")
        .arg("xzf")
        .arg(tarball())
        .arg("-C")
        .arg(dir.path()))
    .status
    .success());
    let shim = dir.path().join("package/bin/wirelint.js");
    let shim_command = || {
        let mut c = Command::new(&shim);
        c.env_remove("WIRELINT_BINARY");
        c
    };

    let out = run(shim_command().arg("--version"));
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "wirelint 0.1.0"
    );
    // A failing command fails the same way through the shim.
    let missing = dir.path().join("missing.json");
    let direct = run(Command::new(dir.path().join("package/native/wirelint"))
        .arg("report")
        .arg(&missing));
    let through = run(shim_command().arg("report").arg(&missing));
    assert_ne!(direct.status.code(), Some(0));
    assert_eq!(through.status.code(), direct.status.code());
    assert_eq!(through.stderr, direct.stderr);

    // A stand-in: echoes its arguments, exits 7, or 9 on SIGTERM.
    let fake = dir.path().join("fake-wirelint");
    std::fs::write(
        &fake,
        "#!/bin/sh\nif [ \"$1\" = wait ]; then trap 'echo got TERM; exit 9' TERM; echo ready; \
         while :; do sleep 0.05; done; fi\necho \"args: $*\"\nexit 7\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run(shim_command()
        .env("WIRELINT_BINARY", &fake)
        .args(["a b", "c"]));
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "args: a b c\n");

    // A SIGTERM as soon as the binary runs reaches it: the shim passes
    // signals on from before it starts the binary. A signal between the
    // two would end the shim alone and leave the binary running,
    // orphaned; twenty runs, as such a gap is hit on about one in five.
    for _ in 0..20 {
        sigterm_reaches_the_binary(shim_command().env("WIRELINT_BINARY", &fake));
    }
}

/// Starts `shim wait` (in a process group of its own), sends the shim a
/// SIGTERM as soon as the stand-in says it is ready, and checks that the
/// stand-in got it and the shim ended as it did; whatever is left running
/// is killed, so a failure never hangs the suite.
fn sigterm_reaches_the_binary(shim: &mut Command) {
    use std::os::unix::process::CommandExt;
    let mut child = shim
        .arg("wait")
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let kill_group = scopeguard::guard(child.id(), common::kill_process_group);
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = [0u8; 6];
        let ready = std::io::Read::read_exact(&mut stdout, &mut line).map(|_| line);
        let _ = tx.send(ready.map(|l| l.to_vec()));
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
        let _ = tx.send(Ok(rest.into_bytes()));
    });
    let within = Duration::from_secs(10);
    let ready = rx.recv_timeout(within).expect("the stand-in said nothing");
    assert_eq!(ready.unwrap(), b"ready\n");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the shim did not end on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let rest = rx
        .recv_timeout(within)
        .expect("the binary did not end with the shim: it never got the signal");
    assert_eq!(
        String::from_utf8(rest.unwrap()).unwrap(),
        "got TERM\n",
        "the signal reached the binary"
    );
    assert_eq!(status.code(), Some(9));
    drop(kill_group);
}

/// Which test thread's runs count the containers: one at a time.
static CONTAINERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// No `MONGODB_URI`: the global setup starts the FerretDB image in a
/// container and wirelint's image in another, both on the host's network,
/// with `testcontainers` (an optional peer dependency, installed here at
/// the last version that runs on Node 20). With the N+1 the run fails and
/// names the front page's test, as it does with the binary; without it the
/// run passes; a wirelint image that is not there stops the run before
/// any test. Every container a run started is removed by its end
/// (Testcontainers' Ryuk, which would otherwise clean up, cannot be pulled
/// here and is off).
fn without_a_uri_the_database_and_wirelint_run_in_containers(runner: Runner) {
    let _one = CONTAINERS.lock().unwrap_or_else(|e| e.into_inner());
    let (wirelint, ferretdb) = containers::images();
    let (wirelint, ferretdb) = (wirelint.as_str(), ferretdb.as_str());
    let dir = tempfile::tempdir().unwrap();
    let suite = prepare(runner, dir.path(), &["testcontainers@11.14.0"]);
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let env = [
        ("TESTCONTAINERS_RYUK_DISABLED", "true"),
        // Testcontainers looks for the engine's address on its bridge
        // network when it runs in a container; this engine has none, and
        // every container here is on the host's network.
        ("TESTCONTAINERS_HOST_OVERRIDE", "localhost"),
        ("TMPDIR", tmp.to_str().unwrap()),
    ];
    let db = runner.db();

    // With the N+1: every test passes, the run fails on WL401 and names
    // the test that showed it.
    let since = containers::unix_now();
    let r = run_suite(runner, &suite, None, &env);
    assert_ne!(r.status, 0, "{}", r.out);
    assert_eq!(runner.tests(&r.out), Some((3, 3)), "{}", r.out);
    assert!(
        r.out.contains(&format!("WL401 n-plus-one · {db}.users")),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("reached failOn warning: the run fails"),
        "{}",
        r.out
    );
    names_the_n_plus_one_test(runner, &suite, &r.out, &sarif_results(&suite));
    let seen = report_namespaces(&suite);
    assert!(
        seen.contains(&format!("{db}.posts")) && seen.contains(&format!("{db}_posts.posts")),
        "{seen:?}"
    );
    containers::started_and_removed(since, "node", &[ferretdb, wirelint], &r.out);

    // Without it: the run passes with nothing to report, and leaves
    // nothing behind.
    let since = containers::unix_now();
    let mut clean = env.to_vec();
    clean.push(("BLOG_AUTHORS", "batched"));
    let r = run_suite(runner, &suite, None, &clean);
    assert_eq!(r.status, 0, "{}", r.out);
    assert_eq!(runner.tests(&r.out), Some((3, 3)), "{}", r.out);
    assert!(r.out.contains("wirelint: 0 finding(s)"), "{}", r.out);
    assert!(!r.out.contains("WL401"), "{}", r.out);
    containers::started_and_removed(since, "node", &[ferretdb, wirelint], &r.out);
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("wirelint-"))
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");

    // A wirelint image that is not there (nothing can be pulled): the run
    // stops before any test, saying so, and the database's container is
    // removed.
    let since = containers::unix_now();
    let mut missing = env.to_vec();
    missing.push(("WIRELINT_PROXY_IMAGE", "wirelint:no-such-version"));
    let r = run_suite(runner, &suite, None, &missing);
    assert_ne!(r.status, 0, "{}", r.out);
    assert!(
        r.out.contains(
            "wirelint did not start: the wirelint container (wirelint:no-such-version) did not start"
        ),
        "{}",
        r.out
    );
    assert_eq!(runner.tests(&r.out), None, "no test ran: {}", r.out);
    assert!(!suite.join("wirelint-report.json").exists());
    containers::started_and_removed(since, "node", &[ferretdb], &r.out);
}

#[test]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
fn jest_without_a_uri_runs_ferretdb_and_wirelint_in_containers() {
    without_a_uri_the_database_and_wirelint_run_in_containers(Runner::Jest);
}

#[test]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
fn vitest_without_a_uri_runs_ferretdb_and_wirelint_in_containers() {
    without_a_uri_the_database_and_wirelint_run_in_containers(Runner::Vitest);
}

/// Watch mode runs again after a run whose findings tripped the gate, and
/// prints the findings for each run (`jest --watchAll`: its global setup
/// and teardown run for each run; `vitest watch`: wirelint runs for the
/// whole watch, and the findings so far are printed after each run).
/// Runners watch only on a terminal: `script` gives them one.
fn watch_runs_again_after_a_tripped_gate(runner: Runner) {
    let _alone = runner.alone();
    let dir = tempfile::tempdir().unwrap();
    let suite = prepare(runner, dir.path(), &[]);
    let out = suite.join("watch.out");
    let (command, gate) = match runner {
        Runner::Jest => (
            "npx --no -- jest --watchAll",
            "reached failOn warning: the run fails",
        ),
        Runner::Vitest => (
            "npx --no -- vitest watch",
            "(watch mode: the run would fail)",
        ),
    };
    let mut watch = Command::new("script");
    watch
        .args(["-qfec", command])
        .arg(&out)
        .current_dir(&suite)
        .env("MONGODB_URI", Backend::shared().uri())
        .env_remove("WIRELINT_BINARY")
        .env_remove("CI")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = watch.spawn().unwrap();
    // The runs whose findings were printed, told apart by their reports'
    // time stamps (the terminal is redrawn: a run's text may come twice).
    let runs = || {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if !text.contains(gate) {
            return 0;
        }
        let mut stamps: Vec<String> = text
            .match_indices("wirelint report · ")
            .map(|(i, m)| text[i + m.len()..].chars().take(20).collect())
            .collect();
        stamps.sort();
        stamps.dedup();
        stamps.len()
    };
    let waited = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while Instant::now() < deadline {
            if runs() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    };
    let first = waited(1);
    // A second apart, so that the next report's time stamp differs.
    std::thread::sleep(Duration::from_millis(1100));
    let test = suite.join("front-page.test.js");
    let text = std::fs::read_to_string(&test).unwrap();
    std::fs::write(&test, text + "\n").unwrap();
    let second = first && waited(2);
    let _ = child.kill();
    let _ = child.wait();
    // What the runner left of its workers and of wirelint ends with it.
    let _ = Command::new("pkill")
        .arg("-f")
        .arg(suite.as_os_str())
        .status();
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(first, "the first run's findings were not printed: {text}");
    assert!(second, "no second run after the gate tripped: {text}");
}

#[test]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs FerretDB, npm registry, release binary"
)]
fn jest_watch_runs_again_after_a_tripped_gate() {
    watch_runs_again_after_a_tripped_gate(Runner::Jest);
}

#[test]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs FerretDB, npm registry, release binary"
)]
fn vitest_watch_prints_the_findings_of_each_run() {
    watch_runs_again_after_a_tripped_gate(Runner::Vitest);
}

/// The bound every outside command here runs under: a runner that never
/// ends fails its test within the limit, and what it started (a worker,
/// a proxy) goes with it.
#[test]
fn a_command_past_its_limit_fails_and_takes_its_children_with_it() {
    let marker = "1000.25";
    let began = Instant::now();
    let ended = std::panic::catch_unwind(|| {
        common::output_within(
            Command::new("sh").args([
                "-c",
                &format!("sleep {marker} & echo started; sleep {marker}"),
            ]),
            Duration::from_secs(1),
        )
    });
    let message = *ended
        .expect_err("it was killed, and said so")
        .downcast::<String>()
        .unwrap();
    assert!(message.contains("did not end within 1 s"), "{message}");
    assert!(began.elapsed() < Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    let left = Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    // One that ends is read whole.
    let out = run(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]));
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
}
