//! Package instances as Kubernetes principals (docs/decisions/package-identity.md).
//!
//! Every package instance has a ServiceAccount: an App `<ns>.<name>` has `berth-app-<name>` in
//! its namespace, bound by a RoleBinding of that name to the shared ClusterRole `berth-app`
//! (everything, confined to the namespace by the binding); a Module (or the Global package)
//! `<name>` has `berth-module-<name>` in `berth-system`, bound by a ClusterRoleBinding to the
//! ClusterRole `berth-module-<name>` built from its `rbac:` rules, or to `cluster-admin` when it
//! declares none. This module makes and removes those objects ([`Principals::ensure`],
//! [`Principals::remove`]), mints their tokens for hooks ([`Principals::mint`]) and gives the
//! clients that act as them ([`Principals::client`]) for everything release writes for a
//! package. What a package is and what it may do come from lifecycle (the service asks it);
//! nothing here takes a caller's word.

mod objects;
mod token;

pub use token::{HookEndpoint, Minted, missing_account};

use std::time::Duration;

use berth_clients::scope::{PackageScope, ServiceAccountRef};
use berth_proto::lifecycle::Rbac;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, GetParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::Value;

use crate::apply::impersonate::ImpersonatingClients;
use crate::apply::{Applier, ApplyError, FIELD_MANAGER, ObjectKey, is_not_found};

/// Bound on each API call made here.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a written binding may take to be honoured by the API server's authorizer (it
/// reads RBAC objects from its own watch cache) before EnsurePrincipal gives up, retryable.
const EFFECTIVE_WAIT: Duration = Duration::from_secs(10);

/// How long after writing a binding the first SubjectAccessReview asks whether it counts.
const FIRST_REVIEW_AFTER: Duration = Duration::from_millis(20);

/// What a package's ServiceAccount may do.
#[derive(Clone, Debug, PartialEq)]
pub enum Rights {
    /// An App: everything in its namespace (`berth-app`, bound there).
    Namespace,
    /// A Module without `rbac:`: `cluster-admin`, the documented default.
    ClusterAdmin,
    /// A Module's declared rules, as Kubernetes PolicyRules (JSON).
    Rules(Vec<Value>),
    /// A Module whose loaded version lifecycle does not know (not loaded yet): its bindings
    /// are left as they are.
    Unknown,
}

impl Rights {
    /// The rights of a package of `scope` whose loaded `rbac:` is `rbac` (`None`: not loaded).
    pub fn of(scope: &PackageScope, rbac: Option<&Rbac>) -> Rights {
        match (scope, rbac) {
            (PackageScope::App { .. }, _) => Rights::Namespace,
            (PackageScope::Module { .. }, None) => Rights::Unknown,
            (PackageScope::Module { .. }, Some(r)) if !r.declared => Rights::ClusterAdmin,
            (PackageScope::Module { .. }, Some(r)) => {
                Rights::Rules(r.rules.iter().map(objects::policy_rule).collect())
            }
        }
    }
}

/// Pod Security admission level of the App namespaces berth labels
/// (`pod-security.kubernetes.io/enforce` and `warn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PodSecurity {
    Privileged,
    #[default]
    Baseline,
    Restricted,
}

impl PodSecurity {
    pub fn as_str(self) -> &'static str {
        match self {
            PodSecurity::Privileged => "privileged",
            PodSecurity::Baseline => "baseline",
            PodSecurity::Restricted => "restricted",
        }
    }

    /// The labels of an App namespace at this level.
    pub fn labels(self) -> [(&'static str, &'static str); 2] {
        [
            (ENFORCE_LABEL, self.as_str()),
            ("pod-security.kubernetes.io/warn", self.as_str()),
        ]
    }
}

/// The Pod Security label whose presence means someone decided a namespace's level.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

#[derive(Debug, thiserror::Error)]
pub enum PrincipalError {
    #[error("{op} {object}: {source}")]
    Kube {
        op: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("{op} {object}: no answer within {CALL_TIMEOUT:?}")]
    Timeout { op: &'static str, object: String },
    #[error("the namespace of {principal}: {source}")]
    Namespace {
        principal: String,
        // Boxed: an ApplyError is as large as a kube::Error, and this variant would make every
        // Result of the principal code carry both.
        #[source]
        source: Box<ApplyError>,
    },
    /// The cluster does not serve what is asked (TokenRequest).
    #[error("{0}")]
    NotServed(String),
    /// A binding was written but the API server did not honour it in time.
    #[error("{0}")]
    NotEffective(String),
    #[error("{0}")]
    Invalid(String),
}

impl PrincipalError {
    /// Whether trying again later may succeed (the API server unreachable or slow).
    pub fn is_unavailable(&self) -> bool {
        match self {
            PrincipalError::Timeout { .. } | PrincipalError::NotEffective(_) => true,
            PrincipalError::Kube { source, .. } => crate::apply::kube_unavailable(source),
            PrincipalError::Namespace { source, .. } => source.is_unavailable(),
            _ => false,
        }
    }
}

/// The key of a principal object (as [`objects`] builds them).
fn object_key(object: &Value) -> ObjectKey {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    ObjectKey {
        api_version: s("/apiVersion").to_owned(),
        kind: s("/kind").to_owned(),
        namespace: s("/metadata/namespace").to_owned(),
        name: s("/metadata/name").to_owned(),
    }
}

async fn call<T>(
    op: &'static str,
    object: &impl std::fmt::Display,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, PrincipalError> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(PrincipalError::Kube {
            op,
            object: object.to_string(),
            source,
        }),
        Err(_) => Err(PrincipalError::Timeout {
            op,
            object: object.to_string(),
        }),
    }
}

/// Whether [`Principals::ensure_object`] reads the live object before it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Live {
    Read,
    /// Known not to exist (made with an object that did not): written without a read.
    Absent,
}

/// What [`Principals::ensure_object`] did, with the key of what it wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ensured {
    Unchanged,
    /// Written where none was (or none was read).
    Created(ObjectKey),
    /// Written over a live object that differed.
    Updated(ObjectKey),
}

impl Ensured {
    /// The key of the object when it was written.
    fn written(self) -> Option<ObjectKey> {
        match self {
            Ensured::Unchanged => None,
            Ensured::Created(key) | Ensured::Updated(key) => Some(key),
        }
    }
}

/// Makes, removes and acts as packages' principals.
#[derive(Clone)]
pub struct Principals {
    /// The release service's own identity: principal objects are its to write.
    client: Client,
    /// For the App namespaces (the same memory of namespaces found as installs use).
    applier: Applier,
    clients: ImpersonatingClients,
    endpoint: HookEndpoint,
    pod_security: PodSecurity,
    /// The shared ClusterRole `berth-app`, applied once per process.
    app_role: std::sync::Arc<tokio::sync::OnceCell<()>>,
}

impl Principals {
    /// Principals written through `applier`'s client; hooks reach the API server at `endpoint`;
    /// App namespaces get `pod_security`'s labels.
    pub fn new(applier: Applier, endpoint: HookEndpoint, pod_security: PodSecurity) -> Principals {
        let client = applier.client().clone();
        Principals {
            clients: ImpersonatingClients::new(client.clone()),
            client,
            applier,
            endpoint,
            pod_security,
            app_role: Default::default(),
        }
    }

    /// The labels a namespace of `scope`'s releases gets: Pod Security for an App's, none for
    /// `berth-system`.
    pub fn namespace_labels(&self, scope: &PackageScope) -> Vec<(&'static str, &'static str)> {
        match scope {
            PackageScope::App { .. } => self.pod_security.labels().to_vec(),
            PackageScope::Module { .. } => vec![],
        }
    }

    /// A client acting as `scope`'s ServiceAccount.
    pub fn client(&self, scope: &PackageScope) -> Result<Client, PrincipalError> {
        let user = scope.service_account().username();
        self.clients
            .get(&user)
            .map_err(|e| PrincipalError::Invalid(format!("impersonating {user}: {e}")))
    }

    /// Makes `scope`'s principal objects what `rights` says, writing only those missing or
    /// different; when it wrote a binding or role, waits until the API server honours it.
    /// Returns the objects written.
    pub async fn ensure(
        &self,
        scope: &PackageScope,
        rights: &Rights,
    ) -> Result<Vec<ObjectKey>, PrincipalError> {
        let sa = scope.service_account();
        let namespace = scope
            .app_namespace()
            .unwrap_or(berth_clients::scope::SYSTEM_NAMESPACE);
        self.applier
            .ensure_namespace(namespace, &self.namespace_labels(scope))
            .await
            .map_err(|source| PrincipalError::Namespace {
                principal: sa.to_string(),
                source: Box::new(source),
            })?;
        let mut written = Vec::new();
        let account = self
            .ensure_object(&objects::service_account(scope), Live::Read)
            .await?;
        // A ServiceAccount that was not there is a new principal: its binding, made with it and
        // removed before it, is written without reading it first (a stale binding left by an
        // interrupted removal is replaced, see `Live::Absent`). One request fewer per install.
        let binding_live = match account {
            Ensured::Created(_) => Live::Absent,
            Ensured::Unchanged | Ensured::Updated(_) => Live::Read,
        };
        if let Some(key) = account.written() {
            written.push(key);
        }
        let mut rights_written = false;
        match (scope, rights) {
            (PackageScope::App { .. }, _) => {
                self.ensure_app_role().await?;
                let binding = objects::app_binding(scope);
                if let Some(key) = self.ensure_object(&binding, binding_live).await?.written() {
                    written.push(key);
                    rights_written = true;
                }
            }
            (PackageScope::Module { .. }, Rights::Unknown) => {}
            (PackageScope::Module { name }, Rights::ClusterAdmin) => {
                let binding = objects::module_binding(name, objects::CLUSTER_ADMIN);
                if let Some(key) = self.ensure_object(&binding, binding_live).await?.written() {
                    written.push(key);
                    rights_written = true;
                }
                // A role left from rules declared before: nothing binds it any more.
                self.delete(&objects::module_role(name, &[])).await?;
            }
            (PackageScope::Module { name }, Rights::Rules(rules)) => {
                let role = objects::module_role(name, rules);
                for object in [
                    role.clone(),
                    objects::module_binding(name, &role_name(&role)),
                ] {
                    if let Some(key) = self.ensure_object(&object, Live::Read).await?.written() {
                        written.push(key);
                        rights_written = true;
                    }
                }
            }
            (PackageScope::Module { .. }, Rights::Namespace) => {
                return Err(PrincipalError::Invalid(format!(
                    "{sa}: a module's rights are its rules or the default, not a namespace"
                )));
            }
        }
        if rights_written {
            self.wait_effective(scope, rights).await?;
        }
        Ok(written)
    }

    /// Deletes `scope`'s principal objects (those that exist); returns those deleted.
    pub async fn remove(&self, scope: &PackageScope) -> Result<Vec<ObjectKey>, PrincipalError> {
        let mut gone = Vec::new();
        let objects = match scope {
            PackageScope::App { .. } => vec![objects::app_binding(scope)],
            PackageScope::Module { name } => vec![
                objects::module_binding(name, objects::CLUSTER_ADMIN),
                objects::module_role(name, &[]),
            ],
        };
        for object in objects
            .iter()
            .chain(std::iter::once(&objects::service_account(scope)))
        {
            if let Some(key) = self.delete(object).await? {
                gone.push(key);
            }
        }
        self.clients.forget(&scope.service_account().username());
        Ok(gone)
    }

    /// The shared ClusterRole `berth-app`, once per process.
    async fn ensure_app_role(&self) -> Result<(), PrincipalError> {
        self.app_role
            .get_or_try_init(|| async {
                self.ensure_object(&objects::app_role(), Live::Read)
                    .await
                    .map(drop)
            })
            .await
            .map(drop)
    }

    /// Applies `desired` unless the live object already has its labels, annotations and
    /// content; a binding whose `roleRef` (immutable) differs is deleted first. With
    /// [`Live::Absent`] the live object is not read: `desired` is applied, and a binding the API
    /// server refuses because a stale one holds another `roleRef` is deleted and applied again.
    async fn ensure_object(&self, desired: &Value, live: Live) -> Result<Ensured, PrincipalError> {
        let (api, key) = self.api(desired)?;
        let live = match live {
            Live::Absent => None,
            // From the API server's watch cache (resourceVersion 0): a read that costs no etcd
            // round trip; a stale answer only makes this write what was already there.
            Live::Read => match call("get", &key, api.get_with(&key.name, &GetParams::any())).await
            {
                Ok(live) => Some(serde_json::to_value(live).unwrap_or_default()),
                Err(PrincipalError::Kube {
                    source: kube::Error::Api(s),
                    ..
                }) if is_not_found(&s) => None,
                Err(e) => return Err(e),
            },
        };
        if let Some(live) = &live {
            if objects::matches(desired, live) {
                return Ok(Ensured::Unchanged);
            }
            if desired.get("roleRef").is_some() && desired.get("roleRef") != live.get("roleRef") {
                self.delete(desired).await?;
            }
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(desired);
        let apply = || call("apply", &key, api.patch(&key.name, &pp, &patch));
        match apply().await {
            Ok(_) => {}
            // Only when the object was not read: a binding left with another roleRef, which
            // the API server will not change in place (422).
            Err(PrincipalError::Kube {
                source: kube::Error::Api(s),
                ..
            }) if live.is_none() && s.code == 422 && desired.get("roleRef").is_some() => {
                self.delete(desired).await?;
                apply().await?;
            }
            Err(e) => return Err(e),
        }
        tracing::info!(object = %key, "principal object written");
        Ok(if live.is_some() {
            Ensured::Updated(key)
        } else {
            Ensured::Created(key)
        })
    }

    /// Deletes `object` if it exists; `Some` when it did.
    async fn delete(&self, object: &Value) -> Result<Option<ObjectKey>, PrincipalError> {
        let (api, key) = self.api(object)?;
        match call(
            "delete",
            &key,
            api.delete(&key.name, &DeleteParams::default()),
        )
        .await
        {
            Ok(_) => Ok(Some(key)),
            Err(PrincipalError::Kube {
                source: kube::Error::Api(s),
                ..
            }) if is_not_found(&s) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn api(&self, object: &Value) -> Result<(Api<DynamicObject>, ObjectKey), PrincipalError> {
        let ar: ApiResource = objects::resource(object).ok_or_else(|| {
            PrincipalError::Invalid(format!("not a principal object: {}", object["kind"]))
        })?;
        let key = object_key(object);
        let api = if key.namespace.is_empty() {
            Api::all_with(self.client.clone(), &ar)
        } else {
            Api::namespaced_with(self.client.clone(), &key.namespace, &ar)
        };
        Ok((api, key))
    }

    /// Waits until the API server's authorizer honours `scope`'s rights (it caches RBAC
    /// objects from a watch, so a binding written a moment ago may not count yet), asking with
    /// SubjectAccessReviews of what the first rule grants. A cluster that serves no
    /// SubjectAccessReview (the dev cluster before it authorised) is not waited for.
    async fn wait_effective(
        &self,
        scope: &PackageScope,
        rights: &Rights,
    ) -> Result<(), PrincipalError> {
        let sa = scope.service_account();
        let Some(attributes) = objects::probe(scope, rights) else {
            return Ok(());
        };
        let review = serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": sa.username(),
                "groups": service_account_groups(&sa),
                attributes.0: attributes.1,
            }
        });
        let ar = ApiResource {
            group: "authorization.k8s.io".into(),
            version: "v1".into(),
            api_version: "authorization.k8s.io/v1".into(),
            kind: "SubjectAccessReview".into(),
            plural: "subjectaccessreviews".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let object: DynamicObject = serde_json::from_value(review)
            .map_err(|e| PrincipalError::Invalid(format!("a SubjectAccessReview: {e}")))?;
        let deadline = tokio::time::Instant::now() + EFFECTIVE_WAIT;
        // Asked at once, a review found the binding not yet honoured seven times in ten (1.7
        // reviews per install of 1,000 Apps on ../shared/kube, where every review walks every
        // RoleBinding of the namespace); a moment's pause first makes one review the rule.
        tokio::time::sleep(FIRST_REVIEW_AFTER).await;
        let mut pause = Duration::from_millis(10);
        loop {
            let what = format!("SubjectAccessReview of {sa}");
            match call("create", &what, api.create(&PostParams::default(), &object)).await {
                Ok(answer)
                    if answer.data.pointer("/status/allowed") == Some(&Value::Bool(true)) =>
                {
                    return Ok(());
                }
                Ok(_) => {}
                Err(PrincipalError::Kube {
                    source: kube::Error::Api(s),
                    ..
                }) if is_not_found(&s) => return Ok(()),
                Err(e) => return Err(e),
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(PrincipalError::NotEffective(format!(
                    "the API server did not honour the bindings of {sa} within {EFFECTIVE_WAIT:?}"
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// A token of `scope`'s ServiceAccount, for its hooks (see [`token`]).
    pub async fn mint(&self, scope: &PackageScope) -> Result<Minted, PrincipalError> {
        token::mint(&self.client, scope, &self.endpoint).await
    }
}

/// The groups the API server gives a ServiceAccount's requests.
fn service_account_groups(sa: &ServiceAccountRef) -> [String; 3] {
    [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{}", sa.namespace),
        "system:authenticated".to_owned(),
    ]
}

fn role_name(role: &Value) -> String {
    role.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
