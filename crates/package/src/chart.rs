//! The files of a package that make up its Helm chart, as the release service receives them.

use std::path::{Path, PathBuf};

use crate::load::{LoadError, Package, PackageFiles};
use crate::tree::{Kind, Links};

/// Largest total size of the chart files handed to the release service.
pub const MAX_CHART_BYTES: u64 = 32 * 1024 * 1024;
/// Most chart files handed to the release service.
pub const MAX_CHART_FILES: usize = 5_000;
/// Deepest directory nesting followed; also stops loops through directory symlinks.
const MAX_CHART_DEPTH: usize = 32;
/// Most directory entries (files, directories, links) the walk may visit. Links are followed
/// as Helm follows them, so a tree whose links form a DAG (16 links per level, 11 levels) has
/// 16^10 paths: the walk stops at this many instead of visiting them all (issue 30.6).
pub const MAX_CHART_VISITS: usize = 4 * MAX_CHART_FILES;
/// Longest the walk may take (it runs on a blocking thread; see the worker's `chart_files`).
pub const CHART_WALK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

const CHART_ROOT_FILES: [&str; 2] = ["Chart.yaml", "values.yaml"];
const CHART_DIRS: [&str; 3] = ["templates", "charts", "crds"];

impl Package {
    /// The chart files: `Chart.yaml`, `values.yaml`, `templates/**`, `charts/**` and `crds/**`,
    /// as `('/'-separated relative path, contents)` sorted by path. `hooks/` and `openapi/` are
    /// never included. Everything is read beneath the package directory's descriptor: symlinks
    /// are followed (as Helm follows them) only while they stay inside the package, the walk
    /// bounded by [`MAX_CHART_VISITS`] entries and [`CHART_WALK_DEADLINE`]. Blocking: call it
    /// off the async runtime.
    pub fn chart_files(&self) -> Result<Vec<(String, Vec<u8>)>, LoadError> {
        let package = PackageFiles::open(&self.root)?;
        let mut walk = Walk {
            package: &package,
            root: self.root.clone(),
            files: Vec::new(),
            total: 0,
            visits: 0,
            deadline: std::time::Instant::now() + CHART_WALK_DEADLINE,
        };
        for name in CHART_ROOT_FILES {
            if package.is_file(name)? {
                walk.file(name.to_owned())?;
            }
        }
        for dir in CHART_DIRS {
            if package.is_dir(dir)? {
                walk.dir(dir, 0)?;
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

struct Walk<'a> {
    package: &'a PackageFiles<'a>,
    root: PathBuf,
    files: Vec<(String, Vec<u8>)>,
    total: u64,
    visits: usize,
    deadline: std::time::Instant,
}

impl Walk<'_> {
    fn dir(&mut self, rel: &str, depth: usize) -> Result<(), LoadError> {
        if depth > MAX_CHART_DEPTH {
            return Err(self.too_large(format!("{MAX_CHART_DEPTH} directory levels")));
        }
        let names = self.package.names(rel)?.unwrap_or_default();
        for name in names {
            self.visit()?;
            let child = format!("{rel}/{}", name.to_string_lossy());
            let kind = self
                .package
                .dir()
                .kind(Path::new(&child), Links::Beneath)
                .map_err(|e| self.package.error(e))?;
            match kind {
                Some(Kind::Directory) => self.dir(&child, depth + 1)?,
                Some(Kind::File) => self.file(child)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Counts one entry against the walk's bounds.
    fn visit(&mut self) -> Result<(), LoadError> {
        self.visits += 1;
        if self.visits > MAX_CHART_VISITS {
            return Err(self.too_large(format!(
                "{MAX_CHART_VISITS} directory entries visited (links that reach the same directories many times over?)"
            )));
        }
        if std::time::Instant::now() > self.deadline {
            return Err(LoadError::ChartWalkDeadline {
                root: self.root.clone(),
                deadline: CHART_WALK_DEADLINE,
            });
        }
        Ok(())
    }

    fn file(&mut self, rel: String) -> Result<(), LoadError> {
        if self.files.len() >= MAX_CHART_FILES {
            return Err(self.too_large(format!("{MAX_CHART_FILES} files")));
        }
        let left = MAX_CHART_BYTES.saturating_sub(self.total);
        let bytes = self
            .package
            .read_bounded(&rel, left)
            .map_err(|e| match e {
                LoadError::TooLarge { .. } => self.too_large(format!("{MAX_CHART_BYTES} bytes")),
                other => other,
            })?
            .unwrap_or_default();
        self.total += bytes.len() as u64;
        self.files.push((rel, bytes));
        Ok(())
    }

    fn too_large(&self, limit: String) -> LoadError {
        LoadError::ChartTooLarge {
            root: self.root.clone(),
            limit,
        }
    }
}
