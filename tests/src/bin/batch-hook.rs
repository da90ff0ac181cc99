//! A module-sdk style batch hook for the hook corpus: one executable serving several hooks.
//!
//! - `hook list` prints `Found 2 items` (how discovery recognises a batch binary);
//! - `hook config` prints the hooks' configs in module-sdk's shape (`{"version":"v1","hooks":[…]}`);
//! - `hook run N` runs hook N with the usual files (`BINDING_CONTEXT_PATH`, `VALUES_JSON_PATCH_PATH`).
//!
//! Hook 0 (`startup`) is bound to onStartup and records `/batchStartup`. Hook 1 (`cms`) watches
//! ConfigMaps labelled `app=batch`; module-sdk bindings share the group `main`, so every run gets
//! a Group context with the binding's snapshot, and the hook records the sorted names as
//! `/batchCms`.

use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::{Value, json};

fn config() -> Value {
    json!({
        "version": "v1",
        "hooks": [
            {"configVersion": "v1", "metadata": {"name": "startup", "path": "hooks/batch-hook"}, "onStartup": 1},
            {"configVersion": "v1", "metadata": {"name": "cms", "path": "hooks/batch-hook"},
             "kubernetes": [{"name": "cms", "kind": "ConfigMap", "jqFilter": ".metadata.name",
                             "labelSelector": {"matchLabels": {"app": "batch"}}}]}
        ]
    })
}

fn env_path(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set"))
}

fn run(index: &str) -> anyhow::Result<()> {
    let contexts: Value =
        serde_json::from_str(&std::fs::read_to_string(env_path("BINDING_CONTEXT_PATH")?)?)
            .context("BINDING_CONTEXT_PATH is not JSON")?;
    let patch = match index {
        "0" => json!([{"op": "add", "path": "/batchStartup", "value": true}]),
        "1" => {
            let last = contexts
                .as_array()
                .and_then(|a| a.last())
                .context("no binding context")?;
            if last["type"] != "Group" || last["groupName"] != "main" {
                bail!("expected a Group context of group main, got {last}");
            }
            let mut names: Vec<&str> = last["snapshots"]["cms"]
                .as_array()
                .context("the Group context lacks the cms snapshot")?
                .iter()
                .filter_map(|o| o["filterResult"].as_str())
                .collect();
            names.sort_unstable();
            json!([{"op": "add", "path": "/batchCms", "value": names.join(",")}])
        }
        other => bail!("no hook {other}"),
    };
    std::fs::write(env_path("VALUES_JSON_PATCH_PATH")?, patch.to_string())?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["hook", "list"] => {
            println!("Found 2 items");
            Ok(())
        }
        ["hook", "config"] => {
            println!("{}", config());
            Ok(())
        }
        ["hook", "run", index] => run(index),
        _ => Err(anyhow::anyhow!("usage: batch-hook hook list|config|run N")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("batch-hook: {e:#}");
            ExitCode::FAILURE
        }
    }
}
