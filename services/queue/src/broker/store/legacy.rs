//! Rows of format 1, written by a broker whose tasks carried their payload as JSON text: read
//! through `berth_proto::tasks::legacy`, the one place that knows berth's old payload shapes, so
//! a task queued before the upgrade runs after it (and a HookRun of the old format still merges
//! with new ones). A row is written back in the current format whenever its payload changes
//! (compaction, a failure's progress); the rest are read this way until they leave the queue.

use super::rows::from_proto;
use crate::broker::model::Merge;

/// The payload and merge fields of an old row of kind `kind` whose payload is `payload_json`.
pub(super) fn read(kind: &str, payload_json: &str) -> (Vec<u8>, Option<Merge>) {
    let upgraded = berth_proto::tasks::legacy::upgrade(kind, payload_json);
    (upgraded.payload, upgraded.merge.map(from_proto))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use berth_proto::queue as pb;
    use berth_proto::tasks::{self, BindingType, HookRun, Start, TaskKind, ValidateRun};
    use serde_json::json;
    use sqlx::Row;

    use super::super::{Dialect, LeaseLimits, Store};
    use crate::broker::convert;
    use crate::broker::model::{NewTask, TaskId};

    /// The last migration of the broker that stored payloads as JSON text.
    const LAST_TEXT_MIGRATION: i64 = 20261121000004;

    /// Writes tasks into `url` as that broker did: its schema, and its Enqueue's columns.
    async fn write_old_tasks(url: &str) {
        let dialect = Dialect::from_url(url).expect("a database URL");
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(&dialect.connect_url(url))
            .await
            .expect("connect");
        dialect
            .migrator()
            .run_to(LAST_TEXT_MIGRATION, &pool)
            .await
            .expect("the old schema");
        let old = [
            (
                "k1",
                "pkg",
                "HookRun",
                r#"{"hook":"h.sh","binding_type":"Kubernetes","binding_contexts":[{"binding":"a"}]}"#,
            ),
            (
                "k2",
                "pkg",
                "HookRun",
                r#"{"hook":"h.sh","binding_type":"Kubernetes","binding_contexts":[{"binding":"b","group":"g"}]}"#,
            ),
            ("s1", "pkg/start", "Start", r#"{"done":["ApplySettings"]}"#),
            (
                "v1",
                "pkg/validate",
                "ValidateRun",
                r#"{"request_id":"r","deadline_unix_ms":7,"settings":{"replicas":2}}"#,
            ),
            ("o1", "other", "queue-test", r#"{"sleep_ms": 5}"#),
        ];
        for (id, queue, kind, payload) in old {
            sqlx::query(
                "INSERT INTO tasks (id, queue, package, generation, kind, payload, traceparent, allow_failure, enqueued_at, not_before) \
                 VALUES ($1, $2, 'pkg', 1, $3, $4, '', 0, 1000, 1000)",
            )
            .bind(id)
            .bind(queue)
            .bind(kind)
            .bind(payload)
            .execute(&pool)
            .await
            .expect("an old row");
        }
        // Its Enqueue marked each queue's head (store/heads.rs).
        sqlx::query(
            "UPDATE tasks SET is_head = 1 WHERE seq IN (SELECT MIN(seq) FROM tasks GROUP BY queue)",
        )
        .execute(&pool)
        .await
        .expect("heads");
        pool.close().await;
    }

    /// Tasks queued by the previous version run after the upgrade with their payloads read as
    /// the current ones, and an old HookRun merges with a new one queued behind it.
    async fn tasks_queued_by_the_previous_version_are_read(url: &str) {
        write_old_tasks(url).await;
        let store = Store::open(url).await.expect("open and migrate");
        let new = HookRun::task("h.sh", BindingType::Kubernetes, &[json!({"binding": "c"})]);
        let new = NewTask {
            id: TaskId::from_checked("k3".into()),
            queue: "pkg".into(),
            package: "pkg".into(),
            generation: 1,
            kind: new.kind,
            payload: new.payload,
            merge: new.merge.map(super::super::rows::from_proto),
            traceparent: String::new(),
            allow_failure: false,
        };
        store.enqueue(&[new], 2_000).await.expect("enqueue");
        let limits = LeaseLimits {
            ttl: Duration::from_secs(10),
            max_tasks: 10,
            response_bytes: 1 << 20,
            merged_payload_bytes: 1 << 20,
        };
        let batch = store.lease("w", limits, 3_000).await.expect("lease");
        let leased: Vec<pb::Task> = batch.tasks.into_iter().map(convert::leased_task).collect();
        let by_id = |id: &str| leased.iter().find(|t| t.id == id).expect(id);
        assert_eq!(leased.len(), 4, "one head per queue");

        let run = by_id("k1");
        let payload: HookRun = tasks::payload(run).expect("a HookRun");
        assert_eq!(
            (payload.hook.as_str(), payload.binding_type()),
            ("h.sh", BindingType::Kubernetes)
        );
        assert_eq!(
            tasks::binding_contexts(run).expect("contexts"),
            json!([{"binding": "a"}, {"binding": "b", "group": "g"}, {"binding": "c"}]),
            "the old runs and the new one merged, in queue order"
        );
        let start: Start = tasks::payload(by_id("s1")).expect("a Start");
        assert_eq!(start.done, [TaskKind::ApplySettings as i32]);
        let validate: ValidateRun = tasks::payload(by_id("v1")).expect("a ValidateRun");
        assert_eq!(
            (validate.request_id.as_str(), validate.settings_json()),
            ("r", json!({"replicas": 2}))
        );
        assert_eq!(
            by_id("o1").payload,
            br#"{"sleep_ms": 5}"#,
            "another producer's text is kept"
        );

        // The merged head was written back in the current format; the others stay as written.
        let formats: Vec<(String, i64)> = sqlx::query("SELECT id, format FROM tasks ORDER BY id")
            .fetch_all(store.pool())
            .await
            .expect("formats")
            .iter()
            .map(|r| (r.get("id"), r.get("format")))
            .collect();
        let formats: Vec<(&str, i64)> = formats.iter().map(|(id, f)| (id.as_str(), *f)).collect();
        assert_eq!(formats, [("k1", 2), ("o1", 1), ("s1", 1), ("v1", 1)]);
        store.close().await;
    }

    #[tokio::test]
    async fn sqlite_tasks_queued_by_the_previous_version_are_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}/queue.db", dir.path().display());
        tasks_queued_by_the_previous_version_are_read(&url).await;
    }

    #[tokio::test]
    async fn postgres_tasks_queued_by_the_previous_version_are_read() {
        let server = super::super::pg_server::PgServer::start().await;
        tasks_queued_by_the_previous_version_are_read(&server.url()).await;
    }
}
