//! The standard message header (`MsgHeader`): four little-endian int32s.

use super::{read_i32, OpCode, WireError};

pub const HEADER_LEN: usize = 16;

/// A parsed message header. `op_code` is kept as the raw number so unknown
/// opcodes can be reported as they were seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub message_length: i32,
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
}

impl Header {
    /// Parses the first 16 bytes of `buf`; `None` when fewer are present.
    pub fn parse(buf: &[u8]) -> Option<Header> {
        Some(Header {
            message_length: read_i32(buf, 0)?,
            request_id: read_i32(buf, 4)?,
            response_to: read_i32(buf, 8)?,
            op_code: read_i32(buf, 12)?,
        })
    }

    /// Parses the header of a whole frame and checks that the length it
    /// declares is the length of the slice.
    pub fn parse_frame(frame: &[u8]) -> Result<Header, WireError> {
        let header = Header::parse(frame).ok_or(WireError::Truncated("header"))?;
        if header.message_length < 0 || header.message_length as usize != frame.len() {
            return Err(WireError::Truncated("header length differs from the frame"));
        }
        Ok(header)
    }

    pub fn opcode(&self) -> Option<OpCode> {
        OpCode::from_i32(self.op_code)
    }

    /// Writes the header into the first 16 bytes of `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.message_length.to_le_bytes());
        out.extend_from_slice(&self.request_id.to_le_bytes());
        out.extend_from_slice(&self.response_to.to_le_bytes());
        out.extend_from_slice(&self.op_code.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_back() {
        let h = Header {
            message_length: 61,
            request_id: 7,
            response_to: -1,
            op_code: 2013,
        };
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(out.len(), HEADER_LEN);
        assert_eq!(Header::parse(&out), Some(h));
        assert_eq!(h.opcode(), Some(OpCode::Msg));
        assert_eq!(Header::parse(&out[..15]), None);
    }
}
