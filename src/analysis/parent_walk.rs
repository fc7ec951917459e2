//! Tree walks: a tree stored as parent references (`parentId`), or as
//! arrays of ancestors or materialized paths, read one level at a time on
//! a connection. A [`ParentWalk`] remembers the single document a
//! connection last read, with its references hashed; the next find of the
//! same collection by the `_id` one of them named is a [`WalkStep`] one
//! level up (what WL405 tree-walk counts). Values are hashed; none is
//! kept.

use super::command::{Command, Kind};
use super::namespaces::element_hash;
use bson::RawDocument;

/// References of one document kept for a tree walk, at most.
const WALK_REFS: usize = 8;
/// Elements of an array looked at for an array of ancestors, at most.
const WALK_ARRAY: usize = 64;
/// A document larger than this is no tree node a walk remembers.
const WALK_DOC: usize = 16 << 10;

/// A string field named like a reference: `…id`, `…Id`, `…_id`, `parent…`.
fn names_reference(key: &[u8]) -> bool {
    key.len() > 2 && key[key.len() - 2..].eq_ignore_ascii_case(b"id")
        || key.len() >= 6 && key[..6].eq_ignore_ascii_case(b"parent")
}

/// A materialized path: `path`, `materializedPath`, `…Path`.
fn is_path(key: &[u8]) -> bool {
    key.eq_ignore_ascii_case(b"path") || key.ends_with(b"Path")
}

/// A tree walked one level at a time on a connection: the single document
/// it last read, with its top-level references (hashed), and the chain of
/// reads that led to it, each by the `_id` the document before named in
/// the same field (`parentId`). See [`WalkStep`].
#[derive(Default)]
pub struct ParentWalk {
    namespace: Option<std::sync::Arc<str>>,
    /// (value hash, where its field's name starts in `names`, its length).
    refs: smallvec::SmallVec<[(u64, u8, u8); WALK_REFS]>,
    /// The reference fields' names, one after the other.
    names: smallvec::SmallVec<[u8; 64]>,
    /// The field the chain that read it followed, and how many reads.
    via: Option<Box<str>>,
    depth: u32,
    /// Whether it carries its ancestors (an array holding one of its
    /// references, or a materialized path).
    ancestors: bool,
}

/// A read of the document the previous one named: one level up a tree
/// stored as parent references.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkStep {
    /// The reference followed (`parentId`).
    pub field: String,
    /// Reads so far in the chain following it (1: the parent of a
    /// document read).
    pub depth: u32,
    /// Whether the documents carry their ancestors already (an array of
    /// ancestors, a materialized path).
    pub ancestors: bool,
}

impl ParentWalk {
    /// The step `cmd` takes: a find of exactly `{_id: v}` on the namespace
    /// of the document last read, `v` one of its references.
    pub fn step(&self, cmd: &Command<'_>, namespace: &str) -> Option<WalkStep> {
        if cmd.kind != Kind::Find || self.namespace.as_deref() != Some(namespace) {
            return None;
        }
        let mut fields = crate::wire::bson_walk::elements(cmd.filter()?.as_bytes());
        let id = fields.next()?.ok()?;
        if id.key != b"_id" || fields.next().is_some() {
            return None;
        }
        let h = element_hash(&id)?;
        let &(_, start, len) = self.refs.iter().find(|r| r.0 == h)?;
        let field = std::str::from_utf8(
            &self.names[usize::from(start)..usize::from(start) + usize::from(len)],
        )
        .ok()?;
        let depth = match &self.via {
            Some(via) if &**via == field => self.depth + 1,
            _ => 1,
        };
        Some(WalkStep {
            field: field.to_string(),
            depth,
            ancestors: self.ancestors,
        })
    }

    /// What a find on `namespace` returned: one document (of at most
    /// [`WALK_DOC`] bytes) is remembered, with the step that read it, if
    /// any; anything else on that namespace ends the walk.
    pub fn read(
        &mut self,
        namespace: &std::sync::Arc<str>,
        step: Option<&WalkStep>,
        docs: &[&RawDocument],
    ) {
        let doc = match docs {
            [doc] if doc.as_bytes().len() <= WALK_DOC => doc,
            _ => {
                if self.namespace.as_deref() == Some(&**namespace) {
                    self.namespace = None;
                }
                return;
            }
        };
        if self.namespace.as_deref() != Some(&**namespace) {
            self.namespace = Some(namespace.clone());
        }
        self.refs.clear();
        self.names.clear();
        self.ancestors = false;
        match step {
            Some(s) => {
                if self.via.as_deref() != Some(s.field.as_str()) {
                    self.via = Some(s.field.clone().into_boxed_str());
                }
                self.depth = s.depth;
            }
            None => {
                self.via = None;
                self.depth = 0;
            }
        }
        let mut arrays: smallvec::SmallVec<[&[u8]; 2]> = smallvec::SmallVec::new();
        for e in crate::wire::bson_walk::elements(doc.as_bytes()).map_while(Result::ok) {
            match e.element_type {
                // An ObjectId, or a string named like a reference.
                0x07 | 0x02 if e.key != b"_id" && self.refs.len() < WALK_REFS => {
                    if e.element_type == 0x02 {
                        if is_path(e.key) {
                            self.ancestors = true;
                        }
                        if !names_reference(e.key) {
                            continue;
                        }
                    }
                    let Some(h) = element_hash(&e) else {
                        continue;
                    };
                    let start = self.names.len();
                    if start + e.key.len() > u8::MAX as usize {
                        continue;
                    }
                    self.names.extend_from_slice(e.key);
                    self.refs.push((h, start as u8, e.key.len() as u8));
                }
                0x04 if arrays.len() < 2 => arrays.push(e.value),
                _ => {}
            }
        }
        if self.refs.is_empty() {
            self.namespace = None;
            return;
        }
        // An array holding one of its references: its ancestors.
        self.ancestors |= arrays.iter().any(|a| {
            crate::wire::bson_walk::elements(a)
                .map_while(Result::ok)
                .take(WALK_ARRAY)
                .filter_map(|e| element_hash(&e))
                .any(|h| self.refs.iter().any(|r| r.0 == h))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Message;
    use bson::rawdoc;

    /// The step a find of `filter` on `d.folders` takes after `walk`.
    fn step_of(walk: &ParentWalk, filter: bson::RawDocumentBuf) -> Option<WalkStep> {
        let body = rawdoc! {"find": "folders", "filter": filter, "$db": "d"};
        let frame = crate::wire::op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
        let msg = Message::parse(&frame).unwrap();
        let cmd = Command::parse(&msg).unwrap();
        walk.step(&cmd, "d.folders")
    }

    #[test]
    fn a_tree_is_walked_one_parent_at_a_time() {
        let ns: std::sync::Arc<str> = "d.folders".into();
        let ids: Vec<bson::oid::ObjectId> = (0..5).map(|_| bson::oid::ObjectId::new()).collect();
        let raw = |d: &bson::Document| bson::RawDocumentBuf::try_from(d).unwrap();
        let doc_of = |i: usize| {
            let mut d = bson::doc! {"_id": ids[i], "name": "f", "ownerId": ids[4]};
            if i > 0 {
                d.insert("parentId", ids[i - 1]);
            }
            d
        };
        let folder = |i: usize| raw(&doc_of(i));
        let mut walk = ParentWalk::default();
        walk.read(&ns, None, &[&folder(3)]);
        let mut depth = 0;
        for i in (0..3).rev() {
            let step = step_of(&walk, rawdoc! {"_id": ids[i]}).expect("a step up");
            depth += 1;
            assert_eq!(
                (step.field.as_str(), step.depth, step.ancestors),
                ("parentId", depth, false)
            );
            walk.read(&ns, Some(&step), &[&folder(i)]);
        }
        // Not a step: another field's filter, another collection's read,
        // a value the document does not name.
        walk.read(&ns, None, &[&folder(3)]);
        assert_eq!(step_of(&walk, rawdoc! {"_id": ids[2], "x": 1}), None);
        assert_eq!(step_of(&walk, rawdoc! {"_id": ids[0]}), None);
        // A list on the collection ends the walk.
        walk.read(&ns, None, &[&folder(1), &folder(2)]);
        assert_eq!(step_of(&walk, rawdoc! {"_id": ids[0]}), None);
        // Documents carrying their ancestors.
        let mut with = doc_of(3);
        with.insert("ancestors", vec![ids[0], ids[1], ids[2]]);
        walk.read(&ns, None, &[&raw(&with)]);
        assert!(step_of(&walk, rawdoc! {"_id": ids[2]}).unwrap().ancestors);
    }
}
