//! A minimal walker over the top-level elements of a raw BSON document.
//!
//! It yields each element's type, key and value as byte slices, computing
//! sizes from the BSON spec with checked arithmetic. It neither decodes values
//! nor validates UTF-8, which keeps it cheap enough for the forwarding path
//! (the hello rewrite) and lets callers copy elements through unchanged.

use super::{read_i32, WireError};
use smallvec::SmallVec;

/// One element of a document: `raw` is the whole element (type byte, key,
/// value), so it can be copied into another document as is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Element<'a> {
    pub element_type: u8,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub raw: &'a [u8],
}

impl<'a> Element<'a> {
    /// The value as a UTF-8 string, when it is a BSON string.
    pub fn as_str(&self) -> Option<&'a str> {
        if self.element_type != 0x02 || self.value.len() < 5 {
            return None;
        }
        utf8(&self.value[4..self.value.len() - 1])
    }

    /// Truthiness of booleans and numbers, as the server reads `{hello: 1}`.
    pub fn as_bool(&self) -> Option<bool> {
        match self.element_type {
            0x08 => self.value.first().map(|b| *b != 0),
            0x10 => read_i32(self.value, 0).map(|v| v != 0),
            0x12 => self.value.get(..8).map(|b| b.iter().any(|x| *x != 0)),
            0x01 => self
                .value
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(|b: [u8; 8]| f64::from_le_bytes(b) != 0.0),
            _ => None,
        }
    }
}

/// An element's value, decoded as far as analysis looks into values: the
/// scalars it compares or counts, embedded documents and arrays as their
/// bytes (walk them with [`elements`]), everything else by its type byte.
/// Nothing is allocated and no string is checked but the ones returned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Double(f64),
    String(&'a str),
    Document(&'a [u8]),
    Array(&'a [u8]),
    Binary {
        subtype: u8,
        bytes: &'a [u8],
    },
    Boolean(bool),
    Null,
    Int32(i32),
    Int64(i64),
    /// Any other type, and a string that is not UTF-8, by its type byte.
    Other(u8),
}

impl<'a> Value<'a> {
    /// The BSON type byte of the value.
    pub fn element_type(&self) -> u8 {
        match self {
            Value::Double(_) => 0x01,
            Value::String(_) => 0x02,
            Value::Document(_) => 0x03,
            Value::Array(_) => 0x04,
            Value::Binary { .. } => 0x05,
            Value::Boolean(_) => 0x08,
            Value::Null => 0x0A,
            Value::Int32(_) => 0x10,
            Value::Int64(_) => 0x12,
            Value::Other(t) => *t,
        }
    }

    pub fn as_document(&self) -> Option<&'a [u8]> {
        match self {
            Value::Document(d) => Some(d),
            _ => None,
        }
    }

    /// A number as an integer (a finite double truncated), as counts,
    /// limits and flags are read.
    pub fn number(&self) -> Option<i64> {
        match *self {
            Value::Int32(n) => Some(n as i64),
            Value::Int64(n) => Some(n),
            Value::Double(f) if f.is_finite() => Some(f as i64),
            _ => None,
        }
    }
}

impl<'a> Element<'a> {
    /// The key, when it is UTF-8 (keys always are in what drivers send).
    pub fn key_str(&self) -> Option<&'a str> {
        utf8(self.key)
    }

    /// The value, decoded as [`Value`] says.
    pub fn read(&self) -> Value<'a> {
        let v = self.value;
        let eight = || v.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok());
        match self.element_type {
            0x01 => eight().map(|b| Value::Double(f64::from_le_bytes(b))),
            0x02 => self.as_str().map(Value::String),
            0x03 => Some(Value::Document(v)),
            0x04 => Some(Value::Array(v)),
            0x05 => v.get(4).map(|subtype| Value::Binary {
                subtype: *subtype,
                bytes: &v[5..],
            }),
            0x08 => v.first().map(|b| Value::Boolean(*b != 0)),
            0x0A => Some(Value::Null),
            0x10 => read_i32(v, 0).map(Value::Int32),
            0x12 => eight().map(|b| Value::Int64(i64::from_le_bytes(b))),
            _ => None,
        }
        .unwrap_or(Value::Other(self.element_type))
    }
}

/// The elements of `doc` as (key, value), stopping at the first malformed
/// element or non-UTF-8 key; `Err(())` marks where it stopped.
pub fn pairs(doc: &[u8]) -> impl Iterator<Item = Result<(&str, Value<'_>), ()>> {
    elements(doc).scan(false, |stopped, e| {
        if *stopped {
            return None;
        }
        let pair = e.ok().and_then(|e| Some((e.key_str()?, e.read())));
        *stopped = pair.is_none();
        Some(pair.ok_or(()))
    })
}

/// The values of an array (or a document's values, keys unread), stopping
/// at the first malformed element; `Err(())` marks where it stopped.
pub fn values(doc: &[u8]) -> impl Iterator<Item = Result<Value<'_>, ()>> {
    elements(doc).map(|e| e.map(|e| e.read()).map_err(|_| ()))
}

/// `bytes` as a string when they are UTF-8. Keys and names are nearly
/// always ASCII, which one pass over the bytes tells (the `ascii` crate
/// then converts without checking again); std's validator costs 60–100
/// instructions on a short string, several per message. Other bytes go
/// through std's validator.
#[inline]
pub fn utf8(bytes: &[u8]) -> Option<&str> {
    match ascii::AsciiStr::from_ascii(bytes) {
        Ok(ascii) => Some(ascii.as_str()),
        Err(_) => std::str::from_utf8(bytes).ok(),
    }
}

/// Iterates the elements of `doc` (a whole document, length prefix included).
/// After the first error it yields nothing more.
pub struct Elements<'a> {
    doc: &'a [u8],
    pos: usize,
    done: bool,
}

pub fn elements(doc: &[u8]) -> Elements<'_> {
    elements_from(doc, 4)
}

/// Iterates the elements of `doc` from byte `pos` on (where one of its
/// elements starts, found by other means), checked as [`elements`] checks
/// them: a `pos` that is not an element's start gives an error or
/// elements that end where the document does not.
pub fn elements_from(doc: &[u8], pos: usize) -> Elements<'_> {
    Elements {
        doc,
        pos,
        done: doc.len() < 5 || pos < 4,
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Result<Element<'a>, WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let start = self.pos;
        let tail = self.doc.get(start..).filter(|t| !t.is_empty())?;
        if tail[0] == 0 {
            self.done = true;
            if tail.len() != 1 {
                return Some(Err(WireError::InvalidBson(
                    "bytes after the terminating NUL",
                )));
            }
            return None;
        }
        match element_at(tail) {
            Ok(element) => {
                self.pos = start + element.raw.len();
                Some(Ok(element))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The element at the start of `tail` (the rest of a document from an
/// element's type byte, which is not the terminating NUL). Every length is
/// checked against the bytes there: a value must end before the
/// document's last byte (its terminating NUL).
#[inline]
fn element_at(tail: &[u8]) -> Result<Element<'_>, WireError> {
    let element_type = tail[0];
    let after_type = &tail[1..];
    let nul = after_type
        .iter()
        .position(|&b| b == 0)
        .ok_or(WireError::InvalidBson("key without NUL"))?;
    let (key, rest) = after_type.split_at(nul);
    let value_start = &rest[1..];
    let len = value_len(value_start, element_type)?;
    if len >= value_start.len() {
        return Err(WireError::InvalidBson("element runs past the document"));
    }
    Ok(Element {
        element_type,
        key,
        value: &value_start[..len],
        // Type byte, key, its NUL, value: shorter than `tail` (checked above).
        raw: &tail[..nul + 2 + len],
    })
}

fn len_prefixed(doc: &[u8], at: usize, min: i32, extra: usize) -> Result<usize, WireError> {
    let n = read_i32(doc, at).ok_or(WireError::InvalidBson("truncated length"))?;
    if n < min {
        return Err(WireError::InvalidBson("negative or short length"));
    }
    (n as usize)
        .checked_add(extra)
        .ok_or(WireError::InvalidBson("length overflows"))
}

fn cstr_len(doc: &[u8], at: usize) -> Result<usize, WireError> {
    let rest = doc
        .get(at..)
        .ok_or(WireError::InvalidBson("truncated cstring"))?;
    rest.iter()
        .position(|&b| b == 0)
        .map(|p| p + 1)
        .ok_or(WireError::InvalidBson("cstring without NUL"))
}

/// The size in bytes of a value of `element_type` at the start of `value`
/// (the rest of the document from there).
fn value_len(value: &[u8], element_type: u8) -> Result<usize, WireError> {
    let fixed = FIXED_SIZE[element_type as usize];
    if fixed != 0 {
        return Ok(usize::from(fixed - 1));
    }
    Ok(match element_type {
        0x02 | 0x0D | 0x0E => len_prefixed(value, 0, 1, 4)?,
        0x03 | 0x04 => len_prefixed(value, 0, 5, 0)?,
        0x05 => len_prefixed(value, 0, 0, 5)?,
        0x0B => {
            let a = cstr_len(value, 0)?;
            a + cstr_len(value, a)?
        }
        0x0C => len_prefixed(value, 0, 1, 4)?
            .checked_add(12)
            .ok_or(WireError::InvalidBson("length overflows"))?,
        0x0F => len_prefixed(value, 0, 14, 0)?,
        _ => return Err(WireError::InvalidBson("unknown element type")),
    })
}

/// One more than the size of a value of each fixed-size element type (0:
/// not of a fixed size): what [`value_len`] gives for them, and what
/// [`nesting_depth`] steps over without calling it.
const FIXED_SIZE: [u8; 256] = {
    let mut sizes = [0u8; 256];
    let mut t = 0;
    while t < 256 {
        sizes[t] = match t {
            0x01 | 0x09 | 0x11 | 0x12 => 9,
            0x06 | 0x0A | 0xFF | 0x7F => 1,
            0x07 => 13,
            0x08 => 2,
            0x10 => 5,
            0x13 => 17,
            _ => 0,
        };
        t += 1;
    }
    sizes
};

/// How deep documents and arrays nest in `doc` (a document alone is 1),
/// found without recursion: an explicit stack of where each enclosing
/// document resumes and ends, never more than `limit` of them (on the
/// stack for the common depths: no allocation). `Err(TooDeep)` as soon as
/// the nesting passes `limit`; what lies deeper is not read. Every element
/// is checked as [`elements`] checks it, and the same errors come back, but
/// nothing is built per element: this is the one walk of a whole reply.
pub fn nesting_depth(doc: &[u8], limit: usize) -> Result<usize, WireError> {
    if doc.len() < 5 {
        // `elements` yields nothing for it either.
        return Ok(1);
    }
    // (where the enclosing document resumes, where it ends)
    let mut stack: SmallVec<[(usize, usize); 16]> = SmallVec::new();
    let (mut pos, mut end) = (4, doc.len());
    let mut deepest = 1;
    loop {
        // `pos < end` holds: an element always ends before its document's
        // last byte (checked below).
        let element_type = doc[pos];
        if element_type == 0 {
            if pos + 1 != end {
                return Err(WireError::InvalidBson("bytes after the terminating NUL"));
            }
            match stack.pop() {
                Some((resume, parent_end)) => (pos, end) = (resume, parent_end),
                None => return Ok(deepest),
            }
            continue;
        }
        let nul = doc[pos + 1..end]
            .iter()
            .position(|&b| b == 0)
            .ok_or(WireError::InvalidBson("key without NUL"))?;
        let value_start = pos + 1 + nul + 1;
        // Values of a fixed size (numbers, dates, ObjectIds, booleans:
        // the elements of vectors and coordinates) are stepped over here,
        // with the checks `value_len` and the bound below make.
        let fixed = FIXED_SIZE[element_type as usize];
        if fixed != 0 {
            let next = value_start + usize::from(fixed - 1);
            if next >= end {
                return Err(WireError::InvalidBson("element runs past the document"));
            }
            pos = next;
            continue;
        }
        let value = &doc[value_start..end];
        let len = value_len(value, element_type)?;
        if len >= value.len() {
            return Err(WireError::InvalidBson("element runs past the document"));
        }
        let next = value_start + len;
        let inner = match element_type {
            0x03 | 0x04 => value_start,
            // Code with scope: length, string, then the scope document.
            0x0F => {
                let code = len_prefixed(value, 4, 1, 4)?;
                if 4 + code > len {
                    return Err(WireError::InvalidBson("truncated code with scope"));
                }
                value_start + 4 + code
            }
            _ => {
                pos = next;
                continue;
            }
        };
        // The current document and those around it.
        if stack.len() + 1 >= limit {
            return Err(WireError::TooDeep(limit));
        }
        deepest = deepest.max(stack.len() + 2);
        if next - inner < 5 {
            // Too short to hold an element (`elements` yields none).
            pos = next;
            continue;
        }
        stack.push((next, end));
        (pos, end) = (inner + 4, next);
    }
}

/// `Err(TooDeep)` when `doc` nests deeper than `limit`, as
/// [`nesting_depth`] finds; a document too short to nest that deep is not
/// walked. Each level of nesting costs at least 7 bytes (a type byte, an
/// empty key's NUL and a 5-byte document), so a document nesting `d`
/// levels deep is at least `5 + 7 (d - 1)` bytes long.
pub fn check_nesting(doc: &[u8], limit: usize) -> Result<(), WireError> {
    if doc.len() < 5 + 7 * limit {
        return Ok(());
    }
    nesting_depth(doc, limit).map(|_| ())
}

/// The first element of `doc` named `key` (the one the server reads when
/// a key is repeated), looked for up to the first malformed element.
#[inline]
pub fn field<'a>(doc: &'a [u8], key: &[u8]) -> Option<Element<'a>> {
    elements(doc).map_while(Result::ok).find(|e| e.key == key)
}

/// The first key of a document (the command name of a command body).
pub fn first_key(doc: &[u8]) -> Option<&[u8]> {
    match elements(doc).next()? {
        Ok(e) => Some(e.key),
        Err(_) => None,
    }
}

/// Appends a string element to a document under construction (no length
/// fix-up: the caller writes the document length at the end).
pub fn push_str_element(out: &mut Vec<u8>, key: &str, value: &str) {
    out.push(0x02);
    out.extend_from_slice(key.as_bytes());
    out.push(0);
    out.extend_from_slice(&((value.len() + 1) as i32).to_le_bytes());
    out.extend_from_slice(value.as_bytes());
    out.push(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    #[test]
    fn utf8_reads_as_std_reads() {
        let cases: [&[u8]; 7] = [
            b"",
            b"_id",
            b"userId.tags",
            "caf\u{e9}".as_bytes(),
            "\u{1F600} x".as_bytes(),
            b"bad \xff",
            b"\xc3",
        ];
        for bytes in cases {
            assert_eq!(utf8(bytes), std::str::from_utf8(bytes).ok(), "{bytes:?}");
        }
        assert_eq!(utf8(b"\xff"), None);
    }

    /// The shortest document nesting `depth` levels: `{"": {"": … {}}}`.
    fn nested(depth: usize) -> Vec<u8> {
        let mut doc = vec![5, 0, 0, 0, 0];
        for _ in 1..depth {
            let len = (doc.len() + 7) as i32;
            let mut outer = len.to_le_bytes().to_vec();
            outer.extend([0x03, 0]);
            outer.extend(&doc);
            outer.push(0);
            doc = outer;
        }
        doc
    }

    /// The length shortcut never lets a too-deep document through: the
    /// shortest document one level past the limit is exactly as long as
    /// the shortcut's bound, and is walked and refused.
    #[test]
    fn short_documents_skip_the_depth_walk_only_when_they_cannot_be_too_deep() {
        for limit in [1, 3, 200] {
            let at_limit = nested(limit);
            assert_eq!(nesting_depth(&at_limit, limit + 1), Ok(limit));
            assert_eq!(check_nesting(&at_limit, limit), Ok(()));
            let past = nested(limit + 1);
            assert_eq!(past.len(), 5 + 7 * limit);
            assert_eq!(nesting_depth(&past, limit + 2), Ok(limit + 1));
            assert_eq!(check_nesting(&past, limit), Err(WireError::TooDeep(limit)));
        }
    }

    /// Depth is found without recursion: a 10,000-deep document (which
    /// would overflow any recursive walk) is refused at the limit, and
    /// ordinary nesting is measured exactly.
    #[test]
    fn nesting_depth_is_bounded_without_recursion() {
        let doc = rawdoc! {"a": {"b": [1, {"c": 1}]}, "d": 1};
        assert_eq!(nesting_depth(doc.as_bytes(), 200), Ok(4));
        assert_eq!(nesting_depth(doc.as_bytes(), 3), Err(WireError::TooDeep(3)));
        let mut deep = vec![5, 0, 0, 0, 0];
        for _ in 0..10_000 {
            let mut outer = Vec::with_capacity(deep.len() + 12);
            outer.extend_from_slice(&((deep.len() + 8) as i32).to_le_bytes());
            outer.extend_from_slice(&[0x03, b'a', 0]);
            outer.extend_from_slice(&deep);
            outer.push(0);
            deep = outer;
        }
        assert_eq!(nesting_depth(&deep, 200), Err(WireError::TooDeep(200)));
    }

    #[test]
    fn walks_every_type_the_spec_lists() {
        let doc = bson::doc! {
            "d": 1.5, "s": "x", "o": {"a": 1}, "a": [1, 2],
            "b": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "id": bson::oid::ObjectId::new(), "t": true, "dt": bson::DateTime::now(), "n": bson::Bson::Null,
            "re": bson::Regex { pattern: "a.*".try_into().unwrap(), options: "i".try_into().unwrap() },
            "i": 7i32, "ts": bson::Timestamp { time: 1, increment: 2 }, "l": 9i64,
            "dec": bson::Decimal128::from_bytes([0; 16]), "min": bson::Bson::MinKey, "max": bson::Bson::MaxKey,
        };
        let doc = bson::RawDocumentBuf::try_from(&doc).unwrap();
        let keys: Vec<_> = elements(doc.as_bytes())
            .map(|e| String::from_utf8(e.unwrap().key.to_vec()).unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "d", "s", "o", "a", "b", "id", "t", "dt", "n", "re", "i", "ts", "l", "dec", "min",
                "max"
            ]
        );
        let s = elements(doc.as_bytes()).nth(1).unwrap().unwrap();
        assert_eq!(s.as_str(), Some("x"));
        // Raw element bytes re-assemble into the same document.
        let mut body: Vec<u8> = vec![0; 4];
        for e in elements(doc.as_bytes()) {
            body.extend_from_slice(e.unwrap().raw);
        }
        body.push(0);
        let len = body.len() as i32;
        body[..4].copy_from_slice(&len.to_le_bytes());
        assert_eq!(body, doc.as_bytes());
    }

    /// The walk `nesting_depth` replaced: a stack of [`elements`]. Kept
    /// as the reference the faster walk must agree with.
    fn nesting_depth_by_elements(doc: &[u8], limit: usize) -> Result<usize, WireError> {
        let mut stack: Vec<Elements<'_>> = vec![elements(doc)];
        let mut deepest = 1;
        while let Some(top) = stack.last_mut() {
            match top.next() {
                None => {
                    stack.pop();
                }
                Some(Err(e)) => return Err(e),
                Some(Ok(e)) => {
                    let inner = match e.element_type {
                        0x03 | 0x04 => e.value,
                        0x0F => {
                            let code = len_prefixed(e.value, 4, 1, 4)?;
                            e.value
                                .get(4 + code..)
                                .ok_or(WireError::InvalidBson("truncated code with scope"))?
                        }
                        _ => continue,
                    };
                    if stack.len() >= limit {
                        return Err(WireError::TooDeep(limit));
                    }
                    stack.push(elements(inner));
                    deepest = deepest.max(stack.len());
                }
            }
        }
        Ok(deepest)
    }

    /// Every single-byte corruption and every cut of a document holding
    /// each container type (code with scope included) gets the same answer
    /// — depth, or the same error — from the walk and its reference, at
    /// every limit around the document's depth.
    #[test]
    fn the_nesting_walk_agrees_with_the_element_walker_on_corrupt_input() {
        let scope = bson::Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
            code: "f()".into(),
            scope: bson::doc! {"s": {"t": 1}},
        });
        let doc = bson::doc! {
            "a": {"b": [1, {"c": "x"}, []], "e": {}}, "code": scope,
            "re": bson::Regex { pattern: "a".try_into().unwrap(), options: "i".try_into().unwrap() },
            "n": bson::Bson::Null, "z": 2.5,
            // Every value of a fixed size (stepped over without value_len).
            "v": [1.5, 2i64, true, bson::oid::ObjectId::from_bytes([7; 12]),
                  bson::DateTime::from_millis(3), bson::Timestamp { time: 1, increment: 2 },
                  bson::Decimal128::from_bytes([1; 16]), bson::Bson::MinKey, bson::Bson::MaxKey,
                  bson::Bson::Undefined, 4i32],
        };
        let bytes = bson::RawDocumentBuf::try_from(&doc).unwrap().into_bytes();
        let mut cases = vec![bytes.clone()];
        for at in 0..bytes.len() {
            for b in [
                0u8, 1, 3, 4, 5, 6, 7, 8, 9, 0x0A, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x7f, 0xff,
            ] {
                let mut c = bytes.clone();
                c[at] = b;
                cases.push(c);
            }
            let mut cut = bytes[..at].to_vec();
            if cut.len() >= 4 {
                cut[..4].copy_from_slice(&(at as i32).to_le_bytes());
            }
            cases.push(cut);
        }
        for case in &cases {
            for limit in 1..6 {
                assert_eq!(
                    nesting_depth(case, limit),
                    nesting_depth_by_elements(case, limit),
                    "{case:?} limit {limit}"
                );
            }
        }
        assert_eq!(nesting_depth(&bytes, 200), Ok(4));
        // Code with scope whose string length points anywhere in (or past)
        // the value, and scopes too short to hold an element.
        for string_len in 1..14i32 {
            for scope in [
                &[][..],
                &[5, 0, 0, 0],
                &[5, 0, 0, 0, 0],
                &[4, 0, 0, 0, 0, 0],
            ] {
                let mut value = vec![0; 4];
                value.extend_from_slice(&string_len.to_le_bytes());
                value.extend_from_slice(b"f()\0");
                value.extend_from_slice(scope);
                let total = value.len() as i32;
                value[..4].copy_from_slice(&total.to_le_bytes());
                let mut case = vec![0; 4];
                case.extend_from_slice(&[0x0F, b'c', 0]);
                case.extend_from_slice(&value);
                case.push(0);
                let total = case.len() as i32;
                case[..4].copy_from_slice(&total.to_le_bytes());
                for limit in 1..4 {
                    assert_eq!(
                        nesting_depth(&case, limit),
                        nesting_depth_by_elements(&case, limit),
                        "string length {string_len}, scope {scope:?}, limit {limit}"
                    );
                }
            }
        }
    }

    #[test]
    fn errors_instead_of_panicking_on_bad_input() {
        let doc = rawdoc! {"s": "hello"};
        let mut bytes = doc.as_bytes().to_vec();
        // Lie about the string length.
        bytes[7] = 0x7f;
        assert!(elements(&bytes).any(|e| e.is_err()));
        for cut in 0..doc.as_bytes().len() {
            let _ = elements(&doc.as_bytes()[..cut]).count();
        }
        assert_eq!(elements(&[]).count(), 0);
        assert!(elements(&[5, 0, 0, 0, 0x42]).any(|e| e.is_err()));
    }

    #[test]
    fn truthiness() {
        let doc = rawdoc! {"a": 1i32, "b": 0i32, "c": true, "d": 1.0, "e": 0i64, "f": "x"};
        let v: Vec<_> = elements(doc.as_bytes())
            .map(|e| e.unwrap().as_bool())
            .collect();
        assert_eq!(
            v,
            [
                Some(true),
                Some(false),
                Some(true),
                Some(true),
                Some(false),
                None
            ]
        );
    }
}
