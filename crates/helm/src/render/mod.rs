//! Helm-compatible chart rendering: Go templates via `gotmpl`, a hand-written Sprig/Helm
//! function pack, Helm's values coalescing and template data, and Helm's manifest splitting
//! and ordering.

mod archive;
mod bytes;
pub mod chart;
mod context;
mod engine;
mod exec;
mod files;
pub mod funcs;
pub mod gotpl;
pub mod goyaml;
mod helmignore;
pub mod manifests;
pub mod meter;
mod schema;
pub mod value;
pub mod values;

pub use archive::unpack as unpack_chart;
pub use chart::Chart;
pub use context::Capabilities;
pub use exec::{Budget, budgeted, measured, with_budget};
pub use manifests::{Document, Listing};

use crate::ReleaseInfo;

/// One rendered Kubernetes object.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The template it came from, e.g. `hello/templates/deployment.yaml`.
    pub source: String,
    pub object: serde_json::Value,
    /// The document's text as rendered (what Helm stores in the release's manifest).
    pub text: String,
}

impl Manifest {
    pub fn kind(&self) -> &str {
        self.object
            .get("kind")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    }
}

/// Everything one render produces.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// Objects from `crds/`, applied first and never templated.
    pub crds: Vec<Manifest>,
    /// Objects from templates, in Helm's install order.
    pub manifests: Vec<Manifest>,
    /// Objects annotated `helm.sh/hook` with known hook events.
    pub hooks: Vec<Manifest>,
    /// The documents as Helm prints and records them (including documents that hold no
    /// object, which `manifests` leaves out).
    pub listing: Listing,
    /// `Chart.yaml` of the top chart.
    pub chart_metadata: serde_json::Value,
    /// The values the templates saw (`.Values` of the top chart).
    pub values: serde_json::Value,
    /// The top chart's rendered `templates/NOTES.txt` (empty without one).
    pub notes: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("invalid chart: {0}")]
    Chart(String),
    #[error("invalid values: {0}")]
    Values(String),
    /// `message` names the template (and, where helm's does, the line).
    #[error("{message}")]
    Parse { template: String, message: String },
    /// `message` is helm's text, which names the template and the place in it.
    #[error("{message}")]
    Execute { template: String, message: String },
    #[error("{template} rendered invalid YAML: {message}")]
    Yaml { template: String, message: String },
    /// The render hit one of its limits ([`Budget`]: time, output, memory); `message` names
    /// the limit and the template. The same chart and values hit it again: a caller should
    /// not retry it as it is.
    #[error("{message}")]
    Limit { template: String, message: String },
}

/// The memory budget of a render when its caller sets none of its own: `berth render` and the
/// release service's default (`RenderLimits`). What the corpus of public charts builds at
/// most is far below it (see `docs/decisions/render-budget.md`).
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;

/// Renders a chart given as `(path, content)` pairs relative to its root.
pub fn render_chart(
    files: &[(String, Vec<u8>)],
    values: &serde_json::Value,
    release: &ReleaseInfo,
) -> Result<Vec<Manifest>, RenderError> {
    render_release(files, values, release, &Capabilities::default()).map(|r| r.manifests)
}

/// Read access to the cluster for Helm's `lookup`. Called from the (blocking) render thread.
pub trait Lookup: Send + Sync {
    /// The object (or, with an empty `name`, the list) as JSON; `None` when it does not exist.
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, String>;
}

/// Renders a chart with the given cluster capabilities, returning CRDs and hooks as well.
/// `lookup` finds nothing, as in `helm template`.
pub fn render_release(
    files: &[(String, Vec<u8>)],
    values: &serde_json::Value,
    release: &ReleaseInfo,
    caps: &Capabilities,
) -> Result<Rendered, RenderError> {
    render_release_with_lookup(files, values, release, caps, None)
}

/// Like [`render_release`], with `lookup` answered from a cluster.
pub fn render_release_with_lookup(
    files: &[(String, Vec<u8>)],
    values: &serde_json::Value,
    release: &ReleaseInfo,
    caps: &Capabilities,
    lookup: Option<std::sync::Arc<dyn Lookup>>,
) -> Result<Rendered, RenderError> {
    let chart = Chart::load(files)?;
    let scope = scope_for(&chart, values)?;
    let (notes, rendered) = render_templates(&scope, release, caps, lookup)?;
    let (manifests, hooks, (listed, listed_hooks)) = manifests::objects(&rendered)?;
    let crds = crd_manifests(&scope, &format!("{}/", chart.name()))?;
    Ok(Rendered {
        crds,
        manifests,
        hooks,
        listing: Listing {
            crd_files: crd_files(&scope, &chart),
            manifests: listed,
            hooks: listed_hooks,
            notes: notes.clone(),
        },
        chart_metadata: chart.metadata.clone(),
        values: scope.values,
        notes,
    })
}

/// Renders a chart without a cluster into what `helm template` prints. Each document is
/// checked as Helm checks it, but no objects are built, which makes this the fast path for
/// `berth render`.
pub fn render_listing(
    files: &[(String, Vec<u8>)],
    values: &serde_json::Value,
    release: &ReleaseInfo,
    caps: &Capabilities,
) -> Result<Listing, RenderError> {
    let chart = Chart::load(files)?;
    let scope = scope_for(&chart, values)?;
    let is_notes = |f: &engine::RenderedFile| f.name.ends_with("/templates/NOTES.txt");
    let mut notes = String::new();
    let (manifests, hooks) = if engine::is_large(&scope) {
        // Check rendered files on a second thread while the next ones execute (handed over
        // in batches, to wake it rarely). Helm reports a template error before any YAML
        // error, and so does this.
        const BATCH: usize = 16;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<engine::RenderedFile>>(8);
        std::thread::scope(|s| {
            let checker = s.spawn(move || {
                rx.into_iter()
                    .flatten()
                    .map(manifests::check_file)
                    .collect()
            });
            let mut batch = Vec::with_capacity(BATCH);
            // Sending fails only if the checker panicked, which `join` reports below.
            let rendered = engine::render_each(&scope, release, caps, None, |f| {
                if is_notes(&f) {
                    notes = notes_text(f.text);
                } else {
                    batch.push(f);
                    if batch.len() == BATCH {
                        let _ = tx.send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)));
                    }
                }
            });
            let _ = tx.send(batch);
            drop(tx);
            let checked: Vec<manifests::Checked> = checker.join().map_err(|_| {
                RenderError::Chart("the manifest checker stopped unexpectedly".into())
            })?;
            rendered?;
            manifests::collect_checked(checked)
        })?
    } else {
        let (n, rendered) = render_templates(&scope, release, caps, None)?;
        notes = n;
        manifests::listing(rendered)?
    };
    Ok(Listing {
        crd_files: crd_files(&scope, &chart),
        manifests,
        hooks,
        notes,
    })
}

/// The chart's scope tree for the user's `values`, checked against its schemas.
fn scope_for<'c>(
    chart: &'c Chart,
    values: &serde_json::Value,
) -> Result<values::Scope<'c>, RenderError> {
    if !(values.is_object() || values.is_null()) {
        return Err(RenderError::Values("the top level must be a map".into()));
    }
    let scope = values::scope(chart, chart.name(), values)?;
    schema::validate(&scope)?;
    Ok(scope)
}

/// Executes the templates: `(NOTES.txt text, the other rendered files)`.
fn render_templates(
    scope: &values::Scope<'_>,
    release: &ReleaseInfo,
    caps: &Capabilities,
    lookup: Option<std::sync::Arc<dyn Lookup>>,
) -> Result<(String, Vec<engine::RenderedFile>), RenderError> {
    let (notes, rendered): (Vec<_>, Vec<_>) = engine::render_files(scope, release, caps, lookup)?
        .into_iter()
        .partition(|f| f.name.ends_with("/templates/NOTES.txt"));
    Ok((
        notes.into_iter().map(|f| notes_text(f.text)).collect(),
        rendered,
    ))
}

/// `NOTES.txt` is text for people, never read as YAML: bytes that are not UTF-8 become U+FFFD,
/// as in the release record Helm writes (through Go's JSON encoder).
fn notes_text(text: String) -> String {
    match bytes::lossy(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(clean) => clean,
    }
}

fn crd_files(scope: &values::Scope<'_>, chart: &Chart) -> Vec<(String, String)> {
    let mut out = Vec::new();
    collect_crd_files(scope, &format!("{}/", chart.name()), &mut out);
    out
}

/// The objects in `crds/` of the chart and its enabled subcharts, which Helm applies before
/// rendering (so templates can test for their kinds in `.Capabilities`).
pub fn chart_crds(
    files: &[(String, Vec<u8>)],
    values: &serde_json::Value,
) -> Result<Vec<Manifest>, RenderError> {
    let chart = Chart::load(files)?;
    let scope = values::scope(&chart, chart.name(), values)?;
    crd_manifests(&scope, &format!("{}/", chart.name()))
}

fn collect_crd_files(scope: &values::Scope<'_>, prefix: &str, out: &mut Vec<(String, String)>) {
    for (path, text) in &scope.chart.crds {
        out.push((format!("{prefix}{path}"), text.clone()));
    }
    for sub in &scope.subcharts {
        collect_crd_files(sub, &format!("{prefix}charts/{}/", sub.name), out);
    }
}

fn crd_manifests(scope: &values::Scope<'_>, prefix: &str) -> Result<Vec<Manifest>, RenderError> {
    let mut out = Vec::new();
    for (path, text) in &scope.chart.crds {
        for doc in manifests::split_documents(text) {
            let object =
                funcs::encoding::parse_yaml(&doc).map_err(|message| RenderError::Yaml {
                    template: format!("{prefix}{path}"),
                    message,
                })?;
            if object.is_object() {
                out.push(Manifest {
                    source: format!("{prefix}{path}"),
                    object,
                    text: doc,
                });
            }
        }
    }
    for sub in &scope.subcharts {
        out.extend(crd_manifests(
            sub,
            &format!("{prefix}charts/{}/", sub.name),
        )?);
    }
    Ok(out)
}

#[cfg(test)]
mod binary_tests;
#[cfg(test)]
mod dependency_tests;
#[cfg(test)]
mod fidelity_tests;
#[cfg(test)]
mod tests;
