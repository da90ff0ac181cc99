//! A real OCI registry for journeys: Debian's `docker-registry` (the reference distribution
//! registry) on a loopback port of its own, as `crates/package/tests/oci.rs` starts it. Without
//! the binary, [`Registry::start`] fails under `CI=true` (CI installs it) and otherwise prints a
//! loud skip notice and returns `None`.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const REGISTRY_BIN: &str = "docker-registry";

/// A registry process on 127.0.0.1, killed when dropped.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry_binary() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(REGISTRY_BIN))
            .find(|p| p.is_file())
    })
}

impl Registry {
    /// Starts an anonymous registry, or `None` (skip) when the binary is missing outside CI.
    pub fn start() -> anyhow::Result<Option<Registry>> {
        Registry::start_with_users(&[])
    }

    /// Starts a registry; `users` (user, password) turn htpasswd authentication on.
    pub fn start_with_users(users: &[(&str, &str)]) -> anyhow::Result<Option<Registry>> {
        let Some(binary) = registry_binary() else {
            anyhow::ensure!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "no {REGISTRY_BIN} on PATH; CI must run the OCI repository tests"
            );
            eprintln!(
                "\n!!!!!!!! SKIPPED: no {REGISTRY_BIN} on PATH (apt-get install docker-registry) !!!!!!!!\n"
            );
            return Ok(None);
        };
        let dir = tempfile::tempdir()?;
        let mut auth = String::new();
        if !users.is_empty() {
            let htpasswd = dir.path().join("htpasswd");
            let mut lines = String::new();
            for (user, password) in users {
                lines.push_str(&format!("{user}:{}\n", bcrypt::hash(password, 5)?));
            }
            std::fs::write(&htpasswd, lines)?;
            auth = format!(
                "auth:\n  htpasswd:\n    realm: berth-test\n    path: {}\n",
                htpasswd.display()
            );
        }
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:0\n  secret: berth-test\n{auth}",
                dir.path().join("data").display()
            ),
        )?;
        let mut child = Command::new(binary)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        // It logs `listening on 127.0.0.1:PORT` once it accepts connections; the reader keeps
        // draining its log afterwards so it never blocks on a full pipe.
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent && let Some(at) = line.find("listening on ") {
                    let addr: String = line[at + "listening on ".len()..]
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '"')
                        .collect();
                    let _ = tx.send(addr);
                    sent = true;
                }
            }
        });
        let registry = |addr| Registry {
            child,
            addr,
            _dir: dir,
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => Ok(Some(registry(addr))),
            Err(_) => {
                drop(registry(String::new()));
                anyhow::bail!("docker-registry did not announce its address")
            }
        }
    }
}
