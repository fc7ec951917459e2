//! The analysis side: everything that reads messages, off the hot path.
//!
//! A message's way through, file by file:
//!
//! 1. **Hand-off** (`queue`): a session hands each forwarded message (a
//!    `Bytes`) to the proxy's [`Tap`](crate::proxy::Tap), which
//!    [`AnalysisQueue`] implements. It never waits and never makes a system
//!    call: it pushes onto the bounded lock-free queue of the connection's
//!    worker, and drops (and counts) what does not fit. Sharding by
//!    connection keeps one connection's messages in the order the client
//!    sent them.
//! 2. **Load shedding** (`sampling`, `cpu_budget`): when the workers fall
//!    behind, or take more of wirelint's CPU than `--analysis-cpu` allows,
//!    only one connection in 2^level is analysed, whole; one relaxed load
//!    per message decides.
//! 3. **Wake-up** (`shard`): each worker's queue and the handshake that
//!    wakes it when it is parked — a system call per pause in traffic,
//!    none per message.
//! 4. **Workers** (`worker`): plain threads that drain their queue, poll it
//!    every 50–200 ms while traffic flows and park when it stops; a
//!    panic on one message is caught and counted, never reaching the
//!    forwarding path (`panic_hook` keeps it to one log line).
//! 5. **Decoding** (`decode`): the worker's [`Decoder`] inflates
//!    OP_COMPRESSED, verifies OP_MSG checksums, refuses requests nested
//!    past [`MAX_NESTING`], and counts messages by opcode, command name and
//!    compressor; commands that carry credentials are counted by name only
//!    (`sensitive`).
//! 6. **Engine** ([`engine`]): the [`command`] model (its database read
//!    as the logical one when test suites name one per test: see
//!    [`databases`]), pairing with replies,
//!    [`shape`]s (their ids from [`hash`]), access [`patterns`] and the
//!    application [`requests`] they are made of (rebuilt from untagged
//!    traffic by the values [`follow_ups`] link), the [`bursts`] of one
//!    shape sent at once, namespace
//!    [`namespaces`], [`partition`] keys, and the hooks
//!    of the rules it was handed ([`rule`], described by the
//!    [`catalogue`]), whose [`findings`] land in the shared
//!    [`knowledge::Knowledge`].
//!
//! Every table on the way is bounded by the memory [`budget`].

pub mod budget;
pub mod bursts;
pub mod catalogue;
pub mod command;
mod cpu_budget;
pub mod databases;
mod decode;
pub mod engine;
pub mod findings;
pub mod follow_ups;
pub mod hash;
pub mod indexes;
pub mod knowledge;
pub mod namespaces;
pub mod origin;
mod panic_hook;
pub mod parent_walk;
pub mod partition;
pub mod patterns;
mod queue;
pub mod request_units;
pub mod requests;
pub mod rule;
mod sampling;
mod sensitive;
pub mod shape;
mod shard;
pub mod suite;
pub mod target;
pub mod trace_context;
mod worker;

pub use decode::{decode, Decoder, MAX_NESTING};
pub use panic_hook::install_panic_hook;
pub use queue::AnalysisQueue;
pub use sensitive::{is_sensitive, SENSITIVE_COMMANDS};
pub use shard::Event;
pub use worker::{AnalysisWorkers, ANALYSIS_STACK};

/// The analysis side's resources.
#[derive(Clone, Debug)]
pub struct Settings {
    pub enabled: bool,
    /// Messages waiting for analysis, across all workers. When it is full,
    /// new messages are dropped (and counted), never waited for.
    pub queue_capacity: usize,
    /// Bytes of messages waiting for analysis, at most (beyond, dropped and
    /// counted): what bounds memory when large documents flood in. Never
    /// more than the queue's share of the memory budget (an eighth).
    pub queue_bytes: usize,
    /// Worker threads; each owns the connections hashed to it, so the
    /// messages of one connection are analysed in order.
    pub workers: usize,
    /// Rules enabled, their severities and thresholds.
    pub rules: rule::RuleSettings,
    /// Allow literal values (e.g. example ids) in findings.
    pub show_values: bool,
    /// Called for each new or escalated finding (the CLI prints a line).
    pub live: Option<fn(&findings::FindingEvent)>,
    /// How much per-namespace state is kept (LRU-capped).
    pub caps: namespaces::Caps,
    /// Partition keys from the config file: namespace → key paths.
    pub partition_keys: Vec<(String, Vec<String>, partition::KeyKind)>,
    /// The sampling level never goes under: one connection in 2^this is
    /// analysed even while the analysis keeps up (`--analysis-share`; 0,
    /// every connection, unless set).
    pub min_sampling: u8,
    /// The most of wirelint's CPU time the analysis threads may take, as
    /// a fraction (`--analysis-cpu`; none: no cap): past it the sampling
    /// level rises as under overload (see `cpu_budget`).
    pub cpu_share: Option<f64>,
    /// How database names are folded for test suites (`--fold-databases`).
    pub fold: databases::Fold,
    /// The platform (`--target`); `None`: detected from the upstream's
    /// hello, else MongoDB.
    pub target: Option<target::Target>,
    /// What the request-unit estimate knows of each collection (its index
    /// policy, its physical partitions).
    pub request_units: request_units::Settings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            queue_capacity: 16_384,
            queue_bytes: 64 << 20,
            workers: 1,
            rules: rule::RuleSettings::default(),
            show_values: false,
            live: None,
            caps: namespaces::Caps::default(),
            partition_keys: Vec::new(),
            min_sampling: 0,
            cpu_share: None,
            fold: databases::Fold::Auto,
            target: None,
            request_units: request_units::Settings::default(),
        }
    }
}
