//! Findings: what the rules report, deduplicated by (rule, namespace,
//! subject) in the [`FindingStore`].

use super::budget::{short_key, shorten, Pool};
use super::catalogue::RuleMeta;
use super::hash::fnv1a;
use super::suite::{count_test, TestCount};
use super::trace_context::TraceContext;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

/// A finding's severity: rules and the configuration name it through
/// this module too.
pub use super::catalogue::Severity;

/// What a rule reports.
pub struct FindingDraft {
    pub namespace: String,
    /// What the finding is about within the namespace (a field path, a
    /// shape, the collection itself): part of the dedup key.
    pub subject: String,
    pub severity: Severity,
    pub pattern: Option<String>,
    pub shape: Option<String>,
    pub message: String,
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// What to change, when the rule's advice covers several cases and
    /// this finding is one of them (said instead of the rule's).
    pub advice: Option<&'static str>,
    /// Under a platform priced in request units, what fixing it saves:
    /// written at the end of the message and into the evidence by the
    /// store (see [`Saving`]).
    pub saving: Option<Saving>,
}

impl FindingDraft {
    pub fn with_saving(mut self, saving: Option<Saving>) -> FindingDraft {
        self.saving = saving;
        self
    }
}

/// What a fix saves, in request units per call, list or query, as a
/// finding carries it: a number, to two significant figures (an
/// estimate's precision). The store writes it into the finding's words
/// ("; fixing it saves about 4.2 RU per list", "… about 16 RU …") only
/// when the finding is new or the figure changed: a finding is made again
/// every time it is reported, and writing the clause each time cost more
/// than the rest of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saving {
    /// In tenths, to two significant figures, as the message and the
    /// evidence give it: a figure that moves by less is not written again.
    tenths: u64,
    per: SavedPer,
}

/// What a [`Saving`] is counted per.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SavedPer {
    List,
    Query,
    Call,
}

impl Saving {
    /// `None` below 0.05 RU: nothing worth a clause.
    pub fn of(request_units: f64, per: SavedPer) -> Option<Saving> {
        (request_units >= 0.05).then(|| Saving {
            tenths: two_figures((request_units * 10.0).round() as u64),
            per,
        })
    }

    fn per(self) -> &'static str {
        match self.per {
            SavedPer::List => "list",
            SavedPer::Query => "query",
            SavedPer::Call => "call",
        }
    }

    /// Its evidence key.
    pub fn key(self) -> &'static str {
        match self.per {
            SavedPer::List => "request_units_saved_per_list",
            SavedPer::Query => "request_units_saved_per_query",
            SavedPer::Call => "request_units_saved_per_call",
        }
    }

    fn value(self) -> serde_json::Value {
        serde_json::json!(self.tenths as f64 / 10.0)
    }

    /// Appends "; fixing it saves about 4.2 RU per list (estimated:
    /// docs/cosmos.md)" (or "16 RU", "160 RU": no tenths from 10 on).
    fn write(self, message: &mut String) {
        let mut digits = itoa::Buffer::new();
        message.push_str("; fixing it saves about ");
        message.push_str(digits.format(self.tenths / 10));
        if self.tenths < 100 {
            message.push('.');
            message.push(char::from(b'0' + (self.tenths % 10) as u8));
        }
        message.push_str(" RU per ");
        message.push_str(self.per());
        message.push_str(" (estimated: docs/cosmos.md)");
    }
}

/// `n` rounded to its two leading digits (half up): 1234 is 1200.
fn two_figures(n: u64) -> u64 {
    let mut scale = 1;
    while n / scale >= 100 {
        scale *= 10;
    }
    (n + scale / 2) / scale * scale
}

/// A finding as stored, reported and serialized.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Finding {
    pub rule: String,
    pub name: String,
    pub severity: Severity,
    pub namespace: String,
    pub subject: String,
    /// The access pattern where it was last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// That operation's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    /// Every access pattern where it was seen (up to 16).
    #[serde(default)]
    pub patterns: Vec<String>,
    pub message: String,
    pub evidence: BTreeMap<String, serde_json::Value>,
    pub advice: String,
    /// The public pages the rule comes from, by title (`seed` in reports
    /// written before 0.2).
    #[serde(alias = "seed")]
    pub source: String,
    pub docs: String,
    pub occurrences: u64,
    pub first_seen: String,
    pub last_seen: String,
    /// The key of the finding to fix first, when this one follows from it
    /// (set when a report is built; see `report::group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix_first: Option<String>,
    /// How many databases showed it, when its namespace is a logical one
    /// folding several named per test or per worker (counted up to 64; see
    /// `analysis::databases`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub databases: Option<u64>,
    /// The tests whose operations showed it, most first, when a test
    /// runner said which test was running (see `analysis::suite`; up to
    /// 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<TestCount>,
}

impl Finding {
    /// A stable id: rule, namespace and subject.
    pub fn key(&self) -> String {
        format!("{}:{}:{}", self.rule, self.namespace, self.subject)
    }

    /// A short stable fingerprint of the key, for SARIF.
    pub fn fingerprint(&self) -> String {
        format!("{:016x}", fnv1a(self.key().as_bytes()))
    }
}

/// What happened to the store on a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    New,
    Escalated,
    Repeated,
}

/// Findings, deduplicated. Bounded: past [`MAX_FINDINGS`] distinct
/// findings, or once its pool is full, new ones are counted in `dropped`
/// instead of stored (the ones already found keep being updated).
pub struct FindingStore {
    findings: BTreeMap<(String, String, String), Stored>,
    pool: Arc<Pool>,
    pub dropped: u64,
    /// The last time stamp written and its second (see `stamp`).
    stamp: Option<(u64, String)>,
    /// Counts raisings (new or escalated findings): each stored finding
    /// keeps the count at its last one, so a reader finds what changed
    /// since it last looked without a table of its own.
    generation: u64,
}

/// A finding as kept: what was last raised about it, by what, and when.
struct Stored {
    finding: Finding,
    /// How it was last raised (new or escalated).
    change: Change,
    /// The trace context of the operation that raised it (new or
    /// escalated), if its driver sent one: one per finding, kept while it
    /// lives.
    trace: Option<TraceContext>,
    generation: u64,
    /// The real databases (hashes of their names) whose operations showed
    /// it, when its namespace folds several (see `analysis::databases`):
    /// up to [`MAX_DATABASES`] told apart.
    databases: Vec<u32>,
    /// The length of its message before the saving's clause, and the
    /// saving written (see [`Saving`]).
    base_len: usize,
    saving: Option<Saving>,
}

/// Databases told apart per finding; past this the count says "at least".
const MAX_DATABASES: usize = 64;

/// A finding raised (new or escalated) since a [`FindingStore::generation`]:
/// see [`FindingStore::raised_since`].
pub struct Raised<'a> {
    pub finding: &'a Finding,
    pub change: Change,
    pub trace: Option<TraceContext>,
}

impl Default for FindingStore {
    fn default() -> Self {
        FindingStore::new(Pool::unbounded("findings"))
    }
}

impl Drop for FindingStore {
    fn drop(&mut self) {
        let n = self.findings.len();
        self.pool.give_back(n * FINDING_BYTES, n);
    }
}

pub const MAX_FINDINGS: usize = 10_000;

/// What one finding is charged: its strings are bounded (namespace,
/// subject and pattern names at `budget::MAX_KEY`, the shape at
/// `budget::MAX_SHAPE_TEXT`, the message at [`MAX_MESSAGE`], up to 16
/// patterns and 16 test names), so this covers the largest.
pub const FINDING_BYTES: usize = 16 << 10;
/// Longest message kept.
const MAX_MESSAGE: usize = 2048;

impl FindingStore {
    pub fn new(pool: Arc<Pool>) -> FindingStore {
        FindingStore {
            findings: BTreeMap::new(),
            pool,
            dropped: 0,
            stamp: None,
            generation: 0,
        }
    }

    /// The count of raisings so far (see [`FindingStore::raised_since`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The findings raised (new, or escalated) after `generation`, each
    /// with how and the trace id of the operation that raised it: what a
    /// reader that last looked at `generation` has not seen.
    pub fn raised_since(&self, generation: u64) -> impl Iterator<Item = Raised<'_>> {
        self.findings
            .values()
            .filter(move |s| s.generation > generation)
            .map(|s| Raised {
                finding: &s.finding,
                change: s.change,
                trace: s.trace,
            })
    }

    /// Records a finding (new, or one more occurrence of a known one, whose
    /// message and evidence it replaces); returns what changed and the
    /// finding as stored, if it is. `trace`: the trace id of the operation
    /// it is about, kept with the finding when this raises it.
    pub fn record(
        &mut self,
        meta: &RuleMeta,
        mut draft: FindingDraft,
        now: SystemTime,
        trace: Option<TraceContext>,
        test: Option<&str>,
        database: Option<u32>,
    ) -> (Change, Option<&Finding>) {
        let stamp = self.stamp(now);
        // Replaced only when shortened: most are short already.
        if let Cow::Owned(short) = short_key(&draft.namespace) {
            draft.namespace = short;
        }
        if let Cow::Owned(short) = short_key(&draft.subject) {
            draft.subject = short;
        }
        if let Cow::Owned(short) = shorten(&draft.message, MAX_MESSAGE) {
            draft.message = short;
        }
        let key = (
            meta.id.to_string(),
            std::mem::take(&mut draft.namespace),
            std::mem::take(&mut draft.subject),
        );
        let full = self.findings.len() >= MAX_FINDINGS || self.pool.full();
        match self.findings.entry(key) {
            Entry::Occupied(entry) => {
                let stored = entry.into_mut();
                // The message as it stands when only the words before the
                // saving's clause would be written again, and the same
                // figure after them.
                let same = stored.saving == draft.saving
                    && stored.finding.message.get(..stored.base_len) == Some(&*draft.message);
                let mut evidence = draft.evidence;
                if let Some(saving) = draft.saving {
                    evidence.insert(saving.key().to_string(), saving.value());
                }
                if !same {
                    stored.base_len = draft.message.len();
                    stored.saving = draft.saving;
                    stored.finding.message = draft.message;
                    let advice = draft.advice.unwrap_or(meta.advice);
                    if stored.finding.advice != advice {
                        stored.finding.advice = advice.to_string();
                    }
                    if let Some(saving) = draft.saving {
                        saving.write(&mut stored.finding.message);
                    }
                }
                let existing = &mut stored.finding;
                existing.occurrences += 1;
                existing.last_seen = stamp;
                existing.evidence = evidence;
                if let Some(test) = test {
                    count_test(&mut existing.tests, test);
                }
                if let Some(db) = database {
                    if stored.databases.len() < MAX_DATABASES && !stored.databases.contains(&db) {
                        stored.databases.push(db);
                    }
                    existing.databases = Some(stored.databases.len() as u64);
                }
                if let Some(p) = &draft.pattern {
                    let p = short_key(p);
                    if !existing.patterns.iter().any(|e| *e == p) && existing.patterns.len() < 16 {
                        existing.patterns.push(p.into_owned());
                    }
                    existing.pattern = draft.pattern;
                    existing.shape = draft.shape;
                }
                let change = if draft.severity > existing.severity {
                    existing.severity = draft.severity;
                    self.generation += 1;
                    stored.generation = self.generation;
                    stored.change = Change::Escalated;
                    stored.trace = trace;
                    Change::Escalated
                } else {
                    Change::Repeated
                };
                (change, Some(&stored.finding))
            }
            Entry::Vacant(_) if full => {
                self.dropped += 1;
                self.pool.evicted();
                (Change::Repeated, None)
            }
            Entry::Vacant(entry) => {
                self.pool.charge(FINDING_BYTES);
                let (_, namespace, subject) = entry.key().clone();
                self.generation += 1;
                let base_len = draft.message.len();
                if let Some(saving) = draft.saving {
                    saving.write(&mut draft.message);
                    draft
                        .evidence
                        .insert(saving.key().to_string(), saving.value());
                }
                let stored = entry.insert(Stored {
                    base_len,
                    saving: draft.saving,
                    change: Change::New,
                    trace,
                    generation: self.generation,
                    databases: database.into_iter().collect(),
                    finding: Finding {
                        rule: meta.id.to_string(),
                        name: meta.name.to_string(),
                        severity: draft.severity,
                        namespace,
                        subject,
                        patterns: draft
                            .pattern
                            .iter()
                            .map(|p| short_key(p).into_owned())
                            .collect(),
                        pattern: draft.pattern,
                        shape: draft.shape,
                        message: draft.message,
                        evidence: draft.evidence,
                        advice: draft.advice.unwrap_or(meta.advice).to_string(),
                        source: meta.source.to_string(),
                        docs: meta.docs_path(),
                        occurrences: 1,
                        first_seen: stamp.clone(),
                        last_seen: stamp,
                        fix_first: None,
                        databases: database.map(|_| 1),
                        tests: test
                            .map(|t| {
                                let mut tests = Vec::new();
                                count_test(&mut tests, t);
                                tests
                            })
                            .unwrap_or_default(),
                    },
                });
                (Change::New, Some(&stored.finding))
            }
        }
    }

    /// `now` as RFC 3339 to the second, formatted once per second.
    fn stamp(&mut self, now: SystemTime) -> String {
        let second = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        match &self.stamp {
            Some((at, text)) if *at == second => text.clone(),
            _ => {
                let text = humantime::format_rfc3339_seconds(now).to_string();
                self.stamp = Some((second, text.clone()));
                text
            }
        }
    }

    pub fn all(&self) -> impl Iterator<Item = &Finding> {
        self.findings.values().map(|s| &s.finding)
    }

    pub fn len(&self) -> usize {
        self.findings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.findings.is_empty()
    }

    /// Withdraws a finding the evidence no longer supports (a set that
    /// stopped growing): it leaves the store, the report and the exit code.
    pub fn retract(&mut self, rule: &str, namespace: &str, subject: &str) -> Option<Finding> {
        let gone = self.findings.remove(&(
            rule.to_string(),
            short_key(namespace).into_owned(),
            short_key(subject).into_owned(),
        ));
        if gone.is_some() {
            self.pool.release(FINDING_BYTES);
        }
        gone.map(|s| s.finding)
    }

    pub fn get(&self, rule: &str, namespace: &str, subject: &str) -> Option<&Finding> {
        self.findings
            .get(&(
                rule.to_string(),
                short_key(namespace).into_owned(),
                short_key(subject).into_owned(),
            ))
            .map(|s| &s.finding)
    }
}

/// A finding that is new or got worse: what the live output prints.
#[derive(Clone, Debug)]
pub struct FindingEvent {
    pub change: Change,
    pub finding: Finding,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    static META: RuleMeta = RuleMeta {
        id: "WL101",
        name: "unbounded-array-growth",
        severity: Severity::Warning,
        summary: "s",
        advice: "a",
        source: "src",
        thresholds: &[],
    };

    fn draft(namespace: &str, severity: Severity, message: &str) -> FindingDraft {
        FindingDraft {
            namespace: namespace.to_string(),
            subject: "comments".to_string(),
            severity,
            pattern: Some("update blog.posts".to_string()),
            shape: None,
            message: message.to_string(),
            evidence: BTreeMap::from([("n".to_string(), serde_json::json!(message.len()))]),
            advice: None,
            saving: None,
        }
    }

    /// A finding is new once, then repeated (counted, its message and
    /// evidence the latest, its last-seen stamp moved), escalated when a
    /// report is more severe; a namespace longer than a key may be is
    /// shortened the same way every time, so it stays one finding.
    #[test]
    fn record_counts_repeats_and_escalations_of_one_finding() {
        let meta = &META;
        let mut store = FindingStore::default();
        let long = format!("blog.{}", "c".repeat(400));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let (change, found) = store.record(
            meta,
            draft(&long, Severity::Warning, "a"),
            t0,
            None,
            None,
            None,
        );
        assert_eq!(change, Change::New);
        let first = found.unwrap().clone();
        assert!(first.namespace.len() < long.len());
        let later = t0 + Duration::from_millis(1_500);
        let (change, found) = store.record(
            meta,
            draft(&long, Severity::Warning, "bb"),
            later,
            None,
            None,
            None,
        );
        assert_eq!(change, Change::Repeated);
        let again = found.unwrap();
        assert_eq!(again.occurrences, 2);
        assert_eq!(again.message, "bb");
        assert_eq!(again.evidence["n"], serde_json::json!(2));
        assert_eq!(again.first_seen, "2023-11-14T22:13:20Z");
        assert_eq!(again.last_seen, "2023-11-14T22:13:21Z");
        let (change, found) = store.record(
            meta,
            draft(&long, Severity::Error, "c"),
            later,
            None,
            None,
            None,
        );
        assert_eq!(change, Change::Escalated);
        assert_eq!(found.unwrap().severity, Severity::Error);
        assert_eq!(store.len(), 1);
        assert!(store.get("WL101", &long, "comments").is_some());
    }

    /// A saving is written after the message and into the evidence when
    /// the finding is new; reported again with the same words and figure,
    /// both stay as they are; a new figure, or new words before it, are
    /// written again; a report without one leaves none behind.
    #[test]
    fn a_saving_is_written_when_new_or_changed() {
        let mut store = FindingStore::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut record = |message: &str, ru: Option<f64>| {
            let d = draft("blog.posts", Severity::Warning, message)
                .with_saving(ru.and_then(|ru| Saving::of(ru, SavedPer::List)));
            let (_, found) = store.record(&META, d, t0, None, None, None);
            let found = found.unwrap();
            (
                found.message.clone(),
                found.evidence.get("request_units_saved_per_list").cloned(),
                found.evidence["n"].clone(),
            )
        };
        let clause = "; fixing it saves about 12 RU per list (estimated: docs/cosmos.md)";
        use serde_json::json;
        assert_eq!(
            record("ten queries", Some(12.345)),
            (format!("ten queries{clause}"), Some(json!(12.0)), json!(11))
        );
        assert_eq!(
            record("ten queries", Some(11.61)),
            (format!("ten queries{clause}"), Some(json!(12.0)), json!(11))
        );
        assert_eq!(
            record("ten queries", Some(3.04)),
            (
                "ten queries; fixing it saves about 3.0 RU per list (estimated: docs/cosmos.md)"
                    .into(),
                Some(json!(3.0)),
                json!(11)
            )
        );
        assert_eq!(
            record("twelve queries", Some(3.04)).0,
            "twelve queries; fixing it saves about 3.0 RU per list (estimated: docs/cosmos.md)"
        );
        assert_eq!(
            record("twelve queries", None),
            ("twelve queries".into(), None, json!(14))
        );
        assert_eq!(Saving::of(0.04, SavedPer::Call), None);
    }

    /// A saving keeps two significant figures: tenths under 10 RU, whole
    /// RU under 100, and so on.
    #[test]
    fn a_saving_has_two_significant_figures() {
        let shown = |ru: f64| {
            let saving = Saving::of(ru, SavedPer::Query).unwrap();
            let mut m = String::new();
            saving.write(&mut m);
            (m, saving.value())
        };
        let words = |n: &str| {
            format!("; fixing it saves about {n} RU per query (estimated: docs/cosmos.md)")
        };
        use serde_json::json;
        assert_eq!(shown(0.05), (words("0.1"), json!(0.1)));
        assert_eq!(shown(9.94), (words("9.9"), json!(9.9)));
        assert_eq!(shown(9.96), (words("10"), json!(10.0)));
        assert_eq!(shown(16.34), (words("16"), json!(16.0)));
        assert_eq!(shown(99.5), (words("100"), json!(100.0)));
        assert_eq!(shown(1234.0), (words("1200"), json!(1200.0)));
        assert_eq!(two_figures(0), 0);
        assert_eq!(two_figures(95), 95);
        assert_eq!(two_figures(12_345), 12_000);
        assert_eq!(two_figures(u64::MAX / 10), 1_800_000_000_000_000_000);
    }

    /// A reader that remembers the generation it last saw finds exactly
    /// the findings raised since: new, escalated (with the trace of the
    /// operation that escalated it), not repeated ones; a finding withdrawn
    /// and raised again is new again.
    #[test]
    fn raised_since_gives_what_is_new_or_escalated_with_its_trace() {
        let meta = &META;
        let mut store = FindingStore::default();
        let now = SystemTime::now();
        let a = TraceContext::from_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
        let b = TraceContext::from_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        );
        let seen = |store: &FindingStore, since| {
            store
                .raised_since(since)
                .map(|r| (r.finding.namespace.clone(), r.change, r.trace))
                .collect::<Vec<_>>()
        };
        assert_eq!(store.generation(), 0);
        store.record(
            meta,
            draft("db.a", Severity::Warning, "m"),
            now,
            a,
            None,
            None,
        );
        store.record(
            meta,
            draft("db.b", Severity::Warning, "m"),
            now,
            None,
            None,
            None,
        );
        let g = store.generation();
        assert_eq!(
            seen(&store, 0),
            vec![
                ("db.a".into(), Change::New, a),
                ("db.b".into(), Change::New, None)
            ]
        );
        // Repeated: nothing new, the raising trace kept.
        store.record(
            meta,
            draft("db.a", Severity::Warning, "m"),
            now,
            b,
            None,
            None,
        );
        assert_eq!((store.generation(), seen(&store, g)), (g, vec![]));
        assert_eq!(seen(&store, 0)[0].2, a);
        // Escalated: seen again, with the escalating operation's trace.
        store.record(
            meta,
            draft("db.a", Severity::Error, "m"),
            now,
            b,
            None,
            None,
        );
        assert_eq!(seen(&store, g), vec![("db.a".into(), Change::Escalated, b)]);
        let g = store.generation();
        store.retract("WL101", "db.b", "comments");
        store.record(
            meta,
            draft("db.b", Severity::Warning, "m"),
            now,
            None,
            None,
            None,
        );
        assert_eq!(seen(&store, g), vec![("db.b".into(), Change::New, None)]);
    }

    /// Past its cap new findings are counted as dropped, not stored.
    #[test]
    fn a_full_store_drops_new_findings() {
        let meta = &META;
        let mut store = FindingStore::default();
        let now = SystemTime::now();
        for i in 0..MAX_FINDINGS {
            store.record(
                meta,
                draft(&format!("db.c{i}"), Severity::Warning, "m"),
                now,
                None,
                None,
                None,
            );
        }
        let (change, found) = store.record(
            meta,
            draft("db.more", Severity::Warning, "m"),
            now,
            None,
            None,
            None,
        );
        assert_eq!((change, found.is_none()), (Change::Repeated, true));
        assert_eq!((store.len(), store.dropped), (MAX_FINDINGS, 1));
    }

    /// On a folded namespace, a finding counts the real databases whose
    /// operations showed it, not the databases the fold stands for.
    #[test]
    fn a_finding_counts_the_databases_that_showed_it() {
        let meta = &META;
        let mut store = FindingStore::default();
        let now = SystemTime::now();
        let mut last = None;
        for db in [7, 9, 7, 7, 11] {
            let (_, f) = store.record(
                meta,
                draft("app_test_*.users", Severity::Warning, "m"),
                now,
                None,
                None,
                Some(db),
            );
            last = f.map(|f| f.databases);
        }
        assert_eq!(last, Some(Some(3)));
        let (_, f) = store.record(
            meta,
            draft("app.users", Severity::Warning, "m"),
            now,
            None,
            None,
            None,
        );
        assert_eq!(f.unwrap().databases, None);
    }
}
