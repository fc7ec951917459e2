//! Test harness: real FerretDB instances on free ports, an in-process
//! wirelint in front of them, certificates made at run time, and a log
//! capture so tests can check what wirelint said.
#![allow(dead_code)]

pub mod applications;
pub mod containers;
pub mod expected;
pub mod fault;
pub mod recording;
pub mod tcpdump;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use wirelint::{Proxy, ProxySettings};

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The FerretDB binary: `WIRELINT_FERRETDB`, else built (once) by
/// `scripts/ferretdb.sh install`.
pub fn ferretdb_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("WIRELINT_FERRETDB") {
            return PathBuf::from(p);
        }
        let out = Command::new("bash")
            .arg(manifest_dir().join("scripts/ferretdb.sh"))
            .arg("install")
            .stderr(Stdio::inherit())
            .output()
            .expect("running scripts/ferretdb.sh");
        assert!(
            out.status.success(),
            "scripts/ferretdb.sh install failed: FerretDB is required for these tests"
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[derive(Default, Clone)]
pub struct BackendOptions {
    pub repl_set: Option<String>,
    /// (certificate, key) PEM files: FerretDB also listens with TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// A CA file: FerretDB's TLS port then requires client certificates
    /// signed by it.
    pub tls_client_ca: Option<PathBuf>,
    /// (user, password): SCRAM authentication required.
    pub user: Option<(String, String)>,
}

/// Which storage FerretDB runs on: `WIRELINT_BACKEND=postgresql` puts every
/// FerretDB of the test binary on PostgreSQL (one server per test binary,
/// one database per FerretDB); unset or `sqlite`, on SQLite files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    Sqlite,
    Postgresql,
}

pub fn storage() -> Storage {
    match std::env::var("WIRELINT_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => Storage::Sqlite,
        Ok("postgresql") => Storage::Postgresql,
        Ok(other) => panic!("WIRELINT_BACKEND={other}: expected sqlite or postgresql"),
    }
}

/// A PostgreSQL server for this test binary (`scripts/ferretdb.sh
/// postgresql`), watched like FerretDB so that it ends with the tests.
struct Postgresql {
    port: u16,
    dir: PathBuf,
    _watcher: Child,
    _stdin: Option<ChildStdin>,
}

impl Postgresql {
    fn shared() -> &'static Postgresql {
        static PG: OnceLock<Postgresql> = OnceLock::new();
        PG.get_or_init(|| {
            // Under /tmp and readable: as root the server runs as `postgres`,
            // which must reach its directory. A static is never dropped:
            // the server ends with this process (its watcher's stdin
            // closes), and the next test binary removes what is left.
            remove_stale_clusters();
            let dir = std::env::temp_dir().join(format!("wirelint-pg-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let port = free_port_below_ephemeral();
            let args = vec![
                manifest_dir()
                    .join("scripts/ferretdb.sh")
                    .display()
                    .to_string(),
                "postgresql".to_string(),
                port.to_string(),
                dir.join("cluster").display().to_string(),
            ];
            let (watcher, stdin) =
                spawn_watched(Path::new("bash"), &args, &dir.join("postgresql.log"));
            let pg = Postgresql {
                port,
                dir,
                _watcher: watcher,
                _stdin: stdin,
            };
            let deadline = Instant::now() + Duration::from_secs(60);
            while !pg.query("SELECT 1").status.success() {
                assert!(
                    Instant::now() < deadline,
                    "PostgreSQL did not answer on port {port} within 60 s; its log:\n{}",
                    std::fs::read_to_string(pg.dir.join("postgresql.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            pg
        })
    }

    fn query(&self, sql: &str) -> std::process::Output {
        Command::new(pg_bindir().join("psql"))
            .args([
                "-q",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .arg("-p")
            .arg(self.port.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("running psql")
    }

    /// A new, empty database: one per FerretDB, as a SQLite directory is.
    fn new_database(&self) -> String {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let name = format!(
            "ferretdb_{}",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let out = self.query(&format!("CREATE DATABASE {name}"));
        assert!(
            out.status.success(),
            "CREATE DATABASE {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

/// The clusters of test processes that have ended.
fn remove_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("wirelint-pg-")) else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn pg_bindir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // pg_config names the server's binaries where the server is
        // installed; Debian's libpq-dev alone has a pg_config too, so look
        // for the programs themselves, and in /usr/lib/postgresql/*/bin.
        let from_pg_config = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|dirs| dirs.flatten().map(|d| d.path().join("bin")).collect())
            .unwrap_or_default();
        versions.sort();
        from_pg_config
            .into_iter()
            .chain(versions.into_iter().rev())
            .find(|dir| dir.join("initdb").exists() && dir.join("psql").exists())
            .expect(
                "WIRELINT_BACKEND=postgresql needs PostgreSQL's server: apt-get install postgresql",
            )
    })
}

/// A free port in 20000–32767, below the ephemeral range, where no
/// outgoing connection can take it between this check and the server's
/// bind.
fn free_port_below_ephemeral() -> u16 {
    let seed = std::process::id() as u64 ^ Instant::now().elapsed().as_nanos() as u64;
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    for _ in 0..500 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let port = 20000 + ((x >> 33) % 12768) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000-32767 for PostgreSQL");
}

/// A FerretDB process in a temporary directory, on SQLite files or, with
/// `WIRELINT_BACKEND=postgresql`, on a database of its own in the test
/// binary's PostgreSQL server. It is started under a small shell that kills
/// it when the test process's end of its stdin closes, so no FerretDB
/// outlives the tests, even on a crash.
pub struct Backend {
    pub port: u16,
    pub tls_port: Option<u16>,
    watcher: Child,
    stdin: Option<ChildStdin>,
    dir: tempfile::TempDir,
    args: Vec<String>,
    /// The PostgreSQL database it stores in (`WIRELINT_BACKEND=postgresql`).
    postgresql: Option<String>,
}

impl Backend {
    /// Started on free ports; when another process binds a port between
    /// its choice and FerretDB's bind (the log says "address already in
    /// use"), started again on others, three times at most.
    pub fn start(options: BackendOptions) -> Backend {
        for attempt in 1.. {
            let backend = Backend::start_once(&options);
            match backend.ready() {
                Ok(()) => return backend,
                Err(why) if attempt < 3 && backend.log().contains("address already in use") => {
                    eprintln!("FerretDB: {why}; starting it on other ports");
                }
                Err(why) => panic!("{why}; its log:\n{}", backend.log()),
            }
        }
        unreachable!()
    }

    fn start_once(options: &BackendOptions) -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let postgresql = match storage() {
            Storage::Sqlite => None,
            Storage::Postgresql => Some(Postgresql::shared().new_database()),
        };
        let handler = match &postgresql {
            None => [
                "--handler=sqlite".to_string(),
                format!("--sqlite-url=file:{}/", dir.path().display()),
            ],
            Some(url) => [
                "--handler=postgresql".to_string(),
                format!("--postgresql-url={url}"),
            ],
        };
        let mut args = vec![
            handler[0].clone(),
            handler[1].clone(),
            format!("--state-dir={}", dir.path().display()),
            format!("--listen-addr=127.0.0.1:{port}"),
            "--debug-addr=127.0.0.1:0".to_string(),
            "--telemetry=disable".to_string(),
            "--log-level=warn".to_string(),
        ];
        if let Some(name) = &options.repl_set {
            args.push(format!("--repl-set-name={name}"));
        }
        let mut tls_port = None;
        if let Some((cert, key)) = &options.tls {
            let p = free_port();
            tls_port = Some(p);
            args.push(format!("--listen-tls=127.0.0.1:{p}"));
            args.push(format!("--listen-tls-cert-file={}", cert.display()));
            args.push(format!("--listen-tls-key-file={}", key.display()));
            if let Some(ca) = &options.tls_client_ca {
                args.push(format!("--listen-tls-ca-file={}", ca.display()));
            }
        }
        if let Some((user, password)) = &options.user {
            args.push(format!("--setup-username={user}"));
            args.push(format!("--setup-password={password}"));
            args.push("--setup-database=admin".to_string());
            args.push("--test-enable-new-auth".to_string());
        }
        let (watcher, stdin) =
            spawn_watched(ferretdb_bin(), &args, &dir.path().join("ferretdb.log"));
        Backend {
            port,
            tls_port,
            watcher,
            stdin,
            dir,
            args,
            postgresql,
        }
    }

    /// Whether FerretDB listens on its ports (and its TLS port).
    fn ready(&self) -> Result<(), String> {
        self.listens(self.port)?;
        match self.tls_port {
            Some(p) => self.listens(p),
            None => Ok(()),
        }
    }

    /// Waits up to 30 s for FerretDB to listen on `port`; not when its log
    /// says it could not.
    fn listens(&self, port: u16) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            // Its own failure first: a port it could not bind may have
            // another server's listener behind it.
            if self.log().contains("Failed to construct listener") {
                break;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("FerretDB did not listen on port {port}"))
    }

    fn wait_ready(&self, port: u16) {
        if let Err(why) = self.listens(port) {
            panic!("{why} within 30 s; its log:\n{}", self.log());
        }
    }

    /// One FerretDB shared by the tests of a test binary (each test uses
    /// its own database).
    pub fn shared() -> &'static Backend {
        static SHARED: OnceLock<Backend> = OnceLock::new();
        SHARED.get_or_init(|| Backend::start(BackendOptions::default()))
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/", self.port)
    }

    /// Whether the storage this FerretDB was started on holds the MongoDB
    /// database `db`: its SQLite file, or its schema in PostgreSQL.
    pub fn storage_holds(&self, db: &str) -> bool {
        match &self.postgresql {
            None => self.dir.path().join(format!("{db}.sqlite")).exists(),
            Some(url) => {
                let out = Command::new(pg_bindir().join("psql"))
                    .args(["-tA", "-d", url, "-c"])
                    .arg(format!(
                        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = '{db}'"
                    ))
                    .stdin(Stdio::null())
                    .output()
                    .expect("running psql");
                String::from_utf8_lossy(&out.stdout).trim() == "1"
            }
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ferretdb.log")).unwrap_or_default()
    }

    /// Stops FerretDB now (SIGTERM through its watcher) and waits for it.
    pub fn kill(&mut self) {
        self.stop("TERM");
    }

    /// Kills FerretDB with SIGKILL, as a crash would, and waits for it.
    pub fn crash(&mut self) {
        self.stop("KILL");
    }

    fn stop(&mut self, signal: &str) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(format!("{signal}\n").as_bytes());
        }
        let _ = self.watcher.wait();
    }

    /// Starts FerretDB again on the same port and data (after `kill` or
    /// `crash`).
    pub fn restart(&mut self) {
        self.stop("TERM");
        let (watcher, stdin) = spawn_watched(
            ferretdb_bin(),
            &self.args,
            &self.dir.path().join("ferretdb.log"),
        );
        self.watcher = watcher;
        self.stdin = stdin;
        self.wait_ready(self.port);
    }
}

/// A server (FerretDB, PostgreSQL) under a small shell that kills it (with
/// the signal written to its stdin, SIGTERM when stdin just closes) — so no
/// server outlives the tests, even when the test process crashes.
fn spawn_watched(program: &Path, args: &[String], log: &Path) -> (Child, Option<ChildStdin>) {
    let mut watcher = Command::new("sh")
        .arg("-c")
        .arg(r#""$@" >>"$FERRETDB_LOG" 2>&1 & child=$!; read sig; kill -"${sig:-TERM}" $child 2>/dev/null; wait $child"#)
        .arg("sh")
        .arg(program)
        .args(args)
        .env("FERRETDB_LOG", log)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting FerretDB");
    let stdin = watcher.stdin.take();
    (watcher, stdin)
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A proxy in front of `upstream` on a free port, with default settings.
pub async fn proxy(upstream: &str) -> Proxy {
    proxy_with(settings(upstream)).await
}

pub fn settings(upstream: &str) -> ProxySettings {
    capture_logs();
    ProxySettings::new("127.0.0.1:0", upstream).unwrap()
}

pub async fn proxy_with(settings: ProxySettings) -> Proxy {
    capture_logs();
    Proxy::start(settings).await.expect("starting wirelint")
}

/// Polls `check` until it holds or `timeout` passes (for counters the
/// analysis threads update asynchronously).
pub async fn eventually(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

static LOGS: Mutex<String> = Mutex::new(String::new());

struct CaptureWriter;

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        eprint!("{text}");
        LOGS.lock().unwrap().push_str(&text);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends wirelint's log lines (plain text, `RUST_LOG` or info) to a buffer
/// the tests can search, and to stderr.
pub fn capture_logs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("wirelint=info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(|| CaptureWriter)
            .try_init();
    });
}

/// The captured log lines that contain every one of `needles`.
pub fn log_lines_with(needles: &[&str]) -> Vec<String> {
    LOGS.lock()
        .unwrap()
        .lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_string)
        .collect()
}

/// A CA and a certificate for `localhost`/127.0.0.1 signed by it, plus a
/// client certificate, as PEM files in a temporary directory.
pub struct Certs {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// Certificate and key in one PEM (`tlsCertificateKeyFile`).
    pub client_pem: PathBuf,
    /// A CA that signed nothing here (for "wrong CA" tests).
    pub other_ca: PathBuf,
}

pub fn make_certs() -> Certs {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
    let dir = tempfile::tempdir().unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "wirelint test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();

    let server_key = KeyPair::generate().unwrap();
    let server_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let server = server_params.signed_by(&server_key, &ca, &ca_key).unwrap();

    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(vec!["client".to_string()]).unwrap();
    client_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "wirelint test client");
    let client = client_params.signed_by(&client_key, &ca, &ca_key).unwrap();

    let other_key = KeyPair::generate().unwrap();
    let mut other_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    other_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let other = other_params.self_signed(&other_key).unwrap();

    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    Certs {
        ca: write("ca.pem", ca.pem()),
        server_cert: write("server.pem", server.pem()),
        server_key: write("server.key", server_key.serialize_pem()),
        client_pem: write(
            "client.pem",
            format!("{}{}", client.pem(), client_key.serialize_pem()),
        ),
        other_ca: write("other-ca.pem", other.pem()),
        dir,
    }
}

/// Insert, find, update, delete, findAndModify, aggregate and count; the
/// results as text, without anything that differs between two databases.
pub async fn crud(client: &mongodb::Client, db: &str) -> Vec<String> {
    use futures_util::TryStreamExt;
    use mongodb::bson::{doc, Document};
    let coll = client.database(db).collection::<Document>("items");
    let _ = coll.drop().await;
    let mut out = Vec::new();
    let docs: Vec<Document> = (0..20)
        .map(|i| doc! {"_id": i, "group": i % 3, "name": format!("item{i}"), "tags": ["a"], "n": 0})
        .collect();
    let inserted = coll.insert_many(docs).await.unwrap();
    out.push(format!("inserted {}", inserted.inserted_ids.len()));
    out.push(format!(
        "{:?}",
        coll.find_one(doc! {"_id": 5}).await.unwrap()
    ));
    let r = coll
        .update_one(
            doc! {"_id": 5},
            doc! {"$set": {"name": "five"}, "$inc": {"n": 1}},
        )
        .await
        .unwrap();
    out.push(format!(
        "update_one {} {}",
        r.matched_count, r.modified_count
    ));
    let r = coll
        .update_many(doc! {"group": 1}, doc! {"$push": {"tags": "x"}})
        .await
        .unwrap();
    out.push(format!(
        "update_many {} {}",
        r.matched_count, r.modified_count
    ));
    let r = coll
        .update_one(doc! {"_id": 100}, doc! {"$set": {"name": "upserted"}})
        .upsert(true)
        .await
        .unwrap();
    out.push(format!("upsert {:?}", r.upserted_id));
    out.push(format!(
        "delete_one {}",
        coll.delete_one(doc! {"_id": 7})
            .await
            .unwrap()
            .deleted_count
    ));
    out.push(format!(
        "delete_many {}",
        coll.delete_many(doc! {"group": 2})
            .await
            .unwrap()
            .deleted_count
    ));
    let found = coll
        .find_one_and_update(doc! {"_id": 1}, doc! {"$inc": {"n": 10}})
        .return_document(mongodb::options::ReturnDocument::After)
        .await
        .unwrap();
    out.push(format!("find_one_and_update {found:?}"));
    let removed = coll.find_one_and_delete(doc! {"_id": 3}).await.unwrap();
    out.push(format!("find_one_and_delete {removed:?}"));
    let all: Vec<Document> = coll
        .find(doc! {})
        .sort(doc! {"_id": 1})
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    out.push(format!("find {all:?}"));
    let groups: Vec<Document> = coll
        .aggregate(vec![
            doc! {"$match": {"n": {"$gte": 0}}},
            doc! {"$group": {"_id": "$group", "count": {"$sum": 1}}},
            doc! {"$sort": {"_id": 1}},
        ])
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    out.push(format!("aggregate {groups:?}"));
    out.push(format!(
        "count {}",
        coll.count_documents(doc! {"group": 1}).await.unwrap()
    ));
    out.push(format!(
        "distinct {:?}",
        coll.distinct("group", doc! {}).await.unwrap()
    ));
    out
}

/// Runs a write and a read with a driver given `uri` (default options) and
/// returns every server address the driver opened a connection to.
pub async fn servers_seen(uri: &str) -> Vec<String> {
    use mongodb::bson::{doc, Document};
    use mongodb::event::sdam::SdamEvent;
    use mongodb::event::EventHandler;
    use std::sync::Arc;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut options = mongodb::options::ClientOptions::parse(uri).await.unwrap();
    options.server_selection_timeout = Some(Duration::from_secs(5));
    let sink = seen.clone();
    options.sdam_event_handler = Some(EventHandler::callback(move |ev: SdamEvent| {
        if let SdamEvent::ServerOpening(e) = ev {
            sink.lock().unwrap().push(e.address.to_string());
        }
    }));
    let c = mongodb::Client::with_options(options).unwrap();
    let coll = c.database("rs_test").collection::<Document>("c");
    coll.insert_one(doc! {"a": 1}).await.unwrap();
    coll.find_one(doc! {}).await.unwrap();
    // Give the monitors time to act on what hello said.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let mut v = seen.lock().unwrap().clone();
    v.sort();
    v.dedup();
    v
}

/// A driver client with a 10 s server-selection timeout.
pub async fn client(uri: &str) -> mongodb::Client {
    let mut options = mongodb::options::ClientOptions::parse(uri).await.unwrap();
    options.server_selection_timeout = Some(Duration::from_secs(10));
    mongodb::Client::with_options(options).unwrap()
}

/// A `ping` with a driver that gives up selecting a server after
/// `selection_timeout` (for checks that a connection is refused or fails).
pub async fn ping(
    uri: &str,
    selection_timeout: Duration,
) -> mongodb::error::Result<mongodb::bson::Document> {
    let mut options = mongodb::options::ClientOptions::parse(uri).await.unwrap();
    options.server_selection_timeout = Some(selection_timeout);
    mongodb::Client::with_options(options)
        .unwrap()
        .database("admin")
        .run_command(mongodb::bson::doc! {"ping": 1})
        .await
}

/// The wirelint binary, with no `WIRELINT_*` variables inherited.
/// `command` as if run from a shell rather than from `cargo test`: without
/// the variables Cargo sets for a test. With them, a build the command
/// starts sees another environment (ring's build script watches
/// CARGO_MANIFEST_DIR) and rebuilds the release binary that
/// scripts/test.sh made from scratch.
pub fn outside_cargo_test(command: &mut Command) -> &mut Command {
    const SET_FOR_A_TEST: [&str; 6] = [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
        "CARGO_PRIMARY_",
        "CARGO_TARGET_TMPDIR",
    ];
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if SET_FOR_A_TEST.iter().any(|p| name.starts_with(p)) {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// Runs `cmd` to its end: its exit status (-1 when killed), stdout and
/// stderr.
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// SIGKILL to every process of the group `group` leads (a child spawned
/// with `process_group(0)`); none left is not an error.
pub fn kill_process_group(group: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(group as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Runs an outside tool (npm, a test runner, Maven, pip) to its end, as
/// `Command::output` does, but never longer than `limit`: past it, the
/// command and everything it started (its process group) are killed and
/// the test fails naming the command, with what it printed so far. A
/// runner that never exits (an open handle, a registry that stops
/// answering) fails its test instead of holding the whole run. The
/// command, its output and its time are printed (shown when the test
/// fails).
pub fn output_within(command: &mut Command, limit: Duration) -> std::process::Output {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::sync::Arc;
    let began = Instant::now();
    let mut child = command
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let group = child.id();
    // Each pipe read on a thread of its own into a buffer this side can
    // take at any time: a pipe that a left-behind process holds open never
    // ends its read.
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let reader = std::thread::spawn(move || {
            let Some(mut pipe) = pipe else { return };
            let mut chunk = [0u8; 8192];
            while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                sink.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        (buf, reader)
    };
    let (stdout, out_reader) = read(child.stdout.take().map(|p| Box::new(p) as _));
    let (stderr, err_reader) = read(child.stderr.take().map(|p| Box::new(p) as _));
    let kill_group = || kill_process_group(group);
    let deadline = began + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            kill_group();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The pipes end when every process holding them has; what the command
    // left running past the deadline is killed.
    while !(out_reader.is_finished() && err_reader.is_finished()) {
        if Instant::now() >= deadline {
            kill_group();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
    eprintln!(
        "{command:?} ({:.1} s)\n{}{}",
        began.elapsed().as_secs_f64(),
        text(&stdout),
        text(&stderr)
    );
    let Some(status) = status else {
        panic!(
            "{command:?} did not end within {} s: killed with everything it started (its output is above)",
            limit.as_secs()
        );
    };
    let take = |b: Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *b.lock().unwrap());
    std::process::Output {
        status,
        stdout: take(stdout),
        stderr: take(stderr),
    }
}

pub fn wirelint_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wirelint"));
    for (key, _) in std::env::vars() {
        if key.starts_with("WIRELINT_") {
            cmd.env_remove(key);
        }
    }
    cmd.env_remove("RUST_LOG");
    cmd
}

/// Whole messages from a stream, in order (bytes after one message are
/// kept for the next).
pub struct Frames<R> {
    pub reader: R,
    buf: Vec<u8>,
}

impl<R: tokio::io::AsyncRead + Unpin> Frames<R> {
    pub fn new(reader: R) -> Frames<R> {
        Frames {
            reader,
            buf: Vec::new(),
        }
    }

    pub async fn next(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if self.buf.len() >= 4 {
                let len = i32::from_le_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= len {
                    return Ok(self.buf.drain(..len).collect());
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = tokio::io::AsyncReadExt::read(&mut self.reader, &mut chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A JSON report's tests as a test runner named them: every test it said
/// was running (`tests[].id`), and the tests the finding of `rule` names
/// (`findings[].tests[].test`). Panics when there is no such finding.
pub fn report_tests(report: &serde_json::Value, rule: &str) -> (Vec<String>, Vec<String>) {
    let strings = |list: &serde_json::Value, key: &str| -> Vec<String> {
        list.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t[key].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let finding = report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["rule"] == rule))
        .unwrap_or_else(|| panic!("no {rule} finding: {report}"));
    (
        strings(&report["tests"], "id"),
        strings(&finding["tests"], "test"),
    )
}

/// The file and line the SARIF result of `rule` is located at.
pub fn sarif_location(results: &[serde_json::Value], rule: &str) -> (String, u64) {
    let result = results
        .iter()
        .find(|r| r["ruleId"] == rule)
        .unwrap_or_else(|| panic!("no {rule} result: {results:?}"));
    let location = &result["locations"][0]["physicalLocation"];
    (
        location["artifactLocation"]["uri"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        location["region"]["startLine"].as_u64().unwrap_or(0),
    )
}
