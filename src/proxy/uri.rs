//! The upstream MongoDB connection string, as the drivers write it.
//!
//! Only what the proxy needs is kept: the seed list, `replicaSet` and
//! `directConnection` (do we look for the primary?), the TLS options and the
//! connect timeout. Credentials are not needed on the forwarding path (each
//! client authenticates end to end) and never appear in logs: [`Display`]
//! prints the URI with them removed.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl HostPort {
    pub fn parse(s: &str) -> Result<HostPort, UriError> {
        let bad = || UriError(format!("`{s}` is not HOST or HOST:PORT"));
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            // [ipv6]:port
            let (h, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad()),
            };
            (h.to_string(), port)
        } else {
            match s.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), Some(p)),
                None => (s.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err(bad());
        }
        let port = match port {
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
            None => 27017,
        };
        Ok(HostPort { host, port })
    }

    /// `host:port` as `connect` wants it (IPv6 literals bracketed).
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.address())
    }
}

/// TLS towards the backend, from `tls`/`ssl` and the `tls*` options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamTls {
    pub enabled: bool,
    pub ca_file: Option<PathBuf>,
    /// PEM with the client certificate and its key (X.509 to the backend).
    pub certificate_key_file: Option<PathBuf>,
    pub allow_invalid_certificates: bool,
    pub allow_invalid_hostnames: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamUri {
    /// The seeds (for `mongodb+srv://`, none: they come from DNS).
    pub hosts: Vec<HostPort>,
    /// For `mongodb+srv://`: the host name whose SRV records
    /// (`_<srvServiceName>._tcp.<name>`) list the seeds, and whose TXT
    /// record may add `replicaSet` / `authSource` / `loadBalanced`.
    pub srv: Option<SrvName>,
    pub replica_set: Option<String>,
    pub direct_connection: Option<bool>,
    pub tls: UpstreamTls,
    pub connect_timeout: Option<Duration>,
    /// The URI without credentials, for logs.
    redacted: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UriError(pub String);

/// What a `mongodb+srv://` URI names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvName {
    pub host: String,
    /// `srvServiceName` (default `mongodb`).
    pub service: String,
}

impl SrvName {
    /// The SRV record to look up.
    pub fn record(&self) -> String {
        format!(
            "_{}._tcp.{}.",
            self.service,
            self.host.trim_end_matches('.')
        )
    }

    /// Whether a host an SRV record names may be used: it must lie in the
    /// URI host's parent domain (the seedlist discovery specification's
    /// rule, so a DNS answer cannot send wirelint anywhere else). For a
    /// host of one or two labels, within the host's own domain.
    pub fn allows(&self, target: &str) -> bool {
        let host = self.host.trim_end_matches('.').to_ascii_lowercase();
        let target = target.trim_end_matches('.').to_ascii_lowercase();
        let labels = host.split('.').count();
        let domain = if labels >= 3 {
            host.split_once('.').map_or(host.as_str(), |(_, d)| d)
        } else {
            host.as_str()
        };
        target.ends_with(&format!(".{domain}")) && target != host || labels >= 3 && target == host
    }
}

impl UpstreamUri {
    pub fn parse(uri: &str) -> Result<UpstreamUri, UriError> {
        let (srv, rest) = match (
            uri.strip_prefix("mongodb://"),
            uri.strip_prefix("mongodb+srv://"),
        ) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => {
                return Err(UriError(format!(
                    "upstream must start with mongodb:// or mongodb+srv:// (got `{}`)",
                    redact(uri)
                )))
            }
        };
        let (userinfo, after) = split_userinfo(rest);
        let has_credentials = userinfo.is_some();
        let (hosts_part, tail) = match after.find(['/', '?']) {
            Some(i) => (&after[..i], &after[i..]),
            None => (after, ""),
        };
        let (hosts, srv) = if srv {
            if hosts_part.contains(',') || hosts_part.contains(':') || hosts_part.is_empty() {
                return Err(UriError(
                    "a mongodb+srv:// URI names exactly one host, without a port".into(),
                ));
            }
            let name = SrvName {
                host: hosts_part.to_string(),
                service: "mongodb".into(),
            };
            (Vec::new(), Some(name))
        } else {
            let hosts = hosts_part
                .split(',')
                .map(HostPort::parse)
                .collect::<Result<Vec<_>, _>>()?;
            (hosts, None)
        };
        let query = tail.split_once('?').map(|(_, q)| q).unwrap_or("");

        let mut parsed = UpstreamUri {
            hosts,
            srv,
            replica_set: None,
            direct_connection: None,
            tls: UpstreamTls::default(),
            connect_timeout: None,
            redacted: redact(uri),
        };
        if has_credentials {
            tracing::debug!("credentials in the upstream URI are not used for proxied traffic: clients authenticate end to end");
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                UriError(format!("URI option `{}` has no value", redact_option(pair)))
            })?;
            let value = percent_decode(value)
                .map_err(|why| UriError(format!("URI option {key}: the value {why}")))?;
            let flag = |v: &str| match v {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(UriError(format!(
                    "URI option {key} must be true or false, not `{v}`"
                ))),
            };
            match key.to_ascii_lowercase().as_str() {
                "replicaset" => parsed.replica_set = Some(value),
                "directconnection" => parsed.direct_connection = Some(flag(&value)?),
                "tls" | "ssl" => parsed.tls.enabled = flag(&value)?,
                "tlscafile" => parsed.tls.ca_file = Some(value.into()),
                "tlscertificatekeyfile" => parsed.tls.certificate_key_file = Some(value.into()),
                "tlsallowinvalidcertificates" => {
                    parsed.tls.allow_invalid_certificates = flag(&value)?
                }
                "tlsallowinvalidhostnames" => parsed.tls.allow_invalid_hostnames = flag(&value)?,
                "tlsinsecure" => {
                    let v = flag(&value)?;
                    parsed.tls.allow_invalid_certificates = v;
                    parsed.tls.allow_invalid_hostnames = v;
                }
                "srvservicename" => match &mut parsed.srv {
                    Some(srv) => srv.service = value,
                    None => {
                        return Err(UriError("srvServiceName is for mongodb+srv:// URIs".into()))
                    }
                },
                "connecttimeoutms" => {
                    let ms: u64 = value.parse().map_err(|_| {
                        UriError(format!("connectTimeoutMS must be a number, not `{value}`"))
                    })?;
                    parsed.connect_timeout = Some(Duration::from_millis(ms));
                }
                // Driver-side options (pool sizes, read preference, auth
                // source, compressors, ...) concern the clients, not the proxy.
                _ => {}
            }
        }
        if parsed.tls.ca_file.is_some() || parsed.tls.certificate_key_file.is_some() {
            // As the drivers do: naming TLS files implies TLS.
            parsed.tls.enabled = true;
        }
        if parsed.srv.is_some() {
            // mongodb+srv:// implies TLS unless the URI turns it off.
            let said = query.split('&').any(|p| {
                let key = p.split('=').next().unwrap_or("").to_ascii_lowercase();
                key == "tls" || key == "ssl"
            });
            if !said {
                parsed.tls.enabled = true;
            }
            if parsed.direct_connection == Some(true) {
                return Err(UriError(
                    "directConnection=true cannot be used with mongodb+srv://".into(),
                ));
            }
        }
        if parsed.direct_connection == Some(true) && parsed.hosts.len() > 1 {
            return Err(UriError(
                "directConnection=true needs exactly one host".into(),
            ));
        }
        Ok(parsed)
    }

    /// Whether the proxy looks for the primary from the seeds (and follows
    /// it), rather than connect to the one host given: always, as drivers
    /// do, unless `directConnection=true`. A single seed that is a
    /// secondary leads to its primary; a standalone server or a mongos is
    /// its own.
    pub fn discovers_primary(&self) -> bool {
        self.direct_connection != Some(true)
    }
}

impl fmt::Display for UpstreamUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// URI options whose values are secrets (compared in lower case).
const SECRET_OPTIONS: [&str; 6] = [
    "authmechanismproperties",
    "proxypassword",
    "proxyusername",
    "tlscertificatekeyfilepassword",
    "sslpemkeypassword",
    "sslclientcertificatekeypassword",
];

/// What stands for a secret in what is shown.
const REDACTED: &str = "<redacted>";

/// A URI as it may be shown anywhere (errors, logs, reports, metrics): no
/// user or password, and no value of an option that holds a secret
/// (`authMechanismProperties`, `proxyPassword`, key-file passwords…). Works
/// on anything it is given — a URI without its scheme, or not a URI at all
/// — and is the one place wirelint redacts a URI.
pub fn redact(uri: &str) -> String {
    let (scheme, rest) = match uri.find("://") {
        Some(i) => (&uri[..i + 3], &uri[i + 3..]),
        None => ("", uri),
    };
    let (_, after) = split_userinfo(rest);
    let (head, query) = match after.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (after, None),
    };
    let mut out = format!("{scheme}{head}");
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query.split('&').map(redact_option).collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

/// One `key=value` URI option, its value replaced if it is a secret.
fn redact_option(pair: &str) -> String {
    let key = pair.split('=').next().unwrap_or("");
    if SECRET_OPTIONS.contains(&key.to_ascii_lowercase().as_str()) {
        format!("{key}={REDACTED}")
    } else {
        pair.to_string()
    }
}

/// (userinfo, the rest) of what follows a URI's scheme. The userinfo ends
/// at the last `@` before the query (a password may hold `/`, `@` or `:`
/// that a client forgot to percent-encode: they must not be taken for
/// hosts and echoed in an error).
fn split_userinfo(rest: &str) -> (Option<&str>, &str) {
    let before_query = rest.split('?').next().unwrap_or(rest);
    match before_query.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    }
}

/// Text that may quote the URI given as `uri` (a driver's error, say) with
/// every secret it holds replaced: the user, the password and the secret
/// options' values, as written and percent-decoded.
pub fn scrub(text: &str, uri: &str) -> String {
    let rest = uri.split_once("://").map_or(uri, |(_, rest)| rest);
    let mut secrets: Vec<String> = Vec::new();
    if let (Some(userinfo), _) = split_userinfo(rest) {
        secrets.extend(userinfo.split(':').map(str::to_string));
        secrets.push(userinfo.to_string());
    }
    if let Some((_, query)) = rest.split_once('?') {
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=') {
                if SECRET_OPTIONS.contains(&key.to_ascii_lowercase().as_str()) {
                    secrets.push(value.to_string());
                    // authMechanismProperties=NAME:value,NAME:value
                    secrets.extend(value.split([',', ':']).skip(1).map(str::to_string));
                }
            }
        }
    }
    let decoded: Vec<String> = secrets
        .iter()
        .filter_map(|s| percent_decode(s).ok())
        .collect();
    secrets.extend(decoded);
    // Longest first, so a part never leaves the rest of a longer secret.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = text.to_string();
    for secret in secrets.iter().filter(|s| s.len() >= 3) {
        out = out.replace(secret.as_str(), REDACTED);
    }
    out
}

/// Percent-decodes a URI component; the error says what is wrong without
/// quoting it (it may be a password).
fn percent_decode(s: &str) -> Result<String, &'static str> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("has a bad percent-encoding")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "is not UTF-8 once decoded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_options_and_redaction() {
        let u = UpstreamUri::parse(
            "mongodb://alice:s3cret@a.example:27017,b.example,[::1]:27019/app?replicaSet=rs0&tls=true&tlsCAFile=%2Ftmp%2Fca.pem&connectTimeoutMS=1500&retryWrites=false",
        )
        .unwrap();
        assert_eq!(u.hosts.len(), 3);
        assert_eq!(
            u.hosts[1],
            HostPort {
                host: "b.example".into(),
                port: 27017
            }
        );
        assert_eq!(u.hosts[2].address(), "[::1]:27019");
        assert_eq!(u.replica_set.as_deref(), Some("rs0"));
        assert!(u.tls.enabled);
        assert_eq!(u.tls.ca_file, Some(PathBuf::from("/tmp/ca.pem")));
        assert_eq!(u.connect_timeout, Some(Duration::from_millis(1500)));
        assert!(u.discovers_primary());
        let shown = u.to_string();
        assert!(
            !shown.contains("s3cret") && !shown.contains("alice"),
            "{shown}"
        );
    }

    /// Secrets planted in every position of a URI never come out: not in
    /// its shown form, not in any parse error, not when the URI is
    /// malformed around them.
    #[test]
    fn secrets_never_show() {
        let planted = [
            "plantUser",
            "Sup3r/Secret",
            "Sup3r%2FSecret",
            "plantTok",
            "plantProxy",
            "plantKey",
            "plantSsl",
        ];
        let clean = |what: &str, text: &str| {
            for p in planted {
                assert!(!text.contains(p), "{what} shows {p}: {text}");
            }
        };
        let uri = "mongodb://plantUser:Sup3r%2FSecret@h1:27017,h2/db?replicaSet=rs0\
            &authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:plantTok\
            &proxyHost=p&proxyUsername=plantUser&proxyPassword=plantProxy\
            &tlsCertificateKeyFilePassword=plantKey&sslPEMKeyPassword=plantSsl";
        let u = UpstreamUri::parse(uri).unwrap();
        assert_eq!(u.hosts.len(), 2);
        assert_eq!(u.replica_set.as_deref(), Some("rs0"));
        let shown = u.to_string();
        clean("Display", &shown);
        assert!(shown.contains("h1:27017,h2/db?replicaSet=rs0"), "{shown}");
        assert!(shown.contains("proxyPassword=<redacted>"), "{shown}");
        clean("redact", &redact(uri));
        // An unencoded `/` in the password: read, not taken for a host.
        let u = UpstreamUri::parse("mongodb://admin:Sup3r/Secret@h").unwrap();
        assert_eq!(u.hosts[0].host, "h");
        clean("Display", &u.to_string());
        // Errors.
        for bad in [
            "plantUser:Sup3r/Secret@h:1",
            "postgres://plantUser:Sup3r/Secret@h",
            "mongodb://plantUser:Sup3r/Secret@h:99999",
            "mongodb://plantUser:Sup3r/Secret@h/?proxyPassword=plantProxy%zz",
            "mongodb://h/?proxyPassword",
            "mongodb://h/?tlsCertificateKeyFilePassword=plantKey%ff",
        ] {
            let e = UpstreamUri::parse(bad).unwrap_err().to_string();
            clean(bad, &e);
            clean("redact", &redact(bad));
        }
        // A driver's error quoting parts of the URI.
        let driver = "invalid authMechanismProperties AWS_SESSION_TOKEN:plantTok for user plantUser (password Sup3r/Secret, proxy plantProxy)";
        clean("scrub", &scrub(driver, uri));
        let scrubbed = scrub(driver, "mongodb://plantUser:Sup3r/Secret@h");
        assert!(!scrubbed.contains("plantUser") && !scrubbed.contains("Sup3r/Secret"));
    }

    #[test]
    fn srv_names_the_record_and_implies_tls() {
        let u = UpstreamUri::parse("mongodb+srv://u:p@cluster0.example.net/app?srvServiceName=db")
            .unwrap();
        assert!(u.hosts.is_empty());
        let srv = u.srv.clone().unwrap();
        assert_eq!(srv.record(), "_db._tcp.cluster0.example.net.");
        assert!(u.tls.enabled);
        assert!(u.discovers_primary());
        assert!(!u.to_string().contains("u:p"));
        let plain = UpstreamUri::parse("mongodb+srv://cluster0.example.net/?tls=false").unwrap();
        assert!(!plain.tls.enabled);
        // Targets must lie in the host's parent domain.
        assert!(srv.allows("shard-00.example.net."));
        assert!(srv.allows("a.b.example.net"));
        assert!(!srv.allows("evil.example.org"));
        assert!(!srv.allows("example.net.evil.org"));
        assert!(!srv.allows("notexample.net"));
        let short = SrvName {
            host: "localhost".into(),
            service: "mongodb".into(),
        };
        assert!(short.allows("db0.localhost."));
        assert!(!short.allows("localhost"));
        assert!(!short.allows("db0.elsewhere"));
    }

    #[test]
    fn only_direct_connection_skips_discovery() {
        let u = UpstreamUri::parse("mongodb://127.0.0.1:27017").unwrap();
        assert!(u.discovers_primary(), "a single seed may be a secondary");
        let u = UpstreamUri::parse("mongodb://h/?replicaSet=rs0&directConnection=true").unwrap();
        assert!(!u.discovers_primary());
        assert!(
            UpstreamUri::parse("mongodb://h/?ssl=true")
                .unwrap()
                .tls
                .enabled
        );
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = UpstreamUri::parse("mongodb+srv://a.example.net:27017").unwrap_err();
        assert!(e.0.contains("without a port"));
        assert!(UpstreamUri::parse("mongodb+srv://a.example.net,b.example.net").is_err());
        assert!(UpstreamUri::parse("mongodb+srv://a.example.net/?directConnection=true").is_err());
        let e = UpstreamUri::parse("postgres://u:pw@h").unwrap_err();
        assert!(e.0.contains("mongodb://") && !e.0.contains("pw"));
        assert!(UpstreamUri::parse("mongodb://h:0").is_err());
        assert!(UpstreamUri::parse("mongodb://h:99999").is_err());
        assert!(UpstreamUri::parse("mongodb://h/?tls=yes").is_err());
        assert!(UpstreamUri::parse("mongodb://a,b/?directConnection=true").is_err());
    }
}
