//! Who repairs a release: replicas of the release service share the cluster, and each
//! release's drift repair is owned by one of them at a time through a
//! `coordination.k8s.io/v1` Lease in the release's namespace, named
//! `berth-release-<release>` and labelled [`LEASE_LABEL`]`=<release>`. The Lease rules
//! (client-go's, per Lease) are in the shared `berth-lease` crate.

pub use berth_lease::{Claim, LeaseConfig, MAX_IDENTITY_LEN};

/// Label every release Lease carries; its value is the release's name.
pub const LEASE_LABEL: &str = "berth.io/release-lease";

/// The host's name and a random suffix: unique per process, readable in `kubectl get lease`.
pub fn default_identity() -> String {
    berth_lease::default_identity("berth-release")
}

/// The default configuration of a release replica: a fresh identity, 15 s Leases renewed
/// every 5 s.
pub fn default_config() -> LeaseConfig {
    LeaseConfig::new(default_identity())
}

/// The name of the Lease of `release` (in the release's namespace).
pub fn lease_name(release: &str) -> String {
    format!("berth-release-{release}")
}

/// One replica's view of one release's Lease.
pub(super) type Elector = berth_lease::Elector;

/// The elector of `release`'s Lease in `namespace`.
pub(super) fn elector(
    client: kube::Client,
    namespace: &str,
    release: &str,
    config: LeaseConfig,
) -> Elector {
    berth_lease::Elector::new(
        client,
        namespace,
        &lease_name(release),
        [(LEASE_LABEL.to_owned(), release.to_owned())].into(),
        config,
    )
}

/// Deletes the Lease of `release` whoever holds it (the release was uninstalled).
pub(super) async fn delete(
    client: kube::Client,
    namespace: &str,
    release: &str,
) -> Result<(), kube::Error> {
    berth_lease::delete(client, namespace, &lease_name(release)).await
}

/// (namespace, release) of every release Lease in the cluster.
pub(super) async fn list(client: kube::Client) -> Result<Vec<(String, String)>, kube::Error> {
    Ok(berth_lease::list(client, LEASE_LABEL)
        .await?
        .into_iter()
        .filter_map(|lease| {
            let meta = lease.metadata;
            let release = meta.labels?.get(LEASE_LABEL)?.clone();
            (meta.name.as_deref() == Some(lease_name(&release).as_str()))
                .then_some((meta.namespace?, release))
        })
        .collect())
}
