//! wirelint: a MongoDB wire-protocol proxy that watches the traffic for
//! data-modelling mistakes.
//!
//! Data flows one way through the crate:
//!
//! ```text
//! proxy::Proxy (listener) ─▶ proxy::session (two loops per client)
//!     │  wire::frame::check: whole messages, bounded length
//!     │  forward the original bytes (topology: hello rewrite only)
//!     ▼
//! analysis::AnalysisQueue (bounded, try_send) ─▶ worker threads
//!     wire::Message::parse ─▶ counters in stats::Stats
//! ```
//!
//! - [`wire`]: the protocol codec, pure functions over bytes.
//! - [`proxy`]: listener, sessions, upstream connections, TLS, topology.
//! - [`analysis`]: everything that reads messages, off the hot path.
//! - [`stats`]: counters shared by both sides.
//! - [`config`]: `wirelint.toml`, flags and environment, merged.
//! - [`cli`]: the `wirelint` command line.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod admin;
pub mod analysis;
pub mod app;
pub mod cli;
pub mod config;
#[doc(hidden)]
pub mod fuzz;
pub mod proxy;
pub mod report;
pub mod rules;
pub mod stats;
pub mod wire;

pub use app::Proxy;
pub use config::ProxySettings;
pub use stats::StatsSnapshot;
