//! Persistence in the data directory: a snapshot plus an append-only log.
//!
//! Every committed write appends one JSON line to `objects.log` (flushed to the OS before
//! the request returns, not fsynced: a dev cluster trades durability across power loss
//! for speed). At start the snapshot is loaded and the log replayed; the result is
//! written as a fresh snapshot and the log truncated. A clean shutdown compacts the same
//! way. Lines are appended while the store lock is held, so log order is commit order.
//!
//! A lock file (`devcluster.lock`, holding the owner's pid) keeps two dev clusters from
//! writing the same directory.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

const SNAPSHOT: &str = "objects.json";
const LOG: &str = "objects.log";
const LOCK: &str = "devcluster.lock";

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("creating data directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path} line {line}: {source}")]
    Parse {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "data directory {path} is in use by another dev cluster (pid {pid}); remove {path}/devcluster.lock if that process is gone"
    )]
    Locked { path: PathBuf, pid: String },
}

/// One stored object, addressed by group/resource.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredObject {
    pub group: String,
    pub resource: String,
    pub object: Value,
}

/// One log line: a put (object present) or a delete (object absent).
#[derive(Debug, Serialize, Deserialize)]
pub struct LogRecord {
    pub rv: u64,
    pub group: String,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub object: Option<Value>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Snapshot {
    resource_version: u64,
    objects: Vec<StoredObject>,
}

/// What was on disk.
#[derive(Debug, Default)]
pub struct Loaded {
    pub resource_version: u64,
    pub objects: Vec<StoredObject>,
}

/// The open log of a data directory.
pub struct Persistence {
    dir: PathBuf,
    log: File,
}

impl Persistence {
    /// Takes the directory lock, loads snapshot + log, compacts, and opens the log for appends.
    pub fn open(dir: &Path) -> Result<(Persistence, Loaded), PersistError> {
        crate::private::create_private_dir(dir).map_err(|source| PersistError::CreateDir {
            path: dir.into(),
            source,
        })?;
        take_lock(dir)?;
        let loaded = load(dir)?;
        write_snapshot(dir, loaded.resource_version, &loaded.objects)?;
        let log_path = dir.join(LOG);
        let log = crate::private::open_private(&log_path, true).map_err(|source| {
            PersistError::Write {
                path: log_path,
                source,
            }
        })?;
        Ok((
            Persistence {
                dir: dir.into(),
                log,
            },
            loaded,
        ))
    }

    pub fn append(&mut self, record: &LogRecord) -> Result<(), PersistError> {
        let mut line = serde_json::to_vec(record).map_err(|e| PersistError::Write {
            path: self.dir.join(LOG),
            source: std::io::Error::other(e),
        })?;
        line.push(b'\n');
        self.log
            .write_all(&line)
            .and_then(|_| self.log.flush())
            .map_err(|source| PersistError::Write {
                path: self.dir.join(LOG),
                source,
            })
    }

    /// Writes a snapshot of the current state, truncates the log and releases the lock.
    pub fn close(
        self,
        resource_version: u64,
        objects: &[StoredObject],
    ) -> Result<(), PersistError> {
        write_snapshot(&self.dir, resource_version, objects)?;
        let log_path = self.dir.join(LOG);
        crate::private::open_private(&log_path, true).map_err(|source| PersistError::Write {
            path: log_path,
            source,
        })?;
        let _ = fs::remove_file(self.dir.join(LOCK));
        Ok(())
    }
}

fn take_lock(dir: &Path) -> Result<(), PersistError> {
    let path = dir.join(LOCK);
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => f
            .write_all(std::process::id().to_string().as_bytes())
            .map_err(|source| PersistError::Write { path, source }),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let pid = fs::read_to_string(&path)
                .unwrap_or_default()
                .trim()
                .to_string();
            if pid_alive(&pid) {
                return Err(PersistError::Locked {
                    path: dir.into(),
                    pid,
                });
            }
            // A stale lock from a process that died without shutdown: take it over.
            crate::private::write_private(&path, std::process::id().to_string().as_bytes())
                .map_err(|source| PersistError::Write { path, source })
        }
        Err(source) => Err(PersistError::Write { path, source }),
    }
}

/// Whether a pid names a running process (Linux `/proc`); an unreadable pid counts as dead.
fn pid_alive(pid: &str) -> bool {
    !pid.is_empty() && pid.parse::<u32>().is_ok() && Path::new("/proc").join(pid).exists()
}

fn load(dir: &Path) -> Result<Loaded, PersistError> {
    let snap_path = dir.join(SNAPSHOT);
    let snapshot: Snapshot = match fs::read(&snap_path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| PersistError::Parse {
            path: snap_path.clone(),
            line: 1,
            source,
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Snapshot::default(),
        Err(source) => {
            return Err(PersistError::Read {
                path: snap_path,
                source,
            });
        }
    };
    let mut objects: std::collections::BTreeMap<(String, String, String, String), Value> = snapshot
        .objects
        .into_iter()
        .map(|o| {
            (
                (
                    o.group,
                    o.resource,
                    meta(&o.object, "namespace"),
                    meta(&o.object, "name"),
                ),
                o.object,
            )
        })
        .collect();
    let mut rv = snapshot.resource_version;
    let log_path = dir.join(LOG);
    match File::open(&log_path) {
        Ok(f) => {
            for (i, line) in BufReader::new(f).lines().enumerate() {
                let line = line.map_err(|source| PersistError::Read {
                    path: log_path.clone(),
                    source,
                })?;
                if line.trim().is_empty() {
                    continue;
                }
                let rec: LogRecord = match serde_json::from_str(&line) {
                    Ok(r) => r,
                    // A torn last line from a crash mid-append: everything before it is intact.
                    Err(_) if is_last_line(&log_path, i) => break,
                    Err(source) => {
                        return Err(PersistError::Parse {
                            path: log_path,
                            line: i + 1,
                            source,
                        });
                    }
                };
                rv = rv.max(rec.rv);
                let key = (rec.group, rec.resource, rec.namespace, rec.name);
                match rec.object {
                    Some(o) => objects.insert(key, o),
                    None => objects.remove(&key),
                };
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(PersistError::Read {
                path: log_path,
                source,
            });
        }
    }
    let objects = objects
        .into_iter()
        .map(|((group, resource, _, _), object)| StoredObject {
            group,
            resource,
            object,
        })
        .collect();
    Ok(Loaded {
        resource_version: rv,
        objects,
    })
}

fn is_last_line(path: &Path, index: usize) -> bool {
    File::open(path)
        .map(|f| BufReader::new(f).lines().count() == index + 1)
        .unwrap_or(false)
}

fn meta(object: &Value, field: &str) -> String {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Writes the snapshot to a temporary file and renames it, so a crash never leaves a
/// half-written snapshot.
fn write_snapshot(
    dir: &Path,
    resource_version: u64,
    objects: &[StoredObject],
) -> Result<(), PersistError> {
    let path = dir.join(SNAPSHOT);
    let tmp = dir.join(format!("{SNAPSHOT}.tmp"));
    let snapshot = Snapshot {
        resource_version,
        objects: objects.to_vec(),
    };
    let bytes = serde_json::to_vec(&snapshot).map_err(|e| PersistError::Write {
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    crate::private::write_private(&tmp, &bytes).map_err(|source| PersistError::Write {
        path: tmp.clone(),
        source,
    })?;
    fs::rename(&tmp, &path).map_err(|source| PersistError::Write { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(rv: u64, name: &str, object: Option<Value>) -> LogRecord {
        LogRecord {
            rv,
            group: String::new(),
            resource: "configmaps".into(),
            namespace: "ns".into(),
            name: name.into(),
            object,
        }
    }

    #[test]
    fn log_replay_survives_a_crash_and_compacts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut p, loaded) = Persistence::open(dir.path()).expect("open");
        assert_eq!(loaded.objects.len(), 0);
        let obj = |n: &str| json!({ "metadata": { "name": n, "namespace": "ns" } });
        p.append(&record(1, "a", Some(obj("a")))).expect("append");
        p.append(&record(2, "b", Some(obj("b")))).expect("append");
        p.append(&record(3, "a", None)).expect("append");
        drop(p); // crash: no close, lock file left behind by a process that is... still us
        fs::remove_file(dir.path().join(LOCK))
            .expect("simulate the crashed process's lock going stale");
        let (p, loaded) = Persistence::open(dir.path()).expect("reopen");
        assert_eq!(loaded.resource_version, 3);
        let names: Vec<String> = loaded
            .objects
            .iter()
            .map(|o| meta(&o.object, "name"))
            .collect();
        assert_eq!(names, vec!["b".to_string()]);
        assert!(matches!(
            Persistence::open(dir.path()),
            Err(PersistError::Locked { .. })
        ));
        p.close(3, &loaded.objects).expect("close");
    }
}
