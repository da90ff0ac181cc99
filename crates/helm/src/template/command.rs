//! The `berth render` command, which is `helm template [NAME] CHART` without a server: its
//! arguments (as clap parses them) and the command from those arguments to the text it
//! prints. It renders in the calling process through [`super::template`], the code the
//! compatibility oracles check, and needs no async runtime.

use std::path::PathBuf;

use super::{TemplateError, TemplateOptions, template};

/// `berth render [NAME] CHART`, taking `helm template`'s arguments.
#[derive(clap::Args, Debug)]
pub struct TemplateArgs {
    /// `[NAME] CHART`: the release name (default `release-name`) and the chart directory or
    /// packed `.tgz`; with one argument it is the chart.
    #[arg(num_args = 1..=2, value_name = "[NAME] CHART", required = true)]
    pub positional: Vec<String>,
    /// Namespace the release is rendered for (`.Release.Namespace`).
    #[arg(long, short = 'n', default_value = "default")]
    pub namespace: String,
    /// Values files (YAML or JSON); later ones win. Repeatable, or comma-separated.
    #[arg(long = "values", short = 'f', value_delimiter = ',')]
    pub values: Vec<PathBuf>,
    /// `key=value` assignments (`a.b=c,list={x,y}`), applied after the files. Repeatable.
    #[arg(long)]
    pub set: Vec<String>,
    /// Print the chart's `crds/` objects first.
    #[arg(long)]
    pub include_crds: bool,
    /// Kubernetes version for `.Capabilities.KubeVersion`, e.g. `v1.31.0`.
    #[arg(long)]
    pub kube_version: Option<String>,
    /// Kubernetes API versions for `.Capabilities.APIVersions`, added to the defaults.
    /// Repeatable, or comma-separated.
    #[arg(long = "api-versions", short = 'a', value_delimiter = ',')]
    pub api_versions: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("render takes [NAME] CHART")]
    Arguments,
    #[error(transparent)]
    Template(#[from] TemplateError),
}

impl TemplateArgs {
    /// The release name and chart path from the one or two positional arguments.
    fn name_and_chart(&self) -> Result<(String, PathBuf), CommandError> {
        match self.positional.as_slice() {
            [chart] => Ok(("release-name".into(), PathBuf::from(chart))),
            [name, chart] => Ok((name.clone(), PathBuf::from(chart))),
            _ => Err(CommandError::Arguments),
        }
    }
}

/// Renders the chart the arguments name and returns exactly what `helm template` would print.
pub fn run(args: &TemplateArgs) -> Result<String, CommandError> {
    let (release_name, chart) = args.name_and_chart()?;
    let opts = TemplateOptions {
        release_name,
        namespace: args.namespace.clone(),
        values_files: args.values.clone(),
        set: args.set.clone(),
        include_crds: args.include_crds,
        kube_version: args.kube_version.clone(),
        api_versions: args.api_versions.clone(),
    };
    Ok(template(&chart, &opts)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: TemplateArgs,
    }

    #[test]
    fn takes_helm_template_arguments() {
        let w = Wrapper::try_parse_from([
            "x",
            "demo",
            "./chart",
            "-n",
            "ns",
            "-f",
            "a.yaml,b.yaml",
            "--values",
            "c.yaml",
            "--set",
            "a=1",
            "--set",
            "b=2",
        ])
        .expect("valid arguments");
        assert_eq!(
            w.args.name_and_chart().ok(),
            Some(("demo".to_string(), PathBuf::from("./chart")))
        );
        assert_eq!(w.args.values.len(), 3);
        assert_eq!(w.args.set, vec!["a=1".to_string(), "b=2".to_string()]);
        let one = Wrapper::try_parse_from(["x", "./chart"]).expect("chart only");
        assert_eq!(
            one.args.name_and_chart().ok(),
            Some(("release-name".to_string(), PathBuf::from("./chart")))
        );
    }

    #[test]
    fn kube_version_and_api_versions_reach_capabilities() {
        let dir = std::env::temp_dir().join(format!("berth-caps-{}", std::process::id()));
        let write = |p: &str, t: &str| {
            let path = dir.join(p);
            std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
            std::fs::write(path, t).expect("write");
        };
        write("Chart.yaml", "apiVersion: v2\nname: c6\nversion: 0.1.0\n");
        write(
            "templates/t.yaml",
            "k: {{ .Capabilities.KubeVersion.Version }}\nn: {{ len .Capabilities.APIVersions }}\n\
             a: {{ .Capabilities.APIVersions.Has \"foo/v1\" }} \
             {{ .Capabilities.APIVersions.Has \"bar/v2/Kind\" }} \
             {{ .Capabilities.APIVersions.Has \"c/v3\" }}\n",
        );
        let chart = dir.to_string_lossy().to_string();
        let w = Wrapper::try_parse_from([
            "x",
            "r",
            chart.as_str(),
            "--kube-version",
            "1.30.2",
            "--api-versions",
            "foo/v1,bar/v2/Kind",
            "-a",
            "c/v3",
        ])
        .expect("valid arguments");
        let out = run(&w.args).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        // What helm template v4.2.3 prints for the same chart and arguments.
        assert_eq!(
            out,
            Ok("---\n# Source: c6/templates/t.yaml\nk: v1.30.2\nn: 58\na: true true true\n".into())
        );
    }
}
