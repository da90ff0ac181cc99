//! Every service replicated: several processes of each, on one PostgreSQL server (a database
//! per service) and one cluster, with mutual TLS. Each client flag names every replica of the
//! service it calls (`http://a,http://b`: `berth_runtime::balance`), so a replica killed
//! mid-flight leaves its peers to carry on. For the replicas tests and the failover test.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use berth_runtime::Role;

use crate::process::{Databases, Proc, lease_namespace, repositories_file, tls_args, with};

/// How many processes of each service.
#[derive(Clone, Copy, Debug)]
pub struct Replicas {
    pub broker: usize,
    pub lifecycle: usize,
    pub hookevent: usize,
    pub release: usize,
    pub worker: usize,
    pub gateway: usize,
    /// Gateway n and worker n call lifecycle n (modulo the count) only, instead of every
    /// lifecycle: a test then knows which replica serves a call and which gets the reports.
    pub pinned: bool,
}

impl Replicas {
    /// `n` of every service.
    pub fn all(n: usize) -> Replicas {
        Replicas {
            broker: n,
            lifecycle: n,
            hookevent: n,
            release: n,
            worker: n,
            gateway: n,
            pinned: false,
        }
    }
}

/// The services, by the name the topology knows them under.
pub const SERVICES: [&str; 6] = [
    "broker",
    "lifecycle",
    "hookevent",
    "release",
    "worker",
    "gateway",
];

pub struct ReplicatedTopology {
    /// The CA and the certificates of every role.
    pub certs: PathBuf,
    /// The namespace of hookevent's and release's shard Leases (`--lease-namespace`), the
    /// topology's own.
    pub lease_namespace: crate::TestNamespace,
    /// Every process, with its service's name; a killed one is `None`.
    procs: Vec<(&'static str, Option<Proc>)>,
}

impl ReplicatedTopology {
    /// Starts `replicas` of every service in `dir` against the cluster of `kubeconfig`, with
    /// their state in `databases`. `extra` appends arguments to every replica of a service
    /// (e.g. `("release", vec!["--lease-duration-secs", "3"])`); release and hookevent
    /// replicas get `--replica-id <service>-<n>`, and their shard Leases a namespace of the
    /// topology's own.
    pub async fn start(
        kubeconfig: &Path,
        dir: &Path,
        databases: &Databases,
        replicas: Replicas,
        extra: &[(&str, Vec<String>)],
    ) -> anyhow::Result<ReplicatedTopology> {
        let any = "127.0.0.1:0";
        let certs = dir.join("certs");
        berth_runtime::tls::generate(&certs, &[])?;
        let repositories = repositories_file(dir, "")?.display().to_string();
        let kc = kubeconfig.display().to_string();
        let leases = lease_namespace(kubeconfig).await?;
        let leases_name = leases.to_string();
        let record_key = crate::process::record_key_args(&certs)?;
        let mut topology = ReplicatedTopology {
            certs: certs.clone(),
            lease_namespace: leases,
            procs: Vec::new(),
        };
        let args_of = |service: &str, role: Role, n: usize, base: &[&str]| -> Vec<String> {
            let mut args: Vec<String> = base.iter().map(|a| a.to_string()).collect();
            args.extend(tls_args(&certs, role));
            if matches!(service, "release" | "hookevent") {
                args.extend(["--replica-id".to_owned(), format!("{service}-{n}")]);
            }
            if matches!(service, "release" | "hookevent") {
                args.extend(["--lease-namespace".to_owned(), leases_name.clone()]);
            }
            if service == "release" {
                args.extend(record_key.iter().cloned());
            }
            for (s, more) in extra {
                if *s == service {
                    args.extend(more.iter().cloned());
                }
            }
            args
        };

        for n in 0..replicas.broker {
            let args = args_of(
                "broker",
                Role::Broker,
                n,
                &["serve", "--listen", any, "--database", &databases.queue],
            );
            topology
                .spawn("broker", "berth-queue", &args, "listening on ")
                .await?;
        }
        let b = topology.endpoints("broker");
        for n in 0..replicas.lifecycle {
            let base = [
                "--listen",
                any,
                "--database",
                &databases.lifecycle,
                "--broker",
                &b,
                "--repositories",
                &repositories,
            ];
            let args = args_of("lifecycle", Role::Lifecycle, n, &base);
            topology
                .spawn("lifecycle", "berth-lifecycle", &args, "listening on ")
                .await?;
        }
        let l = topology.endpoints("lifecycle");
        for n in 0..replicas.hookevent {
            let base = [
                "--listen",
                any,
                "--database",
                &databases.hookevent,
                "--broker",
                &b,
                "--lifecycle",
                &l,
                "--kubeconfig",
                &kc,
                "--webhook-listen",
                any,
            ];
            let args = args_of("hookevent", Role::Hookevent, n, &base);
            topology
                .spawn("hookevent", "berth-hookevent", &args, "listening on ")
                .await?;
        }
        for n in 0..replicas.release {
            let base = ["--listen", any, "--lifecycle", &l, "--kubeconfig", &kc];
            let args = args_of("release", Role::Release, n, &base);
            topology
                .spawn("release", "berth-release", &args, "listening on ")
                .await?;
        }
        let (r, h) = (
            topology.endpoints("release"),
            topology.endpoints("hookevent"),
        );
        let lifecycle_of = |topology: &ReplicatedTopology, n: usize| match replicas.pinned {
            true => topology.all("lifecycle")[n % replicas.lifecycle].endpoint(),
            false => l.clone(),
        };
        for n in 0..replicas.worker {
            let l = lifecycle_of(&topology, n);
            let cache = dir.join(format!("packages-{n}")).display().to_string();
            let base = [
                "work",
                "--broker",
                &b,
                "--lifecycle",
                &l,
                "--release",
                &r,
                "--hookevent",
                &h,
                "--cache-dir",
                &cache,
                "--repositories",
                &repositories,
            ];
            let args = args_of("worker", Role::Worker, n, &base);
            topology
                .spawn("worker", "berth-queue", &args, "worker ")
                .await?;
        }
        for n in 0..replicas.gateway {
            let l = lifecycle_of(&topology, n);
            let args = args_of(
                "gateway",
                Role::Gateway,
                n,
                &["--listen", any, "--lifecycle", &l],
            );
            topology
                .spawn("gateway", "berth-gateway", &args, "listening on ")
                .await?;
        }
        Ok(topology)
    }

    async fn spawn(
        &mut self,
        service: &'static str,
        binary: &str,
        args: &[String],
        announce: &str,
    ) -> anyhow::Result<()> {
        let proc = Proc::start(binary, &with(&[], args), announce)
            .await
            .with_context(|| format!("starting {service} #{}", self.all(service).len()))?;
        self.procs.push((service, Some(proc)));
        Ok(())
    }

    /// The live processes of `service`, in start order.
    pub fn all(&self, service: &str) -> Vec<&Proc> {
        self.procs
            .iter()
            .filter(|(s, _)| *s == service)
            .filter_map(|(_, p)| p.as_ref())
            .collect()
    }

    /// The `n`th process of `service` (start order, killed ones counted), if it lives.
    pub fn get(&self, service: &str, n: usize) -> Option<&Proc> {
        self.procs
            .iter()
            .filter(|(s, _)| *s == service)
            .nth(n)
            .and_then(|(_, p)| p.as_ref())
    }

    /// Every live replica of `service` as one client flag value (`http://a,http://b`).
    pub fn endpoints(&self, service: &str) -> String {
        self.all(service)
            .iter()
            .map(|p| p.endpoint())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kills the `n`th process of `service` with SIGKILL (no chance to clean up) and waits
    /// until it is gone.
    pub async fn kill(&mut self, service: &str, n: usize) -> anyhow::Result<()> {
        let slot = self
            .procs
            .iter_mut()
            .filter(|(s, _)| *s == service)
            .nth(n)
            .with_context(|| format!("no {service} #{n}"))?;
        let proc = slot
            .1
            .take()
            .with_context(|| format!("{service} #{n} is already dead"))?;
        proc.kill().await;
        Ok(())
    }

    pub async fn stop(self) {
        // Clients first, then what they call.
        let mut procs = self.procs;
        for service in SERVICES.iter().rev() {
            for (s, p) in procs.iter_mut() {
                if *s == *service
                    && let Some(p) = p.take()
                {
                    p.stop().await;
                }
            }
        }
    }
}

/// Shard → (holder, Lease) of `service`'s shard Leases (`berth-<service>-shard-<i>`, labelled
/// `berth.io/<service>-shard`) that have a holder, as the replicas tests watch them.
pub async fn shard_holders(
    leases: &kube::Api<k8s_openapi::api::coordination::v1::Lease>,
    service: &str,
) -> anyhow::Result<
    std::collections::BTreeMap<u32, (String, k8s_openapi::api::coordination::v1::Lease)>,
> {
    let list = leases
        .list(&kube::api::ListParams::default().labels(&format!("berth.io/{service}-shard")))
        .await?;
    let prefix = format!("berth-{service}-shard-");
    Ok(list
        .items
        .into_iter()
        .filter_map(|l| {
            let shard = l
                .metadata
                .name
                .as_deref()?
                .strip_prefix(prefix.as_str())?
                .parse()
                .ok()?;
            let holder = l.spec.as_ref()?.holder_identity.clone()?;
            (!holder.is_empty()).then_some((shard, (holder, l)))
        })
        .collect())
}
