//! A document walked once, on its raw bytes, for what the namespace state
//! and every rule read of it: its arrays (folded paths, lengths, sizes)
//! and its first top-level `_id`. Walking it once here spares each reader
//! a walk of its own.

use super::value_hash::hash_of_id;
use super::Caps;
use crate::analysis::budget::short_key;
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
}

impl<'a> Doc<'a> {
    pub fn new(raw: &'a RawDocument, caps: &Caps) -> Doc<'a> {
        let mut arrays = Vec::new();
        let mut id = None;
        PATH.with_borrow_mut(|path| {
            path.clear();
            walk_arrays(raw.as_bytes(), path, 0, caps, &mut arrays, Some(&mut id));
            // A document with huge keys does not leave its buffer behind.
            if path.capacity() > MAX_KEPT_PATH {
                *path = String::new();
            }
        });
        Doc {
            raw,
            arrays,
            id: id.and_then(|e| hash_of_id(raw, &e)),
        }
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
/// documents and arrays.
fn walk_arrays<'d>(
    doc: &'d [u8],
    path: &mut String,
    depth: usize,
    caps: &Caps,
    out: &mut Vec<ArrayInDoc>,
    mut id: Option<&mut Option<bson_walk::Element<'d>>>,
) {
    if depth >= caps.depth || out.len() >= caps.paths_per_namespace {
        return;
    }
    for element in bson_walk::elements(doc) {
        let Ok(element) = element else { return };
        // The top level's first `_id` (a repeated key: the first counts).
        if let Some(id) = id.as_deref_mut() {
            if id.is_none() && element.key == b"_id" {
                *id = Some(element);
            }
        }
        if !matches!(element.element_type, 0x03 | 0x04) {
            continue;
        }
        let mark = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&String::from_utf8_lossy(element.key));
        if element.element_type == 0x03 {
            walk_arrays(element.value, path, depth + 1, caps, out, None);
        } else {
            let array_path = short_key(path).into_owned();
            path.push_str(".$");
            let mut len = 0u32;
            let mut numeric = true;
            for item in bson_walk::elements(element.value) {
                let Ok(item) = item else { break };
                if item.element_type == 0x03 && (len as usize) < caps.elements_sampled {
                    walk_arrays(item.value, path, depth + 1, caps, out, None);
                }
                numeric = numeric && is_numeric_value(&item);
                len += 1;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

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
