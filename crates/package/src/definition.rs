//! `package.yaml`: what a package is (its type, name, version) and what it needs.
//!
//! The document is read into a `serde_json::Value` first and the fields are pulled out by hand,
//! so every error can name the exact field (`requirements.modules.mandatory[0].name`) instead of
//! the generic messages an untagged serde enum would produce. A field berth does not know is
//! refused, naming it and the known ones ([`KNOWN_FIELDS`]): a typo (`requirments:`) must not
//! silently drop what it meant. The known fields include those Deckhouse and addon-operator
//! module definitions carry (`apiVersion`, `stage`, `disable`, …), which berth accepts and
//! ignores, so Deckhouse packages load unchanged.

use std::fmt;

use serde_json::Value;

use crate::constraint::parse_version;
use crate::limits::HookLimits;
use crate::rbac::Rbac;
use crate::requirements::Requirements;

/// `Application`: multi-instance, user-installed. `Module`: a platform module with a `weight`.
/// `Global`: the one package named `global` whose hooks are global hooks and whose values are
/// the `global` values every nested package sees (addon-operator's `global-hooks/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PackageType {
    Application,
    Module,
    Global,
}

/// The name a `Global` package must have (its values key, its queue, its package key).
pub const GLOBAL_NAME: &str = "global";

/// How a package's values are laid out for its hooks and templates.
///
/// `Flat` (berth's own format): settings and values sit at the root, `.Values.<key>`.
/// `Nested` (addon-operator modules): the package's values sit under its camelCase name and
/// the shared global values under `global`: `.Values.<camelName>.<key>`, `.Values.global.<key>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValuesLayout {
    Flat,
    Nested,
}

impl fmt::Display for ValuesLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValuesLayout::Flat => "flat",
            ValuesLayout::Nested => "nested",
        })
    }
}

impl fmt::Display for PackageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PackageType::Application => "Application",
            PackageType::Module => "Module",
            PackageType::Global => "Global",
        })
    }
}

/// The parsed `package.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub package_type: PackageType,
    pub name: String,
    pub version: semver::Version,
    /// `description`, or `descriptions.en` as Deckhouse writes it.
    pub description: Option<String>,
    /// Scheduling order for modules (lower first); the scheduler treats `None` as 999.
    pub weight: Option<i64>,
    pub requirements: Requirements,
    /// `values: flat|nested` as written; `None` lets the loader decide (see `load`).
    pub values_layout: Option<ValuesLayout>,
    /// `limits:`: what one run of the package's hooks may use (defaults where left out).
    pub limits: HookLimits,
    /// `rbac:` (Modules and the Global package only): the Kubernetes rights the package's
    /// ServiceAccount gets. `None`: no section, so the documented default (`cluster-admin`).
    pub rbac: Option<Rbac>,
}

/// A field of `package.yaml` that is missing or wrong; the loader adds the file path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct DefinitionError {
    pub field: String,
    pub message: String,
}

impl DefinitionError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Longest package name accepted: names become parts of Kubernetes object and release names.
pub const MAX_NAME_LEN: usize = berth_names::MAX_LABEL_LEN;

/// Package names are DNS labels (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters), because
/// they end up in release names, queue names and directory names.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if !berth_names::is_dns_label(name) {
        return Err(format!(
            "{name:?} is not a valid package name (lowercase letters, digits and '-', at most {MAX_NAME_LEN} characters, no leading or trailing '-')"
        ));
    }
    Ok(())
}

/// The top-level fields `package.yaml` may have: berth's own, then those of Deckhouse module
/// definitions (`package.yaml` and the legacy `module.yaml`) that berth accepts without acting
/// on them. Anything else is refused at load.
pub const KNOWN_FIELDS: &[&str] = &[
    // berth's own
    "type",
    "name",
    "version",
    "description",
    "values",
    "limits",
    "rbac",
    "weight",
    "requirements",
    // Deckhouse's, accepted for compatibility (berth reads `descriptions.en` as the description)
    "apiVersion",
    "stage",
    "descriptions",
    "disable",
    "tags",
    "subsystems",
    "namespace",
    "critical",
    "exclusiveGroup",
    "accessibility",
    "update",
    "subscribe",
];

/// Refuses a top-level field that is not in [`KNOWN_FIELDS`], naming it, the closest known
/// field when one is close (a typo), and the known ones.
fn check_known_fields(map: &serde_json::Map<String, Value>) -> Result<(), DefinitionError> {
    let Some(unknown) = map.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) else {
        return Ok(());
    };
    let closest = KNOWN_FIELDS
        .iter()
        .map(|known| (strsim::damerau_levenshtein(unknown, known), *known))
        .min()
        .filter(|(distance, known)| *distance <= 2.max(known.len() / 4))
        .map(|(_, known)| format!(" (did you mean `{known}`?)"))
        .unwrap_or_default();
    Err(DefinitionError::new(
        unknown.as_str(),
        format!(
            "unknown field{closest}; known fields: {}",
            KNOWN_FIELDS.join(", ")
        ),
    ))
}

impl Definition {
    /// Builds a definition from the parsed YAML document of `package.yaml`.
    pub fn from_document(doc: &Value) -> Result<Self, DefinitionError> {
        let map = doc
            .as_object()
            .ok_or_else(|| DefinitionError::new("(root)", "package.yaml must be a mapping"))?;
        check_known_fields(map)?;
        let package_type = match map.get("type") {
            // Deckhouse's module loader accepts an empty type; keep that for compatibility.
            None | Some(Value::Null) => PackageType::Module,
            Some(Value::String(t)) if t.is_empty() => PackageType::Module,
            Some(Value::String(t)) if t == "Application" => PackageType::Application,
            Some(Value::String(t)) if t == "Module" => PackageType::Module,
            Some(Value::String(t)) if t == "Global" => PackageType::Global,
            Some(other) => {
                return Err(DefinitionError::new(
                    "type",
                    format!("unknown package type {other}; expected Application, Module or Global"),
                ));
            }
        };
        let name = required_string(map.get("name"), "name")?;
        check_name(&name).map_err(|msg| DefinitionError::new("name", msg))?;
        if (package_type == PackageType::Global) != (name == GLOBAL_NAME) {
            return Err(DefinitionError::new(
                "name",
                format!(
                    "{name:?}: the package named {GLOBAL_NAME:?} must be of type Global, and only it"
                ),
            ));
        }
        let values_layout = match map.get("values") {
            None | Some(Value::Null) => None,
            Some(Value::String(l)) if l == "flat" => Some(ValuesLayout::Flat),
            Some(Value::String(l)) if l == "nested" => Some(ValuesLayout::Nested),
            Some(other) => {
                return Err(DefinitionError::new(
                    "values",
                    format!("unknown values layout {other}; expected flat or nested"),
                ));
            }
        };
        if package_type == PackageType::Global && values_layout == Some(ValuesLayout::Flat) {
            return Err(DefinitionError::new(
                "values",
                "a Global package's values are the nested `global` section; `flat` is not allowed",
            ));
        }
        let version_text = required_string(map.get("version"), "version")?;
        let version = parse_version(&version_text).map_err(|e| {
            DefinitionError::new(
                "version",
                format!("{version_text:?} is not a semantic version: {e}"),
            )
        })?;
        let weight = match map.get("weight") {
            None | Some(Value::Null) => None,
            Some(w) => Some(w.as_i64().ok_or_else(|| {
                DefinitionError::new("weight", format!("must be an integer, got {w}"))
            })?),
        };
        let requirements = match map.get("requirements") {
            None | Some(Value::Null) => Requirements::default(),
            Some(req) => Requirements::parse(req)?,
        };
        let limits = match map.get("limits") {
            None | Some(Value::Null) => HookLimits::default(),
            Some(limits) => HookLimits::parse(limits)?,
        };
        let rbac = match map.get("rbac") {
            None | Some(Value::Null) => None,
            // An App's ServiceAccount may do everything in its namespace and nothing else: it
            // cannot ask for cluster rights, and a section that would be ignored is refused.
            Some(_) if package_type == PackageType::Application => {
                return Err(DefinitionError::new(
                    "rbac",
                    "an Application may not declare Kubernetes rights: its ServiceAccount may do everything in its own namespace and nothing outside it; only a Module or the Global package declares `rbac`",
                ));
            }
            Some(section) => Some(Rbac::parse(section)?),
        };
        Ok(Definition {
            package_type,
            name,
            version,
            description: description(map),
            weight,
            requirements,
            values_layout,
            limits,
            rbac,
        })
    }

    /// The key Deckhouse uses for a package's own values section: `my-app` → `myApp`.
    pub fn values_key(&self) -> String {
        camel_case(&self.name)
    }
}

fn required_string(value: Option<&Value>, field: &str) -> Result<String, DefinitionError> {
    match value {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        // YAML reads `version: 1.0` as a number; say so instead of "missing".
        Some(Value::Number(n)) => Err(DefinitionError::new(
            field,
            format!("must be a string (quote it: \"{n}\")"),
        )),
        Some(other) if !other.is_null() && !other.is_string() => Err(DefinitionError::new(
            field,
            format!("must be a string, got {other}"),
        )),
        _ => Err(DefinitionError::new(field, "is required")),
    }
}

fn description(map: &serde_json::Map<String, Value>) -> Option<String> {
    map.get("description")
        .and_then(Value::as_str)
        .or_else(|| {
            map.get("descriptions")
                .and_then(|d| d.get("en"))
                .and_then(Value::as_str)
        })
        .map(str::to_owned)
}

pub(crate) fn camel_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper_next = false;
    for c in name.chars() {
        if c == '-' || c == '_' {
            upper_next = !out.is_empty();
        } else if upper_next {
            out.extend(c.to_uppercase());
            upper_next = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_a_module_definition() {
        let def = Definition::from_document(&json!({
            "apiVersion": "v1", "type": "Module", "name": "cert-manager", "version": "v1.2.3",
            "weight": 30, "descriptions": {"en": "certs", "ru": "…"},
            "requirements": {"kubernetes": ">=1.28"}
        }))
        .expect("parses");
        assert_eq!(def.package_type, PackageType::Module);
        assert_eq!(def.version, semver::Version::new(1, 2, 3));
        assert_eq!(def.weight, Some(30));
        assert_eq!(def.description.as_deref(), Some("certs"));
        assert_eq!(def.values_key(), "certManager");
        assert_eq!(def.rbac, None, "no section: the default rights");
    }

    #[test]
    fn modules_and_the_global_package_declare_rbac() {
        let rules =
            json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]});
        for (kind, name) in [("Module", "copier"), ("Global", "global")] {
            let def = Definition::from_document(&json!({
                "type": kind, "name": name, "version": "1.0.0", "rbac": rules
            }))
            .expect(kind);
            let rbac = def.rbac.expect("declared");
            assert_eq!(rbac.rules[0].resources, vec!["secrets"]);
        }
    }

    #[test]
    fn an_unknown_field_is_refused_naming_it_the_closest_and_the_known_ones() {
        let err = Definition::from_document(&json!({
            "type": "Application", "name": "a", "version": "1.0.0",
            "requirments": {"kubernetes": ">=1.28"}
        }))
        .expect_err("a typo is refused");
        assert_eq!(err.field, "requirments");
        assert!(
            err.message.contains("did you mean `requirements`?"),
            "{err}"
        );
        assert!(
            err.message.contains("known fields: type, name, version"),
            "{err}"
        );
        // Far from every known field: no suggestion, still refused.
        let err = Definition::from_document(&json!({
            "type": "Application", "name": "a", "version": "1.0.0", "sidecars": []
        }))
        .expect_err("an unsupported section is refused");
        assert_eq!(err.field, "sidecars");
        assert!(!err.message.contains("did you mean"), "{err}");
    }

    #[test]
    fn deckhouse_module_fields_are_known() {
        let def = Definition::from_document(&json!({
            "apiVersion": "v1", "type": "Module", "name": "m", "version": "1.0.0",
            "stage": "General Availability", "weight": 10, "critical": true,
            "descriptions": {"en": "e", "ru": "r"}, "tags": ["a"], "subsystems": ["s"],
            "namespace": "d8-m", "exclusiveGroup": "g", "update": {"versions": []},
            "accessibility": {"editions": {"_default": {"available": true}}},
            "disable": {"confirmation": true, "message": "sure?"},
            "subscribe": {"apis": []}, "requirements": {"kubernetes": ">=1.28"}
        }))
        .expect("a Deckhouse module definition loads");
        assert_eq!(def.name, "m");
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                json!({"type": "Thing", "name": "a", "version": "1.0.0"}),
                "type",
            ),
            (json!({"type": "Application", "version": "1.0.0"}), "name"),
            (
                json!({"type": "Application", "name": "Bad_Name", "version": "1.0.0"}),
                "name",
            ),
            (
                json!({"type": "Application", "name": "a", "version": "one"}),
                "version",
            ),
            (
                json!({"type": "Application", "name": "a", "version": 1.5}),
                "version",
            ),
            (
                json!({"type": "Module", "name": "a", "version": "1.0.0", "weight": "high"}),
                "weight",
            ),
            (
                json!({"type": "Module", "name": "a", "version": "1.0.0", "values": "deep"}),
                "values",
            ),
            (
                json!({"type": "Global", "name": "a", "version": "1.0.0"}),
                "name",
            ),
            (
                json!({"type": "Module", "name": "global", "version": "1.0.0"}),
                "name",
            ),
            (
                json!({"type": "Global", "name": "global", "version": "1.0.0", "values": "flat"}),
                "values",
            ),
            (
                json!({"type": "Application", "name": "a", "version": "1.0.0", "rbac": {"rules": []}}),
                "rbac",
            ),
            (
                json!({"type": "Module", "name": "a", "version": "1.0.0", "rbac": {"rules": [{"verbs": ["get"]}]}}),
                "rbac.rules[0].apiGroups",
            ),
        ];
        for (doc, field) in cases {
            let err = Definition::from_document(&doc).expect_err(field);
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn camel_case_matches_deckhouse() {
        assert_eq!(camel_case("my-app"), "myApp");
        assert_eq!(camel_case("a-b-c"), "aBC");
        assert_eq!(camel_case("plain"), "plain");
    }
}
