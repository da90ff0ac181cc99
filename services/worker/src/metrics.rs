//! Metrics hooks write to `METRICS_PATH`, kept per worker process with a `hook` label (and a
//! `package` label) and rendered in the Prometheus text format by [`render`].
//!
//! Kept by hand rather than in a `prometheus-client` registry: hook metrics have names and label
//! sets only known at run time, and groups must expire all their series at once, which a
//! registry of statically registered families does not model.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use berth_hooks::MetricOperation;

/// Names berth's own metrics use: a hook's would be served on the same page (a worker's
/// `/metrics`, `berth up`'s), where it could pass for berth's own series.
const RESERVED_PREFIX: &str = "berth_";
/// Most series kept; past it, new series are dropped (and logged) so a hook cannot exhaust memory.
const MAX_SERIES: usize = 10_000;
/// Buckets of `observe` when the hook names none (Prometheus' defaults).
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Clone, Debug, PartialEq)]
enum Series {
    Counter(f64),
    Gauge(f64),
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

/// A series: metric name and its sorted labels.
type SeriesKey = (String, Vec<(String, String)>);

/// Series values, and which series each (package, hook, group) wrote.
#[derive(Default)]
struct Store {
    series: BTreeMap<SeriesKey, Series>,
    groups: BTreeMap<(String, String, String), Vec<SeriesKey>>,
}

static STORE: Mutex<Option<Store>> = Mutex::new(None);

/// Records one run's metric operations.
pub fn record(package: &str, hook: &str, operations: &[MetricOperation]) {
    if operations.is_empty() {
        return;
    }
    let mut guard = STORE.lock().unwrap_or_else(|p| p.into_inner());
    let store = guard.get_or_insert_with(Store::default);
    // Grouped metrics: a run that writes group g replaces all earlier series of g.
    let mut expired = std::collections::BTreeSet::new();
    for op in operations {
        let group = match op {
            MetricOperation::Add { group, .. } | MetricOperation::Set { group, .. } => {
                group.clone()
            }
            MetricOperation::Expire { group } => Some(group.clone()),
            MetricOperation::Observe { .. } => None,
        };
        if let Some(g) = group
            && expired.insert(g.clone())
            && let Some(keys) = store
                .groups
                .remove(&(package.to_owned(), hook.to_owned(), g))
        {
            for key in keys {
                store.series.remove(&key);
            }
        }
    }
    for op in operations {
        let (name, labels, group) = match op {
            MetricOperation::Add {
                name,
                labels,
                group,
                ..
            }
            | MetricOperation::Set {
                name,
                labels,
                group,
                ..
            } => (name, labels, group.clone()),
            MetricOperation::Observe { name, labels, .. } => (name, labels, None),
            MetricOperation::Expire { .. } => continue,
        };
        if name.starts_with(RESERVED_PREFIX) {
            tracing::warn!(hook, metric = %name, "hook metrics may not use berth's own `berth_` names; dropped");
            continue;
        }
        let mut labels: Vec<(String, String)> =
            labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        labels.push(("hook".into(), hook.to_owned()));
        labels.push(("package".into(), package.to_owned()));
        labels.sort();
        let key = (name.clone(), labels);
        if !store.series.contains_key(&key) && store.series.len() >= MAX_SERIES {
            tracing::warn!(hook, metric = %name, "too many metric series; dropped");
            continue;
        }
        let entry = store.series.entry(key.clone());
        match op {
            MetricOperation::Add { value, .. } => {
                let s = entry.or_insert(Series::Counter(0.0));
                if let Series::Counter(v) = s {
                    *v += value;
                }
            }
            MetricOperation::Set { value, .. } => {
                entry.insert_entry(Series::Gauge(*value));
            }
            MetricOperation::Observe { value, buckets, .. } => {
                let bounds: Vec<f64> = if buckets.is_empty() {
                    DEFAULT_BUCKETS.to_vec()
                } else {
                    buckets.clone()
                };
                let s = entry.or_insert_with(|| Series::Histogram {
                    buckets: bounds.iter().map(|b| (*b, 0)).collect(),
                    sum: 0.0,
                    count: 0,
                });
                if let Series::Histogram {
                    buckets,
                    sum,
                    count,
                } = s
                {
                    for (bound, n) in buckets.iter_mut() {
                        if *value <= *bound {
                            *n += 1;
                        }
                    }
                    *sum += value;
                    *count += 1;
                }
            }
            MetricOperation::Expire { .. } => {}
        }
        if let Some(g) = group {
            store
                .groups
                .entry((package.to_owned(), hook.to_owned(), g))
                .or_default()
                .push(key);
        }
    }
}

fn label_text(labels: &[(String, String)], extra: Option<(&str, String)>) -> String {
    let escape = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    format!("{{{}}}", parts.join(","))
}

/// The current hook metrics in the Prometheus text exposition format.
pub fn render() -> String {
    let guard = STORE.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = String::new();
    let Some(store) = guard.as_ref() else {
        return out;
    };
    for ((name, labels), series) in &store.series {
        match series {
            Series::Counter(v) | Series::Gauge(v) => {
                let _ = writeln!(out, "{name}{} {v}", label_text(labels, None));
            }
            Series::Histogram {
                buckets,
                sum,
                count,
            } => {
                for (bound, n) in buckets {
                    let _ = writeln!(
                        out,
                        "{name}_bucket{} {n}",
                        label_text(labels, Some(("le", bound.to_string())))
                    );
                }
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {count}",
                    label_text(labels, Some(("le", "+Inf".into())))
                );
                let _ = writeln!(out, "{name}_sum{} {sum}", label_text(labels, None));
                let _ = writeln!(out, "{name}_count{} {count}", label_text(labels, None));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(text: &str) -> Vec<MetricOperation> {
        berth_hooks::outputs::parse_metrics(text).unwrap()
    }

    #[test]
    fn series_carry_the_hook_label_and_groups_expire() {
        record(
            "ns.m1",
            "a.sh",
            &ops(r#"{"name":"m1_runs","add":1}
{"name":"m1_runs","add":2}
{"name":"m1_size","set":5,"labels":{"x":"1"},"group":"g"}"#),
        );
        let text = render();
        assert!(
            text.contains(r#"m1_runs{hook="a.sh",package="ns.m1"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"m1_size{hook="a.sh",package="ns.m1",x="1"} 5"#),
            "{text}"
        );
        record(
            "ns.m1",
            "a.sh",
            &ops(r#"{"name":"m1_size","set":7,"labels":{"x":"2"},"group":"g"}"#),
        );
        let text = render();
        assert!(!text.contains(r#"x="1""#), "group g was replaced: {text}");
        assert!(
            text.contains(r#"m1_size{hook="a.sh",package="ns.m1",x="2"} 7"#),
            "{text}"
        );
        record("ns.m1", "a.sh", &ops(r#"{"group":"g","action":"expire"}"#));
        assert!(!render().contains("m1_size"));
    }

    #[test]
    fn hooks_cannot_write_berth_names() {
        record(
            "ns.m2",
            "b.sh",
            &ops(
                r#"{"name":"berth_packages","set":100,"labels":{"phase":"Running"}}
{"name":"m2_ok","set":1}"#,
            ),
        );
        let text = render();
        assert!(!text.contains("berth_packages"), "{text}");
        assert!(
            text.contains(r#"m2_ok{hook="b.sh",package="ns.m2"} 1"#),
            "{text}"
        );
    }
}
