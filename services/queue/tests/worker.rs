//! The worker runtime end to end: a real broker over gRPC, a worker, and a test handler.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::queue as pb;
use berth_queue::worker::{self, Handler, TaskError, WorkerConfig};
use support::{Db, TestBroker, eventually, fast_config, task};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

crate::on_both_backends!(
    worker_runs_queues_in_parallel_up_to_its_concurrency_and_each_queue_in_order,
    superseded_running_task_is_cancelled_within_a_second,
    failed_tasks_are_retried_and_permanent_failures_dropped,
    shutdown_lets_tasks_finish_then_cancels_them_after_the_grace_period,
    worker_reconnects_when_the_broker_comes_back,
    invalid_config_is_refused,
    a_task_is_cancelled_when_its_lease_cannot_be_renewed,
    shutdown_aborts_a_task_that_ignores_cancellation,
);

/// What the test handler saw.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Started(String),
    Finished(String),
    Cancelled(String),
}

/// Test handler. By task kind: `Work` takes `hold` then succeeds; `Block` waits for its
/// cancellation; `Stubborn` ignores it; `Flaky` fails on its first attempt, recording its
/// progress, and succeeds on a retry that carries it; `Broken` fails permanently.
struct Recorder {
    hold: Duration,
    running: AtomicUsize,
    max_running: AtomicUsize,
    log: Mutex<Vec<Event>>,
    /// Capacity 64: far more than any test's events; a full channel would only drop the copy.
    events: mpsc::Sender<Event>,
}

impl Recorder {
    fn new(hold: Duration) -> (Arc<Self>, mpsc::Receiver<Event>) {
        let (events, rx) = mpsc::channel(64);
        let recorder = Recorder {
            hold,
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            log: Mutex::default(),
            events,
        };
        (Arc::new(recorder), rx)
    }

    fn record(&self, event: Event) {
        self.log.lock().expect("log lock").push(event.clone());
        let _ = self.events.try_send(event);
    }

    fn finished(&self) -> Vec<String> {
        let log = self.log.lock().expect("log lock");
        log.iter()
            .filter_map(|e| {
                if let Event::Finished(id) = e {
                    Some(id.clone())
                } else {
                    None
                }
            })
            .collect()
    }
}

impl Handler for Recorder {
    async fn handle(&self, task: pb::Task, cancel: CancellationToken) -> Result<(), TaskError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        self.record(Event::Started(task.id.clone()));
        let result = match task.kind.as_str() {
            "Block" => {
                tokio::select! {
                    () = cancel.cancelled() => {
                        self.record(Event::Cancelled(task.id.clone()));
                        Err(TaskError::retry("cancelled"))
                    }
                    () = tokio::time::sleep(Duration::from_secs(30)) => Err(TaskError::retry("never cancelled")),
                }
            }
            "Stubborn" => {
                // Ignores its cancellation token.
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(())
            }
            // Records how far it got; the retry must carry that as its payload.
            "Flaky" if task.attempts == 0 => {
                Err(TaskError::retry("flaky first attempt")
                    .with_progress(b"done: first step".to_vec()))
            }
            "Flaky" if task.payload != b"done: first step" => Err(TaskError::permanent(format!(
                "retried without its progress: {:?}",
                String::from_utf8_lossy(&task.payload)
            ))),
            "Broken" => Err(TaskError::permanent("cannot ever work")),
            _ => {
                tokio::time::sleep(self.hold).await;
                Ok(())
            }
        };
        if result.is_ok() {
            self.record(Event::Finished(task.id.clone()));
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

fn start_worker(
    b: &TestBroker,
    handler: Arc<Recorder>,
    config: WorkerConfig,
) -> (
    CancellationToken,
    JoinHandle<Result<(), worker::WorkerError>>,
) {
    let shutdown = CancellationToken::new();
    let run = worker::run(b.client.clone(), handler, config, shutdown.clone());
    (shutdown, tokio::spawn(run))
}

fn config(concurrency: usize) -> WorkerConfig {
    WorkerConfig {
        id: "test-worker".into(),
        concurrency,
        lease_wait: Duration::from_millis(500),
        ..Default::default()
    }
}

async fn wait_until_idle(b: &TestBroker) {
    eventually(Duration::from_secs(10), "all queues empty", || async {
        b.dump().await.is_empty().then_some(())
    })
    .await;
}

async fn next_event(events: &mut mpsc::Receiver<Event>, limit: Duration) -> Event {
    tokio::time::timeout(limit, events.recv())
        .await
        .expect("handler event in time")
        .expect("handler alive")
}

async fn worker_runs_queues_in_parallel_up_to_its_concurrency_and_each_queue_in_order(db: Db) {
    let b = TestBroker::start(&db.url(), fast_config()).await;
    let tasks = (0..4)
        .flat_map(|q| (1..=2).map(move |n| task(&format!("q{q}-{n}"), &format!("q{q}"), "p")))
        .collect();
    b.enqueue(tasks).await;
    let (handler, _events) = Recorder::new(Duration::from_millis(150));
    let (shutdown, worker) = start_worker(&b, handler.clone(), config(2));

    wait_until_idle(&b).await;
    shutdown.cancel();
    worker.await.expect("worker task").expect("worker result");

    assert_eq!(
        handler.max_running.load(Ordering::SeqCst),
        2,
        "two tasks at once, no more"
    );
    let finished = handler.finished();
    assert_eq!(finished.len(), 8, "{finished:?}");
    let position: HashMap<&str, usize> = finished
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    for q in 0..4 {
        assert!(
            position[format!("q{q}-1").as_str()] < position[format!("q{q}-2").as_str()],
            "queue q{q} out of order: {finished:?}"
        );
    }
    b.stop().await;
}

async fn superseded_running_task_is_cancelled_within_a_second(db: Db) {
    let b = TestBroker::start(&db.url(), fast_config()).await;
    b.enqueue(vec![pb::Task {
        kind: "Block".into(),
        ..task("old", "p", "p")
    }])
    .await;
    let (handler, mut events) = Recorder::new(Duration::ZERO);
    let (shutdown, worker) = start_worker(&b, handler, config(1));
    assert_eq!(
        next_event(&mut events, Duration::from_secs(5)).await,
        Event::Started("old".into())
    );

    let superseded_at = Instant::now();
    let answer = b.supersede("p", 2).await;
    assert_eq!((answer.dropped, answer.cancelled), (0, 1));
    assert_eq!(
        next_event(&mut events, Duration::from_secs(5)).await,
        Event::Cancelled("old".into())
    );
    let took = superseded_at.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "cancellation reached the task after {took:?}"
    );

    wait_until_idle(&b).await;
    let history = b.service.store().history(1).await.expect("history");
    assert_eq!(
        (history[0].id.as_str(), history[0].outcome.as_str()),
        ("old", "cancelled"),
        "removed, not retried"
    );
    shutdown.cancel();
    worker.await.expect("worker task").expect("worker result");
    b.stop().await;
}

async fn failed_tasks_are_retried_and_permanent_failures_dropped(db: Db) {
    let b = TestBroker::start(&db.url(), fast_config()).await;
    b.enqueue(vec![pb::Task {
        kind: "Flaky".into(),
        ..task("flaky", "q1", "p")
    }])
    .await;
    b.enqueue(vec![pb::Task {
        kind: "Broken".into(),
        ..task("broken", "q2", "p")
    }])
    .await;
    let (handler, _events) = Recorder::new(Duration::ZERO);
    let (shutdown, worker) = start_worker(&b, handler.clone(), config(2));
    wait_until_idle(&b).await;

    let history = b.service.store().history(10).await.expect("history");
    let outcome = |id: &str| {
        history
            .iter()
            .find(|h| h.id == id)
            .map(|h| (h.outcome.clone(), h.attempts, h.error.clone()))
    };
    assert_eq!(
        outcome("flaky"),
        Some(("done".into(), 1, String::new())),
        "succeeded on the second attempt, which carried the progress the first recorded"
    );
    assert_eq!(
        outcome("broken"),
        Some(("dropped".into(), 1, "cannot ever work".into()))
    );
    assert_eq!(handler.finished(), ["flaky"]);
    shutdown.cancel();
    worker.await.expect("worker task").expect("worker result");
    b.stop().await;
}

async fn shutdown_lets_tasks_finish_then_cancels_them_after_the_grace_period(db: Db) {
    let b = TestBroker::start(&db.url(), fast_config()).await;
    b.enqueue(vec![pb::Task {
        kind: "Block".into(),
        ..task("stuck", "q", "p")
    }])
    .await;
    let (handler, mut events) = Recorder::new(Duration::ZERO);
    let grace = Duration::from_millis(300);
    let (shutdown, worker) = start_worker(
        &b,
        handler,
        WorkerConfig {
            shutdown_grace: grace,
            ..config(1)
        },
    );
    assert_eq!(
        next_event(&mut events, Duration::from_secs(5)).await,
        Event::Started("stuck".into())
    );

    let stopping = Instant::now();
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), worker)
        .await
        .expect("worker stops")
        .expect("worker task")
        .expect("worker result");
    let took = stopping.elapsed();
    assert!(
        took >= grace,
        "cancelled before the grace period ended ({took:?})"
    );
    assert_eq!(
        next_event(&mut events, Duration::from_secs(1)).await,
        Event::Cancelled("stuck".into())
    );

    let dump = b.dump().await;
    assert_eq!(
        dump.len(),
        1,
        "the interrupted task stays queued for another worker"
    );
    assert_eq!(
        (
            dump[0].head_attempts,
            dump[0].head_last_error.as_str(),
            dump[0].lease_holder.as_str()
        ),
        (1, "cancelled", "")
    );
    b.stop().await;
}

async fn worker_reconnects_when_the_broker_comes_back(db: Db) {
    let url = db.url();
    let b = TestBroker::start(&url, fast_config()).await;
    let addr = b.addr;
    let (handler, mut events) = Recorder::new(Duration::ZERO);
    let (shutdown, worker) = start_worker(&b, handler.clone(), config(1));
    b.enqueue(vec![task("before", "q", "p")]).await;
    assert_eq!(
        next_event(&mut events, Duration::from_secs(5)).await,
        Event::Started("before".into())
    );
    wait_until_idle(&b).await;
    // Stopping the broker drops the worker's connection: the worker must find the broker
    // again on the same address.
    b.stop().await;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("rebind the broker address");
    let b = TestBroker::start_on(listener, &url, fast_config()).await;
    b.enqueue(vec![task("after", "q", "p")]).await;
    wait_until_idle(&b).await;
    assert_eq!(handler.finished(), ["before", "after"]);
    shutdown.cancel();
    worker.await.expect("worker task").expect("worker result");
    b.stop().await;
}

async fn invalid_config_is_refused(db: Db) {
    let b = TestBroker::start(&db.url(), fast_config()).await;
    let (handler, _events) = Recorder::new(Duration::ZERO);
    let err = worker::run(
        b.client.clone(),
        handler,
        config(0),
        CancellationToken::new(),
    )
    .await
    .expect_err("concurrency 0");
    assert!(err.to_string().contains("concurrency"), "{err}");
    b.stop().await;
}

async fn a_task_is_cancelled_when_its_lease_cannot_be_renewed(db: Db) {
    let config = berth_queue::broker::BrokerConfig {
        lease_ttl: Duration::from_secs(1),
        ..fast_config()
    };
    let b = TestBroker::start(&db.url(), config).await;
    b.enqueue(vec![pb::Task {
        kind: "Block".into(),
        ..task("orphan", "q", "p")
    }])
    .await;
    let (handler, mut events) = Recorder::new(Duration::ZERO);
    let (shutdown, worker) = start_worker(&b, handler, config_with_timeout(1));
    assert_eq!(
        next_event(&mut events, Duration::from_secs(5)).await,
        Event::Started("orphan".into())
    );

    // With the broker gone, the lease runs out and another worker may get the task: this copy
    // must stop by itself.
    let lost_at = Instant::now();
    b.stop().await;
    assert_eq!(
        next_event(&mut events, Duration::from_secs(5)).await,
        Event::Cancelled("orphan".into())
    );
    assert!(
        lost_at.elapsed() < Duration::from_secs(3),
        "cancelled {:?} after the broker went away",
        lost_at.elapsed()
    );
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), worker)
        .await
        .expect("worker stops")
        .expect("worker task")
        .expect("worker result");
}

/// Like [`config`], with short call timeouts so an unreachable broker is noticed quickly.
fn config_with_timeout(concurrency: usize) -> WorkerConfig {
    WorkerConfig {
        call_timeout: Duration::from_millis(500),
        ..config(concurrency)
    }
}

async fn shutdown_aborts_a_task_that_ignores_cancellation(db: Db) {
    let b = TestBroker::start(&db.url(), fast_config()).await;
    b.enqueue(vec![pb::Task {
        kind: "Stubborn".into(),
        ..task("stubborn", "q", "p")
    }])
    .await;
    let (handler, mut events) = Recorder::new(Duration::ZERO);
    let grace = Duration::from_millis(200);
    let (shutdown, worker) = start_worker(
        &b,
        handler,
        WorkerConfig {
            shutdown_grace: grace,
            ..config(1)
        },
    );
    assert_eq!(
        next_event(&mut events, Duration::from_secs(5)).await,
        Event::Started("stubborn".into())
    );
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), worker)
        .await
        .expect("worker stops although its task never returns")
        .expect("worker task")
        .expect("worker result");
    assert_eq!(b.dump().await[0].head_id, "stubborn", "left for redelivery");
    b.stop().await;
}
