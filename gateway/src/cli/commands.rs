//! What each command does.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use berth_proto::v1::packages_client::PackagesClient;
use berth_proto::v1::{self, PackageKind, PackageRef};
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::args::{Cli, Command, KindArg, Target};
use super::output;

type Client = PackagesClient<
    tonic::service::interceptor::InterceptedService<
        super::retry::Retrying<tonic::transport::Channel>,
        Bearer,
    >,
>;

/// Adds the bearer token, when given, to every call.
#[derive(Clone)]
pub struct Bearer(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// Refuses to send a bearer token in clear text over a network: with a token, the server must
/// be `https://` or on this machine (loopback).
pub fn check_token_transport(uri: &http::Uri, has_token: bool) -> Result<(), String> {
    if !has_token || uri.scheme_str() == Some("https") {
        return Ok(());
    }
    let host = uri.host().unwrap_or_default();
    if is_local(uri) {
        Ok(())
    } else {
        Err(format!(
            "refusing to send the bearer token over plain HTTP to {host}: use https:// (with --ca-file for a private CA), or a loopback address"
        ))
    }
}

/// Whether `uri` names this machine (a loopback address or `localhost`).
fn is_local(uri: &http::Uri) -> bool {
    let host = uri.host().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare == "localhost"
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The token the CLI sends to `server` and where it came from (see
/// [`crate::auth::find_cli_token`]).
fn cli_token(cli: &Cli) -> Result<Option<(String, crate::auth::TokenSource)>, String> {
    let local = cli.server.parse::<http::Uri>().is_ok_and(|u| is_local(&u));
    crate::auth::find_cli_token(cli.token_file.as_deref(), local).map_err(|e| match e {
        crate::auth::TokenError::File { .. } if cli.token_file.is_some() => {
            format!("--token-file {e}")
        }
        e => e.to_string(),
    })
}

/// How long connecting to the gateway (TCP, TLS, HTTP/2) may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(15);

async fn connect(cli: &Cli) -> Result<Client, String> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(cli.server.clone())
        .map_err(|e| format!("--server {:?}: {e}", cli.server))?
        .connect_timeout(Duration::from_secs(5));
    let token = cli_token(cli)?;
    check_token_transport(endpoint.uri(), token.is_some())?;
    if endpoint.uri().scheme_str() == Some("https") {
        let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
        if let Some(path) = &cli.ca_file {
            let pem =
                std::fs::read(path).map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| format!("--server {:?}: TLS: {e}", cli.server))?;
    }
    // The TCP connect is bounded above; the TLS and HTTP/2 handshakes after it are bounded
    // here, so a server that takes the connection and never answers is an error, not a hang.
    let connected = tokio::time::timeout(CONNECT_WITHIN, endpoint.connect())
        .await
        .map_err(|_| {
            format!(
                "cannot reach berth at {}: no answer to the connection within {}s",
                cli.server,
                CONNECT_WITHIN.as_secs()
            )
        })?;
    let channel = connected.map_err(|e| {
        format!(
            "cannot reach berth at {}: {e} (is `berth up` running? set --server or BERTH_SERVER)",
            cli.server
        )
    })?;
    let token = match token {
        Some((t, source)) => Some(
            format!("Bearer {t}")
                .parse()
                .map_err(|_| format!("the token from {source}: not a valid header value"))?,
        ),
        None => None,
    };
    let channel = super::retry::Retrying::new(channel, super::retry::RETRY_FOR);
    Ok(PackagesClient::with_interceptor(channel, Bearer(token))
        .max_decoding_message_size(berth_runtime::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(berth_runtime::MAX_MESSAGE_BYTES))
}

/// `berth health`: one standard health check, bounded in time.
async fn health(
    cli: &Cli,
    endpoint: &str,
    server_name: Option<&str>,
    service: &str,
) -> Result<ExitCode, String> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut target = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| format!("{endpoint:?}: {e}"))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    if target.uri().scheme_str() == Some("https") {
        let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
        if let Some(path) = &cli.ca_file {
            let pem =
                std::fs::read(path).map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        if let Some(name) = server_name {
            tls = tls.domain_name(name);
        }
        target = target
            .tls_config(tls)
            .map_err(|e| format!("{endpoint:?}: TLS: {e}"))?;
    }
    let channel = target
        .connect()
        .await
        .map_err(|e| format!("cannot reach {endpoint}: {e}"))?;
    let answer = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .map_err(call_error)?
        .into_inner();
    let status = ServingStatus::try_from(answer.status).unwrap_or(ServingStatus::Unknown);
    println!("{}", status.as_str_name());
    Ok(if status == ServingStatus::Serving {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A failed call as the message the user sees.
fn call_error(status: tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

fn package_ref(t: &Target) -> PackageRef {
    PackageRef {
        kind: match t.kind.unwrap_or(KindArg::App) {
            KindArg::App => PackageKind::App,
            KindArg::Module => PackageKind::Module,
        } as i32,
        name: t.name.clone(),
        namespace: t.namespace.clone().unwrap_or_default(),
    }
}

/// The package `t` names, its kind inferred when not given (issue 31.7): without `--kind` and
/// `--namespace`, NAME is the app in the default namespace if that exists, else the module NAME
/// if that exists, else the app (whose absence lifecycle then reports).
async fn installed_ref(client: &mut Client, t: &Target) -> Result<PackageRef, String> {
    let app = package_ref(t);
    if t.kind.is_some() || t.namespace.is_some() {
        return Ok(app);
    }
    let module = PackageRef {
        kind: PackageKind::Module as i32,
        ..app.clone()
    };
    for candidate in [&app, &module] {
        let found = client
            .get(v1::GetRequest {
                r#ref: Some(candidate.clone()),
            })
            .await;
        match found {
            Ok(_) => return Ok(candidate.clone()),
            Err(status) if status.code() == tonic::Code::NotFound => continue,
            // A caller who may validate but not read: no inference, the default kind.
            Err(status) if status.code() == tonic::Code::PermissionDenied => break,
            Err(status) => return Err(call_error(status)),
        }
    }
    Ok(app)
}

/// Reads a settings file (YAML or JSON; JSON is YAML) into a Struct.
fn read_settings(path: &Path) -> Result<prost_types::Struct, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--settings {}: {e}", path.display()))?;
    let value: Value = if text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_saphyr::from_str(&text)
            .map_err(|e| format!("--settings {}: not valid YAML or JSON: {e}", path.display()))?
    };
    match value {
        Value::Object(_) => Ok(berth_proto::json::to_struct(&value)),
        Value::Null => Ok(prost_types::Struct::default()),
        _ => Err(format!(
            "--settings {}: must be a mapping of setting names to values",
            path.display()
        )),
    }
}

/// `berth up`'s repositories: the file's, then each `--repository`, then the roots; with no
/// root anywhere, the directory it was started in (so `--repo examples/packages` works from the
/// checkout).
fn up_repositories(
    file: Option<&std::path::Path>,
    flags: &[String],
    roots: &[std::path::PathBuf],
) -> Result<berth_package::Repositories, String> {
    let mut repos = match file {
        Some(path) => berth_package::Repositories::load(path).map_err(|e| e.to_string())?,
        None => berth_package::Repositories::default(),
    };
    let cwd = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    for flag in flags {
        repos.add_flag(flag, &cwd).map_err(|e| e.to_string())?;
    }
    for root in roots {
        repos
            .add_root(&cwd.join(root))
            .map_err(|e| format!("--repository-root: {e}"))?;
    }
    if repos.roots().is_empty() {
        repos
            .add_root(&cwd)
            .map_err(|e| format!("--repository-root: {e}"))?;
    }
    Ok(repos)
}

/// Runs the command; an `Unauthenticated` answer says where the CLI looked for a token.
pub async fn run(cli: Cli) -> Result<ExitCode, String> {
    if cli.token.is_some() {
        return Err(crate::auth::TOKEN_FLAG_REFUSED.to_owned());
    }
    let result = command(&cli).await;
    match result {
        Err(message) if message.starts_with("Unauthenticated:") => {
            let source = cli_token(&cli).ok().flatten().map(|(_, s)| s);
            Err(format!(
                "{message} ({})",
                crate::auth::unauthenticated_hint(source.as_ref())
            ))
        }
        other => other,
    }
}

async fn command(cli: &Cli) -> Result<ExitCode, String> {
    match &cli.command {
        Command::Up {
            data_dir,
            listen,
            kubeconfig,
            no_simulate,
            hook_timeout,
            ready_timeout,
            concurrency,
            metrics_listen,
            hook_metrics_listen,
            views_listen,
            hook_tmp_dir,
            hook_isolation,
            validation_timeout,
            tls,
            tls_hosts,
            repositories,
            repository,
            repository_roots,
            limits,
            log_format,
            jq,
            webhook,
            controller_webhook_listen,
            controller_webhook_url,
            watch_label_selector,
        } => {
            let repositories =
                up_repositories(repositories.as_deref(), repository, repository_roots)?;
            // Every service in this process: each span is exported under its service's name.
            let _telemetry = berth_runtime::init_all_in_one(*log_format);
            // Accepted besides berth up's own token: BERTH_TOKEN's and --token-file's.
            let mut tokens: Vec<String> = crate::auth::token_from_env().into_iter().collect();
            if let Some(path) = &cli.token_file {
                tokens.extend(crate::read_tokens(path).map_err(|e| format!("--token-file {e}"))?);
            }
            let config = crate::up::UpConfig {
                data_dir: data_dir.clone(),
                listen: *listen,
                kubeconfig: kubeconfig.clone(),
                simulate_workloads: !no_simulate,
                tokens,
                public_tls: *tls,
                tls_hosts: tls_hosts.clone(),
                limits: limits.limits(),
                hook_timeout: Duration::from_secs(*hook_timeout),
                ready_timeout: Duration::from_secs(*ready_timeout),
                worker_concurrency: *concurrency,
                metrics_listen: *metrics_listen,
                hook_metrics_listen: *hook_metrics_listen,
                views_listen: *views_listen,
                hook_tmp_dir: hook_tmp_dir.clone(),
                hook_isolation: hook_isolation.clone(),
                validation_wait: Duration::from_secs(*validation_timeout),
                jq: jq.limits(),
                webhook: webhook.listen().or_else(|| {
                    kubeconfig
                        .is_none()
                        .then(|| berth_hookevent::webhook::WebhookListen {
                            listen: ([127, 0, 0, 1], 0).into(),
                            url: None,
                        })
                }),
                repositories,
                controller_webhook: controller_webhook_listen
                    .or_else(|| kubeconfig.is_none().then(|| ([127, 0, 0, 1], 0).into()))
                    .map(|listen| berth_controller::webhook::WebhookListen {
                        listen,
                        url: controller_webhook_url.clone(),
                    }),
                controller_selector: watch_label_selector.clone(),
            };
            let shutdown = CancellationToken::new();
            tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
            crate::up::run(config, shutdown, |running| {
                // `metrics on` (as the split binaries print it) and then `listening on`, for
                // scripts and tests; the rest for people.
                if let Some(addr) = running.metrics {
                    println!("metrics on {addr}");
                }
                if let Some(addr) = running.views {
                    println!("views on {addr}");
                }
                println!("listening on {}", running.gateway);
                println!("berth is up");
                let scheme = if running.public_tls { "https" } else { "http" };
                println!("  gRPC API:   {scheme}://{}", running.gateway);
                if let Some(addr) = running.views {
                    println!("  View API:   https://{addr}/packages/<package key> (CA below)");
                }
                println!("  kubeconfig: {}", running.kubeconfig.display());
                println!(
                    "  API token:  {} (the CLI reads $BERTH_DATA_DIR/token, by default ./.berth/token; elsewhere give it --token-file FILE)",
                    running.token_file.display()
                );
                println!(
                    "  CA:         {} (services' mutual TLS{})",
                    running.tls_dir.join("ca.pem").display(),
                    if running.public_tls {
                        "; the CLI's --ca-file"
                    } else {
                        ""
                    }
                );
                if let Some(addr) = running.metrics {
                    println!("  metrics:    http://{addr}/metrics");
                }
                if let Some(addr) = running.hook_metrics {
                    println!("  hook metrics: http://{addr}/metrics");
                }
            })
            .await
            .map_err(|e| e.to_string())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Certs { out, hosts, force } => {
            let mut all = vec!["localhost".to_owned(), "127.0.0.1".into(), "::1".into()];
            all.extend(hosts.iter().cloned());
            let written = if *force {
                berth_runtime::tls::generate(out, &all).map(|()| true)
            } else {
                berth_runtime::tls::ensure_generated(out, &all)
            }
            .map_err(|e| e.to_string())?;
            if written {
                println!("wrote a CA and a certificate per role to {}", out.display());
            } else {
                println!(
                    "{} already holds a complete set; --force replaces it",
                    out.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Update {
            target,
            package,
            repo,
            version,
            settings,
            settings_version,
            reset_settings,
            force,
            wait,
            timeout,
        } => {
            let mut client = connect(cli).await?;
            // Sent as given: the server resolves it against its own configuration.
            let request = v1::UpdateRequest {
                r#ref: Some(package_ref(target)),
                repository: repo.clone(),
                package: package.clone().unwrap_or_default(),
                version: version.clone(),
                settings: settings.as_deref().map(read_settings).transpose()?,
                force: *force,
                settings_version: *settings_version,
                reset_settings: *reset_settings,
            };
            let accepted = client
                .update(request)
                .await
                .map_err(call_error)?
                .into_inner();
            println!(
                "{}: generation {} accepted",
                accepted.key, accepted.generation
            );
            if *wait {
                return wait_running(
                    &mut client,
                    target,
                    accepted.generation,
                    Duration::from_secs(*timeout),
                )
                .await;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Remove {
            target,
            force,
            wait,
            timeout,
        } => {
            let mut client = connect(cli).await?;
            let removed = client
                .remove(v1::RemoveRequest {
                    r#ref: Some(package_ref(target)),
                    force: *force,
                })
                .await
                .map_err(call_error)?
                .into_inner();
            if !removed.found {
                println!("{}: not installed; nothing to remove", removed.key);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{}: removal accepted (generation {})",
                removed.key, removed.generation
            );
            if *wait {
                return wait_gone(&mut client, target, Duration::from_secs(*timeout)).await;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Suspend { target } | Command::Resume { target } => {
            let suspend = matches!(cli.command, Command::Suspend { .. });
            let mut client = connect(cli).await?;
            let req = v1::SuspendRequest {
                r#ref: Some(package_ref(target)),
            };
            let answer = if suspend {
                client.suspend(req).await
            } else {
                client.resume(req).await
            };
            let answer = answer.map_err(call_error)?.into_inner();
            let state = if suspend { "suspended" } else { "resumed" };
            if answer.changed {
                println!("{}: {state}", answer.key);
            } else {
                println!("{}: {state} already", answer.key);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Render(args) => super::release::render(args),
        Command::Release(args) => super::release::release(args).await,
        Command::Package(args) => super::package::package(args).await,
        Command::Operator(args) => match &args.command {
            super::operator::OperatorCommand::Views { target, output } => {
                let got = connect(cli)
                    .await?
                    .get_views(v1::GetViewsRequest {
                        r#ref: Some(package_ref(target)),
                    })
                    .await
                    .map_err(call_error)?
                    .into_inner();
                if !got.running {
                    return Err(format!(
                        "{}: no operators running (the package has none, or is not Running)",
                        target.name
                    ));
                }
                let objects: Vec<Value> = got
                    .objects
                    .iter()
                    .map(berth_proto::json::from_struct)
                    .collect();
                super::operator::print_views(&objects, *output)?;
                Ok(ExitCode::SUCCESS)
            }
            _ => super::operator::operator(args),
        },
        Command::Dump => {
            // Paged: each page is its own YAML document.
            let mut client = connect(cli).await?;
            let mut page_token = String::new();
            let mut first = true;
            loop {
                let dump = client
                    .dump(v1::DumpRequest {
                        page_size: 0,
                        page_token,
                    })
                    .await
                    .map_err(call_error)?
                    .into_inner();
                if !first {
                    println!("---");
                }
                first = false;
                print!("{}", dump.yaml);
                if dump.next_page_token.is_empty() {
                    break;
                }
                page_token = dump.next_page_token;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Queues => {
            // Every queue is listed on the first page of the dump.
            let dump = connect(cli)
                .await?
                .dump(v1::DumpRequest {
                    page_size: 1,
                    page_token: String::new(),
                })
                .await
                .map_err(call_error)?
                .into_inner();
            print!("{}", super::queues::table(&dump.yaml)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate {
            target,
            settings,
            settings_version,
        } => {
            let settings = read_settings(settings)?;
            let mut client = connect(cli).await?;
            let request = v1::ValidateSettingsRequest {
                r#ref: Some(installed_ref(&mut client, target).await?),
                settings: Some(settings),
                settings_version: *settings_version,
            };
            let answer = client
                .validate_settings(request)
                .await
                .map_err(call_error)?
                .into_inner();
            print!("{}", output::validation(&answer));
            if let Some(converted) = &answer.converted_settings {
                print!(
                    "{}",
                    output::converted_settings_yaml(
                        *settings_version,
                        answer.settings_version,
                        converted
                    )
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Get { target } => {
            let p = connect(cli)
                .await?
                .get(v1::GetRequest {
                    r#ref: Some(package_ref(target)),
                })
                .await
                .map_err(call_error)?
                .into_inner();
            print!("{}", output::package_yaml(&p));
            Ok(ExitCode::SUCCESS)
        }
        Command::Health {
            endpoint,
            tls_server_name,
            service,
        } => health(cli, endpoint, tls_server_name.as_deref(), service).await,
        Command::List => {
            let mut client = connect(cli).await?;
            let mut packages = vec![];
            let mut page_token = String::new();
            loop {
                let page = client
                    .list(v1::ListRequest {
                        page_size: 0,
                        page_token,
                    })
                    .await
                    .map_err(call_error)?
                    .into_inner();
                packages.extend(page.packages);
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            print!("{}", output::table(&packages));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Follows the package until `generation` is Running, or a task of it fails.
async fn wait_running(
    client: &mut Client,
    target: &Target,
    generation: i64,
    timeout: Duration,
) -> Result<ExitCode, String> {
    let follow = async {
        let mut stream = client
            .watch(v1::WatchRequest {
                r#ref: Some(package_ref(target)),
            })
            .await
            .map_err(call_error)?
            .into_inner();
        let mut last = String::new();
        while let Some(item) = stream.next().await {
            let p = item.map_err(call_error)?;
            if p.generation > generation {
                return Err(format!(
                    "{}: superseded by generation {}",
                    p.key, p.generation
                ));
            }
            let line = output::progress(&p);
            if line != last {
                println!("{line}");
                last = line;
            }
            if p.phase == "Failed" && p.generation == generation {
                return Err(format!(
                    "{}: failed: {} (berth retries nothing until the next update)",
                    p.key, p.last_error
                ));
            }
            if !p.last_error.is_empty() {
                return Err(format!(
                    "{}: {} (berth keeps retrying; see `berth get {}`)",
                    p.key, p.last_error, target.name
                ));
            }
            if p.phase == "Running" && p.observed_generation >= generation {
                return Ok(ExitCode::SUCCESS);
            }
        }
        Err("the gateway closed the watch".to_owned())
    };
    tokio::time::timeout(timeout, follow).await.map_err(|_| {
        format!(
            "timed out after {}s waiting for the package to be Running",
            timeout.as_secs()
        )
    })?
}

/// Follows the package until it is gone; a timeout says what holds the removal, when the
/// package says (`Ready=False RemoveBlocked`).
async fn wait_gone(
    client: &mut Client,
    target: &Target,
    timeout: Duration,
) -> Result<ExitCode, String> {
    let mut held = None;
    let follow = async {
        let mut stream = client
            .watch(v1::WatchRequest {
                r#ref: Some(package_ref(target)),
            })
            .await
            .map_err(call_error)?
            .into_inner();
        let mut last = String::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(p) => {
                    let line = output::progress(&p);
                    if line != last {
                        println!("{line}");
                        last = line;
                    }
                    held = output::removal_held(&p);
                }
                Err(s) if s.code() == tonic::Code::NotFound => {
                    println!("removed");
                    return Ok(ExitCode::SUCCESS);
                }
                Err(s) => return Err(call_error(s)),
            }
        }
        // The stream ends without an item when the package was gone before it started.
        match client
            .get(v1::GetRequest {
                r#ref: Some(package_ref(target)),
            })
            .await
        {
            Err(s) if s.code() == tonic::Code::NotFound => {
                println!("removed");
                Ok(ExitCode::SUCCESS)
            }
            _ => Err("the gateway closed the watch".to_owned()),
        }
    };
    let done = tokio::time::timeout(timeout, follow).await;
    done.map_err(|_| {
        let mut text = format!(
            "timed out after {}s waiting for the removal",
            timeout.as_secs()
        );
        if let Some(held) = &held {
            text.push_str(": ");
            text.push_str(held);
        }
        text
    })?
}

#[cfg(test)]
mod tests {
    use super::check_token_transport;

    #[test]
    fn a_token_goes_only_over_tls_or_to_this_machine() {
        let check = |uri: &str, token| check_token_transport(&uri.parse().unwrap(), token);
        for ok in [
            "http://127.0.0.1:7070",
            "http://localhost:7070",
            "http://[::1]:7070",
            "https://berth.example.com",
        ] {
            assert!(check(ok, true).is_ok(), "{ok}");
        }
        let err = check("http://berth.example.com:7070", true).unwrap_err();
        assert!(
            err.contains("plain HTTP") && err.contains("berth.example.com"),
            "{err}"
        );
        assert!(check("http://10.1.2.3:7070", true).is_err());
        assert!(
            check("http://berth.example.com:7070", false).is_ok(),
            "no token, no secret"
        );
    }
}
