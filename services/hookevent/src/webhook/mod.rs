//! Admission and conversion webhooks served to hooks (`kubernetesValidating`,
//! `kubernetesMutating`, `kubernetesCustomResourceConversion`).
//!
//! hookevent runs an HTTPS server (`server`) with a certificate of its own (`certs`), registers
//! each package's admission bindings as one ValidatingWebhookConfiguration and one
//! MutatingWebhookConfiguration named `berth-<package key>`, and a conversion binding as its
//! CRD's `spec.conversion` (`register`), every one with the CA in `caBundle`. A request the API
//! server sends becomes a WebhookRun task on a queue of its own (`<package>/webhook/<id>`, so it
//! never waits behind the package's other work and is never merged with another), sent to the
//! broker directly; the worker that runs the hook hands the text of its response file back
//! through `AnswerWebhook`, and the request is answered from it. Every request is bounded: its
//! body, the number in flight, and the time it waits (the binding's `timeoutSeconds`, less a
//! margin so the answer reaches the API server first). A request that gets no answer in time,
//! or whose hook failed, is answered with an error, and the API server applies the binding's
//! `failurePolicy`.

mod certs;
mod register;
mod server;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use berth_hooks::binding_context::{self, BindingContext};
use berth_hooks::outputs::webhook::{
    conversion_review, parse_admission_response, parse_conversion_response,
};
use berth_hooks::{AdmissionBinding, AdmissionKind, ConversionBinding, HookConfig};
use berth_names::{Generation, PackageKey};
use berth_proto::hookevent as pb;
use berth_proto::queue::{EnqueueRequest, Task};
use berth_proto::tasks::{self, WebhookRun, WebhookType};
use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::sync::{Semaphore, oneshot};

use crate::error::ServiceError;

pub use server::{serve, tls_config};

/// Command-line flags of the webhook server (`berth-hookevent`, `berth up`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct WebhookArgs {
    /// Address the webhook server (admission and conversion webhooks of hooks) listens on;
    /// unset: webhook bindings are refused.
    #[arg(long, env = "BERTH_WEBHOOK_LISTEN")]
    pub webhook_listen: Option<std::net::SocketAddr>,
    /// `https://HOST[:PORT]` at which the API server reaches the webhook server (registered
    /// in the webhook configurations, and the name in its certificate); default:
    /// `https://<the address it listens on>`.
    #[arg(long, env = "BERTH_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
}

impl WebhookArgs {
    pub fn listen(&self) -> Option<WebhookListen> {
        self.webhook_listen.map(|listen| WebhookListen {
            listen,
            url: self.webhook_url.clone(),
        })
    }
}

/// Largest review body accepted: a WebhookRun carries it through the broker, whose default
/// payload bound is 1 MiB.
const MAX_REVIEW_BYTES: usize = (1 << 20) - (64 << 10);
/// Requests waiting for a hook at once; more are refused at once (failurePolicy applies).
const MAX_IN_FLIGHT: usize = 256;
/// How much earlier than the API server's timeout hookevent answers a request that got no
/// answer, so that its error, not the API server's timeout, decides.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);
/// Admission bindings one package may register.
const MAX_WEBHOOKS_PER_PACKAGE: usize = 100;

/// Where the webhook server listens and the URL the API server reaches it at.
#[derive(Clone, Debug)]
pub struct WebhookListen {
    pub listen: std::net::SocketAddr,
    /// `https://HOST:PORT` the API server calls; `None`: `https://<the bound address>`.
    pub url: Option<String>,
}

struct AdmissionRoute {
    package: PackageKey,
    generation: Generation,
    hook: String,
    binding: AdmissionBinding,
    /// The hook's kubernetes bindings, for the snapshots of a `group`.
    config: HookConfig,
}

struct ConversionRoute {
    package: PackageKey,
    generation: Generation,
    hook: String,
    binding: ConversionBinding,
    config: HookConfig,
}

/// What one package registered.
#[derive(Default)]
struct Registered {
    admission: Vec<String>,
    crds: Vec<String>,
}

#[derive(Default)]
struct Routes {
    /// By route id (`/admission/<id>`).
    admission: HashMap<String, AdmissionRoute>,
    /// By CRD name; several hooks of one package may convert one CRD.
    conversion: HashMap<String, Vec<ConversionRoute>>,
    packages: HashMap<String, Registered>,
}

struct Pending {
    package: String,
    tx: oneshot::Sender<Result<String, String>>,
}

pub struct Webhooks {
    base_url: String,
    ca_bundle: String,
    kube: Option<::kube::Client>,
    broker: berth_clients::Broker,
    routes: Mutex<Routes>,
    pending: Mutex<HashMap<String, Pending>>,
    in_flight: Arc<Semaphore>,
}

/// The id in a route's path: stable for the same package, hook and binding (or CRD), so a
/// restarted hookevent serves the URLs already registered.
fn route_id(parts: &[&str]) -> String {
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..16])
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

impl Webhooks {
    /// A server for `url`'s host: makes its certificate. `kube`: `None` refuses webhook bindings.
    pub fn new(
        url: String,
        kube: Option<::kube::Client>,
        broker: berth_clients::Broker,
    ) -> Result<(Arc<Webhooks>, certs::ServingCert), String> {
        let host = url_host(&url)
            .ok_or_else(|| format!("webhook URL {url:?}: not https://HOST[:PORT]"))?;
        let cert = certs::generate(&host).map_err(|e| format!("webhook certificate: {e}"))?;
        let webhooks = Arc::new(Webhooks {
            base_url: url.trim_end_matches('/').to_owned(),
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(&cert.ca_pem),
            kube,
            broker,
            routes: Mutex::default(),
            pending: Mutex::default(),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        });
        Ok((webhooks, cert))
    }

    /// Registers `package`'s webhook bindings, replacing what it registered before (a binding
    /// gone from the new generation is deregistered). Nothing changes when a binding is
    /// invalid; when the API server refuses a configuration (`InvalidArgument`, the package
    /// fails), the routes already follow the new bindings and requests sent to the previous
    /// configuration's removed webhooks meet its failurePolicy until the next generation.
    pub async fn set(
        &self,
        package: &PackageKey,
        generation: Generation,
        app_namespace: &str,
        webhooks: &[pb::WebhookBinding],
        kubernetes: &[pb::KubernetesBinding],
    ) -> Result<(), ServiceError> {
        if webhooks.len() > MAX_WEBHOOKS_PER_PACKAGE {
            return Err(ServiceError::Invalid(format!(
                "webhooks: {} bindings exceed the limit of {MAX_WEBHOOKS_PER_PACKAGE}",
                webhooks.len()
            )));
        }
        let mut admission = vec![];
        let mut conversion = vec![];
        for (i, w) in webhooks.iter().enumerate() {
            let at =
                |e: String| ServiceError::Invalid(format!("webhooks[{i}] (hook {}): {e}", w.hook));
            let value: Value = berth_proto::json::from_opt_struct(w.config.as_ref());
            let config = hook_config(&w.hook, kubernetes).map_err(at)?;
            match w.key.as_str() {
                "kubernetesValidating" | "kubernetesMutating" => {
                    let kind = if w.key == "kubernetesValidating" {
                        AdmissionKind::Validating
                    } else {
                        AdmissionKind::Mutating
                    };
                    let binding =
                        AdmissionBinding::parse(kind, value).map_err(|e| at(e.to_string()))?;
                    if !app_namespace.is_empty() {
                        confine_rules(&binding).map_err(at)?;
                    }
                    admission.push((w.hook.clone(), binding, config));
                }
                "kubernetesCustomResourceConversion" => {
                    if !app_namespace.is_empty() {
                        return Err(at("an app may not convert custom resources (CRDs are cluster-wide; use a module)".into()));
                    }
                    let binding = ConversionBinding::parse(value).map_err(|e| at(e.to_string()))?;
                    conversion.push((w.hook.clone(), binding, config));
                }
                other => return Err(at(format!("unknown webhook binding key {other:?}"))),
            }
        }
        let mut names = std::collections::HashSet::new();
        for (_, b, _) in &admission {
            if !names.insert((b.kind, b.name.clone())) {
                return Err(ServiceError::Invalid(format!(
                    "{}: the webhook name {:?} is used twice in this package",
                    b.kind.key(),
                    b.name
                )));
            }
        }
        let crds: Vec<String> = {
            let mut c: Vec<String> = conversion
                .iter()
                .map(|(_, b, _)| b.crd_name.clone())
                .collect();
            c.sort();
            c.dedup();
            c
        };
        {
            let routes = self.routes.lock().expect("webhook routes");
            for crd in &crds {
                if let Some(owner) = routes.conversion.get(crd).and_then(|r| r.first())
                    && owner.package != *package
                {
                    return Err(ServiceError::Invalid(format!(
                        "kubernetesCustomResourceConversion: the conversion of {crd} is served for package {} already",
                        owner.package
                    )));
                }
            }
        }
        if admission.is_empty() && conversion.is_empty() {
            // Nothing to register: what an earlier generation registered goes.
            return self.remove(package.as_str()).await;
        }
        let kube = self.kube.as_ref().ok_or(ServiceError::NoKubernetes)?;
        // Routes first, so requests the new configuration brings find them.
        let mut ids = vec![];
        let mut previous_crds = vec![];
        {
            let mut routes = self.routes.lock().expect("webhook routes");
            if let Some(old) = routes.packages.remove(package.as_str()) {
                previous_crds = old.crds.clone();
                for id in old.admission {
                    routes.admission.remove(&id);
                }
                for crd in old.crds {
                    routes.conversion.remove(&crd);
                }
            }
            for (hook, binding, config) in &admission {
                let id = route_id(&[package.as_str(), hook, binding.kind.key(), &binding.name]);
                routes.admission.insert(
                    id.clone(),
                    AdmissionRoute {
                        package: package.clone(),
                        generation,
                        hook: hook.clone(),
                        binding: binding.clone(),
                        config: config.clone(),
                    },
                );
                ids.push(id);
            }
            for (hook, binding, config) in conversion {
                routes
                    .conversion
                    .entry(binding.crd_name.clone())
                    .or_default()
                    .push(ConversionRoute {
                        package: package.clone(),
                        generation,
                        hook,
                        binding,
                        config,
                    });
            }
            routes.packages.insert(
                package.to_string(),
                Registered {
                    admission: ids.clone(),
                    crds: crds.clone(),
                },
            );
        }
        let entries = |kind: AdmissionKind| -> Vec<Value> {
            admission
                .iter()
                .zip(&ids)
                .filter(|((_, b, _), _)| b.kind == kind)
                .map(|((_, b, _), id)| {
                    register::webhook_entry(
                        b,
                        &format!("{}/admission/{id}", self.base_url),
                        &self.ca_bundle,
                        app_namespace,
                    )
                })
                .collect()
        };
        register::apply_admission(
            kube,
            package.as_str(),
            AdmissionKind::Validating,
            entries(AdmissionKind::Validating),
        )
        .await
        .map_err(registration_error)?;
        register::apply_admission(
            kube,
            package.as_str(),
            AdmissionKind::Mutating,
            entries(AdmissionKind::Mutating),
        )
        .await
        .map_err(registration_error)?;
        for crd in &crds {
            let url = format!("{}/conversion/{}", self.base_url, route_id(&[crd]));
            register::set_conversion(kube, crd, &url, &self.ca_bundle)
                .await
                .map_err(registration_error)?;
        }
        for crd in previous_crds.iter().filter(|c| !crds.contains(c)) {
            register::reset_conversion(kube, crd)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// Deregisters everything `package` registered.
    pub async fn remove(&self, package: &str) -> Result<(), ServiceError> {
        let old = {
            let mut routes = self.routes.lock().expect("webhook routes");
            // Only what this process registered (or registered again at start from the
            // store): packages without webhooks cost the API server nothing.
            let Some(old) = routes.packages.remove(package) else {
                return Ok(());
            };
            for id in &old.admission {
                routes.admission.remove(id);
            }
            for crd in &old.crds {
                routes.conversion.remove(crd);
            }
            old
        };
        if let Some(kube) = &self.kube {
            register::delete_admission(kube, package)
                .await
                .map_err(unavailable)?;
            for crd in &old.crds {
                register::reset_conversion(kube, crd)
                    .await
                    .map_err(unavailable)?;
            }
        }
        Ok(())
    }

    /// Forgets the packages `which` selects without touching the cluster's configurations:
    /// this replica no longer owns their shard, and the replica that takes it over registers
    /// them again with its own URL and CA.
    pub fn forget_where(&self, which: impl Fn(&str) -> bool) {
        let mut routes = self.routes.lock().expect("webhook routes");
        let gone: Vec<String> = routes
            .packages
            .keys()
            .filter(|p| which(p))
            .cloned()
            .collect();
        for package in gone {
            if let Some(old) = routes.packages.remove(&package) {
                for id in &old.admission {
                    routes.admission.remove(id);
                }
                for crd in &old.crds {
                    routes.conversion.remove(crd);
                }
            }
        }
    }

    /// Runs for `package` go to its newer generation from now on.
    pub fn adopt_generation(&self, package: &str, generation: Generation) {
        let mut routes = self.routes.lock().expect("webhook routes");
        for r in routes
            .admission
            .values_mut()
            .filter(|r| r.package.as_str() == package)
        {
            r.generation = r.generation.max(generation);
        }
        for r in routes
            .conversion
            .values_mut()
            .flatten()
            .filter(|r| r.package.as_str() == package)
        {
            r.generation = r.generation.max(generation);
        }
    }

    /// A worker's answer to the request `request_id`. Late answers (the request gave up) and
    /// answers naming another package are dropped.
    pub fn answer(&self, req: pb::AnswerWebhookRequest) {
        let mut pending = self.pending.lock().expect("pending webhooks");
        match pending.get(&req.request_id) {
            Some(p) if p.package == req.package => {}
            Some(_) => {
                tracing::warn!(request = %req.request_id, package = %req.package, "a webhook answer for another package's request; dropped");
                return;
            }
            None => {
                tracing::debug!(request = %req.request_id, "a webhook answer after its request gave up; dropped");
                return;
            }
        }
        let Some(p) = pending.remove(&req.request_id) else {
            return;
        };
        let result = if req.error.is_empty() {
            Ok(req.response)
        } else {
            Err(req.error)
        };
        let _ = p.tx.send(result);
    }

    /// Answers an AdmissionReview sent to `/admission/<id>`: `Ok` is the review to send back,
    /// `Err` an error the API server meets with the webhook's failurePolicy.
    async fn admit(&self, id: &str, review: Value) -> Result<Value, (u16, String)> {
        let uid = review["request"]["uid"]
            .as_str()
            .ok_or((
                400,
                "not an AdmissionReview: request.uid is missing".to_owned(),
            ))?
            .to_owned();
        let (package, generation, hook, binding, context) = {
            let routes = self.routes.lock().expect("webhook routes");
            let r = routes
                .admission
                .get(id)
                .ok_or((404, format!("no webhook is registered at /admission/{id}")))?;
            let context = BindingContext::admission(&r.binding, review, &r.config);
            (
                r.package.clone(),
                r.generation,
                r.hook.clone(),
                r.binding.clone(),
                context,
            )
        };
        let webhook_type = match binding.kind {
            AdmissionKind::Validating => WebhookType::Validating,
            AdmissionKind::Mutating => WebhookType::Mutating,
        };
        let wait =
            Duration::from_secs(binding.timeout_seconds.into()).saturating_sub(ANSWER_MARGIN);
        let text = self
            .dispatch(&package, generation, &hook, webhook_type, context, 0, wait)
            .await
            .map_err(|e| {
                tracing::warn!(package.key = %package, hook, webhook = %binding.name, error = %e, "admission request not answered by its hook; the webhook's failurePolicy applies");
                (500, format!("hook {hook} did not answer: {e}"))
            })?;
        Ok(parse_admission_response(&text, binding.kind).review(&uid))
    }

    /// Answers a ConversionReview sent to `/conversion/<id>`. Objects are converted per source
    /// version by the hook whose rule converts it to the desired version (one step; chains of
    /// rules are not followed).
    async fn convert(&self, id: &str, review: Value) -> Result<Value, (u16, String)> {
        let request = &review["request"];
        let uid = request["uid"]
            .as_str()
            .ok_or((
                400,
                "not a ConversionReview: request.uid is missing".to_owned(),
            ))?
            .to_owned();
        let desired = request["desiredAPIVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let objects = request["objects"].as_array().cloned().unwrap_or_default();
        let mut by_version: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, o) in objects.iter().enumerate() {
            let v = o["apiVersion"].as_str().unwrap_or_default().to_owned();
            by_version.entry(v).or_default().push(i);
        }
        let mut converted = objects.clone();
        for (from, positions) in by_version {
            if from == desired {
                continue;
            }
            let found = {
                let routes = self.routes.lock().expect("webhook routes");
                let crd = routes
                    .conversion
                    .iter()
                    .find(|(crd, _)| route_id(&[crd]) == id)
                    .ok_or((
                        404,
                        format!("no conversion is registered at /conversion/{id}"),
                    ))?;
                crd.1.iter().find_map(|r| {
                    r.binding
                        .conversions
                        .iter()
                        .find(|c| c.converts(r.binding.crd_group(), &from, &desired))
                        .map(|rule| {
                            let part = json!({
                                "apiVersion": review["apiVersion"],
                                "kind": review["kind"],
                                "request": {
                                    "uid": uid,
                                    "desiredAPIVersion": desired,
                                    "objects": positions.iter().map(|&i| objects[i].clone()).collect::<Vec<_>>(),
                                },
                            });
                            let ctx = BindingContext::conversion(&r.binding, rule, part, &r.config);
                            (r.package.clone(), r.generation, r.hook.clone(), ctx)
                        })
                })
            };
            let Some((package, generation, hook, ctx)) = found else {
                return Ok(conversion_review(
                    &uid,
                    Err(format!("no hook converts {from} to {desired}")),
                ));
            };
            let wait =
                Duration::from_secs(berth_hooks::config::DEFAULT_WEBHOOK_TIMEOUT_SECONDS.into())
                    .saturating_sub(ANSWER_MARGIN);
            let answer = self
                .dispatch(
                    &package,
                    generation,
                    &hook,
                    WebhookType::Conversion,
                    ctx,
                    positions.len() as u32,
                    wait,
                )
                .await
                .map_err(|e| format!("hook {hook} did not answer: {e}"))
                .and_then(|text| parse_conversion_response(&text, positions.len()));
            match answer {
                Ok(done) => {
                    for (&i, o) in positions.iter().zip(done) {
                        converted[i] = o;
                    }
                }
                Err(e) => {
                    tracing::warn!(package.key = %package, hook, error = %e, "conversion failed");
                    return Ok(conversion_review(&uid, Err(e)));
                }
            }
        }
        Ok(conversion_review(&uid, Ok(converted)))
    }

    /// Queues a WebhookRun and waits up to `wait` for a worker's answer.
    #[allow(clippy::too_many_arguments)]
    async fn dispatch(
        &self,
        package: &PackageKey,
        generation: Generation,
        hook: &str,
        webhook_type: WebhookType,
        context: BindingContext,
        objects: u32,
        wait: Duration,
    ) -> Result<String, String> {
        let _permit = self.in_flight.clone().try_acquire_owned().map_err(|_| {
            format!("more than {MAX_IN_FLIGHT} webhook requests are waiting for hooks")
        })?;
        let request_id = uuid::Uuid::new_v4().to_string();
        let contexts = binding_context::to_json(&[context]);
        let run = WebhookRun {
            hook: hook.to_owned(),
            webhook_type: webhook_type as i32,
            request_id: request_id.clone(),
            deadline_unix_ms: now_ms() + wait.as_millis() as i64,
            objects,
            binding_contexts: contexts
                .as_array()
                .into_iter()
                .flatten()
                .map(berth_proto::json::to_struct)
                .collect(),
        };
        let task = tasks::task(&run);
        if task.payload.len() > MAX_REVIEW_BYTES {
            return Err(format!(
                "the request of {} bytes exceeds the limit of {MAX_REVIEW_BYTES} bytes",
                task.payload.len()
            ));
        }
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("pending webhooks").insert(
            request_id.clone(),
            Pending {
                package: package.to_string(),
                tx,
            },
        );
        let task = Task {
            id: request_id.clone(),
            queue: format!("{package}/webhook/{request_id}"),
            package: package.to_string(),
            generation: generation.get(),
            traceparent: berth_runtime::current_traceparent(),
            allow_failure: true,
            ..task
        };
        let result = tokio::time::timeout(wait, async {
            self.broker
                .clone()
                .enqueue(EnqueueRequest { tasks: vec![task] })
                .await
                .map_err(|s| format!("the broker refused the run: {}", s.message()))?;
            rx.await
                .map_err(|_| "hookevent is shutting down".to_owned())?
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {wait:?}")));
        self.pending
            .lock()
            .expect("pending webhooks")
            .remove(&request_id);
        result
    }
}

/// The hook's kubernetes bindings (for a webhook binding's `group` snapshots).
fn hook_config(hook: &str, kubernetes: &[pb::KubernetesBinding]) -> Result<HookConfig, String> {
    let specs = kubernetes
        .iter()
        .filter(|k| k.hook == hook)
        .map(crate::convert::spec_of)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HookConfig {
        kubernetes: specs,
        ..Default::default()
    })
}

/// An app's admission webhooks see only namespaced objects (and only in its namespace, by the
/// namespaceSelector `register` adds).
fn confine_rules(binding: &AdmissionBinding) -> Result<(), String> {
    for (i, rule) in binding.rules.iter().enumerate() {
        match rule.get("scope").and_then(Value::as_str) {
            None | Some("Namespaced") => {}
            Some(other) => {
                return Err(format!(
                    "{}.rules[{i}].scope: an app's webhook may only see namespaced objects (scope Namespaced), not {other:?}",
                    binding.kind.key()
                ));
            }
        }
    }
    Ok(())
}

/// The host of `https://HOST[:PORT][/...]`, brackets removed from an IPv6 address.
fn url_host(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    (!host.is_empty()).then(|| host.to_owned())
}

fn unavailable(e: ::kube::Error) -> ServiceError {
    ServiceError::Unavailable(format!("registering webhooks: {e}"))
}

/// The API server refusing a configuration (422, 400) is the binding's fault.
fn registration_error(e: ::kube::Error) -> ServiceError {
    match &e {
        ::kube::Error::Api(s) if matches!(s.code, 400 | 422) => ServiceError::Invalid(format!(
            "the API server refused the webhook registration: {}",
            s.message
        )),
        _ => unavailable(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_hosts() {
        assert_eq!(
            url_host("https://127.0.0.1:8443").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            url_host("https://hooks.example.com/base").as_deref(),
            Some("hooks.example.com")
        );
        assert_eq!(url_host("https://[::1]:9443").as_deref(), Some("::1"));
        assert_eq!(url_host("http://x"), None);
    }

    #[test]
    fn route_ids_are_stable_and_distinct() {
        assert_eq!(route_id(&["a", "b"]), route_id(&["a", "b"]));
        assert_ne!(route_id(&["a", "b"]), route_id(&["ab", ""]));
        assert_eq!(route_id(&["a"]).len(), 32);
    }
}
