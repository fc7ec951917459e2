//! What the command model's tests share: a request frame from a body, and
//! the command parsed from a frame.

use super::Command;
use crate::wire::{op_msg, Message};

/// `f` of the command `frame` holds.
pub(super) fn with_command<T>(frame: &[u8], f: impl FnOnce(&Command<'_>) -> T) -> T {
    let msg = Message::parse(frame).unwrap();
    let cmd = Command::parse(&msg).unwrap();
    f(&cmd)
}

/// An OP_MSG whose only section is `body`.
pub(super) fn msg(body: bson::RawDocumentBuf) -> Vec<u8> {
    op_msg::encode(1, 0, 0, body.as_bytes(), &[])
}
