//! `render-bench`: whole-process render time of berth against `helm template`, on a small
//! chart (the oracle corpus' `basics`) and a generated large one, printed as a table.
//!
//! Each tool is run as a fresh process per iteration (startup included, as a user or CI job
//! would run it) and the median wall time is reported. berth is the `berth render` binary when
//! found next to this one (build it with `cargo build --release -p berth-gateway --bin berth`),
//! else this binary's own `--render-once` mode, which runs the same renderer and printer.
//!
//! `cargo run --release -p berth-helm --bin render-bench -- [--iterations N] [--corpus DIR]`;
//! with `--write-large DIR` it only writes the generated chart, and with `--repeat N CHART` it
//! renders CHART N times in-process and prints the mean (both for profiling). With `--keys` it
//! prints only the key generation table (`genPrivateKey`, `genCA`, `genSignedCert`).
//!
//! The second table covers the five largest charts (by bytes) of the public chart corpus
//! (`../shared/charts/corpus` beside the repository, or `--corpus DIR`), rendered with their
//! defaults: the median whole-process wall time and the peak resident memory of each tool.
//! Memory is measured by running the tool under this binary's `--measure` mode, whose only
//! child it is, so `getrusage(RUSAGE_CHILDREN)` reports exactly that tool's peak.

use anyhow::Context as _;
use berth_helm::helm_binary::find_helm;
use berth_helm::template::{self, TemplateOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Both tools are told the same Kubernetes version so `.Capabilities` output agrees.
const KUBE_VERSION: &str = "v1.31.0";

/// Templates in the generated large chart.
const LARGE_TEMPLATES: usize = 300;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--measure") {
        // `--measure CMD ARGS...`: runs CMD (output discarded) and prints its peak RSS in KiB.
        let cmd = &args[2..];
        anyhow::ensure!(!cmd.is_empty(), "--measure CMD ARGS...");
        let status = Command::new(&cmd[0])
            .args(&cmd[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "{cmd:?} failed");
        let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?;
        println!("{}", usage.max_rss());
        return Ok(());
    }
    if let Some(pos) = args.iter().position(|a| a == "--render-once") {
        // `--render-once CHART [--kube-version V]`: the version is fixed below. As `berth`
        // does; only here, since the setting is inherited by child processes (helm).
        berth_helm::memory::prefer_small_pages();
        let chart = args.get(pos + 1).context("--render-once CHART")?;
        let opts = TemplateOptions {
            release_name: "bench".into(),
            kube_version: Some(KUBE_VERSION.into()),
            ..TemplateOptions::default()
        };
        print!("{}", template::template(Path::new(chart), &opts)?);
        return Ok(());
    }
    if let Some(pos) = args.iter().position(|a| a == "--repeat") {
        // `--repeat N CHART`: renders N times in this process (for `perf record`), printing
        // the mean time per render.
        berth_helm::memory::prefer_small_pages();
        let n: u32 = args.get(pos + 1).context("--repeat N CHART")?.parse()?;
        let chart = args.get(pos + 2).context("--repeat N CHART")?;
        let opts = TemplateOptions {
            release_name: "bench".into(),
            kube_version: Some(KUBE_VERSION.into()),
            ..TemplateOptions::default()
        };
        let start = Instant::now();
        for _ in 0..n.max(1) {
            std::hint::black_box(template::template(Path::new(chart), &opts)?);
        }
        println!(
            "{:.2} ms per render",
            ms(start.elapsed()) / f64::from(n.max(1))
        );
        return Ok(());
    }
    if args.iter().any(|a| a == "--memory-use") {
        return memory_use(&args);
    }
    if let Some(pos) = args.iter().position(|a| a == "--write-large") {
        // `--write-large DIR`: writes the generated chart for profiling by hand.
        let dir = args.get(pos + 1).context("--write-large DIR")?;
        return write_large_chart(Path::new(dir));
    }
    let iterations: usize = match args.iter().position(|a| a == "--iterations") {
        Some(i) => args.get(i + 1).context("--iterations N")?.parse()?,
        None => 15,
    };
    let helm = find_helm().context("helm not found on PATH or in target/ci-tools")?;
    if args.iter().any(|a| a == "--keys") {
        return keys_table(&helm, iterations);
    }
    let (berth_cmd, berth_label) = berth_command()?;

    let small = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/basics");
    let large_dir = TempDir::new()?;
    let large = large_dir.0.join("large");
    write_large_chart(&large)?;

    println!(
        "berth: {berth_label}\nhelm:  {}\niterations: {iterations}, alternating berth and helm (median wall time per run)\n",
        helm.display()
    );
    println!("| chart | objects | berth | helm template | speed-up |");
    println!("|---|---|---|---|---|");
    for (label, chart) in [("small (basics)", &small), ("large (generated)", &large)] {
        let chart_s = chart.display().to_string();
        let mut berth = berth_cmd.clone();
        berth.extend([
            chart_s.clone(),
            "--kube-version".into(),
            KUBE_VERSION.into(),
        ]);
        let helm_cmd = vec![
            helm.display().to_string(),
            "template".into(),
            "bench".into(),
            chart_s,
            "--kube-version".into(),
            KUBE_VERSION.into(),
        ];
        let ((b_time, b_out), (h_time, h_out)) = medians(&berth, &helm_cmd, iterations)?;
        anyhow::ensure!(
            b_out == h_out,
            "outputs differ for {label}; the comparison would be meaningless"
        );
        let objects = b_out.matches("# Source: ").count();
        println!(
            "| {label} | {objects} | {:.1} ms | {:.1} ms | {:.1}x |",
            ms(b_time),
            ms(h_time),
            h_time.as_secs_f64() / b_time.as_secs_f64()
        );
    }
    let corpus = match args.iter().position(|a| a == "--corpus") {
        Some(i) => Some(PathBuf::from(args.get(i + 1).context("--corpus DIR")?)),
        None => {
            let beside =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/charts/corpus");
            beside.is_dir().then_some(beside)
        }
    };
    match corpus {
        Some(dir) => corpus_table(&dir, &berth_cmd, &helm, iterations),
        None => {
            println!("\n(no chart corpus: pass --corpus DIR for the public charts' table)");
            Ok(())
        }
    }
}

/// The five largest charts of `corpus`, each rendered with its defaults (`-n ns`) by both
/// tools: median wall time and peak RSS. Outputs are not compared here (random functions
/// differ run to run; `compare.sh` checks fidelity), only that both succeed.
fn corpus_table(
    corpus: &Path,
    berth_cmd: &[String],
    helm: &Path,
    iterations: usize,
) -> anyhow::Result<()> {
    let mut charts: Vec<(u64, PathBuf)> = std::fs::read_dir(corpus)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("Chart.yaml").is_file())
        .map(|p| (dir_bytes(&p), p))
        .collect();
    charts.sort_by_key(|c| std::cmp::Reverse(c.0));
    println!(
        "\nThe five largest charts of {} (defaults, `-n ns`):\n",
        corpus.display()
    );
    println!(
        "| chart | size | objects | berth | helm template | berth/helm time | berth peak RSS | helm peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let me = std::env::current_exe()?.display().to_string();
    for (bytes, chart) in charts.into_iter().take(5) {
        let name = chart
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let chart_s = chart.display().to_string();
        let mut berth = berth_cmd.to_vec();
        berth.extend([chart_s.clone(), "-n".into(), "ns".into()]);
        let helm_cmd = vec![
            helm.display().to_string(),
            "template".into(),
            "bench".into(),
            chart_s,
            "-n".into(),
            "ns".into(),
        ];
        let ((b_time, b_out), (h_time, _)) = medians(&berth, &helm_cmd, iterations)?;
        let rss = |cmd: &[String]| -> anyhow::Result<u64> {
            let mut measure = vec![me.clone(), "--measure".into()];
            measure.extend(cmd.iter().cloned());
            let (_, out) = run(&measure)?;
            Ok(out.trim().parse()?)
        };
        let (b_rss, h_rss) = (rss(&berth)?, rss(&helm_cmd)?);
        println!(
            "| {name} | {} KiB | {} | {:.1} ms | {:.1} ms | {:.2}x | {:.1} MiB | {:.1} MiB |",
            bytes / 1024,
            b_out.matches("# Source: ").count(),
            ms(b_time),
            ms(h_time),
            b_time.as_secs_f64() / h_time.as_secs_f64(),
            b_rss as f64 / 1024.0,
            h_rss as f64 / 1024.0,
        );
    }
    Ok(())
}

/// The charts of the key generation table: Sprig's `genPrivateKey "rsa"` (4096 bits), one
/// `genCA` (2048-bit RSA), and five CAs each signing a certificate (`genCA`, `genSignedCert`),
/// as charts that make their own TLS material do.
const KEY_CHARTS: &[(&str, &str)] = &[
    (
        "genPrivateKey \"rsa\"",
        "k: {{ genPrivateKey \"rsa\" | len }}\n",
    ),
    (
        "genPrivateKey \"ecdsa\"",
        "k: {{ genPrivateKey \"ecdsa\" | len }}\n",
    ),
    ("genCA", "k: {{ (genCA \"ca\" 365).Cert | len }}\n"),
    (
        "5 × genCA + genSignedCert",
        "{{- range until 5 }}\n{{- $ca := genCA (printf \"ca-%d\" .) 365 }}\n{{- $c := genSignedCert \"svc\" nil (list \"svc.ns\") 365 $ca }}\nk{{ . }}: {{ len $c.Cert }}\n{{- end }}\n",
    ),
];

/// `--keys`: whole-process time of charts that generate keys and certificates, berth (this
/// binary's `--render-once`, so the figure is this tree's renderer whichever `berth` binary is
/// built) against `helm template`. Key generation times vary with how far the prime search
/// goes, so the table gives the median and the slowest run of each tool.
fn keys_table(helm: &Path, iterations: usize) -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let me = std::env::current_exe()?.display().to_string();
    println!(
        "berth: {me} --render-once\nhelm:  {}\niterations: {iterations}, alternating berth and helm\n",
        helm.display()
    );
    println!(
        "| chart | berth median | berth slowest | helm median | helm slowest | helm/berth (median) |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, (label, template)) in KEY_CHARTS.iter().enumerate() {
        let chart = dir.0.join(format!("keys{i}"));
        std::fs::create_dir_all(chart.join("templates"))?;
        std::fs::write(
            chart.join("Chart.yaml"),
            "apiVersion: v2\nname: keys\nversion: 0.1.0\n",
        )?;
        std::fs::write(chart.join("templates/keys.yaml"), template)?;
        let chart_s = chart.display().to_string();
        let berth = vec![me.clone(), "--render-once".into(), chart_s.clone()];
        let helm_cmd = vec![
            helm.display().to_string(),
            "template".into(),
            "bench".into(),
            chart_s,
            "--kube-version".into(),
            KUBE_VERSION.into(),
        ];
        let (b, h) = timings(&berth, &helm_cmd, iterations)?;
        let (b_med, h_med) = (b[b.len() / 2], h[h.len() / 2]);
        println!(
            "| {label} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {:.2}x |",
            ms(b_med),
            ms(b[b.len() - 1]),
            ms(h_med),
            ms(h[h.len() - 1]),
            h_med.as_secs_f64() / b_med.as_secs_f64()
        );
    }
    Ok(())
}

/// Runs `a` and `b` `n` times each, alternating; each one's wall times, sorted.
fn timings(a: &[String], b: &[String], n: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let (mut ta, mut tb) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n.max(1) {
        ta.push(run(a)?.0);
        tb.push(run(b)?.0);
    }
    ta.sort();
    tb.sort();
    Ok((ta, tb))
}

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| {
            let path = e.path();
            if path.is_dir() {
                dir_bytes(&path)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            }
        })
        .sum()
}

/// `--memory-use [--corpus DIR] [--cases FILE]`: renders every case of a `compare.sh` cases
/// file (default: `../shared/charts`' corpus and cases) in this process, without a memory
/// budget, and prints what each charged to it (`render::meter`), largest first: the figure
/// the default budget (`render::DEFAULT_MEMORY_BUDGET`) is chosen against.
fn memory_use(args: &[String]) -> anyhow::Result<()> {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Render {
        #[command(flatten)]
        args: template::command::TemplateArgs,
    }
    let flag = |name: &str| -> Option<PathBuf> {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1).map(PathBuf::from)
    };
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/charts");
    let corpus = flag("--corpus").unwrap_or_else(|| shared.join("corpus"));
    let cases = flag("--cases").unwrap_or_else(|| shared.join("cases.txt"));
    let text = std::fs::read_to_string(&cases).with_context(|| format!("{}", cases.display()))?;
    std::env::set_current_dir(&corpus).with_context(|| format!("{}", corpus.display()))?;
    let mut rows = Vec::new();
    let mut seen = std::collections::HashMap::<String, usize>::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((name, rest)) = words.split_first() else {
            continue;
        };
        let k = seen.entry(name.to_string()).or_default();
        *k += 1;
        let mut argv = vec!["render", "rel", name];
        argv.extend(rest);
        let parsed = Render::try_parse_from(&argv)?;
        let budget = berth_helm::render::Budget::default();
        let (result, used) = berth_helm::render::measured(budget, || {
            template::command::run(&parsed.args).map(|out| out.len())
        });
        let outcome = match result {
            Ok(bytes) => format!("{bytes} bytes out"),
            Err(e) => format!("failed: {}", e.to_string().lines().next().unwrap_or("")),
        };
        rows.push((used, format!("{name}#{k}"), outcome));
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    println!("| case | memory budget used | result |\n|---|---|---|");
    for (used, case, outcome) in &rows {
        println!(
            "| {case} | {:.1} MiB | {outcome} |",
            *used as f64 / 1048576.0
        );
    }
    let budget = berth_helm::render::DEFAULT_MEMORY_BUDGET;
    if let Some((most, case, _)) = rows.first() {
        println!(
            "\n{} cases; the most is {case}'s {:.1} MiB, {:.1}% of the default budget of {} MiB",
            rows.len(),
            *most as f64 / 1048576.0,
            *most as f64 * 100.0 / budget as f64,
            budget >> 20
        );
    }
    Ok(())
}

/// A scratch directory removed when dropped, also when the run fails.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("render-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs `a` and `b` `n` times each, alternating so both see the same machine load; the
/// median wall time and the (last) output of each.
#[allow(clippy::type_complexity)]
fn medians(
    a: &[String],
    b: &[String],
    n: usize,
) -> anyhow::Result<((Duration, String), (Duration, String))> {
    let (mut ta, mut tb) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut oa, mut ob) = (String::new(), String::new());
    for _ in 0..n.max(1) {
        let (t, o) = run(a)?;
        ta.push(t);
        oa = o;
        let (t, o) = run(b)?;
        tb.push(t);
        ob = o;
    }
    ta.sort();
    tb.sort();
    Ok(((ta[ta.len() / 2], oa), (tb[tb.len() / 2], ob)))
}

/// Runs `cmd` once: its wall time and output.
fn run(cmd: &[String]) -> anyhow::Result<(Duration, String)> {
    let start = Instant::now();
    let o = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", cmd[0]))?;
    let elapsed = start.elapsed();
    anyhow::ensure!(
        o.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Ok((elapsed, String::from_utf8(o.stdout)?))
}

fn berth_command() -> anyhow::Result<(Vec<String>, String)> {
    let me = std::env::current_exe()?;
    let sibling = me.with_file_name("berth");
    if sibling.is_file() {
        let s = sibling.display().to_string();
        return Ok((
            vec![s.clone(), "render".into(), "bench".into()],
            format!("{s} render"),
        ));
    }
    let s = me.display().to_string();
    Ok((
        vec![s.clone(), "--render-once".into()],
        format!("{s} --render-once (berth binary not built)"),
    ))
}

/// A chart shaped like real large ones: shared helpers, per-component values, and templates
/// using include/nindent/toYaml/range/with/quote/default.
fn write_large_chart(root: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(root.join("templates"))?;
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: large\nversion: 1.0.0\nappVersion: \"2.0\"\n",
    )?;
    std::fs::write(
        root.join("templates/_helpers.tpl"),
        r#"{{- define "large.fullname" -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- define "large.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}
"#,
    )?;
    let mut values = String::from("components:\n");
    for i in 0..LARGE_TEMPLATES {
        values.push_str(&format!(
            "  c{i}:\n    replicas: {}\n    image: registry.example.com/app{i}:1.{i}.0\n    env:\n      LOG_LEVEL: info\n      COMPONENT: c{i}\n      FEATURE_{i}: \"true\"\n    resources:\n      limits: {{cpu: 200m, memory: 256Mi}}\n      requests: {{cpu: 100m, memory: 128Mi}}\n",
            i % 5 + 1
        ));
    }
    std::fs::write(root.join("values.yaml"), values)?;
    for i in 0..LARGE_TEMPLATES {
        let t = format!(
            r#"{{{{- with .Values.components.c{i} }}}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{{{ include "large.fullname" $ }}}}-c{i}
  labels:
    {{{{- include "large.labels" $ | nindent 4 }}}}
spec:
  replicas: {{{{ .replicas | default 1 }}}}
  selector:
    matchLabels:
      component: c{i}
  template:
    metadata:
      labels:
        component: c{i}
        {{{{- include "large.labels" $ | nindent 8 }}}}
    spec:
      containers:
        - name: main
          image: {{{{ .image | quote }}}}
          env:
            {{{{- range $k, $v := .env }}}}
            - name: {{{{ $k }}}}
              value: {{{{ $v | quote }}}}
            {{{{- end }}}}
          resources:
            {{{{- toYaml .resources | nindent 12 }}}}
{{{{- end }}}}
"#
        );
        std::fs::write(root.join(format!("templates/c{i}.yaml")), t)?;
    }
    Ok(())
}
