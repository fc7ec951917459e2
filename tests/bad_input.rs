//! Malformed input on one connection closes that connection (with a log
//! line naming the reason) while another client's queries keep working.

mod common;

use common::{eventually, Backend};
use mongodb::bson::{doc, rawdoc, Document};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
        Case {
            name: "bad section kind",
            bytes: bad_kind,
            close_after: false,
            log: Some("section kind other than 0 or 1"),
            decode_error: None,
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
async fn malformed_frames_close_only_their_connection() {
    let backend = Backend::shared();
    let proxy = common::proxy(&backend.uri()).await;

    // A well-behaved client querying all along.
    let client = mongodb::Client::with_uri_str(proxy.connection_string())
        .await
        .unwrap();
    let coll = client.database("bad_input").collection::<Document>("good");
    coll.insert_one(doc! {"ok": true}).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let worker = {
        let (stop, ok, failed, coll) = (stop.clone(), ok.clone(), failed.clone(), coll.clone());
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
        "malformed",
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
