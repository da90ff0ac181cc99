//! The gateway on its own: health, reflection, and a clear error when lifecycle is down.

use berth_proto::v1;
use berth_tests::Proc;
use futures::StreamExt;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

#[tokio::test]
async fn gateway_serves_health_and_reflection_and_names_a_missing_lifecycle() -> anyhow::Result<()>
{
    let lifecycle = berth_tests::RefusedPort::new();
    let gateway = Proc::start(
        "berth-gateway",
        &[
            "--listen",
            "127.0.0.1:0",
            "--lifecycle",
            &lifecycle.endpoint(),
            "--insecure-plaintext",
        ],
        "listening on ",
    )
    .await?;
    let endpoint = gateway.endpoint();

    let channel = tonic::transport::Endpoint::from_shared(endpoint.clone())?
        .connect()
        .await?;
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "berth.v1.Packages".into(),
        })
        .await?
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let mut reflection = ServerReflectionClient::new(channel);
    let ask = |message: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    };
    let mut answers = reflection
        .server_reflection_info(futures::stream::iter([
            ask(MessageRequest::ListServices(String::new())),
            ask(MessageRequest::FileContainingSymbol(
                "berth.v1.Packages".into(),
            )),
        ]))
        .await?
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) = answers
        .next()
        .await
        .transpose()?
        .and_then(|r| r.message_response)
    else {
        panic!("reflection did not list services");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"berth.v1.Packages".to_owned()), "{names:?}");
    // Issue 31.10: the public port lists and describes the public API only; the internal
    // services (which answer Unimplemented here) are not offered.
    let internal: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("berth.") && !n.starts_with("berth.v1."))
        .collect();
    assert!(internal.is_empty(), "internal services listed: {names:?}");
    assert!(
        matches!(
            answers
                .next()
                .await
                .transpose()?
                .and_then(|r| r.message_response),
            Some(MessageResponse::FileDescriptorResponse(_))
        ),
        "the public API is described"
    );
    let described = reflection
        .server_reflection_info(futures::stream::iter([ask(
            MessageRequest::FileContainingSymbol("berth.lifecycle.v1.Lifecycle".into()),
        )]))
        .await?
        .into_inner()
        .next()
        .await;
    match described {
        Some(Err(status)) => assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}"),
        Some(Ok(answer)) => assert!(
            matches!(
                answer.message_response,
                Some(MessageResponse::ErrorResponse(ref e)) if e.error_code == tonic::Code::NotFound as i32
            ),
            "an internal service is described on the public port: {answer:?}"
        ),
        None => panic!("reflection gave no answer"),
    }

    let mut packages = berth_tests::journey::connect(&endpoint).await?;
    let err = packages
        .list(v1::ListRequest::default())
        .await
        .expect_err("lifecycle is down");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    assert!(
        err.message().contains("lifecycle"),
        "the error names the missing service: {}",
        err.message()
    );
    gateway.stop().await;
    Ok(())
}

/// `berth queues` with lifecycle up but the queue broker down says the queues are unknown and
/// fails, instead of printing an empty table that reads as "nothing queued".
#[tokio::test]
async fn queues_with_the_broker_down_is_an_error_not_an_empty_list() -> anyhow::Result<()> {
    let broker = berth_tests::RefusedPort::new();
    let dir = tempfile::tempdir()?;
    let database = format!("sqlite://{}", dir.path().join("lifecycle.db").display());
    let lifecycle = Proc::start(
        "berth-lifecycle",
        &[
            "--listen",
            "127.0.0.1:0",
            "--database",
            &database,
            "--broker",
            &broker.endpoint(),
            "--insecure-plaintext",
        ],
        "listening on ",
    )
    .await?;
    let gateway = Proc::start(
        "berth-gateway",
        &[
            "--listen",
            "127.0.0.1:0",
            "--lifecycle",
            &lifecycle.endpoint(),
            "--insecure-plaintext",
        ],
        "listening on ",
    )
    .await?;
    let output = berth_tests::cli()
        .args(["--server", &gateway.endpoint(), "queues"])
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "berth queues must fail; stdout: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        stderr.contains("queues are unknown") && stderr.contains("queue broker"),
        "{stderr}"
    );
    gateway.stop().await;
    lifecycle.stop().await;
    Ok(())
}
