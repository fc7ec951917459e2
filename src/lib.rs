//! wirelint: a MongoDB wire-protocol proxy that watches the traffic for
//! data-modelling mistakes.
//!
//! # A guided tour
//!
//! A message travels one way, and the modules are laid out the same way:
//! each may import only those before it in this list (`docs/architecture.md`
//! declares the order; `tests/architecture.rs` enforces it).
//!
//! ```text
//! client ─▶ proxy (session: frame check, forward the bytes) ─▶ backend
//!              │ Tap::message, never waits
//!              ▼
//!          analysis (queue ─▶ worker: decode ─▶ engine: command model,
//!              │     pairing, shapes, patterns, namespace state)
//!              │ Rule hooks
//!              ▼
//!          rules (one file per rule) ─▶ findings in the knowledge store
//!              ▼
//!          report (JSON, table, SARIF, diff) · admin (/metrics, /findings)
//! ```
//!
//! 1. [`wire`]: the protocol codec, pure functions over bytes. Start with
//!    `wire::frame` (what the hot path checks) and `wire::op_msg`.
//! 2. [`stats`]: counters both sides write; a snapshot reads them.
//! 3. [`proxy`]: listener, sessions, upstream connections, TLS, the hello
//!    rewrite. `proxy::session` is the hot path: two loops per client, each
//!    forwarding whole messages and handing them to the [`proxy::Tap`].
//! 4. [`capture`]: packet captures: the proxy's own (`--capture`, pcapng)
//!    and tcpdump's or Wireshark's read back into messages, TCP reassembled
//!    (`wirelint analyse`).
//! 5. [`analysis`]: implements the tap. `analysis::engine` turns messages
//!    into operations (the `command` model, request/reply pairing, `shape`s,
//!    access `patterns`, `namespaces`, `partition` targeting) and calls
//!    the hooks of `analysis::rule::Rule`; what is learnt is kept in
//!    `analysis::knowledge::Knowledge`, every table of it charged to the
//!    memory budget in `analysis::budget`.
//! 6. [`rules`]: one file per rule id; `rules::all()` is the catalogue. Read
//!    `rules/wl102_large_array.rs` for a small one.
//! 7. [`report`]: the JSON report, the access-pattern table, SARIF, diff.
//! 8. [`admin`]: the HTTP endpoints.
//! 9. [`config`]: `wirelint.toml`, flags and environment, merged.
//! 10. [`app`]: assembles all of the above into a running [`Proxy`] — the
//!     library API tests and applications use — or an offline analysis of
//!     captures (`app::offline`).
//! 11. [`cli`]: the `wirelint` command line.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod admin;
pub mod analysis;
pub mod app;
pub mod capture;
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
