//! Service identity (issue 16.1): every internal service, started as its own process with its
//! certificate, refuses a caller without a certificate, with a certificate from another CA, or
//! with a role the RPC is not for — and a refused call changes nothing.

use std::path::Path;

use anyhow::Context as _;
use berth_proto::hookevent::hook_events_client::HookEventsClient;
use berth_proto::lifecycle::lifecycle_client::LifecycleClient;
use berth_proto::queue::broker_client::BrokerClient;
use berth_proto::release::releases_client::ReleasesClient;
use berth_proto::{hookevent, lifecycle, queue, release, v1};
use berth_runtime::Role;
use berth_runtime::tls::CertFiles;
use berth_tests::process::tls_args;
use berth_tests::{Proc, TestCluster};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

fn https(endpoint: &str) -> String {
    endpoint.replacen("http://", "https://", 1)
}

/// A client that trusts `certs`' CA and verifies the server as `server`, presenting `identity`
/// (or no certificate).
fn client(
    certs: &Path,
    endpoint: &str,
    server: Role,
    identity: Option<Identity>,
) -> anyhow::Result<Channel> {
    let ca = std::fs::read(certs.join("ca.pem"))?;
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(server.server_name());
    if let Some(identity) = identity {
        tls = tls.identity(identity);
    }
    Ok(Endpoint::from_shared(https(endpoint))?
        .tls_config(tls)?
        .connect_lazy())
}

fn identity(certs: &Path, role: Role) -> anyhow::Result<Identity> {
    let files = CertFiles::new(certs, role);
    Ok(Identity::from_pem(
        std::fs::read(files.cert)?,
        std::fs::read(files.key)?,
    ))
}

fn as_role(certs: &Path, endpoint: &str, server: Role, role: Role) -> anyhow::Result<Channel> {
    client(certs, endpoint, server, Some(identity(certs, role)?))
}

fn refused(result: Result<impl std::fmt::Debug, tonic::Status>, code: tonic::Code, words: &[&str]) {
    let status = result.expect_err("the call must be refused");
    assert_eq!(status.code(), code, "{status:?}");
    for word in words {
        assert!(
            status.message().contains(word),
            "{word:?} not in {:?}",
            status.message()
        );
    }
}

fn task(id: &str) -> queue::Task {
    queue::Task {
        id: id.into(),
        queue: "default.attack".into(),
        package: "default.attack".into(),
        generation: 1,
        kind: "Run".into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_services_refuse_callers_without_the_right_certificate() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let sqlite = |name: &str| format!("sqlite://{}", dir.path().join(name).display());
    let start = |name: &'static str, args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proc::start(name, &args, "listening on ").await
    };
    let record_key = certs.join("record.key");
    berth_release::record::RecordKey::load_or_generate(&record_key)?;
    let record_key = record_key.display().to_string();
    let base = |args: &[&str], role| {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(tls_args(&certs, role));
        all
    };
    let broker = start(
        "berth-queue",
        base(
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--database",
                &sqlite("queue.db"),
            ],
            Role::Broker,
        ),
    )
    .await?;
    let lifecycle = start(
        "berth-lifecycle",
        base(
            &[
                "--listen",
                "127.0.0.1:0",
                "--database",
                &sqlite("lifecycle.db"),
                "--broker",
                &broker.endpoint(),
            ],
            Role::Lifecycle,
        ),
    )
    .await?;
    let kc = cluster.kubeconfig.display().to_string();
    let leases = berth_tests::process::lease_namespace(&cluster.kubeconfig).await?;
    let hookevent = start(
        "berth-hookevent",
        base(
            &[
                "--listen",
                "127.0.0.1:0",
                "--database",
                &sqlite("hookevent.db"),
                "--broker",
                &broker.endpoint(),
                "--kubeconfig",
                &kc,
                "--lease-namespace",
                &leases,
            ],
            Role::Hookevent,
        ),
    )
    .await?;
    let release = start(
        "berth-release",
        base(
            &[
                "--listen",
                "127.0.0.1:0",
                "--kubeconfig",
                &kc,
                "--lease-namespace",
                &leases,
                "--record-key-file",
                &record_key,
            ],
            Role::Release,
        ),
    )
    .await?;
    let (b, l, h, r) = (
        broker.endpoint(),
        lifecycle.endpoint(),
        hookevent.endpoint(),
        release.endpoint(),
    );
    let no_cert = "needs a client certificate";

    // No certificate: Unauthenticated, from every service.
    let mut anon_broker = BrokerClient::new(client(&certs, &b, Role::Broker, None)?);
    refused(
        anon_broker
            .enqueue(queue::EnqueueRequest {
                tasks: vec![task("anonymous")],
            })
            .await,
        tonic::Code::Unauthenticated,
        &[no_cert, "Enqueue"],
    );
    let mut anon_lifecycle = LifecycleClient::new(client(&certs, &l, Role::Lifecycle, None)?);
    refused(
        anon_lifecycle.list(v1::ListRequest::default()).await,
        tonic::Code::Unauthenticated,
        &[no_cert, "List"],
    );
    refused(
        anon_lifecycle
            .report(lifecycle::ReportRequest {
                key: "default.attack".into(),
                generation: 1,
                ..Default::default()
            })
            .await,
        tonic::Code::Unauthenticated,
        &[no_cert, "Report"],
    );
    let mut anon_hookevent = HookEventsClient::new(client(&certs, &h, Role::Hookevent, None)?);
    refused(
        anon_hookevent
            .apply_object_operations(hookevent::ApplyObjectOperationsRequest::default())
            .await,
        tonic::Code::Unauthenticated,
        &[no_cert, "ApplyObjectOperations"],
    );
    let mut anon_release = ReleasesClient::new(client(&certs, &r, Role::Release, None)?);
    refused(
        anon_release
            .history(release::HistoryRequest {
                name: "x".into(),
                namespace: "default".into(),
            })
            .await,
        tonic::Code::Unauthenticated,
        &[no_cert, "History"],
    );
    // Health stays open (a probe needs no certificate).
    let mut health =
        tonic_health::pb::health_client::HealthClient::new(client(&certs, &b, Role::Broker, None)?);
    health
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .context("health without a certificate")?;

    // Plain text to a TLS port: no answer at all.
    let mut plain = BrokerClient::new(Endpoint::from_shared(b.clone())?.connect_lazy());
    assert!(plain.dump(queue::DumpRequest {}).await.is_err());

    // Wrong role: PermissionDenied naming the role and the RPC.
    let mut worker_broker = BrokerClient::new(as_role(&certs, &b, Role::Broker, Role::Worker)?);
    refused(
        worker_broker
            .enqueue(queue::EnqueueRequest {
                tasks: vec![task("forged")],
            })
            .await,
        tonic::Code::PermissionDenied,
        &["role worker", "/berth.queue.v1.Broker/Enqueue"],
    );
    refused(
        worker_broker
            .supersede(queue::SupersedeRequest {
                package: "default.attack".into(),
                generation: 9,
                keep_kinds: vec![],
            })
            .await,
        tonic::Code::PermissionDenied,
        &["role worker", "Supersede"],
    );
    let mut gateway_lifecycle =
        LifecycleClient::new(as_role(&certs, &l, Role::Lifecycle, Role::Gateway)?);
    refused(
        gateway_lifecycle
            .report(lifecycle::ReportRequest {
                key: "default.attack".into(),
                generation: 1,
                ..Default::default()
            })
            .await,
        tonic::Code::PermissionDenied,
        &["role gateway", "/berth.lifecycle.v1.Lifecycle/Report"],
    );
    let report_of = |key: &str| lifecycle::ReportRequest {
        key: key.into(),
        generation: 1,
        report: Some(lifecycle::report_request::Report::RunSucceeded(
            lifecycle::RunSucceeded {},
        )),
    };
    refused(
        gateway_lifecycle
            .report_batch(lifecycle::ReportBatchRequest {
                reports: vec![report_of("default.attack"), report_of("default.attack")],
            })
            .await,
        tonic::Code::PermissionDenied,
        &["role gateway", "/berth.lifecycle.v1.Lifecycle/ReportBatch"],
    );
    let mut worker_lifecycle =
        LifecycleClient::new(as_role(&certs, &l, Role::Lifecycle, Role::Worker)?);
    refused(
        worker_lifecycle.update(v1::UpdateRequest::default()).await,
        tonic::Code::PermissionDenied,
        &["role worker", "Update"],
    );
    // A worker's batch must be of one package generation: one naming two packages is refused
    // whole, naming the report at fault.
    refused(
        worker_lifecycle
            .report_batch(lifecycle::ReportBatchRequest {
                reports: vec![report_of("default.a"), report_of("default.b")],
            })
            .await,
        tonic::Code::InvalidArgument,
        &[
            "reports[1]: of default.b generation 1",
            "one package generation",
        ],
    );
    let mut gateway_hookevent =
        HookEventsClient::new(as_role(&certs, &h, Role::Hookevent, Role::Gateway)?);
    refused(
        gateway_hookevent
            .apply_object_operations(hookevent::ApplyObjectOperationsRequest::default())
            .await,
        tonic::Code::PermissionDenied,
        &["role gateway", "ApplyObjectOperations"],
    );
    let mut operator_release =
        ReleasesClient::new(as_role(&certs, &r, Role::Release, Role::Operator)?);
    refused(
        operator_release
            .uninstall(release::UninstallRequest::default())
            .await,
        tonic::Code::PermissionDenied,
        &["role operator", "Uninstall"],
    );

    // A certificate of the right role from another CA: the handshake fails.
    let other = dir.path().join("other");
    berth_runtime::tls::generate(&other, &[])?;
    let mut foreign = BrokerClient::new(client(
        &certs,
        &b,
        Role::Broker,
        Some(identity(&other, Role::Lifecycle)?),
    )?);
    let err = foreign
        .enqueue(queue::EnqueueRequest {
            tasks: vec![task("foreign")],
        })
        .await
        .expect_err("a certificate from another CA must be refused");
    assert_ne!(err.code(), tonic::Code::Ok);

    // Nothing got in: the broker holds no task, and lifecycle no package.
    let mut lifecycle_broker =
        BrokerClient::new(as_role(&certs, &b, Role::Broker, Role::Lifecycle)?);
    let queues = lifecycle_broker
        .dump(queue::DumpRequest {})
        .await?
        .into_inner()
        .queues;
    assert!(queues.is_empty(), "{queues:?}");
    let mut gateway_lifecycle_list =
        LifecycleClient::new(as_role(&certs, &l, Role::Lifecycle, Role::Gateway)?);
    let packages = gateway_lifecycle_list
        .list(v1::ListRequest::default())
        .await?
        .into_inner();
    assert!(packages.packages.is_empty(), "{packages:?}");
    // The right role gets in (the table is not refusing everyone).
    let accepted = lifecycle_broker
        .enqueue(queue::EnqueueRequest {
            tasks: vec![task("allowed")],
        })
        .await?
        .into_inner();
    assert_eq!(accepted.accepted, 1);

    for p in [release, hookevent, lifecycle, broker] {
        p.stop().await;
    }
    cluster.stop().await;
    Ok(())
}

/// A server must present the certificate of the role the client asked for: a worker that is
/// pointed at hookevent's port when it wants the broker refuses to talk.
#[tokio::test]
async fn a_client_refuses_a_server_of_another_role() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let database = format!("sqlite://{}", dir.path().join("lifecycle.db").display());
    let mut args = vec![
        "--listen".to_owned(),
        "127.0.0.1:0".into(),
        "--database".into(),
        database,
        "--broker".into(),
        "http://127.0.0.1:9".into(),
    ];
    args.extend(tls_args(&certs, Role::Lifecycle));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let lifecycle = Proc::start("berth-lifecycle", &args, "listening on ").await?;
    // The worker's certificate, expecting a broker at lifecycle's address.
    let mut confused = BrokerClient::new(as_role(
        &certs,
        &lifecycle.endpoint(),
        Role::Broker,
        Role::Worker,
    )?);
    let err = confused
        .lease(queue::LeaseRequest {
            worker: "w".into(),
            max: 1,
            wait_ms: 0,
        })
        .await
        .expect_err("lifecycle's certificate is not the broker's");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    lifecycle.stop().await;
    Ok(())
}

/// A service given no certificate does not start serving plain gRPC unless told to, in so many
/// words.
#[tokio::test]
async fn a_service_without_a_certificate_does_not_start() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let database = format!("sqlite://{}", dir.path().join("lifecycle.db").display());
    let out = tokio::process::Command::new(berth_tests::binary("berth-lifecycle"))
        .args(["--listen", "127.0.0.1:0", "--database", &database])
        .env_remove("BERTH_TLS_CA")
        .env_remove("BERTH_TLS_CERT")
        .env_remove("BERTH_TLS_KEY")
        .kill_on_drop(true)
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(!out.status.success(), "it served: {stderr}");
    anyhow::ensure!(
        stderr.contains("--tls-ca") && stderr.contains("--insecure-plaintext"),
        "{stderr}"
    );
    Ok(())
}
