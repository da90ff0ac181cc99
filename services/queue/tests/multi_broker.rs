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
    support::eventually(
        Duration::from_secs(5),
        "the lease to park on broker b",
        || {
            let parked = b.service.metrics().leases_waiting() == 1;
            async move { parked.then_some(()) }
        },
    )
    .await;
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

/// Enqueues racing with the settlement of their queue's head (and a Supersede racing with the
/// Enqueues of the newer generation) must never leave a queue without a runnable head: every
/// task that was not superseded runs, each queue in enqueue order, and nothing is left behind.
#[tokio::test]
async fn enqueues_racing_with_settlements_never_stall_a_queue() {
    const PLAIN: usize = 200;
    const QUEUES: usize = 4;
    const GENERATIONS: i64 = 5;
    const PER_GENERATION: usize = 20;
    let db = Db::postgres().await;
    let brokers = Arc::new([
        TestBroker::start(&db.url(), fast_config()).await,
        TestBroker::start(&db.url(), fast_config()).await,
    ]);
    // Completed task ids per queue, in completion order.
    let order: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let last_generation: Vec<String> = (0..PER_GENERATION)
        .map(|n| format!("s{GENERATIONS}-{n}"))
        .collect();
    let finished = {
        let order = order.clone();
        let last_generation = last_generation.clone();
        move || {
            let order = order.lock().expect("lock");
            let plain: usize = (0..QUEUES)
                .map(|q| order.get(&format!("q{q}")).map_or(0, Vec::len))
                .sum();
            let superseding = order.get("s").cloned().unwrap_or_default();
            plain == PLAIN && last_generation.iter().all(|id| superseding.contains(id))
        }
    };

    let mut producers = JoinSet::new();
    let plain_brokers = brokers.clone();
    producers.spawn(async move {
        for n in 0..PLAIN {
            let queue = format!("q{}", n % QUEUES);
            let accepted = plain_brokers[n % 2]
                .enqueue(vec![task(&format!("{queue}-{n:03}"), &queue, "p")])
                .await;
            assert_eq!(accepted, 1);
            tokio::task::yield_now().await;
        }
    });
    let superseding_brokers = brokers.clone();
    producers.spawn(async move {
        for generation in 1..=GENERATIONS {
            if generation > 1 {
                superseding_brokers[0].supersede("s", generation).await;
            }
            for n in 0..PER_GENERATION {
                let mut t = task(&format!("s{generation}-{n}"), "s", "s");
                t.generation = generation;
                superseding_brokers[1].enqueue(vec![t]).await;
                tokio::task::yield_now().await;
            }
        }
    });

    let mut workers = JoinSet::new();
    for w in 0..4 {
        let mut client = brokers[w % 2].client.clone();
        let order = order.clone();
        let finished = finished.clone();
        workers.spawn(async move {
            let worker = format!("w{w}");
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut in_hand = Vec::new();
            while Instant::now() < deadline {
                if in_hand.is_empty() {
                    if finished() {
                        return;
                    }
                    let request = berth_proto::queue::LeaseRequest {
                        worker: worker.clone(),
                        max: 2,
                        wait_ms: 100,
                    };
                    in_hand = client
                        .lease(request)
                        .await
                        .expect("lease")
                        .into_inner()
                        .tasks;
                    continue;
                }
                let t = in_hand.remove(0);
                order
                    .lock()
                    .expect("lock")
                    .entry(t.queue.clone())
                    .or_default()
                    .push(t.id.clone());
                let request = berth_proto::queue::CompleteRequest {
                    lease: Some(support::lease_ref(&t)),
                    worker: worker.clone(),
                    next: 1,
                };
                match client.complete(request).await {
                    Ok(reply) => in_hand.extend(reply.into_inner().tasks),
                    // Superseded while it ran: its settlement may find it cancelled and gone.
                    Err(status) if t.queue == "s" => {
                        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
                    }
                    Err(status) => panic!("complete {}: {status}", t.id),
                }
            }
            panic!("worker {worker} did not finish in time: a queue stalled");
        });
    }
    while let Some(result) = producers.join_next().await {
        result.expect("producer");
    }
    while let Some(result) = workers.join_next().await {
        result.expect("worker");
    }

    let order = order.lock().expect("lock").clone();
    for q in 0..QUEUES {
        let queue = format!("q{q}");
        let mut expected: Vec<String> = (0..PLAIN)
            .filter(|n| n % QUEUES == q)
            .map(|n| format!("{queue}-{n:03}"))
            .collect();
        expected.sort();
        assert_eq!(order[&queue], expected, "{queue}: each task once, in order");
    }
    let superseding = &order["s"];
    let position = |id: &str| {
        let (generation, n) = id[1..].split_once('-').expect("s<gen>-<n>");
        (
            generation.parse::<i64>().expect("gen"),
            n.parse::<usize>().expect("n"),
        )
    };
    let positions: Vec<(i64, usize)> = superseding.iter().map(|id| position(id)).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "queue s ran in enqueue order, each task once: {superseding:?}"
    );
    assert!(
        brokers[0].dump().await.is_empty(),
        "nothing left queued: {:?}",
        brokers[0].dump().await
    );
    let brokers = Arc::into_inner(brokers).expect("producers and workers are done");
    for b in brokers {
        b.stop().await;
    }
}
