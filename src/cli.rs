//! The `wirelint` command line. Every `proxy` flag can also be given as a
//! `WIRELINT_*` environment variable or as a key under `[proxy]` in the
//! config file; a flag wins over the environment, which wins over the file.

use crate::config::{self, ClientTls, ConfigError, FileConfig, Origin, ProxySettings};
use crate::proxy::uri::UpstreamUri;
use crate::proxy::Proxy;
use crate::report::Report;
use crate::rules::Severity;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "wirelint",
    version,
    about = "A MongoDB wire-protocol proxy that flags data-modelling mistakes in live traffic",
    long_about = "wirelint sits between your application and its MongoDB-compatible database \
(MongoDB, Azure Cosmos DB for MongoDB, DocumentDB, FerretDB). Point the application's \
connection string at wirelint instead of the database: every byte is forwarded unchanged, \
and the queries and documents going by are analysed off the hot path.",
    after_help = "Example:\n  wirelint proxy --listen 127.0.0.1:27018 --upstream mongodb://127.0.0.1:27017\n  \
then connect your application to mongodb://127.0.0.1:27018/\n\nLogging: RUST_LOG (e.g. RUST_LOG=wirelint=debug) sets the level."
)]
pub struct Cli {
    /// Log line format.
    #[arg(long, global = true, value_enum, env = "WIRELINT_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the proxy in front of a MongoDB-compatible backend.
    #[command(
        long_about = "Run the proxy. Clients connect to --listen; each client connection gets its own \
connection to the upstream, and the original bytes are forwarded both ways. When the upstream is a \
replica set, wirelint connects to its primary and presents itself to drivers as a router, so drivers \
with default options keep talking to wirelint (no directConnection needed)."
    )]
    Proxy(Box<ProxyArgs>),

    /// Print a report written by `wirelint proxy --report FILE`.
    Report(ReportArgs),

    /// Compare two reports pattern by pattern (round trips, latency, partitions, findings).
    Diff {
        /// The report before the change.
        before: PathBuf,
        /// The report after the change.
        after: PathBuf,
    },

    /// List the rules, their default severity, thresholds and sources.
    Rules,

    /// Print the partition keys wirelint knows and where each came from (the config file, and what a report learnt from traffic).
    Keys {
        /// A wirelint.toml with [collections."db.coll"] partition_key = [...].
        #[arg(long, env = "WIRELINT_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
        /// A report written by `wirelint proxy --report`: keys learnt from shardCollection / customAction.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
    },
}

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// A JSON report written by `wirelint proxy --report FILE`.
    pub file: PathBuf,
    /// Output format: the access-pattern table and findings as text or Markdown, SARIF 2.1.0 for code scanning, or the JSON itself.
    #[arg(long, value_enum, default_value = "text")]
    pub format: ReportFormat,
    /// Exit with status 3 when a finding at or above this severity is in the report.
    #[arg(long, value_enum)]
    pub fail_on: Option<Level>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Text,
    Markdown,
    Sarif,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Level {
    Info,
    Warning,
    Error,
}

impl Level {
    fn severity(self) -> Severity {
        match self {
            Level::Info => Severity::Info,
            Level::Warning => Severity::Warning,
            Level::Error => Severity::Error,
        }
    }
}

#[derive(clap::Args, Debug, Default)]
pub struct ProxyArgs {
    /// Address to listen on for clients [default: 127.0.0.1:27018].
    #[arg(long, env = "WIRELINT_LISTEN", value_name = "HOST:PORT")]
    pub listen: Option<String>,

    /// The backend, as a MongoDB connection string: mongodb://host:port[,host:port…]/?replicaSet=…&tls=true&tlsCAFile=…
    #[arg(long, env = "WIRELINT_UPSTREAM", value_name = "URI")]
    pub upstream: Option<String>,

    /// A wirelint.toml: [proxy] keys mirror these flags; [collections.*] and [rules.*] tune analysis.
    #[arg(long, env = "WIRELINT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// PEM certificate chain: clients must connect with TLS (tls=true).
    #[arg(
        long,
        env = "WIRELINT_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for --tls-cert.
    #[arg(
        long,
        env = "WIRELINT_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// PEM CA bundle: clients must present a certificate signed by it.
    #[arg(long, env = "WIRELINT_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,

    /// Client connections held at once; further ones are refused and logged [default: 10000].
    #[arg(long, env = "WIRELINT_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,

    /// Time allowed to connect (and TLS-handshake) to the upstream [default: 5s].
    #[arg(long, env = "WIRELINT_CONNECT_TIMEOUT", value_name = "DURATION")]
    pub connect_timeout: Option<String>,

    /// Close connections with no traffic for this long; "off" to keep them [default: off].
    #[arg(long, env = "WIRELINT_IDLE_TIMEOUT", value_name = "DURATION")]
    pub idle_timeout: Option<String>,

    /// Close a connection whose upstream leaves a request unanswered this long [default: off].
    #[arg(long, env = "WIRELINT_UPSTREAM_TIMEOUT", value_name = "DURATION")]
    pub upstream_timeout: Option<String>,

    /// On SIGINT/SIGTERM, time open connections get to finish in-flight requests [default: 10s].
    #[arg(long, env = "WIRELINT_SHUTDOWN_GRACE", value_name = "DURATION")]
    pub shutdown_grace: Option<String>,

    /// Forward only; do not analyse (for measuring the proxy's own cost).
    #[arg(long, env = "WIRELINT_NO_ANALYSIS")]
    pub no_analysis: bool,

    /// Messages that may wait for analysis; beyond it they are dropped and counted, never waited for [default: 16384].
    #[arg(long, env = "WIRELINT_ANALYSIS_QUEUE", value_name = "N")]
    pub analysis_queue: Option<usize>,

    /// Analysis threads [default: 1].
    #[arg(long, env = "WIRELINT_ANALYSIS_WORKERS", value_name = "N")]
    pub analysis_workers: Option<usize>,

    /// Forward replica-set hello replies unchanged (drivers will then find and use the members directly).
    #[arg(long, env = "WIRELINT_NO_TOPOLOGY_REWRITE")]
    pub no_topology_rewrite: bool,

    /// Write a JSON report (patterns, shapes, findings, counters) here, periodically and at shutdown.
    #[arg(long, env = "WIRELINT_REPORT", value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// How often the report file is rewritten [default: 30s].
    #[arg(long, env = "WIRELINT_REPORT_INTERVAL", value_name = "DURATION")]
    pub report_interval: Option<String>,

    /// At shutdown, exit with status 3 if a finding at or above this severity exists (for CI).
    #[arg(long, env = "WIRELINT_FAIL_ON", value_enum)]
    pub fail_on: Option<Level>,

    /// Serve /metrics, /findings, /patterns and /healthz over HTTP on this address (e.g. 127.0.0.1:9090).
    #[arg(long, env = "WIRELINT_ADMIN", value_name = "HOST:PORT")]
    pub admin: Option<String>,

    /// Require `Authorization: Bearer TOKEN` on the admin endpoints (all but /healthz). Prefer the environment variable: a command line is visible to other users.
    #[arg(
        long,
        env = "WIRELINT_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub admin_token: Option<String>,

    /// Allow literal values from the traffic (e.g. example ids) in findings. Off by default: outputs carry shapes only.
    #[arg(long, env = "WIRELINT_SHOW_VALUES")]
    pub show_values: bool,

    /// How often a one-line summary (ops/s, patterns, findings, drops) is printed; "off" for none [default: 30s].
    #[arg(long, env = "WIRELINT_SUMMARY_INTERVAL", value_name = "DURATION")]
    pub summary_interval: Option<String>,
}

/// What the CLI does around the proxy, beyond its settings.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub fail_on: Option<Severity>,
    pub summary_interval: Option<Duration>,
}

impl ProxyArgs {
    /// Merges flags (and their environment variables) with the config file.
    pub fn settings(&self) -> Result<(ProxySettings, Option<FileConfig>, RunOptions), ConfigError> {
        let file = self.config.as_deref().map(FileConfig::load).transpose()?;
        let section = file.as_ref().map(|f| &f.proxy);
        let file_origin = || Origin::File(self.config.clone().unwrap_or_default());

        // The first of flag, file, in that order, with where it came from.
        macro_rules! pick {
            ($field:ident, $flag:literal) => {
                match (&self.$field, section.and_then(|s| s.$field.clone())) {
                    (Some(v), _) => Some((v.clone(), Origin::Flag($flag))),
                    (None, Some(v)) => Some((v, file_origin())),
                    (None, None) => None,
                }
            };
        }

        let (upstream, upstream_origin) =
            pick!(upstream, "upstream").ok_or(ConfigError::NoUpstream)?;
        let upstream_text = upstream.clone();
        let upstream = UpstreamUri::parse(&upstream).map_err(|e| ConfigError::Invalid {
            origin: upstream_origin.to_string(),
            key: "upstream".into(),
            message: e.to_string(),
        })?;
        let listen = pick!(listen, "listen")
            .map(|(v, _)| v)
            .unwrap_or_else(|| "127.0.0.1:27018".to_string());
        let mut settings = ProxySettings::new(&listen, "mongodb://placeholder")?;
        settings.upstream = upstream;
        settings.upstream_raw = upstream_text;

        let duration =
            |value: Option<(String, Origin)>, key: &str, default: Option<Duration>| match value {
                Some((v, origin)) => config::parse_duration(&v, &origin, key),
                None => Ok(default),
            };
        settings.connect_timeout = duration(
            pick!(connect_timeout, "connect-timeout"),
            "connect_timeout",
            Some(settings.connect_timeout),
        )?
        .unwrap_or(settings.connect_timeout);
        settings.idle_timeout =
            duration(pick!(idle_timeout, "idle-timeout"), "idle_timeout", None)?;
        settings.upstream_timeout = duration(
            pick!(upstream_timeout, "upstream-timeout"),
            "upstream_timeout",
            None,
        )?;
        settings.shutdown_grace = duration(
            pick!(shutdown_grace, "shutdown-grace"),
            "shutdown_grace",
            Some(settings.shutdown_grace),
        )?
        .unwrap_or(Duration::ZERO);

        if let Some((n, origin)) = pick!(max_connections, "max-connections") {
            if n == 0 {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    key: "max_connections".into(),
                    message: "must be at least 1".into(),
                });
            }
            settings.max_connections = n;
        }
        if let Some((n, _)) = pick!(analysis_queue, "analysis-queue") {
            settings.analysis.queue_capacity = n.max(1);
        }
        if let Some((n, _)) = pick!(analysis_workers, "analysis-workers") {
            settings.analysis.workers = n.max(1);
        }
        settings.analysis.enabled =
            !(self.no_analysis || section.and_then(|s| s.analysis) == Some(false));
        settings.rewrite_topology =
            !(self.no_topology_rewrite || section.and_then(|s| s.rewrite_topology) == Some(false));
        settings.analysis.show_values =
            self.show_values || section.and_then(|s| s.show_values) == Some(true);
        settings.report = pick!(report, "report").map(|(v, _)| v);
        settings.report_interval = duration(
            pick!(report_interval, "report-interval"),
            "report_interval",
            Some(settings.report_interval),
        )?
        .unwrap_or(settings.report_interval);
        settings.admin = pick!(admin, "admin").map(|(v, _)| v);
        settings.admin_token = pick!(admin_token, "admin-token").map(|(v, _)| v);
        if let (Some(file), Some(path)) = (&file, &self.config) {
            settings.analysis.rules = crate::rules::settings_from_config(file, path)?;
            file.limits.apply(&mut settings.analysis.caps);
            settings.analysis.partition_keys = file.partition_keys();
            for (ns, key) in &settings.analysis.partition_keys {
                if !ns.contains('.') || key.iter().any(|p| p.is_empty()) {
                    return Err(ConfigError::Invalid {
                        origin: path.display().to_string(),
                        key: format!("collections.\"{ns}\".partition_key"),
                        message: "needs a \"db.collection\" name and non-empty paths, e.g. [collections.\"blog.posts\"] partition_key = [\"postId\"]".into(),
                    });
                }
            }
        }
        let fail_on = match (self.fail_on, section.and_then(|s| s.fail_on.clone())) {
            (Some(level), _) => Some(level.severity()),
            (None, Some(text)) => {
                Some(Severity::parse(&text).ok_or_else(|| ConfigError::Invalid {
                    origin: file_origin().to_string(),
                    key: "fail_on".into(),
                    message: format!("must be \"info\", \"warning\" or \"error\", not {text:?}"),
                })?)
            }
            (None, None) => None,
        };
        let summary_interval = duration(
            pick!(summary_interval, "summary-interval"),
            "summary_interval",
            Some(Duration::from_secs(30)),
        )?;
        let run = RunOptions {
            fail_on,
            summary_interval,
        };

        let cert = pick!(tls_cert, "tls-cert");
        let key = pick!(tls_key, "tls-key");
        let client_ca = pick!(tls_client_ca, "tls-client-ca").map(|(v, _)| v);
        settings.tls = match (cert, key) {
            (Some((cert, _)), Some((key, _))) => Some(ClientTls { cert, key, client_ca }),
            (None, None) if client_ca.is_none() => None,
            (Some((_, origin)), None) | (None, Some((_, origin))) => {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    key: "tls_cert/tls_key".into(),
                    message: "must be given together".into(),
                })
            }
            (None, None) => {
                return Err(ConfigError::Invalid {
                    origin: "tls_client_ca".into(),
                    key: "tls_client_ca".into(),
                    message: "needs tls_cert and tls_key (client certificates are checked during the proxy's own TLS handshake)".into(),
                })
            }
        };
        Ok((settings, file, run))
    }
}

/// Sets up logging: `RUST_LOG` for the level (default `info` for wirelint),
/// text or JSON lines on stderr.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("wirelint=info,warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
    };
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match &cli.command {
        Command::Report(args) => report_command(args),
        Command::Diff { before, after } => match (Report::load(before), Report::load(after)) {
            (Ok(a), Ok(b)) => {
                print!("{}", crate::report::diff::diff(&a, &b));
                0
            }
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("wirelint: {e}");
                2
            }
        },
        Command::Keys { config, report } => keys_command(config.as_deref(), report.as_deref()),
        Command::Rules => {
            for m in crate::rules::catalogue() {
                println!(
                    "{} {} [{}]\n  {}\n  → {}\n  source: {} · {}",
                    m.id,
                    m.name,
                    m.severity.as_str(),
                    m.summary,
                    m.advice,
                    m.seed,
                    m.docs_path()
                );
                for t in m.thresholds {
                    println!("  {} = {} ({})", t.name, t.default, t.help);
                }
                println!();
            }
            0
        }
        Command::Proxy(args) => {
            let (mut settings, file, run) = match args.settings() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("wirelint: {e}");
                    return 2;
                }
            };
            let format = match (
                cli.log_format,
                file.as_ref().and_then(|f| f.proxy.log_format.as_deref()),
            ) {
                (Some(f), _) => f,
                (None, Some("json")) => LogFormat::Json,
                (None, Some("text") | None) => LogFormat::Text,
                (None, Some(other)) => {
                    eprintln!(
                        "wirelint: {} [proxy]: `log_format` must be \"text\" or \"json\", not {other:?}",
                        args.config.as_deref().unwrap_or(std::path::Path::new("config")).display()
                    );
                    return 2;
                }
            };
            init_logging(format);
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("wirelint: cannot start the async runtime: {e}");
                    return 1;
                }
            };
            settings.analysis.live = Some(crate::report::live::print_finding);
            runtime.block_on(run_proxy(settings, run))
        }
    }
}

fn keys_command(config: Option<&std::path::Path>, report: Option<&std::path::Path>) -> i32 {
    use crate::analysis::partition::{KeySource, PartitionKey};
    let mut keys: std::collections::BTreeMap<String, PartitionKey> = Default::default();
    if let Some(path) = report {
        match Report::load(path) {
            Ok(r) => keys.extend(r.partition_keys),
            Err(e) => {
                eprintln!("wirelint: {e}");
                return 2;
            }
        }
    }
    if let Some(path) = config {
        match FileConfig::load(path) {
            Ok(file) => {
                for (ns, paths) in file.partition_keys() {
                    keys.insert(
                        ns,
                        PartitionKey {
                            paths,
                            source: KeySource::Config,
                        },
                    );
                }
            }
            Err(e) => {
                eprintln!("wirelint: {e}");
                return 2;
            }
        }
    }
    if config.is_none() && report.is_none() {
        eprintln!("wirelint: give --config FILE and/or --report FILE");
        return 2;
    }
    if keys.is_empty() {
        println!("no partition keys known: set them in the config file ([collections.\"db.coll\"] partition_key = [\"field\"]), or run traffic that creates sharded collections");
    }
    for (ns, key) in keys {
        println!(
            "{ns:<40} [{}]  from {}",
            key.paths.join(", "),
            key.source.describe()
        );
    }
    0
}

fn report_command(args: &ReportArgs) -> i32 {
    let report = match Report::load(&args.file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wirelint: {e}");
            return 2;
        }
    };
    match args.format {
        ReportFormat::Text => print!("{}", crate::report::table::text(&report)),
        ReportFormat::Markdown => print!("{}", crate::report::table::markdown(&report)),
        ReportFormat::Sarif => println!(
            "{}",
            serde_json::to_string_pretty(&crate::report::sarif::sarif(&report)).unwrap_or_default()
        ),
        ReportFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ),
    }
    match (args.fail_on, report.worst()) {
        (Some(level), Some(worst)) if worst >= level.severity() => 3,
        _ => 0,
    }
}

async fn run_proxy(settings: ProxySettings, run: RunOptions) -> i32 {
    let signal = shutdown_signal();
    let mut proxy = match Proxy::start(settings).await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("{e}");
            return 1;
        }
    };
    tracing::info!(
        listen = %proxy.local_addr(),
        upstream = %proxy.upstream(),
        "wirelint is forwarding; connect your application to {}",
        proxy.connection_string()
    );
    let summary = run.summary_interval.map(|every| {
        let observed = proxy.knowledge();
        let stats_source = proxy.stats_handle();
        tokio::spawn(async move {
            let mut last = stats_source.snapshot().requests_forwarded;
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let now = stats_source.snapshot();
                let (patterns, findings) = {
                    let k = observed.lock().unwrap_or_else(|p| p.into_inner());
                    (k.patterns.patterns.len(), k.findings.len())
                };
                eprintln!(
                    "{}",
                    crate::report::live::summary_line(
                        (now.requests_forwarded - last) as f64 / every.as_secs_f64(),
                        patterns,
                        findings,
                        now.analysis_dropped
                    )
                );
                last = now.requests_forwarded;
            }
        })
    });
    signal.await;
    if let Some(task) = summary {
        task.abort();
    }
    tracing::info!("shutting down: no new connections; open ones finish what is in flight");
    let findings_worst = |p: &Proxy| p.findings().iter().map(|f| f.severity).max();
    let stats = proxy.stop().await;
    let worst = findings_worst(&proxy);
    tracing::info!(
        connections = stats.connections_accepted,
        requests = stats.requests_forwarded,
        replies = stats.replies_forwarded,
        analysis_dropped = stats.analysis_dropped,
        "stopped"
    );
    if let Ok(json) = serde_json::to_string(&stats) {
        tracing::debug!("final counters: {json}");
    }
    match (run.fail_on, worst) {
        (Some(level), Some(worst)) if worst >= level => {
            eprintln!(
                "wirelint: findings at or above {} (--fail-on): exiting with status 3",
                level.as_str()
            );
            3
        }
        _ => 0,
    }
}

/// Listens for SIGINT and SIGTERM from the moment it is created (so a
/// signal that comes early still means "shut down gracefully").
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            let recv = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = recv(term) => {}
                _ = recv(int) => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
