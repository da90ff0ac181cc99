//! Metrics from every service, end to end: the split topology (each service serving its own
//! `/metrics`) and `berth up` (one endpoint for all), installing a package with a chart and a
//! hook bound to its ConfigMaps, then scraping what an operator's Prometheus would, against the
//! dev cluster (or the real cluster named by `BERTH_TEST_KUBECONFIG`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail};
use berth_proto::v1;
use berth_tests::{AllInOne, Proc, SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

/// Longest a series may take to show what happened (lifecycle's phase gauges are refreshed
/// after changes, not at once).
const SCRAPE_DEADLINE: Duration = Duration::from_secs(60);
/// Between two scrapes of a page that does not show it yet.
const SCRAPE_INTERVAL: Duration = Duration::from_millis(200);

/// One scraped page: its content type and its samples.
struct Page {
    content_type: String,
    text: String,
    /// Each sample: metric name, labels, value.
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Page {
    fn parse(response: &str) -> anyhow::Result<Page> {
        let (head, text) = response
            .split_once("\r\n\r\n")
            .context("an HTTP response")?;
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_default();
        let mut samples = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (series, value) = line
                .rsplit_once(' ')
                .with_context(|| format!("a sample line: {line}"))?;
            let value: f64 = value
                .parse()
                .with_context(|| format!("a sample value: {line}"))?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, labels(rest.trim_end_matches('}'))?),
                None => (series, BTreeMap::new()),
            };
            samples.push((name.to_owned(), labels, value));
        }
        Ok(Page {
            content_type,
            text: text.to_owned(),
            samples,
        })
    }

    /// The sum of the samples of `name` whose labels include `with`.
    fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, labels, _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// Whether any sample of `name` has labels including `with`.
    fn has(&self, name: &str, with: &[(&str, &str)]) -> bool {
        self.samples.iter().any(|(n, labels, _)| {
            n == name
                && with
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The values a label takes across the samples of `name`.
    fn label_values(&self, name: &str, label: &str) -> std::collections::BTreeSet<String> {
        self.samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .filter_map(|(_, labels, _)| labels.get(label).cloned())
            .collect()
    }

    /// RPCs served by `service`'s `method` that ended with `code`.
    fn rpcs(&self, service: &str, method: &str, code: &str) -> f64 {
        self.sum(
            "berth_rpc_requests_total",
            &[("service", service), ("method", method), ("code", code)],
        )
    }

    /// Timed RPCs of `service`'s `method`.
    fn timed(&self, service: &str, method: &str) -> f64 {
        self.sum(
            "berth_rpc_request_duration_seconds_count",
            &[("service", service), ("method", method)],
        )
    }
}

/// `k="v",k2="v2"` (Prometheus label syntax, with `\"`, `\\` and `\n` escapes).
fn labels(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once("=\"")
            .with_context(|| format!("a label in {text}"))?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("an escape at the end of {text}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => bail!("an unterminated label value in {text}"),
            }
        };
        out.insert(key.to_owned(), value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    Ok(out)
}

/// The metrics address `proc` announced.
fn metrics_of(proc: &Proc) -> anyhow::Result<String> {
    proc.metrics
        .clone()
        .with_context(|| format!("{} announced no metrics port", proc.name))
}

/// Scrapes `addr` until `shows` holds for its page (or fails saying what did not show, with
/// the last page).
async fn scrape_until(
    addr: &str,
    what: &str,
    shows: impl Fn(&Page) -> bool,
) -> anyhow::Result<Page> {
    let deadline = tokio::time::Instant::now() + SCRAPE_DEADLINE;
    loop {
        let page = Page::parse(&berth_tests::scrape_metrics(addr).await?)?;
        if shows(&page) {
            return Ok(page);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{addr}: {what}: not within {SCRAPE_DEADLINE:?}; last page:\n{}",
                page.text
            );
        }
        tokio::time::sleep(SCRAPE_INTERVAL).await;
    }
}

/// What every page must be: the Prometheus text format, each family declared once (in
/// `berth up`, several services' families share the page).
fn well_formed(page: &Page) -> anyhow::Result<()> {
    anyhow::ensure!(
        page.content_type.starts_with("text/plain; version=0.0.4"),
        "content type {:?}",
        page.content_type
    );
    let mut seen = std::collections::HashSet::new();
    for line in page.text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap_or_default();
            anyhow::ensure!(seen.insert(name.to_owned()), "{name} declared twice");
        }
    }
    anyhow::ensure!(!page.text.contains("# EOF"), "an OpenMetrics page");
    Ok(())
}

fn metered(namespace: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: "metered".into(),
        namespace: namespace.into(),
    }
}

/// Installs the `metered` fixture in `namespace` through the gateway at `endpoint` and waits
/// until it runs; also makes a call that fails (Get of a package that does not exist) and
/// one of a method the API does not have.
async fn install_metered(endpoint: &str, namespace: &str) -> anyhow::Result<()> {
    let mut client = journey::connect(endpoint).await?;
    let r = metered(namespace);
    let accepted = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: berth_tests::FIXTURES_REPO.into(),
            version: "1.0.0".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, accepted.generation).await?;
    let missing = client
        .get(v1::GetRequest {
            r#ref: Some(v1::PackageRef {
                name: "absent".into(),
                ..r.clone()
            }),
        })
        .await
        .expect_err("no package named absent");
    anyhow::ensure!(missing.code() == tonic::Code::NotFound, "{missing:?}");
    // A method no descriptor declares: counted, under `other` rather than its made-up name.
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())?
        .connect()
        .await?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await?;
    // With the harness's token: unauthenticated, it would be refused before routing.
    let mut request = tonic::Request::new(());
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {}", berth_tests::api_token().token).parse()?,
    );
    let made_up = grpc
        .unary::<(), (), _>(
            request,
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/berth.v1.Packages/ConfidentialPackageName",
            ),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .expect_err("no such method");
    anyhow::ensure!(made_up.code() == tonic::Code::Unimplemented, "{made_up:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_serves_its_metrics() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = async {
        let ns = TestNamespace::create(&cluster.client, "metrics").await?;
        install_metered(&topology.gateway.endpoint(), &ns).await?;

        // The gateway: the public API's calls, by method and code; a made-up method is
        // `other`, never its own label.
        let gateway = scrape_until(&metrics_of(&topology.gateway)?, "gateway RPCs", |p| {
            p.rpcs("gateway", "berth.v1.Packages/Update", "OK") >= 1.0
                && p.rpcs("gateway", "berth.v1.Packages/Watch", "OK") >= 1.0
                && p.rpcs("gateway", "berth.v1.Packages/Get", "NotFound") >= 1.0
                && p.rpcs("gateway", "other", "Unimplemented") >= 1.0
        })
        .await?;
        well_formed(&gateway)?;
        anyhow::ensure!(
            gateway.timed("gateway", "berth.v1.Packages/Update") >= 1.0,
            "Update is timed:\n{}",
            gateway.text
        );
        anyhow::ensure!(
            !gateway.text.contains("ConfidentialPackageName"),
            "a caller's path became a label:\n{}",
            gateway.text
        );

        // Lifecycle: its RPCs (the gateway's calls, the worker's reports) and one package,
        // Running.
        let lifecycle = scrape_until(
            &metrics_of(topology.lifecycle())?,
            "lifecycle RPCs and packages by phase",
            |p| {
                p.rpcs("lifecycle", "berth.lifecycle.v1.Lifecycle/Update", "OK") >= 1.0
                    && p.rpcs("lifecycle", "berth.lifecycle.v1.Lifecycle/Report", "OK") >= 1.0
                    && p.rpcs("lifecycle", "berth.lifecycle.v1.Lifecycle/Get", "NotFound") >= 1.0
                    && p.sum("berth_packages", &[("phase", "Running")]) == 1.0
            },
        )
        .await?;
        well_formed(&lifecycle)?;
        anyhow::ensure!(
            lifecycle.sum("berth_packages", &[]) == 1.0
                && lifecycle.label_values("berth_packages", "phase").len() == 6,
            "one package, every phase a series:\n{}",
            lifecycle.text
        );

        // The broker: its RPCs (leases from the worker) beside its queue metrics.
        let broker = scrape_until(&metrics_of(topology.broker())?, "broker RPCs", |p| {
            p.rpcs("broker", "berth.queue.v1.Broker/Enqueue", "OK") >= 1.0
                && p.timed("broker", "berth.queue.v1.Broker/Lease") >= 1.0
                && p.sum(
                    "berth_queue_finished_total",
                    &[("kind", "Start"), ("outcome", "done")],
                ) >= 1.0
        })
        .await?;
        well_formed(&broker)?;

        // The worker: how long its tasks took, by kind and outcome; it serves no RPCs.
        let worker = scrape_until(&metrics_of(topology.worker())?, "task durations", |p| {
            p.sum(
                "berth_task_duration_seconds_count",
                &[("kind", "Start"), ("outcome", "done")],
            ) >= 1.0
                && p.sum(
                    "berth_task_duration_seconds_count",
                    &[("kind", "Load"), ("outcome", "done")],
                ) >= 1.0
        })
        .await?;
        well_formed(&worker)?;
        anyhow::ensure!(
            !worker.text.contains("berth_rpc_"),
            "a worker serves no RPCs:\n{}",
            worker.text
        );
        let run_seconds = worker.sum(
            "berth_task_duration_seconds_sum",
            &[("kind", "Start"), ("outcome", "done")],
        );
        anyhow::ensure!(
            run_seconds > 0.0 && run_seconds < SCRAPE_DEADLINE.as_secs_f64() * 5.0,
            "a Start took {run_seconds} s"
        );

        // Release: the install's apply, the release becoming ready, its RPCs.
        let release = scrape_until(&metrics_of(topology.release())?, "release durations", |p| {
            p.sum(
                "berth_release_apply_duration_seconds_count",
                &[("outcome", "success")],
            ) >= 1.0
                && p.sum("berth_release_ready_duration_seconds_count", &[]) >= 1.0
                && p.rpcs("release", "berth.release.v1.Releases/Install", "OK") >= 1.0
        })
        .await?;
        well_formed(&release)?;

        // hookevent: the ConfigMap watch the hook's binding opened, and the objects it saw
        // (at least the chart's ConfigMap).
        let hookevent = scrape_until(&metrics_of(topology.hookevent())?, "watches", |p| {
            p.sum("berth_watches", &[]) >= 1.0
                && p.sum("berth_watch_events_total", &[("kind", "ConfigMap")]) >= 1.0
                && p.rpcs(
                    "hookevent",
                    "berth.hookevent.v1.HookEvents/SetBindings",
                    "OK",
                ) >= 1.0
        })
        .await?;
        well_formed(&hookevent)?;
        let events_before = hookevent.sum("berth_watch_events_total", &[("kind", "ConfigMap")]);

        // Deleting the chart's ConfigMap is drift: release puts it back and counts the repair;
        // hookevent's watch sees the deletion and the re-creation.
        Api::<ConfigMap>::namespaced(cluster.client.clone(), &ns)
            .delete("metered-counted", &Default::default())
            .await?;
        scrape_until(&metrics_of(topology.release())?, "a drift repair", |p| {
            p.sum("berth_drift_repairs_total", &[("outcome", "success")]) >= 1.0
        })
        .await?;
        scrape_until(&metrics_of(topology.hookevent())?, "more events", |p| {
            p.sum("berth_watch_events_total", &[("kind", "ConfigMap")]) >= events_before + 2.0
        })
        .await?;

        // Figures, printed: what a scrape of each service costs after this journey.
        for (service, proc) in [
            ("gateway", &topology.gateway),
            ("lifecycle", topology.lifecycle()),
            ("broker", topology.broker()),
            ("worker", topology.worker()),
            ("release", topology.release()),
            ("hookevent", topology.hookevent()),
        ] {
            let started = std::time::Instant::now();
            let page = Page::parse(&berth_tests::scrape_metrics(&metrics_of(proc)?).await?)?;
            eprintln!(
                "metrics page of {service:<9} {:>4} samples {:>6} bytes, scraped in {:?}",
                page.samples.len(),
                page.text.len(),
                started.elapsed()
            );
        }
        Ok(())
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_up_serves_every_service_on_one_endpoint() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let result = async {
        let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
        let ns = TestNamespace::create(&kube, "metrics-up").await?;
        install_metered(&up.proc.endpoint(), &ns).await?;
        let page = scrape_until(&metrics_of(&up.proc)?, "every service", |p| {
            p.sum("berth_packages", &[("phase", "Running")]) == 1.0
                && p.sum(
                    "berth_task_duration_seconds_count",
                    &[("kind", "Start"), ("outcome", "done")],
                ) >= 1.0
                && p.sum("berth_release_apply_duration_seconds_count", &[]) >= 1.0
                && p.sum("berth_watches", &[]) >= 1.0
                && p.has("berth_queue_finished_total", &[("kind", "Start")])
        })
        .await?;
        well_formed(&page)?;
        // Each server's calls under its own `service` label: the health service every one of
        // them serves does not mix.
        let services = page.label_values("berth_rpc_requests_total", "service");
        for service in ["gateway", "lifecycle", "broker", "hookevent", "release"] {
            anyhow::ensure!(
                services.contains(service),
                "no RPCs of {service} in {services:?}:\n{}",
                page.text
            );
        }
        anyhow::ensure!(
            page.rpcs("lifecycle", "berth.lifecycle.v1.Lifecycle/Update", "OK") >= 1.0
                && page.rpcs("gateway", "berth.v1.Packages/Update", "OK") >= 1.0,
            "the Update went through the gateway to lifecycle:\n{}",
            page.text
        );
        Ok(())
    }
    .await;
    up.proc.stop().await;
    result
}
