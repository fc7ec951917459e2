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
    /// Of those, the times an array that was not empty grew: longer again,
    /// not filled for the first time (a dataset created empty, then saved
    /// once with its resources).
    pub regrowth_events: u64,
    /// The longest a document's array was seen when it had grown: what
    /// the documents seen growing reached (an array inserted long and
    /// never grown is not among them).
    pub grown_to: u64,
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
            self.regrowth_events += u64::from(before > 0);
            self.grown_to = self.grown_to.max(len as u64);
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

/// The most ids of one `_id: {$in: [...]}` filter whose documents an
/// update is followed into (a fan-out to more is not followed: each id is
/// a lookup in the namespace's document table).
pub(super) const IDS_PER_UPDATE: usize = 256;

/// The hashed `_id`s a filter lists with `{_id: {$in: [a, b, …]}}` (and
/// nothing else): the documents a multi-document update writes, when
/// the server says it modified as many. None past `IDS_PER_UPDATE`.
pub(super) fn listed_ids(filter: &RawDocument) -> Option<SmallVec<[u64; 8]>> {
    let mut fields = bson_walk::pairs(filter.as_bytes());
    let (key, value) = fields.next()?.ok()?;
    if key != "_id" || fields.next().is_some() {
        return None;
    }
    let bson_walk::Value::Document(ops) = value else {
        return None;
    };
    let mut ops = bson_walk::elements(ops);
    let op = ops.next()?.ok()?;
    if op.key != b"$in" || op.element_type != 0x04 || ops.next().is_some() {
        return None;
    }
    let list = RawDocument::from_bytes(op.value).ok()?;
    let mut ids = SmallVec::new();
    for v in list.iter() {
        let (_, v) = v.ok()?;
        if matches!(
            v,
            RawBsonRef::Document(_) | RawBsonRef::Array(_) | RawBsonRef::RegularExpression(_)
        ) || ids.len() == IDS_PER_UPDATE
        {
            return None;
        }
        ids.push(value_hash(v));
    }
    Some(ids)
}

/// Whether an update may make an array's length known or grown: a `$push`
/// or `$addToSet` without `$slice`, or a `$set` of a whole array. One walk
/// of the update, before it is followed into many documents.
pub(super) fn changes_lengths(update: &RawDocument) -> bool {
    bson_walk::pairs(update.as_bytes())
        .map_while(Result::ok)
        .any(|(op, fields)| {
            let bson_walk::Value::Document(fields) = fields else {
                return false;
            };
            bson_walk::elements(fields)
                .map_while(Result::ok)
                .any(|e| match op {
                    "$set" => e.element_type == 0x04,
                    "$push" | "$addToSet" => !is_sliced_element(&e),
                    _ => false,
                })
        })
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
    use super::ArrayStats;
    use crate::analysis::namespaces::{Caps, Doc, Namespaces};
    use bson::rawdoc;

    /// What `namespace` knows of its arrays at `path`.
    fn array<'a>(ns: &'a Namespaces, namespace: &str, path: &str) -> &'a ArrayStats {
        ns.get(namespace)
            .unwrap()
            .arrays
            .get(&path.to_string())
            .unwrap()
    }

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
            ns.observe_update("app.users", Some(&filter), &update, Some(1));
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
        ns.observe_update("app.users", Some(&filter), &again, Some(0));
        assert_eq!(stats(&ns, "followers"), (30, 30, 1));
        // No insert seen: growth counted, no length made up.
        let other = rawdoc! {"$addToSet": {"likes": "x"}};
        ns.observe_update("app.users", Some(&rawdoc! {"_id": 2}), &other, Some(1));
        assert_eq!(stats(&ns, "likes"), (0, 1, 0));
    }

    /// A notification pushed to every subscriber in one update
    /// (`{_id: {$in: ids}}`): when the server modified as many documents
    /// as the filter lists, each one's array grew from the length its
    /// insert gave. Fewer modified (or a duplicate id): which ones grew is
    /// not known, and nothing is recorded.
    #[test]
    fn a_fan_out_by_id_grows_every_listed_document() {
        let mut ns = Namespaces::default();
        let caps = Caps::default();
        for id in 0..20 {
            ns.observe_document(
                "app.users",
                &Doc::new(&rawdoc! {"_id": id, "notifications": []}, &caps),
            );
        }
        let stats = |ns: &Namespaces| {
            let a = array(ns, "app.users", "notifications");
            (a.lengths.max, a.growth_events)
        };
        let push = rawdoc! {"$push": {"notifications": {"kind": "reply"}}};
        let subscribers = rawdoc! {"_id": {"$in": [1, 2, 3, 4, 5]}};
        for _ in 0..3 {
            ns.observe_update("app.users", Some(&subscribers), &push, Some(5));
        }
        assert_eq!(stats(&ns), (3, 15));
        // Four of five modified: not followed. No nModified: not either.
        ns.observe_update("app.users", Some(&subscribers), &push, Some(4));
        ns.observe_update("app.users", Some(&subscribers), &push, None);
        assert_eq!(stats(&ns), (3, 15));
        // $addToSet through the same fan-out: every set grew by one.
        let follow = rawdoc! {"$addToSet": {"notifications": "x"}};
        ns.observe_update("app.users", Some(&subscribers), &follow, Some(5));
        assert_eq!(stats(&ns), (4, 20));
        // An update that bounds or does not touch arrays is not followed.
        assert!(!super::changes_lengths(
            &rawdoc! {"$push": {"n": {"$each": [1], "$slice": -5}}, "$inc": {"c": 1}}
        ));
        assert!(super::changes_lengths(
            &rawdoc! {"$set": {"a": 1, "tags": ["x"]}}
        ));
        // Not a plain list of ids: another key beside it, a nested value.
        assert!(super::listed_ids(&rawdoc! {"_id": {"$in": [1]}, "a": 1}).is_none());
        assert!(super::listed_ids(&rawdoc! {"_id": {"$in": [{"a": 1}]}}).is_none());
        assert!(super::listed_ids(&rawdoc! {"_id": {"$in": [1], "$ne": 2}}).is_none());
        let mut many = bson::RawArrayBuf::new();
        for i in 0..=super::IDS_PER_UPDATE as i32 {
            many.push(i);
        }
        assert!(super::listed_ids(&rawdoc! {"_id": {"$in": many}}).is_none());
        assert_eq!(
            super::listed_ids(&subscribers).map(|ids| ids.len()),
            Some(5)
        );
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
            None,
        );
        ns.observe_update(
            "app.posts",
            Some(&filter),
            &rawdoc! {"$push": {"comments": {"$each": [{"t": 2}, {"t": 3}]}}},
            None,
        );
        assert_eq!(stats(&ns, "comments"), (3, 2));
        // Another document's push, or one with $slice, or $addToSet, says
        // nothing about this one's length.
        ns.observe_update(
            "app.posts",
            Some(&rawdoc! {"_id": 8}),
            &rawdoc! {"$push": {"comments": 1}},
            None,
        );
        ns.observe_update(
            "app.posts",
            Some(&filter),
            &rawdoc! {"$push": {"comments": {"$each": [1], "$slice": -2}}, "$addToSet": {"tags": "b"}},
            None,
        );
        assert_eq!(stats(&ns, "comments"), (3, 2));
        assert_eq!(stats(&ns, "tags"), (1, 0));
        // A whole-array $set (what an ODM's save sends) gives the length.
        ns.observe_update(
            "app.posts",
            Some(&rawdoc! {"_id": {"$eq": 7}}),
            &rawdoc! {"$set": {"tags": ["a", "b", "c"]}},
            None,
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
        let since = |ns: &Namespaces| array(ns, "app.posts", "comments").since_growth;
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
    fn an_array_filled_once_has_not_grown_again() {
        let mut ns = Namespaces::default();
        let caps = Caps::default();
        let stats = |ns: &Namespaces| {
            let a = array(ns, "d.datasets", "resources");
            (a.growth_events, a.regrowth_events)
        };
        ns.observe_document(
            "d.datasets",
            &Doc::new(&rawdoc! {"_id": 1, "resources": []}, &caps),
        );
        ns.observe_document(
            "d.datasets",
            &Doc::new(&rawdoc! {"_id": 1, "resources": [1, 2, 3]}, &caps),
        );
        assert_eq!(stats(&ns), (1, 0), "filled once");
        ns.observe_document(
            "d.datasets",
            &Doc::new(&rawdoc! {"_id": 1, "resources": [1, 2, 3, 4]}, &caps),
        );
        assert_eq!(stats(&ns), (2, 1), "then longer again");
        let long = bson::RawDocumentBuf::try_from(
            &bson::doc! {"_id": 2, "resources": (0..60).collect::<Vec<i32>>()},
        )
        .unwrap();
        ns.observe_document("d.datasets", &Doc::new(&long, &caps));
        let a = array(&ns, "d.datasets", "resources");
        assert_eq!(
            (a.lengths.max, a.grown_to),
            (60, 4),
            "inserted long, never grown"
        );
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
            None,
        );
        assert!(ns.get("blog.posts").unwrap().bounded_paths.is_empty());
        ns.observe_update(
            "blog.posts",
            None,
            &rawdoc! {"$push": {"recent": {"$each": [1], "$slice": -10}}},
            None,
        );
        ns.observe_update(
            "blog.buckets",
            Some(&rawdoc! {"postId": 1, "count": {"$lt": 100}}),
            &rawdoc! {"$push": {"comments": 1}, "$inc": {"count": 1}},
            None,
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
