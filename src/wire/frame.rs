//! Framing: the only parsing on the forwarding hot path.
//!
//! [`check`] looks at the start of a buffer and answers "need more bytes"
//! (`Ok(None)`), "a complete message of N bytes" (`Ok(Some(N))`) or "this is
//! not the wire protocol" (`Err`). The length and opcode are checked as soon
//! as the 16-byte header is in, before any buffer is grown for the body; the
//! structure of OP_MSG / OP_QUERY / OP_REPLY / OP_COMPRESSED (section kinds
//! and lengths, document bounds, declared sizes) once the whole message is in.
//! The BSON inside documents is not validated here: that is the backend's
//! job (and the analysis side's, off the hot path).

use super::{
    Header, OpCode, OpCompressed, OpMsg, OpQuery, OpReply, WireError, HEADER_LEN, MAX_MESSAGE_SIZE,
};

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("message length {0} is below the 16-byte header")]
    TooShort(i32),
    #[error("message length {0} is above maxMessageSizeBytes ({MAX_MESSAGE_SIZE})")]
    TooLong(i32),
    #[error("unknown opcode {0}")]
    UnknownOpCode(i32),
    #[error("malformed {opcode}: {error}")]
    Malformed {
        opcode: &'static str,
        error: WireError,
    },
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
            FrameError::Malformed { .. } => "malformed",
            FrameError::Foreign(_) => "foreign_protocol",
        }
    }
}

/// Checks whether `buf` starts with a complete, well-framed message and
/// returns its length. `Ok(None)` means more bytes are needed (the caller can
/// use [`expected_len`] to reserve exactly what is missing).
pub fn check(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    let Some(len) = expected_len(buf)? else {
        return Ok(None);
    };
    let Some(frame) = buf.get(..len) else {
        return Ok(None);
    };
    validate(frame)?;
    Ok(Some(len))
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

/// Structural validation of one whole frame.
fn validate(frame: &[u8]) -> Result<(), FrameError> {
    // `expected_len` has already accepted the opcode.
    let opcode = Header::parse(frame)
        .and_then(|h| h.opcode())
        .ok_or(FrameError::TooShort(frame.len() as i32))?;
    let result = match opcode {
        OpCode::Msg => OpMsg::parse(frame).map(drop),
        OpCode::Query => OpQuery::parse(frame).map(drop),
        OpCode::Reply => OpReply::parse(frame).map(drop),
        OpCode::Compressed => OpCompressed::parse(frame).map(drop),
        _ => Ok(()),
    };
    result.map_err(|error| FrameError::Malformed {
        opcode: opcode.name(),
        error,
    })
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

/// Whether the backend will answer this request: every request but an
/// OP_MSG with `moreToCome` (fire-and-forget writes). This and
/// [`more_to_come`] are the one place `moreToCome` is read.
///
/// OP_COMPRESSED carries its flags inside the compressed data; it is taken
/// as answered, as everything but `w: 0` writes is.
pub fn expects_reply(message: &[u8]) -> bool {
    match Header::parse(message).and_then(|h| h.opcode()) {
        Some(OpCode::Msg) => msg_flags(message) & super::op_msg::MORE_TO_COME == 0,
        Some(OpCode::Query | OpCode::GetMore | OpCode::Command | OpCode::Compressed) => true,
        _ => false,
    }
}

/// Whether more replies follow this one without a request (an exhaust
/// stream), or, on a request, that no reply will come.
pub fn more_to_come(message: &[u8]) -> bool {
    Header::parse(message).and_then(|h| h.opcode()) == Some(OpCode::Msg)
        && msg_flags(message) & super::op_msg::MORE_TO_COME != 0
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
    fn structure_is_checked_once_complete() {
        let mut frame = ping();
        frame[HEADER_LEN + 4] = 7;
        assert!(matches!(
            check(&frame),
            Err(FrameError::Malformed {
                opcode: "OP_MSG",
                ..
            })
        ));
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
