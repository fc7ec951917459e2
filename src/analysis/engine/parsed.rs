//! The messages as the engine takes them: a request parsed once and kept
//! until its reply pairs with it, a reply's bytes and where its fields
//! lie, and what a reply says of the operation it answers.

use super::parent_walk;
use crate::analysis::command::{Command, CursorBatch, Reply, ReplyIndex};
use crate::wire::{self, Message};
use bytes::Bytes;

pub(super) type MaybeCommand<'a> = Option<Command<'a>>;

self_cell::self_cell!(
    /// A request's bytes and its command, parsed once when the request
    /// goes by (by the worker's decoding, which checks it in the same
    /// pass) and kept, not parsed again, until its reply pairs with it.
    pub struct ParsedRequest {
        owner: Bytes,
        #[covariant]
        dependent: MaybeCommand,
    }
);

impl ParsedRequest {
    /// Parses a whole, uncompressed request, unchecked.
    pub fn decode(frame: Bytes) -> ParsedRequest {
        ParsedRequest::new(frame, |bytes| {
            Message::parse(bytes).ok().and_then(|m| Command::parse(&m))
        })
    }

    /// Parses a whole, uncompressed request once: `check` sees the message
    /// (and the bytes it was parsed from) first, and its command is read
    /// only if the check passes; the command's walk of an OP_MSG body's top
    /// level completes the check (`Command::parse_checked`).
    pub fn checked(
        frame: Bytes,
        check: impl FnOnce(&Message<'_>, &[u8]) -> Result<(), wire::WireError>,
    ) -> Result<ParsedRequest, wire::WireError> {
        ParsedRequest::try_new(frame, |bytes| {
            let message = Message::parse(bytes)?;
            check(&message, bytes)?;
            Command::parse_checked(&message)
        })
    }

    pub(super) fn command(&self) -> Option<&Command<'_>> {
        self.borrow_dependent().as_ref()
    }
}

/// A message as the engine takes it: a request parsed (once), or a
/// reply's whole, uncompressed bytes and where its fields lie (`None`: it
/// has no document to read).
pub enum Decoded {
    Request(ParsedRequest),
    Reply(Bytes, Option<ReplyIndex>),
}

/// What a reply says of the operation it answers: whether it succeeded,
/// and the error codes it carries (the command's, then its write errors').
pub(super) struct Outcome<'r> {
    pub(super) reply: Option<&'r Reply<'r>>,
    pub(super) ok: bool,
    pub(super) errors: Vec<i32>,
    /// An update's `nModified` (read only for updates: one walk of a
    /// small reply).
    pub(super) modified: Option<i64>,
}

impl<'r> Outcome<'r> {
    #[inline]
    pub(super) fn of(reply: Option<&'r Reply<'r>>, update: bool) -> Outcome<'r> {
        let ok = reply.is_some_and(|r| r.ok());
        let mut errors = Vec::new();
        if let Some(r) = reply {
            if !ok {
                errors.push(r.code().unwrap_or(-1));
            }
            errors.extend(r.write_error_codes());
        }
        let modified = update.then(|| reply.and_then(|r| r.n_modified())).flatten();
        Outcome {
            reply,
            ok,
            errors,
            modified,
        }
    }
}

/// What an accepted operation's reply (and the connection's walk) said of
/// it, for `Engine::learn`: the statements that failed, an update's
/// `nModified`, the tree-walk step it took.
pub(super) struct ReplySaid<'a> {
    pub(super) failed: &'a [usize],
    pub(super) modified: Option<i64>,
    pub(super) walk: Option<&'a parent_walk::WalkStep>,
    /// The request's requestID (a test runner may have claimed it: see
    /// `suite`).
    pub(super) request_id: Option<i32>,
}

/// The documents a reply returns: a cursor's batch, or a findAndModify's
/// `value`.
pub(super) struct Returned<'r> {
    pub(super) cursor: Option<CursorBatch<'r>>,
    pub(super) value: Option<[&'r bson::RawDocument; 1]>,
}

impl<'r> Returned<'r> {
    #[inline]
    pub(super) fn of(reply: Option<&Reply<'r>>) -> Returned<'r> {
        Returned {
            cursor: reply.and_then(|r| r.cursor()),
            value: reply.and_then(|r| r.value()).map(|v| [v]),
        }
    }

    pub(super) fn documents(&self) -> &[&'r bson::RawDocument] {
        match (&self.cursor, &self.value) {
            (Some(c), _) => &c.documents,
            (None, Some(v)) => v,
            _ => &[],
        }
    }
}

/// `part`, a slice of `frame`'s bytes, as a `Bytes` sharing them (no copy),
/// with the length of what it keeps alive (the whole frame, to charge).
pub(super) fn slice_of(frame: &Bytes, part: &[u8]) -> Option<(Bytes, usize)> {
    let start = (part.as_ptr() as usize).checked_sub(frame.as_ptr() as usize)?;
    (start + part.len() <= frame.len())
        .then(|| (frame.slice(start..start + part.len()), frame.len()))
}
