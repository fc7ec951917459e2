//! Packet captures of MongoDB traffic: the proxy's own (`wirelint proxy
//! --capture FILE`, pcapng) and anybody's (tcpdump, Wireshark), read back
//! into the messages the analysis takes (`wirelint analyse FILE…`).
//!
//! - [`write`]: what the proxy forwards, as pcapng that Wireshark opens:
//!   each connection a TCP stream of its own (a SYN, the messages as
//!   segments, a FIN), written by a thread of its own behind a bounded
//!   queue, so forwarding never waits on the disk.
//! - [`read`]: pcap and pcapng (Ethernet, Linux cooked v1 and v2, BSD
//!   loopback and raw IP link types; IPv4 and IPv6), TCP reassembly per
//!   connection (retransmissions, out-of-order segments, gaps, a short
//!   snaplen), whole wire-protocol messages out, in the order each
//!   connection sent them, with an [`Account`] of what could not be read.
//!
//! Nothing here knows the analysis: `app` hands what [`read`] yields to
//! the same tap the proxy feeds.

pub mod read;
pub mod write;

pub use read::{Account, Reader, ReaderSettings};
pub use write::CaptureTap;

use crate::stats::Direction;
use bytes::Bytes;
use std::time::Duration;

/// The server ports `wirelint analyse` reads by default: MongoDB's and
/// Azure Cosmos DB for MongoDB's.
pub const DEFAULT_SERVER_PORTS: [u16; 2] = [27017, 10255];

/// What a capture yields, in capture order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// One whole wire-protocol message (header and body) of connection
    /// `conn`, read at `at` (since the capture's first packet).
    Message {
        conn: u64,
        direction: Direction,
        at: Duration,
        frame: Bytes,
    },
    /// Connection `conn` ended (a FIN or RST, or the end of the capture).
    Closed { conn: u64 },
}
