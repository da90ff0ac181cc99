//! Bounded capture of a child's stdout and stderr.
//!
//! Both pipes are read concurrently by their own task so a hook that fills
//! one pipe while we wait on the other cannot deadlock. Memory stays bounded
//! whatever the hook prints: each buffer keeps only its last `limit` bytes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest line forwarded to the log; longer lines are cut.
const MAX_LOG_LINE: usize = 4096;
/// Size of one read from a pipe.
const READ_CHUNK: usize = 8192;

/// The last `limit` bytes written, and whether anything was dropped before them.
#[derive(Debug)]
pub(crate) struct TailBuffer {
    bytes: VecDeque<u8>,
    limit: usize,
    truncated: bool,
}

impl TailBuffer {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            bytes: VecDeque::new(),
            limit,
            truncated: false,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        if self.bytes.len() > self.limit {
            let excess = self.bytes.len() - self.limit;
            self.bytes.drain(..excess);
            self.truncated = true;
        }
    }

    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes as text (invalid UTF-8 replaced, e.g. where the cut fell
    /// inside a multi-byte character).
    pub(crate) fn to_text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        String::from_utf8_lossy(&all).into_owned()
    }
}

/// Which pipe a reader drains; used in log fields.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Drains `pipe` into `own` (this stream only) and `combined` (both
/// streams interleaved as they arrive), logging complete lines at debug.
pub(crate) async fn drain(
    mut pipe: impl AsyncRead + Unpin,
    stream: Stream,
    hook: String,
    own: Arc<Mutex<TailBuffer>>,
    combined: Arc<Mutex<TailBuffer>>,
) {
    let mut chunk = vec![0u8; READ_CHUNK];
    let mut line = Vec::new();
    loop {
        let n = match pipe.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) => {
                tracing::warn!(hook.name = %hook, stream = stream.as_str(), %error, "reading hook output failed");
                break;
            }
        };
        let data = &chunk[..n];
        lock(&own).push(data);
        lock(&combined).push(data);
        log_lines(data, &mut line, stream, &hook);
    }
    if !line.is_empty() {
        emit(&line, stream, &hook);
    }
}

/// A poisoned lock only means another reader panicked mid-push; the bytes
/// are still a usable tail, so keep going rather than propagate the panic.
pub(crate) fn lock(buffer: &Mutex<TailBuffer>) -> std::sync::MutexGuard<'_, TailBuffer> {
    buffer
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn log_lines(data: &[u8], line: &mut Vec<u8>, stream: Stream, hook: &str) {
    for &byte in data {
        if byte == b'\n' {
            emit(line, stream, hook);
            line.clear();
        } else if line.len() < MAX_LOG_LINE {
            line.push(byte);
        }
    }
}

fn emit(line: &[u8], stream: Stream, hook: &str) {
    tracing::debug!(hook.name = %hook, stream = stream.as_str(), "{}", String::from_utf8_lossy(line));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_tail() {
        let mut t = TailBuffer::new(5);
        t.push(b"abc");
        assert!(!t.truncated());
        t.push(b"defg");
        assert_eq!(t.to_text(), "cdefg");
        assert!(t.truncated());
    }
}
