//! The REST verbs on resources: get, list, watch, create, update, patch, delete,
//! deletecollection.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};

use std::sync::Arc;

use super::query::{self, Query};
use super::route::ObjectRoute;
use super::{App, admission, json_response, reviews, scale, table, watch};
use crate::auth::attributes::Attributes;
use crate::auth::{self, UserInfo, escalation, rbac};
use crate::patch::PatchKind;
use crate::podsecurity;
use crate::protobuf::{self, ProtobufError};
use crate::resources::ResourceType;
use crate::status::{ApiError, success_status};
use crate::store::{DeleteOptions, Part, WriteCheck, WriteOptions, present};
use crate::watch::WatchFilter;

/// One request on a resource path.
pub struct Request<'a> {
    pub method: &'a Method,
    pub route: ObjectRoute,
    pub query: Query,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
    /// Who makes it (after impersonation).
    pub user: &'a UserInfo,
    /// `Warning`s for the answer (Pod Security's), added by admission.
    pub warnings: &'a Warnings,
}

/// Warnings collected while a request is handled, answered as `Warning` headers.
pub type Warnings = Arc<std::sync::Mutex<Vec<String>>>;

/// The admission a write of `rt` passes under the store lock: RBAC's escalation prevention
/// for Roles, ClusterRoles and their bindings; Pod Security for pods and workloads (with the
/// policy of their namespace as it is now) and for namespaces' labels.
fn write_check(app: &App, req: &Request<'_>, rt: &ResourceType) -> Option<WriteCheck> {
    if rt.group == rbac::GROUP {
        let rbac = app.store.rbac().clone();
        let user = req.user.clone();
        return Some(Arc::new(move |rt, old, new| {
            escalation::role_ref_unchanged(rt, old, new)?;
            escalation::check(&rbac, &user, rt, old, new)
        }));
    }
    if rt.group.is_empty() && rt.plural == "namespaces" {
        return Some(Arc::new(|_, _, new| podsecurity::validate_namespace(new)));
    }
    if !podsecurity::applies_to(&rt.group, &rt.plural) {
        return None;
    }
    let namespace = req.route.namespace.as_deref()?;
    let ns_type = app.store.resolve("", "v1", "namespaces")?;
    let policy = podsecurity::policy(&app.store.get(&ns_type, "", namespace).ok()?);
    if policy.is_privileged() {
        return None;
    }
    let warnings = req.warnings.clone();
    Some(Arc::new(move |rt, old, new| {
        let found = podsecurity::admit(&policy, &rt.group, &rt.plural, old, new)?;
        warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(found);
        Ok(())
    }))
}

/// Write options of a request, with its admission.
fn write_options(
    app: &App,
    req: &Request<'_>,
    rt: &ResourceType,
) -> Result<WriteOptions, ApiError> {
    let mut opts = query::write_options(&req.query, req.headers)?;
    opts.check = write_check(app, req, rt);
    Ok(opts)
}

pub async fn handle(app: &App, req: Request<'_>) -> Result<Response, ApiError> {
    // A namespace's enforce level that changes warns about the pods that violate it.
    let namespace_before = (req.route.group.is_empty()
        && req.route.plural == "namespaces"
        && req.route.namespace.is_none()
        && matches!(*req.method, Method::PUT | Method::PATCH))
    .then(|| req.route.name.clone())
    .flatten()
    .and_then(|name| {
        let rt = app.store.resolve("", "v1", "namespaces")?;
        app.store.get(&rt, "", &name).ok()
    });
    let result = handle_request(app, &req).await;
    if let (Some(before), Ok(response)) = (namespace_before, &result)
        && response.status().is_success()
    {
        namespace_warnings(app, &req, &before);
    }
    result
}

/// Warns about the pods of a namespace that violate its new `enforce` level.
fn namespace_warnings(app: &App, req: &Request<'_>, before: &Value) {
    let name = crate::store::meta_str(before, "name");
    let (Some(ns_type), Some(pod_type)) = (
        app.store.resolve("", "v1", "namespaces"),
        app.store.resolve("", "v1", "pods"),
    ) else {
        return;
    };
    let Ok(after) = app.store.get(&ns_type, "", &name) else {
        return;
    };
    let opts = crate::store::ListOptions {
        namespace: Some(name.clone()),
        ..Default::default()
    };
    let Ok(pods) = app.store.list(&pod_type, &opts) else {
        return;
    };
    let pods: Vec<(String, Value, Value)> = pods
        .items
        .iter()
        .map(|p| {
            (
                crate::store::meta_str(p, "name"),
                p.get("metadata").cloned().unwrap_or_default(),
                p.get("spec").cloned().unwrap_or_default(),
            )
        })
        .collect();
    let found = podsecurity::namespace_warnings(&name, before, &after, &pods);
    req.warnings
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(found);
}

async fn handle_request(app: &App, req: &Request<'_>) -> Result<Response, ApiError> {
    let r = &req.route;
    let rt = app
        .store
        .resolve(&r.group, &r.version, &r.plural)
        .ok_or_else(|| ApiError::no_route(&format!("{} {}", r.plural, gv(&r.group, &r.version))))?;
    if r.namespace.is_some() && !rt.namespaced {
        return Err(ApiError::no_route(&format!(
            "{} is not namespaced",
            rt.qualified_name()
        )));
    }
    let ns = r.namespace.clone().unwrap_or_default();
    if rt.create_only {
        return reviews::review(app, req, &rt, &ns);
    }
    if let (true, Some("token"), Some(name)) = (
        rt.group.is_empty() && rt.plural == "serviceaccounts",
        r.subresource.as_deref(),
        r.name.as_deref(),
    ) {
        return reviews::token_request(app, req, &ns, name);
    }
    if let (Some("scale"), Some(name)) = (r.subresource.as_deref(), r.name.as_deref())
        && scale::has_scale(&rt)
    {
        return scale::handle(app, &rt, req, &ns, name);
    }
    let part = match r.subresource.as_deref() {
        None | Some("finalize") => Part::Main,
        Some("status") if rt.has_status => Part::Status,
        Some(other) => {
            return Err(ApiError::no_route(&format!(
                "{}/{other}",
                rt.qualified_name()
            )));
        }
    };
    match (req.method, r.name.clone()) {
        (&Method::GET, None) if query::is_watch(&req.query) => {
            watch_collection(app, &rt, req, r.namespace.as_deref())
        }
        (&Method::GET, None) => list(app, &rt, req, r.namespace.as_deref()),
        (&Method::GET, Some(name)) => {
            let obj = app.store.get(&rt, &ns, &name)?;
            Ok(render(req, &rt, StatusCode::OK, obj))
        }
        (&Method::POST, None) => {
            if rt.namespaced && r.namespace.is_none() {
                return Err(ApiError::method_not_allowed(format!(
                    "create of {} requires a namespace in the URL",
                    rt.qualified_name()
                )));
            }
            let mut body = parse_body(req.headers, req.body)?;
            let opts = write_options(app, req, &rt)?;
            if admission::any(app) {
                if rt.namespaced && body["metadata"]["namespace"].is_null() && body.is_object() {
                    body["metadata"]["namespace"] = Value::from(ns.as_str());
                }
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let attempt = admission::Attempt {
                    rt: &rt,
                    operation: "CREATE",
                    namespace: &ns,
                    name: &name,
                    object: Some(body.clone()),
                    old_object: None,
                    dry_run: opts.dry_run,
                    warnings: req.warnings,
                };
                body = admission::admit(app, attempt).await?.unwrap_or(body);
            }
            let obj = app.store.create(&rt, r.namespace.as_deref(), body, &opts)?;
            Ok(json_response(StatusCode::CREATED, &obj))
        }
        (&Method::PUT, Some(name)) => {
            let mut body = parse_body(req.headers, req.body)?;
            let opts = write_options(app, req, &rt)?;
            if part == Part::Main
                && admission::any(app)
                && let Ok(old) = app.store.get(&rt, &ns, &name)
            {
                let attempt = admission::Attempt {
                    rt: &rt,
                    operation: "UPDATE",
                    namespace: &ns,
                    name: &name,
                    object: Some(body.clone()),
                    old_object: Some(old),
                    dry_run: opts.dry_run,
                    warnings: req.warnings,
                };
                body = admission::admit(app, attempt).await?.unwrap_or(body);
            }
            let obj = app.store.update(&rt, &ns, &name, body, part, &opts)?;
            Ok(json_response(StatusCode::OK, &obj))
        }
        (&Method::PATCH, Some(name)) => {
            let content_type = req
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchKind::from_content_type(content_type)?;
            let opts = write_options(app, req, &rt)?;
            if opts.force && kind != PatchKind::Apply {
                return Err(ApiError::bad_request(
                    "force: Forbidden: may not be specified for non-apply patch",
                ));
            }
            if kind == PatchKind::Apply
                && part == Part::Main
                && app.store.get(&rt, &ns, &name).is_err()
            {
                // An apply that creates needs `create` as well, as in kube-apiserver.
                let create = Attributes {
                    verb: "create".into(),
                    resource_request: true,
                    api_group: rt.group.clone(),
                    api_version: rt.version.clone(),
                    namespace: ns.clone(),
                    resource: rt.plural.clone(),
                    name: name.clone(),
                    ..Default::default()
                };
                let decision = app.store.rbac().authorize(req.user, &create);
                if !decision.allowed {
                    return Err(auth::forbidden(req.user, &create, &decision.reason));
                }
            }
            if part == Part::Main && admission::any(app) {
                // The patched object as it would be stored, run through the webhooks; a
                // mutated result is then written whole.
                let preview_opts = crate::store::WriteOptions {
                    dry_run: true,
                    ..opts.clone()
                };
                let old = app.store.get(&rt, &ns, &name).ok();
                let (preview, created) =
                    app.store
                        .patch(&rt, &ns, &name, kind, req.body, part, &preview_opts)?;
                let attempt = admission::Attempt {
                    rt: &rt,
                    operation: if created { "CREATE" } else { "UPDATE" },
                    namespace: &ns,
                    name: &name,
                    object: Some(preview.clone()),
                    old_object: old,
                    dry_run: opts.dry_run,
                    warnings: req.warnings,
                };
                let admitted = admission::admit(app, attempt).await?;
                if let Some(mutated) = admitted.filter(|a| *a != preview) {
                    let obj = if created {
                        app.store
                            .create(&rt, r.namespace.as_deref(), mutated, &opts)?
                    } else {
                        app.store.update(&rt, &ns, &name, mutated, part, &opts)?
                    };
                    let code = if created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    return Ok(json_response(code, &obj));
                }
            }
            let (obj, created) = app
                .store
                .patch(&rt, &ns, &name, kind, req.body, part, &opts)?;
            let code = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(json_response(code, &obj))
        }
        (&Method::DELETE, Some(name)) => {
            let opts = query::delete_options(&req.query, req.body)?;
            if admission::any(app)
                && let Ok(old) = app.store.get(&rt, &ns, &name)
            {
                let attempt = admission::Attempt {
                    rt: &rt,
                    operation: "DELETE",
                    namespace: &ns,
                    name: &name,
                    object: None,
                    old_object: Some(old),
                    dry_run: opts.dry_run,
                    warnings: req.warnings,
                };
                admission::admit(app, attempt).await?;
            }
            let obj = app.store.delete(&rt, &ns, &name, &opts)?;
            Ok(json_response(StatusCode::OK, &deleted_answer(&rt, obj)))
        }
        (&Method::DELETE, None) => delete_collection(app, &rt, req, r.namespace.as_deref()),
        (m, _) => Err(ApiError::method_not_allowed(format!(
            "{m} is not supported on this path"
        ))),
    }
}

/// What a DELETE answers: the object while it is being finalized; once it is gone, a
/// `Success` Status naming it for built-in kinds (as kube-apiserver does for every kind but
/// custom resources and CRDs, whose deleted object is returned).
fn deleted_answer(rt: &ResourceType, obj: Value) -> Value {
    if rt.custom
        || rt.group == "apiextensions.k8s.io"
        || obj.pointer("/metadata/deletionTimestamp").is_some()
    {
        return obj;
    }
    let mut details = serde_json::Map::new();
    let meta = |f: &str| {
        obj.pointer(&format!("/metadata/{f}"))
            .cloned()
            .unwrap_or_default()
    };
    details.insert("name".into(), meta("name"));
    if !rt.group.is_empty() {
        details.insert("group".into(), json!(rt.group));
    }
    details.insert("kind".into(), json!(rt.plural));
    details.insert("uid".into(), meta("uid"));
    success_status(Value::Object(details))
}

fn gv(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Decodes a create/update body: JSON, YAML, or Kubernetes protobuf for the kinds
/// [`crate::protobuf`] converts (client-go sends built-in kinds as protobuf when asked
/// to, and has no fallback to JSON). CBOR gets 415, on which client-go retries as JSON.
pub(super) fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = content_type.split(';').next().unwrap_or_default().trim();
    match media {
        "application/json" | "" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("error decoding request body as JSON: {e}"))
        }),
        "application/yaml" => serde_saphyr::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("error decoding request body as YAML: {e}"))
        }),
        protobuf::CONTENT_TYPE => protobuf::decode(body).map_err(|e| match e {
            ProtobufError::UnsupportedKind { .. } => {
                ApiError::unsupported_media_type_because(media, &e.to_string())
            }
            other => ApiError::bad_request(format!("error decoding request body: {other}")),
        }),
        other => Err(ApiError::unsupported_media_type(
            other,
            "application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )),
    }
}

/// JSON, or a Table when kubectl asks for server-side printing.
fn render(req: &Request<'_>, rt: &ResourceType, code: StatusCode, obj: Value) -> Response {
    let accept = req
        .headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if table::wants_table(accept) {
        let meta = json!({ "resourceVersion": obj.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null) });
        return json_response(
            code,
            &table::custom_table(
                &rt.printer_columns,
                &[obj],
                meta,
                req.query.get("includeObject").map(String::as_str),
            ),
        );
    }
    json_response(code, &obj)
}

fn list(
    app: &App,
    rt: &ResourceType,
    req: &Request<'_>,
    namespace: Option<&str>,
) -> Result<Response, ApiError> {
    let opts = query::list_options(&req.query, rt, namespace)?;
    let result = app.store.list(rt, &opts)?;
    let accept = req
        .headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if table::wants_table(accept) {
        let include = req.query.get("includeObject").map(String::as_str);
        let items: Vec<Value> = result.items.iter().map(|o| present(rt, o)).collect();
        return Ok(json_response(
            StatusCode::OK,
            &table::custom_table(&rt.printer_columns, &items, result.list_meta(), include),
        ));
    }
    Ok((
        StatusCode::OK,
        [(http::header::CONTENT_TYPE, "application/json")],
        result.to_bytes(rt),
    )
        .into_response())
}

fn watch_collection(
    app: &App,
    rt: &ResourceType,
    req: &Request<'_>,
    namespace: Option<&str>,
) -> Result<Response, ApiError> {
    let opts = query::list_options(&req.query, rt, namespace)?;
    let params = query::watch_params(&req.query)?;
    let filter = WatchFilter {
        gr: rt.gr(),
        namespace: opts.namespace,
        labels: opts.labels,
        fields: opts.fields,
    };
    match app.store.watch(rt, filter, params.start) {
        Ok(stream) => Ok(watch::stream(
            rt.clone(),
            app.store.clone(),
            stream,
            &params,
            app.shutdown.clone(),
        )),
        Err(e) if e.code == 410 => Ok(watch::expired(rt, &e)),
        Err(e) => Err(e),
    }
}

/// DELETE on a collection: deletes every matching object, returning the deleted ones.
fn delete_collection(
    app: &App,
    rt: &ResourceType,
    req: &Request<'_>,
    namespace: Option<&str>,
) -> Result<Response, ApiError> {
    let opts = query::list_options(&req.query, rt, namespace)?;
    let del: DeleteOptions = query::delete_options(&req.query, req.body)?;
    let matching = app.store.list(
        rt,
        &crate::store::ListOptions {
            limit: None,
            continue_token: None,
            ..opts
        },
    )?;
    let mut deleted = Vec::new();
    for obj in &matching.items {
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match app.store.delete(rt, ns, name, &del) {
            Ok(mut o) => {
                // As in a list: items of built-in kinds carry no apiVersion/kind.
                if !rt.custom
                    && let Some(m) = o.as_object_mut()
                {
                    m.remove("apiVersion");
                    m.remove("kind");
                }
                deleted.push(o)
            }
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let mut list = json!({ "apiVersion": rt.api_version(), "kind": rt.list_kind, "metadata": { "resourceVersion": app.store.resource_version().to_string() }, "items": deleted });
    if deleted.is_empty() {
        list = success_status(json!({ "group": rt.group, "kind": rt.plural }));
    }
    Ok((StatusCode::OK, axum::Json(list)).into_response())
}
