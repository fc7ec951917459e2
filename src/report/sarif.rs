//! SARIF 2.1.0 for GitHub code scanning: one run, every rule's metadata
//! with its help text, one result per finding with a stable `ruleId`,
//! `partialFingerprints` from the finding's key, and a location. Where a
//! test runner said which tests showed the finding and where they are, the
//! location is the first such test's file and line (the others are related
//! locations), so code scanning annotates the test; otherwise it is
//! `mongodb/<db>/<collection>` (the finding is about a collection).

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
            let in_tests: Vec<(&str, &str, u32)> = f
                .tests
                .iter()
                .filter_map(|t| {
                    let info = report.tests.iter().find(|i| i.id == t.test)?;
                    Some((t.test.as_str(), info.file.as_deref()?, info.line.unwrap_or(1)))
                })
                .collect();
            let logical = json!([{"name": f.namespace, "kind": "namespace"}]);
            let location = match in_tests.first() {
                Some((_, file, line)) => json!({
                    "physicalLocation": {
                        "artifactLocation": {"uri": file},
                        "region": {"startLine": line.max(&1)}
                    },
                    "logicalLocations": logical,
                }),
                None => json!({
                    "physicalLocation": {
                        "artifactLocation": {"uri": location_uri(&f.namespace)},
                        "region": {"startLine": 1}
                    },
                    "logicalLocations": logical,
                }),
            };
            let shown_by = match super::table::tests_line(f) {
                Some(tests) => format!(" Shown by {tests}."),
                None => String::new(),
            };
            let mut result = json!({
                "ruleId": f.rule,
                "level": level(f.severity),
                "message": {"text": format!("{}: {}. {}{shown_by}", f.namespace, f.message, f.advice)},
                "locations": [location],
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
            if in_tests.len() > 1 {
                result["relatedLocations"] = in_tests[1..]
                    .iter()
                    .enumerate()
                    .map(|(i, (test, file, line))| {
                        json!({
                            "id": i + 1,
                            "physicalLocation": {
                                "artifactLocation": {"uri": file},
                                "region": {"startLine": line.max(&1)}
                            },
                            "message": {"text": format!("also shown by {test}")},
                        })
                    })
                    .collect();
            }
            if !f.tests.is_empty() {
                result["properties"]["tests"] = json!(f.tests);
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
