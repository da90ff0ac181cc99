//! Decoding `application/vnd.kubernetes.protobuf` request bodies into the JSON the store
//! keeps.
//!
//! client-go sends built-in kinds as protobuf whenever its caller configured that content
//! type, and there is no negotiation that makes it switch: its only 415 fallback is for
//! CBOR, and discovery has no field that advertises "JSON only". helm does this for its
//! release records (`POST`/`PUT` of `v1/Secret`, or `v1/ConfigMap` with
//! `HELM_DRIVER=configmap`), kubectl for its typed imperative commands (`create
//! configmap|secret|namespace|serviceaccount`). So the server has to read protobuf.
//!
//! The wire format is a 4-byte magic `k8s\0` followed by a `runtime.Unknown` envelope
//! whose `raw` field holds the object's message. The message types come from `k8s-pb`
//! (generated from the Kubernetes `.proto` files); the conversion to JSON is written here,
//! per kind, because `k8s-pb` has no serde support and protobuf's own JSON mapping
//! differs from Kubernetes' (timestamps are messages, not RFC 3339 strings). Only the
//! kinds listed in [`decode`] are converted; any other kind is refused with 415 naming
//! the kinds that are, so a client can fall back to `apply -f`.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::{Map, Value, json};

/// The media type client-go sends protobuf bodies with.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Prefix of every Kubernetes protobuf body, before the `runtime.Unknown` envelope.
const MAGIC: &[u8] = b"k8s\0";

/// The kinds whose protobuf bodies are understood, as `apiVersion/kind`.
pub const SUPPORTED: &str = "v1/Secret, v1/ConfigMap, v1/Namespace, v1/ServiceAccount, \
     meta.k8s.io/v1/DeleteOptions, the authorization.k8s.io/v1 access reviews, \
     authentication.k8s.io/v1 TokenRequest, TokenReview and SelfSubjectReview";

/// Whether a body is Kubernetes protobuf (bodies such as DeleteOptions arrive without a
/// usable Content-Type check on the path that reads them).
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(MAGIC)
}

/// Why a protobuf body could not be turned into JSON.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("protobuf body does not start with the Kubernetes magic prefix \"k8s\\0\"")]
    MissingMagic,
    #[error("protobuf envelope (runtime.Unknown) does not decode: {0}")]
    Envelope(#[source] prost::DecodeError),
    #[error("protobuf body of {api_version}/{kind} is not supported (supported: {SUPPORTED})")]
    UnsupportedKind { api_version: String, kind: String },
    #[error("protobuf body of {kind} does not decode: {source}")]
    Object {
        kind: String,
        #[source]
        source: prost::DecodeError,
    },
}

/// Decodes a protobuf request body into the object's JSON form (with `apiVersion` and
/// `kind` set from the envelope).
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or(ProtobufError::MissingMagic)?;
    let unknown = Unknown::decode(envelope).map_err(ProtobufError::Envelope)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let object_error = |source| ProtobufError::Object {
        kind: kind.clone(),
        source,
    };
    let mut object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => secret(core::Secret::decode(raw.as_slice()).map_err(object_error)?),
        ("v1", "ConfigMap") => {
            config_map(core::ConfigMap::decode(raw.as_slice()).map_err(object_error)?)
        }
        ("v1", "Namespace") => {
            namespace(core::Namespace::decode(raw.as_slice()).map_err(object_error)?)
        }
        ("v1", "ServiceAccount") => {
            service_account(core::ServiceAccount::decode(raw.as_slice()).map_err(object_error)?)
        }
        // client-go encodes DeleteOptions bodies of typed deletes (helm uninstall deletes
        // its release Secrets this way) with the group version of the parameter codec.
        ("meta.k8s.io/v1" | "v1", "DeleteOptions") => {
            delete_options(meta::DeleteOptions::decode(raw.as_slice()).map_err(object_error)?)
        }
        // kubectl's `auth can-i`, `auth whoami` and `create token` send these.
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            let r = authz::SelfSubjectAccessReview::decode(raw.as_slice()).map_err(object_error)?;
            let mut out = with_metadata(r.metadata);
            let spec = r.spec.unwrap_or_default();
            out.insert(
                "spec".into(),
                access_spec(spec.resource_attributes, spec.non_resource_attributes),
            );
            out
        }
        ("authorization.k8s.io/v1", "SubjectAccessReview" | "LocalSubjectAccessReview") => {
            let r = authz::SubjectAccessReview::decode(raw.as_slice()).map_err(object_error)?;
            let mut out = with_metadata(r.metadata);
            let spec = r.spec.unwrap_or_default();
            let mut s = access_spec(spec.resource_attributes, spec.non_resource_attributes);
            if let Value::Object(m) = &mut s {
                put(m, "user", spec.user.and_then(text));
                put(m, "groups", strings(spec.groups));
                let extra: Map<String, Value> = spec
                    .extra
                    .into_iter()
                    .map(|(k, v)| (k, json!(v.items)))
                    .collect();
                put(
                    m,
                    "extra",
                    (!extra.is_empty()).then_some(Value::Object(extra)),
                );
                put(m, "uid", spec.uid.and_then(text));
            }
            out.insert("spec".into(), s);
            out
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            let r = authz::SelfSubjectRulesReview::decode(raw.as_slice()).map_err(object_error)?;
            let mut out = with_metadata(r.metadata);
            let mut spec = Map::new();
            put(
                &mut spec,
                "namespace",
                r.spec.and_then(|s| s.namespace).and_then(text),
            );
            out.insert("spec".into(), Value::Object(spec));
            out
        }
        ("authentication.k8s.io/v1", "SelfSubjectReview") => {
            let r = authn::SelfSubjectReview::decode(raw.as_slice()).map_err(object_error)?;
            with_metadata(r.metadata)
        }
        ("authentication.k8s.io/v1", "TokenReview") => {
            let r = authn::TokenReview::decode(raw.as_slice()).map_err(object_error)?;
            let mut out = with_metadata(r.metadata);
            let spec = r.spec.unwrap_or_default();
            let mut s = Map::new();
            put(&mut s, "token", spec.token.and_then(text));
            put(&mut s, "audiences", strings(spec.audiences));
            out.insert("spec".into(), Value::Object(s));
            out
        }
        ("authentication.k8s.io/v1", "TokenRequest") => {
            let r = authn::TokenRequest::decode(raw.as_slice()).map_err(object_error)?;
            let mut out = with_metadata(r.metadata);
            let spec = r.spec.unwrap_or_default();
            let mut s = Map::new();
            put(&mut s, "audiences", strings(spec.audiences));
            put(
                &mut s,
                "expirationSeconds",
                spec.expiration_seconds.map(Value::from),
            );
            if let Some(b) = spec.bound_object_ref {
                let mut o = Map::new();
                put(&mut o, "kind", b.kind.and_then(text));
                put(&mut o, "apiVersion", b.api_version.and_then(text));
                put(&mut o, "name", b.name.and_then(text));
                put(&mut o, "uid", b.u_id.and_then(text));
                s.insert("boundObjectRef".into(), Value::Object(o));
            }
            out.insert("spec".into(), Value::Object(s));
            out
        }
        _ => return Err(ProtobufError::UnsupportedKind { api_version, kind }),
    };
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    Ok(Value::Object(object))
}

/// Inserts `value` under `key` unless it is absent, as Go's `omitempty` would.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.into(), v);
    }
}

/// Go encodes every non-pointer string field, so an empty string on the wire means
/// "unset"; JSON's `omitempty` drops it, and so does this.
fn text(s: String) -> Option<Value> {
    (!s.is_empty()).then_some(Value::String(s))
}

fn string_map(m: BTreeMap<String, String>) -> Option<Value> {
    (!m.is_empty()).then(|| json!(m))
}

fn bytes_map(m: BTreeMap<String, Vec<u8>>) -> Option<Value> {
    let engine = base64::engine::general_purpose::STANDARD;
    (!m.is_empty()).then(|| {
        Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, Value::String(engine.encode(v))))
                .collect(),
        )
    })
}

fn strings(v: Vec<String>) -> Option<Value> {
    (!v.is_empty()).then(|| json!(v))
}

/// `metav1.Time` is seconds + nanos in protobuf and an RFC 3339 string (second
/// precision) in JSON.
fn time(t: Option<meta::Time>) -> Option<Value> {
    // Go's zero time (year 1), which Go sends for an unset non-pointer Time, is "unset".
    const GO_ZERO_TIME: i64 = -62_135_596_800;
    let seconds = t?.seconds.unwrap_or(GO_ZERO_TIME);
    if seconds <= GO_ZERO_TIME {
        return None;
    }
    let at = chrono::DateTime::from_timestamp(seconds, 0)?;
    Some(Value::String(
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    ))
}

fn object_meta(m: Option<meta::ObjectMeta>) -> Value {
    let Some(m) = m else {
        return json!({});
    };
    let mut out = Map::new();
    put(&mut out, "name", m.name.and_then(text));
    put(&mut out, "generateName", m.generate_name.and_then(text));
    put(&mut out, "namespace", m.namespace.and_then(text));
    put(&mut out, "uid", m.uid.and_then(text));
    put(
        &mut out,
        "resourceVersion",
        m.resource_version.and_then(text),
    );
    put(
        &mut out,
        "generation",
        m.generation.filter(|g| *g != 0).map(Value::from),
    );
    put(&mut out, "creationTimestamp", time(m.creation_timestamp));
    put(&mut out, "deletionTimestamp", time(m.deletion_timestamp));
    put(
        &mut out,
        "deletionGracePeriodSeconds",
        m.deletion_grace_period_seconds.map(Value::from),
    );
    put(&mut out, "labels", string_map(m.labels));
    put(&mut out, "annotations", string_map(m.annotations));
    let owners: Vec<Value> = m
        .owner_references
        .into_iter()
        .map(owner_reference)
        .collect();
    put(
        &mut out,
        "ownerReferences",
        (!owners.is_empty()).then(|| json!(owners)),
    );
    put(&mut out, "finalizers", strings(m.finalizers));
    // managedFields are never accepted from a client on create/update (the server owns
    // them), so they are not converted.
    Value::Object(out)
}

fn owner_reference(o: meta::OwnerReference) -> Value {
    let mut out = Map::new();
    put(&mut out, "apiVersion", o.api_version.and_then(text));
    put(&mut out, "kind", o.kind.and_then(text));
    put(&mut out, "name", o.name.and_then(text));
    put(&mut out, "uid", o.uid.and_then(text));
    put(&mut out, "controller", o.controller.map(Value::Bool));
    put(
        &mut out,
        "blockOwnerDeletion",
        o.block_owner_deletion.map(Value::Bool),
    );
    Value::Object(out)
}

/// The attributes of an access review's spec.
fn access_spec(
    resource: Option<authz::ResourceAttributes>,
    non_resource: Option<authz::NonResourceAttributes>,
) -> Value {
    let mut spec = Map::new();
    if let Some(r) = resource {
        let mut a = Map::new();
        put(&mut a, "namespace", r.namespace.and_then(text));
        put(&mut a, "verb", r.verb.and_then(text));
        put(&mut a, "group", r.group.and_then(text));
        put(&mut a, "version", r.version.and_then(text));
        put(&mut a, "resource", r.resource.and_then(text));
        put(&mut a, "subresource", r.subresource.and_then(text));
        put(&mut a, "name", r.name.and_then(text));
        spec.insert("resourceAttributes".into(), Value::Object(a));
    }
    if let Some(n) = non_resource {
        let mut a = Map::new();
        put(&mut a, "path", n.path.and_then(text));
        put(&mut a, "verb", n.verb.and_then(text));
        spec.insert("nonResourceAttributes".into(), Value::Object(a));
    }
    Value::Object(spec)
}

fn with_metadata(m: Option<meta::ObjectMeta>) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(m));
    out
}

fn secret(s: core::Secret) -> Map<String, Value> {
    let mut out = with_metadata(s.metadata);
    put(&mut out, "immutable", s.immutable.map(Value::Bool));
    put(&mut out, "data", bytes_map(s.data));
    put(&mut out, "stringData", string_map(s.string_data));
    put(&mut out, "type", s.r#type.and_then(text));
    out
}

fn config_map(c: core::ConfigMap) -> Map<String, Value> {
    let mut out = with_metadata(c.metadata);
    put(&mut out, "immutable", c.immutable.map(Value::Bool));
    put(&mut out, "data", string_map(c.data));
    put(&mut out, "binaryData", bytes_map(c.binary_data));
    out
}

fn namespace(n: core::Namespace) -> Map<String, Value> {
    let mut out = with_metadata(n.metadata);
    if let Some(spec) = n.spec {
        let mut s = Map::new();
        put(&mut s, "finalizers", strings(spec.finalizers));
        out.insert("spec".into(), Value::Object(s));
    }
    // status is the server's; a client's is ignored on create like the apiserver does.
    out
}

fn service_account(a: core::ServiceAccount) -> Map<String, Value> {
    let mut out = with_metadata(a.metadata);
    let secrets: Vec<Value> = a
        .secrets
        .into_iter()
        .map(|r| {
            let mut o = Map::new();
            put(&mut o, "kind", r.kind.and_then(text));
            put(&mut o, "namespace", r.namespace.and_then(text));
            put(&mut o, "name", r.name.and_then(text));
            put(&mut o, "uid", r.uid.and_then(text));
            put(&mut o, "apiVersion", r.api_version.and_then(text));
            Value::Object(o)
        })
        .collect();
    put(
        &mut out,
        "secrets",
        (!secrets.is_empty()).then(|| json!(secrets)),
    );
    let pulls: Vec<Value> = a
        .image_pull_secrets
        .into_iter()
        .map(|r| json!({ "name": r.name.unwrap_or_default() }))
        .collect();
    put(
        &mut out,
        "imagePullSecrets",
        (!pulls.is_empty()).then(|| json!(pulls)),
    );
    put(
        &mut out,
        "automountServiceAccountToken",
        a.automount_service_account_token.map(Value::Bool),
    );
    out
}

fn delete_options(d: meta::DeleteOptions) -> Map<String, Value> {
    let mut out = Map::new();
    put(
        &mut out,
        "gracePeriodSeconds",
        d.grace_period_seconds.map(Value::from),
    );
    if let Some(p) = d.preconditions {
        let mut o = Map::new();
        put(&mut o, "uid", p.uid.and_then(text));
        put(&mut o, "resourceVersion", p.resource_version.and_then(text));
        out.insert("preconditions".into(), Value::Object(o));
    }
    put(
        &mut out,
        "orphanDependents",
        d.orphan_dependents.map(Value::Bool),
    );
    put(
        &mut out,
        "propagationPolicy",
        d.propagation_policy.and_then(text),
    );
    put(&mut out, "dryRun", strings(d.dry_run));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_pb::apimachinery::pkg::runtime::TypeMeta;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: None,
            content_type: None,
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    #[test]
    fn secret_decodes_to_kubernetes_json() {
        let secret = core::Secret {
            metadata: Some(meta::ObjectMeta {
                name: Some("sh.helm.release.v1.demo.v1".into()),
                // Go sends unset strings as "" and an unset Time as year 1: both omitted.
                generate_name: Some(String::new()),
                deletion_timestamp: Some(meta::Time {
                    seconds: Some(-62_135_596_800),
                    nanos: Some(0),
                }),
                labels: BTreeMap::from([("owner".into(), "helm".into())]),
                creation_timestamp: Some(meta::Time {
                    seconds: Some(0),
                    nanos: Some(0),
                }),
                ..Default::default()
            }),
            data: BTreeMap::from([("release".into(), b"abc".to_vec())]),
            r#type: Some("helm.sh/release.v1".into()),
            ..Default::default()
        };
        let json = decode(&envelope("v1", "Secret", secret.encode_to_vec())).expect("decodes");
        assert_eq!(
            json,
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": "sh.helm.release.v1.demo.v1", "labels": { "owner": "helm" }, "creationTimestamp": "1970-01-01T00:00:00Z" },
                "data": { "release": "YWJj" },
                "type": "helm.sh/release.v1",
            })
        );
    }

    #[test]
    fn unsupported_kinds_and_garbage_are_named() {
        let err = decode(&envelope("apps/v1", "Deployment", Vec::new())).expect_err("refused");
        assert!(err.to_string().contains("apps/v1/Deployment"), "{err}");
        assert!(matches!(
            decode(b"{\"kind\":\"Secret\"}"),
            Err(ProtobufError::MissingMagic)
        ));
        assert!(matches!(
            decode(b"k8s\0\xff\xff\xff"),
            Err(ProtobufError::Envelope(_))
        ));
    }
}
