//! The identifiers every service shares: a package instance's key and a generation of it.

/// A package instance's key: `<namespace>.<name>` for apps, `<name>` for modules. Lifecycle makes
/// it from a validated identity; every other service takes it back as lifecycle handed it out
/// (in a spec, a task, a binding registration) and uses it to name queues, releases and state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PackageKey(String);

impl PackageKey {
    /// A key lifecycle handed out earlier (stored, or echoed back by a worker or a task).
    pub fn from_issued(key: String) -> PackageKey {
        PackageKey(key)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for PackageKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Maps keyed by `PackageKey` can be asked with a key's text.
impl std::borrow::Borrow<str> for PackageKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A generation of a package: it grows with every Update and Remove, even across re-creation,
/// so a newer generation always supersedes an older one's tasks and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(i64);

impl Generation {
    pub fn new(generation: i64) -> Generation {
        Generation(generation)
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn keys_look_up_by_text_and_generations_order() {
        let mut map = HashMap::new();
        map.insert(PackageKey::from_issued("ns.app".into()), 1);
        assert_eq!(map.get("ns.app"), Some(&1));
        assert!(Generation::new(2) > Generation::new(1));
        assert_eq!(Generation::new(7).to_string(), "7");
    }
}
