//! Databases folded for test suites.
//!
//! Test fixtures give each test, or each parallel worker, a database of
//! its own: `app_test_<md5 of the test id>`, `db_<worker id>`,
//! `app_gw3`. One code path then makes one pattern per database, its
//! evidence spread too thin to reach any threshold, and the same cause
//! reported once per database. A database whose name ends in such a
//! per-test part is read as one logical database, the part written `*`:
//! `app_test_*.users`. Patterns, shapes, namespace state and findings are
//! all keyed by that name, so evidence adds up across the databases, and
//! [`Databases`] counts how many real databases each logical one stands
//! for (what the report says it folded, and what a finding names).
//!
//! What counts as a per-test part ([`Fold::Auto`], the default): after
//! the last `_` or `-`, a number (a worker id, a counter, a timestamp), a
//! pytest-xdist worker (`gw3`), 8 or more hex digits with at least one
//! digit (a hash, an id), or a UUID; repeated (`app_gw1_3fa9c1d2`). What is
//! left must be a name of its own (a letter at least). `--fold-databases
//! off` keys every database by its own name; a list of `PREFIX*` patterns
//! folds exactly the names that start with one of those prefixes.

use super::budget::{self, Pool};
use super::hash::fnv1a;
use std::collections::BTreeMap;
use std::sync::Arc;

/// How database names are folded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Fold {
    /// Per-test parts recognised by their look (see the module's docs).
    #[default]
    Auto,
    /// Every database keyed by its own name.
    Off,
    /// Names starting with one of these prefixes (each given as
    /// `PREFIX*`) are folded into `PREFIX*`.
    Prefixes(Vec<String>),
}

impl Fold {
    /// Parses `auto`, `off`, or a comma-separated list of `PREFIX*`
    /// patterns; the error says what is accepted.
    pub fn parse(text: &str) -> Result<Fold, String> {
        match text.trim() {
            "auto" | "on" | "true" => return Ok(Fold::Auto),
            "off" | "false" | "none" => return Ok(Fold::Off),
            _ => {}
        }
        let mut prefixes = Vec::new();
        for p in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p.strip_suffix('*') {
                Some(prefix) if !prefix.is_empty() && !prefix.contains('*') => {
                    prefixes.push(prefix.to_string())
                }
                _ => {
                    return Err(format!(
                        "takes `auto`, `off`, or database name patterns ending in one `*` \
                         (e.g. `app_test_*,app_gw*`); `{p}` is not one"
                    ))
                }
            }
        }
        if prefixes.is_empty() {
            return Err(
                "takes `auto`, `off`, or database name patterns such as `app_test_*`".into(),
            );
        }
        Ok(Fold::Prefixes(prefixes))
    }

    /// How much of `db` names the logical database (the rest is written
    /// `*`), when it is folded.
    pub fn prefix_len(&self, db: &str) -> Option<usize> {
        match self {
            Fold::Off => None,
            Fold::Prefixes(prefixes) => prefixes
                .iter()
                .find(|p| db.len() > p.len() && db.starts_with(p.as_str()))
                .map(|p| p.len()),
            Fold::Auto => auto_prefix_len(db),
        }
    }
}

/// The length of `db` before its per-test parts, separator kept
/// (`app_test_` of `app_test_3fa9c1d2`), if it ends in any.
fn auto_prefix_len(db: &str) -> Option<usize> {
    let mut end = db.len();
    if let Some(start) = end
        .checked_sub(36)
        .filter(|&s| db.get(s..).is_some_and(is_uuid))
    {
        end = start;
    } else {
        let cut = db.rfind(['_', '-'])? + 1;
        if !per_test(&db[cut..]) {
            return None;
        }
        end = cut;
    }
    // More per-test parts before it (`app_gw1_3fa9c1d2`).
    loop {
        let rest = &db[..end.saturating_sub(1)];
        match rest.rfind(['_', '-']) {
            Some(i) if per_test(&rest[i + 1..]) => end = i + 1,
            _ => break,
        }
    }
    let prefix = &db[..end];
    // A separator before the part, and a name left of it.
    let sep = prefix.ends_with(['_', '-']) || end == 0;
    (sep && prefix.bytes().any(|b| b.is_ascii_alphabetic())).then_some(end)
}

/// A per-test part: a number, a pytest-xdist worker, a hash.
fn per_test(part: &str) -> bool {
    let b = part.as_bytes();
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    digits(b)
        || (b.len() > 2 && b.starts_with(b"gw") && digits(&b[2..]))
        || (b.len() >= 8 && b.iter().all(u8::is_ascii_hexdigit) && b.iter().any(u8::is_ascii_digit))
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Logical databases kept, at most.
const MAX_LOGICAL: usize = 64;
/// Real databases told apart per logical database (beyond: counted as
/// that many and more).
const MAX_MEMBERS: usize = 1024;

/// The real databases each logical one was seen standing for, keyed by
/// the logical name's prefix (`app_test_` for `app_test_*`).
#[derive(Debug)]
pub struct Databases {
    pub fold: Arc<Fold>,
    /// Prefix → the real names' hashes, sorted.
    members: BTreeMap<String, Vec<u32>>,
    _charge: budget::Charge,
}

/// A logical database and how many real ones it folds.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FoldedDatabase {
    pub name: String,
    pub databases: usize,
    /// Whether the count hit the table's limit (so "at least").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_least: bool,
}

impl Databases {
    /// Bounded: its most (64 logical databases of 1,024 members) is
    /// charged to `pool` up front.
    pub fn new(fold: Fold, pool: &Arc<Pool>) -> Databases {
        Databases {
            fold: Arc::new(fold),
            members: BTreeMap::new(),
            _charge: budget::Charge::new(pool, MAX_LOGICAL * (MAX_MEMBERS * 4 + 256)),
        }
    }

    /// Notes that `real` was read as the logical database `prefix*`
    /// (allocating only for a logical database not seen before).
    pub fn saw(&mut self, prefix: &str, real: &str) {
        if !self.members.contains_key(prefix) {
            if self.members.len() >= MAX_LOGICAL {
                return;
            }
            self.members.insert(prefix.to_string(), Vec::new());
        }
        let Some(seen) = self.members.get_mut(prefix) else {
            return;
        };
        let h = fnv1a(real.as_bytes()) as u32;
        if let Err(i) = seen.binary_search(&h) {
            if seen.len() < MAX_MEMBERS {
                seen.insert(i, h);
            }
        }
    }

    /// How many real databases `namespace`'s database stands for, if it is
    /// a folded one (`app_test_*.users`).
    pub fn count_of(&self, namespace: &str) -> Option<usize> {
        let db = namespace.split_once('.').map_or(namespace, |(d, _)| d);
        self.members.get(db.strip_suffix('*')?).map(Vec::len)
    }

    /// The logical databases, with how many real ones each folds.
    pub fn folded(&self) -> Vec<FoldedDatabase> {
        self.members
            .iter()
            .map(|(prefix, seen)| FoldedDatabase {
                name: format!("{prefix}*"),
                databases: seen.len(),
                at_least: seen.len() >= MAX_MEMBERS,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(db: &str) -> Option<&str> {
        Fold::Auto.prefix_len(db).map(|n| &db[..n])
    }

    #[test]
    fn per_test_and_per_worker_parts_are_folded() {
        assert_eq!(
            folded("girder_test_9e107d9d372bb6826bd81d3542a419d6"),
            Some("girder_test_")
        );
        assert_eq!(folded("rq_suite_3fa9c1d2"), Some("rq_suite_"));
        assert_eq!(folded("db_2"), Some("db_"));
        assert_eq!(folded("app-gw3"), Some("app-"));
        assert_eq!(folded("app_gw1_3fa9c1d2"), Some("app_"));
        assert_eq!(
            folded("test-123e4567-e89b-12d3-a456-426614174000"),
            Some("test-")
        );
        assert_eq!(folded("app_1700000000123"), Some("app_"));
    }

    #[test]
    fn names_of_their_own_are_kept() {
        for db in [
            "shop", "blog_v2", "caf\u{e9}_\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}", "app2", "rq_board", "analytics_events", "test", "deadbeef",
            "cafe_babe", "x_abcdefab", "_12", "12_34", "app_", "admin", "config", "local",
        ] {
            assert_eq!(folded(db), None, "{db}");
        }
    }

    #[test]
    fn patterns_fold_exactly_their_names_and_off_folds_nothing() {
        let fold = Fold::parse("tenant_*, app-test-*").unwrap();
        assert_eq!(fold.prefix_len("tenant_acme"), Some(7));
        assert_eq!(fold.prefix_len("app-test-run"), Some(9));
        assert_eq!(fold.prefix_len("tenant_"), None);
        assert_eq!(fold.prefix_len("shop_3fa9c1d2"), None);
        assert_eq!(Fold::parse("off").unwrap().prefix_len("db_2"), None);
        for bad in ["", "tenant_", "*", "a*b*", "a*,b"] {
            let err = Fold::parse(bad).unwrap_err();
            assert!(err.contains("`auto`, `off`"), "{bad}: {err}");
        }
    }

    #[test]
    fn members_are_counted_once_each_and_bounded() {
        let pool = Pool::new("t", 64 << 20);
        let mut d = Databases::new(Fold::Auto, &pool);
        for i in 0..10 {
            d.saw("app_test_", &format!("app_test_{i:08x}"));
            d.saw("app_test_", &format!("app_test_{i:08x}"));
        }
        assert_eq!(d.count_of("app_test_*.users"), Some(10));
        assert_eq!(d.count_of("shop.users"), None);
        for i in 0..(MAX_LOGICAL + 10) {
            d.saw(&format!("l{i}_"), "x");
        }
        assert_eq!(d.folded().len(), MAX_LOGICAL);
    }
}
