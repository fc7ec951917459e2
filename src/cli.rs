//! The `wirelint` command line. Every `proxy` flag can also be given as a
//! `WIRELINT_*` environment variable or as a key under `[proxy]` in the
//! config file; a flag wins over the environment, which wins over the file.

use crate::app::Proxy;
use crate::config::{FileConfig, Level, ProxyArgs, ProxySettings, RunOptions};
use crate::report::Report;
use clap::{Parser, Subcommand, ValueEnum};
use std::collections::BTreeMap;
use std::path::PathBuf;

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

    /// Print a report written by `wirelint proxy --report FILE`, or merge several (`report merge`).
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "Examples:\n  wirelint report wirelint-report.json --format markdown\n  \
wirelint report wirelint-report.json --format sarif > wirelint.sarif\n  \
wirelint report merge shard-1.json shard-2.json -o all.json && wirelint report all.json --fail-on warning"
    )]
    Report(ReportArgs),

    /// Analyse packet captures (tcpdump, Wireshark, `wirelint proxy --capture`) as the proxy analyses live traffic.
    #[command(
        long_about = "Analyse packet captures of MongoDB traffic: pcap or pcapng files from tcpdump, \
Wireshark or `wirelint proxy --capture`. Connections are reassembled from their TCP segments \
(retransmissions, segments out of order, gaps and a short snaplen are handled and accounted for) and \
their messages analysed by the same rules, with the same config file, as `wirelint proxy`. The report \
is printed like `wirelint report` prints one; --report also writes it as JSON for `report`, `diff` \
and `report merge`. TLS connections cannot be read and are named as such: capture between wirelint \
and the server, or where the traffic is not encrypted.",
        after_help = "Examples:\n  sudo tcpdump -i any -s 0 -w app.pcap 'tcp port 27017'   (then stop it with Ctrl-C)\n  \
wirelint analyse app.pcap\n  \
wirelint analyse app.pcap --server-port 27018 --config wirelint.toml --fail-on warning\n  \
wirelint analyse a.pcapng b.pcapng --format sarif > wirelint.sarif"
    )]
    Analyse(AnalyseArgs),

    /// Compare two reports pattern by pattern (round trips, latency, partitions, findings).
    Diff {
        /// The report before the change.
        before: PathBuf,
        /// The report after the change.
        after: PathBuf,
    },

    /// List the rules, their default severity, thresholds and sources.
    Rules,

    /// Ask a running wirelint's /healthz: exit 0 when its upstream answers, 1 when it does not or wirelint does not answer (the container image's health check).
    #[command(
        after_help = "Examples:\n  wirelint health                       (the admin address from WIRELINT_ADMIN)\n  \
wirelint health --admin 127.0.0.1:9090"
    )]
    Health {
        /// wirelint's admin address; an unspecified one (0.0.0.0, [::]) is asked on loopback.
        #[arg(long, env = "WIRELINT_ADMIN", value_name = "HOST:PORT")]
        admin: String,
    },

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
    #[command(subcommand)]
    pub action: Option<ReportAction>,
    /// A JSON report written by `wirelint proxy --report FILE` (or by `report merge`).
    #[arg(required = true)]
    pub file: Option<PathBuf>,
    /// Output format: the access-pattern table and findings as text or Markdown, SARIF 2.1.0 for code scanning, JUnit XML for CI test views (a finding at or above --fail-on, by default warning, is a failing test case), or the JSON itself.
    #[arg(long, value_enum, default_value = "text")]
    pub format: ReportFormat,
    /// Exit with status 3 when a finding at or above this severity is in the report.
    #[arg(long, value_enum)]
    pub fail_on: Option<Level>,
    /// List every access pattern in the text and Markdown table: by default, past 20 patterns, those without a finding are summed up in one line.
    #[arg(long)]
    pub all_patterns: bool,
}

#[derive(clap::Args, Debug)]
pub struct AnalyseArgs {
    /// The captures (pcap or pcapng, gzipped or not), read one after another as one run.
    #[arg(required = true, num_args = 1.., value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// A server port: TCP traffic to it is a request, from it a reply (repeat, or separate with commas) [default: 27017,10255].
    #[arg(long = "server-port", value_name = "PORT", value_delimiter = ',')]
    pub server_ports: Vec<u16>,
    /// A wirelint.toml: its [collections.*] partition keys, [rules.*] settings and [limits] apply as they do to `wirelint proxy`.
    #[arg(long, env = "WIRELINT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Also write the JSON report here (for `wirelint report`, `diff` and `report merge`).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Output format, as for `wirelint report`.
    #[arg(long, value_enum, default_value = "text")]
    pub format: ReportFormat,
    /// Exit with status 3 when a finding at or above this severity is found.
    #[arg(long, value_enum)]
    pub fail_on: Option<Level>,
    /// List every access pattern in the text and Markdown table (as `wirelint report --all-patterns`).
    #[arg(long)]
    pub all_patterns: bool,
    /// Show literal values in findings (off by default: values stay private).
    #[arg(long)]
    pub show_values: bool,
    /// The platform the captured server is, as for `wirelint proxy --target` [default: detected from the captured hello replies, else mongodb].
    #[arg(
        long,
        env = "WIRELINT_TARGET",
        value_name = "mongodb|cosmos-ru|cosmos-vcore|documentdb"
    )]
    pub target: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum ReportAction {
    /// Combine reports from several runs (CI shards, a fleet of sidecars) into one.
    #[command(
        long_about = "Combine reports from several runs — the shards of a CI suite, or one wirelint per \
application instance — into one report: counters, pattern counts and partitions add up, latency \
histograms merge, findings are deduplicated with their occurrences added, their evidence combined \
and first/last seen widened; verdicts and what-to-fix-first are worked out again. The rules are not \
run again: a finding needs its evidence within one run. `report`, `diff`, SARIF and --fail-on work \
on the result. docs/report-schema.md says which field merges how."
    )]
    Merge {
        /// The reports to combine (two or more; a merged report can be merged again).
        #[arg(required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        /// Where to write the merged report (JSON).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Exit with status 3 when a finding at or above this severity is in the merged report.
        #[arg(long, value_enum)]
        fail_on: Option<Level>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Text,
    Markdown,
    Sarif,
    Junit,
    Json,
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
    crate::analysis::install_panic_hook();
    match &cli.command {
        Command::Report(args) => report_command(args),
        Command::Analyse(args) => {
            init_logging(cli.log_format.unwrap_or(LogFormat::Text));
            analyse_command(args)
        }
        Command::Diff { before, after } => match (Report::load(before), Report::load(after)) {
            (Ok(a), Ok(b)) => emit(&crate::report::diff::diff(&a, &b), 0),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("wirelint: {e}");
                2
            }
        },
        Command::Keys { config, report } => keys_command(config.as_deref(), report.as_deref()),
        Command::Health { admin } => health_command(admin),
        Command::Rules => {
            use std::fmt::Write;
            let mut out = String::new();
            for m in crate::rules::catalogue() {
                let _ = writeln!(
                    out,
                    "{} {} [{}]\n  {}\n  → {}\n  source: {} · {}",
                    m.id,
                    m.name,
                    m.severity.as_str(),
                    m.summary,
                    m.advice,
                    m.source,
                    m.docs_path()
                );
                for t in m.thresholds {
                    let _ = writeln!(out, "  {} = {} ({})", t.name, t.default, t.help);
                }
                out.push('\n');
            }
            emit(&out, 0)
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
                let found = match file.partition_keys(&path.display().to_string()) {
                    Ok(found) => found,
                    Err(e) => {
                        eprintln!("wirelint: {e}");
                        return 2;
                    }
                };
                for (ns, paths, kind) in found {
                    keys.insert(ns, PartitionKey::new(paths, kind, KeySource::Config));
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
    use std::fmt::Write;
    let mut out = String::new();
    if keys.is_empty() {
        out.push_str("no partition keys known: set them in the config file ([collections.\"db.coll\"] partition_key = [\"field\"]), or run traffic that creates sharded collections\n");
    }
    for (ns, key) in keys {
        let _ = writeln!(
            out,
            "{ns:<40} {}  from {}",
            key.describe(),
            key.source.describe()
        );
    }
    emit(&out, 0)
}

/// Writes a command's output and returns `status`; a reader that went
/// away (`wirelint rules | head -1`) is not an error: the rest is dropped
/// quietly, and the status stands.
fn emit(text: &str, status: i32) -> i32 {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => status,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => status,
        Err(e) => {
            eprintln!("wirelint: cannot write the output: {e}");
            1
        }
    }
}

fn merge_command(files: &[PathBuf], output: &std::path::Path, fail_on: Option<Level>) -> i32 {
    let mut reports = Vec::with_capacity(files.len());
    for path in files {
        match Report::load(path) {
            Ok(r) => reports.push(r),
            Err(e) => {
                eprintln!("wirelint: {e}");
                return 2;
            }
        }
    }
    let Some(merged) = crate::report::merge::merge(&reports) else {
        eprintln!("wirelint: report merge needs at least one report");
        return 2;
    };
    if let Err(e) = merged.write(output) {
        eprintln!("wirelint: cannot write {}: {e}", output.display());
        return 1;
    }
    eprintln!(
        "wirelint: merged {} runs into {}: {} patterns, {} findings",
        merged.runs.len(),
        output.display(),
        merged.patterns.len(),
        merged.findings.len()
    );
    match (fail_on, merged.worst()) {
        (Some(level), Some(worst)) if worst >= level.severity() => 3,
        _ => 0,
    }
}

fn report_command(args: &ReportArgs) -> i32 {
    if let Some(ReportAction::Merge {
        files,
        output,
        fail_on,
    }) = &args.action
    {
        return merge_command(files, output, *fail_on);
    }
    let Some(file) = &args.file else {
        eprintln!("wirelint: give a report file, or `report merge A B -o OUT`");
        return 2;
    };
    let report = match Report::load(file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wirelint: {e}");
            return 2;
        }
    };
    let layout = crate::report::table::Layout {
        all_patterns: args.all_patterns,
    };
    let (text, status) = formatted(&report, args.format, args.fail_on, layout);
    emit(&text, status)
}

/// `report` in `format`, and the exit status `fail_on` gives it.
fn formatted(
    report: &Report,
    format: ReportFormat,
    fail_on: Option<Level>,
    layout: crate::report::table::Layout,
) -> (String, i32) {
    let text = match format {
        ReportFormat::Text => crate::report::table::text_with(report, layout),
        ReportFormat::Markdown => crate::report::table::markdown_with(report, layout),
        ReportFormat::Sarif => {
            serde_json::to_string_pretty(&crate::report::sarif::sarif(report)).unwrap_or_default()
                + "\n"
        }
        ReportFormat::Junit => crate::report::junit::junit(
            report,
            fail_on.map_or(crate::rules::Severity::Warning, |l| l.severity()),
        ),
        ReportFormat::Json => serde_json::to_string_pretty(report).unwrap_or_default() + "\n",
    };
    let status = match (fail_on, report.worst()) {
        (Some(level), Some(worst)) if worst >= level.severity() => 3,
        _ => 0,
    };
    (text, status)
}

fn analyse_command(args: &AnalyseArgs) -> i32 {
    // The config file is read as `wirelint proxy` reads it.
    let proxy_args = ProxyArgs {
        config: args.config.clone(),
        show_values: args.show_values,
        target: args.target.clone(),
        ..Default::default()
    };
    let settings = match proxy_args.analysis_settings() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("wirelint: {e}");
            return 2;
        }
    };
    let mut reader = crate::capture::ReaderSettings::default();
    if !args.server_ports.is_empty() {
        reader.server_ports = args.server_ports.clone();
    }
    let began = std::time::Instant::now();
    let analysed = match crate::app::offline::analyse(&settings, &args.files, reader) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("wirelint: {e:#}");
            return 2;
        }
    };
    let took = began.elapsed().as_secs_f64();
    let size = analysed.bytes;
    let a = &analysed.account;
    eprintln!(
        "wirelint: read {} capture{} ({:.1} MB in {took:.2} s, {:.1} MB/s): {} packets, {} connections, {} requests, {} replies",
        a.captures,
        if a.captures == 1 { "" } else { "s" },
        size as f64 / 1e6,
        size as f64 / 1e6 / took.max(1e-9),
        a.packets,
        a.connections,
        a.requests,
        a.replies,
    );
    for line in a.describe() {
        eprintln!("wirelint: {line}");
    }
    if a.requests == 0 {
        eprintln!(
            "wirelint: no MongoDB requests were found: is the server on port {}? (set it with --server-port)",
            settings_ports(args)
        );
    }
    if let Some(path) = &args.report {
        if let Err(e) = analysed.report.write(path) {
            eprintln!("wirelint: cannot write {}: {e}", path.display());
            return 1;
        }
    }
    let layout = crate::report::table::Layout {
        all_patterns: args.all_patterns,
    };
    let (text, status) = formatted(&analysed.report, args.format, args.fail_on, layout);
    emit(&text, status)
}

/// The server ports `analyse` read, for messages.
fn settings_ports(args: &AnalyseArgs) -> String {
    let ports: Vec<u16> = if args.server_ports.is_empty() {
        crate::capture::DEFAULT_SERVER_PORTS.to_vec()
    } else {
        args.server_ports.clone()
    };
    ports
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" or ")
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
    let summary = run.summary_interval.map(|every| {
        let observed = proxy.knowledge();
        let stats_source = proxy.stats_handle();
        tokio::spawn(async move {
            let mut last = stats_source.snapshot();
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let now = stats_source.snapshot();
                let (patterns, findings) = {
                    let k = observed.lock().unwrap_or_else(|p| p.into_inner());
                    (k.patterns.patterns.len(), k.findings.len())
                };
                // The cost and the analysed share over the interval, not
                // since start.
                let cost = crate::report::AnalysisCpu::new(
                    (now.analysis_cpu_nanos - last.analysis_cpu_nanos) as f64 / 1e9,
                    (now.process_cpu_nanos - last.process_cpu_nanos) as f64 / 1e9,
                    now.analysed_requests - last.analysed_requests,
                );
                let mut interval = crate::report::Counters {
                    requests: now.requests_forwarded - last.requests_forwarded,
                    replies: now.replies_forwarded - last.replies_forwarded,
                    analysis_shed: now.analysis_shed - last.analysis_shed,
                    analysis_dropped: now.analysis_dropped - last.analysis_dropped,
                    ..Default::default()
                };
                interval.set_analysed_share();
                eprintln!(
                    "{}",
                    crate::report::live::summary_line(
                        (now.requests_forwarded - last.requests_forwarded) as f64
                            / every.as_secs_f64(),
                        patterns,
                        findings,
                        now.analysis_dropped,
                        &cost,
                        interval.analysed_share,
                    )
                );
                last = now;
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
    let counters = proxy.report().counters;
    let evicted: BTreeMap<&str, u64> = counters
        .tables
        .iter()
        .filter(|t| t.evicted > 0)
        .map(|t| (t.table.as_str(), t.evicted))
        .collect();
    let analysis_memory: u64 = counters.tables.iter().map(|t| t.bytes as u64).sum();
    tracing::info!(
        connections = stats.connections_accepted,
        requests = stats.requests_forwarded,
        replies = stats.replies_forwarded,
        analysis_dropped = stats.analysis_dropped,
        analysis_skipped = ?counters.skipped,
        analysis_panics = counters.analysis_panics,
        rule_panics = ?counters.rule_panics,
        analysis_memory,
        analysis_evicted = ?evicted,
        forgotten_requests = counters.forgotten_requests,
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

/// How long `wirelint health` waits for an answer in all: more than
/// `/healthz` takes to find the upstream down (its connect timeout).
const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// `wirelint health`: one `GET /healthz`, its status as the exit code.
/// By hand over a socket rather than with an HTTP client crate: the one
/// request and its status line are all it needs, and the binary carries
/// no HTTP client otherwise.
fn health_command(admin: &str) -> i32 {
    use std::io::{Read, Write};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
    let addresses: Vec<SocketAddr> = match admin.to_socket_addrs() {
        Ok(a) => a
            .map(|mut a| {
                if a.ip().is_unspecified() {
                    a.set_ip(match a.ip() {
                        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
                    });
                }
                a
            })
            .collect(),
        Err(e) => {
            eprintln!(
                "wirelint health: --admin {admin}: {e} (give HOST:PORT, e.g. 127.0.0.1:9090)"
            );
            return 2;
        }
    };
    let asked = addresses.iter().find_map(|a| {
        let mut stream = TcpStream::connect_timeout(a, HEALTH_TIMEOUT).ok()?;
        stream.set_read_timeout(Some(HEALTH_TIMEOUT)).ok()?;
        stream.set_write_timeout(Some(HEALTH_TIMEOUT)).ok()?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: wirelint\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut answer = Vec::new();
        // A health answer is a few lines: read no more than 4 KiB.
        stream.take(4096).read_to_end(&mut answer).ok()?;
        Some(String::from_utf8_lossy(&answer).into_owned())
    });
    let Some(answer) = asked else {
        eprintln!("wirelint health: no answer from http://{admin}/healthz (is wirelint running with --admin {admin}?)");
        return 1;
    };
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok());
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b.trim());
    match status {
        Some(200) => {
            println!("{body}");
            0
        }
        Some(code) => {
            eprintln!("wirelint health: {code} {body}");
            1
        }
        None => {
            eprintln!("wirelint health: http://{admin}/healthz gave no HTTP status");
            1
        }
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
