//! Analysis throughput: decode + command model + shape + pairing + rules,
//! on messages captured from real drivers (fixtures/wire/), in messages per
//! second on one core. Printed, never asserted.
//!
//! ```sh
//! cargo bench --bench analysis [-- --iterations 200000]
//! ```

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wirelint::analysis::engine::{Engine, Knowledge};
use wirelint::analysis::state::Caps;
use wirelint::rules::RuleSettings;
use wirelint::stats::Direction;

fn main() {
    let iterations: u64 = std::env::args()
        .skip_while(|a| a != "--iterations")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let pairs: [(&str, &[u8], &[u8]); 4] = [
        (
            "find (Node driver)",
            include_bytes!("../fixtures/wire/node-find.bin"),
            include_bytes!("../fixtures/wire/node-find.reply.bin"),
        ),
        (
            "update (pymongo)",
            include_bytes!("../fixtures/wire/pymongo-update.bin"),
            include_bytes!("../fixtures/wire/pymongo-update.reply.bin"),
        ),
        (
            "insert 30 docs (pymongo)",
            include_bytes!("../fixtures/wire/pymongo-insert.bin"),
            include_bytes!("../fixtures/wire/pymongo-insert.reply.bin"),
        ),
        (
            "aggregate + $lookup (pymongo)",
            include_bytes!("../fixtures/wire/pymongo-aggregate.bin"),
            include_bytes!("../fixtures/wire/pymongo-aggregate.reply.bin"),
        ),
    ];
    println!(
        "analysis throughput · {iterations} request/reply pairs each · one thread (all rules on)"
    );
    println!(
        "{:<32} {:>14} {:>12}",
        "workload", "messages/s", "ns/message"
    );
    for (name, request, reply) in pairs {
        let knowledge = Arc::new(Mutex::new(Knowledge::new(
            RuleSettings::default(),
            false,
            Caps::default(),
        )));
        let mut engine = Engine::new(knowledge, None);
        let (request, reply) = (
            Bytes::copy_from_slice(request),
            Bytes::copy_from_slice(reply),
        );
        let started = Instant::now();
        for _ in 0..iterations {
            let at = Instant::now();
            engine.message(1, Direction::Request, at, request.clone());
            engine.message(1, Direction::Reply, at, reply.clone());
        }
        let elapsed = started.elapsed();
        let messages = (iterations * 2) as f64;
        println!(
            "{:<32} {:>14.0} {:>12.0}",
            name,
            messages / elapsed.as_secs_f64(),
            elapsed.as_nanos() as f64 / messages
        );
    }
}
