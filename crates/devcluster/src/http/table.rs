//! Server-side printing: `meta.k8s.io/v1` Table responses, which `kubectl get` asks for
//! in `Accept`. We render the generic columns the apiserver uses for kinds without
//! printer columns (Name, Age), not each built-in kind's custom columns.

use serde_json::{Value, json};

/// Whether `Accept` asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .any(|m| m.contains("as=Table") && m.contains("g=meta.k8s.io"))
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
