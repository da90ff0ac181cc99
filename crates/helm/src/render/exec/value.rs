//! The executor's value type. A map is a shared cell, as a Go map is a reference: `set`,
//! `unset` and `merge*` change the one map every path to it sees. Lists are immutable (Sprig's
//! list functions all copy). Functions of the Sprig pack (`render::funcs`) work on `gotmpl`
//! values; [`Conv`] converts at the call and back, keeping map identity: each cell caches
//! its `gotmpl` snapshot, and a snapshot a function hands back (`default $d ...`, `first`)
//! turns into its cell again.

use crate::render::meter::{self, Built, NODE};
use gotmpl::Value as G;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::{Rc, Weak};
use std::sync::Arc;

type GMap = BTreeMap<Arc<str>, G>;

/// What a map stands for when it also has methods (Helm's `.Files`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Plain,
    Files,
    /// One of Helm's structs (`.Capabilities.KubeVersion`): fields read as map keys, and it
    /// prints as Go prints a struct, its fields' values in this order in braces. A function
    /// of the Sprig pack gets that text (all one can do with a struct there is print it).
    Struct(&'static [&'static str]),
    /// A struct whose pointer has a `String` method giving its first field
    /// (`.Capabilities.KubeVersion`): an action prints that field, anything else the struct.
    Stringer(&'static [&'static str]),
    /// Go's nil map (`.Chart.Annotations` when `Chart.yaml` has none): empty and printed as
    /// `map[]` by an action, but nil to the Sprig pack (`toJson` gives `null`).
    NilMap,
    /// A pointer to one of Helm's structs (`.Capabilities`): an action prints the struct it
    /// points to (`{...}`), while the Sprig pack sees a map of its fields.
    Pointer(&'static [&'static str]),
    /// Masterminds' `*semver.Version` (`semver`'s result): its methods read as fields
    /// (`.Major`), and printed or handed to a function it is its `String` entry's text.
    Semver,
    /// Helm's `Values` (a chart's `.Values`, `Table`'s result): a map with the methods
    /// `AsMap`, `Table`, `PathValue` and `YAML`.
    Values,
    /// A `map[string]string` (Sprig's `split` and `splitn`), which functions taking a
    /// `map[string]interface {}` refuse.
    StrMap,
    /// Go's `time.Time` (`toDate`, `dateModify`, `now`): its RFC 3339 text under `t`; the
    /// Sprig pack and printing see Go's printing of it (`2024-03-05 00:00:00 +0000 UTC`).
    Time,
}

pub struct DictCell {
    map: RefCell<BTreeMap<Arc<str>, V>>,
    kind: Kind,
    /// The `gotmpl` copy of this map, valid while the render's generation is the one noted.
    snap: RefCell<Option<(u64, Arc<GMap>)>>,
}

/// A map shared by reference. The second field is how this reference sees the map when that
/// differs from the map's own kind: a chart's `.Values` is Helm's `Values` type (with
/// methods) while its parent sees the same map as a plain entry of its own values.
#[derive(Clone)]
pub struct Dict(Rc<DictCell>, Option<Kind>);

impl Dict {
    pub fn new(map: BTreeMap<Arc<str>, V>) -> Dict {
        Dict::with_kind(map, Kind::Plain)
    }

    pub fn with_kind(map: BTreeMap<Arc<str>, V>, kind: Kind) -> Dict {
        let cell = Rc::new(DictCell {
            map: RefCell::new(map),
            kind,
            snap: RefCell::new(None),
        });
        CELLS.with(|cells| {
            if let Some(list) = cells.borrow_mut().as_mut() {
                if list.len() == list.capacity() && list.len() >= 1024 {
                    list.retain(|w| w.strong_count() > 0);
                }
                list.push(Rc::downgrade(&cell));
            }
        });
        Dict(cell, None)
    }

    pub fn kind(&self) -> Kind {
        self.1.unwrap_or(self.0.kind)
    }

    /// The same map, seen as `kind` through this reference.
    pub fn viewed_as(&self, kind: Kind) -> Dict {
        Dict(self.0.clone(), Some(kind))
    }

    pub fn get(&self, k: &str) -> Option<V> {
        self.0.map.borrow().get(k).cloned()
    }

    pub fn contains(&self, k: &str) -> bool {
        self.0.map.borrow().contains_key(k)
    }

    pub fn len(&self) -> usize {
        self.0.map.borrow().len()
    }

    pub fn entries(&self) -> Vec<(Arc<str>, V)> {
        self.0
            .map
            .borrow()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Changes the map; `generation` is the render's generation, moved on so every cached snapshot
    /// (this map's and its containers') is made again.
    pub fn update<T>(
        &self,
        generation: &Cell<u64>,
        f: impl FnOnce(&mut BTreeMap<Arc<str>, V>) -> T,
    ) -> T {
        generation.set(generation.get().wrapping_add(1));
        f(&mut self.0.map.borrow_mut())
    }

    #[cfg(test)]
    pub fn weak(&self) -> Weak<DictCell> {
        Rc::downgrade(&self.0)
    }

    pub fn same(&self, other: &Dict) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

thread_local! {
    /// Every map made while a [`CellScope`] is open on this thread.
    static CELLS: RefCell<Option<Vec<Weak<DictCell>>>> = const { RefCell::new(None) };
}

/// Frees, when dropped, the maps made while it was open that are still alive: maps that hold
/// themselves (`set $d "self" $d`, `set .Values "root" $`) keep each other alive, which Go's
/// collector would free and reference counting does not. Nothing made inside may be used
/// after it closes.
pub struct CellScope {
    outer: Option<Vec<Weak<DictCell>>>,
}

impl CellScope {
    pub fn open() -> CellScope {
        CellScope {
            outer: CELLS.with(|cells| cells.replace(Some(Vec::new()))),
        }
    }
}

impl Drop for CellScope {
    fn drop(&mut self) {
        let made = CELLS.with(|cells| cells.replace(self.outer.take()));
        for cell in made.into_iter().flatten().filter_map(|w| w.upgrade()) {
            let entries = match cell.map.try_borrow_mut() {
                Ok(mut m) => std::mem::take(&mut *m),
                Err(_) => continue,
            };
            drop(entries);
        }
    }
}

/// The element type of a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// `[]interface {}`.
    Any,
    /// `[]string`.
    Str,
    /// `[]int`.
    Int,
    /// `[][]interface {}` (`chunk`).
    AnyList,
}

/// A template value.
#[derive(Clone)]
pub enum V {
    Nil,
    Bool(bool),
    /// Go's `int` (template literals, `len`, `atoi`, `until`).
    Int(i64),
    /// Go's `int64` (Sprig's arithmetic, `int64`, `--set` numbers): the same number, but
    /// `typeOf`, `kindIs` and `duration` tell them apart. `gotmpl` values have one integer
    /// type, so the distinction lives here and in the functions the executor runs itself.
    Int64(i64),
    Uint(u64),
    Float(f64),
    Str(Arc<str>),
    /// A slice, and the Go type of its elements (Sprig's `splitList` makes a `[]string`,
    /// `until` an `[]int`; `typeOf` and Go's parameter checks tell them apart).
    List(Rc<[V]>, Elem),
    Map(Dict),
    Func(gotmpl::ValueFunc),
}

impl V {
    pub fn str(s: impl Into<Arc<str>>) -> V {
        V::Str(s.into())
    }

    /// A `time.Time` from its RFC 3339 text.
    pub fn time(rfc3339: Arc<str>) -> V {
        V::Map(Dict::with_kind(
            [(Arc::<str>::from("t"), V::Str(rfc3339))]
                .into_iter()
                .collect(),
            Kind::Time,
        ))
    }

    /// The RFC 3339 text of a `time.Time`.
    pub fn time_text(&self) -> Option<Arc<str>> {
        match self {
            V::Map(d) if d.kind() == Kind::Time => match d.get("t") {
                Some(V::Str(t)) => Some(t),
                _ => None,
            },
            _ => None,
        }
    }

    /// Go's truth: false for nil, false, zero numbers, "" and empty lists and maps.
    pub fn truthy(&self) -> bool {
        match self {
            V::Nil => false,
            V::Bool(b) => *b,
            V::Int(n) | V::Int64(n) => *n != 0,
            V::Uint(n) => *n != 0,
            V::Float(f) => *f != 0.0,
            V::Str(s) => !s.is_empty(),
            V::List(l, _) => !l.is_empty(),
            V::Map(m) => m.len() != 0,
            V::Func(_) => true,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            V::Nil => "<nil>",
            V::Bool(_) => "bool",
            V::Int(_) => "int",
            V::Int64(_) => "int64",
            V::Uint(_) => "uint64",
            V::Float(_) => "float64",
            V::Str(_) => "string",
            V::List(_, Elem::Any) => "[]interface {}",
            V::List(_, Elem::Str) => "[]string",
            V::List(_, Elem::Int) => "[]int",
            V::List(_, Elem::AnyList) => "[][]interface {}",
            V::Map(d) if matches!(d.kind(), Kind::StrMap | Kind::NilMap) => "map[string]string",
            V::Map(_) => "map[string]interface {}",
            V::Func(_) => "func",
        }
    }
}

/// How deep a value may nest when converted (a map can hold itself).
const MAX_DEPTH: usize = 300;

/// Converts between [`V`] and `gotmpl` values for one render.
#[derive(Default)]
pub struct Conv {
    pub generation: Cell<u64>,
    /// Snapshot address → the cell it was made from.
    ids: RefCell<HashMap<usize, Weak<DictCell>>>,
}

impl Conv {
    pub fn to_g(&self, v: &V) -> G {
        self.to_g_at(v, 0)
    }

    /// Every list and map made here is charged to the render's memory budget; once it is
    /// spent, containers are left out (the render fails at its next step).
    fn to_g_at(&self, v: &V, depth: usize) -> G {
        match v {
            V::Nil => G::Nil,
            V::Bool(b) => G::Bool(*b),
            V::Int(n) | V::Int64(n) => G::Int(*n),
            V::Uint(n) => G::Uint(*n),
            V::Float(f) => G::Float(*f),
            V::Str(s) => G::String(s.clone()),
            V::Func(f) => G::Function(f.clone()),
            V::List(l, _) if depth < MAX_DEPTH && meter::charge(l.len() * NODE, Built::List) => {
                G::List(l.iter().map(|x| self.to_g_at(x, depth + 1)).collect())
            }
            V::List(..) if depth < MAX_DEPTH => G::Nil,
            V::Map(d) if depth < MAX_DEPTH => match d.kind() {
                Kind::Struct(fields) | Kind::Stringer(fields) => {
                    G::String(self.struct_text(d, fields).into())
                }
                Kind::NilMap if d.entries().is_empty() => G::Nil,
                Kind::Time => G::String(
                    d.get("t")
                        .and_then(|t| match t {
                            V::Str(t) => crate::render::funcs::time::read_time(&t),
                            _ => None,
                        })
                        .map(|t| crate::render::funcs::time::go_time_string(&t))
                        .unwrap_or_default()
                        .into(),
                ),
                Kind::Semver => d.get("String").map_or(G::Nil, |s| self.to_g_at(&s, depth)),
                _ => G::Map(self.snapshot(d, depth)),
            },
            V::List(..) | V::Map(_) => G::Nil,
        }
    }

    /// Go's `%v` of a struct: `{v1 v2 ...}`.
    pub fn struct_text(&self, d: &Dict, fields: &[&str]) -> String {
        let parts: Vec<String> = fields
            .iter()
            .map(|f| match d.get(f) {
                Some(V::Str(s)) => s.to_string(),
                Some(V::Map(inner))
                    if matches!(inner.kind(), Kind::Struct(_) | Kind::Stringer(_)) =>
                {
                    match inner.kind() {
                        Kind::Struct(fields) | Kind::Stringer(fields) => {
                            self.struct_text(&inner, fields)
                        }
                        _ => String::new(),
                    }
                }
                Some(other) => crate::render::value::go_sprint(&self.to_g(&other)),
                None => String::new(),
            })
            .collect();
        format!("{{{}}}", parts.join(" "))
    }

    fn snapshot(&self, d: &Dict, depth: usize) -> Arc<GMap> {
        let generation = self.generation.get();
        if let Some((g, snap)) = d.0.snap.borrow().as_ref()
            && *g == generation
        {
            return snap.clone();
        }
        let map = d.0.map.borrow();
        let built: GMap = if meter::charge(map.len() * NODE, Built::Map) {
            map.iter()
                .map(|(k, v)| (k.clone(), self.to_g_at(v, depth + 1)))
                .collect()
        } else {
            GMap::new()
        };
        drop(map);
        let snap = Arc::new(built);
        self.ids
            .borrow_mut()
            .insert(Arc::as_ptr(&snap) as usize, Rc::downgrade(&d.0));
        *d.0.snap.borrow_mut() = Some((generation, snap.clone()));
        snap
    }

    pub fn to_v(&self, g: &G) -> V {
        self.to_v_at(g, 0)
    }

    /// Charges what a function built: strings only this value holds (a string a function
    /// passed through is held by its argument too), and every list and map made here.
    fn to_v_at(&self, g: &G, depth: usize) -> V {
        match g {
            G::Nil => V::Nil,
            G::Bool(b) => V::Bool(*b),
            G::Int(n) => V::Int(*n),
            G::Uint(n) => V::Uint(*n),
            G::Float(f) => V::Float(*f),
            G::String(s) => {
                if Arc::strong_count(s) == 1 {
                    meter::charge(s.len(), Built::String);
                }
                V::Str(s.clone())
            }
            G::Function(f) => V::Func(f.clone()),
            G::List(l) if depth < MAX_DEPTH => {
                if !meter::charge(l.len() * NODE, Built::List) {
                    return V::Nil;
                }
                V::List(
                    l.iter().map(|x| self.to_v_at(x, depth + 1)).collect(),
                    Elem::Any,
                )
            }
            G::Map(m) if depth < MAX_DEPTH => {
                if let Some(cell) = self.cell_of(m) {
                    return V::Map(Dict(cell, None));
                }
                if !meter::charge(m.len() * NODE, Built::Map) {
                    return V::Nil;
                }
                V::Map(Dict::new(
                    m.iter()
                        .map(|(k, v)| (k.clone(), self.to_v_at(v, depth + 1)))
                        .collect(),
                ))
            }
            _ => V::Nil,
        }
    }

    /// The cell whose current snapshot `m` is, if any.
    fn cell_of(&self, m: &Arc<GMap>) -> Option<Rc<DictCell>> {
        let cell = self
            .ids
            .borrow()
            .get(&(Arc::as_ptr(m) as usize))?
            .upgrade()?;
        let current = matches!(cell.snap.borrow().as_ref(), Some((_, s)) if Arc::ptr_eq(s, m));
        current.then_some(cell)
    }

    /// A copy with new cells all the way down (`deepCopy`).
    pub fn deep_copy(&self, v: &V) -> V {
        self.deep_copy_at(v, 0)
    }

    fn deep_copy_at(&self, v: &V, depth: usize) -> V {
        if depth >= MAX_DEPTH {
            return V::Nil;
        }
        let (n, what) = match v {
            V::Map(d) => (d.len(), Built::Map),
            V::List(l, _) => (l.len(), Built::List),
            _ => (0, Built::Map),
        };
        if !meter::charge(n * NODE, what) {
            return V::Nil;
        }
        match v {
            V::Map(d) => V::Map(Dict::with_kind(
                d.entries()
                    .into_iter()
                    .map(|(k, v)| (k, self.deep_copy_at(&v, depth + 1)))
                    .collect(),
                d.kind(),
            )),
            V::List(l, e) => V::List(
                l.iter().map(|x| self.deep_copy_at(x, depth + 1)).collect(),
                *e,
            ),
            other => other.clone(),
        }
    }
}

/// New cells from JSON (chart values). Values files are read as Go's JSON decoder reads
/// them (floats); integers come from `--set`, which makes them int64.
pub fn from_json(v: &serde_json::Value) -> V {
    match v {
        serde_json::Value::Null => V::Nil,
        serde_json::Value::Bool(b) => V::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                V::Int64(i)
            } else if let Some(u) = n.as_u64() {
                V::Uint(u)
            } else {
                V::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        serde_json::Value::String(s) => V::str(s.as_str()),
        serde_json::Value::Array(a) => V::List(a.iter().map(from_json).collect(), Elem::Any),
        serde_json::Value::Object(o) => V::Map(Dict::new(
            o.iter()
                .map(|(k, v)| (Arc::<str>::from(k.as_str()), from_json(v)))
                .collect(),
        )),
    }
}
