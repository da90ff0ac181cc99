//! Server-side apply and managed-fields bookkeeping.
//!
//! Semantics follow the Kubernetes documentation for server-side apply:
//! - an apply makes the applying manager own exactly the fields in its configuration;
//! - fields it owned before and no longer sets are removed, unless another manager
//!   also owns them;
//! - setting a field another manager owns to a *different* value is a conflict (409),
//!   unless `force`, which moves ownership to the applier;
//! - setting it to the same value shares ownership;
//! - ordinary updates (create, PUT, non-apply PATCH) give the updater ownership of the
//!   fields whose values they changed, with operation `Update`.
//!
//! Known differences from the real structured-merge-diff: list types come from a small
//! merge-key table (see `merge_keys`) instead of OpenAPI schemas, and sets of scalars
//! (`listType=set`) are treated as atomic lists.

use serde_json::{Map, Value, json};

use crate::fieldset::{
    FieldPath, FieldSet, PathElem, all_keyed, display_path, get_path, item_key, list_key,
    remove_path,
};
use crate::status::ApiError;

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

impl ManagedEntry {
    fn same_owner(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.fields.to_fields_v1(),
        });
        if !self.subresource.is_empty() {
            v["subresource"] = Value::String(self.subresource.clone());
        }
        v
    }
}

/// Reads `metadata.managedFields` of an object; malformed entries are dropped, as the
/// apiserver resets unparseable managed fields rather than failing the request.
pub fn read_entries(object: &Value) -> Vec<ManagedEntry> {
    let Some(items) = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|e| {
            Some(ManagedEntry {
                manager: e.get("manager")?.as_str()?.to_string(),
                operation: e.get("operation")?.as_str()?.to_string(),
                api_version: e
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                time: e
                    .get("time")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                subresource: e
                    .get("subresource")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                fields: FieldSet::from_fields_v1(e.get("fieldsV1")?),
            })
        })
        .collect()
}

/// Seconds since the epoch of an entry's `time`; an absent or unparseable time counts as 0,
/// as the apiserver treats a nil time.
fn entry_seconds(e: &ManagedEntry) -> i64 {
    chrono::DateTime::parse_from_rfc3339(&e.time).map_or(0, |t| t.timestamp())
}

/// Writes the entries back, dropping managers that own nothing any more, in the apiserver's
/// order: by operation (`Apply` before `Update`), then time in whole seconds (older first),
/// then manager, apiVersion and subresource.
pub fn write_entries(object: &mut Value, mut entries: Vec<ManagedEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|p, q| {
        p.operation
            .cmp(&q.operation)
            .then_with(|| entry_seconds(p).cmp(&entry_seconds(q)))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.cmp(&q.subresource))
    });
    let list: Vec<Value> = entries.iter().map(ManagedEntry::to_json).collect();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Who is applying, and how.
pub struct ApplyRequest<'a> {
    pub manager: &'a str,
    pub force: bool,
    /// Built-in kinds get merge keys for their well-known lists; custom kinds do not.
    pub builtin: bool,
    /// `"status"` for an apply to the status subresource, empty otherwise.
    pub subresource: &'a str,
    pub api_version: &'a str,
    pub now: &'a str,
}

/// Applies `config` over `live` (None when the object does not exist yet) and returns
/// the merged object with updated managedFields. Server-owned metadata (uid,
/// resourceVersion, timestamps) is left for the store to fill in.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    req: &ApplyRequest<'_>,
) -> Result<Value, ApiError> {
    let config = strip_server_fields(config);
    let empty = json!({});
    let live_obj = live.unwrap_or(&empty);
    let mut entries = read_entries(live_obj);
    let new_set = FieldSet::of_object(&config, req.builtin);

    let conflicts = find_conflicts(live_obj, &config, &new_set, &entries, req);
    if !conflicts.is_empty() {
        if !req.force {
            return Err(conflict_error(&conflicts));
        }
        for (path, manager) in &conflicts {
            for e in entries.iter_mut().filter(|e| &e.manager == manager) {
                e.fields.0.remove(path);
            }
        }
    }

    let mut merged = live.cloned().unwrap_or_else(|| json!({}));
    let mine = entries
        .iter()
        .position(|e| e.same_owner(req.manager, "Apply", req.subresource));
    if let Some(i) = mine {
        let dropped: Vec<FieldPath> = entries[i]
            .fields
            .0
            .difference(&new_set.0)
            .cloned()
            .collect();
        for path in dropped.iter().rev() {
            let owned_elsewhere = entries
                .iter()
                .enumerate()
                .any(|(j, e)| j != i && e.fields.0.iter().any(|p| p.starts_with(path)));
            if !owned_elsewhere {
                remove_path(&mut merged, path);
            }
        }
    }
    merge_config(&mut merged, &config, &mut Vec::new(), req.builtin);

    let entry = ManagedEntry {
        manager: req.manager.to_string(),
        operation: "Apply".into(),
        api_version: req.api_version.to_string(),
        time: req.now.to_string(),
        subresource: req.subresource.to_string(),
        fields: new_set,
    };
    match mine {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    write_entries(&mut merged, entries);
    Ok(merged)
}

/// Fields of `config` owned by another manager and set here to a different value.
fn find_conflicts(
    live: &Value,
    config: &Value,
    new_set: &FieldSet,
    entries: &[ManagedEntry],
    req: &ApplyRequest<'_>,
) -> Vec<(FieldPath, String)> {
    let mut conflicts = Vec::new();
    for e in entries
        .iter()
        .filter(|e| !e.same_owner(req.manager, "Apply", req.subresource))
    {
        for path in e.fields.0.intersection(&new_set.0) {
            if matches!(path.last(), Some(PathElem::Key(_))) {
                continue;
            }
            if get_path(live, path) != get_path(config, path) {
                conflicts.push((path.clone(), e.manager.clone()));
            }
        }
    }
    conflicts
}

fn conflict_error(conflicts: &[(FieldPath, String)]) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(p, m)| {
            json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with \"{m}\""),
                "field": display_path(p),
            })
        })
        .collect();
    // As structured-merge-diff words it: one conflict on one line, several grouped by
    // manager (managers sorted, each path on a line of its own).
    let detail = match conflicts {
        [(p, m)] => format!("conflict with \"{m}\": {}", display_path(p)),
        _ => {
            let mut by_manager: std::collections::BTreeMap<&str, Vec<String>> =
                std::collections::BTreeMap::new();
            for (p, m) in conflicts {
                by_manager.entry(m).or_default().push(display_path(p));
            }
            by_manager
                .iter()
                .map(|(m, paths)| {
                    let lines: Vec<String> = paths.iter().map(|p| format!("\n- {p}")).collect();
                    format!("conflicts with \"{m}\":{}", lines.concat())
                })
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    let noun = if conflicts.len() == 1 {
        "conflict"
    } else {
        "conflicts"
    };
    ApiError::apply_conflict(
        format!("Apply failed with {} {noun}: {detail}", conflicts.len()),
        causes,
    )
}

/// Server-set metadata in an apply configuration is ignored, except resourceVersion,
/// which the store checks as a precondition before calling us.
fn strip_server_fields(config: &Value) -> Value {
    let mut c = config.clone();
    if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "managedFields",
            "uid",
            "creationTimestamp",
            "generation",
            "resourceVersion",
            "deletionTimestamp",
            "selfLink",
        ] {
            meta.remove(f);
        }
    }
    c
}

/// Merges an apply configuration into the live object: maps field by field, keyed lists
/// item by item, everything else replaced. An explicit null removes the field.
fn merge_config(live: &mut Value, config: &Value, names: &mut Vec<String>, builtin: bool) {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) => {
            for (k, v) in c {
                if v.is_null() {
                    l.remove(k);
                    continue;
                }
                names.push(k.clone());
                match l.get_mut(k) {
                    Some(existing) => merge_config(existing, v, names, builtin),
                    None => {
                        l.insert(k.clone(), v.clone());
                    }
                }
                names.pop();
            }
        }
        (Value::Array(l), Value::Array(c)) => {
            match list_key(names, builtin).filter(|k| all_keyed(l, k) && all_keyed(c, k)) {
                Some(key) => {
                    for item in c {
                        let wanted = item_key(item, key);
                        match l.iter_mut().find(|i| item_key(i, key) == wanted) {
                            Some(existing) => merge_config(existing, item, names, builtin),
                            None => l.push(item.clone()),
                        }
                    }
                }
                None => *l = c.clone(),
            }
        }
        (l, c) => *l = c.clone(),
    }
}

/// Fields of built-in kinds that are Go maps or lists (pointers, for `rollingUpdate`): an
/// object without them has none, so a write that adds one changes the field itself.
const MAP_FIELDS: &[&str] = &[
    "labels",
    "annotations",
    "data",
    "binaryData",
    "matchLabels",
    "nodeSelector",
    "rollingUpdate",
    "ownerReferences",
];

/// Records an ordinary (non-apply) write: `manager` takes ownership of every field whose
/// value changed, other managers lose those fields and any field that no longer exists.
pub fn track_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    builtin: bool,
    subresource: &str,
    api_version: &str,
    now: &str,
) {
    let empty = json!({});
    let old = old.unwrap_or(&empty);
    let mut entries = read_entries(old);
    let all = FieldSet::of_object(new, builtin);
    let mut changed: Vec<FieldPath> = all
        .0
        .iter()
        .filter(|p| get_path(old, p) != get_path(new, p) || get_path(old, p).is_none())
        .cloned()
        .collect();
    // A map or list the write brought into existence is itself a changed field (`.` in
    // fieldsV1), as structured-merge-diff's comparison reports it. Struct fields that a Go
    // object always has (metadata, spec, ...) are never absent, so only maps and lists
    // count for built-in kinds; custom resources have no such structs.
    let mut created: Vec<FieldPath> = Vec::new();
    for p in &changed {
        for len in 1..p.len() {
            let prefix = &p[..len];
            let qualifies = match &prefix[len - 1] {
                PathElem::Key(_) => false,
                PathElem::Field(name) => {
                    MAP_FIELDS.contains(&name.as_str())
                        || (!builtin && prefix[0] != PathElem::Field("metadata".into()))
                }
            };
            if qualifies
                && get_path(old, prefix).is_none()
                && get_path(new, prefix).is_some_and(|v| v.is_object() || v.is_array())
                && !created.iter().any(|c| c.as_slice() == prefix)
            {
                created.push(prefix.to_vec());
            }
        }
    }
    changed.extend(created);
    // A new owner reference is owned as a whole (its fields are not listed), as
    // kube-apiserver records it.
    changed.retain(|p| {
        !(p.len() > 3
            && p[0] == PathElem::Field("metadata".into())
            && p[1] == PathElem::Field("ownerReferences".into())
            && get_path(old, &p[..3]).is_none())
    });
    for e in entries.iter_mut() {
        e.fields
            .0
            .retain(|p| get_path(new, p).is_some() && !changed.contains(p));
    }
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.same_owner(manager, "Update", subresource))
        {
            Some(e) => {
                e.fields.0.extend(changed);
                e.time = now.to_string();
            }
            None => entries.push(ManagedEntry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                time: now.to_string(),
                subresource: subresource.to_string(),
                fields: FieldSet(changed.into_iter().collect()),
            }),
        }
    }
    write_entries(new, entries);
}

/// Keeps only `status` (plus identity) of an apply configuration for `/status`, or
/// drops it for the main resource of a kind with a status subresource.
pub fn restrict_config(config: &Value, status_only: bool) -> Value {
    let mut out = Map::new();
    if let Value::Object(m) = config {
        for (k, v) in m {
            let keep = match k.as_str() {
                "apiVersion" | "kind" => true,
                "metadata" if status_only => {
                    let mut meta = Map::new();
                    for f in ["name", "namespace"] {
                        if let Some(x) = v.get(f) {
                            meta.insert(f.into(), x.clone());
                        }
                    }
                    out.insert(k.clone(), Value::Object(meta));
                    false
                }
                "status" => status_only,
                _ => !status_only,
            };
            if keep {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            manager,
            force,
            builtin: true,
            subresource: "",
            api_version: "v1",
            now: "2026-01-01T00:00:00Z",
        }
    }

    #[test]
    fn reapplying_a_smaller_config_prunes_own_fields_only() {
        let first = json!({ "metadata": { "name": "c", "labels": { "a": "1", "b": "2" } }, "data": { "x": "1", "y": "2" } });
        let live = apply(None, &first, &req("m1", false)).expect("create");
        let mut with_z = live.clone();
        with_z["data"]["z"] = json!("3");
        track_update(Some(&live), &mut with_z, "other", true, "", "v1", "t");
        let smaller =
            json!({ "metadata": { "name": "c", "labels": { "a": "1" } }, "data": { "x": "1" } });
        let out = apply(Some(&with_z), &smaller, &req("m1", false)).expect("re-apply");
        assert_eq!(out["data"], json!({ "x": "1", "z": "3" }));
        assert_eq!(out["metadata"]["labels"], json!({ "a": "1" }));
    }

    #[test]
    fn different_value_conflicts_unless_forced_and_same_value_shares() {
        let cfg = json!({ "metadata": { "name": "c" }, "data": { "x": "1" } });
        let live = apply(None, &cfg, &req("m1", false)).expect("create");
        let same = apply(Some(&live), &cfg, &req("m2", false)).expect("same value shares");
        assert_eq!(read_entries(&same).len(), 2);
        let other = json!({ "metadata": { "name": "c" }, "data": { "x": "2" } });
        let err = apply(Some(&live), &other, &req("m2", false)).expect_err("conflict");
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("conflict with \"m1\": .data.x"),
            "{}",
            err.message
        );
        let forced = apply(Some(&live), &other, &req("m2", true)).expect("force");
        assert_eq!(forced["data"]["x"], "2");
        let owners: Vec<String> = read_entries(&forced)
            .into_iter()
            .map(|e| e.manager)
            .collect();
        assert_eq!(owners, vec!["m2".to_string()]);
    }

    #[test]
    fn keyed_lists_merge_by_name() {
        let a = json!({ "metadata": { "name": "d" }, "spec": { "template": { "spec": { "containers": [ { "name": "a", "image": "x" } ] } } } });
        let b = json!({ "metadata": { "name": "d" }, "spec": { "template": { "spec": { "containers": [ { "name": "b", "image": "y" } ] } } } });
        let live = apply(None, &a, &req("m1", false)).expect("a");
        let live = apply(Some(&live), &b, &req("m2", false)).expect("b");
        let names: Vec<&str> = live["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, vec!["a", "b"]);
    }

    #[test]
    fn entries_are_listed_in_the_apiservers_order() {
        let cfg = |k: &str| json!({ "metadata": { "name": "c" }, "data": { k: "1" } });
        let at = |manager: &'static str, now: &'static str| ApplyRequest {
            now,
            ..req(manager, false)
        };
        // "zeta" applies first; "alpha" a second later; "beta" in the same second as
        // "alpha"; an Update by "aardvark" comes last yet sorts after every Apply.
        let live = apply(None, &cfg("z"), &at("zeta", "2026-01-01T00:00:00Z")).expect("zeta");
        let live =
            apply(Some(&live), &cfg("a"), &at("alpha", "2026-01-01T00:00:01Z")).expect("alpha");
        let mut live =
            apply(Some(&live), &cfg("b"), &at("beta", "2026-01-01T00:00:01Z")).expect("beta");
        let before = live.clone();
        live["data"]["u"] = json!("1");
        track_update(
            Some(&before),
            &mut live,
            "aardvark",
            true,
            "",
            "v1",
            "2026-01-01T00:00:00Z",
        );
        let order: Vec<(String, String)> = read_entries(&live)
            .into_iter()
            .map(|e| (e.operation, e.manager))
            .collect();
        let want = [
            ("Apply", "zeta"),
            ("Apply", "alpha"),
            ("Apply", "beta"),
            ("Update", "aardvark"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(o, m)| (o.to_string(), m.to_string()))
            .collect();
        assert_eq!(order, want);
    }
}
