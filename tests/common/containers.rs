//! What the container suites share: the images `scripts/image.sh` builds,
//! `docker` itself, and which containers a run started and left.

use std::process::{Command, Stdio};

/// `scripts/image.sh`: builds wirelint's image and FerretDB's when they are
/// missing or stale (quick when they are up to date); their tags, wirelint's
/// first.
pub fn images() -> (String, String) {
    let mut build = Command::new("bash");
    build.arg(super::manifest_dir().join("scripts/image.sh"));
    super::outside_cargo_test(&mut build);
    let out = build.output().unwrap();
    assert!(
        out.status.success(),
        "scripts/image.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tags: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        tags,
        [
            format!("wirelint:{}", env!("CARGO_PKG_VERSION")),
            "wirelint-ferretdb:1.24.2".to_string()
        ]
    );
    (tags[0].clone(), tags[1].clone())
}

/// `docker ARGS…`: its stdout, trimmed; panics with its stderr on failure.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Seconds since the Unix epoch (what `docker events --since` takes).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The containers a Testcontainers library (`lang`: its
/// `org.testcontainers.lang` label, `node`, `python`, `java`) created since
/// `since`, from the engine's events, as (id, image, still there).
pub fn created_since(since: u64, lang: &str) -> Vec<(String, String, bool)> {
    let events = docker(&[
        "events",
        "--since",
        &since.to_string(),
        "--until",
        &(unix_now() + 1).to_string(),
        "--filter",
        "type=container",
        "--filter",
        "event=create",
        "--filter",
        &format!("label=org.testcontainers.lang={lang}"),
        "--format",
        "{{.ID}} {{index .Actor.Attributes \"image\"}}",
    ]);
    events
        .lines()
        .map(|line| {
            let (id, image) = line.split_once(' ').unwrap();
            let there = Command::new("docker")
                .args(["container", "inspect", id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success();
            (id.to_string(), image.to_string(), there)
        })
        .collect()
}

/// The run since `since` started exactly the containers of `images` (in
/// any order) with the Testcontainers library of `lang`, and none of them
/// is left.
pub fn started_and_removed(since: u64, lang: &str, images: &[&str], out: &str) {
    let created = created_since(since, lang);
    let mut seen: Vec<&str> = created.iter().map(|(_, image, _)| image.as_str()).collect();
    seen.sort_unstable();
    let mut expected = images.to_vec();
    expected.sort_unstable();
    assert_eq!(seen, expected, "the containers the run started: {out}");
    let left: Vec<_> = created.iter().filter(|(_, _, there)| *there).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
