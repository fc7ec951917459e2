//! wirelint's image in front of a test's database, with the `testcontainers`
//! crate (feature `testcontainers`): the Rust runner's counterpart of the
//! Java, Node and Python helpers.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use wirelint::app::container::Wirelint;
//! // The database: any MongoDB-compatible server the test started, in a
//! // container or not.
//! let wirelint = Wirelint::in_front_of("mongodb://127.0.0.1:27017/").start().await?;
//! let client = mongodb::Client::with_uri_str(wirelint.connection_string()).await?;
//! // … the code under test, through `client` …
//! let report = wirelint.finish().await?;
//! assert!(report.findings.is_empty(), "{:?}", report.findings);
//! # Ok(()) }
//! ```
//!
//! The container shares the host's network (`--network host`): it reaches
//! a database the test started on the host or in another host-network
//! container, and works where Docker has no bridge. Its two ports are
//! picked free on the host. `finish` stops it with SIGTERM, as `docker
//! stop` does: wirelint drains, writes its final report to a directory
//! mounted from the host, and the container is removed. Nothing else is
//! started (no Ryuk): what `start` starts, `finish` or the handle's drop
//! removes.

use crate::report::Report;
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::Duration;
use testcontainers::core::{Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

/// The image `scripts/image.sh` builds: `wirelint:` and this crate's
/// version.
pub const IMAGE: &str = "wirelint";
/// The tag of [`IMAGE`] that matches this crate.
pub const TAG: &str = env!("CARGO_PKG_VERSION");

/// Where the report directory is mounted in the container.
const OUT: &str = "/out";
/// What wirelint logs once it accepts connections.
const READY: &str = "wirelint is forwarding";

/// A wirelint container to start in front of an upstream.
#[derive(Debug, Clone)]
pub struct Wirelint {
    upstream: String,
    image: String,
    tag: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// A wirelint container that runs; [`RunningWirelint::finish`] ends it.
pub struct RunningWirelint {
    container: ContainerAsync<GenericImage>,
    listen: u16,
    admin: u16,
    out: OutDir,
}

/// An error starting or finishing the container, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("wirelint's container: {0} (is a Docker engine running, and the image built with scripts/image.sh?)")]
    Docker(#[from] testcontainers::TestcontainersError),
    #[error("wirelint's container: {0}")]
    Io(#[from] std::io::Error),
    #[error("wirelint's container wrote no report it could read: {0}")]
    Report(String),
}

impl Wirelint {
    /// wirelint (`wirelint:VERSION`) in front of `upstream`, a MongoDB URI
    /// reachable from the host.
    pub fn in_front_of(upstream: &str) -> Wirelint {
        Wirelint {
            upstream: upstream.to_string(),
            image: IMAGE.to_string(),
            tag: TAG.to_string(),
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Another image or tag (a registry's copy, say).
    pub fn with_image(mut self, image: &str, tag: &str) -> Wirelint {
        self.image = image.to_string();
        self.tag = tag.to_string();
        self
    }

    /// One more `wirelint proxy` argument (`--target`, `--fail-on`, …).
    pub fn with_arg(mut self, arg: &str) -> Wirelint {
        self.args.push(arg.to_string());
        self
    }

    /// One more environment variable (`WIRELINT_*`, `RUST_LOG`).
    pub fn with_env(mut self, name: &str, value: &str) -> Wirelint {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Starts the container; returns once wirelint accepts connections.
    pub async fn start(self) -> Result<RunningWirelint, Error> {
        let out = OutDir::new()?;
        let (listen, admin) = (free_port()?, free_port()?);
        let mut cmd = vec![
            "proxy".to_string(),
            "--upstream".to_string(),
            self.upstream.clone(),
            "--report".to_string(),
            format!("{OUT}/report.json"),
        ];
        cmd.extend(self.args);
        let mut request = GenericImage::new(self.image, self.tag)
            .with_wait_for(WaitFor::message_on_stderr(READY))
            .with_network("host")
            .with_env_var("WIRELINT_LISTEN", format!("127.0.0.1:{listen}"))
            .with_env_var("WIRELINT_ADMIN", format!("127.0.0.1:{admin}"))
            // The report directory is the host user's: wirelint writes it
            // as that user.
            .with_user(format!("{}:{}", out.uid, out.gid))
            .with_mount(Mount::bind_mount(
                out.path.to_string_lossy().into_owned(),
                OUT,
            ))
            .with_startup_timeout(Duration::from_secs(60))
            .with_cmd(cmd);
        for (name, value) in self.env {
            request = request.with_env_var(name, value);
        }
        let container = request.start().await?;
        Ok(RunningWirelint {
            container,
            listen,
            admin,
            out,
        })
    }
}

impl RunningWirelint {
    /// The URI the code under test connects to.
    pub fn connection_string(&self) -> String {
        format!("mongodb://127.0.0.1:{}/", self.listen)
    }

    /// wirelint's admin endpoints (`/report`, `/metrics`, `/healthz`, the
    /// dashboard), `HOST:PORT` on loopback.
    pub fn admin(&self) -> String {
        format!("127.0.0.1:{}", self.admin)
    }

    /// The container's id, for `docker` commands.
    pub fn id(&self) -> &str {
        self.container.id()
    }

    /// Stops wirelint as `docker stop` does (SIGTERM, then the kill after
    /// `grace`), reads its final report, and removes the container.
    pub async fn finish(self) -> Result<Report, Error> {
        self.finish_within(Duration::from_secs(10)).await
    }

    /// [`finish`](RunningWirelint::finish), with another grace period.
    pub async fn finish_within(self, grace: Duration) -> Result<Report, Error> {
        let seconds = grace.as_secs().max(1) as i64;
        self.container.stop_with_timeout(Some(seconds)).await?;
        let report = Report::load(&self.out.path.join("report.json")).map_err(Error::Report);
        let logs = if report.is_err() {
            String::from_utf8_lossy(&self.container.stderr_to_vec().await.unwrap_or_default())
                .into_owned()
        } else {
            String::new()
        };
        self.container.rm().await?;
        report.map_err(|e| match logs.is_empty() {
            true => e,
            false => Error::Report(format!("{e}; its log:\n{logs}")),
        })
    }
}

/// A free port on the host's loopback (taken by the container right after).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The host directory the report is written to, with its owner (the
/// user the container runs as), removed with the handle.
struct OutDir {
    path: PathBuf,
    uid: u32,
    gid: u32,
}

impl OutDir {
    fn new() -> std::io::Result<OutDir> {
        use std::os::unix::fs::MetadataExt;
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "wirelint-container-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)?;
        let meta = std::fs::metadata(&path)?;
        Ok(OutDir {
            path,
            uid: meta.uid(),
            gid: meta.gid(),
        })
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
