//! Framing: the only parsing on the forwarding hot path.
//!
//! [`check`] looks at the start of a buffer and answers "need more bytes"
//! (`Ok(None)`), "a complete message of N bytes" (`Ok(Some(N))`) or "this is
//! not the wire protocol" (`Err`), from the 16-byte header alone: the length
//! within bounds and an opcode that exists, checked before any buffer is
//! grown for the body. What is inside (OP_MSG section kinds, document bounds,
//! compressed envelopes) is the backend's to judge — a newer server may
//! accept sections this proxy has never heard of (payload type 3) — and the
//! analysis side's, off the hot path, which counts what it cannot read.

use super::{Header, OpCode, HEADER_LEN, MAX_MESSAGE_SIZE};

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("message length {0} is below the 16-byte header")]
    TooShort(i32),
    #[error("message length {0} is above maxMessageSizeBytes ({MAX_MESSAGE_SIZE})")]
    TooLong(i32),
    #[error("unknown opcode {0}")]
    UnknownOpCode(i32),
    #[error("the peer sent {0} on a port that speaks the MongoDB wire protocol")]
    Foreign(&'static str),
}

impl FrameError {
    /// A short stable label for counters.
    pub fn kind(&self) -> &'static str {
        match self {
            FrameError::TooShort(_) => "length_too_short",
            FrameError::TooLong(_) => "length_too_long",
            FrameError::UnknownOpCode(_) => "unknown_opcode",
            FrameError::Foreign(_) => "foreign_protocol",
        }
    }
}

/// Checks whether `buf` starts with a complete, well-framed message and
/// returns its length. `Ok(None)` means more bytes are needed (the caller can
/// use [`expected_len`] to reserve exactly what is missing).
pub fn check(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    Ok(expected_len(buf)?.filter(|len| buf.len() >= *len))
}

/// The length the header at the start of `buf` declares, once it is checked
/// to be within bounds and the opcode is known; `Ok(None)` before 16 bytes.
pub fn expected_len(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    let Some(header) = Header::parse(buf) else {
        return Ok(None);
    };
    let len = header.message_length;
    if len < HEADER_LEN as i32 {
        return Err(FrameError::TooShort(len));
    }
    if len as usize > MAX_MESSAGE_SIZE {
        return Err(FrameError::TooLong(len));
    }
    if header.opcode().is_none() {
        return Err(FrameError::UnknownOpCode(header.op_code));
    }
    Ok(Some(len as usize))
}

/// Recognises the first bytes of protocols people send to the wrong port,
/// so the log line can say what happened instead of "bad length".
pub fn sniff_foreign(buf: &[u8]) -> Option<&'static str> {
    const HTTP: [&[u8]; 7] = [
        b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PRI ",
    ];
    if buf.len() >= 3 && buf[0] == 0x16 && buf[1] == 0x03 && buf[2] <= 0x04 {
        return Some(
            "a TLS handshake (use tls=false, or start wirelint with --tls-cert and --tls-key)",
        );
    }
    if HTTP.iter().any(|m| buf.starts_with(m)) {
        return Some("an HTTP request (this is a MongoDB port; the admin HTTP server has its own)");
    }
    None
}

/// The OP_MSG flag bits, read after a header whose opcode said OP_MSG.
fn msg_flags(message: &[u8]) -> u32 {
    message
        .get(HEADER_LEN..HEADER_LEN + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Whether the backend will answer this (uncompressed) request: every
/// request but an OP_MSG with `moreToCome` (fire-and-forget writes) and the
/// legacy write opcodes. The analysis side asks it of inflated messages;
/// the forwarding side uses [`peek`], which also reads compressed ones.
pub fn expects_reply(message: &[u8]) -> bool {
    match Header::parse(message).and_then(|h| h.opcode()) {
        Some(OpCode::Msg) => msg_flags(message) & super::op_msg::MORE_TO_COME == 0,
        Some(OpCode::Query | OpCode::GetMore | OpCode::Command | OpCode::Compressed) => true,
        _ => false,
    }
}

/// Whether more replies follow this one without a request (an exhaust
/// stream), or, on a request, that no reply will come. Reads the flags of
/// compressed messages too (see [`peek`]).
pub fn more_to_come(message: &[u8]) -> bool {
    match Header::parse(message).and_then(|h| h.opcode()) {
        Some(OpCode::Msg) => msg_flags(message) & super::op_msg::MORE_TO_COME != 0,
        Some(OpCode::Compressed) => {
            let peek = peek(message);
            peek.opcode == Some(OpCode::Msg) && peek.answer == Answer::None
        }
        _ => false,
    }
}

/// The top-level `code` of a small OP_MSG reply (error replies are small:
/// larger ones are not looked at), for the forwarding side to notice a
/// primary that stepped down.
pub fn error_code(message: &[u8]) -> Option<i32> {
    const SMALL: usize = 1024;
    if message.len() > SMALL || Header::parse(message)?.opcode()? != OpCode::Msg {
        return None;
    }
    if *message.get(HEADER_LEN + 4)? != 0 {
        return None;
    }
    let body = message.get(HEADER_LEN + 5..)?;
    super::bson_walk::elements(body)
        .map_while(Result::ok)
        .take(32)
        .find(|e| e.key == b"code" && e.element_type == 0x10)
        .and_then(|e| super::read_i32(e.value, 0))
}

/// When the backend answers a request, as far as its first bytes tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Never: an OP_MSG with `moreToCome` (a `w: 0` write), or a legacy
    /// write opcode.
    None,
    /// Promptly: the backend works on it and answers.
    Prompt,
    /// After holding it up to this many milliseconds by design: a streaming
    /// `hello` (`maxAwaitTimeMS`), a `getMore` on an awaitData cursor
    /// (`maxTimeMS`).
    Awaits(u64),
}

/// What the forwarding side reads of a message: enough to track requests
/// and replies (`proxy::session`), never the documents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peek {
    /// The message's own opcode, or for OP_COMPRESSED the original one.
    pub opcode: Option<OpCode>,
    /// For a request, when it is answered; for a reply, `None` when more
    /// replies follow (`moreToCome`), `Prompt` otherwise.
    pub answer: Answer,
    /// A `hello` / `isMaster` command (whose reply the topology rewrite
    /// may need to see).
    pub hello: bool,
    /// Asks for `MONGODB-X509` authentication: an `authenticate` command,
    /// or a hello's `speculativeAuthenticate`, naming that mechanism.
    pub x509: bool,
    /// Whether the whole command document was read (a compressed
    /// message's may be cut at [`PEEK_PREFIX`]).
    pub whole: bool,
}

/// Bytes of a compressed message's body inflated to peek at it: its flags
/// and the first elements of its command.
const PEEK_PREFIX: usize = 512;

/// Reads a whole message's opcode, flags and command name (and for hello
/// and getMore, how long the server may hold them), inflating at most
/// [`PEEK_PREFIX`] bytes of a compressed one. Malformed bytes give a
/// prompt, non-hello answer: the backend judges them.
pub fn peek(message: &[u8]) -> Peek {
    let prompt = |opcode| Peek {
        opcode,
        answer: Answer::Prompt,
        hello: false,
        x509: false,
        whole: true,
    };
    let Some(opcode) = Header::parse(message).and_then(|h| h.opcode()) else {
        return prompt(None);
    };
    let body = message.get(HEADER_LEN..).unwrap_or_default();
    match opcode {
        OpCode::Msg => peek_msg_body(body),
        OpCode::Compressed => {
            let Ok(envelope) = super::OpCompressed::parse(message) else {
                return prompt(Some(opcode));
            };
            let original = envelope.original_opcode;
            match (original, envelope.inflate_prefix(PEEK_PREFIX)) {
                (OpCode::Msg, Ok(prefix)) => peek_msg_body(&prefix),
                (OpCode::Query, Ok(prefix)) => peek_query_body(&prefix),
                _ => Peek {
                    opcode: Some(original),
                    ..peek_legacy(original)
                },
            }
        }
        OpCode::Query => peek_query_body(body),
        other => peek_legacy(other),
    }
}

fn peek_legacy(opcode: OpCode) -> Peek {
    let answer = match opcode {
        OpCode::Insert | OpCode::Update | OpCode::Delete | OpCode::KillCursors => Answer::None,
        _ => Answer::Prompt,
    };
    Peek {
        opcode: Some(opcode),
        answer,
        hello: false,
        x509: false,
        whole: true,
    }
}

/// An OP_MSG body (flags, then sections), whole or a prefix of it.
fn peek_msg_body(body: &[u8]) -> Peek {
    let mut peek = Peek {
        opcode: Some(OpCode::Msg),
        answer: Answer::Prompt,
        hello: false,
        x509: false,
        whole: true,
    };
    let Some(flags) = super::read_u32(body, 0) else {
        return peek;
    };
    if flags & super::op_msg::MORE_TO_COME != 0 {
        peek.answer = Answer::None;
        return peek;
    }
    // The body section: drivers send it first; a few sections are skipped
    // to find it otherwise.
    let mut pos = 4;
    for _ in 0..8 {
        let Some(&kind) = body.get(pos) else {
            return peek;
        };
        if kind == 0 {
            return Peek {
                opcode: Some(OpCode::Msg),
                ..read_command(&body[pos + 1..])
            };
        }
        let Some(size) = super::read_i32(body, pos + 1).filter(|s| *s > 0) else {
            return peek;
        };
        pos = pos + 1 + size as usize;
    }
    peek
}

/// An OP_QUERY body: flags, collection name, skip, limit, then the query.
fn peek_query_body(body: &[u8]) -> Peek {
    let query = body
        .get(4..)
        .and_then(|rest| rest.iter().position(|b| *b == 0).map(|nul| 4 + nul + 1 + 8))
        .and_then(|at| body.get(at..));
    let Some(query) = query else {
        return Peek {
            opcode: Some(OpCode::Query),
            ..read_command(&[])
        };
    };
    Peek {
        opcode: Some(OpCode::Query),
        // Legacy requests have no awaitable form.
        answer: Answer::Prompt,
        ..read_command(query)
    }
}

/// From a command document (maybe cut short): when it is answered, whether
/// it is a hello, whether it asks for X.509 authentication. Only hello,
/// getMore and authenticate are looked into past their first key, and only
/// their top level (and a hello's `speculativeAuthenticate`).
fn read_command(doc: &[u8]) -> Peek {
    let whole = super::read_i32(doc, 0).is_some_and(|len| len >= 5 && len as usize <= doc.len());
    let mut peek = Peek {
        opcode: None,
        answer: Answer::Prompt,
        hello: false,
        x509: false,
        whole,
    };
    let mut elements = super::bson_walk::elements(doc).map_while(Result::ok);
    let Some(first) = elements.next() else {
        return peek;
    };
    let rest = elements.take(64);
    match first.key {
        b"hello" | b"isMaster" | b"ismaster" => {
            peek.hello = true;
            for e in rest {
                match e.key {
                    b"maxAwaitTimeMS" => peek.answer = awaits(&e),
                    b"speculativeAuthenticate" if e.element_type == 0x03 => {
                        peek.x509 = names_x509(e.value)
                    }
                    _ => {}
                }
            }
        }
        b"getMore" => {
            if let Some(e) = rest.into_iter().find(|e| e.key == b"maxTimeMS") {
                peek.answer = awaits(&e);
            }
        }
        b"authenticate" => peek.x509 = names_x509(doc),
        _ => {}
    }
    peek
}

/// `Awaits(ms)` for a positive number, else `Prompt`.
fn awaits(e: &super::bson_walk::Element<'_>) -> Answer {
    number(e)
        .filter(|ms| *ms > 0)
        .map_or(Answer::Prompt, Answer::Awaits)
}

/// Whether a document's top-level `mechanism` is `MONGODB-X509`.
fn names_x509(doc: &[u8]) -> bool {
    super::bson_walk::elements(doc)
        .map_while(Result::ok)
        .take(64)
        .any(|e| e.key == b"mechanism" && e.as_str() == Some("MONGODB-X509"))
}

/// A non-negative integer from a BSON int32, int64 or double.
fn number(e: &super::bson_walk::Element<'_>) -> Option<u64> {
    let v = e.value;
    let n = match e.element_type {
        0x10 => super::read_i32(v, 0)? as i64,
        0x12 => i64::from_le_bytes(v.get(..8)?.try_into().ok()?),
        0x01 => f64::from_le_bytes(v.get(..8)?.try_into().ok()?) as i64,
        _ => return None,
    };
    u64::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::op_msg;
    use bson::rawdoc;

    fn ping() -> Vec<u8> {
        op_msg::encode(1, 0, 0, rawdoc! {"ping": 1, "$db": "admin"}.as_bytes(), &[])
    }

    #[test]
    fn incomplete_is_not_invalid() {
        let frame = ping();
        for cut in 0..frame.len() {
            assert_eq!(check(&frame[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(check(&frame), Ok(Some(frame.len())));
        let mut two = frame.clone();
        two.extend_from_slice(&frame);
        assert_eq!(check(&two), Ok(Some(frame.len())));
    }

    #[test]
    fn bounds_are_checked_from_the_header_alone() {
        let header = |len: i32, op: i32| {
            let mut b = Vec::new();
            Header {
                message_length: len,
                request_id: 0,
                response_to: 0,
                op_code: op,
            }
            .write(&mut b);
            b
        };
        assert_eq!(check(&header(0, 2013)), Err(FrameError::TooShort(0)));
        assert_eq!(check(&header(15, 2013)), Err(FrameError::TooShort(15)));
        assert_eq!(check(&header(-5, 2013)), Err(FrameError::TooShort(-5)));
        assert_eq!(
            check(&header(48_000_001, 2013)),
            Err(FrameError::TooLong(48_000_001))
        );
        assert_eq!(check(&header(48_000_000, 2013)), Ok(None));
        assert_eq!(
            check(&header(100, 9999)),
            Err(FrameError::UnknownOpCode(9999))
        );
        // A legacy opcode with an empty body is well framed.
        assert_eq!(check(&header(16, 2004 + 3)), Ok(Some(16)));
    }

    #[test]
    fn what_is_inside_is_not_judged_here() {
        // An unknown section kind (7), and payload type 3: whole messages,
        // for the backend to accept or refuse.
        for kind in [3u8, 7] {
            let mut frame = ping();
            frame[HEADER_LEN + 4] = kind;
            assert_eq!(check(&frame), Ok(Some(frame.len())), "kind {kind}");
        }
    }

    #[test]
    fn peek_tells_when_a_request_is_answered() {
        use crate::wire::compressed::{compress, Compressor};
        let msg =
            |flags, body: bson::RawDocumentBuf| op_msg::encode(1, 0, flags, body.as_bytes(), &[]);
        let w0 = msg(
            op_msg::MORE_TO_COME,
            rawdoc! {"insert": "c", "documents": [{"a": 1}], "writeConcern": {"w": 0}, "$db": "d"},
        );
        let streaming = msg(
            op_msg::EXHAUST_ALLOWED,
            rawdoc! {"hello": 1, "topologyVersion": {"processId": bson::oid::ObjectId::new(), "counter": 0i64}, "maxAwaitTimeMS": 10_000i64, "$db": "admin"},
        );
        let await_data = msg(
            0,
            rawdoc! {"getMore": 5i64, "collection": "c", "maxTimeMS": 2_500i32, "$db": "d"},
        );
        let plain_getmore = msg(0, rawdoc! {"getMore": 5i64, "collection": "c", "$db": "d"});
        let cases = [
            (w0, Answer::None, false),
            (streaming, Answer::Awaits(10_000), true),
            (await_data, Answer::Awaits(2_500), false),
            (plain_getmore, Answer::Prompt, false),
            (ping(), Answer::Prompt, false),
        ];
        for (frame, answer, hello) in &cases {
            let p = peek(frame);
            assert_eq!((p.answer, p.hello), (*answer, *hello));
            for c in Compressor::ALL {
                let z = compress(frame, c).unwrap();
                let p = peek(&z);
                assert_eq!(p.opcode, Some(OpCode::Msg));
                assert_eq!((p.answer, p.hello), (*answer, *hello), "{c:?}");
            }
        }
        assert!(more_to_come(
            &compress(&cases[0].0, Compressor::Zlib).unwrap()
        ));
        // The handshake over OP_QUERY, and a legacy write.
        let is_master = crate::wire::op_query::encode_query(
            1,
            "admin.$cmd",
            rawdoc! {"isMaster": 1}.as_bytes(),
        );
        assert!(peek(&is_master).hello);
        let mut legacy_insert = is_master.clone();
        legacy_insert[12..16].copy_from_slice(&2002i32.to_le_bytes());
        assert_eq!(peek(&legacy_insert).answer, Answer::None);
        // Garbage after a good header (moreToCome clear): answered, not a
        // hello.
        let mut bad = ping();
        for b in bad[HEADER_LEN..].iter_mut() {
            *b = 0xe1;
        }
        assert_eq!(peek(&bad).answer, Answer::Prompt);
    }

    #[test]
    fn peek_finds_x509_authentication() {
        use crate::wire::compressed::{compress, Compressor};
        let msg = |body: bson::RawDocumentBuf| op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
        let x509 = rawdoc! {"authenticate": 1, "mechanism": "MONGODB-X509", "$db": "$external"};
        let speculative = rawdoc! {"hello": 1, "client": {"driver": {"name": "x"}}, "speculativeAuthenticate": {"authenticate": 1, "mechanism": "MONGODB-X509", "db": "$external"}, "$db": "admin"};
        let scram = rawdoc! {"hello": 1, "speculativeAuthenticate": {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "db": "admin"}, "$db": "admin"};
        let elsewhere = rawdoc! {"find": "c", "filter": {"mechanism": "MONGODB-X509"}, "$db": "d"};
        for (body, want) in [
            (x509, true),
            (speculative, true),
            (scram, false),
            (elsewhere, false),
        ] {
            let frame = msg(body.clone());
            assert_eq!(peek(&frame).x509, want, "{body:?}");
            assert!(peek(&frame).whole);
            for c in Compressor::ALL {
                assert_eq!(peek(&compress(&frame, c).unwrap()).x509, want, "{c:?}");
            }
        }
        // Past the compressed prefix: not read, and said so.
        let long = rawdoc! {"authenticate": 1, "pad": "p".repeat(600), "mechanism": "MONGODB-X509", "$db": "$external"};
        let z = compress(&msg(long.clone()), Compressor::Zlib).unwrap();
        assert!(!peek(&z).whole);
        assert!(peek(&msg(long)).x509);
        let legacy = crate::wire::op_query::encode_query(
            1,
            "$external.$cmd",
            rawdoc! {"authenticate": 1, "mechanism": "MONGODB-X509"}.as_bytes(),
        );
        assert!(peek(&legacy).x509);
    }

    #[test]
    fn error_codes_are_read_from_small_replies() {
        let reply = |doc: bson::RawDocumentBuf| op_msg::encode(1, 9, 0, doc.as_bytes(), &[]);
        let not_primary = reply(
            rawdoc! {"ok": 0.0, "errmsg": "not primary", "code": 10107, "codeName": "NotWritablePrimary"},
        );
        assert_eq!(error_code(&not_primary), Some(10107));
        assert_eq!(error_code(&reply(rawdoc! {"n": 1, "ok": 1.0})), None);
        let large = reply(rawdoc! {"ok": 0.0, "errmsg": "x".repeat(2000), "code": 10107});
        assert_eq!(error_code(&large), None, "large replies are not looked at");
        assert_eq!(error_code(&ping()[..10]), None);
    }

    #[test]
    fn foreign_protocols_are_named() {
        assert!(sniff_foreign(b"GET / HTTP/1.1\r\n")
            .unwrap()
            .contains("HTTP"));
        assert!(sniff_foreign(&[0x16, 0x03, 0x01, 0x02, 0x00])
            .unwrap()
            .contains("TLS"));
        assert_eq!(sniff_foreign(&ping()), None);
    }
}
