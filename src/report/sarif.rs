//! SARIF 2.1.0 for GitHub code scanning: one run, every rule's metadata
//! with its help text, one result per finding with a stable `ruleId`,
//! `partialFingerprints` from the finding's key, and a repository-relative
//! location `mongodb/<db>/<collection>` (findings are about collections,
//! not source lines).

use super::Report;
use crate::rules::{self, Severity};
use serde_json::{json, Value};

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Info => "note",
        Severity::Warning => "warning",
        Severity::Error => "error",
    }
}

pub fn location_uri(namespace: &str) -> String {
    match namespace.split_once('.') {
        Some((db, coll)) => format!("mongodb/{db}/{coll}"),
        None => format!("mongodb/{namespace}"),
    }
}

pub fn sarif(report: &Report) -> Value {
    let catalogue = rules::catalogue();
    let rules_json: Vec<Value> = catalogue
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "name": m.name,
                "shortDescription": {"text": m.summary},
                "fullDescription": {"text": format!("{} Source: {}.", m.summary, m.source)},
                "help": {
                    "text": format!("{}\n\n{}\nSee {}.", m.summary, m.advice, m.docs_path()),
                    "markdown": format!("{}\n\n**What to do:** {}\n\n_{}_ — see [`{}`]({}).", m.summary, m.advice, m.source, m.docs_path(), m.docs_path()),
                },
                "defaultConfiguration": {"level": level(m.severity)},
                "properties": {"tags": ["mongodb", "data-modelling"]},
            })
        })
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            let index = catalogue.iter().position(|m| m.id == f.rule);
            let mut result = json!({
                "ruleId": f.rule,
                "level": level(f.severity),
                "message": {"text": format!("{}: {}. {}", f.namespace, f.message, f.advice)},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": location_uri(&f.namespace)},
                        "region": {"startLine": 1}
                    },
                    "logicalLocations": [{"name": f.namespace, "kind": "namespace"}]
                }],
                "partialFingerprints": {"wirelintFinding/v1": f.fingerprint()},
                "properties": {
                    "namespace": f.namespace,
                    "subject": f.subject,
                    "pattern": f.pattern,
                    "shape": f.shape,
                    "occurrences": f.occurrences,
                    "firstSeen": f.first_seen,
                    "lastSeen": f.last_seen,
                    "evidence": f.evidence,
                },
            });
            if let Some(i) = index {
                result["ruleIndex"] = json!(i);
            }
            result
        })
        .collect();
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "wirelint",
                "version": report.wirelint_version,
                "informationUri": "https://github.com/wirelint/wirelint",
                "rules": rules_json,
            }},
            "automationDetails": {"id": "wirelint/"},
            "results": results,
        }]
    })
}
