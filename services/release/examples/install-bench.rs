//! Install-to-Ready of a 20-object chart on the embedded dev cluster (workload simulation on),
//! berth's release manager against `helm install --wait`, printed as a table.
//!
//! berth's time runs from the install call until Status reports every object Current (kstatus);
//! helm's is the whole `helm install --wait` process. Each run uses a fresh namespace.
//!
//! `cargo run --release -p berth-release --example install-bench -- [--runs N]`

use anyhow::Context as _;
use berth_release::manager::ReleaseManager;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Longest one install may take to become ready.
const READY_DEADLINE: Duration = Duration::from_secs(180);
/// How often berth's side asks Status whether the release is ready.
const STATUS_INTERVAL: Duration = Duration::from_millis(50);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).context("--runs N")?.parse()?,
        None => 3,
    };
    let helm = find_helm().context("helm not found on PATH or in target/ci-tools")?;
    let cluster = berth_devcluster::DevCluster::start(berth_devcluster::DevClusterConfig {
        simulate_workloads: true,
        ..Default::default()
    })
    .await?;
    let dir = std::env::temp_dir().join(format!("install-bench-{}", std::process::id()));
    let _cleanup = Cleanup(dir.clone());
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig_yaml())?;
    let chart = dir.join("chart");
    write_chart(&chart)?;
    let files = berth_release::template::read_chart(&chart)?;
    let client = berth_release::process::kube_client(Some(&kubeconfig)).await?;
    let manager = ReleaseManager::new(client);

    let mut berth_times = Vec::new();
    let mut helm_times = Vec::new();
    for run in 0..runs {
        let ns = format!("berth-{run}");
        let start = Instant::now();
        manager
            .install("bench", &ns, files.clone(), serde_json::json!({}))
            .await?;
        loop {
            let status = manager.status("bench", &ns).await?;
            if status.ready {
                break;
            }
            anyhow::ensure!(
                start.elapsed() < READY_DEADLINE,
                "berth: not ready: {:?}",
                status.not_ready
            );
            tokio::time::sleep(STATUS_INTERVAL).await;
        }
        berth_times.push(start.elapsed());

        let ns = format!("helm-{run}");
        let start = Instant::now();
        let out = tokio::process::Command::from({
            let mut c = Command::new(&helm);
            c.args(["install", "bench"])
                .arg(&chart)
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
        helm_times.push(start.elapsed());
    }
    berth_times.sort();
    helm_times.sort();
    let (b, h) = (berth_times[runs / 2], helm_times[runs / 2]);
    println!(
        "runs: {runs} (median), chart: 20 objects (5 Deployments, 5 Services, 5 ConfigMaps, 5 ServiceAccounts)\n"
    );
    println!("| install to Ready | berth | helm install --wait | berth/helm |");
    println!("|---|---|---|---|");
    println!(
        "| dev cluster, simulated workloads | {:.0} ms | {:.0} ms | {:.2}x |",
        b.as_secs_f64() * 1000.0,
        h.as_secs_f64() * 1000.0,
        b.as_secs_f64() / h.as_secs_f64()
    );
    Ok(())
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn find_helm() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("helm"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let ci = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ci-tools/helm");
        ci.is_file().then_some(ci)
    })
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
