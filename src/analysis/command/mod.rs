//! The command model: a typed, borrowed view of one request and its reply,
//! what every other part of the analysis reads traffic through.
//!
//! Nothing is decoded up front: a request or reply keeps its bytes, one
//! walk over their top level notes where the fields the analysis reads
//! lie, and each accessor reads only its own field, when asked: what no
//! rule asks for is never decoded.
//!
//! A tour, in the order a request meets it:
//!
//! - `kind.rs`: what a command does ([`Kind`]), from its name alone;
//!   authentication and user management are [`Kind::Sensitive`], counted
//!   by name and never looked into.
//! - `request.rs`: the [`Command`], parsed from an OP_MSG body or an
//!   OP_QUERY on `db.$cmd`, and its accessors (collection, namespace,
//!   filter, sort, pipeline, …), each answering per kind. The trace id a
//!   driver attaches is read there and parsed by
//!   [`trace_context`](crate::analysis::trace_context).
//! - `fields.rs`: the top-level fields most requests are read by, indexed
//!   once per command, and [`number`], how a BSON number is read.
//! - `writes.rs`: what a write carries (an insert's documents, an
//!   update's statements as [`UpdateSpec`]s, a delete's filters, a
//!   bulkWrite's operations), from the body's arrays or from the kind-1
//!   sections drivers send large writes in.
//! - `update_ops.rs`: what update operators mean to the analysis: a
//!   `$push` bounded by `$slice` ([`is_sliced_element`]), the bucket
//!   pattern ([`is_bucketed`]), array positions and keys that are values
//!   folded out of paths ([`fold_path`], [`is_value_key`]). The namespace state and the rules judge arrays by
//!   these, and only these.
//! - `reply.rs`: the [`Reply`] (`ok`, error codes, `n`, write errors, a
//!   cursor's batch, findAndModify's `value`), rebuilt from the places the
//!   decoder's walk recorded ([`ReplyIndex`]) instead of walked again.
//!
//! Everything is re-exported here: the files are how the model is read,
//! `analysis::command::…` is how it is used.

mod fields;
mod kind;
mod reply;
mod request;
mod update_ops;
mod writes;

#[cfg(test)]
mod driver_captures;
#[cfg(test)]
mod test_support;

pub use crate::analysis::trace_context::TraceId;
pub use fields::number;
pub use kind::Kind;
pub use reply::{CursorBatch, Reply, ReplyIndex};
pub use request::Command;
pub use update_ops::{
    fold_path, is_bucketed, is_sliced_element, is_sliced_modifiers, is_value_key, VALUE_KEY,
};
pub use writes::{Documents, UpdateSpec};
