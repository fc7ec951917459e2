//! What an operation the server accepted teaches the knowledge store:
//! the cursor it opened, the documents it returned or wrote (observed as
//! their namespace's), and the rules' hooks that see them.

use super::connection::Pending;
use crate::analysis::command::{Command, CursorBatch, Kind, Reply};
use crate::analysis::findings::FindingEvent;
use crate::analysis::knowledge::Knowledge;
use crate::analysis::namespaces::Doc;
use crate::analysis::origin::RequestOrigin;
use crate::analysis::partition;
use crate::analysis::request_units::Inserted;
use crate::analysis::rule::{CompletedOp, DocSource, Hooks, OpView};
use smallvec::SmallVec;

/// A refusal that says "this backend does not implement it" (FerretDB and
/// Cosmos DB answer `$lookup` stages or commands they lack this way): the
/// server parsed, authenticated and authorized the request, so the access
/// pattern is the application's own, as MongoDB would run it, and it is
/// learnt. Every other refusal (unauthorized, invalid, failed) is not.
pub(super) fn unsupported_here(reply: Option<&Reply<'_>>) -> bool {
    const NOT_IMPLEMENTED: i32 = 238;
    const COMMAND_NOT_SUPPORTED: i32 = 115;
    matches!(
        reply.and_then(|r| r.code()),
        Some(NOT_IMPLEMENTED | COMMAND_NOT_SUPPORTED)
    )
}

/// A cursor the reply opens is remembered with the request's origin (its
/// getMores are of it); one a getMore exhausts is forgotten.
pub(super) fn track_cursor(
    k: &mut Knowledge,
    cursor: Option<&CursorBatch<'_>>,
    pending: &Pending,
    origin: &RequestOrigin,
) {
    let Some(c) = cursor else {
        return;
    };
    if c.id != 0 {
        k.cursors.get_or_insert_with(&c.id, || origin.clone());
    } else if pending.getmore {
        if let Some(id) = pending.request.command().and_then(|c| c.cursor_id()) {
            k.cursors.remove(&id);
        }
    }
}

/// Observes the documents a reply returns as its namespace's, when they
/// are documents as stored (not projected reads, nor $group / $project /
/// $lookup output; a getMore's are what its cursor's first batch was).
/// Returns them, walked, for the rules' document hooks.
pub(super) fn observe_returned<'d>(
    k: &mut Knowledge,
    origin: &RequestOrigin,
    docs: &[&'d bson::RawDocument],
) -> SmallVec<[Doc<'d>; 2]> {
    let stored: SmallVec<[Doc<'_>; 2]> = if origin.whole {
        docs.iter()
            .map(|d| Doc::new(d, &k.namespaces.caps))
            .collect()
    } else {
        SmallVec::new()
    };
    k.namespaces.observe_documents(&origin.namespace, &stored);
    stored
}

/// The rules' document hooks for the stored documents an operation
/// returned, then their operation hook; the findings carry its trace id.
pub(super) fn operation_hooks(
    k: &mut Knowledge,
    done: &CompletedOp<'_>,
    stored: &[Doc<'_>],
    test: Option<crate::analysis::suite::TestRef>,
) -> Vec<FindingEvent> {
    k.trace = done.op.cmd.trace_context();
    k.test = test;
    k.database = super::folded_database(done.op.cmd);
    let hooks = Hooks::OPERATION.and_if(!stored.is_empty(), Hooks::DOCUMENT);
    let events = k.with_rules(hooks, |rule, cx| {
        for doc in stored {
            rule.on_document(done.op, doc, DocSource::Returned, cx);
        }
        rule.on_operation(done, cx);
    });
    k.trace = None;
    k.test = None;
    k.database = None;
    events
}

/// The namespace a data command works on (bulkWrite: its first).
pub(super) fn data_namespace(cmd: &Command<'_>) -> Option<String> {
    if cmd.kind == Kind::BulkWrite {
        return cmd
            .bulk_write()
            .and_then(|(ns, _)| ns.first().map(|s| s.to_string()));
    }
    cmd.namespace()
}

/// Records what a write carries (documents, update operators) and runs the
/// request and document hooks. Returns the findings, and for an insert
/// under a platform priced in request units what its stored documents come
/// to (see `Doc::terms`).
/// `failed`: the statements the server reported in `writeErrors` (sorted):
/// their documents were not stored, nor, in an ordered write, any after
/// the first of them.
pub(super) fn observe_writes(
    k: &mut Knowledge,
    view: &OpView<'_>,
    failed: &[usize],
    modified: Option<i64>,
    at: std::time::Instant,
) -> (Vec<FindingEvent>, Option<Inserted>) {
    let (cmd, namespace) = (view.cmd, view.namespace);
    // Only these carry documents or updates (`Command::documents`,
    // `Command::updates`): the others, reads mostly, go to the request
    // hooks at once.
    if !matches!(cmd.kind, Kind::Insert | Kind::Update | Kind::FindAndModify) {
        return (
            k.with_rules(Hooks::REQUEST, |rule, cx| rule.on_request(view, cx)),
            None,
        );
    }
    let ordered = cmd.ordered();
    let applied = |i: &usize| match failed.first() {
        None => true,
        Some(first) if ordered => i < first,
        Some(_) => failed.binary_search(i).is_err(),
    };
    let caps = &k.namespaces.caps;
    // Where a logical partition's size is limited, what each
    // partition-key value grows by: the key's value is found by the walk
    // each inserted document gets.
    let key = k.partition_keys.get(namespace).filter(|_| {
        cmd.kind == Kind::Insert && k.target.target.logical_partition_limit().is_some()
    });
    let top = key.map_or(&[][..], |k| k.top_fields());
    let inserted: SmallVec<[Doc<'_>; 2]> = cmd
        .documents()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| applied(i))
        .map(|(_, d)| Doc::keyed(d, caps, top))
        .collect();
    let updates: Vec<_> = cmd
        .updates()
        .iter()
        .enumerate()
        .filter(|(i, _)| applied(i))
        .map(|(_, u)| u)
        .collect();
    let mut replaced = Vec::new();
    let grown = key.into_iter().flat_map(|key| {
        inserted.iter().filter_map(|d| {
            partition::inserted_key_hash(d, key).map(|v| (v, d.raw.as_bytes().len() as u64))
        })
    });
    k.namespaces
        .observe_inserted_all(namespace, &inserted, grown, at);
    for u in &updates {
        match u.update {
            Some(doc) if u.is_operator_update() => {
                // One statement: the reply's `nModified` is its own.
                let modified = modified.filter(|_| updates.len() == 1);
                k.namespaces
                    .observe_update(namespace, u.filter, doc, modified);
            }
            Some(doc) => {
                let doc = Doc::new(doc, &k.namespaces.caps);
                k.namespaces.observe_replacement(namespace, u.filter, &doc);
                replaced.push(doc);
            }
            None => {}
        }
    }
    let documents = !inserted.is_empty() || !replaced.is_empty();
    let hooks = Hooks::REQUEST.and_if(documents, Hooks::DOCUMENT);
    let events = k.with_rules(hooks, |rule, cx| {
        rule.on_request(view, cx);
        for doc in &inserted {
            rule.on_document(view, doc, DocSource::Inserted, cx);
        }
        for doc in &replaced {
            rule.on_document(view, doc, DocSource::Replaced, cx);
        }
    });
    let priced = (cmd.kind == Kind::Insert && k.target.target.request_units()).then(|| {
        let mut priced = Inserted::default();
        for d in &inserted {
            priced.add(d.raw.as_bytes().len() as u64, d.terms);
        }
        priced
    });
    (events, priced)
}
