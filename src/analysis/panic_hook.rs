//! What a panic on an analysis thread prints.
//!
//! A worker catches a panic while analysing a message, counts it and skips
//! the message (see `worker`); the panic hook still runs first. The
//! default hook writes a report per panic — with `RUST_BACKTRACE` set it
//! symbolizes a backtrace each time, which loads the debug info (over a
//! hundred MiB of resident memory at the first one) and floods the log
//! after. So on analysis threads the hook logs one line, at most once a
//! second.

use super::worker::ANALYSIS_THREAD_PREFIX;

/// Replaces the process's panic hook so that a panic on an analysis thread
/// (caught there, counted, and the message skipped) logs one line, at most
/// once a second, instead of the default report. Panics elsewhere go to
/// the previous hook. For the command line; a library user keeps its own
/// hook.
pub fn install_panic_hook() {
    static LOG: crate::stats::RateLimit = crate::stats::RateLimit::new();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let analysis = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with(ANALYSIS_THREAD_PREFIX));
        if !analysis {
            return previous(info);
        }
        if LOG.allow() {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(
                %location,
                "analysis panicked: {message} (caught: that message is skipped, traffic is unaffected; counted in wirelint_rule_panics_total and wirelint_analysis_panics_total; at most one such line a second)"
            );
        }
    }));
}
