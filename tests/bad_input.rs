//! Malformed input on one connection closes that connection (with a log
//! line naming the reason) while another client's queries keep working.

mod common;

use common::{eventually, Backend};
use mongodb::bson::{doc, rawdoc, Document};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wirelint::wire::{compressed, op_msg, Compressor, Header};

fn header(len: i32, op: i32) -> Vec<u8> {
    let mut b = Vec::new();
    Header {
        message_length: len,
        request_id: 1,
        response_to: 0,
        op_code: op,
    }
    .write(&mut b);
    b
}

fn insert_msg() -> Vec<u8> {
    op_msg::encode(
        5,
        0,
        0,
        rawdoc! {"insert": "c", "documents": [{"a": 1}], "$db": "bad_input"}.as_bytes(),
        &[],
    )
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    /// Close our write side after sending (a client that gives up).
    close_after: bool,
    /// The reason wirelint must log for this connection, or None when the
    /// message is well framed and the backend decides (the analysis side
    /// then counts a decode error of this kind).
    log: Option<&'static str>,
    decode_error: Option<&'static str>,
}

fn cases() -> Vec<Case> {
    let valid = insert_msg();
    let mut bad_kind = valid.clone();
    bad_kind[20] = 9;
    // Well framed, but the body's string element claims more bytes than
    // the document has.
    let mut bad_bson = op_msg::encode(
        6,
        0,
        0,
        rawdoc! {"insert": "c", "$db": "bad_input"}.as_bytes(),
        &[],
    );
    let at = 21 + 4 + 1 + "insert".len() + 1;
    bad_bson[at..at + 4].copy_from_slice(&200i32.to_le_bytes());
    let mut lying = compressed::compress(&valid, Compressor::Zlib).unwrap();
    let declared = i32::from_le_bytes(lying[20..24].try_into().unwrap()) + 100;
    lying[20..24].copy_from_slice(&declared.to_le_bytes());
    vec![
        Case {
            name: "length 0",
            bytes: header(0, 2013),
            close_after: false,
            log: Some("message length 0 is below the 16-byte header"),
            decode_error: None,
        },
        Case {
            name: "length 15",
            bytes: header(15, 2013),
            close_after: false,
            log: Some("message length 15 is below the 16-byte header"),
            decode_error: None,
        },
        Case {
            name: "length 48,000,001",
            bytes: header(48_000_001, 2013),
            close_after: false,
            log: Some("message length 48000001 is above maxMessageSizeBytes"),
            decode_error: None,
        },
        Case {
            name: "truncated",
            bytes: valid[..valid.len() / 2].to_vec(),
            close_after: true,
            log: Some("closed in the middle of a message"),
            decode_error: None,
        },
        // What is inside a well-framed message is the backend's to judge
        // (a newer server may know this section kind); the analysis counts
        // what it cannot read.
        Case {
            name: "unknown section kind",
            bytes: bad_kind,
            close_after: false,
            log: None,
            decode_error: Some("bad_op_msg"),
        },
        Case {
            name: "unknown opcode",
            bytes: header(64, 4242),
            close_after: false,
            log: Some("unknown opcode 4242"),
            decode_error: None,
        },
        Case {
            name: "HTTP",
            bytes: b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            close_after: false,
            log: Some("an HTTP request"),
            decode_error: None,
        },
        Case {
            name: "TLS",
            bytes: vec![
                0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0, 0, 0xa1, 0x03, 0x03, 9, 9, 9, 9, 9, 9,
            ],
            close_after: false,
            log: Some("a TLS handshake"),
            decode_error: None,
        },
        Case {
            name: "bad BSON",
            bytes: bad_bson,
            close_after: false,
            log: None,
            decode_error: Some("invalid_bson"),
        },
        Case {
            name: "compressed size lie",
            bytes: lying,
            close_after: false,
            log: None,
            decode_error: Some("compressed_size_mismatch"),
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn malformed_frames_close_only_their_connection() {
    let _alone = alone().await;
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;

    // A well-behaved client querying all along.
    let client = mongodb::Client::with_uri_str(proxy.connection_string())
        .await
        .unwrap();
    let coll = client.database("bad_input").collection::<Document>("good");
    coll.insert_one(doc! {"ok": true}).await.unwrap();
    let (stop, ok, failed, worker) = steady_reads(coll.clone());

    for case in cases() {
        let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let port = s.local_addr().unwrap().port();
        s.write_all(&case.bytes).await.unwrap();
        if case.close_after {
            s.shutdown().await.unwrap();
        }
        // The connection ends (closed by wirelint, or answered and closed by
        // the backend) — it does not hang.
        let mut sink = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;
        if case.log.is_some() {
            assert!(ended.is_ok(), "{}: connection left open", case.name);
            let peer = format!("peer=127.0.0.1:{port}");
            let logged = eventually(Duration::from_secs(2), || {
                !common::log_lines_with(&[&peer, case.log.unwrap()]).is_empty()
            })
            .await;
            assert!(
                logged,
                "{}: no log line with {:?} for {peer}",
                case.name, case.log
            );
        }
        if let Some(kind) = case.decode_error {
            let counted = eventually(Duration::from_secs(5), || {
                proxy.stats().decode_errors.get(kind).copied().unwrap_or(0) >= 1
            })
            .await;
            assert!(
                counted,
                "{}: analysis did not count {kind}: {:?}",
                case.name,
                proxy.stats().decode_errors
            );
            assert!(!common::log_lines_with(&["analysis could not decode a request"]).is_empty());
        }
        let before = ok.load(Ordering::Relaxed);
        assert!(
            eventually(Duration::from_secs(5), || ok.load(Ordering::Relaxed)
                > before)
            .await,
            "{}: the good client stalled",
            case.name
        );
    }
    stop.store(true, Ordering::Relaxed);
    worker.await.unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "the good client saw failures"
    );
    let stats = proxy.shutdown().await;
    for kind in [
        "length_too_short",
        "length_too_long",
        "unknown_opcode",
        "foreign_protocol",
    ] {
        assert!(
            stats.frame_errors.get(kind).copied().unwrap_or(0) >= 1,
            "{kind}: {:?}",
            stats.frame_errors
        );
    }
}

// ---------------------------------------------------------------------------
// The hostile-client suite: many more ways to be wrong, each on its own
// connection while a good client queries all along.

/// What must happen to a hostile connection.
enum Expect {
    /// wirelint closes it and logs a line with this text and the peer.
    Closed(&'static str),
    /// Well framed: forwarded; the backend answers or closes — within
    /// seconds, never a hang.
    Forwarded,
    /// A valid request, however slowly sent: it must be answered.
    Answered,
}

struct Hostile {
    name: String,
    bytes: Vec<u8>,
    /// Send one byte per this interval instead of all at once.
    dribble: Option<Duration>,
    /// Close our write side after sending.
    close_after: bool,
    expect: Expect,
}

fn hostile(name: impl Into<String>, bytes: Vec<u8>, expect: Expect) -> Hostile {
    Hostile {
        name: name.into(),
        bytes,
        dribble: None,
        close_after: false,
        expect,
    }
}

fn ping_msg() -> Vec<u8> {
    op_msg::encode(
        9,
        0,
        0,
        rawdoc! {"ping": 1i32, "$db": "admin"}.as_bytes(),
        &[],
    )
}

/// A document nested `depth` levels deep: {a: {a: {… {} …}}}, as raw BSON.
fn nested(depth: usize) -> Vec<u8> {
    let mut doc = vec![5, 0, 0, 0, 0];
    for _ in 0..depth {
        let mut outer = vec![0, 0, 0, 0, 0x03, b'a', 0];
        outer.extend_from_slice(&doc);
        outer.push(0);
        let len = outer.len() as i32;
        outer[..4].copy_from_slice(&len.to_le_bytes());
        doc = outer;
    }
    doc
}

/// `{find: "c", $db: "bad_input", filter: <filter>}` as an OP_MSG, the
/// filter's raw bytes spliced in as given.
fn find_with_filter(filter: &[u8]) -> Vec<u8> {
    let mut body = rawdoc! {"find": "c", "$db": "bad_input"}
        .as_bytes()
        .to_vec();
    body.pop();
    body.push(0x03);
    body.extend_from_slice(b"filter\0");
    body.extend_from_slice(filter);
    body.push(0);
    let len = body.len() as i32;
    body[..4].copy_from_slice(&len.to_le_bytes());
    msg_with_body(&body)
}

/// An OP_MSG with this body document, bytes as given.
fn msg_with_body(body: &[u8]) -> Vec<u8> {
    let mut m = header(0, 2013);
    m.extend_from_slice(&0u32.to_le_bytes());
    m.push(0);
    m.extend_from_slice(body);
    let len = m.len() as i32;
    m[..4].copy_from_slice(&len.to_le_bytes());
    m
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn hostile_cases() -> Vec<Hostile> {
    use Expect::*;
    let valid = insert_msg();
    let mut out = Vec::new();
    for len in [-1, 0, 1, 15] {
        out.push(hostile(
            format!("length {len}"),
            header(len, 2013),
            Closed("below the 16-byte header"),
        ));
    }
    for len in [48_000_001, i32::MAX] {
        out.push(hostile(
            format!("length {len}"),
            header(len, 2013),
            Closed("above maxMessageSizeBytes"),
        ));
    }
    for op in [0, 2, 1000, 2000, 2008, 2009, 2014, 4242, -1] {
        out.push(hostile(
            format!("opcode {op}"),
            header(64, op),
            Closed("unknown opcode"),
        ));
    }
    for cut in [1, 8, 15, 16, 20, 21, valid.len() / 2, valid.len() - 1] {
        let mut h = hostile(
            format!("truncated at {cut} and closed"),
            valid[..cut].to_vec(),
            Closed("closed in the middle of a message"),
        );
        h.close_after = true;
        out.push(h);
    }
    // Inside a well-framed message, the backend judges: section kinds it
    // may or may not know, flag bits, section and document bounds, the
    // compressed envelope. The proxy frames on the header alone.
    for kind in [2u8, 3, 7, 9, 127, 255] {
        let mut m = valid.clone();
        m[20] = kind;
        out.push(hostile(format!("section kind {kind}"), m, Forwarded));
    }
    let mut required_bit = valid.clone();
    required_bit[16] = 0x04; // bit 2: unknown and required (bits 0-15)
    out.push(hostile(
        "unknown required flag bit",
        required_bit,
        Forwarded,
    ));
    let mut two_bodies = valid.clone();
    two_bodies.extend_from_slice(&valid[20..]);
    let len = two_bodies.len() as i32;
    two_bodies[..4].copy_from_slice(&len.to_le_bytes());
    out.push(hostile("two body sections", two_bodies, Forwarded));
    let mut seq_too_long = header(0, 2013);
    seq_too_long.extend_from_slice(&0u32.to_le_bytes());
    seq_too_long.extend_from_slice(&[1, 0xff, 0xff, 0, 0, b'd', 0]);
    let len = seq_too_long.len() as i32;
    seq_too_long[..4].copy_from_slice(&len.to_le_bytes());
    out.push(hostile(
        "document sequence longer than the message",
        seq_too_long,
        Forwarded,
    ));
    let mut checksum_missing = header(0, 2013);
    checksum_missing.extend_from_slice(&1u32.to_le_bytes()); // checksumPresent, no room for it
    let len = checksum_missing.len() as i32;
    checksum_missing[..4].copy_from_slice(&len.to_le_bytes());
    out.push(hostile(
        "checksum flag without a checksum",
        checksum_missing,
        Forwarded,
    ));
    let mut no_sections = header(20, 2013);
    no_sections.extend_from_slice(&0u32.to_le_bytes());
    out.push(hostile("no sections at all", no_sections, Forwarded));
    let mut body_past_end = msg_with_body(rawdoc! {"ping": 1i32}.as_bytes());
    let at = 21;
    body_past_end[at..at + 4].copy_from_slice(&4000i32.to_le_bytes());
    out.push(hostile(
        "body document longer than the message",
        body_past_end,
        Forwarded,
    ));
    // Invalid BSON inside a well-framed message: the backend decides.
    let ping_body = rawdoc! {"ping": 1i32, "$db": "admin"};
    let mut string_lie = msg_with_body(rawdoc! {"insert": "c", "$db": "x"}.as_bytes());
    let at = 21 + 4 + 1 + "insert".len() + 1;
    string_lie[at..at + 4].copy_from_slice(&200i32.to_le_bytes());
    out.push(hostile(
        "BSON string longer than its document",
        string_lie,
        Forwarded,
    ));
    let mut no_terminator = ping_body.as_bytes().to_vec();
    *no_terminator.last_mut().unwrap() = 7;
    out.push(hostile(
        "BSON document without its terminating NUL",
        msg_with_body(&no_terminator),
        Forwarded,
    ));
    let mut bad_type = ping_body.as_bytes().to_vec();
    bad_type[4] = 0x55;
    out.push(hostile(
        "BSON element of unknown type 0x55",
        msg_with_body(&bad_type),
        Forwarded,
    ));
    let mut key_no_nul = ping_body.as_bytes().to_vec();
    for b in key_no_nul.iter_mut().skip(5).take(5) {
        if *b == 0 {
            *b = b'x';
        }
    }
    out.push(hostile(
        "BSON key without NUL",
        msg_with_body(&key_no_nul),
        Forwarded,
    ));
    let mut bad_utf8 = msg_with_body(rawdoc! {"find": "ccc", "$db": "x"}.as_bytes());
    let at = 21 + 4 + 1 + "find".len() + 1 + 4;
    bad_utf8[at..at + 3].copy_from_slice(&[0xff, 0xfe, 0xfd]);
    out.push(hostile(
        "BSON string that is not UTF-8",
        bad_utf8,
        Forwarded,
    ));
    out.push(hostile(
        "filter nested 200 levels deep",
        find_with_filter(&nested(200)),
        Forwarded,
    ));
    // Past the server's own limit (200): the backend refuses it, and the
    // analysis skips it (counted as too_deep) instead of walking it: a
    // recursive walk this deep overflowed an analysis thread's stack, which
    // aborts the whole process.
    let mut and = rawdoc! {"a": 1}.as_bytes().to_vec();
    for _ in 0..5_000 {
        // {$and: [<and>]}
        let mut array = vec![0, 0, 0, 0, 0x03, b'0', 0];
        array.extend_from_slice(&and);
        array.push(0);
        let len = array.len() as i32;
        array[..4].copy_from_slice(&len.to_le_bytes());
        let mut doc = vec![0, 0, 0, 0, 0x04];
        doc.extend_from_slice(b"$and\0");
        doc.extend_from_slice(&array);
        doc.push(0);
        let len = doc.len() as i32;
        doc[..4].copy_from_slice(&len.to_le_bytes());
        and = doc;
    }
    out.push(hostile(
        "filter with $and nested 5,000 deep",
        find_with_filter(&and),
        Forwarded,
    ));
    // OP_COMPRESSED: lying sizes, bombs, unknown compressors.
    for compressor in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
        for (what, delta) in [("larger", 100i32), ("smaller", -10)] {
            let mut m = compressed::compress(&valid, compressor).unwrap();
            let declared = i32::from_le_bytes(m[20..24].try_into().unwrap()) + delta;
            m[20..24].copy_from_slice(&declared.to_le_bytes());
            out.push(hostile(
                format!("{} declaring a {what} size", compressor.name()),
                m,
                Forwarded,
            ));
        }
    }
    {
        // 40 MB of zeros in a few KB, declared as 1 KB: the analysis must
        // stop at the declared size.
        let mut big = header(16 + 40_000_000, 2013);
        big.resize(16 + 40_000_000, 0);
        let mut m = compressed::compress(&big, Compressor::Zlib).unwrap();
        m[20..24].copy_from_slice(&1024i32.to_le_bytes());
        out.push(hostile("zlib bomb: 40 MB declared as 1 KB", m, Forwarded));
    }
    let mut huge_declared = compressed::compress(&valid, Compressor::Zstd).unwrap();
    huge_declared[20..24].copy_from_slice(&100_000_000i32.to_le_bytes());
    out.push(hostile(
        "declared uncompressed size 100 MB",
        huge_declared,
        Forwarded,
    ));
    let mut unknown_compressor = compressed::compress(&valid, Compressor::Zlib).unwrap();
    unknown_compressor[24] = 9;
    out.push(hostile(
        "unknown compressor id 9",
        unknown_compressor,
        Forwarded,
    ));
    let mut nested_compressed = compressed::compress(&valid, Compressor::Zlib).unwrap();
    nested_compressed[16..20].copy_from_slice(&2012i32.to_le_bytes());
    out.push(hostile(
        "compressed inside compressed",
        nested_compressed,
        Forwarded,
    ));
    // Other protocols on the port.
    for (what, bytes, log) in [
        (
            "HTTP GET",
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            "an HTTP request",
        ),
        (
            "HTTP POST",
            &b"POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n"[..],
            "an HTTP request",
        ),
        (
            "HTTP/2 preface",
            &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
            "an HTTP request",
        ),
        (
            "TLS ClientHello",
            &[
                0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0, 0, 0xa1, 0x03, 0x03, 9, 9, 9, 9, 9, 9,
            ][..],
            "a TLS handshake",
        ),
        (
            "SSH banner",
            &b"SSH-2.0-OpenSSH_9.2\r\n\0\0\0\0\0\0"[..],
            "invalid message from the client",
        ),
        (
            "Redis inline PING",
            &b"PING\r\nPING\r\nPING\r\nPING\r\n"[..],
            "invalid message from the client",
        ),
        (
            "PostgreSQL SSLRequest",
            &[0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f, 0, 0, 0, 0, 0, 0, 0, 0][..],
            "invalid message from the client",
        ),
    ] {
        out.push(hostile(what, bytes.to_vec(), Closed(log)));
    }
    for seed in 1..=5u64 {
        out.push(hostile(
            format!("random bytes #{seed}"),
            noise(seed, 64 + seed as usize * 37),
            Closed("invalid message from the client"),
        ));
    }
    let mut then_garbage = ping_msg();
    then_garbage.extend_from_slice(&header(3, 2013));
    out.push(hostile(
        "a valid ping, then a bad header",
        then_garbage,
        Closed("below the 16-byte header"),
    ));
    // Legacy opcodes are forwarded: the backend refuses them itself.
    for op in [2001, 2002, 2005, 2006, 2007] {
        let mut m = header(0, op);
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(b"bad_input.c\0");
        m.extend_from_slice(rawdoc! {}.as_bytes());
        let len = m.len() as i32;
        m[..4].copy_from_slice(&len.to_le_bytes());
        out.push(hostile(format!("legacy opcode {op}"), m, Forwarded));
    }
    // 51 bytes in 2.5 s, within the message timeout (4 s).
    let mut slow = hostile("a ping dribbled one byte per 50 ms", ping_msg(), Answered);
    slow.dribble = Some(Duration::from_millis(50));
    out.push(slow);
    out
}

/// A client reading `{ok: true}` from `coll` every 5 ms until `stop`:
/// what it read and what failed are counted.
#[allow(clippy::type_complexity)]
fn steady_reads(
    coll: mongodb::Collection<Document>,
) -> (
    Arc<AtomicBool>,
    Arc<AtomicU64>,
    Arc<AtomicU64>,
    tokio::task::JoinHandle<()>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let task = {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match coll.find_one(doc! {"ok": true}).await {
                    Ok(Some(_)) => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    (stop, ok, failed, task)
}

/// The heap this test binary holds, counted at every allocation: what the
/// proxy (in this process) keeps, whatever the allocator does with freed
/// pages. Resident memory is not used: it also counts freed pages the
/// allocator keeps mapped, which depends on thread timing and is not
/// steady on a loaded machine. An allocation counts whole even where its
/// pages are never touched, so a buffer sized by an announced length shows.
struct CountingAllocator;

static HEAP_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the
// counter is only added to.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            HEAP_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            HEAP_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        HEAP_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HEAP_BYTES.fetch_add(new_size, Ordering::Relaxed);
            HEAP_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn heap_bytes() -> u64 {
    HEAP_BYTES.load(Ordering::Relaxed) as u64
}

/// The tests of this file run one at a time: the ones that measure the
/// heap would otherwise count the others' allocations.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    ALONE.lock().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn hostile_clients_affect_only_their_own_connection() {
    let _alone = alone().await;
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.forward.idle_timeout = Some(Duration::from_secs(2));
    settings.forward.message_timeout = Some(Duration::from_secs(4));
    let proxy = common::proxy_with(settings).await;
    let client = mongodb::Client::with_uri_str(proxy.connection_string())
        .await
        .unwrap();
    let coll = client
        .database("bad_input")
        .collection::<Document>("hostile");
    coll.insert_one(doc! {"ok": true}).await.unwrap();
    let (stop, ok, failed, worker) = steady_reads(coll.clone());
    let heap_before = heap_bytes();
    let cases = hostile_cases();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut tried = 0;
    let frame_errors = |p: &wirelint::Proxy| p.stats().frame_errors.values().sum::<u64>();
    for case in cases {
        let frame_errors_before = frame_errors(&proxy);
        let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let peer = format!("peer=127.0.0.1:{}", s.local_addr().unwrap().port());
        match case.dribble {
            Some(every) => {
                for b in &case.bytes {
                    s.write_all(&[*b]).await.unwrap();
                    tokio::time::sleep(every).await;
                }
            }
            None => {
                // The peer may close before everything is written.
                let _ = s.write_all(&case.bytes).await;
            }
        }
        if case.close_after {
            let _ = s.shutdown().await;
        }
        let sent = std::time::Instant::now();
        match case.expect {
            Expect::Answered => {
                let mut reply = vec![0u8; 16];
                tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut reply))
                    .await
                    .unwrap_or_else(|_| panic!("{}: no reply", case.name))
                    .unwrap();
                let h = Header::parse(&reply).unwrap();
                assert_eq!(h.response_to, 9, "{}", case.name);
            }
            Expect::Closed(text) => {
                let mut sink = Vec::new();
                let ended =
                    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;
                assert!(ended.is_ok(), "{}: connection left open", case.name);
                let logged = eventually(Duration::from_secs(2), || {
                    !common::log_lines_with(&[&peer, text]).is_empty()
                })
                .await;
                assert!(
                    logged,
                    "{}: no log line with {text:?} for {peer}",
                    case.name
                );
            }
            Expect::Forwarded => {
                // The backend had it: either its answer (a reply to this
                // request's id) came back, or the backend closed the
                // connection with the request in flight (logged as such).
                // The proxy itself must not have refused it.
                let request_id = Header::parse(&case.bytes).map(|h| h.request_id);
                let mut first = vec![0u8; 16];
                let outcome =
                    tokio::time::timeout(Duration::from_secs(6), s.read_exact(&mut first)).await;
                match outcome {
                    Ok(Ok(_)) => {
                        let h = Header::parse(&first).unwrap();
                        assert_eq!(
                            Some(h.response_to),
                            request_id,
                            "{}: a reply, but not to this request",
                            case.name
                        );
                    }
                    Ok(Err(_)) => {
                        // Closed by the backend: before the idle timeout
                        // (2 s), with no frame error counted and no line
                        // giving a reason of the proxy's own for this peer.
                        assert!(
                            sent.elapsed() < Duration::from_secs(2),
                            "{}: closed only by the idle timeout",
                            case.name
                        );
                        assert_eq!(
                            frame_errors(&proxy),
                            frame_errors_before,
                            "{}: the proxy counted a frame error",
                            case.name
                        );
                        for reason in ["idle timeout", "upstream timeout", "invalid message"] {
                            assert!(
                                common::log_lines_with(&[&peer, reason]).is_empty(),
                                "{}: closed by the proxy ({reason})",
                                case.name
                            );
                        }
                    }
                    Err(_) => panic!("{}: neither answered nor closed", case.name),
                }
                assert!(
                    common::log_lines_with(&[&peer, "invalid message from the client"]).is_empty(),
                    "{}: the proxy refused what it should have forwarded",
                    case.name
                );
            }
        }
        let before = ok.load(Ordering::Relaxed);
        assert!(
            eventually(Duration::from_secs(5), || ok.load(Ordering::Relaxed)
                > before)
            .await,
            "{}: the good client stalled",
            case.name
        );
        tried += 1;
    }

    // A message dribbled one byte per 300 ms (never idle for the 2 s idle
    // timeout), as the first message and after a whole one: the message
    // timeout (4 s) closes it.
    for after_a_ping in [false, true] {
        let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let peer = format!("peer=127.0.0.1:{}", s.local_addr().unwrap().port());
        if after_a_ping {
            s.write_all(&ping_msg()).await.unwrap();
            let mut reply = [0u8; 16];
            s.read_exact(&mut reply).await.unwrap();
            let h = Header::parse(&reply).unwrap();
            let mut rest = vec![0u8; h.message_length as usize - 16];
            s.read_exact(&mut rest).await.unwrap();
        }
        let half_sent = std::time::Instant::now();
        let (mut read, mut write) = s.into_split();
        let dribbler = tokio::spawn(async move {
            for b in insert_msg() {
                if write.write_all(&[b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        let mut sink = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(8), read.read_to_end(&mut sink)).await;
        dribbler.abort();
        assert!(ended.is_ok(), "a dribbled message was never cut");
        let took = half_sent.elapsed();
        assert!(
            took >= Duration::from_millis(3_900) && took < Duration::from_secs(7),
            "closed after {took:?}, not after the 4 s message timeout"
        );
        assert!(
            eventually(Duration::from_secs(2), || !common::log_lines_with(&[
                &peer,
                "message timeout"
            ])
            .is_empty())
            .await,
            "no message-timeout line for {peer}"
        );
        tried += 1;
    }

    // 1,000 connections opened and dropped at once.
    let mut burst = Vec::new();
    for _ in 0..1000 {
        burst.push(tokio::spawn(TcpStream::connect(proxy.local_addr())));
    }
    let mut opened = 0;
    for b in burst {
        if let Ok(Ok(s)) = b.await {
            opened += 1;
            drop(s);
        }
    }
    assert!(opened >= 900, "only {opened} of 1000 connections opened");
    let before = ok.load(Ordering::Relaxed);
    assert!(
        eventually(Duration::from_secs(10), || ok.load(Ordering::Relaxed)
            > before + 10)
        .await,
        "the good client stalled after the burst"
    );
    assert!(
        eventually(Duration::from_secs(10), || proxy.stats().connections_active
            <= 2)
        .await,
        "dropped connections still open: {}",
        proxy.stats().connections_active
    );
    tried += 1;

    stop.store(true, Ordering::Relaxed);
    worker.await.unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "the good client saw failures"
    );
    let grown = heap_bytes().saturating_sub(heap_before);
    assert!(grown < 256 << 20, "memory grew by {} MiB", grown >> 20);
    let stats = proxy.shutdown().await;
    assert!(
        stats.decode_errors.get("too_deep").copied().unwrap_or(0) >= 1,
        "the 5,000-deep filter was not skipped as too deep: {:?}",
        stats.decode_errors
    );
    println!(
        "{tried} hostile cases; frame errors {:?}; decode errors {:?}; memory grew {} MiB",
        stats.frame_errors,
        stats.decode_errors,
        grown >> 20
    );
}

/// No backend connection is opened before a client's first message is
/// whole, and no memory is set aside for what a header announces: forty
/// clients sending only a header that announces a 48 MB message (with the
/// backend down) cost no upstream connection attempt and no memory (they
/// allocated and zeroed 48 MB each, 843 MiB in all, before the buffer
/// budget), and each is cut after the message timeout. A client sending a
/// whole message then gets the error naming the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_headers_with_the_backend_down_cost_nothing() {
    let _alone = alone().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let mut settings = common::settings(&format!("mongodb://{dead_addr}"));
    settings.forward.message_timeout = Some(Duration::from_secs(2));
    let proxy = common::proxy_with(settings).await;
    let heap_before = heap_bytes();
    let mut clients = Vec::new();
    for i in 0..40 {
        let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let mut h = Vec::new();
        Header {
            message_length: 48_000_000,
            request_id: 100 + i,
            response_to: 0,
            op_code: 2013,
        }
        .write(&mut h);
        s.write_all(&h).await.unwrap();
        clients.push(s);
    }
    for s in &mut clients {
        let mut sink = Vec::new();
        tokio::time::timeout(Duration::from_secs(6), s.read_to_end(&mut sink))
            .await
            .expect("cut by the message timeout")
            .ok();
        assert!(sink.is_empty(), "answered before the message was whole");
    }
    assert_eq!(proxy.stats().upstream_connect_failures, 0);
    let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
    s.write_all(&ping_msg()).await.unwrap();
    let mut reply = [0u8; 16];
    s.read_exact(&mut reply).await.unwrap();
    let h = Header::parse(&reply).unwrap();
    assert_eq!(h.response_to, 9);
    let mut rest = vec![0u8; h.message_length as usize - 16];
    s.read_exact(&mut rest).await.unwrap();
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("cannot connect to upstream"), "{text}");
    assert_eq!(proxy.stats().upstream_connect_failures, 1);
    let grown = heap_bytes().saturating_sub(heap_before);
    println!(
        "40 bare headers announcing 48 MB each: the heap grew {} KiB",
        grown >> 10
    );
    assert!(grown < 64 << 20, "the heap grew {} MiB", grown >> 20);
    proxy.shutdown().await;
}

/// Many connections each sending part of a large message share one
/// forwarding buffer budget (`--forward-memory`): past it their messages
/// wait (back-pressured by TCP), holding nothing; small messages never
/// wait, so a steady client sees no error; once the large senders go, a
/// large message goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(feature = "e2e"), ignore = "e2e: needs FerretDB")]
async fn large_messages_share_one_buffer_budget() {
    let _alone = alone().await;
    const BUDGET: usize = 8 << 20;
    let backend = Backend::shared();
    let mut settings = common::settings(&backend.uri());
    settings.forward.forward_memory = BUDGET;
    let proxy = common::proxy_with(settings).await;
    let client = mongodb::Client::with_uri_str(proxy.connection_string())
        .await
        .unwrap();
    let coll = client
        .database("bad_input")
        .collection::<Document>("budget");
    coll.insert_one(doc! {"ok": true}).await.unwrap();
    let (stop, ok, failed, steady) = steady_reads(coll.clone());
    let heap_before = heap_bytes();
    // 40 connections announce a 40 MB message and send 2 MiB of it (the
    // same 2 MiB, shared, so the test's own memory does not grow).
    let mut payload = header(40_000_000, 2013);
    payload.resize(2 << 20, 0);
    let payload = Arc::new(payload);
    let mut senders = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let payload = payload.clone();
        senders.push(tokio::spawn(async move {
            let _ = s.write_all(&payload).await;
            // Held open, stalled mid-message.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(s);
        }));
    }
    let waiting = eventually(Duration::from_secs(10), || proxy.stats().buffer_waits >= 39).await;
    let stats = proxy.stats();
    assert!(
        waiting,
        "messages waited for the budget: {}",
        stats.buffer_waits
    );
    assert!(
        stats.buffer_bytes as usize <= BUDGET,
        "{} bytes reserved, budget {BUDGET}",
        stats.buffer_bytes
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let grown = heap_bytes().saturating_sub(heap_before);
    println!(
        "40 connections × 2 MiB of 40 MB messages, 8 MiB budget: the heap grew {} KiB, {} waited, {} bytes reserved",
        grown >> 10,
        stats.buffer_waits,
        stats.buffer_bytes
    );
    // One message buffers at a time (each is larger than the budget): its
    // 2 MiB, not 40 × 2 MiB.
    assert!(grown < 16 << 20, "the heap grew {} MiB", grown >> 20);
    for s in &senders {
        s.abort();
    }
    for s in senders {
        let _ = s.await;
    }
    coll.insert_one(doc! {"big": "b".repeat(4 << 20)})
        .await
        .expect("a large message goes through once the budget is free");
    stop.store(true, Ordering::Relaxed);
    steady.await.unwrap();
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "the steady client saw errors"
    );
    assert!(ok.load(Ordering::Relaxed) > 10);
    assert_eq!(
        proxy.stats().buffer_bytes,
        0,
        "every reservation given back"
    );
    proxy.shutdown().await;
}
