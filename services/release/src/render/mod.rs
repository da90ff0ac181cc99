//! Helm-compatible chart rendering: Go templates via `gotmpl`, a hand-written Sprig/Helm
//! function pack, Helm's values coalescing and template data, and Helm's manifest splitting
//! and ordering.

mod archive;
pub mod chart;
mod context;
mod engine;
mod files;
pub mod funcs;
pub mod goyaml;
mod helmignore;
pub mod manifests;
mod methods;
mod schema;
pub mod value;
pub mod values;

pub use archive::unpack as unpack_chart;
pub use chart::Chart;
pub use context::Capabilities;

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
    /// The `crds/` files as written (path with chart prefix, text), as `helm template
    /// --include-crds` prints them: one block per file, not per document.
    pub crd_files: Vec<(String, String)>,
    /// Objects from templates, in Helm's install order.
    pub manifests: Vec<Manifest>,
    /// Objects annotated `helm.sh/hook` (not applied yet; kept for the record).
    pub hooks: Vec<Manifest>,
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
    #[error("parse error in {template}: {message}")]
    Parse { template: String, message: String },
    #[error("execution error in {template}: {message}")]
    Execute { template: String, message: String },
    #[error("{template} rendered invalid YAML: {message}")]
    Yaml { template: String, message: String },
}

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
    if !(values.is_object() || values.is_null()) {
        return Err(RenderError::Values("the top level must be a map".into()));
    }
    let chart = Chart::load(files)?;
    let scope = values::scope(&chart, chart.name(), values)?;
    schema::validate(&scope)?;
    let (notes, rendered): (Vec<_>, Vec<_>) = engine::render_files(&scope, release, caps, lookup)?
        .into_iter()
        .partition(|f| f.name.ends_with("/templates/NOTES.txt"));
    let (manifests, hooks) = manifests::objects(&rendered)?;
    let crds = crd_manifests(&scope, &format!("{}/", chart.name()))?;
    let mut crd_files = Vec::new();
    collect_crd_files(&scope, &format!("{}/", chart.name()), &mut crd_files);
    Ok(Rendered {
        crds,
        crd_files,
        manifests,
        hooks,
        chart_metadata: chart.metadata.clone(),
        values: scope.values,
        notes: notes.into_iter().map(|f| f.text).collect(),
    })
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
mod tests;
