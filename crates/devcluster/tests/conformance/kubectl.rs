//! kubectl against the cluster: `get -A` and client-side `apply -f` (twice, so the
//! second computes a three-way patch), when /usr/bin/kubectl exists.

use std::path::Path;
use std::process::Command;

use crate::common::{namespace, target};

const KUBECTL: &str = "/usr/bin/kubectl";

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn kubectl_get_and_apply() {
    if !Path::new(KUBECTL).exists() {
        eprintln!("skipped: {KUBECTL} not installed");
        return;
    }
    let t = target().await;
    let ns = namespace(&t.client, "kubectl").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.yaml");
    let write = |image: &str| {
        std::fs::write(&manifest, format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  a: \"1\"\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n"
        )).expect("manifest");
    };
    let kc = t.kubeconfig.clone();
    let path = manifest.to_str().expect("utf-8 path").to_string();
    write("nginx:1");
    let (kc2, p2) = (kc.clone(), path.clone());
    let first = tokio::task::spawn_blocking(move || kubectl(&kc2, &["apply", "-f", &p2]))
        .await
        .expect("join");
    assert!(
        first.contains("configmap/settings created")
            && first.contains("deployment.apps/web created"),
        "{first}"
    );
    write("nginx:2");
    let (kc2, p2) = (kc.clone(), path.clone());
    let second = tokio::task::spawn_blocking(move || kubectl(&kc2, &["apply", "-f", &p2]))
        .await
        .expect("join");
    assert!(
        second.contains("configmap/settings unchanged")
            && second.contains("deployment.apps/web configured"),
        "{second}"
    );
    let (kc2, ns2) = (kc.clone(), ns.clone());
    let image = tokio::task::spawn_blocking(move || {
        kubectl(
            &kc2,
            &[
                "get",
                "deployment",
                "web",
                "-n",
                &ns2,
                "-o",
                "jsonpath={.spec.template.spec.containers[0].image}",
            ],
        )
    })
    .await
    .expect("join");
    assert_eq!(image, "nginx:2");
    let listing = tokio::task::spawn_blocking(move || kubectl(&kc, &["get", "configmaps", "-A"]))
        .await
        .expect("join");
    assert!(
        listing
            .lines()
            .any(|l| l.contains(&ns) && l.contains("settings")),
        "{listing}"
    );
}
