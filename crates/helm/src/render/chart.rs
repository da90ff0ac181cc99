//! A chart as a tree of files: `Chart.yaml`, `values.yaml`, `templates/`, `crds/`, other files
//! (for `.Files`), and subcharts unpacked under `charts/<name>/`.

use super::RenderError;
use super::funcs::encoding::parse_yaml;
use std::collections::BTreeMap;

/// One loaded chart (or subchart).
#[derive(Debug, Clone)]
pub struct Chart {
    /// `Chart.yaml` as JSON.
    pub metadata: serde_json::Value,
    /// The chart's own `values.yaml`.
    pub values: serde_json::Value,
    /// Templates, keyed by path relative to this chart (`templates/x.yaml`).
    pub templates: BTreeMap<String, String>,
    /// `crds/` files, applied before anything else and never templated.
    pub crds: BTreeMap<String, String>,
    /// Files visible through `.Files` (everything but templates, charts and the two YAMLs).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Subcharts by directory name.
    pub subcharts: BTreeMap<String, Chart>,
    /// `values.schema.json`, if the chart has one.
    pub schema: Option<Vec<u8>>,
}

impl Chart {
    /// The chart's `name` from `Chart.yaml`.
    pub fn name(&self) -> &str {
        self.metadata
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    }

    /// A `Chart.yaml` string field, empty when absent.
    pub fn meta_str(&self, key: &str) -> &str {
        self.metadata
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    }

    /// Builds a chart from `(path, bytes)` pairs relative to the chart root. A single leading
    /// directory (as in `helm package` archives: `hello/Chart.yaml`) is stripped.
    pub fn load(files: &[(String, Vec<u8>)]) -> Result<Chart, RenderError> {
        let files: Vec<(String, &[u8])> = files
            .iter()
            .map(|(p, b)| (normalize(p), b.as_slice()))
            .collect();
        let has_root_chart = files.iter().any(|(p, _)| p == "Chart.yaml");
        let prefix = if has_root_chart {
            String::new()
        } else {
            files
                .iter()
                .find_map(|(p, _)| p.strip_suffix("/Chart.yaml").filter(|d| !d.contains('/')))
                .map(|d| format!("{d}/"))
                .ok_or_else(|| RenderError::Chart("no Chart.yaml at the chart root".into()))?
        };
        let rooted: Vec<(String, &[u8])> = files
            .into_iter()
            .filter_map(|(p, b)| p.strip_prefix(prefix.as_str()).map(|p| (p.to_string(), b)))
            .collect();
        Self::from_rooted(&rooted, "")
    }

    fn from_rooted(files: &[(String, &[u8])], at: &str) -> Result<Chart, RenderError> {
        let mut chart = Chart {
            metadata: serde_json::Value::Null,
            values: serde_json::Value::Object(Default::default()),
            templates: BTreeMap::new(),
            crds: BTreeMap::new(),
            files: BTreeMap::new(),
            subcharts: BTreeMap::new(),
            schema: None,
        };
        // Only the top chart's `.helmignore` applies (to every path below it, subcharts'
        // included, as Helm walks the whole directory with it); a subchart's is a plain file.
        let ignore = files
            .iter()
            .filter(|_| at.is_empty())
            .find(|(p, _)| p == ".helmignore")
            .map(|(_, b)| super::helmignore::HelmIgnore::parse(&String::from_utf8_lossy(b)))
            .unwrap_or_default();
        let mut requirements = None;
        let mut sub_files: BTreeMap<String, Vec<(String, &[u8])>> = BTreeMap::new();
        let mut packed: Vec<(String, &[u8])> = Vec::new();
        for (path, bytes) in files {
            if ignore.ignores(path) {
                continue;
            }
            let text = || {
                String::from_utf8(bytes.to_vec())
                    .map_err(|_| RenderError::Chart(format!("{at}{path} is not valid UTF-8")))
            };
            if let Some(rest) = path.strip_prefix("charts/") {
                if let Some((name, inner)) = rest.split_once('/') {
                    sub_files
                        .entry(name.to_string())
                        .or_default()
                        .push((inner.to_string(), bytes));
                } else if rest.ends_with(".tgz") || rest.ends_with(".tar.gz") {
                    packed.push((format!("{at}{path}"), bytes));
                }
                continue;
            }
            match path.as_str() {
                "Chart.yaml" => {
                    chart.metadata = parse_yaml(&text()?)
                        .map_err(|e| RenderError::Chart(format!("{at}Chart.yaml: {e}")))?;
                }
                "values.yaml" => {
                    let values = super::goyaml::load::values_from_str(&text()?)
                        .map_err(|e| RenderError::Chart(format!("{at}values.yaml: {e}")))?;
                    chart.values = super::values::as_go_numbers(serde_json::Value::Object(values));
                }
                "values.schema.json" => chart.schema = Some(bytes.to_vec()),
                // Helm 2's dependency list (apiVersion v1 charts): read into the metadata's
                // `dependencies` once `Chart.yaml` is read, as Helm's loader does.
                "requirements.yaml" => {
                    requirements =
                        Some(parse_yaml(&text()?).map_err(|e| {
                            RenderError::Chart(format!("{at}requirements.yaml: {e}"))
                        })?);
                }
                // Lock files are chart metadata, not `.Files`.
                "Chart.lock" | "requirements.lock" => {}
                p if p.starts_with("templates/") => {
                    chart.templates.insert(path.clone(), text()?);
                }
                p if p.starts_with("crds/") => {
                    chart.crds.insert(path.clone(), text()?);
                }
                _ => {
                    chart.files.insert(path.clone(), bytes.to_vec());
                }
            }
        }
        if !chart.metadata.is_object() || chart.name().is_empty() {
            return Err(RenderError::Chart(format!(
                "{at}Chart.yaml is missing or has no name"
            )));
        }
        if let (Some(serde_json::Value::Object(req)), Some(meta)) =
            (requirements, chart.metadata.as_object_mut())
            && let Some(deps) = req.get("dependencies")
        {
            meta.insert("dependencies".into(), deps.clone());
        }
        for (archive, bytes) in packed {
            let (dir, files) = super::archive::unpack(&archive, bytes)?;
            let borrowed: Vec<(String, &[u8])> = files
                .iter()
                .map(|(p, b)| (p.clone(), b.as_slice()))
                .collect();
            let sub = Self::from_rooted(&borrowed, &format!("{at}charts/{dir}/"))?;
            chart.subcharts.insert(dir, sub);
        }
        for (dir, files) in sub_files {
            if !files.iter().any(|(p, _)| p == "Chart.yaml") {
                continue;
            }
            let sub = Self::from_rooted(&files, &format!("{at}charts/{dir}/"))?;
            chart.subcharts.insert(dir, sub);
        }
        Ok(chart)
    }
}

fn normalize(p: &str) -> String {
    p.trim_start_matches("./")
        .trim_start_matches('/')
        .to_string()
}
