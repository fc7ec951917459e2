//! What a write carries: an insert's documents, an update's or
//! findAndModify's statements, a delete's filters, a bulkWrite's
//! operations and namespaces.
//!
//! Drivers send these either as an array in the command's body or, for
//! large writes, as an OP_MSG kind-1 section of the same name (a document
//! sequence beside the body); a write's statements are read from both
//! alike ([`Command::documents`] and the rest go through one reader). An
//! update's statements are read once, when the command is parsed: the
//! shape, the partition targeting, the namespace state and several rules
//! all read them.

use super::fields::{number, IndexedField};
use super::{Command, Kind};
use crate::wire::bson_walk::elements;
use crate::wire::OpMsg;
use bson::{RawArray, RawBsonRef, RawDocument};
use smallvec::SmallVec;

/// An insert's documents (or an update's statements), inline up to four
/// (most writes carry one): read without an allocation.
pub type Documents<'a> = SmallVec<[&'a RawDocument; 4]>;

/// A command's kind-1 sections, (identifier, concatenated documents): one
/// for a driver's insert, update or delete, none for most commands. The
/// first is held in place and the rest in a `Vec` (empty, so no
/// allocation, unless a message carries two): a command's sections without
/// an allocation per request. (Not smallvec or tinyvec: their heap form
/// names its item through the array type, `A::Item`, which makes them
/// invariant in the item's lifetime, and a command must stay covariant to
/// live beside its bytes in `engine::ParsedRequest`.)
#[derive(Clone, Debug, Default)]
pub(super) struct Sequences<'a> {
    first: Option<(&'a str, &'a [u8])>,
    rest: Vec<(&'a str, &'a [u8])>,
}

impl<'a> Sequences<'a> {
    fn push(&mut self, section: (&'a str, &'a [u8])) {
        if self.first.is_none() {
            self.first = Some(section);
        } else {
            self.rest.push(section);
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(&'a str, &'a [u8])> {
        self.first.iter().chain(&self.rest)
    }
}

/// An OP_MSG's kind-1 sections, as a command keeps them.
pub(super) fn sequences_of<'a>(msg: &OpMsg<'a>) -> Sequences<'a> {
    let mut out = Sequences::default();
    for s in msg.sequences() {
        out.push((s.identifier_str(), s.raw_documents()));
    }
    out
}

/// One write of an update (an element of its `updates`) or findAndModify.
#[derive(Clone, Copy, Debug)]
pub struct UpdateSpec<'a> {
    pub filter: Option<&'a RawDocument>,
    /// An operator document (`{$set: …}`) or a replacement document.
    pub update: Option<&'a RawDocument>,
    /// A pipeline update.
    pub pipeline: Option<&'a RawArray>,
    pub upsert: bool,
    pub multi: bool,
    pub array_filters: Option<&'a RawArray>,
}

impl UpdateSpec<'_> {
    /// An update document whose keys are operators (`$set`, `$push`, …),
    /// as opposed to a whole replacement document.
    pub fn is_operator_update(&self) -> bool {
        self.update
            .and_then(|u| elements(u.as_bytes()).next())
            .and_then(|e| e.ok())
            .is_some_and(|e| e.key.first() == Some(&b'$'))
    }
}

impl<'a> Command<'a> {
    /// The documents of an insert: the body's `documents` array or the
    /// kind-1 sequence of that name.
    pub fn documents(&self) -> Documents<'a> {
        if self.kind != Kind::Insert {
            return Documents::new();
        }
        self.array_or_sequence("documents")
    }

    /// The writes of an update or a findAndModify, read when the command
    /// was parsed.
    pub fn updates(&self) -> &[UpdateSpec<'a>] {
        &self.updates
    }

    pub(super) fn read_updates(&self) -> Vec<UpdateSpec<'a>> {
        match self.kind {
            Kind::Update => self
                .array_or_sequence("updates")
                .into_iter()
                .map(update_spec)
                .collect(),
            Kind::FindAndModify => {
                if self.get_bool("remove").unwrap_or(false) {
                    return Vec::new();
                }
                let (update, pipeline) = match self.get("update") {
                    Some(RawBsonRef::Document(d)) => (Some(d), None),
                    Some(RawBsonRef::Array(a)) => (None, Some(a)),
                    _ => (None, None),
                };
                vec![UpdateSpec {
                    filter: self.indexed_doc(IndexedField::Query),
                    update,
                    pipeline,
                    upsert: self.get_bool("upsert").unwrap_or(false),
                    multi: false,
                    array_filters: self.get_array("arrayFilters"),
                }]
            }
            _ => Vec::new(),
        }
    }

    /// The statements of a delete: each one's filter (`q`), and whether it
    /// deletes every document it matches (`limit: 0`).
    pub fn deletes(&self) -> Vec<(&'a RawDocument, bool)> {
        if self.kind != Kind::Delete {
            return Vec::new();
        }
        self.array_or_sequence("deletes")
            .into_iter()
            .filter_map(|d| {
                let q = d.get_document("q").ok()?;
                let limit = d.get("limit").ok().flatten().and_then(number).unwrap_or(0);
                Some((q, limit == 0))
            })
            .collect()
    }

    /// bulkWrite (MongoDB 8.0): the namespaces of `nsInfo`, by index, and
    /// the operations (each names its namespace by index).
    pub fn bulk_write(&self) -> Option<(Vec<&'a str>, Vec<&'a RawDocument>)> {
        if self.kind != Kind::BulkWrite {
            return None;
        }
        let ns: Vec<&str> = self
            .array_or_sequence("nsInfo")
            .into_iter()
            .filter_map(|d| d.get_str("ns").ok())
            .collect();
        Some((ns, self.array_or_sequence("ops").into_vec()))
    }

    /// The documents of the body's array `key` then of the kind-1
    /// sections so named, in order; none of a sensitive command's.
    fn array_or_sequence(&self, key: &str) -> Documents<'a> {
        if self.kind == Kind::Sensitive {
            return Documents::new();
        }
        let mut out = Documents::new();
        if let Some(array) = self
            .element(key.as_bytes())
            .filter(|e| e.element_type == 0x04)
        {
            out.extend(
                elements(array.value)
                    .map_while(Result::ok)
                    .filter(|d| d.element_type == 0x03)
                    .filter_map(|d| RawDocument::from_bytes(d.value).ok()),
            );
        }
        for (identifier, bytes) in self.sequences.iter() {
            if *identifier == key {
                let mut pos = 0;
                while pos < bytes.len() {
                    let Ok(doc) = crate::wire::read_doc(bytes, pos) else {
                        break;
                    };
                    pos += doc.len();
                    if let Ok(d) = RawDocument::from_bytes(doc) {
                        out.push(d);
                    }
                }
            }
        }
        out
    }
}

/// One statement of an update, read in one walk over its fields (the first
/// of a repeated key counts, as the server reads it); only a pipeline or
/// `arrayFilters` array is looked up again, by bson, for its array type.
fn update_spec(d: &RawDocument) -> UpdateSpec<'_> {
    let mut spec = UpdateSpec {
        filter: None,
        update: None,
        pipeline: None,
        upsert: false,
        multi: false,
        array_filters: None,
    };
    let mut seen = 0u8;
    for e in elements(d.as_bytes()).map_while(Result::ok) {
        let bit = match e.key {
            b"q" => 1,
            b"u" => 2,
            b"upsert" => 4,
            b"multi" => 8,
            b"arrayFilters" => 16,
            _ => continue,
        };
        if seen & bit != 0 {
            continue;
        }
        seen |= bit;
        let document = || {
            (e.element_type == 0x03)
                .then(|| RawDocument::from_bytes(e.value).ok())
                .flatten()
        };
        let flag = e.element_type == 0x08 && e.value.first().is_some_and(|b| *b != 0);
        match e.key {
            b"q" => spec.filter = document(),
            b"u" if e.element_type == 0x04 => spec.pipeline = d.get_array("u").ok(),
            b"u" => spec.update = document(),
            b"upsert" => spec.upsert = flag,
            b"multi" => spec.multi = flag,
            _ if e.element_type == 0x04 => spec.array_filters = d.get_array("arrayFilters").ok(),
            _ => {}
        }
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{msg, with_command};
    use super::*;
    use crate::wire::op_msg;
    use bson::rawdoc;

    /// Kind-1 sections past the one kept in the command itself are read
    /// as the first is: every section's documents, in order.
    #[test]
    fn sections_past_the_first_are_all_read() {
        let body = rawdoc! {"insert": "c", "ordered": true, "$db": "d"};
        let docs: Vec<bson::RawDocumentBuf> = (0..3).map(|i| rawdoc! {"n": i}).collect();
        let one: Vec<&[u8]> = vec![docs[0].as_bytes()];
        let two: Vec<&[u8]> = vec![docs[1].as_bytes(), docs[2].as_bytes()];
        let documents = |c: &Command<'_>| -> Vec<i32> {
            c.documents()
                .iter()
                .map(|d| d.get_i32("n").unwrap())
                .collect()
        };
        let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[("documents", &one)]);
        with_command(&frame, |c| {
            assert!(c.sequences.first.is_some() && c.sequences.rest.is_empty());
            assert_eq!(documents(c), vec![0]);
        });
        let sections = [("other", &one), ("documents", &one), ("documents", &two)];
        let frame = op_msg::encode(
            1,
            0,
            0,
            body.as_bytes(),
            &sections.map(|(i, d)| (i, &d[..])),
        );
        with_command(&frame, |c| {
            assert_eq!(c.sequences.rest.len(), 2);
            assert_eq!(documents(c), vec![0, 1, 2]);
        });
        let find = rawdoc! {"find": "c", "filter": {"a": 1}, "$db": "d"};
        with_command(&msg(find), |c| {
            assert!(c.sequences.first.is_none() && c.sequences.rest.is_empty());
            assert_eq!(c.collection(), Some("c"));
        });
    }

    #[test]
    fn bulk_write_reads_its_namespaces_and_operations() {
        let bulk = rawdoc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {"a": 1}}, {"update": 1, "filter": {}, "updateMods": {"$set": {"b": 1}}}],
        "nsInfo": [{"ns": "db.a"}, {"ns": "db.b"}], "$db": "admin"};
        with_command(&msg(bulk), |c| {
            let (ns, ops) = c.bulk_write().unwrap();
            assert_eq!((ns, ops.len()), (vec!["db.a", "db.b"], 2));
        });
    }
}
