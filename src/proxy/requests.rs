//! The requests of one connection that await their replies, tracked by
//! `requestID` / `responseTo` as the wire protocol pairs them: what the
//! idle timeout, the upstream timeout and shutdown ask ("is anything in
//! flight, and is it late?"), and what tells the reply side which replies
//! answer a `hello`.
//!
//! - A request with `moreToCome` (a `w: 0` write, compressed or not) is
//!   never answered and is not tracked.
//! - A reply with `moreToCome` (exhaust: streaming hello, exhaust cursors)
//!   is followed by another that answers *it*: the entry moves to the
//!   reply's own `requestID`, its clock restarted.
//! - A streaming `hello` (`maxAwaitTimeMS`) and an awaitData `getMore`
//!   (`maxTimeMS`) may be held that long by the server before it answers;
//!   the upstream timeout counts from the end of that wait. At shutdown
//!   they are not waited for: nothing is lost by cutting them.

use crate::wire::frame::{Answer, Peek};

/// Entries kept per connection. Drivers have one request in flight per
/// connection (two with a streaming hello); past this, requests are only
/// counted, and any unmatched reply pays one of them back.
const MAX_TRACKED: usize = 256;

#[derive(Clone, Copy, Debug)]
struct Awaiting {
    id: i32,
    /// Milliseconds (on the session's clock) when it was sent, or when the
    /// last reply of its exhaust stream came.
    since: u64,
    /// How long the server may hold it by design, in milliseconds.
    held: Option<u64>,
    hello: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Requests {
    awaiting: Vec<Awaiting>,
    /// Requests sent past [`MAX_TRACKED`]: in flight, but unmatched.
    untracked: usize,
}

impl Requests {
    /// A request was sent (`now`: milliseconds on the session's clock).
    pub fn sent(&mut self, request_id: i32, peek: &Peek, now: u64) {
        let held = match peek.answer {
            Answer::None => return,
            Answer::Prompt => None,
            Answer::Awaits(ms) => Some(ms),
        };
        if self.awaiting.len() >= MAX_TRACKED {
            self.untracked += 1;
            return;
        }
        self.awaiting.push(Awaiting {
            id: request_id,
            since: now,
            held,
            hello: peek.hello,
        });
    }

    /// A reply came. Returns whether it answers a `hello`.
    pub fn replied(
        &mut self,
        response_to: i32,
        request_id: i32,
        more_to_come: bool,
        now: u64,
    ) -> bool {
        let Some(at) = self.awaiting.iter().position(|a| a.id == response_to) else {
            // Not ours to match (or one of the untracked): pay one back.
            if !more_to_come {
                self.untracked = self.untracked.saturating_sub(1);
            }
            return false;
        };
        let hello = self.awaiting[at].hello;
        if more_to_come {
            // The next reply of the stream will answer this one.
            let entry = &mut self.awaiting[at];
            entry.id = request_id;
            entry.since = now;
        } else {
            self.awaiting.swap_remove(at);
        }
        hello
    }

    /// Anything at all awaiting a reply (the idle timeout waits for none).
    pub fn any(&self) -> bool {
        !self.awaiting.is_empty() || self.untracked > 0
    }

    /// Requests whose answer should come promptly: what shutdown waits for.
    pub fn prompt(&self) -> usize {
        self.awaiting.iter().filter(|a| a.held.is_none()).count() + self.untracked
    }

    /// Whether a request has waited longer than `limit` beyond what the
    /// server may hold it (the upstream timeout).
    pub fn overdue(&self, now: u64, limit: u64) -> bool {
        self.awaiting
            .iter()
            .any(|a| now.saturating_sub(a.since) >= limit.saturating_add(a.held.unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::OpCode;

    fn peek(answer: Answer, hello: bool) -> Peek {
        Peek {
            opcode: Some(OpCode::Msg),
            answer,
            hello,
            x509: false,
            whole: true,
        }
    }

    #[test]
    fn fire_and_forget_is_never_in_flight() {
        let mut r = Requests::default();
        r.sent(1, &peek(Answer::None, false), 0);
        assert!(!r.any());
        assert_eq!(r.prompt(), 0);
    }

    #[test]
    fn a_reply_answers_its_request_only() {
        let mut r = Requests::default();
        r.sent(1, &peek(Answer::Prompt, false), 0);
        r.sent(2, &peek(Answer::Prompt, true), 0);
        assert_eq!(r.prompt(), 2);
        assert!(!r.replied(1000, 5, false, 10), "unknown responseTo");
        assert_eq!(r.prompt(), 2);
        assert!(r.replied(2, 6, false, 10), "answers the hello");
        assert!(!r.replied(1, 7, false, 10));
        assert!(!r.any());
    }

    #[test]
    fn an_exhaust_stream_moves_to_each_reply() {
        let mut r = Requests::default();
        r.sent(1, &peek(Answer::Awaits(10_000), true), 0);
        assert_eq!(r.prompt(), 0, "a streaming hello is not waited for");
        assert!(r.any());
        assert!(r.replied(1, 50, true, 10_000));
        assert!(r.replied(50, 51, true, 20_000), "follows the stream");
        assert!(!r.overdue(25_000, 1_000), "within maxAwaitTimeMS + limit");
        assert!(r.overdue(31_000, 1_000));
        assert!(r.replied(51, 52, false, 31_000));
        assert!(!r.any());
    }

    #[test]
    fn prompt_requests_are_late_after_the_limit() {
        let mut r = Requests::default();
        r.sent(1, &peek(Answer::Prompt, false), 100);
        assert!(!r.overdue(1_099, 1_000));
        assert!(r.overdue(1_100, 1_000));
    }

    #[test]
    fn past_the_table_requests_are_counted_and_paid_back() {
        let mut r = Requests::default();
        for id in 0..(MAX_TRACKED as i32 + 10) {
            r.sent(id, &peek(Answer::Prompt, false), 0);
        }
        assert_eq!(r.prompt(), MAX_TRACKED + 10);
        for id in 0..(MAX_TRACKED as i32 + 10) {
            r.replied(id, -1, false, 1);
        }
        assert!(!r.any());
    }
}
