//! A PackageRepository's definition (lifecycle's `RepositoryDefinition`, which lifecycle keeps
//! and workers receive in their specs) as `berth-package` reads it: lifecycle and the worker
//! both check it against their configuration with `Repositories::define`.

/// A PackageRepository's definition as berth-package reads it.
pub fn defined(
    def: &berth_proto::lifecycle::RepositoryDefinition,
) -> Result<berth_package::Defined, String> {
    use berth_proto::lifecycle::repository_definition::Source as S;
    let (mut directory, mut archive, mut oci) = (None, None, None);
    match &def.source {
        Some(S::Directory(d)) => directory = Some(d.as_str()),
        Some(S::ArchiveUrl(u)) => archive = Some(u.as_str()),
        Some(S::Oci(o)) => oci = Some(o.as_str()),
        None => {}
    }
    let credentials = def
        .credentials
        .as_ref()
        .map(|c| berth_package::Credentials {
            username: c.username.clone(),
            password: c.password.clone(),
        });
    berth_package::Defined::from_parts(directory, archive, oci, def.plain_http, credentials)
}
