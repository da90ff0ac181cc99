//! Acting as a package's ServiceAccount: clients that send every request with
//! `Impersonate-User: system:serviceaccount:<ns>:<name>`, so the API server authorises what
//! berth writes for a package by the package's own rights (its RBAC has the last word,
//! docs/decisions/package-identity.md). No `Impersonate-Group` is sent: for a
//! ServiceAccount user the API server adds its groups itself (`system:serviceaccounts`,
//! `system:serviceaccounts:<ns>`, `system:authenticated`), and asking for groups would need the
//! right to impersonate any group.
//!
//! An impersonating client wraps the process's own client (its connections, TLS and
//! credentials): a principal costs a header, not a connection. kube-rs has no per-request
//! impersonation (its `Config` impersonates for a whole client, with a connection pool of its
//! own), hence this small wrapper. hookevent has the same one (`kube/impersonate.rs`): the two
//! services share no kube-aware crate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::HeaderValue;
use kube::Client;

/// Principals whose clients are kept; past this the cache starts over (a new client is a
/// header and a small buffer task, so forgetting costs little).
const MAX_CLIENTS: usize = 512;

const IMPERSONATE_USER: &str = "impersonate-user";

/// A client acting as `user` through `base`.
pub fn impersonating(
    base: &Client,
    user: &str,
) -> Result<Client, http::header::InvalidHeaderValue> {
    let value = HeaderValue::from_str(user)?;
    let base = base.clone();
    let default_ns = base.default_namespace().to_owned();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let base = base.clone();
        // Replaces whatever a caller set: one identity per client.
        request
            .headers_mut()
            .insert(IMPERSONATE_USER, value.clone());
        async move { base.send(request).await }
    });
    Ok(Client::new(service, default_ns))
}

/// Impersonating clients, one per user name, bounded.
#[derive(Clone)]
pub struct ImpersonatingClients {
    base: Client,
    // Std mutex: held only to look up or insert, never across an await.
    clients: Arc<Mutex<HashMap<String, Client>>>,
}

impl ImpersonatingClients {
    pub fn new(base: Client) -> ImpersonatingClients {
        ImpersonatingClients {
            base,
            clients: Arc::default(),
        }
    }

    /// The client acting as `user`.
    pub fn get(&self, user: &str) -> Result<Client, http::header::InvalidHeaderValue> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(user) {
            return Ok(client.clone());
        }
        let client = impersonating(&self.base, user)?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(user.to_owned(), client.clone());
        Ok(client)
    }

    /// Forgets `user`'s client (its principal was removed).
    pub fn forget(&self, user: &str) {
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(user);
    }
}
