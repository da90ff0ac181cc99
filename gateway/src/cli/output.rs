//! How packages are printed.

use berth_proto::v1;
use serde_json::{Value, json};

fn timestamp(t: &Option<prost_types::Timestamp>) -> Value {
    t.as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, t.nanos as u32))
        .map(|t| Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
        .unwrap_or(Value::Null)
}

/// A package as YAML, for `berth get`.
pub fn package_yaml(p: &v1::Package) -> String {
    let r = p.r#ref.clone().unwrap_or_default();
    let kind = if r.kind == v1::PackageKind::Module as i32 {
        "Module"
    } else {
        "App"
    };
    let mut doc = json!({
        "key": p.key,
        "kind": kind,
        "name": r.name,
        "namespace": r.namespace,
        "package": p.package,
        "version": p.version,
        "repository": p.repository,
        "generation": p.generation,
        "observedGeneration": p.observed_generation,
        "phase": p.phase,
        "enabled": enabled(p).is_none(),
        "lastError": p.last_error,
        "conditions": p.conditions.iter().map(|c| json!({
            "type": c.r#type, "status": c.status, "reason": c.reason, "message": c.message,
            "observedGeneration": c.observed_generation, "lastTransitionTime": timestamp(&c.last_transition_time),
        })).collect::<Vec<_>>(),
        "settings": berth_proto::json::from_opt_struct(p.settings.as_ref()),
        "settingsVersion": p.settings_version,
        "values": berth_proto::json::from_opt_struct(p.values.as_ref()),
        "hooks": p.hooks.iter().map(|h| json!({
            "name": h.name, "bindings": h.bindings, "runs": h.runs,
            "lastRun": timestamp(&h.last_run), "lastError": h.last_error,
        })).collect::<Vec<_>>(),
    });
    if let Some(fields) = doc.as_object_mut()
        && !p.resolved_version.is_empty()
        && p.resolved_version != p.version
    {
        fields.insert("resolvedVersion".into(), json!(p.resolved_version));
    }
    if let Some(fields) = doc.as_object_mut() {
        if !p.owner.is_empty() {
            fields.insert("owner".into(), json!(p.owner));
        }
        if p.suspended {
            fields.insert("suspended".into(), json!(true));
        }
    }
    if let (Some(why), Some(fields)) = (enabled(p), doc.as_object_mut()) {
        fields.insert("notEnabledBecause".into(), Value::String(why));
    }
    serde_saphyr::to_string(&doc)
        .unwrap_or_else(|e| format!("# cannot render as YAML: {e}\n{doc:#}"))
}

/// The settings a conversion produced, for `berth validate --settings-version`.
pub fn converted_settings_yaml(from: u32, to: u32, settings: &prost_types::Struct) -> String {
    let doc = json!({
        "convertedFrom": from,
        "settingsVersion": to,
        "settings": berth_proto::json::from_struct(settings),
    });
    serde_saphyr::to_string(&doc)
        .unwrap_or_else(|e| format!("# cannot render as YAML: {e}\n{doc:#}"))
}

/// Why the scheduler has not enabled the package (from its `RequirementsMet` condition);
/// `None` when it is enabled.
fn enabled(p: &v1::Package) -> Option<String> {
    match p.conditions.iter().find(|c| c.r#type == "RequirementsMet") {
        Some(c) if c.status == "True" => None,
        Some(c) => Some(format!("{}: {}", c.reason, c.message)),
        None => Some("NotLoaded: requirements are checked once the package is loaded".into()),
    }
}

fn ready(p: &v1::Package) -> &str {
    p.conditions
        .iter()
        .find(|c| c.r#type == "Ready")
        .map(|c| c.status.as_str())
        .unwrap_or("Unknown")
}

/// `berth list`.
pub fn table(packages: &[v1::Package]) -> String {
    let mut rows = vec![[
        "KEY".to_owned(),
        "PACKAGE".into(),
        "VERSION".into(),
        "GENERATION".into(),
        "PHASE".into(),
        "READY".into(),
    ]];
    for p in packages {
        rows.push([
            p.key.clone(),
            p.package.clone(),
            match p.resolved_version.as_str() {
                "" => p.version.clone(),
                v if v == p.version => p.version.clone(),
                v => format!("{} ({v})", p.version),
            },
            format!("{}/{}", p.observed_generation, p.generation),
            p.phase.clone(),
            ready(p).to_owned(),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
                + "\n"
        })
        .collect()
}

/// One progress line of `--wait`.
pub fn progress(p: &v1::Package) -> String {
    let pending: Vec<String> = p
        .conditions
        .iter()
        .filter(|c| c.status != "True" && c.observed_generation == p.generation)
        .map(|c| {
            if c.message.is_empty() {
                format!("{}={}", c.r#type, c.status)
            } else {
                format!("{}={} ({})", c.r#type, c.status, c.message)
            }
        })
        .collect();
    let mut line = format!("{}: generation {} {}", p.key, p.generation, p.phase);
    if !pending.is_empty() {
        line.push_str(&format!(" — {}", pending.join(", ")));
    }
    line
}

/// What holds a removal, when the package says (`Ready=False RemoveBlocked`, naming the
/// objects and their finalizers).
pub fn removal_held(p: &v1::Package) -> Option<String> {
    p.conditions
        .iter()
        .find(|c| c.r#type == "Ready" && c.status == "False" && c.reason == "RemoveBlocked")
        .map(|c| c.message.clone())
}

/// `berth validate`'s answer: the verdict, the settings check's warnings, and the plan, one
/// object per line (`create`, `update (spec, data)`, `delete`, `unchanged`).
pub fn validation(answer: &v1::ValidateSettingsResponse) -> String {
    let mut out = String::new();
    if answer.deferred {
        out.push_str(&format!(
            "valid against the settings schema; not checked further: {}\n",
            answer.deferred_reason
        ));
    } else {
        out.push_str("valid\n");
    }
    for warning in &answer.warnings {
        out.push_str(&format!("warning: {warning}\n"));
    }
    if answer.deferred {
        return out;
    }
    if answer.plan.is_empty() {
        out.push_str("plan: no objects\n");
        return out;
    }
    out.push_str("plan:\n");
    for change in &answer.plan {
        let action = match change.action() {
            v1::PlanAction::Create => "create".to_owned(),
            v1::PlanAction::Update => format!("update ({})", change.changed.join(", ")),
            v1::PlanAction::Delete => "delete".to_owned(),
            v1::PlanAction::Unchanged => "unchanged".to_owned(),
            v1::PlanAction::Unspecified => "?".to_owned(),
        };
        let object = match change.namespace.as_str() {
            "" => format!("{}/{}", change.kind, change.name),
            ns => format!("{}/{} -n {ns}", change.kind, change.name),
        };
        out.push_str(&format!("  {action:<10} {} {object}\n", change.api_version));
    }
    out
}
