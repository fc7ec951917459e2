//! The analysis memory budget, measured rather than trusted: a counting
//! allocator sees every byte the analysis holds while the engine, with
//! every rule, is fed traffic built to grow each table without end — 10^5
//! distinct namespaces, comments, shapes, field paths, long keys, cursors,
//! document ids and requests never answered. Whatever the traffic, the
//! heap held stays within `[limits] analysis_memory` (plus the rules'
//! entry-capped tables, measured here too), and each share of the budget
//! within its limit.
//!
//! One test function: the allocator counts the whole process, so nothing
//! else may run beside it.

use bson::{doc, rawdoc, RawDocumentBuf};
use bytes::Bytes;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wirelint::analysis::engine::Engine;
use wirelint::analysis::knowledge::Knowledge;
use wirelint::analysis::namespaces::{Caps, SizeHist, SIZE_HIST_HEAP};
use wirelint::analysis::rule::RuleSettings;
use wirelint::stats::Direction;
use wirelint::wire::op_msg::encode;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Relaxed)
}

const BUDGET: usize = 32 << 20;
const MIB: f64 = (1 << 20) as f64;

struct Feed {
    engine: Engine,
    conn: u64,
    id: i32,
    at: Instant,
}

impl Feed {
    /// One request and, when `reply` is given, its answer.
    fn op(&mut self, request: &RawDocumentBuf, reply: Option<&RawDocumentBuf>) {
        self.id += 2;
        let req = encode(self.id, 0, 0, request.as_bytes(), &[]);
        self.engine
            .message(self.conn, Direction::Request, self.at, Bytes::from(req));
        if let Some(reply) = reply {
            let rep = encode(self.id + 1, self.id, 0, reply.as_bytes(), &[]);
            self.engine
                .message(self.conn, Direction::Reply, self.at, Bytes::from(rep));
        }
    }
}

fn raw(d: bson::Document) -> RawDocumentBuf {
    RawDocumentBuf::try_from(&d).unwrap()
}

fn batch(docs: &[RawDocumentBuf]) -> bson::RawArrayBuf {
    let mut a = bson::RawArrayBuf::new();
    for d in docs {
        a.push(d.clone());
    }
    a
}

#[test]
fn analysis_heap_stays_within_the_budget_whatever_the_traffic() {
    // The constants the weights use, measured.
    let before = live();
    let h = SizeHist::default();
    let hist = (live() - before) as usize;
    drop(h);
    assert!(
        hist <= SIZE_HIST_HEAP,
        "a SizeHist holds {hist} bytes, above SIZE_HIST_HEAP ({SIZE_HIST_HEAP})"
    );
    let before = live();
    // Grown to its widest: the longest latency it records.
    let mut latency = wirelint::analysis::patterns::latency_histogram();
    wirelint::analysis::patterns::record_latency(
        &mut latency,
        wirelint::analysis::patterns::LATENCY_MAX_MICROS,
    );
    assert_eq!(latency.len(), 1);
    let lat = (live() - before) as usize;
    drop(latency);
    assert!(
        lat <= wirelint::analysis::patterns::LATENCY_HIST_HEAP,
        "a latency histogram holds {lat} bytes"
    );

    let baseline = live();
    let caps = Caps {
        memory: BUDGET,
        ..Caps::default()
    };
    let knowledge = Arc::new(Mutex::new(Knowledge::new(
        wirelint::rules::all(),
        RuleSettings::default(),
        false,
        caps,
    )));
    let mut feed = Feed {
        engine: Engine::new(knowledge.clone(), None),
        conn: 1,
        id: 0,
        at: Instant::now(),
    };
    let ok = rawdoc! {"ok": 1.0, "n": 1};
    // Enough of each to fill its share many times over (10^5 in release;
    // a fifth of that in a debug build, which fills them as well).
    let n = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    let long = "k".repeat(1000);
    let mut peak = 0isize;
    let mut check = |what: &str, k: &Arc<Mutex<Knowledge>>, filled: &str| {
        let held = live() - baseline;
        peak = peak.max(held);
        let k = k.lock().unwrap();
        let t = k.tables().into_iter().find(|t| t.table == filled).unwrap();
        // At a cap: its entry cap or its share of the budget.
        assert!(
            t.evicted > 0,
            "{what}: the {filled} share was never full: {t:?}"
        );
        for t in k.tables() {
            // A share may pass its limit by the one entry being stored.
            assert!(
                t.bytes <= t.max_bytes + (64 << 10),
                "{what}: {} holds {} bytes, limit {}",
                t.table,
                t.bytes,
                t.max_bytes
            );
        }
        println!(
            "{what:>40}: heap held {:6.1} MiB; tables {}",
            held as f64 / MIB,
            k.tables()
                .iter()
                .map(|t| format!("{}={}/{:.1}MiB", t.table, t.entries, t.bytes as f64 / MIB))
                .collect::<Vec<_>>()
                .join(" ")
        );
    };

    for i in 0..n {
        let doc = doc! {"_id": i, "tags": ["a", "b"], "v": i};
        feed.op(
            &raw(doc! {"insert": format!("c{i}"), "documents": [doc], "$db": "ns"}),
            Some(&ok),
        );
    }
    check("distinct namespaces", &knowledge, "namespaces");

    for i in 0..n {
        feed.op(
            &raw(doc! {"find": "c", "filter": {"a": 1}, "comment": format!("comment {i} {long}"), "$db": "d"}),
            Some(&rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": []}, "ok": 1.0}),
        );
    }
    check("distinct comments (1 KB each)", &knowledge, "patterns");

    for i in 0..n {
        feed.op(
            &raw(doc! {"find": "c", "filter": {format!("{long}{i}"): 1}, "$db": "d"}),
            Some(&rawdoc! {"cursor": {"id": 0i64, "ns": "d.c", "firstBatch": []}, "ok": 1.0}),
        );
    }
    check("distinct shapes (1 KB keys)", &knowledge, "shapes");

    for i in 0..n {
        let d = doc! {"_id": i, format!("{long}{i}"): {"x": [1, 2, 3]}, format!("f{i}"): 1};
        feed.op(
            &raw(doc! {"insert": "paths", "documents": [d], "$db": "d"}),
            Some(&ok),
        );
        feed.op(
            &raw(doc! {"update": "paths", "updates": [{"q": {"_id": i}, "u": {"$push": {format!("{long}{i}"): 1}}}], "$db": "d"}),
            Some(&rawdoc! {"ok": 1.0, "n": 1, "nModified": 1}),
        );
    }
    check(
        "distinct paths, field sets (1 KB keys)",
        &knowledge,
        "namespaces",
    );

    for i in 0..n {
        let docs: Vec<RawDocumentBuf> = (0..3).map(|j| rawdoc! {"_id": i * 3 + j}).collect();
        let id = i as i64 + 1;
        feed.op(
            &rawdoc! {"find": "cur", "filter": {"a": i}, "batchSize": 3, "$db": "d"},
            Some(&rawdoc! {"cursor": {"id": id, "ns": "d.cur", "firstBatch": batch(&docs)}, "ok": 1.0}),
        );
    }
    check("open cursors", &knowledge, "cursors");

    for i in 0..n {
        feed.conn = 1000 + (i as u64 % 100);
        feed.op(
            &raw(doc! {"find": "slow", "filter": {"a": i, "pad": long.clone()}, "$db": "d"}),
            None,
        );
    }
    check("requests never answered", &knowledge, "connections");

    let held = live() - baseline;
    println!(
        "{n} of each; budget {:.0} MiB: heap held at the end {:.1} MiB, at most {:.1} MiB",
        BUDGET as f64 / MIB,
        held as f64 / MIB,
        peak as f64 / MIB
    );
    // The rules' own tables are capped in entries (RULE_TABLE_CAP) over
    // shortened keys; they have 5 % of the budget and are counted here.
    assert!(
        peak as f64 <= BUDGET as f64 * 1.05,
        "the analysis held {:.1} MiB, over its {:.0} MiB budget",
        peak as f64 / MIB,
        BUDGET as f64 / MIB
    );
    let k = knowledge.lock().unwrap();
    let evicted: u64 = k.tables().iter().map(|t| t.evicted).sum();
    assert!(evicted > 0, "the traffic filled the budget");
    assert!(
        k.forgotten_requests > 0,
        "unanswered requests were forgotten"
    );
}
