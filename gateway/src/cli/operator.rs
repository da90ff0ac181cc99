//! `berth operator`: Δ-controller operator specs, offline.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};

/// `berth operator ...`.
#[derive(clap::Args, Debug)]
pub struct OperatorArgs {
    #[command(subcommand)]
    pub command: OperatorCommand,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub enum EvalOutput {
    /// A YAML stream, each document after a comment naming the controller and target type.
    #[default]
    Yaml,
    /// One JSON list of {operator, controller, target, object}.
    Json,
}

#[derive(clap::Subcommand, Debug)]
pub enum OperatorCommand {
    /// Run a spec's controllers over the given objects with no cluster and print what their
    /// targets would receive (Updater objects, Patcher patches), sorted by kind, namespace and
    /// name. Views a controller writes feed the controllers that read them, and writes reach
    /// other sources, until nothing changes. Exits 1 on an invalid spec (naming the controller
    /// and field) or when an expression failed.
    Eval {
        /// The spec: Operator documents (`dcontroller.io/v1alpha1`), or a bare `controllers:`
        /// spec.
        spec: PathBuf,
        /// YAML streams of objects (`-`: standard input); repeatable. `List`s are unpacked.
        #[arg(long, short = 'i')]
        input: Vec<PathBuf>,
        /// The operator name of a bare spec (its views' group is `<name>.view.dcontroller.io`;
        /// default: the file's name without its extension).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: EvalOutput,
    },
    /// Print the views of a package's running operators (they live in memory in hookevent),
    /// sorted by apiVersion, kind, namespace and name: a YAML stream, or one JSON list.
    Views {
        #[command(flatten)]
        target: super::args::Target,
        #[arg(long, short = 'o', value_enum, default_value_t)]
        output: ViewsOutput,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub enum ViewsOutput {
    #[default]
    Yaml,
    Json,
}

/// Prints `views` as `output` asks.
pub fn print_views(objects: &[Value], output: ViewsOutput) -> Result<(), String> {
    match output {
        ViewsOutput::Json => {
            let text = serde_json::to_string_pretty(objects).map_err(|e| e.to_string())?;
            println!("{text}");
        }
        ViewsOutput::Yaml => {
            for o in objects {
                println!("---");
                print!("{}", serde_saphyr::to_string(o).map_err(|e| e.to_string())?);
            }
        }
    }
    Ok(())
}

/// Bytes an input file may have.
const MAX_INPUT_BYTES: u64 = 64 << 20;

fn read(path: &Path) -> Result<String, String> {
    let mut text = String::new();
    let what = path.display();
    if path == Path::new("-") {
        std::io::stdin()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| format!("standard input: {e}"))?;
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_string(&mut text))
            .map_err(|e| format!("{what}: {e}"))?;
    }
    if text.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!("{what}: larger than {MAX_INPUT_BYTES} bytes"));
    }
    Ok(text)
}

pub fn operator(args: &OperatorArgs) -> Result<ExitCode, String> {
    match &args.command {
        OperatorCommand::Eval {
            spec,
            input,
            name,
            output,
        } => eval(spec, input, name.as_deref(), *output),
        // Handled where the CLI connects (it asks the gateway).
        OperatorCommand::Views { .. } => Err("berth operator views needs a server".into()),
    }
}

fn eval(
    spec: &Path,
    inputs: &[PathBuf],
    name: Option<&str>,
    output: EvalOutput,
) -> Result<ExitCode, String> {
    let stem = spec
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("operator")
        .to_owned();
    let operators = berth_operator::read_operators(
        &read(spec)?,
        &spec.display().to_string(),
        name.unwrap_or(&stem),
    )?;
    let mut objects = Vec::new();
    for path in inputs {
        let docs: Vec<Value> = serde_saphyr::from_multiple(&read(path)?)
            .map_err(|e| format!("{}: not YAML: {e}", path.display()))?;
        objects.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    let evaluation = berth_operator::evaluate(&operators, objects, chrono::Utc::now())?;
    match output {
        EvalOutput::Json => {
            let list: Vec<Value> = evaluation
                .received
                .iter()
                .map(|r| {
                    json!({"operator": r.operator, "controller": r.controller,
                        "target": <&str>::from(r.target), "object": r.object})
                })
                .collect();
            let text = serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?;
            println!("{text}");
        }
        EvalOutput::Yaml => {
            for r in &evaluation.received {
                let what = match r.target {
                    berth_operator::spec::TargetType::Updater => "Updater object",
                    berth_operator::spec::TargetType::Patcher => "Patcher patch",
                };
                let text = serde_saphyr::to_string(&r.object).map_err(|e| e.to_string())?;
                println!(
                    "---\n# operator {}, controller {}: {what}\n{}",
                    r.operator,
                    r.controller,
                    text.trim_end()
                );
            }
        }
    }
    for e in &evaluation.errors {
        eprintln!("berth: {e}");
    }
    Ok(if evaluation.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
