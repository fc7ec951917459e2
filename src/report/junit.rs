//! The findings as JUnit XML, the file CI test views read (Jenkins, GitLab,
//! GitHub test summaries): one test case per finding, failing when the
//! finding is at or above the level given (`--fail-on`; by default warning),
//! with the finding's message and what to do. A test case is named by the
//! finding and the first test that showed it, and carries that test's file
//! and line where the runner said them.

use super::Report;
use crate::rules::Severity;
use std::fmt::Write;

/// The report's findings as a JUnit XML document; findings at or above
/// `fail_at` are failures.
pub fn junit(report: &Report, fail_at: Severity) -> String {
    let failures = report
        .findings
        .iter()
        .filter(|f| f.severity >= fail_at)
        .count();
    let total = report.findings.len();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"wirelint\" tests=\"{total}\" failures=\"{failures}\" errors=\"0\">"
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"wirelint\" tests=\"{total}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" timestamp=\"{}\">",
        attr(&report.generated_at)
    );
    for f in &report.findings {
        let first = f.tests.first();
        let info = first.and_then(|t| report.tests.iter().find(|i| i.id == t.test));
        let mut name = format!("{} {} on {}", f.rule, f.name, f.namespace);
        if let Some(t) = first {
            let _ = write!(name, " in {}", t.test);
        }
        let mut case = format!(
            "    <testcase classname=\"wirelint.{}\" name=\"{}\"",
            attr(&f.rule),
            attr(&name)
        );
        if let Some(file) = info.and_then(|i| i.file.as_deref()) {
            let _ = write!(case, " file=\"{}\"", attr(file));
            if let Some(line) = info.and_then(|i| i.line) {
                let _ = write!(case, " line=\"{line}\"");
            }
        }
        let mut body = format!("{}\n\nWhat to do: {}\n", f.message, f.advice);
        if let Some(tests) = super::table::tests_line(f) {
            let _ = writeln!(body, "Shown by {tests}.");
        }
        let _ = writeln!(
            body,
            "{} · {} · reported on {} operations",
            f.source, f.docs, f.occurrences
        );
        if f.severity >= fail_at {
            let _ = writeln!(
                out,
                "{case}>\n      <failure type=\"{}\" message=\"{}\">{}</failure>\n    </testcase>",
                f.severity.as_str(),
                attr(&f.message),
                text(&body)
            );
        } else {
            let _ = writeln!(
                out,
                "{case}>\n      <system-out>{}</system-out>\n    </testcase>",
                text(&body)
            );
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// `s` as XML character data: markup escaped, characters XML cannot
/// carry dropped.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => out.push(c),
        }
    }
    out
}

/// `s` as an XML attribute value (in double quotes).
fn attr(s: &str) -> String {
    text(s)
        .replace('"', "&quot;")
        .replace('\n', "&#10;")
        .replace('\r', "&#13;")
        .replace('\t', "&#9;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::suite::{TestCount, TestInfo};

    fn report() -> Report {
        use crate::report::merge::tests::{finding, report};
        let mut r = report(
            Vec::new(),
            vec![finding(
                Severity::Warning,
                3,
                "2026-01-01T00:00:00Z",
                8,
                "Q1",
            )],
        );
        r.tests = vec![TestInfo {
            id: "tests/test_shop.py::test_orders_list".into(),
            file: Some("tests/test_shop.py".into()),
            line: Some(41),
            operations: 33,
        }];
        r.findings[0].tests = vec![TestCount {
            test: "tests/test_shop.py::test_orders_list".into(),
            operations: 32,
        }];
        r
    }

    #[test]
    fn a_finding_is_a_failing_case_named_by_its_test() {
        let mut r = report();
        r.findings[0].message = "8 lookups <per> \"row\" & more\u{1}".into();
        let xml = junit(&r, Severity::Warning);
        assert!(xml.contains("failures=\"1\""), "{xml}");
        assert!(
            xml.contains(" in tests/test_shop.py::test_orders_list\" file=\"tests/test_shop.py\" line=\"41\""),
            "{xml}"
        );
        assert!(
            xml.contains("message=\"8 lookups &lt;per&gt; &quot;row&quot; &amp; more\""),
            "{xml}"
        );
        assert!(xml.contains("Shown by tests/test_shop.py::test_orders_list (32 operations)."));
        assert!(!xml.contains('\u{1}'));
        // Below the level: a passing case that still says it.
        let xml = junit(&r, Severity::Error);
        assert!(
            xml.contains("failures=\"0\"") && xml.contains("<system-out>"),
            "{xml}"
        );
    }
}
