//! The top-level field sets of a namespace's documents: which sets of
//! field names its documents have, how many of each, which fields hold a
//! reference by their type (an ObjectId, a UUID), and a few hashed values
//! per short scalar field. Rules read them to tell one collection holding
//! several kinds of document apart (and whether a field names the kind).

use super::value_hash::value_hash;
use super::NamespaceState;
use crate::analysis::budget::{short_key, ENTRY_OVERHEAD};
use crate::analysis::shape::{fnv1a, FNV1A_START};
use crate::wire::bson_walk;
use bson::{RawBsonRef, RawDocument};
use smallvec::SmallVec;

/// Documents with one set of top-level field names.
#[derive(Clone, Debug, Default)]
pub struct FieldSet {
    pub fields: Vec<String>,
    pub count: u64,
    /// Whether every non-`_id` value was a scalar (id-like: not a document
    /// or array) in every such document.
    pub all_scalar: bool,
    /// Bit `i` set: `fields[i]` held an ObjectId or a binary (UUID) in
    /// every such document — a reference by its type.
    pub id_typed: u64,
    /// Per field, hashes of the string values seen (up to 8): what tells
    /// documents apart.
    pub values: Vec<(String, Vec<u64>)>,
    /// The field order last seen: for the document's `i`-th field, its
    /// index in `fields` and in `values` ([`UNKNOWN`] for none yet), and
    /// a hash of that order. A document in the same order (nearly every
    /// one an application writes) finds its fields' entries without a
    /// search by name.
    order: Vec<(u8, u8)>,
    order_hash: u64,
}

/// No entry (yet) in a field set's `fields` or `values`.
const UNKNOWN: u8 = u8::MAX;

/// Distinct values remembered per field of a field set.
const VALUES_PER_FIELD: usize = 8;

/// Distinct top-level field sets remembered per namespace.
pub(super) const FIELD_SETS_PER_NAMESPACE: usize = 64;
/// Top-level fields of a document looked at for its field set.
const FIELDS_PER_SET: usize = 64;

/// Strings longer than this are not remembered as a field's values: a type
/// tag or status is short, and hashing every long text of every document
/// read is what the analysis cannot afford.
const MAX_TAG_BYTES: usize = 64;

/// A top-level field as its set records it.
struct TopField<'d> {
    name: &'d str,
    /// It held an ObjectId or a binary: a reference by its type.
    id_typed: bool,
    /// Its value, when a short scalar a set remembers (see [`short_scalar`]).
    value: Option<RawBsonRef<'d>>,
}

/// What the walk of a document's top level found besides its fields.
struct TopLevel {
    /// The field set's key. It does not depend on the fields' order (a
    /// wrapping sum of their names' hashes, and their number), so a
    /// document's fields are not sorted; the names are, once, when the
    /// set is new.
    key: u64,
    /// A hash of the fields' order, which finds their entries in the set.
    order_hash: u64,
    /// Every non-`_id` value a scalar (not a document or array).
    all_scalar: bool,
}

/// A document's top-level field set: counted, its fields that held a
/// reference by type narrowed, and its fields' short scalar values
/// remembered (a few per field).
pub(super) fn record_field_set(state: &mut NamespaceState, doc: &RawDocument) {
    // On the stack for most documents (filled as read, not zeroed to the
    // cap first): a document allocates nothing here once its set is known.
    let mut fields: SmallVec<[TopField<'_>; 16]> = SmallVec::new();
    let top = read_top_level(doc, &mut fields);
    let fields = &fields[..];
    let set = state
        .field_sets
        .get_or_insert_with(&top.key, || FieldSet::named(fields));
    set.count += 1;
    set.all_scalar &= top.all_scalar;
    if !fields.iter().any(|f| f.id_typed || f.value.is_some()) {
        // No reference by type, no value to remember.
        set.id_typed = 0;
        return;
    }
    set.find_entries(fields, top.order_hash);
    set.narrow_id_typed(fields);
    set.remember_values(fields);
}

/// Walks a document's top level into `fields`, on raw bytes: a value that
/// is not hashed is not decoded (a large string is skipped by its length,
/// not validated).
#[inline]
fn read_top_level<'d>(doc: &'d RawDocument, fields: &mut SmallVec<[TopField<'d>; 16]>) -> TopLevel {
    let mut all_scalar = true;
    let mut key = 0u64;
    let mut order_hash = FNV1A_START;
    for e in bson_walk::elements(doc.as_bytes())
        .map_while(Result::ok)
        .take(FIELDS_PER_SET)
    {
        let Some(name) = bson_walk::utf8(e.key) else {
            continue;
        };
        let name_hash = fnv1a(e.key);
        key = key.wrapping_add(name_hash);
        order_hash = (order_hash ^ name_hash).wrapping_mul(0x0100_0000_01b3);
        let is_id = name == "_id";
        if !is_id && matches!(e.element_type, 0x03 | 0x04) {
            all_scalar = false;
        }
        let value = short_scalar(&e, is_id);
        fields.push(TopField {
            name,
            id_typed: matches!(e.element_type, 0x05 | 0x07),
            value,
        });
    }
    TopLevel {
        key: key.wrapping_add(fields.len() as u64),
        order_hash,
        all_scalar,
    }
}

/// A field's value when a set remembers it: a short string, an int32 or a
/// boolean, and never `_id`'s (unique per document, its values tell
/// nothing apart).
#[inline]
fn short_scalar<'d>(e: &bson_walk::Element<'d>, is_id: bool) -> Option<RawBsonRef<'d>> {
    match e.element_type {
        _ if is_id => None,
        0x02 if e.value.len() <= MAX_TAG_BYTES + 5 => e.as_str().map(RawBsonRef::String),
        0x10 => e
            .value
            .try_into()
            .ok()
            .map(|b| RawBsonRef::Int32(i32::from_le_bytes(b))),
        0x08 => e.value.first().map(|b| RawBsonRef::Boolean(*b != 0)),
        _ => None,
    }
}

impl FieldSet {
    /// A new set of these fields, its names sorted.
    fn named(fields: &[TopField<'_>]) -> FieldSet {
        let mut names: Vec<String> = fields
            .iter()
            .map(|f| short_key(f.name).into_owned())
            .collect();
        names.sort_unstable();
        FieldSet {
            fields: names,
            count: 0,
            all_scalar: true,
            id_typed: u64::MAX,
            values: Vec::new(),
            order: Vec::new(),
            order_hash: 0,
        }
    }

    /// Each field's entries in `fields` and `values`, searched by name only
    /// when the order is new.
    #[inline]
    fn find_entries(&mut self, fields: &[TopField<'_>], order_hash: u64) {
        if self.order_hash == order_hash && self.order.len() == fields.len() {
            return;
        }
        let order = fields
            .iter()
            .map(|f| {
                let name = short_key(f.name);
                (
                    index_of(self.fields.iter(), &name),
                    index_of(self.values.iter().map(|v| &v.0), &name),
                )
            })
            .collect();
        self.order = order;
        self.order_hash = order_hash;
    }

    /// Keeps bit i of `id_typed` only if the set's i-th (sorted) field held
    /// an ObjectId or binary in this document too.
    #[inline]
    fn narrow_id_typed(&mut self, fields: &[TopField<'_>]) {
        let mask = fields
            .iter()
            .zip(&self.order)
            .filter(|(f, (i, _))| f.id_typed && *i < 64)
            .fold(0u64, |m, (_, (i, _))| m | 1 << i);
        self.id_typed &= mask;
    }

    /// Hashes the fields' short scalar values into their entries. A value
    /// is hashed only while its field has room for it (a field of many
    /// values, a name or a count, costs no hash once full).
    #[inline]
    fn remember_values(&mut self, fields: &[TopField<'_>]) {
        for (i, f) in fields.iter().enumerate() {
            let Some(value) = f.value else {
                continue;
            };
            let Some(slot) = self.value_slot(i, f.name) else {
                continue;
            };
            let hashes = &mut self.values[usize::from(slot)].1;
            if hashes.len() < VALUES_PER_FIELD {
                let hash = value_hash(value);
                if !hashes.contains(&hash) {
                    hashes.push(hash);
                }
            }
        }
    }

    /// The entry in `values` of the document's `i`-th field, `name`: by the
    /// order when known, else by name (made if new and there is room).
    #[inline]
    fn value_slot(&mut self, i: usize, name: &str) -> Option<u8> {
        if self.order[i].1 != UNKNOWN {
            return Some(self.order[i].1);
        }
        // A field whose first value this is (or one named twice).
        let field = short_key(name);
        let mut slot = index_of(self.values.iter().map(|v| &v.0), &field);
        if slot == UNKNOWN {
            if self.values.len() >= usize::from(UNKNOWN) {
                return None;
            }
            self.values.push((field.into_owned(), Vec::new()));
            slot = (self.values.len() - 1) as u8;
        }
        self.order[i].1 = slot;
        Some(slot)
    }
}

/// What a field set is charged: its names, and at most [`VALUES_PER_FIELD`]
/// hashes per name (and each one's place in the order last seen).
pub(super) fn field_set_bytes(_: &u64, set: &FieldSet) -> usize {
    let per_field = 2 * std::mem::size_of::<String>()
        + std::mem::size_of::<Vec<u64>>()
        + VALUES_PER_FIELD * 8
        + std::mem::size_of::<(u8, u8)>();
    std::mem::size_of::<(u64, FieldSet)>()
        + set
            .fields
            .iter()
            .map(|f| 2 * f.len() + per_field)
            .sum::<usize>()
        + ENTRY_OVERHEAD
}

/// Where `name` first is among `names`, or [`UNKNOWN`].
fn index_of<'a>(mut names: impl Iterator<Item = &'a String>, name: &str) -> u8 {
    names
        .position(|s| s == name)
        .map_or(UNKNOWN, |i| i.min(usize::from(UNKNOWN)) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::namespaces::{Caps, Doc, Namespaces};

    /// A field set remembers up to eight distinct values per short scalar
    /// field (a flag's two, a kind's few), none of `_id`'s (unique, they
    /// tell nothing apart), and a value past the eighth changes nothing.
    #[test]
    fn a_field_set_remembers_a_few_values_per_field_and_none_of_the_ids() {
        let caps = Caps::default();
        let docs: Vec<bson::RawDocumentBuf> = (0..20)
            .map(|i| {
                bson::RawDocumentBuf::try_from(&bson::doc! {
                    "_id": i, "n": i, "active": i % 2 == 0, "kind": if i < 3 { "a" } else { "b" }
                })
                .unwrap()
            })
            .collect();
        let parsed: Vec<Doc<'_>> = docs.iter().map(|d| Doc::new(d, &caps)).collect();
        let mut ns = Namespaces::default();
        ns.observe_documents("d.c", &parsed);
        let state = ns.get("d.c").unwrap();
        let set = state.shapes()[0];
        assert_eq!(set.count, 20);
        let values = |field: &str| {
            set.values
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(values("_id"), None);
        let first_eight: Vec<u64> = (0..8).map(|i| value_hash(RawBsonRef::Int32(i))).collect();
        assert_eq!(values("n"), Some(first_eight));
        let flags = [true, false].map(|b| value_hash(RawBsonRef::Boolean(b)));
        assert_eq!(values("active"), Some(flags.to_vec()));
        assert_ne!(flags[0], flags[1]);
        assert_ne!(flags[0], value_hash(RawBsonRef::Int32(1)));
        assert_eq!(values("kind").map(|v| v.len()), Some(2));
    }

    /// A set's fields are found by the order they were last seen in; a
    /// document of the same fields in another order, or naming one twice,
    /// records the same as a search by name would.
    #[test]
    fn a_field_set_reads_the_same_whatever_the_order_of_its_fields() {
        let caps = Caps::default();
        let oid = bson::oid::ObjectId::new();
        let raw = |d: bson::Document| bson::RawDocumentBuf::try_from(&d).unwrap();
        let docs = [
            raw(bson::doc! {"_id": 1, "owner": oid, "kind": "a", "n": 1}),
            raw(bson::doc! {"n": 2, "kind": "b", "owner": oid, "_id": 2}),
            raw(bson::doc! {"_id": 3, "owner": oid, "kind": "c", "n": 3}),
            raw(bson::doc! {"kind": "d", "_id": 4, "n": 4, "owner": oid}),
        ];
        let mut ns = Namespaces::default();
        for d in &docs {
            ns.observe_documents("d.c", &[Doc::new(d, &caps)]);
        }
        // A key named twice (BSON allows it): its values join one entry.
        let mut twice = bson::RawDocumentBuf::new();
        twice.append(bson::raw::cstr!("_id"), 5);
        twice.append(bson::raw::cstr!("owner"), oid);
        twice.append(bson::raw::cstr!("kind"), "e");
        twice.append(bson::raw::cstr!("kind"), "f");
        let mut other = bson::RawDocumentBuf::new();
        other.append(bson::raw::cstr!("kind"), "g");
        other.append(bson::raw::cstr!("kind"), "h");
        other.append(bson::raw::cstr!("owner"), oid);
        other.append(bson::raw::cstr!("_id"), 6);
        for d in [&twice, &other] {
            ns.observe_documents("d.c", &[Doc::new(d, &caps)]);
        }
        let state = ns.get("d.c").unwrap();
        let sets = state.shapes();
        assert_eq!(sets.len(), 2);
        let four = sets.iter().find(|s| s.count == 4).unwrap();
        assert_eq!(four.count, 4);
        assert_eq!(four.fields, ["_id", "kind", "n", "owner"]);
        // `owner` (index 3) always an ObjectId; `_id`, `kind`, `n` not.
        assert_eq!(four.id_typed, 1 << 3);
        let values = |set: &FieldSet, field: &str| {
            let v = set.values.iter().filter(|(f, _)| f == field);
            v.map(|(_, h)| h.len()).collect::<Vec<_>>()
        };
        assert_eq!(values(four, "kind"), [4]);
        assert_eq!(values(four, "n"), [4]);
        assert_eq!(values(four, "_id"), Vec::<usize>::new());
        let dup = sets.iter().find(|s| s.count == 2).unwrap();
        assert_eq!(dup.fields, ["_id", "kind", "kind", "owner"]);
        assert_eq!(dup.id_typed, 1 << 3);
        assert_eq!(values(dup, "kind"), [4]);
    }
}
