//! berth's resources (`berth.io/v1alpha1`): `Application`, `Module` and `PackageRepository`,
//! as the controller reads and writes them. Their CustomResourceDefinitions are the YAML files
//! in `crds/` (structural schemas, printer columns, the status subresource), written by hand
//! so they read as the API they are; these types follow them (`crds::tests` checks the fields
//! agree).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const GROUP: &str = "berth.io";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "berth.io/v1alpha1";
/// The finalizer that runs Remove before a resource goes.
pub const FINALIZER: &str = "berth.io/remove";

/// An App instance (namespaced), as `berth update NAME -n NS --kind app` makes it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "berth.io",
    version = "v1alpha1",
    kind = "Application",
    namespaced,
    status = "PackageStatus",
    shortname = "app",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    pub repository: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_version: Option<i64>,
    #[serde(default)]
    pub suspend: bool,
}

/// A Module (cluster-scoped). Its fields are a Deckhouse ModuleConfig's (`enabled`,
/// `settings`, `version` — the settings version —, `maintenance`, `source`, `updatePolicy`)
/// plus berth's `package`, `packageVersion`, `repository` and `suspend`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "berth.io",
    version = "v1alpha1",
    kind = "Module",
    status = "PackageStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ModuleSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Value>,
    /// The settings version (ModuleConfig's `spec.version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_policy: Option<String>,
    #[serde(default)]
    pub suspend: bool,
}

/// A package repository resources may name.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "berth.io",
    version = "v1alpha1",
    kind = "PackageRepository",
    status = "RepositoryStatus",
    shortname = "pkgrepo",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct PackageRepositorySpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<String>,
    #[serde(default)]
    pub plain_http: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SecretRef {
    pub name: String,
    pub namespace: String,
}

/// The status of an Application or a Module.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackageStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub package: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resolved_version: String,
    /// The version last Ready.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ready_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_generation: Option<i64>,
    #[serde(default)]
    pub suspended: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// The status of a PackageRepository.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}
