//! `hook check` of a batch binary.

mod common;

use std::time::Duration;

use berth_hooks::{RunError, SettingsCheckRequest, check_settings};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn req<'a>(exe: &'a std::path::Path, settings: &'a serde_json::Value) -> SettingsCheckRequest<'a> {
    SettingsCheckRequest {
        executable: exe,
        settings,
        env: Vec::new(),
        timeout: Duration::from_secs(20),
        cancel: CancellationToken::new(),
        tmp_dir: None,
        sandbox: None,
    }
}

#[tokio::test]
async fn valid_and_rejected_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = common::script(dir.path(), "batch", common::BATCH_HOOK);
    let ok = json!({"replicas": 2});
    let verdict = check_settings(req(&exe, &ok)).await.expect("check runs");
    assert!(verdict.valid);

    let bad = json!({"replicas": 0});
    let verdict = check_settings(req(&exe, &bad)).await.expect("check runs");
    assert!(!verdict.valid);
    assert_eq!(
        verdict.message.as_deref(),
        Some("replicas must be positive")
    );
    assert_eq!(verdict.warnings, ["deprecated field"]);
}

#[tokio::test]
async fn crash_without_result_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = common::script(
        dir.path(),
        "crashy",
        "#!/bin/sh\necho 'panic: nil map' >&2\nexit 2\n",
    );
    let settings = json!({});
    let err = check_settings(req(&exe, &settings))
        .await
        .expect_err("no verdict");
    assert!(matches!(err, RunError::Exit { code: 2, .. }), "{err}");
    assert!(err.to_string().contains("panic: nil map"), "{err}");
}
