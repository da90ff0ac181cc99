//! The data a template sees: `.Values`, `.Release`, `.Chart`, `.Capabilities`, `.Template`,
//! `.Files`, shaped the way Helm's Go structs appear to templates.

use super::chart::Chart;
use super::value::{from_json, map_value};
use crate::ReleaseInfo;
use gotmpl::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the cluster offers, for `.Capabilities`.
#[derive(Debug, Clone)]
pub struct Capabilities {
    /// e.g. `v1.36.0`.
    pub kube_version: String,
    /// `group/version` and `group/version/Kind` strings.
    pub api_versions: Vec<String>,
}

/// The API versions `helm template` (v4.2.3) assumes without a cluster, in its order: the
/// group versions its Kubernetes client library registers.
const DEFAULT_API_VERSIONS: [&str; 55] = [
    "v1",
    "admissionregistration.k8s.io/v1",
    "admissionregistration.k8s.io/v1alpha1",
    "admissionregistration.k8s.io/v1beta1",
    "internal.apiserver.k8s.io/v1alpha1",
    "apps/v1",
    "apps/v1beta1",
    "apps/v1beta2",
    "authentication.k8s.io/v1",
    "authentication.k8s.io/v1alpha1",
    "authentication.k8s.io/v1beta1",
    "authorization.k8s.io/v1",
    "authorization.k8s.io/v1beta1",
    "autoscaling/v1",
    "autoscaling/v2",
    "batch/v1",
    "batch/v1beta1",
    "certificates.k8s.io/v1",
    "certificates.k8s.io/v1beta1",
    "certificates.k8s.io/v1alpha1",
    "coordination.k8s.io/v1alpha2",
    "coordination.k8s.io/v1beta1",
    "coordination.k8s.io/v1",
    "discovery.k8s.io/v1",
    "discovery.k8s.io/v1beta1",
    "events.k8s.io/v1",
    "events.k8s.io/v1beta1",
    "extensions/v1beta1",
    "flowcontrol.apiserver.k8s.io/v1",
    "flowcontrol.apiserver.k8s.io/v1beta1",
    "flowcontrol.apiserver.k8s.io/v1beta2",
    "flowcontrol.apiserver.k8s.io/v1beta3",
    "networking.k8s.io/v1",
    "networking.k8s.io/v1beta1",
    "node.k8s.io/v1",
    "node.k8s.io/v1alpha1",
    "node.k8s.io/v1beta1",
    "policy/v1",
    "policy/v1beta1",
    "rbac.authorization.k8s.io/v1",
    "rbac.authorization.k8s.io/v1beta1",
    "rbac.authorization.k8s.io/v1alpha1",
    "resource.k8s.io/v1",
    "resource.k8s.io/v1beta2",
    "resource.k8s.io/v1beta1",
    "resource.k8s.io/v1alpha3",
    "scheduling.k8s.io/v1alpha2",
    "scheduling.k8s.io/v1beta1",
    "scheduling.k8s.io/v1",
    "storage.k8s.io/v1beta1",
    "storage.k8s.io/v1",
    "storage.k8s.io/v1alpha1",
    "storagemigration.k8s.io/v1beta1",
    "apiextensions.k8s.io/v1beta1",
    "apiextensions.k8s.io/v1",
];

impl Default for Capabilities {
    /// What `helm template` (v4.2.3) assumes without a cluster: Kubernetes v1.36.0 and the
    /// API versions its client library knows.
    fn default() -> Self {
        Capabilities {
            kube_version: "v1.36.0".into(),
            api_versions: DEFAULT_API_VERSIONS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

fn entries<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    map_value(
        pairs
            .into_iter()
            .map(|(k, v)| (Arc::<str>::from(k), v))
            .collect(),
    )
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}

pub fn release(r: &ReleaseInfo) -> Value {
    entries([
        ("Name", s(&r.name)),
        ("Namespace", s(&r.namespace)),
        ("Revision", Value::Int(i64::from(r.revision))),
        ("IsInstall", Value::Bool(r.is_install)),
        ("IsUpgrade", Value::Bool(r.is_upgrade)),
        ("Service", s("Helm")),
    ])
}

/// A `Chart.yaml` key as Go's field name: `apiVersion` → `APIVersion`, `url` → `URL`,
/// `import-values` → `ImportValues`, else the first letter upper-cased.
fn go_field(key: &str) -> String {
    match key {
        "apiVersion" => "APIVersion".into(),
        "url" => "URL".into(),
        "import-values" => "ImportValues".into(),
        other => {
            let mut cs = other.chars();
            cs.next()
                .map(|f| f.to_uppercase().chain(cs).collect())
                .unwrap_or_default()
        }
    }
}

/// A map of `Chart.yaml` keys as Go's struct fields: every field of `defaults` is there,
/// with the file's value when it has one.
fn go_struct(
    v: Option<&serde_json::Value>,
    defaults: &[(&str, Value)],
) -> BTreeMap<Arc<str>, Value> {
    let mut m: BTreeMap<Arc<str>, Value> = defaults
        .iter()
        .map(|(k, d)| (Arc::<str>::from(*k), d.clone()))
        .collect();
    if let Some(obj) = v.and_then(|v| v.as_object()) {
        for (k, v) in obj {
            if !v.is_null() {
                m.insert(go_field(k).into(), from_json(v));
            }
        }
    }
    m
}

fn empty_list() -> Value {
    Value::List(Arc::from([]))
}

/// `.Chart` as Helm hands it to templates: `Chart.yaml`'s metadata with Go's field names and
/// every field present (absent strings read as "", lists as empty, `Deprecated` false),
/// maintainers and dependencies shaped the same way, and `IsRoot`.
fn chart_from_metadata(metadata: &serde_json::Value, is_root: bool) -> Value {
    let string_fields = [
        "Name",
        "Version",
        "AppVersion",
        "APIVersion",
        "Description",
        "Type",
        "KubeVersion",
        "Home",
        "Icon",
        "Condition",
        "Tags",
    ];
    let mut defaults: Vec<(&str, Value)> = string_fields.iter().map(|k| (*k, s(""))).collect();
    defaults.extend([
        ("Deprecated", Value::Bool(false)),
        ("Keywords", empty_list()),
        ("Sources", empty_list()),
        ("Maintainers", empty_list()),
        ("Dependencies", empty_list()),
        ("Annotations", map_value(BTreeMap::new())),
    ]);
    let mut m = go_struct(Some(metadata), &defaults);
    let list_of = |key: &str, defaults: &[(&str, Value)]| -> Value {
        let items = metadata.get(key).and_then(|v| v.as_array());
        Value::List(
            items
                .into_iter()
                .flatten()
                .map(|item| map_value(go_struct(Some(item), defaults)))
                .collect(),
        )
    };
    m.insert(
        "Maintainers".into(),
        list_of(
            "maintainers",
            &[("Name", s("")), ("Email", s("")), ("URL", s(""))],
        ),
    );
    m.insert(
        "Dependencies".into(),
        list_of(
            "dependencies",
            &[
                ("Name", s("")),
                ("Version", s("")),
                ("Repository", s("")),
                ("Condition", s("")),
                ("Tags", empty_list()),
                ("Enabled", Value::Bool(true)),
                ("ImportValues", empty_list()),
                ("Alias", s("")),
            ],
        ),
    );
    m.insert("IsRoot".into(), Value::Bool(is_root));
    map_value(m)
}

/// `.Chart` as a chart sees it inside a release: an aliased subchart is named by its alias,
/// and `.Chart.Dependencies` holds the dependencies left on by `condition`/`tags`, each named
/// by its alias (Helm rewrites the metadata the same way before rendering).
pub fn chart_in_scope(scope: &super::values::Scope<'_>, is_root: bool) -> Value {
    let mut metadata = scope.chart.metadata.clone();
    if let Some(obj) = metadata.as_object_mut() {
        obj.insert("name".into(), serde_json::Value::String(scope.name.clone()));
        if obj.get("dependencies").is_some_and(|d| d.is_array()) {
            obj.insert(
                "dependencies".into(),
                serde_json::Value::Array(scope.dependencies.clone()),
            );
        }
    }
    chart_from_metadata(&metadata, is_root)
}

/// `.Capabilities`' fields in the order Go prints the struct.
pub const CAPABILITIES_FIELDS: &[&str] = &["KubeVersion", "APIVersions", "HelmVersion"];

/// The structs of `.Capabilities` and their fields in Go's order (how they print whole).
pub const CAPABILITY_STRUCTS: [(&str, &[&str]); 2] = [
    ("KubeVersion", &["Version", "GitVersion", "Major", "Minor"]),
    (
        "HelmVersion",
        &[
            "Version",
            "GitCommit",
            "GitTreeState",
            "GoVersion",
            "KubeClientVersion",
        ],
    ),
];

pub fn capabilities(caps: &Capabilities) -> Value {
    let v = caps.kube_version.trim_start_matches('v');
    let mut parts = v.split(['.', '-', '+']);
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    let kube = entries([
        ("Version", s(&caps.kube_version)),
        ("GitVersion", s(&caps.kube_version)),
        ("Major", s(major)),
        ("Minor", s(minor)),
    ]);
    entries([
        ("KubeVersion", kube),
        (
            "APIVersions",
            Value::List(caps.api_versions.iter().map(|v| s(v)).collect()),
        ),
        (
            "HelmVersion",
            entries([
                ("Version", s("v4.2.3")),
                ("GitCommit", s("43e8b7feece8beb0fcba47059ec9b522fd929a64")),
                ("GitTreeState", s("clean")),
                ("GoVersion", s("go1.26.5")),
                ("KubeClientVersion", s("v1.36")),
            ]),
        ),
    ])
}

/// `.Files`: path → content, for the hidden `__files*` functions `render::exec` calls for its
/// methods.
/// The content keeps every byte (see `render::bytes`), so a binary file reaches `b64enc` or
/// `AsSecrets` exactly as Helm hands it over.
pub fn files(c: &Chart) -> Value {
    map_value(
        c.files
            .iter()
            .map(|(p, b)| {
                let content = Value::String(super::bytes::from_bytes(b).into());
                (Arc::<str>::from(p.as_str()), content)
            })
            .collect(),
    )
}
