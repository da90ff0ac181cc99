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
pub mod registry;
pub mod replicated;

pub use berth_devcluster::test_namespace::TestNamespace;
pub use cluster::TestCluster;
pub use process::{AllInOne, Databases, Proc, SplitTopology, binary};
pub use replicated::{Replicas, ReplicatedTopology};

/// The bearer token every gateway and `berth up` the harness starts accepts (they read the
/// file through `BERTH_TOKEN_FILE`, which [`Proc::start`] gives every process), and that
/// [`journey::connect`] and [`cli`] present. Random per test process, in a 0600 file owned by
/// the test (hooks running as their principals' uids cannot read it).
pub struct ApiToken {
    pub token: String,
    pub file: std::path::PathBuf,
}

/// The harness's [`ApiToken`], made on first use.
pub fn api_token() -> &'static ApiToken {
    static TOKEN: std::sync::OnceLock<ApiToken> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| {
        use std::io::Write as _;
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let mut file = tempfile::Builder::new()
            .prefix("berth-test-token-")
            .tempfile()
            .expect("create the harness's token file");
        writeln!(file, "{token}").expect("write the harness's token file");
        let file = file
            .into_temp_path()
            .keep()
            .expect("keep the harness's token file");
        ApiToken { token, file }
    })
}

/// The `berth` CLI as tests run it against the harness's servers: it reads the harness's token
/// from its file (`BERTH_TOKEN_FILE`), as a user's CLI reads `berth up`'s.
pub fn cli() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(binary("berth"));
    command.env("BERTH_TOKEN_FILE", &api_token().file);
    command
}

/// The example package repository shipped with berth, as an Update names it: relative to
/// the repository root the harness configures ([`workspace_root`]).
pub const EXAMPLES_REPO: &str = "examples/packages";
/// The test fixtures' package repository, as an Update names it.
pub const FIXTURES_REPO: &str = "tests/fixtures/packages";

/// The checkout: the first repository root every harness configures.
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the workspace exists")
}

/// The example package repository shipped with berth, on disk.
pub fn examples_repo() -> std::path::PathBuf {
    workspace_root().join(EXAMPLES_REPO)
}

/// The second repository root every harness configures: where tests make repositories of
/// their own ([`temp_repo`]).
pub fn temp_repo_root() -> std::path::PathBuf {
    let root = std::env::temp_dir().join("berth-test-repos");
    std::fs::create_dir_all(&root).expect("create the test repository root");
    root
}

/// A fresh, empty repository directory under [`temp_repo_root`], and the name an Update gives
/// it (its path relative to that root).
pub fn temp_repo() -> (tempfile::TempDir, String) {
    let dir = tempfile::Builder::new()
        .prefix("repo-")
        .tempdir_in(temp_repo_root())
        .expect("create a test repository");
    let name = dir
        .path()
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a UTF-8 name")
        .to_owned();
    (dir, name)
}

/// A fresh directory hooks may write into (a test's side channel: pid files, gates). Hooks
/// run as their package's own uid when the tests run as root (berth's default), so it is
/// writable by all; it is under [`hook_side_root`], which every worker the harness starts
/// lets confined hooks write (`--hook-writable`, through `BERTH_HOOK_WRITABLE`).
pub fn hook_writable_dir() -> std::io::Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new()
        .prefix("hook-side-")
        .tempdir_in(hook_side_root())?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))?;
    Ok(dir)
}

/// `<temp>/berth-hook-side` (sticky, writable by all): where [`hook_writable_dir`]s are, and
/// the one directory outside their run directories that hooks of the harness's workers may
/// write under Landlock.
pub fn hook_side_root() -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let root = std::env::temp_dir().join("berth-hook-side");
    if std::fs::create_dir_all(&root).is_ok() {
        let _ = std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o1777));
    }
    root
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

/// A loopback address where connections are refused for as long as this lives: its port is
/// bound (so no other process of the test run can take it) but not listening. Closing a
/// listener to get a "free" port instead races with every other test binding ports.
pub struct RefusedPort {
    _socket: socket2::Socket,
    addr: std::net::SocketAddr,
}

impl RefusedPort {
    pub fn new() -> RefusedPort {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket =
            Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("a TCP socket");
        // No SO_REUSEADDR: on Linux a second bind then fails even for a socket that sets it.
        socket
            .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("bind 127.0.0.1:0");
        let addr = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("a bound IPv4 address");
        RefusedPort {
            _socket: socket,
            addr,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Default for RefusedPort {
    fn default() -> Self {
        RefusedPort::new()
    }
}

/// Waits until `check` answers `Some` (polling every `poll`), for at most `deadline`; the error
/// names `what` was waited for.
pub async fn until<T, F, Fut>(
    what: &str,
    deadline: std::time::Duration,
    poll: std::time::Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let started = std::time::Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if started.elapsed() > deadline {
            anyhow::bail!("{what}: not within {deadline:?}");
        }
        tokio::time::sleep(poll).await;
    }
}

/// Writes the app `name` 1.0.0 into the repository at `root`: its `package.yaml`, a
/// `Chart.yaml`, and `files` (paths inside the version's directory, e.g.
/// `templates/configmap.yaml`, `hooks/record.sh`); files under `hooks/` are made executable.
pub fn write_app(root: &std::path::Path, name: &str, files: &[(&str, &str)]) -> anyhow::Result<()> {
    write_app_version(root, name, "1.0.0", files)
}

/// [`write_app`] for another `version` of the app.
pub fn write_app_version(
    root: &std::path::Path,
    name: &str,
    version: &str,
    files: &[(&str, &str)],
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = root.join(name).join(version);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("package.yaml"),
        format!("apiVersion: berth.io/v1\ntype: Application\nname: {name}\nversion: {version}\n"),
    )?;
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
    )?;
    for (path, content) in files {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, content)?;
        if path.starts_with("hooks/") {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}
