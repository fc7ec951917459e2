//! The seeds' examples as scenarios: `fixtures/scenarios/<name>/` holds a
//! pymongo workload (`workload.py URI`), the `wirelint.toml` it needs and
//! `expected.json`, the findings that must appear. Each runs through
//! wirelint against a fresh FerretDB; a missing finding and a finding not
//! listed both fail (precision matters as much as recall).

mod common;

use common::Backend;
use std::path::PathBuf;
use std::process::Command;

async fn run(name: &str) -> wirelint::report::Report {
    let dir: PathBuf = common::manifest_dir().join("fixtures/scenarios").join(name);
    let config_path = dir.join("wirelint.toml");
    let config = wirelint::config::FileConfig::load(&config_path).unwrap();
    let expected = common::expected::load(&dir.join("expected.json"));

    let backend = Backend::start(Default::default());
    let mut settings = common::settings(&backend.uri());
    settings.analysis.rules = wirelint::config::rule_settings(&config, &config_path).unwrap();
    settings.analysis.partition_keys = config
        .partition_keys(&config_path.display().to_string())
        .unwrap();
    config.limits.apply(&mut settings.analysis.caps);
    let proxy = common::proxy_with(settings).await;

    let mut workload =
        Command::new(std::env::var("WIRELINT_PYTHON").unwrap_or_else(|_| "python3".into()));
    workload
        .arg(dir.join("workload.py"))
        .arg(proxy.connection_string());
    common::expected::run_workload(name, workload).await;
    let report = proxy.report();
    proxy.shutdown().await;

    // The seed's ✅/⚠ column, when the scenario states it.
    let verdicts = dir.join("verdicts.json");
    if verdicts.exists() {
        let want: std::collections::BTreeMap<String, Vec<String>> =
            serde_json::from_str(&std::fs::read_to_string(verdicts).unwrap()).unwrap();
        for (verdict, names) in &want {
            for name in names {
                let got = report
                    .patterns
                    .iter()
                    .find(|p| &p.name == name)
                    .map(|p| p.verdict.clone());
                assert_eq!(
                    got.as_deref(),
                    Some(verdict.as_str()),
                    "{name}: ⚠/✅ differs from seed 004\n{}",
                    wirelint::report::table::text(&report)
                );
            }
        }
        let named: Vec<&String> = report
            .patterns
            .iter()
            .filter(|p| p.named_by == wirelint::analysis::patterns::NamedBy::Comment)
            .map(|p| &p.name)
            .collect();
        assert_eq!(
            named.len(),
            want.values().map(Vec::len).sum::<usize>(),
            "patterns: {named:?}"
        );
    }
    let comparison = common::expected::compare(&expected, &report.findings);
    assert!(
        comparison.is_exact(),
        "{name}:\n{}\n\n{}",
        comparison.describe(),
        wirelint::report::table::text(&report)
    );
    report
}

/// `wirelint diff` between the three versions prints seed 004's comparison:
/// round trips fall and the ⚠ go away, request by request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_blog_v1_v2_v3_diff() {
    let v1 = run("seed004-blog-v1").await;
    let v2 = run("seed004-blog-v2").await;
    let v3 = run("seed004-blog-v3").await;
    let a = wirelint::report::diff::diff(&v1, &v2);
    let b = wirelint::report::diff::diff(&v2, &v3);
    let line = |text: &str, name: &str| -> String {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_default()
            .to_string()
    };
    let q2 = line(&a, "Q2");
    assert!(
        q2.contains("4 → 1")
            && q2.contains("⚠→✅")
            && q2.contains("-WL402")
            && q2.contains("-WL403"),
        "{a}"
    );
    let q3 = line(&a, "Q3");
    assert!(
        q3.contains("scatter-gather → scatter-gather") && q3.contains("⚠→⚠"),
        "{a}"
    );
    let q3 = line(&b, "Q3");
    assert!(
        q3.contains("scatter-gather → single-shard")
            && q3.contains("⚠→✅")
            && q3.contains("-WL201"),
        "{b}"
    );
    let q6 = line(&b, "Q6");
    assert!(
        q6.contains("scatter-gather → single-shard") && q6.contains("-WL202"),
        "{b}"
    );
    let c1 = line(&a, "C1");
    assert!(c1.contains("✅→✅"), "{a}");
}

macro_rules! scenarios {
    ($($test:ident => $dir:literal,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                run($dir).await;
            }
        )*

        /// Every scenario directory has a test.
        #[test]
        fn every_scenario_directory_is_run() {
            let mut dirs: Vec<String> = std::fs::read_dir(common::manifest_dir().join("fixtures/scenarios"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            dirs.sort();
            let mut listed = vec![$($dir.to_string()),*];
            listed.sort();
            assert_eq!(dirs, listed);
        }
    };
}

scenarios! {
    seed000_blog_comments_embedded => "seed000-blog-comments-embedded",
    seed000_blog_comments_subset_and_buckets => "seed000-blog-comments-subset-buckets",
    seed000_person_addresses => "seed000-person-addresses",
    seed000_stock_holdings_embedded => "seed000-stock-holdings-embedded",
    seed000_stock_holdings_referenced => "seed000-stock-holdings-referenced",
    seed000_publisher_books_array => "seed000-publisher-books-array",
    seed000_publisher_books_reference => "seed000-publisher-books-reference",
    seed000_authors_books_join => "seed000-authors-books-join",
    seed000_authors_books_arrays => "seed000-authors-books-arrays",
    seed000_authors_books_hybrid => "seed000-authors-books-hybrid",
    seed003_library_no_type => "seed003-library-no-type",
    seed003_library_with_type => "seed003-library-with-type",
    seed001_product_reviews_embedded => "seed001-product-reviews-embedded",
    seed001_product_reviews_subset => "seed001-product-reviews-subset",
    seed002_book_reviews_unbounded => "seed002-book-reviews-unbounded",
    seed002_book_reviews_subset => "seed002-book-reviews-subset",
    seed002_book_reviews_lookup => "seed002-book-reviews-lookup",
    seed004_partitioned_queries => "seed004-partitioned-queries",
    seed004_partitioned_queries_by_key => "seed004-partitioned-queries-by-key",
    seed004_blog_v1 => "seed004-blog-v1",
    seed004_blog_v2 => "seed004-blog-v2",
    seed004_blog_v3 => "seed004-blog-v3",
}
