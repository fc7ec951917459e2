//! The JUnit 5 extension and the Spring Boot example, as a Maven user gets
//! them: `java/` installed into the local Maven repository (the jar carries
//! the release binary that scripts/test.sh builds), then the example suite
//! `examples/spring-boot/` run with `mvn test` against FerretDB through the
//! extension. With the front page resolving each post's author through
//! `@DocumentReference` the run fails on `wirelint.failOn=warning` though
//! every test passes; with the authors fetched in one batch it passes. The
//! printed findings, the SARIF file and a bad option's error are checked,
//! and the findings name the test whose operations showed them (the
//! report, SARIF at its source line, JUnit XML beside Surefire's). A
//! Spring context cached by an earlier class without the extension is not
//! reused by the classes with it; a run whose traffic bypasses wirelint
//! fails saying so; a database that is down, or a `wirelint.env` variable
//! that is not set, stops the run before its tests, naming the cause.
//!
//! The example's `ContainerFrontPageTest` (`mvn test -Pcontainers`) runs
//! the database and wirelint in containers, with no `wirelint.upstream`:
//! FerretDB's image (`wirelint-ferretdb`) started by Testcontainers, and
//! `Wirelint.uri(upstream)` starting wirelint's image in front of it
//! through the extension's `WirelintContainer` (`wirelint.container=true`,
//! set by the profile), all on the host's network. Its test needs a Docker
//! engine and the images `scripts/image.sh` builds (it runs that first): it
//! runs with the feature `containers`, and is ignored without it. The N+1
//! fails the run naming the test, the batched page passes, and none of the
//! containers the run started is left (Testcontainers' Ryuk is off, as it
//! cannot be pulled: the example's code removes what it starts). Where the
//! engine does not answer, the class is skipped, and the test fails.

mod common;

use common::containers::{docker, images, unix_now};
use common::Backend;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Maven: half an hour at most (its first run on a machine fetches Spring Boot from Maven Central).
fn run(command: &mut Command) -> Output {
    common::output_within(command, Duration::from_secs(1800))
}

/// Maven, without the variables `cargo test` sets for a test (nothing here
/// should look like a Cargo build) and without the ones that would
/// override what the test chooses.
fn mvn(dir: &Path) -> Command {
    let mut command = Command::new(std::env::var("WIRELINT_MVN").unwrap_or_else(|_| "mvn".into()));
    command
        .current_dir(dir)
        .env_remove("WIRELINT_BINARY")
        .env_remove("WIRELINT_UPSTREAM")
        .env_remove("MAVEN_ARGS")
        .args(["-B", "-ntp", "-Dstyle.color=never"]);
    common::outside_cargo_test(&mut command);
    command
}

/// `mvn test` in the example, through wirelint in front of `upstream`:
/// (exit status, everything Maven printed).
fn mvn_test(suite: &Path, upstream: &str, args: &[&str]) -> (i32, String) {
    let upstream = format!("-Dwirelint.upstream={upstream}");
    let mut all = vec![upstream.as_str()];
    all.extend_from_slice(args);
    maven_test(suite, &all)
}

/// `mvn test ARGS…` in the example: (exit status, everything Maven printed).
fn maven_test(suite: &Path, args: &[&str]) -> (i32, String) {
    // What a previous run left must not pass for this one's.
    let _ = std::fs::remove_dir_all(suite.join("target/surefire-reports"));
    let _ = std::fs::remove_file(suite.join("target/wirelint.sarif"));
    let _ = std::fs::remove_file(suite.join("target/wirelint-report.json"));
    let out = run(mvn(suite).arg("test").args(args));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// The value of `name="…"` in the first `<testsuite …>` tag of a surefire
/// report.
fn attribute(xml: &str, name: &str) -> String {
    let tag = &xml[xml.find("<testsuite ").unwrap()..];
    let tag = &tag[..tag.find('>').unwrap()];
    let start = tag.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
    tag[start..][..tag[start..].find('"').unwrap()].to_string()
}

/// (tests, failures + errors) of each of the example's test classes, from
/// surefire's reports: what the tests themselves did, whatever wirelint
/// made of the run.
fn test_classes(suite: &Path) -> Vec<(String, u32, u32)> {
    let mut classes = Vec::new();
    for entry in std::fs::read_dir(suite.join("target/surefire-reports")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("TEST-dev.wirelint.example.")
            && name.ends_with(".xml")
            && !name.contains("AaaPlainContextTest")
        {
            let xml = std::fs::read_to_string(&path).unwrap();
            let count = |a: &str| attribute(&xml, a).parse::<u32>().unwrap();
            classes.push((
                attribute(&xml, "name"),
                count("tests"),
                count("failures") + count("errors"),
            ));
        }
    }
    classes.sort();
    classes
}

/// One test class's surefire report: (tests, skipped, failures + errors,
/// the first `<skipped message="…">`), or `None` when it has none.
fn test_class(suite: &Path, class: &str) -> Option<(u32, u32, u32, String)> {
    let path = suite.join(format!("target/surefire-reports/TEST-{class}.xml"));
    let xml = std::fs::read_to_string(path).ok()?;
    let count = |a: &str| attribute(&xml, a).parse::<u32>().unwrap();
    let why = xml
        .split_once("<skipped message=\"")
        .map(|(_, rest)| rest[..rest.find('"').unwrap_or(rest.len())].to_string())
        .unwrap_or_default();
    Some((
        count("tests"),
        count("skipped"),
        count("failures") + count("errors"),
        why,
    ))
}

/// Fails unless `class` ran: a report, with tests, none skipped.
fn assert_ran(suite: &Path, class: &str, out: &str) {
    let docker = Command::new("docker")
        .arg("info")
        .output()
        .map(|o| {
            if o.status.success() {
                "answers".to_string()
            } else {
                format!(
                    "does not answer: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )
            }
        })
        .unwrap_or_else(|e| format!("cannot run: {e}"));
    match test_class(suite, class) {
        None => panic!("{class} did not run: surefire wrote no report of it (not passed)\n{out}"),
        Some((tests, skipped, _, why)) => assert!(
            tests > 0 && skipped == 0,
            "{class} did not run ({tests} test(s), {skipped} skipped: {why}): \
             it needs a Docker engine, and `docker info` {docker} — not passed"
        ),
    }
}

fn sarif_results(suite: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(suite.join("target/wirelint.sarif")).unwrap();
    let sarif: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    sarif["runs"][0]["results"].as_array().unwrap().clone()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(&name));
        } else {
            std::fs::copy(entry.path(), to.join(&name)).unwrap();
        }
    }
}

/// The extension installed into the local Maven repository (with its unit
/// tests), and a copy of the example, so that its outputs stay out of the
/// tree: (the copy's directory, kept while it lives; the example in it).
fn install_and_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    let root = common::manifest_dir();
    assert!(
        root.join("target/release/wirelint").is_file(),
        "the extension's jar carries target/release/wirelint: cargo build --release first"
    );
    // Once for the tests of this file, which run at the same time: two
    // builds in java/target, or a jar rewritten while a suite reads it,
    // would spoil each other.
    static INSTALLED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if !*installed {
        let install = run(mvn(&root.join("java")).args(["-q", "install"]));
        assert!(install.status.success(), "mvn install in java/ failed");
        *installed = true;
    }
    drop(installed);
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("spring-boot");
    copy_tree(&root.join("examples/spring-boot"), &suite);
    (dir, suite)
}

#[test]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs FerretDB, Maven, Maven Central, the release binary"
)]
fn the_junit_extension_fails_the_run_on_an_anti_pattern() {
    let (_dir, suite) = install_and_copy();

    let upstream = Backend::shared().uri();

    // The front page with @DocumentReference: every test passes, the N+1
    // fails the run.
    let (status, out) = mvn_test(&suite, &upstream, &[]);
    assert_ne!(status, 0, "{out}");
    let classes = test_classes(&suite);
    assert_eq!(
        classes,
        [
            ("dev.wirelint.example.blog.FrontPageTest".to_string(), 2, 0),
            ("dev.wirelint.example.blog.PostsTest".to_string(), 2, 0),
        ],
        "{out}"
    );
    // One wirelint for the run, shared by both test classes.
    assert_eq!(
        out.matches("wirelint: in front of the upstream from wirelint.upstream")
            .count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("=== wirelint ==="),
        "the findings' section: {out}"
    );
    assert!(
        out.contains("WL401 n-plus-one · blog.authors · warning"),
        "{out}"
    );
    // The finding says which list and which field lead the lookups.
    assert!(
        out.contains("documents from blog.posts")
            && out.contains("fetch from blog.authors by `_id`, one per listed document's `author`"),
        "{out}"
    );
    assert!(
        out.contains("wirelint: a finding reached wirelint.failOn=warning"),
        "{out}"
    );
    // The failure is the engine's, not a test's.
    assert!(out.contains("<<< FAILURE! -- in JUnit Jupiter"), "{out}");
    let results = sarif_results(&suite);
    let rules: Vec<_> = results.iter().map(|r| r["ruleId"].clone()).collect();
    assert!(rules.contains(&"WL401".into()), "{results:?}");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(suite.join("target/wirelint-report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(report["schema"], "wirelint.report/1");
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "WL401" && f["namespace"] == "blog.authors"),
        "{report}"
    );

    names_the_n_plus_one_test(&suite, &results);

    // The two classes at once (JUnit's parallel execution), each with a
    // database of its own so that neither empties the other's: the N+1 is
    // still put on the front page's test, told apart by the commands that
    // claim their connections for it.
    let classes = ["FrontPageTest", "PostsTest"]
        .map(|c| suite.join(format!("src/test/java/dev/wirelint/example/blog/{c}.java")));
    let originals = classes.clone().map(|f| std::fs::read_to_string(f).unwrap());
    for (file, text) in classes.iter().zip(&originals) {
        let name = file.file_stem().unwrap().to_string_lossy().to_lowercase();
        let own = text.replacen(
            "@SpringBootTest\n",
            &format!("@SpringBootTest(properties = \"spring.mongodb.database=blog_{name}\")\n"),
            1,
        );
        assert_ne!(&own, text);
        std::fs::write(file, own).unwrap();
    }
    let parallel = [
        "-Djunit.jupiter.execution.parallel.enabled=true",
        "-Djunit.jupiter.execution.parallel.mode.classes.default=concurrent",
    ];
    let (status, out) = mvn_test(&suite, &upstream, &parallel);
    assert_ne!(status, 0, "{out}");
    assert!(out.contains("WL401 n-plus-one"), "{out}");
    names_the_n_plus_one_test(&suite, &sarif_results(&suite));
    for (file, text) in classes.iter().zip(&originals) {
        std::fs::write(file, text).unwrap();
    }

    // An earlier @SpringBootTest class without the extension builds a
    // context pointed straight at the database: the classes with the
    // extension get one of their own (the extension's context customizer
    // keys them apart; Spring Boot's key does too, by their annotations),
    // and wirelint still sees the N+1.
    let plain = suite.join("src/test/java/dev/wirelint/example/blog/AaaPlainContextTest.java");
    std::fs::write(
        &plain,
        "package dev.wirelint.example.blog;\n\n\
         import static org.assertj.core.api.Assertions.assertThat;\n\n\
         import org.junit.jupiter.api.Test;\n\
         import org.springframework.beans.factory.annotation.Autowired;\n\
         import org.springframework.boot.test.context.SpringBootTest;\n\n\
         @SpringBootTest\n\
         class AaaPlainContextTest {\n  @Autowired PostRepository posts;\n\n  \
         @Test\n  void counts_the_posts() {\n    assertThat(posts.count()).isGreaterThanOrEqualTo(0);\n  }\n}\n",
    )
    .unwrap();
    let direct = format!("-Dspring.mongodb.uri={upstream}");
    let first = ["-Dsurefire.runOrder=alphabetical", direct.as_str()];
    let (status, out) = mvn_test(&suite, &upstream, &first);
    assert_ne!(status, 0, "{out}");
    assert!(
        out.contains("WL401 n-plus-one · blog.authors · warning"),
        "the annotated classes' traffic went through wirelint: {out}"
    );
    std::fs::remove_file(&plain).unwrap();

    // Nothing repointed, every client straight at the database: wirelint
    // saw no data operation, and the run fails saying why.
    let bypass = ["-Dwirelint.properties=none", direct.as_str()];
    let (status, out) = mvn_test(&suite, &upstream, &bypass);
    assert_ne!(status, 0, "{out}");
    assert!(out.contains("wirelint saw no data operations"), "{out}");
    assert!(
        out.contains("a Spring context built before the extension"),
        "{out}"
    );

    // The database down: no test runs, and wirelint says why.
    let (status, out) = mvn_test(&suite, "mongodb://127.0.0.1:1/", &[]);
    assert_ne!(status, 0, "{out}");
    assert!(
        out.contains(
            "the database does not answer through wirelint: cannot connect to upstream 127.0.0.1:1"
        ),
        "{out}"
    );
    // wirelint.env naming a variable that is not set: said at once.
    let (status, out) = maven_test(&suite, &["-Dwirelint.env=WIRELINT_TEST_UNSET_URI"]);
    assert_ne!(status, 0, "{out}");
    assert!(
        out.contains("wirelint.env names WIRELINT_TEST_UNSET_URI, which is not set"),
        "{out}"
    );

    // The same page with the authors in one findAllById, chosen by a
    // property alone: the run passes, with nothing to report.
    let (status, out) = mvn_test(&suite, &upstream, &["-Dblog.authors=batched"]);
    assert_eq!(status, 0, "{out}");
    assert!(
        out.contains("Tests run: 4, Failures: 0, Errors: 0, Skipped: 0"),
        "{out}"
    );
    assert!(out.contains("wirelint: 0 finding(s)"), "{out}");
    assert!(!out.contains("WL401"), "{out}");
    assert!(sarif_results(&suite).is_empty());

    // A binary that is not there: the error names it, at the start and at
    // the end of the run, and nothing blames a missing database.
    let (status, out) = mvn_test(&suite, &upstream, &["-Dwirelint.binary=/nope"]);
    assert_ne!(status, 0, "{out}");
    assert!(
        out.contains("wirelint.binary names /nope, which is not an executable file"),
        "{out}"
    );
    assert!(!out.contains("no database to run in front of"), "{out}");

    // A bad level is an error naming the option and the levels.
    let (status, out) = mvn_test(&suite, &upstream, &["-Dwirelint.failOn=sometimes"]);
    assert_ne!(status, 0, "{out}");
    assert!(
        out.contains(
            "wirelint: wirelint.failOn must be one of info, warning, error, not \"sometimes\""
        ),
        "{out}"
    );
}

/// The report, SARIF and the JUnit XML beside Surefire's name the front
/// page's N+1 test in `FrontPageTest`, with its source file and line, and
/// not the others; every one of the suite's 4 tests was told to wirelint.
fn names_the_n_plus_one_test(suite: &Path, sarif: &[serde_json::Value]) {
    names_the_test(suite, sarif, "dev.wirelint.example.blog.FrontPageTest", 4);
}

/// The report, SARIF and the JUnit XML beside Surefire's name
/// `class`'s `the_front_page_names_every_author` for WL401, with its source
/// file and line, and no other class; `told` tests were told to wirelint.
fn names_the_test(suite: &Path, sarif: &[serde_json::Value], class: &str, told: usize) {
    let id = format!(
        "[engine:junit-jupiter]/[class:{class}]/[method:the_front_page_names_every_author()]"
    );
    let file = format!("src/test/java/{}.java", class.replace('.', "/"));
    let line = std::fs::read_to_string(suite.join(&file))
        .unwrap()
        .lines()
        .position(|l| l.contains("void the_front_page_names_every_author("))
        .unwrap()
        + 1;
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(suite.join("target/wirelint-report.json")).unwrap(),
    )
    .unwrap();
    let (tests, named) = common::report_tests(&report, "WL401");
    assert_eq!(tests.len(), told, "every test was told: {tests:?}");
    assert_eq!(named, [id]);
    assert_eq!(
        common::sarif_location(sarif, "WL401"),
        (file.clone(), line as u64)
    );
    let junit =
        std::fs::read_to_string(suite.join("target/surefire-reports/TEST-wirelint.xml")).unwrap();
    assert!(
        junit.contains(&format!("file=\"{file}\" line=\"{line}\"")),
        "{junit}"
    );
    assert!(junit.contains("<failure type=\"warning\""), "{junit}");
    assert!(!junit.contains("PostsTest"), "{junit}");
}

/// The containers Testcontainers for Java created since `since` (seconds
/// since the epoch): (full id, image, Testcontainers' session id), from the
/// engine's events, in the order they were created.
fn java_containers_since(since: u64) -> Vec<(String, String, String)> {
    let until = (unix_now() + 1).to_string();
    docker(&[
        "events",
        "--since",
        &since.to_string(),
        "--until",
        &until,
        "--filter",
        "type=container",
        "--filter",
        "event=create",
        "--filter",
        "label=org.testcontainers.lang=java",
        "--format",
        "{{.ID}} {{.Actor.Attributes.image}} {{index .Actor.Attributes \"org.testcontainers.sessionId\"}}",
    ])
    .lines()
    .filter_map(|l| {
        let mut words = l.split_whitespace().map(str::to_string);
        Some((words.next()?, words.next()?, words.next()?))
    })
    .collect()
}

/// `mvn test -Pcontainers ARGS…` in the example, with Testcontainers set
/// for this engine: no Ryuk (it cannot be pulled here) and the host's
/// loopback as the containers' address (they share the host's network; the
/// engine has no bridge network for Testcontainers to look it up on).
/// Fails unless the run created FerretDB's container then wirelint's, and
/// left neither: (exit status, everything Maven printed).
fn containers_test(suite: &Path, args: &[&str]) -> (i32, String) {
    const CLASS: &str = "dev.wirelint.example.blog.ContainerFrontPageTest";
    let _ = std::fs::remove_dir_all(suite.join("target/surefire-reports"));
    let _ = std::fs::remove_file(suite.join("target/wirelint.sarif"));
    let _ = std::fs::remove_file(suite.join("target/wirelint-report.json"));
    let since = unix_now();
    let out = run(mvn(suite)
        .env("TESTCONTAINERS_RYUK_DISABLED", "true")
        .env("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
        .args(["test", "-Pcontainers"])
        .args(args));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ran(suite, CLASS, &text);
    // The database in one container, wirelint in another, both from this
    // run (one Testcontainers session).
    let created = java_containers_since(since);
    let images: Vec<&str> = created.iter().map(|c| c.1.as_str()).collect();
    let wirelint = format!("wirelint:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        images,
        ["wirelint-ferretdb:1.24.2", wirelint.as_str()],
        "{created:?}\n{text}"
    );
    assert_eq!(created[0].2, created[1].2, "{created:?}");
    // The one wirelint of the run says it is that container.
    assert_eq!(
        text.matches("wirelint: in front of the upstream from Wirelint.uri(…), in the container ")
            .count(),
        1,
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "in the container {} of {wirelint}, listening on 127.0.0.1:",
            &created[1].0[..12]
        )),
        "{created:?}\n{text}"
    );
    // Nothing left, stopped or running.
    let left = docker(&["ps", "-a", "-q", "--no-trunc"]);
    for (id, image, _) in &created {
        assert!(
            !left.lines().any(|l| l == id),
            "the run left the container {id} of {image}:\n{}",
            docker(&["ps", "-a"])
        );
    }
    (out.status.code().unwrap_or(-1), text)
}

/// No `wirelint.upstream`: `ContainerFrontPageTest` starts FerretDB in a
/// container, and `Wirelint.uri(upstream)` wirelint in another in front of
/// it; the per-row front page fails the run naming the test, the batched
/// one passes; no container is left either way.
#[test]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
fn with_testcontainers_wirelint_runs_in_front_of_the_container() {
    const CLASS: &str = "dev.wirelint.example.blog.ContainerFrontPageTest";
    images();
    let (_dir, suite) = install_and_copy();

    // The front page with @DocumentReference: the test passes, the N+1
    // fails the run, naming the test.
    let (status, out) = containers_test(&suite, &[]);
    assert_eq!(
        test_class(&suite, CLASS).map(|c| c.2),
        Some(0),
        "the test itself passes: {out}"
    );
    assert_ne!(status, 0, "{out}");
    // Only the container class ran.
    let classes: Vec<_> = test_classes(&suite).into_iter().map(|c| c.0).collect();
    assert_eq!(classes, [CLASS], "{out}");
    assert!(
        out.contains("WL401 n-plus-one · blog.authors · warning"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "shown by [engine:junit-jupiter]/[class:{CLASS}]/[method:the_front_page_names_every_author()]"
        )),
        "the printed finding names the test: {out}"
    );
    assert!(
        out.contains("wirelint: a finding reached wirelint.failOn=warning"),
        "{out}"
    );
    assert!(out.contains("<<< FAILURE! -- in JUnit Jupiter"), "{out}");
    names_the_test(&suite, &sarif_results(&suite), CLASS, 1);

    // The authors in one batch: the run passes, with nothing to report.
    let (status, out) = containers_test(&suite, &["-Dblog.authors=batched"]);
    assert_eq!(status, 0, "{out}");
    assert!(
        out.contains("Tests run: 1, Failures: 0, Errors: 0, Skipped: 0"),
        "{out}"
    );
    assert!(out.contains("wirelint: 0 finding(s)"), "{out}");
    assert!(!out.contains("WL401"), "{out}");
    assert!(sarif_results(&suite).is_empty());
}
