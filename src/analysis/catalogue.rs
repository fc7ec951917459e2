//! The rule catalogue's vocabulary: what a rule is ([`RuleMeta`]), how
//! grave its findings are ([`Severity`]) and which numbers a user may tune
//! ([`Threshold`]).
//!
//! These are plain descriptions, written once per rule as a `static`, and
//! read by everyone above: the [`findings`](super::findings) store stamps
//! a finding with its rule's name, advice and source; the
//! [`rule`](super::rule) contract and its settings look up thresholds and
//! severities; the configuration validates `[rules.ID]` against them; the
//! docs and SARIF list them. They sit below both the findings and the
//! rules' contract so that each can use them without the other.

use serde::{Deserialize, Serialize};

/// How grave a finding is; a user may raise or lower a rule's level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn parse(s: &str) -> Option<Severity> {
        match s {
            "info" => Some(Severity::Info),
            "warning" | "warn" => Some(Severity::Warning),
            "error" => Some(Severity::Error),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// A tunable number of a rule, with its default and meaning.
pub struct Threshold {
    pub name: &'static str,
    pub default: f64,
    pub help: &'static str,
}

/// What a rule is, for docs, SARIF and config validation.
pub struct RuleMeta {
    pub id: &'static str,
    pub name: &'static str,
    pub severity: Severity,
    /// One sentence: what it detects.
    pub summary: &'static str,
    /// What to do, naming the pattern.
    pub advice: &'static str,
    /// Where the rule comes from: the public pages, by title.
    pub source: &'static str,
    pub thresholds: &'static [Threshold],
}

impl RuleMeta {
    pub fn docs_path(&self) -> String {
        format!("docs/rules/{}.md", self.id)
    }
}
