//! Which test of a suite each operation came from.
//!
//! A test runner's integration (pytest, Jest, Vitest, JUnit 5) tells
//! wirelint which test a worker starts, and when it ends, through the admin
//! endpoint `POST /tests`, and waits for the answer before the test runs:
//! every operation of the test reaches wirelint after its marker. A worker
//! is named by the application name its clients give in their handshake
//! (`appName` in the connection string: each parallel worker is given its
//! own); a marker with no worker stands for every connection whose
//! application name no marker names, which is all of them when the suite
//! runs in one worker.
//!
//! Markers are kept per worker in the order they came, so an analysis that
//! runs behind the traffic still puts each operation with the test that
//! was running when its request arrived.
//!
//! Where tests run at once in one process on one client (JUnit's parallel
//! execution), no worker name tells them apart. There the integration
//! watches the driver's commands instead: when a connection is about to
//! serve another test than its last, it claims the request it is about to
//! send (`request_id`, the message header's requestID), before sending
//! it. The connection that sends that request then belongs to that test
//! until its next claim. The findings and patterns count
//! the tests whose operations showed them; the report lists the tests, with
//! their file and line where the runner knows them (SARIF points there).

use super::budget::{shorten, Charge, Pool};
use super::hash::fnv1a;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

/// A test as the report lists it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TestInfo {
    /// What the runner calls it: a pytest node id, a Jest file and full
    /// name, a JUnit unique id.
    pub id: String,
    /// Its file, relative to the project's root where the runner says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The line its definition starts on, where the runner knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Data operations analysed while it ran.
    #[serde(default)]
    pub operations: u64,
}

/// A test by its index in [`Suite`]: what per-operation tables keep.
pub type TestRef = u32;

/// Tests named at most (more are not attributed, and counted).
pub const MAX_TESTS: usize = 20_000;
/// Workers at most (a marker for another is dropped, and counted).
const MAX_WORKERS: usize = 256;
/// Markers kept per worker: an operation analysed after its worker has
/// started this many tests more is not attributed.
const MAX_MARKERS: usize = 4096;
/// Longest test id and file name kept.
const MAX_NAME: usize = 400;

/// What the runner said about a test starting or ending.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// The application name of the worker's clients; none: every
    /// connection whose application name no marker names.
    #[serde(default)]
    pub worker: Option<String>,
    /// The test starting; none: the worker's test ended.
    #[serde(default)]
    pub test: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub line: Option<u32>,
    /// A claim: the connection that sends the request with this requestID
    /// serves `test` from that request on.
    #[serde(default)]
    pub request_id: Option<i32>,
}

/// The tests the runner named and each worker's markers.
pub struct Suite {
    tests: Vec<TestInfo>,
    by_id: HashMap<String, TestRef, foldhash::fast::RandomState>,
    /// Per worker (the hash of its application name; 0: the default), its
    /// markers in the order they came: when, and the test that started
    /// (none: ended).
    workers: HashMap<u64, VecDeque<(Instant, Option<TestRef>)>, foldhash::fast::RandomState>,
    /// Claims not matched yet: requestID → test, oldest first.
    claims: HashMap<i32, TestRef, foldhash::fast::RandomState>,
    claim_order: VecDeque<i32>,
    /// Markers and tests that did not fit.
    pub dropped: u64,
    charge: Charge,
}

/// Claims kept unmatched at most (the oldest go first).
const MAX_CLAIMS: usize = 16_384;

/// The key of a worker's application name (0 is the default worker).
pub fn worker_key(app_name: &str) -> u64 {
    fnv1a(app_name.as_bytes()).max(1)
}

impl Suite {
    pub fn new(pool: &Arc<Pool>) -> Suite {
        Suite {
            tests: Vec::new(),
            by_id: HashMap::default(),
            workers: HashMap::default(),
            claims: HashMap::default(),
            claim_order: VecDeque::new(),
            dropped: 0,
            charge: Charge::new(pool, MAX_CLAIMS * 24),
        }
    }

    /// Whether a runner ever said which test was running.
    pub fn is_empty(&self) -> bool {
        self.tests.is_empty()
    }

    /// Notes `marker`, received at `at`, before the operations it precedes.
    pub fn mark(&mut self, marker: &Marker, at: Instant) {
        let key = marker.worker.as_deref().map_or(0, worker_key);
        if let Some(request_id) = marker.request_id {
            let Some(test) = marker
                .test
                .as_deref()
                .and_then(|id| self.test_ref(id, marker))
            else {
                self.dropped += 1;
                return;
            };
            // The order may name claims matched since (they are skipped).
            while self.claims.len() >= MAX_CLAIMS {
                match self.claim_order.pop_front() {
                    Some(oldest) => {
                        self.claims.remove(&oldest);
                    }
                    None => break,
                }
            }
            self.claims.insert(request_id, test);
            self.claim_order.push_back(request_id);
            if self.claim_order.len() > 2 * MAX_CLAIMS {
                let claims = &self.claims;
                self.claim_order.retain(|r| claims.contains_key(r));
            }
            return;
        }
        let test = match &marker.test {
            Some(id) => match self.test_ref(id, marker) {
                Some(t) => Some(t),
                None => {
                    self.dropped += 1;
                    return;
                }
            },
            None => None,
        };
        if !self.workers.contains_key(&key) {
            if self.workers.len() >= MAX_WORKERS {
                self.dropped += 1;
                return;
            }
            let bytes = self.charge.bytes() + MAX_MARKERS * 24;
            self.charge.resize(bytes);
        }
        let markers = self.workers.entry(key).or_default();
        if markers.len() >= MAX_MARKERS {
            markers.pop_front();
        }
        markers.push_back((at, test));
    }

    fn test_ref(&mut self, id: &str, marker: &Marker) -> Option<TestRef> {
        let id = shorten(id, MAX_NAME);
        if let Some(t) = self.by_id.get(id.as_ref()) {
            return Some(*t);
        }
        if self.tests.len() >= MAX_TESTS {
            return None;
        }
        let file = marker
            .file
            .as_deref()
            .map(|f| shorten(f, MAX_NAME).into_owned());
        let bytes = 2 * id.len() + file.as_ref().map_or(0, String::len) + 96;
        let total = self.charge.bytes() + bytes;
        self.charge.resize(total);
        let t = self.tests.len() as TestRef;
        self.by_id.insert(id.to_string(), t);
        self.tests.push(TestInfo {
            id: id.into_owned(),
            file,
            line: marker.line,
            operations: 0,
        });
        Some(t)
    }

    /// The test a claim gives the connection sending `request_id`, if one
    /// does (taken: a claim is matched once).
    pub fn claimed(&mut self, request_id: i32) -> Option<TestRef> {
        if self.claims.is_empty() {
            return None;
        }
        self.claims.remove(&request_id)
    }

    /// Counts one more operation of `test` (a connection's claimed test).
    pub fn count(&mut self, test: TestRef) {
        self.tests[test as usize].operations += 1;
    }

    /// The test that was running on worker `app` (its key; 0: none named)
    /// when a request arrived at `at`, counted as one more operation of it.
    pub fn operation_at(&mut self, app: u64, at: Instant) -> Option<TestRef> {
        if self.workers.is_empty() {
            return None;
        }
        let markers = self.workers.get(&app).or_else(|| self.workers.get(&0))?;
        let after = markers.partition_point(|(when, _)| *when <= at);
        let test = markers.get(after.checked_sub(1)?)?.1?;
        self.tests[test as usize].operations += 1;
        Some(test)
    }

    pub fn name(&self, test: TestRef) -> &str {
        &self.tests[test as usize].id
    }

    /// The tests named so far, in the order they were first named.
    pub fn tests(&self) -> &[TestInfo] {
        &self.tests
    }
}

/// A test whose operations showed a finding or a pattern, and how many
/// of them did.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TestCount {
    pub test: String,
    pub operations: u64,
}

/// Tests kept per finding or pattern (the ones after are not listed).
pub const MAX_TESTS_PER_ITEM: usize = 16;

/// Counts one operation of `test` in `counts` (up to
/// [`MAX_TESTS_PER_ITEM`] tests).
pub fn count_test(counts: &mut Vec<TestCount>, test: &str) {
    if let Some(c) = counts.iter_mut().find(|c| c.test == test) {
        c.operations += 1;
    } else if counts.len() < MAX_TESTS_PER_ITEM {
        counts.push(TestCount {
            test: test.to_string(),
            operations: 1,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn marker(worker: Option<&str>, test: Option<&str>) -> Marker {
        Marker {
            worker: worker.map(str::to_string),
            test: test.map(str::to_string),
            file: Some("tests/test_shop.py".into()),
            line: Some(12),
            request_id: None,
        }
    }

    #[test]
    fn a_claim_gives_its_request_a_test_once() {
        let pool = Pool::unbounded("t");
        let mut s = Suite::new(&pool);
        let claim = |id: i32, test: &str| Marker {
            request_id: Some(id),
            ..marker(None, Some(test))
        };
        s.mark(&claim(41, "OrdersTest#nPlusOne"), Instant::now());
        s.mark(&claim(42, "PostsTest#clean"), Instant::now());
        assert_eq!(s.claimed(7), None);
        assert_eq!(
            s.claimed(41).map(|t| s.name(t)),
            Some("OrdersTest#nPlusOne")
        );
        assert_eq!(s.claimed(41), None, "matched once");
        assert_eq!(s.claimed(42).map(|t| s.name(t)), Some("PostsTest#clean"));
        // A claim is no marker: a worker's operations stay unattributed.
        assert_eq!(s.operation_at(0, Instant::now()), None);
        for i in 0..(MAX_CLAIMS as i32 + 5) {
            s.mark(&claim(1000 + i, "t"), Instant::now());
        }
        assert_eq!(s.claims.len(), MAX_CLAIMS);
        assert_eq!(s.claimed(1000), None, "the oldest went first");
    }

    #[test]
    fn operations_go_to_the_test_running_when_they_arrived() {
        let pool = Pool::unbounded("t");
        let mut s = Suite::new(&pool);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(s.operation_at(0, at(1)), None, "no marker: no test");
        s.mark(&marker(None, Some("a")), at(10));
        s.mark(&marker(None, None), at(20));
        s.mark(&marker(None, Some("b")), at(30));
        // Analysed late, in any order: by when the request came.
        assert_eq!(s.operation_at(0, at(35)).map(|t| s.name(t)), Some("b"));
        assert_eq!(s.operation_at(0, at(15)).map(|t| s.name(t)), Some("a"));
        assert_eq!(s.operation_at(0, at(25)), None, "between tests");
        assert_eq!(s.operation_at(0, at(5)), None, "before the first");
        // A connection of an unnamed application follows the default.
        assert_eq!(
            s.operation_at(worker_key("app"), at(31)).map(|t| s.name(t)),
            Some("b")
        );
        assert_eq!(s.tests()[0].operations, 1);
        assert_eq!(s.tests()[1].operations, 2);
        assert_eq!(s.tests()[0].line, Some(12));
    }

    #[test]
    fn parallel_workers_are_told_apart_by_application_name() {
        let pool = Pool::unbounded("t");
        let mut s = Suite::new(&pool);
        let t0 = Instant::now();
        s.mark(&marker(Some("wirelint-gw0"), Some("clean")), t0);
        s.mark(&marker(Some("wirelint-gw1"), Some("n_plus_one")), t0);
        let later = t0 + Duration::from_millis(1);
        let gw1 = s.operation_at(worker_key("wirelint-gw1"), later);
        assert_eq!(gw1.map(|t| s.name(t)), Some("n_plus_one"));
        let gw0 = s.operation_at(worker_key("wirelint-gw0"), later);
        assert_eq!(gw0.map(|t| s.name(t)), Some("clean"));
        // No default worker: a connection of another application is no test's.
        assert_eq!(s.operation_at(worker_key("other"), later), None);
    }

    #[test]
    fn tables_are_bounded() {
        let pool = Pool::unbounded("t");
        let mut s = Suite::new(&pool);
        let t0 = Instant::now();
        for i in 0..(MAX_MARKERS + 10) {
            s.mark(
                &marker(None, Some(&format!("t{}", i % 7))),
                t0 + Duration::from_micros(i as u64),
            );
        }
        assert_eq!(s.workers[&0].len(), MAX_MARKERS);
        assert_eq!(s.tests().len(), 7);
        assert_eq!(s.operation_at(0, t0), None, "older than every marker kept");
        let long = "x".repeat(5000);
        s.mark(&marker(None, Some(&long)), t0);
        assert!(s.tests().last().unwrap().id.len() <= MAX_NAME + 4);
        assert!(pool.usage().bytes > 0);
        let mut counts = Vec::new();
        for i in 0..40 {
            count_test(&mut counts, &format!("t{}", i % 20));
        }
        assert_eq!(counts.len(), MAX_TESTS_PER_ITEM);
        assert_eq!(counts[0].operations, 2);
    }
}
