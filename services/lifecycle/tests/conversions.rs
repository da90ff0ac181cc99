//! The settings conversion chain on the real bounded evaluator (`berth-lifecycle` serves as its
//! own jq evaluator: its `main` calls `berth_jq::run_if_requested` first): steps run in order,
//! each expression on the previous one's result; a failing, hostile or ill-typed expression
//! fails the conversion with a message naming the step's file and the expression, and the
//! evaluators keep serving.

use std::path::PathBuf;
use std::time::Duration;

use berth_jq::{Jq, JqLimits};
use berth_lifecycle::conversion::{AtLoad, ConversionFailure, convert};
use berth_package::{Conversions, Step};
use serde_json::json;

fn jq() -> Jq {
    Jq::new(
        PathBuf::from(env!("CARGO_BIN_EXE_berth-lifecycle")),
        JqLimits {
            time: Duration::from_millis(1500),
            memory_bytes: 128 << 20,
            stack_bytes: 8 << 20,
            output_bytes: 1 << 20,
            evaluators: 2,
        },
    )
}

fn steps(latest: u32, steps: &[(u32, &[&str])]) -> Conversions {
    Conversions::from_steps(
        latest,
        steps.iter().map(|(version, e)| Step {
            version: *version,
            expressions: e.iter().map(|s| (*s).to_owned()).collect(),
        }),
    )
    .unwrap()
}

/// v2 renames `size` to `replicas`; v3 moves it under `scale` in two expressions.
fn three() -> Conversions {
    steps(
        3,
        &[
            (2, &[".replicas = .size | del(.size)"]),
            (3, &[".scale = {replicas}", "del(.replicas)"]),
        ],
    )
}

#[tokio::test]
async fn settings_convert_step_by_step_from_their_version() {
    let jq = jq();
    let c = three();
    let v1 = json!({"size": 3, "name": "a"});
    let out = convert(&jq, &c, &v1, 1).await.unwrap();
    assert_eq!(out.settings, json!({"name": "a", "scale": {"replicas": 3}}));
    assert_eq!((out.version, out.ran), (3, true));
    // From version 2 only the last step runs.
    let out = convert(&jq, &c, &json!({"replicas": 5}), 2).await.unwrap();
    assert_eq!(out.settings, json!({"scale": {"replicas": 5}}));
    // The package's own version (or 0, which means it) converts nothing.
    for own in [0, 3] {
        let out = convert(&jq, &c, &v1, own).await.unwrap();
        assert_eq!((&out.settings, out.version, out.ran), (&v1, 3, false));
    }
    let e = convert(&jq, &c, &v1, 4).await.unwrap_err();
    assert_eq!(e, ConversionFailure::TooNew { from: 4, latest: 3 });
    assert!(
        e.to_string()
            .contains("settings version 4 is newer than this package version knows"),
        "{e}"
    );
}

#[tokio::test]
async fn a_failing_conversion_names_its_file_and_expression() {
    let jq = jq();
    for (expression, says) in [
        (
            ".size",
            "the result must be an object (the settings), got a string",
        ),
        (".[", "does not compile"),
        (".size + 1", "failed"),
        ("empty", "got null"),
    ] {
        let c = steps(2, &[(2, &[".", expression])]);
        let e = convert(&jq, &c, &json!({"size": "three"}), 1)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("openapi/conversions/v2.yaml (to version 2), conversions[1]"),
            "{expression}: {e}"
        );
        assert!(e.contains(says), "{expression}: {e}");
    }
}

#[tokio::test]
async fn a_conversion_bomb_stops_at_a_limit_and_conversions_go_on() {
    let jq = jq();
    let bomb = steps(2, &[(2, &["def f: [f]; f"])]);
    let e = convert(&jq, &bomb, &json!({}), 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("v2.yaml") && e.contains("depth limit"),
        "names the step and the limit: {e}"
    );
    let spin = steps(2, &[(2, &["last(range(1e18))"])]);
    let e = convert(&jq, &spin, &json!({}), 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("time limit"), "{e}");
    let out = convert(&jq, &three(), &json!({"size": 1}), 1)
        .await
        .unwrap();
    assert_eq!(out.settings, json!({"scale": {"replicas": 1}}));
}

#[tokio::test]
async fn a_load_keeps_converts_or_fails() {
    let jq = jq();
    let c = three();
    let at_load = |settings, version| {
        let (jq, c) = (jq.clone(), c.clone());
        async move { berth_lifecycle::conversion::at_load(&jq, &c, &settings, version).await }
    };
    assert!(matches!(at_load(json!({}), 0).await, AtLoad::Keep(3)));
    assert!(matches!(at_load(json!({}), 3).await, AtLoad::Keep(3)));
    match at_load(json!({"size": 2}), 1).await {
        AtLoad::Converted(c) => assert_eq!(c.settings, json!({"scale": {"replicas": 2}})),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        at_load(json!({}), 9).await,
        AtLoad::Failed(ConversionFailure::TooNew { from: 9, latest: 3 })
    ));
}
