//! What a reply says: the few top-level fields the analysis reads (`ok`,
//! `code`, `n`, `writeErrors`, `cursor`, `value`), found in one walk.
//!
//! Replies are most of the bytes that reach the analysis (a cursor batch
//! can hold many documents), so none is decoded: a [`Reply`] keeps where
//! each field lies and its accessors read only their own field. The
//! worker's decoder already walks a reply's top level once to check it;
//! that walk records the fields' places in a [`ReplyIndex`], handed on
//! with the frame, so the engine rebuilds the [`Reply`] from those places
//! ([`Reply::at`]) rather than walking it again. [`Reply::parse`] is the
//! plain walk, for callers without an index (and the tests' reference).

use crate::wire::bson_walk::{elements, field, Element};
use crate::wire::{Message, WireError};
use bson::RawDocument;
use smallvec::SmallVec;

/// What a reply says: its top-level fields found in one walk over its
/// bytes (not validated; each accessor reads only its own field).
#[derive(Clone, Debug)]
pub struct Reply<'a> {
    pub body: &'a RawDocument,
    ok: Option<Element<'a>>,
    code: Option<Element<'a>>,
    n: Option<Element<'a>>,
    write_errors: Option<Element<'a>>,
    cursor: Option<Element<'a>>,
    value: Option<Element<'a>>,
}

/// A cursor batch in a reply (`cursor.firstBatch` / `cursor.nextBatch`).
#[derive(Clone, Debug)]
pub struct CursorBatch<'a> {
    pub id: i64,
    /// Inline up to four (a find by id, a findOne): no allocation.
    pub documents: SmallVec<[&'a RawDocument; 4]>,
}

/// A walked element's int32.
fn element_i32(e: &Element<'_>) -> Option<i32> {
    (e.element_type == 0x10)
        .then(|| crate::wire::read_i32(e.value, 0))
        .flatten()
}

/// A walked element's number (int32, int64, finite double), as
/// [`number`](super::number) reads a decoded one.
fn element_number(e: &Element<'_>) -> Option<i64> {
    match e.element_type {
        0x10 => element_i32(e).map(i64::from),
        0x12 => Some(i64::from_le_bytes(e.value.get(..8)?.try_into().ok()?)),
        0x01 => {
            let d = f64::from_le_bytes(e.value.get(..8)?.try_into().ok()?);
            d.is_finite().then_some(d as i64)
        }
        _ => None,
    }
}

/// Where a reply's body and the fields a [`Reply`] reads lie in its frame:
/// what the worker's decoding found in its one walk of the reply's top
/// level (the walk that checks it), handed to the engine with the frame so
/// that the reply is not parsed or walked again ([`Reply::at`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyIndex {
    /// The body's offset in the frame.
    body: u32,
    /// The offsets in the body of the elements (their type bytes) of
    /// `ok`, `code`, `n`, `writeErrors`, `cursor` and `value` (0 when
    /// absent: no element starts a document), and their values' lengths.
    fields: [(u32, u32); 6],
}

/// The keys of [`ReplyIndex`]'s fields, in its order.
const REPLY_KEYS: [&[u8]; 6] = [b"ok", b"code", b"n", b"writeErrors", b"cursor", b"value"];

impl ReplyIndex {
    /// Walks the top level of `message`'s first document (OP_MSG body or
    /// OP_REPLY's first document) once; `frame` is what `message` was
    /// parsed from. `Ok(None)`: no document to read. With `strict`, an
    /// element that is not valid BSON is an error (the decoder's check),
    /// else the walk stops at it as [`Reply::parse`]'s does.
    pub fn of(
        message: &Message<'_>,
        frame: &[u8],
        strict: bool,
    ) -> Result<Option<ReplyIndex>, WireError> {
        let body = match message {
            Message::Msg(m) => m.body,
            Message::Reply(r) => match r.documents().next() {
                Some(d) => d,
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let offset =
            |bytes: &[u8], of: &[u8]| (bytes.as_ptr() as usize - of.as_ptr() as usize) as u32;
        let mut index = ReplyIndex {
            body: offset(body, frame),
            fields: [(0, 0); 6],
        };
        if RawDocument::from_bytes(body).is_err() {
            if strict {
                return Err(WireError::InvalidBson("reply document's length or end"));
            }
            return Ok(None);
        }
        for e in elements(body) {
            let e = match e {
                Ok(e) => e,
                Err(error) if strict => return Err(error),
                Err(_) => break,
            };
            let slot = match e.key {
                b"ok" => 0,
                b"code" => 1,
                b"n" => 2,
                b"writeErrors" => 3,
                b"cursor" => 4,
                b"value" => 5,
                _ => continue,
            };
            // The first of a repeated key, as `RawDocument::get` reads.
            if index.fields[slot].0 == 0 {
                index.fields[slot] = (offset(e.raw, body), e.value.len() as u32);
            }
        }
        Ok(Some(index))
    }
}

impl<'a> Reply<'a> {
    /// The first document of a reply message (OP_MSG body or OP_REPLY's
    /// first document).
    pub fn parse(message: &Message<'a>) -> Option<Reply<'a>> {
        let bytes = match message {
            Message::Msg(m) => m.body,
            Message::Reply(r) => r.documents().next()?,
            _ => return None,
        };
        let mut reply = Reply {
            body: RawDocument::from_bytes(bytes).ok()?,
            ok: None,
            code: None,
            n: None,
            write_errors: None,
            cursor: None,
            value: None,
        };
        for e in elements(bytes).map_while(Result::ok) {
            let slot = match e.key {
                b"ok" => &mut reply.ok,
                b"code" => &mut reply.code,
                b"n" => &mut reply.n,
                b"writeErrors" => &mut reply.write_errors,
                b"cursor" => &mut reply.cursor,
                b"value" => &mut reply.value,
                _ => continue,
            };
            // The first of a repeated key, as `RawDocument::get` reads.
            slot.get_or_insert(e);
        }
        Some(reply)
    }

    /// The reply `index` describes in `frame` (the frame it was made
    /// from): read where the index points, no walk.
    pub fn at(frame: &'a [u8], index: &ReplyIndex) -> Option<Reply<'a>> {
        let body_bytes = frame.get(index.body as usize..)?;
        let len = crate::wire::read_i32(body_bytes, 0)?;
        let body = RawDocument::from_bytes(body_bytes.get(..usize::try_from(len).ok()?)?).ok()?;
        // Each element rebuilt from where it lies: its key is known, its
        // value's length was found by the walk.
        let bytes = body.as_bytes();
        let field = |slot: usize| -> Option<Element<'a>> {
            let (at, len) = index.fields[slot];
            if at == 0 {
                return None;
            }
            let (at, len) = (at as usize, len as usize);
            let key_len = REPLY_KEYS[slot].len();
            let raw = bytes.get(at..at + 2 + key_len + len)?;
            Some(Element {
                element_type: raw[0],
                key: &raw[1..1 + key_len],
                value: &raw[2 + key_len..],
                raw,
            })
        };
        Some(Reply {
            body,
            ok: field(0),
            code: field(1),
            n: field(2),
            write_errors: field(3),
            cursor: field(4),
            value: field(5),
        })
    }

    pub fn ok(&self) -> bool {
        match &self.ok {
            Some(e) if e.element_type == 0x08 => e.value.first().is_some_and(|b| *b != 0),
            Some(e) => element_number(e).is_some_and(|n| n != 0),
            None => false,
        }
    }

    /// The error code of a failed command.
    pub fn code(&self) -> Option<i32> {
        self.code.as_ref().and_then(element_i32)
    }

    /// The documents of `writeErrors`.
    fn write_error_documents(&self) -> impl Iterator<Item = &'a [u8]> {
        let array = self
            .write_errors
            .filter(|e| e.element_type == 0x04)
            .map_or(&[][..], |e| e.value);
        elements(array)
            .map_while(Result::ok)
            .filter(|e| e.element_type == 0x03)
            .map(|e| e.value)
    }

    /// Which statements failed (`writeErrors[].index`), in order.
    pub fn write_error_indices(&self) -> Vec<usize> {
        // (Most replies have none: nothing to walk or sort.)
        if self.write_errors.is_none() {
            return Vec::new();
        }
        let mut out: Vec<usize> = self
            .write_error_documents()
            .filter_map(|d| field(d, b"index").and_then(|e| element_number(&e)))
            .filter(|i| *i >= 0)
            .map(|i| i as usize)
            .collect();
        out.sort_unstable();
        out
    }

    /// Codes of per-statement write errors.
    pub fn write_error_codes(&self) -> Vec<i32> {
        if self.write_errors.is_none() {
            return Vec::new();
        }
        self.write_error_documents()
            .filter_map(|d| field(d, b"code").and_then(|e| element_i32(&e)))
            .collect()
    }

    pub fn cursor(&self) -> Option<CursorBatch<'a>> {
        // Walked on raw bytes: a batch can hold many documents, and only
        // their bounds are needed here.
        let cursor = self.cursor.filter(|e| e.element_type == 0x03)?;
        let mut batch = CursorBatch {
            id: 0,
            documents: SmallVec::new(),
        };
        for e in elements(cursor.value).map_while(Result::ok) {
            match (e.key, e.element_type) {
                (b"id", 0x12) => batch.id = i64::from_le_bytes(e.value.try_into().ok()?),
                (b"id", 0x10) => batch.id = i32::from_le_bytes(e.value.try_into().ok()?) as i64,
                (b"firstBatch" | b"nextBatch", 0x04) => {
                    batch.documents = elements(e.value)
                        .map_while(Result::ok)
                        .filter(|d| d.element_type == 0x03)
                        .filter_map(|d| RawDocument::from_bytes(d.value).ok())
                        .collect();
                }
                _ => {}
            }
        }
        Some(batch)
    }

    /// findAndModify's `value`.
    pub fn value(&self) -> Option<&'a RawDocument> {
        let e = self.value.filter(|e| e.element_type == 0x03)?;
        RawDocument::from_bytes(e.value).ok()
    }

    /// `n` of count and of write replies.
    pub fn n(&self) -> Option<i64> {
        self.n.as_ref().and_then(element_number)
    }

    /// `nModified` of an update's reply: the documents it changed (read
    /// when asked, not indexed: only an `$addToSet` asks).
    pub fn n_modified(&self) -> Option<i64> {
        element_number(&field(self.body.as_bytes(), b"nModified")?)
    }

    /// How many documents an update's reply says it inserted (its
    /// `upserted` array), or a findAndModify's (`lastErrorObject.upserted`).
    pub fn upserted(&self) -> u64 {
        let body = self.body.as_bytes();
        if let Some(e) = field(body, b"upserted").filter(|e| e.element_type == 0x04) {
            return elements(e.value).map_while(Result::ok).count() as u64;
        }
        field(body, b"lastErrorObject")
            .filter(|e| e.element_type == 0x03)
            .and_then(|e| field(e.value, b"upserted"))
            .map_or(0, |_| 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::op_msg;
    use bson::rawdoc;

    /// `f` of the reply the decoder's index reads, which must be the one
    /// a walk of its own (`Reply::parse`) reads.
    fn reply_of<T>(body: bson::RawDocumentBuf, f: impl FnOnce(&Reply<'_>) -> T) -> T {
        let frame = op_msg::encode(2, 1, 0, body.as_bytes(), &[]);
        let msg = Message::parse(&frame).unwrap();
        let index = ReplyIndex::of(&msg, &frame, true).unwrap().unwrap();
        let indexed = Reply::at(&frame, &index).unwrap();
        let walked = Reply::parse(&msg).unwrap();
        assert_eq!(format!("{indexed:?}"), format!("{walked:?}"));
        f(&indexed)
    }

    /// The index of an OP_REPLY reads its first document; a reply whose top
    /// level is not BSON is an error for the decoder's strict walk, and the
    /// fields before the fault for the lenient one (`Reply::parse`'s).
    #[test]
    fn reply_index_reads_op_reply_and_refuses_broken_bson_when_strict() {
        let first =
            rawdoc! {"cursor": {"id": 0_i64, "ns": "d.c", "firstBatch": [{"a": 1}]}, "ok": 1.0};
        let second = rawdoc! {"ok": 0.0};
        let frame = crate::wire::op_query::encode_reply(
            3,
            2,
            0,
            0,
            0,
            &[first.as_bytes(), second.as_bytes()],
        );
        let msg = Message::parse(&frame).unwrap();
        let index = ReplyIndex::of(&msg, &frame, true).unwrap().unwrap();
        let reply = Reply::at(&frame, &index).unwrap();
        assert!(reply.ok());
        assert_eq!(reply.cursor().unwrap().documents.len(), 1);

        // `{ok: 1.0, n: <int32 with its last byte cut>}`, the document's
        // length and terminating NUL intact.
        let mut body = rawdoc! {"ok": 1.0, "n": 5}.into_bytes();
        let n_at = body.len() - 1 - 4 - 2 - 1;
        assert_eq!(body[n_at], 0x10, "n's type byte");
        body[n_at] = 0x03; // an embedded document whose length runs past the end
        let frame = op_msg::encode(2, 1, 0, &body, &[]);
        let msg = Message::parse(&frame).unwrap();
        assert!(ReplyIndex::of(&msg, &frame, true).is_err());
        let lenient = ReplyIndex::of(&msg, &frame, false).unwrap().unwrap();
        let reply = Reply::at(&frame, &lenient).unwrap();
        assert!(reply.ok() && reply.n().is_none());
    }

    #[test]
    fn reply_fields_are_read_in_one_walk() {
        for (ok, expected) in [
            (bson::Bson::Double(1.0), true),
            (bson::Bson::Int32(1), true),
            (bson::Bson::Int64(0), false),
            (bson::Bson::Boolean(true), true),
            (bson::Bson::Double(f64::NAN), false),
            (bson::Bson::String("1".into()), false),
        ] {
            let body = bson::RawDocumentBuf::try_from(&bson::doc! {"ok": ok.clone()}).unwrap();
            assert_eq!(reply_of(body, |r| r.ok()), expected, "ok: {ok:?}");
        }
        assert!(!reply_of(rawdoc! {"n": 1}, |r| r.ok()), "no ok: not ok");
        let write = rawdoc! {
            "n": 3_i64, "writeErrors": [
                {"index": 4, "code": 11000, "errmsg": "dup"},
                {"index": 1_i64, "code": 121},
                {"code": 2}
            ], "ok": 1.0, "ok": 0
        };
        reply_of(write, |r| {
            assert!(r.ok(), "the first of a repeated key");
            assert_eq!(r.n(), Some(3));
            assert_eq!(r.write_error_indices(), vec![1, 4]);
            assert_eq!(r.write_error_codes(), vec![11000, 121, 2]);
            assert_eq!(r.code(), None);
            assert!(r.cursor().is_none() && r.value().is_none());
        });
        reply_of(
            rawdoc! {"ok": 0.0, "code": 13, "errmsg": "unauthorized"},
            |r| {
                assert!(!r.ok());
                assert_eq!(r.code(), Some(13));
            },
        );
        reply_of(
            rawdoc! {"value": {"_id": 1}, "lastErrorObject": {"n": 1}, "ok": 1},
            |r| {
                assert_eq!(r.value().unwrap().get_i32("_id").unwrap(), 1);
                assert_eq!(r.n(), None, "only the top level's n");
            },
        );
        reply_of(
            rawdoc! {"cursor": {"id": 7_i64, "ns": "d.c", "firstBatch": [{"a": 1}, {"a": 2}]}, "ok": 1},
            |r| {
                let c = r.cursor().unwrap();
                assert_eq!((c.id, c.documents.len()), (7, 2));
            },
        );
    }
}
