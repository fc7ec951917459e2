//! Settings: the `wirelint.toml` file, and how it merges with flags and
//! `WIRELINT_*` environment variables (flag > environment > file > default).
//!
//! Unknown keys are errors that name the key and the file: a typo in a config
//! that silently falls back to a default is worse than no config at all.

mod flags;

pub use flags::{Level, ProxyArgs, RunOptions};

use crate::analysis::{
    self, findings::Severity, partition::KeyKind, rule::RuleOverrides, rule::RuleSettings,
};
pub use crate::proxy::tls::ClientTls;
use crate::proxy::{self, uri::UpstreamUri};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole `wirelint.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub proxy: ProxySection,
    /// Per-namespace settings, keyed by `"db.collection"`.
    #[serde(default)]
    pub collections: BTreeMap<String, CollectionSection>,
    /// Per-rule settings, keyed by rule id (`WL102`).
    #[serde(default)]
    pub rules: BTreeMap<String, RuleSection>,
    /// Bounds on what the analysis remembers.
    #[serde(default)]
    pub limits: LimitsSection,
    /// OTLP export of findings and pattern metrics (off unless `endpoint`
    /// is set).
    #[serde(default)]
    pub otlp: OtlpSection,
}

/// `[otlp]`: where to send findings (as log records) and pattern metrics
/// over OTLP/HTTP. Nothing is sent without an `endpoint`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpSection {
    /// The collector's OTLP/HTTP base URL, `"http://127.0.0.1:4318"`
    /// (`--otlp-endpoint`, `WIRELINT_OTLP_ENDPOINT`).
    pub endpoint: Option<String>,
    /// How often pattern metrics are sent [default: 30s].
    pub metrics_interval: Option<String>,
    /// `service.instance.id` [default: a fresh id per process].
    pub service_instance_id: Option<String>,
}

/// `[limits]`: the memory budget of the analysis and its LRU caps (memory
/// stays flat however long the proxy runs; the least recently used entries
/// are forgotten).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Bytes every analysis table may hold together: `"256MiB"`, `"1GiB"`.
    pub analysis_memory: Option<String>,
    pub namespaces: Option<usize>,
    pub paths_per_namespace: Option<usize>,
    pub documents_per_namespace: Option<usize>,
}

/// A size such as `256MiB`, `64 MB` or `1gib`, at least
/// `budget::MIN_ANALYSIS_MEMORY`; `key` and `origin` name it in errors.
pub fn parse_memory(text: &str, key: &str, origin: &str) -> Result<usize, ConfigError> {
    use analysis::budget::MIN_ANALYSIS_MEMORY;
    let invalid = |message: String| ConfigError::Invalid {
        origin: origin.to_string(),
        key: key.to_string(),
        message,
    };
    let size: bytesize::ByteSize = text.trim().parse().map_err(|e| {
        invalid(format!(
            "{text:?} is not a size ({e}); write it as \"256MiB\", \"1GiB\" or a number of bytes"
        ))
    })?;
    let bytes = usize::try_from(size.as_u64()).unwrap_or(usize::MAX);
    if bytes < MIN_ANALYSIS_MEMORY {
        return Err(invalid(format!(
            "{text:?} is below the smallest budget, {} MiB",
            MIN_ANALYSIS_MEMORY >> 20
        )));
    }
    Ok(bytes)
}

/// `analysis_share`: "1" or "1/N" with N a power of two up to one
/// connection in 2^[`analysis::engine::MAX_SAMPLING_LEVEL`]; the sampling
/// level it stands for (N = 2^level).
pub fn parse_share(text: &str, key: &str, origin: &str) -> Result<u8, ConfigError> {
    let max = 1u32 << analysis::engine::MAX_SAMPLING_LEVEL;
    let trimmed = text.trim();
    let n = match trimmed.split_once('/') {
        None if trimmed == "1" => Some(1),
        Some((one, n)) if one.trim() == "1" => n.trim().parse::<u32>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n.is_power_of_two() && n <= max => Ok(n.trailing_zeros() as u8),
        _ => Err(ConfigError::Invalid {
            origin: origin.to_string(),
            key: key.to_string(),
            message: format!(
                "{text:?} is not a share of connections to analyse; write \"1\" (all), \"1/2\", \"1/4\", … up to \"1/{max}\""
            ),
        }),
    }
}

/// `analysis_cpu`: the most of wirelint's CPU time its analysis may take,
/// written as a percentage ("10%"), from 1 % to 100 %; the fraction it
/// stands for (0.10).
pub fn parse_cpu_share(text: &str, key: &str, origin: &str) -> Result<f64, ConfigError> {
    let percent = text
        .trim()
        .strip_suffix('%')
        .and_then(|n| n.trim().parse::<f64>().ok())
        .filter(|p| (1.0..=100.0).contains(p));
    match percent {
        Some(p) => Ok(p / 100.0),
        None => Err(ConfigError::Invalid {
            origin: origin.to_string(),
            key: key.to_string(),
            message: format!(
                "{text:?} is not a share of wirelint's CPU time; write a percentage from 1% to 100%, such as \"10%\""
            ),
        }),
    }
}

/// A `--target` / `target` value: one of the platforms wirelint knows.
pub fn parse_target(
    text: &str,
    key: &str,
    origin: &str,
) -> Result<analysis::target::Target, ConfigError> {
    analysis::target::Target::parse(text).ok_or_else(|| ConfigError::Invalid {
        origin: origin.to_string(),
        key: key.to_string(),
        message: format!(
            "is {text:?}; use one of {}",
            analysis::target::ALL
                .iter()
                .map(|t| format!("\"{t}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

impl LimitsSection {
    pub fn apply(&self, caps: &mut analysis::namespaces::Caps) {
        if let Some(n) = self.namespaces {
            caps.namespaces = n.max(1);
        }
        if let Some(n) = self.paths_per_namespace {
            caps.paths_per_namespace = n.max(1);
        }
        if let Some(n) = self.documents_per_namespace {
            caps.documents_per_namespace = n.max(1);
        }
    }
}

/// `[proxy]`: every key mirrors a `wirelint proxy` flag of the same name
/// (with `_` for `-`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxySection {
    pub listen: Option<String>,
    pub upstream: Option<String>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    pub max_connections: Option<usize>,
    pub connect_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub message_timeout: Option<String>,
    pub upstream_timeout: Option<String>,
    pub shutdown_grace: Option<String>,
    pub analysis: Option<bool>,
    pub analysis_queue: Option<usize>,
    pub analysis_workers: Option<usize>,
    pub analysis_share: Option<String>,
    pub analysis_cpu: Option<String>,
    pub forward_memory: Option<String>,
    pub rewrite_topology: Option<bool>,
    pub allow_x509_passthrough: Option<bool>,
    pub log_format: Option<String>,
    pub report: Option<PathBuf>,
    pub report_interval: Option<String>,
    pub capture: Option<PathBuf>,
    pub fail_on: Option<String>,
    pub admin: Option<String>,
    pub admin_token: Option<String>,
    pub show_values: Option<bool>,
    pub summary_interval: Option<String>,
    pub fold_databases: Option<String>,
    pub target: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionSection {
    /// The partition (shard) key: a list of paths; compound and
    /// hierarchical keys list several.
    pub partition_key: Option<Vec<String>>,
    /// How the backend places documents by that key: `"ranged"` (MongoDB's
    /// default, and ours), `"hashed"` or `"cosmos"` (Azure Cosmos DB).
    pub partition_key_kind: Option<String>,
    /// The paths its index policy covers, for the request-unit estimate
    /// (Azure Cosmos DB indexes every path unless told otherwise): a list
    /// of dotted paths.
    pub indexed: Option<toml::Value>,
    /// How many physical partitions its data spans, for the request-unit
    /// estimate of a query that fans out (default: one per 50 GB seen).
    pub physical_partitions: Option<toml::Value>,
    /// Rule settings for this namespace only.
    #[serde(default)]
    pub rules: BTreeMap<String, RuleSection>,
}

/// `enabled`, `severity`, and the rule's own thresholds by name (checked
/// against the rule catalogue by [`rule_settings`], which names
/// the file and key of anything unknown).
#[derive(Debug, Default, Deserialize)]
pub struct RuleSection {
    pub enabled: Option<bool>,
    pub severity: Option<String>,
    #[serde(flatten)]
    pub thresholds: BTreeMap<String, toml::Value>,
}

/// A configuration error. It always says which file and key (or flag) is at
/// fault and what would be accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}: `{key}` {message}")]
    Invalid {
        origin: String,
        key: String,
        message: String,
    },
    #[error("no upstream given: pass --upstream mongodb://HOST:PORT, set WIRELINT_UPSTREAM, or put `upstream = \"mongodb://…\"` under [proxy] in the config file")]
    NoUpstream,
}

impl FileConfig {
    /// `[collections."db.coll"] partition_key = [...]` entries, with
    /// their `partition_key_kind` (ranged when not given); an unknown kind
    /// is an error naming the key.
    pub fn partition_keys(
        &self,
        origin: &str,
    ) -> Result<Vec<(String, Vec<String>, KeyKind)>, ConfigError> {
        self.partition_keys_of_kind(origin, KeyKind::Ranged)
    }

    /// [`FileConfig::partition_keys`], a key without a
    /// `partition_key_kind` taking `default` (Azure Cosmos DB's rules
    /// under `target = "cosmos-ru"`).
    pub fn partition_keys_of_kind(
        &self,
        origin: &str,
        default: KeyKind,
    ) -> Result<Vec<(String, Vec<String>, KeyKind)>, ConfigError> {
        let mut out = Vec::new();
        for (ns, c) in &self.collections {
            let kind = match c.partition_key_kind.as_deref() {
                None => default,
                Some(text) => KeyKind::parse(text).ok_or_else(|| ConfigError::Invalid {
                    origin: origin.to_string(),
                    key: format!("collections.\"{ns}\".partition_key_kind"),
                    message: format!(
                        "is \"{text}\"; use \"ranged\" (MongoDB's default), \"hashed\" or \"cosmos\""
                    ),
                })?,
            };
            if let Some(paths) = &c.partition_key {
                out.push((ns.clone(), paths.clone(), kind));
            }
        }
        Ok(out)
    }

    /// `[collections."db.coll"] indexed = [...]` and `physical_partitions`:
    /// what the request-unit estimate knows of each collection. A path
    /// that is not a string, or a count that is not a positive integer, is
    /// an error naming the key.
    pub fn request_units(
        &self,
        origin: &str,
    ) -> Result<analysis::request_units::Settings, ConfigError> {
        use analysis::request_units::{Collection, IndexPolicy};
        let invalid = |key: String, message: String| ConfigError::Invalid {
            origin: origin.to_string(),
            key,
            message,
        };
        let mut out = analysis::request_units::Settings::default();
        for (ns, c) in &self.collections {
            let mut collection = Collection::default();
            if let Some(value) = &c.indexed {
                let key = format!("collections.\"{ns}\".indexed");
                let expected =
                    "must be a list of dotted paths, e.g. indexed = [\"userId\", \"address.city\"]";
                let list = value
                    .as_array()
                    .ok_or_else(|| invalid(key.clone(), format!("{expected}, not {value}")))?;
                let mut paths = Vec::new();
                for (i, item) in list.iter().enumerate() {
                    match item.as_str().map(str::trim) {
                        Some(p) if !p.is_empty() => paths.push(p.to_string()),
                        _ => {
                            return Err(invalid(
                                format!("{key}[{i}]"),
                                format!("is {item}: {expected}"),
                            ))
                        }
                    }
                }
                collection.index = IndexPolicy::Paths(paths);
            }
            if let Some(value) = &c.physical_partitions {
                let n = value
                    .as_integer()
                    .filter(|n| *n >= 1)
                    .and_then(|n| u32::try_from(n).ok());
                collection.physical_partitions = Some(n.ok_or_else(|| {
                    invalid(
                        format!("collections.\"{ns}\".physical_partitions"),
                        format!("is {value}: it must be a whole number of physical partitions, 1 or more"),
                    )
                })?);
            }
            if collection != Collection::default() {
                out.collections.insert(ns.clone(), collection);
            }
        }
        Ok(out)
    }

    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|span| line_col(text, span.start))
                .unwrap_or((1, 1));
            ConfigError::Parse {
                path: path.to_path_buf(),
                line,
                column,
                message: e.message().trim().to_string(),
            }
        })
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, column)
}

/// Where a value came from, for error messages.
#[derive(Clone, Debug)]
pub enum Origin {
    Flag(&'static str),
    File(PathBuf),
    Default,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Flag(name) => write!(
                f,
                "--{name} (or WIRELINT_{})",
                name.to_uppercase().replace('-', "_")
            ),
            Origin::File(path) => write!(f, "{} [proxy]", path.display()),
            Origin::Default => write!(f, "default"),
        }
    }
}

/// Parses `"5s"`, `"250ms"`, `"1m 30s"`; `"0"` or `"off"` mean "no limit".
pub fn parse_duration(
    value: &str,
    origin: &Origin,
    key: &str,
) -> Result<Option<Duration>, ConfigError> {
    let v = value.trim();
    if v == "0" || v.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    humantime::parse_duration(v)
        .map(|d| if d.is_zero() { None } else { Some(d) })
        .map_err(|e| ConfigError::Invalid {
            origin: origin.to_string(),
            key: key.to_string(),
            message: format!("is not a duration ({e}); write e.g. \"5s\", \"250ms\" or \"off\""),
        })
}

/// Everything `wirelint proxy` needs, resolved and validated: how to
/// forward, how to analyse, and where to publish what is learnt.
#[derive(Clone, Debug)]
pub struct ProxySettings {
    /// Addresses, TLS, limits and timeouts of the forwarding proxy.
    pub forward: proxy::Settings,
    pub analysis: analysis::Settings,
    /// Write the JSON report here every `report_interval` and at shutdown.
    pub report: Option<PathBuf>,
    pub report_interval: Duration,
    /// Write what is forwarded to this pcapng file (`capture::write`).
    pub capture: Option<PathBuf>,
    /// Serve /metrics, /findings, /patterns and /healthz on this address.
    pub admin: Option<String>,
    /// Bearer token the admin endpoints (but /healthz) require.
    pub admin_token: Option<String>,
    /// Read partition keys from a sharded upstream's config.collections.
    pub discover_partition_keys: bool,
    /// Send findings and pattern metrics over OTLP (off when `None`).
    pub otlp: Option<crate::admin::otlp::Settings>,
    /// The upstream URI as given (with credentials), for the discovery side
    /// connection only; never logged (its `Debug` shows it redacted).
    pub upstream_raw: RawUri,
}

/// A URI as the user gave it, credentials included. Only [`RawUri::expose`]
/// gives it out; `Debug` shows it through `proxy::uri::redact`.
#[derive(Clone)]
pub struct RawUri(String);

impl RawUri {
    pub fn new(uri: impl Into<String>) -> RawUri {
        RawUri(uri.into())
    }

    /// The URI with its secrets, for connecting with it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for RawUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", proxy::uri::redact(&self.0))
    }
}

impl ProxySettings {
    /// Settings with every default, for the library API and tests.
    pub fn new(listen: &str, upstream: &str) -> Result<ProxySettings, ConfigError> {
        let uri = UpstreamUri::parse(upstream).map_err(|e| ConfigError::Invalid {
            origin: "upstream".into(),
            key: "upstream".into(),
            message: e.to_string(),
        })?;
        Ok(ProxySettings {
            forward: proxy::Settings::new(listen, uri),
            analysis: analysis::Settings::default(),
            report: None,
            report_interval: Duration::from_secs(30),
            capture: None,
            admin: None,
            admin_token: None,
            discover_partition_keys: true,
            otlp: None,
            upstream_raw: RawUri::new(upstream),
        })
    }
}

/// Validates `[rules.*]` and `[collections.*.rules.*]` against the
/// catalogue: unknown rules, unknown thresholds and bad severities are
/// errors naming the file and the key.
pub fn rule_settings(config: &FileConfig, path: &Path) -> Result<RuleSettings, ConfigError> {
    let catalogue = crate::rules::catalogue();
    let invalid = |key: String, message: String| ConfigError::Invalid {
        origin: path.display().to_string(),
        key,
        message,
    };
    let convert =
        |prefix: &str, id: &str, section: &RuleSection| -> Result<RuleOverrides, ConfigError> {
            let meta = catalogue.iter().find(|m| m.id == id).ok_or_else(|| {
                invalid(
                    format!("{prefix}{id}"),
                    format!(
                        "is not a rule (known: {})",
                        catalogue
                            .iter()
                            .map(|m| m.id)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
            let severity = match &section.severity {
                Some(s) => Some(Severity::parse(s).ok_or_else(|| {
                    invalid(
                        format!("{prefix}{id}.severity"),
                        format!("must be \"info\", \"warning\" or \"error\", not {s:?}"),
                    )
                })?),
                None => None,
            };
            let mut thresholds = BTreeMap::new();
            for (name, value) in &section.thresholds {
                if !meta.thresholds.iter().any(|t| t.name == name) {
                    return Err(invalid(
                        format!("{prefix}{id}.{name}"),
                        format!(
                            "is not a setting of {id} (it has: enabled, severity{})",
                            meta.thresholds
                                .iter()
                                .map(|t| format!(", {}", t.name))
                                .collect::<String>()
                        ),
                    ));
                }
                let number = value
                    .as_float()
                    .or_else(|| value.as_integer().map(|i| i as f64));
                let number = number.ok_or_else(|| {
                    invalid(
                        format!("{prefix}{id}.{name}"),
                        "must be a number".to_string(),
                    )
                })?;
                thresholds.insert(name.clone(), number);
            }
            Ok(RuleOverrides {
                enabled: section.enabled,
                severity,
                thresholds,
            })
        };
    let mut settings = RuleSettings::default();
    for (id, section) in &config.rules {
        settings
            .rules
            .insert(id.clone(), convert("rules.", id, section)?);
    }
    for (namespace, collection) in &config.collections {
        for (id, section) in &collection.rules {
            let prefix = format!("collections.\"{namespace}\".rules.");
            settings
                .per_namespace
                .entry(namespace.clone())
                .or_default()
                .insert(id.clone(), convert(&prefix, id, section)?);
        }
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_name_the_key_and_the_file() {
        let err = FileConfig::parse(
            "[proxy]\nlisten = \"x\"\nupstrem = \"y\"\n",
            Path::new("wl.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("wl.toml:3:1:"), "{err}");
        assert!(err.contains("upstrem"), "{err}");
        assert!(err.contains("upstream"), "{err}");
        let err = FileConfig::parse(
            "[collections.\"a.b\"]\npartition = [\"x\"]\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("partition") && err.contains("c.toml:2"),
            "{err}"
        );
    }

    #[test]
    fn design_example_parses() {
        let text = r#"
[proxy]
listen = "127.0.0.1:27018"
upstream = "mongodb://127.0.0.1:27017"

[collections."blog.posts"]
partition_key = ["postId"]

[rules.WL102]
warn = 250
error = 10000
"#;
        let c = FileConfig::parse(text, Path::new("w.toml")).unwrap();
        assert_eq!(c.proxy.listen.as_deref(), Some("127.0.0.1:27018"));
        assert_eq!(
            c.collections["blog.posts"].partition_key.as_deref(),
            Some(&["postId".to_string()][..])
        );
        assert_eq!(
            c.rules["WL102"].thresholds["error"].as_integer(),
            Some(10000)
        );
    }

    #[test]
    fn durations() {
        let o = Origin::Default;
        assert_eq!(
            parse_duration("5s", &o, "k").unwrap(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(parse_duration("off", &o, "k").unwrap(), None);
        assert_eq!(parse_duration("0", &o, "k").unwrap(), None);
        let err = parse_duration("five", &o, "connect_timeout")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("connect_timeout") && err.contains("5s"),
            "{err}"
        );
    }

    #[test]
    fn memory_sizes() {
        let ok = |t| parse_memory(t, "limits.analysis_memory", "w.toml").unwrap();
        assert_eq!(ok("256MiB"), 256 << 20);
        assert_eq!(ok("1 GiB"), 1 << 30);
        assert_eq!(ok("64mb"), 64_000_000);
        for (text, says) in [("lots", "not a size"), ("1MiB", "smallest budget, 8 MiB")] {
            let err = parse_memory(text, "limits.analysis_memory", "w.toml")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("w.toml")
                    && err.contains("limits.analysis_memory")
                    && err.contains(says),
                "{err}"
            );
        }
    }

    #[test]
    fn analysis_cpu_budgets() {
        let ok = |t| parse_cpu_share(t, "proxy.analysis_cpu", "w.toml").unwrap();
        assert_eq!(
            [ok("10%"), ok(" 2.5 % "), ok("1%"), ok("100%")],
            [0.10, 0.025, 0.01, 1.0]
        );
        for text in ["10", "0.1", "0.5%", "101%", "-5%", "%", "", "ten%"] {
            let err = parse_cpu_share(text, "proxy.analysis_cpu", "w.toml").unwrap_err();
            assert_names(err, "proxy.analysis_cpu", text, "\"10%\"");
        }
    }

    #[test]
    fn analysis_shares() {
        let ok = |t| parse_share(t, "proxy.analysis_share", "w.toml").unwrap();
        assert_eq!(
            [ok("1"), ok("1/1"), ok("1/2"), ok(" 1 / 4 "), ok("1/64")],
            [0, 0, 1, 2, 6]
        );
        for text in ["1/3", "1/128", "1/0", "2/4", "50%", "0.5", "", "1/"] {
            let err = parse_share(text, "proxy.analysis_share", "w.toml").unwrap_err();
            assert_names(err, "proxy.analysis_share", text, "\"1/2\"");
        }
    }

    #[test]
    fn targets_and_request_unit_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            ProxyArgs {
                config: Some(path.clone()),
                ..Default::default()
            }
            .analysis_settings()
        };
        let ok = load(
            "[proxy]\ntarget = \"cosmos-ru\"\n\
             [collections.\"shop.orders\"]\nindexed = [\"customerId\", \"lines.sku\"]\nphysical_partitions = 4\n",
        )
        .unwrap();
        assert_eq!(ok.target, Some(analysis::target::Target::CosmosRu));
        // Under cosmos-ru a key is placed by Cosmos DB's rules unless its
        // kind is given; elsewhere MongoDB's ranged default holds.
        let kinds = |text: &str| {
            load(text)
                .unwrap()
                .partition_keys
                .into_iter()
                .map(|(ns, _, kind)| (ns, kind))
                .collect::<Vec<_>>()
        };
        let keys = "[collections.\"a.b\"]\npartition_key = [\"t\"]\n\
                    [collections.\"a.c\"]\npartition_key = [\"t\"]\npartition_key_kind = \"hashed\"\n";
        assert_eq!(
            kinds(&format!("[proxy]\ntarget = \"cosmos-ru\"\n{keys}")),
            [
                ("a.b".into(), KeyKind::Cosmos),
                ("a.c".into(), KeyKind::Hashed)
            ]
        );
        assert_eq!(
            kinds(keys),
            [
                ("a.b".into(), KeyKind::Ranged),
                ("a.c".into(), KeyKind::Hashed)
            ]
        );
        let orders = ok.request_units.collection("shop.orders").unwrap();
        assert_eq!(orders.physical_partitions, Some(4));
        assert_eq!(
            orders.index,
            analysis::request_units::IndexPolicy::Paths(vec![
                "customerId".into(),
                "lines.sku".into()
            ])
        );
        let where_ = path.display().to_string();
        for (text, key, says) in [
            (
                "[proxy]\ntarget = \"cosmos\"\n",
                "[proxy]: `target`",
                "\"cosmos-ru\"",
            ),
            (
                "[collections.\"a.b\"]\nphysical_partitions = -2\n",
                "collections.\"a.b\".physical_partitions",
                "whole number",
            ),
            (
                "[collections.\"a.b\"]\nphysical_partitions = \"4\"\n",
                "collections.\"a.b\".physical_partitions",
                "whole number",
            ),
            (
                "[collections.\"a.b\"]\nindexed = [\"x\", 3]\n",
                "collections.\"a.b\".indexed[1]",
                "dotted paths",
            ),
            (
                "[collections.\"a.b\"]\nindexed = \"x\"\n",
                "collections.\"a.b\".indexed",
                "dotted paths",
            ),
        ] {
            let err = load(text).unwrap_err().to_string();
            assert!(
                err.contains(&where_) && err.contains(key) && err.contains(says),
                "{text}: {err}"
            );
        }
    }

    /// An error about `text` in `w.toml` that names the file, the key and
    /// the value, and shows what to write instead.
    fn assert_names(err: ConfigError, key: &str, text: &str, instead: &str) {
        let err = err.to_string();
        assert!(
            err.contains("w.toml")
                && err.contains(key)
                && err.contains(instead)
                && err.contains(&format!("{text:?}")),
            "{err}"
        );
    }
}
