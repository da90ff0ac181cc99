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
///
/// `span` must be made with `parent: None`. A span made inside a request's span is that span's
/// child in the subscriber's tree, which keeps the request's span open (unexported) as long as
/// the loop runs, so the request's trace loses a span; debug builds panic on such a span.
pub fn spawn_in<F>(span: tracing::Span, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    debug_assert!(
        !has_parent(&span),
        "spawn_in: the span {:?} has a parent; make it with `parent: None`",
        span.metadata().map(|m| m.name())
    );
    tokio::spawn(future.instrument(crate::untraced(span)))
}

/// Whether `span` has a parent in the subscriber's span tree (false when the subscriber does
/// not keep one).
fn has_parent(span: &tracing::Span) -> bool {
    use tracing_subscriber::registry::LookupSpan;
    let Some(id) = span.id() else {
        return false;
    };
    tracing::dispatcher::get_default(|dispatch| {
        dispatch
            .downcast_ref::<tracing_subscriber::Registry>()
            .and_then(|registry| registry.span_data(&id))
            .is_some_and(|data| tracing_subscriber::registry::SpanData::parent(&data).is_some())
    })
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
        let named = spawn_in(tracing::info_span!(parent: None, "loop"), async {
            tracing::Span::current()
                .metadata()
                .map(|m| m.name().to_owned())
        });
        assert_eq!(named.await.unwrap().as_deref(), Some("loop"));
    }

    /// Records the names of the spans the subscriber closes.
    #[derive(Clone, Default)]
    struct Closed(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl<S> tracing_subscriber::Layer<S> for Closed
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        fn on_close(&self, id: tracing::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
            if let Some(span) = ctx.span(&id) {
                self.0.lock().unwrap().push(span.name().to_owned());
            }
        }
    }

    #[tokio::test]
    async fn a_loop_started_by_a_request_does_not_hold_the_request_open() {
        use tracing_subscriber::layer::SubscriberExt;
        let closed = Closed::default();
        let _default =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(closed.clone()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let request = tracing::info_span!("request");
        let handle = request.in_scope(|| {
            spawn_in(tracing::info_span!(parent: None, "loop"), async {
                let _ = stopped.await;
            })
        });
        drop(request);
        // The request is over while its loop runs on: its span is closed (and so exported).
        assert_eq!(*closed.0.lock().unwrap(), ["request"]);
        stop.send(()).unwrap();
        handle.await.unwrap();
        assert_eq!(*closed.0.lock().unwrap(), ["request", "loop"]);
    }

    #[cfg(debug_assertions)]
    #[tokio::test]
    #[should_panic(expected = "make it with `parent: None`")]
    async fn a_loop_span_with_a_parent_is_refused() {
        use tracing_subscriber::layer::SubscriberExt;
        let _default = tracing::subscriber::set_default(
            tracing_subscriber::registry().with(Closed::default()),
        );
        let request = tracing::info_span!("request");
        let _entered = request.enter();
        spawn_in(tracing::info_span!("loop"), async {});
    }
}
