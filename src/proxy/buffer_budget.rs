//! The forwarding buffers' global budget (`--forward-memory`).
//!
//! A peer announces a message's length in its first four bytes, up to
//! 48 MB, long before it sends the rest. If every connection buffered what
//! it was announced, a few thousand clients could make the proxy hold far
//! more memory than the machine has. So a message larger than
//! [`READ_CHUNK`] is buffered only once its whole length is reserved here,
//! in [`BUDGET_UNIT`]s, and the reservation is given back when it has been
//! written on. A connection that cannot reserve waits — its peer's bytes
//! stay in the kernel, back-pressured by TCP — until others' large messages
//! are written; it holds nothing while it waits, so waiting cannot
//! deadlock. Messages up to [`READ_CHUNK`] (nearly all of them) never wait.
//! A message larger than the whole budget reserves all of it.
//!
//! [`READ_CHUNK`]: super::connection::READ_CHUNK

use crate::stats::Stats;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget all connections share (see the module's documentation).
pub struct BufferBudget {
    units: Arc<Semaphore>,
    total: u32,
}

/// What the buffer budget counts in.
const BUDGET_UNIT: usize = 64 * 1024;

impl BufferBudget {
    pub fn new(bytes: usize) -> BufferBudget {
        let total = (bytes / BUDGET_UNIT).clamp(1, Semaphore::MAX_PERMITS) as u32;
        BufferBudget {
            units: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    /// Reserves room for a message of `len` bytes, waiting for it if the
    /// budget is spent.
    pub(crate) async fn reserve(&self, len: usize, stats: &Arc<Stats>) -> Reservation {
        let units = (len.div_ceil(BUDGET_UNIT) as u32).min(self.total);
        let permit = match self.units.clone().try_acquire_many_owned(units) {
            Ok(p) => p,
            Err(_) => {
                stats.buffer_waits.fetch_add(1, Relaxed);
                self.units
                    .clone()
                    .acquire_many_owned(units)
                    .await
                    .expect("the budget's semaphore is never closed")
            }
        };
        let bytes = units as u64 * BUDGET_UNIT as u64;
        stats.buffer_bytes.fetch_add(bytes, Relaxed);
        Reservation {
            _permit: permit,
            bytes,
            stats: stats.clone(),
        }
    }
}

/// Room reserved for one large message; given back on drop (written on,
/// or the connection ended).
pub(crate) struct Reservation {
    _permit: OwnedSemaphorePermit,
    bytes: u64,
    stats: Arc<Stats>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.stats.buffer_bytes.fetch_sub(self.bytes, Relaxed);
    }
}
