//! Running hooks: the files they see, the outputs they write, and how
//! failures, timeouts and cancellation end them.

mod common;

use std::time::{Duration, Instant};

use berth_hooks::{HookKind, MetricOperation, ObjectOperation, RunError, run};
use common::{entries, live_group_members, parse, request, script, shell_hook, wait_for_file};
use serde_json::json;

#[tokio::test]
async fn hook_sees_binding_context_values_and_config_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tmp");
    let seen = dir.path().join("seen");
    let path = script(
        dir.path(),
        "hooks/inspect.py",
        &format!(
            "#!/usr/bin/env python3\nimport os, json\nout = {{}}\nfor var in ['BINDING_CONTEXT_PATH', 'VALUES_PATH', 'CONFIG_VALUES_PATH']:\n    out[var] = json.load(open(os.environ[var]))\nout['cwd'] = os.getcwd()\nout['args'] = len(os.sys.argv) - 1\nout['identity'] = os.environ.get('APPLICATION_NAME')\nout['inherited'] = 'PATH' in os.environ\nopen({seen:?}, 'w').write(json.dumps(out))\n",
            seen = seen.display().to_string()
        ),
    );
    let hook = shell_hook(path);
    let mut req = request(&hook, tmp.path());
    req.binding_context = json!([{"binding": "pods", "type": "Synchronization", "objects": []}]);
    req.values = json!({"replicas": 3});
    req.config_values = json!({"enabled": true});
    req.env = vec![("APPLICATION_NAME".into(), "demo".into())];
    run(req).await.expect("hook succeeds");

    let seen = parse(&std::fs::read_to_string(&seen).expect("hook wrote its findings"));
    assert_eq!(
        seen["BINDING_CONTEXT_PATH"],
        json!([{"binding": "pods", "type": "Synchronization", "objects": []}])
    );
    assert_eq!(seen["VALUES_PATH"], json!({"replicas": 3}));
    assert_eq!(seen["CONFIG_VALUES_PATH"], json!({"enabled": true}));
    let cwd = std::fs::canonicalize(dir.path().join("hooks")).expect("canonical hooks dir");
    assert_eq!(seen["cwd"], json!(cwd.to_string_lossy()));
    assert_eq!(seen["args"], 0);
    assert_eq!(seen["identity"], "demo");
    assert_eq!(seen["inherited"], true);
}

/// A hook inherits only an allow-listed part of berth's environment: PATH and the locale, not
/// berth's own variables (its tokens among them), nor anything else of the worker's.
#[tokio::test]
async fn hooks_see_an_allow_listed_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tmp");
    let seen = dir.path().join("seen");
    let path = script(
        dir.path(),
        "hooks/env.sh",
        &format!(
            "#!/bin/sh
env > '{}'
",
            seen.display()
        ),
    );
    let hook = shell_hook(path);
    let mut req = request(&hook, tmp.path());
    req.env = vec![("APPLICATION_NAME".into(), "demo".into())];
    run(req).await.expect("hook succeeds");
    let env = std::fs::read_to_string(&seen).expect("hook wrote its environment");
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    assert!(
        names.contains(&"PATH") && names.contains(&"APPLICATION_NAME"),
        "{names:?}"
    );
    assert!(
        names.contains(&"VALUES_PATH"),
        "the contract's files: {names:?}"
    );
    // The test process runs with cargo's and nextest's variables; none reaches the hook.
    assert!(
        std::env::var_os("CARGO_MANIFEST_DIR").is_some() || std::env::var_os("CARGO").is_some()
    );
    let leaked: Vec<&&str> = names
        .iter()
        .filter(|n| {
            n.starts_with("CARGO")
                || n.starts_with("NEXTEST")
                || n.starts_with("RUST")
                || n.starts_with("BERTH")
        })
        .collect();
    assert!(leaked.is_empty(), "leaked into the hook: {leaked:?}");
}

#[test]
fn the_inherited_environment_is_the_allow_list() {
    let vars = [
        ("PATH", "/bin"),
        ("LC_ALL", "C.UTF-8"),
        ("LC_", "x"),
        ("BERTH_TOKEN", "secret"),
        ("DATABASE_URL", "postgres://u:p@h/db"),
        ("AWS_SECRET_ACCESS_KEY", "k"),
    ]
    .map(|(k, v)| (std::ffi::OsString::from(k), std::ffi::OsString::from(v)));
    let kept: Vec<String> = berth_hooks::inherited_env(vars.into_iter())
        .into_iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    assert_eq!(kept, ["PATH", "LC_ALL"]);
}

#[tokio::test]
async fn values_patch_array_stream_and_empty_forms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "array",
            r#"echo '[{"op":"add","path":"/a","value":1},{"op":"remove","path":"/b"}]' > $VALUES_JSON_PATCH_PATH"#,
            2,
        ),
        (
            "stream",
            r#"echo '{"op":"add","path":"/a","value":1}' >> $VALUES_JSON_PATCH_PATH; echo '{"op":"replace","path":"/c","value":"x"}' >> $VALUES_JSON_PATCH_PATH"#,
            2,
        ),
        ("empty", "true", 0),
    ];
    for (name, body, expected) in cases {
        let hook = shell_hook(script(
            dir.path(),
            &format!("{name}.sh"),
            &format!("#!/bin/sh\n{body}\n"),
        ));
        let out = run(request(&hook, dir.path()))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out.values_patch.0.len(), expected, "{name}");
        assert!(out.config_values_patch.0.is_empty(), "{name}");
    }
    let hook = shell_hook(script(
        dir.path(),
        "apply.sh",
        "#!/bin/sh\necho '{\"op\":\"add\",\"path\":\"/x\",\"value\":42}' > $VALUES_JSON_PATCH_PATH\n",
    ));
    let out = run(request(&hook, dir.path()))
        .await
        .expect("hook succeeds");
    let mut values = json!({});
    json_patch::patch(&mut values, &out.values_patch).expect("patch applies");
    assert_eq!(values, json!({"x": 42}));
}

#[tokio::test]
async fn malformed_values_patch_names_the_file_and_hook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = shell_hook(script(
        dir.path(),
        "garbage.sh",
        "#!/bin/sh\necho 'not json' > $VALUES_JSON_PATCH_PATH\n",
    ));
    let err = run(request(&hook, dir.path()))
        .await
        .expect_err("bad patch");
    assert!(
        matches!(
            err,
            RunError::BadOutput {
                file: "VALUES_JSON_PATCH_PATH",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("garbage.sh"), "{err}");
}

#[tokio::test]
async fn kubernetes_operations_json_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = r#"#!/bin/sh
cat > $KUBERNETES_PATCH_PATH <<'EOF'
{"operation":"CreateOrUpdate","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns"}}}
{"operation":"Delete","apiVersion":"apps/v1","kind":"Deployment","namespace":"ns","name":"old"}
{"operation":"JQPatch","kind":"ConfigMap","namespace":"ns","name":"cm","jqFilter":".data.x = \"1\"","ignoreMissingObject":true}
EOF
"#;
    let hook = shell_hook(script(dir.path(), "ops.sh", body));
    let out = run(request(&hook, dir.path()))
        .await
        .expect("hook succeeds");
    let ops = &out.kubernetes_operations;
    assert_eq!(ops.len(), 3);
    assert!(
        matches!(&ops[0], ObjectOperation::CreateOrUpdate { object, .. } if object["metadata"]["name"] == "cm")
    );
    match &ops[1] {
        ObjectOperation::Delete { target } => {
            assert_eq!(target.api_version.as_deref(), Some("apps/v1"));
            assert_eq!(
                (target.kind.as_str(), target.name.as_str()),
                ("Deployment", "old")
            );
            assert_eq!(target.namespace.as_deref(), Some("ns"));
        }
        other => panic!("expected Delete, got {other:?}"),
    }
    assert!(
        matches!(&ops[2], ObjectOperation::JqPatch { ignore_missing_object: true, jq_filter, .. } if jq_filter == ".data.x = \"1\"")
    );
}

#[tokio::test]
async fn kubernetes_operations_yaml_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = r#"#!/bin/sh
cat > $KUBERNETES_PATCH_PATH <<'EOF'
operation: Create
object:
  apiVersion: v1
  kind: Secret
  metadata: {name: s}
---
operation: MergePatch
kind: Deployment
namespace: ns
name: web
subresource: status
mergePatch:
  status: {ready: true}
---
operation: DeleteInBackground
kind: Pod
name: p
EOF
"#;
    let hook = shell_hook(script(dir.path(), "yaml-ops.sh", body));
    let out = run(request(&hook, dir.path()))
        .await
        .expect("hook succeeds");
    let ops = &out.kubernetes_operations;
    assert_eq!(ops.len(), 3);
    assert!(
        matches!(&ops[0], ObjectOperation::Create { object, .. } if object["kind"] == "Secret")
    );
    assert!(
        matches!(&ops[1], ObjectOperation::MergePatch { target, merge_patch, .. }
        if target.subresource.as_deref() == Some("status") && merge_patch["status"]["ready"] == true)
    );
    assert!(
        matches!(&ops[2], ObjectOperation::DeleteInBackground { target } if target.name == "p")
    );
}

#[tokio::test]
async fn kubernetes_operation_with_unknown_key_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = "#!/bin/sh\necho '{\"operation\":\"Delete\",\"kind\":\"Pod\",\"name\":\"p\",\"namespce\":\"ns\"}' > $KUBERNETES_PATCH_PATH\n";
    let hook = shell_hook(script(dir.path(), "typo.sh", body));
    let err = run(request(&hook, dir.path()))
        .await
        .expect_err("unknown key rejected");
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            RunError::BadOutput {
                file: "KUBERNETES_PATCH_PATH",
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("typo.sh") && msg.contains("namespce") && msg.contains("document 0"),
        "{msg}"
    );
}

#[tokio::test]
async fn metrics_are_parsed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = r#"#!/bin/sh
echo '{"name":"hook_runs_total","action":"add","value":1,"labels":{"kind":"demo"}}' >> $METRICS_PATH
echo '{"name":"queue_depth","set":7}' >> $METRICS_PATH
echo '{"group":"certs","action":"expire"}' >> $METRICS_PATH
"#;
    let hook = shell_hook(script(dir.path(), "metrics.sh", body));
    let out = run(request(&hook, dir.path()))
        .await
        .expect("hook succeeds");
    assert_eq!(out.metrics.len(), 3);
    assert!(
        matches!(&out.metrics[0], MetricOperation::Add { name, value, labels, .. }
        if name == "hook_runs_total" && *value == 1.0 && labels["kind"] == "demo")
    );
    assert!(matches!(&out.metrics[1], MetricOperation::Set { value, .. } if *value == 7.0));
    assert_eq!(
        out.metrics[2],
        MetricOperation::Expire {
            group: "certs".into()
        }
    );

    let bad = shell_hook(script(
        dir.path(),
        "bad-metrics.sh",
        "#!/bin/sh\necho '{\"name\":\"x\",\"action\":\"explode\",\"value\":1}' > $METRICS_PATH\n",
    ));
    let err = run(request(&bad, dir.path()))
        .await
        .expect_err("unknown action");
    assert!(
        matches!(
            err,
            RunError::BadOutput {
                file: "METRICS_PATH",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn non_zero_exit_reports_code_and_output_tail_and_discards_outputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = "#!/bin/sh\necho 'starting'\necho '{\"op\":\"add\",\"path\":\"/x\",\"value\":1}' > $VALUES_JSON_PATCH_PATH\necho 'kubectl: connection refused' >&2\nexit 3\n";
    let hook = shell_hook(script(dir.path(), "fails.sh", body));
    let err = run(request(&hook, dir.path()))
        .await
        .expect_err("exit 3 fails");
    match &err {
        RunError::Exit {
            hook,
            code,
            output_tail,
        } => {
            assert_eq!(hook, "fails.sh");
            assert_eq!(*code, 3);
            assert!(
                output_tail.contains("starting") && output_tail.contains("connection refused"),
                "{output_tail}"
            );
        }
        other => panic!("expected Exit, got {other:?}"),
    }
    assert!(err.to_string().contains("connection refused"), "{err}");
}

#[tokio::test]
async fn large_output_does_not_deadlock_and_is_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 4 MiB on each stream, far beyond a pipe buffer; then a marker at the end of each stream
    // (the two pipes are read concurrently, so either may be appended last).
    let body = "#!/bin/sh\nhead -c 4194304 /dev/zero | tr '\\0' 'o'\nhead -c 4194304 /dev/zero | tr '\\0' 'e' >&2\necho END\necho END >&2\n";
    let hook = shell_hook(script(dir.path(), "loud.sh", body));
    let out = run(request(&hook, dir.path()))
        .await
        .expect("hook succeeds");
    assert!(out.output.len() <= berth_hooks::OUTPUT_TAIL_LIMIT);
    assert!(out.output.trim_end().ends_with("END"));
}

/// A hook that records its process group (its own pid) and a child's pid, then waits.
fn sleeper_body(pids: &std::path::Path, trap_term: bool) -> String {
    let trap = if trap_term { "trap '' TERM\n" } else { "" };
    format!(
        "#!/bin/bash\n{trap}sleep 1000 &\necho \"$$ $!\" > {}\nwait\n",
        pids.display()
    )
}

async fn pids_of(file: &std::path::Path) -> (i32, i32) {
    let text = wait_for_file(file, Duration::from_secs(10)).await;
    let mut parts = text
        .split_whitespace()
        .map(|p| p.parse::<i32>().expect("pid"));
    (
        parts.next().expect("pgid"),
        parts.next().expect("child pid"),
    )
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let hook = shell_hook(script(dir.path(), "hangs.sh", &sleeper_body(&pids, false)));
    let mut req = request(&hook, dir.path());
    req.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = run(req).await.expect_err("times out");
    assert!(
        matches!(err, RunError::Timeout { after, .. } if after == Duration::from_millis(500)),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let (pgid, child) = pids_of(&pids).await;
    assert!(
        live_group_members(pgid).is_empty(),
        "group {pgid} still has {:?}",
        live_group_members(pgid)
    );
    assert!(!live_group_members(pgid).contains(&child));
}

#[tokio::test]
async fn cancellation_kills_the_group_within_a_second() {
    for trap_term in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        let hook = shell_hook(script(
            dir.path(),
            "hangs.sh",
            &sleeper_body(&pids, trap_term),
        ));
        let req = request(&hook, dir.path());
        let cancel = req.cancel.clone();
        let hook_for_task = hook.clone();
        let tmp = dir.path().to_path_buf();
        let task = tokio::spawn(async move {
            let mut req = request(&hook_for_task, &tmp);
            req.cancel = cancel;
            run(req).await
        });
        let (pgid, _) = pids_of(&pids).await;
        assert!(
            !live_group_members(pgid).is_empty(),
            "hook is running before cancel"
        );
        let cancelled_at = Instant::now();
        req.cancel.cancel();
        let result = task.await.expect("task joins");
        let elapsed = cancelled_at.elapsed();
        assert!(
            matches!(result, Err(RunError::Cancelled { .. })),
            "{result:?}"
        );
        assert!(
            elapsed < Duration::from_secs(1),
            "took {elapsed:?} (trap_term={trap_term})"
        );
        assert!(
            live_group_members(pgid).is_empty(),
            "group {pgid} survived (trap_term={trap_term})"
        );
    }
}

#[tokio::test]
async fn background_children_do_not_outlive_a_successful_hook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    let body = format!(
        "#!/bin/bash\nsleep 1000 &\necho \"$$ $!\" > {}\nexit 0\n",
        pids.display()
    );
    let hook = shell_hook(script(dir.path(), "daemonizes.sh", &body));
    let started = Instant::now();
    run(request(&hook, dir.path()))
        .await
        .expect("hook succeeds");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "run waited on the background child"
    );
    let (pgid, _) = pids_of(&pids).await;
    assert!(live_group_members(pgid).is_empty());
}

#[tokio::test]
async fn temp_files_are_removed_after_success_and_failure() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tempfile::tempdir().expect("tempdir");
    let seen = dir.path().join("seen");
    let body = format!(
        "#!/bin/sh\nfor v in BINDING_CONTEXT_PATH VALUES_PATH CONFIG_VALUES_PATH VALUES_JSON_PATCH_PATH CONFIG_VALUES_JSON_PATCH_PATH KUBERNETES_PATCH_PATH METRICS_PATH; do\n  eval p=\\$$v; [ -f \"$p\" ] && echo \"$p\" >> {seen}\ndone\nexit ${{EXIT_CODE:-0}}\n",
        seen = seen.display()
    );
    let hook = shell_hook(script(dir.path(), "files.sh", &body));
    run(request(&hook, tmp.path()))
        .await
        .expect("hook succeeds");
    let listed = std::fs::read_to_string(&seen).expect("hook listed its files");
    assert_eq!(
        listed.lines().count(),
        7,
        "all seven files exist during the run: {listed}"
    );
    assert!(
        listed
            .lines()
            .all(|p| p.starts_with(&*tmp.path().to_string_lossy()))
    );
    assert!(
        entries(tmp.path()).is_empty(),
        "left behind: {:?}",
        entries(tmp.path())
    );

    let mut req = request(&hook, tmp.path());
    req.env = vec![("EXIT_CODE".into(), "1".into())];
    run(req).await.expect_err("exit 1");
    assert!(
        entries(tmp.path()).is_empty(),
        "left behind after failure: {:?}",
        entries(tmp.path())
    );
}

#[tokio::test]
async fn concurrent_runs_get_distinct_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = "#!/bin/sh\necho \"{\\\"op\\\":\\\"add\\\",\\\"path\\\":\\\"/who\\\",\\\"value\\\":\\\"$WHO\\\"}\" > $VALUES_JSON_PATCH_PATH\n";
    let hook = shell_hook(script(dir.path(), "who.sh", body));
    let runs = (0..4).map(|i| {
        let mut req = request(&hook, dir.path());
        req.env = vec![("WHO".into(), format!("run-{i}"))];
        run(req)
    });
    let outs = futures::future::join_all(runs).await;
    for (i, out) in outs.into_iter().enumerate() {
        let mut values = json!({});
        json_patch::patch(&mut values, &out.expect("hook succeeds").values_patch)
            .expect("patch applies");
        assert_eq!(values["who"], format!("run-{i}"));
    }
}

#[tokio::test]
async fn batch_hook_runs_with_hook_run_index_and_hook_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hooks = berth_hooks::discover(
        &{
            common::script(dir.path(), "hooks/batch", common::BATCH_HOOK);
            dir.path().join("hooks")
        },
        Duration::from_secs(20),
    )
    .await
    .expect("discovery succeeds");
    let second = hooks
        .iter()
        .find(|h| h.kind == HookKind::Batch { index: 1 })
        .expect("index 1");
    let out = run(request(second, dir.path()))
        .await
        .expect("batch hook runs");
    let mut values = json!({});
    json_patch::patch(&mut values, &out.values_patch).expect("patch applies");
    assert_eq!(values, json!({"ran": 1}));

    let ready = hooks
        .iter()
        .find(|h| h.kind == HookKind::BatchReadiness)
        .expect("readiness");
    let out = run(request(ready, dir.path()))
        .await
        .expect("readiness runs");
    let mut values = json!({});
    json_patch::patch(&mut values, &out.values_patch).expect("patch applies");
    assert_eq!(values, json!({"ready": true}));
}

#[tokio::test]
async fn missing_executable_is_a_spawn_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = shell_hook(dir.path().join("gone.sh"));
    let err = run(request(&hook, dir.path()))
        .await
        .expect_err("cannot spawn");
    assert!(matches!(err, RunError::Spawn { .. }), "{err}");
    assert!(err.to_string().contains("gone.sh"));
}

/// Runs a hook that replaces one of its output files as `replace` (a shell snippet using
/// `$F`, the file's path) and returns the run's error.
async fn output_file_replaced(var: &str, replace: &str) -> RunError {
    let dir = tempfile::tempdir().expect("tempdir");
    let body = format!("#!/bin/bash\nset -e\nF=\"${var}\"\nrm -f \"$F\"\n{replace}\n");
    let hook = shell_hook(script(dir.path(), "swap.sh", &body));
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(10), run(request(&hook, dir.path())))
        .await
        .expect("the run does not hang")
        .expect_err("refused");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    err
}

#[tokio::test]
async fn an_output_file_linked_to_dev_zero_fails_the_run() {
    let err = output_file_replaced("VALUES_JSON_PATCH_PATH", "ln -s /dev/zero \"$F\"").await;
    assert!(
        matches!(
            err,
            RunError::BadOutput {
                file: "VALUES_JSON_PATCH_PATH",
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("symbolic link") && text.contains("swap.sh"),
        "{text}"
    );
}

#[tokio::test]
async fn an_output_file_linked_to_a_regular_file_elsewhere_fails_the_run() {
    let err = output_file_replaced("METRICS_PATH", "ln -s /etc/hostname \"$F\"").await;
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

#[tokio::test]
async fn a_fifo_as_output_file_fails_the_run_instead_of_hanging() {
    let err = output_file_replaced("KUBERNETES_PATCH_PATH", "mkfifo \"$F\"").await;
    let text = err.to_string();
    assert!(
        text.contains("KUBERNETES_PATCH_PATH") && text.contains("a FIFO, not a regular file"),
        "{text}"
    );
}

#[tokio::test]
async fn a_directory_as_output_file_fails_the_run() {
    let err = output_file_replaced("CONFIG_VALUES_JSON_PATCH_PATH", "mkdir \"$F\"").await;
    assert!(
        err.to_string().contains("a directory, not a regular file"),
        "{err}"
    );
}

#[tokio::test]
async fn an_oversized_output_file_fails_the_run() {
    let err = output_file_replaced("VALUES_JSON_PATCH_PATH", "truncate -s 65M \"$F\"").await;
    assert!(err.to_string().contains("byte limit"), "{err}");
}

#[tokio::test]
async fn webhook_answers_are_read_from_their_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    // ADMISSION_RESPONSE_PATH is shell-operator's other name of VALIDATING_RESPONSE_PATH.
    let body = r#"#!/bin/sh
[ "$ADMISSION_RESPONSE_PATH" = "$VALIDATING_RESPONSE_PATH" ] || exit 3
echo '{"allowed":false,"message":"no"}' > $ADMISSION_RESPONSE_PATH
echo '{"failedMessage":"cannot"}' > $CONVERSION_RESPONSE_PATH
"#;
    let hook = shell_hook(script(dir.path(), "webhook.sh", body));
    let out = run(request(&hook, dir.path()))
        .await
        .expect("hook succeeds");
    assert_eq!(
        out.admission_response.trim(),
        r#"{"allowed":false,"message":"no"}"#
    );
    assert_eq!(
        out.conversion_response.trim(),
        r#"{"failedMessage":"cannot"}"#
    );
    let quiet = shell_hook(script(dir.path(), "quiet.sh", "#!/bin/sh\n"));
    let out = run(request(&quiet, dir.path()))
        .await
        .expect("hook succeeds");
    assert!(out.admission_response.is_empty() && out.conversion_response.is_empty());
}
