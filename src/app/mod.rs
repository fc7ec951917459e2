//! The application: the one place that assembles wirelint from its layers.
//!
//! ```text
//! Proxy::start(ProxySettings)
//!   ├─ stats::Stats                      counters both sides write
//!   ├─ analysis::Knowledge               with rules::all() handed in
//!   ├─ analysis::AnalysisQueue + workers the proxy's Tap
//!   ├─ proxy::Forwarder                  listener and sessions, tapped
//!   ├─ a tick task                       4 × a second, to the workers
//!   ├─ partition-key discovery           config.collections, once
//!   ├─ admin::serve                      when --admin is set
//!   ├─ admin::otlp::start                when --otlp-endpoint is set
//!   └─ a report writer                   when --report is set
//! ```
//!
//! [`Proxy`] is also the library API: tests and applications start
//! wirelint in-process, read its address, counters and findings, and shut it
//! down.

#[cfg(feature = "testcontainers")]
pub mod container;
pub mod offline;
mod partition_key_discovery;

use crate::admin::AdminState;
use crate::analysis::knowledge::Knowledge;
use crate::analysis::partition::PartitionKeys;
use crate::analysis::{AnalysisQueue, AnalysisWorkers};
use crate::capture::CaptureTap;
use crate::config::ProxySettings;
use crate::proxy::{Forwarder, Tap};
use crate::report::Report;
use crate::rules::Finding;
use crate::stats::{Stats, StatsSnapshot};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

pub use partition_key_discovery::keys_from_config_collections;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Proxy(#[from] crate::proxy::StartError),
    #[error("{0}")]
    Admin(#[from] crate::admin::BindError),
    #[error("{0}")]
    Otlp(#[from] crate::admin::otlp::StartError),
    #[error("cannot write the capture {path}: {error} (check --capture)")]
    Capture { path: String, error: std::io::Error },
}

/// wirelint running: the forwarding proxy with its analysis, admin
/// endpoints and report writer.
pub struct Proxy {
    forwarder: Forwarder,
    stats: Arc<Stats>,
    /// Stops the tasks beside the forwarder (ticks, admin, report writer).
    shutdown: watch::Sender<bool>,
    workers: Option<AnalysisWorkers>,
    /// Held until shutdown; the workers stop once every queue clone is gone.
    queue: Option<AnalysisQueue>,
    upstream: String,
    knowledge: Arc<Mutex<Knowledge>>,
    report_path: Option<PathBuf>,
    admin_addr: Option<SocketAddr>,
    /// Read-only access to counters and knowledge (reports, admin).
    observed: AdminState,
    /// The OTLP export, when an endpoint is set.
    otlp: Option<crate::admin::otlp::Exporter>,
    /// The capture file's writer, when --capture is set (it holds a clone
    /// of the queue until finished).
    capture: Option<Arc<CaptureTap>>,
}

/// For the hostile-analysis tests of the release binary only: with this
/// variable set, one more rule, `TEST-PANIC`, panics on every request whose
/// `comment` is [`PANIC_MARKER`], so that the tests can show a panicking
/// rule stops only itself. Never set it in production.
pub const TEST_PANICKING_RULE: &str = "WIRELINT_TEST_PANICKING_RULE";
/// The comment that makes `TEST-PANIC` panic.
pub const PANIC_MARKER: &str = "wirelint-test-panic";

static PANICS_ON_MARKER: crate::analysis::rule::RuleMeta = crate::analysis::rule::RuleMeta {
    id: "TEST-PANIC",
    name: "panics on a marker (tests only)",
    severity: crate::analysis::findings::Severity::Info,
    summary: "",
    advice: "",
    source: "",
    thresholds: &[],
};

struct PanicsOnMarker;

impl crate::analysis::rule::Rule for PanicsOnMarker {
    fn meta(&self) -> &'static crate::analysis::rule::RuleMeta {
        &PANICS_ON_MARKER
    }
    fn on_request(
        &mut self,
        op: &crate::analysis::rule::OpView<'_>,
        _: &mut crate::analysis::rule::RuleContext<'_>,
    ) {
        if op.pattern == PANIC_MARKER {
            panic!("TEST-PANIC: the test rule panics on its marker, as asked");
        }
    }
}

impl Proxy {
    /// Binds the listener and starts accepting. Fails fast on a bad address
    /// or bad TLS files; an unreachable upstream is not an error here (each
    /// client is told when its connection is made).
    pub async fn start(settings: ProxySettings) -> Result<Proxy, StartError> {
        let stats = Arc::new(Stats::default());
        let mut rules = crate::rules::all();
        if std::env::var_os(TEST_PANICKING_RULE).is_some() {
            rules.push(Box::new(PanicsOnMarker));
        }
        let knowledge = Arc::new(Mutex::new(Knowledge::with_keys(
            rules,
            settings.analysis.rules.clone(),
            settings.analysis.show_values,
            settings.analysis.caps.clone(),
            PartitionKeys::from_config(settings.analysis.partition_keys.clone()),
        )));
        knowledge
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .configure(&settings.analysis);
        let upstream = settings.forward.upstream.to_string();
        let (queue, workers) =
            AnalysisQueue::start(&settings.analysis, stats.clone(), knowledge.clone());
        let analysis_tap: Arc<dyn Tap> = Arc::new(queue.clone());
        let capture = match &settings.capture {
            Some(path) => {
                let tap = CaptureTap::create(path, analysis_tap.clone()).map_err(|error| {
                    StartError::Capture {
                        path: path.display().to_string(),
                        error,
                    }
                })?;
                tracing::warn!(
                    capture = %path.display(),
                    "writing every forwarded message to a capture file: it holds literal values, \
                     credentials in authentication messages included (mode 0600); keep it private"
                );
                Some(Arc::new(tap))
            }
            None => None,
        };
        let tap: Arc<dyn Tap> = match &capture {
            Some(c) => c.clone(),
            None => analysis_tap,
        };
        let forwarder = Forwarder::start(settings.forward.clone(), tap, stats.clone()).await?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        tokio::spawn(tick(queue.clone(), shutdown_rx.clone()));
        if settings.analysis.enabled && settings.discover_partition_keys {
            tokio::spawn(discover_keys(
                settings.upstream_raw.expose().to_string(),
                settings.forward.connect_timeout,
                knowledge.clone(),
            ));
        }
        let mut observed = AdminState::new(
            stats.clone(),
            knowledge.clone(),
            upstream.clone(),
            settings.admin_token.as_deref().map(Arc::from),
        );
        observed.upstream_check = Some(forwarder.upstream_check());
        let observed = if settings.otlp.is_some() {
            observed.exporting_otlp()
        } else {
            observed
        };
        let admin_addr = match &settings.admin {
            Some(addr) => {
                Some(crate::admin::serve(addr, observed.clone(), shutdown_rx.clone()).await?)
            }
            None => None,
        };
        let otlp = match &settings.otlp {
            Some(otlp) => Some(crate::admin::otlp::start(
                otlp,
                observed.clone(),
                shutdown_rx.clone(),
            )?),
            None => None,
        };
        if let Some(path) = settings.report.clone() {
            tokio::spawn(write_reports(
                path,
                settings.report_interval,
                observed.clone(),
                shutdown_rx,
            ));
        }
        tracing::info!(
            listen = %forwarder.local_addr(),
            upstream = %upstream,
            "wirelint is forwarding; connect your application to mongodb://{}/",
            forwarder.local_addr()
        );
        Ok(Proxy {
            forwarder,
            stats,
            shutdown,
            workers: Some(workers),
            queue: Some(queue),
            upstream,
            knowledge,
            report_path: settings.report,
            admin_addr,
            observed,
            otlp,
            capture,
        })
    }

    /// Where the admin HTTP server listens, when one was asked for.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// A report of everything learnt so far.
    pub fn report(&self) -> Report {
        self.observed.report()
    }

    /// What the analysis has learnt so far: patterns, shapes, namespaces
    /// and findings. Lock it briefly; the analysis workers need it too.
    pub fn knowledge(&self) -> Arc<Mutex<Knowledge>> {
        self.knowledge.clone()
    }

    /// The findings so far.
    pub fn findings(&self) -> Vec<Finding> {
        let k = self.knowledge.lock().unwrap_or_else(|p| p.into_inner());
        k.findings.all().cloned().collect()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.forwarder.local_addr()
    }

    /// The connection string a driver should use to reach this proxy.
    pub fn connection_string(&self) -> String {
        format!("mongodb://{}/", self.local_addr())
    }

    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The live counters (for a caller that samples them over time).
    pub fn stats_handle(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Stops accepting, lets connections finish what is in flight (up to the
    /// grace period), closes them, waits for the analysis to drain, and
    /// returns the final counters.
    pub async fn shutdown(mut self) -> StatsSnapshot {
        self.stop().await
    }

    /// As [`Proxy::shutdown`], keeping the proxy's knowledge readable
    /// afterwards (findings, report).
    pub async fn stop(&mut self) -> StatsSnapshot {
        let _ = self.shutdown.send(true);
        self.forwarder.stop().await;
        if let Some(capture) = self.capture.take() {
            let _ = tokio::task::spawn_blocking(move || capture.finish()).await;
        }
        // The sessions held the other queue clones; with this one gone the
        // workers drain what is left and finish.
        self.queue.take();
        if let Some(workers) = self.workers.take() {
            let _ = tokio::task::spawn_blocking(move || workers.join()).await;
        }
        // What the drained analysis raised last, then the last metrics.
        if let Some(otlp) = self.otlp.take() {
            otlp.finish().await;
        }
        if let Some(path) = &self.report_path {
            match self.report().write(path) {
                Ok(()) => tracing::info!(report = %path.display(), "report written"),
                Err(e) => tracing::error!(report = %path.display(), "cannot write the report: {e}"),
            }
        }
        self.stats.snapshot()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// Rewrites the report file every `interval` until shutdown (the final
/// one is written by `Proxy::stop`, after the analysis has drained).
async fn write_reports(
    path: PathBuf,
    interval: Duration,
    state: AdminState,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut every = tokio::time::interval(interval.max(Duration::from_secs(1)));
    every.tick().await;
    loop {
        tokio::select! {
            _ = every.tick() => {
                // Built and written on a blocking thread, off the runtime.
                let (state, path) = (state.clone(), path.clone());
                let written = tokio::task::spawn_blocking(move || {
                    state.report().write(&path).map_err(|e| (path, e))
                })
                .await;
                if let Ok(Err((path, e))) = written {
                    tracing::warn!(report = %path.display(), "cannot write the report: {e}");
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Adds the keys of a sharded upstream's `config.collections` (fails soft).
async fn discover_keys(uri: String, timeout: Duration, knowledge: Arc<Mutex<Knowledge>>) {
    match partition_key_discovery::discover(&uri, timeout).await {
        Ok(keys) if keys.is_empty() => {
            tracing::debug!("upstream is not a sharded cluster (or has no sharded collections): no partition keys discovered")
        }
        Ok(keys) => {
            let n = keys.len();
            let mut k = knowledge.lock().unwrap_or_else(|p| p.into_inner());
            for (namespace, paths, kind) in keys {
                k.partition_keys.discovered(namespace, paths, kind);
            }
            tracing::info!(
                collections = n,
                "partition keys discovered from config.collections"
            );
        }
        Err(e) => tracing::warn!(
            "partition key discovery from config.collections failed (carrying on without it): {}",
            crate::proxy::uri::scrub(&e.to_string(), &uri)
        ),
    }
}

/// Ticks the analysis four times a second until shutdown.
async fn tick(analysis: AnalysisQueue, mut shutdown: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_millis(250));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = every.tick() => analysis.tick(),
            _ = shutdown.changed() => return,
        }
    }
}
