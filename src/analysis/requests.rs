//! Requests rebuilt from the traffic: a root operation and the operations
//! that follow from it, as one call of the application's.
//!
//! - Where the application names its operations (`comment`), a request is
//!   the run of operations with that name on one connection, a new one
//!   starting when the run's first shape comes round again.
//! - Operations carrying one trace id (OP_MSG section kind 3, or a W3C
//!   `traceparent` in the `comment`) are one request, whatever their
//!   values.
//! - Otherwise an operation follows a request when its filter's values came
//!   from *any* earlier result of it ([`follow_ups`]): the list, one of
//!   its elements' details, a follow-up's own list (post → comments →
//!   their authors). Counts, distincts and aggregates follow as finds do.
//!   The connection's own latest request is tried first, then the other
//!   open ones, newest first: a driver spreads one request's operations
//!   over its pool's connections (`Promise.all`, goroutines). Values
//!   decide before shapes: an operation of a request's root shape joins it
//!   only by one element's own value (see [`Requests::follow`]); one that
//!   follows nothing, or only the request's context, is the root of a new
//!   request (the next call), named by its shape.
//!
//! Time never decides what follows what. A request closes (and is counted
//! on its pattern, see [`PatternTable::commit_since`]) when its connection
//! roots a new one while it had run on that connection alone (a
//! connection serving one request at a time has moved on: the next
//! visitor's first read does not follow the previous page's list; a
//! request a driver spreads over its pool stays open), when its
//! connection closes, or when [`MAX_OPEN`] newer requests push it out.
//! Once idle for [`REQUEST_IDLE`] with nothing pending on its connection
//! it is counted on its pattern but stays open: what joins it later is
//! added when it closes.
//! Its results (the documents its reads returned, hashed lazily, see
//! [`follow_ups`]) are charged to the connections pool while it is open,
//! at most [`MAX_RESULTS`] of them.
//!
//! [`PatternTable::commit_since`]: super::patterns::PatternTable::commit_since

use super::budget::{Charge, Pool};
use super::follow_ups::{FollowUpQuery, Link, ListRead};
use super::origin::RequestOrigin;
use super::patterns::{Invocation, NamedBy};
use super::shape::Shape;
use super::trace_context::TraceId;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest pattern name taken from a `comment`.
const MAX_NAME: usize = 80;

/// The pattern name an operation's `comment` gives: the comment itself
/// (cut to 80 characters), or — sqlcommenter-style `key='value'` pairs —
/// its `route`, `controller#action` or `action`; none when it carries only
/// a trace context, or the application's, framework's or driver's name
/// (the same on every operation of a service: no request's name).
pub fn name_of(comment: &str) -> Option<String> {
    let cut = |s: &str| s.chars().take(MAX_NAME).collect::<String>();
    match sqlcommenter_pairs(comment) {
        Some(pairs) => {
            let get = |key: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| v.as_str())
            };
            if let Some(route) = get("route") {
                return Some(cut(route));
            }
            match (get("controller"), get("action")) {
                (Some(c), Some(a)) => Some(cut(&format!("{c}#{a}"))),
                (c, a) => c.or(a).map(cut),
            }
        }
        None if comment.is_empty() || TraceId::from_comment(comment).is_some() => None,
        None => Some(cut(comment)),
    }
}

/// A sqlcommenter comment's pairs, values unquoted and percent-decoded;
/// none when `comment` is not one.
fn sqlcommenter_pairs(comment: &str) -> Option<Vec<(&str, String)>> {
    let mut out = Vec::new();
    for item in comment.split(',') {
        let (key, value) = item.trim().split_once('=')?;
        let value = value.trim().strip_prefix('\'')?.strip_suffix('\'')?;
        let key_ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !key_ok {
            return None;
        }
        out.push((key, percent_decoded(value)));
    }
    (!out.is_empty()).then_some(out)
}

/// `%2F` → `/` (what sqlcommenter encodes); other text as it is.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Requests open at once per engine, at most; the oldest closes first.
pub const MAX_OPEN: usize = 64;
/// Results kept per request, at most; past it the oldest but the root's
/// makes room.
pub const MAX_RESULTS: usize = 8;
/// Open requests other than the connection's own an operation is matched
/// against, newest first.
const MAX_SCAN: usize = 16;
/// A request idle this long (and nothing pending on its connection) is
/// counted on its pattern; it stays open for operations that follow it
/// later (a slow handler, a loaded machine), which are added to it.
pub const REQUEST_IDLE: Duration = Duration::from_millis(500);
/// Operations placed, at most, since another connection's open request
/// last had one, for an operation to follow it: a request is followed
/// while it is live (per-row work comes while its request runs, each
/// follow-up keeping it live, however many visitors run beside it), not
/// by whatever later request asks for a value its lists happened to hold
/// (another visitor's signed-in user, one of a small team's listed
/// authors). Counted in operations, not time: the same traffic at any
/// speed follows the same way.
const LIVE_OPS: u64 = 12;
/// Replies a result holds unhashed are hashed once this old, and their
/// bytes given back (time decides only what is held, never what follows).
pub const HOLD_WINDOW: Duration = Duration::from_secs(2);
/// Operations of a request whose shapes are remembered, in order.
const MAX_SEQUENCE: usize = 32;

/// One request in progress.
pub struct Request {
    pub id: u64,
    /// The connection of its root.
    pub conn: u64,
    /// The application name its root's connection gave in its handshake
    /// (its key; 0: none): a request is one client's.
    app: u64,
    trace: Option<TraceId>,
    named_by: NamedBy,
    /// Its round trips, latency, documents and shapes so far (its name is
    /// the pattern).
    pub invocation: Invocation,
    /// Its last operation's time.
    at: Instant,
    results: Vec<ListRead>,
    /// What it holds, in bytes (see [`Requests`]'s charge).
    bytes: usize,
    /// Whether an operation on another connection joined it (the driver
    /// spreads it over its pool).
    spread: bool,
    /// What its pattern was given when it went idle (see [`REQUEST_IDLE`]):
    /// at its close only what came after is added.
    counted: Option<Box<Invocation>>,
    /// Whether its root is a detail read (what a context read is).
    root_detail: bool,
    /// Whether it was named again, by its first operation that is not
    /// context (see [`RootStats`]).
    renamed: bool,
    /// The operation count ([`Requests::ops`]) at its latest operation.
    active: u64,
}

/// Roots whose requests are told apart, at most.
const MAX_ROOTS: usize = 256;
/// Shapes that follow one root counted, at most.
const ROOT_SHAPES: usize = 8;
/// Requests of a root seen before it may be found to be context.
const CONTEXT_AFTER: u32 = 8;

/// What follows each root shape in its requests: the requests it rooted,
/// and in how many of them each other shape was seen. A detail read
/// followed by the same reads in (nearly) every request, then by
/// different work in different requests, is the context every request
/// pays (a token, then its user): such a request is named by its first
/// operation that is not context, so each endpoint is its own pattern.
#[derive(Default)]
struct RootStats {
    roots: HashMap<u64, RootStat, foldhash::fast::RandomState>,
}

#[derive(Default)]
struct RootStat {
    requests: u32,
    shapes: smallvec::SmallVec<[(u64, u32); ROOT_SHAPES]>,
}

impl RootStat {
    /// Whether `shape` comes in at least four in five of its requests.
    fn is_context(&self, n: u32) -> bool {
        n as u64 * 5 >= self.requests as u64 * 4
    }

    /// Whether a request of this root with `shape` next is named by it:
    /// enough requests seen, `shape` not context, and at least two
    /// shapes that are not context (different work after the same
    /// context), so a list's own follow-ups never rename it.
    fn renames(&self, shape: u64) -> bool {
        if self.requests < CONTEXT_AFTER {
            return false;
        }
        let Some(&(_, n)) = self.shapes.iter().find(|s| s.0 == shape) else {
            return false;
        };
        !self.is_context(n)
            && self
                .shapes
                .iter()
                .filter(|s| !self.is_context(s.1))
                .nth(1)
                .is_some()
    }
}

impl RootStats {
    /// Whether a request of `root` is named by `shape`, next in it (see
    /// [`RootStat::renames`]).
    fn renames(&self, root: u64, shape: u64) -> bool {
        self.roots.get(&root).is_some_and(|s| s.renames(shape))
    }

    fn rooted(&mut self, root: u64) {
        if let Some(stat) = self.stat(root) {
            stat.requests += 1;
        }
    }

    fn followed(&mut self, root: u64, shape: u64) {
        let Some(stat) = self.stat(root) else { return };
        if let Some(s) = stat.shapes.iter_mut().find(|s| s.0 == shape) {
            s.1 += 1;
        } else if stat.shapes.len() < ROOT_SHAPES {
            stat.shapes.push((shape, 1));
        }
    }

    fn stat(&mut self, root: u64) -> Option<&mut RootStat> {
        if self.roots.len() >= MAX_ROOTS && !self.roots.contains_key(&root) {
            return None;
        }
        Some(self.roots.entry(root).or_default())
    }
}

/// What a request gives its pattern when it closes or goes idle: the
/// invocation, and what it had given already (its part counted when it
/// went idle), if anything.
#[derive(Debug)]
pub struct Done {
    pub invocation: Invocation,
    pub counted: Option<Box<Invocation>>,
}

/// Requests an operation closed (most often one: the connection's
/// previous).
pub type Closed = smallvec::SmallVec<[Done; 1]>;

/// Where an operation went: its request, that request's name, and the
/// result it follows, if any.
pub struct Placed {
    pub request: u64,
    pub pattern: Arc<str>,
    pub named_by: NamedBy,
    pub followed: Option<Followed>,
}

/// The result an operation follows, and how.
pub struct Followed {
    pub link: Link,
    /// The result's read: its origin, whether a list, documents so far.
    pub leading: RequestOrigin,
    pub leading_list: bool,
    pub leading_docs: u64,
}

/// What [`Requests::place`] needs of the operation.
pub struct Operation<'q> {
    pub conn: u64,
    /// The key of the application name its connection's handshake gave (0:
    /// none).
    pub app: u64,
    pub at: Instant,
    pub origin: &'q RequestOrigin,
    pub trace: Option<TraceId>,
    /// How many calls it stands for (sampling).
    pub weight: u64,
    /// Whether it counts documents (`Command::counts`).
    pub count: bool,
    /// Whether it is a detail read (a find of one or two documents): what
    /// a context read is.
    pub detail: bool,
    /// Whether it reads one document by its `_id` (an equality).
    pub by_id: bool,
}

pub struct Requests {
    open: VecDeque<Request>,
    /// What follows each root (see [`RootStats`]), charged to the pool at
    /// its most.
    roots: RootStats,
    _roots_charge: Charge,
    next_id: u64,
    /// Operations placed so far (what a request's liveness is counted in:
    /// see [`LIVE_OPS`]).
    ops: u64,
    pool: Arc<Pool>,
    /// What the open requests hold, in bytes.
    bytes: usize,
    /// What they are charged to the connections pool: the most `bytes`
    /// has come to since the last tick (as pending requests are, see
    /// `engine::connection`), so that a request in the steady state, one
    /// closing as the next opens, moves no shared counter.
    charge: Option<Charge>,
}

impl Requests {
    pub fn new(pool: Arc<Pool>) -> Requests {
        Requests {
            open: VecDeque::new(),
            roots: RootStats::default(),
            _roots_charge: Charge::new(
                &pool,
                MAX_ROOTS * (std::mem::size_of::<(u64, RootStat)>() + 16),
            ),
            next_id: 1,
            ops: 0,
            pool,
            bytes: 0,
            charge: None,
        }
    }

    fn position(&self, id: u64) -> Option<usize> {
        // Ids grow with position: a binary search.
        let i = self.open.partition_point(|r| r.id < id);
        (self.open.get(i)?.id == id).then_some(i)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Request> {
        let i = self.position(id)?;
        self.open.get_mut(i)
    }

    /// Puts an operation the server accepted into its request (see the
    /// module docs); `current` is its connection's latest request. Returns
    /// where it went and the requests it closed (to commit).
    /// `query` reads the operation's filter values; it is called only when
    /// some open request could be followed (most operations of a busy
    /// connection are roots of a shape seen before, and read nothing).
    pub fn place<'a>(
        &mut self,
        op: &Operation<'_>,
        current: Option<u64>,
        query: impl FnOnce() -> Option<FollowUpQuery<'a>>,
    ) -> (Placed, Closed) {
        let shape = &op.origin.shape;
        self.ops += 1;
        let joined = match op.origin.named_by {
            NamedBy::Comment => current.and_then(|id| self.position(id)).filter(|&i| {
                let inv = &self.open[i].invocation;
                *inv.pattern == *op.origin.pattern && inv.first_shape != shape.hash
            }),
            NamedBy::Shape => match op.trace {
                Some(t) => self.open.iter().rposition(|r| r.trace == Some(t)),
                None => None,
            },
        };
        // Which result it follows: in the request it joined, or (untagged,
        // untraced) in any open request.
        let mut followed = None;
        let joined = match joined {
            Some(i) => {
                if !self.open[i].results.is_empty() {
                    if let Some(q) = query() {
                        followed = self.follow(i, &q, false, false);
                    }
                }
                Some(i)
            }
            None if op.origin.named_by == NamedBy::Shape && op.trace.is_none() => self
                .follow_any(current, op.app, shape, query)
                .map(|(i, f)| {
                    followed = Some(f);
                    i
                }),
            None => None,
        };
        let mut closed = Closed::new();
        let i = match joined {
            Some(i) => {
                let r = &mut self.open[i];
                r.spread |= r.conn != op.conn;
                r.at = op.at;
                r.active = self.ops;
                let batch = followed.as_ref().is_some_and(|f| f.link.batch);
                // What WL401 and WL403 explain: a list's per-element
                // follow-ups, and the counts a request sends beside its
                // reads.
                let explained = op.count
                    || followed
                        .as_ref()
                        .is_some_and(|f| f.link.per_element && f.leading_list);
                if batch {
                    r.invocation.batches += 1;
                }
                if explained {
                    r.invocation.explained += 1;
                }
                r.invocation.round_trips += 1;
                // Named by its first operation that is not the context
                // every request of its root pays (an untagged request whose
                // root is a detail read: a token, then its user).
                let new_shape = shape.hash != r.invocation.first_shape
                    && !r.invocation.shapes.contains(&shape.hash);
                if new_shape && r.named_by == NamedBy::Shape && r.root_detail {
                    self.roots.followed(r.invocation.first_shape, shape.hash);
                    let per_element = followed
                        .as_ref()
                        .is_some_and(|f| f.link.per_element && f.leading_list);
                    let rename = !r.renamed
                        && r.counted.is_none()
                        && !per_element
                        && self.roots.renames(r.invocation.first_shape, shape.hash);
                    if rename {
                        r.invocation.pattern = op.origin.pattern.clone();
                        r.renamed = true;
                    }
                }
                // A document read by its own `_id`, joined only by the
                // request's context: a value a list was selected by or all
                // its rows carry, or a detail's own `_id` (the tenant a
                // project is read with). An entity the request was about
                // from the start, read once, not one its results referred
                // it to.
                let context_read = op.by_id
                    && followed.as_ref().is_some_and(|f| {
                        (f.link.context && !f.link.per_element)
                            || (!f.leading_list
                                && f.link.source_field == "_id"
                                && f.link.field != "_id")
                    });
                if r.invocation.shapes.len() < MAX_SEQUENCE {
                    r.invocation.shapes.push(shape.hash);
                    if !batch && !explained && !context_read {
                        r.invocation.chatty.push((shape.hash, op.origin.values));
                    }
                }
                i
            }
            None => {
                if self.open.len() >= MAX_OPEN {
                    if let Some(r) = self.open.pop_front() {
                        self.bytes -= r.bytes;
                        closed.extend(r.done());
                    }
                }
                // Its connection has moved on: the requests it ran alone
                // are over (most often the one just before, at the back).
                let mut i = self.open.len();
                while i > 0 {
                    i -= 1;
                    if self.open[i].conn == op.conn && !self.open[i].spread {
                        if let Some(r) = self.open.remove(i) {
                            self.bytes -= r.bytes;
                            closed.extend(r.done());
                        }
                    }
                }
                let id = self.next_id;
                self.next_id += 1;
                if op.origin.named_by == NamedBy::Shape && op.detail {
                    self.roots.rooted(shape.hash);
                }
                self.open.push_back(Request {
                    id,
                    conn: op.conn,
                    app: op.app,
                    trace: op.trace,
                    named_by: op.origin.named_by,
                    invocation: Invocation {
                        pattern: op.origin.pattern.clone(),
                        first_shape: shape.hash,
                        round_trips: 1,
                        latency_micros: 0,
                        docs: 0,
                        bytes: 0,
                        shapes: smallvec::smallvec![shape.hash],
                        batches: 0,
                        errors: Vec::new(),
                        weight: op.weight,
                        explained: 0,
                        request_units: 0.0,
                        chatty: smallvec::smallvec![(shape.hash, op.origin.values)],
                    },
                    at: op.at,
                    results: Vec::new(),
                    bytes: std::mem::size_of::<Request>(),
                    spread: false,
                    counted: None,
                    root_detail: op.detail,
                    renamed: false,
                    active: self.ops,
                });
                self.bytes += std::mem::size_of::<Request>();
                self.charge_most();
                self.open.len() - 1
            }
        };
        let r = &self.open[i];
        let placed = Placed {
            request: r.id,
            pattern: r.invocation.pattern.clone(),
            named_by: r.named_by,
            followed,
        };
        (placed, closed)
    }

    /// Whether an untagged operation of shape `shape` may follow request
    /// `r` (an unnamed request with results), and whether it has the
    /// request's root shape (see [`Requests::follow`]).
    fn eligible(r: &Request, shape: &Shape) -> Option<bool> {
        if r.named_by != NamedBy::Shape || r.results.is_empty() {
            return None;
        }
        let root = r.invocation.first_shape;
        if root != shape.hash {
            return Some(false);
        }
        // Only a list of several, not the root's own result, can be
        // followed by an operation of the root's shape (checked before
        // the operation's filter is read or any result hashed: a
        // connection repeating one query costs nothing more).
        r.results
            .iter()
            .any(|l| l.list && l.docs >= 2 && l.origin.shape.hash != root)
            .then_some(true)
    }

    /// The open request (and its result) an untagged operation follows,
    /// trying its connection's latest request and the others (at most
    /// [`MAX_SCAN`]), the most recently active first; `query` is read
    /// once, at the first request it may follow.
    fn follow_any<'a>(
        &mut self,
        current: Option<u64>,
        app: u64,
        shape: &Shape,
        query: impl FnOnce() -> Option<FollowUpQuery<'a>>,
    ) -> Option<(usize, Followed)> {
        let own = current
            .and_then(|id| self.position(id))
            .and_then(|i| Some((i, Self::eligible(&self.open[i], shape)?)));
        // A driver spreads a request over its own pool: the connections of
        // another application (another client, a test worker of its own)
        // serve other requests, whatever values they share.
        let live_since = self.ops.saturating_sub(LIVE_OPS);
        let others = (0..self.open.len())
            .rev()
            .filter(|&i| {
                let r = &self.open[i];
                Some(i) != own.map(|o| o.0) && r.app == app && r.active >= live_since
            })
            .filter_map(|i| Some((i, Self::eligible(&self.open[i], shape)?)))
            .take(MAX_SCAN);
        let mut candidates = own.into_iter().chain(others).peekable();
        candidates.peek()?;
        let mut order: smallvec::SmallVec<[(usize, bool); MAX_SCAN + 1]> = candidates.collect();
        // The most recently active first, the connection's own among them:
        // a follow-up comes as the result it needs arrives, and a pooled
        // connection's latest request is only the last one it served (one
        // visitor's next page reads its project after its own tenant read,
        // on a connection that last served that visitor's previous page).
        let active = |&(i, _): &(usize, bool)| self.open[i].active;
        if order.windows(2).any(|w| active(&w[0]) < active(&w[1])) {
            order.sort_by_key(|c| std::cmp::Reverse(active(c)));
        }
        let own = own.map(|o| o.0);
        let mut q = query()?;
        q.root_like = self
            .roots
            .roots
            .get(&shape.hash)
            .is_some_and(|s| s.requests >= CONTEXT_AFTER);
        order.into_iter().find_map(|(i, root_shaped)| {
            self.follow(i, &q, root_shaped, Some(i) != own)
                .map(|f| (i, f))
        })
    }

    /// The result of request `i` that `query` follows, newest first.
    ///
    /// Values decide before shapes: an operation of the request's root
    /// shape follows it only by one element's own values, of a list of
    /// several, for an element no such operation followed yet (a per-row
    /// lookup that shares the auth read's shape). Otherwise — it follows
    /// nothing, or only the request's context (the next call's auth read
    /// asks for the signed-in user again) — it is the next call. A request
    /// `elsewhere` (not the connection's current one) is followed only by
    /// values of its own rows, never by what every row carries (see
    /// `ListRead::link`).
    fn follow(
        &mut self,
        i: usize,
        query: &FollowUpQuery<'_>,
        root_shaped: bool,
        elsewhere: bool,
    ) -> Option<Followed> {
        let r = &mut self.open[i];
        let before = r.bytes;
        let found = r.results.iter_mut().rev().find_map(|result| {
            let link = result.link(query, root_shaped, elsewhere)?;
            Some(Followed {
                link,
                leading: result.origin.clone(),
                leading_list: result.list,
                leading_docs: result.docs,
            })
        });
        r.measure();
        self.bytes = self.bytes - before + self.open[i].bytes;
        self.charge_most();
        found
    }

    /// A read of request `id` returned documents: a new result (a list or a
    /// detail, `list`), or — a getMore — more of the result its cursor
    /// started. `reply` is the cursor reply, held unhashed while the pool
    /// has room.
    #[allow(clippy::too_many_arguments)]
    pub fn add_result(
        &mut self,
        id: u64,
        at: Instant,
        origin: &RequestOrigin,
        list: bool,
        getmore: bool,
        reply: Option<&bytes::Bytes>,
        docs: &[&bson::RawDocument],
        filter: Option<(bytes::Bytes, usize)>,
    ) {
        let full = self.pool.full();
        let Some(r) = self.get_mut(id) else {
            return;
        };
        let before = r.bytes;
        let result = if getmore {
            match r.results.iter_mut().rev().find(|l| {
                l.origin.shape.hash == origin.shape.hash && l.origin.namespace == origin.namespace
            }) {
                Some(l) => l,
                None => return,
            }
        } else {
            if docs.is_empty() || full {
                return;
            }
            if r.results.len() >= MAX_RESULTS {
                r.results.remove(1);
            }
            let mut read = ListRead::new(at, origin.clone(), list);
            if let Some(filter) = filter {
                read.selected_by(filter);
            }
            r.results.push(read);
            r.results.last_mut().expect("pushed")
        };
        let held = reply.is_some_and(|b| !full && result.hold(at, b, docs.len()));
        if !held {
            result.add(at, docs);
        }
        r.measure();
        let after = r.bytes;
        self.bytes = self.bytes - before + after;
        self.charge_most();
    }

    /// Charges the most the open requests have held since the last tick.
    fn charge_most(&mut self) {
        match &mut self.charge {
            Some(c) if c.bytes() < self.bytes => c.resize(self.bytes),
            Some(_) => {}
            None => self.charge = Some(Charge::new(&self.pool, self.bytes)),
        }
    }

    /// Charges what the open requests hold now (at a tick), nothing once
    /// none is open.
    fn charge_now(&mut self) {
        if self.open.is_empty() {
            self.charge = None;
        } else if let Some(c) = &mut self.charge {
            if c.bytes() != self.bytes {
                c.resize(self.bytes);
            }
        }
    }

    /// Counts on their patterns the requests idle since `REQUEST_IDLE`
    /// before `now` whose connection has nothing pending (`busy` says
    /// which have), and not counted since their last operation. They stay
    /// open: an operation that follows one later joins it, and what it
    /// adds is counted when it closes.
    pub fn count_idle(&mut self, now: Instant, busy: impl Fn(u64) -> bool) -> Vec<Done> {
        let mut idle = Vec::new();
        for r in self.open.iter_mut() {
            let counted = r
                .counted
                .as_ref()
                .is_some_and(|c| c.round_trips == r.invocation.round_trips);
            if counted || now.saturating_duration_since(r.at) < REQUEST_IDLE || busy(r.conn) {
                continue;
            }
            idle.push(Done {
                invocation: r.invocation.clone(),
                counted: r.counted.replace(Box::new(r.invocation.clone())),
            });
        }
        self.charge_now();
        idle
    }

    /// Closes the requests rooted on `conn` (it closed).
    pub fn close_conn(&mut self, conn: u64) -> Vec<Done> {
        self.close_where(|r| r.conn == conn)
    }

    /// Closes the requests rooted on the connections `gone` says are.
    pub fn close_where_conn(&mut self, gone: impl Fn(u64) -> bool) -> Vec<Done> {
        self.close_where(|r| gone(r.conn))
    }

    /// Closes every request.
    pub fn close_all(&mut self) -> Vec<Done> {
        self.bytes = 0;
        self.charge = None;
        self.open.drain(..).filter_map(Request::done).collect()
    }

    fn close_where(&mut self, mut done: impl FnMut(&Request) -> bool) -> Vec<Done> {
        if !self.open.iter().any(&mut done) {
            return Vec::new();
        }
        let mut closed = Vec::new();
        let mut open = VecDeque::with_capacity(self.open.len());
        for r in self.open.drain(..) {
            if done(&r) {
                self.bytes -= r.bytes;
                closed.extend(r.done());
            } else {
                open.push_back(r);
            }
        }
        self.open = open;
        closed
    }

    /// Hashes the replies held by results past the follow-up window (a
    /// getMore may still extend them) and gives their bytes back.
    pub fn index_stale(&mut self, now: Instant) {
        for r in self.open.iter_mut() {
            let mut changed = false;
            for l in r.results.iter_mut() {
                if l.held_bytes() > 0 && now.saturating_duration_since(l.at) > HOLD_WINDOW {
                    l.index_held();
                    changed = true;
                }
            }
            if changed {
                let before = r.bytes;
                r.measure();
                self.bytes = self.bytes - before + r.bytes;
            }
        }
    }
}

impl Request {
    /// What it gives its pattern as it closes: nothing when nothing came
    /// since it was counted idle.
    fn done(self) -> Option<Done> {
        match self.counted {
            Some(c) if c.round_trips == self.invocation.round_trips => None,
            counted => Some(Done {
                invocation: self.invocation,
                counted,
            }),
        }
    }

    /// Measures what its results hold now.
    fn measure(&mut self) {
        self.bytes = std::mem::size_of::<Request>()
            + self.results.iter().map(ListRead::bytes).sum::<usize>();
    }
}

#[cfg(test)]
mod tests {
    use super::name_of;

    /// A free-text comment is the name; a sqlcommenter one gives its
    /// route or controller#action, or nothing when it only says which
    /// application, framework or trace.
    #[test]
    fn comments_name_requests_unless_they_carry_only_context() {
        assert_eq!(name_of("Q2").as_deref(), Some("Q2"));
        assert_eq!(
            name_of("route='%2Fposts%2F%3Aid',traceparent='00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'").as_deref(),
            Some("/posts/:id")
        );
        assert_eq!(
            name_of("controller='posts', action='show', framework='rails'").as_deref(),
            Some("posts#show")
        );
        for context in [
            "traceparent='00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "application='billing',db_driver='pymongo'",
            "",
        ] {
            assert_eq!(name_of(context), None, "{context}");
        }
        assert_eq!(name_of(&"x".repeat(200)).map(|n| n.len()), Some(80));
    }
}
