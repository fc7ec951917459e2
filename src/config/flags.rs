//! `wirelint proxy`'s flags and how they merge with `WIRELINT_*`
//! environment variables (clap reads those) and the config file's `[proxy]`
//! section: a flag wins over the environment, which wins over the file.

use super::{ClientTls, ConfigError, FileConfig, Origin, ProxySection, ProxySettings};
use crate::analysis::findings::Severity;
use crate::proxy;
use clap::ValueEnum;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Level {
    Info,
    Warning,
    Error,
}

impl Level {
    pub fn severity(self) -> Severity {
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

    /// Close a client connection that takes longer than this to send one whole message, counted from its first byte (or, for the first message, from connecting); "off" to wait forever [default: 60s].
    #[arg(long, env = "WIRELINT_MESSAGE_TIMEOUT", value_name = "DURATION")]
    pub message_timeout: Option<String>,

    /// Close a connection whose upstream leaves a request unanswered this long (beyond what a streaming hello or an awaitData getMore may wait by design) [default: off].
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

    /// Memory all connections together may buffer for messages larger
    /// than 16 KiB; past it such messages wait their turn (smaller ones
    /// never wait). [default: 1GiB]
    #[arg(long, env = "WIRELINT_FORWARD_MEMORY", value_name = "SIZE")]
    pub forward_memory: Option<String>,

    /// Memory the analysis may hold: its queue and every table (patterns,
    /// shapes, namespace state, cursors, requests awaiting replies,
    /// findings, the rules' own); past it the least recently used entries
    /// are forgotten and counted. Forwarding never depends on it.
    /// [default: 256MiB; in the file: analysis_memory under [limits]]
    #[arg(long, env = "WIRELINT_ANALYSIS_MEMORY", value_name = "SIZE")]
    pub analysis_memory: Option<String>,

    /// Analyse one client connection in N even when the analysis keeps up,
    /// written "1/N" (N a power of two up to 64: "1/2", "1/4"), to cap its
    /// CPU on busy hosts; which connections is decided by a hash of each
    /// connection's id, and an analysed connection is analysed whole.
    /// Reports and /metrics say the share; call counts are estimated for
    /// the connections left out. Under overload the analysis samples
    /// further on its own. [default: "1", every connection]
    #[arg(long, env = "WIRELINT_ANALYSIS_SHARE", value_name = "1/N")]
    pub analysis_share: Option<String>,

    /// The most of wirelint's CPU time its analysis threads may take,
    /// written as a percentage ("10%"). Measured every second; past it the
    /// analysis samples whole connections as under overload (one in 2, then
    /// one in 4, …), and analyses more again once twice its work would fit
    /// with room to spare. Forwarding is never slowed. Reports and /metrics
    /// say the share analysed. [default: no cap]
    #[arg(long, env = "WIRELINT_ANALYSIS_CPU", value_name = "PERCENT")]
    pub analysis_cpu: Option<String>,

    /// Analysis threads [default: 1].
    #[arg(long, env = "WIRELINT_ANALYSIS_WORKERS", value_name = "N")]
    pub analysis_workers: Option<usize>,

    /// Forward replica-set hello replies unchanged (drivers will then find and use the members directly).
    #[arg(long, env = "WIRELINT_NO_TOPOLOGY_REWRITE")]
    pub no_topology_rewrite: bool,

    /// Forward clients' MONGODB-X509 authentication although the upstream URI gives wirelint a client certificate (tlsCertificateKeyFile): every client that reaches wirelint could then authenticate as that certificate's user. Without it, such attempts get an AuthenticationFailed error.
    #[arg(long, env = "WIRELINT_ALLOW_X509_PASSTHROUGH")]
    pub allow_x509_passthrough: bool,

    /// Write a JSON report (patterns, shapes, findings, counters) here, periodically and at shutdown.
    #[arg(long, env = "WIRELINT_REPORT", value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// How often the report file is rewritten [default: 30s].
    #[arg(long, env = "WIRELINT_REPORT_INTERVAL", value_name = "DURATION")]
    pub report_interval: Option<String>,

    /// Also write every forwarded message to this pcapng file (Wireshark opens it; `wirelint analyse FILE` analyses it again). It holds literal values, credentials in authentication messages included: off unless set, written with mode 0600.
    #[arg(long, env = "WIRELINT_CAPTURE", value_name = "FILE")]
    pub capture: Option<PathBuf>,

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

    /// Send findings (as log records) and access-pattern metrics over OTLP/HTTP (protobuf) to this OpenTelemetry Collector, e.g. http://127.0.0.1:4318. Off unless set: nothing leaves the process otherwise; shapes only, never literal values. [in the file: endpoint under [otlp]]
    #[arg(long, env = "WIRELINT_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// How databases named per test or per worker are folded into one: "auto" reads a trailing number, pytest-xdist worker (gw3), hash or UUID after `_`/`-` as a per-test part (app_test_3fa9c1d2 and app_test_77b0e4aa are app_test_*); "off" keys each database by its own name; or patterns ending in one `*` ("girder_test_*,tenant_*") fold exactly those names [default: auto].
    #[arg(
        long,
        env = "WIRELINT_FOLD_DATABASES",
        value_name = "auto|off|PATTERNS"
    )]
    pub fold_databases: Option<String>,

    /// The platform behind the upstream, for its limits and prices: "mongodb", "cosmos-ru" (Azure Cosmos DB for MongoDB, request-unit based: RU estimated per operation, pattern and request; 2 MB items), "cosmos-vcore" or "documentdb" [default: detected from the upstream's hello, else mongodb].
    #[arg(
        long,
        env = "WIRELINT_TARGET",
        value_name = "mongodb|cosmos-ru|cosmos-vcore|documentdb"
    )]
    pub target: Option<String>,

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
        let sources = Sources {
            args: self,
            section: file.as_ref().map(|f| &f.proxy),
        };
        let mut settings = sources.addresses()?;
        sources.timeouts(&mut settings.forward)?;
        sources.limits(&mut settings)?;
        sources.switches(&mut settings);
        sources.outputs(&mut settings)?;
        settings.analysis = sources.analysis(file.as_ref())?;
        settings.otlp = otlp(self, file.as_ref())?;
        let run = sources.run_options()?;
        settings.forward.tls = sources.client_tls()?;
        Ok((settings, file, run))
    }

    /// The analysis's settings alone, merged as [`ProxyArgs::settings`]
    /// merges them: what `wirelint analyse` needs, which forwards nothing
    /// and so needs no upstream.
    pub fn analysis_settings(&self) -> Result<crate::analysis::Settings, ConfigError> {
        let file = self.config.as_deref().map(FileConfig::load).transpose()?;
        let sources = Sources {
            args: self,
            section: file.as_ref().map(|f| &f.proxy),
        };
        sources.analysis(file.as_ref())
    }
}

/// Where a setting can come from: a flag (or its environment variable),
/// else the config file's `[proxy]` section.
struct Sources<'a> {
    args: &'a ProxyArgs,
    section: Option<&'a ProxySection>,
}

/// The first of flag, file, in that order, with where it came from.
macro_rules! pick {
    ($sources:expr, $field:ident, $flag:literal) => {
        $sources.pick(
            &$sources.args.$field,
            $sources.section.and_then(|s| s.$field.clone()),
            $flag,
        )
    };
}

impl Sources<'_> {
    /// `flag`'s value, else `file`'s, with where it came from (`name`: the
    /// flag's).
    fn pick<T: Clone>(
        &self,
        flag: &Option<T>,
        file: Option<T>,
        name: &'static str,
    ) -> Option<(T, Origin)> {
        match (flag, file) {
            (Some(v), _) => Some((v.clone(), Origin::Flag(name))),
            (None, Some(v)) => Some((v, self.file_origin())),
            (None, None) => None,
        }
    }

    fn file_origin(&self) -> Origin {
        Origin::File(self.args.config.clone().unwrap_or_default())
    }

    /// The settings for the upstream (required) and the listen address,
    /// every other value at its default.
    fn addresses(&self) -> Result<ProxySettings, ConfigError> {
        let (upstream, upstream_origin) =
            pick!(self, upstream, "upstream").ok_or(ConfigError::NoUpstream)?;
        let listen = pick!(self, listen, "listen")
            .map(|(v, _)| v)
            .unwrap_or_else(|| "127.0.0.1:27018".to_string());
        // Its one error is the upstream's: said where the upstream came from.
        ProxySettings::new(&listen, &upstream).map_err(|e| match e {
            ConfigError::Invalid { key, message, .. } => ConfigError::Invalid {
                origin: upstream_origin.to_string(),
                key,
                message,
            },
            other => other,
        })
    }

    fn timeouts(&self, forward: &mut proxy::Settings) -> Result<(), ConfigError> {
        forward.connect_timeout = duration(
            pick!(self, connect_timeout, "connect-timeout"),
            "connect_timeout",
            Some(forward.connect_timeout),
        )?
        .unwrap_or(forward.connect_timeout);
        forward.idle_timeout = duration(
            pick!(self, idle_timeout, "idle-timeout"),
            "idle_timeout",
            None,
        )?;
        forward.upstream_timeout = duration(
            pick!(self, upstream_timeout, "upstream-timeout"),
            "upstream_timeout",
            None,
        )?;
        forward.message_timeout = duration(
            pick!(self, message_timeout, "message-timeout"),
            "message_timeout",
            forward.message_timeout,
        )?;
        forward.shutdown_grace = duration(
            pick!(self, shutdown_grace, "shutdown-grace"),
            "shutdown_grace",
            Some(forward.shutdown_grace),
        )?
        .unwrap_or(Duration::ZERO);
        Ok(())
    }

    /// Connections, queue, memory and the analysis' share of the work.
    fn limits(&self, settings: &mut ProxySettings) -> Result<(), ConfigError> {
        if let Some((n, origin)) = pick!(self, max_connections, "max-connections") {
            if n == 0 {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    key: "max_connections".into(),
                    message: "must be at least 1".into(),
                });
            }
            settings.forward.max_connections = n;
        }
        if let Some((text, origin)) = pick!(self, forward_memory, "forward-memory") {
            settings.forward.forward_memory =
                super::parse_memory(&text, "forward_memory", &origin.to_string())?;
        }
        Ok(())
    }

    /// The analysis's settings: flags, else the file's `[proxy]` section,
    /// then what only the file can set (`file`, read from
    /// `self.args.config`).
    fn analysis(
        &self,
        file: Option<&FileConfig>,
    ) -> Result<crate::analysis::Settings, ConfigError> {
        let (args, section) = (self.args, self.section);
        let mut analysis = crate::analysis::Settings {
            enabled: !(args.no_analysis || section.and_then(|s| s.analysis) == Some(false)),
            show_values: args.show_values || section.and_then(|s| s.show_values) == Some(true),
            ..Default::default()
        };
        if let Some((n, _)) = pick!(self, analysis_queue, "analysis-queue") {
            analysis.queue_capacity = n.max(1);
        }
        if let Some((text, origin)) = pick!(self, analysis_share, "analysis-share") {
            analysis.min_sampling =
                super::parse_share(&text, "analysis_share", &origin.to_string())?;
        }
        if let Some((text, origin)) = pick!(self, analysis_cpu, "analysis-cpu") {
            analysis.cpu_share = Some(super::parse_cpu_share(
                &text,
                "analysis_cpu",
                &origin.to_string(),
            )?);
        }
        if let Some((text, origin)) = pick!(self, fold_databases, "fold-databases") {
            analysis.fold = crate::analysis::databases::Fold::parse(&text).map_err(|message| {
                ConfigError::Invalid {
                    origin: origin.to_string(),
                    key: "fold_databases".into(),
                    message,
                }
            })?;
        }
        if let Some((text, origin)) = pick!(self, target, "target") {
            analysis.target = Some(super::parse_target(&text, "target", &origin.to_string())?);
        }
        if let Some((n, _)) = pick!(self, analysis_workers, "analysis-workers") {
            analysis.workers = n.max(1);
        }
        if let (Some(file), Some(path)) = (file, &args.config) {
            file_only(file, path, &mut analysis)?;
        }
        if let Some(text) = &args.analysis_memory {
            analysis.caps.memory =
                super::parse_memory(text, "analysis-memory", "--analysis-memory")?;
        }
        Ok(analysis)
    }

    /// What is on or off: a flag turns it so, else the file may.
    fn switches(&self, settings: &mut ProxySettings) {
        let (args, section) = (self.args, self.section);
        settings.forward.allow_x509_passthrough = args.allow_x509_passthrough
            || section.and_then(|s| s.allow_x509_passthrough) == Some(true);
        settings.forward.rewrite_topology =
            !(args.no_topology_rewrite || section.and_then(|s| s.rewrite_topology) == Some(false));
    }

    /// The report file and the admin endpoints.
    fn outputs(&self, settings: &mut ProxySettings) -> Result<(), ConfigError> {
        settings.report = pick!(self, report, "report").map(|(v, _)| v);
        settings.capture = pick!(self, capture, "capture").map(|(v, _)| v);
        settings.report_interval = duration(
            pick!(self, report_interval, "report-interval"),
            "report_interval",
            Some(settings.report_interval),
        )?
        .unwrap_or(settings.report_interval);
        let admin = pick!(self, admin, "admin");
        settings.admin = admin.as_ref().map(|(v, _)| v.clone());
        settings.admin_token = match pick!(self, admin_token, "admin-token") {
            Some((token, origin)) if token.trim().is_empty() => {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    key: "admin_token".into(),
                    message: "is empty, which would turn the token check off: give a token, or unset it to serve the admin endpoints without one (on loopback)".into(),
                })
            }
            other => other.map(|(v, _)| v),
        };
        // Reachable from other hosts, the report and the live findings
        // (collection and field names, query shapes) need a token.
        if let Some((address, origin)) = admin {
            if settings.admin_token.is_none() && !on_loopback(&address) {
                return Err(ConfigError::Invalid {
                    origin: origin.to_string(),
                    key: "admin".into(),
                    message: format!(
                        "is {address}, reachable from other hosts, and no admin token is set: \
                         set WIRELINT_ADMIN_TOKEN (or admin_token under [proxy]), or serve the \
                         admin endpoints on loopback (127.0.0.1:PORT)"
                    ),
                });
            }
        }
        Ok(())
    }

    fn run_options(&self) -> Result<RunOptions, ConfigError> {
        let fail_on = match (
            self.args.fail_on,
            self.section.and_then(|s| s.fail_on.clone()),
        ) {
            (Some(level), _) => Some(level.severity()),
            (None, Some(text)) => {
                Some(Severity::parse(&text).ok_or_else(|| ConfigError::Invalid {
                    origin: self.file_origin().to_string(),
                    key: "fail_on".into(),
                    message: format!("must be \"info\", \"warning\" or \"error\", not {text:?}"),
                })?)
            }
            (None, None) => None,
        };
        let summary_interval = duration(
            pick!(self, summary_interval, "summary-interval"),
            "summary_interval",
            Some(Duration::from_secs(30)),
        )?;
        Ok(RunOptions {
            fail_on,
            summary_interval,
        })
    }

    /// The proxy's own TLS for clients: certificate and key together, and
    /// client certificates checked only with them.
    fn client_tls(&self) -> Result<Option<ClientTls>, ConfigError> {
        let cert = pick!(self, tls_cert, "tls-cert");
        let key = pick!(self, tls_key, "tls-key");
        let client_ca = pick!(self, tls_client_ca, "tls-client-ca").map(|(v, _)| v);
        match (cert, key) {
            (Some((cert, _)), Some((key, _))) => Ok(Some(ClientTls { cert, key, client_ca })),
            (None, None) if client_ca.is_none() => Ok(None),
            (Some((_, origin)), None) | (None, Some((_, origin))) => Err(ConfigError::Invalid {
                origin: origin.to_string(),
                key: "tls_cert/tls_key".into(),
                message: "must be given together".into(),
            }),
            (None, None) => Err(ConfigError::Invalid {
                origin: "tls_client_ca".into(),
                key: "tls_client_ca".into(),
                message: "needs tls_cert and tls_key (client certificates are checked during the proxy's own TLS handshake)".into(),
            }),
        }
    }
}

/// `--otlp-endpoint` (or `WIRELINT_OTLP_ENDPOINT`), else `[otlp]` of the
/// file; the other `[otlp]` keys apply only with an endpoint.
fn otlp(
    args: &ProxyArgs,
    file: Option<&FileConfig>,
) -> Result<Option<crate::admin::otlp::Settings>, ConfigError> {
    let path = args.config.clone().unwrap_or_default();
    let section = file.map(|f| &f.otlp);
    let in_file = || format!("{} [otlp]", path.display());
    let (text, origin, key) = match (
        &args.otlp_endpoint,
        section.and_then(|s| s.endpoint.clone()),
    ) {
        (Some(flag), _) => (
            flag.clone(),
            Origin::Flag("otlp-endpoint").to_string(),
            "otlp_endpoint",
        ),
        (None, Some(text)) => (text, in_file(), "endpoint"),
        (None, None) => return Ok(None),
    };
    let endpoint =
        crate::admin::otlp::check_endpoint(&text).map_err(|message| ConfigError::Invalid {
            origin,
            key: key.into(),
            message,
        })?;
    let mut settings = crate::admin::otlp::Settings::new(endpoint);
    if let Some(section) = section {
        if let Some(text) = &section.metrics_interval {
            let origin = Origin::File(path.clone());
            settings.metrics_interval = super::parse_duration(text, &origin, "metrics_interval")
                .map_err(|e| match e {
                    ConfigError::Invalid { key, message, .. } => ConfigError::Invalid {
                        origin: in_file(),
                        key,
                        message,
                    },
                    other => other,
                })?
                .ok_or_else(|| ConfigError::Invalid {
                    origin: in_file(),
                    key: "metrics_interval".into(),
                    message:
                        "cannot be off while an endpoint is set; give a duration such as \"30s\""
                            .into(),
                })?;
        }
        if let Some(id) = &section.service_instance_id {
            if id.trim().is_empty() {
                return Err(ConfigError::Invalid {
                    origin: in_file(),
                    key: "service_instance_id".into(),
                    message: "is empty; give an id, or leave it out for a fresh one per process"
                        .into(),
                });
            }
            settings.service_instance_id = Some(id.trim().to_string());
        }
    }
    Ok(Some(settings))
}

/// A duration setting's value: parsed where it was given, else `default`.
fn duration(
    value: Option<(String, Origin)>,
    key: &str,
    default: Option<Duration>,
) -> Result<Option<Duration>, ConfigError> {
    match value {
        Some((v, origin)) => super::parse_duration(&v, &origin, key),
        None => Ok(default),
    }
}

/// What only the config file (at `path`) can set: rules, limits, the
/// analysis memory and partition keys (their kind by default Cosmos DB's
/// under `analysis.target` cosmos-ru, which must be known by then).
pub(super) fn file_only(
    file: &FileConfig,
    path: &std::path::Path,
    analysis: &mut crate::analysis::Settings,
) -> Result<(), ConfigError> {
    analysis.rules = super::rule_settings(file, path)?;
    file.limits.apply(&mut analysis.caps);
    if let Some(text) = &file.limits.analysis_memory {
        analysis.caps.memory =
            super::parse_memory(text, "limits.analysis_memory", &path.display().to_string())?;
    }
    // Under Cosmos DB (RU), a key is placed by Cosmos DB's rules unless
    // the file says otherwise.
    let kind = match analysis.target {
        Some(crate::analysis::target::Target::CosmosRu) => {
            crate::analysis::partition::KeyKind::Cosmos
        }
        _ => crate::analysis::partition::KeyKind::Ranged,
    };
    analysis.partition_keys = file.partition_keys_of_kind(&path.display().to_string(), kind)?;
    analysis.request_units = file.request_units(&path.display().to_string())?;
    for (ns, key, _) in &analysis.partition_keys {
        if !ns.contains('.') || key.iter().any(|p| p.is_empty()) {
            return Err(ConfigError::Invalid {
                origin: path.display().to_string(),
                key: format!("collections.\"{ns}\".partition_key"),
                message: "needs a \"db.collection\" name and non-empty paths, e.g. [collections.\"blog.posts\"] partition_key = [\"postId\"]".into(),
            });
        }
    }
    Ok(())
}

/// Whether an admin address (`HOST:PORT`) is reachable from this host only:
/// a loopback IP, or `localhost`.
fn on_loopback(address: &str) -> bool {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments with an upstream and the config file `w.toml` holding
    /// `text`.
    fn with_file(text: &str) -> (tempfile::TempDir, ProxyArgs) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        std::fs::write(&path, text).unwrap();
        let args = ProxyArgs {
            upstream: Some("mongodb://127.0.0.1:27017".into()),
            config: Some(path),
            ..Default::default()
        };
        (dir, args)
    }

    /// OTLP is off unless an endpoint is given; the file's `[otlp]` gives
    /// one, the flag wins over it, and the file's other keys apply to
    /// either.
    #[test]
    fn otlp_is_off_unless_an_endpoint_is_given() {
        let (_dir, args) = with_file("");
        assert_eq!(args.settings().unwrap().0.otlp, None);
        let (_dir, mut args) = with_file(
            "[otlp]\nendpoint = \"http://collector:4318/\"\nmetrics_interval = \"5s\"\nservice_instance_id = \"edge-1\"\n",
        );
        let otlp = args.settings().unwrap().0.otlp.unwrap();
        assert_eq!(otlp.endpoint, "http://collector:4318");
        assert_eq!(otlp.metrics_interval, Duration::from_secs(5));
        assert_eq!(otlp.service_instance_id.as_deref(), Some("edge-1"));
        args.otlp_endpoint = Some("http://127.0.0.1:4318".into());
        let otlp = args.settings().unwrap().0.otlp.unwrap();
        assert_eq!(otlp.endpoint, "http://127.0.0.1:4318");
        assert_eq!(otlp.metrics_interval, Duration::from_secs(5));
    }

    /// A bad `[otlp]` value names the file, the section and the key; a bad
    /// flag names the flag and its variable.
    #[test]
    fn bad_otlp_values_name_the_key_and_where() {
        for (text, key) in [
            ("[otlp]\nendpoint = \"collector:4318\"\n", "`endpoint`"),
            (
                "[otlp]\nendpoint = \"http://c:4318\"\nmetrics_interval = \"soon\"\n",
                "`metrics_interval`",
            ),
            (
                "[otlp]\nendpoint = \"http://c:4318\"\nmetrics_interval = \"off\"\n",
                "`metrics_interval`",
            ),
            (
                "[otlp]\nendpoint = \"http://c:4318\"\nservice_instance_id = \" \"\n",
                "`service_instance_id`",
            ),
            ("[otlp]\nendpont = \"http://c:4318\"\n", "endpont"),
        ] {
            let (_dir, args) = with_file(text);
            let err = args.settings().unwrap_err().to_string();
            assert!(err.contains("w.toml") && err.contains(key), "{text}: {err}");
            if key.starts_with('`') {
                assert!(err.contains("[otlp]"), "{err}");
            }
        }
        let (_dir, mut args) = with_file("");
        args.otlp_endpoint = Some("https://collector:4318".into());
        let err = args.settings().unwrap_err().to_string();
        assert!(
            err.contains("--otlp-endpoint (or WIRELINT_OTLP_ENDPOINT)") && err.contains("https"),
            "{err}"
        );
    }

    /// The admin endpoints need a token only where other hosts reach them.
    #[test]
    fn admin_off_loopback_needs_a_token() {
        for (admin, token, ok) in [
            ("127.0.0.1:9090", None, true),
            ("[::1]:9090", None, true),
            ("localhost:9090", None, true),
            ("0.0.0.0:9090", None, false),
            ("10.1.2.3:9090", None, false),
            ("0.0.0.0:9090", Some("s3cret"), true),
        ] {
            let (_dir, mut args) = with_file("");
            args.admin = Some(admin.into());
            args.admin_token = token.map(String::from);
            let got = args.settings();
            assert_eq!(got.is_ok(), ok, "{admin} {token:?}");
            if let Err(err) = got {
                let err = err.to_string();
                assert!(
                    err.contains("--admin") && err.contains("WIRELINT_ADMIN_TOKEN"),
                    "{err}"
                );
            }
        }
        let (_dir, args) = with_file("[proxy]\nadmin = \"0.0.0.0:9090\"\n");
        let err = args.settings().unwrap_err().to_string();
        assert!(err.contains("w.toml") && err.contains("`admin`"), "{err}");
    }

    /// The target: the flag wins over the file's `[proxy] target`; a name
    /// wirelint does not know names the flag (or the file and key) and
    /// lists the ones it knows; unset, it is left to detection.
    #[test]
    fn target_from_flag_or_file() {
        use crate::analysis::target::Target;
        let (_dir, args) = with_file("");
        assert_eq!(args.settings().unwrap().0.analysis.target, None);
        let (_dir, mut args) = with_file("[proxy]\ntarget = \"documentdb\"\n");
        assert_eq!(
            args.settings().unwrap().0.analysis.target,
            Some(Target::DocumentDb)
        );
        args.target = Some("cosmos-ru".into());
        assert_eq!(
            args.settings().unwrap().0.analysis.target,
            Some(Target::CosmosRu)
        );
        args.target = Some("azure".into());
        let err = args.settings().unwrap_err().to_string();
        assert!(
            err.contains("--target (or WIRELINT_TARGET)")
                && err.contains("\"azure\"")
                && err.contains("\"cosmos-vcore\""),
            "{err}"
        );
        let (_dir, args) = with_file("[proxy]\ntarget = \"cosmosdb\"\n");
        let err = args.settings().unwrap_err().to_string();
        assert!(err.contains("w.toml") && err.contains("`target`"), "{err}");
    }

    /// The analysis alone (`wirelint analyse`) needs no upstream and is
    /// merged as the proxy's is: flags over the file's `[proxy]`, then
    /// rules, limits and partition keys from the file.
    #[test]
    fn the_analysis_alone_needs_no_upstream() {
        let (_dir, mut args) = with_file(
            "[proxy]\ntarget = \"cosmos-ru\"\nfold_databases = \"off\"\n\
             [rules.WL504]\nenabled = false\n\
             [collections.\"shop.orders\"]\npartition_key = [\"customerId\"]\n",
        );
        args.upstream = None;
        args.show_values = true;
        assert!(matches!(args.settings(), Err(ConfigError::NoUpstream)));
        let analysis = args.analysis_settings().unwrap();
        args.upstream = Some("mongodb://127.0.0.1:27017".into());
        let proxy = args.settings().unwrap().0.analysis;
        assert_eq!(format!("{analysis:?}"), format!("{proxy:?}"));
        assert_eq!(
            analysis.target,
            Some(crate::analysis::target::Target::CosmosRu)
        );
        assert!(analysis.show_values);
        assert_eq!(analysis.partition_keys.len(), 1);
        assert_ne!(
            format!("{:?}", analysis.rules),
            format!("{:?}", crate::rules::RuleSettings::default())
        );
    }
}
