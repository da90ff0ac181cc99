//! Starting and stopping a dev cluster: bind, load, serve, run controllers.

use std::path::PathBuf;
use std::sync::Arc;

use axum::serve::ListenerExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

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
    token: Option<String>,
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
        let store = Arc::new(Store::new(loaded, persist)?);
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
        let url = format!("http://{addr}");
        let kubeconfig_path = match &config.data_dir {
            Some(dir) => {
                let path = dir.join("kubeconfig");
                crate::private::write_private(
                    &path,
                    kubeconfig::render(&url, config.token.as_deref()).as_bytes(),
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
            token: config.token.as_deref().map(Arc::from),
            shutdown: shutdown.clone(),
            address: Arc::from(addr.to_string()),
        };
        let mut tasks = JoinSet::new();
        let stop = shutdown.clone();
        tasks.spawn(async move {
            // TCP_NODELAY: watch events and small responses are written as they happen;
            // with Nagle's algorithm a second small write waits for the client's delayed
            // ACK, which showed as a 40 ms floor on 1-2 % of create→event latencies.
            let listener = listener.tap_io(|tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "could not set TCP_NODELAY");
                }
            });
            let serve = axum::serve(listener, router(app))
                .with_graceful_shutdown(async move { stop.cancelled().await });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "dev cluster HTTP server failed");
            }
        });
        tasks.spawn(controllers::gc::run(store.clone(), shutdown.clone()));
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
            token: config.token,
            kubeconfig_path,
            store,
            shutdown,
            tasks,
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// A kubeconfig (cluster, user with the token if any, context, current-context).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig::render(&self.url, self.token.as_deref())
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
