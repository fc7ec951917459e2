//! `wirelint proxy --capture FILE`: what the proxy forwards, as pcapng.
//!
//! The proxy's tap sees whole messages per connection, not packets, so the
//! capture shows each connection as the TCP stream a network capture
//! would: a handshake when its first message goes by, each message as
//! segments of at most [`SEGMENT`] bytes with consecutive sequence numbers,
//! a FIN from each side when it closes. The addresses are made up:
//! connection `n` is client `10.x.y.z:40000` (`x.y.z` being `n`'s low 24
//! bits) talking to `10.255.255.254:27017`, so `wirelint analyse` and
//! Wireshark's MongoDB dissector read it with their defaults.
//!
//! [`CaptureTap`] sits in front of another tap (the analysis): it hands
//! every message on unchanged and queues it for a thread of its own that
//! writes the file. The hand-off never waits: when the writer is behind
//! (a slow disk) by more than [`QUEUED_MESSAGES`] messages or
//! [`QUEUED_BYTES`], messages are left out of the capture and counted, and
//! the capture says so when it is closed.

use crate::proxy::Tap;
use crate::stats::Direction;
use bytes::Bytes;
use crossbeam_queue::ArrayQueue;
use etherparse::PacketBuilder;
use pcap_parser::pcapng::{EnhancedPacketBlock, InterfaceDescriptionBlock, SectionHeaderBlock};
use pcap_parser::{Linktype, ToVec};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// The most payload in one written segment (an IPv4 packet holds 65,535
/// bytes with its headers).
pub const SEGMENT: usize = 65_000;
/// Messages waiting for the writer, at most.
pub const QUEUED_MESSAGES: usize = 16_384;
/// Bytes waiting for the writer, at most.
pub const QUEUED_BYTES: usize = 64 << 20;
/// The server port the capture shows.
pub const SERVER_PORT: u16 = 27017;
/// The client port every connection shows (each has its own address).
pub const CLIENT_PORT: u16 = 40000;
const SERVER_ADDR: [u8; 4] = [10, 255, 255, 254];
/// How often the writer looks for messages when it found none.
const POLL: Duration = Duration::from_millis(5);
/// Messages below this size are copied out of the read buffer, so the
/// buffer is not pinned until the writer gets to them.
const COPY_SMALLER_THAN: usize = 4096;

enum Item {
    Message {
        conn: u64,
        direction: Direction,
        at: Instant,
        frame: Bytes,
    },
    Closed {
        conn: u64,
    },
}

/// What the writer thread and the tap share.
struct Shared {
    queue: ArrayQueue<Item>,
    queued_bytes: AtomicUsize,
    /// Messages left out because the writer was behind.
    dropped: AtomicU64,
    /// Set when the tap is finished: the writer drains and stops.
    done: AtomicBool,
}

/// A tap that writes every message to a pcapng file and hands it on to
/// `inner`.
pub struct CaptureTap {
    inner: Arc<dyn Tap>,
    shared: Arc<Shared>,
    path: PathBuf,
    writer: Mutex<Option<JoinHandle<std::io::Result<Written>>>>,
}

/// What the writer wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub messages: u64,
    pub packets: u64,
    pub bytes: u64,
}

impl CaptureTap {
    /// Creates `path` (mode 0600: it holds literal values), writes the
    /// pcapng headers and starts the writer thread.
    pub fn create(path: &Path, inner: Arc<dyn Tap>) -> std::io::Result<CaptureTap> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(path)?;
        // An existing file keeps its mode through `open`: make it 0600 too.
        #[cfg(unix)]
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&headers())?;
        out.flush()?;
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(QUEUED_MESSAGES),
            queued_bytes: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            done: AtomicBool::new(false),
        });
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("wirelint-capture".into())
                .spawn(move || write_loop(out, &shared))?
        };
        Ok(CaptureTap {
            inner,
            shared,
            path: path.to_owned(),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Writes what is queued, closes the file and says what it holds
    /// (once; later calls do nothing).
    pub fn finish(&self) {
        self.shared.done.store(true, Relaxed);
        let writer = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(writer) = writer else { return };
        let dropped = self.shared.dropped.load(Relaxed);
        match writer.join() {
            Ok(Ok(w)) => tracing::info!(
                capture = %self.path.display(),
                messages = w.messages,
                packets = w.packets,
                bytes = w.bytes,
                left_out = dropped,
                "capture written (it holds literal values: keep it private)"
            ),
            Ok(Err(e)) => tracing::error!(
                capture = %self.path.display(),
                "the capture stopped: {e} (forwarding was not affected)"
            ),
            Err(_) => {
                tracing::error!(capture = %self.path.display(), "the capture writer panicked")
            }
        }
        if dropped > 0 {
            tracing::warn!(
                capture = %self.path.display(),
                left_out = dropped,
                "messages were left out of the capture because the disk was behind"
            );
        }
    }

    fn push(&self, item: Item, len: usize) {
        if self.shared.queued_bytes.fetch_add(len, Relaxed) + len > QUEUED_BYTES
            || self.shared.queue.push(item).is_err()
        {
            self.shared.queued_bytes.fetch_sub(len, Relaxed);
            self.shared.dropped.fetch_add(1, Relaxed);
        }
    }
}

impl Drop for CaptureTap {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Tap for CaptureTap {
    fn enabled(&self) -> bool {
        true
    }

    fn message(&self, conn: u64, direction: Direction, at: Instant, frame: Bytes) {
        let len = frame.len();
        let kept = if len < COPY_SMALLER_THAN {
            Bytes::copy_from_slice(&frame)
        } else {
            frame.clone()
        };
        self.push(
            Item::Message {
                conn,
                direction,
                at,
                frame: kept,
            },
            len,
        );
        if self.inner.enabled() {
            self.inner.message(conn, direction, at, frame);
        }
    }

    fn closed(&self, conn: u64) {
        self.push(Item::Closed { conn }, 0);
        self.inner.closed(conn);
    }
}

/// The section header and the one interface (Ethernet, microseconds).
fn headers() -> Vec<u8> {
    let mut out = section_header();
    out.extend(interface(Linktype::ETHERNET, 6, 0));
    out
}

/// A pcapng section header block (little-endian, section length unknown).
pub(super) fn section_header() -> Vec<u8> {
    SectionHeaderBlock {
        block_type: 0,
        block_len1: 0,
        bom: 0,
        major_version: 1,
        minor_version: 0,
        section_len: -1,
        options: Vec::new(),
        block_len2: 0,
    }
    .to_vec()
    .unwrap_or_default()
}

/// A pcapng interface description block: its link type, its time
/// resolution (`if_tsresol`: 6 for microseconds) and offset.
pub(super) fn interface(linktype: Linktype, tsresol: u8, tsoffset: i64) -> Vec<u8> {
    InterfaceDescriptionBlock {
        block_type: 0,
        block_len1: 0,
        linktype,
        reserved: 0,
        snaplen: 0,
        options: Vec::new(),
        block_len2: 0,
        if_tsresol: tsresol,
        if_tsoffset: tsoffset,
    }
    .to_vec()
    .unwrap_or_default()
}

/// One connection's TCP state as the capture shows it.
struct Stream {
    client: [u8; 4],
    /// The next sequence number of each side (client, server).
    seq: [u32; 2],
}

/// Packet-writing state: the clock and the streams.
struct Packets {
    wall: SystemTime,
    clock: Instant,
    streams: HashMap<u64, Stream>,
    written: Written,
}

impl Packets {
    fn timestamp(&self, at: Instant) -> (u32, u32) {
        let since = at.saturating_duration_since(self.clock);
        let micros = self
            .wall
            .checked_add(since)
            .unwrap_or(self.wall)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        ((micros >> 32) as u32, micros as u32)
    }

    /// One packet of `conn` from the client (`from_client`) or the server.
    fn packet(
        &mut self,
        out: &mut impl Write,
        conn: u64,
        from_client: bool,
        at: Instant,
        flags: Flags,
        payload: &[u8],
    ) -> std::io::Result<()> {
        let Some(stream) = self.streams.get_mut(&conn) else {
            return Ok(());
        };
        let (side, other) = if from_client { (0, 1) } else { (1, 0) };
        let (src, dst, sport, dport) = if from_client {
            (stream.client, SERVER_ADDR, CLIENT_PORT, SERVER_PORT)
        } else {
            (SERVER_ADDR, stream.client, SERVER_PORT, CLIENT_PORT)
        };
        let mac = |addr: [u8; 4]| [2, 0, addr[0], addr[1], addr[2], addr[3]];
        let mut builder = PacketBuilder::ethernet2(mac(src), mac(dst))
            .ipv4(src, dst, 64)
            .tcp(sport, dport, stream.seq[side], 65535);
        if !flags.syn || !from_client {
            builder = builder.ack(stream.seq[other]);
        }
        if flags.syn {
            builder = builder.syn();
        }
        if flags.fin {
            builder = builder.fin();
        }
        if !payload.is_empty() {
            builder = builder.psh();
        }
        let mut data = Vec::with_capacity(builder.size(payload.len()));
        builder
            .write(&mut data, payload)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let advance = payload.len() as u32 + u32::from(flags.syn) + u32::from(flags.fin);
        stream.seq[side] = stream.seq[side].wrapping_add(advance);
        let (ts_high, ts_low) = self.timestamp(at);
        let mut epb = EnhancedPacketBlock {
            block_type: 0,
            block_len1: 0,
            if_id: 0,
            ts_high,
            ts_low,
            caplen: data.len() as u32,
            origlen: data.len() as u32,
            data: &data,
            options: Vec::new(),
            block_len2: 0,
        };
        let block = epb
            .to_vec()
            .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        out.write_all(&block)?;
        self.written.packets += 1;
        self.written.bytes += block.len() as u64;
        Ok(())
    }

    fn message(
        &mut self,
        out: &mut impl Write,
        conn: u64,
        direction: Direction,
        at: Instant,
        frame: &[u8],
    ) -> std::io::Result<()> {
        if let std::collections::hash_map::Entry::Vacant(entry) = self.streams.entry(conn) {
            let n = conn as u32;
            entry.insert(Stream {
                client: [10, (n >> 16) as u8, (n >> 8) as u8, n as u8],
                seq: [1_000, 2_000_000_000],
            });
            let syn = Flags {
                syn: true,
                fin: false,
            };
            self.packet(out, conn, true, at, syn, &[])?;
            self.packet(out, conn, false, at, syn, &[])?;
        }
        let from_client = direction == Direction::Request;
        for segment in frame.chunks(SEGMENT) {
            self.packet(out, conn, from_client, at, Flags::default(), segment)?;
        }
        self.written.messages += 1;
        Ok(())
    }

    fn closed(&mut self, out: &mut impl Write, conn: u64, at: Instant) -> std::io::Result<()> {
        if self.streams.contains_key(&conn) {
            let fin = Flags {
                syn: false,
                fin: true,
            };
            self.packet(out, conn, true, at, fin, &[])?;
            self.packet(out, conn, false, at, fin, &[])?;
            self.streams.remove(&conn);
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Default)]
struct Flags {
    syn: bool,
    fin: bool,
}

/// The writer thread: takes what is queued, writes it, flushes when the
/// queue runs empty; ends when the tap is finished and the queue drained.
fn write_loop(mut out: BufWriter<File>, shared: &Shared) -> std::io::Result<Written> {
    let mut packets = Packets {
        wall: SystemTime::now(),
        clock: Instant::now(),
        streams: HashMap::new(),
        written: Written::default(),
    };
    loop {
        match shared.queue.pop() {
            Some(Item::Message {
                conn,
                direction,
                at,
                frame,
            }) => {
                shared.queued_bytes.fetch_sub(frame.len(), Relaxed);
                packets.message(&mut out, conn, direction, at, &frame)?;
            }
            Some(Item::Closed { conn }) => packets.closed(&mut out, conn, Instant::now())?,
            None => {
                out.flush()?;
                if shared.done.load(Relaxed) && shared.queue.is_empty() {
                    // What is still open ends with the capture.
                    let open: Vec<u64> = packets.streams.keys().copied().collect();
                    for conn in open {
                        packets.closed(&mut out, conn, Instant::now())?;
                    }
                    out.flush()?;
                    return Ok(packets.written);
                }
                std::thread::sleep(POLL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Event;
    use crate::proxy::NoTap;

    /// What the tap was handed, read back by `capture::read` as it was
    /// handed: a large message over several segments, two connections,
    /// each closed.
    #[test]
    fn the_capture_reads_back_as_the_messages_forwarded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcapng");
        let tap = CaptureTap::create(&path, Arc::new(NoTap)).unwrap();
        let message = |id: i32, len: usize| {
            let doc = bson::rawdoc! {"find": "c", "pad": "x".repeat(len), "$db": "d"};
            Bytes::from(crate::wire::op_msg::encode(id, 0, 0, doc.as_bytes(), &[]))
        };
        let sent = [
            (1, Direction::Request, message(1, 10)),
            (2, Direction::Request, message(2, 200_000)),
            (1, Direction::Reply, message(3, 20)),
            (2, Direction::Reply, message(4, 30)),
        ];
        let at = Instant::now();
        for (conn, direction, frame) in &sent {
            tap.message(*conn, *direction, at, frame.clone());
        }
        tap.closed(1);
        tap.closed(2);
        tap.finish();
        let mut reader = crate::capture::Reader::new(Default::default());
        let mut read = Vec::new();
        reader
            .read_file(&path, &mut |e| {
                if let Event::Message {
                    conn,
                    direction,
                    frame,
                    ..
                } = e
                {
                    read.push((conn, direction, frame));
                }
            })
            .unwrap();
        let account = reader.finish(&mut |_| {});
        assert_eq!(read, sent);
        assert!(account.describe().is_empty(), "{:?}", account.describe());
        assert_eq!(account.connections, 2);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
