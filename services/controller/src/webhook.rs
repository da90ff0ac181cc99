//! The validating admission webhook of Applications and Modules: the API server asks it before
//! it stores a create or a change of a resource's spec (`kubectl apply`, `--dry-run=server`
//! too), and it answers with lifecycle's ValidateSettings, so bad settings are refused naming
//! the field, and a settings check hook's warnings come back as admission warnings. A spec for
//! a package another front door owns is refused naming the owner.
//!
//! Only a spec whose package version is the one loaded is checked here (ValidateSettings
//! checks against the loaded version's schema); a new package or a new version is checked
//! when it loads, and shows in the resource's status. A change that leaves the spec alone
//! (the controller's finalizer, labels) is allowed at once.
//!
//! Served over HTTPS (HTTP/1.1, hyper over rustls) with a CA and a certificate made at start
//! and kept in memory; the CA goes into the ValidatingWebhookConfiguration `berth-controller`
//! (`failurePolicy: Ignore`: while berth is down resources are still accepted, and checked
//! when the controller reconciles them). Bodies, connections and handshakes are bounded.

use std::sync::Arc;
use std::time::Duration;

use berth_proto::v1;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::api::{ObjectMeta, Patch, PatchParams};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::front::{Desired, Front};
use crate::packages::Packages;
use crate::resources::{Application, Module};

/// The webhook configuration's name (and the webhook's: `validate.berth.io`).
pub const CONFIGURATION: &str = "berth-controller";
const WEBHOOK: &str = "validate.berth.io";
/// Largest review accepted (a resource's settings are at most 1 MiB).
const MAX_REVIEW_BYTES: usize = 3 << 20;
const MAX_CONNECTIONS: usize = 64;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The API server waits this long for an answer.
const TIMEOUT_SECONDS: i32 = 15;
/// How long the webhook waits for lifecycle (less than the API server waits for it).
const LIFECYCLE_DEADLINE: Duration = Duration::from_secs(12);

/// Where the webhook listens and the URL the API server reaches it at.
#[derive(Clone, Debug)]
pub struct WebhookListen {
    pub listen: std::net::SocketAddr,
    /// `https://HOST[:PORT]`; default `https://<the bound address>`.
    pub url: Option<String>,
}

/// What a handler needs.
#[derive(Clone)]
pub struct Admission {
    pub lifecycle: crate::client::Lifecycle,
    pub packages: Packages,
}

struct Serving {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

/// A fresh CA and a certificate it signed for `host` (a DNS name or an IP address).
fn generate(host: &str) -> Result<Serving, rcgen::Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "berth controller webhook CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut params = CertificateParams::new(vec![host.to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "berth controller webhook");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Serving {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn tls_config(cert: &Serving) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(|e| e.to_string())?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Binds the webhook, registers it with the API server, and serves it until `shutdown`.
pub async fn start(
    listen: &WebhookListen,
    client: &kube::Client,
    admission: Admission,
    selector: Option<&str>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let listener = TcpListener::bind(listen.listen)
        .await
        .map_err(|e| Error::Webhook(format!("binding {}: {e}", listen.listen)))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::Webhook(e.to_string()))?;
    let url = match &listen.url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => format!("https://{bound}"),
    };
    let host = url.strip_prefix("https://").ok_or_else(|| {
        Error::Webhook(format!("--webhook-url {url:?} must be https://HOST[:PORT]"))
    })?;
    let host = host
        .rsplit_once(':')
        .filter(|(h, port)| port.parse::<u16>().is_ok() && !h.is_empty())
        .map_or(host, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let cert = generate(&host).map_err(|e| Error::Webhook(e.to_string()))?;
    let tls = tls_config(&cert).map_err(Error::Webhook)?;
    let name = register(client, &format!("{url}/validate"), &cert.ca_pem, selector).await?;
    berth_runtime::spawn_in(
        tracing::info_span!(parent: None, "controller.webhook.deregister"),
        deregister_at(client.clone(), name, shutdown.clone()),
    );
    tracing::info!(%url, "admission webhook registered");
    berth_runtime::spawn_in(
        tracing::info_span!(parent: None, "controller.webhook"),
        serve(listener, tls, Arc::new(admission), shutdown),
    );
    Ok(())
}

/// The configuration's name: `berth-controller`, or with a selector `berth-controller-<hash>`
/// (one per installation sharing the cluster).
pub fn configuration_name(selector: Option<&str>) -> String {
    match selector {
        None => CONFIGURATION.to_owned(),
        Some(s) => {
            // A stable name per selector (FNV-1a: std's hasher is seeded per process).
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for b in s.bytes() {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            format!("{CONFIGURATION}-{hash:016x}")
        }
    }
}

/// Deletes this start's configuration when the controller stops (best effort: a leftover one
/// points at a closed port, and `failurePolicy: Ignore` admits what it matches).
async fn deregister_at(client: kube::Client, name: String, shutdown: CancellationToken) {
    shutdown.cancelled().await;
    let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client);
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        api.delete(&name, &kube::api::DeleteParams::default()),
    )
    .await;
}

/// Writes the ValidatingWebhookConfiguration (server-side apply: the CA of this start); its
/// name.
async fn register(
    client: &kube::Client,
    url: &str,
    ca_pem: &str,
    selector: Option<&str>,
) -> Result<String, Error> {
    let name = configuration_name(selector);
    let object_selector = selector.map(|s| {
        let match_labels = s
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some(match_labels),
            match_expressions: None,
        }
    });
    let rule = RuleWithOperations {
        api_groups: Some(vec![crate::resources::GROUP.into()]),
        api_versions: Some(vec![crate::resources::VERSION.into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        resources: Some(vec!["applications".into(), "modules".into()]),
        scope: Some("*".into()),
    };
    let configuration = ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([("app.kubernetes.io/part-of".to_owned(), "berth".to_owned())].into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: WEBHOOK.into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Ignore".into()),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            match_policy: Some("Equivalent".into()),
            rules: Some(vec![rule]),
            object_selector,
            client_config: WebhookClientConfig {
                url: Some(url.to_owned()),
                ca_bundle: Some(k8s_openapi::ByteString(ca_pem.as_bytes().to_vec())),
                service: None,
            },
            ..ValidatingWebhook::default()
        }]),
    };
    let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
    let params = PatchParams::apply(crate::crds::MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(&configuration))
        .await?;
    Ok(name)
}

async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    admission: Arc<Admission>,
    shutdown: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = connections.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "admission webhook: accept failed");
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let (acceptor, admission, shutdown) =
            (acceptor.clone(), admission.clone(), shutdown.clone());
        berth_runtime::spawn_here(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "admission webhook: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(move |req| {
                let admission = admission.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&admission, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(TokioIo::new(tls), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
    *r.status_mut() = status;
    r
}

async fn handle(admission: &Admission, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if req.uri().path() != "/validate" {
        return text(StatusCode::NOT_FOUND, "not found");
    }
    if req.method() != hyper::Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST only");
    }
    let body = match Limited::new(req.into_body(), MAX_REVIEW_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body: {e} (limit {MAX_REVIEW_BYTES} bytes)"),
            );
        }
    };
    let review: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                &format!("not an AdmissionReview: {e}"),
            );
        }
    };
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default().to_owned();
    let answer = match review_request(admission, request).await {
        Ok(warnings) => json!({"uid": uid, "allowed": true, "warnings": warnings}),
        Err(message) => json!({
            "uid": uid,
            "allowed": false,
            "status": {"code": 422, "reason": "Invalid", "message": message},
        }),
    };
    let mut response = Response::new(Full::new(Bytes::from(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer})
            .to_string(),
    )));
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Ok(warnings) to admit, Err(message) to refuse.
async fn review_request(admission: &Admission, request: &Value) -> Result<Vec<String>, String> {
    let object = &request["object"];
    if request["operation"] == "UPDATE" && object["spec"] == request["oldObject"]["spec"] {
        return Ok(vec![]);
    }
    let parsed = match request["kind"]["kind"].as_str() {
        Some("Application") => serde_json::from_value::<Application>(object.clone())
            .map(|a| (a.owner(), a.key(), a.suspend(), a.desired())),
        Some("Module") => serde_json::from_value::<Module>(object.clone())
            .map(|m| (m.owner(), m.key(), m.suspend(), m.desired())),
        _ => return Ok(vec![]),
    };
    let (owner, key, _suspend, desired) = parsed.map_err(|e| format!("spec: {e}"))?;
    // Asked, not cached: a package the gRPC API made a moment ago must be seen.
    let lifecycle = admission.lifecycle.clone();
    let reference = match &desired {
        Desired::Install(u) => u.r#ref.clone(),
        _ => None,
    };
    let existing = match reference {
        Some(r) => match tokio::time::timeout(LIFECYCLE_DEADLINE, lifecycle.get(r)).await {
            Ok(Ok(found)) => found,
            _ => admission.packages.get(&key),
        },
        None => admission.packages.get(&key),
    };
    if let Some(p) = &existing
        && p.owner != owner
    {
        let by = if p.owner.is_empty() {
            "the gRPC API (berth update/remove)".to_owned()
        } else {
            format!("the berth.io resource {}", p.owner)
        };
        return Err(format!(
            "package {key} belongs to {by}: remove it there first to manage it from this resource"
        ));
    }
    let Desired::Install(update) = desired else {
        return Ok(vec![]);
    };
    let loaded = existing.as_ref().is_some_and(|p| {
        p.package == update.package
            && p.version == update.version
            && p.repository == update.repository
            && !p.resolved_version.is_empty()
    });
    if !loaded {
        return Ok(vec![]);
    }
    let validate = v1::ValidateSettingsRequest {
        r#ref: update.r#ref,
        settings: update.settings,
        settings_version: update.settings_version,
    };
    let answer = tokio::time::timeout(LIFECYCLE_DEADLINE, lifecycle.validate(validate)).await;
    match answer {
        Ok(Ok(a)) => {
            let mut warnings = a.warnings;
            if a.deferred && !a.deferred_reason.is_empty() {
                warnings.push(format!(
                    "settings checked against the schema only: {}",
                    a.deferred_reason
                ));
            }
            Ok(warnings)
        }
        Ok(Err(crate::client::CallError::Invalid(message))) => Err(message),
        Ok(Err(e)) => Ok(vec![format!(
            "berth could not check the settings ({e}); they are checked when applied"
        )]),
        Err(_) => Ok(vec![format!(
            "berth did not check the settings within {LIFECYCLE_DEADLINE:?}; they are checked when applied"
        )]),
    }
}
