//! OP_QUERY (2004) and OP_REPLY (1): the legacy pair drivers still use for
//! the first handshake (`isMaster`/`hello` on `admin.$cmd`).

use super::{read_cstr, read_doc, read_i32, read_i64, Header, WireError, HEADER_LEN};

#[derive(Clone, Debug)]
pub struct OpQuery<'a> {
    pub header: Header,
    pub flags: i32,
    pub full_collection_name: &'a [u8],
    pub number_to_skip: i32,
    pub number_to_return: i32,
    pub query: &'a [u8],
    pub return_fields_selector: Option<&'a [u8]>,
}

impl<'a> OpQuery<'a> {
    pub fn parse(frame: &'a [u8]) -> Result<OpQuery<'a>, WireError> {
        let header = Header::parse_frame(frame)?;
        let flags = read_i32(frame, HEADER_LEN).ok_or(WireError::Truncated("OP_QUERY flags"))?;
        let (name, at) = read_cstr(frame, HEADER_LEN + 4)
            .ok_or(WireError::Truncated("OP_QUERY collection name"))?;
        let number_to_skip = read_i32(frame, at).ok_or(WireError::Truncated("numberToSkip"))?;
        let number_to_return =
            read_i32(frame, at + 4).ok_or(WireError::Truncated("numberToReturn"))?;
        let query = read_doc(frame, at + 8)?;
        let after = at + 8 + query.len();
        let return_fields_selector = if after < frame.len() {
            let doc = read_doc(frame, after)?;
            if after + doc.len() != frame.len() {
                return Err(WireError::InvalidBson("bytes after the field selector"));
            }
            Some(doc)
        } else {
            None
        };
        Ok(OpQuery {
            header,
            flags,
            full_collection_name: name,
            number_to_skip,
            number_to_return,
            query,
            return_fields_selector,
        })
    }

    /// True for commands sent the legacy way (`db.$cmd`).
    pub fn is_command(&self) -> bool {
        self.full_collection_name.ends_with(b".$cmd")
    }

    /// The command document: legacy drivers wrap it as `{$query: {...},
    /// $readPreference: ...}` (or `query`) when they add modifiers.
    pub fn command(&self) -> &'a [u8] {
        match super::bson_walk::elements(self.query).next() {
            Some(Ok(first))
                if (first.key == b"$query" || first.key == b"query")
                    && first.element_type == 0x03 =>
            {
                first.value
            }
            _ => self.query,
        }
    }
}

#[derive(Clone, Debug)]
pub struct OpReply<'a> {
    pub header: Header,
    pub response_flags: i32,
    pub cursor_id: i64,
    pub starting_from: i32,
    pub number_returned: i32,
    documents: &'a [u8],
}

impl<'a> OpReply<'a> {
    pub fn parse(frame: &'a [u8]) -> Result<OpReply<'a>, WireError> {
        let header = Header::parse_frame(frame)?;
        let at = HEADER_LEN;
        let response_flags = read_i32(frame, at).ok_or(WireError::Truncated("responseFlags"))?;
        let cursor_id = read_i64(frame, at + 4).ok_or(WireError::Truncated("cursorID"))?;
        let starting_from = read_i32(frame, at + 12).ok_or(WireError::Truncated("startingFrom"))?;
        let number_returned =
            read_i32(frame, at + 16).ok_or(WireError::Truncated("numberReturned"))?;
        let documents = &frame[at + 20..];
        // Check that the documents tile the rest of the message exactly.
        let mut pos = 0;
        while pos < documents.len() {
            pos += read_doc(documents, pos)?.len();
        }
        Ok(OpReply {
            header,
            response_flags,
            cursor_id,
            starting_from,
            number_returned,
            documents,
        })
    }

    pub fn documents(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let bytes = self.documents;
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            let doc = read_doc(bytes, pos).ok()?;
            pos += doc.len();
            Some(doc)
        })
    }

    /// Builds the same reply with `docs` in place of its documents.
    pub fn with_documents(&self, docs: &[&[u8]]) -> Vec<u8> {
        encode_reply(
            self.header.request_id,
            self.header.response_to,
            self.response_flags,
            self.cursor_id,
            self.starting_from,
            docs,
        )
    }
}

/// Encodes an OP_REPLY.
pub fn encode_reply(
    request_id: i32,
    response_to: i32,
    response_flags: i32,
    cursor_id: i64,
    starting_from: i32,
    docs: &[&[u8]],
) -> Vec<u8> {
    let len = HEADER_LEN + 20 + docs.iter().map(|d| d.len()).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    Header {
        message_length: len as i32,
        request_id,
        response_to,
        op_code: 1,
    }
    .write(&mut out);
    out.extend_from_slice(&response_flags.to_le_bytes());
    out.extend_from_slice(&cursor_id.to_le_bytes());
    out.extend_from_slice(&starting_from.to_le_bytes());
    out.extend_from_slice(&(docs.len() as i32).to_le_bytes());
    for doc in docs {
        out.extend_from_slice(doc);
    }
    out
}

/// Encodes an OP_QUERY (used by tests and by the upstream probe).
pub fn encode_query(request_id: i32, collection: &str, query: &[u8]) -> Vec<u8> {
    let len = HEADER_LEN + 4 + collection.len() + 1 + 8 + query.len();
    let mut out = Vec::with_capacity(len);
    Header {
        message_length: len as i32,
        request_id,
        response_to: 0,
        op_code: 2004,
    }
    .write(&mut out);
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(collection.as_bytes());
    out.push(0);
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&(-1i32).to_le_bytes());
    out.extend_from_slice(query);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn query_round_trip_and_wrapped_command() {
        let q = rawdoc! {"$query": {"isMaster": 1}, "$readPreference": {"mode": "primary"}};
        let frame = encode_query(3, "admin.$cmd", q.as_bytes());
        let parsed = OpQuery::parse(&frame).unwrap();
        assert!(parsed.is_command());
        assert_eq!(parsed.full_collection_name, b"admin.$cmd");
        assert_eq!(parsed.number_to_return, -1);
        assert_eq!(
            super::super::bson_walk::first_key(parsed.command()),
            Some(&b"isMaster"[..])
        );
        for cut in 0..frame.len() {
            assert!(OpQuery::parse(&frame[..cut]).is_err());
        }
    }

    #[test]
    fn reply_round_trip() {
        let a = rawdoc! {"ismaster": true};
        let b = rawdoc! {"x": 1};
        let frame = encode_reply(5, 3, 8, 0, 0, &[a.as_bytes(), b.as_bytes()]);
        let reply = OpReply::parse(&frame).unwrap();
        assert_eq!(reply.header.response_to, 3);
        assert_eq!(reply.number_returned, 2);
        assert_eq!(reply.documents().count(), 2);
        let rebuilt = reply.with_documents(&[b.as_bytes()]);
        let again = OpReply::parse(&rebuilt).unwrap();
        assert_eq!(again.documents().next().unwrap(), b.as_bytes());
        assert_eq!(again.response_flags, 8);
        for cut in 0..frame.len() {
            assert!(OpReply::parse(&frame[..cut]).is_err());
        }
    }
}
