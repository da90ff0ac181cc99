//! What an Application or a Module asks of lifecycle: the package it names, the owner it
//! speaks as, and the Update (or removal) its spec means. Pure: unit-tested here.

use berth_proto::v1;
use kube::ResourceExt as _;

use crate::resources::{Application, Module, PackageStatus};

/// The version a Module without `packageVersion` installs: the newest an OCI repository has
/// (other repositories refuse a constraint, naming it).
pub const NEWEST: &str = "*";

/// What a resource's spec asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Desired {
    /// The package, as this Update.
    Install(v1::UpdateRequest),
    /// No package (a Module with `enabled: false`).
    Absent,
    /// The spec names nothing to install; the message says what is missing.
    Incomplete(String),
}

/// An Application or a Module.
pub trait Front:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + serde::Serialize
    + Send
    + Sync
    + 'static
{
    const KIND: &'static str;

    /// The package instance the resource stands for.
    fn package_ref(&self) -> v1::PackageRef;

    /// The owner the controller names for it (`Application <namespace>/<name>`,
    /// `Module <name>`).
    fn owner(&self) -> String;

    fn desired(&self) -> Desired;

    fn suspend(&self) -> bool;

    fn status(&self) -> Option<&PackageStatus>;

    /// The API the resource is written through (its namespace's, or the cluster's).
    fn api(&self, client: kube::Client) -> kube::Api<Self>;

    /// The package's key (`<namespace>.<name>` for an App, `<name>` for a Module).
    fn key(&self) -> String {
        let r = self.package_ref();
        if r.namespace.is_empty() {
            r.name
        } else {
            format!("{}.{}", r.namespace, r.name)
        }
    }
}

/// A resource's settings are the whole truth: none written is `{}` (the stored settings are
/// replaced), never "keep what is stored", which only the imperative API offers.
fn settings(value: Option<&serde_json::Value>) -> Option<prost_types::Struct> {
    Some(value.map_or_else(prost_types::Struct::default, berth_proto::json::to_struct))
}

fn settings_version(v: Option<i64>) -> u32 {
    v.and_then(|v| u32::try_from(v).ok()).unwrap_or_default()
}

impl Front for Application {
    const KIND: &'static str = "Application";

    fn package_ref(&self) -> v1::PackageRef {
        v1::PackageRef {
            kind: v1::PackageKind::App.into(),
            name: self.name_any(),
            namespace: self.namespace().unwrap_or_default(),
        }
    }

    fn owner(&self) -> String {
        format!(
            "Application {}/{}",
            self.namespace().unwrap_or_default(),
            self.name_any()
        )
    }

    fn desired(&self) -> Desired {
        let spec = &self.spec;
        Desired::Install(v1::UpdateRequest {
            r#ref: Some(self.package_ref()),
            repository: spec.repository.clone(),
            package: spec.package.clone().unwrap_or_else(|| self.name_any()),
            version: spec.version.clone(),
            settings: settings(spec.settings.as_ref()),
            force: false,
            settings_version: settings_version(spec.settings_version),
            reset_settings: false,
        })
    }

    fn suspend(&self) -> bool {
        self.spec.suspend
    }

    fn api(&self, client: kube::Client) -> kube::Api<Self> {
        kube::Api::namespaced(client, &self.namespace().unwrap_or_default())
    }

    fn status(&self) -> Option<&PackageStatus> {
        self.status.as_ref()
    }
}

impl Front for Module {
    const KIND: &'static str = "Module";

    fn package_ref(&self) -> v1::PackageRef {
        v1::PackageRef {
            kind: v1::PackageKind::Module.into(),
            name: self.name_any(),
            namespace: String::new(),
        }
    }

    fn owner(&self) -> String {
        format!("Module {}", self.name_any())
    }

    fn desired(&self) -> Desired {
        let spec = &self.spec;
        if spec.enabled == Some(false) {
            return Desired::Absent;
        }
        let repository = spec
            .repository
            .clone()
            .or_else(|| spec.source.clone())
            .filter(|r| !r.is_empty());
        let Some(repository) = repository else {
            return Desired::Incomplete(
                "spec.repository (or ModuleConfig's spec.source): required to install the module"
                    .into(),
            );
        };
        Desired::Install(v1::UpdateRequest {
            r#ref: Some(self.package_ref()),
            repository,
            package: spec.package.clone().unwrap_or_else(|| self.name_any()),
            version: spec
                .package_version
                .clone()
                .unwrap_or_else(|| NEWEST.to_owned()),
            settings: settings(spec.settings.as_ref()),
            force: false,
            settings_version: settings_version(spec.version),
            reset_settings: false,
        })
    }

    fn suspend(&self) -> bool {
        self.spec.suspend || self.spec.maintenance.as_deref() == Some("NoResourceReconciliation")
    }

    fn api(&self, client: kube::Client) -> kube::Api<Self> {
        kube::Api::all(client)
    }

    fn status(&self) -> Option<&PackageStatus> {
        self.status.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(spec: serde_json::Value) -> Module {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "berth.io/v1alpha1", "kind": "Module",
            "metadata": {"name": "cert-manager"}, "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn an_application_is_an_app_update_named_after_it() {
        let app: Application = serde_json::from_value(serde_json::json!({
            "apiVersion": "berth.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"repository": "examples/packages", "version": "1.0.0", "package": "hello",
                     "settings": {"replicas": 2}, "settingsVersion": 1},
        }))
        .unwrap();
        assert_eq!(app.owner(), "Application team-a/web");
        assert_eq!(app.key(), "team-a.web");
        let Desired::Install(u) = app.desired() else {
            panic!("install")
        };
        assert_eq!(
            (u.package.as_str(), u.version.as_str(), u.settings_version),
            ("hello", "1.0.0", 1)
        );
        assert_eq!(u.r#ref.unwrap().kind, i32::from(v1::PackageKind::App));
    }

    /// A Deckhouse ModuleConfig's spec, under berth's apiVersion and kind, means what it
    /// means there: enabled, settings, settings version, maintenance and source.
    #[test]
    fn a_module_config_converts_by_its_kind() {
        let m = module(serde_json::json!({
            "enabled": true, "version": 2, "settings": {"logLevel": "Debug"},
            "source": "deckhouse", "updatePolicy": "stable",
        }));
        let Desired::Install(u) = m.desired() else {
            panic!("install")
        };
        assert_eq!(
            (
                u.repository.as_str(),
                u.version.as_str(),
                u.settings_version
            ),
            ("deckhouse", NEWEST, 2)
        );
        assert_eq!(m.key(), "cert-manager");
        assert!(!m.suspend());
        let m =
            module(serde_json::json!({"maintenance": "NoResourceReconciliation", "source": "x"}));
        assert!(m.suspend());
        assert_eq!(
            module(serde_json::json!({"enabled": false})).desired(),
            Desired::Absent
        );
        assert!(
            matches!(module(serde_json::json!({})).desired(), Desired::Incomplete(m) if m.contains("spec.repository"))
        );
    }
}
