//! Finding the hooks of a package and asking each for its configuration.
//!
//! Walk rules (shell-operator/addon-operator/Deckhouse compatible):
//! - recursive under `hooks_dir`, sorted by relative path;
//! - hidden entries (`.*`), and directories named `lib` or `venv`, are skipped;
//! - only executable regular files count (symlinks to files are followed,
//!   symlinks to directories are not, which rules out cycles);
//! - an **extension-less compiled executable** (ELF or Mach-O magic), or a
//!   script whose first line says it is a batch hook (contains
//!   [`BATCH_MARKER`], e.g. `#!/usr/bin/env -S python3 # berth:batch-hook`),
//!   is first asked `hook list`; if it prints `Found N items`
//!   (1 ≤ N ≤ 9999) it is a module-sdk batch binary and `hook config`
//!   describes its hooks. Anything else is a shell hook and is asked
//!   `<hook> --config` only. Scripts are never run with `hook list` unless
//!   they say so: a shell hook that treats any argument as "run" would do its
//!   work during discovery.
//!
//! A missing `hooks_dir` means "no hooks". Any config error fails the whole
//! discovery with the hook's path: a package with a broken hook must not load.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::stream::{self, StreamExt, TryStreamExt};
use tokio_util::sync::CancellationToken;

use crate::config::{BatchConfig, ConfigError, HookConfig};
use crate::hook::{Hook, HookKind};
use crate::isolation::{Sandbox, sandbox};
use crate::process::{self, Ending, Finished, Invocation};
use crate::run::exit_code;

/// Config queries run at once. Each is a process start, often a Go binary
/// of tens of MB; more than a few at once only thrashes a small node.
const QUERY_CONCURRENCY: usize = 4;
/// Largest config output accepted (stdout of `--config` / `hook config`).
const MAX_CONFIG_OUTPUT: usize = 16 * 1024 * 1024;
/// Output tail kept for error messages.
const ERROR_TAIL: usize = 4 * 1024;

/// Why discovery failed. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("reading hooks directory {}: {source}", path.display())]
    Walk {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("hook {}: cannot start `{command}`: {source}", path.display())]
    Spawn {
        path: PathBuf,
        command: &'static str,
        source: std::io::Error,
    },
    #[error("hook {}: `{command}` exited with code {code}: {output_tail}", path.display())]
    Query {
        path: PathBuf,
        command: &'static str,
        code: i32,
        output_tail: String,
    },
    #[error("hook {}: `{command}` timed out after {after:?}", path.display())]
    Timeout {
        path: PathBuf,
        command: &'static str,
        after: Duration,
    },
    #[error("hook {}: `{command}` printed more than {MAX_CONFIG_OUTPUT} bytes", path.display())]
    TooLarge {
        path: PathBuf,
        command: &'static str,
    },
    #[error("hook {}: invalid config: {source}", path.display())]
    Config { path: PathBuf, source: ConfigError },
    #[error("hooks {} and {}: a package may have only one settings check", first.display(), second.display())]
    SecondSettingsCheck { first: PathBuf, second: PathBuf },
}

/// Everything discovery found in a hooks directory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Discovery {
    /// Hooks in path order; a batch binary contributes its hooks in index order,
    /// then its readiness hook.
    pub hooks: Vec<Hook>,
    /// The batch binary that answers `hook check` (see [`crate::check_settings`]).
    pub settings_check: Option<PathBuf>,
    /// What each executable answered, in path order: [`from_answers`] rebuilds this very
    /// discovery from them without running anything.
    pub answers: Vec<ConfigAnswer>,
}

/// One executable's answer to its config query: `--config` of a shell hook, `hook config` of
/// a batch binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigAnswer {
    /// The executable's path relative to the hooks directory (`/`-separated).
    pub path: String,
    /// A batch binary (it answered `hook list`), whose output is its `hook config`.
    pub batch: bool,
    /// What the query printed.
    pub output: String,
}

/// Finds the hooks under `hooks_dir`; see the module docs for the rules.
/// `timeout` bounds each config query. The queries run unconfined: where hooks run as their
/// principals, use [`discover_all`] with the package's sandbox.
pub async fn discover(hooks_dir: &Path, timeout: Duration) -> Result<Vec<Hook>, DiscoverError> {
    Ok(discover_all(hooks_dir, timeout, None).await?.hooks)
}

/// Like [`discover`], also reporting the settings-check binary; every config query runs in
/// `sandbox` (its principal's identity, limits and Landlock rules), in a directory of its own.
pub async fn discover_all(
    hooks_dir: &Path,
    timeout: Duration,
    sandbox: Option<&Sandbox>,
) -> Result<Discovery, DiscoverError> {
    let dir = hooks_dir.to_path_buf();
    let files = tokio::task::spawn_blocking(move || executables(&dir))
        .await
        .map_err(|e| DiscoverError::Walk {
            path: hooks_dir.to_path_buf(),
            source: std::io::Error::other(e),
        })??;
    let answers: Vec<ConfigAnswer> = stream::iter(
        files
            .into_iter()
            .map(|(rel, path)| ask(rel, path, timeout, sandbox)),
    )
    .buffered(QUERY_CONCURRENCY)
    .try_collect()
    .await?;
    assemble(hooks_dir, answers)
}

/// The discovery `answers` describe (as [`Discovery::answers`] recorded them where the hooks
/// were run), for the same package's files in `hooks_dir`: hooks are parsed from the recorded
/// outputs, and nothing is run. A path that leaves `hooks_dir`, or names no file there, is
/// refused: the answers are then not this directory's, and it must be discovered anew.
pub fn from_answers(
    hooks_dir: &Path,
    answers: Vec<ConfigAnswer>,
) -> Result<Discovery, DiscoverError> {
    for answer in &answers {
        let rel = Path::new(&answer.path);
        let inside = !answer.path.is_empty()
            && rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        let path = hooks_dir.join(rel);
        if !inside || !path.is_file() {
            return Err(DiscoverError::Walk {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "a recorded hook config names no executable of this hooks directory",
                ),
            });
        }
    }
    assemble(hooks_dir, answers)
}

/// The discovery made of `answers`, in their order.
fn assemble(hooks_dir: &Path, answers: Vec<ConfigAnswer>) -> Result<Discovery, DiscoverError> {
    let mut discovery = Discovery::default();
    for answer in &answers {
        let found = parse(hooks_dir, answer)?;
        if found.settings_check {
            if let Some(first) = discovery.settings_check.take() {
                return Err(DiscoverError::SecondSettingsCheck {
                    first,
                    second: found.path,
                });
            }
            discovery.settings_check = Some(found.path);
        }
        discovery.hooks.extend(found.hooks);
    }
    discovery.answers = answers;
    Ok(discovery)
}

/// The hooks one executable contributes.
struct Found {
    path: PathBuf,
    hooks: Vec<Hook>,
    settings_check: bool,
}

/// The first-line marker of a script that is a batch hook (answers `hook list`).
pub const BATCH_MARKER: &str = "berth:batch-hook";

/// Whether the file may be asked `hook list`: extension-less, and a compiled executable or a
/// script whose first line carries [`BATCH_MARKER`]. Reads at most the first 256 bytes.
fn may_be_batch(path: &Path) -> bool {
    use std::io::Read as _;
    if path.extension().is_some() {
        return false;
    }
    let mut head = [0u8; 256];
    let Ok(n) = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)) else {
        return false;
    };
    let head = &head[..n];
    const COMPILED: [&[u8]; 5] = [
        b"\x7fELF",
        &[0xfe, 0xed, 0xfa, 0xce],
        &[0xfe, 0xed, 0xfa, 0xcf],
        &[0xce, 0xfa, 0xed, 0xfe],
        &[0xcf, 0xfa, 0xed, 0xfe],
    ];
    if COMPILED.iter().any(|magic| head.starts_with(magic)) {
        return true;
    }
    let first_line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    first_line.starts_with(b"#!")
        && first_line
            .windows(BATCH_MARKER.len())
            .any(|w| w == BATCH_MARKER.as_bytes())
}

/// Asks the executable at `path` (`rel` under the hooks directory) for its config.
async fn ask(
    rel: String,
    path: PathBuf,
    timeout: Duration,
    sandbox: Option<&Sandbox>,
) -> Result<ConfigAnswer, DiscoverError> {
    let probe = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || may_be_batch(&path))
            .await
            .unwrap_or(false)
    };
    let batch = probe && is_batch(&path, timeout, sandbox).await?;
    let output = if batch {
        query(&path, &["hook", "config"], "hook config", timeout, sandbox).await?
    } else {
        query(&path, &["--config"], "--config", timeout, sandbox).await?
    };
    Ok(ConfigAnswer {
        path: rel,
        batch,
        output,
    })
}

/// The hooks one answer describes.
fn parse(hooks_dir: &Path, answer: &ConfigAnswer) -> Result<Found, DiscoverError> {
    let rel = &answer.path;
    let path = hooks_dir.join(rel);
    let path = std::path::absolute(&path).unwrap_or(path);
    let invalid = |source| DiscoverError::Config {
        path: path.clone(),
        source,
    };
    if !answer.batch {
        let config = HookConfig::parse(&answer.output).map_err(invalid)?;
        let hook = Hook {
            name: rel.clone(),
            path: path.clone(),
            kind: HookKind::Shell,
            config,
        };
        return Ok(Found {
            path,
            hooks: vec![hook],
            settings_check: false,
        });
    }
    let batch = BatchConfig::parse(&answer.output).map_err(invalid)?;
    let mut hooks: Vec<Hook> = batch
        .hooks
        .into_iter()
        .enumerate()
        .map(|(index, entry)| Hook {
            name: match entry.name {
                Some(name) => format!("{rel}:{name}:{index}"),
                None => format!("{rel}:{index}"),
            },
            path: path.clone(),
            kind: HookKind::Batch { index },
            config: entry.config,
        })
        .collect();
    if let Some(readiness) = batch.readiness {
        let name = format!("{rel}-readiness");
        hooks.push(Hook {
            name,
            path: path.clone(),
            kind: HookKind::BatchReadiness,
            config: readiness.config,
        });
    }
    Ok(Found {
        path,
        hooks,
        settings_check: batch.has_settings_check,
    })
}

/// Probes `hook list`. A failing or unrelated answer means "not a batch
/// hook" rather than an error: it is then treated as a shell hook.
async fn is_batch(
    path: &Path,
    timeout: Duration,
    sandbox: Option<&Sandbox>,
) -> Result<bool, DiscoverError> {
    let finished = spawn_query(path, &["hook", "list"], "hook list", timeout, sandbox).await?;
    if let Ending::TimedOut = finished.ending {
        return Err(DiscoverError::Timeout {
            path: path.to_path_buf(),
            command: "hook list",
            after: timeout,
        });
    }
    let exited_ok = matches!(finished.ending, Ending::Exited(status) if status.success());
    Ok(exited_ok && found_items(&finished.stdout).is_some_and(|n| (1..=9999).contains(&n)))
}

/// Extracts N from a `Found N items` line (module-sdk's `hook list` answer).
fn found_items(stdout: &str) -> Option<u32> {
    stdout.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("Found ")?;
        let (count, tail) = rest.split_once(' ')?;
        (tail == "items" || tail == "item")
            .then(|| count.parse().ok())
            .flatten()
    })
}

/// Runs a config query that must succeed, returning its stdout.
async fn query(
    path: &Path,
    args: &[&str],
    command: &'static str,
    timeout: Duration,
    sandbox: Option<&Sandbox>,
) -> Result<String, DiscoverError> {
    let finished = spawn_query(path, args, command, timeout, sandbox).await?;
    let path = path.to_path_buf();
    match finished.ending {
        Ending::Exited(status) if status.success() => {}
        Ending::Exited(status) => {
            return Err(DiscoverError::Query {
                path,
                command,
                code: exit_code(status),
                output_tail: finished.combined,
            });
        }
        Ending::TimedOut | Ending::Cancelled => {
            return Err(DiscoverError::Timeout {
                path,
                command,
                after: timeout,
            });
        }
    }
    if finished.stdout_truncated {
        return Err(DiscoverError::TooLarge { path, command });
    }
    Ok(finished.stdout)
}

async fn spawn_query(
    path: &Path,
    args: &[&str],
    command: &'static str,
    timeout: Duration,
    sandbox: Option<&Sandbox>,
) -> Result<Finished, DiscoverError> {
    let spawn_error = |source| DiscoverError::Spawn {
        path: path.to_path_buf(),
        command,
        source,
    };
    // A confined query gets a directory of its own (its TMPDIR, HOME and only writable
    // place); an unconfined one runs as it always did.
    let prepared = match sandbox {
        Some(sandbox) => {
            let sandbox = sandbox.clone();
            let prepared = tokio::task::spawn_blocking(move || {
                sandbox::prepare_run(Some(&sandbox), None, "berth-query-", |_| Ok(()))
            })
            .await
            .map_err(|e| spawn_error(std::io::Error::other(e)))?
            .map_err(spawn_error)?;
            Some(prepared)
        }
        None => None,
    };
    let (env, confinement, dir) = match prepared {
        Some(p) => (p.env, p.confinement, Some(p.dir)),
        None => (Vec::new(), None, None),
    };
    // Discovery has no caller-driven cancellation; the timeout bounds it.
    let never = CancellationToken::new();
    let hook = path.to_string_lossy();
    let finished = process::execute(Invocation {
        hook: &hook,
        program: path,
        args,
        cwd: path.parent().unwrap_or(Path::new("/")),
        env,
        timeout,
        cancel: &never,
        stream_limit: MAX_CONFIG_OUTPUT,
        combined_limit: ERROR_TAIL,
        confinement,
    })
    .await;
    if let Some(dir) = dir {
        dir.finish(&hook);
    }
    finished.map_err(spawn_error)
}

/// Executable files under `root`, as (relative path, absolute path), sorted.
fn executables(root: &Path) -> Result<Vec<(String, PathBuf)>, DiscoverError> {
    let mut found = Vec::new();
    if !root.exists() {
        return Ok(found);
    }
    walk(root, root, &mut found)?;
    found.sort();
    Ok(found)
}

fn walk(root: &Path, dir: &Path, found: &mut Vec<(String, PathBuf)>) -> Result<(), DiscoverError> {
    let walk_err = |source| DiscoverError::Walk {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(walk_err)? {
        let entry = entry.map_err(walk_err)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        let file_type = entry.file_type().map_err(walk_err)?;
        if file_type.is_dir() {
            if name != "lib" && name != "venv" {
                walk(root, &path, found)?;
            }
            continue;
        }
        // Follows a symlink to its target; a dangling link is skipped.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if process::is_executable_file(&meta) {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let abs = std::path::absolute(&path).unwrap_or(path);
            found.push((rel, abs));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_compiled_executables_and_marked_scripts_are_probed() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, content: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, content).unwrap();
            p
        };
        assert!(may_be_batch(&write("elf", b"\x7fELF\x02\x01\x01rest")));
        assert!(may_be_batch(&write(
            "marked",
            b"#!/usr/bin/env -S sh # berth:batch-hook\necho\n"
        )));
        assert!(!may_be_batch(&write("shell", b"#!/bin/sh\necho run\n")));
        assert!(!may_be_batch(&write(
            "later",
            b"#!/bin/sh\n# berth:batch-hook\n"
        )));
        assert!(
            !may_be_batch(&write("elf.sh", b"\x7fELF")),
            "has an extension"
        );
        assert!(!may_be_batch(&dir.path().join("missing")));
    }

    #[test]
    fn found_items_line() {
        assert_eq!(found_items("Found 3 items\n"), Some(3));
        assert_eq!(found_items("some log\nFound 12 items"), Some(12));
        assert_eq!(found_items("Found many items"), None);
        assert_eq!(found_items("usage: hook [--config]"), None);
    }
}
