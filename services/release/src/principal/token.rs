//! Tokens of a package's ServiceAccount for its hooks, and where hooks reach the API server.
//!
//! The release service mints them (a TokenRequest) rather than the workers: the right to mint
//! any ServiceAccount's token is the right to become it, kube-system's included, and workers
//! run untrusted code (docs/decisions/package-identity.md).

use std::time::Duration;

use berth_clients::scope::PackageScope;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};

use super::{PrincipalError, call};
use crate::apply::is_not_found;

/// A token's life: an hour, the most berth asks for (workers renew it minutes before it ends).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// Where hooks reach the API server: what their kubeconfig and in-cluster files say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookEndpoint {
    /// `https://host:port` (or `http://` for a plain development cluster).
    pub server: String,
    /// PEM of the CA of the server's certificate; empty: the system's roots.
    pub ca_pem: String,
    pub insecure_skip_tls_verify: bool,
}

impl HookEndpoint {
    /// The endpoint of the release service's own configuration: hooks on the workers reach the
    /// cluster where release does (in a pod: the `kubernetes` Service; on one machine: the
    /// same address). `server` overrides the URL.
    pub fn of_config(config: &kube::Config, server: Option<&str>) -> std::io::Result<HookEndpoint> {
        let ca_pem = match (&config.root_cert_file, &config.root_cert) {
            (Some(file), _) => std::fs::read_to_string(file)?,
            (None, Some(certs)) => certs.iter().map(|der| pem(der)).collect(),
            (None, None) => String::new(),
        };
        let url = config.cluster_url.to_string();
        Ok(HookEndpoint {
            server: server.unwrap_or(&url).trim_end_matches('/').to_owned(),
            ca_pem,
            insecure_skip_tls_verify: config.accept_invalid_certs,
        })
    }
}

/// A DER certificate as PEM.
fn pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// A minted token and where to use it.
#[derive(Clone, Debug)]
pub struct Minted {
    pub token: String,
    /// Seconds since the Unix epoch.
    pub expires_unix: i64,
    pub endpoint: HookEndpoint,
}

/// Mints a token of `scope`'s ServiceAccount. `Ok(None)`-like outcomes are errors: a missing
/// ServiceAccount is [`PrincipalError::Kube`] with 404 (the caller ensures the principal and
/// asks again), a cluster without the TokenRequest API is [`PrincipalError::NotServed`].
pub async fn mint(
    client: &Client,
    scope: &PackageScope,
    endpoint: &HookEndpoint,
) -> Result<Minted, PrincipalError> {
    let sa = scope.service_account();
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &sa.namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(TOKEN_LIFETIME.as_secs() as i64),
            ..Default::default()
        }),
        ..Default::default()
    };
    let what = format!("a token of ServiceAccount {sa}");
    let minted: Result<TokenRequest, _> = call(
        "create",
        &what,
        api.create_subresource("token", &sa.name, &PostParams::default(), &request),
    )
    .await;
    let minted = match minted {
        Ok(m) => m,
        Err(PrincipalError::Kube {
            source: kube::Error::Api(s),
            ..
        }) if is_not_found(&s) => {
            // The ServiceAccount is missing, or the cluster has no TokenRequest API.
            let exists = call("get", &sa, api.get_opt(&sa.name)).await?.is_some();
            return Err(if exists {
                PrincipalError::NotServed(format!(
                    "{what}: the cluster does not serve the TokenRequest API (serviceaccounts/token)"
                ))
            } else {
                PrincipalError::Kube {
                    op: "create",
                    object: what,
                    source: kube::Error::Api(s),
                }
            });
        }
        Err(e) => return Err(e),
    };
    let answered = minted
        .status
        .and_then(|s| Some((s.token?, s.expiration_timestamp?)));
    let Some((token, expires)) = answered else {
        return Err(PrincipalError::Invalid(format!(
            "{what}: the API server answered no token or expiry"
        )));
    };
    Ok(Minted {
        token,
        expires_unix: expires.0.as_second(),
        endpoint: endpoint.clone(),
    })
}

/// Whether `e` says the ServiceAccount does not exist (ensure the principal, mint again).
pub fn missing_account(e: &PrincipalError) -> bool {
    matches!(e, PrincipalError::Kube { source: kube::Error::Api(s), .. } if is_not_found(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_certificates_become_pem() {
        let pem = pem(&[0u8; 100]);
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert!(pem.ends_with("-----END CERTIFICATE-----\n"));
        assert!(pem.lines().all(|l| l.len() <= 64));
    }
}
