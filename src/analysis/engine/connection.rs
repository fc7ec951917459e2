//! What an engine keeps per client connection: the requests awaiting
//! their replies (charged to the connections pool at their most), the
//! invocation in progress, and the last list read, which an N+1
//! follow-up would link to.

use super::ParsedRequest;
use super::{lock, FastMap};
use crate::analysis::budget::{Charge, Pool};
use crate::analysis::follow_ups;
use crate::analysis::knowledge::{Knowledge, RequestOrigin};
use crate::analysis::patterns::Invocation;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A request waiting for its reply.
pub(super) struct Pending {
    pub(super) at: Instant,
    /// The (uncompressed) request, decoded.
    pub(super) request: ParsedRequest,
    pub(super) origin: Option<RequestOrigin>,
    pub(super) getmore: bool,
    /// A reply of an exhaust stream: it needed no request, so it is no
    /// round trip of its own.
    pub(super) continuation: bool,
    /// A data operation not learnt yet: its pattern, shape, state and rule
    /// hooks wait for a reply that says the server accepted it.
    pub(super) learn: bool,
    /// Its bytes (see `ConnState::hold`).
    pub(super) bytes: usize,
}

impl Pending {
    pub(super) fn new(
        at: Instant,
        request: ParsedRequest,
        origin: Option<RequestOrigin>,
        getmore: bool,
    ) -> Pending {
        Pending {
            at,
            request,
            origin,
            getmore,
            continuation: false,
            learn: false,
            bytes: 0,
        }
    }
}

#[derive(Default)]
pub(super) struct ConnState {
    /// Requests awaiting replies: put in by `hold`, taken out by `take`
    /// and `retain` (which keep `pending_bytes`).
    pub(super) pending: FastMap<i32, Pending>,
    /// The bytes of `pending`.
    pub(super) pending_bytes: usize,
    /// What `pending` is charged to the connections pool: the most its
    /// bytes have come to since the last tick found it empty. A request in
    /// the steady state (one answered, the next sent) charges nothing new;
    /// a charge per request was two atomic additions on a pool every worker
    /// shares, two subtractions and a reference count each way.
    pub(super) pending_charge: Option<Charge>,
    pub(super) current: Option<Invocation>,
    pub(super) last_activity: Option<Instant>,
    /// The last list read on this connection, for N+1 detection.
    pub(super) last_list: Option<ChargedListRead>,
    /// Whether the operation being learnt was linked to `last_list` as a
    /// follow-up (a follow-up returning a list does not replace the list
    /// it follows).
    pub(super) linked: bool,
}

impl ConnState {
    /// Keeps `pending` until its reply; returns the request it replaces.
    pub(super) fn hold(
        &mut self,
        pool: &Arc<Pool>,
        request_id: i32,
        pending: Pending,
    ) -> Option<Pending> {
        self.pending_bytes += pending.bytes;
        let replaced = self.pending.insert(request_id, pending);
        if let Some(r) = &replaced {
            self.pending_bytes -= r.bytes;
        }
        match &mut self.pending_charge {
            Some(c) if c.bytes() < self.pending_bytes => c.resize(self.pending_bytes),
            Some(_) => {}
            None => self.pending_charge = Some(Charge::new(pool, self.pending_bytes)),
        }
        replaced
    }

    /// The request `request_id` answers, no longer pending.
    pub(super) fn take(&mut self, request_id: i32) -> Option<Pending> {
        let taken = self.pending.remove(&request_id)?;
        self.pending_bytes -= taken.bytes;
        Some(taken)
    }

    /// Forgets the requests `keep` says no to.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Pending) -> bool) {
        self.pending.retain(|_, p| keep(p));
        self.pending_bytes = self.pending.values().map(|p| p.bytes).sum();
    }

    /// Gives the pending requests' charge back if none is left.
    pub(super) fn settle(&mut self) {
        if self.pending.is_empty() {
            self.pending_charge = None;
        }
    }

    /// Offers an answered read as the list an N+1 would follow: a list
    /// read's documents start one, its getMores' extend it (the whole
    /// cursor). A follow-up returning a list does not replace the list it
    /// follows.
    #[inline]
    pub(super) fn offer_list(
        &mut self,
        pool: &Arc<Pool>,
        at: Instant,
        pending: &Pending,
        origin: &RequestOrigin,
        batch: Option<&Bytes>,
        docs: &[&bson::RawDocument],
    ) {
        let extends = pending.getmore
            && self.last_list.as_ref().is_some_and(|l| {
                l.list.origin.shape.hash == origin.shape.hash
                    && l.list.origin.namespace == origin.namespace
            });
        if extends {
            if let Some(list) = self.last_list.as_mut() {
                list.add(pool, at, batch, docs);
            }
        } else if !pending.getmore
            && !std::mem::take(&mut self.linked)
            && !docs.is_empty()
            && pending
                .request
                .command()
                .is_some_and(|c| follow_ups::is_list_read(c))
            && !pool.full()
        {
            let mut list = ChargedListRead {
                _charge: Charge::new(pool, follow_ups::ListRead::max_bytes(origin)),
                list: follow_ups::ListRead::new(at, origin.clone()),
            };
            list.add(pool, at, batch, docs);
            self.last_list = Some(list);
        }
    }

    /// Folds a round trip into the invocation in progress when it is of
    /// the same pattern; else (the connection moved on) it is counted on
    /// its pattern alone.
    #[inline]
    pub(super) fn fold_round_trip(
        &mut self,
        knowledge: &Mutex<Knowledge>,
        pending: &Pending,
        pattern: &str,
        trip: RoundTrip,
    ) {
        match self.current.as_mut().filter(|inv| *inv.pattern == *pattern) {
            Some(inv) => {
                if pending.getmore && !pending.continuation {
                    inv.round_trips += 1;
                }
                inv.latency_micros += trip.latency_micros;
                inv.docs += trip.docs;
                inv.bytes += trip.bytes;
                inv.errors.extend(trip.errors);
            }
            None => lock(knowledge).patterns.add_round_trip(
                pattern,
                u64::from(!pending.continuation),
                trip.docs,
                trip.bytes,
            ),
        }
    }
}

/// One round trip of an operation, for its invocation: what it took and
/// what it brought back.
pub(super) struct RoundTrip {
    pub(super) latency_micros: u64,
    pub(super) docs: u64,
    pub(super) bytes: u64,
    pub(super) errors: Vec<i32>,
}

/// The last list read (see `follow_ups`), and its bytes, charged to the
/// connections pool until it goes.
pub(super) struct ChargedListRead {
    pub(super) list: follow_ups::ListRead,
    pub(super) _charge: Charge,
}

impl ChargedListRead {
    /// A batch of the list: its cursor reply held unindexed while the pool
    /// has room (its charge grows by the reply's bytes), else its
    /// documents indexed now.
    pub(super) fn add(
        &mut self,
        pool: &Arc<Pool>,
        at: Instant,
        reply: Option<&Bytes>,
        docs: &[&bson::RawDocument],
    ) {
        let held = reply.is_some_and(|r| !pool.full() && self.list.hold(at, r, docs.len()));
        if held {
            self.recharge();
        } else {
            self.list.add(at, docs);
        }
    }

    /// Hashes the replies it holds and gives their bytes back.
    pub(super) fn index_held(&mut self) {
        if self.list.held_bytes() > 0 {
            self.list.index_held();
            self.recharge();
        }
    }

    /// Charges what it holds now: its fixed part and the replies held.
    pub(super) fn recharge(&mut self) {
        let bytes = follow_ups::ListRead::max_bytes(&self.list.origin) + self.list.held_bytes();
        self._charge.resize(bytes);
    }
}
