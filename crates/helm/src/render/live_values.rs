//! `.Values` as Helm templates see it: one map per release, which `set`, `unset`, `merge` and
//! `mergeOverwrite` change in place. A change is seen by the rest of the template and by every
//! template rendered after it (Helm renders subcharts first, then each chart's templates in
//! reverse name order), and a subchart's `.Values` is the same map as its parent's
//! `.Values.<subchart>`.
//!
//! Template values are immutable here (`gotmpl` shares them by reference count), so the
//! mutation is emulated: this store holds the current values tree, reads of `.Values` are
//! rewritten to ask it (`render::methods`), and after a mutating function returns, the dict it
//! changed is swapped into the tree when it is one of the tree's maps (found by identity).
//! Dicts that are not part of `.Values` keep value semantics, except through the
//! `$_ := set $d ...` rewrite.

use gotmpl::{Result as TplResult, TemplateError, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

/// One step of a path into the values tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(Arc<str>),
    Index(usize),
}

pub struct LiveValues {
    state: Mutex<State>,
}

struct State {
    /// The top chart's values; each subchart's values are inside, at its path.
    tree: Value,
    /// Path of each chart scope's values in `tree`.
    scopes: Vec<Vec<Seg>>,
    /// Root data maps handed to templates (by address) → their scope. The data is kept so the
    /// address cannot be reused by another map while rendering.
    roots: HashMap<usize, (usize, Value)>,
    /// Address of each map in `tree` → its path; built on first use. Entries for maps that
    /// were since replaced are left in place and detected on lookup.
    index: Option<HashMap<usize, Vec<Seg>>>,
}

fn map_addr(v: &Value) -> Option<usize> {
    match v {
        Value::Map(m) => Some(Arc::as_ptr(m) as *const () as usize),
        _ => None,
    }
}

impl LiveValues {
    /// `tree` holds the top chart's values; `scopes` the path of each chart's values in it. A
    /// scope whose path is missing from the tree gets `fallback(scope)` put there.
    pub fn new(mut tree: Value, scopes: Vec<Vec<Seg>>, fallback: impl Fn(usize) -> Value) -> Self {
        for (i, path) in scopes.iter().enumerate() {
            if !path.is_empty()
                && node_at(&tree, path).is_none()
                && let Some(t) = replace_at(&tree, path, fallback(i), true)
            {
                tree = t;
            }
        }
        LiveValues {
            state: Mutex::new(State {
                tree,
                scopes,
                roots: HashMap::new(),
                index: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current `.Values` of chart scope `scope`.
    pub fn current(&self, scope: usize) -> Value {
        let st = self.lock();
        st.scopes
            .get(scope)
            .and_then(|p| node_at(&st.tree, p))
            .cloned()
            .unwrap_or(Value::Nil)
    }

    /// Remembers `data` as the root data of a template of chart scope `scope`.
    pub fn register_root(&self, data: &Value, scope: usize) {
        if let Some(addr) = map_addr(data) {
            self.lock().roots.insert(addr, (scope, data.clone()));
        }
    }

    /// `RECEIVER.Values`: the live values when the receiver is a template's root data, else
    /// the receiver's `Values` field.
    pub fn read(&self, receiver: &Value) -> TplResult<Value> {
        if let Some(addr) = map_addr(receiver) {
            let scope = self.lock().roots.get(&addr).map(|(s, _)| *s);
            if let Some(scope) = scope {
                return Ok(self.current(scope));
            }
        }
        match receiver {
            Value::Map(m) => Ok(m.get("Values").cloned().unwrap_or(Value::Nil)),
            Value::Nil => Ok(Value::Nil),
            other => Err(TemplateError::Exec(format!(
                "can't evaluate field Values in type {}",
                other.type_name()
            ))),
        }
    }

    /// Called after a mutating function turned the dict `old` into `new`: when `old` is one
    /// of the values tree's maps, `new` takes its place.
    pub fn replaced(&self, old: &Value, new: &Value) {
        let Some(addr) = map_addr(old) else { return };
        let mut st = self.lock();
        if st.index.is_none() {
            let mut index = HashMap::new();
            add_maps(&st.tree, &mut Vec::new(), &mut index);
            st.index = Some(index);
        }
        let Some(path) = st.index.as_ref().and_then(|i| i.get(&addr)).cloned() else {
            return;
        };
        // A stale entry: that map was replaced earlier, so `old` is an outdated copy.
        if node_at(&st.tree, &path).and_then(map_addr) != Some(addr) {
            return;
        }
        let Some(tree) = replace_at(&st.tree, &path, new.clone(), false) else {
            return;
        };
        st.tree = tree;
        let mut added = HashMap::new();
        // The maps on the way down are new copies; so is everything `new` brought in.
        let mut node = &st.tree;
        let mut prefix = Vec::new();
        for seg in &path {
            if let Some(a) = map_addr(node) {
                added.insert(a, prefix.clone());
            }
            let Some(next) = child(node, seg) else { break };
            node = next;
            prefix.push(seg.clone());
        }
        add_maps(new, &mut path.clone(), &mut added);
        if let Some(index) = st.index.as_mut() {
            index.extend(added);
        }
    }
}

fn child<'v>(v: &'v Value, seg: &Seg) -> Option<&'v Value> {
    match (v, seg) {
        (Value::Map(m), Seg::Key(k)) => m.get(k),
        (Value::List(l), Seg::Index(i)) => l.get(*i),
        _ => None,
    }
}

fn node_at<'v>(tree: &'v Value, path: &[Seg]) -> Option<&'v Value> {
    path.iter().try_fold(tree, child)
}

/// `tree` with the node at `path` replaced by `new` (copying the maps and lists above it);
/// with `create`, a missing last key is added.
fn replace_at(tree: &Value, path: &[Seg], new: Value, create: bool) -> Option<Value> {
    let Some((seg, rest)) = path.split_first() else {
        return Some(new);
    };
    match (tree, seg) {
        (Value::Map(m), Seg::Key(k)) => {
            let replaced = match m.get(k) {
                Some(c) => replace_at(c, rest, new, create)?,
                None if create && rest.is_empty() => new,
                None => return None,
            };
            let mut copy: BTreeMap<Arc<str>, Value> = (**m).clone();
            copy.insert(k.clone(), replaced);
            Some(Value::Map(Arc::new(copy)))
        }
        (Value::List(l), Seg::Index(i)) => {
            let replaced = replace_at(l.get(*i)?, rest, new, create)?;
            let mut copy: Vec<Value> = l.to_vec();
            copy[*i] = replaced;
            Some(Value::List(copy.into()))
        }
        _ => None,
    }
}

/// Records the address and path of every map in `v` (which sits at `path`).
fn add_maps(v: &Value, path: &mut Vec<Seg>, index: &mut HashMap<usize, Vec<Seg>>) {
    match v {
        Value::Map(m) => {
            if let Some(a) = map_addr(v) {
                index.insert(a, path.clone());
            }
            for (k, c) in m.iter() {
                if matches!(c, Value::Map(_) | Value::List(_)) {
                    path.push(Seg::Key(k.clone()));
                    add_maps(c, path, index);
                    path.pop();
                }
            }
        }
        Value::List(l) => {
            for (i, c) in l.iter().enumerate() {
                if matches!(c, Value::Map(_) | Value::List(_)) {
                    path.push(Seg::Index(i));
                    add_maps(c, path, index);
                    path.pop();
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::value::from_json;
    use serde_json::json;

    fn set(m: &Value, k: &str, v: Value) -> Value {
        let Value::Map(m) = m else { return Value::Nil };
        let mut copy = (**m).clone();
        copy.insert(k.into(), v);
        Value::Map(Arc::new(copy))
    }

    #[test]
    fn changes_to_values_maps_are_seen_by_later_reads_and_subcharts() {
        let tree = from_json(&json!({"a": {"x": 1}, "sub": {"s": 1}}));
        let live = LiveValues::new(tree, vec![vec![], vec![Seg::Key("sub".into())]], |_| {
            Value::Nil
        });
        let root = from_json(&json!({"Release": {}}));
        live.register_root(&root, 0);
        let values = live.read(&root).unwrap_or(Value::Nil);
        let a = values.field("a").cloned().unwrap_or(Value::Nil);
        let a2 = set(&a, "y", Value::Int(2));
        live.replaced(&a, &a2);
        // Setting on the new copy keeps being tracked (the `$d = set $d ...` rewrite).
        live.replaced(&a2, &set(&a2, "z", Value::Int(3)));
        let sub = live.current(1);
        live.replaced(&sub, &set(&sub, "fromSub", Value::Bool(true)));
        assert_eq!(
            live.current(0).to_string(),
            "map[a:map[x:1 y:2 z:3] sub:map[fromSub:true s:1]]"
        );
        // An outdated copy and a dict outside the tree change nothing.
        live.replaced(&a, &set(&a, "stale", Value::Int(0)));
        let local = from_json(&json!({"k": 1}));
        live.replaced(&local, &set(&local, "k2", Value::Int(2)));
        assert!(!live.current(0).to_string().contains("stale"));
        // A dict that is not a root reads its own `Values` field.
        let ctx = from_json(&json!({"Values": {"own": 1}}));
        assert_eq!(
            live.read(&ctx).map(|v| v.to_string()).ok(),
            Some("map[own:1]".into())
        );
    }
}
