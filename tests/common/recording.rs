//! The same traffic at another speed. A [`Relay`] sits between an
//! application and wirelint and records every whole message each way, with
//! when it went by; [`replay`] feeds a recording to a fresh analysis, as
//! `wirelint analyse` feeds a capture (the proxy's decoding and engine,
//! ticked as the proxy ticks), on a clock of its own: as recorded, or with
//! a second of the application's own work before each request (a slow
//! handler, a loaded CI machine). Values link operations and wall-clock
//! time must not decide, so both give the same findings.

use super::Frames;
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use wirelint::app::offline::Offline;
use wirelint::capture;
use wirelint::config::ProxySettings;
use wirelint::rules::Finding;
use wirelint::stats::Direction;

/// Messages recorded at most (a test's application sends far fewer).
const MAX_EVENTS: usize = 2_000_000;

/// What went by: a whole message on a connection, or its close.
#[derive(Clone)]
pub enum Event {
    Message {
        conn: u64,
        direction: Direction,
        at: Instant,
        bytes: Bytes,
    },
    Closed {
        conn: u64,
        at: Instant,
    },
}

impl Event {
    fn at(&self) -> Instant {
        match self {
            Event::Message { at, .. } | Event::Closed { at, .. } => *at,
        }
    }
}

type Events = Arc<Mutex<Vec<Event>>>;

/// A relay to `target` that records the messages it passes.
pub struct Relay {
    addr: SocketAddr,
    events: Events,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let events: Events = Arc::default();
        let recorded = events.clone();
        let task = tokio::spawn(async move {
            let mut next_conn = 1u64;
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(target).await else {
                    continue;
                };
                let conn = next_conn;
                next_conn += 1;
                tokio::spawn(relay(conn, client, server, recorded.clone()));
            }
        });
        Relay { addr, events, task }
    }

    /// The connection string the application is given.
    pub fn uri(&self) -> String {
        format!("mongodb://{}/", self.addr)
    }

    /// What it recorded so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn record(events: &Events, event: Event) {
    let mut e = events.lock().unwrap();
    if e.len() < MAX_EVENTS {
        e.push(event);
    }
}

/// Passes whole messages both ways, each recorded before it is passed on
/// (so a request is always recorded before its reply).
async fn relay(conn: u64, client: TcpStream, server: TcpStream, events: Events) {
    let (client_r, client_w) = client.into_split();
    let (server_r, server_w) = server.into_split();
    tokio::join!(
        pass(conn, Direction::Request, client_r, server_w, &events),
        pass(conn, Direction::Reply, server_r, client_w, &events),
    );
    record(
        &events,
        Event::Closed {
            conn,
            at: Instant::now(),
        },
    );
}

/// One way of a relayed connection.
async fn pass(
    conn: u64,
    direction: Direction,
    from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    events: &Events,
) {
    let mut frames = Frames::new(from);
    while let Ok(m) = frames.next().await {
        let bytes = Bytes::from(m);
        record(
            events,
            Event::Message {
                conn,
                direction,
                at: Instant::now(),
                bytes: bytes.clone(),
            },
        );
        if to.write_all(&bytes).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// The findings of `events` analysed as `wirelint analyse` analyses a
/// capture (`app::offline`: the proxy's decoding, engine and ticks), with
/// the rules, thresholds and partition keys of `settings`, `gap` of the
/// application's own work added before each request.
pub fn replay(events: &[Event], settings: &ProxySettings, gap: Duration) -> Vec<Finding> {
    let Some(first) = events.first().map(Event::at) else {
        return Vec::new();
    };
    let mut offline = Offline::new(&settings.analysis, "replay".into());
    let mut requests = 0u32;
    for event in events {
        let at = |requests: u32| event.at().saturating_duration_since(first) + gap * requests;
        match event {
            Event::Message {
                conn,
                direction,
                bytes,
                ..
            } => {
                if *direction == Direction::Request {
                    requests += 1;
                }
                offline.event(capture::Event::Message {
                    conn: *conn,
                    direction: *direction,
                    at: at(requests),
                    frame: bytes.clone(),
                });
            }
            Event::Closed { conn, .. } => offline.event(capture::Event::Closed { conn: *conn }),
        }
    }
    offline
        .finish(capture::Account::default(), 0)
        .report
        .findings
}

/// Runs `f` while every core is kept busy by threads of their own (the
/// test's, beside the application's and wirelint's): a loaded CI machine.
pub async fn under_contention<T>(f: impl std::future::Future<Output = T>) -> T {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..cores)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for i in 0..10_000u64 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
                    }
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    let out = f.await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        let _ = h.join();
    }
    out
}

/// The (rule, namespace, subject, severity) of each finding: what must not
/// depend on which pooled connection served a call, or on timing.
pub fn judged(findings: &[Finding]) -> std::collections::BTreeSet<String> {
    findings
        .iter()
        .map(|f| format!("{} {} {} {:?}", f.rule, f.namespace, f.subject, f.severity))
        .collect()
}

/// The (rule, namespace, severity) of each finding, for runs whose
/// requests are named differently: a request named by its `comment` when
/// tagged is named by its shape untagged, and a subject may be a request's
/// name.
pub fn judged_placed(findings: &[Finding]) -> std::collections::BTreeSet<String> {
    findings
        .iter()
        .map(|f| format!("{} {} {:?}", f.rule, f.namespace, f.severity))
        .collect()
}

/// Findings as JSON without when they were seen.
fn untimed(findings: &[Finding]) -> Vec<serde_json::Value> {
    findings
        .iter()
        .map(|f| {
            let mut v = serde_json::to_value(f).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("first_seen");
            o.remove("last_seen");
            v
        })
        .collect()
}

/// What differs when `name`'s traffic (`events`, whose live run found
/// `live`) goes by at another speed: replayed twice as recorded (the same
/// report apart from timings), a second apart (the same judged findings
/// as live), and, where FerretDB runs on SQLite, `rerun` (when given: a
/// run that is not under contention already) live under CPU contention
/// (the same judged findings). `None` when nothing differs.
pub async fn steadiness<F: std::future::Future<Output = Vec<Finding>>>(
    name: &str,
    settings: &ProxySettings,
    live: &[Finding],
    events: &[Event],
    rerun: Option<impl FnOnce() -> F>,
) -> Option<String> {
    let live = judged(live);
    let mut out = String::new();
    let plain = untimed(&replay(events, settings, Duration::ZERO));
    let again = untimed(&replay(events, settings, Duration::ZERO));
    if plain != again {
        out.push_str(&format!(
            "\n{name}, replayed twice: the reports differ:\n{plain:#?}\n{again:#?}"
        ));
    }
    let slow = judged(&replay(events, settings, Duration::from_secs(1)));
    if slow != live {
        out.push_str(&format!(
            "\n{name}, a second between operations: only live {:?}, only slow {:?}",
            live.difference(&slow).collect::<Vec<_>>(),
            slow.difference(&live).collect::<Vec<_>>()
        ));
    }
    if let Some(rerun) = rerun.filter(|_| super::storage() == super::Storage::Sqlite) {
        let loaded = judged(&under_contention(rerun()).await);
        if loaded != live {
            out.push_str(&format!(
                "\n{name}, under CPU contention: only plain {:?}, only loaded {:?}",
                live.difference(&loaded).collect::<Vec<_>>(),
                loaded.difference(&live).collect::<Vec<_>>()
            ));
        }
    }
    (!out.is_empty()).then_some(out)
}
