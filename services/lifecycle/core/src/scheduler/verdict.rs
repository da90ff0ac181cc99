//! Whether a package's requirements hold, and why not.

use semver::Version;

use super::{Dependency, Node, Scheduler};
use crate::model::package::Phase;

/// Why a package is not enabled (the reason of its `RequirementsMet=False` condition).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::EnumIter,
)]
pub enum Reason {
    KubernetesVersion,
    PlatformVersion,
    Dependency,
    Conflict,
    Cycle,
}

impl Reason {
    /// The reason's name, as its condition shows it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The reason a condition names, if it is one of these.
    pub fn parse(s: &str) -> Option<Reason> {
        s.parse().ok()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub reason: Reason,
    pub message: String,
}

/// A decision of a pass about one package.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Enable,
    Wait(Blocked),
}

impl Scheduler {
    /// Whether `node`'s requirements hold now.
    pub fn verdict(&self, node: &Node, cycle: Option<&String>) -> Verdict {
        let Some(loaded) = &node.loaded else {
            return wait(Reason::Dependency, "not loaded yet".to_owned());
        };
        let r = &loaded.requirements;
        if let Some(c) = &r.kubernetes {
            match &self.kubernetes {
                None => {
                    return wait(
                        Reason::KubernetesVersion,
                        format!(
                            "requires Kubernetes {}; the cluster's version is not known yet",
                            c.0
                        ),
                    );
                }
                Some(v) if !c.0.matches(v) => {
                    return wait(
                        Reason::KubernetesVersion,
                        format!("requires Kubernetes {}, the cluster runs {v}", c.0),
                    );
                }
                Some(_) => {}
            }
        }
        if let Some(c) = &r.platform
            && !c.0.matches(&self.platform)
        {
            return wait(
                Reason::PlatformVersion,
                format!("requires berth {}, this is berth {}", c.0, self.platform),
            );
        }
        if let Some(path) = cycle {
            return wait(Reason::Cycle, format!("dependency cycle: {path}"));
        }
        for dep in &r.mandatory {
            if let Some(why) = self.unmet(node, dep, true) {
                return wait(Reason::Dependency, why);
            }
        }
        for dep in &r.conditional {
            if let Some(why) = self.unmet(node, dep, false) {
                return wait(Reason::Dependency, why);
            }
        }
        for group in &r.any_of {
            let met = group
                .members
                .iter()
                .any(|m| self.unmet(node, m, true).is_none());
            if !met {
                let names: Vec<&str> = group.members.iter().map(|m| m.name.as_str()).collect();
                return wait(
                    Reason::Dependency,
                    format!(
                        "requires one of {} (anyOf {:?}); none is running",
                        names.join(", "),
                        group.name
                    ),
                );
            }
        }
        for group in &r.none_of {
            for m in &group.members {
                if let Some(found) = self.conflicts(node, m) {
                    return wait(
                        Reason::Conflict,
                        format!("conflicts with {found} (noneOf {:?})", group.name),
                    );
                }
            }
        }
        Verdict::Enable
    }

    /// Why dependency `dep` of `node` does not hold; `None` when it does. An absent dependency
    /// fails only when `required`.
    fn unmet(&self, node: &Node, dep: &Dependency, required: bool) -> Option<String> {
        let wanted = dep
            .constraint
            .as_ref()
            .map(|c| format!(" {}", c.0))
            .unwrap_or_default();
        let Some((key, found)) = self.resolve(&node.id, &dep.name) else {
            return required
                .then(|| format!("requires {}{wanted}, which is not installed", dep.name));
        };
        if found.phase != Phase::Running {
            let at = if key.as_str() == dep.name {
                String::new()
            } else {
                format!(" ({key})")
            };
            return Some(format!(
                "requires {}{wanted}, which is not Running yet{at}",
                dep.name
            ));
        }
        let version = found.loaded.as_ref().map(|l| &l.version)?;
        match &dep.constraint {
            Some(c) if !c.0.matches(version) => Some(format!(
                "requires {}{wanted}, which runs version {version}",
                dep.name
            )),
            _ => None,
        }
    }

    /// The package `member` names when it is installed (and, loaded, matches its constraint).
    fn conflicts(&self, node: &Node, member: &Dependency) -> Option<String> {
        let (key, found) = self.resolve(&node.id, &member.name)?;
        match (&member.constraint, &found.loaded) {
            (Some(c), Some(l)) if !c.0.matches(&l.version) => None,
            (_, Some(l)) => Some(format!("{key} {}", l.version)),
            (_, None) => Some(key.to_string()),
        }
    }
}

fn wait(reason: Reason, message: String) -> Verdict {
    Verdict::Wait(Blocked { reason, message })
}

/// The cluster's version from the API server's `gitVersion` (`v1.31.2+k3s1`, `v1.30.4-gke.1`):
/// major.minor.patch only, so provider suffixes do not make it a prerelease.
pub fn kubernetes_version(git_version: &str) -> Option<Version> {
    let text = git_version.trim().trim_start_matches('v');
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let mut parts = text[..end].split('.').map(|p| p.parse::<u64>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some(Version::new(major, minor, patch))
}
