//! PackageRepository resources: each defines, under its name, a repository that Applications,
//! Modules and gRPC Updates may name as they name configured ones
//! (docs/decisions/package-repositories.md). The controller reads the credentials Secret,
//! puts the definition into lifecycle (which checks it against the installation's
//! configuration: a configured name wins, a directory must be under a repository root), and
//! writes back `status.source` and Ready/Stalled; a finalizer forgets the definition when the
//! resource is deleted.

use std::sync::Arc;
use std::time::Duration;

use berth_proto::lifecycle::repository_definition::Source;
use berth_proto::lifecycle::{RegistryCredentials, RepositoryDefinition};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt as _};

use crate::client::CallError;
use crate::error::Error;
use crate::reconcile::{Context, now};
use crate::resources::{PackageRepository, PackageRepositorySpec, RepositoryStatus};
use crate::status::{bounded, reason_text};

/// Holds a resource until lifecycle has forgotten its definition.
pub const FINALIZER: &str = "berth.io/repository";
/// A credentials Secret outside the watched namespace changes without the resource changing:
/// read again this often.
const RECHECK: Duration = Duration::from_secs(300);
/// A definition that cannot be used (a missing Secret, a directory not there yet) is tried
/// again this often.
const INVALID_RETRY: Duration = Duration::from_secs(30);
/// Largest user name or password read from a Secret.
const MAX_CREDENTIAL_BYTES: usize = 16 * 1024;

/// The changes of credentials Secrets, and which PackageRepositories each concerns (those of
/// `repositories` whose `credentialsSecretRef` names it), for the controller to reconcile them
/// at once: Secrets of `namespace` (`None`: of every namespace), metadata only, release
/// records left out by type. A reconcile reads the Secret itself.
#[allow(clippy::type_complexity)]
pub fn credential_changes(
    client: &kube::Client,
    namespace: Option<&str>,
    repositories: kube::runtime::reflector::Store<PackageRepository>,
) -> (
    impl futures::Stream<Item = Result<PartialObjectMeta<Secret>, watcher::Error>> + Send + 'static,
    impl Fn(PartialObjectMeta<Secret>) -> Vec<ObjectRef<PackageRepository>> + Send + Sync + 'static,
) {
    // An Api of PartialObjectMeta asks for metadata only.
    let api: Api<PartialObjectMeta<Secret>> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default().fields("type!=helm.sh/release.v1");
    let changes = watcher::watcher(api, config).touched_objects();
    let concerned = move |secret: PartialObjectMeta<Secret>| {
        let (name, namespace) = (secret.name_any(), secret.namespace().unwrap_or_default());
        repositories
            .state()
            .iter()
            .filter(|r| {
                r.spec
                    .credentials_secret_ref
                    .as_ref()
                    .is_some_and(|s| s.name == name && s.namespace == namespace)
            })
            .map(|r| ObjectRef::from_obj(r.as_ref()))
            .collect()
    };
    (changes, concerned)
}

/// One reconcile of a PackageRepository (a trace root of its own, as the packages' are).
pub async fn reconcile(obj: Arc<PackageRepository>, cx: Arc<Context>) -> Result<Action, Error> {
    let span = tracing::info_span!(
        parent: None,
        "controller.reconcile",
        kind = "PackageRepository",
        name = %obj.name_any(),
    );
    tracing::Instrument::instrument(reconcile_one(&obj, &cx), span).await
}

async fn reconcile_one(obj: &PackageRepository, cx: &Context) -> Result<Action, Error> {
    let name = obj.name_any();
    let api: Api<PackageRepository> = Api::all(cx.client.clone());
    let mut finalizers = obj.finalizers().to_vec();
    if obj.metadata.deletion_timestamp.is_some() {
        if finalizers.iter().any(|f| f == FINALIZER) {
            cx.lifecycle.delete_repository(&name).await?;
            finalizers.retain(|f| f != FINALIZER);
            set_finalizers(&api, obj, finalizers).await?;
        }
        return Ok(Action::await_change());
    }
    if !finalizers.iter().any(|f| f == FINALIZER) {
        // The next reconcile (this patch's event) defines the repository.
        finalizers.push(FINALIZER.to_owned());
        set_finalizers(&api, obj, finalizers).await?;
        return Ok(Action::await_change());
    }
    let defined = match definition(&name, &obj.spec, &cx.client).await {
        Ok(def) => cx.lifecycle.put_repository(def).await.map_err(|e| match e {
            CallError::Invalid(why) => Ok(why),
            other => Err(other),
        }),
        Err(why) => Err(Ok(why)),
    };
    let (status, retry) = match defined {
        Ok(source) => (status(obj, Ok(source)), RECHECK),
        Err(Ok(why)) => (status(obj, Err(why)), INVALID_RETRY),
        Err(Err(e)) => return Err(e.into()),
    };
    if obj.status.as_ref() != Some(&status) {
        let patch = serde_json::json!({ "status": status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(Action::requeue(retry))
}

/// What lifecycle is told the resource defines: its source, and the credentials its Secret
/// holds (keys `username` and `password`). What is wrong is named.
async fn definition(
    name: &str,
    spec: &PackageRepositorySpec,
    client: &kube::Client,
) -> Result<RepositoryDefinition, String> {
    let source = match (&spec.directory, &spec.archive, &spec.oci) {
        (Some(d), None, None) => Source::Directory(d.clone()),
        (None, Some(a), None) => Source::ArchiveUrl(a.clone()),
        (None, None, Some(o)) => Source::Oci(o.clone()),
        _ => return Err("exactly one of directory, archive and oci".into()),
    };
    let credentials = match &spec.credentials_secret_ref {
        None => None,
        Some(r) => {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &r.namespace);
            let at = format!("Secret {}/{}", r.namespace, r.name);
            let secret = secrets
                .get_opt(&r.name)
                .await
                .map_err(|e| format!("reading {at}: {e}"))?
                .ok_or_else(|| format!("{at} not found"))?;
            Some(RegistryCredentials {
                username: credential(&secret, &at, "username")?,
                password: credential(&secret, &at, "password")?,
            })
        }
    };
    Ok(RepositoryDefinition {
        name: name.to_owned(),
        source: Some(source),
        plain_http: spec.plain_http,
        credentials,
    })
}

/// Key `k` of `secret` (`at`, for errors): UTF-8, at most [`MAX_CREDENTIAL_BYTES`], without
/// the line end a file written by an editor ends with.
fn credential(secret: &Secret, at: &str, k: &str) -> Result<String, String> {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(k))
        .ok_or_else(|| format!("{at} has no key {k:?}"))?;
    if bytes.0.len() > MAX_CREDENTIAL_BYTES {
        return Err(format!(
            "{at}: {k} is larger than {MAX_CREDENTIAL_BYTES} bytes"
        ));
    }
    String::from_utf8(bytes.0.clone())
        .map(|s| s.trim_end_matches(['\r', '\n']).to_owned())
        .map_err(|_| format!("{at}: {k} is not UTF-8"))
}

/// The status for the answer: Ready with the source it resolved to, or Stalled naming why.
fn status(obj: &PackageRepository, answer: Result<String, String>) -> RepositoryStatus {
    let previous = obj.status.as_ref();
    let observed = obj.metadata.generation;
    let now = now();
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        let before = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason_text(reason),
            message: bounded(message),
            observed_generation: observed,
            last_transition_time: match before {
                Some(c) if c.status == status => c.last_transition_time.clone(),
                _ => now.clone(),
            },
        }
    };
    match answer {
        Ok(source) => RepositoryStatus {
            observed_generation: observed,
            message: String::new(),
            conditions: vec![
                condition(
                    "Ready",
                    "True",
                    "Defined",
                    &format!("Updates may name it: {source}"),
                ),
                condition("Stalled", "False", "Defined", ""),
            ],
            source,
        },
        Err(why) => RepositoryStatus {
            observed_generation: observed,
            source: String::new(),
            conditions: vec![
                condition("Ready", "False", "Invalid", &why),
                condition("Stalled", "True", "Invalid", &why),
            ],
            message: why,
        },
    }
}

async fn set_finalizers(
    api: &Api<PackageRepository>,
    obj: &PackageRepository,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    // A compare-and-swap on the resourceVersion, as for packages' resources.
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()},
    });
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(key: &str, value: Vec<u8>) -> Secret {
        Secret {
            data: Some([(key.to_owned(), ByteString(value))].into()),
            ..Default::default()
        }
    }

    /// A credential is read up to its bound and refused past it, naming the Secret and the key;
    /// a value that is not text, or a missing key, is named too.
    #[test]
    fn credentials_are_bounded_text_named_when_wrong() {
        let at = "Secret berth/pull";
        let largest = "p".repeat(MAX_CREDENTIAL_BYTES);
        assert_eq!(
            credential(
                &secret("password", largest.clone().into_bytes()),
                at,
                "password"
            ),
            Ok(largest)
        );
        assert_eq!(
            credential(
                &secret("password", vec![b'p'; MAX_CREDENTIAL_BYTES + 1]),
                at,
                "password"
            ),
            Err(format!(
                "Secret berth/pull: password is larger than {MAX_CREDENTIAL_BYTES} bytes"
            ))
        );
        assert_eq!(
            credential(&secret("password", b"s3cret\r\n".to_vec()), at, "password"),
            Ok("s3cret".to_owned())
        );
        assert_eq!(
            credential(&secret("password", vec![0xff, 0xfe]), at, "password"),
            Err("Secret berth/pull: password is not UTF-8".to_owned())
        );
        assert_eq!(
            credential(&secret("username", b"u".to_vec()), at, "password"),
            Err("Secret berth/pull has no key \"password\"".to_owned())
        );
    }
}
