//! Where an operation belongs, as the analysis remembers it while
//! something of it lives on (its pending reply, its cursor, the N+1 list it
//! read): its shape's facts, shared, and the request it joined. Owned here,
//! below the knowledge store, the follow-ups and the requests, which all
//! carry it.

use super::partition::Partitioning;
use super::patterns::NamedBy;
use super::shape::Shape;
use super::suite::TestRef;
use std::sync::Arc;

/// What is remembered of a data request while something of it lives on
/// (its pending reply, its cursor and so its getMores, the N+1 list it
/// read): the facts its shape decided, shared (a copy is one reference
/// count, not three: a pending request, a cursor and an N+1 list each hold
/// one), and how this operation met the partition key.
#[derive(Clone, Debug)]
pub struct RequestOrigin {
    pub of_shape: Arc<ShapeFacts>,
    pub partitioning: Option<Partitioning>,
    /// The request it joined (see `analysis::requests`), once the server
    /// accepted it: its id, and its name and how it is named when it is
    /// not this operation's own (a follow-up of another root).
    pub request: Option<u64>,
    pub joined: Option<(Arc<str>, NamedBy)>,
    /// The shape of the result it followed, when it followed one.
    pub followed: Option<u64>,
    /// The test it came from, when a runner said (see `suite`).
    pub test: Option<TestRef>,
    /// A read's filter's values, hashed together (0 for none): a read of
    /// one shape with the same values asks for the same thing again.
    pub values: u64,
    /// An insert's, under a platform priced in request units: what the
    /// documents the server stored come to, added up as they were walked
    /// (what its price needs).
    pub inserted: Option<super::request_units::Inserted>,
}

/// The facts a request's shape (and comment) decides, the same for every
/// request of it: kept once per shape and shared by its requests'
/// [`RequestOrigin`]s.
#[derive(Debug)]
pub struct ShapeFacts {
    pub pattern: Arc<str>,
    /// Whether the pattern is the application's name (`comment`) or the
    /// shape.
    pub named_by: NamedBy,
    pub shape: Shape,
    pub namespace: Arc<str>,
    /// Whether its replies (and its cursor's getMores) carry whole stored
    /// documents: a find or findAndModify without projection, a pipeline
    /// that only filters, sorts and cuts.
    pub whole: bool,
    /// Whether it is a list read, which an N+1 follows (see
    /// `follow_ups::is_list_read`), not a detail read.
    pub list: bool,
    /// Whether it is a find of one document by its `_id` (an equality;
    /// decided by the shape, as `list` is).
    pub by_id: bool,
    /// What its request-unit price takes from the shape, worked out the
    /// first time an operation of it is priced.
    pub priced: std::sync::OnceLock<super::request_units::ShapePrice>,
}

impl RequestOrigin {
    pub fn new(of_shape: ShapeFacts) -> RequestOrigin {
        RequestOrigin {
            of_shape: Arc::new(of_shape),
            partitioning: None,
            request: None,
            joined: None,
            followed: None,
            test: None,
            values: 0,
            inserted: None,
        }
    }

    /// The name of the request it belongs to: its root's pattern.
    pub fn request_pattern(&self) -> &Arc<str> {
        self.joined
            .as_ref()
            .map_or(&self.of_shape.pattern, |j| &j.0)
    }

    /// How the request it belongs to is named.
    pub fn request_named_by(&self) -> NamedBy {
        self.joined.as_ref().map_or(self.of_shape.named_by, |j| j.1)
    }
}

impl std::ops::Deref for RequestOrigin {
    type Target = ShapeFacts;
    fn deref(&self) -> &ShapeFacts {
        &self.of_shape
    }
}
