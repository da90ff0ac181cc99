//! `berth release history|status|plan|rollback` against a release service (served in this
//! test on a loopback port, managing the embedded dev cluster), reading what a user sees.

use berth_proto::release::releases_client::ReleasesClient;
use berth_proto::release::{ChartFile, InstallRequest};
use berth_runtime::Role;
use berth_runtime::tls::CertFiles;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn chart(greeting: &str, extra: bool) -> Vec<ChartFile> {
    let mut files = vec![
        (
            "Chart.yaml",
            "apiVersion: v2\nname: shop\nversion: 0.2.0\nappVersion: \"3.1\"\n".to_string(),
        ),
        (
            "templates/cm.yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  greeting: {greeting}\n"
            ),
        ),
    ];
    if extra {
        files.push((
            "templates/extra.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n".into(),
        ));
    }
    files
        .into_iter()
        .map(|(p, c)| ChartFile {
            path: p.into(),
            content: c.into_bytes(),
        })
        .collect()
}

/// Runs `berth release --release-server URL ARGS...` with the operator's certificate from
/// `certs`; stdout, or the failure with stderr.
async fn berth(certs: &Path, server: &str, args: &[&str]) -> anyhow::Result<String> {
    let files = CertFiles::new(certs, Role::Operator);
    let out = tokio::process::Command::from({
        let mut c = Command::new(env!("CARGO_BIN_EXE_berth"));
        c.args(["release", "--release-server", server])
            .arg("--tls-ca")
            .arg(&files.ca)
            .arg("--tls-cert")
            .arg(&files.cert)
            .arg("--tls-key")
            .arg(&files.key)
            .args(args);
        c
    })
    .kill_on_drop(true)
    .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out).await??;
    anyhow::ensure!(
        out.status.success(),
        "berth {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[tokio::test]
async fn release_commands_show_history_status_plan_and_roll_back() -> anyhow::Result<()> {
    // The dev cluster, or the real one named by BERTH_TEST_KUBECONFIG (in a namespace of the
    // test's own, deleted when it ends).
    let dir = tempfile::tempdir()?;
    let (kubeconfig, dev) = match berth_devcluster::test_namespace::real_cluster() {
        Some(path) => (path, None),
        None => {
            let cluster =
                berth_devcluster::DevCluster::start(berth_devcluster::DevClusterConfig::default())
                    .await?;
            let path = dir.path().join("kubeconfig");
            std::fs::write(&path, cluster.kubeconfig_yaml())?;
            (path, Some(cluster))
        }
    };
    let cluster = berth_release::process::connect(Some(&kubeconfig), None).await?;
    let guard =
        berth_devcluster::test_namespace::TestNamespace::create(&cluster.client, "cli").await?;
    let ns: &str = &guard;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = format!("http://{}", listener.local_addr()?);
    // Mutual TLS: the test installs as a worker, the CLI speaks as the operator.
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let key = berth_release::record::RecordKey::load_or_generate(&certs.join("record.key"))?;
    let serving = tokio::spawn(berth_release::process::run(
        cluster,
        key,
        None,
        Some(berth_runtime::Tls::from_dir(&certs, Role::Release)?),
        listener,
        berth_runtime::Metrics::default(),
        shutdown.clone(),
    ));

    let worker = berth_runtime::Tls::from_dir(&certs, Role::Worker)?;
    let mut grpc = ReleasesClient::new(
        berth_runtime::endpoint(&server, Some(&worker), Role::Release)?.connect_lazy(),
    );
    for (greeting, extra) in [("one", true), ("two", false)] {
        grpc.install(InstallRequest {
            name: "shop".into(),
            namespace: ns.into(),
            files: chart(greeting, extra),
            values: None,
            package: String::new(),
            wait_ms: 0,
        })
        .await?;
    }

    let history = berth(&certs, &server, &["history", "shop", "-n", ns]).await?;
    let lines: Vec<&str> = history.lines().collect();
    assert!(lines[0].starts_with("REVISION"), "{history}");
    assert!(
        lines[1].starts_with('1')
            && lines[1].contains("superseded")
            && lines[1].contains("shop-0.2.0"),
        "{history}"
    );
    assert!(
        lines[2].starts_with('2')
            && lines[2].contains("deployed")
            && lines[2].contains("Upgrade complete"),
        "{history}"
    );

    let status = berth(&certs, &server, &["status", "shop", "-n", ns]).await?;
    assert!(
        status.contains("REVISION: 2") && status.contains("ConfigMap/settings"),
        "{status}"
    );

    // The chart on disk for `plan`: greeting three, plus the extra object again.
    let chart_dir = dir.path().join("chart");
    for f in chart("three", true) {
        let path = chart_dir.join(&f.path);
        std::fs::create_dir_all(path.parent().unwrap_or(&chart_dir))?;
        std::fs::write(path, f.content)?;
    }
    let plan = berth(
        &certs,
        &server,
        &[
            "plan",
            "shop",
            chart_dir.to_str().unwrap_or_default(),
            "-n",
            ns,
        ],
    )
    .await?;
    assert!(
        plan.contains(&format!(
            "~ update    ConfigMap/settings (namespace {ns}): data"
        )),
        "{plan}"
    );
    assert!(
        plan.contains(&format!("+ create    ConfigMap/extra (namespace {ns})")),
        "{plan}"
    );

    let rolled = berth(&certs, &server, &["rollback", "shop", "1", "-n", ns]).await?;
    assert!(rolled.contains("revision 3"), "{rolled}");
    let history = berth(&certs, &server, &["history", "shop", "-n", ns]).await?;
    assert!(
        history
            .lines()
            .nth(3)
            .is_some_and(|l| l.contains("Rollback to 1")),
        "{history}"
    );

    shutdown.cancel();
    serving.await??;
    if let Some(dev) = dev {
        dev.shutdown().await;
    }
    Ok(())
}
