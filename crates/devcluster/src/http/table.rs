//! Server-side printing: `meta.k8s.io/v1` Table responses, which `kubectl get` asks for
//! in `Accept`. Custom resources get their CRD's `additionalPrinterColumns` after Name, as
//! apiextensions-apiserver prints them (each column's JSONPath evaluated on the object, a
//! `date` column as an age); other kinds get the generic columns the apiserver uses for kinds
//! without printer columns (Name, Age), not each built-in kind's custom columns.

use serde_json::{Value, json};

/// Whether `Accept` asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .any(|m| m.contains("as=Table") && m.contains("g=meta.k8s.io"))
}

/// A Table of custom resources of a type with printer columns (`columns`, the CRD version's
/// `additionalPrinterColumns`), or the generic one ([`table`]) without.
pub fn custom_table(
    columns: &[Value],
    items: &[Value],
    list_meta: Value,
    include_object: Option<&str>,
) -> Value {
    if columns.is_empty() {
        return table(items, list_meta, include_object);
    }
    let mut definitions = vec![json!({
        "name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0,
    })];
    definitions.extend(columns.iter().map(|c| {
        json!({
            "name": c["name"], "type": c["type"],
            "format": c.get("format").cloned().unwrap_or_else(|| json!("")),
            "description": c.get("description").cloned().unwrap_or_else(|| json!("")),
            "priority": c.get("priority").cloned().unwrap_or_else(|| json!(0)),
        })
    }));
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let mut cells = vec![o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
            cells.extend(columns.iter().map(|c| cell(o, c)));
            json!({ "cells": cells, "object": row_object(o, include_object) })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// One printer column's cell: the column's JSONPath on the object (Kubernetes writes it
/// without the leading `$`), its first result; a `date` as an age; nothing found, null.
fn cell(object: &Value, column: &Value) -> Value {
    use jsonpath_rust::JsonPath as _;
    let Some(path) = column["jsonPath"].as_str() else {
        return Value::Null;
    };
    let path = format!("${}", path.trim_start_matches('$'));
    let found = object
        .query(&path)
        .ok()
        .and_then(|r| r.first().map(|v| (*v).clone()));
    match (found, column["type"].as_str()) {
        (None | Some(Value::Null), _) => Value::Null,
        (Some(Value::String(t)), Some("date")) => Value::String(age(&t)),
        (Some(v @ (Value::Object(_) | Value::Array(_))), _) => Value::String(v.to_string()),
        (Some(v), _) => v,
    }
}

/// A Table of the given objects; `include_object` is the `includeObject` parameter.
pub fn table(items: &[Value], list_meta: Value, include_object: Option<&str>) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let name = o.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
            let created = o
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .unwrap_or_default();
            json!({ "cells": [name, age(created)], "object": row_object(o, include_object) })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            { "name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0 },
            { "name": "Age", "type": "string", "format": "", "description": "Time since the object was created.", "priority": 0 },
        ],
        "rows": rows,
    })
}

fn row_object(o: &Value, include: Option<&str>) -> Value {
    match include {
        Some("None") => Value::Null,
        Some("Object") => o.clone(),
        _ => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

/// kubectl's short age format: `45s`, `12m`, `5h`, `3d`.
fn age(created: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(created) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 2 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_resources_get_their_printer_columns() {
        let columns = vec![
            json!({"name": "Phase", "type": "string", "jsonPath": ".status.phase"}),
            json!({"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}),
            json!({"name": "Missing", "type": "string", "jsonPath": ".status.nothing"}),
            json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
        ];
        let object = json!({
            "metadata": {"name": "web", "creationTimestamp": "2000-01-01T00:00:00Z"},
            "status": {"phase": "Running", "conditions": [
                {"type": "Reconciling", "status": "False"}, {"type": "Ready", "status": "True"}]},
        });
        let t = custom_table(&columns, &[object], json!({}), None);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Phase", "Ready", "Missing", "Age"]);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "web");
        assert_eq!(
            (&cells[1], &cells[2], &cells[3]),
            (&json!("Running"), &json!("True"), &Value::Null)
        );
        assert!(
            cells[4].as_str().is_some_and(|a| a.ends_with('d')),
            "{cells}"
        );
    }

    #[test]
    fn table_rows_carry_name_and_metadata() {
        let t = table(
            &[json!({ "metadata": { "name": "a", "creationTimestamp": "2000-01-01T00:00:00Z" } })],
            json!({}),
            None,
        );
        assert_eq!(t["rows"][0]["cells"][0], "a");
        assert!(
            t["rows"][0]["cells"][1]
                .as_str()
                .is_some_and(|s| s.ends_with('d'))
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
    }
}
