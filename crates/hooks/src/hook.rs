//! A discovered hook: where it is, how to run it, and what it is bound to.

use std::cmp::Ordering;
use std::path::PathBuf;

use crate::config::{HookConfig, LifecycleBinding};

/// How the runner invokes the executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    /// A shell-operator hook: run without arguments.
    Shell,
    /// One hook of a module-sdk batch binary: run as `hook run <index>`.
    Batch { index: usize },
    /// The readiness probe of a batch binary: run as `hook ready`.
    BatchReadiness,
}

/// A hook ready to be run.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    /// Stable name used in logs, metrics labels and task keys:
    /// - shell hook: the path relative to the hooks dir (`"010-patch.sh"`, `"sub/x.py"`);
    /// - batch hook: `"<relative path>:<metadata.name>:<index>"` as Deckhouse names them,
    ///   or `"<relative path>:<index>"` when the SDK reported no name;
    /// - readiness: `"<relative path>-readiness"`.
    pub name: String,
    /// Absolute path of the executable.
    pub path: PathBuf,
    pub kind: HookKind,
    pub config: HookConfig,
}

impl Hook {
    /// One human-readable line per binding, for status and debug output,
    /// e.g. `"beforeHelm: 10"`, `"schedule: */10 * * * * *"`, `"kubernetes pods: v1/Pod"`.
    pub fn binding_summaries(&self) -> Vec<String> {
        let lifecycle = LifecycleBinding::ALL
            .into_iter()
            .filter_map(|b| self.config.order(b).map(|order| format!("{b}: {order}")));
        let schedules = self.config.schedule.iter().map(|s| {
            if s.name == "schedule" {
                format!("schedule: {}", s.crontab)
            } else {
                format!("schedule {}: {}", s.name, s.crontab)
            }
        });
        let kube = self.config.kubernetes.iter().map(|k| match &k.api_version {
            Some(version) => format!("kubernetes {}: {version}/{}", k.name, k.kind),
            None => format!("kubernetes {}: {}", k.name, k.kind),
        });
        lifecycle.chain(schedules).chain(kube).collect()
    }
}

/// Hooks bound to `binding`, in ascending order number, ties by name.
pub fn ordered(hooks: &[Hook], binding: LifecycleBinding) -> Vec<&Hook> {
    let mut bound: Vec<(f64, &Hook)> = hooks
        .iter()
        .filter_map(|h| h.config.order(binding).map(|order| (order, h)))
        .collect();
    bound.sort_by(|(a, ha), (b, hb)| {
        a.partial_cmp(b)
            .unwrap_or(Ordering::Equal)
            .then_with(|| ha.name.cmp(&hb.name))
    });
    bound.into_iter().map(|(_, h)| h).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(name: &str, config: &str) -> Hook {
        let config = HookConfig::parse(config).expect("valid config");
        Hook {
            name: name.to_owned(),
            path: PathBuf::from(name),
            kind: HookKind::Shell,
            config,
        }
    }

    #[test]
    fn orders_by_number_then_name() {
        let hooks = vec![
            hook("c.sh", r#"{"beforeHelm": 5}"#),
            hook("a.sh", r#"{"beforeHelm": 10}"#),
            hook("b.sh", r#"{"beforeHelm": 5, "afterHelm": 1}"#),
            hook("d.sh", r#"{"afterHelm": 1}"#),
        ];
        let names: Vec<&str> = ordered(&hooks, LifecycleBinding::BeforeHelm)
            .iter()
            .map(|h| h.name.as_str())
            .collect();
        assert_eq!(names, ["b.sh", "c.sh", "a.sh"]);
        assert!(ordered(&hooks, LifecycleBinding::OnStartup).is_empty());
    }

    #[test]
    fn summaries_list_every_binding() {
        let h = hook(
            "x.sh",
            r#"{"beforeHelm": 10, "schedule": [{"crontab": "*/10 * * * * *"}],
                "kubernetes": [{"name": "pods", "apiVersion": "v1", "kind": "Pod"}]}"#,
        );
        assert_eq!(
            h.binding_summaries(),
            [
                "beforeHelm: 10",
                "schedule: */10 * * * * *",
                "kubernetes pods: v1/Pod"
            ]
        );
    }
}
