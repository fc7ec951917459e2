//! What a session hands every forwarded message to. The proxy knows
//! nothing of what reads the traffic: the application puts the analysis
//! behind a [`Tap`], and forwarding alone runs with [`NoTap`]. The trait
//! lives apart from the listener so that the session, which calls it, and
//! the listener, which is given one, both depend on it and not on each
//! other.

use crate::stats::Direction;
use bytes::Bytes;
use std::time::Instant;

/// What a session hands every forwarded message to. Implementations must
/// return at once: they run on the forwarding path.
pub trait Tap: Send + Sync + 'static {
    /// Whether the tap wants messages at all (when not, sessions skip the
    /// hand-off and the copy it needs).
    fn enabled(&self) -> bool;
    /// One whole message, as forwarded (`at`: when the proxy read it): a
    /// slice of the read buffer, which the tap copies if it keeps the
    /// message for long.
    fn message(&self, conn: u64, direction: Direction, at: Instant, frame: Bytes);
    /// The connection ended.
    fn closed(&self, conn: u64);
}

/// A tap that takes nothing (forwarding only).
pub struct NoTap;

impl Tap for NoTap {
    fn enabled(&self) -> bool {
        false
    }
    fn message(&self, _: u64, _: Direction, _: Instant, _: Bytes) {}
    fn closed(&self, _: u64) {}
}
