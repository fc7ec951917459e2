//! How values are compared inside wirelint: by a hash of their encoding,
//! never kept or shown. The namespaces' tables (inserted ids, a field
//! set's values) and the N+1 lists hold these hashes; a hash taken from a
//! walked element's bytes equals the one taken from the decoded value, so
//! the walk of a document need not decode what it hashes.

use crate::wire::bson_walk;
use bson::{RawBsonRef, RawDocument};

/// A hash of a value for equality tests inside wirelint (values are never
/// kept or shown, only compared; the hashes stay in this process).
/// Hashes the value's own encoding (type tag + bytes) with foldhash at a
/// fixed seed: the same value hashes the same on every worker, and a long
/// string is hashed a word at a time, not a byte at a time.
pub fn value_hash(v: RawBsonRef<'_>) -> u64 {
    let h = |bytes: &[u8]| tagged_hash(v.element_type() as u8, bytes);
    match v {
        RawBsonRef::String(s) => h(s.as_bytes()),
        RawBsonRef::ObjectId(o) => h(&o.bytes()),
        RawBsonRef::Int32(i) => h(&i.to_le_bytes()),
        RawBsonRef::Int64(i) => h(&i.to_le_bytes()),
        RawBsonRef::Double(d) => h(&d.to_le_bytes()),
        RawBsonRef::Binary(b) => h(b.bytes),
        RawBsonRef::Document(d) => h(d.as_bytes()),
        RawBsonRef::Array(a) => h(a.as_bytes()),
        RawBsonRef::DateTime(d) => h(&d.timestamp_millis().to_le_bytes()),
        // A flag (`active`, `deleted`) is a field set's commonest scalar:
        // hashed as its byte, not formatted.
        RawBsonRef::Boolean(b) => h(&[u8::from(b)]),
        other => h(format!("{other:?}").as_bytes()),
    }
}

/// [`value_hash`] of `doc`'s first `_id`, walked to already.
pub(super) fn hash_of_id(doc: &RawDocument, e: &bson_walk::Element<'_>) -> Option<u64> {
    element_hash(e).or_else(|| doc.get("_id").ok().flatten().map(value_hash))
}

/// [`value_hash`] of a walked element, from its bytes (the same type tag
/// and bytes `value_hash` hashes); `None` for the types `value_hash`
/// decodes first, which the caller hands to bson.
pub fn element_hash(e: &bson_walk::Element<'_>) -> Option<u64> {
    let bytes = match e.element_type {
        // The string's bytes, not validated as UTF-8: a string bson would
        // refuse hashes apart from every string it accepts all the same.
        0x02 if e.value.len() >= 5 => &e.value[4..e.value.len() - 1],
        0x01 | 0x03 | 0x04 | 0x07 | 0x09 | 0x10 | 0x12 => e.value,
        // Binary (not the old subtype 2, which nests a second length).
        0x05 if e.value.get(4).is_some_and(|s| *s != 0x02) => &e.value[5..],
        _ => return None,
    };
    Some(tagged_hash(e.element_type, bytes))
}

fn tagged_hash(element_type: u8, bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(VALUE_HASH_SEED).hash_one((element_type, bytes))
}

/// An ordered tuple of values' hash before its first value: see
/// [`tuple_hash_continue`].
pub const TUPLE_HASH_START: u64 = 0;

/// An ordered tuple's hash `h` with one more value's [`value_hash`]: `[a,
/// b]` and `[b, a]` hash apart (a compound partition key's values).
pub fn tuple_hash_continue(h: u64, value: u64) -> u64 {
    (h ^ value)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(29)
}

/// `value_hash`'s seed (any constant: the hashes never leave the process).
const VALUE_HASH_SEED: u64 = 0x7769_7265_6c69_6e74;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::namespaces::{Caps, Doc};
    use bson::rawdoc;

    /// The hashed `_id` of a document, found by a walk of its own: what
    /// [`Doc::id`] must agree with.
    fn id_hash(doc: &RawDocument) -> Option<u64> {
        let e = bson_walk::field(doc.as_bytes(), b"_id")?;
        hash_of_id(doc, &e)
    }

    /// The walked hash of an `_id` is the decoded one, for every type
    /// `element_hash` reads itself; the others go to bson.
    #[test]
    fn element_hash_is_value_hash() {
        let oid = bson::oid::ObjectId::from_bytes([7; 12]);
        let doc = rawdoc! {
            "s": "text", "d": 2.5, "o": {"a": 1}, "a": [1, "x"], "oid": oid,
            "t": bson::DateTime::from_millis(1_700_000_000_000), "i": 42i32, "l": 1i64 << 40,
            "u": bson::Binary { subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![1; 16] },
            "old": bson::Binary { subtype: bson::spec::BinarySubtype::BinaryOld, bytes: vec![2; 4] },
            "n": bson::RawBson::Null, "ts": bson::Timestamp { time: 1, increment: 2 },
        };
        let mut read = 0;
        for (e, (key, value)) in bson_walk::elements(doc.as_bytes()).zip(doc.iter().flatten()) {
            let e = e.unwrap();
            assert_eq!(e.key, key.as_str().as_bytes());
            if let Some(h) = element_hash(&e) {
                assert_eq!(h, value_hash(value), "{}", key.as_str());
                read += 1;
            }
        }
        assert_eq!(read, 9, "all but the old binary, null and timestamp");
        let caps = Caps::default();
        let with_id = |id: bson::RawBson| {
            let d =
                rawdoc! {"a": [{"_id": 1}], "x": {"_id": 2}, "_id": id.clone(), "_id": "second"};
            // A document's walk finds the same `_id` as `id_hash`'s own.
            assert_eq!(Doc::new(&d, &caps).id, id_hash(&d));
            (id_hash(&d), value_hash(id.as_raw_bson_ref()))
        };
        for id in [
            bson::RawBson::Int32(5),
            bson::RawBson::Null,
            bson::RawBson::String("k".into()),
            bson::RawBson::Document(bson::rawdoc! {"k": 1}),
        ] {
            let (walked, decoded) = with_id(id);
            assert_eq!(walked, Some(decoded), "the first top-level _id counts");
        }
        assert_eq!(Doc::new(&rawdoc! {"a": {"_id": 1}}, &caps).id, None);
    }
}
