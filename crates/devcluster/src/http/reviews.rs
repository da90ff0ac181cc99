//! The APIs that are answered, never stored: the access reviews (`authorization.k8s.io/v1`
//! SelfSubjectAccessReview, SubjectAccessReview, LocalSubjectAccessReview,
//! SelfSubjectRulesReview, which `kubectl auth can-i` uses), `authentication.k8s.io/v1`
//! SelfSubjectReview (`kubectl auth whoami`) and TokenReview, and the TokenRequest subresource
//! of ServiceAccounts (`kubectl create token`). Each answers 201 with the object it was sent,
//! its `status` filled in, as kube-apiserver does.

use std::collections::BTreeMap;

use axum::response::Response;
use http::{Method, StatusCode};
use serde_json::{Map, Value, json};

use super::resource::{Request, parse_body};
use super::{App, json_response, query};
use crate::auth::attributes::Attributes;
use crate::auth::token::{Claims, ISSUER};
use crate::auth::{Authenticated, UserInfo};
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::now;

const AUTHZ: &str = "authorization.k8s.io";
const AUTHN: &str = "authentication.k8s.io";

/// Shortest and longest token lifetimes a TokenRequest may ask for, and the default.
const MIN_EXPIRATION: i64 = 600;
const MAX_EXPIRATION: i64 = 1 << 32;
const DEFAULT_EXPIRATION: i64 = 3600;

fn method_not_allowed() -> ApiError {
    let mut e = ApiError::method_not_allowed(
        "the server does not allow this method on the requested resource",
    );
    e.details = Some(json!({}));
    e
}

/// A 422 naming one invalid field, worded as kube-apiserver words it.
fn invalid_field(group: &str, kind: &str, field: &str, detail: &str) -> ApiError {
    let mut e = ApiError::new(
        422,
        "Invalid",
        format!("{kind}.{group} \"\" is invalid: {field}: {detail}"),
    );
    let mut details = json!({ "group": group });
    if !kind.is_empty() {
        details["kind"] = json!(kind);
    }
    details["causes"] =
        json!([{ "reason": "FieldValueInvalid", "message": detail, "field": field }]);
    e.details = Some(details);
    e
}

/// `managedFields` of an answered create: one Update entry owning what the request set. A
/// nested object of the spec is owned itself (`.`) when `own_structs`, as kube-apiserver
/// records the access reviews' attributes (not the TokenRequest's bound object).
fn managed_fields(
    manager: &str,
    api_version: &str,
    spec: &Value,
    subresource: Option<&str>,
    own_structs: bool,
) -> Value {
    fn entry(v: &Value, own_structs: bool) -> Value {
        match v {
            Value::Object(m) => {
                let mut out: BTreeMap<String, Value> = BTreeMap::new();
                if own_structs {
                    out.insert(".".into(), json!({}));
                }
                for (k, c) in m {
                    out.insert(format!("f:{k}"), entry(c, own_structs));
                }
                json!(out)
            }
            _ => json!({}),
        }
    }
    let fields: BTreeMap<String, Value> = spec
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (format!("f:{k}"), entry(v, own_structs)))
                .collect()
        })
        .unwrap_or_default();
    let mut e = json!({
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": { "f:spec": fields },
    });
    if let Some(s) = subresource {
        e["subresource"] = json!(s);
    }
    json!([e])
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The body, checked to be of `rt`'s kind.
fn body_of(req: &Request<'_>, rt: &ResourceType) -> Result<Value, ApiError> {
    let mut body = if req.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_body(req.headers, req.body)?
    };
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    for (field, expected) in [("apiVersion", rt.api_version()), ("kind", rt.kind.clone())] {
        match body.get(field).and_then(Value::as_str) {
            None | Some("") => body[field] = json!(expected),
            Some(v) if v == expected => {}
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "the {field} in the data ({v}) does not match the expected {field} ({expected})"
                )));
            }
        }
    }
    Ok(body)
}

/// Answers a request to one of the review kinds (`rt.create_only`).
pub fn review(
    app: &App,
    req: &Request<'_>,
    rt: &ResourceType,
    namespace: &str,
) -> Result<Response, ApiError> {
    if *req.method != Method::POST || req.route.name.is_some() {
        return Err(method_not_allowed());
    }
    let body = body_of(req, rt)?;
    let manager = query::write_options(&req.query, req.headers)?.manager;
    let answer = match rt.kind.as_str() {
        "SelfSubjectAccessReview" => access_review(app, req.user.clone(), &body, None, false)?,
        "SubjectAccessReview" => {
            let user = subject(&body)?;
            access_review(app, user, &body, None, true)?
        }
        "LocalSubjectAccessReview" => {
            let user = subject(&body)?;
            access_review(app, user, &body, Some(namespace), true)?
        }
        "SelfSubjectRulesReview" => return rules_review(app, req.user, &body),
        "SelfSubjectReview" => {
            let mut out = body.clone();
            out["metadata"] = json!({ "creationTimestamp": now() });
            out["status"] = json!({ "userInfo": req.user.to_json() });
            return Ok(json_response(StatusCode::CREATED, &out));
        }
        "TokenReview" => token_review(app, &body),
        other => return Err(ApiError::internal(format!("no review kind {other}"))),
    };
    let mut out = answer;
    let spec = out.get("spec").cloned().unwrap_or_else(|| json!({}));
    let meta = out
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut meta = Value::Object(meta);
    meta["managedFields"] = managed_fields(&manager, &rt.api_version(), &spec, None, true);
    out["metadata"] = meta;
    Ok(json_response(StatusCode::CREATED, &out))
}

/// The user a SubjectAccessReview asks about.
fn subject(body: &Value) -> Result<UserInfo, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_default();
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let user = UserInfo {
        name: str_field(&spec, "user"),
        uid: str_field(&spec, "uid"),
        groups: strings(spec.get("groups")),
        extra: spec
            .get("extra")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), strings(Some(v))))
                    .collect()
            })
            .unwrap_or_default(),
    };
    if user.name.is_empty() && user.groups.is_empty() {
        return Err(invalid_field(
            AUTHZ,
            "",
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    Ok(user)
}

/// The Go-ordered spec of an access review and the attributes it asks about.
fn access_review(
    app: &App,
    user: UserInfo,
    body: &Value,
    local_namespace: Option<&str>,
    subject_review: bool,
) -> Result<Value, ApiError> {
    let spec = body.get("spec").cloned().unwrap_or_default();
    let resource = spec.get("resourceAttributes").filter(|v| v.is_object());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| v.is_object());
    let mut ordered = Map::new();
    let attributes = match (resource, non_resource) {
        (Some(r), None) => {
            let mut a = Map::new();
            for key in [
                "namespace",
                "verb",
                "group",
                "version",
                "resource",
                "subresource",
                "name",
            ] {
                if let Some(v) = r.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                    a.insert(key.into(), json!(v));
                }
            }
            for key in ["fieldSelector", "labelSelector"] {
                if let Some(v) = r.get(key) {
                    a.insert(key.into(), v.clone());
                }
            }
            ordered.insert("resourceAttributes".into(), Value::Object(a));
            Attributes {
                verb: str_field(r, "verb"),
                resource_request: true,
                api_group: str_field(r, "group"),
                api_version: str_field(r, "version"),
                namespace: str_field(r, "namespace"),
                resource: str_field(r, "resource"),
                subresource: str_field(r, "subresource"),
                name: str_field(r, "name"),
                ..Default::default()
            }
        }
        (None, Some(n)) => {
            let mut a = Map::new();
            for key in ["path", "verb"] {
                if let Some(v) = n.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                    a.insert(key.into(), json!(v));
                }
            }
            ordered.insert("nonResourceAttributes".into(), Value::Object(a));
            Attributes {
                verb: str_field(n, "verb"),
                path: str_field(n, "path"),
                ..Default::default()
            }
        }
        (None, None) => {
            return Err(invalid_field(
                AUTHZ,
                "",
                "spec.resourceAttributes",
                "Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ));
        }
        (Some(_), Some(n)) => {
            return Err(invalid_field(
                AUTHZ,
                "",
                "spec.nonResourceAttributes",
                &format!(
                    "Invalid value: {}: cannot be specified in combination with resourceAttributes",
                    json!({ "Path": str_field(n, "path"), "Verb": str_field(n, "verb") })
                ),
            ));
        }
    };
    if let Some(ns) = local_namespace
        && attributes.namespace != ns
    {
        return Err(invalid_field(
            AUTHZ,
            "",
            "spec.resourceAttributes.namespace",
            &format!(
                "Invalid value: {}: must match metadata.namespace",
                json!(attributes.namespace)
            ),
        ));
    }
    if subject_review {
        for key in ["user", "groups", "extra", "uid"] {
            if let Some(v) = spec.get(key).filter(|v| !is_empty(v)) {
                ordered.insert(key.into(), v.clone());
            }
        }
    }
    let decision = app.store.rbac().authorize(&user, &attributes);
    let mut status = json!({ "allowed": decision.allowed });
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    let mut out = body.clone();
    out["spec"] = Value::Object(ordered);
    out["status"] = status;
    Ok(out)
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// SelfSubjectRulesReview: every rule the caller holds in the namespace.
fn rules_review(app: &App, user: &UserInfo, body: &Value) -> Result<Response, ApiError> {
    let namespace = body
        .pointer("/spec/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if namespace.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let held = app.store.rbac().read().rules_for(user, namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in &held.rules {
        if !r.resources.is_empty() {
            let mut rule =
                json!({ "verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources });
            if !r.resource_names.is_empty() {
                rule["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(rule);
        }
        if !r.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({ "verbs": r.verbs, "nonResourceURLs": r.non_resource_urls }));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    if let Some(e) = held.error_text() {
        status["evaluationError"] = json!(e);
    }
    let out = json!({
        "kind": "SelfSubjectRulesReview",
        "apiVersion": format!("{AUTHZ}/v1"),
        "metadata": {},
        "spec": {},
        "status": status,
    });
    Ok(json_response(StatusCode::CREATED, &out))
}

/// TokenReview: whether a token authenticates here, and as whom.
fn token_review(app: &App, body: &Value) -> Value {
    let token = body
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let wanted: Vec<String> = body
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let audiences: Vec<&str> = if wanted.is_empty() {
        vec![ISSUER]
    } else {
        wanted.iter().map(String::as_str).collect()
    };
    let mut out = body.clone();
    let mut spec = Map::new();
    spec.insert("token".into(), json!(token));
    if !wanted.is_empty() {
        spec.insert("audiences".into(), json!(wanted));
    }
    out["spec"] = Value::Object(spec);
    out["status"] = match app.auth.authenticate_token(token, &audiences, &app.store) {
        Authenticated::User(u) => json!({
            "authenticated": true,
            "user": u.to_json(),
            "audiences": audiences,
        }),
        _ => json!({ "user": {}, "error": "invalid bearer token" }),
    };
    out
}

/// `POST .../serviceaccounts/{name}/token`: a token for the ServiceAccount.
pub fn token_request(
    app: &App,
    req: &Request<'_>,
    namespace: &str,
    name: &str,
) -> Result<Response, ApiError> {
    if *req.method != Method::POST {
        return Err(method_not_allowed());
    }
    let sa_type = app
        .store
        .resolve("", "v1", "serviceaccounts")
        .ok_or_else(|| ApiError::internal("serviceaccounts type missing"))?;
    let token_type = ResourceType {
        group: AUTHN.into(),
        version: "v1".into(),
        kind: "TokenRequest".into(),
        ..sa_type.clone()
    };
    let body = body_of(req, &token_type)?;
    let spec = body.get("spec").cloned().unwrap_or_default();
    let expiration = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
    };
    if expiration < MIN_EXPIRATION {
        return Err(invalid_field(
            AUTHN,
            "TokenRequest",
            "spec.expirationSeconds",
            &format!(
                "Invalid value: {expiration}: may not specify a duration less than 10 minutes"
            ),
        ));
    }
    if expiration > MAX_EXPIRATION {
        return Err(invalid_field(
            AUTHN,
            "TokenRequest",
            "spec.expirationSeconds",
            &format!(
                "Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds"
            ),
        ));
    }
    let account = app.store.get(&sa_type, namespace, name)?;
    let uid = crate::store::meta_str(&account, "uid");
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![ISSUER.to_string()]);
    let bound_ref = spec.get("boundObjectRef").filter(|b| !b.is_null()).cloned();
    let bound = match &bound_ref {
        None => None,
        Some(b) => Some(bound_object(app, namespace, b)?),
    };
    let issued = chrono::Utc::now().timestamp();
    let claims = Claims {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: uid.clone(),
        audiences: audiences.clone(),
        issued_at: issued,
        expires_at: issued + expiration,
        id: uuid::Uuid::new_v4().to_string(),
        bound,
    };
    let token = app.auth.signer().mint(&claims);
    let expires = chrono::DateTime::from_timestamp(claims.expires_at, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default();
    let manager = query::write_options(&req.query, req.headers)?.manager;
    let mut owned = spec.as_object().cloned().unwrap_or_default();
    owned.insert("expirationSeconds".into(), json!(expiration));
    let out = json!({
        "kind": "TokenRequest",
        "apiVersion": format!("{AUTHN}/v1"),
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "creationTimestamp": now(),
            "managedFields": managed_fields(
                &manager,
                &format!("{AUTHN}/v1"),
                &Value::Object(owned),
                Some("token"),
                false,
            ),
        },
        "spec": {
            "audiences": audiences,
            "expirationSeconds": expiration,
            "boundObjectRef": bound_ref,
        },
        "status": { "token": token, "expirationTimestamp": expires },
    });
    Ok(json_response(StatusCode::CREATED, &out))
}

/// The (kind, name, uid) of the Pod or Secret a token is to be bound to, which must exist.
fn bound_object(
    app: &App,
    namespace: &str,
    r: &Value,
) -> Result<(String, String, String), ApiError> {
    let kind = str_field(r, "kind");
    let name = str_field(r, "name");
    let resource = match kind.as_str() {
        "Pod" => "pods",
        "Secret" => "secrets",
        other => {
            return Err(invalid_field(
                AUTHN,
                "TokenRequest",
                "spec.boundObjectRef.kind",
                &format!(
                    "Unsupported value: {}: supported values: \"Pod\", \"Secret\" (the dev cluster has no Nodes)",
                    json!(other)
                ),
            ));
        }
    };
    let rt = app
        .store
        .resolve("", "v1", resource)
        .ok_or_else(|| ApiError::internal(format!("{resource} type missing")))?;
    let object = app.store.get(&rt, namespace, &name)?;
    let uid = crate::store::meta_str(&object, "uid");
    let wanted = str_field(r, "uid");
    if !wanted.is_empty() && wanted != uid {
        return Err(ApiError::conflict(
            "",
            resource,
            &name,
            &format!(
                "the UID in the bound object reference ({wanted}) does not match the UID in record. The object might have been deleted and then recreated"
            ),
        ));
    }
    Ok((kind, name, uid))
}
