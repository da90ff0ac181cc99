//! `berth render` and `berth release ...`.
//!
//! `berth render` is `helm template` without a server: the command lives in the Helm engine's
//! crate (`berth_helm::template::command`, whose dependency tree holds neither tonic nor kube),
//! so what the compatibility oracle proves for that engine holds for this command.
//!
//! `berth release history|status|rollback|plan` talk to the release service directly
//! (`--release-server`, env `BERTH_RELEASE`) rather than through the gateway. Releases are an
//! implementation detail of packages, so the gateway's public API does not expose them; these
//! commands are an operator's view of that layer (like `helm history`), for debugging and
//! recovery, and need network access to the release service.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use berth_helm::template::command::{self, TemplateArgs};
use berth_helm::template::{self, TemplateOptions};
use berth_proto::release::releases_client::ReleasesClient;
use berth_proto::release::{self as pb, PlanAction};

/// How long to wait for the release service to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one release call may take (a rollback applies and prunes a whole release).
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// Renders and prints the manifests exactly as `helm template` would.
pub fn render(args: &TemplateArgs) -> Result<ExitCode, String> {
    let text = command::run(args).map_err(|e| e.to_string())?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// `berth release ...`: the release service's view of one release.
#[derive(clap::Args, Debug)]
pub struct ReleaseArgs {
    /// The release service (the `berth-release` process; `berth up` serves it on a loopback
    /// port of its own).
    #[arg(long, env = "BERTH_RELEASE", default_value = "http://127.0.0.1:7074")]
    pub release_server: String,
    /// The operator's identity for a release service that requires mutual TLS (`berth up`'s
    /// are in `<data-dir>/tls`: ca.pem, operator.pem, operator-key.pem).
    #[command(flatten)]
    pub tls: berth_runtime::TlsArgs,
    #[command(subcommand)]
    pub command: ReleaseCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ReleaseCommand {
    /// List the release's revisions, oldest first (`helm history`).
    History {
        name: String,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
    },
    /// Show the deployed revision, its objects and whether they are ready.
    Status {
        name: String,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
    },
    /// Re-apply an earlier revision as a new one (default: the revision before the latest).
    Rollback {
        name: String,
        revision: Option<i32>,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
    },
    /// Show what installing CHART with these values would change, without changing anything.
    Plan {
        name: String,
        chart: PathBuf,
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        #[arg(long = "values", short = 'f', value_delimiter = ',')]
        values: Vec<PathBuf>,
        #[arg(long)]
        set: Vec<String>,
    },
}

/// Runs one `berth release` command.
pub async fn release(args: &ReleaseArgs) -> Result<ExitCode, String> {
    let tls = args.tls.load_client(None).map_err(|e| e.to_string())?;
    let channel = berth_runtime::endpoint(
        &args.release_server,
        tls.as_ref(),
        berth_runtime::Role::Release,
    )
    .map_err(|e| format!("--release-server {}: {e}", args.release_server))?
    .connect_timeout(CONNECT_TIMEOUT)
    .timeout(CALL_TIMEOUT)
    .connect()
    .await
    .map_err(|e| {
        format!(
            "cannot reach the release service at {}: {e}",
            args.release_server
        )
    })?;
    let mut client = ReleasesClient::new(channel)
        .max_decoding_message_size(berth_runtime::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(berth_runtime::MAX_MESSAGE_BYTES);
    let failed = |e: tonic::Status| format!("{:?}: {}", e.code(), e.message());
    match &args.command {
        ReleaseCommand::History { name, namespace } => {
            let history = client
                .history(pb::HistoryRequest {
                    name: name.clone(),
                    namespace: namespace.clone(),
                })
                .await
                .map_err(failed)?
                .into_inner();
            if history.revisions.is_empty() {
                return Err(format!(
                    "release {name:?} not found in namespace {namespace:?}"
                ));
            }
            print!("{}", history_table(&history.revisions));
        }
        ReleaseCommand::Status { name, namespace } => {
            let status = client
                .status(pb::StatusRequest {
                    name: name.clone(),
                    namespace: namespace.clone(),
                    ..Default::default()
                })
                .await
                .map_err(failed)?
                .into_inner();
            if !status.found {
                return Err(format!(
                    "release {name:?} not found in namespace {namespace:?}"
                ));
            }
            println!(
                "NAME: {name}\nNAMESPACE: {namespace}\nREVISION: {}\nREADY: {}",
                status.revision, status.ready
            );
            for o in &status.objects {
                println!("  {}", object_name(o));
            }
            for reason in &status.not_ready {
                println!("NOT READY: {reason}");
            }
        }
        ReleaseCommand::Rollback {
            name,
            revision,
            namespace,
        } => {
            let done = client
                .rollback(pb::RollbackRequest {
                    name: name.clone(),
                    namespace: namespace.clone(),
                    revision: revision.unwrap_or(0),
                })
                .await
                .map_err(failed)?
                .into_inner();
            println!(
                "Rollback was a success: {name} is now at revision {}",
                done.revision
            );
        }
        ReleaseCommand::Plan {
            name,
            chart,
            namespace,
            values,
            set,
        } => {
            let opts = TemplateOptions {
                values_files: values.clone(),
                set: set.clone(),
                ..TemplateOptions::default()
            };
            let values = template::user_values(&opts).map_err(|e| e.to_string())?;
            let files = template::read_chart(chart).map_err(|e| e.to_string())?;
            let plan = client
                .plan(pb::InstallRequest {
                    name: name.clone(),
                    namespace: namespace.clone(),
                    files: files
                        .into_iter()
                        .map(|(path, content)| pb::ChartFile { path, content })
                        .collect(),
                    values: Some(berth_proto::json::to_struct(&values)),
                    // The operator's preview of a chart, not a package's install: not confined.
                    package: String::new(),
                    wait_ms: 0,
                })
                .await
                .map_err(failed)?
                .into_inner();
            print!("{}", plan_lines(&plan.changes));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn object_name(o: &pb::ObjectRef) -> String {
    if o.namespace.is_empty() {
        format!("{}/{}", o.kind, o.name)
    } else {
        format!("{}/{} (namespace {})", o.kind, o.name, o.namespace)
    }
}

/// `helm history`'s columns.
fn history_table(revisions: &[pb::Revision]) -> String {
    let mut rows = vec![
        [
            "REVISION",
            "UPDATED",
            "STATUS",
            "CHART",
            "APP VERSION",
            "DESCRIPTION",
        ]
        .map(String::from),
    ];
    for r in revisions {
        rows.push([
            r.revision.to_string(),
            r.updated.clone(),
            r.status.clone(),
            r.chart.clone(),
            r.app_version.clone(),
            r.description.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            format!("{}\n", cells.join("\t").trim_end())
        })
        .collect()
}

/// One line per object: `+` create, `~` update (with the changed fields), `-` delete, `=`
/// unchanged.
fn plan_lines(changes: &[pb::PlannedChange]) -> String {
    changes
        .iter()
        .map(|c| {
            let name = c.object.as_ref().map(object_name).unwrap_or_default();
            match c.action() {
                PlanAction::Create => format!("+ create    {name}\n"),
                PlanAction::Update => format!("~ update    {name}: {}\n", c.changed.join(", ")),
                PlanAction::Delete => format!("- delete    {name}\n"),
                PlanAction::Unchanged => format!("= unchanged {name}\n"),
                PlanAction::Unspecified => format!("? unknown   {name}\n"),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_lines_mark_each_action() {
        let change = |name: &str, action: PlanAction, changed: &[&str]| pb::PlannedChange {
            object: Some(pb::ObjectRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: String::new(),
                name: name.into(),
            }),
            action: action as i32,
            changed: changed.iter().map(|s| s.to_string()).collect(),
        };
        let text = plan_lines(&[
            change("a", PlanAction::Create, &[]),
            change("b", PlanAction::Update, &["data", "metadata"]),
            change("c", PlanAction::Delete, &[]),
        ]);
        assert_eq!(
            text,
            "+ create    ConfigMap/a\n~ update    ConfigMap/b: data, metadata\n- delete    ConfigMap/c\n"
        );
    }
}
