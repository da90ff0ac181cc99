//! Executing the Kubernetes object operations a hook wrote to `KUBERNETES_PATCH_PATH`.
//!
//! The batch is checked as a whole first (every kind resolves, every namespace is allowed) so
//! a bad operation applies nothing; then the operations run in file order and the first failure
//! stops the batch. Semantics follow shell-operator (reference §7.6): CreateOrUpdate replaces an
//! existing object keeping its resourceVersion, Delete waits (bounded) until the object is gone,
//! patches may ignore a missing object.

use std::time::Duration;

use berth_proto::hookevent::ObjectOperation;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::Value;

use super::records;
use super::resolve::{ResolveError, Resolved, Resolver};
use std::sync::Arc;

use crate::jq::{Jq, JqFilter};

/// Longest one API call of an operation may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a foreground Delete waits for the object to disappear.
/// Generous because foreground deletion of a workload waits for its dependents: a
/// Deployment's pods alone get a 30 s termination grace period by default, plus the time the
/// garbage collector and kubelets take. It stays under the bound on the worker's whole call to
/// ApplyObjectOperations (120 s, the client channel in `berth_runtime::connect_lazy`), so a
/// slow deletion fails with this message rather than a bare call timeout.
const DELETE_WAIT: Duration = Duration::from_secs(90);
/// Attempts of a read-modify-write (CreateOrUpdate, JQPatch) that keeps hitting conflicts.
const CONFLICT_ATTEMPTS: usize = 5;
/// Most operations one hook run may request.
pub const MAX_OPERATIONS: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum OperationError {
    #[error("operations[{index}] ({what}): {reason}")]
    Invalid {
        index: usize,
        what: String,
        reason: String,
    },
    #[error("operations[{index}] ({what}): {source}")]
    Resolve {
        index: usize,
        what: String,
        source: ResolveError,
    },
    #[error("operations[{index}] ({what}): {reason}")]
    Failed {
        index: usize,
        what: String,
        reason: String,
    },
}

impl OperationError {
    pub fn is_invalid(&self) -> bool {
        !matches!(self, OperationError::Failed { .. })
    }
}

/// One operation, checked and resolved.
struct Planned {
    op: String,
    resolved: Resolved,
    namespace: Option<String>,
    name: String,
    subresource: Option<String>,
    body: Value,
    jq: Option<Arc<JqFilter>>,
    ignore_missing: bool,
    what: String,
    /// A core Secret: what a JQPatch makes of it is checked not to be a release record.
    secret: bool,
}

/// Checks then executes `operations` in order as `principal` (a client acting as the package's
/// ServiceAccount: the API server has the last word on what they may do, the checks here only
/// refuse early and clearly); returns one line per operation.
pub async fn apply_operations(
    resolver: &Resolver,
    principal: &kube::Client,
    jq: &Jq,
    app_namespace: &str,
    operations: &[ObjectOperation],
) -> Result<Vec<String>, OperationError> {
    if operations.len() > MAX_OPERATIONS {
        return Err(OperationError::Invalid {
            index: MAX_OPERATIONS,
            what: "batch".into(),
            reason: format!(
                "{} operations exceed the limit of {MAX_OPERATIONS}",
                operations.len()
            ),
        });
    }
    let mut planned = Vec::with_capacity(operations.len());
    for (index, op) in operations.iter().enumerate() {
        planned.push(plan(resolver, jq, app_namespace, index, op).await?);
    }
    let mut results = Vec::with_capacity(planned.len());
    for (index, p) in planned.iter().enumerate() {
        let outcome = execute(principal, jq, p)
            .await
            .map_err(|reason| OperationError::Failed {
                index,
                what: p.what.clone(),
                reason,
            })?;
        results.push(format!("{}: {outcome}", p.what));
    }
    Ok(results)
}

async fn plan(
    resolver: &Resolver,
    jq: &Jq,
    app_namespace: &str,
    index: usize,
    op: &ObjectOperation,
) -> Result<Planned, OperationError> {
    let kind_of_create = matches!(
        op.operation.as_str(),
        "Create" | "CreateOrUpdate" | "CreateIfNotExists"
    );
    let body: Value = op
        .body
        .as_ref()
        .map_or(Value::Null, berth_proto::json::from_value);
    let (api_version, kind, namespace, name) = if kind_of_create {
        let s = |p: &str| {
            body.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        (
            s("/apiVersion"),
            s("/kind"),
            s("/metadata/namespace"),
            s("/metadata/name"),
        )
    } else {
        (
            op.api_version.clone(),
            op.kind.clone(),
            op.namespace.clone(),
            op.name.clone(),
        )
    };
    let what = format!(
        "{} {}{kind} {}{name}",
        op.operation,
        if api_version.is_empty() {
            String::new()
        } else {
            format!("{api_version}/")
        },
        if namespace.is_empty() {
            String::new()
        } else {
            format!("{namespace}/")
        }
    );
    let invalid = |reason: String| OperationError::Invalid {
        index,
        what: what.clone(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("the object has no name (metadata.name)".into()));
    }
    // Names, namespaces and subresources become segments of the request's URL path, unescaped
    // by the client: anything that could change the URL is refused.
    if let Some(reason) = unsafe_path_segment(&name) {
        return Err(invalid(format!("name {name:?}: {reason}")));
    }
    if !namespace.is_empty()
        && let Some(reason) = unsafe_path_segment(&namespace)
    {
        return Err(invalid(format!("namespace {namespace:?}: {reason}")));
    }
    if !op.subresource.is_empty() && !op.subresource.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(invalid(format!(
            "subresource {:?}: only lowercase letters",
            op.subresource
        )));
    }
    let resolved = resolver
        .resolve(&api_version, &kind)
        .await
        .map_err(|source| OperationError::Resolve {
            index,
            what: what.clone(),
            source,
        })?;
    let secret = resolved.resource.group.is_empty() && resolved.resource.kind == "Secret";
    if secret && let Some(why) = records::refusal(&op.operation, &name, &body) {
        return Err(invalid(why));
    }
    let namespace = match (
        resolved.namespaced,
        namespace.is_empty(),
        app_namespace.is_empty(),
    ) {
        (false, _, true) => None,
        (false, _, false) => {
            return Err(invalid(format!(
                "{kind} is cluster-scoped; an app may only touch objects in its namespace {app_namespace}"
            )));
        }
        (true, true, true) => {
            return Err(invalid(format!(
                "{kind} is namespaced: namespace is required"
            )));
        }
        (true, true, false) => Some(app_namespace.to_owned()),
        (true, false, _) if !app_namespace.is_empty() && namespace != app_namespace => {
            return Err(invalid(format!(
                "namespace {namespace}: an app may only touch objects in its namespace {app_namespace}"
            )));
        }
        (true, false, _) => Some(namespace),
    };
    let jq = match op.operation.as_str() {
        "JQPatch" => Some(
            jq.check(&op.jq_filter)
                .await
                .map_err(|e| invalid(e.to_string()))?,
        ),
        _ => None,
    };
    if op.operation == "JSONPatch" {
        serde_json::from_value::<json_patch::Patch>(body.clone())
            .map_err(|e| invalid(format!("jsonPatch: {e}")))?;
    }
    let mut body = body;
    if kind_of_create
        && let (Some(ns), Some(meta)) = (
            &namespace,
            body.get_mut("metadata").and_then(Value::as_object_mut),
        )
    {
        meta.insert("namespace".into(), Value::from(ns.clone()));
    }
    Ok(Planned {
        op: op.operation.clone(),
        resolved,
        namespace,
        name,
        subresource: (!op.subresource.is_empty()).then(|| op.subresource.clone()),
        body,
        jq,
        ignore_missing: op.ignore_missing_object,
        what,
        secret,
    })
}

/// Why `segment` cannot be an object name in a URL path, if it cannot: the API server's own
/// rule for names (not `.` or `..`, no `/` or `%`), plus what would end or break the path
/// (`?`, `#`, whitespace and control characters) and its length limit.
fn unsafe_path_segment(segment: &str) -> Option<&'static str> {
    if segment == "." || segment == ".." {
        Some("may not be '.' or '..'")
    } else if segment.len() > 253 {
        Some("is longer than 253 characters")
    } else if segment
        .chars()
        .any(|c| matches!(c, '/' | '%' | '?' | '#') || c.is_whitespace() || c.is_control())
    {
        Some("may not contain '/', '%', '?', '#', spaces or control characters")
    } else {
        None
    }
}

async fn bounded<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service(
            format!("no answer within {CALL_TIMEOUT:?}").into(),
        )),
    }
}

fn status_is(e: &kube::Error, check: fn(&kube::core::Status) -> bool) -> bool {
    matches!(e, kube::Error::Api(s) if check(s))
}

async fn execute(client: &kube::Client, jq: &Jq, p: &Planned) -> Result<&'static str, String> {
    let api: Api<DynamicObject> = match &p.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &p.resolved.resource),
        None => Api::all_with(client.clone(), &p.resolved.resource),
    };
    let text = |e: kube::Error| e.to_string();
    match p.op.as_str() {
        "Create" | "CreateIfNotExists" | "CreateOrUpdate" => {
            let object: DynamicObject =
                serde_json::from_value(p.body.clone()).map_err(|e| format!("object: {e}"))?;
            match bounded(api.create(&PostParams::default(), &object)).await {
                Ok(_) => {
                    write_subresource(&api, p).await?;
                    Ok("created")
                }
                Err(e) if status_is(&e, kube::core::Status::is_already_exists) => {
                    match p.op.as_str() {
                        "CreateIfNotExists" => Ok("exists; left as is"),
                        "CreateOrUpdate" => {
                            replace_keeping_version(&api, p, NewObject::Body(&p.body)).await?;
                            write_subresource(&api, p).await?;
                            Ok("updated")
                        }
                        _ => Err(text(e)),
                    }
                }
                Err(e) => Err(text(e)),
            }
        }
        "Delete" | "DeleteInBackground" | "DeleteNonCascading" => {
            let params = match p.op.as_str() {
                "Delete" => DeleteParams::foreground(),
                "DeleteInBackground" => DeleteParams::background(),
                _ => DeleteParams::orphan(),
            };
            let pending = match bounded(api.delete(&p.name, &params)).await {
                // Still there (finalizers, dependents being deleted first): the API server
                // answers with the object, else with a Status.
                Ok(answer) => answer.left().and_then(|object| object.metadata.uid),
                Err(e) if status_is(&e, kube::core::Status::is_not_found) => {
                    return Ok("already absent");
                }
                Err(e) => return Err(text(e)),
            };
            if let (true, Some(uid)) = (p.op == "Delete", pending) {
                // Watched, not polled: done when this object (by uid) is gone.
                let gone = kube::runtime::wait::await_condition(
                    api.clone(),
                    &p.name,
                    kube::runtime::wait::conditions::is_deleted(&uid),
                );
                match tokio::time::timeout(DELETE_WAIT, gone).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(format!("watching the deletion: {e}")),
                    Err(_) => return Err(format!("still present {DELETE_WAIT:?} after deletion")),
                }
            }
            Ok("deleted")
        }
        "MergePatch" | "JSONPatch" => {
            let patch: Patch<Value> = if p.op == "MergePatch" {
                Patch::Merge(p.body.clone())
            } else {
                Patch::Json(
                    serde_json::from_value(p.body.clone())
                        .map_err(|e| format!("jsonPatch: {e}"))?,
                )
            };
            let pp = PatchParams::default();
            let result = match &p.subresource {
                Some(sub) => bounded(api.patch_subresource(sub, &p.name, &pp, &patch)).await,
                None => bounded(api.patch(&p.name, &pp, &patch)).await,
            };
            match result {
                Ok(_) => Ok("patched"),
                Err(e) if p.ignore_missing && status_is(&e, kube::core::Status::is_not_found) => {
                    Ok("absent; ignored")
                }
                Err(e) => Err(text(e)),
            }
        }
        "JQPatch" => {
            let Some(filter) = &p.jq else {
                return Err("jqFilter missing".into());
            };
            match replace_keeping_version(&api, p, NewObject::Jq(jq, filter)).await {
                Ok(()) => Ok("patched"),
                Err(e) if p.ignore_missing && e.starts_with("not found") => Ok("absent; ignored"),
                Err(e) => Err(e),
            }
        }
        other => Err(format!("unknown operation {other:?}")),
    }
}

/// How a read-modify-write computes the new object from the current one.
enum NewObject<'a> {
    /// This body, whatever the current object.
    Body(&'a Value),
    /// The jq program's result on the current object.
    Jq(&'a Jq, &'a JqFilter),
}

impl NewObject<'_> {
    async fn of(&self, current: &Value) -> Result<Value, String> {
        match self {
            NewObject::Body(body) => Ok((*body).clone()),
            NewObject::Jq(jq, filter) => jq.run(filter, current).await.map_err(|e| e.to_string()),
        }
    }
}

/// Get → compute the new object → replace with the read resourceVersion; retried on conflict.
async fn replace_keeping_version(
    api: &Api<DynamicObject>,
    p: &Planned,
    compute: NewObject<'_>,
) -> Result<(), String> {
    for _ in 0..CONFLICT_ATTEMPTS {
        let Some(current) = bounded(api.get_opt(&p.name))
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err("not found".into());
        };
        let current = serde_json::to_value(&current).map_err(|e| e.to_string())?;
        let mut next = compute.of(&current).await?;
        if p.secret
            && let Some(why) = records::record_like(&next)
        {
            return Err(format!(
                "the result would be a release record ({why}); release records are berth's own, and hooks may not write them"
            ));
        }
        let version = current
            .pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(Value::Null);
        match next.pointer_mut("/metadata").and_then(Value::as_object_mut) {
            Some(meta) => {
                meta.insert("resourceVersion".into(), version);
            }
            None => return Err("the new object has no metadata".into()),
        }
        let object: DynamicObject =
            serde_json::from_value(next).map_err(|e| format!("new object: {e}"))?;
        let result = match p.subresource.as_deref().filter(|_| p.op == "JQPatch") {
            Some(sub) => {
                bounded(api.replace_subresource(sub, &p.name, &PostParams::default(), &object))
                    .await
            }
            None => bounded(api.replace(&p.name, &PostParams::default(), &object)).await,
        };
        match result {
            Ok(_) => return Ok(()),
            Err(e) if status_is(&e, kube::core::Status::is_conflict) => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("conflicts on {CONFLICT_ATTEMPTS} attempts"))
}

/// For Create*/CreateOrUpdate with `subresource` (e.g. `status`): writes that part of the
/// object through the subresource, since the main endpoint ignores it.
async fn write_subresource(api: &Api<DynamicObject>, p: &Planned) -> Result<(), String> {
    let Some(sub) = &p.subresource else {
        return Ok(());
    };
    let Some(part) = p.body.get(sub.as_str()) else {
        return Ok(());
    };
    let patch = Patch::Merge(serde_json::json!({ sub.clone(): part }));
    bounded(api.patch_subresource(sub, &p.name, &PatchParams::default(), &patch))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::unsafe_path_segment;

    #[test]
    fn names_that_would_change_a_url_path_are_refused() {
        for bad in [
            ".",
            "..",
            "a/b",
            "x?dryRun=All",
            "x#y",
            "50%",
            "a b",
            "a\nb",
        ] {
            assert!(unsafe_path_segment(bad).is_some(), "{bad:?}");
        }
        let long = "a".repeat(254);
        assert!(unsafe_path_segment(&long).is_some());
        for good in [
            "web",
            "my.config-1",
            "system:controller:x",
            "a".repeat(253).as_str(),
        ] {
            assert_eq!(unsafe_path_segment(good), None, "{good:?}");
        }
    }
}
