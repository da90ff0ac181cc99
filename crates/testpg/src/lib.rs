//! A throwaway PostgreSQL server for tests: `initdb` into a temp dir, `postgres` on a free
//! loopback port, stopped and deleted on drop.
//!
//! Binaries come from `$BERTH_TEST_PG_BIN` (default `/usr/lib/postgresql/15/bin`). PostgreSQL
//! refuses to run as root, so under root the server runs as the `postgres` user via `setpriv`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sqlx::Connection;
use tokio::process::{Child, Command};
use tokio::time::Instant;

const DEFAULT_BIN: &str = "/usr/lib/postgresql/15/bin";
/// How long a fresh server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at finding a port nobody else grabbed between our probe and the server's bind.
const PORT_ATTEMPTS: usize = 5;
/// How long a stopping server may take to exit before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A running server; the data directory and the process go away on drop.
pub struct PgServer {
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl PgServer {
    /// Initialises a cluster and starts a server on a free port; panics with the server's
    /// output when it cannot.
    pub async fn start() -> PgServer {
        PgServer::start_with(&[]).await
    }

    /// [`PgServer::start`] with extra server settings (`-c name=value`), e.g. a benchmark's
    /// `shared_preload_libraries=pg_stat_statements`.
    pub async fn start_with(settings: &[(&str, &str)]) -> PgServer {
        let bin = PathBuf::from(
            std::env::var("BERTH_TEST_PG_BIN").unwrap_or_else(|_| DEFAULT_BIN.to_owned()),
        );
        let dir = tempfile::tempdir().expect("temp dir for PostgreSQL");
        let run_as = server_user();
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("hand the temp dir to the postgres user");
        }
        let data = dir.path().join("data");
        initdb(&bin, &data, run_as.is_some()).await;
        let mut last_log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let log = dir.path().join(format!("postgres-{port}.log"));
            let mut child = spawn_postgres(&bin, &data, port, &log, run_as.is_some(), settings);
            if wait_ready(port, &mut child).await {
                return PgServer { port, child, dir };
            }
            stop(&mut child, &data);
            last_log = std::fs::read_to_string(&log).unwrap_or_default();
        }
        panic!("PostgreSQL did not start after {PORT_ATTEMPTS} attempts; last log:\n{last_log}");
    }

    /// The URL of the default database.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// The URL of database `name` on this server.
    pub fn url_of(&self, name: &str) -> String {
        format!("postgres://berth@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates an empty database `name` (letters, digits and `_`) and returns its URL: one
    /// server holds the databases of several services, as a deployment's would.
    pub async fn create_database(&self, name: &str) -> String {
        assert!(
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "database name {name:?}: letters, digits and _ only"
        );
        let mut conn = sqlx::PgConnection::connect(&self.url())
            .await
            .expect("connect to the test server");
        // A name cannot be bound; it was checked above.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create the database");
        let _ = conn.close().await;
        self.url_of(name)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGQUIT is PostgreSQL's immediate shutdown: the postmaster stops its backends, then
        // removes its System V shared memory segment as it exits. It must be waited for: the
        // child's `kill_on_drop` SIGKILLs it right after this, and a postmaster killed before
        // it exits leaves its segment behind for good. A machine holds at most `kernel.shmmni`
        // (4096) of them; once they are used up, every initdb fails ("could not create shared
        // memory segment: No space left on device").
        stop(&mut self.child, &self.dir.path().join("data"));
    }
}

/// Stops the postmaster `child` of cluster `data` and waits for it to exit.
fn stop(child: &mut Child, data: &Path) {
    let Some(pid) = child.id() else { return };
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGQUIT);
    let deadline = std::time::Instant::now() + STOP_TIMEOUT;
    while std::time::Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        // Called from `Drop`, which cannot await: a short blocking poll while the server exits.
        #[allow(clippy::disallowed_methods)]
        std::thread::sleep(Duration::from_millis(10));
    }
    // Still running: kill it and remove the segment it named in postmaster.pid.
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    if let Some(shmid) = segment_of(data) {
        let _ = std::process::Command::new("ipcrm")
            .args(["-m", &shmid])
            .status();
    }
}

/// The System V shared memory id a running postmaster wrote on the last line of its
/// `postmaster.pid` ("key id").
fn segment_of(data: &Path) -> Option<String> {
    let pidfile = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let line = pidfile.lines().nth(6)?;
    let id = line.split_whitespace().nth(1)?;
    id.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| id.to_owned())
}

/// (uid, gid) of the `postgres` user when we run as root, else `None`.
fn server_user() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let out = std::process::Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id(&["-u"]) != Some(0) {
        return None;
    }
    let user =
        |flag| id(&[flag, "postgres"]).expect("running the tests as root needs a `postgres` user");
    Some((user("-u"), user("-g")))
}

fn command(bin: &Path, program: &str, as_postgres: bool) -> Command {
    let program = bin.join(program);
    if as_postgres {
        // setpriv execs the program (runuser would stay in between as the parent), so the
        // child's pid is the postmaster's and signals reach it directly.
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

async fn initdb(bin: &Path, data: &Path, as_postgres: bool) {
    let out = command(bin, "initdb", as_postgres)
        .arg("-D")
        .arg(data)
        .args([
            "-U",
            "berth",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ])
        .output()
        .await
        .expect("run initdb (is PostgreSQL installed? set BERTH_TEST_PG_BIN)");
    assert!(
        out.status.success(),
        "initdb failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe port");
    probe.local_addr().expect("probe address").port()
}

fn spawn_postgres(
    bin: &Path,
    data: &Path,
    port: u16,
    log: &Path,
    as_postgres: bool,
    settings: &[(&str, &str)],
) -> Child {
    let log_file = std::fs::File::create(log).expect("create the server log");
    let err_file = log_file.try_clone().expect("clone the log handle");
    command(bin, "postgres", as_postgres)
        .arg("-D")
        .arg(data)
        .args(["-p", &port.to_string(), "-h", "127.0.0.1"])
        // TCP only, no durability (throwaway data), small memory: many servers run at once.
        .args([
            "-c",
            "unix_socket_directories=",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
        ])
        .args([
            "-c",
            "full_page_writes=off",
            "-c",
            "shared_buffers=16MB",
            "-c",
            "max_connections=50",
        ])
        .args(
            settings
                .iter()
                .flat_map(|(name, value)| ["-c".to_owned(), format!("{name}={value}")]),
        )
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(err_file))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn postgres")
}

/// Waits until the server accepts a connection; `false` when it exited first or timed out.
async fn wait_ready(port: u16, child: &mut Child) -> bool {
    let url = format!("postgres://berth@127.0.0.1:{port}/postgres");
    let deadline = Instant::now() + READY_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_exited)) = child.try_wait() {
            return false;
        }
        if let Ok(Ok(conn)) =
            tokio::time::timeout(Duration::from_secs(2), sqlx::PgConnection::connect(&url)).await
        {
            let _ = conn.close().await;
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the kernel lists System V shared memory segment `shmid` (`ipcs` exits 0 either
    /// way, so its table is read directly).
    fn segment_exists(shmid: &str) -> bool {
        let table = std::fs::read_to_string("/proc/sysvipc/shm").expect("read /proc/sysvipc/shm");
        table
            .lines()
            .skip(1)
            .any(|line| line.split_whitespace().nth(1) == Some(shmid))
    }

    /// A dropped server leaves no shared memory segment behind: leaked ones pile up until no
    /// PostgreSQL on the machine can start.
    #[tokio::test]
    async fn a_dropped_server_removes_its_shared_memory() {
        let server = PgServer::start().await;
        let shmid =
            segment_of(&server.dir.path().join("data")).expect("postmaster.pid names its segment");
        assert!(
            segment_exists(&shmid),
            "segment {shmid} of the running server"
        );
        let mut conn = sqlx::PgConnection::connect(&server.url())
            .await
            .expect("connect");
        sqlx::query("SELECT 1")
            .execute(&mut conn)
            .await
            .expect("query");
        // Dropped with a client still connected, as a failing test leaves it.
        drop(server);
        assert!(
            !segment_exists(&shmid),
            "segment {shmid} left behind after the drop"
        );
        drop(conn);
    }
}
