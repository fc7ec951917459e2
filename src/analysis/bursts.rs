//! Bursts: one query shape sent several times at once, differing only in
//! a constant — a dashboard's `Promise.all` of six `countDocuments({status})`,
//! one per status. Each of them follows nothing (no value ties them
//! together), yet they are one question that one query answers (an `$in`,
//! or one `$group` by the field).
//!
//! At once means on the wire, not on a clock: a group is the reads of one
//! shape sent before the first of them was answered, across the pool's
//! connections. A group is complete once each member is answered (or when
//! newer groups push it out); it is a burst of the application's own when
//! it has at least [`MIN_MEMBERS`] members and none of them followed a
//! result (per-row lookups sent in parallel are WL401's). Whether the same
//! burst recurs — the same constants, call after call — is counted per
//! shape by the pattern table; concurrent requests of different users do
//! not repeat their constants. A burst's constants are those of the
//! filter's fields whose values differ between its members (the six
//! statuses), not those they share (a "since" date every member computes
//! from the clock). They are kept one per member, so that a call whose
//! reads the proxy happened to see split in two (one answered before the
//! others were read off their connections, on a busy machine) still
//! repeats the constants of the calls before it.

use smallvec::SmallVec;
use std::collections::HashMap;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Members from which a group is a burst.
pub const MIN_MEMBERS: u32 = 3;
/// Groups taking members, and groups waiting for answers, per engine, at
/// most each; past it they are forgotten (the oldest waiting one first).
const MAX_GROUPS: usize = 64;
/// Members counted per group, at most (a runaway group is no burst).
const MAX_MEMBERS: u32 = 256;
/// Members whose field values a group keeps, at most: a burst's
/// constants are told from theirs.
pub const MAX_KEPT: usize = 16;
/// Top-level filter fields told apart, at most.
pub const MAX_FIELDS: usize = 8;

/// A filter's top-level fields' values, each hashed (at most
/// [`MAX_FIELDS`]): what tells the members of a group apart.
pub type Fields = smallvec::SmallVec<[u64; MAX_FIELDS]>;

/// The hashes of `filter`'s top-level values, in order.
pub fn fields_of(filter: &[u8]) -> Fields {
    crate::wire::bson_walk::elements(filter)
        .map_while(Result::ok)
        .take(MAX_FIELDS)
        .map(|e| super::shape::fnv1a(e.value))
        .collect()
}

struct Group {
    id: u64,
    members: u32,
    answered: u32,
    /// The first member's field values, which fields any other member's
    /// differ in (bit i: field i), and the field values of the next
    /// members, up to [`MAX_KEPT`] in all (allocated only for a second
    /// member: most groups have one).
    first: Fields,
    differs: u8,
    kept: Vec<Fields>,
    /// Whether a member followed a result of an open request.
    followed: bool,
}

/// A complete group of at least [`MIN_MEMBERS`] reads that followed nothing.
#[derive(Debug, PartialEq, Eq)]
pub struct Burst {
    pub shape: u64,
    pub members: u32,
    /// Each kept member's constants (its values of the fields the members
    /// differ in, hashed together), in the order sent.
    pub constants: SmallVec<[u64; MAX_KEPT]>,
}

/// Which group of its shape a read belongs to (see [`Bursts::sent`]).
#[derive(Clone, Copy, Debug)]
pub struct Member {
    shape: u64,
    group: u64,
}

#[derive(Default)]
pub struct Bursts {
    /// Per shape, the group taking members (none of it answered yet).
    taking: FastMap<u64, Group>,
    /// Groups answered in part, waiting for their other members.
    waiting: FastMap<u64, (u64, Group)>,
    next_id: u64,
}

impl Group {
    /// Each kept member's values of the fields the members differ in,
    /// combined: the same question asked again gives the same.
    fn constants(&self) -> SmallVec<[u64; MAX_KEPT]> {
        std::iter::once(&self.first)
            .chain(&self.kept)
            .map(|fields| {
                fields
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| self.differs & (1 << i) != 0)
                    .fold(0xcbf2_9ce4_8422_2325u64, |acc, (i, h)| {
                        (acc ^ h ^ i as u64).wrapping_mul(0x100_0000_01b3)
                    })
            })
            .collect()
    }
}

impl Bursts {
    /// A read of shape `shape` whose filter's fields hash to `fields` was
    /// sent.
    pub fn sent(&mut self, shape: u64, fields: Fields) -> Member {
        if let Some(g) = self.taking.get_mut(&shape) {
            if g.members < MAX_MEMBERS {
                g.members += 1;
                for (i, h) in fields.iter().enumerate() {
                    if g.first.get(i) != Some(h) {
                        g.differs |= 1 << i;
                    }
                }
                if g.kept.len() + 1 < MAX_KEPT {
                    g.kept.push(fields);
                }
                return Member { shape, group: g.id };
            }
        }
        if self.taking.len() >= MAX_GROUPS {
            self.taking.clear();
        }
        self.next_id += 1;
        let group = Group {
            id: self.next_id,
            members: 1,
            answered: 0,
            first: fields,
            differs: 0,
            kept: Vec::new(),
            followed: false,
        };
        self.taking.insert(shape, group);
        Member {
            shape,
            group: self.next_id,
        }
    }

    /// `member` was answered (`followed`: it followed a result): the burst
    /// it completes, if it does. Its group takes no more members.
    pub fn answered(&mut self, member: Member, followed: bool) -> Option<Burst> {
        let g = match self.taking.get(&member.shape) {
            Some(g) if g.id == member.group => self.taking.remove(&member.shape)?,
            _ => self.waiting.remove(&member.group)?.1,
        };
        let mut g = g;
        g.answered += 1;
        g.followed |= followed;
        if g.answered < g.members {
            if self.waiting.len() >= MAX_GROUPS {
                if let Some(oldest) = self.waiting.keys().min().copied() {
                    self.waiting.remove(&oldest);
                }
            }
            self.waiting.insert(g.id, (member.shape, g));
            return None;
        }
        (g.members >= MIN_MEMBERS && !g.followed).then(|| Burst {
            shape: member.shape,
            members: g.members,
            constants: g.constants(),
        })
    }

    /// The most its two tables can hold, in bytes (a hash table of 64
    /// entries has at most 128 slots, each a control byte beside it; each
    /// group's kept members besides): what the engine charges for it,
    /// once.
    pub fn most_bytes() -> usize {
        2 * 2 * MAX_GROUPS * (std::mem::size_of::<(u64, (u64, Group))>() + 1)
            + 2 * MAX_GROUPS * MAX_KEPT * std::mem::size_of::<Fields>()
    }

    /// Forgets the groups (the engine was flushed).
    pub fn clear(&mut self) {
        self.taking.clear();
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Six reads of one shape sent before any answer are one group; a
    /// read sent after the first answer starts the next; a group with a
    /// member that followed a result is no burst.
    #[test]
    fn reads_sent_before_an_answer_are_one_group() {
        let mut b = Bursts::default();
        // The status differs; the date is the same in all six.
        let fields = |status: u64| -> Fields { smallvec::smallvec![status, 42] };
        let ids: Vec<Member> = (0..6).map(|i| b.sent(7, fields(100 + i))).collect();
        assert!(ids.iter().all(|m| m.group == ids[0].group));
        assert_eq!(b.answered(ids[0], false), None);
        let late = b.sent(7, fields(1));
        assert_ne!(
            late.group, ids[0].group,
            "sent after an answer: another group"
        );
        for id in &ids[1..5] {
            assert_eq!(b.answered(*id, false), None);
        }
        let burst = b.answered(ids[5], false).unwrap();
        assert_eq!((burst.shape, burst.members), (7, 6));
        assert_eq!(b.answered(late, false), None, "one member: no burst");
        // The same six statuses with another date: the same constants.
        let again: Vec<Member> = (0..6)
            .rev()
            .map(|i| b.sent(7, smallvec::smallvec![100 + i, 43]))
            .collect();
        let mut last = None;
        for m in again {
            last = b.answered(m, false).or(last);
        }
        let sorted = |mut c: SmallVec<[u64; MAX_KEPT]>| {
            c.sort_unstable();
            c
        };
        assert_eq!(
            sorted(last.unwrap().constants),
            sorted(burst.constants.clone())
        );
        let ids: Vec<Member> = (0..4).map(|i| b.sent(9, fields(i))).collect();
        assert_eq!(b.answered(ids[0], true), None);
        for id in &ids[1..] {
            assert_eq!(b.answered(*id, false), None, "a member followed");
        }
    }

    /// Groups never answered are dropped, oldest first, past the cap.
    #[test]
    fn groups_are_bounded() {
        let mut b = Bursts::default();
        for shape in 0..1000 {
            b.sent(shape, Fields::new());
        }
        assert!(b.taking.len() <= MAX_GROUPS && b.waiting.len() <= MAX_GROUPS);
    }
}
