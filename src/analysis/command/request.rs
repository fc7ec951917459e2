//! The request side of the command model: a [`Command`], a typed, borrowed
//! view of one request.
//!
//! Nothing is decoded up front. A command keeps its body as a
//! `&RawDocument`, and one walk over the body's top level, when it is
//! parsed, lists its fields and notes where the dozen that most accessors
//! read lie ([`IndexedField`]): an accessor is then an index or a short
//! search, never another walk. For the decoder that walk is also the check
//! of the body's top level ([`Command::parse_checked`]). Accessors answer
//! per [`Kind`](super::Kind) (a find's filter is `filter`, a count's is
//! `query`), and sensitive commands (authentication, user management) are
//! recognised by name and never looked into: their fields are not even
//! listed. What a write carries is read in `writes.rs`.

use super::fields::{number, IndexedField};
use super::writes::{sequences_of, Sequences, UpdateSpec};
use super::Kind;
use crate::analysis::trace_context::TraceId;
use crate::wire::bson_walk::{elements, field, values, Element, Value};
use crate::wire::{Message, WireError};
use bson::{RawArray, RawBsonRef, RawDocument};

/// A request decoded just enough to know what it is.
#[derive(Clone, Debug)]
pub struct Command<'a> {
    pub name: &'a str,
    pub kind: Kind,
    /// The database (`$db`, or the prefix of an OP_QUERY's collection name).
    pub db: &'a str,
    /// How much of `db` names its logical database when it is folded with
    /// others (see `analysis::databases`; 0: not folded).
    folded: u8,
    /// The whole command document.
    pub body: &'a RawDocument,
    /// Kind-1 sections: (identifier, concatenated documents).
    pub(super) sequences: Sequences<'a>,
    /// The body's top-level fields, in order (none for sensitive
    /// commands): one pass over the body, so each accessor is a short
    /// search instead of a walk.
    fields: Vec<Element<'a>>,
    /// Where the fields most accessors read are among `fields` (index + 1,
    /// 0 when absent; the first of a repeated key, as `RawDocument::get`
    /// reads), found in the same pass: each such accessor is an index.
    indexed_at: [u8; IndexedField::COUNT],
    /// The kind-3 trace-context document (OP_MSG payload type 3).
    trace_context: Option<&'a [u8]>,
    /// An update's or findAndModify's writes, read once here: the shape,
    /// the partition targeting, the state and three rules all read them.
    pub(super) updates: Vec<UpdateSpec<'a>>,
    /// An aggregate's pipeline (the array's bytes), found once here: the
    /// shape, the partition targeting and three rules read it.
    pipeline: Option<&'a [u8]>,
}

/// The value of an element walked by `bson_walk`, for the types commands
/// use (`None` sends the caller to bson's own decoder, which arrays need:
/// bson has no public constructor for a borrowed array).
fn raw_ref<'a>(e: &Element<'a>) -> Option<RawBsonRef<'a>> {
    let v = e.value;
    Some(match e.element_type {
        0x01 => RawBsonRef::Double(f64::from_le_bytes(v.get(..8)?.try_into().ok()?)),
        0x02 => RawBsonRef::String(e.as_str()?),
        0x03 => RawBsonRef::Document(RawDocument::from_bytes(v).ok()?),
        0x08 => RawBsonRef::Boolean(*v.first()? != 0),
        0x0A => RawBsonRef::Null,
        0x10 => RawBsonRef::Int32(i32::from_le_bytes(v.get(..4)?.try_into().ok()?)),
        0x12 => RawBsonRef::Int64(i64::from_le_bytes(v.get(..8)?.try_into().ok()?)),
        _ => return None,
    })
}

/// Top-level fields indexed per command; a command body has a dozen.
const MAX_FIELDS: usize = 64;

impl<'a> Command<'a> {
    /// The command of a request message (OP_MSG body, or OP_QUERY on
    /// `db.$cmd`). `None` for replies and legacy CRUD opcodes.
    pub fn parse(message: &Message<'a>) -> Option<Command<'a>> {
        Self::parse_walking(message, false).ok().flatten()
    }

    /// [`parse`](Self::parse), whose walk of an OP_MSG body's top level is
    /// also the decoder's check of it: every element is read, and one that
    /// is not valid BSON is an error rather than the end of the fields (the
    /// body's nesting is the decoder's to check: `bson_walk::check_nesting`).
    pub fn parse_checked(message: &Message<'a>) -> Result<Option<Command<'a>>, WireError> {
        Self::parse_walking(message, true)
    }

    fn parse_walking(
        message: &Message<'a>,
        strict: bool,
    ) -> Result<Option<Command<'a>>, WireError> {
        let (doc, db, sequences, trace_context) = match message {
            Message::Msg(msg) => match RawDocument::from_bytes(msg.body) {
                Ok(body) => (body, None, sequences_of(msg), msg.trace_context),
                Err(_) if strict => {
                    return Err(WireError::InvalidBson("command document's length or end"))
                }
                Err(_) => return Ok(None),
            },
            Message::Query(q) if q.is_command() => {
                let Ok(body) = RawDocument::from_bytes(q.command()) else {
                    return Ok(None);
                };
                let Ok(name) = std::str::from_utf8(q.full_collection_name) else {
                    return Ok(None);
                };
                (
                    body,
                    Some(name.strip_suffix(".$cmd").unwrap_or(name)),
                    Sequences::default(),
                    None,
                )
            }
            _ => return Ok(None),
        };
        // One allocation: a command has a dozen fields. (Not held in
        // place: a dozen fields would make the command ~700 bytes larger,
        // copied each time it is passed on, which costs more than the
        // allocation.)
        let mut fields: Vec<Element<'a>> = Vec::with_capacity(16);
        if strict && matches!(message, Message::Msg(_)) {
            for e in elements(doc.as_bytes()) {
                let e = e?;
                if fields.len() < MAX_FIELDS {
                    fields.push(e);
                }
            }
        } else {
            fields.extend(
                elements(doc.as_bytes())
                    .map_while(Result::ok)
                    .take(MAX_FIELDS),
            );
        }
        Ok(Self::from_fields(doc, db, sequences, trace_context, fields))
    }

    /// The command whose body's top-level fields are `fields`.
    fn from_fields(
        doc: &'a RawDocument,
        db: Option<&'a str>,
        sequences: Sequences<'a>,
        trace_context: Option<&'a [u8]>,
        mut fields: Vec<Element<'a>>,
    ) -> Option<Command<'a>> {
        let name = crate::wire::bson_walk::utf8(fields.first()?.key)?;
        let kind = Kind::of(name);
        let db = db.unwrap_or_else(|| {
            fields
                .iter()
                .find(|e| e.key == b"$db")
                .and_then(Element::as_str)
                .unwrap_or("")
        });
        let mut indexed_at = [0u8; IndexedField::COUNT];
        if kind == Kind::Sensitive {
            // Never looked into.
            fields.clear();
        }
        for (i, e) in fields.iter().enumerate() {
            if let Some(k) = IndexedField::of(e.key) {
                let slot = &mut indexed_at[k as usize];
                if *slot == 0 {
                    *slot = (i + 1) as u8;
                }
            }
        }
        let mut cmd = Command {
            name,
            kind,
            db,
            folded: 0,
            body: doc,
            sequences,
            fields,
            indexed_at,
            trace_context,
            updates: Vec::new(),
            pipeline: None,
        };
        cmd.updates = cmd.read_updates();
        if kind == Kind::Aggregate {
            cmd.pipeline = cmd
                .indexed_element(IndexedField::Pipeline)
                .filter(|e| e.element_type == 0x04)
                .map(|e| e.value);
        }
        Some(cmd)
    }

    /// The W3C trace id the driver attached (payload type 3), if any and
    /// well formed.
    pub fn trace_id(&self) -> Option<TraceId> {
        TraceId::from_context_document(self.trace_context?)
    }

    /// The same with the driver's span id (see `TraceContext`).
    pub fn trace_context(&self) -> Option<crate::analysis::trace_context::TraceContext> {
        crate::analysis::trace_context::TraceContext::from_context_document(self.trace_context?)
    }

    /// The top-level field `key`, as walked (the first of a repeated key).
    pub(super) fn element(&self, key: &[u8]) -> Option<Element<'a>> {
        self.fields.iter().find(|e| e.key == key).copied()
    }

    /// A top-level field of the command.
    pub fn get(&self, key: &str) -> Option<RawBsonRef<'a>> {
        let element = self.element(key.as_bytes())?;
        raw_ref(&element).or_else(|| self.body.get(key).ok().flatten())
    }

    /// [`get`](Self::get) of a field indexed while parsing.
    fn get_indexed(&self, k: IndexedField) -> Option<RawBsonRef<'a>> {
        let element = self.indexed_element(k)?;
        raw_ref(element).or_else(|| self.body.get(k.key()).ok().flatten())
    }

    /// A field indexed while parsing, as walked.
    fn indexed_element(&self, k: IndexedField) -> Option<&Element<'a>> {
        let i = usize::from(self.indexed_at[k as usize]).checked_sub(1)?;
        self.fields.get(i)
    }

    /// An indexed field's document, never a sensitive command's.
    pub(super) fn indexed_doc(&self, k: IndexedField) -> Option<&'a RawDocument> {
        self.get_indexed(k).and_then(RawBsonRef::as_document)
    }

    /// The value of the command's first field (whose key is the command's
    /// name), when it is a string: the collection, for most commands.
    fn first_value_str(&self) -> Option<&'a str> {
        self.fields.first().and_then(Element::as_str)
    }

    /// A top-level field's value as the walker reads it (no bson decoding;
    /// arrays and documents as their bytes).
    pub fn value(&self, key: &str) -> Option<Value<'a>> {
        Some(self.element(key.as_bytes())?.read())
    }

    pub fn get_str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(RawBsonRef::as_str)
    }

    pub fn get_document(&self, key: &str) -> Option<&'a RawDocument> {
        self.get(key).and_then(RawBsonRef::as_document)
    }

    pub fn get_array(&self, key: &str) -> Option<&'a RawArray> {
        self.get(key).and_then(RawBsonRef::as_array)
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(RawBsonRef::as_bool)
    }

    /// The collection the command is on (the string value of its first key),
    /// or for getMore the `collection` field.
    pub fn collection(&self) -> Option<&'a str> {
        if self.kind == Kind::Sensitive {
            return None;
        }
        match self.kind {
            Kind::GetMore | Kind::CustomAction => self
                .get_indexed(IndexedField::Collection)
                .and_then(RawBsonRef::as_str),
            Kind::ShardCollection => {
                let full = self.first_value_str()?;
                full.split_once('.').map(|(_, c)| c)
            }
            Kind::Explain => None,
            _ => self.first_value_str(),
        }
    }

    /// Reads its database as the logical one `fold` makes of it, in its
    /// namespace and everything keyed by it.
    pub fn fold_db(&mut self, fold: &crate::analysis::databases::Fold) {
        self.folded = fold
            .prefix_len(self.db)
            .and_then(|n| u8::try_from(n).ok())
            .unwrap_or(0);
    }

    /// The logical database's prefix, when the database is folded:
    /// `app_test_` of `app_test_*`.
    pub fn folded_prefix(&self) -> Option<&'a str> {
        (self.folded > 0).then(|| &self.db[..usize::from(self.folded)])
    }

    /// `db.collection`, when the command names a collection (the logical
    /// database when it is folded: `app_test_*.users`).
    pub fn namespace(&self) -> Option<String> {
        self.namespace_pieces().map(|p| p.concat())
    }

    /// [`Command::namespace`] in the pieces that make it, joined by
    /// nothing (written without allocating where it is only hashed).
    pub fn namespace_pieces(&self) -> Option<[&'a str; 3]> {
        if self.kind == Kind::ShardCollection {
            return self.first_value_str().map(|full| [full, "", ""]);
        }
        match self.folded_prefix() {
            None => self.collection().map(|c| [self.db, ".", c]),
            Some(prefix) => self.collection().map(|c| [prefix, "*.", c]),
        }
    }

    fn doc(&self, key: &str) -> Option<&'a RawDocument> {
        if self.kind == Kind::Sensitive {
            return None;
        }
        self.get_document(key)
    }

    /// The query filter of find, count, distinct, findAndModify (`query`).
    pub fn filter(&self) -> Option<&'a RawDocument> {
        match self.kind {
            Kind::Find => self.indexed_doc(IndexedField::Filter),
            Kind::Count | Kind::Distinct | Kind::FindAndModify => {
                self.indexed_doc(IndexedField::Query)
            }
            _ => None,
        }
    }

    pub fn projection(&self) -> Option<&'a RawDocument> {
        match self.kind {
            Kind::Find => self.indexed_doc(IndexedField::Projection),
            Kind::FindAndModify => self.indexed_doc(IndexedField::Fields),
            _ => None,
        }
    }

    pub fn sort(&self) -> Option<&'a RawDocument> {
        match self.kind {
            Kind::Find | Kind::FindAndModify => self.indexed_doc(IndexedField::Sort),
            _ => None,
        }
    }

    pub fn hint(&self) -> Option<Value<'a>> {
        let i = usize::from(self.indexed_at[IndexedField::Hint as usize]).checked_sub(1)?;
        Some(self.fields.get(i)?.read())
    }

    /// Whether a write stops at its first failed statement (`ordered`,
    /// true unless said otherwise).
    pub fn ordered(&self) -> bool {
        !matches!(
            self.get_indexed(IndexedField::Ordered),
            Some(RawBsonRef::Boolean(false))
        )
    }

    /// Whether the command has a `skip`.
    pub fn has_skip(&self) -> bool {
        self.get_indexed(IndexedField::Skip).is_some()
    }

    pub fn limit(&self) -> Option<i64> {
        number(self.get_indexed(IndexedField::Limit)?)
    }

    /// The `comment` field, when it is a string: the access-pattern name.
    pub fn comment(&self) -> Option<&'a str> {
        if self.kind == Kind::Sensitive {
            return None;
        }
        self.get_indexed(IndexedField::Comment)
            .and_then(RawBsonRef::as_str)
    }

    /// The logical session id's UUID bytes, when the command has one.
    pub fn lsid(&self) -> Option<&'a [u8]> {
        let lsid = self.indexed_doc(IndexedField::Lsid)?;
        match lsid.get("id").ok().flatten()? {
            RawBsonRef::Binary(b) => Some(b.bytes),
            _ => None,
        }
    }

    /// The stages of an aggregate: the array's bytes, for the walker
    /// (`bson_walk::values`).
    pub fn pipeline(&self) -> Option<&'a [u8]> {
        self.pipeline
    }

    /// The `$match` of an aggregate's first stage, when it starts with one.
    pub fn first_match(&self) -> Option<&'a RawDocument> {
        let Value::Document(stage) = values(self.pipeline?).next()?.ok()? else {
            return None;
        };
        let m = field(stage, b"$match")?;
        (m.element_type == 0x03)
            .then(|| RawDocument::from_bytes(m.value).ok())
            .flatten()
    }

    /// Whether it counts documents: `count`, or a pipeline with `$count`
    /// or a `$group` summing 1 (what drivers send for `countDocuments`).
    pub fn counts(&self) -> bool {
        match self.kind {
            Kind::Count => true,
            Kind::Aggregate => self.pipeline().is_some_and(counts_in),
            _ => false,
        }
    }

    /// Whether the documents a reply returns are the collection's documents
    /// as stored (a find or findAndModify without projection, or a pipeline
    /// that only filters, sorts and cuts), rather than projected or
    /// computed ones. (A getMore's are its cursor's: the caller knows.)
    pub fn returns_stored_documents(&self) -> bool {
        match self.kind {
            Kind::Find | Kind::FindAndModify => self.projection().is_none_or(|p| p.is_empty()),
            Kind::Aggregate => self.pipeline().is_some_and(|p| {
                values(p).map_while(Result::ok).all(|stage| {
                    stage
                        .as_document()
                        .and_then(|s| elements(s).next())
                        .and_then(Result::ok)
                        .is_some_and(|e| {
                            matches!(
                                e.key,
                                b"$match" | b"$sort" | b"$limit" | b"$skip" | b"$sample"
                            )
                        })
                })
            }),
            _ => false,
        }
    }

    /// The cursor id of a getMore.
    pub fn cursor_id(&self) -> Option<i64> {
        match self.kind {
            Kind::GetMore => number(self.get(self.name)?),
            _ => None,
        }
    }

    /// The cursor ids a killCursors closes.
    pub fn killed_cursors(&self) -> Vec<i64> {
        if self.kind != Kind::KillCursors {
            return Vec::new();
        }
        self.body
            .get_array("cursors")
            .map(|a| a.into_iter().flatten().filter_map(number).collect())
            .unwrap_or_default()
    }

    /// The command inside an `explain`.
    pub fn explained(&self) -> Option<&'a RawDocument> {
        match self.kind {
            Kind::Explain => self.doc(self.name),
            _ => None,
        }
    }

    /// shardCollection's key pattern (`{field: 1 | "hashed", …}`).
    pub fn shard_key_pattern(&self) -> Option<&'a RawDocument> {
        match self.kind {
            Kind::ShardCollection => self.doc("key"),
            _ => None,
        }
    }

    /// The shard key of shardCollection (`key`) or of a Cosmos DB
    /// `customAction: "CreateCollection" | "UpdateCollection"` (`shardKey`,
    /// a single path), as a list of paths.
    pub fn shard_key(&self) -> Option<Vec<String>> {
        match self.kind {
            Kind::ShardCollection => Some(
                self.doc("key")?
                    .iter()
                    .flatten()
                    .map(|(k, _)| k.as_str().to_string())
                    .collect(),
            ),
            Kind::CustomAction => {
                let action = self.get_str(self.name)?;
                if action != "CreateCollection" && action != "UpdateCollection" {
                    return None;
                }
                Some(vec![self.get_str("shardKey")?.to_string()])
            }
            _ => None,
        }
    }
}

/// Whether a pipeline counts: a `$count` stage, or a `$group` summing 1.
fn counts_in(pipeline: &[u8]) -> bool {
    values(pipeline)
        .map_while(Result::ok)
        .filter_map(|stage| stage.as_document())
        .any(|stage| {
            field(stage, b"$count").is_some()
                || field(stage, b"$group")
                    .filter(|g| g.element_type == 0x03)
                    .is_some_and(|g| {
                        values(g.value).map_while(Result::ok).any(|acc| match acc {
                            Value::Document(a) => field(a, b"$sum").is_some_and(|s| {
                                matches!(s.read(), Value::Int32(1) | Value::Int64(1))
                            }),
                            _ => false,
                        })
                    })
        })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{msg, with_command};
    use super::*;
    use crate::wire::{op_msg, Message};
    use bson::{cstr, rawdoc};

    /// A `$count` stage or a `$group` summing 1 counts; a sum of a field,
    /// or a pipeline that only filters, does not.
    #[test]
    fn counts_in_recognises_counting_pipelines() {
        let counts = |d: bson::RawDocumentBuf| counts_in(d.get_array("p").unwrap().as_bytes());
        assert!(counts(
            rawdoc! {"p": [{"$match": {"postId": 1}}, {"$count": "n"}]}
        ));
        assert!(counts(
            rawdoc! {"p": [{"$group": {"_id": "$postId", "n": {"$sum": 1}}}]}
        ));
        assert!(counts(
            rawdoc! {"p": [{"$group": {"_id": null, "n": {"$sum": 1i64}}}]}
        ));
        assert!(!counts(
            rawdoc! {"p": [{"$group": {"_id": "$postId", "t": {"$sum": "$likes"}}}]}
        ));
        assert!(!counts(
            rawdoc! {"p": [{"$match": {"postId": 1}}, {"$limit": 5}]}
        ));
        assert!(!counts(rawdoc! {"p": []}));
    }

    /// Reads return stored documents when nothing reshapes them: a find
    /// without projection, a pipeline that only filters, sorts and cuts.
    #[test]
    fn stored_documents_are_those_nothing_reshapes() {
        let stored = |body: bson::RawDocumentBuf| {
            let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
            let msg = Message::parse(&frame).unwrap();
            Command::parse(&msg).unwrap().returns_stored_documents()
        };
        assert!(stored(
            rawdoc! {"find": "c", "filter": {"a": 1}, "$db": "d"}
        ));
        assert!(stored(rawdoc! {"find": "c", "projection": {}, "$db": "d"}));
        assert!(!stored(
            rawdoc! {"find": "c", "projection": {"a": 1}, "$db": "d"}
        ));
        assert!(stored(
            rawdoc! {"aggregate": "c", "pipeline": [{"$match": {"a": 1}}, {"$sort": {"t": 1}}, {"$skip": 1}, {"$limit": 2}, {"$sample": {"size": 1}}], "cursor": {}, "$db": "d"}
        ));
        assert!(!stored(
            rawdoc! {"aggregate": "c", "pipeline": [{"$match": {"a": 1}}, {"$project": {"a": 1}}], "cursor": {}, "$db": "d"}
        ));
        assert!(!stored(
            rawdoc! {"aggregate": "c", "pipeline": [{"$match": {"a": 1}}, 7], "cursor": {}, "$db": "d"}
        ));
        assert!(!stored(
            rawdoc! {"aggregate": "c", "pipeline": "x", "cursor": {}, "$db": "d"}
        ));
        assert!(!stored(
            rawdoc! {"insert": "c", "documents": [{"a": 1}], "$db": "d"}
        ));
    }

    /// An aggregate's first stage's `$match` (the first of a repeated
    /// key), and none when the pipeline starts otherwise or is no array.
    #[test]
    fn first_match_is_the_first_stages() {
        let first = |body: bson::RawDocumentBuf| {
            let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
            let msg = Message::parse(&frame).unwrap();
            let cmd = Command::parse(&msg).unwrap();
            cmd.first_match().map(|m| m.as_bytes().to_vec())
        };
        assert_eq!(
            first(
                rawdoc! {"aggregate": "posts", "pipeline": [{"$match": {"a": 1}, "$match": {"b": 2}}, {"$match": {"c": 3}}], "$db": "blog"}
            ),
            Some(rawdoc! {"a": 1}.as_bytes().to_vec())
        );
        let none = [
            rawdoc! {"aggregate": "posts", "pipeline": [{"$sort": {"a": 1}}, {"$match": {"c": 3}}], "$db": "blog"},
            rawdoc! {"aggregate": "posts", "pipeline": [], "$db": "blog"},
            rawdoc! {"aggregate": "posts", "pipeline": "x", "$db": "blog"},
            rawdoc! {"find": "posts", "filter": {"a": 1}, "$db": "blog"},
        ];
        for body in none {
            assert_eq!(first(body), None);
        }
    }

    /// An OP_MSG with a body and, after it, a kind-3 section holding `trace`.
    fn with_trace_section(body: &bson::RawDocumentBuf, trace: &bson::RawDocumentBuf) -> Vec<u8> {
        let mut frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
        frame.push(3);
        frame.extend_from_slice(trace.as_bytes());
        let len = frame.len() as i32;
        frame[..4].copy_from_slice(&len.to_le_bytes());
        frame
    }

    /// A command's name is read by `bson_walk::utf8`: the common names
    /// and a non-ASCII one as they are, invalid bytes as no name.
    #[test]
    fn command_names_read_as_utf8_reads_them() {
        let command_name = crate::wire::bson_walk::utf8;
        for name in [
            "find",
            "insert",
            "update",
            "delete",
            "aggregate",
            "getMore",
            "findAndModify",
            "count",
            "distinct",
            "killCursors",
            "hello",
            "ping",
            "listIndexes",
            "isMaster",
            "été",
        ] {
            assert_eq!(command_name(name.as_bytes()), Some(name));
        }
        assert_eq!(command_name(b"\xff\xfe"), None, "not UTF-8: no name");
        assert_eq!(command_name(b"finds"), Some("finds"));
    }

    /// The fields indexed while parsing read as `get` reads them: every
    /// known key, the first of a repeated one, one of an unexpected type,
    /// a known key as the command's name, and nothing of a sensitive
    /// command.
    #[test]
    fn indexed_fields_read_as_get_reads_them() {
        let all = [
            IndexedField::Filter,
            IndexedField::Query,
            IndexedField::Projection,
            IndexedField::Fields,
            IndexedField::Sort,
            IndexedField::Limit,
            IndexedField::Skip,
            IndexedField::Comment,
            IndexedField::Hint,
            IndexedField::Lsid,
            IndexedField::Pipeline,
            IndexedField::Collection,
            IndexedField::Ordered,
        ];
        assert_eq!(all.len(), IndexedField::COUNT);
        let mut body = rawdoc! {
            "collection": "c", "filter": {"a": 1}, "query": {"q": 1}, "projection": {"p": 1},
            "fields": {"f": 1}, "sort": {"s": -1}, "limit": 5i64, "skip": [1],
            "comment": "why", "hint": "idx", "lsid": {"id": 1}, "pipeline": [{"$match": {}}],
            "ordered": false, "$db": "d",
        };
        body.append(cstr!("filter"), rawdoc! {"second": 1});
        body.append(cstr!("collection"), "other");
        let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
        with_command(&frame, |cmd| {
            assert_eq!(
                cmd.indexed_at[IndexedField::Collection as usize],
                1,
                "the name, first"
            );
            for k in all {
                assert!(cmd.get_indexed(k).is_some(), "{k:?}");
                assert_eq!(cmd.get_indexed(k), cmd.get(k.key()), "{k:?}");
                assert_eq!(IndexedField::of(k.key().as_bytes()), Some(k));
            }
            assert_eq!(
                cmd.indexed_doc(IndexedField::Filter).unwrap().as_bytes(),
                rawdoc! {"a": 1}.as_bytes()
            );
        });
        let sensitive =
            rawdoc! {"saslStart": 1, "comment": "c", "filter": {"a": 1}, "$db": "admin"};
        let frame = op_msg::encode(1, 0, 0, sensitive.as_bytes(), &[]);
        with_command(&frame, |cmd| {
            assert!(all.iter().all(|k| cmd.get_indexed(*k).is_none()));
        });
    }

    /// The trace id is read from the payload type 3 section the driver
    /// attached, through `trace_context` (whose tests hold the values a
    /// `traceparent` may and may not take).
    #[test]
    fn the_trace_id_is_read_from_payload_type_3() {
        let body = rawdoc! {"find": "posts", "filter": {"a": 1}, "$db": "blog"};
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let frame = with_trace_section(&body, &rawdoc! {"otel": {"traceparent": parent}});
        with_command(&frame, |cmd| {
            assert_eq!(cmd.name, "find");
            assert_eq!(
                cmd.trace_id().unwrap().to_string(),
                "4bf92f3577b34da6a3ce929d0e0e4736"
            );
        });
        // Without the section, or with a value that is not a traceparent.
        with_command(&msg(body.clone()), |cmd| assert_eq!(cmd.trace_id(), None));
        let bad = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        let frame = with_trace_section(&body, &rawdoc! {"otel": {"traceparent": bad}});
        with_command(&frame, |cmd| assert_eq!(cmd.trace_id(), None));
    }

    #[test]
    fn explain_shard_keys_and_sensitive_commands() {
        let explain = rawdoc! {"explain": {"find": "c", "filter": {"a": 1}}, "verbosity": "queryPlanner", "$db": "d"};
        with_command(&msg(explain), |c| {
            assert_eq!(c.kind, Kind::Explain);
            assert_eq!(c.explained().unwrap().get_str("find").unwrap(), "c");
        });
        let shard = rawdoc! {"shardCollection": "blog.posts", "key": {"postId": "hashed", "type": 1}, "$db": "admin"};
        with_command(&msg(shard), |c| {
            assert_eq!(
                c.shard_key(),
                Some(vec!["postId".to_string(), "type".to_string()])
            );
            assert_eq!(c.namespace().as_deref(), Some("blog.posts"));
        });
        let cosmos = rawdoc! {"customAction": "CreateCollection", "collection": "users", "shardKey": "userId", "$db": "blog"};
        with_command(&msg(cosmos), |c| {
            assert_eq!(c.shard_key(), Some(vec!["userId".to_string()]));
            assert_eq!(c.namespace().as_deref(), Some("blog.users"));
        });
        let sasl = rawdoc! {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": bson::Binary{subtype: bson::spec::BinarySubtype::Generic, bytes: b"n,,n=alice,r=abc".to_vec()}, "comment": "x", "$db": "admin"};
        with_command(&msg(sasl), |c| {
            assert_eq!(c.kind, Kind::Sensitive);
            assert_eq!((c.comment(), c.collection(), c.lsid()), (None, None, None));
            assert!(c.documents().is_empty() && c.filter().is_none());
        });
        let unknown = rawdoc! {"frobnicate": "c", "$db": "d"};
        with_command(&msg(unknown), |c| assert_eq!(c.kind, Kind::Other));
    }
}
