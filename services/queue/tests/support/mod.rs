//! Test harness: a real broker served over gRPC on 127.0.0.1:0, plus task builders.
#![allow(dead_code)] // each test binary uses a different part of the harness

pub mod postgres;
pub mod process;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use berth_proto::queue as pb;
use berth_proto::queue::broker_client::BrokerClient;
use berth_queue::broker::{self, BrokerConfig, BrokerService, Store};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A broker serving on a loopback port until [`TestBroker::stop`].
pub struct TestBroker {
    pub addr: SocketAddr,
    pub client: BrokerClient<Channel>,
    pub service: BrokerService,
    shutdown: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl TestBroker {
    /// Opens `database_url` and serves it on a free port.
    pub async fn start(database_url: &str, config: BrokerConfig) -> TestBroker {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free loopback port");
        Self::start_on(listener, database_url, config).await
    }

    /// Serves on `listener` (to restart a broker on the address a worker already uses).
    pub async fn start_on(
        listener: TcpListener,
        database_url: &str,
        config: BrokerConfig,
    ) -> TestBroker {
        let addr = listener.local_addr().expect("listener address");
        let store = Store::open(database_url)
            .await
            .expect("open the queue store");
        let service = BrokerService::new(store, config);
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(broker::server(service.clone()))
                .serve_with_incoming_shutdown(
                    TcpListenerStream::new(listener),
                    shutdown.clone().cancelled_owned(),
                ),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint URL")
            .connect_timeout(Duration::from_secs(5))
            .connect_lazy();
        TestBroker {
            addr,
            client: BrokerClient::new(channel),
            service,
            shutdown,
            server,
        }
    }

    /// Stops serving and closes the database.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.server
            .await
            .expect("server task")
            .expect("server stopped cleanly");
        self.service.store().close().await;
    }

    pub async fn enqueue(&self, tasks: Vec<pb::Task>) -> i32 {
        let response = self
            .client
            .clone()
            .enqueue(pb::EnqueueRequest { tasks })
            .await
            .expect("enqueue");
        response.into_inner().accepted
    }

    pub async fn lease(&self, worker: &str, max: i32, wait_ms: i32) -> Vec<pb::Task> {
        let request = pb::LeaseRequest {
            worker: worker.into(),
            max,
            wait_ms,
        };
        self.client
            .clone()
            .lease(request)
            .await
            .expect("lease")
            .into_inner()
            .tasks
    }

    pub async fn complete(&self, task: &pb::Task) -> Result<(), tonic::Status> {
        let request = pb::CompleteRequest {
            lease: Some(lease_ref(task)),
            ..Default::default()
        };
        self.client.clone().complete(request).await.map(|_| ())
    }

    /// Completes `task` and asks for up to `next` tasks for `worker` in the same call.
    pub async fn complete_and_lease(
        &self,
        task: &pb::Task,
        worker: &str,
        next: i32,
    ) -> Result<Vec<pb::Task>, tonic::Status> {
        let request = pb::CompleteRequest {
            lease: Some(lease_ref(task)),
            worker: worker.into(),
            next,
        };
        let reply = self.client.clone().complete(request).await?.into_inner();
        Ok(reply.tasks)
    }

    pub async fn fail(
        &self,
        task: &pb::Task,
        error: &str,
        retry: bool,
    ) -> Result<i64, tonic::Status> {
        self.fail_with_progress(task, error, retry, None).await
    }

    /// A Fail that records `progress` as the task's payload for its retry.
    pub async fn fail_with_progress(
        &self,
        task: &pb::Task,
        error: &str,
        retry: bool,
        progress: Option<&[u8]>,
    ) -> Result<i64, tonic::Status> {
        let request = pb::FailRequest {
            lease: Some(lease_ref(task)),
            error: error.into(),
            retry,
            payload: progress.map(<[u8]>::to_vec),
        };
        self.client
            .clone()
            .fail(request)
            .await
            .map(|r| r.into_inner().retry_in_ms)
    }

    pub async fn defer(
        &self,
        task: &pb::Task,
        delay_ms: i64,
        reason: &str,
    ) -> Result<(), tonic::Status> {
        let request = pb::DeferRequest {
            lease: Some(lease_ref(task)),
            delay_ms,
            reason: reason.into(),
        };
        self.client.clone().defer(request).await.map(|_| ())
    }

    pub async fn heartbeat(&self, worker: &str, tasks: &[&pb::Task]) -> Vec<String> {
        let request = pb::HeartbeatRequest {
            worker: worker.into(),
            leases: tasks.iter().map(|t| lease_ref(t)).collect(),
        };
        self.client
            .clone()
            .heartbeat(request)
            .await
            .expect("heartbeat")
            .into_inner()
            .cancelled
    }

    pub async fn supersede(&self, package: &str, generation: i64) -> pb::SupersedeResponse {
        self.supersede_keeping(package, generation, &[]).await
    }

    pub async fn supersede_keeping(
        &self,
        package: &str,
        generation: i64,
        keep: &[&str],
    ) -> pb::SupersedeResponse {
        let request = pb::SupersedeRequest {
            package: package.into(),
            generation,
            keep_kinds: keep.iter().map(|k| (*k).to_owned()).collect(),
        };
        self.client
            .clone()
            .supersede(request)
            .await
            .expect("supersede")
            .into_inner()
    }

    pub async fn dump(&self) -> Vec<pb::QueueInfo> {
        self.client
            .clone()
            .dump(pb::DumpRequest {})
            .await
            .expect("dump")
            .into_inner()
            .queues
    }
}

pub fn lease_ref(task: &pb::Task) -> pb::LeaseRef {
    pb::LeaseRef {
        task_id: task.id.clone(),
        fence: task.fence,
    }
}

/// A fresh, empty queue database; dropping it deletes it.
pub enum Db {
    Sqlite(tempfile::TempDir),
    Postgres(postgres::PgServer),
}

impl Db {
    pub fn sqlite() -> Db {
        Db::Sqlite(tempfile::tempdir().expect("temp dir"))
    }

    pub async fn postgres() -> Db {
        Db::Postgres(postgres::PgServer::start().await)
    }

    pub fn url(&self) -> String {
        match self {
            Db::Sqlite(dir) => sqlite_url(dir),
            Db::Postgres(server) => server.url(),
        }
    }
}

/// Runs each named `async fn(Db)` scenario once over SQLite and once over PostgreSQL, as
/// `sqlite::<name>` and `postgres::<name>`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name($crate::support::Db::sqlite()).await })*
        }
        mod postgres {
            $(#[tokio::test] async fn $name() { super::$name($crate::support::Db::postgres().await).await })*
        }
    };
}

/// A `sqlite://` URL for a fresh database file in `dir`.
pub fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}/queue.db", dir.path().display())
}

/// A task of kind `Run` for package `package`, generation 1, with the payload `task <id>`.
pub fn task(id: &str, queue: &str, package: &str) -> pb::Task {
    pb::Task {
        id: id.into(),
        queue: queue.into(),
        package: package.into(),
        generation: 1,
        kind: "Run".into(),
        payload: format!("task {id}").into_bytes(),
        ..Default::default()
    }
}

/// A mergeable task as berth's hook runs are (the broker knows nothing more of them): merge
/// key `<binding_type>/<hook>`, one item holding `n` (JSON `{"n": n}`, in no group).
pub fn hook_run(id: &str, queue: &str, hook: &str, binding_type: &str, n: i64) -> pb::Task {
    pb::Task {
        kind: "HookRun".into(),
        payload: hook.as_bytes().to_vec(),
        merge: Some(pb::Merge {
            key: format!("{binding_type}/{hook}"),
            items: vec![item("", serde_json::json!({"n": n}))],
        }),
        ..task(id, queue, "pkg")
    }
}

/// A merge item of `group` holding `value` as JSON text.
pub fn item(group: &str, value: serde_json::Value) -> pb::MergeItem {
    pb::MergeItem {
        group: group.into(),
        data: value.to_string().into_bytes(),
    }
}

/// The items of a (compacted) task as a JSON array (each item's data read as JSON).
pub fn items(task: &pb::Task) -> serde_json::Value {
    let items = task
        .merge
        .as_ref()
        .map(|m| m.items.as_slice())
        .unwrap_or_default();
    items
        .iter()
        .map(|i| {
            serde_json::from_slice::<serde_json::Value>(&i.data)
                .expect("items of the tests are JSON")
        })
        .collect()
}

pub fn ids(tasks: &[pb::Task]) -> Vec<&str> {
    tasks.iter().map(|t| t.id.as_str()).collect()
}

/// Polls `check` until it returns `Some`, failing the test after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Short timings for tests: leases of 2 s, retries from 200 ms up to 400 ms.
pub fn fast_config() -> BrokerConfig {
    BrokerConfig {
        lease_ttl: Duration::from_secs(2),
        retry_base: Duration::from_millis(200),
        retry_max: Duration::from_millis(400),
        ..Default::default()
    }
}
