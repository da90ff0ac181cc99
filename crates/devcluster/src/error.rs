//! Errors starting or stopping the dev cluster.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("dev cluster persistence: {0}")]
    Persistence(#[from] crate::persistence::PersistError),
    #[error("loading stored objects: {0}")]
    Load(#[from] crate::status::ApiError),
    #[error("dev cluster TLS: {0}")]
    Tls(String),
    #[error("dev cluster credentials {path}: {source}")]
    Credentials {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
}
