//! The MongoDB wire protocol, as pure functions over byte slices (no I/O).
//!
//! - [`header`]: the 16-byte message header every message starts with.
//! - [`frame`]: "is there a complete, well-framed message at the start of this
//!   buffer?" — the only parsing the forwarding hot path does. It keeps
//!   *incomplete* (`Ok(None)`) apart from *invalid* (`Err`).
//! - [`op_msg`], [`op_query`], [`compressed`]: borrowed views of the message
//!   bodies, used by the analysis side and by the hello rewrite.
//! - [`bson_walk`]: a minimal element walker over raw BSON that yields byte
//!   ranges without decoding values or validating UTF-8.
//! - [`message`]: one entry point that parses any frame into a [`Message`].
//!
//! Every length read from the wire goes through checked arithmetic and is
//! compared to the bytes actually present before it is used; no function in
//! this module panics on any input.

pub mod bson_walk;
pub mod compressed;
pub mod frame;
pub mod header;
pub mod message;
pub mod op_msg;
pub mod op_query;

pub use compressed::{Compressor, OpCompressed};
pub use frame::FrameError;
pub use header::{Header, HEADER_LEN};
pub use message::{command_name, command_name_bytes, Message};
pub use op_msg::OpMsg;
pub use op_query::{OpQuery, OpReply};

/// The largest message MongoDB accepts (`maxMessageSizeBytes`). Frames above
/// it are rejected before anything is allocated for them.
pub const MAX_MESSAGE_SIZE: usize = 48_000_000;

/// Wire opcodes. Legacy opcodes are recognised by number so that they can be
/// forwarded and counted; only OP_MSG, OP_QUERY, OP_REPLY and OP_COMPRESSED are
/// decoded further.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpCode {
    Reply,
    Update,
    Insert,
    Reserved,
    Query,
    GetMore,
    Delete,
    KillCursors,
    Command,
    CommandReply,
    Compressed,
    Msg,
}

impl OpCode {
    /// All opcodes, in numeric order.
    pub const ALL: [OpCode; 12] = [
        OpCode::Reply,
        OpCode::Update,
        OpCode::Insert,
        OpCode::Reserved,
        OpCode::Query,
        OpCode::GetMore,
        OpCode::Delete,
        OpCode::KillCursors,
        OpCode::Command,
        OpCode::CommandReply,
        OpCode::Compressed,
        OpCode::Msg,
    ];

    pub fn from_i32(code: i32) -> Option<OpCode> {
        Some(match code {
            1 => OpCode::Reply,
            2001 => OpCode::Update,
            2002 => OpCode::Insert,
            2003 => OpCode::Reserved,
            2004 => OpCode::Query,
            2005 => OpCode::GetMore,
            2006 => OpCode::Delete,
            2007 => OpCode::KillCursors,
            2010 => OpCode::Command,
            2011 => OpCode::CommandReply,
            2012 => OpCode::Compressed,
            2013 => OpCode::Msg,
            _ => return None,
        })
    }

    pub fn as_i32(self) -> i32 {
        match self {
            OpCode::Reply => 1,
            OpCode::Update => 2001,
            OpCode::Insert => 2002,
            OpCode::Reserved => 2003,
            OpCode::Query => 2004,
            OpCode::GetMore => 2005,
            OpCode::Delete => 2006,
            OpCode::KillCursors => 2007,
            OpCode::Command => 2010,
            OpCode::CommandReply => 2011,
            OpCode::Compressed => 2012,
            OpCode::Msg => 2013,
        }
    }

    /// The name used in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            OpCode::Reply => "OP_REPLY",
            OpCode::Update => "OP_UPDATE",
            OpCode::Insert => "OP_INSERT",
            OpCode::Reserved => "OP_RESERVED",
            OpCode::Query => "OP_QUERY",
            OpCode::GetMore => "OP_GET_MORE",
            OpCode::Delete => "OP_DELETE",
            OpCode::KillCursors => "OP_KILL_CURSORS",
            OpCode::Command => "OP_COMMAND",
            OpCode::CommandReply => "OP_COMMANDREPLY",
            OpCode::Compressed => "OP_COMPRESSED",
            OpCode::Msg => "OP_MSG",
        }
    }
}

/// Why a message body could not be decoded. Small and `Copy`-cheap so the
/// analysis side can count errors by kind without allocating.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message shorter than its header says ({0})")]
    Truncated(&'static str),
    #[error("invalid BSON: {0}")]
    InvalidBson(&'static str),
    #[error("OP_MSG: {0}")]
    BadOpMsg(&'static str),
    #[error("OP_MSG checksum mismatch: header says {expected:#010x}, bytes give {actual:#010x}")]
    ChecksumMismatch { expected: u32, actual: u32 },
    #[error("OP_COMPRESSED: {0}")]
    BadCompressed(&'static str),
    #[error(
        "OP_COMPRESSED: declared uncompressed size {declared} but the data inflates to {actual}"
    )]
    SizeMismatch { declared: usize, actual: usize },
    #[error("unknown compressor id {0}")]
    UnknownCompressor(u8),
    #[error("unknown opcode {0}")]
    UnknownOpCode(i32),
    #[error("documents nested deeper than {0} levels")]
    TooDeep(usize),
}

impl WireError {
    /// A short stable label for counters.
    pub fn kind(&self) -> &'static str {
        match self {
            WireError::Truncated(_) => "truncated",
            WireError::InvalidBson(_) => "invalid_bson",
            WireError::BadOpMsg(_) => "bad_op_msg",
            WireError::ChecksumMismatch { .. } => "checksum_mismatch",
            WireError::BadCompressed(_) => "bad_compressed",
            WireError::SizeMismatch { .. } => "compressed_size_mismatch",
            WireError::UnknownCompressor(_) => "unknown_compressor",
            WireError::UnknownOpCode(_) => "unknown_opcode",
            WireError::TooDeep(_) => "too_deep",
        }
    }
}

/// Little-endian readers with bounds checks. They return `None` rather than
/// panicking when the slice is too short.
pub(crate) fn read_i32(buf: &[u8], at: usize) -> Option<i32> {
    let end = at.checked_add(4)?;
    let bytes: [u8; 4] = buf.get(at..end)?.try_into().ok()?;
    Some(i32::from_le_bytes(bytes))
}

pub(crate) fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    read_i32(buf, at).map(|v| v as u32)
}

pub(crate) fn read_i64(buf: &[u8], at: usize) -> Option<i64> {
    let end = at.checked_add(8)?;
    let bytes: [u8; 8] = buf.get(at..end)?.try_into().ok()?;
    Some(i64::from_le_bytes(bytes))
}

/// Reads a NUL-terminated string starting at `at`; returns the bytes without
/// the NUL and the offset just past it.
pub(crate) fn read_cstr(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let nul = rest.iter().position(|&b| b == 0)?;
    Some((&rest[..nul], at + nul + 1))
}

/// Reads the int32 length prefix of a BSON document at `at` and returns the
/// document's bytes, checking that it fits in `buf` and ends with NUL.
pub(crate) fn read_doc(buf: &[u8], at: usize) -> Result<&[u8], WireError> {
    let len = read_i32(buf, at).ok_or(WireError::Truncated("document length"))?;
    if len < 5 {
        return Err(WireError::InvalidBson("document length below 5"));
    }
    let end = at
        .checked_add(len as usize)
        .ok_or(WireError::InvalidBson("document length overflows"))?;
    let doc = buf
        .get(at..end)
        .ok_or(WireError::Truncated("document runs past the message"))?;
    if doc[doc.len() - 1] != 0 {
        return Err(WireError::InvalidBson("document does not end with NUL"));
    }
    Ok(doc)
}
