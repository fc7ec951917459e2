//! One entry point for the analysis side: any frame into a [`Message`].

use super::{bson_walk, Header, OpCode, OpCompressed, OpMsg, OpQuery, OpReply, WireError};

#[derive(Clone, Debug)]
pub enum Message<'a> {
    Msg(OpMsg<'a>),
    Query(OpQuery<'a>),
    Reply(OpReply<'a>),
    Compressed(OpCompressed<'a>),
    /// Legacy opcodes, recognised and counted but not decoded.
    Other(Header, OpCode),
}

impl<'a> Message<'a> {
    pub fn parse(frame: &'a [u8]) -> Result<Message<'a>, WireError> {
        let header = Header::parse_frame(frame)?;
        let opcode = header
            .opcode()
            .ok_or(WireError::UnknownOpCode(header.op_code))?;
        Ok(match opcode {
            OpCode::Msg => Message::Msg(OpMsg::parse(frame)?),
            OpCode::Query => Message::Query(OpQuery::parse(frame)?),
            OpCode::Reply => Message::Reply(OpReply::parse(frame)?),
            OpCode::Compressed => Message::Compressed(OpCompressed::parse(frame)?),
            other => Message::Other(header, other),
        })
    }

    pub fn header(&self) -> &Header {
        match self {
            Message::Msg(m) => &m.header,
            Message::Query(q) => &q.header,
            Message::Reply(r) => &r.header,
            Message::Compressed(c) => &c.header,
            Message::Other(h, _) => h,
        }
    }

    pub fn opcode(&self) -> OpCode {
        match self {
            Message::Msg(_) => OpCode::Msg,
            Message::Query(_) => OpCode::Query,
            Message::Reply(_) => OpCode::Reply,
            Message::Compressed(_) => OpCode::Compressed,
            Message::Other(_, op) => *op,
        }
    }

    /// The command document of a request: the OP_MSG body, or the query of
    /// an OP_QUERY on `db.$cmd`.
    pub fn command_doc(&self) -> Option<&'a [u8]> {
        match self {
            Message::Msg(m) => Some(m.body),
            Message::Query(q) if q.is_command() => Some(q.command()),
            _ => None,
        }
    }
}

/// The command name of a request (the first key of its command document).
/// `None` for replies, legacy CRUD opcodes and compressed envelopes.
pub fn command_name<'a>(message: &Message<'a>) -> Option<&'a str> {
    bson_walk::utf8(command_name_bytes(message)?)
}

/// [`command_name`]'s bytes, not checked as UTF-8 (a counter that has seen
/// a name before compares bytes).
pub fn command_name_bytes<'a>(message: &Message<'a>) -> Option<&'a [u8]> {
    bson_walk::first_key(message.command_doc()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{compressed, op_msg, op_query, Compressor};
    use bson::rawdoc;

    #[test]
    fn names_commands_in_every_envelope() {
        let msg = op_msg::encode(1, 0, 0, rawdoc! {"find": "c", "$db": "d"}.as_bytes(), &[]);
        assert_eq!(command_name(&Message::parse(&msg).unwrap()), Some("find"));

        let q = op_query::encode_query(2, "admin.$cmd", rawdoc! {"isMaster": 1}.as_bytes());
        assert_eq!(command_name(&Message::parse(&q).unwrap()), Some("isMaster"));

        let z = compressed::compress(&msg, Compressor::Zstd).unwrap();
        let parsed = Message::parse(&z).unwrap();
        assert_eq!(parsed.opcode(), OpCode::Compressed);
        assert_eq!(command_name(&parsed), None);
        let Message::Compressed(c) = parsed else {
            unreachable!()
        };
        let inner = c.decompress().unwrap();
        assert_eq!(command_name(&Message::parse(&inner).unwrap()), Some("find"));

        let legacy = op_query::encode_query(3, "db.coll", rawdoc! {"a": 1}.as_bytes());
        assert_eq!(command_name(&Message::parse(&legacy).unwrap()), None);
    }
}
