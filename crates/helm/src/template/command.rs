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
}
