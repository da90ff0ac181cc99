//! jq programs in the sandboxed evaluators (`berth-jq-test-evaluator --berth-jq-evaluator`, the
//! same entry every service binary calls): hostile programs are stopped at a limit with an error
//! naming it, and the evaluators keep serving.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_jq::{Jq, JqError, JqLimits};
use serde_json::json;

fn jq(limits: JqLimits) -> Jq {
    Jq::new(
        PathBuf::from(env!("CARGO_BIN_EXE_berth-jq-test-evaluator")),
        limits,
    )
}

fn small() -> JqLimits {
    JqLimits {
        time: Duration::from_millis(1500),
        memory_bytes: 128 << 20,
        stack_bytes: 8 << 20,
        output_bytes: 1 << 20,
        evaluators: 2,
    }
}

#[tokio::test]
async fn programs_run_and_bad_ones_are_refused_at_check() {
    let jq = jq(JqLimits::default());
    let f = jq
        .check("{name: .metadata.name, n: (.items | length)}")
        .await
        .unwrap();
    let out = jq
        .run(&f, &json!({"metadata": {"name": "a"}, "items": [1, 2]}))
        .await
        .unwrap();
    assert_eq!(out, json!({"name": "a", "n": 2}));
    let many = jq.check(".items[]").await.unwrap();
    assert_eq!(
        jq.run(&many, &json!({"items": [1, 2]})).await.unwrap(),
        json!([1, 2])
    );
    let again = jq.check(".items[]").await.unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&many, &again),
        "one filter per source in use"
    );
    let e = jq.check(".[").await.unwrap_err();
    assert!(matches!(e, JqError::Compile { .. }), "{e}");
    assert!(
        e.to_string().contains("\".[\""),
        "the error names the program: {e}"
    );
    let failing = jq.check(".a + 1").await.unwrap();
    let e = jq.run(&failing, &json!({"a": "x"})).await.unwrap_err();
    assert!(matches!(e, JqError::Run { .. }), "{e}");
    let long = ".".repeat(70 * 1024);
    let e = jq.check(&long).await.unwrap_err().to_string();
    assert!(e.contains("over the limit of 65536"), "{e}");
}

#[tokio::test]
async fn endless_recursion_stops_at_the_depth_limit_and_evaluation_goes_on() {
    let jq = jq(small());
    let bomb = jq.check("def f: [f]; f").await.expect("it compiles");
    let e = jq.run(&bomb, &json!({})).await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, JqError::Limit { .. }), "{text}");
    assert!(
        text.contains("depth limit") && text.contains("8 MiB stack"),
        "{text}"
    );
    assert!(text.contains("def f: [f]; f"), "names the program: {text}");
    // Disabled: the next run fails at once, without an evaluator.
    let started = Instant::now();
    let again = jq.run(&bomb, &json!({})).await.unwrap_err().to_string();
    assert_eq!(again, text);
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    // Other programs still run.
    let ok = jq.check(".a").await.unwrap();
    assert_eq!(jq.run(&ok, &json!({"a": 1})).await.unwrap(), json!(1));
}

#[tokio::test]
async fn a_program_that_allocates_without_end_stops_at_the_memory_limit() {
    // Time enough to reach the memory limit on a busy machine.
    let jq = jq(JqLimits {
        time: Duration::from_secs(30),
        ..small()
    });
    let hog = jq.check("[range(1e10)] | length").await.unwrap();
    let e = jq.run(&hog, &json!(null)).await.unwrap_err().to_string();
    assert!(e.contains("memory limit") && e.contains("128 MiB"), "{e}");
    let ok = jq.check(".").await.unwrap();
    assert_eq!(jq.run(&ok, &json!([1])).await.unwrap(), json!([1]));
}

#[tokio::test]
async fn a_program_that_never_ends_stops_at_the_time_limit() {
    let jq = jq(JqLimits {
        time: Duration::from_millis(500),
        ..small()
    });
    let spin = jq.check("last(range(1e18))").await.unwrap();
    let started = Instant::now();
    let e = jq.run(&spin, &json!(null)).await.unwrap_err().to_string();
    assert!(e.contains("time limit") && e.contains("500ms"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let ok = jq.check(".").await.unwrap();
    assert_eq!(jq.run(&ok, &json!(2)).await.unwrap(), json!(2));
}

#[tokio::test]
async fn output_is_bounded_and_the_environment_is_empty() {
    let jq = jq(small());
    let big = jq.check("[range(1e6)]").await.unwrap();
    let e = jq.run(&big, &json!(null)).await.unwrap_err().to_string();
    assert!(e.contains("limit of 1048576 bytes"), "{e}");
    let env = jq.check("env | keys").await.unwrap();
    assert_eq!(
        jq.run(&env, &json!(null)).await.unwrap(),
        json!([]),
        "programs see none of the service's environment"
    );
}

#[tokio::test]
async fn evaluations_run_concurrently_on_a_bounded_pool() {
    let jq = jq(small());
    let f = jq.check(".n * 2").await.unwrap();
    let runs = (0..20).map(|n| {
        let (jq, f) = (jq.clone(), f.clone());
        async move { jq.run(&f, &json!({"n": n})).await.unwrap() }
    });
    let out = futures::future::join_all(runs).await;
    assert_eq!(out, (0..20).map(|n| json!(n * 2)).collect::<Vec<_>>());
}

#[tokio::test]
async fn the_time_limit_counts_evaluation_not_the_evaluators_start() {
    // An evaluator that takes twice the time limit to start, as on a loaded machine with a
    // cold page cache: the first program is not blamed for it.
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow-evaluator");
    std::fs::write(
        &slow,
        format!(
            "#!/bin/sh\nsleep 1\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_berth-jq-test-evaluator")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let jq = Jq::new(
        slow,
        JqLimits {
            time: Duration::from_millis(500),
            ..small()
        },
    );
    let f = jq.check(".a + 1").await.unwrap();
    assert_eq!(jq.run(&f, &json!({"a": 1})).await.unwrap(), json!(2));
}

#[tokio::test]
async fn a_program_that_is_not_an_evaluator_is_named_in_the_error() {
    // `echo` answers with its arguments, not with the ready frame.
    let jq = Jq::new(PathBuf::from("/bin/echo"), small());
    let e = jq.check(".").await.unwrap_err();
    assert!(
        matches!(e, JqError::Evaluator { .. }) && e.to_string().contains("evaluator"),
        "{e}"
    );
}
