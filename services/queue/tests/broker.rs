//! The broker's gRPC contract, against a real server over SQLite.

mod support;

use std::time::Duration;

use berth_queue::broker::BrokerConfig;
use serde_json::json;
use support::{Db, TestBroker, fast_config, hook_run, ids, items, task};
use tokio::time::Instant;

crate::on_both_backends!(
    tasks_of_a_queue_run_in_enqueue_order_and_enqueue_is_idempotent,
    one_task_per_queue_is_leased_and_queues_run_in_parallel,
    lease_respects_max,
    long_poll_wakes_when_a_task_is_enqueued,
    failed_task_is_retried_with_backoff_without_delaying_other_queues,
    a_retry_resumes_from_the_progress_its_failure_recorded,
    allow_failure_and_permanent_failures_are_dropped_and_recorded,
    supersede_drops_queued_tasks_and_cancels_running_ones,
    supersede_keeps_the_kinds_it_is_told_to,
    stale_fence_is_rejected_and_an_expired_lease_is_redelivered,
    heartbeat_keeps_a_lease_alive,
    consecutive_runs_of_one_hook_are_compacted,
    a_deferred_run_keeps_its_attempt_and_absorbs_what_queued_meanwhile,
    tasks_survive_a_broker_restart,
    oversized_input_is_rejected_naming_the_limit,
    dump_shows_each_queue_with_its_head_and_holder,
    compaction_stops_at_the_payload_limit,
    a_lease_response_stays_within_its_byte_budget,
    a_cancelled_task_whose_holder_vanished_is_removed_not_redelivered,
    a_completion_hands_out_the_next_task_in_the_same_call,
    a_task_enqueued_while_its_queue_head_completes_still_runs,
    metrics_count_what_the_broker_did,
);

/// The bytes of a task that the payload bound and the lease budget count: its payload and
/// merge fields.
fn size(task: &berth_proto::queue::Task) -> usize {
    let merge = task.merge.as_ref().map_or(0, |m| {
        m.key.len()
            + m.items
                .iter()
                .map(|i| i.group.len() + i.data.len())
                .sum::<usize>()
    });
    task.payload.len() + merge
}

/// A broker over `db`; the database lives as long as the returned guard.
async fn broker(db: Db, config: BrokerConfig) -> (TestBroker, Db) {
    (TestBroker::start(&db.url(), config).await, db)
}

async fn tasks_of_a_queue_run_in_enqueue_order_and_enqueue_is_idempotent(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    assert_eq!(
        b.enqueue(vec![task("a", "q", "p"), task("b", "q", "p")])
            .await,
        2
    );
    assert_eq!(
        b.enqueue(vec![task("c", "q", "p"), task("a", "q", "p")])
            .await,
        1,
        "a is already queued"
    );
    let mut order = Vec::new();
    for _ in 0..3 {
        let leased = b.lease("w", 10, 0).await;
        assert_eq!(
            leased.len(),
            1,
            "one task of a queue at a time: {:?}",
            ids(&leased)
        );
        order.push(leased[0].id.clone());
        b.complete(&leased[0]).await.expect("complete");
    }
    assert_eq!(order, ["a", "b", "c"]);
    assert_eq!(
        b.enqueue(vec![task("a", "q", "p")]).await,
        0,
        "a finished recently and is not run again"
    );
    assert!(b.lease("w", 10, 0).await.is_empty());
    b.stop().await;
}

async fn one_task_per_queue_is_leased_and_queues_run_in_parallel(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![
        task("a1", "p1", "p1"),
        task("a2", "p1", "p1"),
        task("b1", "p2", "p2"),
        task("c1", "p2/main", "p2"),
    ])
    .await;
    let leased = b.lease("w1", 10, 0).await;
    assert_eq!(
        ids(&leased),
        ["a1", "b1", "c1"],
        "the heads of three queues, oldest first"
    );
    assert!(
        b.lease("w2", 10, 0).await.is_empty(),
        "every queue already has a leased task"
    );
    b.complete(&leased[0]).await.expect("complete a1");
    assert_eq!(ids(&b.lease("w2", 10, 0).await), ["a2"]);
    b.stop().await;
}

async fn lease_respects_max(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(
        (0..5)
            .map(|i| task(&format!("t{i}"), &format!("q{i}"), "p"))
            .collect(),
    )
    .await;
    assert_eq!(ids(&b.lease("w", 2, 0).await), ["t0", "t1"]);
    assert_eq!(ids(&b.lease("w", 10, 0).await), ["t2", "t3", "t4"]);
    b.stop().await;
}

async fn long_poll_wakes_when_a_task_is_enqueued(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    let client = b.client.clone();
    let waiting = tokio::spawn(async move {
        let mut client = client;
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
    // Enqueue only once the poll is parked: the broker's wake-up must reach it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    b.enqueue(vec![task("late", "q", "p")]).await;
    let (tasks, waited) = waiting.await.expect("lease task");
    assert_eq!(ids(&tasks), ["late"]);
    assert!(
        waited < Duration::from_secs(5),
        "woke after {waited:?}, not at the 10 s deadline"
    );
    b.stop().await;
}

async fn failed_task_is_retried_with_backoff_without_delaying_other_queues(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![task("bad", "p1", "p1"), task("next", "p1", "p1")])
        .await;
    b.enqueue(vec![task("other", "p2", "p2")]).await;
    let first = b.lease("w", 1, 0).await;
    assert_eq!(ids(&first), ["bad"]);
    let failed_at = Instant::now();
    let retry_in = b.fail(&first[0], "boom", true).await.expect("fail");
    assert!(
        (100..=200).contains(&retry_in),
        "first retry after base/2..base, got {retry_in} ms"
    );

    // While `bad` waits for its retry, its queue is blocked but the other queue is not.
    assert_eq!(ids(&b.lease("w", 10, 0).await), ["other"]);
    let dump = b.dump().await;
    let p1 = dump.iter().find(|q| q.name == "p1").expect("p1 in dump");
    assert_eq!(
        (
            p1.head_id.as_str(),
            p1.head_attempts,
            p1.head_last_error.as_str(),
            p1.length
        ),
        ("bad", 1, "boom", 2)
    );
    assert_eq!(
        p1.lease_holder, "",
        "a task waiting for its retry is not leased"
    );

    let again = b.lease("w", 10, 5_000).await;
    let waited = failed_at.elapsed();
    assert_eq!(
        ids(&again),
        ["bad"],
        "the failed task stays at the head of its queue"
    );
    assert!(
        waited >= Duration::from_millis(retry_in as u64),
        "retried after {waited:?}, before {retry_in} ms"
    );
    assert_eq!(
        (again[0].attempts, again[0].last_error.as_str()),
        (1, "boom")
    );

    let retry_in = b.fail(&again[0], "boom again", true).await.expect("fail");
    assert!(
        (200..=400).contains(&retry_in),
        "second retry after 2·base/2..2·base, got {retry_in} ms"
    );
    b.stop().await;
}

async fn a_retry_resumes_from_the_progress_its_failure_recorded(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![task("steps", "q", "p")]).await;
    let first = b.lease("w", 1, 0).await;
    assert_eq!(first[0].payload, b"task steps");

    // Progress larger than a payload may be is refused and changes nothing: the lease still
    // holds, and the payload is as it was.
    let big = vec![b'x'; (1 << 20) + 1];
    let refused = b
        .fail_with_progress(&first[0], "boom", true, Some(&big))
        .await
        .expect_err("progress past the payload bound");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("payload") && refused.message().contains("limit"),
        "{refused:?}"
    );

    b.fail_with_progress(&first[0], "step 2 failed", true, Some(b"done: one"))
        .await
        .expect("fail with progress");
    let again = b.lease("w", 1, 5_000).await;
    assert_eq!(ids(&again), ["steps"]);
    assert_eq!(
        (again[0].payload.as_slice(), again[0].attempts),
        (b"done: one".as_slice(), 1),
        "the retry carries the recorded progress"
    );
    // A failure that records nothing keeps the progress recorded before.
    b.fail(&again[0], "step 2 failed again", true)
        .await
        .expect("fail");
    let third = b.lease("w", 1, 5_000).await;
    assert_eq!(third[0].payload, b"done: one");
    // A task that is dropped records nothing: nothing is left to resume.
    assert_eq!(
        b.fail_with_progress(&third[0], "fatal", false, Some(b"done: one, two"))
            .await
            .expect("fail"),
        -1
    );
    assert!(b.lease("w", 1, 0).await.is_empty());
    b.stop().await;
}

async fn allow_failure_and_permanent_failures_are_dropped_and_recorded(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    let optional = berth_proto::queue::Task {
        allow_failure: true,
        ..task("optional", "q", "p")
    };
    b.enqueue(vec![
        optional,
        task("fatal", "q", "p"),
        task("after", "q", "p"),
    ])
    .await;

    let leased = b.lease("w", 1, 0).await;
    assert_eq!(
        b.fail(&leased[0], "hook exited 1", true)
            .await
            .expect("fail"),
        -1,
        "allowFailure: dropped"
    );
    let leased = b.lease("w", 1, 0).await;
    assert_eq!(ids(&leased), ["fatal"]);
    assert_eq!(
        b.fail(&leased[0], "bad chart", false).await.expect("fail"),
        -1,
        "retry=false: dropped"
    );
    assert_eq!(ids(&b.lease("w", 1, 0).await), ["after"]);

    let history = b.service.store().history(10).await.expect("history");
    let recorded: Vec<(&str, &str, &str, i64)> = history
        .iter()
        .map(|h| {
            (
                h.id.as_str(),
                h.outcome.as_str(),
                h.error.as_str(),
                h.attempts,
            )
        })
        .collect();
    assert_eq!(
        recorded,
        [
            ("fatal", "dropped", "bad chart", 1),
            ("optional", "dropped", "hook exited 1", 1)
        ]
    );
    b.stop().await;
}

async fn supersede_drops_queued_tasks_and_cancels_running_ones(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![
        task("run1", "p", "p"),
        task("run1b", "p", "p"),
        task("hook1", "p/main", "p"),
        task("other", "o", "o"),
    ])
    .await;
    let newer = berth_proto::queue::Task {
        generation: 2,
        ..task("run2", "p", "p")
    };
    b.enqueue(vec![newer]).await;
    let running = b.lease("w", 1, 0).await;
    assert_eq!(ids(&running), ["run1"]);

    let answer = b.supersede("p", 2).await;
    assert_eq!(
        (answer.dropped, answer.cancelled),
        (2, 1),
        "run1b and hook1 dropped, run1 cancelled"
    );
    assert_eq!(
        b.heartbeat("w", &[&running[0]]).await,
        ["run1"],
        "the holder learns of the cancellation"
    );
    assert!(
        b.lease("w2", 10, 0).await.iter().all(|t| t.queue != "p"),
        "p stays blocked until run1 stops"
    );

    assert_eq!(
        b.fail(&running[0], "cancelled", true).await.expect("fail"),
        -1,
        "a cancelled task is not retried"
    );
    let mut next = b.lease("w", 10, 0).await;
    next.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(
        ids(&next),
        ["run2"],
        "only the newer generation is left (other was leased before)"
    );
    b.stop().await;
}

/// A validation queued just before an Update's Supersede is still answered (issue #34's
/// admission check waited for one the Supersede had dropped): the kinds named in `keep_kinds`
/// stay queued and running, the others go.
async fn supersede_keeps_the_kinds_it_is_told_to(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    let kind = |kind: &str, t: berth_proto::queue::Task| berth_proto::queue::Task {
        kind: kind.into(),
        ..t
    };
    b.enqueue(vec![
        kind("ValidateRun", task("check-running", "p/validate/1", "p")),
        kind("ValidateRun", task("check-queued", "p/validate/2", "p")),
        task("run1", "p", "p"),
    ])
    .await;
    let first = b.lease("w", 1, 0).await;
    assert_eq!(ids(&first), ["check-running"]);

    let answer = b.supersede_keeping("p", 2, &["ValidateRun"]).await;
    assert_eq!((answer.dropped, answer.cancelled), (1, 0), "only run1 goes");
    assert!(
        b.heartbeat("w", &[&first[0]]).await.is_empty(),
        "the running validation is not cancelled"
    );
    assert_eq!(ids(&b.lease("w", 10, 0).await), ["check-queued"]);

    let refused = b
        .client
        .clone()
        .supersede(berth_proto::queue::SupersedeRequest {
            package: "p".into(),
            generation: 3,
            keep_kinds: vec![String::new()],
        })
        .await
        .expect_err("an empty kind");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("keep_kinds[0]"), "{refused:?}");
    b.stop().await;
}

async fn stale_fence_is_rejected_and_an_expired_lease_is_redelivered(db: Db) {
    let config = BrokerConfig {
        lease_ttl: Duration::from_millis(300),
        ..fast_config()
    };
    let (b, _db) = broker(db, config).await;
    b.enqueue(vec![task("t", "q", "p"), task("u", "q", "p")])
        .await;
    let first = b.lease("dead-worker", 1, 0).await;
    assert_eq!(ids(&first), ["t"]);

    // The long poll wakes up by itself when the lease expires.
    let started = Instant::now();
    let second = b.lease("w2", 1, 5_000).await;
    assert_eq!(ids(&second), ["t"], "redelivered after the lease expired");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        second[0].fence > first[0].fence,
        "a new lease has a newer fence"
    );
    assert_eq!(
        second[0].attempts, 0,
        "a lost lease is not a failed attempt"
    );

    let err = b.complete(&first[0]).await.expect_err("stale fence");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    let err = b
        .fail(&first[0], "late", true)
        .await
        .expect_err("stale fence");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err}");
    assert_eq!(
        b.heartbeat("dead-worker", &[&first[0]]).await,
        ["t"],
        "the old holder learns its lease is lost"
    );
    assert!(b.heartbeat("w2", &[&second[0]]).await.is_empty());

    b.complete(&second[0])
        .await
        .expect("the current holder completes");
    assert!(
        b.complete(&second[0]).await.is_err(),
        "a second completion is stale"
    );
    assert_eq!(ids(&b.lease("w2", 1, 0).await), ["u"]);
    b.stop().await;
}

async fn heartbeat_keeps_a_lease_alive(db: Db) {
    let config = BrokerConfig {
        lease_ttl: Duration::from_millis(400),
        ..fast_config()
    };
    let (b, _db) = broker(db, config).await;
    b.enqueue(vec![task("t", "q", "p")]).await;
    let leased = b.lease("w", 1, 0).await;
    let until = Instant::now() + Duration::from_millis(1_200);
    while Instant::now() < until {
        assert!(b.heartbeat("w", &[&leased[0]]).await.is_empty());
        assert!(
            b.lease("thief", 1, 0).await.is_empty(),
            "a heartbeated lease is not redelivered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.complete(&leased[0]).await.expect("still the holder");
    b.stop().await;
}

async fn consecutive_runs_of_one_hook_are_compacted(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![
        hook_run("k1", "pkg/main", "hooks/a", "Kubernetes", 1),
        hook_run("k2", "pkg/main", "hooks/a", "Kubernetes", 2),
        hook_run("k3", "pkg/main", "hooks/a", "Kubernetes", 3),
        hook_run("s1", "pkg/main", "hooks/a", "Schedule", 4),
        hook_run("k4", "pkg/main", "hooks/a", "Kubernetes", 5),
    ])
    .await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let leased = b.lease("w", 1, 0).await;
        assert_eq!(leased.len(), 1);
        assert_eq!(
            leased[0].payload, b"hooks/a",
            "the first task's payload is kept"
        );
        seen.push((leased[0].id.clone(), items(&leased[0])));
        b.complete(&leased[0]).await.expect("complete");
    }
    assert_eq!(
        seen,
        [
            ("k1".to_owned(), json!([{"n": 1}, {"n": 2}, {"n": 3}])),
            ("s1".to_owned(), json!([{"n": 4}])),
            ("k4".to_owned(), json!([{"n": 5}])),
        ]
    );
    assert!(b.dump().await.is_empty());
    assert_eq!(
        b.enqueue(vec![hook_run("k2", "pkg/main", "hooks/a", "Kubernetes", 2)])
            .await,
        0,
        "merged ids count as seen"
    );
    b.stop().await;
}

/// Defer (a hook's throttle): the task goes back to the head of its queue as the same attempt,
/// is not leased again before its delay, and when it is, the runs of the same hook queued
/// meanwhile are folded into it.
async fn a_deferred_run_keeps_its_attempt_and_absorbs_what_queued_meanwhile(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![hook_run("k1", "pkg/main", "hooks/a", "Kubernetes", 1)])
        .await;
    let first = b.lease("w", 1, 0).await;
    assert_eq!(ids(&first), ["k1"]);
    let deferred_at = Instant::now();
    b.defer(&first[0], 300, "throttled").await.expect("defer");
    b.enqueue(vec![
        hook_run("k2", "pkg/main", "hooks/a", "Kubernetes", 2),
        hook_run("k3", "pkg/main", "hooks/a", "Kubernetes", 3),
    ])
    .await;
    assert!(
        b.lease("w", 1, 0).await.is_empty(),
        "a deferred head blocks its queue until its delay passed"
    );
    let dump = b.dump().await;
    let q = dump
        .iter()
        .find(|q| q.name == "pkg/main")
        .expect("queue in dump");
    assert_eq!(
        (
            q.head_id.as_str(),
            q.head_attempts,
            q.head_last_error.as_str(),
            q.lease_holder.as_str()
        ),
        ("k1", 0, "throttled", "")
    );
    let again = b.lease("w", 1, 5_000).await;
    assert!(
        deferred_at.elapsed() >= Duration::from_millis(300),
        "leased again after {:?}",
        deferred_at.elapsed()
    );
    assert_eq!(ids(&again), ["k1"]);
    assert_eq!(again[0].attempts, 0, "a deferral is not an attempt");
    assert_eq!(items(&again[0]), json!([{"n": 1}, {"n": 2}, {"n": 3}]));
    // Out-of-range delays and stale leases are refused.
    let err = b.defer(&again[0], 3_600_001, "x").await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("delay_ms"), "{err:?}");
    b.complete(&again[0]).await.expect("complete");
    let err = b.defer(&again[0], 10, "x").await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    b.stop().await;
}

async fn tasks_survive_a_broker_restart(db: Db) {
    let url = db.url();
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let b = TestBroker::start(&url, fast_config()).await;
    let traced = berth_proto::queue::Task {
        traceparent: traceparent.into(),
        ..task("a", "q", "p")
    };
    b.enqueue(vec![traced, task("b", "q", "p")]).await;
    let leased = b.lease("w", 1, 0).await;
    b.fail(&leased[0], "first try", true).await.expect("fail");
    b.stop().await;

    let b = TestBroker::start(&url, fast_config()).await;
    let dump = b.dump().await;
    assert_eq!(dump.len(), 1);
    assert_eq!(
        (
            dump[0].length,
            dump[0].head_id.as_str(),
            dump[0].head_attempts
        ),
        (2, "a", 1)
    );
    let leased = b.lease("w", 1, 5_000).await;
    assert_eq!(ids(&leased), ["a"]);
    assert_eq!(leased[0].traceparent, traceparent);
    assert_eq!(
        (leased[0].attempts, leased[0].last_error.as_str()),
        (1, "first try")
    );
    b.complete(&leased[0]).await.expect("complete");
    assert_eq!(ids(&b.lease("w", 1, 0).await), ["b"]);
    b.stop().await;
}

async fn oversized_input_is_rejected_naming_the_limit(db: Db) {
    let config = BrokerConfig {
        max_enqueue_batch: 3,
        max_payload_bytes: 64,
        ..fast_config()
    };
    let (b, _db) = broker(db, config).await;
    let mut client = b.client.clone();
    let many = (0..4).map(|i| task(&format!("t{i}"), "q", "p")).collect();
    let err = client
        .enqueue(berth_proto::queue::EnqueueRequest { tasks: many })
        .await
        .expect_err("too many");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("limit 3"), "{}", err.message());
    let big = berth_proto::queue::Task {
        payload: vec![b'y'; 100],
        ..task("big", "q", "p")
    };
    let err = client
        .enqueue(berth_proto::queue::EnqueueRequest { tasks: vec![big] })
        .await
        .expect_err("too big");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("payload") && err.message().contains("limit 64"),
        "{}",
        err.message()
    );
    assert!(
        b.dump().await.is_empty(),
        "a rejected call enqueues nothing"
    );
    b.stop().await;
}

async fn a_completion_hands_out_the_next_task_in_the_same_call(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![
        task("a1", "qa", "p"),
        task("a2", "qa", "p"),
        task("b1", "qb", "p"),
        hook_run("h1", "qh", "hooks/x", "Event", 1),
        hook_run("h2", "qh", "hooks/x", "Event", 2),
    ])
    .await;
    let first = b.lease("w1", 1, 0).await;
    assert_eq!(ids(&first), ["a1"]);
    // Settling a1 frees qa: its next task a2 is now the oldest ready head (enqueued before b1).
    let next = b
        .complete_and_lease(&first[0], "w1", 1)
        .await
        .expect("complete a1");
    assert_eq!(
        ids(&next),
        ["a2"],
        "the freed queue's next task, in the same call"
    );
    let holders: Vec<(String, String)> = b
        .dump()
        .await
        .into_iter()
        .map(|q| (q.head_id, q.lease_holder))
        .collect();
    assert!(
        holders.contains(&("a2".into(), "w1".into())),
        "leased to the completing worker: {holders:?}"
    );
    let next = b
        .complete_and_lease(&next[0], "w1", 1)
        .await
        .expect("complete a2");
    assert_eq!(ids(&next), ["b1"]);
    // Tasks handed out this way are compacted like leased ones.
    let next = b
        .complete_and_lease(&next[0], "w1", 1)
        .await
        .expect("complete b1");
    assert_eq!(ids(&next), ["h1"]);
    assert_eq!(items(&next[0]), json!([{"n": 1}, {"n": 2}]));
    // A stale completion settles nothing and takes nothing.
    let err = b
        .complete_and_lease(&first[0], "w1", 1)
        .await
        .expect_err("a1 was settled already");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    // Asking for more than is ready returns what there is.
    let last = b
        .complete_and_lease(&next[0], "w1", 5)
        .await
        .expect("complete h1");
    assert!(last.is_empty(), "nothing left: {:?}", ids(&last));
    assert!(b.dump().await.is_empty(), "every task done");
    // Asking for a next task without naming the worker is refused and settles nothing.
    b.enqueue(vec![task("c1", "qc", "p")]).await;
    let c = b.lease("w1", 1, 0).await;
    let err = b
        .complete_and_lease(&c[0], "", 1)
        .await
        .expect_err("no worker");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("worker"), "{}", err.message());
    assert_eq!(b.dump().await.len(), 1, "c1 is still there");
    b.stop().await;
}

async fn dump_shows_each_queue_with_its_head_and_holder(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![
        task("a", "q1", "p"),
        task("b", "q1", "p"),
        task("c", "q2", "p"),
    ])
    .await;
    b.lease("worker-7", 1, 0).await;
    let dump = b.dump().await;
    let rows: Vec<(&str, i32, &str, &str, &str)> = dump
        .iter()
        .map(|q| {
            (
                q.name.as_str(),
                q.length,
                q.head_kind.as_str(),
                q.head_id.as_str(),
                q.lease_holder.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("q1", 2, "Run", "a", "worker-7"), ("q2", 1, "Run", "c", "")]
    );
    b.stop().await;
}

async fn metrics_count_what_the_broker_did(db: Db) {
    let (b, _db) = broker(db, fast_config()).await;
    b.enqueue(vec![
        task("ok", "q1", "p"),
        task("bad", "q2", "p"),
        task("stale", "q3", "p"),
    ])
    .await;
    let leased = b.lease("w", 10, 0).await;
    b.complete(&leased[0]).await.expect("complete");
    b.fail(&leased[1], "boom", true).await.expect("fail");
    b.supersede("p", 5).await;
    b.service.refresh_metrics().await.expect("refresh metrics");

    let mut registry = prometheus_client::registry::Registry::default();
    b.service.metrics().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    for line in [
        "berth_queue_enqueued_total 3",
        r#"berth_queue_wait_seconds_count{kind="Run"} 3"#,
        r#"berth_queue_finished_total{kind="Run",outcome="done"} 1"#,
        r#"berth_queue_retries_total{kind="Run"} 1"#,
        "berth_queue_cancellations_total 1",
        "berth_queue_superseded_total 1",
        r#"berth_queue_depth{queue="q3"} 1"#,
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    b.stop().await;
}

async fn compaction_stops_at_the_payload_limit(db: Db) {
    let one = size(&hook_run("x", "q", "hooks/a", "Kubernetes", 1));
    // Room for two runs' payloads and items, not three.
    let config = BrokerConfig {
        max_payload_bytes: one * 2 + one / 2,
        ..fast_config()
    };
    let (b, _db) = broker(db, config).await;
    b.enqueue(
        (1..=5)
            .map(|n| hook_run(&format!("k{n}"), "q", "hooks/a", "Kubernetes", n))
            .collect(),
    )
    .await;
    let leased = b.lease("w", 1, 0).await;
    assert_eq!(items(&leased[0]), json!([{"n": 1}, {"n": 2}]));
    assert!(size(&leased[0]) <= one * 2 + one / 2);
    assert_eq!(
        b.dump().await[0].length,
        4,
        "k1 (with k2 merged) and k3..k5"
    );
    b.stop().await;
}

async fn a_lease_response_stays_within_its_byte_budget(db: Db) {
    let one = size(&task("t0", "q0", "p"));
    let config = BrokerConfig {
        max_lease_bytes: one + 1,
        ..fast_config()
    };
    let (b, _db) = broker(db, config).await;
    b.enqueue(
        (0..3)
            .map(|i| task(&format!("t{i}"), &format!("q{i}"), "p"))
            .collect(),
    )
    .await;
    assert_eq!(
        ids(&b.lease("w", 10, 0).await),
        ["t0", "t1"],
        "stops once the budget is reached"
    );
    assert_eq!(ids(&b.lease("w", 10, 0).await), ["t2"]);
    b.stop().await;
}

async fn a_cancelled_task_whose_holder_vanished_is_removed_not_redelivered(db: Db) {
    let config = BrokerConfig {
        lease_ttl: Duration::from_millis(300),
        ..fast_config()
    };
    let (b, _db) = broker(db, config).await;
    b.enqueue(vec![task("old", "p", "p")]).await;
    b.enqueue(vec![berth_proto::queue::Task {
        generation: 2,
        ..task("new", "p", "p")
    }])
    .await;
    assert_eq!(ids(&b.lease("dies", 1, 0).await), ["old"]);
    assert_eq!(b.supersede("p", 2).await.cancelled, 1);

    // The holder never reports; once its lease expires the queue moves on to the new task.
    let next = b.lease("w", 10, 5_000).await;
    assert_eq!(ids(&next), ["new"], "the cancelled task is not redelivered");
    let history = b.service.store().history(1).await.expect("history");
    assert_eq!(
        (history[0].id.as_str(), history[0].outcome.as_str()),
        ("old", "cancelled")
    );
    assert_eq!(
        b.enqueue(vec![task("old", "p", "p")]).await,
        0,
        "a finished id is not accepted again"
    );
    b.stop().await;
}

/// An Enqueue into a queue whose only task is being completed at the same moment: whichever
/// commits first, the new task must become the queue's head and run (no later call into the
/// queue rescues it).
async fn a_task_enqueued_while_its_queue_head_completes_still_runs(db: Db) {
    const QUEUES: usize = 100;
    let (b, _db) = broker(db, fast_config()).await;
    let firsts: Vec<_> = (0..QUEUES)
        .map(|q| task(&format!("first-{q}"), &format!("q{q}"), "p"))
        .collect();
    assert_eq!(b.enqueue(firsts).await, QUEUES as i32);
    let mut leased = Vec::new();
    while leased.len() < QUEUES {
        let batch = b.lease("w", 64, 1_000).await;
        assert!(!batch.is_empty(), "the first tasks are ready");
        leased.extend(batch);
    }
    for first in &leased {
        let second = task(&first.id.replace("first", "second"), &first.queue, "p");
        let (completed, accepted) = tokio::join!(b.complete(first), b.enqueue(vec![second]));
        completed.expect("complete");
        assert_eq!(accepted, 1);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seconds = std::collections::BTreeSet::new();
    while seconds.len() < QUEUES && Instant::now() < deadline {
        for t in b.lease("w", 64, 200).await {
            assert!(t.id.starts_with("second-"), "{}", t.id);
            seconds.insert(t.queue.clone());
        }
    }
    let stalled: Vec<String> = (0..QUEUES)
        .map(|q| format!("q{q}"))
        .filter(|q| !seconds.contains(q))
        .collect();
    assert!(
        stalled.is_empty(),
        "queues whose second task never ran: {stalled:?}"
    );
    b.stop().await;
}
