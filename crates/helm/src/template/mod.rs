//! The `helm template` front end: reads a chart from disk (a directory or a packed `.tgz`),
//! merges `-f` values files and `--set` assignments as Helm does, renders without a cluster
//! and prints the manifests in `helm template`'s layout. `berth render` and the compatibility
//! oracle tests both go through here, so what the oracle proves holds for the command;
//! [`command`] is that command, from its arguments to its output.

pub mod command;
mod set;

pub use set::parse_set;

use crate::ReleaseInfo;
use crate::render::manifests::documents_text;
use crate::render::{Capabilities, Listing, RenderError, Rendered, render_listing};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Most files a chart directory may hold; charts are small, so a larger tree is a mistake
/// (e.g. pointing at a home directory) rather than a chart.
const MAX_CHART_FILES: usize = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: more than {MAX_CHART_FILES} files; is this a chart directory?")]
    TooManyFiles { path: PathBuf },
    #[error("values file {path}: {message}")]
    ValuesFile { path: PathBuf, message: String },
    #[error("--set {expr:?}: {message}")]
    Set { expr: String, message: String },
    #[error(transparent)]
    Render(#[from] RenderError),
}

/// What `helm template [NAME] CHART` takes.
#[derive(Debug, Clone)]
pub struct TemplateOptions {
    /// The release name (`helm template` defaults it to `release-name`).
    pub release_name: String,
    pub namespace: String,
    /// `-f/--values` files, later ones winning.
    pub values_files: Vec<PathBuf>,
    /// `--set` expressions, applied after the files, later ones winning.
    pub set: Vec<String>,
    /// `--include-crds`: print `crds/` objects first.
    pub include_crds: bool,
    /// `--kube-version`, e.g. `v1.30.0`; the renderer's default otherwise.
    pub kube_version: Option<String>,
    /// `--api-versions`: added after the default API versions (`.Capabilities.APIVersions`).
    pub api_versions: Vec<String>,
}

impl Default for TemplateOptions {
    fn default() -> Self {
        TemplateOptions {
            release_name: "release-name".into(),
            namespace: "default".into(),
            values_files: Vec::new(),
            set: Vec::new(),
            include_crds: false,
            kube_version: None,
            api_versions: Vec::new(),
        }
    }
}

/// Reads a chart directory or packed chart (`.tgz`) into `(path, bytes)` pairs.
pub fn read_chart(path: &Path) -> Result<Vec<(String, Vec<u8>)>, TemplateError> {
    let read_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| TemplateError::Read { path: p, source }
    };
    if path.is_file() {
        let bytes = std::fs::read(path).map_err(read_err(path))?;
        let name = path.to_string_lossy();
        let (_, files) = crate::render::unpack_chart(&name, &bytes)?;
        return Ok(files);
    }
    let mut found = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(read_err(&dir))? {
            let entry = entry.map_err(read_err(&dir))?;
            let entry_path = entry.path();
            // The entry's own type needs no extra system call; links are followed as before.
            let is_dir = match entry.file_type() {
                Ok(t) if t.is_symlink() => entry_path.is_dir(),
                Ok(t) => t.is_dir(),
                Err(_) => entry_path.is_dir(),
            };
            if is_dir {
                stack.push(entry_path);
                continue;
            }
            if found.len() >= MAX_CHART_FILES {
                return Err(TemplateError::TooManyFiles {
                    path: path.to_path_buf(),
                });
            }
            let rel = entry_path
                .strip_prefix(path)
                .unwrap_or(&entry_path)
                .to_string_lossy()
                .replace('\\', "/");
            found.push((rel, entry_path));
        }
    }
    let read = |files: &[(String, PathBuf)]| -> Result<Vec<(String, Vec<u8>)>, TemplateError> {
        files
            .iter()
            .map(|(rel, p)| Ok((rel.clone(), std::fs::read(p).map_err(read_err(p))?)))
            .collect()
    };
    // Many small files: read them on two threads.
    let mut out = if found.len() >= PARALLEL_READ_FILES {
        let (first, second) = found.split_at(found.len() / 2);
        std::thread::scope(|s| {
            let other = s.spawn(|| read(second));
            let mut out = read(first)?;
            match other.join() {
                Ok(rest) => out.extend(rest?),
                Err(_) => out.extend(read(second)?),
            }
            Ok::<_, TemplateError>(out)
        })?
    } else {
        read(&found)?
    };
    out.sort();
    Ok(out)
}

/// From this many files on, a chart directory is read on two threads.
const PARALLEL_READ_FILES: usize = 64;

/// The user-supplied values: `-f` files merged in order, then `--set` expressions.
pub fn user_values(opts: &TemplateOptions) -> Result<Value, TemplateError> {
    let mut values = Value::Object(Map::new());
    for path in &opts.values_files {
        let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Read {
            path: path.clone(),
            source,
        })?;
        let parsed = crate::render::goyaml::load::values_from_str(&text).map_err(|message| {
            TemplateError::ValuesFile {
                path: path.clone(),
                message,
            }
        })?;
        merge_maps(
            &mut values,
            crate::render::values::as_go_numbers(Value::Object(parsed)),
        );
    }
    for expr in &opts.set {
        parse_set(expr, &mut values).map_err(|message| TemplateError::Set {
            expr: expr.clone(),
            message,
        })?;
    }
    Ok(values)
}

/// Helm's merge of values files: maps merge key by key, anything else in `over` replaces.
fn merge_maps(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_maps(existing, v)
                    }
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// Renders the chart as `helm template` does (no cluster, no objects built).
pub fn render(
    files: &[(String, Vec<u8>)],
    opts: &TemplateOptions,
) -> Result<Listing, TemplateError> {
    let values = user_values(opts)?;
    let release = ReleaseInfo {
        name: opts.release_name.clone(),
        namespace: opts.namespace.clone(),
        revision: 1,
        is_install: true,
        is_upgrade: false,
    };
    let mut caps = Capabilities::default();
    if let Some(v) = &opts.kube_version {
        caps.kube_version = if v.starts_with('v') {
            v.clone()
        } else {
            format!("v{v}")
        };
    }
    caps.api_versions.extend(opts.api_versions.iter().cloned());
    let render = || render_listing(files, &values, &release, &caps);
    if crate::render::budgeted() {
        return Ok(render()?);
    }
    // The memory budget the release service renders with by default, so `berth render`
    // refuses what a package would be refused for.
    let budget = crate::render::Budget {
        memory: Some(crate::render::DEFAULT_MEMORY_BUDGET),
        ..Default::default()
    };
    Ok(crate::render::with_budget(budget, render)?)
}

/// The text `helm template` prints for a full render (see [`listing_output`]).
pub fn output(rendered: &Rendered, include_crds: bool) -> String {
    listing_output(&rendered.listing, include_crds)
}

/// The text `helm template` prints: the release manifest (CRDs with `--include-crds`, then
/// the manifests in install order) with surrounding whitespace trimmed and one newline, then
/// each hook as its own `# Source:` block.
pub fn listing_output(listing: &Listing, include_crds: bool) -> String {
    let mut manifest = String::new();
    if include_crds {
        for (path, text) in &listing.crd_files {
            manifest.push_str(&format!("---\n# Source: {path}\n{text}\n"));
        }
    }
    manifest.push_str(&documents_text(&listing.manifests));
    let mut out = manifest.trim().to_string();
    out.push('\n');
    out.push_str(&documents_text(&listing.hooks));
    out
}

/// Reads the chart at `chart`, renders it and returns `helm template`'s output.
pub fn template(chart: &Path, opts: &TemplateOptions) -> Result<String, TemplateError> {
    let files = read_chart(chart)?;
    let listing = render(&files, opts)?;
    Ok(listing_output(&listing, opts.include_crds))
}
