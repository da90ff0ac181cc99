//! A package's Kubernetes identity on this worker (docs/decisions/package-identity.md): its
//! principal made sure of once per generation before the first hook or release write of it
//! (release's `EnsurePrincipal`), and a token of its ServiceAccount for its hooks (release's
//! `MintToken`), kept until a few minutes before it expires. The worker holds no Kubernetes
//! credentials of its own: release mints, because the right to mint any ServiceAccount's token
//! is the right to become it, and a worker runs untrusted code.
//!
//! What a hook run gets from it ([`HookIdentity::give`]): a kubeconfig in its run directory
//! (`KUBECONFIG`), the `KUBERNETES_SERVICE_HOST`/`_PORT` a pod finds, and the in-cluster files
//! (`/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}`, mounted in the
//! hook's private mount namespace where the worker is root), so `kubectl` and client libraries
//! work unchanged and can do exactly what the package may.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use berth_proto::release::{MintTokenResponse, PrincipalRequest};
use berth_queue::worker::TaskError;

use crate::client::CallError;
use crate::context::TaskContext;

/// Packages whose ensured generation and token are remembered; past this the memory starts
/// over (forgetting costs one EnsurePrincipal and one MintToken per package).
const MAX_REMEMBERED: usize = 4096;
/// A token is not handed to a hook this close to its expiry (hooks run up to their timeout,
/// and the clock of the API server may be ahead).
const RENEW_BEFORE_SECS: i64 = 300;

/// How long hooks run without identity after the release service answered that it acts as no
/// package or mints no tokens, before it is asked again.
const UNSERVED_FOR: Duration = Duration::from_secs(60);

/// The worker's memory of packages' principals and tokens.
#[derive(Default)]
pub struct Identities {
    // Std mutexes: held only to read or insert, never across an await.
    /// The generation each package's principal was last ensured for.
    ensured: Mutex<HashMap<String, i64>>,
    tokens: Mutex<HashMap<String, Arc<MintTokenResponse>>>,
    /// When the release service last answered that it acts as no package (no principals) or
    /// that the cluster mints no tokens (no TokenRequest API): hooks run without identity, as
    /// before principals, for [`UNSERVED_FOR`].
    unserved: Mutex<Option<Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn remember<V>(map: &mut HashMap<String, V>, key: &str, value: V) {
    if map.len() >= MAX_REMEMBERED && !map.contains_key(key) {
        map.clear();
    }
    map.insert(key.to_owned(), value);
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Identities {
    /// Makes sure the package's principal exists as lifecycle says it should, once per
    /// generation on this worker (release reads what is live and writes only what differs, so
    /// a generation that changed nothing costs it reads only). A principal release made anew
    /// (its ServiceAccount written) invalidates the token kept for it.
    pub async fn ensure(&self, cx: &TaskContext<'_>) -> Result<(), TaskError> {
        let key = cx.key();
        if lock(&self.ensured).get(key) == Some(&cx.spec.generation) || self.unserved() {
            return Ok(());
        }
        let answer = cx
            .services
            .release
            .clone()
            .ensure_principal(PrincipalRequest {
                package: key.to_owned(),
            })
            .await
            .map_err(|s| CallError::new("release EnsurePrincipal", s));
        let written = match answer {
            Ok(a) => a.into_inner().written,
            Err(e) if e.is_not_served() => {
                self.set_unserved(e.message());
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if written.iter().any(|o| o.kind == "ServiceAccount") {
            lock(&self.tokens).remove(key);
        }
        remember(&mut lock(&self.ensured), key, cx.spec.generation);
        Ok(())
    }

    /// What a hook run of the package gets to act as its ServiceAccount; `None` when the
    /// release service acts as no package or the cluster mints no tokens (hooks then hold no
    /// credentials, as before principals).
    pub async fn for_hooks(&self, cx: &TaskContext<'_>) -> Result<Option<HookIdentity>, TaskError> {
        self.ensure(cx).await?;
        if self.unserved() {
            return Ok(None);
        }
        let key = cx.key();
        let kept = lock(&self.tokens).get(key).cloned();
        let token = match kept {
            Some(t) if t.expires_unix - RENEW_BEFORE_SECS > now_unix() => t,
            _ => {
                let minted = cx
                    .services
                    .release
                    .clone()
                    .mint_token(PrincipalRequest {
                        package: key.to_owned(),
                    })
                    .await
                    .map_err(|s| CallError::new("release MintToken", s));
                let minted = match minted {
                    Ok(m) => Arc::new(m.into_inner()),
                    Err(e) if e.is_not_served() => {
                        self.set_unserved(e.message());
                        return Ok(None);
                    }
                    Err(e) => return Err(e.into()),
                };
                remember(&mut lock(&self.tokens), key, minted.clone());
                minted
            }
        };
        Ok(Some(HookIdentity::of(&token)))
    }

    fn unserved(&self) -> bool {
        lock(&self.unserved).is_some_and(|at| at.elapsed() < UNSERVED_FOR)
    }

    fn set_unserved(&self, why: &str) {
        let mut since = lock(&self.unserved);
        if since.is_none_or(|at| at.elapsed() >= UNSERVED_FOR) {
            tracing::warn!(reason = %why, "hooks run without a Kubernetes identity");
        }
        *since = Some(Instant::now());
    }

    /// Forgets the package (its principal was removed).
    pub fn forget(&self, key: &str) {
        lock(&self.ensured).remove(key);
        lock(&self.tokens).remove(key);
    }
}

/// What one hook run gets to act as its package's ServiceAccount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookIdentity {
    /// The kubeconfig (server, CA, token, the principal's namespace as the default).
    pub kubeconfig: Vec<u8>,
    /// The in-cluster files: `token`, `ca.crt`, `namespace`.
    pub token: String,
    pub ca_pem: String,
    pub namespace: String,
    /// `KUBERNETES_SERVICE_HOST` and `_PORT`, from the server's URL.
    pub service_host: String,
    pub service_port: String,
}

impl HookIdentity {
    fn of(t: &MintTokenResponse) -> HookIdentity {
        let (host, port) = host_and_port(&t.server);
        HookIdentity {
            kubeconfig: kubeconfig(t),
            token: t.token.clone(),
            ca_pem: t.ca_pem.clone(),
            namespace: t.namespace.clone(),
            service_host: host,
            service_port: port,
        }
    }

    /// Gives a hook run this identity: the kubeconfig in its run directory (`KUBECONFIG`
    /// names it), the in-cluster files mounted where a pod finds them (the hook runtime mounts
    /// them in a private mount namespace where the worker is root, and skips the mounts
    /// otherwise), and the service address a pod gets in its environment. The run directory
    /// and its files are the hook's uid's, 0700/0600, removed when the run ends.
    pub fn give(&self, sandbox: &mut berth_hooks::Sandbox, env: &mut Vec<(String, String)>) {
        let file = |name: &str, contents: &[u8], var: Option<&str>| berth_hooks::RunDirFile {
            name: name.to_owned(),
            contents: contents.to_vec(),
            env: var.map(str::to_owned),
        };
        sandbox
            .files
            .push(file("kubeconfig", &self.kubeconfig, Some("KUBECONFIG")));
        for (name, contents) in [
            ("token", self.token.as_bytes()),
            ("ca.crt", self.ca_pem.as_bytes()),
            ("namespace", self.namespace.as_bytes()),
        ] {
            sandbox.files.push(file(name, contents, None));
            sandbox.mounts.push(berth_hooks::Mount {
                file: name.to_owned(),
                target: std::path::Path::new(IN_CLUSTER_DIR).join(name),
            });
        }
        env.push((
            "KUBERNETES_SERVICE_HOST".to_owned(),
            self.service_host.clone(),
        ));
        env.push((
            "KUBERNETES_SERVICE_PORT".to_owned(),
            self.service_port.clone(),
        ));
    }
}

/// Where a pod finds its ServiceAccount's token, CA and namespace.
pub const IN_CLUSTER_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The host and port of `server` (`https://host:port`; the scheme's port when none).
fn host_and_port(server: &str) -> (String, String) {
    let (scheme, rest) = server.split_once("://").unwrap_or(("https", server));
    let authority = rest.split('/').next().unwrap_or_default();
    let default = if scheme == "http" { "80" } else { "443" };
    // `[::1]:6443`: the brackets go, as a pod's KUBERNETES_SERVICE_HOST has none.
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').unwrap_or((v6, ""));
        let port = after.strip_prefix(':').unwrap_or(default);
        return (host.to_owned(), port.to_owned());
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), port.to_owned()),
        None => (authority.to_owned(), default.to_owned()),
    }
}

/// A kubeconfig of one cluster, user and context (JSON, which kubeconfig readers take as YAML).
fn kubeconfig(t: &MintTokenResponse) -> Vec<u8> {
    use base64::Engine as _;
    let mut cluster = serde_json::json!({ "server": t.server });
    if t.insecure_skip_tls_verify {
        cluster["insecure-skip-tls-verify"] = true.into();
    } else if !t.ca_pem.is_empty() {
        cluster["certificate-authority-data"] = base64::engine::general_purpose::STANDARD
            .encode(&t.ca_pem)
            .into();
    }
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "berth", "cluster": cluster}],
        "users": [{"name": t.username, "user": {"token": t.token}}],
        "contexts": [{"name": "berth", "context": {
            "cluster": "berth", "user": t.username, "namespace": t.namespace,
        }}],
        "current-context": "berth",
    });
    serde_json::to_vec_pretty(&config).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minted(server: &str) -> MintTokenResponse {
        MintTokenResponse {
            token: "t0k3n".into(),
            expires_unix: 0,
            server: server.into(),
            ca_pem: "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".into(),
            namespace: "team".into(),
            username: "system:serviceaccount:team:berth-app-web".into(),
            insecure_skip_tls_verify: false,
        }
    }

    #[test]
    fn the_service_address_comes_from_the_server_url() {
        let id = |s: &str| HookIdentity::of(&minted(s));
        let v4 = id("https://10.0.0.1:6443");
        assert_eq!(
            (v4.service_host.as_str(), v4.service_port.as_str()),
            ("10.0.0.1", "6443")
        );
        let named = id("https://kubernetes.default.svc");
        assert_eq!(named.service_port, "443");
        let v6 = id("https://[::1]:6443/");
        assert_eq!(
            (v6.service_host.as_str(), v6.service_port.as_str()),
            ("::1", "6443")
        );
        assert_eq!(id("http://127.0.0.1").service_port, "80");
    }

    #[test]
    fn a_hook_run_gets_the_kubeconfig_the_in_cluster_files_and_the_service_address() {
        let id = HookIdentity::of(&minted("https://10.0.0.1:6443"));
        let mut sandbox = berth_hooks::Sandbox::new(
            7,
            berth_hooks::Limits::default(),
            std::path::PathBuf::from("/pkg"),
        );
        let mut env = vec![];
        id.give(&mut sandbox, &mut env);
        let names: Vec<&str> = sandbox.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["kubeconfig", "token", "ca.crt", "namespace"]);
        assert_eq!(sandbox.files[0].env.as_deref(), Some("KUBECONFIG"));
        assert_eq!(sandbox.files[1].contents, b"t0k3n");
        assert_eq!(sandbox.files[3].contents, b"team");
        let targets: Vec<String> = sandbox
            .mounts
            .iter()
            .map(|m| m.target.display().to_string())
            .collect();
        assert_eq!(
            targets,
            [
                "/var/run/secrets/kubernetes.io/serviceaccount/token",
                "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
                "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
            ]
        );
        assert!(env.contains(&("KUBERNETES_SERVICE_HOST".to_owned(), "10.0.0.1".to_owned())));
        assert!(env.contains(&("KUBERNETES_SERVICE_PORT".to_owned(), "6443".to_owned())));
    }

    #[test]
    fn the_kubeconfig_names_the_principal_and_its_namespace() {
        let config: serde_json::Value =
            serde_json::from_slice(&kubeconfig(&minted("https://10.0.0.1:6443"))).unwrap();
        assert_eq!(config["current-context"], "berth");
        assert_eq!(config["contexts"][0]["context"]["namespace"], "team");
        assert_eq!(config["users"][0]["user"]["token"], "t0k3n");
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://10.0.0.1:6443"
        );
        assert!(config["clusters"][0]["cluster"]["certificate-authority-data"].is_string());
        let mut insecure = minted("https://x");
        insecure.insecure_skip_tls_verify = true;
        let config: serde_json::Value = serde_json::from_slice(&kubeconfig(&insecure)).unwrap();
        assert_eq!(
            config["clusters"][0]["cluster"]["insecure-skip-tls-verify"],
            true
        );
    }
}
