//! A document walked once, on its raw bytes, for what the namespace state
//! and every rule read of it: its arrays (folded paths, lengths, sizes)
//! and its first top-level `_id`. Walking it once here spares each reader
//! a walk of its own.

use super::value_hash::{element_hash, hash_of_id, tuple_hash_continue, TUPLE_HASH_START};
use super::Caps;
use crate::analysis::budget::short_key;
use crate::analysis::command::{is_value_key, VALUE_KEY};
use crate::wire::bson_walk;
use bson::RawDocument;

/// One array in a document: its folded path, length and encoded size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayInDoc {
    pub path: String,
    pub len: u32,
    pub bytes: usize,
    /// Every element a number, an array of numbers, or a small document
    /// of numbers (`{lng, lat}`): a vector (an embedding), coordinates or
    /// a polygon, whose size is fixed by what it encodes, not by related
    /// entities that keep coming.
    pub numeric: bool,
}

/// A document the analysis saw, walked once: its arrays are found here and
/// shared by the namespace state and every rule.
pub struct Doc<'a> {
    pub raw: &'a RawDocument,
    pub arrays: Vec<ArrayInDoc>,
    /// [`value_hash`] of its first top-level `_id`, found in the same walk.
    pub id: Option<u64>,
    /// Its leaf values (each element of an array of scalars one), counted
    /// in the same walk: what Azure Cosmos DB indexes of it under its
    /// default policy (`request_units`). An array of documents walked only
    /// in part counts its other elements as the walked ones' average;
    /// an array inside an array counts one.
    pub terms: u64,
    /// The values of the top-level fields [`Doc::keyed`] was asked for,
    /// hashed in the same walk (a partition key's; see [`Doc::key_value`]).
    key: KeyValue,
}

/// The top-level fields [`Doc::keyed`] was asked for, as the walk found
/// them (the first of each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyValue {
    /// None was asked for ([`Doc::new`]).
    NotAsked,
    /// One of them is not in the document.
    Absent,
    /// Their [`value_hash`](super::value_hash)es, taken from their
    /// bytes, combined in the order asked ([`tuple_hash_continue`]); of
    /// one field in [`Top`], its own.
    Hashed(u64),
    /// All there, but one not hashed in the walk: an embedded document (a
    /// reader may take its `$eq` for the value) or a type hashed only once
    /// decoded ([`element_hash`]).
    Other,
}

/// The most top-level fields [`Doc::keyed`] finds.
pub const MAX_KEY_FIELDS: usize = 4;

/// What the walk picks up at a document's top level.
struct Top<'d, 'k> {
    id: Option<bson_walk::Element<'d>>,
    /// The fields asked for, and what was found of each.
    key: &'k [String],
    found: [KeyValue; MAX_KEY_FIELDS],
    /// How many of them are still to find.
    left: usize,
}

impl Top<'_, '_> {
    /// Keeps `element`'s value's hash if it is one of the fields asked
    /// for, not found yet. Out of line: most walks ask for none.
    #[inline(never)]
    fn look_at(&mut self, element: &bson_walk::Element<'_>) {
        for (name, found) in self.key.iter().zip(&mut self.found) {
            if name.len() == element.key.len()
                && matches!(found, KeyValue::Absent)
                && name.as_bytes() == element.key
            {
                *found = match element.element_type {
                    0x03 => KeyValue::Other,
                    _ => element_hash(element).map_or(KeyValue::Other, KeyValue::Hashed),
                };
                self.left -= 1;
                return;
            }
        }
    }

    /// What was found of the fields asked for.
    fn key_value(&self) -> KeyValue {
        if self.key.is_empty() {
            return KeyValue::NotAsked;
        }
        let mut h = TUPLE_HASH_START;
        for found in &self.found[..self.key.len()] {
            match *found {
                KeyValue::Hashed(v) => h = tuple_hash_continue(h, v),
                other => return other,
            }
        }
        KeyValue::Hashed(h)
    }
}

impl<'a> Doc<'a> {
    pub fn new(raw: &'a RawDocument, caps: &Caps) -> Doc<'a> {
        Doc::keyed(raw, caps, &[])
    }

    /// [`Doc::new`], also keeping the top-level fields `key` (at most
    /// [`MAX_KEY_FIELDS`]: those after are not looked for; see
    /// [`Doc::key_value`]).
    pub fn keyed(raw: &'a RawDocument, caps: &Caps, key: &[String]) -> Doc<'a> {
        let mut arrays = Vec::new();
        let mut top = Top {
            id: None,
            key: &key[..key.len().min(MAX_KEY_FIELDS)],
            found: [KeyValue::Absent; MAX_KEY_FIELDS],
            left: key.len().min(MAX_KEY_FIELDS),
        };
        let mut terms = 0;
        PATH.with_borrow_mut(|path| {
            path.clear();
            walk_arrays::<true>(
                raw.as_bytes(),
                path,
                0,
                caps,
                &mut arrays,
                &mut terms,
                Some(&mut top),
            );
            // A document with huge keys does not leave its buffer behind.
            if path.capacity() > MAX_KEPT_PATH {
                *path = String::new();
            }
        });
        Doc {
            raw,
            arrays,
            id: top.id.and_then(|e| hash_of_id(raw, &e)),
            terms,
            key: top.key_value(),
        }
    }

    /// The values of the fields [`Doc::keyed`] was asked for.
    pub fn key_value(&self) -> KeyValue {
        self.key
    }
}

thread_local! {
    /// The path being walked by [`Doc::new`]: one buffer per thread, not
    /// one per document with an embedded document or array.
    static PATH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The most a thread's path buffer keeps between documents.
const MAX_KEPT_PATH: usize = 4096;

/// BSON double, int32, int64, decimal128.
fn is_number(element_type: u8) -> bool {
    matches!(element_type, 0x01 | 0x10 | 0x12 | 0x13)
}

/// Fields a document of numbers has when it is one value, a point (`{x,
/// y}`, `{lng, lat, alt}`, `{x, y, z, m}`), not an entity: two to four.
const POINT_FIELDS: std::ops::RangeInclusive<usize> = 2..=4;

/// An array element that is a number itself: a number, an array of
/// numbers (`[lng, lat]`), or a small document of numbers (`{lng, lat}`).
fn is_numeric_value(item: &bson_walk::Element<'_>) -> bool {
    let all_numbers = |body: &[u8], fields: std::ops::RangeInclusive<usize>| {
        let mut n = 0;
        bson_walk::elements(body).all(|e| {
            n += 1;
            n <= *fields.end() && e.is_ok_and(|e| is_number(e.element_type))
        }) && fields.contains(&n)
    };
    match item.element_type {
        0x04 => all_numbers(item.value, 0..=usize::MAX),
        0x03 => all_numbers(item.value, POINT_FIELDS),
        t => is_number(t),
    }
}

/// Collects (path, length) for every array, elements folded as `path.$`.
/// `path` is the prefix so far; it is restored before returning. Walks the
/// raw bytes (no UTF-8 or value decoding) and builds a path only for
/// documents and arrays. `TOP`: the document's top level, where `top`
/// picks up what it asks for (the nested levels are a function of their
/// own, without that code).
fn walk_arrays<'d, const TOP: bool>(
    doc: &'d [u8],
    path: &mut String,
    depth: usize,
    caps: &Caps,
    out: &mut Vec<ArrayInDoc>,
    terms: &mut u64,
    mut top: Option<&mut Top<'d, '_>>,
) {
    if depth >= caps.depth || out.len() >= caps.paths_per_namespace {
        return;
    }
    for element in bson_walk::elements(doc) {
        let Ok(element) = element else { return };
        // The top level's first `_id` (a repeated key: the first counts),
        // and the first of each field asked for.
        if let Some(top) = top.as_deref_mut().filter(|_| TOP) {
            if top.id.is_none() && element.key == b"_id" {
                top.id = Some(element);
            }
            if top.left > 0 {
                top.look_at(&element);
            }
        }
        if !matches!(element.element_type, 0x03 | 0x04) {
            *terms += 1;
            continue;
        }
        let mark = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        // A key that is a value (an id as a field name) is `<id>`: one
        // path for all of them, and none of them kept.
        if is_value_key(element.key) {
            path.push_str(VALUE_KEY);
        } else {
            path.push_str(&String::from_utf8_lossy(element.key));
        }
        if element.element_type == 0x03 {
            walk_arrays::<false>(element.value, path, depth + 1, caps, out, terms, None);
        } else {
            let array_path = short_key(path).into_owned();
            let (len, numeric) = match uniform_len(element.value) {
                // Scalars, or arrays, of one size: nothing in them to walk
                // (arrays in an array are not walked into either).
                Some((len, first, last)) => {
                    *terms += len as u64;
                    (len, is_numeric_value(&first) && is_numeric_value(&last))
                }
                None => {
                    // The first elements are walked into and judged
                    // numbers or not, and the last: the others are
                    // counted, an array's elements being alike (and
                    // taken to hold as many terms as the walked ones).
                    path.push_str(".$");
                    let mut len = 0u32;
                    let mut numeric = true;
                    let mut last = None;
                    let before = *terms;
                    for item in bson_walk::elements(element.value) {
                        let Ok(item) = item else { break };
                        if (len as usize) < caps.elements_sampled {
                            if item.element_type == 0x03 {
                                walk_arrays::<false>(
                                    item.value,
                                    path,
                                    depth + 1,
                                    caps,
                                    out,
                                    terms,
                                    None,
                                );
                            } else {
                                *terms += 1;
                            }
                            numeric = numeric && is_numeric_value(&item);
                        }
                        last = Some(item);
                        len += 1;
                    }
                    let walked = (len as usize).min(caps.elements_sampled) as u64;
                    if walked > 0 && len as u64 > walked {
                        *terms += (*terms - before) * (len as u64 - walked) / walked;
                    }
                    (len, numeric && last.is_none_or(|l| is_numeric_value(&l)))
                }
            };
            out.push(ArrayInDoc {
                path: array_path,
                len,
                bytes: element.value.len(),
                numeric: numeric && len > 0,
            });
        }
        path.truncate(mark);
    }
}

/// The value size of the BSON types whose values all have one size.
fn fixed_size(element_type: u8) -> Option<usize> {
    match element_type {
        0x08 => Some(1),
        0x10 => Some(4),
        0x01 | 0x09 | 0x11 | 0x12 => Some(8),
        0x07 => Some(12),
        0x13 => Some(16),
        _ => None,
    }
}

/// The length of an array (its encoding, length prefix to terminating
/// NUL) whose first element is of a type of one size (a number, a date,
/// an ObjectId, a boolean) or an array, worked out from its byte length as
/// if every element were the size of the first, and checked at its last
/// element (its type, its key `len - 1` and, for an array, its length,
/// where that length puts it), not element by element: a vector, a list
/// of ObjectIds or of timestamps, a polygon's ring of `[lng, lat]` pairs
/// is skipped by its length. `None` (walk it) when the first element is
/// of another kind, the bytes do not divide into such elements, or the
/// last is not where it should be. With its first and last elements.
fn uniform_len(array: &[u8]) -> Option<(u32, bson_walk::Element<'_>, bson_walk::Element<'_>)> {
    let first = bson_walk::elements(array).next()?.ok()?;
    if first.key != b"0" {
        return None;
    }
    let size = match first.element_type {
        0x04 => first.value.len(),
        t => fixed_size(t)?,
    };
    // The elements' bytes: past the length prefix, before the NUL.
    let body = array.len().checked_sub(5)?;
    // Element i takes its type byte, the digits of i, a NUL and the value:
    // count the elements band by band of keys with as many digits.
    let (mut len, mut used, mut digits, mut band_end) = (0usize, 0usize, 1usize, 10usize);
    loop {
        let each = 2 + digits + size;
        let band = (band_end - len).checked_mul(each)?;
        if used + band >= body {
            let rest = body - used;
            if rest % each != 0 {
                return None;
            }
            len += rest / each;
            break;
        }
        used += band;
        len = band_end;
        digits += 1;
        band_end = band_end.checked_mul(10)?;
    }
    let key = len.checked_sub(1)?.to_string();
    let at = 4 + body - (2 + key.len() + size);
    let tail = array.get(at..)?;
    // The last element, read as the walker reads one: it must end exactly
    // at the array's terminating NUL.
    let mut rest = bson_walk::elements_from(array, at);
    let last = rest.next()?.ok()?;
    let ends_there = rest.next().is_none() && last.raw.len() == tail.len() - 1;
    (last.element_type == first.element_type
        && last.key == key.as_bytes()
        && last.value.len() == size
        && ends_there)
        .then_some((u32::try_from(len).ok()?, first, last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    /// An array of documents is judged numbers by its first elements and
    /// its last, and counted whole.
    #[test]
    fn an_array_of_points_is_judged_by_its_first_and_last() {
        let caps = Caps::default();
        let points: Vec<bson::RawDocumentBuf> = (0..100)
            .map(|i| rawdoc! {"lng": i as f64, "lat": 1.0})
            .collect();
        let doc = |last: bson::RawDocumentBuf| {
            let mut a = bson::RawArrayBuf::new();
            for p in &points {
                a.push(p.clone());
            }
            a.push(last);
            rawdoc! {"_id": 1, "zone": a}
        };
        let points_only = doc(rawdoc! {"lng": 0.5, "lat": 0.5});
        let d = Doc::new(&points_only, &caps);
        assert_eq!((d.arrays[0].len, d.arrays[0].numeric), (101, true));
        let named_last = doc(rawdoc! {"name": "depot"});
        let d = Doc::new(&named_last, &caps);
        assert_eq!((d.arrays[0].len, d.arrays[0].numeric), (101, false));
    }

    /// The length worked out from the bytes is the walked one for every
    /// length across the key-digit bands and every fixed-size type; a
    /// mixed array, one of strings or of documents, or one whose last key
    /// is not where its length puts it is walked instead.
    #[test]
    fn uniform_arrays_are_measured_by_their_bytes() {
        let walked = |a: &bson::RawArrayBuf| bson_walk::elements(a.as_bytes()).count() as u32;
        for n in [
            1usize, 2, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 1536, 12_000,
        ] {
            let arrays: [bson::RawArrayBuf; 6] = [
                (0..n).map(|i| i as f64).collect(),
                (0..n).map(|i| i as i32).collect(),
                (0..n).map(|i| i as i64).collect(),
                (0..n).map(|_| bson::oid::ObjectId::new()).collect(),
                (0..n).map(|i| i % 2 == 0).collect(),
                (0..n)
                    .map(|i| bson::DateTime::from_millis(i as i64))
                    .collect(),
            ];
            for a in &arrays {
                let (len, _, _) = uniform_len(a.as_bytes()).unwrap_or_else(|| panic!("{n}: {a:?}"));
                assert_eq!(len, walked(a), "{n}");
            }
        }
        assert!(uniform_len(bson::RawArrayBuf::new().as_bytes()).is_none());
        let array = |d: bson::RawDocumentBuf| d.get_array("a").unwrap().as_bytes().to_vec();
        let walk_instead = [
            array(rawdoc! {"a": [1_i32, 2.0_f64]}),
            array(rawdoc! {"a": ["a", "b"]}),
            array(rawdoc! {"a": [{"x": 1}]}),
            array(rawdoc! {"a": [1.0_f64, 2_i32, 3_i32]}),
        ];
        for a in &walk_instead {
            assert!(uniform_len(a).is_none(), "{a:?}");
        }
        // A ring of [lng, lat] pairs: measured; one pair of three: walked.
        let ring = array(rawdoc! {"a": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]});
        let (len, first, last) = uniform_len(&ring).unwrap();
        assert_eq!(
            (len, is_numeric_value(&first), is_numeric_value(&last)),
            (3, true, true)
        );
        let odd = array(rawdoc! {"a": [[1.0, 2.0], [3.0, 4.0, 5.0], [5.0, 6.0]]});
        assert!(uniform_len(&odd).is_none());
        // A last key that is not its index: walked.
        let mut bytes = (0..12_i32)
            .collect::<bson::RawArrayBuf>()
            .as_bytes()
            .to_vec();
        let at = bytes.len() - 1 - 4 - 1 - 2;
        bytes[at] = b'9';
        assert!(uniform_len(&bytes).is_none());
    }

    /// A document with a huge key does not leave a huge path buffer
    /// behind on its thread; an ordinary one keeps the buffer for reuse.
    #[test]
    fn the_path_buffer_stays_small() {
        let caps = Caps::default();
        let mut big = bson::RawDocumentBuf::new();
        let key = bson::raw::CString::try_from("k".repeat(100_000).as_str()).unwrap();
        big.append(key, rawdoc! {"a": [1]});
        Doc::new(&big, &caps);
        assert!(PATH.with_borrow(|p| p.capacity()) <= MAX_KEPT_PATH);
        Doc::new(&rawdoc! {"tags": ["a"], "sub": {"list": [1]}}, &caps);
        assert!(PATH.with_borrow(|p| p.capacity()) > 0);
    }

    /// Arrays under keys that are ids are one path, with no id in it.
    #[test]
    fn keys_that_are_values_fold_in_paths() {
        let caps = Caps::default();
        let doc = rawdoc! {"members": {
            "3fa85f64-5717-4562-b3fc-2c963f66afa6": {"badges": ["a", "b"]},
            "9b2c1d4e-0000-4562-b3fc-2c963f66afa6": {"badges": ["c"]}
        }};
        let paths: Vec<String> = Doc::new(&doc, &caps)
            .arrays
            .into_iter()
            .map(|a| a.path)
            .collect();
        assert_eq!(paths, ["members.<id>.badges", "members.<id>.badges"]);
    }

    #[test]
    fn vectors_and_coordinates_are_numeric_arrays() {
        let caps = Caps::default();
        let embedding: Vec<f64> = (0..1536).map(|i| i as f64 / 1536.0).collect();
        let line: Vec<Vec<f64>> = (0..500).map(|i| vec![i as f64, -(i as f64)]).collect();
        let doc = bson::RawDocumentBuf::try_from(&bson::doc! {
            "embedding": embedding, "route": {"type": "LineString", "coordinates": line},
            "tags": ["a", "b"], "ids": [1, "x"], "empty": [], "comments": [{"t": 1}]
        })
        .unwrap();
        let arrays = Doc::new(&doc, &caps).arrays;
        let numeric = |path: &str| arrays.iter().find(|a| a.path == path).unwrap().numeric;
        assert!(numeric("embedding") && numeric("route.coordinates"));
        assert!(!numeric("tags") && !numeric("ids") && !numeric("empty") && !numeric("comments"));
    }

    /// A polygon stored as point documents is a value like one stored as
    /// number pairs; documents with a non-number field, or with more or
    /// fewer fields than a point has, are entities.
    #[test]
    fn small_documents_of_numbers_are_numeric_values() {
        let caps = Caps::default();
        let ring: Vec<bson::Document> = (0..500)
            .map(|i| bson::doc! {"lng": i as f64 / 100.0, "lat": -(i as f64) / 100.0})
            .collect();
        let readings: Vec<bson::Document> = (0..50)
            .map(|i| bson::doc! {"t": bson::DateTime::from_millis(i), "v": i as f64})
            .collect();
        let wide: Vec<bson::Document> = (0..50)
            .map(|i| bson::doc! {"a": i, "b": i, "c": i, "d": i, "e": i})
            .collect();
        let doc = bson::RawDocumentBuf::try_from(&bson::doc! {
            "zone": {"ring": ring}, "readings": readings, "wide": wide, "blank": [{}], "one": [{"n": 1}],
            "points3d": [{"x": 1, "y": 2, "z": 3_i64}]
        })
        .unwrap();
        let arrays = Doc::new(&doc, &caps).arrays;
        let numeric = |path: &str| arrays.iter().find(|a| a.path == path).unwrap().numeric;
        assert!(numeric("zone.ring") && numeric("points3d"));
        assert!(!numeric("readings") && !numeric("wide") && !numeric("blank") && !numeric("one"));
    }
}
