//! The engine: from decoded messages to patterns, state and findings.
//!
//! One engine per analysis worker holds the per-connection state (requests
//! awaiting replies, the invocation in progress); what is learnt about the
//! application — patterns, shapes, namespaces, findings — is shared by all
//! workers in [`Knowledge`], behind one mutex that only the workers lock
//! per message (readers: reports, the admin endpoints).
//!
//! This file takes the messages in and pairs replies with requests; its
//! parts, in the order a message meets them: `parsed` (a request parsed
//! once, what a reply says), `connection` (what is kept per connection),
//! `accepted` (an operation the server accepted: placed in its request,
//! counted, shown to the request hooks), `observe` (the documents it
//! returned or wrote, the document and operation hooks) and `cost` (the
//! analysis's time per pattern).

mod accepted;
mod connection;
mod cost;
mod observe;
mod parsed;

use accepted::count_throttled;
use parsed::{slice_of, MaybeCommand, Outcome, Returned};
pub use parsed::{Decoded, ParsedRequest};

use connection::{fold_round_trip, ConnState, Pending, RoundTrip};
use observe::{data_namespace, observe_returned, operation_hooks, track_cursor};

use super::budget::{self, Lru, Pool};
use super::bursts::{self, Bursts};
use super::command::{Command, Kind, Reply, ReplyIndex};
use super::databases::Fold;
use super::findings::FindingEvent;
use super::follow_ups;
use super::knowledge::Knowledge;
use super::origin::{RequestOrigin, ShapeFacts};
use super::parent_walk;
use super::patterns::NamedBy;
use super::requests::{self, Requests};
use super::rule::{CompletedOp, Hooks, OpView};
use super::shape;
use crate::stats::Direction;
use crate::wire::{self, Message};
use bytes::Bytes;
use std::collections::HashMap;

/// A map keyed by what the traffic brings, hashed fast (see `namespaces::Lru`).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Requests remembered per connection while awaiting replies; beyond this
/// (a client that never reads its replies) the oldest are forgotten.
const MAX_PENDING: usize = 1024;
/// Requests unanswered this long, and connections silent this long with
/// nothing pending, are forgotten (see `Engine::forget_stale`).
const STALE: Duration = Duration::from_secs(600);
/// Shapes one request name may have; a comment found on more is a tag on
/// every operation of a service, not a request's name (the blogging
/// platform's requests have one to four).
const MAX_SHAPES_PER_NAME: usize = 32;
/// Shapes (with their comment) whose pattern, shape text and namespace an
/// engine keeps (see `Engine::origin_of`).
const MAX_ORIGINS: usize = 2048;

/// What an entry of `Engine::origins` holds: its shared strings (charged
/// whole although the knowledge store holds the same ones).
fn origin_weight(_: &(u64, u64), o: &RequestOrigin) -> usize {
    o.pattern.len()
        + o.shape.text.len()
        + o.namespace.len()
        + std::mem::size_of::<ShapeFacts>()
        + budget::ENTRY_OVERHEAD
}

pub struct Engine {
    conns: FastMap<u64, ConnState>,
    knowledge: Arc<Mutex<Knowledge>>,
    live: Option<fn(&FindingEvent)>,
    /// What per-connection state (requests awaiting replies, N+1 lists)
    /// is charged to: the knowledge store's connections pool.
    pool: Arc<Pool>,
    /// The calls each invocation of the current message stands for: 1,
    /// or more when its connection was sampled among others left out
    /// (worked out from `keep`, the slots analysed, when it changes).
    weight: u64,
    keep: u8,
    /// Data requests' origins by (shape id, comment hash).
    origins: Lru<(u64, u64), RequestOrigin>,
    /// Distinct shapes seen per comment (hash), to tell a request's name
    /// from a tag on every operation of a service.
    comment_shapes: Lru<u64, usize>,
    /// The application's requests in progress (see `requests`).
    requests: Requests,
    /// Reads of one shape sent at once (see `bursts`), charged to the
    /// connections pool at their most.
    bursts: Bursts,
    _bursts_charge: budget::Charge,
    /// How database names are folded (see `databases`).
    fold: Arc<Fold>,
    /// What each pattern's messages cost the analysis (see `cost`).
    costs: cost::Costs,
    /// Whether hellos are paired with their replies: until the platform
    /// is set or detected (see `Knowledge::wants_hello`).
    hello_wanted: bool,
}

/// The highest sampling level: one connection in 64 analysed.
pub const MAX_SAMPLING_LEVEL: u8 = 6;
/// The slots a connection's hash falls in when connections are sampled:
/// some of them are analysed (see `sampling`).
pub const KEEP_ALL: u8 = 1 << MAX_SAMPLING_LEVEL;

impl Engine {
    pub fn new(knowledge: Arc<Mutex<Knowledge>>, live: Option<fn(&FindingEvent)>) -> Engine {
        let (pool, fold) = {
            let k = lock(&knowledge);
            (k.pools.connections.clone(), k.databases.fold.clone())
        };
        Engine {
            fold,
            conns: FastMap::default(),
            knowledge,
            live,
            origins: Lru::in_pool(MAX_ORIGINS, pool.clone(), origin_weight),
            requests: Requests::new(pool.clone()),
            bursts: Bursts::default(),
            _bursts_charge: budget::Charge::new(&pool, Bursts::most_bytes()),
            comment_shapes: Lru::in_pool(MAX_ORIGINS, pool.clone(), budget::fixed),
            pool,
            weight: 1,
            keep: KEEP_ALL,
            costs: cost::Costs::default(),
            hello_wanted: true,
        }
    }

    /// The sampling of the messages that follow: `keep` connections in
    /// 2^[`MAX_SAMPLING_LEVEL`] (64) are analysed, so each invocation seen
    /// stands for 64 / `keep`, rounded (a pattern's estimated calls).
    pub fn set_sampling(&mut self, keep: u8) {
        if keep == self.keep {
            return;
        }
        self.keep = keep;
        let all = u64::from(KEEP_ALL);
        let keep = u64::from(keep.max(1)).min(all);
        self.weight = (2 * all + keep) / (2 * keep);
    }

    fn emit(&self, events: Vec<FindingEvent>) {
        if let Some(live) = self.live {
            for e in &events {
                live(e);
            }
        }
    }

    /// One whole, uncompressed message, unchecked (a worker hands over
    /// what its decoding checked and parsed: [`decoded`](Self::decoded)).
    pub fn message(&mut self, conn: u64, direction: Direction, at: Instant, frame: Bytes) {
        let decoded = match direction {
            Direction::Request => Decoded::Request(ParsedRequest::decode(frame)),
            Direction::Reply => {
                let Ok(message) = Message::parse(&frame) else {
                    return;
                };
                let index = ReplyIndex::of(&message, &frame, false).ok().flatten();
                Decoded::Reply(frame, index)
            }
        };
        self.decoded(conn, at, decoded)
    }

    /// One message as the worker's decoding left it.
    pub fn decoded(&mut self, conn: u64, at: Instant, decoded: Decoded) {
        let began = Instant::now();
        match decoded {
            Decoded::Request(parsed) => self.request(conn, at, parsed),
            Decoded::Reply(frame, index) => self.reply(conn, at, &frame, index),
        }
        if self.costs.charge(began.elapsed()) {
            self.costs.add_to(&mut lock(&self.knowledge).patterns);
        }
    }

    fn request(&mut self, conn: u64, at: Instant, mut parsed: ParsedRequest) {
        if *self.fold != Fold::Off {
            let fold = &self.fold;
            parsed.with_dependent_mut(|_, c| {
                if let Some(c) = c {
                    c.fold_db(fold)
                }
            });
        }
        let Some(cmd) = parsed.command() else {
            return;
        };
        if cmd.kind == Kind::Sensitive {
            return;
        }
        let frame = parsed.borrow_owner();
        let Some(request_id) = wire::Header::parse(frame).map(|h| h.request_id) else {
            return;
        };
        let expects_reply = wire::frame::expects_reply(frame);
        match cmd.kind {
            Kind::GetMore => {
                let origin = cmd
                    .cursor_id()
                    .and_then(|id| lock(&self.knowledge).cursors.get(&id).cloned());
                self.remember(conn, request_id, Pending::new(at, parsed, origin, true));
            }
            Kind::ShardCollection | Kind::CustomAction if cmd.shard_key().is_some() => {
                // Learnt from the reply, if the server accepted it.
                self.remember(conn, request_id, Pending::new(at, parsed, None, false));
            }
            // What a collection's indexes are: learnt from the reply, if
            // the server accepted it (see `indexes`).
            _ if expects_reply && super::indexes::teaches(cmd) => {
                self.remember(conn, request_id, Pending::new(at, parsed, None, false));
            }
            // The handshake names the application: a test runner's
            // parallel workers are told apart by it (see `suite`).
            Kind::Hello => {
                let name = cmd
                    .get_document("client")
                    .and_then(|c| c.get_document("application").ok())
                    .and_then(|a| a.get_str("name").ok());
                if let Some(name) = name {
                    let state = self.conns.entry(conn).or_default();
                    state.app = super::suite::worker_key(name);
                    // Active: else the next sweep of idle connections
                    // (`forget_stale`) drops the name before the first
                    // operation comes.
                    state.last_activity = Some(at);
                }
                // Its reply names the platform, until one is known.
                if self.hello_wanted && expects_reply {
                    self.hello_wanted = lock(&self.knowledge).wants_hello();
                    if self.hello_wanted {
                        self.remember(conn, request_id, Pending::new(at, parsed, None, false));
                    }
                }
            }
            Kind::KillCursors => {
                let mut k = lock(&self.knowledge);
                for id in cmd.killed_cursors() {
                    k.cursors.remove(&id);
                }
            }
            // Learnt only once the server accepts it (see `reply`): a
            // request that fails, is refused or is never answered (w: 0
            // writes) changes no pattern, state or finding.
            kind if kind.is_data() && expects_reply => {
                let Some(origin) = self.origin_of(cmd) else {
                    return;
                };
                // A read's filter's values, hashed: what tells the reads of
                // one shape sent at once apart (their constants).
                let fields = match cmd.kind {
                    Kind::Find | Kind::Count | Kind::Distinct => {
                        cmd.filter().map(|f| bursts::fields_of(f.as_bytes()))
                    }
                    Kind::Aggregate => match cmd.first_match() {
                        Some(m) => Some(bursts::fields_of(m.as_bytes())),
                        None => cmd.pipeline().map(|p| smallvec::smallvec![shape::fnv1a(p)]),
                    },
                    _ => None,
                };
                let mut origin = origin;
                origin.values = fields.as_ref().map_or(0, |f| {
                    f.iter().fold(shape::FNV1A_START, |h, v| {
                        (h ^ v).wrapping_mul(0x0100_0000_01b3)
                    })
                });
                let burst = fields.map(|f| self.bursts.sent(origin.shape.hash, f));
                let mut pending = Pending::new(at, parsed, Some(origin), false);
                pending.learn = true;
                pending.burst = burst;
                self.remember(conn, request_id, pending);
            }
            _ => {}
        }
    }

    /// A data request's pattern, shape and namespace. What its shape
    /// determines is kept per shape (and comment): a request of a shape
    /// seen before costs one walk of its keys, hashing, and no allocation.
    fn origin_of(&mut self, cmd: &Command<'_>) -> Option<RequestOrigin> {
        let comment = cmd.comment().filter(|c| !c.is_empty());
        let comment_hash = comment.map_or(0, |c| shape::fnv1a(c.as_bytes()));
        let key = (shape::hash_of_command(cmd), comment_hash);
        if cmd.kind != Kind::BulkWrite {
            if let Some(known) = self.origins.get_mut_refreshed(&key) {
                return Some(known.clone());
            }
        }
        // A comment names the request unless it only carries context (a
        // trace, the service's name: see `requests::name_of`), or it is
        // found on more shapes than any request has (the same tag on every
        // operation of a service).
        let name = comment
            .filter(|_| !self.service_tag(comment_hash, key))
            .and_then(requests::name_of);
        let make = || -> Option<RequestOrigin> {
            let namespace = data_namespace(cmd)?;
            let shape = shape::of_command(cmd);
            let (pattern, named_by) = match name {
                Some(n) => (Arc::from(n), NamedBy::Comment),
                None => (shape.text.clone(), NamedBy::Shape),
            };
            Some(RequestOrigin::new(ShapeFacts {
                pattern,
                named_by,
                shape,
                namespace: Arc::from(namespace),
                whole: cmd.returns_stored_documents(),
                list: follow_ups::is_list_read(cmd),
                by_id: cmd.kind == Kind::Find
                    && cmd
                        .filter()
                        .is_some_and(|f| crate::analysis::partition::pins_by_equality(f, "_id")),
                priced: Default::default(),
            }))
        };
        // bulkWrite's namespaces are not part of its shape.
        if cmd.kind == Kind::BulkWrite {
            return make();
        }
        let made = make()?;
        Some(self.origins.get_or_insert_with(&key, || made).clone())
    }

    /// Whether the comment hashed `comment` is a service-wide tag: seen on
    /// more shapes than [`MAX_SHAPES_PER_NAME`]. Called once per new
    /// (shape, comment): it counts the shape, and when the comment crosses
    /// the line, forgets the origins made with it as a name.
    fn service_tag(&mut self, comment: u64, key: (u64, u64)) -> bool {
        let shapes = self.comment_shapes.get_or_insert_with(&comment, || 0);
        *shapes += 1;
        let crossed = *shapes == MAX_SHAPES_PER_NAME + 1;
        let tag = *shapes > MAX_SHAPES_PER_NAME;
        if crossed {
            let named: Vec<(u64, u64)> = self
                .origins
                .iter()
                .map(|(k, _)| *k)
                .filter(|k| k.1 == comment && *k != key)
                .collect();
            for k in named {
                self.origins.remove(&k);
            }
        }
        tag
    }

    /// A reply, paired with the request it answers; for a data operation,
    /// these steps in order: learnt (if the server accepted it), completed
    /// (its cursor, the documents it returns, the rules' hooks), offered as
    /// the list an N+1 follows, and folded into the connection's
    /// invocation. An exhaust reply announces the next.
    fn reply(&mut self, conn: u64, at: Instant, frame: &Bytes, index: Option<ReplyIndex>) {
        let Some(header) = wire::Header::parse(frame) else {
            return;
        };
        let Some(mut pending) = self.pair(conn, at, header.response_to) else {
            return;
        };
        let more_to_come = wire::frame::more_to_come(frame);
        let latency = at.saturating_duration_since(pending.at).as_micros() as u64;
        let reply = index.and_then(|i| Reply::at(frame, &i));
        // Taken, not cloned: the request is done with once answered.
        let Some(mut origin) = pending.origin.take() else {
            match pending.request.command() {
                Some(c) if c.kind == Kind::Hello => self.learn_target(reply.as_ref()),
                Some(c) if super::indexes::is_about_indexes(c.kind) => {
                    if let Some(reply) = &reply {
                        lock(&self.knowledge).indexes.learn(c, reply);
                    }
                }
                _ => self.learn_partition_key(&pending, reply.as_ref()),
            }
            return;
        };
        self.costs.pattern = Some(origin.request_pattern().clone());
        let kind = pending.request.command().map(|c| c.kind);
        let outcome = Outcome::of(reply.as_ref(), kind == Some(Kind::Update));
        // A find: one level up a tree, when it reads the document the last
        // one read on the connection named (see `parent_walk::ParentWalk`).
        let find = pending.learn && kind == Some(Kind::Find);
        let walk = match (find, pending.request.command(), self.conns.get(&conn)) {
            (true, Some(cmd), Some(state)) => state.walk.step(cmd, &origin.namespace),
            _ => None,
        };
        let accepted = !pending.learn
            || self.learn_if_accepted(conn, &pending, &mut origin, &outcome, walk.as_ref());
        if let Some(id) = pending.burst {
            let followed = !accepted || origin.followed.is_some();
            if let Some(burst) = self.bursts.answered(id, followed) {
                lock(&self.knowledge).patterns.burst(&burst);
            }
        }
        if !accepted {
            return;
        }
        let returned = Returned::of(outcome.reply);
        let docs = returned.documents();
        let request_units = self.complete(&pending, &origin, &outcome, &returned, latency);
        if find {
            if let Some(state) = self.conns.get_mut(&conn) {
                state.walk.read(&origin.namespace, walk.as_ref(), docs);
            }
        }
        if let (Some(id), Some(_)) = (origin.request, &returned.cursor) {
            let cmd = pending.request.command();
            let list = origin.list;
            let result = pending.getmore
                || cmd.is_some_and(|c| {
                    c.kind == Kind::Find || (c.kind == Kind::Aggregate && origin.whole)
                });
            if result {
                let getmore = pending.getmore;
                // A list's filter, what it was selected by, as a slice of
                // the request's bytes (shared, hashed only if a query could
                // follow the list; a detail read's follow-ups are never per
                // element, so its filter is not kept).
                let request = pending.request.borrow_owner();
                let filter = cmd
                    .filter(|_| list && !getmore)
                    .and_then(|c| match c.kind {
                        Kind::Find => c.filter(),
                        _ => c.first_match(),
                    })
                    .and_then(|f| slice_of(request, f.as_bytes()));
                self.requests
                    .add_result(id, at, &origin, list, getmore, Some(frame), docs, filter);
            }
        }
        let trip = RoundTrip {
            latency_micros: latency,
            docs: docs.len() as u64,
            bytes: header.message_length.max(0) as u64,
            errors: outcome.errors,
            request_units,
        };
        fold_round_trip(&mut self.requests, &self.knowledge, &pending, &origin, trip);
        if more_to_come {
            // Exhaust: the next reply answers this one.
            let next = Pending {
                at,
                continuation: true,
                learn: false,
                origin: Some(origin),
                ..pending
            };
            self.remember(conn, header.request_id, next);
        }
    }

    /// The request a reply answers, no longer pending (the connection's
    /// activity noted). A reply with no request waiting is normal: most
    /// commands (hello, createIndexes, drop…) are not tracked for pairing.
    #[inline]
    fn pair(&mut self, conn: u64, at: Instant, response_to: i32) -> Option<Pending> {
        let state = self.conns.get_mut(&conn)?;
        let pending = state.take(response_to)?;
        state.last_activity = Some(at);
        Some(pending)
    }

    /// An answered operation, under one lock: its cursor remembered (or
    /// forgotten once exhausted), the stored documents it returns observed,
    /// and the rules' document and operation hooks run. Returns its
    /// estimated request units (0 unless the platform is priced in them).
    #[inline]
    fn complete(
        &self,
        pending: &Pending,
        origin: &RequestOrigin,
        outcome: &Outcome<'_>,
        returned: &Returned<'_>,
        latency_micros: u64,
    ) -> f64 {
        // The request again, for the rules' view of the operation.
        let cmd = pending.request.command();
        let docs = returned.documents();
        let mut request_units = 0.0;
        let events = {
            let mut k = lock(&self.knowledge);
            track_cursor(&mut k, returned.cursor.as_ref(), pending, origin);
            // Statements throttled in an accepted write (its writeErrors).
            count_throttled(
                &mut k,
                origin.request_pattern(),
                &outcome.errors,
                cmd,
                &origin.namespace,
            );
            // Priced before the returned documents are observed: what an
            // operation costs does not depend on what it brings back to
            // the collection's typical size.
            if k.target.target.request_units() {
                if let Some(cmd) = cmd {
                    request_units = price(&k, cmd, pending, origin, outcome, docs);
                    k.patterns.price_shape(origin.shape.hash, request_units);
                }
            }
            let stored = observe_returned(&mut k, origin, docs);
            match cmd {
                Some(cmd) => {
                    let view = OpView {
                        cmd,
                        namespace: &origin.namespace,
                        shape: &origin.shape,
                        pattern: origin.request_pattern(),
                        named_by: origin.request_named_by(),
                        partitioning: origin.partitioning,
                        follow_up: None,
                        request: origin.request,
                        context: false,
                        walk: None,
                    };
                    let done = CompletedOp {
                        op: &view,
                        latency_micros,
                        docs_returned: docs.len() as u64,
                        ok: outcome.ok,
                        matched: outcome.reply.and_then(|r| r.n()),
                    };
                    operation_hooks(&mut k, &done, &stored, origin.test)
                }
                None => Vec::new(),
            }
        };
        self.emit(events);
        request_units
    }

    /// Keeps a request until its reply comes, charging its bytes to the
    /// connections pool; when the pool is full the request is not kept
    /// (its reply will teach nothing) and counted as forgotten.
    fn remember(&mut self, conn: u64, request_id: i32, mut pending: Pending) {
        if let Some(origin) = &pending.origin {
            self.costs.pattern = Some(origin.request_pattern().clone());
        }
        let state = self.conns.entry(conn).or_default();
        state.last_activity = Some(pending.at);
        let mut forgotten = 0;
        if state.pending.len() >= MAX_PENDING {
            if let Some(oldest) = state
                .pending
                .iter()
                .min_by_key(|(_, p)| p.at)
                .map(|(id, _)| *id)
            {
                state.take(oldest);
                forgotten += 1;
            }
        }
        if self.pool.full() {
            forgotten += 1;
            self.pool.evicted();
        } else {
            // The frame, the decoded command beside it (self_cell boxes
            // both), and the map slot.
            let bytes = pending.request.borrow_owner().len()
                + std::mem::size_of::<(Bytes, MaybeCommand<'static>)>()
                + std::mem::size_of::<(i32, Pending)>()
                + pending.origin.as_ref().map_or(0, |o| {
                    o.pattern.len() + o.shape.text.len() + o.namespace.len()
                })
                + budget::ENTRY_OVERHEAD;
            pending.bytes = bytes;
            if state.hold(&self.pool, request_id, pending).is_some() {
                forgotten += 1;
            }
        }
        if forgotten > 0 {
            lock(&self.knowledge).forgotten_requests += forgotten;
        }
    }

    /// The connection closed: the requests rooted on it are complete.
    pub fn closed(&mut self, conn: u64) {
        if let Some(state) = self.conns.remove(&conn) {
            let unanswered = state.pending.len() as u64;
            let finished = self.requests.close_conn(conn);
            if unanswered > 0 || !finished.is_empty() {
                let mut k = lock(&self.knowledge);
                k.forgotten_requests += unanswered;
                for inv in &finished {
                    k.patterns
                        .commit_since(&inv.invocation, inv.counted.as_deref());
                }
            }
        }
    }

    /// Periodic: completes idle invocations, runs the rules' tick hooks.
    pub fn tick(&mut self, now: Instant) {
        self.forget_stale(now);
        for state in self.conns.values_mut() {
            state.settle();
        }
        // A result past its follow-up window holds no replies any more (a
        // getMore may still extend it, so it is indexed, not dropped).
        self.requests.index_stale(now);
        let conns = &self.conns;
        let done = self.requests.count_idle(now, |c| {
            conns.get(&c).is_some_and(|s| !s.pending.is_empty())
        });
        let events = {
            let mut k = lock(&self.knowledge);
            for inv in &done {
                k.patterns
                    .commit_since(&inv.invocation, inv.counted.as_deref());
            }
            self.costs.add_to(&mut k.patterns);
            k.with_rules(Hooks::TICK, |rule, cx| rule.on_tick(cx))
        };
        self.emit(events);
    }

    /// Bounds per-connection state in time, whatever happens to the
    /// `Closed` events (one can be lost when a queue is full): requests
    /// unanswered for [`STALE`] are forgotten (their replies, if any, count
    /// as unpaired), and a connection with nothing pending and no traffic
    /// for as long is dropped (its invocation committed).
    fn forget_stale(&mut self, now: Instant) {
        let stale = |t: Instant| now.saturating_duration_since(t) >= STALE;
        let mut finished = Vec::new();
        let mut forgotten = 0u64;
        self.conns.retain(|_, state| {
            let before = state.pending.len();
            state.retain(|p| !stale(p.at));
            forgotten += (before - state.pending.len()) as u64;
            let idle = state.last_activity.is_none_or(stale);
            !(idle && state.pending.is_empty())
        });
        let conns = &self.conns;
        finished.extend(self.requests.close_where_conn(|c| !conns.contains_key(&c)));
        if !finished.is_empty() || forgotten > 0 {
            let mut k = lock(&self.knowledge);
            k.forgotten_requests += forgotten;
            for inv in &finished {
                k.patterns
                    .commit_since(&inv.invocation, inv.counted.as_deref());
            }
        }
    }

    /// Completes every request and runs the rules' tick hooks once more
    /// (at shutdown, so reports are whole: a rule that judges patterns on
    /// ticks sees their last calls).
    pub fn flush(&mut self) {
        self.bursts.clear();
        let conns: Vec<u64> = self.conns.keys().copied().collect();
        for conn in conns {
            self.closed(conn);
        }
        let finished = self.requests.close_all();
        let events = {
            let mut k = lock(&self.knowledge);
            self.costs.add_to(&mut k.patterns);
            for inv in &finished {
                k.patterns
                    .commit_since(&inv.invocation, inv.counted.as_deref());
            }
            k.with_rules(Hooks::TICK, |rule, cx| rule.on_tick(cx))
        };
        self.emit(events);
    }
}

/// The estimated request units of an answered operation, from what the
/// knowledge store holds of its collection (see `request_units`).
fn price(
    k: &Knowledge,
    cmd: &Command<'_>,
    pending: &Pending,
    origin: &RequestOrigin,
    outcome: &Outcome<'_>,
    docs: &[&bson::RawDocument],
) -> f64 {
    use super::request_units as ru;
    let namespace = &*origin.namespace;
    let (state, collection, key) = (
        || k.namespaces.get(namespace),
        || k.request_units.collection(namespace),
        || k.partition_keys.get(namespace),
    );
    let known = ru::Known {
        state: ru::Lazy::new(&state),
        collection: ru::Lazy::new(&collection),
        key: ru::Lazy::new(&key),
        inserted: origin.inserted,
        modified: outcome.modified,
        shape: *origin.priced.get_or_init(|| ru::ShapePrice::of(cmd)),
    };
    ru::of_operation(
        cmd,
        outcome.reply,
        docs,
        pending.getmore,
        origin.partitioning,
        &known,
    )
}

fn lock(knowledge: &Mutex<Knowledge>) -> std::sync::MutexGuard<'_, Knowledge> {
    knowledge.lock().unwrap_or_else(|p| p.into_inner())
}

/// The real database of an operation whose namespace folds several (a
/// hash of its name), for the findings to count; None otherwise.
pub(super) fn folded_database(cmd: &Command<'_>) -> Option<u32> {
    cmd.folded_prefix()
        .map(|_| crate::analysis::hash::fnv1a(cmd.db.as_bytes()) as u32)
}
