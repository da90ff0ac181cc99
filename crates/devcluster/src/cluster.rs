//! Starting and stopping a dev cluster: bind, load, serve, run controllers.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::auth::{Authenticator, Credentials};
use crate::config::DevClusterConfig;
use crate::controllers;
use crate::error::Error;
use crate::http::{App, router};
use crate::kubeconfig;
use crate::persistence::{Loaded, Persistence};
use crate::store::Store;

/// A running dev cluster. Dropping it without [`DevCluster::shutdown`] stops serving
/// only when the runtime stops; call `shutdown` to flush persistence.
pub struct DevCluster {
    url: String,
    admin_token: String,
    ca_pem: String,
    kubeconfig_path: Option<PathBuf>,
    store: Arc<Store>,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
}

impl DevCluster {
    /// Loads persisted state (when `data_dir` is set), binds, writes the kubeconfig and
    /// starts serving. Returns once the listener is bound, so the URL is usable at once.
    pub async fn start(config: DevClusterConfig) -> Result<DevCluster, Error> {
        let (persist, loaded) = match &config.data_dir {
            Some(dir) => {
                let (p, l) = Persistence::open(dir)?;
                (Some(p), l)
            }
            None => (None, Loaded::default()),
        };
        let credentials =
            Credentials::load_or_create(config.data_dir.as_deref(), config.admin_token.clone())?;
        let store = Arc::new(Store::new(loaded, persist)?);
        controllers::aggregation::settle(&store);
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.listen,
            source,
        })?;
        let serving = crate::tls::serving(config.data_dir.as_deref(), addr.ip())?;
        store.set_root_ca(serving.ca_pem.clone());
        let url = format!("https://{addr}");
        let kubeconfig_path = match &config.data_dir {
            Some(dir) => {
                let path = dir.join("kubeconfig");
                crate::private::write_private(
                    &path,
                    kubeconfig::render(&url, &serving.ca_pem, &credentials.admin_token).as_bytes(),
                )
                .map_err(|source| Error::Kubeconfig {
                    path: path.clone(),
                    source,
                })?;
                Some(path)
            }
            None => None,
        };
        let shutdown = CancellationToken::new();
        let app = App {
            store: store.clone(),
            auth: Arc::new(Authenticator::new(&credentials)),
            shutdown: shutdown.clone(),
            address: Arc::from(addr.to_string()),
        };
        let mut tasks = JoinSet::new();
        tasks.spawn(crate::tls::serve(
            listener,
            serving.config.clone(),
            router(app),
            shutdown.clone(),
        ));
        tasks.spawn(controllers::gc::run(store.clone(), shutdown.clone()));
        tasks.spawn(controllers::aggregation::run(
            store.clone(),
            shutdown.clone(),
        ));
        if config.simulate_workloads {
            tasks.spawn(controllers::simulate::run(
                store.clone(),
                config.workload_delay,
                shutdown.clone(),
            ));
        }
        tracing::info!(url = %url, data_dir = ?config.data_dir, "dev cluster started");
        Ok(DevCluster {
            url,
            admin_token: credentials.admin_token,
            ca_pem: serving.ca_pem,
            kubeconfig_path,
            store,
            shutdown,
            tasks,
        })
    }

    /// Base URL, e.g. `https://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// A kubeconfig (cluster, the admin user with its token, context, current-context).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig::render(&self.url, &self.ca_pem, &self.admin_token)
    }

    /// The CA (PEM) the dev cluster's serving certificate is signed by.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The admin token (user `admin` in `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// `<data_dir>/kubeconfig`, written at start when a data directory is configured.
    pub fn kubeconfig_path(&self) -> Option<PathBuf> {
        self.kubeconfig_path.clone()
    }

    /// Stops serving (ending open watches), stops the controllers, and compacts
    /// persistence so the next start loads a single snapshot.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        while let Some(result) = self.tasks.join_next().await {
            if let Err(e) = result {
                tracing::error!(error = %e, "dev cluster task failed");
            }
        }
        if let Err(e) = self.store.close() {
            tracing::error!(error = %e, "dev cluster persistence did not close cleanly; the log will be replayed at next start");
        }
    }
}
