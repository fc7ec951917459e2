//! What a data operation the server accepted teaches: it is placed in
//! its application request (see `analysis::requests`), counted on its
//! access pattern and shape, classified against the partition key, and
//! shown to the rules' request hooks; a refused one is counted against its
//! pattern (its throttling too). A hello's reply names the platform, and a
//! sharding command the server accepted gives a partition key.

use super::connection::Pending;
use super::observe::{observe_writes, unsupported_here};
use super::parsed::{Outcome, ReplySaid};
use super::{folded_database, lock, Engine};
use crate::analysis::command::{Command, Kind, Reply};
use crate::analysis::follow_ups;
use crate::analysis::knowledge::Knowledge;
use crate::analysis::origin::RequestOrigin;
use crate::analysis::parent_walk;
use crate::analysis::partition;
use crate::analysis::requests::{self, Operation};
use crate::analysis::rule::{FollowUp, OpView};
use crate::analysis::trace_context::TraceId;
use crate::wire;
use std::time::Instant;

impl Engine {
    /// A data operation's reply: learnt from when the server accepted it
    /// (or lacks only the feature), how it met the partition key kept in
    /// `origin`. A refusal is counted against its pattern, and false
    /// returned: nothing more is learnt from it.
    #[inline]
    pub(super) fn learn_if_accepted(
        &mut self,
        conn: u64,
        pending: &Pending,
        origin: &mut RequestOrigin,
        outcome: &Outcome<'_>,
        walk: Option<&parent_walk::WalkStep>,
    ) -> bool {
        if !outcome.ok && !unsupported_here(outcome.reply) {
            self.count_refusal(
                origin.request_pattern(),
                &outcome.errors,
                pending.request.command(),
                &origin.namespace,
            );
            return false;
        }
        if let Some(cmd) = pending.request.command() {
            let failed = outcome
                .reply
                .map(|r| r.write_error_indices())
                .unwrap_or_default();
            // An update's `nModified` says whether its `$addToSet` grew
            // the set, and its `$in` fan-out every listed document.
            let said = ReplySaid {
                failed: &failed,
                modified: outcome.modified,
                walk,
                request_id: wire::Header::parse(pending.request.borrow_owner())
                    .map(|h| h.request_id),
            };
            origin.partitioning = self.learn(conn, pending.at, cmd, origin, said);
        }
        true
    }

    /// A refused data operation: counted against its pattern when the
    /// pattern is known already, and nothing more.
    fn count_refusal(
        &self,
        pattern: &str,
        errors: &[i32],
        cmd: Option<&Command<'_>>,
        namespace: &str,
    ) {
        let mut k = lock(&self.knowledge);
        k.rejected_operations += 1;
        count_throttled(&mut k, pattern, errors, cmd, namespace);
        if let Some(p) = k.patterns.patterns.map_get_mut(pattern) {
            for code in errors {
                p.count_error(*code);
            }
        }
    }

    /// A data operation the server accepted: it joins the connection's
    /// invocation, its pattern and shape are counted, its partition
    /// targeting classified, what it writes recorded, and the rules' request
    /// and document hooks run. Returns how it meets the partition key.
    fn learn(
        &mut self,
        conn: u64,
        at: Instant,
        cmd: &Command<'_>,
        origin: &mut RequestOrigin,
        said: ReplySaid<'_>,
    ) -> Option<partition::Partitioning> {
        let ReplySaid {
            failed,
            modified,
            walk,
            request_id,
        } = said;
        let (finished, follow_up, context) = self.place(conn, at, cmd, origin);
        let (app, held) = self
            .conns
            .get(&conn)
            .map_or((0, None), |c| (c.app, c.claimed));
        let (shape, namespace) = (&origin.shape, &origin.namespace);
        let (pattern, named_by) = (origin.request_pattern(), origin.request_named_by());
        let (events, partitioning, test, claimed, inserted) = {
            let mut k = lock(&self.knowledge);
            // A connection claimed for a test (see `suite`) serves it until
            // its next claim; else the test running on its worker.
            let claimed = request_id.and_then(|r| k.suite.claimed(r));
            let test = match claimed.or(held) {
                Some(t) => {
                    k.suite.count(t);
                    Some(t)
                }
                None => k.suite.operation_at(app, at),
            };
            for inv in &finished {
                k.patterns
                    .commit_since(&inv.invocation, inv.counted.as_deref());
            }
            if let Some(leading) = origin.followed {
                k.patterns.led(leading);
            }
            k.operations += 1;
            if let Some(prefix) = cmd.folded_prefix() {
                k.databases.saw(prefix, cmd.db);
            }
            let partitioning = partition::classify_operation(cmd, namespace, &k.partition_keys);
            let trace = cmd.trace_id();
            k.trace = cmd.trace_context();
            k.test = test;
            k.database = folded_database(cmd);
            k.patterns.touch(
                pattern,
                named_by,
                namespace,
                shape,
                cmd.name,
                partitioning,
                trace,
            );
            if let Some(t) = test {
                k.patterns.count_test(pattern, t);
            }
            let view = OpView {
                cmd,
                namespace,
                shape,
                pattern,
                named_by,
                partitioning,
                follow_up: follow_up.as_ref(),
                request: origin.request,
                context,
                walk,
            };
            let (events, inserted) = observe_writes(&mut k, &view, failed, modified, at);
            k.trace = None;
            k.test = None;
            k.database = None;
            (events, partitioning, test, claimed, inserted)
        };
        origin.test = test;
        origin.inserted = inserted;
        if claimed.is_some() {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.claimed = claimed;
            }
        }
        self.emit(events);
        partitioning
    }

    /// Puts an accepted data operation into the application request it
    /// belongs to (see `requests`), noting it on `origin`. Returns the
    /// requests that closed to make room, and the N+1 follow-up it is,
    /// if any: a find fetching, for one element of a list read of the
    /// request, documents by a value taken from that element.
    fn place(
        &mut self,
        conn: u64,
        at: Instant,
        cmd: &Command<'_>,
        origin: &mut RequestOrigin,
    ) -> (requests::Closed, Option<FollowUp>, bool) {
        let trace = cmd
            .trace_id()
            .or_else(|| cmd.comment().and_then(TraceId::from_comment));
        let state = self.conns.entry(conn).or_default();
        let op = Operation {
            conn,
            app: state.app,
            at,
            origin,
            trace,
            weight: self.weight,
            count: cmd.counts(),
            detail: cmd.kind == Kind::Find && !origin.list,
            by_id: origin.by_id,
        };
        let (namespace, shape) = (&origin.namespace, origin.shape.hash);
        let counts = op.count;
        let (placed, finished) = self.requests.place(&op, state.current, || {
            let mut query = follow_ups::FollowUpQuery::of(cmd, namespace, shape)?;
            query.counts = counts;
            Some(query)
        });
        state.current = Some(placed.request);
        origin.request = Some(placed.request);
        origin.joined =
            (*placed.pattern != *origin.pattern).then(|| (placed.pattern.clone(), placed.named_by));
        origin.followed = placed.followed.as_ref().map(|f| f.leading.shape.hash);
        let context = placed.followed.as_ref().is_some_and(|f| {
            f.leading_list
                && f.leading_docs >= 2
                && !f.link.per_element
                && !f.link.batch
                && f.link.source_field != "_id"
        });
        let follow_up = placed
            .followed
            .filter(|f| f.link.per_element && f.leading_list && cmd.kind == Kind::Find)
            .map(|f| FollowUp {
                leading_pattern: f.leading.request_pattern().to_string(),
                leading_shape: f.leading.shape.text.to_string(),
                leading_namespace: f.leading.namespace.to_string(),
                field: f.link.field,
                source_field: f.link.source_field,
                count: f.link.count,
                leading_docs: f.leading_docs,
                distinct: f.link.distinct,
                list_rows: f.link.rows,
                list_values: f.link.values,
            });
        (finished, follow_up, context)
    }

    /// A hello's reply: the platform it names (see `target::detect`).
    pub(super) fn learn_target(&mut self, reply: Option<&Reply<'_>>) {
        let Some(reply) = reply.filter(|r| r.ok()) else {
            return;
        };
        let mut k = lock(&self.knowledge);
        k.detected(crate::analysis::target::detect(reply.body));
        self.hello_wanted = k.wants_hello();
    }

    /// A shardCollection / customAction the server accepted: its key.
    pub(super) fn learn_partition_key(&self, pending: &Pending, reply: Option<&Reply<'_>>) {
        if !reply.is_some_and(|r| r.ok()) {
            return;
        }
        let Some(cmd) = pending.request.command() else {
            return;
        };
        if let Some((namespace, key)) = lock(&self.knowledge).partition_keys.learn(cmd) {
            tracing::info!(%namespace, key = %key.describe(), "partition key learnt from {}", key.source.describe());
        }
    }
}

/// Counts an operation's throttling errors (see `target::is_throttling`)
/// in all and on its pattern, by the partition-key value it carried (see
/// `PatternStats::throttled_keys`); its errors are counted with the rest.
pub(super) fn count_throttled(
    k: &mut Knowledge,
    pattern: &str,
    errors: &[i32],
    cmd: Option<&Command<'_>>,
    namespace: &str,
) {
    let target = k.target.target;
    let n = errors
        .iter()
        .filter(|c| crate::analysis::target::is_throttling(**c, target))
        .count() as u64;
    if n == 0 {
        return;
    }
    k.throttled_operations += n;
    let key = cmd
        .zip(k.partition_keys.get(namespace))
        .and_then(|(cmd, key)| partition::key_value_hash(cmd, key));
    if let Some(p) = k.patterns.patterns.map_get_mut(pattern) {
        p.throttled += n;
        if let Some(key) = key {
            p.throttled_key(key);
        }
    }
}
