//! Compatibility oracle: renders each chart under `tests/oracle/` with berth and with
//! `helm template`, and requires byte-identical output.
//!
//! Normalisation is deliberately minimal: both sides get the same release name, namespace,
//! values files, `--set` assignments and an explicit `--kube-version` (helm's built-in default
//! follows its client library, berth's its own table), and nothing else is rewritten. Functions
//! whose output is random or time-dependent (`randAlphaNum`, `now`, `genCA`, `uuidv4`, ...)
//! are kept out of the corpus since no normalisation could make them comparable; the
//! certificate and key functions are compared field by field in `certs_oracle.rs` instead.
//!
//! helm is taken from PATH or `<workspace>/target/ci-tools/helm` (where `.ci/run` installs
//! it). Without it the test fails under `CI=true` and otherwise prints a loud skip notice.

use berth_helm::helm_binary::find_helm;
use berth_helm::template::{self, TemplateOptions};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Kubernetes version both renderers are told, so `.Capabilities` agrees.
const KUBE_VERSION: &str = "v1.31.0";

struct Case {
    name: &'static str,
    chart: &'static str,
    values: &'static [&'static str],
    set: &'static [&'static str],
    include_crds: bool,
    /// `false`: both must refuse the chart (schema violation, `required`, `fail`).
    renders: bool,
}

const fn case(name: &'static str, chart: &'static str) -> Case {
    Case {
        name,
        chart,
        values: &[],
        set: &[],
        include_crds: false,
        renders: true,
    }
}

const CASES: &[Case] = &[
    case("basics", "basics"),
    Case {
        values: &["basics-override.yaml"],
        set: &["replicas=5,labels.extra=from-set", "nested.deep.value=null"],
        ..case("basics with -f and --set", "basics")
    },
    Case {
        values: &["basics-no-name.yaml"],
        renders: false,
        ..case("basics: required fails", "basics")
    },
    case("sprig", "sprig"),
    Case {
        include_crds: true,
        ..case("files with crds", "files")
    },
    case("files without crds", "files"),
    Case {
        values: &["files-bad-schema.yaml"],
        renders: false,
        ..case("files: schema violation", "files")
    },
    Case {
        set: &["mode=medium"],
        renders: false,
        ..case("files: enum violation", "files")
    },
    case("umbrella", "umbrella"),
    Case {
        values: &["umbrella-toggle.yaml"],
        ..case("umbrella with toggled subcharts", "umbrella")
    },
    Case {
        set: &["global.region=us-east,redis.maxmemory=1gb,db.size=5Gi"],
        ..case("umbrella with global --set", "umbrella")
    },
    Case {
        values: &["../../fixtures/hello.values.json"],
        ..case("helm create chart", "../fixtures/hello")
    },
    case("failing", "failing"),
    case("helmisms", "helmisms"),
    case("yaml shapes", "yamlshapes"),
    Case {
        values: &["helmisms-multi-doc.yaml"],
        set: &["yes=from-set"],
        ..case("helmisms with a multi-document values file", "helmisms")
    },
    Case {
        set: &["explode=true"],
        renders: false,
        ..case("failing: fail called", "failing")
    },
    case("binary files and byte strings", "binary"),
    Case {
        set: &["raw=leading"],
        renders: false,
        ..case("binary: a stray byte printed into a manifest", "binary")
    },
    Case {
        set: &["raw=comment"],
        renders: false,
        ..case("binary: a stray byte in a YAML comment", "binary")
    },
];

fn oracle_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle")
}

fn helm_template(helm: &Path, c: &Case) -> Result<String, String> {
    let dir = oracle_dir();
    let mut cmd = Command::new(helm);
    cmd.arg("template")
        .arg("demo")
        .arg(dir.join(c.chart))
        .args(["--namespace", "oracle-ns", "--kube-version", KUBE_VERSION]);
    for v in c.values {
        cmd.arg("-f").arg(dir.join("values").join(v));
    }
    for s in c.set {
        cmd.arg("--set").arg(s);
    }
    if c.include_crds {
        cmd.arg("--include-crds");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("running {}: {e}", helm.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn berth_template(c: &Case) -> Result<String, String> {
    let dir = oracle_dir();
    let opts = TemplateOptions {
        release_name: "demo".into(),
        namespace: "oracle-ns".into(),
        values_files: c
            .values
            .iter()
            .map(|v| dir.join("values").join(v))
            .collect(),
        set: c.set.iter().map(|s| s.to_string()).collect(),
        include_crds: c.include_crds,
        kube_version: Some(KUBE_VERSION.into()),
        ..TemplateOptions::default()
    };
    template::template(&dir.join(c.chart), &opts).map_err(|e| e.to_string())
}

/// The first differing line with a little context, for a readable failure.
fn first_difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<_>, Vec<_>) = (want.lines().collect(), got.lines().collect());
    let i = w
        .iter()
        .zip(&g)
        .position(|(a, b)| a != b)
        .unwrap_or(w.len().min(g.len()));
    let from = i.saturating_sub(4);
    let show = |v: &[&str]| v[from.min(v.len())..(i + 3).min(v.len())].join("\n");
    format!(
        "first difference at line {}\n--- helm:\n{}\n--- berth:\n{}",
        i + 1,
        show(&w),
        show(&g)
    )
}

#[test]
fn berth_renders_the_corpus_exactly_like_helm_template() {
    let Some(helm) = find_helm() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("helm is not installed (PATH or target/ci-tools/helm); CI must run the oracle");
        }
        eprintln!(
            "\n!!!!!!!! SKIPPED: helm not found on PATH or in target/ci-tools; the Helm \
             compatibility oracle did NOT run. Run .ci/run once to install it. !!!!!!!!\n"
        );
        return;
    };
    let mut failures = Vec::new();
    for c in CASES {
        let want = helm_template(&helm, c);
        let got = berth_template(c);
        match (c.renders, want, got) {
            (true, Ok(want), Ok(got)) if want == got => {}
            (true, Ok(want), Ok(got)) => {
                failures.push(format!("[{}] {}", c.name, first_difference(&want, &got)))
            }
            (true, Err(e), _) => failures.push(format!("[{}] helm failed: {e}", c.name)),
            (true, Ok(_), Err(e)) => failures.push(format!("[{}] berth failed: {e}", c.name)),
            (false, Err(_), Err(_)) => {}
            (false, want, got) => failures.push(format!(
                "[{}] expected both to refuse; helm ok={} berth ok={}",
                c.name,
                want.is_ok(),
                got.is_ok()
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n\n")
    );
}

/// A manifest holding bytes that are not UTF-8 fails in both, naming the template, with
/// go-yaml's words for the first bad byte.
#[test]
fn bytes_that_are_not_utf8_fail_the_manifest_like_helm() {
    let Some(helm) = find_helm() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("helm is not installed (PATH or target/ci-tools/helm); CI must run the oracle");
        }
        eprintln!(
            "\n!!!!!!!! SKIPPED: helm not found; the binary-bytes oracle did NOT run !!!!!!!!\n"
        );
        return;
    };
    const MODES: &[(&[&str], &str)] = &[
        (&["raw=leading"], "invalid leading UTF-8 octet"),
        (&["raw=trailing"], "invalid trailing UTF-8 octet"),
        (&["raw=incomplete"], "incomplete UTF-8 octet sequence"),
        (&["raw=comment"], "invalid leading UTF-8 octet"),
    ];
    for &(set, problem) in MODES {
        let mode = set[0];
        let c = Case {
            set,
            renders: false,
            ..case("binary raw", "binary")
        };
        let helm_err = match helm_template(&helm, &c) {
            Ok(out) => panic!("[{mode}] helm rendered:\n{out}"),
            Err(e) => e,
        };
        assert!(
            helm_err.contains(&format!(
                "YAML parse error on binary/templates/raw.yaml: error converting YAML to JSON: \
                 yaml: {problem}"
            )),
            "[{mode}] helm said: {helm_err}"
        );
        let berth_err = match berth_template(&c) {
            Ok(out) => panic!("[{mode}] berth rendered:\n{out}"),
            Err(e) => e,
        };
        assert!(
            berth_err.contains("binary/templates/raw.yaml") && berth_err.contains(problem),
            "[{mode}] berth said: {berth_err}"
        );
    }
}
