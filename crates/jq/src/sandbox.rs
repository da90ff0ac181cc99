//! The service's side of the jq evaluators: a small pool of evaluator processes
//! (`evaluator.rs`), each answering one request at a time over pipes.
//!
//! Why processes and not a thread: jaq has no step, depth or allocation budget, and a thread
//! cannot be stopped, nor its allocations bounded, from outside. A process can: its memory is
//! capped by `RLIMIT_DATA`, its recursion by its evaluation thread's fixed stack (an overflow
//! aborts the evaluator, not the service), and its time by killing it when a request is not
//! answered in time. A program that hits a limit costs one evaluator, which is replaced on the
//! next request; the service only sees an error naming the limit.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;

use super::JqLimits;
use super::evaluator::{ChildLimits, EVALUATOR_ARG, READY};

/// What went wrong with a request, besides the program's own error.
#[derive(Debug)]
pub enum Failure {
    /// The program hit a limit: which one, in words.
    Limit(String),
    /// The evaluator could not be started or talked to, or died for another reason.
    Evaluator(String),
}

/// A reply: the result's JSON text, or the program's error.
pub type Reply = Result<String, String>;

/// How long a new evaluator may take to start (exec, dynamic loading, its limits and thread).
/// Apart from the programs' time limit, which only counts evaluation: on a loaded machine a
/// start alone can take longer than a short limit, and the first program would be blamed.
const STARTUP: Duration = Duration::from_secs(20);

pub struct Sandbox {
    program: PathBuf,
    limits: JqLimits,
    idle: Mutex<Vec<Evaluator>>,
    slots: Semaphore,
}

struct Evaluator {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Option<ChildStderr>,
}

impl Sandbox {
    pub fn new(program: PathBuf, limits: JqLimits) -> Sandbox {
        Sandbox {
            program,
            slots: Semaphore::new(limits.evaluators.max(1)),
            limits,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Sends one request (`evaluator::request`) and waits for its reply.
    pub async fn call(&self, request: &[u8]) -> Result<Reply, Failure> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|e| Failure::Evaluator(e.to_string()))?;
        // A reused evaluator may have died while idle (killed from outside): then the request
        // is tried once more on a fresh one, so an innocent program is not blamed.
        for _ in 0..2 {
            let reused = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let was_reused = reused.is_some();
            let mut evaluator = match reused {
                Some(e) => e,
                None => self.spawn().await?,
            };
            let answered =
                tokio::time::timeout(self.limits.time, evaluator.round_trip(request, self.limits))
                    .await;
            match answered {
                Ok(Ok(reply)) => {
                    self.idle
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(evaluator);
                    return Ok(reply);
                }
                Ok(Err(io)) => match evaluator.died(self.limits, &io).await {
                    Failure::Evaluator(_) if was_reused => continue,
                    failure => return Err(failure),
                },
                Err(_) => {
                    evaluator.kill().await;
                    return Err(Failure::Limit(format!(
                        "time limit: it ran longer than {:?}",
                        self.limits.time
                    )));
                }
            }
        }
        Err(Failure::Evaluator(
            "the evaluator died twice on this request".into(),
        ))
    }

    async fn spawn(&self) -> Result<Evaluator, Failure> {
        let limits = ChildLimits {
            memory_bytes: self.limits.memory_bytes,
            stack_bytes: self.limits.stack_bytes,
            output_bytes: self.limits.output_bytes,
        };
        let mut child = Command::new(&self.program)
            .arg(EVALUATOR_ARG)
            .args(limits.to_args())
            // A program sees no environment (jq's `env`, `$ENV`): nothing of the service's.
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                Failure::Evaluator(format!(
                    "cannot start the jq evaluator {}: {e}",
                    self.program.display()
                ))
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Failure::Evaluator("the evaluator has no pipes".into()));
        };
        let mut evaluator = Evaluator {
            stderr: child.stderr.take(),
            child,
            stdin,
            stdout: BufReader::new(stdout),
        };
        match tokio::time::timeout(STARTUP, evaluator.read_frame(READY.len())).await {
            Ok(Ok(frame)) if frame == READY => Ok(evaluator),
            Ok(Ok(_)) => {
                evaluator.kill().await;
                Err(Failure::Evaluator(format!(
                    "{} did not start as a jq evaluator (its first reply was not the ready frame)",
                    self.program.display()
                )))
            }
            Ok(Err(io)) => Err(evaluator.died(self.limits, &io).await),
            Err(_) => {
                evaluator.kill().await;
                Err(Failure::Evaluator(format!(
                    "the jq evaluator did not start within {STARTUP:?}"
                )))
            }
        }
    }
}

impl Evaluator {
    async fn round_trip(&mut self, request: &[u8], limits: JqLimits) -> std::io::Result<Reply> {
        let len = u32::try_from(request.len()).map_err(std::io::Error::other)?;
        self.stdin.write_all(&len.to_be_bytes()).await?;
        self.stdin.write_all(request).await?;
        self.stdin.flush().await?;
        // The evaluator bounds its output; a longer frame means it is not a sane evaluator.
        let frame = self.read_frame(limits.output_bytes + 64 * 1024).await?;
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match frame.split_first() {
            Some((b'o', rest)) => Ok(Ok(text(rest))),
            Some((b'e', rest)) => Ok(Err(text(rest))),
            _ => Err(std::io::Error::other("a malformed reply")),
        }
    }

    /// One length-prefixed frame of at most `limit` bytes from the evaluator.
    async fn read_frame(&mut self, limit: usize) -> std::io::Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.stdout.read_exact(&mut len).await?;
        let len = u32::from_be_bytes(len) as usize;
        if len > limit {
            return Err(std::io::Error::other(format!(
                "a reply of {len} bytes exceeds the limit of {limit}"
            )));
        }
        let mut frame = vec![0u8; len];
        self.stdout.read_exact(&mut frame).await?;
        Ok(frame)
    }

    async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// The evaluator stopped answering (`io`): stops it, and names the limit it hit from what
    /// the Rust runtime wrote to its stderr as it aborted.
    async fn died(mut self, limits: JqLimits, io: &std::io::Error) -> Failure {
        let _ = self.child.start_kill();
        let status = self.child.wait().await;
        let mut stderr = String::new();
        if let Some(err) = self.stderr.take() {
            let _ = err.take(16 * 1024).read_to_string(&mut stderr).await;
        }
        const MIB: u64 = 1 << 20;
        if stderr.contains("has overflowed its stack") {
            Failure::Limit(format!(
                "depth limit: it recursed deeper than the evaluator's {} MiB stack allows",
                limits.stack_bytes as u64 / MIB
            ))
        } else if stderr.contains("memory allocation of") {
            Failure::Limit(format!(
                "memory limit: it needed more than {} MiB",
                limits.memory_bytes / MIB
            ))
        } else {
            let status = status.map(|s| s.to_string()).unwrap_or_default();
            let last = stderr.lines().last().unwrap_or_default();
            Failure::Evaluator(format!("the jq evaluator died ({io}; {status}) {last}"))
        }
    }
}
