//! Install-to-Ready of a 20-object chart on the embedded dev cluster (workload simulation on),
//! berth's release manager against `helm install --wait`, printed as a table.
//!
//! berth's time runs from the install call until `wait_ready` (driven by watches, no polling)
//! sees every object Current (kstatus); helm's is the whole `helm install --wait` process. Each
//! run uses a fresh namespace. The dev cluster makes workloads ready `workload_delay` after it
//! first sees them, a floor under both tools' times, so the table has a row per delay
//! (default: 1000, 200 and 0 ms), each on its own cluster, and shows each tool's time over the
//! delay. 0 ms is what kwok's default stage policy ("stage-fast") does: pods become ready as
//! soon as kwok sees them; its "general" pod stages wait 1–6 s.
//!
//! `cargo run --release -p berth-release --example install-bench -- [--runs N] [--delay-ms MS]`

use anyhow::Context as _;
use berth_helm::helm_binary::find_helm;
use berth_release::manager::{ReleaseId, ReleaseManager};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Longest one install may take to become ready.
const READY_DEADLINE: Duration = Duration::from_secs(180);

/// Median times of one row, in seconds.
struct Row {
    delay_ms: u64,
    berth_install: f64,
    berth_ready: f64,
    helm: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| -> anyhow::Result<Option<u64>> {
        match args.iter().position(|a| a == name) {
            Some(i) => Ok(Some(
                args.get(i + 1)
                    .with_context(|| format!("{name} N"))?
                    .parse()?,
            )),
            None => Ok(None),
        }
    };
    let runs = flag("--runs")?.unwrap_or(5) as usize;
    anyhow::ensure!(runs > 0, "--runs must be at least 1");
    let delays = match flag("--delay-ms")? {
        Some(d) => vec![d],
        None => vec![1000, 200, 0],
    };
    let helm = find_helm().context("helm not found on PATH or in target/ci-tools")?;
    let dir = std::env::temp_dir().join(format!("install-bench-{}", std::process::id()));
    let _cleanup = Cleanup(dir.clone());
    std::fs::create_dir_all(&dir)?;
    let chart = dir.join("chart");
    write_chart(&chart)?;
    let files = berth_helm::template::read_chart(&chart)?;

    let mut rows = Vec::new();
    for delay_ms in delays {
        rows.push(bench(&helm, &dir, &chart, &files, runs, delay_ms).await?);
    }
    println!(
        "runs: {runs} per row (medians), chart: 20 objects (5 Deployments, 5 Services, 5 ConfigMaps, 5 ServiceAccounts)\n"
    );
    // The simulated delay is a floor under both tools' times: at a delay D no tool can do
    // better than D / (D + helm's own time) of helm. So the table also shows what each tool adds
    // on top of the delay, and their ratio, which is what tells the tools apart.
    println!(
        "| workload delay | berth install call | berth install to Ready | helm install --wait \
         | berth/helm | berth − delay | helm − delay | berth/helm over the delay |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        let delay = r.delay_ms as f64 / 1000.0;
        let (berth_own, helm_own) = (r.berth_ready - delay, r.helm - delay);
        println!(
            "| {} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.2}x | {:.0} ms | {:.0} ms | {:.2}x |",
            r.delay_ms,
            r.berth_install * 1000.0,
            r.berth_ready * 1000.0,
            r.helm * 1000.0,
            r.berth_ready / r.helm,
            berth_own * 1000.0,
            helm_own * 1000.0,
            berth_own / helm_own
        );
    }
    Ok(())
}

async fn bench(
    helm: &Path,
    dir: &Path,
    chart: &Path,
    files: &[(String, Vec<u8>)],
    runs: usize,
    delay_ms: u64,
) -> anyhow::Result<Row> {
    let cluster = berth_devcluster::DevCluster::start(berth_devcluster::DevClusterConfig {
        simulate_workloads: true,
        workload_delay: Duration::from_millis(delay_ms),
        ..Default::default()
    })
    .await?;
    let kubeconfig = dir.join(format!("kubeconfig-{delay_ms}"));
    std::fs::write(&kubeconfig, cluster.kubeconfig_yaml())?;
    let client = berth_release::process::kube_client(Some(&kubeconfig)).await?;
    let key = berth_release::record::RecordKey::load_or_generate(
        &dir.join(format!("record-{delay_ms}.key")),
    )?;
    let manager = ReleaseManager::new(client, key);

    let (mut installs, mut readies, mut helms) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        let ns = format!("berth-{run}");
        let release = ReleaseId::new("bench", &ns)?;
        let start = Instant::now();
        manager
            .install(
                &release,
                files.to_vec(),
                serde_json::json!({}),
                &Default::default(),
            )
            .await?;
        installs.push(start.elapsed().as_secs_f64());
        let seen = manager.wait_ready(&release, READY_DEADLINE).await?;
        anyhow::ensure!(seen.ready, "berth: not ready: {:?}", seen.not_ready);
        readies.push(start.elapsed().as_secs_f64());

        let ns = format!("helm-{run}");
        let start = Instant::now();
        let out = tokio::process::Command::from({
            let mut c = Command::new(helm);
            c.args(["install", "bench"])
                .arg(chart)
                .args(["-n", &ns, "--create-namespace", "--wait", "--timeout", "3m"])
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .env("HELM_CONFIG_HOME", dir.join("helm/config"))
                .env("HELM_CACHE_HOME", dir.join("helm/cache"))
                .env("HELM_DATA_HOME", dir.join("helm/data"));
            c
        })
        .kill_on_drop(true)
        .output();
        let out = tokio::time::timeout(READY_DEADLINE, out).await??;
        anyhow::ensure!(
            out.status.success(),
            "helm install failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        helms.push(start.elapsed().as_secs_f64());
    }
    Ok(Row {
        delay_ms,
        berth_install: median(installs),
        berth_ready: median(readies),
        helm: median(helms),
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write_chart(root: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(root.join("templates"))?;
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: bench\nversion: 0.1.0\n",
    )?;
    for i in 0..5 {
        let t = format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa{i}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm{i}\ndata:\n  k: v{i}\n---\n\
             apiVersion: v1\nkind: Service\nmetadata:\n  name: svc{i}\nspec:\n  selector:\n    app: app{i}\n  ports:\n    - port: 80\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app{i}\nspec:\n  replicas: 2\n  selector:\n    matchLabels:\n      app: app{i}\n  template:\n    metadata:\n      labels:\n        app: app{i}\n    spec:\n      serviceAccountName: sa{i}\n      containers:\n        - name: main\n          image: nginx:1.27\n"
        );
        std::fs::write(root.join(format!("templates/c{i}.yaml")), t)?;
    }
    Ok(())
}
