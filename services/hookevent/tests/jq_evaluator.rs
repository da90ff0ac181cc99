//! `berth-hookevent` serves as its own jq evaluator (its `main` calls
//! `berth_jq::run_if_requested` first): jqFilters run, and a hostile one stops at a limit while
//! the evaluators keep serving. The sandbox itself is tested in `berth-jq`.

use std::path::PathBuf;
use std::time::Duration;

use berth_hookevent::JqError;
use berth_hookevent::jq::{Jq, JqLimits};
use serde_json::json;

#[tokio::test]
async fn the_service_binary_evaluates_and_survives_a_bomb() {
    let jq = Jq::new(
        PathBuf::from(env!("CARGO_BIN_EXE_berth-hookevent")),
        JqLimits {
            time: Duration::from_millis(1500),
            memory_bytes: 128 << 20,
            stack_bytes: 8 << 20,
            output_bytes: 1 << 20,
            evaluators: 1,
        },
    );
    let f = jq.check("{name: .metadata.name}").await.unwrap();
    let out = jq
        .run(&f, &json!({"metadata": {"name": "a"}}))
        .await
        .unwrap();
    assert_eq!(out, json!({"name": "a"}));
    let bomb = jq.check("def f: [f]; f").await.unwrap();
    let e = jq.run(&bomb, &json!({})).await.unwrap_err();
    assert!(matches!(e, JqError::Limit { .. }), "{e}");
    assert!(e.to_string().contains("depth limit"), "{e}");
    assert_eq!(
        jq.run(&f, &json!({"metadata": {"name": "b"}}))
            .await
            .unwrap(),
        json!({"name": "b"})
    );
}
