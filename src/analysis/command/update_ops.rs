//! What update operators mean to the analysis: the one owner of these
//! semantics, so that the namespace state and the rules that judge array
//! growth agree on them.
//!
//! - An array a `$push` grows stays bounded when the push carries
//!   `{$each: […], $slice: N}` ([`is_sliced_element`]).
//! - The bucket pattern bounds it through the filter instead: the update
//!   applies only while a counter it increments is under a limit, or while
//!   a given array index does not exist yet ([`is_bucketed`]).
//! - Paths name array positions in several ways (`items.3`, `items.$`,
//!   `items.$[]`, `items.$[x]`); state is kept per field, so all of them
//!   fold to one `$` ([`fold_path`]).

use crate::wire::bson_walk::{elements, field, Element, Value};
use bson::RawDocument;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
