//! OP_MSG (opcode 2013): flag bits, one kind-0 body section, any number of
//! kind-1 document sequences, an optional kind-3 trace context (payload type
//! 3: one document, `{otel: {traceparent: …}}`, sent by drivers to servers
//! that announce support) and an optional CRC-32C checksum.

use super::{read_cstr, read_doc, read_i32, read_u32, Header, WireError, HEADER_LEN};
use std::ops::Range;

/// The message ends with a CRC-32C of everything before it.
pub const CHECKSUM_PRESENT: u32 = 1 << 0;
/// The sender will not wait for a reply (requests) / more replies follow
/// without a request (exhaust replies).
pub const MORE_TO_COME: u32 = 1 << 1;
/// The client accepts exhaust replies to this request.
pub const EXHAUST_ALLOWED: u32 = 1 << 16;
/// Bits 0–15 are "required": a parser must reject unknown ones.
const KNOWN_REQUIRED: u32 = CHECKSUM_PRESENT | MORE_TO_COME;

/// A borrowed view of an OP_MSG. Parsing checks the structure (flags, section
/// kinds and lengths, one body) but not the BSON inside the documents.
#[derive(Clone, Debug)]
pub struct OpMsg<'a> {
    pub header: Header,
    pub flags: u32,
    /// The kind-0 body document.
    pub body: &'a [u8],
    /// Where the body document sits in the frame (for rewriting it).
    body_range: Range<usize>,
    /// All section bytes (between the flags and the checksum).
    sections: &'a [u8],
    /// The kind-3 trace-context document, if the message carries one.
    pub trace_context: Option<&'a [u8]>,
    pub checksum: Option<u32>,
}

/// A kind-1 section: a named sequence of documents (e.g. `documents` of an
/// insert), sent outside the body to save a copy.
#[derive(Clone, Copy, Debug)]
pub struct DocSequence<'a> {
    pub identifier: &'a [u8],
    documents: &'a [u8],
}

impl<'a> DocSequence<'a> {
    pub fn identifier_str(&self) -> &'a str {
        std::str::from_utf8(self.identifier).unwrap_or("")
    }

    /// The documents' bytes, back to back.
    pub fn raw_documents(&self) -> &'a [u8] {
        self.documents
    }

    /// The documents of the sequence; each is length-checked.
    pub fn documents(&self) -> impl Iterator<Item = Result<&'a [u8], WireError>> + 'a {
        let bytes = self.documents;
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            if pos >= bytes.len() {
                return None;
            }
            match read_doc(bytes, pos) {
                Ok(doc) => {
                    pos += doc.len();
                    Some(Ok(doc))
                }
                Err(e) => {
                    pos = bytes.len();
                    Some(Err(e))
                }
            }
        })
    }
}

impl<'a> OpMsg<'a> {
    /// Parses a whole frame (header included) as an OP_MSG.
    pub fn parse(frame: &'a [u8]) -> Result<OpMsg<'a>, WireError> {
        let header = Header::parse_frame(frame)?;
        let flags = read_u32(frame, HEADER_LEN).ok_or(WireError::Truncated("flag bits"))?;
        if flags & 0xFFFF & !KNOWN_REQUIRED != 0 {
            return Err(WireError::BadOpMsg("unknown required flag bit set"));
        }
        let sections_start = HEADER_LEN + 4;
        let (sections_end, checksum) = if flags & CHECKSUM_PRESENT != 0 {
            let at = frame
                .len()
                .checked_sub(4)
                .filter(|at| *at >= sections_start)
                .ok_or(WireError::Truncated("checksum"))?;
            (at, read_u32(frame, at))
        } else {
            (frame.len(), None)
        };
        let mut body = None;
        let mut trace_context = None;
        let mut pos = sections_start;
        while pos < sections_end {
            let kind = frame[pos];
            let start = pos + 1;
            match kind {
                0 => {
                    let doc = read_doc(&frame[..sections_end], start)?;
                    if body.is_some() {
                        return Err(WireError::BadOpMsg("more than one body section"));
                    }
                    body = Some(start..start + doc.len());
                    pos = start + doc.len();
                }
                1 => {
                    let size = read_i32(&frame[..sections_end], start)
                        .ok_or(WireError::Truncated("document sequence size"))?;
                    if size < 5 {
                        return Err(WireError::BadOpMsg("document sequence size below 5"));
                    }
                    let end = start
                        .checked_add(size as usize)
                        .filter(|end| *end <= sections_end)
                        .ok_or(WireError::Truncated("document sequence"))?;
                    read_cstr(&frame[..end], start + 4).ok_or(WireError::BadOpMsg(
                        "document sequence identifier without NUL",
                    ))?;
                    pos = end;
                }
                3 => {
                    let doc = read_doc(&frame[..sections_end], start)?;
                    if trace_context.is_some() {
                        return Err(WireError::BadOpMsg("more than one trace-context section"));
                    }
                    trace_context = Some(doc);
                    pos = start + doc.len();
                }
                _ => return Err(WireError::BadOpMsg("section kind other than 0, 1 or 3")),
            }
        }
        let body_range = body.ok_or(WireError::BadOpMsg("no body section"))?;
        Ok(OpMsg {
            header,
            flags,
            body: &frame[body_range.clone()],
            body_range,
            sections: &frame[sections_start..sections_end],
            trace_context,
            checksum,
        })
    }

    pub fn exhaust_allowed(&self) -> bool {
        self.flags & EXHAUST_ALLOWED != 0
    }

    /// The kind-1 document sequences, in order.
    pub fn sequences(&self) -> impl Iterator<Item = DocSequence<'a>> + 'a {
        let bytes = self.sections;
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            // The structure was validated by `parse`, so lengths are in range.
            while pos < bytes.len() {
                let kind = bytes[pos];
                let start = pos + 1;
                let size = read_i32(bytes, start)? as usize;
                pos = start + size;
                if kind == 1 {
                    let (identifier, docs_at) = read_cstr(&bytes[..pos], start + 4)?;
                    return Some(DocSequence {
                        identifier,
                        documents: &bytes[docs_at..pos],
                    });
                }
            }
            None
        })
    }

    /// Builds the same message with `new_body` in place of the body section:
    /// same ids, flags and other sections; length fixed; checksum recomputed
    /// when the original had one.
    pub fn with_body(&self, frame: &[u8], new_body: &[u8]) -> Vec<u8> {
        let checksum_len = if self.checksum.is_some() { 4 } else { 0 };
        let end = frame.len() - checksum_len;
        let mut out = Vec::with_capacity(frame.len() + new_body.len());
        out.extend_from_slice(&frame[..self.body_range.start]);
        out.extend_from_slice(new_body);
        out.extend_from_slice(&frame[self.body_range.end..end]);
        let total = out.len() + checksum_len;
        out[..4].copy_from_slice(&(total as i32).to_le_bytes());
        if self.checksum.is_some() {
            let crc = crc32c::crc32c(&out);
            out.extend_from_slice(&crc.to_le_bytes());
        }
        out
    }
}

/// Verifies the CRC-32C of a frame whose flags say a checksum is present.
/// Frames without one verify trivially.
pub fn verify_checksum(frame: &[u8]) -> Result<(), WireError> {
    let flags = read_u32(frame, HEADER_LEN).ok_or(WireError::Truncated("flag bits"))?;
    if flags & CHECKSUM_PRESENT == 0 {
        return Ok(());
    }
    let at = frame
        .len()
        .checked_sub(4)
        .filter(|at| *at >= HEADER_LEN + 4)
        .ok_or(WireError::Truncated("checksum"))?;
    let expected = read_u32(frame, at).ok_or(WireError::Truncated("checksum"))?;
    let actual = crc32c::crc32c(&frame[..at]);
    if expected != actual {
        return Err(WireError::ChecksumMismatch { expected, actual });
    }
    Ok(())
}

/// Encodes an OP_MSG with a body and optional document sequences.
pub fn encode(
    request_id: i32,
    response_to: i32,
    flags: u32,
    body: &[u8],
    sequences: &[(&str, &[&[u8]])],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + 5 + body.len());
    Header {
        message_length: 0,
        request_id,
        response_to,
        op_code: 2013,
    }
    .write(&mut out);
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(0);
    out.extend_from_slice(body);
    for (identifier, docs) in sequences {
        out.push(1);
        let size_at = out.len();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(identifier.as_bytes());
        out.push(0);
        for doc in *docs {
            out.extend_from_slice(doc);
        }
        let size = (out.len() - size_at) as i32;
        out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
    }
    let checksum = flags & CHECKSUM_PRESENT != 0;
    let total = out.len() + if checksum { 4 } else { 0 };
    out[..4].copy_from_slice(&(total as i32).to_le_bytes());
    if checksum {
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn insert_msg(flags: u32) -> Vec<u8> {
        let body = rawdoc! {"insert": "c", "$db": "test"};
        let d1 = rawdoc! {"_id": 1};
        let d2 = rawdoc! {"_id": 2, "x": "y"};
        encode(
            9,
            0,
            flags,
            body.as_bytes(),
            &[("documents", &[d1.as_bytes(), d2.as_bytes()])],
        )
    }

    #[test]
    fn parses_body_and_sequences() {
        let frame = insert_msg(0);
        let msg = OpMsg::parse(&frame).unwrap();
        assert_eq!(msg.header.request_id, 9);
        assert_eq!(msg.header.message_length as usize, frame.len());
        assert_eq!(
            super::super::bson_walk::first_key(msg.body),
            Some(&b"insert"[..])
        );
        let seqs: Vec<_> = msg.sequences().collect();
        assert_eq!(seqs.len(), 1);
        assert_eq!(seqs[0].identifier_str(), "documents");
        assert_eq!(seqs[0].documents().count(), 2);
        assert!(msg.checksum.is_none());
    }

    #[test]
    fn checksum_is_written_and_verified() {
        let mut frame = insert_msg(CHECKSUM_PRESENT);
        let msg = OpMsg::parse(&frame).unwrap();
        assert!(msg.checksum.is_some());
        verify_checksum(&frame).unwrap();
        let n = frame.len();
        frame[n - 10] ^= 0xff;
        assert!(matches!(
            verify_checksum(&frame),
            Err(WireError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn with_body_keeps_sequences_and_fixes_length_and_checksum() {
        let frame = insert_msg(CHECKSUM_PRESENT | EXHAUST_ALLOWED);
        let msg = OpMsg::parse(&frame).unwrap();
        let new_body = rawdoc! {"insert": "other", "$db": "test", "ordered": false};
        let out = msg.with_body(&frame, new_body.as_bytes());
        verify_checksum(&out).unwrap();
        let again = OpMsg::parse(&out).unwrap();
        assert_eq!(again.body, new_body.as_bytes());
        assert_eq!(again.flags, msg.flags);
        assert_eq!(again.header.request_id, 9);
        assert_eq!(again.sequences().next().unwrap().documents().count(), 2);
    }

    #[test]
    fn payload_type_3_is_read_beside_the_others() {
        let mut frame = insert_msg(0);
        let trace = rawdoc! {"otel": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}};
        frame.push(3);
        frame.extend_from_slice(trace.as_bytes());
        let len = frame.len() as i32;
        frame[..4].copy_from_slice(&len.to_le_bytes());
        let msg = OpMsg::parse(&frame).unwrap();
        assert_eq!(msg.trace_context, Some(trace.as_bytes()));
        assert_eq!(msg.sequences().next().unwrap().documents().count(), 2);
        frame.push(3);
        frame.extend_from_slice(trace.as_bytes());
        let len = frame.len() as i32;
        frame[..4].copy_from_slice(&len.to_le_bytes());
        assert_eq!(
            OpMsg::parse(&frame).unwrap_err(),
            WireError::BadOpMsg("more than one trace-context section")
        );
    }

    #[test]
    fn rejects_bad_structure() {
        let frame = insert_msg(0);
        // Section kind 2 (internal) and other values are refused.
        let mut bad = frame.clone();
        bad[HEADER_LEN + 4] = 2;
        assert_eq!(
            OpMsg::parse(&bad).unwrap_err(),
            WireError::BadOpMsg("section kind other than 0, 1 or 3")
        );
        // Unknown required flag bit.
        let mut bad = frame.clone();
        bad[HEADER_LEN] = 0x04;
        assert!(OpMsg::parse(&bad).is_err());
        // Unknown optional bit (above 15) is allowed.
        let mut ok = frame.clone();
        ok[HEADER_LEN + 3] = 0x40;
        assert!(OpMsg::parse(&ok).is_ok());
        // Every truncation errors without panicking.
        for cut in 0..frame.len() {
            assert!(OpMsg::parse(&frame[..cut]).is_err(), "cut at {cut}");
        }
        // No body.
        let seq_only = encode(1, 0, 0, rawdoc! {}.as_bytes(), &[]);
        let mut no_body = seq_only[..HEADER_LEN + 4].to_vec();
        no_body[..4].copy_from_slice(&20i32.to_le_bytes());
        assert_eq!(
            OpMsg::parse(&no_body).unwrap_err(),
            WireError::BadOpMsg("no body section")
        );
    }
}
