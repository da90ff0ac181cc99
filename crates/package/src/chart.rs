//! The files of a package that make up its Helm chart, as the release service receives them.

use std::fs;
use std::path::{Path, PathBuf};

use crate::load::{LoadError, Package};

/// Largest total size of the chart files handed to the release service.
pub const MAX_CHART_BYTES: u64 = 32 * 1024 * 1024;
/// Most chart files handed to the release service.
pub const MAX_CHART_FILES: usize = 5_000;
/// Deepest directory nesting followed; also stops loops through directory symlinks.
const MAX_CHART_DEPTH: usize = 32;

const CHART_ROOT_FILES: [&str; 2] = ["Chart.yaml", "values.yaml"];
const CHART_DIRS: [&str; 3] = ["templates", "charts", "crds"];

impl Package {
    /// The chart files: `Chart.yaml`, `values.yaml`, `templates/**`, `charts/**` and `crds/**`,
    /// as `('/'-separated relative path, contents)` sorted by path. `hooks/` and `openapi/` are
    /// never included. Symlinks are followed only when they stay inside the package.
    pub fn chart_files(&self) -> Result<Vec<(String, Vec<u8>)>, LoadError> {
        let root = self.root.canonicalize().map_err(|source| LoadError::Read {
            path: self.root.clone(),
            source,
        })?;
        let mut walk = Walk {
            root,
            files: Vec::new(),
            total: 0,
        };
        for name in CHART_ROOT_FILES {
            let path = self.root.join(name);
            if path.is_file() {
                walk.file(&path, name.to_owned())?;
            }
        }
        for dir in CHART_DIRS {
            let path = self.root.join(dir);
            if path.is_dir() {
                walk.dir(&path, dir, 0)?;
            }
        }
        walk.files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(walk.files)
    }
}

impl Package {
    /// Whether the package's chart may read the global values: a nested package (not the
    /// Global one) whose templates or subcharts name `global` anywhere (`.Values.global`,
    /// `index .Values "global"`, a helper's `$.Values.global`). A change of the global values
    /// re-renders exactly these packages. The word test errs on the side of re-rendering; a
    /// chart that reaches the global values without naming them (passing all of `.Values` to
    /// a function that builds the key at run time) is not seen.
    pub fn reads_global(&self) -> Result<bool, LoadError> {
        if crate::values::values_section(self).is_none()
            || self.definition.package_type == crate::PackageType::Global
            || !self.is_helm
        {
            return Ok(false);
        }
        let files = self.chart_files()?;
        Ok(files.iter().any(|(path, content)| {
            (path.starts_with("templates/") || path.starts_with("charts/"))
                && content.windows(GLOBAL_WORD.len()).any(|w| w == GLOBAL_WORD)
        }))
    }
}

const GLOBAL_WORD: &[u8] = crate::definition::GLOBAL_NAME.as_bytes();

struct Walk {
    root: PathBuf,
    files: Vec<(String, Vec<u8>)>,
    total: u64,
}

impl Walk {
    fn dir(&mut self, dir: &Path, rel: &str, depth: usize) -> Result<(), LoadError> {
        if depth > MAX_CHART_DEPTH {
            return Err(self.too_large(format!("{MAX_CHART_DEPTH} directory levels")));
        }
        self.check_inside(dir)?;
        let read_err = |source| LoadError::Read {
            path: dir.to_owned(),
            source,
        };
        let mut entries = fs::read_dir(dir)
            .map_err(read_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(read_err)?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let child = format!("{rel}/{name}");
            if path.is_dir() {
                self.dir(&path, &child, depth + 1)?;
            } else if path.is_file() {
                self.file(&path, child)?;
            }
        }
        Ok(())
    }

    fn file(&mut self, path: &Path, rel: String) -> Result<(), LoadError> {
        self.check_inside(path)?;
        let size = fs::metadata(path)
            .map_err(|source| LoadError::Read {
                path: path.to_owned(),
                source,
            })?
            .len();
        self.total = self.total.saturating_add(size);
        if self.total > MAX_CHART_BYTES {
            return Err(self.too_large(format!("{MAX_CHART_BYTES} bytes")));
        }
        if self.files.len() >= MAX_CHART_FILES {
            return Err(self.too_large(format!("{MAX_CHART_FILES} files")));
        }
        let bytes = fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        self.files.push((rel, bytes));
        Ok(())
    }

    fn check_inside(&self, path: &Path) -> Result<(), LoadError> {
        let real = path.canonicalize().map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
        if real.starts_with(&self.root) {
            Ok(())
        } else {
            Err(LoadError::LinkEscapes {
                path: path.to_owned(),
            })
        }
    }

    fn too_large(&self, limit: String) -> LoadError {
        LoadError::ChartTooLarge {
            root: self.root.clone(),
            limit,
        }
    }
}
