//! Test harness for berth's end-to-end journeys: starts the real binaries (ports chosen by the
//! OS, announced on their first stdout line), a Kubernetes API (the embedded dev cluster, or the
//! real cluster named by `BERTH_TEST_KUBECONFIG`), and offers gRPC and kube clients.
//!
//! The binaries must be built first (`cargo build --workspace --bins`, which the README's test
//! command does).

pub mod cluster;
pub mod journey;
pub mod measure;
pub mod process;

pub use berth_devcluster::test_namespace::TestNamespace;
pub use cluster::TestCluster;
pub use process::{AllInOne, Proc, SplitTopology, binary};

/// The example package repository shipped with berth.
pub fn examples_repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/packages")
        .canonicalize()
        .expect("examples/packages exists")
}

/// `GET /metrics` from `addr` over plain HTTP/1.0 (one request needs no HTTP client crate).
pub async fn scrape_metrics(addr: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: berth\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    anyhow::ensure!(
        response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
        "{response}"
    );
    Ok(response)
}
