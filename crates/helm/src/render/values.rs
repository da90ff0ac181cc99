//! Values coalescing as Helm does it: the user's values over the chart's `values.yaml`, a
//! user `null` deleting a default, each subchart seeing its own section plus `global`, and
//! subcharts switched off by their dependency `condition` or `tags`.

use super::RenderError;
use super::chart::Chart;
use serde_json::{Map, Value};

/// A chart with the values its templates see, and its enabled subcharts.
#[derive(Debug)]
pub struct Scope<'a> {
    pub chart: &'a Chart,
    /// The name the chart is known by in its parent (the dependency alias, if any).
    pub name: String,
    pub values: Value,
    pub subcharts: Vec<Scope<'a>>,
    /// `Chart.yaml`'s dependencies as the chart sees them in `.Chart.Dependencies` (disabled
    /// ones dropped, each named by its alias).
    pub dependencies: Vec<Value>,
}

/// Deep-merges `over` (the user's values) onto `base` (a chart's defaults) as Helm coalesces
/// them: maps merge key by key, anything else in `over` wins, a `null` in `over` removes the
/// default it meets, a `null` among the defaults is dropped (at any depth of maps), and a
/// `null` the user sets where the chart has no default is kept.
pub fn coalesce(base: &Value, over: &Value) -> Value {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            let mut out: Map<String, Value> = o.clone();
            for (k, bv) in b {
                match o.get(k) {
                    Some(Value::Null) => {
                        out.remove(k);
                    }
                    Some(ov) => {
                        let merged = coalesce(bv, ov);
                        out.insert(k.clone(), merged);
                    }
                    None if bv.is_null() => {}
                    None => {
                        out.insert(k.clone(), strip_nulls(bv));
                    }
                }
            }
            Value::Object(out)
        }
        (_, Value::Null) => strip_nulls(base),
        (_, o) => o.clone(),
    }
}

/// Numbers as Helm's values carry them: Helm reads values files (and the JSON values a
/// client sends) through a JSON decoder, so every number is a float64 — `{{ .Values.n }}` of
/// 1000000 prints `1e+06` and `typeOf` says `float64`. Only `--set` produces int64, which is
/// why this is applied per source rather than in [`coalesce`].
pub fn as_go_numbers(mut v: serde_json::Value) -> serde_json::Value {
    to_go_numbers(&mut v);
    v
}

/// [`as_go_numbers`] in place (no map is rebuilt).
fn to_go_numbers(v: &mut Value) {
    match v {
        Value::Number(n) if !n.is_f64() => {
            if let Some(f) = n.as_f64().and_then(serde_json::Number::from_f64) {
                *n = f;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_go_numbers),
        Value::Object(m) => m.values_mut().for_each(to_go_numbers),
        _ => {}
    }
}

/// The inverse of [`as_go_numbers`] for output: whole floats become integers, which is how
/// Go's `encoding/json` writes a float64 such as 8080 (and what Helm stores in a release).
pub fn go_json_numbers(v: serde_json::Value) -> serde_json::Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(go_json_numbers).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, go_json_numbers(v)))
                .collect(),
        ),
        other => other,
    }
}

fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Builds the scope tree for `chart` given the values supplied for it. A dependency declared
/// in `Chart.yaml` (or a v1 chart's `requirements.yaml`) but not present under `charts/` is
/// an error, as in Helm (`helm template` checks the top chart, enabled or not).
pub fn scope<'a>(chart: &'a Chart, name: &str, supplied: &Value) -> Result<Scope<'a>, RenderError> {
    check_vendored(chart)?;
    scope_of(chart, name, supplied)
}

fn scope_of<'a>(chart: &'a Chart, name: &str, supplied: &Value) -> Result<Scope<'a>, RenderError> {
    let mut values = coalesce(&chart.values, supplied);
    let subs = dependencies(chart);
    let disabled = disabled(chart, &subs, &values);
    let mut subcharts = Vec::new();
    let mut imported = Value::Object(Map::new());
    for (sub, sub_name, dep) in subs {
        if disabled.contains(&sub_name) {
            continue;
        }
        let mut sub_supplied = values
            .get(&sub_name)
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        // Every subchart sees a `global` map (empty when no chart sets one), with the
        // parent's globals over its own.
        let empty = Value::Object(Map::new());
        let global = values.get("global").unwrap_or(&empty);
        if global.is_object()
            && let Value::Object(m) = &mut sub_supplied
        {
            let merged = coalesce(m.get("global").unwrap_or(&Value::Null), global);
            m.insert("global".into(), merged);
        }
        let sub_scope = scope_of(sub, &sub_name, &sub_supplied)?;
        if let Value::Object(m) = &mut values {
            m.insert(sub_name.clone(), sub_scope.values.clone());
        }
        if let Some(dep) = dep {
            collect_imports(dep, &sub_scope.values, &mut imported);
        }
        subcharts.push(sub_scope);
    }
    // Imported values rank below the parent's own: a parent can import a whole section and
    // override parts of it.
    if imported.as_object().is_some_and(|m| !m.is_empty()) {
        values = coalesce(&imported, &values);
    }
    Ok(Scope {
        chart,
        name: name.to_string(),
        values,
        subcharts,
        dependencies: enabled_dependencies(chart, &disabled),
    })
}

/// A subchart, the name it is known by, and the dependency (in `Chart.yaml`) that names it.
type Subchart<'a> = (&'a Chart, String, Option<&'a Map<String, Value>>);

/// A chart's subcharts as Helm's `processDependencyEnabled` arranges them, with the name each
/// is known by and the dependency that names it: first the vendored charts no dependency
/// refers to, under their own names, then one chart per dependency (in `Chart.yaml` order)
/// that finds a vendored chart of its name and a version its range allows, named by its alias
/// (so two aliases of one chart are two subcharts).
fn dependencies(chart: &Chart) -> Vec<Subchart<'_>> {
    let deps = declared(chart);
    let matches = |dep: &Map<String, Value>, sub: &Chart| {
        dep.get("name").and_then(Value::as_str) == Some(sub.name())
            && super::funcs::semver_fn::compatible(
                dep.get("version")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                sub.meta_str("version"),
            )
    };
    let mut out: Vec<_> = chart
        .subcharts
        .values()
        .filter(|sub| !deps.iter().any(|d| matches(d, sub)))
        .map(|sub| (sub, sub.name().to_string(), None))
        .collect();
    for dep in deps {
        if let Some(sub) = chart.subcharts.values().find(|sub| matches(dep, sub)) {
            let name = dep
                .get("alias")
                .and_then(Value::as_str)
                .filter(|a| !a.is_empty())
                .unwrap_or(sub.name());
            out.push((sub, name.to_string(), Some(dep)));
        }
    }
    out
}

/// The dependencies `Chart.yaml` (or `requirements.yaml`) declares.
fn declared(chart: &Chart) -> Vec<&Map<String, Value>> {
    chart
        .metadata
        .get("dependencies")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .collect()
}

/// The names (aliases) of the dependencies switched off by their `tags` or `condition`,
/// judged on the chart's values with each subchart's own defaults under its name (Helm
/// coalesces those before it looks).
fn disabled(chart: &Chart, subs: &[Subchart<'_>], values: &Value) -> Vec<String> {
    let mut seen = values.clone();
    if let Value::Object(m) = &mut seen {
        for (sub, name, _) in subs {
            let own = coalesce(&sub.values, m.get(name).unwrap_or(&Value::Null));
            m.insert(name.clone(), own);
        }
    }
    declared(chart)
        .into_iter()
        .filter(|dep| !enabled(dep, &seen))
        .map(|dep| known_as(dep).to_string())
        .collect()
}

/// The name a dependency is known by: its alias, else its name.
fn known_as(dep: &Map<String, Value>) -> &str {
    dep.get("alias")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .or_else(|| dep.get("name").and_then(Value::as_str))
        .unwrap_or_default()
}

/// `Chart.yaml`'s dependencies as `.Chart.Dependencies` shows them inside the release: the
/// disabled ones dropped, each named by its alias.
fn enabled_dependencies(chart: &Chart, disabled: &[String]) -> Vec<Value> {
    declared(chart)
        .into_iter()
        .filter(|dep| !disabled.iter().any(|d| d == known_as(dep)))
        .map(|dep| {
            let mut dep = dep.clone();
            let name = known_as(&dep).to_string();
            dep.insert("name".into(), Value::String(name));
            Value::Object(dep)
        })
        .collect()
}

/// A dependency's `import-values`: `"name"` copies the child's `exports.name` map into the
/// parent's top level; `{child: a.b, parent: c.d}` copies the child's `a.b` map to `c.d`.
/// Paths that do not lead to a map are skipped, as Helm does (it only logs them).
fn collect_imports(dep: &Map<String, Value>, child_values: &Value, into: &mut Value) {
    let Some(list) = dep.get("import-values").and_then(Value::as_array) else {
        return;
    };
    for entry in list {
        let (child, parent) = match entry {
            Value::String(name) => (format!("exports.{name}"), ".".to_string()),
            Value::Object(m) => (
                m.get("child")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                m.get("parent")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            _ => continue,
        };
        let Some(found @ Value::Object(_)) = lookup(child_values, &child) else {
            continue;
        };
        let mut placed = found.clone();
        for key in parent.split('.').rev().filter(|k| !k.is_empty()) {
            let mut m = Map::new();
            m.insert(key.to_string(), placed);
            placed = Value::Object(m);
        }
        *into = coalesce(into, &placed);
    }
}

/// Helm's `CheckDependencies`: every declared dependency has a vendored chart of its name.
fn check_vendored(chart: &Chart) -> Result<(), RenderError> {
    let missing: Vec<&str> = declared(chart)
        .into_iter()
        .filter_map(|dep| dep.get("name").and_then(Value::as_str))
        .filter(|name| !chart.subcharts.values().any(|s| s.name() == *name))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(RenderError::Chart(format!(
        "found in Chart.yaml, but missing in charts/ directory: {}",
        missing.join(", ")
    )))
}

/// A dependency is on unless its first `condition` path that holds a boolean is false, or
/// (with none holding one) all of its `tags` are set to false. As in Helm, the condition is
/// trimmed as a whole, not each path of it.
fn enabled(dep: &Map<String, Value>, values: &Value) -> bool {
    if let Some(cond) = dep.get("condition").and_then(Value::as_str) {
        for path in cond.trim().split(',').filter(|p| !p.is_empty()) {
            if let Some(b) = lookup(values, path).and_then(Value::as_bool) {
                return b;
            }
        }
    }
    let tags: Vec<&str> = dep
        .get("tags")
        .and_then(Value::as_array)
        .map(|t| t.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let settings: Vec<bool> = tags
        .iter()
        .filter_map(|t| values.get("tags")?.get(*t)?.as_bool())
        .collect();
    settings.is_empty() || settings.iter().any(|b| *b)
}

fn lookup<'v>(values: &'v Value, dotted: &str) -> Option<&'v Value> {
    dotted.split('.').try_fold(values, |v, k| v.get(k))
}

#[cfg(test)]
mod tests {
    use super::coalesce;
    use serde_json::json;

    #[test]
    fn user_values_override_and_null_deletes() {
        let base = json!({"image": {"repo": "nginx", "tag": "1"}, "drop": 1, "keep": [1]});
        let over = json!({"image": {"tag": "2"}, "drop": null, "extra": {"a": null, "b": 1}});
        assert_eq!(
            coalesce(&base, &over),
            json!({"image": {"repo": "nginx", "tag": "2"}, "keep": [1], "extra": {"a": null, "b": 1}})
        );
    }
}
