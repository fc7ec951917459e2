//! Sessions run on wirelint's forwarding threads — one per core, each a
//! single-threaded runtime of its own — and not on the runtime that
//! started the proxy; the threads end with the proxy. (A test binary of its
//! own: other tests' proxies would have forwarding threads too.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wirelint::wire::{op_msg, Header};

/// The names of this process's threads.
fn threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect()
}

fn forwarding_threads() -> usize {
    threads()
        .iter()
        .filter(|t| t.starts_with("wirelint-fwd-"))
        .count()
}

/// Every log line of the proxy, written with the name of the thread that
/// wrote it.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    /// The lines a session logs first, from the thread that runs it.
    fn accepted(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(": accepted "))
            .map(str::to_string)
            .collect()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn sessions_run_on_the_forwarding_threads_which_end_with_the_proxy() {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_thread_names(true)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();
    assert_eq!(forwarding_threads(), 0);
    // A backend that is not there: each client's first message is answered
    // by its session with an error, which is all the forwarding it needs.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("mongodb://{}/", closed.local_addr().unwrap());
    drop(closed);
    let mut settings = wirelint::ProxySettings::new("127.0.0.1:0", &upstream).unwrap();
    settings.analysis.enabled = false;
    let proxy = wirelint::Proxy::start(settings).await.unwrap();
    let cores = std::thread::available_parallelism().unwrap().get();
    // (A thread takes its name once it runs.)
    let deadline = Instant::now() + Duration::from_secs(10);
    while forwarding_threads() < cores {
        assert!(Instant::now() < deadline, "{:?}", threads());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(forwarding_threads(), cores, "{:?}", threads());

    let hello = op_msg::encode(
        1,
        0,
        0,
        bson::rawdoc! {"hello": 1, "$db": "admin"}.as_bytes(),
        &[],
    );
    const SESSIONS: usize = 16;
    for _ in 0..SESSIONS {
        let mut client = TcpStream::connect(proxy.local_addr()).await.unwrap();
        client.write_all(&hello).await.unwrap();
        let mut header = [0u8; 16];
        client.read_exact(&mut header).await.unwrap();
        let len = Header::parse(&header).unwrap().message_length as usize;
        let mut rest = vec![0u8; len - 16];
        client.read_exact(&mut rest).await.unwrap();
    }
    // Each session logs "accepted" from the thread that runs it.
    let accepted = log.accepted();
    assert_eq!(accepted.len(), SESSIONS, "{accepted:#?}");
    for line in &accepted {
        assert!(line.contains(" wirelint-fwd-"), "{line}");
    }
    let used = (0..cores)
        .filter(|i| {
            accepted
                .iter()
                .any(|l| l.contains(&format!(" wirelint-fwd-{i} ")))
        })
        .count();
    assert_eq!(used, cores, "round-robin uses every thread: {accepted:#?}");

    proxy.shutdown().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while forwarding_threads() > 0 {
        assert!(Instant::now() < deadline, "left: {:?}", threads());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
