//! Test support, not a part of wirelint: a fault injector that makes a
//! real FerretDB answer as Azure Cosmos DB for MongoDB does when it
//! throttles.
//!
//! [`CosmosThrottle`] is a TCP relay on 127.0.0.1 in front of a backend.
//! wirelint's upstream points at it (client → wirelint → relay → FerretDB).
//! It forwards whole wire messages both ways, unchanged, and reads only
//! what it must to choose: an OP_MSG request whose body's first key is a
//! chosen command (`find`, `insert`, …) naming a chosen collection (the
//! command's value), on chosen call numbers of that (command, collection),
//! is not forwarded: the relay answers it itself with the reply Cosmos DB
//! sends ([`Fault`]: the command refused, or a write accepted with every
//! statement failed in `writeErrors`), and keeps the exact bytes of every
//! reply it made up ([`CosmosThrottle::injected`]) for the test to compare
//! with what the client received. Everything else (handshakes, OP_QUERY,
//! OP_COMPRESSED, requests with `moreToCome`, other commands) is forwarded
//! as is.
//!
//! Reading is bounded: a header announcing more than 48 MB (MongoDB's
//! `maxMessageSizeBytes`, 48,000,000) or less than a header closes that
//! connection. The relay stops, with every connection it holds, when it
//! is dropped.

use mongodb::bson::{rawdoc, RawArrayBuf, RawDocument, RawDocumentBuf};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use wirelint::wire::op_msg::{self, OpMsg};

/// The largest message either side may send (MongoDB's
/// `maxMessageSizeBytes`); a header announcing more closes the connection.
pub const MAX_MESSAGE_BYTES: usize = 48_000_000;
const HEADER_LEN: usize = 16;
const OP_MSG: i32 = 2013;

/// The ActivityId of the recorded 429 reply.
const ACTIVITY_ID: &str = "46ba3855-bc3b-4670-8609-17e1c2c87778";

/// What Azure Cosmos DB for MongoDB answers in place of the backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Error 16500 (`RequestRateTooLarge`, HTTP 429 TooManyRequests): the
    /// request units provisioned are used up; `RetryAfterMs` in `errmsg`.
    RequestRateTooLarge { retry_after_ms: u32 },
    /// Error 50 (`ExceededTimeLimit`): the request timed out while Cosmos
    /// DB retried it under rate limiting.
    ExceededTimeLimit,
    /// Error 16500 inside an accepted write (`ok: 1`): `n: 0` and one
    /// `writeErrors` entry per statement of the request (`index` 0..k-1,
    /// `code` 16500, the same `errmsg` as [`Fault::RequestRateTooLarge`]),
    /// as Cosmos DB answers an `insert`, `update` or `delete` it throttles.
    WriteRequestRateTooLarge { retry_after_ms: u32 },
}

impl Fault {
    pub fn code(&self) -> i32 {
        match self {
            Fault::RequestRateTooLarge { .. } | Fault::WriteRequestRateTooLarge { .. } => 16500,
            Fault::ExceededTimeLimit => 50,
        }
    }

    pub fn code_name(&self) -> &'static str {
        match self {
            Fault::RequestRateTooLarge { .. } | Fault::WriteRequestRateTooLarge { .. } => {
                "RequestRateTooLarge"
            }
            Fault::ExceededTimeLimit => "ExceededTimeLimit",
        }
    }

    /// The `errmsg`, as Cosmos DB words it (the 429 as applications' test
    /// suites record it, CRLFs, trailing space and unclosed quote
    /// included).
    pub fn errmsg(&self) -> String {
        match self {
            Fault::RequestRateTooLarge { retry_after_ms }
            | Fault::WriteRequestRateTooLarge { retry_after_ms } => format!(
                "Error=16500, RetryAfterMs={retry_after_ms}, Details='Response status code does \
                 not indicate success: TooManyRequests (429) Substatus: 3200 ActivityId: \
                 {ACTIVITY_ID} Reason: (\r\nErrors : [\r\n \"Request rate is large. More \
                 Request Units may be needed, so no changes were made. Please retry this \
                 request later. Learn more: http://aka.ms/cosmosdb-error-429\"\r\n]\r\n) "
            ),
            Fault::ExceededTimeLimit => {
                "Request timed out. Retries due to rate limiting: True.".to_string()
            }
        }
    }

    /// Whether the fault is a reply to a write that Cosmos DB accepted
    /// (`ok: 1`) with its statements failed in `writeErrors`.
    pub fn is_write(&self) -> bool {
        matches!(self, Fault::WriteRequestRateTooLarge { .. })
    }

    /// The reply's body to a request of one statement (see
    /// [`Fault::body_for`]).
    pub fn body(&self) -> RawDocumentBuf {
        self.body_for(1)
    }

    /// The reply's body to a request of `statements` write statements:
    /// `{ok: 0.0, errmsg, code, codeName}` for a refused command (whatever
    /// `statements`); for [`Fault::WriteRequestRateTooLarge`],
    /// `{n: 0, writeErrors: [{index, code, errmsg}, …], ok: 1.0}` with one
    /// entry per statement, `index` 0 to `statements - 1` (one, index 0,
    /// when `statements` is 0).
    pub fn body_for(&self, statements: usize) -> RawDocumentBuf {
        if !self.is_write() {
            return rawdoc! {
                "ok": 0.0,
                "errmsg": self.errmsg(),
                "code": self.code(),
                "codeName": self.code_name(),
            };
        }
        let mut write_errors = RawArrayBuf::new();
        for index in 0..statements.max(1) {
            write_errors.push(self.write_error(index));
        }
        rawdoc! {
            "n": 0_i32,
            "writeErrors": write_errors,
            "ok": 1.0,
        }
    }

    /// The `writeErrors` entry of statement `index`.
    pub fn write_error(&self, index: usize) -> RawDocumentBuf {
        rawdoc! {
            "index": i32::try_from(index).expect("a statement index over i32"),
            "code": self.code(),
            "errmsg": self.errmsg(),
        }
    }
}

/// The field of a write command that holds its statements.
fn statements_field(command: &str) -> Option<&'static str> {
    match command {
        "insert" => Some("documents"),
        "update" => Some("updates"),
        "delete" => Some("deletes"),
        _ => None,
    }
}

/// How many statements a write request carries: the elements of its
/// `documents` (insert), `updates` (update) or `deletes` (delete), in the
/// body, plus the documents of the kind-1 sequences of that name (where
/// drivers put them); 0 for other commands.
fn statements(msg: &OpMsg<'_>, body: &RawDocument, command: &str) -> usize {
    let Some(field) = statements_field(command) else {
        return 0;
    };
    let in_body = body
        .get_array(field)
        .ok()
        .map_or(0, |a| a.into_iter().count());
    let in_sequences: usize = msg
        .sequences()
        .filter(|s| s.identifier_str() == field)
        .map(|s| s.documents().count())
        .sum();
    in_body + in_sequences
}

/// Which calls to answer with a fault: those of `command` on `collection`
/// whose number (1 for the first such request the relay saw, over all
/// its connections) is in `first..=last`.
#[derive(Clone, Debug)]
pub struct Throttling {
    pub command: String,
    pub collection: String,
    pub first: u64,
    pub last: u64,
    pub fault: Fault,
}

impl Throttling {
    /// `calls` numbers the calls from 1: `4..` is every call after the
    /// first three, `4..=8` the fourth to the eighth.
    pub fn new(
        command: &str,
        collection: &str,
        calls: impl RangeBounds<u64>,
        fault: Fault,
    ) -> Throttling {
        let first = match calls.start_bound() {
            Bound::Included(n) => *n,
            Bound::Excluded(n) => n + 1,
            Bound::Unbounded => 1,
        };
        let last = match calls.end_bound() {
            Bound::Included(n) => *n,
            Bound::Excluded(n) => n.saturating_sub(1),
            Bound::Unbounded => u64::MAX,
        };
        Throttling {
            command: command.to_string(),
            collection: collection.to_string(),
            first,
            last,
            fault,
        }
    }
}

/// One reply the relay made up.
#[derive(Clone, Debug)]
pub struct Injected {
    pub command: String,
    pub collection: String,
    /// The call's number for its (command, collection).
    pub call: u64,
    /// The request's requestID (the reply's responseTo).
    pub request_id: i32,
    pub fault: Fault,
    /// The request's write statements (see [`Fault::body_for`]): its
    /// documents, updates or deletes; 0 for other commands.
    pub statements: usize,
    /// The whole reply frame, as written to the client.
    pub frame: Vec<u8>,
}

struct State {
    rules: Vec<Throttling>,
    /// Requests seen per (command, collection): every OP_MSG whose body's
    /// first value is a string, forwarded or not.
    calls: Mutex<HashMap<(String, String), u64>>,
    injected: Mutex<Vec<Injected>>,
    next_request_id: AtomicI32,
}

impl State {
    /// The reply to send in place of the backend's, if `frame` is a
    /// request to throttle (and counts it either way).
    fn answer(&self, frame: &[u8]) -> Option<Vec<u8>> {
        let opcode = i32::from_le_bytes(frame[12..16].try_into().unwrap());
        if opcode != OP_MSG {
            return None;
        }
        let msg = OpMsg::parse(frame).ok()?;
        let body = RawDocument::from_bytes(msg.body).ok()?;
        let (command, value) = body.iter().next()?.ok()?;
        let collection = value.as_str()?;
        let key = (command.to_string(), collection.to_string());
        let call = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(key.clone()).or_default();
            *n += 1;
            *n
        };
        if msg.flags & op_msg::MORE_TO_COME != 0 {
            return None; // no reply expected: nothing to answer
        }
        let rule = self.rules.iter().find(|r| {
            r.command == key.0 && r.collection == key.1 && (r.first..=r.last).contains(&call)
        })?;
        let request_id = msg.header.request_id;
        let statements = statements(&msg, body, &key.0);
        let reply = op_msg::encode(
            self.next_request_id.fetch_add(1, Ordering::Relaxed),
            request_id,
            0,
            rule.fault.body_for(statements).as_bytes(),
            &[],
        );
        self.injected.lock().unwrap().push(Injected {
            command: key.0,
            collection: key.1,
            call,
            request_id,
            fault: rule.fault.clone(),
            statements,
            frame: reply.clone(),
        });
        Some(reply)
    }
}

/// The fault injector (test support): see the module's documentation.
pub struct CosmosThrottle {
    addr: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl CosmosThrottle {
    /// Listens on 127.0.0.1:<free port> in front of `backend`
    /// (`host:port`), answering the calls `rules` name (the first rule
    /// that matches a call decides).
    pub async fn start(backend: &str, rules: Vec<Throttling>) -> CosmosThrottle {
        let backend: SocketAddr = backend.parse().expect("backend as host:port");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            rules,
            calls: Mutex::new(HashMap::new()),
            injected: Mutex::new(Vec::new()),
            next_request_id: AtomicI32::new(0x4000_0000),
        });
        let shared = state.clone();
        // The connections' tasks live in the accept task's JoinSet: when
        // the relay is dropped, aborting the accept task drops the set,
        // which aborts them all.
        let accept = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                while connections.try_join_next().is_some() {}
                let Ok((client, _)) = listener.accept().await else {
                    // Out of descriptors, say: try again shortly.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                connections.spawn(relay(client, backend, shared.clone()));
            }
        });
        CosmosThrottle {
            addr,
            state,
            accept,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connection string of the relay (wirelint's upstream).
    pub fn uri(&self) -> String {
        format!("mongodb://{}/", self.addr)
    }

    /// Every reply the relay made up, in the order sent.
    pub fn injected(&self) -> Vec<Injected> {
        self.state.injected.lock().unwrap().clone()
    }

    /// How many requests of `command` on `collection` the relay saw
    /// (answered by it or forwarded).
    pub fn calls(&self, command: &str, collection: &str) -> u64 {
        self.state
            .calls
            .lock()
            .unwrap()
            .get(&(command.to_string(), collection.to_string()))
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for CosmosThrottle {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One client connection: requests forwarded or answered, replies
/// forwarded, until either side closes, errs or sends a bad length.
async fn relay(client: TcpStream, backend: SocketAddr, state: Arc<State>) {
    let Ok(server) = TcpStream::connect(backend).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_in, client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    // Both directions write to the client, whole messages at a time.
    let client_out = Arc::new(tokio::sync::Mutex::new(client_out));
    let replies = {
        let client_out = client_out.clone();
        async move {
            while let Ok(Some(frame)) = read_frame(&mut server_in).await {
                if client_out.lock().await.write_all(&frame).await.is_err() {
                    return;
                }
            }
        }
    };
    let requests = async move {
        loop {
            match read_frame(&mut client_in).await {
                Ok(Some(frame)) => {
                    let sent = match state.answer(&frame) {
                        Some(reply) => write_to(&client_out, &reply).await,
                        None => server_out.write_all(&frame).await,
                    };
                    if sent.is_err() {
                        return;
                    }
                }
                // The client half-closed: so does the relay, and the
                // replies still due go on until the backend closes.
                Ok(None) => {
                    let _ = server_out.shutdown().await;
                    std::future::pending::<()>().await;
                }
                Err(_) => return,
            }
        }
    };
    // Either side gone (or a bad length): both sockets are dropped.
    tokio::select! {
        _ = replies => {}
        _ = requests => {}
    }
}

async fn write_to(out: &tokio::sync::Mutex<OwnedWriteHalf>, frame: &[u8]) -> io::Result<()> {
    out.lock().await.write_all(frame).await
}

/// The next whole message; `None` at a clean end of stream. A length
/// under a header or over [`MAX_MESSAGE_BYTES`] is an error (the
/// connection is closed without reading on).
async fn read_frame(from: &mut OwnedReadHalf) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; HEADER_LEN];
    match from.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let length = i32::from_le_bytes(header[..4].try_into().unwrap());
    let length = usize::try_from(length)
        .ok()
        .filter(|n| (HEADER_LEN..=MAX_MESSAGE_BYTES).contains(n))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("message length {length}"),
            )
        })?;
    let mut frame = vec![0u8; length];
    frame[..HEADER_LEN].copy_from_slice(&header);
    from.read_exact(&mut frame[HEADER_LEN..]).await?;
    Ok(Some(frame))
}
