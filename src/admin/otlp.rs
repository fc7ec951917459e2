//! OTLP export (`--otlp-endpoint`, `[otlp] endpoint`): findings as log
//! records and access-pattern metrics, sent over OTLP/HTTP (protobuf) to an
//! OpenTelemetry Collector. Off unless an endpoint is set: without one this
//! module starts nothing and nothing leaves the process.
//!
//! - **Findings.** Once a second the exporter asks the knowledge store for
//!   the findings raised since it last looked (`FindingStore::raised_since`:
//!   new or escalated, never a repeat) and emits one log record for each,
//!   carrying the trace id of the operation that raised it when its driver
//!   sent one. The store keeps that id with the finding; the exporter keeps
//!   only the generation it last saw.
//! - **Pattern metrics.** Calls, round trips and latency per access
//!   pattern, read from the admin endpoints' report snapshot when the SDK
//!   collects (every `metrics_interval`); the busiest [`MAX_PATTERNS`]
//!   patterns have series of their own, the others are added up under
//!   `(other)`.
//!
//! What is sent is what the report shows with values off: shapes, names,
//! counts. A finding's evidence goes only as its numbers, never its
//! strings (with `--show-values` those may hold example values).
//!
//! Nothing here can slow forwarding or the analysis: the knowledge store
//! is locked once a second to copy what changed; records go to the SDK's
//! bounded batch queue and out from its own thread; metrics are exported
//! from the SDK's reader thread. A collector that is down costs a failed
//! export per batch: the records are dropped and counted, and one line a
//! minute says so. Shutdown waits for the last export at most
//! [`SHUTDOWN_WAIT`].

use super::AdminState;
use crate::analysis::findings::{Change, Finding, Severity};
use crate::analysis::trace_context::TraceContext;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{SpanId, TraceFlags};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{
    BatchConfigBuilder, BatchLogProcessor, SdkLogger, SdkLoggerProvider,
};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::watch;

/// Where and how often to send (filled in by `config`).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The collector's OTLP/HTTP base URL (`http://host:4318`); the
    /// signals go to `/v1/logs` and `/v1/metrics` under it.
    pub endpoint: String,
    /// How often pattern metrics are sent.
    pub metrics_interval: Duration,
    /// `service.instance.id`; a fresh id per process when not given.
    pub service_instance_id: Option<String>,
}

impl Settings {
    pub fn new(endpoint: impl Into<String>) -> Settings {
        Settings {
            endpoint: endpoint.into(),
            metrics_interval: DEFAULT_METRICS_INTERVAL,
            service_instance_id: None,
        }
    }
}

pub const DEFAULT_METRICS_INTERVAL: Duration = Duration::from_secs(30);
/// How long one export may take, retries included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long shutdown waits for the last export.
pub const SHUTDOWN_WAIT: Duration = Duration::from_millis(1500);
/// How often the knowledge store is asked for raised findings.
const FINDINGS_EVERY: Duration = Duration::from_secs(1);
/// Log records waiting for export at most (the findings store holds
/// 10,000 findings, each raised new once and escalated at most twice).
const MAX_QUEUE: usize = 4096;
/// Patterns with series of their own, the busiest first.
pub const MAX_PATTERNS: usize = 100;
/// The pattern the others are added up under.
pub const OTHER: &str = "(other)";
/// At most one "collector unreachable" line this often.
const COMPLAIN_EVERY: Duration = Duration::from_secs(60);

/// Checks an endpoint as `config` takes it: `http://HOST[:PORT][/PATH]`,
/// returned without a trailing `/`. The error says what would be accepted.
pub fn check_endpoint(text: &str) -> Result<String, String> {
    let url = text.trim().trim_end_matches('/');
    if url.starts_with("https://") {
        return Err(format!(
            "{text:?}: https is not supported; wirelint sends OTLP over plain HTTP to a collector or agent beside it (e.g. \"http://127.0.0.1:4318\")"
        ));
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!(
            "{text:?} is not an OTLP/HTTP endpoint; write the collector's base URL, e.g. \"http://127.0.0.1:4318\""
        ));
    };
    let host = rest.split('/').next().unwrap_or("");
    let valid = !host.is_empty()
        && !url
            .chars()
            .any(|c| c.is_whitespace() || c == '?' || c == '#')
        && url.parse::<axum::http::Uri>().is_ok();
    if !valid {
        return Err(format!(
            "{text:?} is not a URL; write the collector's base URL, e.g. \"http://127.0.0.1:4318\""
        ));
    }
    Ok(url.to_string())
}

/// What the exporter lost and sent, for the log line and tests.
#[derive(Debug, Default)]
pub struct Counters {
    pub records_sent: AtomicU64,
    /// Records in batches the collector did not take (down, refusing).
    pub records_dropped: AtomicU64,
    pub metric_exports_failed: AtomicU64,
    /// When the last complaint was logged.
    complained: Mutex<Option<Instant>>,
}

impl Counters {
    fn failed(&self, what: &str, endpoint: &str, error: &dyn std::fmt::Display) {
        let mut last = self.complained.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < COMPLAIN_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(
            endpoint,
            records_dropped = self.records_dropped.load(Ordering::Relaxed),
            metric_exports_failed = self.metric_exports_failed.load(Ordering::Relaxed),
            "OTLP export failed ({what}: {error}); dropping what could not be sent (forwarding and analysis go on; at most one such line a minute)"
        );
    }
}

/// The running exporter: stop it with [`Exporter::finish`].
pub struct Exporter {
    logs: SdkLoggerProvider,
    meters: SdkMeterProvider,
    findings: Option<tokio::task::JoinHandle<()>>,
    state: AdminState,
    logger: Arc<SdkLogger>,
    seen: Arc<AtomicU64>,
    pub counters: Arc<Counters>,
}

/// The exporter could not be built (a bad endpoint that got past `config`).
#[derive(Debug, thiserror::Error)]
#[error("cannot start the OTLP export to {endpoint}: {message}")]
pub struct StartError {
    endpoint: String,
    message: String,
}

/// Starts the export; runs until [`Exporter::finish`] (or `shutdown`).
pub fn start(
    settings: &Settings,
    state: AdminState,
    shutdown: watch::Receiver<bool>,
) -> Result<Exporter, StartError> {
    let fail = |message: String| StartError {
        endpoint: settings.endpoint.clone(),
        message,
    };
    let counters = state.otlp.clone().unwrap_or_default();
    let resource = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "wirelint"),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new(
                "service.instance.id",
                settings
                    .service_instance_id
                    .clone()
                    .unwrap_or_else(instance_id),
            ),
        ])
        .build();
    let log_exporter = opentelemetry_otlp::LogExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/logs", settings.endpoint))
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let processor = BatchLogProcessor::builder(CountedLogs {
        inner: log_exporter,
        counters: counters.clone(),
        endpoint: settings.endpoint.clone(),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(MAX_QUEUE)
            .with_scheduled_delay(Duration::from_secs(1))
            .build(),
    )
    .build();
    let logs = SdkLoggerProvider::builder()
        .with_resource(resource.clone())
        .with_log_processor(processor)
        .build();
    let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/metrics", settings.endpoint))
        .with_timeout(EXPORT_TIMEOUT)
        .with_temporality(Temporality::Cumulative)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let reader = PeriodicReader::builder(CountedMetrics {
        inner: metric_exporter,
        counters: counters.clone(),
        endpoint: settings.endpoint.clone(),
    })
    .with_interval(settings.metrics_interval)
    .build();
    let meters = SdkMeterProvider::builder()
        .with_resource(resource)
        .with_reader(reader)
        .build();
    pattern_instruments(&meters, state.clone());
    let logger = Arc::new(logs.logger("wirelint"));
    let seen = Arc::new(AtomicU64::new(0));
    let findings = tokio::spawn(send_findings(
        state.clone(),
        logger.clone(),
        seen.clone(),
        shutdown,
    ));
    tracing::info!(
        endpoint = %settings.endpoint,
        "sending findings and pattern metrics over OTLP/HTTP"
    );
    Ok(Exporter {
        logs,
        meters,
        findings: Some(findings),
        state,
        logger,
        seen,
        counters,
    })
}

impl Exporter {
    /// Sends what was raised since the last look (call it once the
    /// analysis has drained), then the last metrics, and stops: waits
    /// [`SHUTDOWN_WAIT`] at most, however the collector is doing.
    pub async fn finish(mut self) {
        if let Some(task) = self.findings.take() {
            task.abort();
        }
        emit_raised(&self.state, &self.logger, &self.seen);
        let (logs, meters) = (self.logs.clone(), self.meters.clone());
        let (done, wait) = std::sync::mpsc::channel();
        // A thread of its own: the SDK's shutdowns block, and the meter
        // provider's takes no deadline.
        let spawned = std::thread::Builder::new()
            .name("wirelint-otlp-stop".into())
            .spawn(move || {
                let both = std::thread::scope(|s| {
                    let l = s.spawn(|| logs.shutdown_with_timeout(SHUTDOWN_WAIT));
                    let m = s.spawn(|| meters.shutdown_with_timeout(SHUTDOWN_WAIT));
                    (l.join(), m.join())
                });
                let _ = done.send(both);
            });
        if spawned.is_err() {
            return;
        }
        let waited = tokio::task::spawn_blocking(move || wait.recv_timeout(SHUTDOWN_WAIT)).await;
        if !matches!(waited, Ok(Ok(_))) {
            tracing::warn!(
                "the OTLP collector did not take the last export within {:?}; stopping without it",
                SHUTDOWN_WAIT
            );
        }
    }
}

/// Dropped without [`Exporter::finish`] (a `Proxy` dropped unstopped): it
/// stops in the background, never holding up the thread that drops it.
impl Drop for Exporter {
    fn drop(&mut self) {
        let Some(task) = self.findings.take() else {
            return;
        };
        task.abort();
        let (logs, meters) = (self.logs.clone(), self.meters.clone());
        let _ = std::thread::Builder::new()
            .name("wirelint-otlp-stop".into())
            .spawn(move || {
                let _ = logs.shutdown_with_timeout(SHUTDOWN_WAIT);
                let _ = meters.shutdown_with_timeout(SHUTDOWN_WAIT);
            });
    }
}

/// A `service.instance.id` for this process: random enough to tell two
/// wirelints apart (the clock's nanoseconds, the process id, hashed).
fn instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    let a = h.finish();
    h.write_u64(a);
    format!("{:016x}{:016x}", a, h.finish())
}

/// Once a second until shutdown: the raised findings, as log records.
async fn send_findings(
    state: AdminState,
    logger: Arc<SdkLogger>,
    seen: Arc<AtomicU64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut every = tokio::time::interval(FINDINGS_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = every.tick() => emit_raised(&state, &logger, &seen),
            _ = shutdown.changed() => return,
        }
    }
}

/// Copies the findings raised since `seen` out of the store (one short
/// lock, nothing copied when nothing changed) and emits them.
fn emit_raised(state: &AdminState, logger: &SdkLogger, seen: &AtomicU64) {
    let since = seen.load(Ordering::Relaxed);
    let raised: Vec<(Finding, Change, Option<TraceContext>)> = {
        let k = state.knowledge.lock().unwrap_or_else(|p| p.into_inner());
        let now = k.findings.generation();
        if now == since {
            return;
        }
        seen.store(now, Ordering::Relaxed);
        k.findings
            .raised_since(since)
            .map(|r| (r.finding.clone(), r.change, r.trace))
            .collect()
    };
    for (finding, change, trace) in &raised {
        logger.emit(finding_record(logger, finding, *change, *trace));
    }
}

/// The OpenTelemetry severity of a finding's.
pub fn severity(s: Severity) -> (opentelemetry::logs::Severity, &'static str) {
    use opentelemetry::logs::Severity as Otel;
    match s {
        Severity::Info => (Otel::Info, "info"),
        Severity::Warning => (Otel::Warn, "warning"),
        Severity::Error => (Otel::Error, "error"),
    }
}

/// `db.namespace` and `db.collection.name` of a `db.collection` namespace.
fn database_and_collection(namespace: &str) -> (&str, Option<&str>) {
    match namespace.split_once('.') {
        Some((db, coll)) if !coll.is_empty() => (db, Some(coll)),
        _ => (namespace.trim_end_matches('.'), None),
    }
}

/// One finding as a log record: the message as its body, the database
/// semantic conventions where they apply, `wirelint.*` for the rest.
fn finding_record(
    logger: &SdkLogger,
    f: &Finding,
    change: Change,
    trace: Option<TraceContext>,
) -> opentelemetry_sdk::logs::SdkLogRecord {
    let mut r = logger.create_log_record();
    let now = SystemTime::now();
    r.set_event_name("wirelint.finding");
    r.set_timestamp(now);
    r.set_observed_timestamp(now);
    let (number, text) = severity(f.severity);
    r.set_severity_number(number);
    r.set_severity_text(text);
    r.set_body(AnyValue::from(f.message.clone()));
    if let Some(trace) = trace {
        r.set_trace_context(
            opentelemetry::TraceId::from_bytes(trace.trace.to_bytes()),
            SpanId::from_bytes(trace.span.to_bytes()),
            Some(TraceFlags::SAMPLED),
        );
    }
    for (key, value) in finding_attributes(f, change) {
        r.add_attribute(key, value);
    }
    r
}

/// A finding's attributes (see docs/otlp.md).
pub fn finding_attributes(f: &Finding, change: Change) -> Vec<(&'static str, AnyValue)> {
    let (db, collection) = database_and_collection(&f.namespace);
    let mut a: Vec<(&'static str, AnyValue)> = vec![
        ("db.system.name", "mongodb".into()),
        ("db.namespace", db.to_string().into()),
        ("wirelint.rule.id", f.rule.clone().into()),
        ("wirelint.rule.name", f.name.clone().into()),
        ("wirelint.severity", severity(f.severity).1.into()),
        ("wirelint.finding.key", f.key().into()),
        ("wirelint.finding.subject", f.subject.clone().into()),
        (
            "wirelint.finding.change",
            match change {
                Change::Escalated => "escalated",
                _ => "new",
            }
            .into(),
        ),
        (
            "wirelint.finding.occurrences",
            AnyValue::Int(i64::try_from(f.occurrences).unwrap_or(i64::MAX)),
        ),
        ("wirelint.docs", f.docs.clone().into()),
    ];
    if let Some(c) = collection {
        a.push(("db.collection.name", c.to_string().into()));
    }
    if let Some(shape) = &f.shape {
        if let Some(op) = shape.split_whitespace().next() {
            a.push(("db.operation.name", op.to_string().into()));
        }
        a.push(("db.query.summary", shape.clone().into()));
    }
    if let Some(p) = &f.pattern {
        a.push(("wirelint.pattern", p.clone().into()));
    }
    // The evidence's numbers only: its strings may be example values.
    for (key, value) in &f.evidence {
        let value = match value {
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => AnyValue::Int(i),
                None => AnyValue::Double(n.as_f64().unwrap_or(0.0)),
            },
            serde_json::Value::Bool(b) => AnyValue::Boolean(*b),
            _ => continue,
        };
        // Leaked once per evidence key name: the rules' keys are a small
        // fixed set.
        a.push((evidence_key(key), value));
    }
    a
}

/// `wirelint.evidence.KEY`, interned: attribute keys are `'static` here
/// and evidence keys are the rules' own few names.
fn evidence_key(key: &str) -> &'static str {
    static KEYS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut keys = KEYS.lock().unwrap_or_else(|p| p.into_inner());
    let full = format!("wirelint.evidence.{key}");
    if let Some(k) = keys.iter().find(|k| **k == full) {
        return k;
    }
    if keys.len() >= 256 {
        return "wirelint.evidence.other";
    }
    let k: &'static str = Box::leak(full.into_boxed_str());
    keys.push(k);
    k
}

/// One pattern's numbers as sent.
struct PatternPoint {
    attributes: Vec<KeyValue>,
    calls: u64,
    round_trips: u64,
    /// Estimated request units, when priced (`--target cosmos-ru`).
    request_units: Option<f64>,
    /// Seconds at p50, p95, p99 and the max; none for `(other)`.
    latency: Option<[f64; 4]>,
}

/// The report snapshot's patterns as points: the busiest
/// [`MAX_PATTERNS`] each, the rest added up under [`OTHER`].
fn pattern_points(state: &AdminState) -> Vec<PatternPoint> {
    let report = state.snapshot();
    let mut patterns: Vec<_> = report.patterns.iter().collect();
    patterns.sort_by(|a, b| {
        b.estimated_invocations
            .cmp(&a.estimated_invocations)
            .then(a.name.cmp(&b.name))
    });
    let mut points = Vec::with_capacity(patterns.len().min(MAX_PATTERNS) + 1);
    let (mut other_calls, mut other_trips) = (0u64, 0u64);
    let mut other_ru: Option<f64> = None;
    for (i, p) in patterns.iter().enumerate() {
        if i >= MAX_PATTERNS {
            other_calls += p.estimated_invocations;
            other_trips += p.round_trips;
            if let Some(r) = &p.request_units {
                *other_ru.get_or_insert(0.0) += r.total;
            }
            continue;
        }
        let mut attributes = vec![
            KeyValue::new("db.system.name", "mongodb"),
            KeyValue::new("wirelint.pattern", p.name.clone()),
            KeyValue::new(
                "wirelint.pattern.named_by",
                match p.named_by {
                    crate::analysis::patterns::NamedBy::Comment => "comment",
                    crate::analysis::patterns::NamedBy::Shape => "shape",
                },
            ),
        ];
        if let Some(ns) = p.namespaces.first() {
            let (db, collection) = database_and_collection(ns);
            attributes.push(KeyValue::new("db.namespace", db.to_string()));
            if let Some(c) = collection {
                attributes.push(KeyValue::new("db.collection.name", c.to_string()));
            }
        }
        let l = &p.latency_us;
        points.push(PatternPoint {
            attributes,
            calls: p.estimated_invocations,
            round_trips: p.round_trips,
            request_units: p.request_units.as_ref().map(|r| r.total),
            latency: Some([l.p50, l.p95, l.p99, l.max].map(|us| us as f64 / 1e6)),
        });
    }
    if other_calls > 0 || other_trips > 0 {
        points.push(PatternPoint {
            attributes: vec![
                KeyValue::new("db.system.name", "mongodb"),
                KeyValue::new("wirelint.pattern", OTHER),
            ],
            calls: other_calls,
            round_trips: other_trips,
            request_units: other_ru,
            latency: None,
        });
    }
    points
}

/// The pattern instruments, observed at each collection from the admin
/// endpoints' report snapshot (rebuilt at most once a second).
fn pattern_instruments(meters: &SdkMeterProvider, state: AdminState) {
    let meter = meters.meter("wirelint");
    let s = state.clone();
    meter
        .u64_observable_counter("wirelint.pattern.calls")
        .with_unit("{call}")
        .with_description(
            "Calls of the access pattern (estimated where connections were sampled out)",
        )
        .with_callback(move |o| {
            for p in pattern_points(&s) {
                o.observe(p.calls, &p.attributes);
            }
        })
        .build();
    let s = state.clone();
    meter
        .u64_observable_counter("wirelint.pattern.round_trips")
        .with_unit("{round_trip}")
        .with_description("Round trips to the server the access pattern's calls made")
        .with_callback(move |o| {
            for p in pattern_points(&s) {
                o.observe(p.round_trips, &p.attributes);
            }
        })
        .build();
    let s = state.clone();
    meter
        .f64_observable_counter("wirelint.pattern.request_units")
        .with_unit("{request_unit}")
        .with_description("Estimated Azure Cosmos DB request units of the access pattern's operations (target cosmos-ru only)")
        .with_callback(move |o| {
            for p in pattern_points(&s) {
                if let Some(ru) = p.request_units {
                    o.observe(ru, &p.attributes);
                }
            }
        })
        .build();
    meter
        .f64_observable_gauge("wirelint.pattern.latency")
        .with_unit("s")
        .with_description("Latency of one call of the access pattern, measured at the proxy, at a quantile (1: the max)")
        .with_callback(move |o| {
            for p in pattern_points(&state) {
                let Some(latency) = p.latency else { continue };
                for (q, seconds) in ["0.5", "0.95", "0.99", "1"].into_iter().zip(latency) {
                    let mut attributes = p.attributes.clone();
                    attributes.push(KeyValue::new("wirelint.quantile", q));
                    o.observe(seconds, &attributes);
                }
            }
        })
        .build();
}

/// The log exporter, counting what it could not send.
#[derive(Debug)]
struct CountedLogs<E> {
    inner: E,
    counters: Arc<Counters>,
    endpoint: String,
}

impl<E: opentelemetry_sdk::logs::LogExporter> opentelemetry_sdk::logs::LogExporter
    for CountedLogs<E>
{
    async fn export(&self, batch: opentelemetry_sdk::logs::LogBatch<'_>) -> OTelSdkResult {
        let n = batch.iter().count() as u64;
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => self.counters.records_sent.fetch_add(n, Ordering::Relaxed),
            Err(e) => {
                self.counters
                    .records_dropped
                    .fetch_add(n, Ordering::Relaxed);
                self.counters.failed("log records", &self.endpoint, e);
                0
            }
        };
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The metric exporter, counting failed exports.
struct CountedMetrics<E> {
    inner: E,
    counters: Arc<Counters>,
    endpoint: String,
}

impl<E: PushMetricExporter> PushMetricExporter for CountedMetrics<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        if let Err(e) = &result {
            self.counters
                .metric_exports_failed
                .fetch_add(1, Ordering::Relaxed);
            self.counters.failed("metrics", &self.endpoint, e);
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Endpoints: plain HTTP base URLs, a trailing slash dropped; https,
    /// other schemes and non-URLs refused with what to write instead.
    #[test]
    fn endpoints_are_plain_http_base_urls() {
        assert_eq!(
            check_endpoint(" http://127.0.0.1:4318/ ").unwrap(),
            "http://127.0.0.1:4318"
        );
        assert_eq!(
            check_endpoint("http://otel:4318/prefix").unwrap(),
            "http://otel:4318/prefix"
        );
        for bad in [
            "127.0.0.1:4318",
            "grpc://x:4317",
            "http://",
            "http://a b",
            "",
        ] {
            let e = check_endpoint(bad).unwrap_err();
            assert!(e.contains("http://127.0.0.1:4318"), "{bad}: {e}");
        }
        assert!(check_endpoint("https://otel:4318")
            .unwrap_err()
            .contains("https"));
    }

    /// A finding's attributes: the database conventions from its namespace
    /// and shape, the rule's, the evidence's numbers but not its strings.
    #[test]
    fn a_finding_maps_to_the_database_conventions() {
        let f = Finding {
            rule: "WL102".into(),
            name: "large-array".into(),
            severity: Severity::Warning,
            namespace: "shop.orders".into(),
            subject: "items".into(),
            pattern: Some("checkout".into()),
            shape: Some("insert shop.orders {items: [?]}".into()),
            patterns: vec!["checkout".into()],
            message: "m".into(),
            evidence: [
                ("max_length".to_string(), serde_json::json!(300)),
                ("example_id".to_string(), serde_json::json!("a-literal")),
            ]
            .into(),
            advice: "a".into(),
            source: "s".into(),
            docs: "docs/rules/WL102.md".into(),
            occurrences: 3,
            first_seen: "t".into(),
            last_seen: "t".into(),
            fix_first: None,
            databases: None,
            tests: Vec::new(),
        };
        let a: std::collections::BTreeMap<_, _> = finding_attributes(&f, Change::Escalated)
            .into_iter()
            .map(|(k, v)| (k, format!("{v:?}")))
            .collect();
        let has = |k: &str, v: &str| assert!(a[k].contains(v), "{k}: {} lacks {v}", a[k]);
        has("db.system.name", "mongodb");
        has("db.namespace", "shop");
        has("db.collection.name", "orders");
        has("db.operation.name", "insert");
        has("db.query.summary", "insert shop.orders {items: [?]}");
        has("wirelint.rule.id", "WL102");
        has("wirelint.severity", "warning");
        has("wirelint.finding.change", "escalated");
        has("wirelint.evidence.max_length", "300");
        assert!(!a.values().any(|v| v.contains("a-literal")), "{a:?}");
        assert_eq!(severity(Severity::Error).1, "error");
        assert_eq!(database_and_collection("admin"), ("admin", None));
    }
}
