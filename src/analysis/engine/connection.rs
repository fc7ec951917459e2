//! What an engine keeps per client connection: the requests awaiting
//! their replies (charged to the connections pool at their most) and the
//! latest application request (see `analysis::requests`) it served.

use super::ParsedRequest;
use super::{lock, FastMap};
use crate::analysis::budget::{Charge, Pool};
use crate::analysis::knowledge::Knowledge;
use crate::analysis::origin::RequestOrigin;
use crate::analysis::requests::Requests;
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
    /// The group of reads of its shape sent at once it belongs to (see
    /// `analysis::bursts`).
    pub(super) burst: Option<crate::analysis::bursts::Member>,
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
            burst: None,
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
    /// The application request its latest data operation joined.
    pub(super) current: Option<u64>,
    /// The tree it may be walking one parent at a time.
    pub(super) walk: crate::analysis::parent_walk::ParentWalk,
    pub(super) last_activity: Option<Instant>,
    /// The key of the application name its handshake gave (0: none): the
    /// test runner's worker it belongs to (see `suite`).
    pub(super) app: u64,
    /// The test a runner claimed it for (see `suite`), until its next claim.
    pub(super) claimed: Option<crate::analysis::suite::TestRef>,
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
}

/// Folds a round trip into the request its operation joined while it
/// is open; else (the request is complete) it is counted on its
/// pattern alone.
#[inline]
pub(super) fn fold_round_trip(
    requests: &mut Requests,
    knowledge: &Mutex<Knowledge>,
    pending: &Pending,
    origin: &RequestOrigin,
    trip: RoundTrip,
) {
    match origin.request.and_then(|id| requests.get_mut(id)) {
        Some(r) => {
            let inv = &mut r.invocation;
            if pending.getmore && !pending.continuation {
                inv.round_trips += 1;
            }
            inv.latency_micros += trip.latency_micros;
            inv.docs += trip.docs;
            inv.bytes += trip.bytes;
            inv.request_units += trip.request_units;
            inv.errors.extend(trip.errors);
        }
        None => lock(knowledge).patterns.add_round_trip(
            origin.request_pattern(),
            u64::from(!pending.continuation),
            trip.docs,
            trip.bytes,
            trip.request_units,
        ),
    }
}

/// One round trip of an operation, for its invocation: what it took and
/// what it brought back.
pub(super) struct RoundTrip {
    pub(super) latency_micros: u64,
    pub(super) docs: u64,
    pub(super) bytes: u64,
    pub(super) errors: Vec<i32>,
    /// Its estimated request units (0 unless the platform is priced in
    /// them).
    pub(super) request_units: f64,
}
