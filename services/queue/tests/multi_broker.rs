//! Several brokers over one PostgreSQL database: the scalable deployment.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{Db, TestBroker, fast_config, ids, task};
use tokio::task::JoinSet;
use tokio::time::Instant;

#[tokio::test]
async fn a_waiting_lease_wakes_when_another_broker_enqueues() {
    let db = Db::postgres().await;
    let a = TestBroker::start(&db.url(), fast_config()).await;
    let b = TestBroker::start(&db.url(), fast_config()).await;
    let mut client = b.client.clone();
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let request = berth_proto::queue::LeaseRequest {
            worker: "w".into(),
            max: 1,
            wait_ms: 10_000,
        };
        let tasks = client
            .lease(request)
            .await
            .expect("lease")
            .into_inner()
            .tasks;
        (tasks, started.elapsed())
    });
    // Enqueue only once the poll on broker b is parked.
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.enqueue(vec![task("t", "q", "p")]).await;
    let (tasks, waited) = waiting.await.expect("lease task");
    assert_eq!(ids(&tasks), ["t"]);
    assert!(
        waited < Duration::from_secs(5),
        "woke after {waited:?}: NOTIFY did not reach broker b"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn concurrent_workers_on_two_brokers_never_run_two_tasks_of_one_queue() {
    const QUEUES: usize = 6;
    const PER_QUEUE: usize = 5;
    let db = Db::postgres().await;
    let brokers = [
        TestBroker::start(&db.url(), fast_config()).await,
        TestBroker::start(&db.url(), fast_config()).await,
    ];
    let tasks = (0..PER_QUEUE)
        .flat_map(|n| (0..QUEUES).map(move |q| task(&format!("q{q}-{n}"), &format!("q{q}"), "p")))
        .collect();
    brokers[0].enqueue(tasks).await;

    // Queues with a task in hand; a lease of a queue already in here breaks exclusivity.
    let in_hand: Arc<Mutex<HashSet<String>>> = Arc::default();
    let order: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let mut workers = JoinSet::new();
    for w in 0..6 {
        let mut client = brokers[w % 2].client.clone();
        let (in_hand, order) = (in_hand.clone(), order.clone());
        workers.spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                let request = berth_proto::queue::LeaseRequest {
                    worker: format!("w{w}"),
                    max: 2,
                    wait_ms: 200,
                };
                let leased = client
                    .lease(request)
                    .await
                    .expect("lease")
                    .into_inner()
                    .tasks;
                if leased.is_empty()
                    && order
                        .lock()
                        .expect("lock")
                        .values()
                        .map(Vec::len)
                        .sum::<usize>()
                        == QUEUES * PER_QUEUE
                {
                    return;
                }
                for t in leased {
                    assert!(
                        in_hand.lock().expect("lock").insert(t.queue.clone()),
                        "queue {} leased twice at once",
                        t.queue
                    );
                    order
                        .lock()
                        .expect("lock")
                        .entry(t.queue.clone())
                        .or_default()
                        .push(t.id.clone());
                    tokio::task::yield_now().await;
                    // Out of hand before the completion can let another lease see the queue free.
                    in_hand.lock().expect("lock").remove(&t.queue);
                    let lease = Some(support::lease_ref(&t));
                    client
                        .complete(berth_proto::queue::CompleteRequest {
                            lease,
                            ..Default::default()
                        })
                        .await
                        .expect("complete");
                }
            }
            panic!("worker w{w} did not finish in time");
        });
    }
    while let Some(result) = workers.join_next().await {
        result.expect("worker");
    }
    let order = order.lock().expect("lock").clone();
    for q in 0..QUEUES {
        let expected: Vec<String> = (0..PER_QUEUE).map(|n| format!("q{q}-{n}")).collect();
        assert_eq!(
            order[&format!("q{q}")],
            expected,
            "each task once, in order"
        );
    }
    for b in brokers {
        b.stop().await;
    }
}
