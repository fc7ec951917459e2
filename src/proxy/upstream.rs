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
}

/// Server error codes that say the member is not (or no longer) a writable
/// primary (the SDAM specification's "not writable primary" and
/// "node is recovering" errors that follow a stepdown).
pub const NOT_PRIMARY_CODES: [i32; 6] = [10107, 13435, 13436, 10058, 11602, 189];

impl Upstream {
    pub fn new(uri: UpstreamUri, connect_timeout: Duration) -> Result<Upstream, TlsError> {
        let tls = tls::connector(&uri.tls)?;
        let connect_timeout = uri.connect_timeout.unwrap_or(connect_timeout);
        Ok(Upstream {
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
        if !self.uri.discovers_primary() {
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
        let mut notes = Vec::new();
        for seed in &self.uri.hosts {
            match self.probe(seed).await {
                Ok(probe) => {
                    if let (Some(want), Some(got)) = (&self.uri.replica_set, &probe.set_name) {
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
                Err(e) if self.uri.hosts.len() == 1 => return Err(e),
                Err(e) => notes.push(e.to_string()),
            }
        }
        Err(UpstreamError::NoPrimary(notes.join("; ")))
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
            super::session::read_frame(&mut stream).await
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
        let tcp = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&addr))
            .await
            .map_err(|_| UpstreamError::Timeout {
                addr: addr.clone(),
                after: self.connect_timeout,
            })?
            .map_err(|source| UpstreamError::Connect {
                addr: addr.clone(),
                source,
            })?;
        super::tune_socket(&tcp);
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
