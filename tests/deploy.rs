//! The deployment examples under `deploy/`, run as a user would run them.
//!
//! - `deploy/compose/`: `docker-compose up` starts FerretDB, wirelint and
//!   the example application (the official Go driver), the application's
//!   N+1 is in `/report` (behind the admin token) and in the final report
//!   file that `docker-compose down` leaves, and nothing is left running.
//! - `deploy/kubernetes/`: the manifests pass the Kubernetes schemas
//!   (`kubernetes-validate`, offline), a broken copy does not, the
//!   ConfigMap's wirelint.toml is one wirelint accepts, and the pod's
//!   wirelint container, run by Docker with the manifest's user, read-only
//!   root, mounts, environment and arguments, serves its probes, keeps
//!   `/metrics` behind the token and writes its report at SIGTERM.
//!
//! The Docker ones need the `containers` feature and an engine (Debian's
//! docker.io, with no bridge network: everything on the host network, on
//! free ports); they build the images with `scripts/image.sh`. The schema
//! check needs Python 3 with venv and pip: it installs kubernetes-validate
//! into `target/deploy-venv` on first use.

mod common;

use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

/// The version of kubernetes-validate the schema check installs: its
/// schemas (Kubernetes 1.25 to 1.37) ship inside the package.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";

/// The oldest Kubernetes the manifests are for (native sidecars are on by
/// default from 1.29), and the newest the validator knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.29.0", "1.37.0"];

fn deploy_dir() -> PathBuf {
    common::manifest_dir().join("deploy")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `command` to its end within `limit`; panics unless it succeeded.
fn succeed(command: &mut Command, limit: Duration) -> Output {
    let out = common::output_within(command, limit);
    assert!(
        out.status.success(),
        "{command:?} failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// `scripts/image.sh`'s tags, wirelint's image and FerretDB's: the
/// examples name the image of this crate's version.
fn images() -> (String, String) {
    common::containers::images()
}

/// A port nobody listens on now, on any address (the admin endpoints of
/// the examples listen on 0.0.0.0).
fn free_port() -> u16 {
    loop {
        let port = common::free_port();
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
}

/// A token no earlier run used.
fn token() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("deploy-test-{}-{nanos:x}", std::process::id())
}

/// `GET path` over HTTP/1.0 (no chunking): status and body.
fn http_get(port: u16, path: &str, token: Option<&str>) -> std::io::Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{authorization}\r\n"
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = text(&answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// Asks `check` every 250 ms until it gives something, for at most
/// `limit`.
fn poll<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The findings of `rule` on `namespace` in a report.
fn findings_of<'a>(report: &'a Value, rule: &str, namespace: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|f| f["rule"] == rule && f["namespace"] == namespace)
                .collect()
        })
        .unwrap_or_default()
}

/// A report's `generated_at` (RFC 3339, whole seconds).
fn generated_at(report: &Value) -> SystemTime {
    let at = report["generated_at"].as_str().expect("generated_at");
    humantime::parse_rfc3339_weak(at).unwrap_or_else(|e| panic!("generated_at {at:?}: {e}"))
}

fn docker(args: &[&str]) -> Output {
    succeed(Command::new("docker").args(args), Duration::from_secs(120))
}

// ---------------------------------------------------------------- compose

/// `docker-compose` (v1), else `docker compose` (v2).
fn compose_command() -> Vec<String> {
    let works = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works("docker-compose", &["version"]) {
        vec!["docker-compose".into()]
    } else if works("docker", &["compose", "version"]) {
        vec!["docker".into(), "compose".into()]
    } else {
        panic!(
            "neither docker-compose nor `docker compose` runs here: apt-get install docker-compose"
        );
    }
}

/// One compose project of `deploy/compose/docker-compose.yml`, on ports
/// of its own; `down` when dropped (a failed test leaves nothing).
struct Project {
    command: Vec<String>,
    name: String,
    env: Vec<(&'static str, String)>,
    /// An empty file given as `--env-file`: a developer's
    /// `deploy/compose/.env` must not change the test.
    env_file: PathBuf,
    down: bool,
}

impl Project {
    fn compose(&self, with_token: bool) -> Command {
        let mut command = Command::new(&self.command[0]);
        command
            .args(&self.command[1..])
            .arg("--env-file")
            .arg(&self.env_file)
            .arg("--file")
            .arg(deploy_dir().join("compose/docker-compose.yml"))
            .arg("--project-name")
            .arg(&self.name)
            .env_remove("WIRELINT_ADMIN_TOKEN")
            .env_remove("COMPOSE_FILE")
            .env_remove("COMPOSE_PROJECT_NAME")
            .env_remove("COMPOSE_PROFILES");
        for (key, value) in &self.env {
            if with_token || *key != "WIRELINT_ADMIN_TOKEN" {
                command.env(key, value);
            }
        }
        command
    }

    fn run(&self, args: &[&str], limit: Duration) -> Output {
        succeed(self.compose(true).args(args), limit)
    }

    fn env(&self, key: &str) -> &str {
        &self.env.iter().find(|(k, _)| *k == key).unwrap().1
    }

    /// The containers of this project (of one service, or all: `""`),
    /// running or not, by the labels both Compose v1 and v2 set.
    fn containers(&self, service: &str) -> String {
        let mut args = vec![
            "ps".to_string(),
            "--all".into(),
            "--quiet".into(),
            "--filter".into(),
            format!("label=com.docker.compose.project={}", self.name),
        ];
        if !service.is_empty() {
            args.push("--filter".into());
            args.push(format!("label=com.docker.compose.service={service}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        text(&docker(&args).stdout)
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if !self.down {
            let _ = common::output_within(
                self.compose(true)
                    .args(["down", "--remove-orphans", "--timeout", "5"]),
                Duration::from_secs(120),
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
fn compose_example_shows_the_applications_n_plus_one() {
    let (wirelint, ferretdb) = images();
    let file = std::fs::read_to_string(deploy_dir().join("compose/docker-compose.yml")).unwrap();
    assert!(
        file.contains(&format!("${{WIRELINT_IMAGE:-{wirelint}}}"))
            && file.contains(&format!("${{FERRETDB_IMAGE:-{ferretdb}}}")),
        "the compose file's default images are {wirelint} and {ferretdb}"
    );
    succeed(
        Command::new("bash").arg(deploy_dir().join("compose/app/build.sh")),
        Duration::from_secs(600),
    );

    let scratch = tempfile::tempdir().unwrap();
    let reports = scratch.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    // wirelint runs as uid 65532 (README.md: mkdir -m 0777 reports).
    std::fs::set_permissions(
        &reports,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let env_file = scratch.path().join("empty.env");
    std::fs::write(&env_file, "").unwrap();
    let ferretdb_port = free_port();
    let token = token();
    let mut project = Project {
        command: compose_command(),
        name: format!("wldeploy{}", std::process::id()),
        env: vec![
            ("WIRELINT_IMAGE", wirelint),
            ("FERRETDB_IMAGE", ferretdb),
            ("FERRETDB_PORT", ferretdb_port.to_string()),
            (
                "WIRELINT_UPSTREAM",
                format!("mongodb://127.0.0.1:{ferretdb_port}/"),
            ),
            ("WIRELINT_PORT", free_port().to_string()),
            ("WIRELINT_ADMIN_PORT", free_port().to_string()),
            ("WIRELINT_REPORT_DIR", reports.display().to_string()),
            ("WIRELINT_ADMIN_TOKEN", token.clone()),
        ],
        env_file,
        down: false,
    };

    // The token is required: without it, compose refuses the file.
    let refused = common::output_within(
        project.compose(false).arg("config"),
        Duration::from_secs(60),
    );
    assert!(
        !refused.status.success() && text(&refused.stderr).contains("WIRELINT_ADMIN_TOKEN"),
        "compose should refuse to run without WIRELINT_ADMIN_TOKEN: {refused:?}"
    );

    // Up: one command.
    project.run(&["up", "-d", "--build"], Duration::from_secs(300));

    // The application runs once, to its end.
    let app = project.containers("app");
    let app = app.trim();
    assert!(!app.is_empty(), "no app container");
    let exit = text(
        &succeed(
            Command::new("docker").args(["wait", app]),
            Duration::from_secs(180),
        )
        .stdout,
    );
    let logs = project.run(&["logs", "--no-color"], Duration::from_secs(60));
    assert_eq!(
        exit.trim(),
        "0",
        "the application failed: {}",
        text(&logs.stdout)
    );
    assert!(
        text(&logs.stdout).contains("shop: 5 order pages shown, 7 product lookups"),
        "{}",
        text(&logs.stdout)
    );

    // The live report: behind the token, with the N+1 in it.
    let admin: u16 = project.env("WIRELINT_ADMIN_PORT").parse().unwrap();
    let (status, _) = http_get(admin, "/report", None).unwrap();
    assert_eq!(status, 401, "/report without the token");
    let (status, _) = http_get(admin, "/report", Some("not-the-token")).unwrap();
    assert_eq!(status, 401, "/report with a wrong token");
    let live = poll(Duration::from_secs(30), || {
        let (status, body) = http_get(admin, "/report", Some(&token)).ok()?;
        assert_eq!(status, 200, "{body}");
        let report: Value = serde_json::from_str(&body).unwrap();
        (!findings_of(&report, "WL401", "shop.products").is_empty()).then_some(report)
    });
    let live = live.expect("no WL401 on shop.products in /report within 30 s");
    let n_plus_one = findings_of(&live, "WL401", "shop.products")[0];
    assert_eq!(n_plus_one["subject"], "shop.orders → shop.products._id");

    // Down: one command; the final report is written at SIGTERM.
    let before_down = SystemTime::now() - Duration::from_secs(1);
    project.run(&["down"], Duration::from_secs(120));
    project.down = true;
    assert_eq!(
        project.containers("").trim(),
        "",
        "containers left after down"
    );
    let last = std::fs::read_to_string(reports.join("report.json")).expect("the final report");
    let last: Value = serde_json::from_str(&last).unwrap();
    assert!(
        generated_at(&last) >= before_down,
        "the report file was not rewritten at shutdown: generated_at {}",
        last["generated_at"]
    );
    assert_eq!(
        findings_of(&last, "WL401", "shop.products").len(),
        1,
        "{:#}",
        last["findings"]
    );
    assert!(last["counters"]["operations"].as_u64().unwrap() >= 7 + 5);
    // README.md: the image's own binary prints it.
    let printed = docker(&[
        "run",
        "--rm",
        "--network=none",
        &format!("--volume={}:/reports:ro", reports.display()),
        project.env("WIRELINT_IMAGE"),
        "report",
        "/reports/report.json",
    ]);
    assert!(
        text(&printed.stdout).contains("WL401 n-plus-one · shop.products"),
        "{}",
        text(&printed.stdout)
    );
}

// ------------------------------------------------------------- kubernetes

/// A Python environment with kubernetes-validate (and PyYAML, which it
/// needs), under target/: made on first use.
fn validator_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let target = common::manifest_dir().join("target");
        let venv = target.join("deploy-venv");
        let python = venv.join("bin/python");
        let has = |python: &Path| {
            Command::new(python)
                .args(["-c", "import kubernetes_validate, yaml"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if has(&python) {
            return python;
        }
        // Made anew: one that a stopped run left half made fails `has`.
        let _ = std::fs::remove_dir_all(&venv);
        succeed(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            Duration::from_secs(300),
        );
        succeed(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", KUBERNETES_VALIDATE])
                .env("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
            Duration::from_secs(600),
        );
        assert!(has(&python), "{} lacks kubernetes_validate", venv.display());
        python
    })
}

/// The manifests: deploy/kubernetes/*.yaml.
fn manifests(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    files
}

/// kubernetes-validate --strict over `files` for `version`, with no
/// network (its schemas are in the package): success and what it said.
fn validate(files: &[PathBuf], version: &str) -> (bool, String) {
    let mut command = Command::new(validator_python());
    command
        .args(["-m", "kubernetes_validate", "--strict", "-k", version])
        .args(files);
    // As root, in a network namespace of its own: proof that it needs none.
    let mut command = if rustix::process::geteuid().is_root()
        && Command::new("unshare")
            .args(["-n", "true"])
            .output()
            .is_ok_and(|o| o.status.success())
    {
        let mut offline = Command::new("unshare");
        offline
            .arg("-n")
            .arg(command.get_program())
            .args(command.get_args());
        offline
    } else {
        command
    };
    let out = common::output_within(&mut command, Duration::from_secs(120));
    (out.status.success(), text(&out.stdout) + &text(&out.stderr))
}

/// Every document of the manifests, as JSON.
fn documents(files: &[PathBuf]) -> Vec<Value> {
    let out = succeed(
        Command::new(validator_python())
            .args([
                "-c",
                "import json, sys, yaml\n\
                 docs = [d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]\n\
                 print(json.dumps(docs))",
            ])
            .args(files),
        Duration::from_secs(60),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} in deploy/kubernetes");
    found[0]
}

/// The pod's wirelint container: a native sidecar (an init container
/// that restarts always) or a plain container.
fn wirelint_container(pod: &Value) -> &Value {
    pod["initContainers"]
        .as_array()
        .into_iter()
        .chain(pod["containers"].as_array())
        .flatten()
        .find(|c| c["name"] == "wirelint")
        .expect("a container named wirelint")
}

fn env_value<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("{} has no env {name}", container["name"]))
}

/// The path given to `--config` in the container's arguments.
fn config_path(container: &Value) -> String {
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = args
        .iter()
        .position(|a| *a == "--config")
        .expect("--config in the wirelint container's args");
    args[at + 1].to_string()
}

/// The pod's wirelint.toml: the ConfigMap's key at the file `--config`
/// names, through the volume mounted over its directory.
fn mounted_config(docs: &[Value]) -> (String, String) {
    let pod = &of_kind(docs, "Deployment")["spec"]["template"]["spec"];
    let wirelint = wirelint_container(pod);
    let path = config_path(wirelint);
    let (dir, file) = path.rsplit_once('/').unwrap();
    let mount = wirelint["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == dir)
        .unwrap_or_else(|| panic!("no volume mounted at {dir}"));
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    let config_map = of_kind(docs, "ConfigMap");
    assert_eq!(
        volume["configMap"]["name"], config_map["metadata"]["name"],
        "the config volume is the ConfigMap"
    );
    let toml = config_map["data"][file]
        .as_str()
        .unwrap_or_else(|| panic!("the ConfigMap has no key {file}"));
    (path, toml.to_string())
}

#[test]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs Python 3 with venv and PyPI (kubernetes-validate)"
)]
fn kubernetes_manifests_pass_the_schemas_and_broken_ones_do_not() {
    let dir = deploy_dir().join("kubernetes");
    let files = manifests(&dir);
    for version in KUBERNETES_VERSIONS {
        let (ok, said) = validate(&files, version);
        assert!(ok, "Kubernetes {version}: {said}");
        for file in &files {
            let name = file.file_name().unwrap().to_string_lossy();
            assert!(
                said.contains(&format!("{name} passed")),
                "{name} not validated against {version}: {said}"
            );
        }
    }

    // Copies with one mistake each: the validator must name it.
    let deployment = std::fs::read_to_string(dir.join("deployment.yaml")).unwrap();
    let mistakes = [
        // A number as a string.
        (
            "containerPort: 9090",
            "containerPort: \"9090\"",
            "containerPort",
        ),
        // A misspelt field (strict: unknown fields are errors).
        (
            "runAsNonRoot: true\n            readOnlyRootFilesystem: true",
            "runAsNonRoot: true\n            readOnlyRootFileSystem: true",
            "readOnlyRootFileSystem",
        ),
        // A probe with no handler's port.
        (
            "tcpSocket:\n              port: 9090",
            "tcpSocket:\n              host: localhost",
            "port",
        ),
    ];
    for (right, wrong, named) in mistakes {
        assert_eq!(
            deployment.matches(right).count(),
            1,
            "the mistake's place {right:?} is not in deployment.yaml once"
        );
        let scratch = tempfile::tempdir().unwrap();
        let broken = scratch.path().join("deployment.yaml");
        std::fs::write(&broken, deployment.replacen(right, wrong, 1)).unwrap();
        let (ok, said) = validate(&[broken], KUBERNETES_VERSIONS[1]);
        assert!(!ok, "{wrong:?} passed: {said}");
        assert!(
            said.contains("did not validate") && said.contains(named),
            "{wrong:?}: {said}"
        );
    }
}

#[test]
#[cfg_attr(
    not(feature = "e2e"),
    ignore = "e2e: needs Python 3 with venv and PyPI (kubernetes-validate)"
)]
fn kubernetes_pod_runs_wirelint_as_a_sidecar_with_the_configmap() {
    let docs = documents(&manifests(&deploy_dir().join("kubernetes")));
    let deployment = of_kind(&docs, "Deployment");
    let template = &deployment["spec"]["template"];
    let pod = &template["spec"];
    let wirelint = wirelint_container(pod);

    // wirelint accepts the ConfigMap's file as it stands.
    let (path, toml) = mounted_config(&docs);
    assert_eq!(path, "/etc/wirelint/wirelint.toml");
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("wirelint.toml");
    std::fs::write(&file, &toml).unwrap();
    let args = wirelint::config::ProxyArgs {
        config: Some(file.clone()),
        ..Default::default()
    };
    let (settings, config, _) = args
        .settings()
        .unwrap_or_else(|e| panic!("the ConfigMap's wirelint.toml: {e}"));
    let config = config.unwrap();
    assert!(config.collections.contains_key("shop.orders"));
    assert_eq!(
        settings.report.as_deref(),
        Some(Path::new("/var/lib/wirelint/report.json"))
    );

    // The image of this version; the application on the pod's loopback.
    assert_eq!(
        wirelint["image"],
        format!("wirelint:{}", env!("CARGO_PKG_VERSION"))
    );
    if pod["initContainers"]
        .as_array()
        .is_some_and(|c| c.contains(wirelint))
    {
        assert_eq!(wirelint["restartPolicy"], "Always", "a native sidecar");
    }
    assert_eq!(
        env_value(wirelint, "WIRELINT_LISTEN")["value"],
        "127.0.0.1:27018"
    );
    let app = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] != "wirelint")
        .expect("an application container");
    let uri = env_value(app, "MONGODB_URI")["value"].as_str().unwrap();
    assert!(uri.starts_with("mongodb://127.0.0.1:27018/"), "{uri}");

    // The token from a Secret, never a value in the manifests.
    let token = env_value(wirelint, "WIRELINT_ADMIN_TOKEN");
    assert!(token.get("value").is_none(), "{token}");
    assert!(token["valueFrom"]["secretKeyRef"]["name"].is_string());
    assert!(
        docs.iter().all(|d| d["kind"] != "Secret"),
        "the Secret is made by hand (README.md), not kept here"
    );

    // Scraped on the admin port; probed on /healthz there.
    let annotations = &template["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "9090");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    assert_eq!(
        env_value(wirelint, "WIRELINT_ADMIN")["value"],
        "0.0.0.0:9090"
    );
    let admin_port = &wirelint["ports"][0];
    assert_eq!(admin_port["containerPort"], 9090);
    // Ready while the upstream answers; alive while wirelint answers at
    // all (a restart cannot bring a database back).
    let get = &wirelint["readinessProbe"]["httpGet"];
    assert_eq!(get["path"], "/healthz");
    assert!(
        get["port"] == admin_port["name"] || get["port"] == 9090,
        "{get}"
    );
    let alive = &wirelint["livenessProbe"];
    assert!(alive["httpGet"].is_null(), "{alive}");
    assert!(
        alive["tcpSocket"]["port"] == admin_port["name"] || alive["tcpSocket"]["port"] == 9090,
        "{alive}"
    );

    // Non-root, read-only root, bounded.
    let security = &wirelint["securityContext"];
    assert_eq!(security["runAsUser"], 65532);
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert!(wirelint["resources"]["requests"]["memory"].is_string());
    assert!(wirelint["resources"]["limits"]["memory"].is_string());
    let report_dir = wirelint["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/var/lib/wirelint")
        .expect("a writable volume for the report");
    let state = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == report_dir["name"])
        .unwrap();
    assert!(state["emptyDir"].is_object(), "{state}");
}

/// Containers this test started: removed when it ends, passed or not.
#[derive(Default)]
struct Started(Vec<String>);

impl Started {
    fn run(&mut self, args: &[String]) -> String {
        let mut all = vec!["run".to_string(), "--detach".into()];
        all.extend_from_slice(args);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let id = text(&docker(&all).stdout).trim().to_string();
        self.0.push(id.clone());
        id
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = Command::new("docker").args(["rm", "-f", id]).output();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(feature = "containers"),
    ignore = "containers: needs a Docker engine (scripts/test.sh starts one)"
)]
async fn kubernetes_wirelint_container_runs_as_the_manifest_says() {
    let (image, ferretdb_image) = images();
    let docs = documents(&manifests(&deploy_dir().join("kubernetes")));
    let pod = &of_kind(&docs, "Deployment")["spec"]["template"]["spec"];
    let wirelint = wirelint_container(pod);
    assert_eq!(wirelint["image"], image.as_str());
    let security = &wirelint["securityContext"];
    let user = format!("{}:{}", security["runAsUser"], security["runAsGroup"]);

    let scratch = tempfile::tempdir().unwrap();
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap()
    };
    mode(scratch.path(), 0o755);
    let (config_path, toml) = mounted_config(&docs);
    let config_dir = scratch.path().join("config");
    std::fs::create_dir(&config_dir).unwrap();
    std::fs::write(config_dir.join("wirelint.toml"), toml).unwrap();
    mode(&config_dir.join("wirelint.toml"), 0o644);
    // The emptyDir: writable by the pod's user.
    let state_dir = scratch.path().join("state");
    std::fs::create_dir(&state_dir).unwrap();
    mode(&state_dir, 0o777);

    // The pod's network is the host's here: free ports stand for 27018
    // and 9090, and the upstream is a FerretDB on this host (the
    // environment wins over the ConfigMap's `upstream`).
    let mut started = Started::default();
    let ferretdb = free_port();
    started.run(&[
        "--network=host".into(),
        format!("--env=FERRETDB_LISTEN_ADDR=127.0.0.1:{ferretdb}"),
        ferretdb_image,
    ]);
    let (listen, admin) = (free_port(), free_port());
    let token = token();
    let mut args = vec![
        "--network=host".to_string(),
        format!("--user={user}"),
        "--cap-drop=ALL".into(),
        "--security-opt=no-new-privileges".into(),
    ];
    if security["readOnlyRootFilesystem"] == true {
        args.push("--read-only".into());
    }
    for mount in wirelint["volumeMounts"].as_array().unwrap() {
        let at = mount["mountPath"].as_str().unwrap();
        let from = if config_path.starts_with(&format!("{at}/")) {
            &config_dir
        } else {
            &state_dir
        };
        let read_only = if mount["readOnly"] == true { ":ro" } else { "" };
        args.push(format!("--volume={}:{at}{read_only}", from.display()));
    }
    for env in wirelint["env"].as_array().unwrap() {
        let name = env["name"].as_str().unwrap();
        let value = match env["value"].as_str() {
            Some(v) => v
                .replace(":27018", &format!(":{listen}"))
                .replace(":9090", &format!(":{admin}")),
            None => {
                assert!(env["valueFrom"]["secretKeyRef"].is_object(), "{env}");
                token.clone()
            }
        };
        args.push(format!("--env={name}={value}"));
    }
    args.push(format!(
        "--env=WIRELINT_UPSTREAM=mongodb://127.0.0.1:{ferretdb}/"
    ));
    args.push(image);
    args.extend(
        wirelint["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string()),
    );
    let container = started.run(&args);
    let logs = || {
        let out = Command::new("docker")
            .args(["logs", &container])
            .output()
            .unwrap();
        text(&out.stdout) + &text(&out.stderr)
    };

    // Readiness: /healthz, no token, 200 once FerretDB answers.
    let healthy = poll(Duration::from_secs(60), || {
        let state = docker(&["inspect", "--format", "{{.State.Running}}", &container]);
        assert_eq!(
            text(&state.stdout).trim(),
            "true",
            "wirelint exited: {}",
            logs()
        );
        matches!(http_get(admin, "/healthz", None), Ok((200, _))).then_some(())
    });
    assert!(healthy.is_some(), "/healthz never answered 200: {}", logs());
    // What Prometheus scrapes: behind the token.
    assert_eq!(http_get(admin, "/metrics", None).unwrap().0, 401);
    let (status, metrics) = http_get(admin, "/metrics", Some(&token)).unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains("wirelint_"), "{metrics}");

    // The application's side: the proxy port on the pod's loopback.
    let client = common::client(&format!("mongodb://127.0.0.1:{listen}/")).await;
    let orders = client
        .database("shop")
        .collection::<mongodb::bson::Document>("orders");
    orders
        .insert_one(mongodb::bson::doc! {"customerId": 1, "productId": "p1"})
        .await
        .unwrap();
    orders
        .find_one(mongodb::bson::doc! {"customerId": 1})
        .await
        .unwrap()
        .expect("the order just written");
    drop(client);

    // The ConfigMap's partition key is in the live report: --config was
    // read through the mount.
    let (status, body) = http_get(admin, "/report", Some(&token)).unwrap();
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        report["partition_keys"]["shop.orders"]["source"], "config",
        "{:#}",
        report["partition_keys"]
    );

    // The kubelet stops it with SIGTERM: exit 0, the report on the
    // emptyDir although the root file system is read-only.
    let before_stop = SystemTime::now() - Duration::from_secs(1);
    docker(&["stop", "-t", "30", &container]);
    let exit = docker(&["inspect", "--format", "{{.State.ExitCode}}", &container]);
    assert_eq!(text(&exit.stdout).trim(), "0", "{}", logs());
    let last = std::fs::read_to_string(state_dir.join("report.json"))
        .unwrap_or_else(|e| panic!("no report on the emptyDir ({e}): {}", logs()));
    let last: Value = serde_json::from_str(&last).unwrap();
    assert!(
        generated_at(&last) >= before_stop,
        "{}",
        last["generated_at"]
    );
    assert!(last["counters"]["operations"].as_u64().unwrap() >= 2);
}
