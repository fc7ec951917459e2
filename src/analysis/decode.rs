//! Decoding a message for the analysis, and counting what it is.
//!
//! A worker turns each forwarded frame into what the engine reads: an
//! OP_COMPRESSED is inflated, an OP_MSG checksum verified, a request
//! parsed once (its documents' nesting checked in the same pass) and a
//! reply indexed. On the way every message is counted by opcode, command
//! name and compressor. A worker counts through its own [`Decoder`],
//! without a lock, and adds the counts to the shared ones in bulk; the
//! one-off [`decode`] counts at once (tests, fuzzing).

use super::command;
use super::engine::{Decoded, ParsedRequest};
use crate::stats::{Direction, Stats};
use crate::wire::{self, Message};
use bytes::Bytes;

/// Messages a worker decodes (and takes off its queue) before it adds
/// what it counted to the shared counters: those cache lines are written
/// per batch from the analysis side, not per message.
pub(super) const COUNT_EVERY: u64 = 64;

/// Requests nested deeper than this are not analysed (counted as
/// `too_deep`): it is the server's own limit (`bsonValidate` refuses BSON
/// nested past 200 levels), so the server refuses such a message too.
/// Replies are not walked for it: a server never sends BSON nested past
/// its limit, and walking a whole batch for it would cost nearly as much
/// as all the rest of the batch's analysis. Every walk of the analysis is bounded by its own depth anyway (shapes 12
/// levels, document state `Caps::depth`, filters and pipelines theirs);
/// the one conversion that recurses without a bound (an `_id` shown with
/// `--show-values`) checks its value against this limit first.
pub const MAX_NESTING: usize = 200;

/// What decoding one message found out about it, gathered without holding
/// any lock and recorded into the counters at once afterwards.
#[derive(Default)]
struct MessageFacts {
    /// The message's opcode, then the inner one of an OP_COMPRESSED.
    opcodes: [Option<wire::OpCode>; 2],
    compressor: Option<wire::Compressor>,
    checksum_verified: bool,
    /// A request: its command name is counted (a reply has none) and its
    /// documents' depth checked (see [`MAX_NESTING`]).
    request: bool,
    /// Where the command name lies in the returned frame (requests).
    command: Option<std::ops::Range<usize>>,
}

/// Decodes and counts one message; returns it uncompressed for the engine,
/// or `None` (counted and logged) when it cannot be decoded or (a request)
/// nests deeper than [`MAX_NESTING`]. Counted at once (a worker counts
/// through its [`Decoder`], in bulk).
pub fn decode(conn: u64, direction: Direction, frame: &Bytes, stats: &Stats) -> Option<Decoded> {
    let mut decoder = Decoder::default();
    let decoded = decoder.decode(conn, direction, frame.clone(), stats);
    decoder.flush(stats);
    decoded
}

/// Distinct command names a [`Decoder`] counts by itself before it adds
/// them up.
const MAX_UNFLUSHED_NAMES: usize = 16;

/// A worker's decoding: what it counts (messages by opcode, compressors,
/// verified checksums, command names) is kept here, without a lock, and
/// added to the shared counters (`Stats::analysis`) every [`COUNT_EVERY`]
/// messages and whenever the worker's queue runs empty, so a message costs
/// no lock and no map lookup. A decoding error is counted at once.
#[derive(Default)]
pub struct Decoder {
    /// By direction, then opcode (`OpCode as usize`, the order of
    /// `OpCode::ALL`).
    messages: [[u64; wire::OpCode::ALL.len()]; 2],
    compressed: [u64; wire::Compressor::ALL.len()],
    checksums_verified: u64,
    /// Command names (UTF-8, as sent) and their counts.
    commands: Vec<(String, u64)>,
    /// Messages decoded since the counts were last added.
    pending: u64,
}

impl Decoder {
    /// [`decode`], counted here. The frame is taken, not cloned: its
    /// reference count lives in the block a forwarding thread is filling,
    /// a cache line each count taken or given back here would pull from
    /// the other core.
    pub fn decode(
        &mut self,
        conn: u64,
        direction: Direction,
        frame: Bytes,
        stats: &Stats,
    ) -> Option<Decoded> {
        let mut facts = MessageFacts {
            request: direction == Direction::Request,
            ..MessageFacts::default()
        };
        let result = decode_frame(frame, &mut facts, 0);
        for opcode in facts.opcodes.into_iter().flatten() {
            self.messages[direction.index()][opcode as usize] += 1;
        }
        if let Some(c) = facts.compressor {
            self.compressed[c as usize] += 1;
        }
        self.checksums_verified += u64::from(facts.checksum_verified);
        self.pending += 1;
        let error = match result {
            Ok(decoded) => {
                if let (Some(range), Decoded::Request(parsed)) = (facts.command, &decoded) {
                    self.count_command(&parsed.borrow_owner()[range], stats);
                }
                if self.pending >= COUNT_EVERY {
                    self.flush(stats);
                }
                return Some(decoded);
            }
            Err(error) => error,
        };
        self.flush(stats);
        let mut counters = stats.analysis.lock().unwrap_or_else(|p| p.into_inner());
        *counters.decode_errors.entry(error.kind()).or_default() += 1;
        let log = counters.log_allowed(error.kind());
        drop(counters);
        if log {
            let side = match direction {
                Direction::Request => "request",
                Direction::Reply => "reply",
            };
            tracing::warn!(
                conn,
                "analysis could not decode a {side}: {error} (forwarded unchanged; at most one such line a second per kind of error)"
            );
        }
        None
    }

    fn count_command(&mut self, name: &[u8], stats: &Stats) {
        if let Some((_, n)) = self.commands.iter_mut().find(|(c, _)| c.as_bytes() == name) {
            *n += 1;
            return;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            return;
        };
        if self.commands.len() >= MAX_UNFLUSHED_NAMES {
            self.flush(stats);
        }
        self.commands.push((name.to_string(), 1));
    }

    /// Adds what was counted here to the shared counters.
    pub fn flush(&mut self, stats: &Stats) {
        if self.pending == 0 {
            return;
        }
        let mut counters = stats.analysis.lock().unwrap_or_else(|p| p.into_inner());
        for (direction, by_opcode) in [Direction::Request, Direction::Reply]
            .into_iter()
            .zip(&self.messages)
        {
            for (opcode, n) in wire::OpCode::ALL.into_iter().zip(by_opcode) {
                if *n > 0 {
                    *counters.messages.entry((direction, opcode)).or_default() += n;
                }
            }
        }
        for (c, n) in wire::Compressor::ALL.into_iter().zip(&self.compressed) {
            if *n > 0 {
                *counters.compressed.entry(c).or_default() += n;
            }
        }
        counters.checksums_verified += self.checksums_verified;
        for (name, n) in self.commands.drain(..) {
            counters.count_command(&name, n);
        }
        drop(counters);
        *self = Decoder {
            commands: std::mem::take(&mut self.commands),
            ..Decoder::default()
        };
    }
}

/// A compressed message is counted as OP_COMPRESSED and then again as the
/// message it carries (the parser refuses compressed-in-compressed, so
/// `level` is 0 or 1). A request is parsed once, checked in the same pass,
/// and handed to the engine parsed.
fn decode_frame(
    frame: Bytes,
    facts: &mut MessageFacts,
    level: usize,
) -> Result<Decoded, wire::WireError> {
    let opcode = wire::Header::parse(&frame).and_then(|h| h.opcode());
    if opcode == Some(wire::OpCode::Compressed) {
        if let Message::Compressed(c) = Message::parse(&frame)? {
            facts.opcodes[level.min(1)] = Some(wire::OpCode::Compressed);
            facts.compressor = Some(c.compressor);
            let inner = Bytes::from(c.decompress()?);
            return decode_frame(inner, facts, level + 1);
        }
    }
    if facts.request {
        let check =
            |message: &Message<'_>, bytes: &[u8]| check_message(message, bytes, facts, level);
        return ParsedRequest::checked(frame, check).map(Decoded::Request);
    }
    let message = Message::parse(&frame)?;
    check_message(&message, &frame, facts, level)?;
    // The reply's one walk: its top level checked and its fields found.
    let index = command::ReplyIndex::of(&message, &frame, true)?;
    Ok(Decoded::Reply(frame, index))
}

/// Counts one uncompressed message's opcode and checks it: its checksum,
/// and a request's documents' depth (a reply's top level is checked by
/// `ReplyIndex::of`, not its depth: see [`MAX_NESTING`]); finds where a
/// request's command name lies in `frame`.
fn check_message(
    message: &Message<'_>,
    frame: &[u8],
    facts: &mut MessageFacts,
    level: usize,
) -> Result<(), wire::WireError> {
    facts.opcodes[level.min(1)] = Some(message.opcode());
    match message {
        Message::Msg(msg) => {
            if msg.checksum.is_some() {
                wire::op_msg::verify_checksum(frame)?;
                facts.checksum_verified = true;
            }
            // (A reply's top level is checked where its fields are found:
            // `ReplyIndex::of`.)
            // (A request body's top level is checked by the walk that
            // indexes its command: `Command::parse_checked`.)
            if facts.request {
                wire::bson_walk::check_nesting(msg.body, MAX_NESTING)?;
                for sequence in msg.sequences() {
                    for doc in sequence.documents() {
                        wire::bson_walk::check_nesting(doc?, MAX_NESTING)?;
                    }
                }
            }
        }
        Message::Query(q) => {
            wire::bson_walk::check_nesting(q.command(), MAX_NESTING)?;
        }
        // OP_REPLY: a reply. (An OP_COMPRESSED was inflated before.)
        Message::Reply(_) | Message::Compressed(_) | Message::Other(..) => {}
    }
    if facts.request {
        // A slice of `frame`: its place, not a second parse. Its bytes:
        // the decoder compares them with the names it has counted and
        // checks a name as UTF-8 only when it is new (see `count_command`).
        facts.command = wire::command_name_bytes(message).map(|name| {
            let start = name.as_ptr() as usize - frame.as_ptr() as usize;
            start..start + name.len()
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker's decoder adds up, in bulk, exactly what decoding each
    /// message at once counts: opcodes by direction, a compressor, command
    /// names (more distinct ones than it keeps), and an error at once.
    #[test]
    fn a_decoder_counts_in_bulk_what_decoding_at_once_counts() {
        use crate::wire::{compressed, op_msg};
        let mut frames = Vec::new();
        for i in 0..100 {
            let body = bson::RawDocumentBuf::try_from(
                &bson::doc! {format!("cmd{}", i % 40): 1, "$db": "d"},
            )
            .unwrap();
            frames.push((
                Direction::Request,
                op_msg::encode(i, 0, 0, body.as_bytes(), &[]),
            ));
            let reply = bson::rawdoc! {"ok": 1.0};
            frames.push((
                Direction::Reply,
                op_msg::encode(i + 1000, i, 0, reply.as_bytes(), &[]),
            ));
        }
        let find = op_msg::encode(
            7,
            0,
            0,
            bson::rawdoc! {"find": "c", "$db": "d"}.as_bytes(),
            &[],
        );
        let zipped = compressed::compress(&find, wire::Compressor::Zlib).unwrap();
        frames.push((Direction::Request, zipped));
        frames.push((
            Direction::Request,
            vec![
                21, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xdd, 7, 0, 0, 0, 0, 0, 0, 0,
            ],
        ));
        let (at_once, bulk) = (Stats::default(), Stats::default());
        let mut decoder = Decoder::default();
        for (direction, frame) in &frames {
            let frame = Bytes::from(frame.clone());
            let bytes = |d: Option<Decoded>| match d? {
                Decoded::Request(parsed) => Some(parsed.borrow_owner().clone()),
                Decoded::Reply(frame, _) => Some(frame),
            };
            let a = bytes(decode(1, *direction, &frame, &at_once));
            let b = bytes(decoder.decode(1, *direction, frame.clone(), &bulk));
            assert_eq!(a, b);
        }
        // Errors are counted at once; the rest once added up.
        assert_eq!(
            bulk.snapshot().decode_errors,
            at_once.snapshot().decode_errors
        );
        assert_eq!(bulk.snapshot().decode_errors.values().sum::<u64>(), 1);
        decoder.flush(&bulk);
        let (a, b) = (at_once.snapshot(), bulk.snapshot());
        assert_eq!(b.messages, a.messages);
        assert_eq!(b.commands, a.commands);
        assert_eq!(b.compressed, a.compressed);
        assert_eq!(a.commands.len(), 41, "{:?}", a.commands);
        assert_eq!(a.commands["cmd0"], 3);
        assert_eq!(a.compressed["zlib"], 1);
        assert_eq!(a.messages["reply OP_MSG"], 100);
    }

    /// A request body's top level is checked by the walk that indexes its
    /// command: every element, past the fields a command keeps too; a
    /// broken one is an `invalid_bson` decode error and nothing is handed
    /// to the engine. A whole body decodes to the command a lenient parse
    /// reads.
    #[test]
    fn a_request_body_is_checked_by_the_walk_that_indexes_its_command() {
        use crate::analysis::command::Command;
        let stats = Stats::default();
        let decoded_command = |body: &bson::RawDocumentBuf| {
            let frame = Bytes::from(wire::op_msg::encode(1, 0, 0, body.as_bytes(), &[]));
            match decode(1, Direction::Request, &frame, &stats) {
                Some(Decoded::Request(parsed)) => {
                    let msg = Message::parse(parsed.borrow_owner()).unwrap();
                    let lenient = Command::parse(&msg).map(|c| format!("{c:?}"));
                    let checked = parsed.borrow_dependent().as_ref().map(|c| format!("{c:?}"));
                    assert_eq!(checked, lenient);
                    checked.is_some()
                }
                _ => false,
            }
        };
        let good = bson::rawdoc! {"find": "c", "filter": {"a": 1}, "limit": 1, "$db": "d"};
        assert!(decoded_command(&good));
        assert!(stats.snapshot().decode_errors.is_empty());

        // 70 fields (a command keeps 64), the last one's string length
        // running past the document.
        let mut wide = bson::doc! {"find": "c"};
        for i in 0..68 {
            wide.insert(format!("f{i}"), i);
        }
        wide.insert("$db", "d");
        let mut bytes = bson::RawDocumentBuf::try_from(&wide).unwrap().into_bytes();
        let len_at = bytes.len() - 1 - 2 - 4;
        assert_eq!(
            &bytes[len_at..len_at + 4],
            &2i32.to_le_bytes(),
            "$db's length"
        );
        bytes[len_at..len_at + 4].copy_from_slice(&200i32.to_le_bytes());
        let broken = bson::RawDocumentBuf::from_bytes(bytes).unwrap();
        assert!(!decoded_command(&broken));
        assert_eq!(stats.snapshot().decode_errors.get("invalid_bson"), Some(&1));
    }
}
