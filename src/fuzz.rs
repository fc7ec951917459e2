//! Fuzz targets, in the library so that `cargo test` replays their corpus
//! on every run (tests/fuzz_corpus.rs) and `fuzz/` (cargo-fuzz) only wraps
//! them. Each takes arbitrary bytes and must neither panic nor hang; where
//! wirelint writes bytes (hello rewrites), what it writes must decode.
//!
//! `scripts/fuzz.sh` runs them under libFuzzer.
//!
//! Each target runs its input on a thread with the stack the code has in
//! production — [`FORWARDING_STACK`] for what the forwarding loops run
//! (the forwarding threads), `analysis::ANALYSIS_STACK` for the analysis —
//! so a walk that would overflow there overflows here (libFuzzer's own
//! thread has 8 MiB). The corpus has messages nested deep through every
//! construct the analysis walks (`fuzz/seeds/deep/`).

use crate::analysis::engine::Engine;
use crate::analysis::knowledge::Knowledge;
use crate::analysis::namespaces::Caps;
use crate::analysis::{command, shape};
use crate::rules::RuleSettings;
use crate::stats::{Direction, Stats};
use crate::wire::{self, frame, Message};
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::proxy::FORWARDING_STACK;

type Job = Box<dyn FnOnce() + Send>;

/// The hand-off between the caller and a kept thread: one job and its
/// outcome at a time. Both sides spin briefly before sleeping — a channel
/// that parks on every input cost libFuzzer 25 times its speed.
#[derive(Default)]
struct Slot {
    job: std::sync::Mutex<Option<Job>>,
    outcome: std::sync::Mutex<Option<std::thread::Result<()>>>,
    has_job: std::sync::atomic::AtomicBool,
    has_outcome: std::sync::atomic::AtomicBool,
}

/// Waits for `flag`, spinning first, then sleeping in short naps.
fn wait_for(flag: &std::sync::atomic::AtomicBool) {
    use std::sync::atomic::Ordering::Acquire;
    let mut spins = 0u32;
    while !flag.load(Acquire) {
        if spins < 1 << 16 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::park_timeout(std::time::Duration::from_micros(200));
        }
    }
}

/// A thread kept for running inputs on one stack size.
struct StackThread {
    slot: Arc<Slot>,
    thread: std::thread::Thread,
}

impl StackThread {
    fn start(stack: usize) -> StackThread {
        use std::sync::atomic::Ordering::{Relaxed, Release};
        let slot = Arc::new(Slot::default());
        let theirs = slot.clone();
        let handle = std::thread::Builder::new()
            .name(format!("fuzz-{}k-stack", stack >> 10))
            .stack_size(stack)
            .spawn(move || loop {
                wait_for(&theirs.has_job);
                theirs.has_job.store(false, Relaxed);
                let job = theirs.job.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(job) = job {
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    *theirs.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(ran);
                    theirs.has_outcome.store(true, Release);
                }
            })
            .expect("spawning a fuzz thread");
        StackThread {
            slot,
            thread: handle.thread().clone(),
        }
    }

    fn run(&self, job: Job) -> std::thread::Result<()> {
        use std::sync::atomic::Ordering::{Relaxed, Release};
        *self.slot.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(job);
        self.slot.has_outcome.store(false, Relaxed);
        self.slot.has_job.store(true, Release);
        self.thread.unpark();
        wait_for(&self.slot.has_outcome);
        self.slot
            .outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .expect("set before has_outcome")
    }
}

/// Runs `target(data)` on a thread of `stack` bytes (one kept per size),
/// passing its panic on; a stack overflow there aborts the process, as it
/// would in production.
fn on_stack(stack: usize, target: fn(&[u8]), data: &[u8]) {
    let data = data.to_vec();
    run_on_stack(stack, move || target(&data))
}

/// Runs `job` on the kept thread of `stack` bytes and returns what it
/// returns, passing its panic on.
fn run_on_stack<R: Send + 'static>(stack: usize, job: impl FnOnce() -> R + Send + 'static) -> R {
    static THREADS: std::sync::Mutex<Vec<(usize, StackThread)>> = std::sync::Mutex::new(Vec::new());
    let mut threads = THREADS.lock().unwrap_or_else(|p| p.into_inner());
    if !threads.iter().any(|(s, _)| *s == stack) {
        threads.push((stack, StackThread::start(stack)));
    }
    let thread = &threads
        .iter()
        .find(|(s, _)| *s == stack)
        .expect("just added")
        .1;
    let result = Arc::new(Mutex::new(None));
    let slot = result.clone();
    let ran = thread.run(Box::new(move || {
        let r = job();
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    }));
    drop(threads);
    if let Err(panic) = ran {
        std::panic::resume_unwind(panic);
    }
    let r = result.lock().unwrap_or_else(|p| p.into_inner()).take();
    r.expect("set by a job that returned")
}

/// A fuzz target: arbitrary bytes in, no panic out.
pub type Target = fn(&[u8]);

/// The targets by name, for the corpus replay and the runner script.
pub const TARGETS: &[(&str, Target)] = &[
    ("frame", frame_decoder),
    ("message", message),
    ("command", command_model),
    ("hello_rewrite", hello_rewrite),
    ("analysis", analysis),
];

/// The framing the forwarding loops use on every read: a stream of bytes
/// split into messages, or an error, never a panic; and what they read of
/// each message to track it (`frame::peek`: flags, command name, awaitable
/// waits, a bounded prefix of compressed ones).
pub fn frame_decoder(data: &[u8]) {
    on_stack(FORWARDING_STACK, frames, data)
}

fn frames(data: &[u8]) {
    let mut at = 0;
    loop {
        let _ = frame::expected_len(&data[at..]);
        match frame::check(&data[at..]) {
            Ok(Some(len)) => {
                assert!(len >= wire::HEADER_LEN && at + len <= data.len());
                let message = &data[at..at + len];
                let _ = frame::peek(message);
                let _ = frame::more_to_come(message);
                at += len;
            }
            Ok(None) => break,
            Err(e) => {
                let _ = e.kind();
                let _ = frame::sniff_foreign(&data[at..]);
                break;
            }
        }
    }
}

/// OP_MSG / OP_QUERY / OP_REPLY / OP_COMPRESSED parsing, checksums,
/// sections and (bounded) decompression.
pub fn message(data: &[u8]) {
    on_stack(crate::analysis::ANALYSIS_STACK, parse_message, data)
}

fn parse_message(data: &[u8]) {
    let Ok(parsed) = Message::parse(data) else {
        return;
    };
    let _ = wire::command_name(&parsed);
    match &parsed {
        Message::Msg(m) => {
            let _ = wire::op_msg::verify_checksum(data);
            for s in m.sequences() {
                let _ = s.identifier_str();
                for d in s.documents() {
                    let _ = d.map(|d| d.len());
                }
            }
        }
        Message::Compressed(c) => {
            if let Ok(inner) = c.decompress() {
                // The declared size bounds what was inflated.
                assert!(inner.len() <= 48_000_000 + wire::HEADER_LEN);
                parse_message(&inner);
            }
        }
        _ => {}
    }
}

/// The command model and shapes over whatever parses as a message.
pub fn command_model(data: &[u8]) {
    on_stack(crate::analysis::ANALYSIS_STACK, model, data)
}

fn model(data: &[u8]) {
    let Ok(message) = Message::parse(data) else {
        return;
    };
    if let Some(cmd) = command::Command::parse(&message) {
        let _ = cmd.namespace();
        let _ = (cmd.filter(), cmd.projection(), cmd.sort(), cmd.limit());
        let _ = (cmd.hint(), cmd.comment(), cmd.pipeline(), cmd.cursor_id());
        let _ = (cmd.documents(), cmd.updates(), cmd.killed_cursors());
        let _ = cmd.shard_key();
        let s = shape::of_command(&cmd);
        // The id computed without the text is the text's.
        assert_eq!(shape::hash_of_command(&cmd), s.hash);
        // A data command's shape names its access pattern: never empty.
        // (Other commands may have any name, the empty one included; they
        // make no pattern.)
        if cmd.kind.is_data() {
            assert!(!s.text.is_empty());
        }
    }
    if let Some(reply) = command::Reply::parse(&message) {
        let _ = (reply.ok(), reply.code(), reply.n(), reply.value());
        let _ = reply.write_error_codes();
        let _ = reply.cursor().map(|c| c.documents.len());
    }
}

/// The one place wirelint writes bytes of its own into the stream: a
/// rewritten hello reply must be a valid message of the same kind.
pub fn hello_rewrite(data: &[u8]) {
    on_stack(FORWARDING_STACK, rewrite, data)
}

fn rewrite(data: &[u8]) {
    if frame::check(data).ok().flatten() != Some(data.len()) {
        return;
    }
    if let Some(rewritten) = crate::proxy::topology::rewrite_hello_reply(data) {
        assert_eq!(
            frame::check(&rewritten).ok().flatten(),
            Some(rewritten.len()),
            "a rewritten hello reply must frame"
        );
        let parsed = Message::parse(&rewritten).expect("a rewritten hello reply must parse");
        assert_eq!(parsed.opcode(), Message::parse(data).unwrap().opcode());
        if let Message::Msg(m) = parsed {
            if m.checksum.is_some() {
                wire::op_msg::verify_checksum(&rewritten).expect("checksum recomputed");
            }
        }
    }
}

/// The whole analysis of arbitrary messages (every rule on): the bytes are
/// offered as a request, then as its reply, on one connection; then, on
/// another, as a request and reply split at the first message boundary,
/// the way the workers see them (and on a third, that request alone). A rule's panic is caught and counted (as
/// in production, where traffic must not suffer for it), so the target
/// fails on the count: a rule that panics is a bug the fuzzer must report.
pub fn analysis(data: &[u8]) {
    let analysed = analysed(data);
    assert!(
        analysed.rule_panics.is_empty(),
        "a rule panicked (caught and counted): {:?}",
        analysed.rule_panics
    );
}

/// What the analysis target learnt from one input.
#[derive(Debug, Default)]
pub struct Analysed {
    /// Data operations learnt: each is counted once its request is paired
    /// with a reply that accepted it.
    pub operations: u64,
    /// Requests left waiting for a reply when their connection closed,
    /// where the input, split at its first message boundary, was offered
    /// as a request and its reply.
    pub unanswered_with_reply: u64,
    /// The same, where only that request was offered.
    pub unanswered_alone: u64,
    /// Panics the rules' guard caught, by rule id.
    pub rule_panics: Vec<(&'static str, u64)>,
}

/// The analysis target's run over `data`, and what it learnt.
pub fn analysed(data: &[u8]) -> Analysed {
    let data = data.to_vec();
    run_on_stack(crate::analysis::ANALYSIS_STACK, move || analyse(&data))
}

fn analyse(data: &[u8]) -> Analysed {
    let stats = Stats::default();
    let knowledge = Arc::new(Mutex::new(Knowledge::new(
        crate::rules::all(),
        RuleSettings::default(),
        false,
        Caps::default(),
    )));
    let mut engine = Engine::new(knowledge.clone(), None);
    let at = Instant::now();
    let bytes = Bytes::copy_from_slice(data);
    for direction in [Direction::Request, Direction::Reply] {
        if let Some(decoded) = crate::analysis::decode(1, direction, &bytes, &stats) {
            engine.decoded(1, at, decoded);
        }
    }
    if let Ok(Some(len)) = frame::check(data) {
        let (request, reply) = (bytes.slice(..len), bytes.slice(len..));
        for (conn, direction, frame) in [
            (2, Direction::Request, request.clone()),
            (2, Direction::Reply, reply),
            (3, Direction::Request, request),
        ] {
            if let Some(decoded) = crate::analysis::decode(conn, direction, &frame, &stats) {
                engine.decoded(conn, at, decoded);
            }
        }
    }
    engine.tick(at);
    let mut unanswered = [0; 3];
    for (conn, n) in [1, 2, 3].into_iter().zip(&mut unanswered) {
        let before = lock(&knowledge).forgotten_requests;
        engine.closed(conn);
        *n = lock(&knowledge).forgotten_requests - before;
    }
    engine.flush();
    let k = lock(&knowledge);
    Analysed {
        operations: k.operations,
        unanswered_with_reply: unanswered[1],
        unanswered_alone: unanswered[2],
        rule_panics: k.rule_panics.iter().map(|(id, n)| (*id, *n)).collect(),
    }
}

fn lock(knowledge: &Mutex<Knowledge>) -> std::sync::MutexGuard<'_, Knowledge> {
    knowledge.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A target's panic on its stack thread reaches the caller (libFuzzer
    /// and the corpus replay see it), and the thread keeps serving.
    #[test]
    fn panics_on_the_stack_thread_reach_the_caller() {
        fn panics(data: &[u8]) {
            assert!(data.is_empty(), "a planted failure");
        }
        let caught = std::panic::catch_unwind(|| on_stack(FORWARDING_STACK, panics, b"x"));
        assert!(caught.is_err());
        on_stack(FORWARDING_STACK, panics, b"");
        fn stack_name(_: &[u8]) {
            let name = std::thread::current().name().map(str::to_string);
            assert_eq!(name.as_deref(), Some("fuzz-2048k-stack"));
        }
        on_stack(FORWARDING_STACK, stack_name, b"");
    }
}
