//! Watching a set of objects, for readiness and drift: one kube-rs watcher per API resource
//! and namespace, so a release of N objects of K kinds holds K watches instead of N. A group of
//! one object is narrowed to it by name (a field selector); a larger group by the label berth
//! and Helm stamp on release objects, and the names are then filtered here.

use super::object::MANAGED_BY;
use super::{Applier, ObjectKey};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use kube::api::{DynamicObject, TypeMeta};
use kube::discovery::ApiResource;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use std::collections::{BTreeMap, HashSet};

/// What a watch saw of one of the watched objects.
#[derive(Debug, Clone)]
pub enum Seen {
    /// The object exists, in this form (listed, created or changed).
    Present(ObjectKey, Box<DynamicObject>),
    /// The object does not exist: deleted, missing from a (re)list, or no longer carrying the
    /// label the group's watch selects by.
    Absent(ObjectKey),
    /// A watch failed; it re-lists by itself after a backoff. `watch` names the group.
    Error { watch: String, error: String },
}

/// The objects of one API resource in one namespace, by name.
struct Group {
    resource: ApiResource,
    namespace: String,
    keys: BTreeMap<String, ObjectKey>,
}

impl Group {
    fn describe(&self) -> String {
        if self.namespace.is_empty() {
            format!("{}/{}", self.resource.api_version, self.resource.kind)
        } else {
            format!(
                "{}/{} in {}",
                self.resource.api_version, self.resource.kind, self.namespace
            )
        }
    }
}

/// Turns one group's watcher events into [`Seen`]s for the group's objects.
struct Translate {
    describe: String,
    /// The group's apiVersion and kind: a real API server sends list items without them, and
    /// readiness (kstatus) and drift checks go by kind.
    types: TypeMeta,
    keys: BTreeMap<String, ObjectKey>,
    /// Names seen during the current (re)list.
    listed: HashSet<String>,
}

impl Translate {
    fn ours(&self, o: &DynamicObject) -> Option<ObjectKey> {
        o.metadata
            .name
            .as_deref()
            .and_then(|n| self.keys.get(n))
            .cloned()
    }

    /// The object with its apiVersion and kind filled in where the server left them out.
    fn typed(&self, mut o: DynamicObject) -> Box<DynamicObject> {
        if o.types.as_ref().is_none_or(|t| t.kind.is_empty()) {
            o.types = Some(self.types.clone());
        }
        Box::new(o)
    }

    fn translate(&mut self, event: Result<Event<DynamicObject>, watcher::Error>) -> Vec<Seen> {
        match event {
            Err(e) => vec![Seen::Error {
                watch: self.describe.clone(),
                error: e.to_string(),
            }],
            Ok(Event::Init) => {
                self.listed.clear();
                Vec::new()
            }
            Ok(Event::InitApply(o)) => {
                let Some(key) = self.ours(&o) else {
                    return Vec::new();
                };
                self.listed.insert(key.name.clone());
                vec![Seen::Present(key, self.typed(o))]
            }
            Ok(Event::InitDone) => self
                .keys
                .iter()
                .filter(|(name, _)| !self.listed.contains(*name))
                .map(|(_, key)| Seen::Absent(key.clone()))
                .collect(),
            Ok(Event::Apply(o)) => self
                .ours(&o)
                .map(|k| Seen::Present(k, self.typed(o)))
                .into_iter()
                .collect(),
            Ok(Event::Delete(o)) => self.ours(&o).map(Seen::Absent).into_iter().collect(),
        }
    }
}

impl Applier {
    /// Watches the given objects (keys resolved by [`Applier::key_for`]). Every object is
    /// reported once the watches have listed (present or absent), then on every change. The
    /// watchers back off and re-list by themselves after errors, so the stream only ends when
    /// dropped.
    pub fn watch_objects(&self, objects: &[(ObjectKey, ApiResource)]) -> BoxStream<'static, Seen> {
        let mut groups: BTreeMap<(String, String, String), Group> = BTreeMap::new();
        for (key, ar) in objects {
            let id = (
                ar.api_version.clone(),
                ar.plural.clone(),
                key.namespace.clone(),
            );
            groups
                .entry(id)
                .or_insert_with(|| Group {
                    resource: ar.clone(),
                    namespace: key.namespace.clone(),
                    keys: BTreeMap::new(),
                })
                .keys
                .insert(key.name.clone(), key.clone());
        }
        let streams = groups.into_values().map(|group| {
            let config = match group.keys.keys().next() {
                Some(only) if group.keys.len() == 1 => {
                    watcher::Config::default().fields(&format!("metadata.name={only}"))
                }
                _ => {
                    watcher::Config::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1))
                }
            };
            let api = self.api_in(&group.namespace, &group.resource);
            let mut state = Translate {
                describe: group.describe(),
                types: TypeMeta {
                    api_version: group.resource.api_version.clone(),
                    kind: group.resource.kind.clone(),
                },
                keys: group.keys,
                listed: HashSet::new(),
            };
            watcher::watcher(api, config)
                .default_backoff()
                .flat_map(move |event| futures::stream::iter(state.translate(event)))
                .boxed()
        });
        futures::stream::select_all(streams).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn object(name: &str) -> DynamicObject {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        DynamicObject::new(name, &ar)
    }

    fn names(seen: &[Seen]) -> Vec<String> {
        seen.iter()
            .map(|s| match s {
                Seen::Present(k, _) => format!("+{}", k.name),
                Seen::Absent(k) => format!("-{}", k.name),
                Seen::Error { .. } => "!".into(),
            })
            .collect()
    }

    fn translate(names: &[&str]) -> Translate {
        Translate {
            describe: "v1/ConfigMap in ns".into(),
            types: TypeMeta {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            keys: names.iter().map(|n| (n.to_string(), key(n))).collect(),
            listed: HashSet::new(),
        }
    }

    #[test]
    fn list_items_without_api_version_and_kind_are_reported_with_the_group_s() {
        // A real API server leaves apiVersion and kind out of list items; kstatus needs them.
        let mut t = translate(&["a"]);
        let mut bare = object("a");
        bare.types = None;
        let seen = t.translate(Ok(Event::InitApply(bare)));
        let [Seen::Present(_, live)] = &seen[..] else {
            panic!("{seen:?}")
        };
        let types = live.types.as_ref().expect("types filled in");
        assert_eq!(
            (types.api_version.as_str(), types.kind.as_str()),
            ("v1", "ConfigMap")
        );
    }

    #[test]
    fn a_relist_reports_missing_objects_absent_and_ignores_others() {
        let mut t = translate(&["a", "b"]);
        let mut seen = Vec::new();
        for e in [
            Event::Init,
            Event::InitApply(object("a")),
            Event::InitApply(object("other")),
            Event::InitDone,
            Event::Apply(object("other")),
            Event::Delete(object("a")),
        ] {
            seen.extend(t.translate(Ok(e)));
        }
        assert_eq!(names(&seen), vec!["+a", "-b", "-a"]);
        // A re-list that finds `b` reports it present, and `a` (still gone) absent.
        let mut seen = Vec::new();
        for e in [Event::Init, Event::InitApply(object("b")), Event::InitDone] {
            seen.extend(t.translate(Ok(e)));
        }
        assert_eq!(names(&seen), vec!["+b", "-a"]);
    }
}
