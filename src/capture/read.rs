//! Reading captures: pcap and pcapng files, their packets decoded down to
//! TCP, each connection's streams reassembled ([`tcp`]) into whole
//! wire-protocol messages, handed out in capture order.
//!
//! The file formats are pcap-parser's to read and the packet headers
//! etherparse's (laxly: a packet the snaplen cut short still yields the
//! payload it holds). Linux cooked headers and BSD loopback headers are
//! read here: etherparse refuses the cooked header of loopback traffic
//! (hardware type 772, what `tcpdump -i any` writes for it) and has no
//! parser for the others.

mod tcp;

use super::{Event, DEFAULT_SERVER_PORTS};
use crate::stats::Direction;
use anyhow::{anyhow, bail, Context};
use etherparse::{EtherType, IpNumber, LaxNetSlice, LaxSlicedPacket, TransportSlice};
use pcap_parser::pcapng::Block;
use pcap_parser::traits::{PcapNGPacketBlock, PcapReaderIterator};
use pcap_parser::{LegacyPcapReader, Linktype, PcapBlockOwned, PcapError, PcapNGReader};
use serde::Serialize;
use std::io::Read;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// What [`Reader`] reads and how much it holds.
#[derive(Clone, Debug)]
pub struct ReaderSettings {
    /// TCP ports that are servers: a packet to one is a request, from one
    /// a reply.
    pub server_ports: Vec<u16>,
    /// Bytes held per stream direction past a hole, waiting for it to be
    /// filled, before the hole is declared a gap.
    pub max_out_of_order: usize,
}

impl Default for ReaderSettings {
    fn default() -> Self {
        ReaderSettings {
            server_ports: DEFAULT_SERVER_PORTS.to_vec(),
            max_out_of_order: 4 << 20,
        }
    }
}

/// What the captures held, and what of it could not be read.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Account {
    /// Captures read (files recognised as pcap or pcapng).
    pub captures: u64,
    /// Packet records read.
    pub packets: u64,
    /// Packets that are not TCP to or from a server port (or IP fragments,
    /// or undecodable): skipped.
    pub packets_skipped: u64,
    /// Each distinct link type seen that is not read; its packets are
    /// counted in `packets_skipped`.
    pub unsupported_link_types: Vec<u32>,
    /// Connections seen (each id handed out).
    pub connections: u64,
    pub requests: u64,
    pub replies: u64,
    /// Bytes of the messages handed out.
    pub message_bytes: u64,
    /// Connections that spoke TLS (the first bytes of a stream are a TLS
    /// record header): unreadable, their bytes skipped.
    pub tls_connections: u64,
    /// Connections whose stream is not the MongoDB wire protocol (a header
    /// `wire::frame` refuses): skipped from there on.
    pub not_wire_protocol: u64,
    /// Holes in a stream that were never filled (segments the capture
    /// missed, a short snaplen, too much held past a hole).
    pub gaps: u64,
    /// Stream bytes that reached no message: the holes, what was received
    /// of the messages they cut, what was skipped while finding the next
    /// message start (after a gap, or where the capture joined a
    /// connection), and the start of a message the capture ended in.
    pub bytes_lost: u64,
    /// Messages lost: those a gap cut or took whole where their bounds are
    /// known, one cut where the capture joined a connection, one half read
    /// when the capture ended.
    pub messages_lost: u64,
    /// Packets cut short by the snaplen (captured length below the
    /// original).
    pub truncated_packets: u64,
    /// Segments or parts of segments seen twice (retransmissions,
    /// duplicates): dropped.
    pub retransmitted_bytes: u64,
    /// Segments that arrived ahead of a hole and were put back in order
    /// once it was filled.
    pub reordered_segments: u64,
    /// Captures that end inside a block or record (a file cut short): what
    /// was whole was read.
    pub truncated_captures: u64,
}

impl Account {
    /// What a user should be told, a line each, only lines with something
    /// to say.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.unsupported_link_types.is_empty() {
            let types: Vec<String> = self
                .unsupported_link_types
                .iter()
                .map(u32::to_string)
                .collect();
            lines.push(format!(
                "link type{} {} cannot be read: {} packets were skipped (Ethernet, Linux cooked, BSD loopback and raw IP can)",
                plural(types.len() as u64),
                types.join(", "),
                if types.len() == 1 { "its" } else { "their" },
            ));
        }
        if self.truncated_captures > 0 {
            lines.push(format!(
                "{} capture{} end{} inside a packet record (the file was cut short): what came before was read",
                grouped(self.truncated_captures),
                plural(self.truncated_captures),
                if self.truncated_captures == 1 { "s" } else { "" },
            ));
        }
        if self.tls_connections > 0 {
            lines.push(format!(
                "{} connection{} used TLS: {} traffic cannot be read (capture between wirelint and the server, or in front of a server without TLS)",
                grouped(self.tls_connections),
                plural(self.tls_connections),
                if self.tls_connections == 1 { "its" } else { "their" },
            ));
        }
        if self.not_wire_protocol > 0 {
            lines.push(format!(
                "{} connection{} to a server port did not speak the MongoDB wire protocol: skipped",
                grouped(self.not_wire_protocol),
                plural(self.not_wire_protocol),
            ));
        }
        let lost = format!(
            "{} byte{} lost, {} message{}",
            grouped(self.bytes_lost),
            plural(self.bytes_lost),
            grouped(self.messages_lost),
            plural(self.messages_lost),
        );
        if self.gaps > 0 {
            let cause = if self.truncated_packets > 0 {
                format!(
                    "{} packet{} cut short by the snaplen: capture with -s 0",
                    grouped(self.truncated_packets),
                    plural(self.truncated_packets),
                )
            } else {
                "segments the capture missed".to_string()
            };
            lines.push(format!(
                "{} gap{} in TCP streams: {lost} ({cause})",
                grouped(self.gaps),
                plural(self.gaps),
            ));
        } else if self.truncated_packets > 0 {
            lines.push(format!(
                "{} packet{} cut short by the snaplen (capture with -s 0)",
                grouped(self.truncated_packets),
                plural(self.truncated_packets),
            ));
        }
        if self.gaps == 0 && (self.bytes_lost > 0 || self.messages_lost > 0) {
            lines.push(format!(
                "{lost}: cut by the start or the end of the capture (connections open when it began or ended)"
            ));
        }
        lines
    }
}

/// "s" unless one.
fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A number with its thousands separated by commas.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The bytes read before the format is told: the legacy header, or a
/// pcapng section header, must be whole in them.
const HEAD: usize = 64 << 10;
/// The block buffer to start with; it grows for larger blocks.
const BUFFER: usize = 256 << 10;
/// The largest block read: anything larger is a corrupt length.
const MAX_BUFFER: usize = 16 << 20;
const NANOS: i128 = 1_000_000_000;

/// Reads captures into [`Event`]s.
pub struct Reader {
    server_ports: Vec<u16>,
    account: Account,
    connections: tcp::Connections,
    /// The first packet's time (nanoseconds since the epoch): where `at`
    /// is measured from.
    origin: Option<i128>,
    /// The last packet's time, for packets that carry none.
    last: Option<i128>,
    /// Bytes of capture read (after gzip, for a gzipped one).
    bytes_read: u64,
}

/// A reader that counts what is read through it.
struct Counted<'c, R> {
    inner: R,
    read: &'c std::cell::Cell<u64>,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// An interface of a capture: what its packets are and how their time is
/// written.
#[derive(Clone, Copy, Debug)]
struct Interface {
    linktype: i32,
    /// Timestamp units per second.
    units: u64,
    /// Seconds added to every timestamp.
    offset: i64,
    snaplen: u32,
}

impl Interface {
    fn time(&self, seconds: u64, fraction: u64) -> i128 {
        let units = i128::from(self.units.max(1));
        (i128::from(seconds) + i128::from(self.offset)) * NANOS
            + i128::from(fraction) * NANOS / units
    }

    /// The time of a pcapng timestamp (in units since the epoch).
    fn stamp(&self, high: u32, low: u32) -> i128 {
        let ts = (u64::from(high) << 32) | u64::from(low);
        let units = self.units.max(1);
        self.time(ts / units, ts % units)
    }
}

/// What is known of the capture being read.
struct Capture {
    ng: bool,
    /// The byte order of the file (pcap) or of the current section
    /// (pcapng).
    big_endian: bool,
    /// The pcap file's one interface, or the current pcapng section's.
    interfaces: Vec<Interface>,
}

impl Capture {
    /// The length the block (pcapng) or record (pcap) at the start of
    /// `data` declares, headers included: read here (the readers do not
    /// say it) to refuse a corrupt length before growing the buffer for
    /// it.
    fn declared_len(&self, data: &[u8]) -> usize {
        let (at, header) = if self.ng { (4, 0) } else { (8, 24) };
        let Some(&[a, b, c, d]) = data.get(at..at + 4) else {
            return 0;
        };
        let len = if self.big_endian {
            u32::from_be_bytes([a, b, c, d])
        } else {
            u32::from_le_bytes([a, b, c, d])
        };
        usize::try_from(len)
            .unwrap_or(usize::MAX)
            .saturating_add(header)
    }
}

/// What the next step of reading a capture is.
enum Step {
    Consume(usize),
    Refill,
    Grow,
    End,
    Cut,
    Fail(String),
}

impl Reader {
    pub fn new(settings: ReaderSettings) -> Reader {
        Reader {
            server_ports: settings.server_ports,
            account: Account::default(),
            connections: tcp::Connections::new(settings.max_out_of_order),
            origin: None,
            last: None,
            bytes_read: 0,
        }
    }

    /// Bytes of capture read so far (uncompressed).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Reads one capture (pcap or pcapng, told apart by its magic; either
    /// byte order; micro- and nanosecond pcap), calling `out` with each
    /// event as it completes, in capture order. `name` is the file's name
    /// for errors. Several captures may be read one after another with one
    /// reader: connections carry on from one to the next, connection ids
    /// stay unique, and `at` is measured from the first packet of the
    /// first capture.
    pub fn read(
        &mut self,
        input: impl Read,
        name: &str,
        out: &mut dyn FnMut(Event),
    ) -> anyhow::Result<()> {
        let read = std::cell::Cell::new(0);
        let outcome = self.read_counted(
            Counted {
                inner: input,
                read: &read,
            },
            name,
            out,
        );
        self.bytes_read += read.get();
        outcome
    }

    fn read_counted(
        &mut self,
        mut input: impl Read,
        name: &str,
        out: &mut dyn FnMut(Event),
    ) -> anyhow::Result<()> {
        let mut head = Vec::with_capacity(HEAD);
        (&mut input)
            .take(HEAD as u64)
            .read_to_end(&mut head)
            .with_context(|| format!("cannot read {name}"))?;
        let magic = head
            .get(..4)
            .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
        let ng = match magic {
            Some(0x0a0d_0d0a) => true,
            Some(0xa1b2_c3d4 | 0xa1b2_3c4d | 0xa1b2_cd34 | 0xd4c3_b2a1 | 0x4d3c_b2a1) => false,
            _ => bail!("{name} is not a pcap or pcapng capture"),
        };
        self.account.captures += 1;
        let whole_head = head.len() < HEAD;
        let source = std::io::Cursor::new(head).chain(input);
        let opened = if ng {
            PcapNGReader::new(BUFFER, source).map(|r| Box::new(r) as Box<dyn PcapReaderIterator>)
        } else {
            LegacyPcapReader::new(BUFFER, source)
                .map(|r| Box::new(r) as Box<dyn PcapReaderIterator>)
        };
        let mut reader = match opened {
            Ok(reader) => reader,
            Err(PcapError::Incomplete(_)) if whole_head => {
                self.account.truncated_captures += 1;
                return Ok(());
            }
            Err(PcapError::Incomplete(_)) => {
                bail!("{name}: its section header is larger than {HEAD} bytes")
            }
            Err(_) => bail!("{name} is not a pcap or pcapng capture"),
        };
        let mut capacity = BUFFER;
        let mut capture = Capture {
            ng,
            big_endian: false,
            interfaces: Vec::new(),
        };
        loop {
            let step = match reader.next() {
                Ok((size, block)) => {
                    self.block(block, &mut capture, out);
                    Step::Consume(size)
                }
                Err(PcapError::Eof) => Step::End,
                Err(PcapError::UnexpectedEof) => Step::Cut,
                Err(PcapError::Incomplete(_)) => Step::Refill,
                Err(PcapError::BufferTooSmall) => Step::Grow,
                Err(e) => Step::Fail(e.to_string()),
            };
            match step {
                Step::Consume(size) => reader.consume(size),
                Step::End => break,
                Step::Cut => {
                    // The reader says so also when everything was read.
                    if !reader.data().is_empty() {
                        self.account.truncated_captures += 1;
                    }
                    break;
                }
                Step::Refill => {
                    let before = reader.data().len();
                    refill(&mut *reader, name)?;
                    // A full buffer and a block of unknown length.
                    if reader.data().len() == before && !reader.reader_exhausted() {
                        let need = capacity * 2;
                        grow(&mut *reader, &mut capacity, need, name)?;
                    }
                }
                Step::Grow => {
                    let need = capture.declared_len(reader.data());
                    grow(&mut *reader, &mut capacity, need, name)?;
                }
                Step::Fail(e) => bail!("{name} is corrupt at byte {}: {e}", reader.consumed()),
            }
        }
        Ok(())
    }

    /// Reads the capture at `path` (see [`Reader::read`]).
    ///
    /// A gzip-compressed capture (`tcpdump -w - | gzip`, `NAME.pcap.gz`)
    /// is read through gzip, told by its magic, whatever its name.
    pub fn read_file(&mut self, path: &Path, out: &mut dyn FnMut(Event)) -> anyhow::Result<()> {
        let name = path.display().to_string();
        let mut file = std::io::BufReader::new(
            std::fs::File::open(path).with_context(|| format!("cannot open {name}"))?,
        );
        let gzip = std::io::BufRead::fill_buf(&mut file)
            .with_context(|| format!("cannot read {name}"))?
            .starts_with(&[0x1f, 0x8b]);
        if gzip {
            self.read(flate2::bufread::MultiGzDecoder::new(file), &name, out)
        } else {
            self.read(file, &name, out)
        }
    }

    /// The captures ended: every connection still open is closed (a
    /// message half read at its end is lost), with an [`Event::Closed`]
    /// for each, in the order they were opened.
    pub fn finish(mut self, out: &mut dyn FnMut(Event)) -> Account {
        let mut sink = tcp::Sink {
            at: self.at(),
            account: &mut self.account,
            out,
        };
        self.connections.finish(&mut sink);
        self.account
    }

    /// The last packet's time, from the first's.
    fn at(&self) -> Duration {
        match (self.origin, self.last) {
            (Some(origin), Some(last)) if last > origin => {
                Duration::from_nanos(u64::try_from(last - origin).unwrap_or(u64::MAX))
            }
            _ => Duration::ZERO,
        }
    }

    fn block(
        &mut self,
        block: PcapBlockOwned<'_>,
        capture: &mut Capture,
        out: &mut dyn FnMut(Event),
    ) {
        let interfaces = &mut capture.interfaces;
        match block {
            PcapBlockOwned::LegacyHeader(header) => {
                capture.big_endian = header.is_bigendian();
                *interfaces = vec![Interface {
                    linktype: header.network.0,
                    units: if header.is_nanosecond_precision() {
                        1_000_000_000
                    } else {
                        1_000_000
                    },
                    offset: 0,
                    snaplen: header.snaplen,
                }];
            }
            PcapBlockOwned::Legacy(record) => {
                let Some(interface) = interfaces.first().copied() else {
                    return;
                };
                let time = interface.time(u64::from(record.ts_sec), u64::from(record.ts_usec));
                self.packet(
                    interface.linktype,
                    Some(time),
                    record.data,
                    record.origlen,
                    out,
                );
            }
            PcapBlockOwned::NG(Block::SectionHeader(shb)) => {
                capture.big_endian = shb.big_endian();
                interfaces.clear();
            }
            PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                interfaces.push(Interface {
                    linktype: idb.linktype.0,
                    units: idb.ts_resolution().unwrap_or(1_000_000),
                    offset: idb.ts_offset(),
                    snaplen: idb.snaplen,
                });
            }
            PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                let Some(interface) = usize::try_from(epb.if_id)
                    .ok()
                    .and_then(|i| interfaces.get(i))
                    .copied()
                else {
                    self.account.packets += 1;
                    self.account.packets_skipped += 1;
                    return;
                };
                let time = interface.stamp(epb.ts_high, epb.ts_low);
                self.packet(
                    interface.linktype,
                    Some(time),
                    epb.packet_data(),
                    epb.origlen,
                    out,
                );
            }
            PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                // Interface 0, no timestamp; what the snaplen left of the
                // packet is the block's data, padding included.
                let Some(interface) = interfaces.first().copied() else {
                    self.account.packets += 1;
                    self.account.packets_skipped += 1;
                    return;
                };
                let mut data = spb.packet_data();
                if interface.snaplen > 0 {
                    let snaplen = usize::try_from(interface.snaplen).unwrap_or(usize::MAX);
                    data = data.get(..snaplen).unwrap_or(data);
                }
                self.packet(interface.linktype, None, data, spb.origlen, out);
            }
            _ => {}
        }
    }

    /// One packet record, `time` its timestamp (none: the last one's).
    fn packet(
        &mut self,
        linktype: i32,
        time: Option<i128>,
        data: &[u8],
        origlen: u32,
        out: &mut dyn FnMut(Event),
    ) {
        let account = &mut self.account;
        account.packets += 1;
        if let Some(time) = time {
            self.origin.get_or_insert(time);
            self.last = Some(time);
        }
        if (data.len() as u64) < u64::from(origlen) {
            account.truncated_packets += 1;
        }
        let tcp = match decode(linktype, data) {
            Decoded::Tcp(tcp) => tcp,
            Decoded::Skip => {
                account.packets_skipped += 1;
                return;
            }
            Decoded::Unsupported => {
                account.packets_skipped += 1;
                let linktype = linktype as u32;
                if !account.unsupported_link_types.contains(&linktype) {
                    account.unsupported_link_types.push(linktype);
                }
                return;
            }
        };
        let to_server = self.server_ports.contains(&tcp.destination.1);
        let from_server = self.server_ports.contains(&tcp.source.1);
        let (direction, key) = match (to_server, from_server) {
            (true, false) => (
                Direction::Request,
                tcp::Key {
                    client: tcp.source,
                    server: tcp.destination,
                },
            ),
            (false, true) => (
                Direction::Reply,
                tcp::Key {
                    client: tcp.destination,
                    server: tcp.source,
                },
            ),
            _ => {
                account.packets_skipped += 1;
                return;
            }
        };
        let segment = tcp::Segment {
            key,
            direction,
            seq: tcp.seq,
            ack: tcp.ack,
            syn: tcp.syn,
            fin: tcp.fin,
            rst: tcp.rst,
            payload: tcp.payload,
            missing: tcp.missing,
        };
        let at = self.at();
        let mut sink = tcp::Sink {
            at,
            account: &mut self.account,
            out,
        };
        self.connections.segment(&segment, &mut sink);
    }
}

fn refill(reader: &mut dyn PcapReaderIterator, name: &str) -> anyhow::Result<()> {
    reader
        .refill()
        .map_err(|e| anyhow!("cannot read {name}: {e}"))
}

/// Grows the block buffer to hold a block of `need` bytes (at least
/// doubling it, up to [`MAX_BUFFER`]) and fills it.
fn grow(
    reader: &mut dyn PcapReaderIterator,
    capacity: &mut usize,
    need: usize,
    name: &str,
) -> anyhow::Result<()> {
    if need > MAX_BUFFER || *capacity >= MAX_BUFFER {
        bail!(
            "{name} is corrupt at byte {}: a block larger than {MAX_BUFFER} bytes",
            reader.consumed()
        );
    }
    *capacity = need.next_power_of_two().max(*capacity * 2).min(MAX_BUFFER);
    reader.grow(*capacity);
    refill(reader, name)
}

/// A TCP segment as its packet's headers say.
struct TcpPacket<'a> {
    source: (IpAddr, u16),
    destination: (IpAddr, u16),
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    fin: bool,
    rst: bool,
    payload: &'a [u8],
    /// Payload bytes the IP header counts but the capture does not hold.
    missing: usize,
}

enum Decoded<'a> {
    Tcp(TcpPacket<'a>),
    /// Not TCP over IP, an IP fragment, or undecodable.
    Skip,
    /// A link type not read.
    Unsupported,
}

const ETHERNET: i32 = Linktype::ETHERNET.0;
const LINUX_SLL: i32 = Linktype::LINUX_SLL.0;
const LINUX_SLL2: i32 = Linktype::LINUX_SLL2.0;
const NULL: i32 = Linktype::NULL.0;
const LOOP: i32 = Linktype::LOOP.0;
const RAW: i32 = Linktype::RAW.0;
/// DLT_RAW as most systems number it, and as OpenBSD does: raw IP in
/// older captures.
const RAW_12: i32 = 12;
const RAW_14: i32 = 14;
const IPV4: i32 = Linktype::IPV4.0;
const IPV6: i32 = Linktype::IPV6.0;

/// Decodes a packet of link type `linktype` down to TCP.
fn decode(linktype: i32, data: &[u8]) -> Decoded<'_> {
    let sliced = match linktype {
        ETHERNET => LaxSlicedPacket::from_ethernet(data).ok(),
        LINUX_SLL => cooked(data, 16, 14),
        LINUX_SLL2 => cooked(data, 20, 0),
        NULL => loopback(data, true),
        LOOP => loopback(data, false),
        RAW | RAW_12 | RAW_14 | IPV4 | IPV6 => LaxSlicedPacket::from_ip(data).ok(),
        _ => return Decoded::Unsupported,
    };
    sliced.and_then(tcp).map_or(Decoded::Skip, Decoded::Tcp)
}

/// A Linux cooked header (hand-read: `header` bytes long, the EtherType
/// of what follows at `protocol`, big endian; 16 and 14 for v1, 20 and 0
/// for v2).
fn cooked(data: &[u8], header: usize, protocol: usize) -> Option<LaxSlicedPacket<'_>> {
    let ether_type = data.get(protocol..protocol + 2)?;
    let payload = data.get(header..)?;
    let ether_type = EtherType(u16::from_be_bytes([ether_type[0], ether_type[1]]));
    Some(LaxSlicedPacket::from_ether_type(ether_type, payload))
}

/// A BSD loopback header (hand-read: a 4-byte address family, IPv4 or
/// IPv6, in the byte order of the capturing host for NULL, big endian for
/// LOOP).
fn loopback(data: &[u8], either_order: bool) -> Option<LaxSlicedPacket<'_>> {
    // AF_INET, and AF_INET6 as Linux, NetBSD and OpenBSD, FreeBSD, and
    // Darwin number it.
    let ip = |family: u32| matches!(family, 2 | 10 | 24 | 28 | 30);
    let family = data.get(..4)?;
    let family = [family[0], family[1], family[2], family[3]];
    let known = ip(u32::from_be_bytes(family)) || (either_order && ip(u32::from_le_bytes(family)));
    if !known {
        return None;
    }
    LaxSlicedPacket::from_ip(data.get(4..)?).ok()
}

/// The TCP segment of a decoded packet, if it is one (and not a
/// fragment).
fn tcp(sliced: LaxSlicedPacket<'_>) -> Option<TcpPacket<'_>> {
    let (source, destination, payload, declared, held) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(ip)) => {
            let header = ip.header();
            let auth = ip.extensions().auth.map_or(0, |a| a.slice().len());
            let payload = ip.payload();
            let held = header.slice().len() + auth + payload.payload.len();
            (
                IpAddr::V4(header.source_addr()),
                IpAddr::V4(header.destination_addr()),
                payload.clone(),
                usize::from(header.total_len()),
                held,
            )
        }
        Some(LaxNetSlice::Ipv6(ip)) => {
            let header = ip.header();
            let payload = ip.payload();
            let held = header.slice().len() + ip.extensions().slice().len() + payload.payload.len();
            (
                IpAddr::V6(header.source_addr()),
                IpAddr::V6(header.destination_addr()),
                payload.clone(),
                header.slice().len() + usize::from(header.payload_length()),
                held,
            )
        }
        _ => return None,
    };
    if payload.fragmented || payload.ip_number != IpNumber::TCP {
        return None;
    }
    let Some(TransportSlice::Tcp(segment)) = sliced.transport else {
        return None;
    };
    let missing = if payload.incomplete {
        declared.saturating_sub(held)
    } else {
        0
    };
    Some(TcpPacket {
        source: (source, segment.source_port()),
        destination: (destination, segment.destination_port()),
        seq: segment.sequence_number(),
        ack: segment.ack().then(|| segment.acknowledgment_number()),
        syn: segment.syn(),
        fin: segment.fin(),
        rst: segment.rst(),
        payload: segment.payload(),
        missing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::op_msg;
    use bson::rawdoc;
    use bytes::Bytes;
    use etherparse::PacketBuilder;
    use pcap_parser::pcapng::{EnhancedPacketBlock, SimplePacketBlock};
    use pcap_parser::{LegacyPcapBlock, PcapHeader, ToVec};
    use Direction::{Reply, Request};

    /// The first packet's time in the test captures: 2023-11-14.
    const T0_SECS: u64 = 1_700_000_000;

    /// A find, its filter padded with `pad` bytes.
    fn request(id: i32, pad: usize) -> Vec<u8> {
        let doc = rawdoc! {"find": "c", "filter": {"p": "x".repeat(pad)}, "$db": "d"};
        op_msg::encode(id, 0, 0, doc.as_bytes(), &[])
    }

    fn reply(id: i32, to: i32) -> Vec<u8> {
        let doc = rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": []}, "ok": 1.0};
        op_msg::encode(id, to, 0, doc.as_bytes(), &[])
    }

    #[derive(Clone, Copy, Debug)]
    enum Link {
        Ethernet,
        Raw,
        Sll,
        Sll2,
        NullLe,
        NullBe,
        Loop,
    }

    #[derive(Default)]
    struct Flags {
        syn: bool,
        fin: bool,
        rst: bool,
        ack: Option<u32>,
    }

    /// Builds a TCP/IP packet with etherparse, flags set.
    macro_rules! built {
        ($builder:expr, $flags:expr, $payload:expr) => {{
            let mut b = $builder;
            if $flags.syn {
                b = b.syn();
            }
            if $flags.fin {
                b = b.fin();
            }
            if $flags.rst {
                b = b.rst();
            }
            if let Some(ack) = $flags.ack {
                b = b.ack(ack);
            }
            let mut out = Vec::new();
            b.write(&mut out, $payload).unwrap();
            out
        }};
    }

    /// One TCP connection as a test writes it: the next sequence number
    /// of each side (client, server).
    struct Flow {
        link: Link,
        v6: bool,
        client_port: u16,
        server_port: u16,
        seq: [u32; 2],
    }

    impl Flow {
        fn new(client_port: u16) -> Flow {
            Flow {
                link: Link::Ethernet,
                v6: false,
                client_port,
                server_port: 27017,
                seq: [1_000, 900_000],
            }
        }

        fn over(link: Link, v6: bool) -> Flow {
            Flow {
                link,
                v6,
                ..Flow::new(40_001)
            }
        }

        /// A packet from `side` (a request: client to server).
        fn packet(&self, side: Direction, seq: u32, flags: Flags, payload: &[u8]) -> Vec<u8> {
            let (c4, s4) = ([10, 0, 0, 1], [10, 0, 0, 2]);
            let (c6, s6) = (
                [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            );
            let (cm, sm) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
            let ((a4, b4), (a6, b6), (am, bm), (ap, bp)) = match side {
                Request => (
                    (c4, s4),
                    (c6, s6),
                    (cm, sm),
                    (self.client_port, self.server_port),
                ),
                Reply => (
                    (s4, c4),
                    (s6, c6),
                    (sm, cm),
                    (self.server_port, self.client_port),
                ),
            };
            let ip = if self.v6 {
                built!(
                    PacketBuilder::ipv6(a6, b6, 64).tcp(ap, bp, seq, 65_535),
                    flags,
                    payload
                )
            } else {
                built!(
                    PacketBuilder::ipv4(a4, b4, 64).tcp(ap, bp, seq, 65_535),
                    flags,
                    payload
                )
            };
            let (ether_type, family): (u16, u32) = if self.v6 { (0x86dd, 30) } else { (0x0800, 2) };
            let mut out = match self.link {
                Link::Ethernet if self.v6 => {
                    return built!(
                        PacketBuilder::ethernet2(am, bm)
                            .ipv6(a6, b6, 64)
                            .tcp(ap, bp, seq, 65_535),
                        flags,
                        payload
                    )
                }
                Link::Ethernet => {
                    return built!(
                        PacketBuilder::ethernet2(am, bm)
                            .ipv4(a4, b4, 64)
                            .tcp(ap, bp, seq, 65_535),
                        flags,
                        payload
                    )
                }
                Link::Raw => Vec::new(),
                // Packet type, ARPHRD_LOOPBACK, address length and
                // address, protocol.
                Link::Sll => {
                    let mut h = vec![0, 0, 0x03, 0x04, 0, 0];
                    h.extend([0; 8]);
                    h.extend(ether_type.to_be_bytes());
                    h
                }
                // Protocol, reserved, interface index, ARPHRD_LOOPBACK,
                // packet type, address length, address.
                Link::Sll2 => {
                    let mut h = ether_type.to_be_bytes().to_vec();
                    h.extend([0, 0, 0, 0, 0, 1, 0x03, 0x04, 0, 0]);
                    h.extend([0; 8]);
                    h
                }
                Link::NullLe => family.to_le_bytes().to_vec(),
                Link::NullBe | Link::Loop => family.to_be_bytes().to_vec(),
            };
            out.extend(ip);
            out
        }

        fn handshake(&mut self) -> Vec<Vec<u8>> {
            let syn = Flags {
                syn: true,
                ..Flags::default()
            };
            let syn = self.packet(Request, self.seq[0], syn, &[]);
            self.seq[0] = self.seq[0].wrapping_add(1);
            let syn_ack = Flags {
                syn: true,
                ack: Some(self.seq[0]),
                ..Flags::default()
            };
            let syn_ack = self.packet(Reply, self.seq[1], syn_ack, &[]);
            self.seq[1] = self.seq[1].wrapping_add(1);
            let ack = self.ack(Request);
            vec![syn, syn_ack, ack]
        }

        fn flags(&self, side: Direction) -> Flags {
            Flags {
                ack: Some(self.seq[1 - side.index()]),
                ..Flags::default()
            }
        }

        fn ack(&self, side: Direction) -> Vec<u8> {
            self.packet(side, self.seq[side.index()], self.flags(side), &[])
        }

        /// `payload` from `side` in one segment, acknowledging the other
        /// side.
        fn send(&mut self, side: Direction, payload: &[u8]) -> Vec<u8> {
            let d = side.index();
            let p = self.packet(side, self.seq[d], self.flags(side), payload);
            self.seq[d] = self.seq[d].wrapping_add(payload.len() as u32);
            p
        }

        /// `payload` in segments of `size` bytes.
        fn chunks(&mut self, side: Direction, payload: &[u8], size: usize) -> Vec<Vec<u8>> {
            payload.chunks(size).map(|c| self.send(side, c)).collect()
        }

        fn fin(&mut self, side: Direction) -> Vec<u8> {
            let d = side.index();
            let flags = Flags {
                fin: true,
                ..self.flags(side)
            };
            let p = self.packet(side, self.seq[d], flags, &[]);
            self.seq[d] = self.seq[d].wrapping_add(1);
            p
        }

        /// A FIN from each side and the last ACK.
        fn close(&mut self) -> Vec<Vec<u8>> {
            vec![self.fin(Request), self.fin(Reply), self.ack(Request)]
        }
    }

    fn linktype(link: Link, v6: bool) -> i32 {
        match link {
            Link::Ethernet => 1,
            Link::Raw if v6 => 229,
            Link::Raw => 101,
            Link::Sll => 113,
            Link::Sll2 => 276,
            Link::NullLe | Link::NullBe => 0,
            Link::Loop => 108,
        }
    }

    /// A pcap (microseconds) of records: time since the first packet,
    /// captured bytes, original length.
    fn pcap_records(
        linktype: i32,
        snaplen: u32,
        records: &[(Duration, Vec<u8>, usize)],
    ) -> Vec<u8> {
        let mut header = PcapHeader {
            network: Linktype(linktype),
            snaplen,
            ..PcapHeader::new()
        };
        let mut out = header.to_vec().unwrap();
        for (at, data, origlen) in records {
            let mut record = LegacyPcapBlock {
                ts_sec: (T0_SECS + at.as_secs()) as u32,
                ts_usec: at.subsec_micros(),
                caplen: data.len() as u32,
                origlen: *origlen as u32,
                data,
            };
            out.extend(record.to_vec().unwrap());
        }
        out
    }

    /// A pcap of packets one millisecond apart, the first `start_ms` after
    /// the first packet of the test.
    fn pcap_from(linktype: i32, start_ms: u64, packets: &[Vec<u8>]) -> Vec<u8> {
        let records: Vec<_> = packets
            .iter()
            .enumerate()
            .map(|(i, p)| {
                (
                    Duration::from_millis(start_ms + i as u64),
                    p.clone(),
                    p.len(),
                )
            })
            .collect();
        pcap_records(linktype, 65_535, &records)
    }

    fn pcap(linktype: i32, packets: &[Vec<u8>]) -> Vec<u8> {
        pcap_from(linktype, 0, packets)
    }

    fn shb() -> Vec<u8> {
        crate::capture::write::section_header()
    }

    fn idb(linktype: i32, tsresol: u8, tsoffset: i64) -> Vec<u8> {
        crate::capture::write::interface(Linktype(linktype), tsresol, tsoffset)
    }

    fn epb(if_id: u32, ts: u64, data: &[u8]) -> Vec<u8> {
        EnhancedPacketBlock {
            block_type: 0,
            block_len1: 0,
            if_id,
            ts_high: (ts >> 32) as u32,
            ts_low: ts as u32,
            caplen: data.len() as u32,
            origlen: data.len() as u32,
            data,
            options: Vec::new(),
            block_len2: 0,
        }
        .to_vec()
        .unwrap()
    }

    fn spb(data: &[u8]) -> Vec<u8> {
        SimplePacketBlock {
            block_type: 0,
            block_len1: 0,
            origlen: data.len() as u32,
            data,
            block_len2: 0,
        }
        .to_vec()
        .unwrap()
    }

    fn run(files: &[Vec<u8>]) -> (Vec<Event>, Account) {
        run_with(Reader::new(ReaderSettings::default()), files)
    }

    fn run_with(mut reader: Reader, files: &[Vec<u8>]) -> (Vec<Event>, Account) {
        let mut events = Vec::new();
        for (i, file) in files.iter().enumerate() {
            reader
                .read(&file[..], &format!("t{i}.pcap"), &mut |e| events.push(e))
                .unwrap();
        }
        let account = reader.finish(&mut |e| events.push(e));
        (events, account)
    }

    fn msg(conn: u64, direction: Direction, at: Duration, frame: &[u8]) -> Event {
        Event::Message {
            conn,
            direction,
            at,
            frame: Bytes::copy_from_slice(frame),
        }
    }

    fn ms(n: usize) -> Duration {
        Duration::from_millis(n as u64)
    }

    fn closed(conn: u64) -> Event {
        Event::Closed { conn }
    }

    /// The account of one capture of `packets` packets and `connections`
    /// connections.
    fn account(packets: usize, connections: u64, messages: &[&[u8]]) -> Account {
        Account {
            captures: 1,
            packets: packets as u64,
            connections,
            message_bytes: messages.iter().map(|m| m.len() as u64).sum(),
            ..Account::default()
        }
    }

    /// A handshake, a request, its reply and the close: the packets, and
    /// the request and reply.
    fn exchange(flow: &mut Flow) -> (Vec<Vec<u8>>, Vec<u8>, Vec<u8>) {
        let (q, r) = (request(1, 0), reply(2, 1));
        let mut packets = flow.handshake();
        packets.push(flow.send(Request, &q));
        packets.push(flow.send(Reply, &r));
        packets.extend(flow.close());
        (packets, q, r)
    }

    #[test]
    fn a_request_and_its_reply() {
        let (packets, q, r) = exchange(&mut Flow::new(40_001));
        let (events, account) = run(&[pcap(1, &packets)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(3), &q),
                msg(1, Reply, ms(4), &r),
                closed(1)
            ]
        );
        let mut want = super::tests::account(8, 1, &[&q, &r]);
        want.requests = 1;
        want.replies = 1;
        assert_eq!(account, want);
        assert!(account.describe().is_empty());
    }

    #[test]
    fn a_gzipped_capture_is_read_through_gzip() {
        use std::io::Write;
        let (packets, q, r) = exchange(&mut Flow::new(40_001));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.pcap.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&pcap(1, &packets)).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let mut reader = Reader::new(ReaderSettings::default());
        let mut events = Vec::new();
        reader.read_file(&path, &mut |e| events.push(e)).unwrap();
        reader.finish(&mut |e| events.push(e));
        assert_eq!(
            events,
            [
                msg(1, Request, ms(3), &q),
                msg(1, Reply, ms(4), &r),
                closed(1)
            ]
        );
    }

    #[test]
    fn every_link_type_is_read() {
        let links = [
            (Link::Ethernet, true),
            (Link::Raw, false),
            (Link::Raw, true),
            (Link::Sll, false),
            (Link::Sll, true),
            (Link::Sll2, false),
            (Link::Sll2, true),
            (Link::NullLe, false),
            (Link::NullLe, true),
            (Link::NullBe, false),
            (Link::Loop, true),
        ];
        for (link, v6) in links {
            let (packets, q, r) = exchange(&mut Flow::over(link, v6));
            let (events, account) = run(&[pcap(linktype(link, v6), &packets)]);
            assert_eq!(
                events,
                [
                    msg(1, Request, ms(3), &q),
                    msg(1, Reply, ms(4), &r),
                    closed(1)
                ],
                "{link:?} v6 {v6}"
            );
            assert_eq!(
                (account.packets, account.packets_skipped, account.requests),
                (8, 0, 1),
                "{link:?} v6 {v6}"
            );
        }
        // IPv4 as link type 228 (raw IPv4).
        let (packets, q, _) = exchange(&mut Flow::over(Link::Raw, false));
        let (events, _) = run(&[pcap(228, &packets)]);
        assert_eq!(events[0], msg(1, Request, ms(3), &q));
    }

    #[test]
    fn pcapng_interfaces_sections_and_time_resolutions() {
        let ns = |n: u64| T0_SECS * 1_000_000_000 + n;
        let mut a = Flow::new(40_001);
        let mut b = Flow::over(Link::Raw, false);
        b.client_port = 40_002;
        let (q1, r1, q2, r2) = (request(1, 0), reply(2, 1), request(3, 5), reply(4, 3));
        let hs = a.handshake();
        let mut file = shb();
        // Interface 0: Ethernet, nanoseconds. Interface 1: raw IP,
        // microseconds since an offset of T0.
        file.extend(idb(1, 9, 0));
        file.extend(idb(101, 6, T0_SECS as i64));
        for (i, p) in hs.iter().enumerate() {
            file.extend(epb(0, ns(i as u64), p));
        }
        file.extend(epb(0, ns(123_456_789), &a.send(Request, &q1)));
        // b joins the capture on its first message (no handshake).
        file.extend(epb(1, 500_000, &b.send(Request, &q2)));
        file.extend(epb(0, ns(987_654_321), &a.send(Reply, &r1)));
        // A simple packet: interface 0, the last packet's time.
        file.extend(spb(&a.fin(Request)));
        // A second section: interface 0 is now raw IP, milliseconds.
        file.extend(shb());
        file.extend(idb(101, 3, 0));
        file.extend(epb(0, T0_SECS * 1_000 + 2_000, &b.send(Reply, &r2)));
        let (events, account) = run(&[file]);
        assert_eq!(
            events,
            [
                msg(1, Request, Duration::from_nanos(123_456_789), &q1),
                msg(2, Request, ms(500), &q2),
                msg(1, Reply, Duration::from_nanos(987_654_321), &r1),
                msg(2, Reply, ms(2_000), &r2),
                closed(1),
                closed(2),
            ]
        );
        let mut want = super::tests::account(8, 2, &[&q1, &r1, &q2, &r2]);
        want.requests = 2;
        want.replies = 2;
        assert_eq!(account, want);
    }

    #[test]
    fn big_endian_nanosecond_pcap() {
        let (packets, q, r) = exchange(&mut Flow::new(40_001));
        // Written by hand: pcap-parser writes little endian only.
        let mut file = Vec::new();
        file.extend(0xa1b2_3c4du32.to_be_bytes());
        file.extend(2u16.to_be_bytes());
        file.extend(4u16.to_be_bytes());
        file.extend([0; 8]);
        file.extend(65_535u32.to_be_bytes());
        file.extend(1u32.to_be_bytes());
        for (i, p) in packets.iter().enumerate() {
            file.extend((T0_SECS as u32).to_be_bytes());
            file.extend((i as u32 * 7).to_be_bytes());
            file.extend((p.len() as u32).to_be_bytes());
            file.extend((p.len() as u32).to_be_bytes());
            file.extend(p);
        }
        let (events, _) = run(&[file]);
        assert_eq!(
            events,
            [
                msg(1, Request, Duration::from_nanos(21), &q),
                msg(1, Reply, Duration::from_nanos(28), &r),
                closed(1)
            ]
        );
    }

    #[test]
    fn messages_split_over_segments_and_batched_in_one() {
        let mut f = Flow::new(40_001);
        let (q1, r1) = (request(1, 1_000), reply(2, 1));
        let (q2, q3, q4) = (request(3, 1), request(4, 2), request(5, 3));
        let mut p = f.handshake();
        p.extend(f.chunks(Request, &q1, 150));
        let t_q1 = p.len() - 1;
        p.push(f.send(Reply, &r1));
        let t_r1 = p.len() - 1;
        let mut batch = [&q2[..], &q3[..], &q4[..10]].concat();
        p.push(f.send(Request, &batch));
        let t_batch = p.len() - 1;
        batch = q4[10..].to_vec();
        p.push(f.send(Request, &batch));
        let t_q4 = p.len() - 1;
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert!(q1.len() > 6 * 150);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(t_q1), &q1),
                msg(1, Reply, ms(t_r1), &r1),
                msg(1, Request, ms(t_batch), &q2),
                msg(1, Request, ms(t_batch), &q3),
                msg(1, Request, ms(t_q4), &q4),
                closed(1),
            ]
        );
        let mut want = super::tests::account(p.len(), 1, &[&q1, &r1, &q2, &q3, &q4]);
        want.requests = 4;
        want.replies = 1;
        assert_eq!(account, want);
    }

    #[test]
    fn reordered_segments_are_put_back_in_order() {
        let mut f = Flow::new(40_001);
        let (q1, q2, r) = (request(1, 300), request(2, 500), reply(3, 2));
        let mut p = f.handshake();
        let s = f.chunks(Request, &q1, q1.len().div_ceil(3));
        assert_eq!(s.len(), 3);
        p.extend([s[0].clone(), s[2].clone(), s[1].clone()]);
        let t_q1 = p.len() - 1;
        let s = f.chunks(Request, &q2, q2.len().div_ceil(4));
        assert_eq!(s.len(), 4);
        p.extend([s[0].clone(), s[3].clone(), s[2].clone(), s[1].clone()]);
        let t_q2 = p.len() - 1;
        p.push(f.send(Reply, &r));
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(t_q1), &q1),
                msg(1, Request, ms(t_q2), &q2),
                msg(1, Reply, ms(t_q2 + 1), &r),
                closed(1),
            ]
        );
        let mut want = super::tests::account(p.len(), 1, &[&q1, &q2, &r]);
        want.requests = 2;
        want.replies = 1;
        want.reordered_segments = 3;
        assert_eq!(account, want);
    }

    #[test]
    fn retransmissions_are_dropped_and_overlaps_trimmed() {
        let mut f = Flow::new(40_001);
        let (q, r) = (request(1, 600), reply(2, 1));
        let mut p = f.handshake();
        let start = f.seq[0];
        let c = q.len().div_ceil(3);
        let h = c / 2;
        let s = f.chunks(Request, &q, c);
        // s1, s1 again, s2, a segment from the middle of s2 to the middle
        // of s3, s3.
        let overlap = f.packet(
            Request,
            start.wrapping_add((c + h) as u32),
            f.flags(Request),
            &q[c + h..2 * c + h],
        );
        p.extend([
            s[0].clone(),
            s[0].clone(),
            s[1].clone(),
            overlap,
            s[2].clone(),
        ]);
        let t_q = p.len() - 1;
        let reply_packet = f.send(Reply, &r);
        p.extend([reply_packet.clone(), reply_packet]);
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(t_q), &q),
                msg(1, Reply, ms(t_q + 1), &r),
                closed(1)
            ]
        );
        let mut want = super::tests::account(p.len(), 1, &[&q, &r]);
        want.requests = 1;
        want.replies = 1;
        want.retransmitted_bytes = (c + (c - h) + h + r.len()) as u64;
        assert_eq!(account, want);
    }

    #[test]
    fn a_segment_the_capture_missed_loses_its_message_only() {
        let mut f = Flow::new(40_001);
        let (q1, q2, r1, r2) = (request(1, 600), request(2, 0), reply(3, 1), reply(4, 2));
        let mut p = f.handshake();
        let s = f.chunks(Request, &q1, q1.len().div_ceil(3));
        p.extend([s[0].clone(), s[2].clone()]);
        p.push(f.send(Request, &q2));
        // The server acknowledges all: the capture missed s2.
        p.push(f.send(Reply, &r1));
        let t_r1 = p.len() - 1;
        p.push(f.send(Reply, &r2));
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(t_r1), &q2),
                msg(1, Reply, ms(t_r1), &r1),
                msg(1, Reply, ms(t_r1 + 1), &r2),
                closed(1),
            ]
        );
        let mut want = super::tests::account(p.len(), 1, &[&q2, &r1, &r2]);
        want.requests = 1;
        want.replies = 2;
        want.gaps = 1;
        want.bytes_lost = q1.len() as u64;
        want.messages_lost = 1;
        assert_eq!(account, want);
        assert_eq!(
            account.describe(),
            [format!(
                "1 gap in TCP streams: {} bytes lost, 1 message (segments the capture missed)",
                q1.len()
            )]
        );
    }

    #[test]
    fn a_missed_last_segment_is_a_gap_once_later_bytes_are_acknowledged() {
        let mut f = Flow::new(40_001);
        let (q1, q2, r1, r2) = (request(1, 600), request(2, 0), reply(3, 1), reply(4, 2));
        let mut p = f.handshake();
        let s = f.chunks(Request, &q1, q1.len().div_ceil(2));
        p.push(s[0].clone());
        // The acknowledgment of the missed segment alone declares nothing.
        p.push(f.send(Reply, &r1));
        let t_r1 = p.len() - 1;
        p.push(f.send(Request, &q2));
        p.push(f.send(Reply, &r2));
        let t_r2 = p.len() - 1;
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(1, Reply, ms(t_r1), &r1),
                msg(1, Request, ms(t_r2), &q2),
                msg(1, Reply, ms(t_r2), &r2),
                closed(1),
            ]
        );
        assert_eq!(
            (account.gaps, account.bytes_lost, account.messages_lost),
            (1, q1.len() as u64, 1)
        );
    }

    #[test]
    fn duplicates_of_a_syn_and_of_a_held_segment_change_nothing() {
        let mut f = Flow::new(40_001);
        let (q, r) = (request(1, 300), reply(2, 1));
        let mut p = f.handshake();
        p.insert(1, p[0].clone());
        let s = f.chunks(Request, &q, q.len().div_ceil(3));
        p.extend([s[0].clone(), s[2].clone(), s[2].clone(), s[1].clone()]);
        let t_q = p.len() - 1;
        p.push(f.send(Reply, &r));
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(t_q), &q),
                msg(1, Reply, ms(t_q + 1), &r),
                closed(1)
            ]
        );
        let mut want = super::tests::account(p.len(), 1, &[&q, &r]);
        want.requests = 1;
        want.replies = 1;
        want.retransmitted_bytes = (q.len() - 2 * q.len().div_ceil(3)) as u64;
        want.reordered_segments = 1;
        assert_eq!(account, want);
    }

    #[test]
    fn a_connection_carries_on_into_the_next_capture() {
        let (packets, q, r) = exchange(&mut Flow::new(40_001));
        let files = [pcap(1, &packets[..4]), pcap_from(1, 4, &packets[4..])];
        let (events, account) = run(&files);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(3), &q),
                msg(1, Reply, ms(4), &r),
                closed(1)
            ]
        );
        assert_eq!((account.captures, account.connections), (2, 1));
    }

    #[test]
    fn too_much_held_past_a_hole_makes_it_a_gap() {
        let mut f = Flow::new(40_001);
        let (q1, q2) = (request(1, 600), request(2, 0));
        let mut p = f.handshake();
        let s = f.chunks(Request, &q1, q1.len().div_ceil(3));
        p.extend([s[0].clone(), s[2].clone()]);
        p.push(f.send(Request, &q2));
        let t_q2 = p.len() - 1;
        let mut reader = Reader::new(ReaderSettings {
            max_out_of_order: 100,
            ..ReaderSettings::default()
        });
        reader.connections.max_connections = 10;
        let (events, account) = run_with(reader, &[pcap(1, &p)]);
        assert_eq!(events, [msg(1, Request, ms(t_q2), &q2), closed(1)]);
        assert_eq!(
            (account.gaps, account.bytes_lost, account.messages_lost),
            (1, q1.len() as u64, 1)
        );
    }

    #[test]
    fn a_short_snaplen_cuts_messages() {
        let mut f = Flow::new(40_001);
        let (q1, q2, r2) = (request(1, 600), request(2, 0), reply(3, 2));
        let mut p = f.handshake();
        p.push(f.send(Request, &q1));
        p.push(f.send(Request, &q2));
        p.push(f.send(Reply, &r2));
        p.extend(f.close());
        let snaplen = 200;
        let records: Vec<_> = p
            .iter()
            .enumerate()
            .map(|(i, p)| (ms(i), p[..p.len().min(snaplen)].to_vec(), p.len()))
            .collect();
        assert!(p.iter().filter(|p| p.len() > snaplen).count() == 1);
        let (events, account) = run(&[pcap_records(1, snaplen as u32, &records)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(4), &q2),
                msg(1, Reply, ms(5), &r2),
                closed(1)
            ]
        );
        let mut want = super::tests::account(p.len(), 1, &[&q2, &r2]);
        want.requests = 1;
        want.replies = 1;
        want.truncated_packets = 1;
        want.gaps = 1;
        want.bytes_lost = q1.len() as u64;
        want.messages_lost = 1;
        assert_eq!(account, want);
        assert!(account.describe()[0]
            .ends_with("(1 packet cut short by the snaplen: capture with -s 0)"));
    }

    #[test]
    fn tls_connections_are_counted_beside_plain_ones() {
        let mut tls = Flow::new(40_001);
        let mut plain = Flow::new(40_002);
        let (q, r) = (request(1, 0), reply(2, 1));
        let mut p = tls.handshake();
        p.extend(plain.handshake());
        p.push(tls.send(Request, &[0x16, 0x03, 0x01, 0x00, 0x04, 1, 2, 3, 4]));
        p.push(plain.send(Request, &q));
        let t_q = p.len() - 1;
        p.push(tls.send(Reply, &[0x16, 0x03, 0x03, 0x00, 0x02, 5, 6]));
        p.push(plain.send(Reply, &r));
        let t_r = p.len() - 1;
        p.push(tls.send(Request, &[0x17, 0x03, 0x03, 0x00, 0x01, 7]));
        p.extend(tls.close());
        p.extend(plain.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(2, Request, ms(t_q), &q),
                msg(2, Reply, ms(t_r), &r),
                closed(1),
                closed(2),
            ]
        );
        let mut want = super::tests::account(p.len(), 2, &[&q, &r]);
        want.requests = 1;
        want.replies = 1;
        want.tls_connections = 1;
        assert_eq!(account, want);
        assert_eq!(
            account.describe(),
            ["1 connection used TLS: its traffic cannot be read (capture between wirelint and the server, or in front of a server without TLS)"]
        );
    }

    #[test]
    fn a_stream_that_is_not_the_wire_protocol_is_skipped() {
        let mut f = Flow::new(40_001);
        let mut p = f.handshake();
        p.push(f.send(Request, b"GET / HTTP/1.1\r\nHost: db\r\n\r\n"));
        p.push(f.send(Reply, b"HTTP/1.1 400 Bad Request\r\n\r\n"));
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(events, [closed(1)]);
        let mut want = super::tests::account(p.len(), 1, &[]);
        want.not_wire_protocol = 1;
        assert_eq!(account, want);
    }

    #[test]
    fn a_capture_that_joins_a_connection_reads_from_the_next_message() {
        let mut f = Flow::new(40_001);
        let (q0, q1, r1) = (request(1, 300), request(2, 0), reply(3, 2));
        let tail = &q0[100..];
        let mut p = vec![f.send(Request, tail)];
        p.push(f.send(Request, &q1));
        p.push(f.send(Reply, &r1));
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(1), &q1),
                msg(1, Reply, ms(2), &r1),
                closed(1)
            ]
        );
        let mut want = super::tests::account(p.len(), 1, &[&q1, &r1]);
        want.requests = 1;
        want.replies = 1;
        want.bytes_lost = tail.len() as u64;
        want.messages_lost = 1;
        assert_eq!(account, want);
        assert_eq!(
            account.describe(),
            [format!(
                "{} bytes lost, 1 message: cut by the start or the end of the capture (connections open when it began or ended)",
                tail.len()
            )]
        );
    }

    #[test]
    fn sequence_numbers_wrap_around() {
        let mut f = Flow::new(40_001);
        f.seq = [u32::MAX - 100, u32::MAX - 20];
        let (q, r) = (request(1, 500), reply(2, 1));
        let mut p = f.handshake();
        let s = f.chunks(Request, &q, 150);
        assert_eq!(s.len(), 4);
        p.extend([s[0].clone(), s[2].clone(), s[1].clone(), s[3].clone()]);
        let t_q = p.len() - 1;
        p.extend(f.chunks(Reply, &r, 30));
        let t_r = p.len() - 1;
        p.extend(f.close());
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(t_q), &q),
                msg(1, Reply, ms(t_r), &r),
                closed(1)
            ]
        );
        assert_eq!((account.reordered_segments, account.gaps), (1, 0));
    }

    #[test]
    fn a_file_that_is_not_a_capture_is_named() {
        let mut reader = Reader::new(ReaderSettings::default());
        for bytes in [
            &b"{\"not\": \"a capture\"}"[..],
            b"",
            b"\x0a\x0d\x0d\x0a garbage",
        ] {
            let err = reader
                .read(bytes, "notes.json", &mut |_| {})
                .unwrap_err()
                .to_string();
            assert_eq!(err, "notes.json is not a pcap or pcapng capture");
        }
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pcap");
        let err = reader.read_file(&missing, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("missing.pcap"), "{err}");
    }

    #[test]
    fn a_capture_cut_short_keeps_what_was_whole() {
        let (packets, q, _) = exchange(&mut Flow::new(40_001));
        let whole = pcap(1, &packets);
        let upto_request = pcap(1, &packets[..4]).len();
        let cut = whole[..upto_request + 30].to_vec();
        let (events, account) = run(&[cut]);
        assert_eq!(events, [msg(1, Request, ms(3), &q), closed(1)]);
        let mut want = super::tests::account(4, 1, &[&q]);
        want.requests = 1;
        want.truncated_captures = 1;
        assert_eq!(account, want);
        // Cut inside the header, and inside a pcapng block.
        let (_, account) = run(&[whole[..10].to_vec()]);
        assert_eq!(account.truncated_captures, 1);
        let mut ng = shb();
        ng.extend(idb(1, 6, 0));
        ng.extend(epb(0, 0, &packets[0]));
        let (_, account) = run(&[ng[..ng.len() - 7].to_vec()]);
        assert_eq!((account.truncated_captures, account.packets), (1, 0));
    }

    #[test]
    fn captures_read_one_after_another_keep_ids_unique() {
        let mut f = Flow::new(40_001);
        let (first, q1, r1) = exchange(&mut f);
        // The same ports again: a new SYN, a new connection.
        f.seq = [77_000, 88_000];
        let (second, q2, r2) = exchange(&mut f);
        let mut other = Flow::new(40_002);
        let (third, q3, r3) = exchange(&mut other);
        let files = [
            pcap(1, &first),
            pcap_from(1, 10_000, &second),
            pcap_from(1, 20_000, &third),
        ];
        let (events, account) = run(&files);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(3), &q1),
                msg(1, Reply, ms(4), &r1),
                closed(1),
                msg(2, Request, ms(10_003), &q2),
                msg(2, Reply, ms(10_004), &r2),
                closed(2),
                msg(3, Request, ms(20_003), &q3),
                msg(3, Reply, ms(20_004), &r3),
                closed(3),
            ]
        );
        assert_eq!((account.captures, account.connections), (3, 3));
        assert_eq!((account.requests, account.replies), (3, 3));
    }

    #[test]
    fn only_server_ports_are_read() {
        let mut postgres = Flow::new(40_001);
        postgres.server_port = 5432;
        let (mut p, _, _) = exchange(&mut postgres);
        // Both ends on server ports: neither is known to be the client.
        let mut both = Flow::new(27_017);
        both.server_port = 10_255;
        p.extend(exchange(&mut both).0);
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(events, []);
        let mut want = super::tests::account(p.len(), 0, &[]);
        want.packets_skipped = p.len() as u64;
        assert_eq!(account, want);
        // With 5432 a server port, the first is read.
        let reader = Reader::new(ReaderSettings {
            server_ports: vec![5432],
            ..ReaderSettings::default()
        });
        let (events, account) = run_with(reader, &[pcap(1, &p)]);
        assert_eq!(events.len(), 3);
        assert_eq!(account.packets_skipped, 8);
    }

    #[test]
    fn unsupported_link_types_are_named() {
        let (packets, _, _) = exchange(&mut Flow::new(40_001));
        let (events, account) = run(&[pcap(147, &packets), pcap(1, &packets[..0])]);
        assert_eq!(events, []);
        assert_eq!(account.unsupported_link_types, [147]);
        assert_eq!(account.packets_skipped, 8);
        assert_eq!(
            account.describe(),
            ["link type 147 cannot be read: its packets were skipped (Ethernet, Linux cooked, BSD loopback and raw IP can)"]
        );
    }

    #[test]
    fn a_reset_closes_and_a_message_half_read_is_lost() {
        let mut f = Flow::new(40_001);
        let q = request(1, 300);
        let mut p = f.handshake();
        p.push(f.send(Request, &q[..100]));
        let rst = Flags {
            rst: true,
            ..Flags::default()
        };
        p.push(f.packet(Reply, f.seq[1], rst, &[]));
        // After the reset: remembered as closed, nothing new opened.
        p.push(f.send(Request, &q[100..]));
        let (events, account) = run(&[pcap(1, &p)]);
        assert_eq!(events, [closed(1)]);
        assert_eq!(
            (
                account.connections,
                account.messages_lost,
                account.bytes_lost
            ),
            (1, 1, 100)
        );
    }

    #[test]
    fn the_least_recently_active_connection_is_closed_past_the_bound() {
        let mut reader = Reader::new(ReaderSettings::default());
        reader.connections.max_connections = 2;
        let mut flows: Vec<Flow> = (0..3).map(|i| Flow::new(40_001 + i)).collect();
        let q = request(1, 0);
        let p: Vec<Vec<u8>> = flows.iter_mut().map(|f| f.send(Request, &q)).collect();
        let (events, account) = run_with(reader, &[pcap(1, &p)]);
        assert_eq!(
            events,
            [
                msg(1, Request, ms(0), &q),
                msg(2, Request, ms(1), &q),
                closed(1),
                msg(3, Request, ms(2), &q),
                closed(2),
                closed(3),
            ]
        );
        assert_eq!(account.connections, 3);
    }

    #[test]
    fn the_account_is_told_in_plain_words() {
        let account = Account {
            unsupported_link_types: vec![147, 195],
            truncated_captures: 1,
            tls_connections: 2,
            not_wire_protocol: 1,
            gaps: 3,
            bytes_lost: 1_234,
            messages_lost: 2,
            truncated_packets: 5,
            ..Account::default()
        };
        assert_eq!(
            account.describe(),
            [
                "link types 147, 195 cannot be read: their packets were skipped (Ethernet, Linux cooked, BSD loopback and raw IP can)",
                "1 capture ends inside a packet record (the file was cut short): what came before was read",
                "2 connections used TLS: their traffic cannot be read (capture between wirelint and the server, or in front of a server without TLS)",
                "1 connection to a server port did not speak the MongoDB wire protocol: skipped",
                "3 gaps in TCP streams: 1,234 bytes lost, 2 messages (5 packets cut short by the snaplen: capture with -s 0)",
            ]
        );
        let account = Account {
            truncated_packets: 1,
            ..Account::default()
        };
        assert_eq!(
            account.describe(),
            ["1 packet cut short by the snaplen (capture with -s 0)"]
        );
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_234), "1,234");
        assert_eq!(grouped(12_345_678), "12,345,678");
    }

    /// xorshift64*: reproducible noise.
    struct Noise(u64);

    impl Noise {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }

        /// Up to `max` bytes of noise.
        fn some(&mut self, max: usize) -> Vec<u8> {
            let n = self.below(max);
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
        let (packets, _, _) = exchange(&mut Flow::new(40_001));
        let mut ng = shb();
        ng.extend(idb(1, 9, 0));
        for p in &packets {
            ng.extend(epb(0, 5, p));
        }
        let good = [pcap(1, &packets), ng];
        // Whole files: noise, noise behind a header, captures with bytes
        // changed and cut.
        for round in 0..1_000 {
            let file = match round % 4 {
                0 => noise.some(300),
                1 => {
                    let mut f = good[0][..24].to_vec();
                    f.extend(noise.some(400));
                    f
                }
                _ => {
                    let mut f = good[round % 2].clone();
                    for _ in 0..1 + noise.below(8) {
                        let i = noise.below(f.len());
                        f[i] = noise.next() as u8;
                    }
                    let keep = f.len() - noise.below(f.len() / 4);
                    f.truncate(keep);
                    f
                }
            };
            let mut reader = Reader::new(ReaderSettings::default());
            let _ = reader.read(&file[..], "noise", &mut |_| {});
            reader.finish(&mut |_| {});
        }
        // Packets: noise for every link type, and TCP segments of a few
        // connections with random sequence numbers, flags and payloads
        // (parts of messages, headers, noise).
        let mut reader = Reader::new(ReaderSettings {
            max_out_of_order: 2_000,
            ..ReaderSettings::default()
        });
        reader.connections.max_connections = 3;
        let mut out = |_| {};
        for linktype in [0, 1, 12, 14, 101, 108, 113, 147, 228, 229, 276] {
            for _ in 0..300 {
                let data = noise.some(120);
                reader.packet(linktype, Some(0), &data, noise.next() as u32, &mut out);
            }
        }
        let messages = [request(1, 0), request(2, 2_000), reply(3, 1)];
        let mut flows: Vec<Flow> = (0..4)
            .map(|i| Flow::over([Link::Ethernet, Link::Sll2][i % 2], i % 3 == 0))
            .collect();
        for (i, f) in flows.iter_mut().enumerate() {
            f.client_port = 40_001 + i as u16;
        }
        for t in 0..20_000 {
            let f = &flows[noise.below(flows.len())];
            let side = if noise.next() % 2 == 0 {
                Request
            } else {
                Reply
            };
            let message = &messages[noise.below(messages.len())];
            let from = noise.below(message.len());
            let to = (from + noise.below(1_500)).min(message.len());
            let payload = match noise.below(4) {
                0 => noise.some(64),
                1 => Vec::new(),
                _ => message[from..to].to_vec(),
            };
            let bits = noise.next();
            let flags = Flags {
                syn: bits & 0x1f == 0,
                fin: bits & 0x3e0 == 0,
                rst: bits & 0x7c00 == 0,
                ack: (bits & 0x8000 != 0)
                    .then(|| f.seq[1 - side.index()].wrapping_add(noise.below(5_000) as u32)),
            };
            let seq = f.seq[side.index()].wrapping_add(noise.below(6_000) as u32);
            let mut data = f.packet(side, seq, flags, &payload);
            let origlen = data.len() as u32;
            if noise.below(10) == 0 {
                let keep = noise.below(data.len());
                data.truncate(keep);
            }
            let linktype = linktype(f.link, f.v6);
            reader.packet(linktype, Some(t), &data, origlen, &mut out);
        }
        let account = reader.finish(&mut out);
        assert_eq!(account.packets, 11 * 300 + 20_000);
    }
}
