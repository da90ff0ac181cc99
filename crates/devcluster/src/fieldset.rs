//! Field sets: which fields of an object a field manager owns.
//!
//! Server-side apply records ownership in `metadata.managedFields[].fieldsV1`, a trie
//! whose keys are `f:<field>` (a struct or map field), `k:<json>` (a list item found by
//! its merge key) and `.` (the node itself is owned). We convert that to a flat set of
//! paths because set algebra (what did this manager stop setting, who else owns this)
//! is what apply needs.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::merge_keys::merge_key;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElem {
    Field(String),
    /// A keyed list item, by its canonical JSON key object (`{"name":"web"}`).
    Key(String),
}

pub type FieldPath = Vec<PathElem>;

/// A set of owned paths. A path is a member when it is a leaf the manager set (a scalar,
/// an atomic list, an empty map) or a keyed list item the manager set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet(pub BTreeSet<FieldPath>);

/// Metadata fields the server owns; they never appear in a field set.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

impl FieldSet {
    /// The fields an object sets. `builtin` selects whether built-in merge keys apply
    /// (custom resources have only atomic lists here).
    pub fn of_object(object: &Value, builtin: bool) -> FieldSet {
        let mut set = BTreeSet::new();
        if let Value::Object(map) = object {
            for (k, v) in map {
                match k.as_str() {
                    "apiVersion" | "kind" => {}
                    "metadata" => {
                        if let Value::Object(meta) = v {
                            for (mk, mv) in meta {
                                if !SERVER_METADATA.contains(&mk.as_str()) {
                                    let mut path = vec![
                                        PathElem::Field(k.clone()),
                                        PathElem::Field(mk.clone()),
                                    ];
                                    let mut names = vec![k.clone(), mk.clone()];
                                    collect(mv, &mut path, &mut names, builtin, &mut set);
                                }
                            }
                        }
                    }
                    _ => {
                        let mut path = vec![PathElem::Field(k.clone())];
                        let mut names = vec![k.clone()];
                        collect(v, &mut path, &mut names, builtin, &mut set);
                    }
                }
            }
        }
        FieldSet(set)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `fieldsV1` trie for managedFields.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.0 {
            let mut node = &mut root;
            for elem in path {
                let key = match elem {
                    PathElem::Field(f) => format!("f:{f}"),
                    PathElem::Key(k) => format!("k:{k}"),
                };
                let child = node.entry(key).or_insert_with(|| Value::Object(Map::new()));
                node = match child {
                    Value::Object(m) => m,
                    _ => unreachable!("fieldsV1 nodes are always objects"),
                };
            }
        }
        // A member that has children (a list item with fields, a map or list a write
        // created and set fields in) is marked with ".".
        for path in &self.0 {
            let mut node = &mut root;
            for elem in path {
                let key = match elem {
                    PathElem::Field(f) => format!("f:{f}"),
                    PathElem::Key(k) => format!("k:{k}"),
                };
                node = match node.get_mut(&key) {
                    Some(Value::Object(m)) => m,
                    _ => unreachable!("every member is in the trie"),
                };
            }
            if !node.is_empty() {
                node.insert(".".into(), Value::Object(Map::new()));
            }
        }
        Value::Object(root)
    }

    /// Parses a `fieldsV1` trie; unknown key prefixes (`v:`, `i:`) are kept as atomic leaves
    /// of their parent, which is what we would have recorded for them.
    pub fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = BTreeSet::new();
        if let Value::Object(map) = value {
            walk_v1(map, &mut Vec::new(), &mut set);
        }
        FieldSet(set)
    }
}

fn walk_v1(map: &Map<String, Value>, path: &mut FieldPath, set: &mut BTreeSet<FieldPath>) {
    if (map.is_empty() || map.contains_key(".")) && !path.is_empty() {
        set.insert(path.clone());
    }
    for (key, child) in map {
        let elem = if let Some(f) = key.strip_prefix("f:") {
            PathElem::Field(f.to_string())
        } else if let Some(k) = key.strip_prefix("k:") {
            PathElem::Key(k.to_string())
        } else {
            if key != "." && !path.is_empty() {
                set.insert(path.clone());
            }
            continue;
        };
        path.push(elem);
        if let Value::Object(m) = child {
            walk_v1(m, path, set);
        }
        path.pop();
    }
}

fn collect(
    value: &Value,
    path: &mut FieldPath,
    names: &mut Vec<String>,
    builtin: bool,
    set: &mut BTreeSet<FieldPath>,
) {
    match value {
        // A binding's roleRef is an atomic struct: owned as a whole.
        Value::Object(map) if !map.is_empty() && !atomic_struct(names, builtin) => {
            for (k, v) in map {
                path.push(PathElem::Field(k.clone()));
                names.push(k.clone());
                collect(v, path, names, builtin, set);
                names.pop();
                path.pop();
            }
        }
        Value::Array(items) => match list_key(names, builtin).filter(|key| all_keyed(items, key)) {
            Some(key) => {
                for item in items {
                    path.push(PathElem::Key(item_key(item, key)));
                    set.insert(path.clone());
                    collect(item, path, names, builtin, set);
                    path.pop();
                }
            }
            None => {
                set.insert(path.clone());
            }
        },
        _ => {
            set.insert(path.clone());
        }
    }
}

/// Whether the map at `names` is a struct kube-apiserver owns as a whole.
fn atomic_struct(names: &[String], builtin: bool) -> bool {
    builtin && names == ["roleRef"]
}

pub fn list_key(names: &[String], builtin: bool) -> Option<&'static str> {
    if builtin { merge_key(names) } else { None }
}

/// Whether every item of a list is an object carrying `key`; otherwise it is treated atomic.
pub fn all_keyed(items: &[Value], key: &str) -> bool {
    items.iter().all(|i| i.get(key).is_some())
}

/// Canonical JSON of an item's key, e.g. `{"name":"web"}`.
pub fn item_key(item: &Value, key: &str) -> String {
    let mut m = Map::new();
    m.insert(
        key.to_string(),
        item.get(key).cloned().unwrap_or(Value::Null),
    );
    Value::Object(m).to_string()
}

/// The value at a path, if the object has it.
pub fn get_path<'a>(object: &'a Value, path: &[PathElem]) -> Option<&'a Value> {
    let mut cur = object;
    for elem in path {
        cur = match elem {
            PathElem::Field(f) => cur.get(f)?,
            PathElem::Key(k) => find_item(cur.as_array()?, k)?,
        };
    }
    Some(cur)
}

fn find_item<'a>(items: &'a [Value], key_json: &str) -> Option<&'a Value> {
    let key: Map<String, Value> = serde_json::from_str(key_json).ok()?;
    items
        .iter()
        .find(|i| key.iter().all(|(k, v)| i.get(k) == Some(v)))
}

/// Removes the value at a path; returns whether something was removed. Maps left empty
/// by the removal are removed too, so dropping the last label removes `labels`.
pub fn remove_path(object: &mut Value, path: &[PathElem]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let removed = {
        let Some(parent) = get_path_mut(object, parents) else {
            return false;
        };
        match (last, parent) {
            (PathElem::Field(f), Value::Object(m)) => m.remove(f).is_some(),
            (PathElem::Key(k), Value::Array(items)) => {
                let before = items.len();
                let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                items.retain(|i| !key.iter().all(|(kk, v)| i.get(kk) == Some(v)));
                before != items.len()
            }
            _ => false,
        }
    };
    if removed
        && parents.len() > 1
        && let Some(Value::Object(m)) = get_path(object, parents)
        && m.is_empty()
    {
        remove_path(object, parents);
    }
    removed
}

fn get_path_mut<'a>(object: &'a mut Value, path: &[PathElem]) -> Option<&'a mut Value> {
    let mut cur = object;
    for elem in path {
        cur = match elem {
            PathElem::Field(f) => cur.get_mut(f)?,
            PathElem::Key(k) => {
                let key: Map<String, Value> = serde_json::from_str(k).ok()?;
                cur.as_array_mut()?
                    .iter_mut()
                    .find(|i| key.iter().all(|(kk, v)| i.get(kk) == Some(v)))?
            }
        };
    }
    Some(cur)
}

/// Human form of a path for conflict messages: `.spec.containers[name="web"].image`.
pub fn display_path(path: &[PathElem]) -> String {
    let mut out = String::new();
    for elem in path {
        match elem {
            PathElem::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            PathElem::Key(k) => {
                let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let inner: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", inner.join(",")));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trip_with_keyed_lists() {
        let obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "labels": { "app": "web" } },
            "spec": { "replicas": 2, "template": { "spec": { "containers": [
                { "name": "web", "image": "nginx", "args": ["a"] }
            ] } } }
        });
        let set = FieldSet::of_object(&obj, true);
        let v1 = set.to_fields_v1();
        assert_eq!(v1["f:metadata"]["f:labels"]["f:app"], json!({}));
        assert!(v1.get("f:apiVersion").is_none());
        let item = &v1["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
        assert_eq!(item["."], json!({}));
        assert_eq!(item["f:image"], json!({}));
        assert_eq!(FieldSet::from_fields_v1(&v1), set);
    }

    #[test]
    fn removing_the_last_label_removes_the_map() {
        let mut obj = json!({ "metadata": { "name": "x", "labels": { "a": "1" } } });
        let path = vec![
            PathElem::Field("metadata".into()),
            PathElem::Field("labels".into()),
            PathElem::Field("a".into()),
        ];
        assert!(remove_path(&mut obj, &path));
        assert_eq!(obj, json!({ "metadata": { "name": "x" } }));
    }
}
