//! TCP reassembly: each connection's two byte streams put back in order
//! from the segments a capture holds, and cut into whole wire-protocol
//! messages.
//!
//! Each direction of a connection keeps the sequence number of the next
//! byte it expects. A segment before it is a retransmission (dropped,
//! counted); a segment past it waits, keyed by its place in the stream,
//! until the hole before it is filled. A hole becomes a gap, its bytes
//! lost, when the other side acknowledges bytes past it while later bytes
//! wait behind it (the peer received what the capture missed), when more
//! than `max_out_of_order` bytes wait behind it, or when the connection
//! ends.
//!
//! After a gap the stream is read on from the start of the next message:
//! found from the length of the message the gap cut when its header had
//! been read, otherwise at the first segment that begins with a plausible
//! message header. A stream the capture joined late (no SYN) starts the
//! same way.

use super::Account;
use crate::capture::Event;
use crate::stats::Direction;
use crate::wire::{frame, Header, HEADER_LEN};
use bytes::Bytes;
use lru::LruCache;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

/// How far past the next expected byte a segment or an acknowledgment
/// may point and still be taken for this stream (a TCP window is at most
/// 1 GiB).
const MAX_AHEAD: u32 = 1 << 30;

/// The connections remembered at most (open ones, and closed ones whose
/// last packets must not open a new connection).
pub(super) const MAX_CONNECTIONS: usize = 65_536;

/// A connection: its client's and its server's address and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub client: (IpAddr, u16),
    pub server: (IpAddr, u16),
}

/// One TCP segment, as the packet that carried it shows it.
pub(super) struct Segment<'a> {
    pub key: Key,
    pub direction: Direction,
    pub seq: u32,
    /// The acknowledgment number, when the ACK flag is set.
    pub ack: Option<u32>,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
    /// The payload bytes the capture holds.
    pub payload: &'a [u8],
    /// Payload bytes past those, which the capture did not keep (a short
    /// snaplen).
    pub missing: usize,
}

/// Where completed messages and the account go, and the capture time of
/// the packet being read.
pub(super) struct Sink<'a> {
    pub at: Duration,
    pub account: &'a mut Account,
    pub out: &'a mut dyn FnMut(Event),
}

impl Sink<'_> {
    fn message(&mut self, conn: u64, direction: Direction, frame: Bytes) {
        match direction {
            Direction::Request => self.account.requests += 1,
            Direction::Reply => self.account.replies += 1,
        }
        self.account.message_bytes += frame.len() as u64;
        (self.out)(Event::Message {
            conn,
            direction,
            at: self.at,
            frame,
        });
    }

    fn lost(&mut self, bytes: usize) {
        self.account.bytes_lost = self.account.bytes_lost.saturating_add(bytes as u64);
    }
}

/// The connections of a capture, least recently active first out.
pub(super) struct Connections {
    table: LruCache<Key, Conn>,
    /// Connections remembered at most; past that the least recently
    /// active one is closed and forgotten.
    pub max_connections: usize,
    max_out_of_order: usize,
    last_id: u64,
}

impl Connections {
    pub fn new(max_out_of_order: usize) -> Connections {
        Connections {
            table: LruCache::unbounded(),
            max_connections: MAX_CONNECTIONS,
            max_out_of_order,
            last_id: 0,
        }
    }

    /// Reads one segment: opens, feeds or closes its connection.
    pub fn segment(&mut self, seg: &Segment<'_>, sink: &mut Sink<'_>) {
        let syn_only = seg.syn && seg.ack.is_none();
        let has_data = !seg.payload.is_empty() || seg.missing > 0;
        let new = match self.table.get_mut(&seg.key) {
            None => !seg.rst && (seg.syn || has_data),
            Some(conn) if !conn.open => syn_only,
            // Another connection from the same client port.
            Some(conn) => {
                syn_only
                    && seg.direction == Direction::Request
                    && conn.halves[0].is_other_syn(seg.seq)
            }
        };
        if new {
            if let Some(mut old) = self.table.pop(&seg.key) {
                old.close(sink);
            } else if self.table.len() >= self.max_connections.max(1) {
                if let Some((_, mut old)) = self.table.pop_lru() {
                    old.close(sink);
                }
            }
            self.last_id += 1;
            sink.account.connections += 1;
            self.table
                .put(seg.key, Conn::new(self.last_id, self.max_out_of_order));
        }
        if let Some(conn) = self.table.get_mut(&seg.key) {
            conn.segment(seg, sink);
        }
    }

    /// Closes every open connection, in the order they were opened.
    pub fn finish(&mut self, sink: &mut Sink<'_>) {
        let mut open: Vec<(u64, Key)> = self
            .table
            .iter()
            .filter(|(_, c)| c.open)
            .map(|(k, c)| (c.id, *k))
            .collect();
        open.sort_unstable_by_key(|(id, _)| *id);
        for (_, key) in open {
            if let Some(mut conn) = self.table.pop(&key) {
                conn.close(sink);
            }
        }
    }
}

/// Why a connection's bytes cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    Tls,
    NotWireProtocol,
}

struct Conn {
    id: u64,
    /// False once closed: the connection is remembered so that its last
    /// packets (a final ACK, a retransmitted FIN) open nothing new.
    open: bool,
    /// Request (client to server), reply.
    halves: [Half; 2],
}

impl Conn {
    fn new(id: u64, max_out_of_order: usize) -> Conn {
        Conn {
            id,
            open: true,
            halves: [
                Half::new(id, Direction::Request, max_out_of_order),
                Half::new(id, Direction::Reply, max_out_of_order),
            ],
        }
    }

    fn segment(&mut self, seg: &Segment<'_>, sink: &mut Sink<'_>) {
        if !self.open {
            return;
        }
        let d = seg.direction.index();
        let other = 1 - d;
        if seg.syn {
            self.halves[d].syn(seg.seq);
        }
        // What the other side acknowledges, the capture should have
        // seen: a hole below it (with bytes held after it) is a gap now,
        // and what waited behind it comes out before this segment's
        // messages.
        if let (Some(ack), false) = (seg.ack, seg.rst) {
            let r = self.halves[other].acked(ack, sink);
            self.check(r, sink);
        }
        let start = seg.seq.wrapping_add(u32::from(seg.syn));
        if !seg.payload.is_empty() || seg.missing > 0 {
            let r = self.halves[d].segment(start, seg.payload, seg.missing, sink);
            self.check(r, sink);
        }
        if seg.fin {
            let end = start
                .wrapping_add(seg.payload.len() as u32)
                .wrapping_add(seg.missing as u32);
            self.halves[d].fin = Some(end);
        }
        if seg.rst || self.halves.iter().all(|h| h.fin.is_some()) {
            self.close(sink);
        }
    }

    /// Marks the connection unreadable when a half refused its bytes.
    fn check(&mut self, r: Result<(), Refused>, sink: &mut Sink<'_>) {
        let Err(refused) = r else {
            return;
        };
        match refused {
            Refused::Tls => sink.account.tls_connections += 1,
            Refused::NotWireProtocol => sink.account.not_wire_protocol += 1,
        }
        for half in &mut self.halves {
            half.kill();
        }
    }

    /// Flushes both directions and says the connection ended.
    fn close(&mut self, sink: &mut Sink<'_>) {
        if !self.open {
            return;
        }
        for d in 0..2 {
            let r = self.halves[d].flush(sink);
            self.check(r, sink);
        }
        self.open = false;
        for half in &mut self.halves {
            half.kill();
        }
        (sink.out)(Event::Closed { conn: self.id });
    }
}

/// How a direction's bytes are being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// At a message boundary, or inside a message whose start is in `buf`.
    Message,
    /// Skipping the rest of a message a gap cut (its length was known).
    Skip(usize),
    /// The next message start is unknown: waiting for a segment that
    /// begins with a plausible header. `cut`: the stream began where the
    /// capture joined it, and a message it cut is still to be counted.
    Resync { cut: bool },
    /// The connection cannot be read (TLS, not the wire protocol).
    Dead,
}

/// A segment waiting for the hole before it.
struct Held {
    data: Vec<u8>,
    missing: usize,
    /// The gaps of the stream when it arrived: if none was declared since,
    /// the hole before it was filled by data and it was put back in order.
    gaps: u64,
}

/// One direction of a connection.
struct Half {
    conn: u64,
    direction: Direction,
    max_held: usize,
    /// The SYN's sequence number, when seen.
    isn: Option<u32>,
    /// The sequence number of the next byte expected, once known.
    next: Option<u32>,
    /// Where `next` is in the stream (bytes since its start, lost ones
    /// included): the key of held segments, free of wraparound.
    offset: u64,
    held: BTreeMap<u64, Held>,
    held_bytes: usize,
    /// Gaps declared in this direction.
    gaps: u64,
    /// The sequence number just past the last byte, once a FIN said it.
    fin: Option<u32>,
    read: Read,
    /// The start of the message being read.
    buf: Vec<u8>,
    /// Whether the first bytes were looked at (for TLS).
    judged: bool,
}

impl Half {
    fn new(conn: u64, direction: Direction, max_held: usize) -> Half {
        Half {
            conn,
            direction,
            max_held,
            isn: None,
            next: None,
            offset: 0,
            held: BTreeMap::new(),
            held_bytes: 0,
            gaps: 0,
            fin: None,
            read: Read::Resync { cut: true },
            buf: Vec::new(),
            judged: false,
        }
    }

    /// Whether a SYN with this sequence number starts another connection
    /// (and is not this one's, seen again).
    fn is_other_syn(&self, isn: u32) -> bool {
        match self.isn {
            Some(known) => known != isn,
            None => self.next.is_some() || self.fin.is_some(),
        }
    }

    /// A SYN: the stream starts after it, at a message boundary (unless
    /// bytes of it were read already).
    fn syn(&mut self, isn: u32) {
        if self.read == Read::Dead || self.judged || !self.held.is_empty() {
            return;
        }
        self.isn = Some(isn);
        self.next = Some(isn.wrapping_add(1));
        self.read = Read::Message;
    }

    fn kill(&mut self) {
        self.read = Read::Dead;
        self.buf = Vec::new();
        self.held.clear();
        self.held_bytes = 0;
    }

    /// Moves past `n` bytes of the stream.
    fn advance(&mut self, n: usize) {
        self.offset = self.offset.saturating_add(n as u64);
        self.next = self.next.map(|next| next.wrapping_add(n as u32));
    }

    /// A segment of payload (and `missing` bytes the capture cut off it)
    /// starting at sequence number `seq`.
    fn segment(
        &mut self,
        seq: u32,
        payload: &[u8],
        missing: usize,
        sink: &mut Sink<'_>,
    ) -> Result<(), Refused> {
        if self.read == Read::Dead {
            return Ok(());
        }
        let next = *self.next.get_or_insert(seq);
        let span = payload.len().saturating_add(missing);
        let ahead = seq.wrapping_sub(next) as i32;
        if ahead < 0 {
            let behind = ahead.unsigned_abs() as usize;
            if behind >= span {
                sink.account.retransmitted_bytes += payload.len() as u64;
                return Ok(());
            }
            let (data, missing) = trim(payload, missing, behind, sink);
            self.apply(data, missing, false, sink)?;
            return self.drain(sink);
        }
        if ahead == 0 {
            self.apply(payload, missing, true, sink)?;
            return self.drain(sink);
        }
        if ahead.unsigned_abs() > MAX_AHEAD {
            return Ok(());
        }
        self.hold(
            self.offset + u64::from(ahead.unsigned_abs()),
            payload,
            missing,
            sink,
        );
        while self.held_bytes > self.max_held {
            self.skip_hole(sink)?;
        }
        Ok(())
    }

    /// Keeps a segment that arrived ahead of a hole.
    fn hold(&mut self, at: u64, payload: &[u8], missing: usize, sink: &mut Sink<'_>) {
        let held = Held {
            data: payload.to_vec(),
            missing,
            gaps: self.gaps,
        };
        match self.held.entry(at) {
            Entry::Vacant(e) => {
                self.held_bytes += payload.len();
                e.insert(held);
            }
            Entry::Occupied(mut e) => {
                let old = e.get();
                let (old_span, old_len) = (old.data.len() + old.missing, old.data.len());
                if payload.len() + missing > old_span {
                    sink.account.retransmitted_bytes += old_len as u64;
                    self.held_bytes = self.held_bytes - old_len + payload.len();
                    e.insert(held);
                } else {
                    sink.account.retransmitted_bytes += payload.len() as u64;
                }
            }
        }
    }

    /// Reads the held segments the stream has reached.
    fn drain(&mut self, sink: &mut Sink<'_>) -> Result<(), Refused> {
        while let Some(entry) = self.held.first_entry() {
            let start = *entry.key();
            if start > self.offset {
                break;
            }
            let held = entry.remove();
            self.held_bytes -= held.data.len();
            let behind = usize::try_from(self.offset - start).unwrap_or(usize::MAX);
            if behind >= held.data.len().saturating_add(held.missing) {
                sink.account.retransmitted_bytes += held.data.len() as u64;
                continue;
            }
            if held.gaps == self.gaps {
                sink.account.reordered_segments += 1;
            }
            let (data, missing) = trim(&held.data, held.missing, behind, sink);
            self.apply(data, missing, behind == 0, sink)?;
        }
        Ok(())
    }

    /// Declares the first hole before the held segments a gap and reads
    /// on.
    fn skip_hole(&mut self, sink: &mut Sink<'_>) -> Result<(), Refused> {
        let Some(&start) = self.held.keys().next() else {
            return Ok(());
        };
        let hole = usize::try_from(start.saturating_sub(self.offset)).unwrap_or(usize::MAX);
        if hole > 0 {
            self.gap(hole, sink);
        }
        self.drain(sink)
    }

    /// The other side acknowledged up to `ack`: it received the bytes
    /// below, so a hole there, with bytes that came after it held, was
    /// missed by the capture. (A hole with nothing after it waits: over a
    /// tap merging both directions, an acknowledgment may be captured
    /// before the bytes it acknowledges.)
    fn acked(&mut self, ack: u32, sink: &mut Sink<'_>) -> Result<(), Refused> {
        if self.read == Read::Dead {
            return Ok(());
        }
        while let (Some(next), Some(&held)) = (self.next, self.held.keys().next()) {
            let ahead = ack.wrapping_sub(next) as i32;
            if ahead <= 0 || ahead.unsigned_abs() > MAX_AHEAD {
                break;
            }
            let end = held.min(self.offset + u64::from(ahead.unsigned_abs()));
            let hole = usize::try_from(end.saturating_sub(self.offset)).unwrap_or(0);
            if hole == 0 {
                break;
            }
            self.gap(hole, sink);
            self.drain(sink)?;
        }
        Ok(())
    }

    /// The stream ends: holes are gaps, a message half read is lost.
    fn flush(&mut self, sink: &mut Sink<'_>) -> Result<(), Refused> {
        if self.read == Read::Dead {
            return Ok(());
        }
        while !self.held.is_empty() {
            self.skip_hole(sink)?;
        }
        if let (Some(fin), Some(next)) = (self.fin, self.next) {
            let ahead = fin.wrapping_sub(next) as i32;
            if ahead > 0 && ahead.unsigned_abs() <= MAX_AHEAD {
                self.gap(ahead.unsigned_abs() as usize, sink);
            }
        }
        if self.read == Read::Message && !self.buf.is_empty() {
            sink.account.messages_lost += 1;
            sink.lost(self.buf.len());
            self.buf = Vec::new();
        }
        Ok(())
    }

    /// Reads in-order bytes, then `missing` bytes that are lost.
    fn apply(
        &mut self,
        data: &[u8],
        missing: usize,
        segment_start: bool,
        sink: &mut Sink<'_>,
    ) -> Result<(), Refused> {
        if !data.is_empty() {
            let r = self.feed(data, segment_start, sink);
            self.advance(data.len());
            r?;
        }
        if missing > 0 {
            self.gap(missing, sink);
        }
        Ok(())
    }

    /// `n` bytes of the stream will never be seen.
    fn gap(&mut self, n: usize, sink: &mut Sink<'_>) {
        self.advance(n);
        self.gaps += 1;
        if self.read == Read::Dead {
            return;
        }
        sink.account.gaps += 1;
        sink.lost(n);
        // Where the next message starts, if the length of the one the gap
        // cut says so; how many messages the gap took.
        let past = |rest: usize| -> (Read, u64) {
            match n.cmp(&rest) {
                std::cmp::Ordering::Less => (Read::Skip(rest - n), 0),
                std::cmp::Ordering::Equal => (Read::Message, 0),
                std::cmp::Ordering::Greater => (Read::Resync { cut: false }, 1),
            }
        };
        let (read, lost) = match self.read {
            Read::Resync { .. } | Read::Dead => (Read::Resync { cut: false }, 0),
            Read::Skip(rest) => past(rest),
            Read::Message => {
                let had = self.buf.len();
                let len = frame::expected_len(&self.buf).ok().flatten();
                sink.lost(had);
                self.buf = Vec::new();
                match len {
                    Some(len) if had > 0 => {
                        let (read, more) = past(len.saturating_sub(had));
                        (read, 1 + more)
                    }
                    _ => (Read::Resync { cut: false }, 1),
                }
            }
        };
        self.read = read;
        sink.account.messages_lost += lost;
    }

    /// Reads bytes that follow what was read. `segment_start`: they begin
    /// a segment as its sender cut it.
    fn feed(
        &mut self,
        mut data: &[u8],
        segment_start: bool,
        sink: &mut Sink<'_>,
    ) -> Result<(), Refused> {
        if !self.judged {
            self.judged = true;
            if is_tls(data) {
                return Err(Refused::Tls);
            }
        }
        while !data.is_empty() {
            match self.read {
                Read::Dead => return Ok(()),
                Read::Skip(rest) => {
                    let n = rest.min(data.len());
                    sink.lost(n);
                    data = &data[n..];
                    self.read = if n == rest {
                        Read::Message
                    } else {
                        Read::Skip(rest - n)
                    };
                }
                Read::Resync { cut } => {
                    if segment_start && plausible(data) {
                        self.read = Read::Message;
                        continue;
                    }
                    sink.lost(data.len());
                    if cut {
                        sink.account.messages_lost += 1;
                        self.read = Read::Resync { cut: false };
                    }
                    return Ok(());
                }
                Read::Message => return self.messages(data, sink),
            }
        }
        Ok(())
    }

    /// Cuts whole messages out of the stream, keeping the start of the
    /// last one in `buf`.
    fn messages(&mut self, mut data: &[u8], sink: &mut Sink<'_>) -> Result<(), Refused> {
        loop {
            if self.buf.is_empty() {
                if data.is_empty() {
                    return Ok(());
                }
                match frame::check(data) {
                    Ok(Some(len)) => {
                        let (message, rest) = data.split_at(len.min(data.len()));
                        sink.message(self.conn, self.direction, Bytes::copy_from_slice(message));
                        data = rest;
                    }
                    Ok(None) => {
                        self.buf.extend_from_slice(data);
                        return Ok(());
                    }
                    Err(_) => return Err(Refused::NotWireProtocol),
                }
            } else {
                if self.buf.len() < HEADER_LEN {
                    let n = (HEADER_LEN - self.buf.len()).min(data.len());
                    self.buf.extend_from_slice(&data[..n]);
                    data = &data[n..];
                }
                let len = match frame::expected_len(&self.buf) {
                    Ok(Some(len)) => len,
                    Ok(None) => return Ok(()),
                    Err(_) => return Err(Refused::NotWireProtocol),
                };
                let n = len.saturating_sub(self.buf.len()).min(data.len());
                self.buf.extend_from_slice(&data[..n]);
                data = &data[n..];
                if self.buf.len() < len {
                    return Ok(());
                }
                let message = std::mem::take(&mut self.buf);
                sink.message(self.conn, self.direction, Bytes::from(message));
            }
        }
    }
}

/// Drops the first `behind` bytes of a segment (seen already), counting
/// the payload among them as retransmitted.
fn trim<'d>(
    payload: &'d [u8],
    missing: usize,
    behind: usize,
    sink: &mut Sink<'_>,
) -> (&'d [u8], usize) {
    let seen = behind.min(payload.len());
    sink.account.retransmitted_bytes += seen as u64;
    let data = payload.get(seen..).unwrap_or_default();
    (data, missing.saturating_sub(behind - seen))
}

/// Whether bytes begin with a TLS record header: content type 20–23
/// (change_cipher_spec, alert, handshake, application_data; a stream's
/// first record is a handshake, but a capture may join later) and
/// version 3.0–3.4. `wire::frame::sniff_foreign` recognises only a
/// handshake.
fn is_tls(data: &[u8]) -> bool {
    matches!(data, [0x14..=0x17, 0x03, 0x00..=0x04, ..])
}

/// Whether bytes begin with a header `wire::frame` accepts whose opcode
/// is one MongoDB sends today (OP_REPLY, the legacy opcodes 2001–2007,
/// OP_COMPRESSED, OP_MSG): where reading resumes when the message
/// boundary is lost.
fn plausible(data: &[u8]) -> bool {
    let opcode = Header::parse(data).map(|h| h.op_code);
    matches!(frame::expected_len(data), Ok(Some(_)))
        && matches!(opcode, Some(1 | 2001..=2007 | 2012 | 2013))
}
