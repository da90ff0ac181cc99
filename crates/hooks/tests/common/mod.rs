//! Helpers shared by the integration tests: real executable scripts in temp dirs.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_hooks::{Hook, HookConfig, HookKind, RunRequest};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Writes an executable script (mode 0755) and returns its path.
pub fn script(dir: &Path, rel: &str, body: &str) -> PathBuf {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create script dir");
    }
    std::fs::write(&path, body).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod script");
    path
}

/// A shell hook at `path` with an empty config, for run tests.
pub fn shell_hook(path: PathBuf) -> Hook {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Hook {
        name,
        path,
        kind: HookKind::Shell,
        config: HookConfig::default(),
    }
}

/// A request with harmless defaults and the given tmp dir.
pub fn request<'a>(hook: &'a Hook, tmp: &Path) -> RunRequest<'a> {
    RunRequest {
        hook,
        binding_context: json!([{"binding": "onStartup"}]),
        values: json!({}),
        config_values: json!({}),
        env: Vec::new(),
        timeout: Duration::from_secs(20),
        cancel: CancellationToken::new(),
        tmp_dir: Some(tmp.to_path_buf()),
        sandbox: None,
    }
}

/// Waits (bounded) until `path` exists with non-empty content, returning it.
pub async fn wait_for_file(path: &Path, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} did not appear within {within:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Live (non-zombie) processes whose process group is `pgid`, from /proc.
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|f| f.parse::<i32>().ok()) == Some(pgid)
            && fields.first() != Some(&"Z")
        {
            members.push(pid);
        }
    }
    members
}

/// Entries left in a directory.
pub fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

pub fn parse(text: &str) -> Value {
    serde_json::from_str(text).expect("valid JSON")
}

/// A module-sdk style batch binary, played by a shell script that dispatches on its arguments.
pub const BATCH_HOOK: &str = r#"#!/usr/bin/env -S sh # berth:batch-hook
case "$1 $2" in
  "hook list") echo "Found 2 items"; exit 0 ;;
  "hook config") cat <<'EOF'
{"version":"v1","has_settings_check":true,
 "hooks":[
  {"configVersion":"v1","metadata":{"name":"certs","path":"hooks/certs"},"beforeHelm":5,
   "kubernetes":[{"name":"secrets","kind":"Secret","executeHookOnEvent":false,"jqFilter":".data"}]},
  {"configVersion":"v1","metadata":{"name":"cleanup"},"schedule":[{"name":"nightly","crontab":"0 3 * * *"}]}],
 "readiness":{"configVersion":"v1","metadata":{"name":"readiness"},"schedule":[{"crontab":"* * * * * *"}]}}
EOF
  exit 0 ;;
  "hook run") echo "{\"op\":\"add\",\"path\":\"/ran\",\"value\":$3}" > "$VALUES_JSON_PATCH_PATH"; exit 0 ;;
  "hook ready") echo '{"op":"add","path":"/ready","value":true}' > "$VALUES_JSON_PATCH_PATH"; exit 0 ;;
  "hook check")
    if grep -q '"replicas":0' "$SETTINGS_PATH"; then
      echo 'starting check' >&2
      echo '{"valid":false,"message":"replicas must be positive","warnings":["deprecated field"]}' >&2
      exit 1
    fi
    exit 0 ;;
esac
echo "unexpected args: $*" >&2
exit 2
"#;
