//! berth's CustomResourceDefinitions (`crds/`, the same files `deploy/chart/crds/` ships),
//! applied by the controller at start with server-side apply, then waited for until the API
//! server serves them (Established).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::error::Error;

/// The field manager berth's applies are recorded under.
pub const MANAGER: &str = "berth-controller";

/// The CRDs, as YAML: Application, Module, PackageRepository.
pub const FILES: &[(&str, &str)] = &[
    (
        "applications.yaml",
        include_str!("../crds/applications.yaml"),
    ),
    ("modules.yaml", include_str!("../crds/modules.yaml")),
    (
        "packagerepositories.yaml",
        include_str!("../crds/packagerepositories.yaml"),
    ),
];

/// The CRDs, parsed.
pub fn definitions() -> Result<Vec<CustomResourceDefinition>, Error> {
    FILES
        .iter()
        .map(|(file, text)| {
            serde_saphyr::from_str(text).map_err(|e| Error::Crds(format!("{file}: {e}")))
        })
        .collect()
}

/// Applies every CRD and waits (at most `wait`) until each is Established.
pub async fn install(client: &kube::Client, wait: Duration) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(MANAGER).force();
    let crds = definitions()?;
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd)).await?;
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        match tokio::time::timeout(wait, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(Error::Crds(format!("{name}: {e}"))),
            Err(_) => {
                return Err(Error::Crds(format!(
                    "{name} is not Established after {wait:?}"
                )));
            }
        }
    }
    tracing::info!(
        crds = crds.len(),
        "berth's CustomResourceDefinitions are established"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crds_parse_and_name_berths_kinds() {
        let crds = definitions().unwrap();
        let kinds: Vec<&str> = crds.iter().map(|c| c.spec.names.kind.as_str()).collect();
        assert_eq!(kinds, ["Application", "Module", "PackageRepository"]);
        for crd in &crds {
            assert_eq!(crd.spec.group, crate::resources::GROUP);
            let v = &crd.spec.versions[0];
            assert_eq!(v.name, crate::resources::VERSION);
            assert!(v.subresources.as_ref().is_some_and(|s| s.status.is_some()));
            let columns: Vec<&str> = v
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| c.name.as_str())
                .collect();
            assert!(
                columns.contains(&"Ready") && columns.contains(&"Age"),
                "{columns:?}"
            );
        }
    }

    /// The chart ships the same files.
    #[test]
    fn the_chart_ships_the_same_crds() {
        let chart =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/chart/crds");
        for (file, text) in FILES {
            let shipped = std::fs::read_to_string(chart.join(file))
                .unwrap_or_else(|e| panic!("deploy/chart/crds/{file}: {e}"));
            assert_eq!(
                &shipped, text,
                "deploy/chart/crds/{file} differs from services/controller/crds/{file}"
            );
        }
    }
}
