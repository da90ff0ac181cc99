//! Spawning that keeps the span: work handed to another task or to the blocking pool logs and
//! traces under the span it was started from (or the one named for it), not as orphans.

use std::future::Future;

use tokio::task::JoinHandle;
use tracing::Instrument;

/// Spawns `future` inside `span`: a background loop's span names it in every log line.
///
/// The loop itself is not traced: its span gets a parent that is not sampled, so neither it
/// nor the calls it makes while idle (leases, heartbeats, polls; other services continue the
/// unsampled context they are sent) become traces. Work a loop does for a request continues
/// that request's trace (a task's stored `traceparent`, see [`crate::with_traceparent`]), and
/// work it starts on its own (a watch event, a schedule firing, a drift repair) opens a root
/// span of its own (`parent: None`).
pub fn spawn_in<F>(span: tracing::Span, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future.instrument(crate::untraced(span)))
}

/// Spawns `future` inside the caller's current span.
pub fn spawn_here<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future.in_current_span())
}

/// Runs `f` on the blocking pool inside the caller's current span.
pub fn spawn_blocking_here<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || span.in_scope(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spawned_work_runs_in_the_callers_span() {
        // Global: the blocking pool's threads must see the same subscriber (a test process may
        // have installed one already; any registry-based one keeps span ids).
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
        let span = tracing::info_span!("outer");
        let id = span.id();
        let (here, blocking) = async {
            let here = spawn_here(async { tracing::Span::current().id() });
            let blocking = spawn_blocking_here(|| tracing::Span::current().id());
            (here.await.unwrap(), blocking.await.unwrap())
        }
        .instrument(span.clone())
        .await;
        assert!(id.is_some());
        assert_eq!(here, id);
        assert_eq!(blocking, id);
        let named = spawn_in(tracing::info_span!("loop"), async {
            tracing::Span::current()
                .metadata()
                .map(|m| m.name().to_owned())
        });
        assert_eq!(named.await.unwrap().as_deref(), Some("loop"));
    }
}
