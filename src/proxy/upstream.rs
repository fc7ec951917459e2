//! Connections to the backend: one per client connection, TLS when the URI
//! says so, to the primary unless the URI says `directConnection=true`.
//!
//! Finding the primary (as drivers do from their seeds): each seed is asked
//! `isMaster` on a short-lived connection; a seed that is itself writable
//! primary wins (its address as written in the URI, which is known to be
//! reachable from here), else the `primary` it names. A standalone server or
//! a mongos is its own primary.
//!
//! Following it: the answer is cached until something says it changed — a
//! connect to it fails, a session sees it answer a hello as a non-primary or
//! a request with a "not primary" error ([`Upstream::demote`]), or the
//! periodic check ([`Upstream::check_primary`]) finds it demoted. Then the
//! cache is dropped, the change is announced to the sessions (which close
//! the connections pinned to the old primary, so drivers reconnect), and the
//! next connection finds the primary again.

use super::tls::{self, TlsConnector, TlsError};
use super::uri::{HostPort, UpstreamUri};
use crate::wire::{bson_walk, op_msg, OpMsg};
use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot connect to upstream {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("upstream {addr} did not accept a connection within {after:?}")]
    Timeout { addr: String, after: Duration },
    #[error("TLS handshake with upstream {addr} failed: {source}")]
    Handshake { addr: String, source: io::Error },
    #[error("{0}")]
    Tls(#[from] TlsError),
    #[error("no primary found among the upstream seeds: {0}")]
    NoPrimary(String),
    #[error("cannot resolve the mongodb+srv:// seed list ({record}): {why}")]
    Srv { record: String, why: String },
}

/// How `mongodb+srv://` names are looked up.
#[derive(Clone, Debug)]
pub struct SrvSettings {
    /// DNS servers to ask; empty: the system's resolver configuration.
    pub dns_servers: Vec<std::net::SocketAddr>,
    /// How long a resolved seed list is used before it is looked up again
    /// (the seedlist discovery specification's `rescanSRVIntervalMS`
    /// default: 60 s).
    pub rescan: Duration,
}

impl Default for SrvSettings {
    fn default() -> SrvSettings {
        SrvSettings {
            dns_servers: Vec::new(),
            rescan: Duration::from_secs(60),
        }
    }
}

/// The seeds and replica-set name in use: the URI's, or what DNS gave for a
/// `mongodb+srv://` URI, and when.
#[derive(Clone, Default)]
struct Seeds {
    hosts: Vec<HostPort>,
    replica_set: Option<String>,
    resolved: Option<std::time::Instant>,
}

/// A backend connection, plain or TLS.
pub enum UpstreamStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

pub struct Upstream {
    uri: UpstreamUri,
    tls: Option<TlsConnector>,
    connect_timeout: Duration,
    primary: Mutex<Option<HostPort>>,
    /// One discovery at a time; the others wait for its answer.
    discovery: tokio::sync::Mutex<()>,
    /// Counts the times the cached primary was dropped; sessions watch it.
    changes: tokio::sync::watch::Sender<u64>,
    /// Whether the last discovery found a replica set (worth checking
    /// periodically; a standalone or mongos is not).
    replica_set: std::sync::atomic::AtomicBool,
    seeds: Mutex<Seeds>,
    srv_rescan: Duration,
    /// For `mongodb+srv://`: the resolver (the system's, or the servers
    /// given to [`Upstream::new`]).
    resolver: Option<hickory_resolver::TokioResolver>,
}

/// Server error codes that say the member is not (or no longer) a writable
/// primary (the SDAM specification's "not writable primary" and
/// "node is recovering" errors that follow a stepdown).
pub const NOT_PRIMARY_CODES: [i32; 6] = [10107, 13435, 13436, 10058, 11602, 189];

impl Upstream {
    /// `srv`: how `mongodb+srv://` names are looked up.
    pub fn new(
        uri: UpstreamUri,
        connect_timeout: Duration,
        srv: &SrvSettings,
    ) -> Result<Upstream, UpstreamError> {
        let tls = tls::connector(&uri.tls)?;
        let connect_timeout = uri.connect_timeout.unwrap_or(connect_timeout);
        let resolver = match &uri.srv {
            None => None,
            Some(name) => Some(
                resolver(&srv.dns_servers).map_err(|why| UpstreamError::Srv {
                    record: name.record(),
                    why,
                })?,
            ),
        };
        let seeds = Seeds {
            hosts: uri.hosts.clone(),
            replica_set: uri.replica_set.clone(),
            resolved: None,
        };
        Ok(Upstream {
            srv_rescan: srv.rescan,
            seeds: Mutex::new(seeds),
            resolver,
            uri,
            tls,
            connect_timeout,
            primary: Mutex::new(None),
            discovery: tokio::sync::Mutex::new(()),
            changes: tokio::sync::watch::channel(0).0,
            replica_set: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether connections go to a primary found by discovery (and are
    /// moved when it changes), rather than to the one host given.
    pub fn follows_primary(&self) -> bool {
        self.uri.discovers_primary()
    }

    /// Notified each time the primary is dropped (see [`Upstream::demote`]).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether `host` is the primary connections go to now. A session
    /// connected to a host that no longer is closes.
    pub fn is_current(&self, host: &HostPort) -> bool {
        !self.follows_primary() || self.cached_primary().as_ref() == Some(host)
    }

    /// `host` was seen not to be the writable primary any more (`why`):
    /// forgets it, logs the change and tells the sessions. No-op when it
    /// was not the cached primary (already dropped, or never was).
    pub fn demote(&self, host: &HostPort, why: &str) {
        if !self.follows_primary() {
            return;
        }
        let mut cached = self.primary.lock().unwrap_or_else(|p| p.into_inner());
        if cached.as_ref() != Some(host) {
            return;
        }
        *cached = None;
        drop(cached);
        tracing::warn!(primary = %host, "upstream primary changed: {why}; closing the connections to it (drivers reconnect) and looking for the new primary");
        self.changes.send_modify(|n| *n += 1);
    }

    /// The periodic check: asks the cached primary whether it still is one
    /// and demotes it if not. Does nothing for a standalone or a mongos,
    /// or while no primary is cached.
    pub async fn check_primary(&self) {
        if self.uri.srv.is_some() {
            // Looked up again if due; errors are logged there.
            let _ = self.seeds().await;
        }
        if !self.follows_primary() || !self.replica_set.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let Some(host) = self.cached_primary() else {
            return;
        };
        match self.probe(&host).await {
            Ok(probe) if probe.is_primary => {}
            Ok(_) => self.demote(
                &host,
                "the periodic check found it no longer writable primary",
            ),
            Err(e) => self.demote(
                &host,
                &format!("the periodic check could not reach it ({e})"),
            ),
        }
    }

    pub fn uri(&self) -> &UpstreamUri {
        &self.uri
    }

    /// Opens a connection for one client: to the only host, or to the
    /// current primary.
    pub async fn connect(&self) -> Result<(UpstreamStream, HostPort), UpstreamError> {
        // Subscribed sessions compare hosts, not counts: a change between
        // this connect and the session's subscription is caught by
        // `is_current`.
        if !self.follows_primary() {
            let host = self.uri.hosts[0].clone();
            return Ok((self.connect_to(&host).await?, host));
        }
        let cached = self.cached_primary();
        if let Some(host) = cached {
            match self.connect_to(&host).await {
                Ok(stream) => return Ok((stream, host)),
                Err(e) => self.demote(&host, &format!("it is unreachable ({e})")),
            }
        }
        let host = self.find_primary().await?;
        Ok((self.connect_to(&host).await?, host))
    }

    fn cached_primary(&self) -> Option<HostPort> {
        self.primary
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    async fn find_primary(&self) -> Result<HostPort, UpstreamError> {
        let _one_at_a_time = self.discovery.lock().await;
        if let Some(host) = self.cached_primary() {
            return Ok(host);
        }
        let seeds = self.seeds().await?;
        let mut notes = Vec::new();
        for seed in &seeds.hosts {
            match self.probe(seed).await {
                Ok(probe) => {
                    if let (Some(want), Some(got)) = (&seeds.replica_set, &probe.set_name) {
                        if want != got {
                            notes.push(format!(
                                "{seed}: member of replica set `{got}`, not `{want}`"
                            ));
                            continue;
                        }
                    }
                    // Writable primary, or not a replica-set member at all
                    // (a standalone or mongos answers ismaster: true; a
                    // server that does not say is taken at its word).
                    let found = if probe.is_primary || probe.set_name.is_none() {
                        Some(seed.clone())
                    } else {
                        probe
                            .primary
                            .as_deref()
                            .and_then(|p| HostPort::parse(p).ok())
                    };
                    self.replica_set.store(
                        probe.set_name.is_some(),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    match found {
                        Some(host) => {
                            tracing::info!(primary = %host, via = %seed, "upstream primary found");
                            *self.primary.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(host.clone());
                            return Ok(host);
                        }
                        None => notes.push(format!("{seed}: not primary and names no primary")),
                    }
                }
                // One seed: its own error says it best.
                Err(e) if seeds.hosts.len() == 1 => return Err(e),
                Err(e) => notes.push(e.to_string()),
            }
        }
        Err(UpstreamError::NoPrimary(notes.join("; ")))
    }

    /// The seeds to discover from: the URI's, or for `mongodb+srv://` the
    /// SRV records' targets (looked up again once `rescan` old; if a
    /// lookup fails, the last good list is kept and the failure logged).
    async fn seeds(&self) -> Result<Seeds, UpstreamError> {
        let current = self.seeds.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (Some(srv), Some(resolver)) = (&self.uri.srv, &self.resolver) else {
            return Ok(current);
        };
        if current
            .resolved
            .is_some_and(|at| at.elapsed() < self.srv_rescan)
        {
            return Ok(current);
        }
        match resolve_srv(resolver, srv, self.uri.replica_set.as_deref()).await {
            Ok((hosts, replica_set)) => {
                if hosts != current.hosts {
                    let list: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
                    tracing::info!(record = %srv.record(), seeds = %list.join(","), "mongodb+srv:// seed list resolved");
                }
                let seeds = Seeds {
                    hosts,
                    replica_set,
                    resolved: Some(std::time::Instant::now()),
                };
                *self.seeds.lock().unwrap_or_else(|p| p.into_inner()) = seeds.clone();
                Ok(seeds)
            }
            Err(why) if !current.hosts.is_empty() => {
                tracing::warn!(record = %srv.record(), "cannot resolve the mongodb+srv:// seed list again ({why}); keeping the last one");
                let mut kept = self.seeds.lock().unwrap_or_else(|p| p.into_inner());
                kept.resolved = Some(std::time::Instant::now());
                Ok(kept.clone())
            }
            Err(why) => Err(UpstreamError::Srv {
                record: srv.record(),
                why,
            }),
        }
    }

    /// Whether the upstream answers a hello now, on a connection of its
    /// own: the host that answered, or why none did.
    pub async fn check(&self) -> Result<HostPort, UpstreamError> {
        let host = if self.follows_primary() {
            self.find_primary().await?
        } else {
            self.uri.hosts[0].clone()
        };
        self.probe(&host).await?;
        Ok(host)
    }

    /// Asks one host `isMaster` on a connection of its own.
    async fn probe(&self, host: &HostPort) -> Result<Probe, UpstreamError> {
        let mut stream = self.connect_to(host).await?;
        let body = bson::rawdoc! {"isMaster": 1, "$db": "admin"};
        let request = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
        let io_err = |source| UpstreamError::Connect {
            addr: host.to_string(),
            source,
        };
        let exchange = async {
            stream.write_all(&request).await?;
            super::connection::read_frame(&mut stream).await
        };
        let reply = tokio::time::timeout(self.connect_timeout, exchange)
            .await
            .map_err(|_| UpstreamError::Timeout {
                addr: host.to_string(),
                after: self.connect_timeout,
            })?
            .map_err(io_err)?;
        let msg = OpMsg::parse(&reply)
            .map_err(|e| io_err(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        let mut probe = Probe::default();
        for element in bson_walk::elements(msg.body).flatten() {
            match element.key {
                b"ismaster" | b"isWritablePrimary" => {
                    probe.is_primary = element.as_bool().unwrap_or(false)
                }
                b"primary" => probe.primary = element.as_str().map(str::to_string),
                b"setName" => probe.set_name = element.as_str().map(str::to_string),
                _ => {}
            }
        }
        Ok(probe)
    }

    async fn connect_to(&self, host: &HostPort) -> Result<UpstreamStream, UpstreamError> {
        let addr = host.address();
        let tcp = tokio::time::timeout(self.connect_timeout, self.tcp_connect(host))
            .await
            .map_err(|_| UpstreamError::Timeout {
                addr: addr.clone(),
                after: self.connect_timeout,
            })?
            .map_err(|source| UpstreamError::Connect {
                addr: addr.clone(),
                source,
            })?;
        super::connection::tune_socket(&tcp);
        let Some(connector) = &self.tls else {
            return Ok(UpstreamStream::Plain(tcp));
        };
        let name = tls::server_name(&host.host)?;
        let tls = tokio::time::timeout(self.connect_timeout, connector.connect(name, tcp))
            .await
            .map_err(|_| UpstreamError::Timeout {
                addr: addr.clone(),
                after: self.connect_timeout,
            })?
            .map_err(|source| UpstreamError::Handshake { addr, source })?;
        Ok(UpstreamStream::Tls(Box::new(tls)))
    }
}

/// A resolver for `mongodb+srv://` lookups: the system's, or one asking
/// `servers` (over UDP, then TCP).
fn resolver(servers: &[std::net::SocketAddr]) -> Result<hickory_resolver::TokioResolver, String> {
    use hickory_resolver::config::{NameServerConfig, ResolverConfig};
    use hickory_resolver::name_server::TokioConnectionProvider;
    use hickory_resolver::proto::xfer::Protocol;
    if servers.is_empty() {
        return hickory_resolver::TokioResolver::builder_tokio()
            .map(|b| b.build())
            .map_err(|e| format!("the system's resolver configuration: {e}"));
    }
    let mut config = ResolverConfig::new();
    for server in servers {
        config.add_name_server(NameServerConfig::new(*server, Protocol::Udp));
        config.add_name_server(NameServerConfig::new(*server, Protocol::Tcp));
    }
    Ok(hickory_resolver::TokioResolver::builder_with_config(
        config,
        TokioConnectionProvider::default(),
    )
    .build())
}

/// Looks up the seeds of a `mongodb+srv://` URI: the SRV targets (each in
/// the host's parent domain, or refused), and from the TXT record, if any,
/// `replicaSet` (the URI's own wins) — `authSource` and `loadBalanced`
/// concern the clients; any other option there is an error, as the
/// specification says.
async fn resolve_srv(
    resolver: &hickory_resolver::TokioResolver,
    srv: &super::uri::SrvName,
    uri_replica_set: Option<&str>,
) -> Result<(Vec<HostPort>, Option<String>), String> {
    let records = resolver
        .srv_lookup(srv.record())
        .await
        .map_err(|e| e.to_string())?;
    let mut hosts = Vec::new();
    for record in records.iter() {
        let target = record.target().to_utf8();
        if !srv.allows(&target) {
            return Err(format!(
                "the SRV record names {target}, outside the domain of {}",
                srv.host
            ));
        }
        hosts.push(HostPort {
            host: target.trim_end_matches('.').to_string(),
            port: record.port(),
        });
    }
    if hosts.is_empty() {
        return Err("the SRV lookup returned no host".into());
    }
    hosts.sort_by_key(HostPort::address);
    let mut replica_set = uri_replica_set.map(str::to_string);
    if let Ok(txt) = resolver
        .txt_lookup(srv.host.trim_end_matches('.').to_string() + ".")
        .await
    {
        let texts: Vec<String> = txt
            .iter()
            .map(|t| {
                t.txt_data()
                    .iter()
                    .map(|part| String::from_utf8_lossy(part).into_owned())
                    .collect()
            })
            .collect();
        if texts.len() > 1 {
            return Err("more than one TXT record".into());
        }
        for pair in texts
            .iter()
            .flat_map(|t| t.split('&'))
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key.to_ascii_lowercase().as_str() {
                "replicaset" => {
                    replica_set.get_or_insert_with(|| value.to_string());
                }
                "authsource" | "loadbalanced" => {}
                _ => return Err(format!("the TXT record sets `{key}`, which it may not")),
            }
        }
    }
    Ok((hosts, replica_set))
}

impl Upstream {
    /// A TCP connection to `host`. The hosts of a `mongodb+srv://` seed
    /// list are looked up with the same resolver as the list itself; other
    /// names with the system's.
    async fn tcp_connect(&self, host: &HostPort) -> io::Result<TcpStream> {
        let resolver = match &self.resolver {
            Some(r) if host.host.parse::<std::net::IpAddr>().is_err() => r,
            _ => return TcpStream::connect(host.address()).await,
        };
        let ips = resolver
            .lookup_ip(host.host.clone())
            .await
            .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.to_string()))?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for ip in ips.iter() {
            match TcpStream::connect((ip, host.port)).await {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

#[derive(Default)]
struct Probe {
    is_primary: bool,
    primary: Option<String>,
    set_name: Option<String>,
}

impl AsyncRead for UpstreamStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_flush(cx),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
