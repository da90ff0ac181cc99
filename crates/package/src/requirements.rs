//! `requirements` from `package.yaml`, in both on-disk shapes Deckhouse packages use.
//!
//! v1: `{kubernetes: ">=1.28", deckhouse: ">=1.60", modules: {name: "constraint[!optional]"}}`.
//! v2: `{kubernetes: {constraint: …}, deckhouse: {constraint: …}, modules: {mandatory: [{name,
//! constraint?}], conditional: […], anyOf: [{name, description?, modules: […]}], noneOf: […]}}`.
//! The shapes are told apart per field (a string vs a mapping; a mapping of strings vs one with
//! list-valued `mandatory`/`conditional`/`anyOf`/`noneOf`), so a file may mix them.
//! `berth` is accepted as a synonym of `deckhouse`, and `packages` of `modules`.

use serde_json::{Map, Value};

use crate::constraint::VersionConstraint;
use crate::definition::DefinitionError;

/// What must hold before the scheduler enables a package. `None`/empty means "no requirement".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirements {
    pub kubernetes: Option<VersionConstraint>,
    /// The platform version (`berth`, or `deckhouse` in Deckhouse packages).
    pub platform: Option<VersionConstraint>,
    /// Packages that must be running first.
    pub mandatory: Vec<Dependency>,
    /// Packages that, when present, must satisfy the constraint (v1 `!optional`).
    pub conditional: Vec<Dependency>,
    /// Gates: at least one member of each group must be present. They add no ordering edges.
    pub any_of: Vec<DependencyGroup>,
    /// Gates: no member of each group may be present.
    pub none_of: Vec<DependencyGroup>,
}

/// A dependency on another package; `constraint: None` accepts any version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub name: String,
    pub constraint: Option<VersionConstraint>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyGroup {
    pub name: String,
    pub description: Option<String>,
    pub members: Vec<Dependency>,
}

const V1_OPTIONAL_SUFFIX: &str = "!optional";

impl Requirements {
    /// Parses the `requirements` value (already known to be present).
    pub(crate) fn parse(value: &Value) -> Result<Self, DefinitionError> {
        let map = as_map(value, "requirements")?;
        let mut out = Requirements {
            kubernetes: version_gate(map.get("kubernetes"), "requirements.kubernetes")?,
            ..Default::default()
        };
        for key in ["berth", "deckhouse"] {
            if let Some(gate) = version_gate(map.get(key), &format!("requirements.{key}"))? {
                out.platform = Some(gate);
            }
        }
        for key in ["modules", "packages"] {
            if let Some(deps) = map.get(key) {
                parse_dependencies(deps, &format!("requirements.{key}"), &mut out)?;
            }
        }
        Ok(out)
    }
}

fn version_gate(
    value: Option<&Value>,
    field: &str,
) -> Result<Option<VersionConstraint>, DefinitionError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => constraint(text, field).map(Some),
        Some(Value::Object(map)) => match map.get("constraint") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => constraint(text, &format!("{field}.constraint")).map(Some),
            Some(_) => Err(DefinitionError::new(
                format!("{field}.constraint"),
                "must be a string",
            )),
        },
        Some(_) => Err(DefinitionError::new(
            field,
            "must be a constraint string or {constraint: …}",
        )),
    }
}

fn parse_dependencies(
    value: &Value,
    field: &str,
    out: &mut Requirements,
) -> Result<(), DefinitionError> {
    let map = as_map(value, field)?;
    let is_v2 = ["mandatory", "conditional", "anyOf", "noneOf"]
        .iter()
        .any(|key| matches!(map.get(*key), Some(Value::Array(_))));
    if !is_v2 {
        for (name, raw) in map {
            let (dep, optional) = v1_dependency(name, raw, &format!("{field}.{name}"))?;
            if optional {
                out.conditional.push(dep)
            } else {
                out.mandatory.push(dep)
            }
        }
        return Ok(());
    }
    for (key, raw) in map {
        let here = format!("{field}.{key}");
        match key.as_str() {
            "mandatory" => out.mandatory.extend(dependency_list(raw, &here)?),
            "conditional" => out.conditional.extend(dependency_list(raw, &here)?),
            "anyOf" => out.any_of.extend(group_list(raw, &here)?),
            "noneOf" => out.none_of.extend(group_list(raw, &here)?),
            _ => {
                return Err(DefinitionError::new(
                    here,
                    "unknown key (expected mandatory, conditional, anyOf or noneOf)",
                ));
            }
        }
    }
    Ok(())
}

/// v1 entry `name: "constraint"`, where a trailing `!optional` makes it conditional.
fn v1_dependency(
    name: &str,
    raw: &Value,
    field: &str,
) -> Result<(Dependency, bool), DefinitionError> {
    let text = match raw {
        Value::String(text) => text.trim(),
        Value::Null => "",
        _ => return Err(DefinitionError::new(field, "must be a constraint string")),
    };
    let (text, optional) = match text.strip_suffix(V1_OPTIONAL_SUFFIX) {
        Some(rest) => (rest.trim(), true),
        None => (text, false),
    };
    let constraint = if text.is_empty() {
        None
    } else {
        Some(constraint(text, field)?)
    };
    Ok((
        Dependency {
            name: package_name(name, field)?,
            constraint,
        },
        optional,
    ))
}

fn dependency_list(value: &Value, field: &str) -> Result<Vec<Dependency>, DefinitionError> {
    let Value::Array(items) = value else {
        return Err(DefinitionError::new(field, "must be a list"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| dependency(item, &format!("{field}[{i}]")))
        .collect()
}

fn dependency(value: &Value, field: &str) -> Result<Dependency, DefinitionError> {
    let map = as_map(value, field)?;
    let name = match map.get("name") {
        Some(Value::String(name)) => package_name(name, &format!("{field}.name"))?,
        _ => {
            return Err(DefinitionError::new(
                format!("{field}.name"),
                "is required and must be a string",
            ));
        }
    };
    let constraint = match map.get("constraint") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(constraint(text, &format!("{field}.constraint"))?),
        Some(_) => {
            return Err(DefinitionError::new(
                format!("{field}.constraint"),
                "must be a string",
            ));
        }
    };
    Ok(Dependency { name, constraint })
}

fn group_list(value: &Value, field: &str) -> Result<Vec<DependencyGroup>, DefinitionError> {
    let Value::Array(items) = value else {
        return Err(DefinitionError::new(field, "must be a list"));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let here = format!("{field}[{i}]");
            let map = as_map(item, &here)?;
            let name = match map.get("name") {
                Some(Value::String(name)) => name.clone(),
                _ => {
                    return Err(DefinitionError::new(
                        format!("{here}.name"),
                        "is required and must be a string",
                    ));
                }
            };
            let description = map
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let members = match map.get("modules").or_else(|| map.get("packages")) {
                Some(list) => dependency_list(list, &format!("{here}.modules"))?,
                None => {
                    return Err(DefinitionError::new(
                        format!("{here}.modules"),
                        "is required",
                    ));
                }
            };
            Ok(DependencyGroup {
                name,
                description,
                members,
            })
        })
        .collect()
}

fn constraint(text: &str, field: &str) -> Result<VersionConstraint, DefinitionError> {
    VersionConstraint::parse(text).map_err(|e| DefinitionError::new(field, e.to_string()))
}

fn package_name(name: &str, field: &str) -> Result<String, DefinitionError> {
    crate::definition::check_name(name).map_err(|msg| DefinitionError::new(field, msg))?;
    Ok(name.to_owned())
}

fn as_map<'a>(value: &'a Value, field: &str) -> Result<&'a Map<String, Value>, DefinitionError> {
    value
        .as_object()
        .ok_or_else(|| DefinitionError::new(field, "must be a mapping"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(deps: &[Dependency]) -> Vec<&str> {
        deps.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn v1_shape_with_optional_suffix() {
        let req = Requirements::parse(&json!({
            "kubernetes": ">= 1.28",
            "deckhouse": ">=1.60",
            "modules": {"cert-manager": ">=1.0", "monitoring": ">=0.5 !optional", "any": ""}
        }))
        .expect("parses");
        assert_eq!(req.kubernetes.as_ref().map(|c| c.as_str()), Some(">= 1.28"));
        assert_eq!(req.platform.as_ref().map(|c| c.as_str()), Some(">=1.60"));
        assert_eq!(names(&req.mandatory), ["cert-manager", "any"]);
        assert_eq!(req.mandatory[1].constraint, None);
        assert_eq!(names(&req.conditional), ["monitoring"]);
        assert_eq!(
            req.conditional[0].constraint.as_ref().map(|c| c.as_str()),
            Some(">=0.5")
        );
    }

    #[test]
    fn v2_shape_with_groups() {
        let req = Requirements::parse(&json!({
            "kubernetes": {"constraint": ">=1.28"},
            "berth": {"constraint": "^0.1"},
            "packages": {
                "mandatory": [{"name": "a", "constraint": "1.x"}],
                "conditional": [{"name": "b"}],
                "anyOf": [{"name": "ingress", "description": "one controller", "modules": [{"name": "nginx"}, {"name": "traefik"}]}],
                "noneOf": [{"name": "legacy", "modules": [{"name": "old"}]}]
            }
        }))
        .expect("parses");
        assert!(req.kubernetes.is_some() && req.platform.is_some());
        assert_eq!(names(&req.mandatory), ["a"]);
        assert_eq!(names(&req.conditional), ["b"]);
        assert_eq!(names(&req.any_of[0].members), ["nginx", "traefik"]);
        assert_eq!(req.any_of[0].description.as_deref(), Some("one controller"));
        assert_eq!(names(&req.none_of[0].members), ["old"]);
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!({"kubernetes": ">=banana"}), "requirements.kubernetes"),
            (
                json!({"kubernetes": {"constraint": 5}}),
                "requirements.kubernetes.constraint",
            ),
            (
                json!({"modules": {"mandatory": [{"constraint": "1"}]}}),
                "requirements.modules.mandatory[0].name",
            ),
            (
                json!({"modules": {"mandatory": [], "weird": []}}),
                "requirements.modules.weird",
            ),
            (
                json!({"modules": {"Bad_Name": "1"}}),
                "requirements.modules.Bad_Name",
            ),
            (json!([1]), "requirements"),
        ];
        for (doc, field) in cases {
            let err = Requirements::parse(&doc).expect_err(field);
            assert_eq!(err.field, field, "{err}");
        }
    }
}
