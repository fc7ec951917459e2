//! wirelint as a library: start a proxy in front of a database, run the
//! code under test through it, then read the findings — the way a Rust
//! project uses it in its integration tests (with testcontainers or any
//! MongoDB-compatible server).
//!
//! ```sh
//! cargo run --example in_process -- mongodb://127.0.0.1:27017/
//! ```

use mongodb::bson::{doc, Document};
use wirelint::{Proxy, ProxySettings};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let upstream = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mongodb://127.0.0.1:27017/".to_string());
    let proxy = Proxy::start(ProxySettings::new("127.0.0.1:0", &upstream)?).await?;
    println!("proxy on {}", proxy.connection_string());

    // The code under test, pointed at the proxy.
    let client = mongodb::Client::with_uri_str(proxy.connection_string()).await?;
    let files = client.database("example").collection::<Document>("files");
    files
        .insert_one(doc! {"name": "big", "blob": "x".repeat(3 << 20)})
        .await?;
    files
        .find_one(doc! {"name": "big"})
        .comment("open file")
        .await?;

    // Let the analysis catch up, then read what it found.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    let report = proxy.report();
    for p in &report.patterns {
        println!(
            "{:<40} calls {:>3}  round trips {:>4}  p50 {} µs",
            p.name, p.invocations, p.round_trips_per_invocation, p.latency_us.p50
        );
    }
    for f in proxy.findings() {
        println!(
            "{} {} {}: {}\n  → {}",
            f.severity.as_str(),
            f.rule,
            f.namespace,
            f.message,
            f.advice
        );
    }
    proxy.shutdown().await;
    Ok(())
}
