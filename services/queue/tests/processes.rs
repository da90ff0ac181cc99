//! The queue as separate real processes: `queue-test-broker serve` brokers (`berth-queue serve`
//! built from this crate alone) and `queue-test-worker` workers (the real worker runtime with a
//! scripted handler), killed with SIGKILL mid-work.
//!
//! What "completes once" means here. Delivery is at-least-once, so a task may *execute* more
//! than once (a killed worker's task runs again elsewhere). What must happen exactly once is the
//! broker *accepting* its completion: the broker writes one `task_history` row when it removes a
//! finished task, in the same transaction, and a stale holder's Complete is refused by fencing.
//! So the tests read the broker's history from its database and assert one `done` row per
//! enqueued id (none missing = no accepted task lost; none doubled = no double completion), and
//! use the workers' execution logs only to show that the work really ran.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use berth_proto::queue as pb;
use berth_proto::queue::broker_client::BrokerClient;
use berth_queue::broker::{HistoryEntry, Store};
use support::Db;
use support::postgres::PgServer;
use support::process::{BrokerProc, executions, history_covering, start_worker, wait_for};
use tonic::transport::Channel;

fn client(endpoint: &str) -> BrokerClient<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .expect("endpoint URL")
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect_lazy();
    BrokerClient::new(channel)
}

fn scripted(id: &str, queue: &str, kind: &str, payload: serde_json::Value) -> pb::Task {
    pb::Task {
        id: id.into(),
        queue: queue.into(),
        package: queue.into(),
        generation: 1,
        kind: kind.into(),
        payload: payload.to_string().into_bytes(),
        ..Default::default()
    }
}

/// Enqueues `tasks` in batches, retrying each batch until the broker accepts it (Enqueue is
/// idempotent by id, as the lifecycle relay relies on), for at most `limit`.
async fn enqueue_until_accepted(endpoint: &str, tasks: &[pb::Task], limit: Duration) {
    let client = client(endpoint);
    for batch in tasks.chunks(20) {
        wait_for("the broker to accept a batch", limit, || {
            let mut client = client.clone();
            let tasks = batch.to_vec();
            async move { client.enqueue(pb::EnqueueRequest { tasks }).await.ok() }
        })
        .await;
    }
}

/// History rows per task id.
fn by_id(history: &[HistoryEntry]) -> HashMap<&str, Vec<&HistoryEntry>> {
    let mut rows: HashMap<&str, Vec<&HistoryEntry>> = HashMap::new();
    for entry in history {
        rows.entry(entry.id.as_str()).or_default().push(entry);
    }
    rows
}

/// Asserts that the broker accepted exactly one `done` for each of `ids` and nothing else.
fn assert_done_once(history: &[HistoryEntry], ids: &[String]) {
    let rows = by_id(history);
    for id in ids {
        let outcomes: Vec<&str> = rows
            .get(id.as_str())
            .map(|rows| rows.iter().map(|r| r.outcome.as_str()).collect())
            .unwrap_or_default();
        assert_eq!(outcomes, ["done"], "broker's finished records of {id}");
    }
    assert_eq!(
        rows.len(),
        ids.len(),
        "history holds only the enqueued tasks"
    );
}

crate::on_both_backends!(a_worker_killed_mid_task_has_the_task_redelivered_and_completed_once);

async fn a_worker_killed_mid_task_has_the_task_redelivered_and_completed_once(db: Db) {
    let dir = tempfile::tempdir().expect("temp dir");
    let database = db.url();
    // A short lease so the dead worker's task comes back quickly.
    let broker = BrokerProc::start(&database, "127.0.0.1:0", 1_000).await;
    let log_a = dir.path().join("a.log");
    let log_b = dir.path().join("b.log");
    let worker_a = start_worker(&broker.endpoint(), "worker-a", &log_a).await;

    let tasks = vec![
        scripted(
            "slow",
            "pkg-a",
            "Run",
            serde_json::json!({"sleep_ms": 4_000}),
        ),
        scripted("after", "pkg-a", "HookRun", serde_json::json!({})),
    ];
    enqueue_until_accepted(&broker.endpoint(), &tasks, Duration::from_secs(30)).await;
    wait_for(
        "worker-a to start the slow task",
        Duration::from_secs(30),
        || async {
            executions(&log_a)
                .iter()
                .any(|e| e.what == "start" && e.task == "slow")
                .then_some(())
        },
    )
    .await;
    worker_a.kill9().await;

    let _worker_b = start_worker(&broker.endpoint(), "worker-b", &log_b).await;
    let store = Store::open(&database)
        .await
        .expect("open the broker's database");
    let ids = ["slow".to_owned(), "after".to_owned()];
    let history = history_covering(&store, &ids, Duration::from_secs(60)).await;
    assert_done_once(&history, &ids);

    let by_a = executions(&log_a);
    let by_b = executions(&log_b);
    assert!(
        !by_a.iter().any(|e| e.what == "done"),
        "worker-a was killed before finishing anything: {by_a:?}"
    );
    let b_order: Vec<(&str, &str)> = by_b
        .iter()
        .map(|e| (e.what.as_str(), e.task.as_str()))
        .collect();
    assert_eq!(
        b_order,
        [
            ("start", "slow"),
            ("done", "slow"),
            ("start", "after"),
            ("done", "after")
        ],
        "worker-b ran the redelivered task, then the one queued behind it"
    );
    let metrics = broker.scrape().await;
    assert!(
        metrics.contains("berth_queue_redeliveries_total 1"),
        "the redelivery shows on the metrics port:\n{metrics}"
    );
}

#[tokio::test]
async fn a_broker_killed_on_postgres_under_three_workers_loses_nothing_and_completes_nothing_twice()
{
    let pg = PgServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("executions.log");
    // A lease shorter than the outage: some leases expire while the broker is down, so their
    // tasks are redelivered and the original holders' late Completes must be refused.
    let lease_ttl_ms = 1_500;
    let broker = BrokerProc::start(&pg.url(), "127.0.0.1:0", lease_ttl_ms).await;
    let addr = broker.addr.clone();
    let endpoint = broker.endpoint();
    let mut workers = Vec::new();
    for w in 0..3 {
        workers.push(start_worker(&endpoint, &format!("worker-{w}"), &log).await);
    }
    let tasks: Vec<pb::Task> = (0..200)
        .map(|i| {
            let sleep_ms = 10 + (i * 37) % 60;
            scripted(
                &format!("t{i:03}"),
                &format!("pkg-{:02}", i % 20),
                "Run",
                serde_json::json!({ "sleep_ms": sleep_ms }),
            )
        })
        .collect();
    let ids: Vec<String> = tasks.iter().map(|t| t.id.clone()).collect();
    let (first, second) = tasks.split_at(100);
    enqueue_until_accepted(&endpoint, first, Duration::from_secs(30)).await;
    wait_for(
        "some tasks to complete",
        Duration::from_secs(60),
        || async {
            (executions(&log).iter().filter(|e| e.what == "done").count() >= 20).then_some(())
        },
    )
    .await;

    broker.proc.kill9().await;
    // The producer keeps going while the broker is down: its batches are retried until a
    // broker accepts them.
    let producer = {
        let (endpoint, second) = (endpoint.clone(), second.to_vec());
        tokio::spawn(async move {
            enqueue_until_accepted(&endpoint, &second, Duration::from_secs(60)).await
        })
    };
    // Down for longer than a lease, then back on the address the workers know.
    tokio::time::sleep(Duration::from_millis(2 * lease_ttl_ms)).await;
    let broker = BrokerProc::start(&pg.url(), &addr, lease_ttl_ms).await;
    producer.await.expect("producer task");

    let store = Store::open(&pg.url())
        .await
        .expect("open the broker's database");
    let history = history_covering(&store, &ids, Duration::from_secs(120)).await;
    assert_done_once(&history, &ids);
    let ran = executions(&log);
    for id in &ids {
        assert!(
            ran.iter().any(|e| e.what == "done" && &e.task == id),
            "{id} really ran to the end on some worker"
        );
    }
    let queues = client(&broker.endpoint())
        .dump(pb::DumpRequest {})
        .await
        .expect("dump")
        .into_inner()
        .queues;
    assert!(queues.is_empty(), "nothing is left queued: {queues:?}");
}

#[tokio::test]
async fn three_workers_on_postgres_complete_a_mixed_load_of_100_packages() {
    let pg = PgServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("executions.log");
    let broker = BrokerProc::start(&pg.url(), "127.0.0.1:0", 10_000).await;
    let mut workers = Vec::new();
    for w in 0..3 {
        workers.push(start_worker(&broker.endpoint(), &format!("worker-{w}"), &log).await);
    }
    // Each package gets Startup, Run and two HookRuns with varied durations; one package's Run
    // fails once (retried after the backoff), another's fails for good.
    let mut tasks = Vec::new();
    for p in 0..100 {
        let package = format!("pkg-{p:03}");
        for (step, kind) in ["Startup", "Run", "HookRun", "HookRun"].iter().enumerate() {
            let sleep_ms = (p * 7 + step * 13) % 40;
            let fail = match (p, *kind) {
                (7, "Run") => Some("once"),
                (13, "Run") => Some("permanent"),
                _ => None,
            };
            tasks.push(scripted(
                &format!("{package}-{step}"),
                &package,
                kind,
                serde_json::json!({ "sleep_ms": sleep_ms, "fail": fail }),
            ));
        }
    }
    let ids: Vec<String> = tasks.iter().map(|t| t.id.clone()).collect();
    enqueue_until_accepted(&broker.endpoint(), &tasks, Duration::from_secs(30)).await;
    let store = Store::open(&pg.url())
        .await
        .expect("open the broker's database");
    let history = history_covering(&store, &ids, Duration::from_secs(120)).await;

    let rows = by_id(&history);
    for id in &ids {
        let outcomes: Vec<&str> = rows[id.as_str()]
            .iter()
            .map(|r| r.outcome.as_str())
            .collect();
        let expected = if id == "pkg-013-1" { "dropped" } else { "done" };
        assert_eq!(outcomes, [expected], "finished records of {id}");
    }
    assert_eq!(
        rows["pkg-007-1"][0].attempts, 1,
        "the flaky Run failed once before succeeding"
    );
    // FIFO per package: the broker finished each package's tasks in enqueue order (history is
    // newest first).
    for p in 0..100 {
        let package = format!("pkg-{p:03}");
        let order: Vec<&str> = history
            .iter()
            .rev()
            .filter(|e| e.queue == package)
            .map(|e| e.id.as_str())
            .collect();
        let expected: Vec<String> = (0..4).map(|step| format!("{package}-{step}")).collect();
        assert_eq!(order, expected, "order in which {package}'s tasks finished");
    }
    let ran = executions(&log);
    for w in 0..3 {
        let worker = format!("worker-{w}");
        assert!(
            ran.iter().any(|e| e.what == "done" && e.worker == worker),
            "{worker} took part in the load"
        );
    }
}
