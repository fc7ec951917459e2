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
//! - Some keys are values, not names: an id, a hash or a date used as a
//!   field name (`newMessages.<groupId>`, `members.<userId>`). They fold
//!   to `<id>` ([`is_value_key`]) wherever a key is kept or shown, so one
//!   design makes one pattern and no id reaches an output.

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

/// What a key that is a value, not a name, is written as.
pub const VALUE_KEY: &str = "<id>";

/// Whether a key (one part of a path) is a value the application's data
/// put there rather than a name its code wrote: a number of 5 digits or
/// more (an id, a timestamp; shorter ones are positions, years, codes),
/// 16 hex digits or more (an ObjectId, a hash), a UUID (with a digit, as
/// all but one in millions are), a date
/// (`2024-01-31…`), or a token of 20 characters or more in which letters
/// and digits alternate at least 4 times (nanoid, Firebase and base64
/// ids). Each holds a digit: keys under 5 bytes, and keys without a
/// digit (nearly every name), are names, and are told at once.
pub fn is_value_key(k: &[u8]) -> bool {
    let n = k.len();
    if n < 5 || !k.iter().any(u8::is_ascii_digit) {
        return false;
    }
    let digit = |b: &u8| b.is_ascii_digit();
    let digits = |s: &[u8]| s.iter().all(digit);
    if digits(k) {
        return true;
    }
    if n >= 16 && k.iter().all(u8::is_ascii_hexdigit) {
        return true;
    }
    if n == 36
        && k.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
    {
        return true;
    }
    if n >= 10
        && k[4] == b'-'
        && k[7] == b'-'
        && digits(&k[..4])
        && digits(&k[5..7])
        && digits(&k[8..10])
    {
        return true;
    }
    n >= 20
        && k.iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        && k.windows(2)
            .filter(|w| digit(&w[0]) != digit(&w[1]))
            .count()
            >= 4
}

/// An update path in the folded form state uses: positional `$`, `$[]`
/// and `$[name]` all become `$`, and array indexes too; keys that are
/// values become [`VALUE_KEY`].
pub fn fold_path(path: &str) -> std::borrow::Cow<'_, str> {
    let positional = |part: &str| part.starts_with('$') || part.bytes().all(|c| c.is_ascii_digit());
    let value = |part: &str| is_value_key(part.as_bytes());
    if !path.split('.').any(|p| positional(p) || value(p)) {
        // Most paths: nothing to fold, nothing allocated.
        return std::borrow::Cow::Borrowed(path);
    }
    let parts: Vec<&str> = path
        .split('.')
        .map(|part| {
            if positional(part) {
                "$"
            } else if value(part) {
                VALUE_KEY
            } else {
                part
            }
        })
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
        assert_eq!(
            fold_path("newMessages.5f1d7a3b9c2e4d6f8a0b1c2d"),
            "newMessages.<id>"
        );
        assert_eq!(
            fold_path("members.3fa85f64-5717-4562-b3fc-2c963f66afa6.score"),
            "members.<id>.score"
        );
    }

    /// Ids, hashes, dates and generated tokens are values; the names code
    /// writes, short positions and codes, and words with a number are not.
    #[test]
    fn keys_that_are_values() {
        for k in [
            "5f1d7a3b9c2e4d6f8a0b1c2d",
            "3fa85f64-5717-4562-b3fc-2c963f66afa6",
            "d41d8cd98f00b204e9800998ecf8427e",
            "1700000000",
            "20240131",
            "2024-01-31",
            "2024-01-31T10:00",
            "V1StGXR8_Z5jdHi6B-myT",
            "a1B2c3D4e5F6g7H8i9J0kL",
        ] {
            assert!(is_value_key(k.as_bytes()), "{k}");
        }
        for k in [
            "name",
            "createdAt",
            "comments",
            "3",
            "2024",
            "v2",
            "deadbeef",
            "address_line_2",
            "lastModifiedTimestamp2020",
            "utf8mb4_unicode_ci",
            "x-request-id",
            "_id",
            "$push",
        ] {
            assert!(!is_value_key(k.as_bytes()), "{k}");
        }
    }
}
