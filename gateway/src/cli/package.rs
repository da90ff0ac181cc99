//! `berth package build|push`: publish what berth consumes — a package directory as a
//! `.tar.gz` for an archive repository, or as an image in an OCI registry. Local work; no
//! gateway is involved.

use std::path::PathBuf;
use std::process::ExitCode;

use berth_package::{Limits, OciAuth, OciRepository, pack, write_archive};
use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct PackageArgs {
    #[command(subcommand)]
    pub command: PackageCommand,
}

#[derive(Subcommand, Debug)]
pub enum PackageCommand {
    /// Pack a package directory into `<name>-<version>.tar.gz` (an archive repository's layout).
    Build {
        /// The package directory (holding package.yaml).
        dir: PathBuf,
        /// Where to write the archive.
        #[arg(long, short = 'o', default_value = ".")]
        output: PathBuf,
    },
    /// Push a package directory to an OCI repository as `<repository>/<name>:<version>`.
    Push {
        /// The package directory (holding package.yaml).
        dir: PathBuf,
        /// The repository, `oci://host[:port]/path`.
        repository: String,
        /// Registry user name (with BERTH_REGISTRY_PASSWORD for the password).
        #[arg(long, env = "BERTH_REGISTRY_USERNAME")]
        username: Option<String>,
        /// Registry password; prefer the environment variable to the command line.
        #[arg(long, env = "BERTH_REGISTRY_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// Talk plain HTTP to the registry (a development registry on loopback).
        #[arg(long)]
        plain_http: bool,
    },
}

pub async fn package(args: &PackageArgs) -> Result<ExitCode, String> {
    match &args.command {
        PackageCommand::Build { dir, output } => {
            let packed = packed(dir)?;
            let path = write_archive(&packed, output).map_err(|e| e.to_string())?;
            println!("{} {}", path.display(), packed.digest);
            Ok(ExitCode::SUCCESS)
        }
        PackageCommand::Push {
            dir,
            repository,
            username,
            password,
            plain_http,
        } => {
            let auth = match (username, password) {
                (Some(username), Some(password)) => OciAuth::Basic {
                    username: username.clone(),
                    password: password.clone(),
                },
                (None, None) => OciAuth::Anonymous,
                _ => return Err("--username and --password go together".into()),
            };
            let repo =
                OciRepository::new(repository, auth, *plain_http).map_err(|e| e.to_string())?;
            let packed = packed(dir)?;
            let digest = repo.push(&packed).await.map_err(|e| e.to_string())?;
            println!(
                "{}/{}:{} {digest}",
                repository.trim_end_matches('/'),
                packed.name,
                packed.version
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn packed(dir: &std::path::Path) -> Result<berth_package::Packed, String> {
    pack(dir, Limits::default()).map_err(|e| format!("{}: {e}", dir.display()))
}
