//! Query shapes: an operation with every literal value replaced by its type.
//!
//! `{userId: "u1", n: {$gt: 5}}` becomes `{userId: ?string, n: {$gt: ?int}}`;
//! `$in` lists of any length collapse to the set of their element types, so
//! `{_id: {$in: [1, 2, 3]}}` and `{_id: {$in: [7]}}` share one shape. Keys
//! keep the order the application sent (MongoDB evaluates them in that
//! order too). What stays literal is what the application's code wrote, not
//! its data: field names, operators, sort directions, projection flags and
//! `$slice` counts, `$exists` flags, `$type` names, field paths (`"$userId"`)
//! and `$lookup`'s collection and field names. A key that is itself a
//! value (an id, a hash or a date used as a field name:
//! `{$inc: {"newMessages.<groupId>": 1}}`) is written `<id>`
//! (`command::is_value_key`). Shapes are what every output shows, so they
//! are the privacy boundary: no user value passes them.

use super::budget::MAX_SHAPE_TEXT;
use super::command::{is_value_key, Command, Kind, VALUE_KEY};
use crate::wire::bson_walk::{elements, pairs, values, Value};
use bson::{RawArray, RawDocument};
use std::fmt::Write;
use std::sync::Arc;

/// The hash behind shape ids: callers name it through this module too.
pub use super::hash::{fnv1a, fnv1a_continue, FNV1A_START};

/// A normalized operation and its stable id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Shared: every pending request, cursor and list of its shape holds
    /// it, so copies are a reference count, not an allocation.
    pub text: Arc<str>,
    pub hash: u64,
    /// Whether it writes a key that is a value (`<id>`), told once when the
    /// shape is made rather than searched for per operation.
    pub value_keys: bool,
}

impl Shape {
    /// The shape of `text`: its id hashes the whole text; the text kept is
    /// cut at `budget::MAX_SHAPE_TEXT` bytes (marked with `…`).
    pub fn new(mut text: String) -> Shape {
        let hash = fnv1a(text.as_bytes());
        let max = MAX_SHAPE_TEXT;
        if text.len() > max {
            let mut cut = max - '…'.len_utf8();
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        Shape {
            hash,
            value_keys: text.contains(VALUE_KEY),
            text: Arc::from(text),
        }
    }

    /// The id shown to users: 16 hex digits, stable across runs and hosts.
    pub fn id(&self) -> String {
        format!("{:016x}", self.hash)
    }
}

/// How deep nested documents are followed before `…` is written.
const MAX_DEPTH: usize = 12;
/// Elements of a literal array or pipeline shown before `…`.
const MAX_ITEMS: usize = 16;

/// Where a shape is written: its text (a `String`), or only its id
/// ([`Fnv`]), computed from the same calls so the two always agree.
pub trait Sink: Write {
    fn push(&mut self, c: char);
    fn push_str(&mut self, t: &str);
}

impl Sink for String {
    fn push(&mut self, c: char) {
        String::push(self, c)
    }
    fn push_str(&mut self, t: &str) {
        String::push_str(self, t)
    }
}

/// A shape's id without its text: FNV-1a over the bytes the text would
/// have, so `Fnv` and [`Shape::new`] give the same hash; nothing is
/// allocated.
pub struct Fnv(pub u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(FNV1A_START)
    }
}

impl Write for Fnv {
    fn write_str(&mut self, t: &str) -> std::fmt::Result {
        self.0 = fnv1a_continue(self.0, t.as_bytes());
        Ok(())
    }
}

impl Sink for Fnv {
    fn push(&mut self, c: char) {
        let mut utf8 = [0u8; 4];
        self.0 = fnv1a_continue(self.0, c.encode_utf8(&mut utf8).as_bytes());
    }
    fn push_str(&mut self, t: &str) {
        self.0 = fnv1a_continue(self.0, t.as_bytes());
    }
}

/// The shape of an operation: command, namespace and its normalized parts.
pub fn of_command(cmd: &Command<'_>) -> Shape {
    let mut s = String::with_capacity(96);
    write_command(cmd, &mut s);
    Shape::new(s)
}

/// The id of [`of_command`]'s shape (`of_command(cmd).hash`), computed
/// without building its text: what a request of a known shape costs.
pub fn hash_of_command(cmd: &Command<'_>) -> u64 {
    let mut h = Fnv::default();
    write_command(cmd, &mut h);
    h.0
}

fn write_command<S: Sink>(cmd: &Command<'_>, s: &mut S) {
    s.push_str(cmd.name);
    if let Some(pieces) = cmd.namespace_pieces() {
        s.push(' ');
        for p in pieces {
            s.push_str(p);
        }
    }
    match cmd.kind {
        Kind::Find | Kind::Count | Kind::Distinct | Kind::FindAndModify => {
            if cmd.kind == Kind::Distinct {
                if let Some(key) = cmd.get_str("key") {
                    let _ = write!(s, " key {key}");
                }
            }
            s.push(' ');
            match cmd.filter() {
                Some(f) => filter(f.as_bytes(), s, 0),
                None => s.push_str("{}"),
            }
            if let Some(p) = cmd.projection() {
                s.push_str(" project ");
                projection(p.as_bytes(), s, 0);
            }
            if let Some(o) = cmd.sort() {
                s.push_str(" sort ");
                literal_doc(o.as_bytes(), s, 0);
            }
            if cmd.limit().is_some() {
                s.push_str(" limit");
            }
            if cmd.has_skip() {
                s.push_str(" skip");
            }
            if cmd.kind == Kind::FindAndModify {
                if cmd.get_bool("remove").unwrap_or(false) {
                    s.push_str(" remove");
                }
                for u in cmd.updates() {
                    s.push_str(" update ");
                    update(u.update, u.pipeline, s);
                    if u.upsert {
                        s.push_str(" upsert");
                    }
                }
            }
        }
        Kind::Aggregate => {
            s.push(' ');
            match cmd.pipeline() {
                Some(p) => pipeline(p, s, 0),
                None => s.push_str("[]"),
            }
        }
        Kind::Update => {
            let updates = cmd.updates();
            if let Some(u) = updates.first() {
                s.push(' ');
                match u.filter {
                    Some(f) => filter(f.as_bytes(), s, 0),
                    None => s.push_str("{}"),
                }
                s.push(' ');
                update(u.update, u.pipeline, s);
                if u.array_filters.is_some() {
                    s.push_str(" arrayFilters");
                }
                if u.upsert {
                    s.push_str(" upsert");
                }
                if u.multi {
                    s.push_str(" multi");
                }
            }
        }
        Kind::Delete => {
            if let Some((q, many)) = cmd.deletes().first() {
                s.push(' ');
                filter(q.as_bytes(), s, 0);
                if *many {
                    s.push_str(" multi");
                }
            }
        }
        _ => {}
    }
    if let Some(h) = cmd.hint() {
        s.push_str(" hint ");
        match h {
            Value::String(name) => {
                quoted(s, name);
            }
            Value::Document(d) => literal_doc(d, s, 0),
            other => s.push_str(type_name(other)),
        }
    }
}

/// A BSON value's type, as shapes write it.
pub fn type_name(v: Value<'_>) -> &'static str {
    match v {
        Value::Binary { subtype: 0x04, .. } => "?uuid",
        _ => type_byte_name(v.element_type()),
    }
}

/// The name of a BSON type byte, as shapes write it (binary data of every
/// subtype reads `?binData`; [`type_name`] tells UUIDs apart).
fn type_byte_name(t: u8) -> &'static str {
    match t {
        0x01 => "?double",
        0x02 => "?string",
        0x03 => "?object",
        0x04 => "?array",
        0x05 => "?binData",
        0x06 => "?undefined",
        0x07 => "?objectId",
        0x08 => "?bool",
        0x09 => "?date",
        0x0A => "?null",
        0x0B => "?regex",
        0x0C => "?dbPointer",
        0x0D | 0x0F => "?javascript",
        0x0E => "?symbol",
        0x10 => "?int",
        0x11 => "?timestamp",
        0x12 => "?long",
        0x13 => "?decimal",
        0x7F => "?maxKey",
        _ => "?minKey",
    }
}

/// Whether a document's first key is an operator (`{$gt: …}`).
fn is_operator_doc(d: &[u8]) -> bool {
    matches!(elements(d).next(), Some(Ok(e)) if e.key.first() == Some(&b'$'))
}

fn key<S: Sink>(s: &mut S, k: &str) {
    // Keys that are values (ids, hashes, dates as field names) are data:
    // written `<id>`, so no value passes and one design is one shape.
    if k.len() >= 5
        && k.bytes().any(|b| b.is_ascii_digit())
        && k.split('.').any(|part| is_value_key(part.as_bytes()))
    {
        let folded = fold_value_keys(k);
        let names_plain = folded
            .split('.')
            .all(|part| part == VALUE_KEY || is_plain(part));
        if names_plain {
            s.push_str(&folded);
        } else {
            quoted(s, &folded);
        }
        return;
    }
    let plain_char = |c: char| c.is_alphanumeric() || matches!(c, '_' | '$' | '.');
    // One pass over the bytes for an ASCII key; a key with other
    // characters is looked at by its characters.
    let plain = !k.is_empty()
        && (k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'.'))
            || (!k.is_ascii() && k.chars().all(plain_char)));
    if plain {
        s.push_str(k);
    } else {
        quoted(s, k);
    }
}

/// `k` with each part that is a value written [`VALUE_KEY`].
fn fold_value_keys(k: &str) -> String {
    k.split('.')
        .map(|part| {
            if is_value_key(part.as_bytes()) {
                VALUE_KEY
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// A key part written as it is: letters, digits, `_` and `$`.
fn is_plain(part: &str) -> bool {
    !part.is_empty()
        && part
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '$'))
}

/// Writes `t` as Rust's `{:?}` does (in double quotes, escaped): printable
/// ASCII without quotes or backslashes as it is, without the formatting
/// machinery (field names and `$path` references nearly always are).
fn quoted<S: Sink>(s: &mut S, t: &str) {
    if t.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        s.push('"');
        s.push_str(t);
        s.push('"');
    } else {
        let _ = write!(s, "{t:?}");
    }
}

/// Writes `{k: …, k: …}`: braces, separators and keys; `value` writes each
/// value. A malformed element ends the document with `…`.
fn fields<'a, S: Sink>(d: &'a [u8], s: &mut S, mut value: impl FnMut(&'a str, Value<'a>, &mut S)) {
    s.push('{');
    for (i, pair) in pairs(d).enumerate() {
        let Ok((k, v)) = pair else {
            s.push('…');
            break;
        };
        if i > 0 {
            s.push_str(", ");
        }
        key(s, k);
        s.push_str(": ");
        value(k, v, s);
    }
    s.push('}');
}

/// Writes `[…, …]`, at most `max` items then `…`.
fn items<'a, S: Sink>(a: &'a [u8], s: &mut S, max: usize, mut item: impl FnMut(Value<'a>, &mut S)) {
    s.push('[');
    for (i, element) in values(a).enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        if i >= max {
            s.push('…');
            break;
        }
        match element {
            Ok(v) => item(v, s),
            Err(_) => s.push('…'),
        }
    }
    s.push(']');
}

fn number_or_type<S: Sink>(v: Value<'_>, s: &mut S) {
    match v.number() {
        Some(n) => {
            let _ = write!(s, "{n}");
        }
        None => s.push_str(type_name(v)),
    }
}

/// A query filter: field → value (typed) or operator document.
fn filter<S: Sink>(d: &[u8], s: &mut S, depth: usize) {
    if depth > MAX_DEPTH {
        s.push('…');
        return;
    }
    fields(d, s, |k, v, s| match (k, v) {
        ("$and" | "$or" | "$nor", Value::Array(a)) => {
            items(a, s, MAX_ITEMS, |item, s| match item {
                Value::Document(sub) => filter(sub, s, depth + 1),
                other => s.push_str(type_name(other)),
            })
        }
        ("$expr", v) => expression(v, s, depth + 1),
        ("$where", _) => s.push_str("?javascript"),
        (_, Value::Document(sub)) if is_operator_doc(sub) => operators(sub, s, depth + 1),
        (_, v) => s.push_str(type_name(v)),
    });
}

/// `{$gt: 5, $lt: 9}`, `{$in: [...]}`, `{$elemMatch: {...}}`, ...
fn operators<S: Sink>(d: &[u8], s: &mut S, depth: usize) {
    if depth > MAX_DEPTH {
        s.push('…');
        return;
    }
    fields(d, s, |k, v, s| match (k, v) {
        ("$in" | "$nin" | "$all", Value::Array(a)) => collapsed(a, s),
        ("$elemMatch", Value::Document(sub)) if is_operator_doc(sub) => {
            operators(sub, s, depth + 1)
        }
        ("$elemMatch", Value::Document(sub)) => filter(sub, s, depth + 1),
        ("$not", Value::Document(sub)) => operators(sub, s, depth + 1),
        ("$exists", Value::Boolean(b)) => {
            let _ = write!(s, "{b}");
        }
        ("$type", Value::String(t)) => {
            quoted(s, t);
        }
        ("$type", Value::Int32(t)) => {
            let _ = write!(s, "{t}");
        }
        ("$options", _) => s.push_str("?string"),
        (_, Value::Document(sub)) if is_operator_doc(sub) => operators(sub, s, depth + 1),
        (_, v) => s.push_str(type_name(v)),
    });
}

/// An array literal written as the sorted set of its element types.
fn collapsed<S: Sink>(a: &[u8], s: &mut S) {
    // At most 21 distinct type names: a set on the stack, no allocation,
    // gathered by type byte (binary subtype 4 apart: it reads `?uuid`)
    // and named once.
    let mut seen = [(0u8, false); 24];
    let mut n = 0;
    for v in values(a).map_while(Result::ok) {
        let t = (
            v.element_type(),
            matches!(v, Value::Binary { subtype: 0x04, .. }),
        );
        if n < seen.len() && !seen[..n].contains(&t) {
            seen[n] = t;
            n += 1;
        }
    }
    let mut types = [""; 24];
    for (name, &(t, uuid)) in types.iter_mut().zip(&seen[..n]) {
        *name = if uuid { "?uuid" } else { type_byte_name(t) };
    }
    types[..n].sort_unstable();
    // Two type bytes share a name (code, code with scope): written once.
    let mut last = "";
    let mut first = true;
    s.push('[');
    for t in &types[..n] {
        if *t == last {
            continue;
        }
        last = t;
        if !std::mem::take(&mut first) {
            s.push_str(", ");
        }
        s.push_str(t);
    }
    s.push(']');
}

/// Sort and index specs, and `$lookup`'s names: the application's own
/// constants, kept as written (strings quoted, numbers as numbers).
fn literal_doc<S: Sink>(d: &[u8], s: &mut S, depth: usize) {
    if depth > MAX_DEPTH {
        s.push('…');
        return;
    }
    fields(d, s, |_, v, s| match v {
        Value::Int32(_) | Value::Int64(_) => number_or_type(v, s),
        Value::Double(n) => {
            let _ = write!(s, "{n}");
        }
        Value::Boolean(b) => {
            let _ = write!(s, "{b}");
        }
        Value::String(t) => {
            quoted(s, t);
        }
        Value::Document(sub) => literal_doc(sub, s, depth + 1),
        other => s.push_str(type_name(other)),
    });
}

/// A projection: inclusion flags and `$slice` counts kept, `$elemMatch`
/// as a filter, expressions typed.
fn projection<S: Sink>(d: &[u8], s: &mut S, depth: usize) {
    fields(d, s, |_, v, s| match v {
        Value::Int32(_) | Value::Int64(_) | Value::Double(_) | Value::Boolean(_) => {
            let on = v
                .number()
                .map(|n| n != 0)
                .unwrap_or(v == Value::Boolean(true));
            s.push_str(if on { "1" } else { "0" });
        }
        Value::Document(sub) => match pairs(sub).next() {
            Some(Ok((op, _))) if op == "$slice" || op == "$meta" => literal_doc(sub, s, depth + 1),
            Some(Ok(("$elemMatch", Value::Document(m)))) => {
                s.push_str("{$elemMatch: ");
                filter(m, s, depth + 1);
                s.push('}');
            }
            _ => expression(v, s, depth + 1),
        },
        other => expression(other, s, depth + 1),
    });
}

/// An aggregation expression: field paths and operator names kept,
/// literals typed.
fn expression<S: Sink>(v: Value<'_>, s: &mut S, depth: usize) {
    if depth > MAX_DEPTH {
        s.push('…');
        return;
    }
    match v {
        Value::String(t) if t.starts_with('$') => {
            quoted(s, t);
        }
        Value::Document(d) => fields(d, s, |k, v, s| match k {
            "$literal" => s.push_str(type_name(v)),
            _ => expression(v, s, depth + 1),
        }),
        Value::Array(a) => items(a, s, MAX_ITEMS, |v, s| expression(v, s, depth + 1)),
        other => s.push_str(type_name(other)),
    }
}

/// An aggregation pipeline, stage by stage.
fn pipeline<S: Sink>(p: &[u8], s: &mut S, depth: usize) {
    if depth > MAX_DEPTH {
        s.push('…');
        return;
    }
    items(p, s, MAX_ITEMS * 2, |stage, s| {
        let Value::Document(stage) = stage else {
            s.push('…');
            return;
        };
        fields(stage, s, |name, body, s| match (name, body) {
            ("$match", Value::Document(f)) => filter(f, s, depth + 1),
            ("$sort", Value::Document(o)) => literal_doc(o, s, depth + 1),
            ("$limit" | "$skip" | "$sample", Value::Document(_)) => expression(body, s, depth + 1),
            ("$limit" | "$skip" | "$sample", v) => s.push_str(type_name(v)),
            ("$lookup", Value::Document(l)) => lookup(l, s, depth + 1),
            ("$unwind" | "$count" | "$out", Value::String(t)) => {
                quoted(s, t);
            }
            ("$project", Value::Document(p)) => projection(p, s, depth + 1),
            ("$facet", Value::Document(f)) => fields(f, s, |_, v, s| match v {
                Value::Array(sub) => pipeline(sub, s, depth + 1),
                other => s.push_str(type_name(other)),
            }),
            (_, v) => expression(v, s, depth + 1),
        });
    });
}

fn lookup<S: Sink>(l: &[u8], s: &mut S, depth: usize) {
    fields(l, s, |k, v, s| match (k, v) {
        ("from" | "localField" | "foreignField" | "as", Value::String(t)) => {
            quoted(s, t);
        }
        ("from", Value::Document(d)) => literal_doc(d, s, depth + 1),
        ("pipeline", Value::Array(p)) => pipeline(p, s, depth + 1),
        (_, v) => expression(v, s, depth + 1),
    });
}

/// An update: operators with their fields typed (`$push` `$each` lists
/// collapsed, `$slice`/`$position`/`$sort` kept), a pipeline, or a
/// replacement: `replace` alone, whatever its fields (a save names every
/// field of the document, optional or null ones included: one operation of
/// the application, not a shape per combination).
fn update<S: Sink>(doc: Option<&RawDocument>, pipe: Option<&RawArray>, s: &mut S) {
    if let Some(p) = pipe {
        pipeline(p.as_bytes(), s, 1);
        return;
    }
    let Some(d) = doc.map(RawDocument::as_bytes) else {
        s.push_str("{}");
        return;
    };
    if !is_operator_doc(d) {
        s.push_str("replace");
        return;
    }
    fields(d, s, |_, paths, s| match paths {
        Value::Document(paths) => fields(paths, s, |_, v, s| match v {
            Value::Document(m) if is_operator_doc(m) => update_modifiers(m, s),
            v => s.push_str(type_name(v)),
        }),
        other => s.push_str(type_name(other)),
    });
}

fn update_modifiers<S: Sink>(m: &[u8], s: &mut S) {
    fields(m, s, |k, v, s| match (k, v) {
        ("$each" | "$in", Value::Array(a)) => collapsed(a, s),
        ("$slice" | "$position", v) => number_or_type(v, s),
        ("$sort", Value::Document(o)) => literal_doc(o, s, 2),
        ("$sort", v) => expression(v, s, 2),
        (_, Value::Document(sub)) if is_operator_doc(sub) => operators(sub, s, 2),
        (_, v) => s.push_str(type_name(v)),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{op_msg, Message};
    use bson::rawdoc;

    fn shape(body: bson::RawDocumentBuf) -> String {
        let frame = op_msg::encode(1, 0, 0, body.as_bytes(), &[]);
        let msg = Message::parse(&frame).unwrap();
        let cmd = Command::parse(&msg).unwrap();
        let shape = of_command(&cmd);
        assert_eq!(hash_of_command(&cmd), shape.hash, "the id without the text");
        shape.text.to_string()
    }

    /// A key of letters, digits, `_`, `$` and `.` (any script) is written
    /// as it is; any other key quoted.
    #[test]
    fn keys_are_quoted_unless_plain() {
        for (k, out) in [
            ("userId", "userId"),
            ("a.$.b_2", "a.$.b_2"),
            ("café", "café"),
            ("日本", "日本"),
            ("a b", "\"a b\""),
            ("", "\"\""),
            ("naïve-x", "\"naïve-x\""),
        ] {
            let mut s = String::new();
            key(&mut s, k);
            assert_eq!(s, out);
        }
    }

    /// `quoted` writes what `{:?}` writes, with or without its shortcut.
    #[test]
    fn quoted_is_debug_formatting() {
        for t in [
            "",
            "users",
            "$author.name",
            "a b",
            "it's",
            "say \"hi\"",
            "back\\slash",
            "tab\there",
            "new\nline",
            "del\u{7f}",
            "café",
            "日本",
            "\u{200b}zw",
            "~!@#%^&*()",
        ] {
            let mut out = String::new();
            quoted(&mut out, t);
            assert_eq!(out, format!("{t:?}"), "{t}");
        }
    }

    #[test]
    fn an_in_list_reads_as_its_sorted_type_names_each_once() {
        let uuid = bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: vec![7; 16],
        };
        let other = bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: vec![1],
        };
        let code = bson::Bson::JavaScriptCode("f()".into());
        let scoped = bson::Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
            code: "g()".into(),
            scope: bson::doc! {},
        });
        let body = bson::doc! {"find": "c", "filter": {"k": {"$in": [3, "s", uuid.clone(), 4, other, code, scoped, "t", uuid, 5i64]}}, "$db": "d"};
        assert_eq!(
            shape(bson::RawDocumentBuf::try_from(&body).unwrap()),
            "find d.c {k: {$in: [?binData, ?int, ?javascript, ?long, ?string, ?uuid]}}"
        );
    }

    #[test]
    fn literals_become_types_and_in_lists_collapse() {
        let a = shape(
            rawdoc! {"find": "posts", "filter": {"userId": "u1", "n": {"$gt": 5}, "tags": {"$in": ["a", "b", "c"]}}, "$db": "blog"},
        );
        let b = shape(
            rawdoc! {"find": "posts", "filter": {"userId": "u2", "n": {"$gt": 900}, "tags": {"$in": ["z"]}}, "$db": "blog"},
        );
        assert_eq!(
            a,
            "find blog.posts {userId: ?string, n: {$gt: ?int}, tags: {$in: [?string]}}"
        );
        assert_eq!(a, b);
        let c = shape(
            rawdoc! {"find": "posts", "filter": {"n": {"$gt": 5}, "userId": "u1"}, "$db": "blog"},
        );
        assert_ne!(a, c, "key order is part of the shape");
    }

    #[test]
    fn sort_projection_limit_and_logical_operators() {
        let s = shape(rawdoc! {
            "find": "posts",
            "filter": {"$or": [{"a": 1}, {"b": {"$exists": true}}], "c": {"d": 1}},
            "projection": {"title": 1, "comments": {"$slice": 10}, "body": false},
            "sort": {"createdAt": -1}, "limit": 20, "$db": "blog"
        });
        assert_eq!(s, "find blog.posts {$or: [{a: ?int}, {b: {$exists: true}}], c: ?object} project {title: 1, comments: {$slice: 10}, body: 0} sort {createdAt: -1} limit");
    }

    #[test]
    fn aggregate_with_lookup() {
        let s = shape(rawdoc! {
            "aggregate": "posts",
            "pipeline": [
                {"$match": {"postId": "p1", "type": "post"}},
                {"$lookup": {"from": "users", "localField": "userId", "foreignField": "_id", "as": "author"}},
                {"$group": {"_id": "$userId", "n": {"$sum": 1}, "label": {"$concat": ["$a", "secret-literal"]}}},
                {"$limit": 5}
            ],
            "cursor": {}, "$db": "blog"
        });
        assert_eq!(
            s,
            r#"aggregate blog.posts [{$match: {postId: ?string, type: ?string}}, {$lookup: {from: "users", localField: "userId", foreignField: "_id", as: "author"}}, {$group: {_id: "$userId", n: {$sum: ?int}, label: {$concat: ["$a", ?string]}}}, {$limit: ?int}]"#
        );
        assert!(!s.contains("secret-literal") && !s.contains("p1"));
    }

    #[test]
    fn updates() {
        let s = shape(rawdoc! {
            "update": "posts",
            "updates": [{"q": {"_id": bson::oid::ObjectId::new()}, "u": {"$push": {"comments": {"$each": [{"t": "x"}], "$slice": -100}}, "$inc": {"commentCount": 1}}, "upsert": true}],
            "$db": "blog"
        });
        assert_eq!(s, "update blog.posts {_id: ?objectId} {$push: {comments: {$each: [?object], $slice: -100}}, $inc: {commentCount: ?int}} upsert");
        let s = shape(
            rawdoc! {"update": "u", "updates": [{"q": {"a": 1}, "u": {"name": "secret", "age": 3}, "multi": false}], "$db": "d"},
        );
        assert_eq!(s, "update d.u {a: ?int} replace");
        let with_null = shape(
            rawdoc! {"update": "u", "updates": [{"q": {"a": 1}, "u": {"name": bson::RawBson::Null, "nick": "n", "age": 3}, "multi": false}], "$db": "d"},
        );
        assert_eq!(with_null, s, "optional and null fields make no other shape");
        let s = shape(
            rawdoc! {"update": "u", "updates": [{"q": {}, "u": [{"$set": {"x": "$y"}}], "multi": true}], "$db": "d"},
        );
        assert_eq!(s, r#"update d.u {} [{$set: {x: "$y"}}] multi"#);
    }

    /// Ids used as field names are values: one shape for every id, and
    /// none of them in it.
    #[test]
    fn keys_that_are_values_are_folded() {
        let unread = |group: &str, member: &str| {
            let mut inc = bson::Document::new();
            inc.insert(format!("newMessages.{group}"), 1);
            let mut set = bson::Document::new();
            set.insert(format!("quest.members.{member}.joinedAt"), 1);
            let body = bson::doc! {
                "update": "users",
                "updates": [{"q": {"_id": {"$in": [1, 2]}}, "u": {"$inc": inc, "$set": set}, "multi": true}],
                "$db": "chat"
            };
            shape(bson::RawDocumentBuf::try_from(&body).unwrap())
        };
        let a = unread(
            "5f1d7a3b9c2e4d6f8a0b1c2d",
            "3fa85f64-5717-4562-b3fc-2c963f66afa6",
        );
        let b = unread(
            "65a0c0ffee00112233445566",
            "9b2c1d4e-0000-4562-b3fc-2c963f66afa6",
        );
        assert_eq!(a, b);
        assert_eq!(
            a,
            "update chat.users {_id: {$in: [?int]}} {$inc: {newMessages.<id>: ?int}, $set: {quest.members.<id>.joinedAt: ?int}} multi"
        );
        // A name that must be quoted stays quoted, folded.
        let s = shape(rawdoc! {"find": "c", "filter": {"by day.2024-01-31": 1}, "$db": "d"});
        assert_eq!(s, r#"find d.c {"by day.<id>": ?int}"#);
    }

    #[test]
    fn kind1_sequences_are_read() {
        let body = rawdoc! {"insert": "c", "$db": "d"};
        let d1 = rawdoc! {"_id": 1};
        let d2 = rawdoc! {"_id": 2};
        let frame = op_msg::encode(
            1,
            0,
            0,
            body.as_bytes(),
            &[("documents", &[d1.as_bytes(), d2.as_bytes()])],
        );
        let msg = Message::parse(&frame).unwrap();
        let cmd = Command::parse(&msg).unwrap();
        assert_eq!(cmd.documents().len(), 2);
        assert_eq!(cmd.namespace().as_deref(), Some("d.c"));
    }

    #[test]
    fn hash_is_stable() {
        // Pinned: a shape id must not change between versions or hosts.
        assert_eq!(
            Shape::new("find blog.posts {userId: ?string}".into()).id(),
            format!("{:016x}", fnv1a(b"find blog.posts {userId: ?string}"))
        );
    }
}
