//! The top-level fields of a command body that wirelint reads on most
//! requests, indexed once per command so that each accessor is an index
//! rather than a search by name; and the one reading of a BSON number the
//! command model uses.

use bson::RawBsonRef;

/// The top-level fields read on most requests (by the shape, the origin
/// cache and the rules), indexed once per command by [`Command::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum IndexedField {
    Filter,
    Query,
    Projection,
    Fields,
    Sort,
    Limit,
    Skip,
    Comment,
    Hint,
    Lsid,
    Pipeline,
    Collection,
    Ordered,
}

impl IndexedField {
    pub(super) const COUNT: usize = 13;

    pub(super) fn of(key: &[u8]) -> Option<IndexedField> {
        Some(match key {
            b"filter" => IndexedField::Filter,
            b"query" => IndexedField::Query,
            b"projection" => IndexedField::Projection,
            b"fields" => IndexedField::Fields,
            b"sort" => IndexedField::Sort,
            b"limit" => IndexedField::Limit,
            b"skip" => IndexedField::Skip,
            b"comment" => IndexedField::Comment,
            b"hint" => IndexedField::Hint,
            b"lsid" => IndexedField::Lsid,
            b"pipeline" => IndexedField::Pipeline,
            b"collection" => IndexedField::Collection,
            b"ordered" => IndexedField::Ordered,
            _ => return None,
        })
    }

    pub(super) fn key(self) -> &'static str {
        match self {
            IndexedField::Filter => "filter",
            IndexedField::Query => "query",
            IndexedField::Projection => "projection",
            IndexedField::Fields => "fields",
            IndexedField::Sort => "sort",
            IndexedField::Limit => "limit",
            IndexedField::Skip => "skip",
            IndexedField::Comment => "comment",
            IndexedField::Hint => "hint",
            IndexedField::Lsid => "lsid",
            IndexedField::Pipeline => "pipeline",
            IndexedField::Collection => "collection",
            IndexedField::Ordered => "ordered",
        }
    }
}

/// Any BSON number as i64.
pub fn number(v: RawBsonRef<'_>) -> Option<i64> {
    match v {
        RawBsonRef::Int32(i) => Some(i as i64),
        RawBsonRef::Int64(i) => Some(i),
        RawBsonRef::Double(d) if d.is_finite() => Some(d as i64),
        _ => None,
    }
}
