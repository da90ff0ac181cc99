//! Reading a package directory into a [`Package`].
//!
//! Every error names the file it came from. Metadata files are read with a size bound so a
//! hostile package cannot make the loader allocate without limit. The package directory is
//! opened once and its files beneath it (`crate::tree`): links inside the package are
//! followed, one leading out of it is refused, whatever happens to the tree meanwhile.

use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::tree::{Dir, Links, TreeError};

use serde_json::{Map, Value};

use crate::conversions::{ConversionError, Conversions};
use crate::definition::{Definition, DefinitionError, PackageType, ValuesLayout};
use crate::schema::{Schema, SchemaError};

/// Largest `package.yaml`, `values.yaml` or schema file read by the loader.
pub const MAX_METADATA_BYTES: u64 = 4 * 1024 * 1024;

pub(crate) const DEFINITION_FILE: &str = "package.yaml";
/// An addon-operator module has no `package.yaml`: its chart's `Chart.yaml` names it.
const CHART_FILE: &str = "Chart.yaml";
const STATIC_VALUES_FILE: &str = "values.yaml";
const SETTINGS_SCHEMA_FILES: [&str; 2] = ["openapi/settings.yaml", "openapi/config-values.yaml"];
const VALUES_SCHEMA_FILE: &str = "openapi/values.yaml";

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{}: not a package directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("{}: file is missing (every package needs package.yaml, or Chart.yaml for an addon-operator module)", path.display())]
    MissingDefinition { path: PathBuf },
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{}: file is larger than the limit of {limit} bytes", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{}: invalid YAML: {message}", path.display())]
    Yaml { path: PathBuf, message: String },
    #[error("{}: {source}", path.display())]
    Definition {
        path: PathBuf,
        source: DefinitionError,
    },
    #[error("{}: static values must be a mapping, got {found}", path.display())]
    StaticValues { path: PathBuf, found: String },
    #[error("{}: {source}", path.display())]
    Schema { path: PathBuf, source: SchemaError },
    #[error("{}: chart files exceed the limit of {limit}", root.display())]
    ChartTooLarge { root: PathBuf, limit: String },
    #[error("{}: points outside the package", path.display())]
    LinkEscapes { path: PathBuf },
    #[error("{}: reading the chart files took longer than {deadline:?}", root.display())]
    ChartWalkDeadline {
        root: PathBuf,
        deadline: std::time::Duration,
    },
    #[error("{}: {source}", path.display())]
    Conversion {
        path: PathBuf,
        source: ConversionError,
    },
    #[error("{}: a Global package carries global hooks and values, not a chart (remove Chart.yaml and templates/)", root.display())]
    GlobalChart { root: PathBuf },
    /// An `operators/*.yaml` spec is invalid; the message names the operator, controller and
    /// field.
    #[error("{message}")]
    Operator { path: PathBuf, message: String },
    #[error("{}: {count} operator files; a package has at most {MAX_OPERATOR_FILES}", dir.display())]
    TooManyOperators { dir: PathBuf, count: usize },
}

/// Files a package's `operators/` may hold.
pub const MAX_OPERATOR_FILES: usize = 64;

impl LoadError {
    /// Whether reading again may succeed (an I/O error, a walk that ran out of time); every
    /// other error is the package's content, which the same files give again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LoadError::Read { .. } | LoadError::ChartWalkDeadline { .. }
        )
    }
}

/// A loaded package version.
#[derive(Debug, Clone)]
pub struct Package {
    pub root: PathBuf,
    pub definition: Definition,
    /// Static values; always an object.
    pub static_values: Value,
    pub settings_schema: Option<Schema>,
    /// The values schema, with the settings schema's properties merged in (see [`load`]).
    pub values_schema: Option<Schema>,
    /// `Some` when `hooks/` exists.
    pub hooks_dir: Option<PathBuf>,
    /// Whether the package has a Helm chart (`Chart.yaml` or `templates/`).
    pub is_helm: bool,
    /// The settings version its schema describes and the conversions from older ones
    /// (`openapi/conversions/`).
    pub conversions: Conversions,
    /// The values layout: `values:` of `package.yaml`; else nested for a Global package and
    /// for a Module whose `values.yaml` keeps its values under the camelCase name (the
    /// addon-operator module layout); else flat.
    pub layout: ValuesLayout,
    /// Δ-controller operators of `operators/*.yaml` (and `*.yml`), in file-name order.
    pub operators: Vec<berth_operator::Operator>,
}

/// Loads the package in `root`.
///
/// The settings schema is `openapi/settings.yaml`, else `openapi/config-values.yaml`. Because
/// values are flat (settings sit at the root of the values), the settings schema's `properties`
/// are merged into the values schema's `properties` when the values schema declares `properties`
/// (values-schema entries win), as Deckhouse's `x-extend` does; otherwise a closed values schema
/// would reject every setting.
pub fn load(root: &Path) -> Result<Package, LoadError> {
    let files = PackageFiles::open(root)?;
    let mut definition_path = root.join(DEFINITION_FILE);
    let mut chart_module = false;
    let definition_doc = match files.read_yaml(DEFINITION_FILE)? {
        Some(doc) => doc,
        None => {
            let chart_path = root.join(CHART_FILE);
            let chart =
                files
                    .read_yaml(CHART_FILE)?
                    .ok_or_else(|| LoadError::MissingDefinition {
                        path: definition_path.clone(),
                    })?;
            definition_path = chart_path;
            chart_module = true;
            addon_operator_definition(&chart)
        }
    };
    let definition =
        Definition::from_document(&definition_doc).map_err(|source| LoadError::Definition {
            path: definition_path,
            source,
        })?;
    let (static_values, sectioned) = static_values(&files, &definition)?;
    let layout = match (definition.values_layout, definition.package_type) {
        (Some(layout), _) => layout,
        (None, PackageType::Global) => ValuesLayout::Nested,
        (None, PackageType::Module) if sectioned => ValuesLayout::Nested,
        (None, _) => ValuesLayout::Flat,
    };

    let mut settings_doc = None;
    for name in SETTINGS_SCHEMA_FILES {
        if files.is_file(name)? {
            let doc = files.read_yaml(name)?.unwrap_or(Value::Null);
            settings_doc = Some((root.join(name), doc));
            break;
        }
    }
    let settings_schema = settings_doc
        .as_ref()
        .map(|(path, doc)| compile(path, doc))
        .transpose()?;

    let conversions = Conversions::load(
        root,
        settings_doc.as_ref().map(|(_, doc)| doc),
        |rel| files.names(rel),
        |rel| files.read_yaml(rel),
        |path, source| LoadError::Conversion {
            path: path.to_owned(),
            source,
        },
    )?;

    let values_path = root.join(VALUES_SCHEMA_FILE);
    let values_schema = match files.read_yaml(VALUES_SCHEMA_FILE)? {
        None => None,
        Some(mut doc) => {
            if let Some((_, settings)) = &settings_doc {
                extend_with_settings(&mut doc, settings);
            }
            Some(compile(&values_path, &doc)?)
        }
    };

    let hooks = root.join("hooks");
    let is_helm = files.is_file(CHART_FILE)? || files.is_dir("templates")?;
    if is_helm && definition.package_type == PackageType::Global {
        return Err(LoadError::GlobalChart {
            root: root.to_owned(),
        });
    }
    // An addon-operator module (a chart without package.yaml) has no operators: a chart's own
    // `operators/` directory, if it has one, is not berth's.
    let operators = if chart_module {
        Vec::new()
    } else {
        load_operators(&files, root)?
    };
    Ok(Package {
        root: root.to_owned(),
        operators,
        static_values,
        settings_schema,
        values_schema,
        hooks_dir: files.is_dir("hooks")?.then_some(hooks),
        is_helm,
        conversions,
        layout,
        definition,
    })
}

/// Reads `operators/*.yaml`: each file Operator documents (`dcontroller.io/v1alpha1`) or a
/// bare `controllers:` spec named after the file; every spec checked whole, and two operators
/// of one name (their views would share a group) refused.
fn load_operators(
    files: &PackageFiles,
    root: &Path,
) -> Result<Vec<berth_operator::Operator>, LoadError> {
    let Some(names) = files.names("operators")? else {
        return Ok(Vec::new());
    };
    let names: Vec<String> = names
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .collect();
    if names.len() > MAX_OPERATOR_FILES {
        return Err(LoadError::TooManyOperators {
            dir: root.join("operators"),
            count: names.len(),
        });
    }
    let mut out: Vec<berth_operator::Operator> = Vec::new();
    for name in names {
        let rel = format!("operators/{name}");
        let path = root.join(&rel);
        let limit = berth_operator::limits::MAX_SPEC_BYTES as u64;
        let Some(bytes) = files.read_bounded(&rel, limit)? else {
            continue;
        };
        let text = String::from_utf8(bytes).map_err(|e| LoadError::Yaml {
            path: path.clone(),
            message: format!("not UTF-8: {e}"),
        })?;
        let stem = name.rsplit_once('.').map_or(name.as_str(), |(s, _)| s);
        let ops = berth_operator::read_operators(&text, &path.display().to_string(), stem)
            .map_err(|message| LoadError::Operator {
                path: path.clone(),
                message,
            })?;
        for op in ops {
            if out.len() == berth_operator::limits::MAX_OPERATORS_PER_PACKAGE {
                return Err(LoadError::Operator {
                    message: format!(
                        "{}: more than {} operators in this package",
                        path.display(),
                        berth_operator::limits::MAX_OPERATORS_PER_PACKAGE
                    ),
                    path,
                });
            }
            if out.iter().any(|o| o.name == op.name) {
                return Err(LoadError::Operator {
                    message: format!(
                        "{}: a second operator named {:?} in this package",
                        path.display(),
                        op.name
                    ),
                    path,
                });
            }
            out.push(op);
        }
    }
    Ok(out)
}

/// Whether `dir` holds a package: a `package.yaml`, or the `Chart.yaml` of an addon-operator
/// module (looked at beneath `dir`).
pub fn is_package_dir(dir: &Path) -> bool {
    PackageFiles::open(dir).is_ok_and(|files| {
        files.is_file(DEFINITION_FILE).unwrap_or(false)
            || files.is_file(CHART_FILE).unwrap_or(false)
    })
}

/// A package directory, opened once; its files are read beneath it (links followed inside the
/// package only).
pub(crate) struct PackageFiles<'a> {
    dir: Dir,
    root: &'a Path,
}

impl<'a> PackageFiles<'a> {
    pub(crate) fn open(root: &'a Path) -> Result<Self, LoadError> {
        let dir = Dir::open(root).map_err(|_| LoadError::NotADirectory {
            path: root.to_owned(),
        })?;
        Ok(PackageFiles { dir, root })
    }

    /// The package's directory, for walks beneath it.
    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The error for `rel`'s resolution failing.
    pub(crate) fn error(&self, e: TreeError) -> LoadError {
        match e {
            TreeError::Escapes { path, .. } | TreeError::Link { path, .. } => {
                LoadError::LinkEscapes { path }
            }
            TreeError::Kind { path, found, .. } => LoadError::Read {
                path,
                source: io::Error::new(io::ErrorKind::InvalidData, format!("is {found}")),
            },
            TreeError::Changed { path } => LoadError::Read {
                path,
                source: io::Error::other("changed while it was read"),
            },
            TreeError::Io { path, source } => LoadError::Read { path, source },
        }
    }

    pub(crate) fn is_file(&self, rel: &str) -> Result<bool, LoadError> {
        self.dir
            .is_file(Path::new(rel), Links::Beneath)
            .map_err(|e| self.error(e))
    }

    pub(crate) fn is_dir(&self, rel: &str) -> Result<bool, LoadError> {
        self.dir
            .is_dir(Path::new(rel), Links::Beneath)
            .map_err(|e| self.error(e))
    }

    /// The names in the directory `rel`, sorted; `None` when it is not a directory.
    pub(crate) fn names(&self, rel: &str) -> Result<Option<Vec<OsString>>, LoadError> {
        let dir = match self.dir.dir(Path::new(rel), Links::Beneath) {
            Ok(dir) => dir,
            Err(e) if e.is_not_found() || e.is_not_a_directory() => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        dir.names().map(Some).map_err(|e| self.error(e))
    }

    /// Reads and parses a YAML file; `Ok(None)` when it does not exist, `Value::Null` when
    /// empty.
    pub(crate) fn read_yaml(&self, rel: &str) -> Result<Option<Value>, LoadError> {
        let path = self.root.join(rel);
        let Some(bytes) = self.read_bounded(rel, MAX_METADATA_BYTES)? else {
            return Ok(None);
        };
        let text = String::from_utf8(bytes).map_err(|e| LoadError::Yaml {
            path: path.clone(),
            message: format!("not UTF-8: {e}"),
        })?;
        if text.trim().is_empty() {
            return Ok(Some(Value::Null));
        }
        serde_saphyr::from_str::<Value>(&text)
            .map(Some)
            .map_err(|e| LoadError::Yaml {
                path,
                message: first_line(&e.to_string()),
            })
    }

    /// At most `limit` bytes of the file `rel`; `None` when it does not exist.
    pub(crate) fn read_bounded(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>, LoadError> {
        let path = self.root.join(rel);
        let file = match self.dir.file(Path::new(rel), Links::Beneath) {
            Ok((file, _)) => file,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        let mut bytes = Vec::new();
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| LoadError::Read {
                path: path.clone(),
                source,
            })?;
        if bytes.len() as u64 > limit {
            return Err(LoadError::TooLarge { path, limit });
        }
        Ok(Some(bytes))
    }
}

/// The definition of an addon-operator module, which has none of its own: a Module named and
/// versioned by its chart, with nested values (addon-operator's only layout).
fn addon_operator_definition(chart: &Value) -> Value {
    let field = |name: &str| chart.get(name).cloned().unwrap_or(Value::Null);
    serde_json::json!({
        "type": "Module",
        "name": field("name"),
        "version": field("version"),
        "description": field("description"),
        "values": "nested",
    })
}

/// The package's own static values, and whether `values.yaml` kept them under the camelCase
/// name (the addon-operator / Deckhouse module layout).
fn static_values(
    files: &PackageFiles<'_>,
    definition: &Definition,
) -> Result<(Value, bool), LoadError> {
    let path = files.root.join(STATIC_VALUES_FILE);
    let mut values = match files.read_yaml(STATIC_VALUES_FILE)? {
        None | Some(Value::Null) => return Ok((Value::Object(Map::new()), false)),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(LoadError::StaticValues {
                path,
                found: other.to_string(),
            });
        }
    };
    // Deckhouse modules keep their values under the camelCase package name; use only that part
    // (addon-operator's `<name>Enabled` and `global` keys beside it are not the package's).
    match values.remove(&definition.values_key()) {
        Some(Value::Object(section)) => Ok((Value::Object(section), true)),
        Some(Value::Null) => Ok((Value::Object(Map::new()), true)),
        Some(other) => {
            values.insert(definition.values_key(), other);
            Ok((Value::Object(values), false))
        }
        None => Ok((Value::Object(values), false)),
    }
}

fn compile(path: &Path, doc: &Value) -> Result<Schema, LoadError> {
    Schema::from_openapi(doc).map_err(|source| LoadError::Schema {
        path: path.to_owned(),
        source,
    })
}

fn extend_with_settings(values: &mut Value, settings: &Value) {
    let (Some(Value::Object(own)), Some(Value::Object(inherited))) =
        (values.get_mut("properties"), settings.get("properties"))
    else {
        return;
    };
    for (name, schema) in inherited {
        own.entry(name.clone()).or_insert_with(|| schema.clone());
    }
}

/// The parser appends a source snippet after the first line; status messages want one line.
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or(message);
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}
