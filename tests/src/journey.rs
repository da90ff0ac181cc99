//! The walking-skeleton journey: install the example package through the public API, see its
//! objects, change its settings, validate bad settings, remove it — asserting what a user sees.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use berth_proto::v1::packages_client::PackagesClient;
use berth_proto::v1::{self, PackageKind, PackageRef};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};

/// Longest a package may take to converge. Generous: hooks and the cluster are real.
const CONVERGE_DEADLINE: Duration = Duration::from_secs(120);

/// A client of the public API presenting the harness's token ([`crate::api_token`]).
pub type Client = PackagesClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
>;

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct Bearer(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl Bearer {
    /// `token` as the header carries it.
    pub fn new(token: &str) -> anyhow::Result<Bearer> {
        Ok(Bearer(format!("Bearer {token}").parse()?))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

/// A client of the gateway (or `berth up`) at `endpoint`, with the harness's token.
pub async fn connect(endpoint: &str) -> anyhow::Result<Client> {
    connect_with(endpoint, &crate::api_token().token).await
}

/// A client of the gateway at `endpoint` presenting `token`.
pub async fn connect_with(endpoint: &str, token: &str) -> anyhow::Result<Client> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())?
        .connect()
        .await?;
    Ok(PackagesClient::with_interceptor(
        channel,
        Bearer::new(token)?,
    ))
}

pub fn hello(namespace: &str) -> PackageRef {
    PackageRef {
        kind: PackageKind::App as i32,
        name: "hello".into(),
        namespace: namespace.into(),
    }
}

/// The Update installing (or changing) the example `hello` package 1.0.0 as `r` with
/// `settings`.
pub fn hello_update(r: &PackageRef, settings: Value) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: crate::EXAMPLES_REPO.to_owned(),
        package: String::new(),
        version: "1.0.0".into(),
        settings: self::settings(settings),
        force: false,
        settings_version: 0,
        reset_settings: false,
    }
}

fn settings(v: Value) -> Option<prost_types::Struct> {
    Some(berth_proto::json::to_struct(&v))
}

/// Follows Watch on `r` for at most `deadline` until `step` answers `Ok(true)` for a package
/// update, and returns that update; `step` fails the wait by answering an error (a task error
/// the caller did not expect, a phase it must not reach). The error of a wait that ends
/// without names `what` and the last update seen.
pub async fn follow(
    client: &mut Client,
    r: &PackageRef,
    deadline: Duration,
    what: &str,
    mut step: impl FnMut(&v1::Package) -> anyhow::Result<bool>,
) -> anyhow::Result<v1::Package> {
    let watch = async {
        let mut stream = client
            .watch(v1::WatchRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        let mut last = None;
        while let Some(p) = stream.next().await {
            let p = p?;
            if step(&p)? {
                return Ok(p);
            }
            last = Some(p);
        }
        bail!("watch ended; last seen: {last:?}")
    };
    tokio::time::timeout(deadline, watch)
        .await
        .with_context(|| format!("{}: {what}: not within {deadline:?}", r.name))?
}

/// Follows Watch until `generation` is Running; fails on a reported task error.
pub async fn wait_running(
    client: &mut Client,
    r: &PackageRef,
    generation: i64,
) -> anyhow::Result<v1::Package> {
    follow(client, r, CONVERGE_DEADLINE, "Running", |p| {
        if !p.last_error.is_empty() {
            bail!("package failed: {}", p.last_error);
        }
        Ok(p.phase == "Running" && p.observed_generation >= generation)
    })
    .await
}

/// The package's condition `type_` as `(status, reason, message)`, if it has one.
pub fn condition<'a>(p: &'a v1::Package, type_: &str) -> Option<(&'a str, &'a str, &'a str)> {
    p.conditions
        .iter()
        .find(|c| c.r#type == type_)
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// The package's `seen` values, as the test fixtures' hooks record them (a list of strings under
/// `/seen`).
pub fn seen(p: &v1::Package) -> Vec<String> {
    let values = p
        .values
        .as_ref()
        .map(berth_proto::json::from_struct)
        .unwrap_or(Value::Null);
    values["seen"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Follows Watch until the package is gone (NotFound).
pub async fn wait_gone(client: &mut Client, r: &PackageRef) -> anyhow::Result<()> {
    let follow = async {
        let mut stream = client
            .watch(v1::WatchRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        while let Some(item) = stream.next().await {
            match item {
                Ok(_) => continue,
                Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
                Err(s) => bail!("watch failed: {s}"),
            }
        }
        bail!("watch ended while the package still existed")
    };
    tokio::time::timeout(CONVERGE_DEADLINE, follow)
        .await
        .context("package was not removed in time")?
}

/// Runs the whole journey against the gateway at `endpoint`, in a fresh namespace of `kube`.
pub async fn run(endpoint: &str, kube: kube::Client) -> anyhow::Result<()> {
    // berth creates the app's namespace; the guard deletes it from a real cluster whatever
    // the outcome.
    let namespace = crate::TestNamespace::to_be_created("e2e");
    let mut client = connect(endpoint).await?;
    let r = hello(&namespace);
    let update = |s: Value| hello_update(&r, s);

    // Install.
    let accepted = client
        .update(update(json!({"message": "world", "replicas": 2})))
        .await?
        .into_inner();
    assert_eq!(accepted.key, format!("{namespace}.hello"));
    let running = wait_running(&mut client, &r, accepted.generation).await?;
    assert!(
        running
            .conditions
            .iter()
            .any(|c| c.r#type == "Ready" && c.status == "True"),
        "{running:?}"
    );
    namespace.label(&kube).await?;

    // The same Update again changes nothing: same generation, no hook runs again. With
    // `force`, the package converges again under a new generation.
    let runs = |p: &v1::Package| {
        p.hooks
            .iter()
            .map(|h| (h.name.clone(), h.runs))
            .collect::<Vec<_>>()
    };
    let before = client
        .get(v1::GetRequest {
            r#ref: Some(r.clone()),
        })
        .await?
        .into_inner();
    let same = client
        .update(update(json!({"message": "world", "replicas": 2})))
        .await?
        .into_inner();
    assert_eq!(
        same.generation, accepted.generation,
        "an identical Update is a no-op"
    );
    let after = client
        .get(v1::GetRequest {
            r#ref: Some(r.clone()),
        })
        .await?
        .into_inner();
    assert_eq!(
        (after.generation, runs(&after)),
        (before.generation, runs(&before)),
        "nothing ran again"
    );
    let forced = client
        .update(v1::UpdateRequest {
            force: true,
            ..update(json!({"message": "world", "replicas": 2}))
        })
        .await?
        .into_inner();
    assert!(
        forced.generation > accepted.generation,
        "force converges again"
    );
    let rerun = wait_running(&mut client, &r, forced.generation).await?;
    let greeting_runs = |p: &v1::Package| {
        p.hooks
            .iter()
            .find(|h| h.name == "10-greeting.sh")
            .map(|h| h.runs)
    };
    assert!(
        greeting_runs(&rerun) > greeting_runs(&before),
        "the beforeHelm hook ran again: {rerun:?}"
    );
    let accepted = forced;

    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &namespace);
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), &namespace);
    let services: Api<Service> = Api::namespaced(kube.clone(), &namespace);
    let cm = cms.get("hello").await.context("ConfigMap hello")?;
    let data = cm.data.unwrap_or_default();
    assert_eq!(
        data.get("message").map(String::as_str),
        Some("world"),
        "settings reach the templates"
    );
    assert_eq!(
        data.get("greeting").map(String::as_str),
        Some("Hello, world!"),
        "the beforeHelm hook's values reach the templates"
    );
    let d = deployments.get("hello").await.context("Deployment hello")?;
    assert_eq!(d.spec.replicas, Some(2));
    services.get("hello").await.context("Service hello")?;
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), &namespace);
    let records = secrets
        .list(&ListParams::default().labels("owner=helm,name=hello"))
        .await?;
    assert_eq!(
        records.items.len(),
        1,
        "one Helm release record after the install"
    );

    // Settings change: the objects follow.
    let changed = client
        .update(update(json!({"message": "berth", "replicas": 3})))
        .await?
        .into_inner();
    assert!(changed.generation > accepted.generation);
    wait_running(&mut client, &r, changed.generation).await?;
    let data = cms.get("hello").await?.data.unwrap_or_default();
    assert_eq!(
        data.get("greeting").map(String::as_str),
        Some("Hello, berth!")
    );
    let d = deployments.get("hello").await?;
    assert_eq!(d.spec.replicas, Some(3));

    // Bad settings are refused, naming the field, and change nothing.
    let bad = v1::ValidateSettingsRequest {
        r#ref: Some(r.clone()),
        settings: settings(json!({"message": "x", "replicas": "many"})),
        settings_version: 0,
    };
    let err = client
        .validate_settings(bad)
        .await
        .expect_err("bad settings must be refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("replicas"),
        "error names the field: {}",
        err.message()
    );
    let err = client
        .update(update(json!({"replicas": 1})))
        .await
        .expect_err("missing required setting");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("message"),
        "error names the field: {}",
        err.message()
    );
    let p = client
        .get(v1::GetRequest {
            r#ref: Some(r.clone()),
        })
        .await?
        .into_inner();
    assert_eq!(
        p.generation, changed.generation,
        "a refused Update changes nothing"
    );

    // Dump shows the package with its phase, settings, values and hooks.
    let dump = client
        .dump(v1::DumpRequest::default())
        .await?
        .into_inner()
        .yaml;
    for needle in [
        format!("key: {namespace}.hello"),
        "phase: Running".into(),
        "greeting: Hello, berth!".into(),
        "10-greeting.sh".into(),
    ] {
        ensure!(dump.contains(&needle), "dump lacks {needle:?}:\n{dump}");
    }

    // Remove: everything goes.
    let removed = client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(removed.found);
    wait_gone(&mut client, &r).await?;
    let err = client
        .get(v1::GetRequest {
            r#ref: Some(r.clone()),
        })
        .await
        .expect_err("removed package");
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(cms.get_opt("hello").await?.is_none(), "ConfigMap deleted");
    assert!(
        deployments.get_opt("hello").await?.is_none(),
        "Deployment deleted"
    );
    assert!(
        services.get_opt("hello").await?.is_none(),
        "Service deleted"
    );
    let records = secrets
        .list(&ListParams::default().labels("owner=helm,name=hello"))
        .await?;
    assert!(records.items.is_empty(), "release records deleted");

    // A second Remove is a no-op.
    let again = client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(!again.found);
    Ok(())
}

/// Updates the app `name` (version 1.0.0 of the package of that name in `repository`, in
/// `namespace`) until the gateway accepts it: beyond its rate limit it refuses at once
/// (`ResourceExhausted`), and the call is made again after a moment. For the benchmarks.
pub async fn update_app(
    client: &mut Client,
    repository: &str,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    loop {
        let request = v1::UpdateRequest {
            r#ref: Some(PackageRef {
                kind: PackageKind::App as i32,
                name: name.to_owned(),
                namespace: namespace.to_owned(),
            }),
            repository: repository.to_owned(),
            version: "1.0.0".into(),
            ..Default::default()
        };
        match client.update(request).await {
            Ok(_) => return Ok(()),
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(s) => bail!("Update {name}: {s}"),
        }
    }
}

/// How many packages are Running, from one List pass (paged); `None` when the gateway
/// refused the call (its rate limit). A package with an error fails the count. For the
/// benchmarks.
pub async fn count_running(client: &mut Client) -> anyhow::Result<Option<usize>> {
    let mut count = 0;
    let mut page_token = String::new();
    loop {
        let page = match client
            .list(v1::ListRequest {
                page_size: 1000,
                page_token,
            })
            .await
        {
            Ok(page) => page.into_inner(),
            Err(s) if s.code() == tonic::Code::ResourceExhausted => return Ok(None),
            Err(s) => bail!("List: {s}"),
        };
        for p in &page.packages {
            if !p.last_error.is_empty() {
                bail!("{} failed: {}", p.key, p.last_error);
            }
        }
        count += page
            .packages
            .iter()
            .filter(|p| p.phase == "Running")
            .count();
        if page.next_page_token.is_empty() {
            return Ok(Some(count));
        }
        page_token = page.next_page_token;
    }
}
