//! The `wirelint` command line. Every `proxy` flag can also be given as a
//! `WIRELINT_*` environment variable or as a key under `[proxy]` in the
//! config file; a flag wins over the environment, which wins over the file.

use crate::config::{self, ClientTls, ConfigError, FileConfig, Origin, ProxySettings};
use crate::proxy::uri::UpstreamUri;
use crate::proxy::Proxy;
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
    Proxy(ProxyArgs),
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
}

impl ProxyArgs {
    /// Merges flags (and their environment variables) with the config file.
    pub fn settings(&self) -> Result<(ProxySettings, Option<FileConfig>), ConfigError> {
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
        Ok((settings, file))
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
        Command::Proxy(args) => {
            let (settings, file) = match args.settings() {
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
            runtime.block_on(run_proxy(settings))
        }
    }
}

async fn run_proxy(settings: ProxySettings) -> i32 {
    let proxy = match Proxy::start(settings).await {
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
    wait_for_signal().await;
    tracing::info!("shutting down: no new connections; open ones finish what is in flight");
    let stats = proxy.shutdown().await;
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
    0
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
