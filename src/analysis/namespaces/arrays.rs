//! What a namespace's arrays do: their lengths per field path (elements
//! folded as `arr.$`), their growth in one document (known by its `_id`,
//! across reads and writes), and the paths the application bounds by
//! design. An array that keeps growing is what the array rules look for;
//! the per-document lengths are what tell growth from a long array.

use super::doc_walk::{ArrayInDoc, Doc};
use super::sizes::SizeHist;
use super::value_hash::value_hash;
use super::NamespaceState;
use crate::analysis::budget::short_key;
use crate::analysis::command::{fold_path, is_sliced_element};
use crate::analysis::shape::fnv1a;
use crate::wire::bson_walk;
use bson::{RawBsonRef, RawDocument};
use smallvec::SmallVec;

/// Array lengths seen at one field path.
#[derive(Debug, Default)]
pub struct ArrayStats {
    pub lengths: SizeHist,
    /// Times the same document's array was seen longer than before.
    pub growth_events: u64,
    /// The largest increase seen between two observations of one document.
    pub max_growth: u64,
    /// Observations of a document seen before that showed no growth, since
    /// the last one that did: a set that stopped growing (every value of
    /// its vocabulary added) keeps counting up.
    pub since_growth: u64,
}

impl ArrayStats {
    /// One more observation of a document whose length at `path` was
    /// known: `before` → `len`.
    fn observed(&mut self, before: u32, len: u32) {
        if len > before {
            self.growth_events += 1;
            self.max_growth = self.max_growth.max((len - before) as u64);
            self.since_growth = 0;
        } else {
            self.since_growth += 1;
        }
    }
}

/// Arrays remembered per document for growth detection.
pub(super) const ARRAYS_PER_DOCUMENT: usize = 16;

/// A document's arrays' lengths when last seen, by a hash of their paths:
/// inline up to two, so that remembering a document allocates nothing for
/// most documents.
pub(super) type LastLengths = SmallVec<[(u64, u32); 2]>;

/// A document's arrays: each one's length recorded at its path, and (by
/// the document's `_id`) its growth since the document was last seen.
#[inline]
pub(super) fn record_arrays(state: &mut NamespaceState, doc: &Doc<'_>, id: Option<u64>) {
    // Growth: what this document's arrays were last time, swapped for
    // what they are now (one lookup of the document).
    let previous = match id {
        Some(id) if !doc.arrays.is_empty() => {
            let now: LastLengths = doc
                .arrays
                .iter()
                .filter(|a| !a.path.contains('$'))
                .take(ARRAYS_PER_DOCUMENT)
                .map(|a| (fnv1a(a.path.as_bytes()), a.len))
                .collect();
            let last = state.documents.get_or_insert_with(&id, LastLengths::new);
            Some(std::mem::replace(last, now))
        }
        Some(id) => {
            // Nothing to compare next time: no entry (most documents; in
            // most namespaces the table stays empty and is not even hashed
            // into).
            if !state.documents.is_empty() {
                state.documents.remove(&id);
            }
            None
        }
        None => None,
    };
    // Each array's lengths, and its growth since the document was last
    // seen (a document seen for the first time has no previous lengths).
    for ArrayInDoc { path, len, .. } in &doc.arrays {
        let stats = state.arrays.get_or_insert_with(path, ArrayStats::default);
        stats.lengths.record(*len as u64);
        let Some(previous) = previous.as_ref().filter(|p| !p.is_empty()) else {
            continue;
        };
        let h = fnv1a(path.as_bytes());
        if let Some((_, before)) = previous.iter().find(|(p, _)| *p == h) {
            stats.observed(*before, *len);
        }
    }
}

/// The hashed `_id` a filter pins by equality (`{_id: v}`, `{_id: {$eq: v}}`):
/// the one document an update writes.
pub(super) fn pinned_id(filter: &RawDocument) -> Option<u64> {
    match filter.get("_id").ok()?? {
        RawBsonRef::Document(d) => match d.iter().next()?.ok()? {
            (op, v) if op.as_str() == "$eq" && d.iter().count() == 1 => match v {
                RawBsonRef::Document(_) | RawBsonRef::Array(_) => None,
                v => Some(value_hash(v)),
            },
            (op, _) if op.as_str().starts_with('$') => None,
            _ => Some(value_hash(RawBsonRef::Document(d))),
        },
        RawBsonRef::Array(_) | RawBsonRef::RegularExpression(_) => None,
        v => Some(value_hash(v)),
    }
}

/// Array lengths one update of one document makes known: a whole-array
/// `$set` gives the length; a `$push` without `$slice` adds its elements
/// to a length already known. (`$addToSet` may add nothing: only reads
/// tell.) Each is recorded as an observation of that document's array.
pub(super) fn record_written_lengths(state: &mut NamespaceState, id: u64, update: &RawDocument) {
    for (op, fields) in bson_walk::pairs(update.as_bytes()).map_while(Result::ok) {
        let bson_walk::Value::Document(fields) = fields else {
            continue;
        };
        for e in bson_walk::elements(fields).map_while(Result::ok) {
            let Some(path) = e.key_str() else {
                continue;
            };
            let path = fold_path(path);
            if path.contains('$') {
                continue;
            }
            let count = |array: &[u8]| bson_walk::elements(array).map_while(Result::ok).count();
            let len =
                match (op, e.element_type) {
                    ("$set", 0x04) => count(e.value),
                    ("$push", _) if !is_sliced_element(&e) => {
                        // `{$each: [...]}` adds its elements; anything else, one.
                        let each = (e.element_type == 0x03)
                            .then(|| bson_walk::field(e.value, b"$each"))
                            .flatten();
                        let added = match each {
                            Some(each) if each.element_type == 0x04 => count(each.value),
                            _ => 1,
                        };
                        let h = fnv1a(path.as_bytes());
                        let Some(before) = state.documents.map_get_mut(&id).and_then(|arrays| {
                            arrays.iter().find(|(p, _)| *p == h).map(|(_, l)| *l)
                        }) else {
                            continue;
                        };
                        before as usize + added
                    }
                    _ => continue,
                };
            record_length(state, id, &path, len.min(u32::MAX as usize) as u32);
        }
    }
}

/// What the server said of an `$addToSet` on the one document pinned by
/// `id`: it modified the document (`grew`), so each set the update adds to
/// grew, by one at least; or it did not, so none did. A known length is
/// carried forward; an unknown one still counts the growth, or the lack
/// of it (what tells a set still growing from one that has settled).
pub(super) fn record_set_growth(
    state: &mut NamespaceState,
    id: u64,
    update: &RawDocument,
    grew: bool,
) {
    let Some(fields) = bson_walk::field(update.as_bytes(), b"$addToSet") else {
        return;
    };
    if fields.element_type != 0x03 {
        return;
    }
    for e in bson_walk::elements(fields.value).map_while(Result::ok) {
        let Some(path) = e.key_str() else {
            continue;
        };
        let path = fold_path(path);
        if path.contains('$') || is_sliced_element(&e) {
            continue;
        }
        let h = fnv1a(path.as_bytes());
        let before = state
            .documents
            .map_get_mut(&id)
            .and_then(|arrays| arrays.iter().find(|(p, _)| *p == h).map(|(_, l)| *l));
        match before {
            Some(before) => {
                let len = if grew {
                    before.saturating_add(1)
                } else {
                    before
                };
                record_length(state, id, &path, len);
            }
            None => {
                let stats = state.arrays.get_or_insert_with(&*path, ArrayStats::default);
                if grew {
                    stats.growth_events += 1;
                    stats.max_growth = stats.max_growth.max(1);
                    stats.since_growth = 0;
                } else {
                    stats.since_growth += 1;
                }
            }
        }
    }
}

/// One document's array at `path` is `len` long: recorded in the path's
/// lengths, and as growth when it is longer than last seen.
fn record_length(state: &mut NamespaceState, id: u64, path: &str, len: u32) {
    let h = fnv1a(path.as_bytes());
    let arrays = state.documents.get_or_insert_with(&id, LastLengths::new);
    let before = match arrays.iter_mut().find(|(p, _)| *p == h) {
        Some((_, l)) => Some(std::mem::replace(l, len)),
        None => {
            if arrays.len() < ARRAYS_PER_DOCUMENT {
                arrays.push((h, len));
            }
            None
        }
    };
    let stats = state.arrays.get_or_insert_with(path, ArrayStats::default);
    stats.lengths.record(len as u64);
    if let Some(before) = before {
        stats.observed(before, len);
    }
}

/// The array paths an update bounds by design: a `$push` or `$addToSet`
/// with `$each` and `$slice`, or any of them when the update is bucketed
/// (a counter bound in the filter).
pub(super) fn record_bounded_paths(
    state: &mut NamespaceState,
    update: &RawDocument,
    bucketed: bool,
) {
    for (op, fields) in bson_walk::pairs(update.as_bytes()).map_while(Result::ok) {
        if !op.starts_with('$') {
            return;
        }
        let bson_walk::Value::Document(fields) = fields else {
            continue;
        };
        if !matches!(op, "$push" | "$addToSet") {
            continue;
        }
        for e in bson_walk::elements(fields).map_while(Result::ok) {
            let Some(path) = e.key_str() else {
                continue;
            };
            if bucketed || is_sliced_element(&e) {
                let folded = fold_path(path);
                state
                    .bounded_paths
                    .get_or_insert_with(&*short_key(&folded), || ());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::analysis::namespaces::{Caps, Doc, Namespaces};
    use bson::rawdoc;

    /// `followers: []` made by the insert, then one `$addToSet` per
    /// follower: each that the server says modified the document grew the
    /// set by one; one that modified nothing is a sign it has settled. A
    /// set the insert did not make still counts its growth.
    #[test]
    fn add_to_set_grows_by_what_the_server_modified() {
        let mut ns = Namespaces::default();
        let caps = Caps::default();
        ns.observe_document(
            "app.users",
            &Doc::new(&rawdoc! {"_id": 1, "followers": []}, &caps),
        );
        let filter = rawdoc! {"_id": 1};
        for i in 0..30 {
            let update = rawdoc! {"$addToSet": {"followers": i}};
            ns.observe_update("app.users", Some(&filter), &update);
            ns.observe_set_growth("app.users", Some(&filter), &update, true);
        }
        let stats = |ns: &Namespaces, path: &str| {
            let a = ns
                .get("app.users")
                .unwrap()
                .arrays
                .get(&path.to_string())
                .unwrap();
            (a.lengths.max, a.growth_events, a.since_growth)
        };
        assert_eq!(stats(&ns, "followers"), (30, 30, 0));
        let again = rawdoc! {"$addToSet": {"followers": 3}};
        ns.observe_set_growth("app.users", Some(&filter), &again, false);
        assert_eq!(stats(&ns, "followers"), (30, 30, 1));
        // No insert seen: growth counted, no length made up.
        let other = rawdoc! {"$addToSet": {"likes": "x"}};
        ns.observe_set_growth("app.users", Some(&rawdoc! {"_id": 2}), &other, true);
        assert_eq!(stats(&ns, "likes"), (0, 1, 0));
    }

    #[test]
    fn writes_that_make_a_length_known_count_as_observations() {
        let mut ns = Namespaces::default();
        let caps = Caps::default();
        let stats = |ns: &Namespaces, path: &str| {
            let a = ns
                .get("app.posts")
                .unwrap()
                .arrays
                .get(&path.to_string())
                .unwrap();
            (a.lengths.max, a.growth_events)
        };
        ns.observe_document(
            "app.posts",
            &Doc::new(&rawdoc! {"_id": 7, "comments": [], "tags": ["a"]}, &caps),
        );
        // $push onto a length known from the insert: 0 → 1 → 3.
        let filter = rawdoc! {"_id": 7};
        ns.observe_update(
            "app.posts",
            Some(&filter),
            &rawdoc! {"$push": {"comments": {"t": 1}}},
        );
        ns.observe_update(
            "app.posts",
            Some(&filter),
            &rawdoc! {"$push": {"comments": {"$each": [{"t": 2}, {"t": 3}]}}},
        );
        assert_eq!(stats(&ns, "comments"), (3, 2));
        // Another document's push, or one with $slice, or $addToSet, says
        // nothing about this one's length.
        ns.observe_update(
            "app.posts",
            Some(&rawdoc! {"_id": 8}),
            &rawdoc! {"$push": {"comments": 1}},
        );
        ns.observe_update(
            "app.posts",
            Some(&filter),
            &rawdoc! {"$push": {"comments": {"$each": [1], "$slice": -2}}, "$addToSet": {"tags": "b"}},
        );
        assert_eq!(stats(&ns, "comments"), (3, 2));
        assert_eq!(stats(&ns, "tags"), (1, 0));
        // A whole-array $set (what an ODM's save sends) gives the length.
        ns.observe_update(
            "app.posts",
            Some(&rawdoc! {"_id": {"$eq": 7}}),
            &rawdoc! {"$set": {"tags": ["a", "b", "c"]}},
        );
        assert_eq!(stats(&ns, "tags"), (3, 1));
        // A replacement without _id is the filter's document.
        ns.observe_replacement(
            "app.posts",
            Some(&filter),
            &Doc::new(&rawdoc! {"comments": [1, 2, 3, 4, 5], "tags": []}, &caps),
        );
        assert_eq!(stats(&ns, "comments"), (5, 3));
        // Reads that show no growth count towards "stopped growing"; the
        // next growth starts the count again.
        let since = |ns: &Namespaces| {
            ns.get("app.posts")
                .unwrap()
                .arrays
                .get(&"comments".to_string())
                .unwrap()
                .since_growth
        };
        assert_eq!(since(&ns), 0);
        for _ in 0..3 {
            ns.observe_document(
                "app.posts",
                &Doc::new(&rawdoc! {"_id": 7, "comments": [1, 2, 3, 4, 5]}, &caps),
            );
        }
        assert_eq!(since(&ns), 3);
        ns.observe_document(
            "app.posts",
            &Doc::new(&rawdoc! {"_id": 7, "comments": [1, 2, 3, 4, 5, 6]}, &caps),
        );
        assert_eq!(since(&ns), 0);
    }

    #[test]
    fn arrays_are_measured_per_folded_path_and_growth_is_seen() {
        let mut ns = Namespaces::default();
        let doc = |n: i32| {
            let comments: Vec<bson::Bson> = (0..n)
                .map(|i| bson::bson!({"t": i, "likes": [1, 2]}))
                .collect();
            bson::RawDocumentBuf::try_from(
                &bson::doc! {"_id": 1, "comments": comments, "meta": {"tags": ["a"]}},
            )
            .unwrap()
        };
        let caps = Caps::default();
        ns.observe_document("blog.posts", &Doc::new(&doc(3), &caps));
        ns.observe_document("blog.posts", &Doc::new(&doc(5), &caps));
        let state = ns.get("blog.posts").unwrap();
        let comments = state.arrays.get(&"comments".to_string()).unwrap();
        assert_eq!(comments.lengths.max, 5);
        assert_eq!(comments.growth_events, 1);
        assert_eq!(comments.max_growth, 2);
        assert!(state.arrays.get(&"comments.$.likes".to_string()).is_some());
        assert!(state.arrays.get(&"meta.tags".to_string()).is_some());
        assert_eq!(state.doc_sizes.count, 2);
        ns.observe_update(
            "blog.posts",
            None,
            &rawdoc! {"$push": {"comments": {"t": 1}}, "$inc": {"n": 1}},
        );
        assert!(ns.get("blog.posts").unwrap().bounded_paths.is_empty());
        ns.observe_update(
            "blog.posts",
            None,
            &rawdoc! {"$push": {"recent": {"$each": [1], "$slice": -10}}},
        );
        ns.observe_update(
            "blog.buckets",
            Some(&rawdoc! {"postId": 1, "count": {"$lt": 100}}),
            &rawdoc! {"$push": {"comments": 1}, "$inc": {"count": 1}},
        );
        assert!(ns
            .get("blog.posts")
            .unwrap()
            .bounded_paths
            .get(&"recent".to_string())
            .is_some());
        assert!(ns
            .get("blog.buckets")
            .unwrap()
            .bounded_paths
            .get(&"comments".to_string())
            .is_some());
    }
}
