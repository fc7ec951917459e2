//! The command model: a typed, borrowed view of one request and its reply.
//!
//! Nothing is decoded up front. A [`Command`] keeps the body as a
//! `&RawDocument` plus the kind-1 document sequences, and its accessors read
//! the fields a rule or a shape needs, when it needs them (bson's raw API).
//! Sensitive commands (authentication, user management) are recognised by
//! name and never looked into.

use crate::wire::bson_walk::{elements, field, values, Element, Value};
use crate::wire::{Message, OpMsg, WireError};
use bson::{RawArray, RawBsonRef, RawDocument};
use smallvec::SmallVec;

/// What a command does, as far as analysis cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Find,
    Aggregate,
    Count,
    Distinct,
    Insert,
    Update,
    Delete,
    FindAndModify,
    GetMore,
    KillCursors,
    BulkWrite,
    Explain,
    Create,
    Drop,
    CreateIndexes,
    ListIndexes,
    ShardCollection,
    CustomAction,
    Hello,
    /// Authentication and user management: counted by name, never read.
    Sensitive,
    /// Anything else: passed through and counted by name.
    Other,
}

impl Kind {
    pub fn of(name: &str) -> Kind {
        if super::is_sensitive(name) {
            return Kind::Sensitive;
        }
        match name {
            "find" => Kind::Find,
            "aggregate" => Kind::Aggregate,
            "count" => Kind::Count,
            "distinct" => Kind::Distinct,
            "insert" => Kind::Insert,
            "update" => Kind::Update,
            "delete" => Kind::Delete,
            "findAndModify" | "findandmodify" => Kind::FindAndModify,
            "getMore" => Kind::GetMore,
            "killCursors" => Kind::KillCursors,
            "bulkWrite" => Kind::BulkWrite,
            "explain" => Kind::Explain,
            "create" => Kind::Create,
            "drop" => Kind::Drop,
            "createIndexes" => Kind::CreateIndexes,
            "listIndexes" => Kind::ListIndexes,
            "shardCollection" | "shardcollection" => Kind::ShardCollection,
            "customAction" => Kind::CustomAction,
            "hello" | "isMaster" | "ismaster" => Kind::Hello,
            _ => Kind::Other,
        }
    }

    /// Reads (and read-like commands whose filter selects documents).
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Kind::Find | Kind::Aggregate | Kind::Count | Kind::Distinct
        )
    }

    pub fn is_write(self) -> bool {
        matches!(
            self,
            Kind::Insert | Kind::Update | Kind::Delete | Kind::FindAndModify | Kind::BulkWrite
        )
    }

    /// Whether the command is about the data an application models (as
    /// opposed to handshakes, sessions, admin and cursors housekeeping).
    pub fn is_data(self) -> bool {
        self.is_read() || self.is_write()
    }
}

/// A request decoded just enough to know what it is.
#[derive(Clone, Debug)]
pub struct Command<'a> {
    pub name: &'a str,
    pub kind: Kind,
    /// The database (`$db`, or the prefix of an OP_QUERY's collection name).
    pub db: &'a str,
    /// The whole command document.
    pub body: &'a RawDocument,
    /// Kind-1 sections: (identifier, concatenated documents).
    sequences: Sequences<'a>,
    /// The body's top-level fields, in order (none for sensitive
    /// commands): one pass over the body, so each accessor is a short
    /// search instead of a walk.
    fields: Vec<Element<'a>>,
    /// Where the fields most accessors read are among `fields` (index + 1,
    /// 0 when absent; the first of a repeated key, as `RawDocument::get`
    /// reads), found in the same pass: each such accessor is an index.
    known: [u8; Known::COUNT],
    /// The kind-3 trace-context document (OP_MSG payload type 3).
    trace_context: Option<&'a [u8]>,
    /// An update's or findAndModify's writes, read once here: the shape,
    /// the partition targeting, the state and three rules all read them.
    updates: Vec<UpdateSpec<'a>>,
    /// An aggregate's pipeline (the array's bytes), found once here: the
    /// shape, the partition targeting and three rules read it.
    pipeline: Option<&'a [u8]>,
}

/// The top-level fields read on most requests (by the shape, the origin
/// cache and the rules), indexed once per command by [`Command::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    Filter,
    Query,
    Projection,
    Fields,
    Sort,
    Limit,
    Skip,
    Comment,
    Hint,
    Lsid,
    Pipeline,
    Collection,
    Ordered,
}

impl Known {
    const COUNT: usize = 13;

    fn of(key: &[u8]) -> Option<Known> {
        Some(match key {
            b"filter" => Known::Filter,
            b"query" => Known::Query,
            b"projection" => Known::Projection,
            b"fields" => Known::Fields,
            b"sort" => Known::Sort,
            b"limit" => Known::Limit,
            b"skip" => Known::Skip,
            b"comment" => Known::Comment,
            b"hint" => Known::Hint,
            b"lsid" => Known::Lsid,
            b"pipeline" => Known::Pipeline,
            b"collection" => Known::Collection,
            b"ordered" => Known::Ordered,
            _ => return None,
        })
    }

    fn key(self) -> &'static str {
        match self {
            Known::Filter => "filter",
            Known::Query => "query",
            Known::Projection => "projection",
            Known::Fields => "fields",
            Known::Sort => "sort",
            Known::Limit => "limit",
            Known::Skip => "skip",
            Known::Comment => "comment",
            Known::Hint => "hint",
            Known::Lsid => "lsid",
            Known::Pipeline => "pipeline",
            Known::Collection => "collection",
            Known::Ordered => "ordered",
        }
    }
}

/// A W3C trace id (the second field of a `traceparent`), as drivers put it
/// in an OP_MSG's payload type 3: `{otel: {traceparent: "00-<trace id>-
/// <parent id>-<flags>"}}`. Shown as the 32 lowercase hex digits tracing
/// tools search by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceId([u8; 16]);

impl TraceId {
    /// Reads a `traceparent` value: a version other than `ff`, a trace id
    /// that is not all zeros, lowercase hex throughout (W3C Trace Context
    /// §3.2). Fields after the flags (later versions) are allowed.
    pub fn from_traceparent(value: &str) -> Option<TraceId> {
        let mut fields = value.split('-');
        let (version, trace, parent, flags) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !hex(version, 2) || version == "ff" || !hex(parent, 16) || !hex(flags, 2) {
            return None;
        }
        if version == "00" && fields.next().is_some() {
            return None;
        }
        if !hex(trace, 32) {
            return None;
        }
        let mut id = [0u8; 16];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&trace[2 * i..2 * i + 2], 16).ok()?;
        }
        (id != [0; 16]).then_some(TraceId(id))
    }
}

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
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

/// A command's kind-1 sections, (identifier, concatenated documents): one
/// for a driver's insert, update or delete, none for most commands. The
/// first is held in place and the rest in a `Vec` (empty, so no
/// allocation, unless a message carries two): a command's sections without
/// an allocation per request. (Not smallvec or tinyvec: their heap form
/// names its item through the array type, `A::Item`, which makes them
/// invariant in the item's lifetime, and a command must stay covariant to
/// live beside its bytes in `engine::ParsedRequest`.)
#[derive(Clone, Debug, Default)]
struct Sequences<'a> {
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

/// A write inside an `update` command (one element of `updates`).
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
        // One allocation: a command has a dozen fields. (Not in place:
        // measured, a command holding twelve fields moves ~700 bytes more
        // each time it is passed on, which cost more than the allocation,
        // +5 % per find.)
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
        Ok(Self::indexed(doc, db, sequences, trace_context, fields))
    }

    /// The command whose body's top-level fields are `fields`.
    fn indexed(
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
        let mut known = [0u8; Known::COUNT];
        if kind == Kind::Sensitive {
            // Never looked into.
            fields.clear();
        }
        for (i, e) in fields.iter().enumerate() {
            if let Some(k) = Known::of(e.key) {
                let slot = &mut known[k as usize];
                if *slot == 0 {
                    *slot = (i + 1) as u8;
                }
            }
        }
        let mut cmd = Command {
            name,
            kind,
            db,
            body: doc,
            sequences,
            fields,
            known,
            trace_context,
            updates: Vec::new(),
            pipeline: None,
        };
        cmd.updates = cmd.read_updates();
        if kind == Kind::Aggregate {
            cmd.pipeline = cmd
                .known_element(Known::Pipeline)
                .filter(|e| e.element_type == 0x04)
                .map(|e| e.value);
        }
        Some(cmd)
    }

    /// The W3C trace id the driver attached (payload type 3), if any and
    /// well formed.
    pub fn trace_id(&self) -> Option<TraceId> {
        let context = RawDocument::from_bytes(self.trace_context?).ok()?;
        let otel = context.get_document("otel").ok()?;
        TraceId::from_traceparent(otel.get_str("traceparent").ok()?)
    }

    fn find(&self, key: &[u8]) -> Option<Element<'a>> {
        self.fields.iter().find(|e| e.key == key).copied()
    }

    /// A top-level field of the command.
    pub fn get(&self, key: &str) -> Option<RawBsonRef<'a>> {
        let element = self.find(key.as_bytes())?;
        raw_ref(&element).or_else(|| self.body.get(key).ok().flatten())
    }

    /// [`get`](Self::get) of a field indexed while parsing.
    fn known(&self, k: Known) -> Option<RawBsonRef<'a>> {
        let element = self.known_element(k)?;
        raw_ref(element).or_else(|| self.body.get(k.key()).ok().flatten())
    }

    /// A field indexed while parsing, as walked.
    fn known_element(&self, k: Known) -> Option<&Element<'a>> {
        let i = usize::from(self.known[k as usize]).checked_sub(1)?;
        self.fields.get(i)
    }

    /// A known field's document, never a sensitive command's.
    fn known_doc(&self, k: Known) -> Option<&'a RawDocument> {
        self.known(k).and_then(RawBsonRef::as_document)
    }

    /// The command's first field (its name) as a string.
    fn first_str(&self) -> Option<&'a str> {
        self.fields.first().and_then(Element::as_str)
    }

    /// A top-level field's value as the walker reads it (no bson decoding;
    /// arrays and documents as their bytes).
    pub fn value(&self, key: &str) -> Option<Value<'a>> {
        Some(self.find(key.as_bytes())?.read())
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
            Kind::GetMore | Kind::CustomAction => {
                self.known(Known::Collection).and_then(RawBsonRef::as_str)
            }
            Kind::ShardCollection => {
                let full = self.first_str()?;
                full.split_once('.').map(|(_, c)| c)
            }
            Kind::Explain => None,
            _ => self.first_str(),
        }
    }

    /// `db.collection`, when the command names a collection.
    pub fn namespace(&self) -> Option<String> {
        self.namespace_pieces().map(|p| p.concat())
    }

    /// [`Command::namespace`] in the pieces that make it, joined by
    /// nothing (written without allocating where it is only hashed).
    pub fn namespace_pieces(&self) -> Option<[&'a str; 3]> {
        if self.kind == Kind::ShardCollection {
            return self.first_str().map(|full| [full, "", ""]);
        }
        self.collection().map(|c| [self.db, ".", c])
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
            Kind::Find => self.known_doc(Known::Filter),
            Kind::Count | Kind::Distinct | Kind::FindAndModify => self.known_doc(Known::Query),
            _ => None,
        }
    }

    pub fn projection(&self) -> Option<&'a RawDocument> {
        match self.kind {
            Kind::Find => self.known_doc(Known::Projection),
            Kind::FindAndModify => self.known_doc(Known::Fields),
            _ => None,
        }
    }

    pub fn sort(&self) -> Option<&'a RawDocument> {
        match self.kind {
            Kind::Find | Kind::FindAndModify => self.known_doc(Known::Sort),
            _ => None,
        }
    }

    pub fn hint(&self) -> Option<Value<'a>> {
        let i = usize::from(self.known[Known::Hint as usize]).checked_sub(1)?;
        Some(self.fields.get(i)?.read())
    }

    /// Whether a write stops at its first failed statement (`ordered`,
    /// true unless said otherwise).
    pub fn ordered(&self) -> bool {
        !matches!(self.known(Known::Ordered), Some(RawBsonRef::Boolean(false)))
    }

    /// Whether the command has a `skip`.
    pub fn has_skip(&self) -> bool {
        self.known(Known::Skip).is_some()
    }

    pub fn limit(&self) -> Option<i64> {
        number(self.known(Known::Limit)?)
    }

    /// The `comment` field, when it is a string: the access-pattern name.
    pub fn comment(&self) -> Option<&'a str> {
        if self.kind == Kind::Sensitive {
            return None;
        }
        self.known(Known::Comment).and_then(RawBsonRef::as_str)
    }

    /// The logical session id's UUID bytes, when the command has one.
    pub fn lsid(&self) -> Option<&'a [u8]> {
        let lsid = self.known_doc(Known::Lsid)?;
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

    /// The documents of an insert: the body's `documents` array or the
    /// kind-1 sequence of that name.
    pub fn documents(&self) -> Documents<'a> {
        if self.kind != Kind::Insert {
            return Documents::new();
        }
        self.array_or_sequence("documents")
    }

    /// The statements of an update.
    pub fn updates(&self) -> &[UpdateSpec<'a>] {
        &self.updates
    }

    fn read_updates(&self) -> Vec<UpdateSpec<'a>> {
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
                    filter: self.known_doc(Known::Query),
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

    /// The filters of a delete (`q` of each statement).
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

    fn array_or_sequence(&self, key: &str) -> Documents<'a> {
        if self.kind == Kind::Sensitive {
            return Documents::new();
        }
        let mut out = Documents::new();
        if let Some(array) = self.find(key.as_bytes()).filter(|e| e.element_type == 0x04) {
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

/// An insert's documents (or an update's statements), inline up to four
/// (most writes carry one): read without an allocation.
pub type Documents<'a> = SmallVec<[&'a RawDocument; 4]>;

fn sequences_of<'a>(msg: &OpMsg<'a>) -> Sequences<'a> {
    let mut out = Sequences::default();
    for s in msg.sequences() {
        out.push((s.identifier_str(), s.raw_documents()));
    }
    out
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

/// `{$each: [...], $slice: N}`: a walked push that keeps its array bounded.
pub fn is_sliced_element(e: &Element<'_>) -> bool {
    e.element_type == 0x03 && is_sliced_modifiers(e.value)
}

/// [`is_sliced_element`] of a modifiers document's bytes (`{$each: …,
/// $slice: …}`).
pub fn is_sliced_modifiers(m: &[u8]) -> bool {
    field(m, b"$each").is_some() && field(m, b"$slice").is_some()
}

/// The bucket pattern bounds the array through the filter instead of
/// `$slice`: `{count: {$lt: 100}}` with `$inc: {count: 1}` in the same
/// update, or `{"comments.99": {$exists: false}}`.
pub fn is_bucketed(filter: Option<&RawDocument>, update: Option<&RawDocument>) -> bool {
    let Some(filter) = filter else { return false };
    // The first `$inc`, as the server reads it.
    let inc = update.and_then(|u| field(u.as_bytes(), b"$inc"));
    let incremented = |field: &[u8]| {
        inc.filter(|e| e.element_type == 0x03).is_some_and(|inc| {
            elements(inc.value)
                .map_while(Result::ok)
                .any(|e| e.key == field)
        })
    };
    elements(filter.as_bytes()).map_while(Result::ok).any(|e| {
        let Value::Document(cond) = e.read() else {
            return false;
        };
        let ops = || elements(cond).map_while(Result::ok);
        let bounded_counter =
            incremented(e.key) && ops().any(|op| matches!(op.key, b"$lt" | b"$lte"));
        let index_absent = e
            .key
            .rsplit(|b| *b == b'.')
            .next()
            .is_some_and(|last| last.iter().all(u8::is_ascii_digit))
            && ops()
                .find(|op| op.key == b"$exists")
                .is_some_and(|op| op.element_type == 0x08 && op.value.first() == Some(&0));
        bounded_counter || index_absent
    })
}

/// An update path in the folded form state uses: positional `$`, `$[]`
/// and `$[name]` all become `$`, and array indexes too.
pub fn fold_path(path: &str) -> std::borrow::Cow<'_, str> {
    let positional = |part: &str| part.starts_with('$') || part.bytes().all(|c| c.is_ascii_digit());
    if !path.split('.').any(positional) {
        // Most paths: nothing to fold, nothing allocated.
        return std::borrow::Cow::Borrowed(path);
    }
    let parts: Vec<&str> = path
        .split('.')
        .map(|part| if positional(part) { "$" } else { part })
        .collect();
    std::borrow::Cow::Owned(parts.join("."))
}

/// Any BSON number as i64.
pub fn number(v: RawBsonRef<'_>) -> Option<i64> {
    match v {
        RawBsonRef::Int32(i) => Some(i as i64),
        RawBsonRef::Int64(i) => Some(i),
        RawBsonRef::Double(d) if d.is_finite() => Some(d as i64),
        _ => None,
    }
}

/// What a reply says: its top-level fields found in one walk over its
/// bytes (not validated; each accessor reads only its own field).
#[derive(Clone, Debug)]
pub struct Reply<'a> {
    pub body: &'a RawDocument,
    ok: Option<Element<'a>>,
    code: Option<Element<'a>>,
    n: Option<Element<'a>>,
    write_errors: Option<Element<'a>>,
    cursor: Option<Element<'a>>,
    value: Option<Element<'a>>,
}

/// A cursor batch in a reply (`cursor.firstBatch` / `cursor.nextBatch`).
#[derive(Clone, Debug)]
pub struct CursorBatch<'a> {
    pub id: i64,
    /// Inline up to four (a find by id, a findOne): no allocation.
    pub documents: SmallVec<[&'a RawDocument; 4]>,
}

/// A walked element's int32.
fn element_i32(e: &Element<'_>) -> Option<i32> {
    (e.element_type == 0x10)
        .then(|| crate::wire::read_i32(e.value, 0))
        .flatten()
}

/// A walked element's number (int32, int64, finite double), as `number`.
fn element_number(e: &Element<'_>) -> Option<i64> {
    match e.element_type {
        0x10 => element_i32(e).map(i64::from),
        0x12 => Some(i64::from_le_bytes(e.value.get(..8)?.try_into().ok()?)),
        0x01 => {
            let d = f64::from_le_bytes(e.value.get(..8)?.try_into().ok()?);
            d.is_finite().then_some(d as i64)
        }
        _ => None,
    }
}

/// Where a reply's body and the fields a [`Reply`] reads lie in its frame:
/// what the worker's decoding found in its one walk of the reply's top
/// level (the walk that checks it), handed to the engine with the frame so
/// that the reply is not parsed or walked again ([`Reply::at`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyIndex {
    /// The body's offset in the frame.
    body: u32,
    /// The offsets in the body of the elements (their type bytes) of
    /// `ok`, `code`, `n`, `writeErrors`, `cursor` and `value` (0 when
    /// absent: no element starts a document), and their values' lengths.
    fields: [(u32, u32); 6],
}

/// The keys of [`ReplyIndex`]'s fields, in its order.
const REPLY_KEYS: [&[u8]; 6] = [b"ok", b"code", b"n", b"writeErrors", b"cursor", b"value"];

impl ReplyIndex {
    /// Walks the top level of `message`'s first document (OP_MSG body or
    /// OP_REPLY's first document) once; `frame` is what `message` was
    /// parsed from. `Ok(None)`: no document to read. With `strict`, an
    /// element that is not valid BSON is an error (the decoder's check),
    /// else the walk stops at it as [`Reply::parse`]'s does.
    pub fn of(
        message: &Message<'_>,
        frame: &[u8],
        strict: bool,
    ) -> Result<Option<ReplyIndex>, WireError> {
        let body = match message {
            Message::Msg(m) => m.body,
            Message::Reply(r) => match r.documents().next() {
                Some(d) => d,
                None => return Ok(None),
            },
            _ => return Ok(None),
        };
        let offset =
            |bytes: &[u8], of: &[u8]| (bytes.as_ptr() as usize - of.as_ptr() as usize) as u32;
        let mut index = ReplyIndex {
            body: offset(body, frame),
            fields: [(0, 0); 6],
        };
        if RawDocument::from_bytes(body).is_err() {
            if strict {
                return Err(WireError::InvalidBson("reply document's length or end"));
            }
            return Ok(None);
        }
        for e in elements(body) {
            let e = match e {
                Ok(e) => e,
                Err(error) if strict => return Err(error),
                Err(_) => break,
            };
            let slot = match e.key {
                b"ok" => 0,
                b"code" => 1,
                b"n" => 2,
                b"writeErrors" => 3,
                b"cursor" => 4,
                b"value" => 5,
                _ => continue,
            };
            // The first of a repeated key, as `RawDocument::get` reads.
            if index.fields[slot].0 == 0 {
                index.fields[slot] = (offset(e.raw, body), e.value.len() as u32);
            }
        }
        Ok(Some(index))
    }
}

impl<'a> Reply<'a> {
    /// The first document of a reply message (OP_MSG body or OP_REPLY's
    /// first document).
    pub fn parse(message: &Message<'a>) -> Option<Reply<'a>> {
        let bytes = match message {
            Message::Msg(m) => m.body,
            Message::Reply(r) => r.documents().next()?,
            _ => return None,
        };
        let mut reply = Reply {
            body: RawDocument::from_bytes(bytes).ok()?,
            ok: None,
            code: None,
            n: None,
            write_errors: None,
            cursor: None,
            value: None,
        };
        for e in elements(bytes).map_while(Result::ok) {
            let slot = match e.key {
                b"ok" => &mut reply.ok,
                b"code" => &mut reply.code,
                b"n" => &mut reply.n,
                b"writeErrors" => &mut reply.write_errors,
                b"cursor" => &mut reply.cursor,
                b"value" => &mut reply.value,
                _ => continue,
            };
            // The first of a repeated key, as `RawDocument::get` reads.
            slot.get_or_insert(e);
        }
        Some(reply)
    }

    /// The reply `index` describes in `frame` (the frame it was made
    /// from): read where the index points, no walk.
    pub fn at(frame: &'a [u8], index: &ReplyIndex) -> Option<Reply<'a>> {
        let body_bytes = frame.get(index.body as usize..)?;
        let len = crate::wire::read_i32(body_bytes, 0)?;
        let body = RawDocument::from_bytes(body_bytes.get(..usize::try_from(len).ok()?)?).ok()?;
        // Each element rebuilt from where it lies: its key is known, its
        // value's length was found by the walk.
        let bytes = body.as_bytes();
        let field = |slot: usize| -> Option<Element<'a>> {
            let (at, len) = index.fields[slot];
            if at == 0 {
                return None;
            }
            let (at, len) = (at as usize, len as usize);
            let key_len = REPLY_KEYS[slot].len();
            let raw = bytes.get(at..at + 2 + key_len + len)?;
            Some(Element {
                element_type: raw[0],
                key: &raw[1..1 + key_len],
                value: &raw[2 + key_len..],
                raw,
            })
        };
        Some(Reply {
            body,
            ok: field(0),
            code: field(1),
            n: field(2),
            write_errors: field(3),
            cursor: field(4),
            value: field(5),
        })
    }

    pub fn ok(&self) -> bool {
        match &self.ok {
            Some(e) if e.element_type == 0x08 => e.value.first().is_some_and(|b| *b != 0),
            Some(e) => element_number(e).is_some_and(|n| n != 0),
            None => false,
        }
    }

    /// The error code of a failed command.
    pub fn code(&self) -> Option<i32> {
        self.code.as_ref().and_then(element_i32)
    }

    /// The documents of `writeErrors`.
    fn write_errors(&self) -> impl Iterator<Item = &'a [u8]> {
        let array = self
            .write_errors
            .filter(|e| e.element_type == 0x04)
            .map_or(&[][..], |e| e.value);
        elements(array)
            .map_while(Result::ok)
            .filter(|e| e.element_type == 0x03)
            .map(|e| e.value)
    }

    /// Which statements failed (`writeErrors[].index`), in order.
    pub fn write_error_indices(&self) -> Vec<usize> {
        // (Most replies have none: nothing to walk or sort.)
        if self.write_errors.is_none() {
            return Vec::new();
        }
        let mut out: Vec<usize> = self
            .write_errors()
            .filter_map(|d| field(d, b"index").and_then(|e| element_number(&e)))
            .filter(|i| *i >= 0)
            .map(|i| i as usize)
            .collect();
        out.sort_unstable();
        out
    }

    /// Codes of per-statement write errors.
    pub fn write_error_codes(&self) -> Vec<i32> {
        if self.write_errors.is_none() {
            return Vec::new();
        }
        self.write_errors()
            .filter_map(|d| field(d, b"code").and_then(|e| element_i32(&e)))
            .collect()
    }

    pub fn cursor(&self) -> Option<CursorBatch<'a>> {
        // Walked on raw bytes: a batch can hold many documents, and only
        // their bounds are needed here.
        let cursor = self.cursor.filter(|e| e.element_type == 0x03)?;
        let mut batch = CursorBatch {
            id: 0,
            documents: SmallVec::new(),
        };
        for e in elements(cursor.value).map_while(Result::ok) {
            match (e.key, e.element_type) {
                (b"id", 0x12) => batch.id = i64::from_le_bytes(e.value.try_into().ok()?),
                (b"id", 0x10) => batch.id = i32::from_le_bytes(e.value.try_into().ok()?) as i64,
                (b"firstBatch" | b"nextBatch", 0x04) => {
                    batch.documents = elements(e.value)
                        .map_while(Result::ok)
                        .filter(|d| d.element_type == 0x03)
                        .filter_map(|d| RawDocument::from_bytes(d.value).ok())
                        .collect();
                }
                _ => {}
            }
        }
        Some(batch)
    }

    /// findAndModify's `value`.
    pub fn value(&self) -> Option<&'a RawDocument> {
        let e = self.value.filter(|e| e.element_type == 0x03)?;
        RawDocument::from_bytes(e.value).ok()
    }

    /// `n` of count and of write replies.
    pub fn n(&self) -> Option<i64> {
        self.n.as_ref().and_then(element_number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::shape;
    use crate::wire::{op_msg, Message};
    use bson::{cstr, rawdoc};

    /// Array indexes and positional operators fold to `$`; a path with
    /// neither is handed back as it is, not copied.
    #[test]
    fn fold_path_folds_positions_and_borrows_the_rest() {
        use std::borrow::Cow;
        assert!(matches!(
            fold_path("comments.by"),
            Cow::Borrowed("comments.by")
        ));
        assert_eq!(fold_path("comments.3.by"), "comments.$.by");
        assert_eq!(fold_path("comments.$[x].by"), "comments.$.by");
        assert_eq!(fold_path("items.$"), "items.$");
        assert_eq!(fold_path("a..b"), "a.$.b");
        assert!(matches!(fold_path("v2.x1"), Cow::Borrowed(_)));
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

    /// A captured request's shape, checking that its id computed without
    /// the text is the same.
    fn shape_text(c: &Command<'_>) -> String {
        let s = shape::of_command(c);
        assert_eq!(shape::hash_of_command(c), s.hash);
        s.text.to_string()
    }

    fn with_command<T>(frame: &[u8], f: impl FnOnce(&Command<'_>) -> T) -> T {
        let msg = Message::parse(frame).unwrap();
        let cmd = Command::parse(&msg).unwrap();
        f(&cmd)
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
            Known::Filter,
            Known::Query,
            Known::Projection,
            Known::Fields,
            Known::Sort,
            Known::Limit,
            Known::Skip,
            Known::Comment,
            Known::Hint,
            Known::Lsid,
            Known::Pipeline,
            Known::Collection,
            Known::Ordered,
        ];
        assert_eq!(all.len(), Known::COUNT);
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
            assert_eq!(cmd.known[Known::Collection as usize], 1, "the name, first");
            for k in all {
                assert!(cmd.known(k).is_some(), "{k:?}");
                assert_eq!(cmd.known(k), cmd.get(k.key()), "{k:?}");
                assert_eq!(Known::of(k.key().as_bytes()), Some(k));
            }
            assert_eq!(
                cmd.known_doc(Known::Filter).unwrap().as_bytes(),
                rawdoc! {"a": 1}.as_bytes()
            );
        });
        let sensitive =
            rawdoc! {"saslStart": 1, "comment": "c", "filter": {"a": 1}, "$db": "admin"};
        let frame = op_msg::encode(1, 0, 0, sensitive.as_bytes(), &[]);
        with_command(&frame, |cmd| {
            assert!(all.iter().all(|k| cmd.known(*k).is_none()));
        });
    }

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
        with_command(&op_msg::encode(1, 0, 0, body.as_bytes(), &[]), |cmd| {
            assert_eq!(cmd.trace_id(), None)
        });
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "not a traceparent",
        ] {
            let frame = with_trace_section(&body, &rawdoc! {"otel": {"traceparent": bad}});
            with_command(&frame, |cmd| assert_eq!(cmd.trace_id(), None, "{bad}"));
        }
        // A later version may add fields.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-whatever";
        let frame = with_trace_section(&body, &rawdoc! {"otel": {"traceparent": later}});
        with_command(&frame, |cmd| assert!(cmd.trace_id().is_some()));
    }

    fn with_reply<T>(frame: &[u8], f: impl FnOnce(&Reply<'_>) -> T) -> T {
        let msg = Message::parse(frame).unwrap();
        f(&Reply::parse(&msg).unwrap())
    }

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../../fixtures/wire/", $name, ".bin"))
        };
    }

    #[test]
    fn pymongo_find_with_projection_sort_limit_and_comment() {
        with_command(fixture!("pymongo-find"), |c| {
            assert_eq!(c.kind, Kind::Find);
            assert_eq!(c.namespace().as_deref(), Some("fixtures.posts"));
            assert_eq!(c.comment(), Some("Q3"));
            assert_eq!(c.limit(), Some(20));
            assert!(c.lsid().is_some());
            assert_eq!(
                shape_text(c),
                "find fixtures.posts {userId: ?string, n: {$gt: ?int}} project {title: 1, comments: {$slice: 10}} sort {createdAt: -1} limit"
            );
        });
        with_reply(fixture!("pymongo-find.reply"), |r| {
            assert!(!r.ok());
            assert_eq!(r.code(), Some(238));
        });
    }

    #[test]
    fn pymongo_insert_many_uses_a_document_sequence() {
        with_command(fixture!("pymongo-insert"), |c| {
            assert_eq!(c.kind, Kind::Insert);
            assert!(
                c.get_array("documents").is_none(),
                "documents travel in a kind-1 section"
            );
            assert_eq!(c.documents().len(), 30);
            assert_eq!(shape_text(c), "insert fixtures.posts");
        });
        with_reply(fixture!("pymongo-insert.reply"), |r| {
            assert_eq!((r.ok(), r.n()), (true, Some(30)))
        });
    }

    #[test]
    fn pymongo_update_with_push_each_slice() {
        with_command(fixture!("pymongo-update"), |c| {
            let u = c.updates();
            assert_eq!(u.len(), 1);
            assert!(u[0].upsert && !u[0].multi && u[0].is_operator_update());
            assert_eq!(
                shape_text(c),
                "update fixtures.posts {_id: ?int} {$push: {comments: {$each: [?object], $slice: -100}}, $inc: {commentCount: ?int}} upsert"
            );
        });
    }

    #[test]
    fn pymongo_delete_find_and_modify_distinct_and_indexes() {
        with_command(fixture!("pymongo-delete"), |c| {
            let d = c.deletes();
            assert_eq!(d.len(), 1);
            assert!(d[0].1, "delete_many has limit 0");
            assert_eq!(
                shape_text(c),
                "delete fixtures.posts {userId: ?string} multi"
            );
        });
        with_command(fixture!("pymongo-findAndModify"), |c| {
            assert_eq!(c.kind, Kind::FindAndModify);
            assert_eq!(c.updates().len(), 1);
            assert_eq!(
                shape_text(c),
                "findAndModify fixtures.posts {_id: ?int} sort {_id: 1} update {$set: {title: ?string}}"
            );
        });
        with_reply(fixture!("pymongo-findAndModify.reply"), |r| {
            assert_eq!(r.value().unwrap().get_i32("_id").unwrap(), 3);
        });
        with_command(fixture!("pymongo-distinct"), |c| {
            assert_eq!(
                shape_text(c),
                "distinct fixtures.posts key userId {title: {$exists: true}}"
            );
        });
        with_command(fixture!("pymongo-createIndexes"), |c| {
            assert_eq!(c.kind, Kind::CreateIndexes);
            assert!(!c.kind.is_data());
        });
    }

    #[test]
    fn pymongo_aggregate_with_lookup() {
        with_command(fixture!("pymongo-aggregate"), |c| {
            assert_eq!(c.kind, Kind::Aggregate);
            assert_eq!(c.comment(), Some("Q2"));
            assert_eq!(values(c.pipeline().unwrap()).count(), 2);
            assert!(shape_text(c).contains(r#"{$lookup: {from: "users", localField: "userId", foreignField: "_id", as: "author"}}"#));
        });
    }

    #[test]
    fn pymongo_cursor_get_more_and_kill_cursors() {
        let id = with_command(fixture!("pymongo-getMore"), |c| {
            assert_eq!(c.kind, Kind::GetMore);
            assert_eq!(c.namespace().as_deref(), Some("fixtures.posts"));
            c.cursor_id().unwrap()
        });
        assert_ne!(id, 0);
        with_reply(fixture!("pymongo-getMore.reply"), |r| {
            let batch = r.cursor().unwrap();
            assert_eq!(batch.documents.len(), 5);
        });
        with_command(fixture!("pymongo-killCursors"), |c| {
            assert_eq!(c.killed_cursors().len(), 1);
        });
    }

    #[test]
    fn node_driver_messages() {
        with_command(fixture!("node-insert"), |c| {
            assert_eq!(c.documents().len(), 2)
        });
        with_command(fixture!("node-find"), |c| {
            assert_eq!(
                shape_text(c),
                "find fixtures.nodeposts {a: {$in: [?int]}} project {a: 1}"
            );
        });
        with_reply(fixture!("node-find.reply"), |r| {
            assert_eq!(r.cursor().unwrap().documents.len(), 2)
        });
        with_command(fixture!("node-update"), |c| {
            let u = c.updates();
            assert!(u[0].multi);
            assert_eq!(
                shape_text(c),
                "update fixtures.nodeposts {a: {$gte: ?int}} {$addToSet: {tags: ?string}} multi"
            );
        });
    }

    /// Kind-1 sections past the one kept in the command itself are read
    /// as the first is: every section's documents, in order.
    #[test]
    fn sections_past_the_inline_place_are_all_read() {
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

    fn msg(body: bson::RawDocumentBuf) -> Vec<u8> {
        op_msg::encode(1, 0, 0, body.as_bytes(), &[])
    }

    #[test]
    fn bulk_write_explain_shard_keys_and_sensitive_commands() {
        let bulk = rawdoc! {"bulkWrite": 1, "ops": [{"insert": 0, "document": {"a": 1}}, {"update": 1, "filter": {}, "updateMods": {"$set": {"b": 1}}}],
        "nsInfo": [{"ns": "db.a"}, {"ns": "db.b"}], "$db": "admin"};
        with_command(&msg(bulk), |c| {
            let (ns, ops) = c.bulk_write().unwrap();
            assert_eq!((ns, ops.len()), (vec!["db.a", "db.b"], 2));
        });
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

    /// `f` of the reply the decoder's index reads, which must be the one
    /// a walk of its own (`Reply::parse`) reads.
    fn reply_of<T>(body: bson::RawDocumentBuf, f: impl FnOnce(&Reply<'_>) -> T) -> T {
        let frame = op_msg::encode(2, 1, 0, body.as_bytes(), &[]);
        let msg = Message::parse(&frame).unwrap();
        let index = ReplyIndex::of(&msg, &frame, true).unwrap().unwrap();
        let indexed = Reply::at(&frame, &index).unwrap();
        let walked = Reply::parse(&msg).unwrap();
        assert_eq!(format!("{indexed:?}"), format!("{walked:?}"));
        f(&indexed)
    }

    /// The index of an OP_REPLY reads its first document; a reply whose top
    /// level is not BSON is an error for the decoder's strict walk, and the
    /// fields before the fault for the lenient one (`Reply::parse`'s).
    #[test]
    fn reply_index_reads_op_reply_and_refuses_broken_bson_when_strict() {
        let first =
            rawdoc! {"cursor": {"id": 0_i64, "ns": "d.c", "firstBatch": [{"a": 1}]}, "ok": 1.0};
        let second = rawdoc! {"ok": 0.0};
        let frame = crate::wire::op_query::encode_reply(
            3,
            2,
            0,
            0,
            0,
            &[first.as_bytes(), second.as_bytes()],
        );
        let msg = Message::parse(&frame).unwrap();
        let index = ReplyIndex::of(&msg, &frame, true).unwrap().unwrap();
        let reply = Reply::at(&frame, &index).unwrap();
        assert!(reply.ok());
        assert_eq!(reply.cursor().unwrap().documents.len(), 1);

        // `{ok: 1.0, n: <int32 with its last byte cut>}`, the document's
        // length and terminating NUL intact.
        let mut body = rawdoc! {"ok": 1.0, "n": 5}.into_bytes();
        let n_at = body.len() - 1 - 4 - 2 - 1;
        assert_eq!(body[n_at], 0x10, "n's type byte");
        body[n_at] = 0x03; // an embedded document whose length runs past the end
        let frame = op_msg::encode(2, 1, 0, &body, &[]);
        let msg = Message::parse(&frame).unwrap();
        assert!(ReplyIndex::of(&msg, &frame, true).is_err());
        let lenient = ReplyIndex::of(&msg, &frame, false).unwrap().unwrap();
        let reply = Reply::at(&frame, &lenient).unwrap();
        assert!(reply.ok() && reply.n().is_none());
    }

    #[test]
    fn reply_fields_are_read_in_one_walk() {
        for (ok, expected) in [
            (bson::Bson::Double(1.0), true),
            (bson::Bson::Int32(1), true),
            (bson::Bson::Int64(0), false),
            (bson::Bson::Boolean(true), true),
            (bson::Bson::Double(f64::NAN), false),
            (bson::Bson::String("1".into()), false),
        ] {
            let body = bson::RawDocumentBuf::try_from(&bson::doc! {"ok": ok.clone()}).unwrap();
            assert_eq!(reply_of(body, |r| r.ok()), expected, "ok: {ok:?}");
        }
        assert!(!reply_of(rawdoc! {"n": 1}, |r| r.ok()), "no ok: not ok");
        let write = rawdoc! {
            "n": 3_i64, "writeErrors": [
                {"index": 4, "code": 11000, "errmsg": "dup"},
                {"index": 1_i64, "code": 121},
                {"code": 2}
            ], "ok": 1.0, "ok": 0
        };
        reply_of(write, |r| {
            assert!(r.ok(), "the first of a repeated key");
            assert_eq!(r.n(), Some(3));
            assert_eq!(r.write_error_indices(), vec![1, 4]);
            assert_eq!(r.write_error_codes(), vec![11000, 121, 2]);
            assert_eq!(r.code(), None);
            assert!(r.cursor().is_none() && r.value().is_none());
        });
        reply_of(
            rawdoc! {"ok": 0.0, "code": 13, "errmsg": "unauthorized"},
            |r| {
                assert!(!r.ok());
                assert_eq!(r.code(), Some(13));
            },
        );
        reply_of(
            rawdoc! {"value": {"_id": 1}, "lastErrorObject": {"n": 1}, "ok": 1},
            |r| {
                assert_eq!(r.value().unwrap().get_i32("_id").unwrap(), 1);
                assert_eq!(r.n(), None, "only the top level's n");
            },
        );
        reply_of(
            rawdoc! {"cursor": {"id": 7_i64, "ns": "d.c", "firstBatch": [{"a": 1}, {"a": 2}]}, "ok": 1},
            |r| {
                let c = r.cursor().unwrap();
                assert_eq!((c.id, c.documents.len()), (7, 2));
            },
        );
    }
}
