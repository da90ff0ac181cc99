//! Command-line arguments.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(name = "berth", version, about = "berth: a Kubernetes package runtime")]
pub struct Cli {
    /// The gateway to talk to.
    #[arg(
        long,
        env = "BERTH_SERVER",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    pub server: String,
    /// Refused: a token on the command line is readable by every local process. Use
    /// --token-file or BERTH_TOKEN.
    #[arg(long, global = true, hide = true, value_name = "REFUSED")]
    pub token: Option<String>,
    /// The bearer token: the first in this file (one per line; `#` comments). Without it the
    /// CLI sends BERTH_TOKEN, or, to a server on this machine, the token of a `berth up`
    /// started here (`$BERTH_DATA_DIR/token`, default `.berth/token`). Sent only over TLS
    /// (`https://`) or to this machine. With `berth up`: its tokens are accepted too.
    #[arg(long, env = "BERTH_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// PEM file of the CA that signed the gateway's certificate (`https://` servers); the
    /// system's roots are trusted too.
    #[arg(long, env = "BERTH_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum KindArg {
    App,
    Module,
}

/// Which package instance a command is about.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The instance name.
    pub name: String,
    /// Namespace of an app instance (default `default`).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// `app` or `module` (default `app`; `berth validate` without it asks lifecycle which
    /// kind NAME is installed as).
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,
}

// Parsed once per process; `Up`'s many flags are not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run every berth service in this process (embedded database and dev cluster by default).
    Up {
        /// Data directory: databases, package cache, dev cluster state and kubeconfig, and the
        /// API token (`token`, 0600, generated once) every call must present; the CLI reads
        /// it there.
        #[arg(long, env = "BERTH_DATA_DIR", default_value = ".berth")]
        data_dir: PathBuf,
        /// Address of the public gRPC API.
        #[arg(long, env = "BERTH_LISTEN", default_value = "127.0.0.1:7070")]
        listen: std::net::SocketAddr,
        /// Manage this cluster instead of starting the embedded dev cluster.
        #[arg(long, env = "BERTH_KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// Do not simulate workload controllers in the dev cluster.
        #[arg(long)]
        no_simulate: bool,
        /// Seconds a hook may run before its process group is killed.
        #[arg(long, env = "BERTH_HOOK_TIMEOUT", default_value_t = 300)]
        hook_timeout: u64,
        /// Seconds a Run waits for its release to become ready before failing (and retrying).
        #[arg(long, env = "BERTH_READY_TIMEOUT", default_value_t = 300)]
        ready_timeout: u64,
        /// Tasks the in-process worker runs at once. A task spends much of its time waiting
        /// (for lifecycle, the API server, a hook); with 4 at once, a 2-core machine installing
        /// 1,000 packages sat 10–20 % idle, and with 8 they were Running 4–7 s sooner (README,
        /// "Scale").
        #[arg(long, env = "BERTH_WORKER_CONCURRENCY", default_value_t = 8)]
        concurrency: usize,
        /// Serve every service's Prometheus metrics (RPCs, packages by phase, tasks, releases,
        /// watches, the queue) and the metrics hooks write at `/metrics` on this address.
        #[arg(long, env = "BERTH_METRICS_LISTEN")]
        metrics_listen: Option<std::net::SocketAddr>,
        /// Serve the metrics hooks write, alone, at `/metrics` on this address.
        #[arg(long, env = "BERTH_HOOK_METRICS_LISTEN")]
        hook_metrics_listen: Option<std::net::SocketAddr>,
        /// Serve packages' operator views as a read-only Kubernetes-style API on this address,
        /// over TLS (`kubectl --server https://ADDR/packages/<key> --token ...
        /// --certificate-authority <data-dir>/tls/ca.pem`).
        #[arg(long, env = "BERTH_VIEWS_LISTEN")]
        views_listen: Option<std::net::SocketAddr>,
        /// Directory for hook runs' temporary files (default: the system temp directory). Put
        /// it on a tmpfs: creating those files on a disk is most of a hook's start time.
        #[arg(long, env = "BERTH_HOOK_TMP_DIR")]
        hook_tmp_dir: Option<PathBuf>,
        /// How hooks are confined. When they run as their package instances' uids, the data
        /// directory becomes searchable by others (0711) so hooks reach the package cache (or,
        /// when its parents are not searchable, the cache is a fresh directory in the temp
        /// directory); everything else in it stays the owner's (0700 directories, 0600 files).
        #[command(flatten)]
        hook_isolation: berth_worker::HookIsolationArgs,
        /// How long a ValidateSettings, or an Update changing a loaded package's settings,
        /// waits for the worker to run the package's settings check and plan the install
        /// (seconds); with no answer by then only the settings schema is checked.
        #[arg(long, env = "BERTH_VALIDATION_TIMEOUT", default_value_t = 30)]
        validation_timeout: u64,
        /// Serve the public API over TLS, with a certificate signed by the CA in
        /// `<data-dir>/tls/ca.pem` (give that to the CLI as --ca-file). Always on when
        /// --listen is not a loopback address.
        #[arg(long, env = "BERTH_GATEWAY_TLS")]
        tls: bool,
        /// A further DNS name or IP address the gateway's certificate is valid for (the name
        /// clients use when --listen is a wildcard address); repeatable.
        #[arg(long = "tls-host")]
        tls_hosts: Vec<String>,
        /// A repositories file (named repositories and repository roots; see the README's
        /// "Repositories").
        #[arg(long, env = "BERTH_REPOSITORIES")]
        repositories: Option<PathBuf>,
        /// A named repository, `NAME=SOURCE`: a directory, `archive:DIR` (`.tar.gz` archives),
        /// `https://BASE/` (archives over HTTPS) or `oci://HOST/PATH`; repeatable.
        #[arg(long = "repository", value_name = "NAME=SOURCE")]
        repository: Vec<String>,
        /// A directory under which an Update may name a repository by its relative path;
        /// repeatable. Default, when neither this nor the repositories file names a root: the
        /// directory `berth up` was started in.
        #[arg(long = "repository-root", value_name = "DIR")]
        repository_roots: Vec<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
        log_format: berth_runtime::LogFormat,
        #[command(flatten)]
        jq: berth_jq::JqArgs,
        /// hookevent's webhook server. Default with the embedded dev cluster: 127.0.0.1 on a
        /// port the OS picks; with --kubeconfig: off unless --webhook-listen is given.
        #[command(flatten)]
        webhook: berth_hookevent::webhook::WebhookArgs,
        /// Where the controller's admission webhook (berth.io resources' settings) listens.
        /// Default with the embedded dev cluster: 127.0.0.1 on a port the OS picks; with
        /// --kubeconfig: off unless given.
        #[arg(long, env = "BERTH_CONTROLLER_WEBHOOK_LISTEN")]
        controller_webhook_listen: Option<std::net::SocketAddr>,
        /// `https://HOST[:PORT]` at which the API server reaches the controller's webhook.
        #[arg(long, env = "BERTH_CONTROLLER_WEBHOOK_URL")]
        controller_webhook_url: Option<String>,
        /// Only the berth.io resources with these labels (`key=value,...`) are this berth's:
        /// several installations may share a cluster.
        #[arg(long, env = "BERTH_CONTROLLER_WATCH_LABEL_SELECTOR")]
        watch_label_selector: Option<String>,
    },
    /// Write a CA and a certificate per service role (gateway, lifecycle, broker, worker,
    /// hookevent, release, operator, controller) for split mode: `<role>.pem` and `<role>-key.pem`, to give
    /// each service as --tls-ca ca.pem --tls-cert <role>.pem --tls-key <role>-key.pem.
    Certs {
        /// Directory to write them to (created 0700; files 0600).
        #[arg(long, default_value = "certs")]
        out: PathBuf,
        /// Extra DNS names or IP addresses the certificates are valid for (the gateway's public
        /// name, for --listen-tls-cert); `localhost` and the loopback addresses always are.
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// Replace a set already in --out (a new CA: every service needs the new files).
        #[arg(long)]
        force: bool,
    },
    /// Install a package or change its version or settings.
    Update {
        #[command(flatten)]
        target: Target,
        /// The package to install (default: the instance name).
        #[arg(long)]
        package: Option<String>,
        /// The repository: a name the server configures, or a directory relative to one of its
        /// repository roots (e.g. `examples/packages` for `berth up` started in the checkout).
        #[arg(long)]
        repo: String,
        /// An exact version; for an OCI repository also a semver constraint (`~1.2`), which
        /// loads the newest tag it allows (`berth get` shows it as `resolvedVersion`).
        #[arg(long)]
        version: String,
        /// Settings as a YAML or JSON file; they replace the stored ones. Without it the stored
        /// settings are kept, across a version change too (converted with the new version's
        /// conversions, and refused, naming the field, when they no longer fit its schema).
        #[arg(long, conflicts_with = "reset_settings")]
        settings: Option<PathBuf>,
        /// The settings version the settings are written for (the package's settings schema
        /// names its own with `x-config-version`). Settings of an older version are converted
        /// with the package's `openapi/conversions/`; 0 (the default): the version of the
        /// package version being installed.
        #[arg(long, default_value_t = 0)]
        settings_version: u32,
        /// Drop the stored settings: the package runs with its schema's defaults.
        #[arg(long)]
        reset_settings: bool,
        /// Converge again (hooks and release) even when nothing changed; an identical Update
        /// is otherwise a no-op.
        #[arg(long)]
        force: bool,
        /// Wait until the package is Running (or failed), printing its phases.
        #[arg(long)]
        wait: bool,
        /// Longest to wait, in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Uninstall a package and delete everything it created.
    Remove {
        #[command(flatten)]
        target: Target,
        /// Remove it even when other packages need it (they wait until it is back).
        #[arg(long)]
        force: bool,
        /// Wait until the package is gone.
        #[arg(long)]
        wait: bool,
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Suspend a package made through the API: no new generation is accepted and its objects'
    /// drift is not repaired until `berth resume` (a package made from a berth.io resource is
    /// suspended with its `spec.suspend`).
    Suspend {
        #[command(flatten)]
        target: Target,
    },
    /// Resume a suspended package.
    Resume {
        #[command(flatten)]
        target: Target,
    },
    /// Ask a berth service (any of them, not only the gateway) whether it serves, with the
    /// standard gRPC health check; exits 0 when it answers SERVING. For container
    /// healthchecks: `berth health https://127.0.0.1:7072 --ca-file /certs/ca.pem
    /// --tls-server-name lifecycle.berth`.
    Health {
        /// The service's gRPC address (`http://` or `https://`).
        endpoint: String,
        /// The name the service's certificate must carry, when it differs from the address's
        /// host (berth's service certificates name `<role>.berth`).
        #[arg(long)]
        tls_server_name: Option<String>,
        /// The gRPC service to ask about (empty: the server as a whole).
        #[arg(long, default_value = "")]
        service: String,
    },
    /// Print a YAML snapshot of every package and queue.
    Dump,
    /// List the task queues: length, head task, its attempts and last error, lease holder.
    Queues,
    /// Check settings against a package's settings schema without applying them.
    Validate {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        settings: PathBuf,
        /// The settings version the settings are written for; older ones are converted to the
        /// loaded package's version first, and the converted settings printed.
        #[arg(long, default_value_t = 0)]
        settings_version: u32,
    },
    /// Show one package.
    Get {
        #[command(flatten)]
        target: Target,
    },
    /// List packages.
    List,
    /// Render a chart locally and print its manifests, as `helm template [NAME] CHART` does.
    Render(berth_helm::template::command::TemplateArgs),
    /// Inspect, plan and roll back releases through the release service (not the gateway).
    Release(super::release::ReleaseArgs),
    /// Build a package into a `.tar.gz`, or push it to an OCI registry.
    Package(super::package::PackageArgs),
    /// Δ-controller operator specs: evaluate one over objects, offline.
    Operator(super::operator::OperatorArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn update_takes_the_documented_flags() {
        let cli = Cli::try_parse_from([
            "berth",
            "update",
            "hello",
            "--package",
            "hello",
            "--repo",
            "examples/packages",
            "--version",
            "1.0.0",
            "--settings",
            "s.yaml",
            "--namespace",
            "demo",
            "--kind",
            "app",
            "--wait",
        ])
        .unwrap();
        let Command::Update {
            target,
            version,
            wait,
            ..
        } = cli.command
        else {
            panic!("not update")
        };
        assert_eq!(
            (
                target.name.as_str(),
                target.namespace.as_deref(),
                version.as_str(),
                wait
            ),
            ("hello", Some("demo"), "1.0.0", true)
        );
    }

    #[test]
    fn update_and_validate_take_a_settings_version() {
        let parse = |args: &[&str]| Cli::try_parse_from(args.iter().copied());
        let cli = parse(&[
            "berth",
            "update",
            "hello",
            "--repo",
            "r",
            "--version",
            "2.0.0",
            "--settings",
            "s.yaml",
            "--settings-version",
            "1",
        ])
        .unwrap();
        let Command::Update {
            settings_version, ..
        } = cli.command
        else {
            panic!("not update")
        };
        assert_eq!(settings_version, 1);
        let cli = parse(&["berth", "update", "hello", "--repo", "r", "--version", "1"]).unwrap();
        let Command::Update {
            settings_version, ..
        } = cli.command
        else {
            panic!("not update")
        };
        assert_eq!(settings_version, 0, "the package version's own by default");
        let cli = parse(&[
            "berth",
            "validate",
            "hello",
            "--settings",
            "s.yaml",
            "--settings-version",
            "2",
        ])
        .unwrap();
        let Command::Validate {
            settings_version, ..
        } = cli.command
        else {
            panic!("not validate")
        };
        assert_eq!(settings_version, 2);
        assert!(
            parse(&[
                "berth",
                "validate",
                "h",
                "--settings",
                "s",
                "--settings-version",
                "-1"
            ])
            .is_err()
        );
    }
}

/// The public API's request limits (`berth up` and `berth-gateway`).
#[derive(clap::Args, Clone, Debug)]
pub struct LimitArgs {
    /// Calls in progress at once; more are refused with ResourceExhausted.
    #[arg(long, env = "BERTH_MAX_CALLS", default_value_t = crate::Limits::default().concurrent_calls)]
    pub max_calls: usize,
    /// Calls per second one caller may make: a caller is the accepted token it presents;
    /// calls without one, or with a wrong one, count against their address.
    #[arg(long, env = "BERTH_RATE_PER_CALLER", default_value_t = crate::Limits::default().calls_per_second)]
    pub rate_per_caller: u32,
    /// Calls a caller may make in a burst above --rate-per-caller.
    #[arg(long, env = "BERTH_RATE_BURST", default_value_t = crate::Limits::default().burst)]
    pub rate_burst: u32,
    /// Watch streams open at once; more are refused with ResourceExhausted.
    #[arg(long, env = "BERTH_MAX_WATCHES", default_value_t = crate::Limits::default().watch_streams)]
    pub max_watches: usize,
}

impl LimitArgs {
    pub fn limits(&self) -> crate::Limits {
        crate::Limits {
            concurrent_calls: self.max_calls,
            calls_per_second: self.rate_per_caller,
            burst: self.rate_burst,
            watch_streams: self.max_watches,
        }
    }
}
