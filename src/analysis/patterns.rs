//! Access patterns: what the application does, named by the
//! operation's `comment` when it sets one ("Q2"), else by its shape.
//!
//! An *invocation* is one execution of a pattern. For a named pattern it is
//! the run of operations with that comment on one connection, a new one
//! starting when the run's first shape comes round again (so "fetch post,
//! count comments, count likes, fetch author" is one invocation of four
//! round trips). For a pattern named by its shape, every operation is an
//! invocation; getMores add round trips to the invocation of the cursor's
//! operation. Latency per invocation is the sum of its round trips'
//! latencies as measured at the proxy (the application's own time between
//! them is not counted).

use super::budget::{Lru, Pool, ENTRY_OVERHEAD, MAX_KEY};
use super::command::TraceId;
use super::shape::Shape;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NamedBy {
    Comment,
    Shape,
}

/// Partitions touched by a pattern's operations (filled in by the
/// partition rules once a collection's partition key is known).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Partitions {
    #[serde(alias = "single")]
    pub single_shard: u64,
    #[serde(alias = "targeted")]
    pub multi_shard: u64,
    #[serde(alias = "fanout")]
    pub scatter_gather: u64,
    pub unknown: u64,
}

impl Partitions {
    /// The widest class seen, as the report's partitions column shows it
    /// (`analyzeShardKey`'s words).
    pub fn label(&self) -> &'static str {
        if self.scatter_gather > 0 {
            "scatter-gather"
        } else if self.multi_shard > 0 {
            "multi-shard"
        } else if self.single_shard > 0 {
            "single-shard"
        } else {
            "unknown"
        }
    }
}

pub struct PatternStats {
    pub name: String,
    pub named_by: NamedBy,
    pub namespaces: Vec<String>,
    /// Shape ids in the order first seen.
    pub shapes: Vec<u64>,
    /// The shapes of the first complete invocation, in order.
    pub sequence: Vec<u64>,
    pub invocations: u64,
    /// Calls the application made, estimated: each analysed call counts
    /// for the connections sampling left out when it was seen.
    pub estimated_invocations: u64,
    pub round_trips: u64,
    /// Operations issued by the application (round trips less getMores).
    pub operations: u64,
    /// Of those, batched fetches for a whole result (see
    /// [`Invocation::batches`]).
    pub batches: u64,
    /// Of those, what WL401 and WL403 explain (see
    /// [`Invocation::explained`]).
    pub explained: u64,
    /// The other operations' shapes (the root's first), at most
    /// [`MAX_SHAPES_PER_PATTERN`].
    pub chatty_shapes: Vec<ChattyShape>,
    /// Calls by how many of those operations they sent (the last counts
    /// every call of more): what most calls send, whatever a few calls
    /// made of two requests sent together add to the average.
    pub chatty_per_call: [u32; CHATTY_PER_CALL],
    /// Microseconds per invocation.
    pub latency: Histogram<u64>,
    pub docs_returned: u64,
    pub bytes_returned: u64,
    pub errors: BTreeMap<i32, u64>,
    pub partitions: Partitions,
    /// The W3C trace id of the latest operation that carried one (OP_MSG
    /// payload type 3), to find it in the application's tracing tool.
    pub last_trace_id: Option<TraceId>,
    /// The tests whose operations it saw, and how many each (see
    /// `suite`; up to [`MAX_TESTS_PER_PATTERN`]).
    pub tests: Vec<(super::suite::TestRef, u64)>,
    /// Nanoseconds the analysis spent on this pattern's messages (see
    /// `engine::cost`).
    pub analysis_nanos: u64,
    /// Estimated request units of its operations (see `request_units`;
    /// 0 unless the platform is priced in them).
    pub request_units: f64,
    /// Its operations the server throttled (see `target::is_throttling`).
    pub throttled: u64,
    /// The partition-key values (hashed) its throttled operations carried,
    /// with how many each, at most [`MAX_THROTTLED_KEYS`]: one value
    /// taking most of them is a hot partition.
    pub throttled_keys: SmallVec<[(u64, u32); MAX_THROTTLED_KEYS]>,
}

/// Partition-key values a pattern counts its throttled operations by.
pub const MAX_THROTTLED_KEYS: usize = 4;

const MAX_SHAPES_PER_PATTERN: usize = 32;
/// Tests counted per pattern (see `suite`).
const MAX_TESTS_PER_PATTERN: usize = 8;
const MAX_NAMESPACES_PER_PATTERN: usize = 16;
/// Distinct error codes counted per pattern; others are counted under
/// [`OTHER_ERROR`].
const MAX_ERROR_CODES: usize = 16;
/// Where error codes past [`MAX_ERROR_CODES`] are counted.
pub const OTHER_ERROR: i32 = i32::MIN;
/// Heap bytes of a pattern's latency histogram at most (1 µs to 1 h at
/// two significant digits: 3,328 u64 counts; see `tests/memory_budget.rs`).
pub const LATENCY_HIST_HEAP: usize = 26_624;
/// The longest latency a pattern's histogram records: an hour.
pub const LATENCY_MAX_MICROS: u64 = 3_600_000_000;

/// A pattern's latency histogram: made for calls of up to about a second
/// (half the counts to zero when a pattern is first seen: a suite that
/// makes a database per test makes patterns all along); see
/// [`record_latency`] for a slower one.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1 << 20, 2).expect("valid histogram bounds")
}

/// Records a call's latency in µs: past the histogram's range, it is first
/// made whole (up to [`LATENCY_MAX_MICROS`], [`LATENCY_HIST_HEAP`] bytes);
/// past an hour, it is not recorded.
pub fn record_latency(h: &mut Histogram<u64>, micros: u64) {
    let micros = micros.max(1);
    if micros > LATENCY_MAX_MICROS {
        return;
    }
    if micros > h.high() {
        let mut whole =
            Histogram::new_with_bounds(1, LATENCY_MAX_MICROS, 2).expect("valid histogram bounds");
        let _ = whole.add(&*h);
        *h = whole;
    }
    let _ = h.record(micros);
}

/// What a pattern's entry weighs at most: its name, the histogram, and
/// its lists at their caps.
fn pattern_weight(name: &str) -> usize {
    name.len()
        + std::mem::size_of::<(String, PatternStats)>()
        + LATENCY_HIST_HEAP
        + MAX_NAMESPACES_PER_PATTERN * (std::mem::size_of::<String>() + MAX_KEY)
        + 2 * MAX_SHAPES_PER_PATTERN * 8
        + MAX_SHAPES_PER_PATTERN * std::mem::size_of::<ChattyShape>()
        + MAX_ERROR_CODES * 48
        + MAX_TESTS_PER_PATTERN * 16
        + ENTRY_OVERHEAD
}

/// What a shape's entry weighs: its text and names.
fn shape_weight(_: &u64, info: &ShapeInfo) -> usize {
    info.shape.text.len()
        + info.command.len()
        + info.namespace.len()
        + std::mem::size_of::<(u64, ShapeInfo)>()
        + ENTRY_OVERHEAD
}

impl PatternStats {
    fn new(name: String, named_by: NamedBy) -> PatternStats {
        PatternStats {
            name,
            named_by,
            namespaces: Vec::new(),
            shapes: Vec::new(),
            sequence: Vec::new(),
            invocations: 0,
            estimated_invocations: 0,
            round_trips: 0,
            operations: 0,
            batches: 0,
            explained: 0,
            chatty_shapes: Vec::new(),
            chatty_per_call: [0; CHATTY_PER_CALL],
            latency: latency_histogram(),
            docs_returned: 0,
            bytes_returned: 0,
            errors: BTreeMap::new(),
            partitions: Partitions::default(),
            last_trace_id: None,
            tests: Vec::new(),
            analysis_nanos: 0,
            request_units: 0.0,
            throttled: 0,
            throttled_keys: SmallVec::new(),
        }
    }

    /// Counts one error with server code `code` (past [`MAX_ERROR_CODES`]
    /// distinct codes, under [`OTHER_ERROR`]).
    pub fn count_error(&mut self, code: i32) {
        let code = if self.errors.len() < MAX_ERROR_CODES || self.errors.contains_key(&code) {
            code
        } else {
            OTHER_ERROR
        };
        *self.errors.entry(code).or_default() += 1;
    }

    /// A throttled operation carried the partition-key value hashed `key`.
    pub fn throttled_key(&mut self, key: u64) {
        let keys = &mut self.throttled_keys;
        if let Some((_, n)) = keys.iter_mut().find(|(k, _)| *k == key) {
            *n += 1;
        } else if keys.len() < MAX_THROTTLED_KEYS {
            keys.push((key, 1));
        } else if let Some(least) = keys.iter_mut().min_by_key(|(_, n)| *n) {
            // The least seen makes room.
            *least = (key, 1);
        }
    }

    pub fn operations_per_invocation(&self) -> f64 {
        if self.invocations == 0 {
            0.0
        } else {
            self.operations as f64 / self.invocations as f64
        }
    }
}

/// A shape as the report lists it.
#[derive(Clone, Debug)]
pub struct ShapeInfo {
    pub shape: Shape,
    pub command: String,
    pub namespace: String,
    pub count: u64,
    /// Estimated request units of its operations, and how many were priced.
    pub request_units: f64,
    pub priced: u64,
    /// Whether a query followed a result of this shape (it leads others).
    pub led: bool,
    /// Its reads sent several at once (see `analysis::bursts`).
    pub bursts: BurstStats,
}

/// A shape's bursts: groups of its reads sent at once that followed
/// nothing.
#[derive(Clone, Debug, Default)]
pub struct BurstStats {
    pub groups: u64,
    pub members: u64,
    pub largest: u32,
    /// The constants of the members of its bursts (see
    /// `bursts::Burst::constants`), the first [`BURST_CONSTANTS`] seen.
    pub seen: SmallVec<[u64; BURST_CONSTANTS]>,
    /// Bursts whose members mostly repeated constants seen before.
    pub repeated: u32,
}

/// Constants a shape's bursts keep, at most.
pub const BURST_CONSTANTS: usize = 16;

impl BurstStats {
    pub fn add(&mut self, burst: &super::bursts::Burst) {
        self.groups += 1;
        self.members += u64::from(burst.members);
        self.largest = self.largest.max(burst.members);
        // Mostly the constants of earlier bursts (at least two, and half
        // its members): the same question asked again, whole or split.
        let again = burst
            .constants
            .iter()
            .filter(|c| self.seen.contains(c))
            .count();
        if again >= 2 && 2 * again >= burst.constants.len() {
            self.repeated += 1;
        }
        for c in &burst.constants {
            if self.seen.len() < BURST_CONSTANTS && !self.seen.contains(c) {
                self.seen.push(*c);
            }
        }
    }

    /// Calls that sent the same constants as another: the bursts that
    /// repeated constants seen before, and the one they repeated.
    pub fn recurring(&self) -> u32 {
        if self.repeated == 0 {
            0
        } else {
            self.repeated + 1
        }
    }
}

/// Calls told apart by how many chatty operations they sent.
pub const CHATTY_PER_CALL: usize = 16;

/// One shape a pattern's calls send, beyond what WL401 and WL403 explain
/// (see [`Invocation::chatty`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChattyShape {
    pub shape: u64,
    /// Calls that sent it.
    pub calls: u64,
    /// Times sent.
    pub sent: u64,
    /// Calls that sent it again with the same values: read twice.
    pub calls_again: u64,
}

impl PatternStats {
    /// How many chatty operations most calls send: the median call's.
    pub fn chatty_median(&self) -> usize {
        let calls: u64 = self.chatty_per_call.iter().map(|&n| n as u64).sum();
        let mut seen = 0;
        for (n, &c) in self.chatty_per_call.iter().enumerate() {
            seen += c as u64;
            if 2 * seen > calls {
                return n;
            }
        }
        0
    }
}

/// One invocation in progress on a connection.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// Its pattern's name, shared with the origin it came from (no copy
    /// per operation).
    pub pattern: Arc<str>,
    pub first_shape: u64,
    pub round_trips: u64,
    pub latency_micros: u64,
    pub docs: u64,
    pub bytes: u64,
    /// The shapes of its operations, in order (most invocations have one).
    pub shapes: SmallVec<[u64; 4]>,
    /// Its operations that fetched for a whole result in one batch (an
    /// `$in` of a list's references: what WL401 advises).
    pub batches: u64,
    pub errors: Vec<i32>,
    /// How many calls this one stands for: 2^level when it was seen while
    /// the analysis sampled one connection in 2^level.
    pub weight: u64,
    /// Its operations that a list's per-element follow-ups (WL401's) or
    /// counts of what a result holds (WL403's) explain.
    pub explained: u64,
    /// Estimated request units of its round trips.
    pub request_units: f64,
    /// The shapes of its other operations (neither explained nor batched),
    /// in order, the root's first, each with its filter's values hashed
    /// (see `RequestOrigin::values`): what a chatty request sends.
    pub chatty: SmallVec<[(u64, u64); 4]>,
}

pub struct PatternTable {
    /// By name, shared with the operations' origins (a lookup by an
    /// origin's name builds no key).
    pub patterns: Lru<Arc<str>, PatternStats>,
    pub shapes: Lru<u64, ShapeInfo>,
}

impl Default for PatternTable {
    fn default() -> Self {
        PatternTable::new(Pool::unbounded("patterns"), Pool::unbounded("shapes"))
    }
}

impl PatternTable {
    pub fn new(patterns: Arc<Pool>, shapes: Arc<Pool>) -> PatternTable {
        PatternTable {
            patterns: Lru::in_pool(2_000, patterns, |name, _| pattern_weight(name)),
            shapes: Lru::in_pool(10_000, shapes, shape_weight),
        }
    }

    /// Adds what the analysis spent on `pattern`'s messages.
    pub fn charge(&mut self, pattern: &str, nanos: u64) {
        if let Some(stats) = self.patterns.map_get_mut(pattern) {
            stats.analysis_nanos += nanos;
        }
    }

    /// Counts an operation of `pattern` that came from `test`.
    pub fn count_test(&mut self, pattern: &str, test: super::suite::TestRef) {
        if let Some(stats) = self.patterns.map_get_mut(pattern) {
            if let Some((_, n)) = stats.tests.iter_mut().find(|(t, _)| *t == test) {
                *n += 1;
            } else if stats.tests.len() < MAX_TESTS_PER_PATTERN {
                stats.tests.push((test, 1));
            }
        }
    }

    /// Notes that `shape` ran as part of `pattern`, how it met its
    /// collection's partition key, and its trace id if it had one: one
    /// lookup of the pattern for all of it.
    #[allow(clippy::too_many_arguments)]
    pub fn touch(
        &mut self,
        pattern: &Arc<str>,
        named_by: NamedBy,
        namespace: &str,
        shape: &Shape,
        command: &str,
        partitioning: Option<super::partition::Partitioning>,
        trace: Option<TraceId>,
    ) {
        use super::partition::Partitioning;
        let info = self.shapes.get_or_insert_with(&shape.hash, || ShapeInfo {
            shape: shape.clone(),
            command: super::budget::short_key(command).into_owned(),
            namespace: super::budget::short_key(namespace).into_owned(),
            count: 0,
            request_units: 0.0,
            priced: 0,
            led: false,
            bursts: BurstStats::default(),
        });
        info.count += 1;
        let stats = self
            .patterns
            .get_or_insert_with(pattern, || PatternStats::new(pattern.to_string(), named_by));
        if !stats.shapes.contains(&shape.hash) && stats.shapes.len() < MAX_SHAPES_PER_PATTERN {
            stats.shapes.push(shape.hash);
        }
        let namespace = super::budget::short_key(namespace);
        if !stats.namespaces.iter().any(|n| *n == namespace)
            && stats.namespaces.len() < MAX_NAMESPACES_PER_PATTERN
        {
            stats.namespaces.push(namespace.into_owned());
        }
        let p = &mut stats.partitions;
        match partitioning {
            Some(Partitioning::SingleShard) => p.single_shard += 1,
            Some(Partitioning::MultiShard) => p.multi_shard += 1,
            Some(Partitioning::ScatterGather) => p.scatter_gather += 1,
            None => p.unknown += 1,
        }
        if trace.is_some() {
            stats.last_trace_id = trace;
        }
    }

    /// Folds a finished invocation into its pattern.
    pub fn commit(&mut self, inv: &Invocation) {
        self.commit_since(inv, None);
    }

    /// Folds an invocation into its pattern; when part of it was counted
    /// before (`counted`: a request counted as it went idle, which later
    /// operations joined), only what came since.
    pub fn commit_since(&mut self, inv: &Invocation, counted: Option<&Invocation>) {
        let Some(stats) = self.patterns.map_get_mut(&*inv.pattern) else {
            return;
        };
        let before = |f: fn(&Invocation) -> u64| counted.map_or(0, f);
        if counted.is_none() {
            stats.invocations += 1;
            stats.estimated_invocations += inv.weight.max(1);
        }
        stats.round_trips += inv.round_trips - before(|c| c.round_trips);
        stats.operations += inv.shapes.len() as u64 - before(|c| c.shapes.len() as u64);
        stats.batches += inv.batches - before(|c| c.batches);
        stats.explained += inv.explained - before(|c| c.explained);
        stats.docs_returned += inv.docs - before(|c| c.docs);
        stats.bytes_returned += inv.bytes - before(|c| c.bytes);
        stats.request_units += inv.request_units - counted.map_or(0.0, |c| c.request_units);
        if counted.is_none() {
            record_latency(&mut stats.latency, inv.latency_micros);
        }
        let old_errors = counted.map_or(0, |c| c.errors.len());
        for code in inv.errors.iter().skip(old_errors) {
            stats.count_error(*code);
        }
        let old = counted.map_or(&[][..], |c| &c.chatty[..]);
        // Shapes whose values came again in this call, counted once each.
        // Not the root's: its read again with the same values is the next
        // call of the page (the same thread opened again), joined to this
        // one by the values they share.
        let mut again_in_call: SmallVec<[u64; 4]> = SmallVec::new();
        for (i, &(shape, values)) in inv.chatty.iter().enumerate() {
            let before = &inv.chatty[..i];
            let again =
                values != 0 && shape != inv.first_shape && before.contains(&(shape, values));
            let first_again = again && !again_in_call.contains(&shape);
            if first_again {
                again_in_call.push(shape);
            }
            if i < old.len() {
                continue;
            }
            let first_in_call = !before.iter().any(|(s, _)| *s == shape);
            let room = stats.chatty_shapes.len() < MAX_SHAPES_PER_PATTERN;
            match stats.chatty_shapes.iter_mut().find(|e| e.shape == shape) {
                Some(e) => {
                    e.calls += u64::from(first_in_call);
                    e.sent += 1;
                    e.calls_again += u64::from(first_again);
                }
                None if room => stats.chatty_shapes.push(ChattyShape {
                    shape,
                    calls: 1,
                    sent: 1,
                    calls_again: 0,
                }),
                None => {}
            }
        }
        let bucket = |n: usize| n.min(CHATTY_PER_CALL - 1);
        if let Some(c) = counted {
            let was = &mut stats.chatty_per_call[bucket(c.chatty.len())];
            *was = was.saturating_sub(1);
        }
        stats.chatty_per_call[bucket(inv.chatty.len())] += 1;
        if stats.sequence.is_empty() || counted.is_some_and(|c| stats.sequence[..] == c.shapes[..])
        {
            stats.sequence = inv.shapes[..inv.shapes.len().min(MAX_SHAPES_PER_PATTERN)].to_vec();
        }
    }

    /// A complete burst of a shape's reads (see `analysis::bursts`).
    pub fn burst(&mut self, burst: &super::bursts::Burst) {
        if let Some(info) = self.shapes.map_get_mut(&burst.shape) {
            info.bursts.add(burst);
        }
    }

    /// A query followed a result of shape `shape`.
    pub fn led(&mut self, shape: u64) {
        if let Some(info) = self.shapes.map_get_mut(&shape) {
            info.led = true;
        }
    }

    /// A round trip that belongs to no open invocation (a getMore whose
    /// cursor's pattern is no longer the connection's current one).
    pub fn add_round_trip(
        &mut self,
        pattern: &str,
        round_trips: u64,
        docs: u64,
        bytes: u64,
        request_units: f64,
    ) {
        if let Some(stats) = self.patterns.map_get_mut(pattern) {
            stats.round_trips += round_trips;
            stats.docs_returned += docs;
            stats.bytes_returned += bytes;
            stats.request_units += request_units;
        }
    }

    /// Adds an operation's estimated request units to its shape.
    pub fn price_shape(&mut self, shape: u64, request_units: f64) {
        if let Some(info) = self.shapes.map_get_mut(&shape) {
            info.request_units += request_units;
            info.priced += 1;
        }
    }

    pub fn get(&self, pattern: &str) -> Option<&PatternStats> {
        self.patterns.get(pattern)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::bursts::Burst;

    fn burst(constants: &[u64]) -> Burst {
        Burst {
            shape: 1,
            members: constants.len() as u32,
            constants: constants.iter().copied().collect(),
        }
    }

    /// A latency histogram starts at about a second and is made whole by
    /// a slower call, keeping what it held; past an hour nothing is kept.
    /// Calls of a thread page send 1 + 2 reads; one call in three is two
    /// pages sent together (6): the median call sends 3, whatever the
    /// average. A folder read twice with the same id in a call counts as
    /// read again; two folders of one shape (source, destination) do not.
    #[test]
    fn calls_are_judged_by_the_median_and_reads_again_by_their_values() {
        let mut t = PatternTable::default();
        let page: Arc<str> = Arc::from("page");
        let shape = Shape::new("find d.folders {_id: ?string} limit".into());
        t.touch(
            &page,
            NamedBy::Comment,
            "d.folders",
            &shape,
            "find",
            None,
            None,
        );
        let call = |chatty: &[(u64, u64)]| Invocation {
            pattern: page.clone(),
            first_shape: 1,
            round_trips: chatty.len() as u64,
            latency_micros: 0,
            docs: 0,
            bytes: 0,
            shapes: chatty.iter().map(|c| c.0).collect(),
            batches: 0,
            errors: Vec::new(),
            weight: 1,
            explained: 0,
            request_units: 0.0,
            chatty: chatty.iter().copied().collect(),
        };
        let s = shape.hash;
        for i in 0..6u64 {
            let one = [(1, 10 + i), (2, 20 + i), (3, 30 + i)];
            if i % 3 == 2 {
                let two: Vec<_> = one.iter().chain(one.iter()).copied().collect();
                t.commit(&call(&two));
            } else {
                t.commit(&call(&one));
            }
        }
        let p = t.patterns.map_get_mut("page").unwrap();
        assert_eq!(p.chatty_median(), 3);
        assert_eq!(p.invocations, 6);
        for i in 0..4u64 {
            // The same folder twice; then a source and a destination.
            t.commit(&call(&[(1, i), (s, 7 + i), (s, 7 + i), (s, 100 + i)]));
        }
        let p = t.patterns.map_get_mut("page").unwrap();
        let folders = p.chatty_shapes.iter().find(|c| c.shape == s).unwrap();
        assert_eq!(
            (folders.calls, folders.sent, folders.calls_again),
            (4, 12, 4)
        );
        let first = p.chatty_shapes.iter().find(|c| c.shape == 1).unwrap();
        assert_eq!(
            (first.calls, first.calls_again),
            (10, 0),
            "the root asked again is the next call, not a read asked twice"
        );
    }

    #[test]
    fn a_slow_call_widens_the_latency_histogram() {
        let mut h = latency_histogram();
        record_latency(&mut h, 0);
        record_latency(&mut h, 800);
        assert!(h.high() < 2_000_000);
        record_latency(&mut h, 2_000_000);
        assert!(h.high() >= LATENCY_MAX_MICROS);
        record_latency(&mut h, LATENCY_MAX_MICROS + 1);
        assert_eq!(h.len(), 3);
        assert_eq!(h.min(), 1);
        assert!(h.equivalent(h.value_at_quantile(0.5), 800));
        assert!(h.equivalent(h.max(), 2_000_000));
    }

    #[test]
    fn bursts_recur_by_their_members_constants() {
        let mut b = BurstStats::default();
        b.add(&burst(&[1, 2, 3, 4, 5, 6]));
        assert_eq!(b.recurring(), 0);
        b.add(&burst(&[6, 5, 4, 3, 2, 1]));
        assert_eq!(b.recurring(), 2);
        b.add(&burst(&[2, 3, 4, 5, 6]));
        b.add(&burst(&[3, 4, 5]));
        assert_eq!(b.recurring(), 4);
        b.add(&burst(&[10, 11, 12]));
        b.add(&burst(&[13, 14, 1]));
        assert_eq!(b.recurring(), 4, "new constants, or one old one of three");
        assert_eq!((b.groups, b.largest), (6, 6));
    }
}
