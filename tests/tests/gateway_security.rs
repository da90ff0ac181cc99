//! The gateway's public listener (issue 16.2, issue 30 attacks 9 and 11): bearer tokens from a
//! file or the environment only (never a command line; none: the gateway does not start), TLS,
//! and request limits keyed by the verified caller, each refusal shown through the real
//! processes.

use berth_proto::v1;
use berth_proto::v1::packages_client::PackagesClient;
use berth_runtime::Role;
use berth_tests::Proc;
use berth_tests::process::tls_args;
use tonic::transport::Channel;

/// Lifecycle (broker unreachable: List and Watch do not need it) and a gateway in front of
/// it, both with certificates from `certs`, the gateway with `gateway_args` added.
async fn start(
    dir: &std::path::Path,
    certs: &std::path::Path,
    gateway_args: &[&str],
) -> anyhow::Result<(Proc, Proc)> {
    let database = format!("sqlite://{}", dir.join("lifecycle.db").display());
    let mut args = vec![
        "--listen".to_owned(),
        "127.0.0.1:0".into(),
        "--database".into(),
        database,
        "--broker".into(),
        "http://127.0.0.1:9".into(),
    ];
    args.extend(tls_args(certs, Role::Lifecycle));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let lifecycle = Proc::start("berth-lifecycle", &args, "listening on ").await?;
    let endpoint = lifecycle.endpoint();
    let mut args: Vec<String> = ["--listen", "127.0.0.1:0", "--lifecycle", &endpoint]
        .into_iter()
        .chain(gateway_args.iter().copied())
        .map(str::to_owned)
        .collect();
    args.extend(tls_args(certs, Role::Gateway));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gateway = Proc::start("berth-gateway", &args, "listening on ").await?;
    Ok((lifecycle, gateway))
}

fn with_token(
    channel: Channel,
    token: &str,
) -> PackagesClient<
    tonic::service::interceptor::InterceptedService<
        Channel,
        impl tonic::service::Interceptor + use<>,
    >,
> {
    let value: tonic::metadata::MetadataValue<_> =
        format!("Bearer {token}").parse().expect("ascii token");
    PackagesClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
        req.metadata_mut().insert("authorization", value.clone());
        Ok(req)
    })
}

#[tokio::test]
async fn tokens_from_a_file_and_a_rate_per_caller() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# operators\nalpha\n\nbeta\n")?;
    let tokens = tokens.display().to_string();
    // No refill: each caller has exactly its burst of calls.
    let (lifecycle, gateway) = start(
        dir.path(),
        &certs,
        &[
            "--token-file",
            &tokens,
            "--rate-per-caller",
            "0",
            "--rate-burst",
            "2",
        ],
    )
    .await?;
    let channel = tonic::transport::Endpoint::from_shared(gateway.endpoint())?.connect_lazy();

    let err = PackagesClient::new(channel.clone())
        .list(v1::ListRequest::default())
        .await
        .expect_err("no token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    let err = with_token(channel.clone(), "gamma")
        .list(v1::ListRequest::default())
        .await
        .expect_err("a token not in the file");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");

    let mut alpha = with_token(channel.clone(), "alpha");
    alpha.list(v1::ListRequest::default()).await?;
    alpha.list(v1::ListRequest::default()).await?;
    let err = alpha
        .list(v1::ListRequest::default())
        .await
        .expect_err("alpha's burst is spent");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("rate limit"), "{}", err.message());
    // A bucket that never refills sends no hint to wait for: the CLI gives up at once.
    let alpha_file = dir.path().join("alpha");
    std::fs::write(&alpha_file, "alpha\n")?;
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        tokio::process::Command::new(berth_tests::binary("berth"))
            .args(["--server", &gateway.endpoint(), "--token-file"])
            .arg(&alpha_file)
            .arg("list")
            .output(),
    )
    .await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("rate limit"),
        "{stderr}"
    );
    // Another caller is not held back by alpha.
    with_token(channel, "beta")
        .list(v1::ListRequest::default())
        .await?;
    gateway.stop().await;
    lifecycle.stop().await;
    Ok(())
}

/// Issue 31.10: a script of CLI calls faster than the rate limit loses none. The gateway's
/// refusal says when a call would be admitted (`retry-after-ms`), and the CLI waits that long
/// and sends it again, as kubectl does on a 429: twelve `berth list`s at once, for one caller
/// allowed two at once and four a second, all succeed.
#[tokio::test]
async fn the_cli_waits_out_the_rate_limit() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alpha\n")?;
    let tokens = tokens.display().to_string();
    let (lifecycle, gateway) = start(
        dir.path(),
        &certs,
        &[
            "--token-file",
            &tokens,
            "--rate-per-caller",
            "4",
            "--rate-burst",
            "2",
        ],
    )
    .await?;
    let endpoint = gateway.endpoint();
    let calls = (0..12).map(|_| {
        tokio::process::Command::new(berth_tests::binary("berth"))
            .args(["--server", &endpoint, "--token-file", &tokens, "list"])
            .output()
    });
    let outputs = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        futures::future::join_all(calls),
    )
    .await?;
    let failed: Vec<String> = outputs
        .into_iter()
        .map(|o| o.map_err(anyhow::Error::from))
        .filter_map(|o| match o {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).into_owned()),
            Err(e) => Some(e.to_string()),
        })
        .collect();
    gateway.stop().await;
    lifecycle.stop().await;
    anyhow::ensure!(
        failed.is_empty(),
        "calls lost to the rate limit: {failed:?}"
    );
    Ok(())
}

#[tokio::test]
async fn watch_streams_over_the_limit_are_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let (lifecycle, gateway) = start(dir.path(), &certs, &["--max-watches", "1"]).await?;
    let mut client = berth_tests::journey::connect(&gateway.endpoint()).await?;
    let open = client
        .watch(v1::WatchRequest { r#ref: None })
        .await?
        .into_inner();
    let err = client
        .watch(v1::WatchRequest { r#ref: None })
        .await
        .expect_err("one Watch is open already");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message()
            .contains("too many open Watch streams (at most 1"),
        "{}",
        err.message()
    );
    // Other calls are not Watch streams: they still go through.
    client.list(v1::ListRequest::default()).await?;
    drop(open);
    gateway.stop().await;
    lifecycle.stop().await;
    Ok(())
}

/// `berth certs` writes a set; the gateway serves its public API over TLS with the gateway's
/// certificate; the CLI reaches it over `https://` with the CA, and plain HTTP gets nowhere.
#[tokio::test]
async fn the_public_api_over_tls() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    let berth = berth_tests::binary("berth");
    let out = tokio::process::Command::new(&berth)
        .arg("certs")
        .arg("--out")
        .arg(&certs)
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cert = certs.join("gateway.pem").display().to_string();
    let key = certs.join("gateway-key.pem").display().to_string();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alpha\n")?;
    let tokens = tokens.display().to_string();
    let (lifecycle, gateway) = start(
        dir.path(),
        &certs,
        &[
            "--listen-tls-cert",
            &cert,
            "--listen-tls-key",
            &key,
            "--token-file",
            &tokens,
        ],
    )
    .await?;
    let port = gateway
        .addr
        .as_deref()
        .and_then(|a| a.rsplit(':').next())
        .expect("an address")
        .to_owned();
    let list = |server: String, ca: bool| {
        let mut command = tokio::process::Command::new(&berth);
        command.args(["--server", &server, "--token-file", &tokens]);
        if ca {
            command.arg("--ca-file").arg(certs.join("ca.pem"));
        }
        command.arg("list");
        command.output()
    };
    let out = list(format!("https://localhost:{port}"), true).await?;
    anyhow::ensure!(
        out.status.success(),
        "over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = list(format!("http://127.0.0.1:{port}"), false).await?;
    anyhow::ensure!(!out.status.success(), "plain HTTP to a TLS listener");
    let out = list(format!("https://localhost:{port}"), false).await?;
    anyhow::ensure!(
        !out.status.success(),
        "a certificate from an unknown CA must not be trusted"
    );
    gateway.stop().await;
    lifecycle.stop().await;
    Ok(())
}

/// `berth up --tls` serves the public API over TLS with a certificate from the CA it generated
/// (and prints where that CA is); the CLI reaches it with `--ca-file`, and with a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_up_serves_tls_with_its_own_ca() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let dd = data.display().to_string();
    let mut args = vec!["up", "--listen", "127.0.0.1:0", "--data-dir", &dd, "--tls"];
    let kc;
    if let Some(real) = berth_devcluster::test_namespace::real_cluster() {
        kc = real.display().to_string();
        args.extend(["--kubeconfig", &kc]);
    }
    let up = Proc::start("berth", &args, "listening on ").await?;
    let port = up
        .addr
        .as_deref()
        .and_then(|a| a.rsplit(':').next())
        .expect("an address")
        .to_owned();
    let ca = data.join("tls/ca.pem");
    // berth up's own token, from its data directory.
    let token = data.join("token");
    let list = |ca: Option<&std::path::Path>| {
        let mut command = berth_tests::cli();
        command.args(["--server", &format!("https://localhost:{port}")]);
        command.arg("--token-file").arg(&token);
        if let Some(ca) = ca {
            command.arg("--ca-file").arg(ca);
        }
        command.arg("list");
        command.output()
    };
    let out = list(Some(&ca)).await?;
    let over_tls = out.status.success();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let untrusted = list(None).await?.status.success();
    up.stop().await;
    anyhow::ensure!(over_tls, "over TLS with berth up's CA: {stderr}");
    anyhow::ensure!(!untrusted, "berth up's CA must not be trusted by default");
    Ok(())
}

/// Messages are bounded by one limit everywhere: a 5 MiB Update (over tonic's 4 MiB default)
/// crosses the gateway and reaches lifecycle, whose own settings check refuses it by name; one
/// over `MAX_MESSAGE_BYTES` is refused by the gateway before anything reads it.
#[tokio::test]
async fn one_message_bound_on_the_public_api() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let (lifecycle, gateway) = start(dir.path(), &certs, &[]).await?;
    let channel = tonic::transport::Endpoint::from_shared(gateway.endpoint())?.connect_lazy();
    // A client of its own that sends anything (berth's clients stop at the bound themselves).
    let mut client =
        with_token(channel, &berth_tests::api_token().token).max_encoding_message_size(usize::MAX);
    let update = |bytes: usize| v1::UpdateRequest {
        r#ref: Some(v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "big".into(),
            namespace: "default".into(),
        }),
        repository: "/nowhere".into(),
        version: "1.0.0".into(),
        settings: Some(berth_proto::json::to_struct(
            &serde_json::json!({ "blob": "x".repeat(bytes) }),
        )),
        ..Default::default()
    };
    let err = client
        .update(update(5 << 20))
        .await
        .expect_err("5 MiB of settings");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("settings"), "{}", err.message());
    let err = client
        .update(update(berth_runtime::MAX_MESSAGE_BYTES))
        .await
        .expect_err("over the message bound");
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err:?}");
    assert!(
        err.message()
            .contains(&berth_runtime::MAX_MESSAGE_BYTES.to_string()),
        "{}",
        err.message()
    );
    gateway.stop().await;
    lifecycle.stop().await;
    Ok(())
}

/// Attack 11: a caller making up a fresh token for every call is one caller (its address),
/// not a new one per token: its burst spent, every further call is refused with
/// `ResourceExhausted` whatever token it invents (or none), while a caller with a real token
/// keeps its own calls.
#[tokio::test]
async fn made_up_tokens_are_throttled_as_one_caller() -> anyhow::Result<()> {
    const BURST: usize = 5;
    let dir = tempfile::tempdir()?;
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    // No refill: each caller has exactly its burst of calls.
    let burst = BURST.to_string();
    let (lifecycle, gateway) = start(
        dir.path(),
        &certs,
        &["--rate-per-caller", "0", "--rate-burst", &burst],
    )
    .await?;
    let channel = tonic::transport::Endpoint::from_shared(gateway.endpoint())?.connect_lazy();
    let mut answers = Vec::new();
    for _ in 0..BURST + 3 {
        let guess = uuid::Uuid::new_v4().simple().to_string();
        let err = with_token(channel.clone(), &guess)
            .list(v1::ListRequest::default())
            .await
            .expect_err("a made-up token");
        answers.push(err.code());
    }
    assert_eq!(
        answers[..BURST],
        [tonic::Code::Unauthenticated; BURST],
        "{answers:?}"
    );
    assert_eq!(
        answers[BURST..],
        [tonic::Code::ResourceExhausted; 3],
        "a new token per call gets no new burst: {answers:?}"
    );
    let err = PackagesClient::new(channel.clone())
        .list(v1::ListRequest::default())
        .await
        .expect_err("no token, same address");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("rate limit"), "{}", err.message());
    // The real token's calls are its own.
    with_token(channel, &berth_tests::api_token().token)
        .list(v1::ListRequest::default())
        .await?;
    gateway.stop().await;
    lifecycle.stop().await;
    Ok(())
}

/// Attack 9, the command-line half: a token given as `--token VALUE` (readable by every
/// process in `/proc/<pid>/cmdline`) is refused by `berth-gateway`, `berth up` and the CLI,
/// each naming where a token goes instead; `berth-gateway` without any token does not start.
#[tokio::test]
async fn a_token_on_a_command_line_or_none_at_all_is_refused() -> anyhow::Result<()> {
    let run = |program: &str, args: &[&str], keep_env: bool| {
        let mut command = tokio::process::Command::new(berth_tests::binary(program));
        command.args(args).stdin(std::process::Stdio::null());
        if !keep_env {
            command
                .env_remove("BERTH_TOKEN")
                .env_remove("BERTH_TOKEN_FILE");
        }
        tokio::time::timeout(std::time::Duration::from_secs(60), command.output())
    };
    let gateway = [
        "--listen",
        "127.0.0.1:0",
        "--lifecycle",
        "http://127.0.0.1:9",
        "--insecure-plaintext",
    ];
    for (program, args) in [
        (
            "berth-gateway",
            [&gateway[..], &["--token", "s3cret"][..]].concat(),
        ),
        ("berth", vec!["--token", "s3cret", "list"]),
        ("berth", vec!["list", "--token=s3cret"]),
        (
            "berth",
            vec!["up", "--listen", "127.0.0.1:0", "--token", "s3cret"],
        ),
    ] {
        let out = run(program, &args, true).await??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{program} {args:?} must fail");
        assert!(
            stderr.contains("--token-file") && stderr.contains("BERTH_TOKEN"),
            "{program} {args:?}: {stderr}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening on"),
            "{program} {args:?} served"
        );
    }
    let out = run("berth-gateway", &gateway, false).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a gateway without a token must not start"
    );
    assert!(stderr.contains("no bearer token configured"), "{stderr}");
    Ok(())
}
