//! Discovery and config parsing against real executable hooks.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use berth_hooks::{
    ConfigAnswer, DiscoverError, HookKind, LifecycleBinding, discover, discover_all, from_answers,
    ordered,
};
use common::script;

const TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn shell_hooks_answer_yaml_and_json_configs() {
    let dir = tempfile::tempdir().expect("tempdir");
    script(
        dir.path(),
        "010-yaml.sh",
        "#!/bin/sh\nif [ \"$1\" = --config ]; then cat <<'EOF'\nconfigVersion: v1\nbeforeHelm: 10\nschedule:\n- name: every-ten\n  crontab: \"*/10 * * * * *\"\n  queue: slow\nkubernetes:\n- name: pods\n  apiVersion: v1\n  kind: Pod\n  executeHookOnEvent: [Added, Deleted]\n  labelSelector:\n    matchLabels: {app: web}\n  namespace:\n    nameSelector:\n      matchNames: [default]\nEOF\nexit 0; fi\n",
    );
    script(
        dir.path(),
        "sub/020-json.py",
        "#!/usr/bin/env python3\nimport sys, json\nif sys.argv[1:] == ['--config']:\n    print(json.dumps({'configVersion': 'v1', 'afterHelm': 5, 'onStartup': 1}))\n",
    );
    let hooks = discover(dir.path(), TIMEOUT)
        .await
        .expect("discovery succeeds");
    let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["010-yaml.sh", "sub/020-json.py"]);

    let yaml = &hooks[0];
    assert_eq!(yaml.kind, HookKind::Shell);
    assert_eq!(yaml.config.before_helm, Some(10.0));
    assert_eq!(yaml.config.schedule[0].name, "every-ten");
    assert_eq!(yaml.config.schedule[0].queue_name(), "slow");
    let pods = &yaml.config.kubernetes[0];
    assert_eq!((pods.name.as_str(), pods.kind.as_str()), ("pods", "Pod"));
    assert_eq!(pods.execute_hook_on_event.len(), 2);
    assert_eq!(
        pods.label_selector.as_ref().map(|s| s.to_query()),
        Some("app=web".to_owned())
    );
    assert_eq!(
        yaml.binding_summaries(),
        [
            "beforeHelm: 10",
            "schedule every-ten: */10 * * * * *",
            "kubernetes pods: v1/Pod"
        ]
    );

    let json = &hooks[1];
    assert_eq!(
        (json.config.after_helm, json.config.on_startup),
        (Some(5.0), Some(1.0))
    );
    assert!(json.path.is_absolute());
}

#[tokio::test]
async fn skips_non_executables_hidden_lib_and_venv() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = "#!/bin/sh\necho '{\"onStartup\": 1}'\n";
    script(dir.path(), "a.sh", config);
    script(dir.path(), "lib/helper.sh", "#!/bin/sh\nexit 1\n");
    script(dir.path(), "venv/bin/python", "#!/bin/sh\nexit 1\n");
    script(dir.path(), ".git/hook.sh", "#!/bin/sh\nexit 1\n");
    let readme = script(dir.path(), "README.md", "not a hook");
    std::fs::set_permissions(&readme, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let hooks = discover(dir.path(), TIMEOUT)
        .await
        .expect("discovery succeeds");
    let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["a.sh"]);
}

#[tokio::test]
async fn missing_hooks_dir_means_no_hooks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hooks = discover(&dir.path().join("hooks"), TIMEOUT)
        .await
        .expect("no dir is fine");
    assert!(hooks.is_empty());
}

#[tokio::test]
async fn unknown_key_fails_with_path_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    script(
        dir.path(),
        "ok.sh",
        "#!/bin/sh\necho '{\"onStartup\": 1}'\n",
    );
    script(
        dir.path(),
        "bad.sh",
        "#!/bin/sh\necho 'configVersion: v1\nbeforeHelm: 1\nonStartUp: 2'\n",
    );
    let err = discover(dir.path(), TIMEOUT)
        .await
        .expect_err("unknown key is rejected");
    let msg = err.to_string();
    assert!(matches!(err, DiscoverError::Config { .. }), "{msg}");
    assert!(msg.contains("bad.sh") && msg.contains("onStartUp"), "{msg}");
}

#[tokio::test]
async fn bad_crontab_fails_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    script(
        dir.path(),
        "cron.sh",
        "#!/bin/sh\necho '{\"schedule\": [{\"crontab\": \"* * * *\"}]}'\n",
    );
    let msg = discover(dir.path(), TIMEOUT)
        .await
        .expect_err("4 fields rejected")
        .to_string();
    assert!(
        msg.contains("cron.sh") && msg.contains("schedule[0].crontab") && msg.contains("4 fields"),
        "{msg}"
    );
}

#[tokio::test]
async fn failing_config_query_reports_exit_code_and_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    script(
        dir.path(),
        "broken.sh",
        "#!/bin/sh\necho 'jq: command not found' >&2\nexit 127\n",
    );
    let err = discover(dir.path(), TIMEOUT)
        .await
        .expect_err("failing --config is an error");
    let msg = err.to_string();
    assert!(
        matches!(err, DiscoverError::Query { code: 127, .. }),
        "{msg}"
    );
    assert!(
        msg.contains("broken.sh") && msg.contains("jq: command not found"),
        "{msg}"
    );
}

#[tokio::test]
async fn config_query_timeout_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    script(dir.path(), "slow.sh", "#!/bin/sh\nsleep 30\n");
    let err = discover(dir.path(), Duration::from_millis(300))
        .await
        .expect_err("times out");
    assert!(matches!(err, DiscoverError::Timeout { .. }), "{err}");
}

#[tokio::test]
async fn ordering_by_number_then_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, order) in [("c.sh", 5), ("a.sh", 10), ("b.sh", 5)] {
        script(
            dir.path(),
            name,
            &format!("#!/bin/sh\necho '{{\"beforeHelm\": {order}}}'\n"),
        );
    }
    script(dir.path(), "z.sh", "#!/bin/sh\necho '{\"afterHelm\": 1}'\n");
    let hooks = discover(dir.path(), TIMEOUT)
        .await
        .expect("discovery succeeds");
    let order: Vec<&str> = ordered(&hooks, LifecycleBinding::BeforeHelm)
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(order, ["b.sh", "c.sh", "a.sh"]);
    let after: Vec<&str> = ordered(&hooks, LifecycleBinding::AfterHelm)
        .iter()
        .map(|h| h.name.as_str())
        .collect();
    assert_eq!(after, ["z.sh"]);
}

#[tokio::test]
async fn batch_hook_is_discovered_through_hook_list_and_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let batch = script(dir.path(), "batch", common::BATCH_HOOK);
    script(
        dir.path(),
        "plain",
        "#!/bin/sh\n[ \"$1\" = --config ] && echo '{\"afterHelm\": 1}'\nexit 0\n",
    );
    let found = discover_all(dir.path(), TIMEOUT, None)
        .await
        .expect("discovery succeeds");
    let names: Vec<&str> = found.hooks.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "batch:certs:0",
            "batch:cleanup:1",
            "batch-readiness",
            "plain"
        ]
    );
    assert_eq!(found.hooks[0].kind, HookKind::Batch { index: 0 });
    assert_eq!(found.hooks[2].kind, HookKind::BatchReadiness);
    assert_eq!(found.hooks[3].kind, HookKind::Shell);
    assert_eq!(found.settings_check.as_deref(), Some(batch.as_path()));
    let secrets = &found.hooks[0].config.kubernetes[0];
    assert_eq!(secrets.group.as_deref(), Some("main"));
    assert!(secrets.execute_hook_on_event.is_empty());
    assert!(!secrets.keep_full_objects_in_memory);
}

/// What one worker's discovery recorded rebuilds the same hooks on another worker's copy of
/// the package without running anything; answers that are not that directory's are refused.
#[tokio::test]
async fn recorded_answers_rebuild_the_discovery_without_running_hooks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("ran");
    script(dir.path(), "batch", common::BATCH_HOOK);
    script(
        dir.path(),
        "plain",
        &format!(
            "#!/bin/sh\necho \"$@\" >> {}\n[ \"$1\" = --config ] && echo '{{\"afterHelm\": 1}}'\nexit 0\n",
            log.display()
        ),
    );
    let found = discover_all(dir.path(), TIMEOUT, None)
        .await
        .expect("discovery succeeds");
    assert_eq!(
        found
            .answers
            .iter()
            .map(|a| (a.path.as_str(), a.batch))
            .collect::<Vec<_>>(),
        [("batch", true), ("plain", false)]
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "--config\n");

    let again = from_answers(dir.path(), found.answers.clone()).expect("the answers fit");
    assert_eq!(again, found);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "--config\n",
        "nothing ran again"
    );

    let elsewhere = tempfile::tempdir().expect("tempdir");
    let missing = from_answers(elsewhere.path(), found.answers.clone()).unwrap_err();
    assert!(
        missing.to_string().contains("plain") || missing.to_string().contains("batch"),
        "{missing}"
    );
    for path in ["../batch", "/etc/passwd", ""] {
        let outside = vec![ConfigAnswer {
            path: path.to_owned(),
            batch: false,
            output: "{}".to_owned(),
        }];
        assert!(
            from_answers(dir.path(), outside).is_err(),
            "{path:?} is not under the hooks directory"
        );
    }
    let broken = vec![ConfigAnswer {
        path: "plain".to_owned(),
        batch: false,
        output: "{\"beforeHelm\": \"soon\"}".to_owned(),
    }];
    let e = from_answers(dir.path(), broken).unwrap_err();
    assert!(matches!(e, DiscoverError::Config { .. }), "{e}");
}

#[tokio::test]
async fn two_settings_checks_are_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    script(dir.path(), "one", common::BATCH_HOOK);
    script(dir.path(), "two", common::BATCH_HOOK);
    let err = discover_all(dir.path(), TIMEOUT, None)
        .await
        .expect_err("only one settings check");
    assert!(
        matches!(err, DiscoverError::SecondSettingsCheck { .. }),
        "{err}"
    );
}

/// A shell hook without an extension that treats any argument but `--config` as "run" (as
/// some secret-copying hooks do) is never run during discovery: only compiled executables and
/// scripts marked as batch hooks are asked `hook list`.
#[tokio::test]
async fn extension_less_shell_hooks_are_not_run_with_hook_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work-done");
    script(
        dir.path(),
        "hooks/copier",
        &format!(
            "#!/bin/sh\nif [ \"$1\" = --config ]; then echo '{{\"configVersion\":\"v1\",\"onStartup\":1}}'; exit 0; fi\necho \"$*\" >> '{}'\n",
            work.display()
        ),
    );
    let hooks = discover(&dir.path().join("hooks"), TIMEOUT)
        .await
        .expect("discovery succeeds");
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].kind, HookKind::Shell);
    assert!(
        !work.exists(),
        "discovery ran the hook: {:?}",
        std::fs::read_to_string(&work)
    );
}
