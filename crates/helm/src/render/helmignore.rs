//! `.helmignore`: files a chart author excluded from the chart (and so from `.Files` and
//! templates). Helm's rules: blank lines and `#` comments are skipped; a leading `!` negates;
//! a trailing `/` matches directories only; a pattern without `/` matches the base name of
//! any path component, one with `/` matches the path from the chart root; later rules win.

/// Parsed `.helmignore` rules.
#[derive(Debug, Default)]
pub struct HelmIgnore {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    pattern: glob::Pattern,
    negate: bool,
    dir_only: bool,
    anchored: bool,
}

impl HelmIgnore {
    /// Parses the file; lines that are not valid globs are skipped, as Helm logs and skips them.
    pub fn parse(text: &str) -> HelmIgnore {
        let rules = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|line| {
                let (negate, line) = match line.strip_prefix('!') {
                    Some(rest) => (true, rest),
                    None => (false, line),
                };
                let (dir_only, line) = match line.strip_suffix('/') {
                    Some(rest) => (true, rest),
                    None => (false, line),
                };
                let line = line.trim_start_matches("./");
                let anchored = line.contains('/');
                let pattern = glob::Pattern::new(line.trim_start_matches('/')).ok()?;
                Some(Rule {
                    pattern,
                    negate,
                    dir_only,
                    anchored,
                })
            })
            .collect();
        HelmIgnore { rules }
    }

    /// Whether `path` (relative to the chart root) is ignored.
    pub fn ignores(&self, path: &str) -> bool {
        let opts = glob::MatchOptions {
            require_literal_separator: true,
            ..Default::default()
        };
        let parts: Vec<&str> = path.split('/').collect();
        let mut ignored = false;
        for rule in &self.rules {
            // Every ancestor directory and (unless dir-only) the file itself is a candidate.
            let hit = (0..parts.len()).any(|i| {
                let is_dir = i + 1 < parts.len();
                if rule.dir_only && !is_dir {
                    return false;
                }
                if rule.anchored {
                    rule.pattern.matches_with(&parts[..=i].join("/"), opts)
                } else {
                    rule.pattern.matches_with(parts[i], opts)
                }
            });
            if hit {
                ignored = !rule.negate;
            }
        }
        ignored
    }
}

#[cfg(test)]
mod tests {
    use super::HelmIgnore;

    #[test]
    fn helm_style_rules() {
        let ig = HelmIgnore::parse("# comment\n*.tmp\n.git/\ndocs/*.md\n!docs/keep.md\n");
        assert!(ig.ignores("a.tmp"));
        assert!(ig.ignores("templates/b.tmp"));
        assert!(ig.ignores(".git/config"));
        assert!(ig.ignores("docs/readme.md"));
        assert!(!ig.ignores("docs/keep.md"));
        assert!(!ig.ignores("templates/cm.yaml"));
        assert!(
            !ig.ignores(".gitignore"),
            "dir-only rules do not match files"
        );
    }
}
