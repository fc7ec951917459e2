//! `/metrics` labels come from the traffic (namespaces, pattern names): a
//! client touching thousands of collections must not grow a scrape without
//! bound. Only the busiest 100 get series of their own; the rest are added
//! up under `(other)`.

use bson::rawdoc;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wirelint::admin::{render_metrics, AdminState, MAX_LABELS};
use wirelint::analysis::engine::Engine;
use wirelint::analysis::knowledge::Knowledge;
use wirelint::analysis::namespaces::Caps;
use wirelint::analysis::rule::RuleSettings;
use wirelint::stats::{Direction, Stats};
use wirelint::wire::op_msg::encode;

#[test]
fn series_per_namespace_and_pattern_are_capped() {
    let knowledge = Arc::new(Mutex::new(Knowledge::new(
        wirelint::rules::all(),
        RuleSettings::default(),
        false,
        Caps::default(),
    )));
    let mut engine = Engine::new(knowledge.clone(), None);
    let t = Instant::now();
    let mut id = 0;
    for n in 0..600 {
        // Collection c0 is the busiest: it must keep its own series.
        let calls = if n == 0 { 5 } else { 1 };
        for _ in 0..calls {
            id += 1;
            let find = rawdoc! {"find": format!("c{n}"), "filter": {"a": 1}, "comment": format!("P{n}"), "$db": "d"};
            engine.message(
                1,
                Direction::Request,
                t,
                Bytes::from(encode(id, 0, 0, find.as_bytes(), &[])),
            );
            let reply = rawdoc! {"cursor": {"id": 0i64, "ns": format!("d.c{n}"), "firstBatch": []}, "ok": 1.0};
            engine.message(
                1,
                Direction::Reply,
                t,
                Bytes::from(encode(10_000 + id, id, 0, reply.as_bytes(), &[])),
            );
        }
    }
    engine.flush();
    let state = AdminState::new(Arc::new(Stats::default()), knowledge, "u".into(), None);
    let report = state.report();
    assert!(report.patterns.len() >= 600, "{}", report.patterns.len());
    let metrics = render_metrics(&state, &report);
    let count = |prefix: &str| metrics.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("wirelint_operations_total{"), MAX_LABELS + 1);
    assert_eq!(count("wirelint_pattern_round_trips_total{"), MAX_LABELS + 1);
    assert_eq!(
        count("wirelint_pattern_call_duration_seconds_count{"),
        MAX_LABELS + 1
    );
    // The others' calls are one histogram, their calls added up.
    assert!(metrics.contains(&format!(
        "wirelint_pattern_call_duration_seconds_count{{pattern=\"(other)\"}} {}",
        600 - MAX_LABELS
    )));
    assert!(metrics.contains("wirelint_operations_total{namespace=\"d.c0\",command=\"find\"} 5"));
    assert!(metrics.contains("wirelint_pattern_round_trips_total{pattern=\"P0\"} 5"));
    let other: u64 = metrics
        .lines()
        .find(|l| l.starts_with("wirelint_operations_total{namespace=\"(other)\""))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap();
    assert_eq!(
        other,
        600 - MAX_LABELS as u64,
        "the others are added up, not lost"
    );
}
