//! Settings conversions, in Deckhouse's format: the settings schema names the version of the
//! settings it describes (`x-config-version: N`, 1 when absent), and `openapi/conversions/`
//! holds one file per step, `v<N>.yaml`, whose jq expressions turn settings of version N-1 into
//! settings of version N:
//!
//! ```yaml
//! version: 2
//! conversions:
//!   - .replicas = .size | del(.size)
//! description: size is now called replicas   # optional
//! ```
//!
//! This module reads and checks the files (every step from 2 to the schema's version present,
//! nothing beyond it, bounded sizes) and answers which expressions take settings of one version
//! to the latest. It runs no jq: the caller evaluates the expressions in order, each on the
//! previous one's output, within its bounded jq evaluator.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// The directory of conversion files, relative to the package root.
pub const CONVERSIONS_DIR: &str = "openapi/conversions";
/// Highest settings version accepted (`x-config-version` and file versions).
pub const MAX_SETTINGS_VERSION: u32 = 1000;
/// Most expressions in one conversion file.
pub const MAX_CONVERSIONS_PER_STEP: usize = 64;
/// Longest conversion expression, in bytes (as long as a hook's jq program may be).
pub const MAX_CONVERSION_BYTES: usize = 64 * 1024;

/// Why a package's conversions are refused; the loader names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("x-config-version must be an integer from 1 to {MAX_SETTINGS_VERSION}, got {0}")]
    SchemaVersion(String),
    #[error("file name must be v<N>.yaml with N from 2 to {MAX_SETTINGS_VERSION}")]
    FileName,
    #[error("{0}")]
    Format(String),
    #[error(
        "settings version {latest} needs a conversion file for every step from 2 to {latest}: v{missing}.yaml is missing"
    )]
    Missing { latest: u32, missing: u32 },
    #[error("converts to version {found}, beyond the settings schema's x-config-version {latest}")]
    BeyondLatest { found: u32, latest: u32 },
    #[error("settings version {from} is not one this package knows (1 to {latest})")]
    UnknownVersion { from: u32, latest: u32 },
}

/// One step: the expressions taking settings of `version - 1` to `version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub version: u32,
    pub expressions: Vec<String>,
}

impl Step {
    /// The file the step comes from, relative to the package root (for error messages).
    pub fn file(&self) -> String {
        format!("{CONVERSIONS_DIR}/v{}.yaml", self.version)
    }
}

/// The conversions of a package version, and the settings version its schema describes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conversions {
    latest: u32,
    /// By the version each step converts to.
    steps: BTreeMap<u32, Step>,
}

impl Conversions {
    /// The settings version the package's schema describes (1 without `x-config-version`).
    pub fn latest(&self) -> u32 {
        self.latest.max(1)
    }

    /// The steps that take settings of version `from` to [`latest`](Self::latest), in order;
    /// empty when `from` is the latest.
    pub fn chain(&self, from: u32) -> Result<Vec<&Step>, ConversionError> {
        let latest = self.latest();
        if from == 0 || from > latest {
            return Err(ConversionError::UnknownVersion { from, latest });
        }
        // `range` panics on an empty range such as `4..=3`; `from < latest` here.
        if from == latest {
            return Ok(vec![]);
        }
        Ok(self
            .steps
            .range(from + 1..=latest)
            .map(|(_, s)| s)
            .collect())
    }

    /// Every step, in order (what a Load report carries to lifecycle).
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.steps.values()
    }

    /// Conversions as a Load report carries them (`latest` 0 means 1), checked as the loader
    /// checks the files: every step from 2 to `latest` once, none beyond, bounded sizes. The
    /// error names the offending step's file.
    pub fn from_steps(
        latest: u32,
        steps: impl IntoIterator<Item = Step>,
    ) -> Result<Conversions, (String, ConversionError)> {
        let latest = latest.max(1);
        let schema = || "openapi/settings.yaml".to_owned();
        if latest > MAX_SETTINGS_VERSION {
            return Err((schema(), ConversionError::SchemaVersion(latest.to_string())));
        }
        let mut by_version = BTreeMap::new();
        for step in steps {
            let file = step.file();
            let fail = |m: String| Err((file.clone(), ConversionError::Format(m)));
            if step.version < 2 || step.version > latest {
                return Err((
                    file,
                    ConversionError::BeyondLatest {
                        found: step.version,
                        latest,
                    },
                ));
            }
            if step.expressions.is_empty() || step.expressions.len() > MAX_CONVERSIONS_PER_STEP {
                return fail(format!(
                    "conversions: from 1 to {MAX_CONVERSIONS_PER_STEP} expressions, got {}",
                    step.expressions.len()
                ));
            }
            if let Some(i) = step
                .expressions
                .iter()
                .position(|e| e.trim().is_empty() || e.len() > MAX_CONVERSION_BYTES)
            {
                return fail(format!(
                    "conversions[{i}]: empty or longer than {MAX_CONVERSION_BYTES} bytes"
                ));
            }
            if by_version.insert(step.version, step).is_some() {
                return fail("the step appears twice".into());
            }
        }
        if let Some(missing) = (2..=latest).find(|v| !by_version.contains_key(v)) {
            return Err((
                format!("{CONVERSIONS_DIR}/v{missing}.yaml"),
                ConversionError::Missing { latest, missing },
            ));
        }
        Ok(Conversions {
            latest,
            steps: by_version,
        })
    }

    /// Reads `x-config-version` from the settings schema document and the files of
    /// [`CONVERSIONS_DIR`] under `root`, with `read` (the loader's bounded YAML reader). The
    /// error names the offending file.
    /// `list` names the files of a directory of the package (`None`: no such directory) and
    /// `read` reads one; both take paths relative to the package, and read beneath it.
    pub(crate) fn load<E>(
        root: &Path,
        settings_schema: Option<&Value>,
        list: impl Fn(&str) -> Result<Option<Vec<std::ffi::OsString>>, E>,
        read: impl Fn(&str) -> Result<Option<Value>, E>,
        fail: impl Fn(&Path, ConversionError) -> E,
    ) -> Result<Conversions, E> {
        let latest = match settings_schema.and_then(|s| s.get("x-config-version")) {
            None => 1,
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| (1..=MAX_SETTINGS_VERSION).contains(n))
                .ok_or_else(|| {
                    fail(
                        &root.join("openapi/settings.yaml"),
                        ConversionError::SchemaVersion(v.to_string()),
                    )
                })?,
        };
        let dir = root.join(CONVERSIONS_DIR);
        let mut steps = BTreeMap::new();
        if let Some(names) = list(CONVERSIONS_DIR)? {
            for name in names.iter().take(MAX_SETTINGS_VERSION as usize + 1) {
                let name = name.to_string_lossy().into_owned();
                let path = dir.join(&name);
                if name.starts_with('.') {
                    continue;
                }
                let version =
                    file_version(&name).ok_or_else(|| fail(&path, ConversionError::FileName))?;
                let doc = read(&format!("{CONVERSIONS_DIR}/{name}"))?.unwrap_or(Value::Null);
                let step = parse_step(&doc, version).map_err(|e| fail(&path, e))?;
                if version > latest {
                    return Err(fail(
                        &path,
                        ConversionError::BeyondLatest {
                            found: version,
                            latest,
                        },
                    ));
                }
                steps.insert(version, step);
            }
        }
        if let Some(missing) = (2..=latest).find(|v| !steps.contains_key(v)) {
            return Err(fail(
                &dir.join(format!("v{missing}.yaml")),
                ConversionError::Missing { latest, missing },
            ));
        }
        Ok(Conversions { latest, steps })
    }
}

/// `v<N>.yaml` (or `.yml`) → N, for N from 2 to [`MAX_SETTINGS_VERSION`].
fn file_version(name: &str) -> Option<u32> {
    let stem = name
        .strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"))?;
    let digits = stem.strip_prefix('v')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    digits
        .parse::<u32>()
        .ok()
        .filter(|n| (2..=MAX_SETTINGS_VERSION).contains(n))
}

fn parse_step(doc: &Value, file_version: u32) -> Result<Step, ConversionError> {
    let format = |m: String| ConversionError::Format(m);
    let Value::Object(fields) = doc else {
        return Err(format(
            "must be a mapping with version and conversions".into(),
        ));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "version" | "conversions" | "description"))
    {
        return Err(format(format!(
            "unknown field {unknown:?} (version, conversions and description are known)"
        )));
    }
    match fields.get("version").and_then(Value::as_u64) {
        Some(v) if v == u64::from(file_version) => {}
        Some(v) => {
            return Err(format(format!(
                "version is {v}, but the file is named for version {file_version}"
            )));
        }
        None => return Err(format("version: required, an integer".into())),
    }
    let Some(Value::Array(items)) = fields.get("conversions") else {
        return Err(format(
            "conversions: required, a list of jq expressions".into(),
        ));
    };
    if items.is_empty() || items.len() > MAX_CONVERSIONS_PER_STEP {
        return Err(format(format!(
            "conversions: from 1 to {MAX_CONVERSIONS_PER_STEP} expressions, got {}",
            items.len()
        )));
    }
    let expressions = items
        .iter()
        .enumerate()
        .map(|(i, item)| match item.as_str() {
            Some(text) if text.trim().is_empty() => {
                Err(format(format!("conversions[{i}]: empty expression")))
            }
            Some(text) if text.len() > MAX_CONVERSION_BYTES => Err(format(format!(
                "conversions[{i}]: longer than {MAX_CONVERSION_BYTES} bytes"
            ))),
            Some(text) => Ok(text.to_owned()),
            None => Err(format(format!("conversions[{i}]: must be a string"))),
        })
        .collect::<Result<_, _>>()?;
    Ok(Step {
        version: file_version,
        expressions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::PathBuf;

    fn load(dir: &Path, schema: Value) -> Result<Conversions, (PathBuf, ConversionError)> {
        Conversions::load(
            dir,
            Some(&schema),
            |rel| {
                Ok(std::fs::read_dir(dir.join(rel)).ok().map(|entries| {
                    let mut names: Vec<_> = entries.map(|e| e.unwrap().file_name()).collect();
                    names.sort();
                    names
                }))
            },
            |rel| {
                Ok(std::fs::read_to_string(dir.join(rel))
                    .ok()
                    .map(|t| serde_saphyr::from_str(&t).expect("yaml")))
            },
            |p, e| (p.to_owned(), e),
        )
    }

    fn write(dir: &Path, name: &str, text: &str) {
        let d = dir.join(CONVERSIONS_DIR);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), text).unwrap();
    }

    #[test]
    fn the_chain_runs_from_a_stored_version_to_the_latest() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "v2.yaml",
            "version: 2\nconversions: ['.b = .a | del(.a)']\n",
        );
        write(
            dir.path(),
            "v3.yaml",
            "version: 3\ndescription: c\nconversions: ['.c = .b', 'del(.b)']\n",
        );
        let c = load(dir.path(), json!({"x-config-version": 3})).unwrap();
        assert_eq!(c.latest(), 3);
        let versions = |from| {
            c.chain(from)
                .unwrap()
                .iter()
                .map(|s| s.version)
                .collect::<Vec<_>>()
        };
        assert_eq!(versions(1), [2, 3]);
        assert_eq!(versions(2), [3]);
        assert!(versions(3).is_empty());
        assert_eq!(c.chain(1).unwrap()[1].expressions, [".c = .b", "del(.b)"]);
        assert_eq!(
            c.chain(4),
            Err(ConversionError::UnknownVersion { from: 4, latest: 3 })
        );
        assert!(c.chain(0).is_err());
    }

    #[test]
    fn conversions_from_a_report_are_checked_as_files_are() {
        let step = |version, e: &[&str]| Step {
            version,
            expressions: e.iter().map(|s| (*s).to_owned()).collect(),
        };
        let c = Conversions::from_steps(3, [step(3, &["del(.b)"]), step(2, &[".b = .a"])]).unwrap();
        assert_eq!(c.latest(), 3);
        assert_eq!(c.steps().map(|s| s.version).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(c.chain(1).unwrap()[0].file(), "openapi/conversions/v2.yaml");
        assert_eq!(Conversions::from_steps(0, []).unwrap().latest(), 1);
        let (file, e) = Conversions::from_steps(3, [step(2, &["."])]).unwrap_err();
        assert_eq!(file, "openapi/conversions/v3.yaml");
        assert_eq!(
            e,
            ConversionError::Missing {
                latest: 3,
                missing: 3
            }
        );
        let (file, _) = Conversions::from_steps(2, [step(2, &["."]), step(4, &["."])]).unwrap_err();
        assert_eq!(file, "openapi/conversions/v4.yaml");
        let (_, e) = Conversions::from_steps(2, [step(2, &[])]).unwrap_err();
        assert!(e.to_string().contains("from 1 to"), "{e}");
        let (_, e) = Conversions::from_steps(2, [step(2, &["."]), step(2, &["."])]).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(Conversions::from_steps(MAX_SETTINGS_VERSION + 1, []).is_err());
    }

    #[test]
    fn without_a_version_or_files_settings_are_version_one() {
        let dir = tempfile::tempdir().unwrap();
        let c = load(dir.path(), json!({"type": "object"})).unwrap();
        assert_eq!(c.latest(), 1);
        assert!(c.chain(1).unwrap().is_empty());
    }

    #[test]
    fn broken_conversions_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "v3.yaml", "version: 3\nconversions: ['.']\n");
        let (path, e) = load(dir.path(), json!({"x-config-version": 3})).unwrap_err();
        assert!(path.ends_with("openapi/conversions/v2.yaml"), "{path:?}");
        assert_eq!(
            e,
            ConversionError::Missing {
                latest: 3,
                missing: 2
            }
        );
        let (_, e) = load(dir.path(), json!({"x-config-version": 2})).unwrap_err();
        assert!(
            matches!(
                e,
                ConversionError::BeyondLatest {
                    found: 3,
                    latest: 2
                }
            ),
            "{e}"
        );
        let (_, e) = load(dir.path(), json!({"x-config-version": "3"})).unwrap_err();
        assert!(matches!(e, ConversionError::SchemaVersion(_)), "{e}");

        for (name, text, says) in [
            (
                "v2.yaml",
                "version: 3\nconversions: ['.']\n",
                "named for version 2",
            ),
            ("v2.yaml", "version: 2\nconversions: []\n", "from 1 to"),
            (
                "v2.yaml",
                "version: 2\nconversions: [1]\n",
                "must be a string",
            ),
            (
                "v2.yaml",
                "version: 2\nconversions: ['.']\nextra: 1\n",
                "unknown field",
            ),
            ("v2.yaml", "conversions: ['.']\n", "version: required"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), name, text);
            let (_, e) = load(dir.path(), json!({"x-config-version": 2})).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "two.yaml", "version: 2\nconversions: ['.']\n");
        let (_, e) = load(dir.path(), json!({"x-config-version": 2})).unwrap_err();
        assert_eq!(e, ConversionError::FileName);
        let long = format!(
            "version: 2\nconversions: ['{}']\n",
            ".".repeat(MAX_CONVERSION_BYTES + 1)
        );
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "v2.yaml", &long);
        let (_, e) = load(dir.path(), json!({"x-config-version": 2})).unwrap_err();
        assert!(e.to_string().contains("longer than"), "{e}");
    }

    #[test]
    fn file_names_are_v_and_a_number_from_two() {
        assert_eq!(file_version("v2.yaml"), Some(2));
        assert_eq!(file_version("v10.yml"), Some(10));
        for bad in [
            "v1.yaml",
            "v0.yaml",
            "v02.yaml",
            "2.yaml",
            "v.yaml",
            "v2.json",
            "v99999.yaml",
        ] {
            assert_eq!(file_version(bad), None, "{bad}");
        }
    }
}
