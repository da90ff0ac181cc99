//! berth's own executor of parsed Go templates (`render::gotpl` trees), with Go
//! text/template's rules and a value type whose maps are shared by reference ([`value`]).
//!
//! It walks the tree itself: pipelines (each command's result is the last argument of the
//! next), variables and their scopes (a block's variables end with it; `$` is the data the
//! template was called with), `if`/`with`/`range` (with `else`, `break`, `continue`),
//! `template` and Helm's `include`/`tpl`, field chains with the methods Helm's data has
//! (`.Files.Get`, `.Files.Glob`, `(.Files.Glob x).AsConfig`, `.Capabilities.APIVersions.Has`),
//! missing keys (printed as `<no value>`, which Helm then removes), and Go's printing.
//! Errors say where they happened as Go's do (`template: FILE:LINE:COL: executing "NAME" at
//! <NODE>: ...`). [`is_function`] tells the parser which names are functions (Go refuses
//! an unknown one when it parses a template).
//!
//! Functions: `set`, `unset`, `merge*`, `dict`, `deepCopy`, `get`, `hasKey`, `index` and the
//! short-circuiting `and`/`or` are native (they change or keep maps by reference); the rest of
//! the Sprig pack runs on `gotmpl` values through [`value::Conv`], which keeps identity.

mod params;
mod printf;
pub mod value;

use super::gotpl::{
    self,
    ast::{BranchNode, CommandNode, Expr, ListNode, Node, Number, PipeNode},
};
use super::meter::{self, Built, NODE};
use super::value::go_quote;
use gotmpl::FuncMap;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use value::Elem;
pub use value::{Conv, Dict, Kind, V};

/// How deep `include`/`tpl`/`template` may nest. Helm allows 1000 per template name; a lower
/// global bound keeps a runaway recursive chart from overflowing the thread's stack.
const MAX_DEPTH: usize = 100;

/// How many iterations one `range` may run (a range over a huge integer).
const MAX_RANGE: i64 = 10_000_000;

type R<T> = Result<T, String>;

/// A render's bounds, checked as the templates execute (so a runaway chart stops where it is
/// rather than running on after its caller gave up): a deadline, a cap on the text one
/// template may produce, and a memory budget for everything the render builds
/// ([`crate::render::meter`]). Set for the renders on this thread with [`with_budget`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Budget {
    /// How long the render may take (named in the error)...
    pub time: Option<std::time::Duration>,
    /// ...counted from here (default: when [`with_budget`] starts).
    pub since: Option<std::time::Instant>,
    /// How many bytes one template's output may reach.
    pub output: Option<usize>,
    /// How many bytes of strings, lists, maps and output the whole render may build.
    pub memory: Option<usize>,
}

/// The budget in force on this thread and when its time runs out.
#[derive(Clone, Copy)]
struct Bound {
    budget: Budget,
    deadline: Option<std::time::Instant>,
}

thread_local! {
    static BUDGET: Cell<Option<Bound>> = const { Cell::new(None) };
}

/// Runs `f` (which renders on this thread) within `budget`: templates that run past
/// `budget.time`, produce more than `budget.output` bytes or build more than `budget.memory`
/// bytes fail with an error naming the bound ([`crate::render::RenderError::Limit`]). A
/// thread-local rather than a parameter so that every render entry point honours it.
pub fn with_budget<T>(budget: Budget, f: impl FnOnce() -> T) -> T {
    measured(budget, f).0
}

/// Whether a [`with_budget`] is in force on this thread.
pub fn budgeted() -> bool {
    BUDGET.with(|b| b.get().is_some())
}

/// [`with_budget`], also returning how many bytes the render charged to its memory budget.
pub fn measured<T>(budget: Budget, f: impl FnOnce() -> T) -> (T, usize) {
    struct Restore(Option<Bound>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BUDGET.with(|b| b.set(self.0));
        }
    }
    let since = budget.since.unwrap_or_else(std::time::Instant::now);
    let bound = Bound {
        budget,
        deadline: budget.time.map(|t| since + t),
    };
    let _restore = Restore(BUDGET.with(|b| b.replace(Some(bound))));
    meter::scoped(budget.memory, f)
}

/// How many steps pass between two looks at the clock.
const STEPS_PER_CLOCK_CHECK: u32 = 256;

/// What a walk of a list ended with.
#[derive(PartialEq, Eq)]
enum Flow {
    Normal,
    Break,
    Continue,
}

type Vars = Vec<(Arc<str>, V)>;

/// One render's templates, functions and value bookkeeping.
pub struct Exec {
    templates: HashMap<String, Arc<ListNode>>,
    funcs: FuncMap,
    pub conv: Conv,
    depth: Cell<usize>,
    /// Definitions from `tpl` texts being executed (innermost last).
    overlays: RefCell<Vec<HashMap<String, Arc<ListNode>>>>,
    /// Tiny `gotmpl` templates running Go's own builtins (`printf`, `eq`, ...), by name and
    /// arity.
    builtins: RefCell<HashMap<(String, usize), gotmpl::Template>>,
    /// Each template's file and source text, for error positions.
    sources: HashMap<String, Source>,
    /// The templates being executed (innermost last), for error positions.
    frames: RefCell<Vec<Frame>>,
    /// The render's bounds ([`with_budget`]) and the steps taken since the clock was read.
    bound: Option<Bound>,
    steps: Cell<u32>,
    /// The first render limit this render hit (time, output or memory), in full.
    limit: RefCell<Option<String>>,
}

/// The file a template is defined in and that file's text.
#[derive(Clone)]
pub struct Source {
    pub file: Arc<str>,
    pub text: Arc<str>,
}

struct Frame {
    name: Arc<str>,
    source: Option<Source>,
}

/// Marks an error text that already says where it happened (Go's `template: FILE:LINE:COL:
/// executing "NAME" at <NODE>: ` prefix), so callers further out do not say it again.
const FRAMED: char = '\u{1}';

/// The functions [`Exec::call`] runs itself.
const NATIVE: &[&str] = &[
    "include",
    "tpl",
    "set",
    "unset",
    "merge",
    "mustMerge",
    "mergeOverwrite",
    "mustMergeOverwrite",
    "deepCopy",
    "mustDeepCopy",
    "dict",
    "get",
    "hasKey",
    "index",
    "not",
    "and",
    "or",
    "call",
];

/// Sprig functions whose integer results are Go `int64`s (the pack's values have one integer
/// type; see [`V::Int64`]).
const INT64_RESULTS: &[&str] = &[
    "add",
    "add1",
    "sub",
    "mul",
    "div",
    "mod",
    "max",
    "min",
    "biggest",
    "int64",
    "toDecimal",
];

/// Sprig functions that hand back one of their arguments (or an item of a list argument).
const PASS_THROUGH: &[&str] = &[
    "default",
    "coalesce",
    "ternary",
    "first",
    "mustFirst",
    "last",
    "mustLast",
    "dig",
];

/// Helm's `.Files` (a `map[string][]byte`) as Go shows it: each file a list of its bytes, or
/// (`base64`, for JSON and YAML) its base64 text.
fn files_as_go(d: &value::Dict, base64: bool) -> gotmpl::Value {
    use base64::Engine as _;
    let entries = d
        .entries()
        .into_iter()
        .map(|(k, v)| {
            let text = match &v {
                V::Str(s) => super::bytes::to_bytes(s).into_owned(),
                _ => Vec::new(),
            };
            let shown = if base64 {
                gotmpl::Value::String(
                    base64::engine::general_purpose::STANDARD
                        .encode(&text)
                        .into(),
                )
            } else {
                gotmpl::Value::List(
                    text.iter()
                        .map(|b| gotmpl::Value::Int(i64::from(*b)))
                        .collect(),
                )
            };
            (k, shown)
        })
        .collect();
    gotmpl::Value::Map(Arc::new(entries))
}

/// The Go type and kind of one of Helm's objects (`.Files`, `.Capabilities`, ...).
fn helm_type(kind: Kind) -> Option<(&'static str, &'static str)> {
    match kind {
        Kind::Files => Some(("engine.files", "map")),
        Kind::Pointer(_) => Some(("*common.Capabilities", "ptr")),
        Kind::Stringer(_) => Some(("common.KubeVersion", "struct")),
        Kind::Struct(_) => Some(("version.BuildInfo", "struct")),
        Kind::NilMap | Kind::StrMap => Some(("map[string]string", "map")),
        Kind::Time => Some(("time.Time", "struct")),
        _ => None,
    }
}

/// Sprig functions whose result is a `time.Time` (the pack gives its RFC 3339 text).
const TIME_RESULTS: &[&str] = &[
    "now",
    "toDate",
    "mustToDate",
    "dateModify",
    "date_modify",
    "mustDateModify",
    "must_date_modify",
];

/// Sprig's date formatters and the position of their time argument.
const TIME_ARG: &[(&str, usize)] = &[
    ("date", 1),
    ("dateInZone", 1),
    ("date_in_zone", 1),
    ("htmlDate", 0),
    ("htmlDateInZone", 0),
];

/// Functions that serialise their argument.
const TO_TEXT: &[&str] = &[
    "toJson",
    "mustToJson",
    "toPrettyJson",
    "mustToPrettyJson",
    "toRawJson",
    "mustToRawJson",
    "toYaml",
    "mustToYaml",
    "toYamlPretty",
    "toToml",
];

/// Sprig functions whose lists are Go `[]string`s.
const STRING_LISTS: &[&str] = &[
    "splitList",
    "sortAlpha",
    "keys",
    "toStrings",
    "regexFindAll",
    "mustRegexFindAll",
    "regexSplit",
    "mustRegexSplit",
];

/// Whether two lists hold the same scalars (a function's result is its argument).
fn same_items(a: &[V], b: &[V]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (V::Str(p), V::Str(q)) => p == q,
            (V::Int(p) | V::Int64(p), V::Int(q) | V::Int64(q)) => p == q,
            _ => false,
        })
}

/// Whether `v` is, or is a list directly holding, the int64 `n`.
fn holds_int64(v: &V, n: i64) -> bool {
    match v {
        V::Int64(m) => *m == n,
        V::List(l, _) => l.iter().any(|x| matches!(x, V::Int64(m) if *m == n)),
        _ => false,
    }
}

/// Go's builtins that run through `gotmpl` (their results are text or a boolean).
const GOTMPL_TEXT: &[&str] = &["print", "printf", "println", "html", "js", "urlquery"];
const GOTMPL_BOOL: &[&str] = &["eq", "ne", "lt", "le", "gt", "ge"];

impl Exec {
    pub fn new(funcs: FuncMap) -> Exec {
        Exec {
            templates: HashMap::new(),
            funcs,
            conv: Conv::default(),
            depth: Cell::new(0),
            overlays: RefCell::new(Vec::new()),
            builtins: RefCell::new(HashMap::new()),
            sources: HashMap::new(),
            frames: RefCell::new(Vec::new()),
            bound: BUDGET.with(Cell::get),
            steps: Cell::new(0),
            limit: RefCell::new(None),
        }
    }

    /// Fails once the render is past its deadline, `out` past its size bound, or the render's
    /// memory budget spent (counting `out`, the text being made).
    fn tick(&self, out: &str) -> R<()> {
        self.within_memory()?;
        let Some(bound) = &self.bound else {
            return Ok(());
        };
        if let Some(max) = bound.budget.output
            && out.len() > max
        {
            return Err(self.hit_limit(format!(
                "the template's output is over the render output limit of {max} bytes"
            )));
        }
        if bound.budget.memory.is_some() && !meter::fits(out.len(), Built::Output) {
            self.within_memory()?;
        }
        let steps = self.steps.get().wrapping_add(1);
        self.steps.set(steps);
        if steps.is_multiple_of(STEPS_PER_CLOCK_CHECK)
            && let (Some(deadline), Some(time)) = (bound.deadline, bound.budget.time)
            && std::time::Instant::now() > deadline
        {
            return Err(self.hit_limit(format!(
                "the render took longer than the render time limit of {time:?}"
            )));
        }
        Ok(())
    }

    /// Fails once the render's memory budget is spent.
    #[inline]
    fn within_memory(&self) -> R<()> {
        match meter::over() {
            None => Ok(()),
            Some(e) => Err(self.hit_limit(e.to_string())),
        }
    }

    /// Records that the render hit a limit (the first one counts), naming the template being
    /// executed, and returns the error text.
    fn hit_limit(&self, message: String) -> String {
        let frames = self.frames.borrow();
        let text = match frames.last() {
            Some(f) => format!("{message} in template {}", f.name),
            None => message,
        };
        self.limit.borrow_mut().get_or_insert_with(|| text.clone());
        text
    }

    /// The render limit this render hit, if it hit one (its error then is that limit's).
    pub fn limit_hit(&self) -> Option<String> {
        self.limit.borrow().clone()
    }

    /// Adds a named tree. As in Go, an empty (whitespace-only) tree does not replace a
    /// template that has content.
    pub fn add(&mut self, name: &str, tree: ListNode, source: Option<Source>) {
        if tree.is_empty_tree() && self.templates.get(name).is_some_and(|t| !t.is_empty_tree()) {
            return;
        }
        self.templates.insert(name.to_string(), Arc::new(tree));
        match source {
            Some(s) => self.sources.insert(name.to_string(), s),
            None => self.sources.remove(name),
        };
    }

    /// Runs `f` as the execution of template `name` (for error positions).
    fn in_frame<T>(&self, name: &str, source: Option<Source>, f: impl FnOnce() -> R<T>) -> R<T> {
        let source = source.or_else(|| self.sources.get(name).cloned());
        self.frames.borrow_mut().push(Frame {
            name: name.into(),
            source,
        });
        let out = f();
        self.frames.borrow_mut().pop();
        out
    }

    /// Says where an error happened, as Go does, unless it already says so: the template's
    /// file, line and column (a byte offset within the line, from 0) of `offset`, the
    /// template's name and the node.
    fn frame(&self, e: String, offset: usize, node: &dyn Fn() -> String) -> String {
        if e.starts_with(FRAMED) {
            return e;
        }
        let frames = self.frames.borrow();
        let Some(f) = frames.last() else { return e };
        let (file, line, col) = match &f.source {
            Some(s) => {
                let before = s.text.get(..offset.min(s.text.len())).unwrap_or("");
                let line = 1 + before.matches('\n').count();
                let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1);
                (s.file.to_string(), line, col)
            }
            None => (f.name.to_string(), 0, 0),
        };
        format!(
            "{FRAMED}template: {file}:{line}:{col}: executing {} at <{}>: {e}",
            super::value::go_quote(&f.name),
            node()
        )
    }

    /// The parsed templates, for freeing elsewhere.
    pub fn into_templates(self) -> HashMap<String, Arc<ListNode>> {
        self.templates
    }

    fn lookup(&self, name: &str) -> Option<Arc<ListNode>> {
        for o in self.overlays.borrow().iter().rev() {
            if let Some(t) = o.get(name) {
                return Some(t.clone());
            }
        }
        self.templates.get(name).cloned()
    }

    /// Executes the template `name` with `data` as `.` and `$`.
    /// An error says where it happened in Go's form (`template: FILE:LINE:COL: executing
    /// "NAME" at <NODE>: ...`), nested through `include` and `tpl` as Go nests it.
    pub fn execute(&self, name: &str, data: &V) -> R<String> {
        let tree = self
            .lookup(name)
            .ok_or_else(|| format!("template: no template {name:?} associated"))?;
        let mut out = String::new();
        let mut vars: Vars = vec![("$".into(), data.clone())];
        self.in_frame(name, None, || self.walk(&tree, data, &mut vars, &mut out))
            .map_err(|e| e.trim_start_matches(FRAMED).to_string())?;
        Ok(out)
    }

    fn enter(&self, what: &str) -> R<DepthGuard<'_>> {
        if self.depth.get() >= MAX_DEPTH {
            return Err(format!("{what}: nesting deeper than {MAX_DEPTH}"));
        }
        self.depth.set(self.depth.get() + 1);
        Ok(DepthGuard(&self.depth))
    }

    fn walk(&self, list: &ListNode, dot: &V, vars: &mut Vars, out: &mut String) -> R<Flow> {
        for node in &list.nodes {
            let flow = self.walk_node(node, dot, vars, out)?;
            if flow != Flow::Normal {
                return Ok(flow);
            }
        }
        Ok(Flow::Normal)
    }

    fn walk_node(&self, node: &Node, dot: &V, vars: &mut Vars, out: &mut String) -> R<Flow> {
        self.tick(out)?;
        match node {
            Node::Text(t) => out.push_str(&t.text),
            Node::Action(a) => {
                let v = self.eval_pipe(&a.pipe, dot, vars)?;
                if a.pipe.decl.is_empty() {
                    self.print(&v, out);
                    // Printing a value shared by many paths expands it (and stops short).
                    self.within_memory()?;
                }
            }
            Node::If(b) => return self.walk_if_with(b, false, dot, vars, out),
            Node::With(b) => return self.walk_if_with(b, true, dot, vars, out),
            Node::Range(b) => return self.walk_range(b, dot, vars, out),
            Node::Template(t) => {
                let data = match &t.pipe {
                    Some(p) => self.eval_pipe(p, dot, vars)?,
                    None => V::Nil,
                };
                let node = || format!("template {}", super::value::go_quote(&t.name));
                let tree = self.lookup(&t.name).ok_or_else(|| {
                    self.frame(
                        format!("template: no template {:?} associated", t.name),
                        t.pos.offset,
                        &node,
                    )
                })?;
                let _guard = self
                    .enter("template")
                    .map_err(|e| self.frame(e, t.pos.offset, &node))?;
                let mut inner: Vars = vec![("$".into(), data.clone())];
                self.in_frame(&t.name, None, || self.walk(&tree, &data, &mut inner, out))?;
            }
            Node::Break(_) => return Ok(Flow::Break),
            Node::Continue(_) => return Ok(Flow::Continue),
        }
        Ok(Flow::Normal)
    }

    fn walk_if_with(
        &self,
        b: &BranchNode,
        with: bool,
        dot: &V,
        vars: &mut Vars,
        out: &mut String,
    ) -> R<Flow> {
        let mark = vars.len();
        let result = (|| {
            let v = self.eval_pipe(&b.pipe, dot, vars)?;
            if v.truthy() {
                let d = if with { v } else { dot.clone() };
                self.walk(&b.body, &d, vars, out)
            } else if let Some(e) = &b.else_body {
                self.walk(e, dot, vars, out)
            } else {
                Ok(Flow::Normal)
            }
        })();
        vars.truncate(mark);
        result
    }

    fn walk_range(&self, b: &BranchNode, dot: &V, vars: &mut Vars, out: &mut String) -> R<Flow> {
        let mark = vars.len();
        let result = self.range_inner(b, dot, vars, out);
        vars.truncate(mark);
        result.map(|_| Flow::Normal)
    }

    fn range_inner(&self, b: &BranchNode, dot: &V, vars: &mut Vars, out: &mut String) -> R<()> {
        // The range's own variables are bound per element, not by the pipeline.
        let decl = &b.pipe.decl;
        let v = self.eval_commands(&b.pipe, dot, vars)?;
        // Integers and lists are walked in place: a range over 10 million steps holds no
        // list of them. A map's entries are taken first (the body may change the map).
        if decl.len() > 1 && matches!(v, V::Int(_) | V::Int64(_) | V::Uint(_)) {
            return Err(format!(
                "can't use {} to iterate over more than one variable",
                self.sprint(&v)
            ));
        }
        let len = match &v {
            V::List(l, _) => l.len(),
            V::Map(m) => m.len(),
            V::Int(n) | V::Int64(n) => {
                if *n > MAX_RANGE {
                    return Err(format!("range over {n}: too many iterations"));
                }
                (*n).max(0) as usize
            }
            V::Uint(n) => {
                if *n > MAX_RANGE as u64 {
                    return Err(format!("range over {n}: too many iterations"));
                }
                *n as usize
            }
            V::Nil => 0,
            other => return Err(format!("range can't iterate over {}", self.sprint(other))),
        };
        if len == 0 {
            if let Some(e) = &b.else_body {
                self.walk(e, dot, vars, out)?;
            }
            return Ok(());
        }
        let entries = match &v {
            V::Map(m) => m.entries(),
            _ => Vec::new(),
        };
        let inner_mark = vars.len();
        for i in 0..len {
            let (k, x) = match &v {
                V::List(l, _) => (V::Int(i as i64), l[i].clone()),
                V::Map(_) => (V::Str(entries[i].0.clone()), entries[i].1.clone()),
                _ => (V::Int(i as i64), V::Int(i as i64)),
            };
            match decl.len() {
                0 => {}
                1 => vars.push((decl[0].clone(), x.clone())),
                _ => {
                    vars.push((decl[0].clone(), k));
                    vars.push((decl[1].clone(), x.clone()));
                }
            }
            let flow = self.walk(&b.body, &x, vars, out);
            vars.truncate(inner_mark);
            if flow? == Flow::Break {
                break;
            }
        }
        Ok(())
    }

    /// A pipeline's commands, each result the last argument of the next.
    fn eval_commands(&self, pipe: &PipeNode, dot: &V, vars: &mut Vars) -> R<V> {
        let mut val: Option<V> = None;
        for cmd in &pipe.commands {
            val = Some(self.eval_command(cmd, dot, vars, val)?);
        }
        Ok(val.unwrap_or(V::Nil))
    }

    fn eval_pipe(&self, pipe: &PipeNode, dot: &V, vars: &mut Vars) -> R<V> {
        let val = self.eval_commands(pipe, dot, vars)?;
        if !pipe.decl.is_empty() {
            self.within_memory()?;
        }
        for name in &pipe.decl {
            if pipe.is_assign {
                match vars.iter_mut().rev().find(|(n, _)| n == name) {
                    Some(slot) => slot.1 = val.clone(),
                    None => return Err(format!("undefined variable: {name}")),
                }
            } else {
                vars.push((name.clone(), val.clone()));
            }
        }
        Ok(val)
    }

    fn var(&self, name: &str, vars: &Vars) -> R<V> {
        vars.iter()
            .rev()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("undefined variable: {name}"))
    }

    fn eval_command(&self, cmd: &CommandNode, dot: &V, vars: &mut Vars, fin: Option<V>) -> R<V> {
        let Some(first) = cmd.args.first() else {
            return Err("empty command".into());
        };
        self.tick("")?;
        self.eval_command_inner(cmd, first, dot, vars, fin)
            .map_err(|e| match first {
                Expr::Identifier(..) => self.frame(e, first.pos().offset, &|| cmd_string(cmd)),
                _ => self.frame(e, chain_offset(first), &|| expr_string(first)),
            })
    }

    fn eval_command_inner(
        &self,
        cmd: &CommandNode,
        first: &Expr,
        dot: &V,
        vars: &mut Vars,
        fin: Option<V>,
    ) -> R<V> {
        let rest = &cmd.args[1..];
        let not_func = |what: &str| -> R<()> {
            if rest.is_empty() && fin.is_none() {
                Ok(())
            } else {
                Err(format!("can't give argument to non-function {what}"))
            }
        };
        match first {
            Expr::Identifier(p, name) => self.call_expr(name, p.offset, rest, dot, vars, fin),
            Expr::Field(_, fields) => self.eval_fields(dot.clone(), fields, rest, dot, vars, fin),
            Expr::Variable(_, name, fields) => {
                let v = self.var(name, vars)?;
                if fields.is_empty() {
                    not_func(name)?;
                    return Ok(v);
                }
                self.eval_fields(v, fields, rest, dot, vars, fin)
            }
            Expr::Chain(_, inner, fields) => {
                let v = self.eval_arg(inner, dot, vars)?;
                self.eval_fields(v, fields, rest, dot, vars, fin)
            }
            Expr::Pipe(_, p) => {
                not_func("(pipeline)")?;
                self.eval_pipe(p, dot, vars)
            }
            Expr::Dot(_) => {
                not_func(".")?;
                Ok(dot.clone())
            }
            Expr::Nil(_) => Err("nil is not a command".into()),
            Expr::String(_, s) => {
                not_func(&format!("{s:?}"))?;
                Ok(V::Str(s.clone()))
            }
            Expr::Number(_, n, _) => {
                not_func("number")?;
                Ok(number(n))
            }
            Expr::Bool(_, b) => {
                not_func("bool")?;
                Ok(V::Bool(*b))
            }
        }
    }

    fn eval_arg(&self, e: &Expr, dot: &V, vars: &mut Vars) -> R<V> {
        self.eval_arg_inner(e, dot, vars)
            .map_err(|err| self.frame(err, chain_offset(e), &|| expr_string(e)))
    }

    fn eval_arg_inner(&self, e: &Expr, dot: &V, vars: &mut Vars) -> R<V> {
        match e {
            Expr::Dot(_) => Ok(dot.clone()),
            Expr::Field(_, fields) => self.eval_fields(dot.clone(), fields, &[], dot, vars, None),
            Expr::Variable(_, name, fields) => {
                let v = self.var(name, vars)?;
                if fields.is_empty() {
                    return Ok(v);
                }
                self.eval_fields(v, fields, &[], dot, vars, None)
            }
            Expr::Chain(_, inner, fields) => {
                let v = self.eval_arg(inner, dot, vars)?;
                self.eval_fields(v, fields, &[], dot, vars, None)
            }
            Expr::Identifier(p, name) => self.call_expr(name, p.offset, &[], dot, vars, None),
            Expr::String(_, s) => Ok(V::Str(s.clone())),
            Expr::Number(_, n, _) => Ok(number(n)),
            Expr::Bool(_, b) => Ok(V::Bool(*b)),
            Expr::Nil(_) => Ok(V::Nil),
            Expr::Pipe(_, p) => self.eval_pipe(p, dot, vars),
        }
    }

    /// `receiver.f1.f2...`: map keys, or one of the methods Helm's data has on the last name.
    ///
    /// Go has two nils here: the receiver a chain starts from (dot, a variable, a pipeline's
    /// result) is "no value" when nil, and a field of it is again no value; but a map's
    /// missing (or nil) entry is a nil interface, and a field of that fails.
    fn eval_fields(
        &self,
        recv: V,
        fields: &[Arc<str>],
        args: &[Expr],
        dot: &V,
        vars: &mut Vars,
        fin: Option<V>,
    ) -> R<V> {
        self.eval_fields_typed(recv, fields, args, dot, vars, fin)
            .map(|(v, _)| v)
    }

    /// [`Self::eval_fields`], also telling whether the result is a map's missing or nil
    /// entry (Go's nil interface, which a function's map parameter refuses).
    fn eval_fields_typed(
        &self,
        mut recv: V,
        fields: &[Arc<str>],
        args: &[Expr],
        dot: &V,
        vars: &mut Vars,
        fin: Option<V>,
    ) -> R<(V, bool)> {
        let Some((last, init)) = fields.split_last() else {
            return Ok((recv, false));
        };
        let mut typed_nil = false;
        for f in init {
            let from_map = matches!(recv, V::Map(_));
            recv = self.field(&recv, f, typed_nil)?;
            typed_nil = from_map && matches!(recv, V::Nil);
        }
        let has_args = !args.is_empty() || fin.is_some();
        if is_method(&recv, last) {
            let mut vals = Vec::with_capacity(args.len() + 1);
            for a in args {
                vals.push(self.eval_arg(a, dot, vars)?);
            }
            vals.extend(fin);
            return self.method(&recv, last, vals).map(|v| (v, false));
        }
        if has_args {
            return Err(format!("{last} is not a method but has arguments"));
        }
        let from_map = matches!(recv, V::Map(_));
        let v = self.field(&recv, last, typed_nil)?;
        let typed = from_map && matches!(v, V::Nil);
        Ok((v, typed))
    }

    /// An argument's value, and whether it is a map's missing or nil entry.
    fn eval_arg_typed(&self, e: &Expr, dot: &V, vars: &mut Vars) -> R<(V, bool)> {
        let typed =
            |r: R<(V, bool)>| r.map_err(|err| self.frame(err, chain_offset(e), &|| expr_string(e)));
        match e {
            Expr::Field(_, fields) => {
                typed(self.eval_fields_typed(dot.clone(), fields, &[], dot, vars, None))
            }
            Expr::Variable(_, name, fields) if !fields.is_empty() => {
                let v = self
                    .var(name, vars)
                    .map_err(|err| self.frame(err, chain_offset(e), &|| expr_string(e)))?;
                typed(self.eval_fields_typed(v, fields, &[], dot, vars, None))
            }
            Expr::Chain(_, inner, fields) => {
                let v = self.eval_arg(inner, dot, vars)?;
                typed(self.eval_fields_typed(v, fields, &[], dot, vars, None))
            }
            _ => self.eval_arg(e, dot, vars).map(|v| (v, false)),
        }
    }

    fn field(&self, recv: &V, name: &str, typed_nil: bool) -> R<V> {
        match recv {
            V::Map(m) => {
                if is_method(recv, name) {
                    return self.method(recv, name, Vec::new());
                }
                // A `map[string]string`'s missing key is its zero value, "", and
                // `.Files`' (a `map[string][]byte`) an empty `[]byte`.
                let missing = match m.kind() {
                    Kind::StrMap | Kind::NilMap => V::str(""),
                    Kind::Files => V::List(Vec::new().into(), Elem::Any),
                    _ => V::Nil,
                };
                Ok(m.get(name).unwrap_or(missing))
            }
            V::Nil if typed_nil => Err(format!("nil pointer evaluating interface {{}}.{name}")),
            V::Nil => Ok(V::Nil),
            other => Err(format!(
                "can't evaluate field {name} in type {}",
                other.type_name()
            )),
        }
    }

    fn method(&self, recv: &V, name: &str, args: Vec<V>) -> R<V> {
        if let V::Map(d) = recv
            && d.kind() == Kind::Values
        {
            return self.values_method(d, name, &args);
        }
        let hidden = match name {
            "Has" => "__apiVersionsHas",
            "Get" => "__filesGet",
            "GetBytes" => "__filesGetBytes",
            "Lines" => "__filesLines",
            "Glob" => "__filesGlob",
            "AsConfig" => "__filesAsConfig",
            "AsSecrets" => "__filesAsSecrets",
            _ => return Err(format!("can't evaluate field {name}")),
        };
        let mut all = Vec::with_capacity(args.len() + 1);
        all.push(recv.clone());
        all.extend(args);
        let out = self.call_pack(hidden, &all)?;
        Ok(match (name, out) {
            ("Glob", V::Map(m)) => V::Map(Dict::with_kind(
                m.entries().into_iter().collect(),
                Kind::Files,
            )),
            (_, v) => v,
        })
    }

    /// The methods of Helm's `Values` (`.Values.AsMap`, `.Values.Table "a.b"`,
    /// `.Values.PathValue "a.b"`, `.Values.YAML`), with Helm's errors.
    fn values_method(&self, values: &Dict, name: &str, args: &[V]) -> R<V> {
        let want = if matches!(name, "Table" | "PathValue") {
            1
        } else {
            0
        };
        need(name, args, want)?;
        let path = args.first().map(|a| self.strval(a)).unwrap_or_default();
        let failed = |message: String| format!("error calling {name}: {message}");
        match name {
            "AsMap" => Ok(V::Map(values.viewed_as(Kind::Plain))),
            "YAML" => match self.call_pack("toYaml", &[V::Map(values.clone())])? {
                V::Str(text) => Ok(V::str(format!("{text}\n"))),
                other => Ok(other),
            },
            "Table" => table(values, &path)
                .map(|t| V::Map(t.viewed_as(Kind::Values)))
                .map_err(failed),
            _ => {
                if path.is_empty() {
                    return Err(failed("YAML path cannot be empty".into()));
                }
                let (init, key) = match path.rsplit_once('.') {
                    Some((init, key)) => (Some(init), key),
                    None => (None, path.as_str()),
                };
                let no_value = || failed(format!("{} is not a value", go_quote(key)));
                let table = match init {
                    Some(init) => table(values, init).map_err(|_| no_value())?,
                    None => values.clone(),
                };
                match table.get(key) {
                    Some(V::Map(_)) | None => Err(no_value()),
                    Some(v) => Ok(v),
                }
            }
        }
    }

    /// A function call from the tree: `and`/`or` evaluate their arguments lazily.
    fn call_expr(
        &self,
        name: &str,
        offset: usize,
        args: &[Expr],
        dot: &V,
        vars: &mut Vars,
        fin: Option<V>,
    ) -> R<V> {
        if name == "and" || name == "or" {
            if args.is_empty() && fin.is_none() {
                return Err(format!(
                    "wrong number of args for {name}: want at least 1 got 0"
                ));
            }
            let want = name == "or";
            let mut last = V::Nil;
            for a in args {
                last = self.eval_arg(a, dot, vars)?;
                if last.truthy() == want {
                    return Ok(last);
                }
            }
            if let Some(f) = fin {
                last = f;
            }
            return Ok(last);
        }
        let mut vals = Vec::with_capacity(args.len() + 1);
        let given = args.len() + usize::from(fin.is_some());
        for (i, a) in args.iter().enumerate() {
            let ty = params::param(name, i, given);
            if let Some(e) = params::literal_refusal(ty, a, &expr_string) {
                return Err(self.frame(e, chain_offset(a), &|| expr_string(a)));
            }
            let (v, typed_nil) = self.eval_arg_typed(a, dot, vars)?;
            // A function's nil result is still typed (`interface {}`).
            let typed_nil = typed_nil || matches!(a, Expr::Identifier(..));
            let literal = matches!(
                a,
                Expr::String(..) | Expr::Number(..) | Expr::Bool(..) | Expr::Nil(_)
            );
            if !literal && let Some(e) = params::value_refusal(ty, &v, typed_nil) {
                let at = last_node(a);
                return Err(self.frame(e, chain_offset(at), &|| expr_string(at)));
            }
            vals.push(v);
        }
        if let Some(f) = &fin
            && let Some(e) = params::value_refusal(params::param(name, args.len(), given), f, false)
        {
            // Go places it at the last node it evaluated: the last written argument.
            return Err(match args.last().map(last_node) {
                Some(at) => self.frame(e, chain_offset(at), &|| expr_string(at)),
                None => self.frame(e, offset, &|| name.to_string()),
            });
        }
        vals.extend(fin);
        let result = self.call(name, vals);
        // A function that ran out of memory budget (or whose arguments' conversion did) fails
        // with the limit, whatever it answered.
        self.within_memory()?;
        // Go says which function failed, around whatever the function said.
        result.map_err(|e| {
            if !e.starts_with(FRAMED)
                && (e.starts_with("wrong number of args")
                    || e.starts_with(&format!("error calling {name}: ")))
            {
                e
            } else {
                format!("error calling {name}: {}", e.trim_start_matches(FRAMED))
            }
        })
    }

    /// Calls a function by name with evaluated arguments.
    pub fn call(&self, name: &str, args: Vec<V>) -> R<V> {
        match name {
            "include" => self.include(&args),
            "tpl" => self.tpl(&args),
            "set" => {
                need(name, &args, 3)?;
                let d = dict_strict(name, &args[0])?;
                let key = self.strval(&args[1]);
                meter::charge(NODE + key.len(), Built::Map);
                d.update(&self.conv.generation, |m| {
                    m.insert(key.into(), args[2].clone())
                });
                Ok(V::Map(d))
            }
            "unset" => {
                need(name, &args, 2)?;
                let d = dict_strict(name, &args[0])?;
                let key = self.strval(&args[1]);
                d.update(&self.conv.generation, |m| m.remove(key.as_str()));
                Ok(V::Map(d))
            }
            "merge" | "mustMerge" => self.merge(name, &args, false),
            "mergeOverwrite" | "mustMergeOverwrite" => self.merge(name, &args, true),
            "deepCopy" | "mustDeepCopy" => {
                need(name, &args, 1)?;
                // copystructure reflects on its argument: nil has no type.
                if matches!(args[0], V::Nil) {
                    return Err(format!(
                        "error calling {name}: reflect: call of reflect.Value.Type on zero Value"
                    ));
                }
                Ok(self.conv.deep_copy(&args[0]))
            }
            "dict" => {
                let mut m = BTreeMap::new();
                for pair in args.chunks(2) {
                    let key: Arc<str> = self.strval(&pair[0]).into();
                    meter::charge(NODE + key.len(), Built::Map);
                    m.insert(key, pair.get(1).cloned().unwrap_or_else(|| V::str("")));
                }
                Ok(V::Map(Dict::new(m)))
            }
            "get" => {
                need(name, &args, 2)?;
                let key = self.strval(&args[1]);
                Ok(match &args[0] {
                    V::Map(d) => d.get(&key).unwrap_or_else(|| V::str("")),
                    V::Nil => V::str(""),
                    other => {
                        return Err(format!(
                            "error calling {name}: expected a dict, got {}",
                            other.type_name()
                        ));
                    }
                })
            }
            "hasKey" => {
                need(name, &args, 2)?;
                let key = self.strval(&args[1]);
                Ok(V::Bool(match &args[0] {
                    V::Map(d) => d.contains(&key),
                    V::Nil => false,
                    other => {
                        return Err(format!(
                            "error calling {name}: expected a dict, got {}",
                            other.type_name()
                        ));
                    }
                }))
            }
            "index" => self.index(&args),
            "semver" => Ok(match self.call_pack(name, &args)? {
                V::Map(d) => V::Map(Dict::with_kind(
                    d.entries().into_iter().collect(),
                    Kind::Semver,
                )),
                other => other,
            }),
            "duration" => {
                need(name, &args, 1)?;
                Ok(V::str(super::funcs::time::duration_text(match &args[0] {
                    V::Str(s) => super::funcs::time::parse_int64(s),
                    V::Int64(n) => *n,
                    // Sprig takes a string or an int64; anything else (an int literal, a
                    // float64 from a values file) is 0.
                    _ => 0,
                })))
            }
            // Go types the pack's values cannot carry.
            "typeOf" | "kindOf" if matches!(args.as_slice(), [V::Int64(_)]) => Ok(V::str("int64")),
            "typeIs" | "kindIs" if matches!(args.as_slice(), [_, V::Int64(_)]) => {
                Ok(V::Bool(self.strval(&args[0]) == "int64"))
            }
            "deepEqual"
                if matches!(
                    args.as_slice(),
                    [V::Int64(_), V::Int(_)] | [V::Int(_), V::Int64(_)]
                ) =>
            {
                Ok(V::Bool(false))
            }
            "typeOf" if matches!(args.as_slice(), [V::Map(d)] if d.kind() == Kind::Semver) => {
                Ok(V::str("*semver.Version"))
            }
            "typeOf" if matches!(args.as_slice(), [V::Map(d)] if d.kind() == Kind::Values) => {
                Ok(V::str("common.Values"))
            }
            "kindIs" | "typeIs" | "typeIsLike" if matches!(args.as_slice(), [_, V::Map(d)] if helm_type(d.kind()).is_some()) =>
            {
                let (t, k) = match &args[1] {
                    V::Map(d) => helm_type(d.kind()).unwrap_or(("", "")),
                    _ => ("", ""),
                };
                let target = self.strval(&args[0]);
                Ok(V::Bool(match name {
                    "kindIs" => target == k,
                    "typeIs" => target == t,
                    _ => target == t || target == format!("*{t}"),
                }))
            }
            // Helm's own types.
            "typeOf" | "kindOf" if matches!(args.as_slice(), [V::Map(d)] if helm_type(d.kind()).is_some()) =>
            {
                let (t, k) = match &args[0] {
                    V::Map(d) => helm_type(d.kind()).unwrap_or(("", "")),
                    _ => ("", ""),
                };
                Ok(V::str(if name == "typeOf" { t } else { k }))
            }
            // Go's nil map has length 0 (the pack sees nil, which has none).
            "len" if matches!(args.as_slice(), [V::Map(d)] if d.kind() == Kind::NilMap) => {
                Ok(V::Int(0))
            }
            "not" => {
                need(name, &args, 1)?;
                Ok(V::Bool(!args[0].truthy()))
            }
            "and" | "or" => {
                let want = name == "or";
                Ok(args
                    .iter()
                    .find(|a| a.truthy() == want)
                    .or(args.last())
                    .cloned()
                    .unwrap_or(V::Nil))
            }
            "call" => {
                let Some(V::Func(f)) = args.first() else {
                    return Err("non-function of type passed to call".into());
                };
                let g: Vec<gotmpl::Value> = args[1..].iter().map(|a| self.conv.to_g(a)).collect();
                f(&g)
                    .map(|v| self.conv.to_v(&v))
                    .map_err(|e| super::funcs::message(&e))
            }
            _ if GOTMPL_TEXT.contains(&name) || GOTMPL_BOOL.contains(&name) => {
                if self.funcs.contains_key(name) {
                    return self.call_pack(name, &args);
                }
                self.go_builtin(name, &args)
            }
            "typeOf" if matches!(args.as_slice(), [V::List(_, e)] if *e != Elem::Any) => {
                Ok(V::str(args[0].type_name()))
            }
            "typeIs" | "typeIsLike" if matches!(args.as_slice(), [_, V::Map(d)] if d.kind() == Kind::StrMap) =>
            {
                let target = self.strval(&args[0]);
                Ok(V::Bool(
                    target == "map[string]string"
                        || (name == "typeIsLike" && target == "*map[string]string"),
                ))
            }
            "typeIs" | "typeIsLike" if matches!(args.as_slice(), [_, V::List(_, e)] if *e != Elem::Any) =>
            {
                let target = self.strval(&args[0]);
                let t = args[1].type_name();
                Ok(V::Bool(
                    target == t || (name == "typeIsLike" && target == format!("*{t}")),
                ))
            }
            "deepEqual" if matches!(args.as_slice(), [V::List(_, a), V::List(_, b)] if a != b) => {
                Ok(V::Bool(false))
            }
            // A nil `map[string]string` (unset chart annotations) is a typed nil: the
            // printing functions print it as `map[]` (the pack sees nil).
            "quote" | "squote" | "cat" | "toString"
                if args
                    .iter()
                    .any(|a| matches!(a, V::Map(d) if d.kind() == Kind::NilMap)) =>
            {
                let args = args
                    .into_iter()
                    .map(|a| match a {
                        V::Map(d) if d.kind() == Kind::NilMap => V::str("map[]"),
                        other => other,
                    })
                    .collect();
                self.call(name, args)
            }
            // A time is its RFC 3339 text in JSON and YAML (Go's `MarshalJSON`).
            _ if TO_TEXT.contains(&name) && args.iter().any(|a| a.time_text().is_some()) => {
                let args = args
                    .into_iter()
                    .map(|a| a.time_text().map_or(a, V::Str))
                    .collect();
                self.call(name, args)
            }
            // Sprig's date formatting takes a time or Unix seconds; anything else is now.
            _ if TIME_ARG.iter().any(|(n, i)| {
                *n == name
                    && args.get(*i).is_some_and(|a| {
                        a.time_text().is_none() && !matches!(a, V::Int(_) | V::Int64(_))
                    })
            }) =>
            {
                let mut args = args;
                let now = match self.call_pack("now", &[])? {
                    V::Str(t) => V::time(t),
                    other => other,
                };
                if now.time_text().is_none() {
                    return Err(format!("error calling {name}: no current time"));
                }
                if let Some((_, i)) = TIME_ARG.iter().find(|(n, _)| *n == name) {
                    args[*i] = now;
                }
                self.call(name, args)
            }
            _ => {
                let v = self.call_pack(name, &args)?;
                Ok(match v {
                    V::Str(t) if TIME_RESULTS.contains(&name) => V::time(t),
                    V::List(l, _) if STRING_LISTS.contains(&name) => V::List(l, Elem::Str),
                    V::Map(d) if matches!(name, "split" | "splitn") => {
                        V::Map(d.viewed_as(Kind::StrMap))
                    }
                    V::List(l, _) if matches!(name, "until" | "untilStep") => V::List(l, Elem::Int),
                    V::List(l, _) if matches!(name, "chunk" | "mustChunk") => {
                        V::List(l, Elem::AnyList)
                    }
                    // A function handing back one of its arguments (or a part of a list
                    // argument) hands back its type.
                    V::List(l, _)
                        if PASS_THROUGH.contains(&name)
                            || matches!(name, "slice" | "mustSlice") =>
                    {
                        let elem = args
                            .iter()
                            .find_map(|a| match a {
                                V::List(items, e)
                                    if *e != Elem::Any
                                        && (name.ends_with("lice") || same_items(items, &l)) =>
                                {
                                    Some(*e)
                                }
                                _ => None,
                            })
                            .unwrap_or(Elem::Any);
                        V::List(l, elem)
                    }
                    V::Int(n) if INT64_RESULTS.contains(&name) => V::Int64(n),
                    // A function handing back one of its arguments hands back its type.
                    V::Int(n)
                        if PASS_THROUGH.contains(&name)
                            && args.iter().any(|a| holds_int64(a, n)) =>
                    {
                        V::Int64(n)
                    }
                    other => other,
                })
            }
        }
    }

    /// A function of the Sprig pack, on converted values.
    fn call_pack(&self, name: &str, args: &[V]) -> R<V> {
        let f = self
            .funcs
            .get(name)
            .ok_or_else(|| format!("function {name:?} not defined"))?;
        let mark = meter::used();
        let g: Vec<gotmpl::Value> = args
            .iter()
            .map(|a| match a {
                // `.Files` is Helm's `map[string][]byte`: other functions see its bytes as Go
                // shows them (numbers when printed, base64 in JSON and YAML).
                V::Map(d) if d.kind() == Kind::Files && !name.starts_with("__") => {
                    files_as_go(d, TO_TEXT.contains(&name))
                }
                other => self.conv.to_g(other),
            })
            .collect();
        let out = f(&g).map_err(|e| match e {
            // Go checks the count before calling, in its own words.
            gotmpl::TemplateError::ArgCount {
                name,
                expected,
                got,
            } => format!("wrong number of args for {name}: want {expected} got {got}"),
            other => super::funcs::message(&other),
        });
        // The arguments' copies and the function's own work are gone; its result stays.
        drop(g);
        meter::release_to(mark);
        Ok(self.conv.to_v(&out?))
    }

    /// Go's own `printf`, `eq`, ... through a one-action `gotmpl` template.
    fn go_builtin(&self, name: &str, args: &[V]) -> R<V> {
        if name == "printf"
            && let Some(V::Str(f)) = args.first()
        {
            if meter::bounded() {
                // What printing the arguments makes at most (widths are checked as they pad).
                let mark = meter::used();
                let most = args[1..]
                    .iter()
                    .map(|a| super::value::printed_len(&self.conv.to_g(a)))
                    .fold(f.len(), usize::saturating_add);
                meter::release_to(mark);
                meter::reserve(name, most, Built::String).map_err(|e| super::funcs::message(&e))?;
            }
            let type_name = |v: &V| match self.call("typeOf", vec![v.clone()]) {
                Ok(V::Str(t)) => t.to_string(),
                _ => v.type_name().to_string(),
            };
            match printf::sprintf(f, &args[1..], &type_name) {
                Ok(text) => {
                    meter::charge(text.len(), Built::String);
                    return Ok(V::str(text));
                }
                Err(printf::Stop::Budget) => {
                    return Err(meter::reserve(name, usize::MAX, Built::String)
                        .map_or_else(|e| super::funcs::message(&e), |()| String::new()));
                }
                // Helm's structs, `.Files`, `%#v`, `%p`: gotmpl's printf below.
                Err(printf::Stop::Unmodelled) => {}
            }
        }
        if name == "printf"
            && let Some(V::Str(f)) = args.first()
            && f.contains("%T")
        {
            let (f, rest) = self.type_verbs(f, &args[1..])?;
            let mut all = vec![V::str(f)];
            all.extend(rest);
            return self.go_builtin_run(name, &all);
        }
        self.go_builtin_run(name, args)
    }

    /// `printf`'s `%T` (which gotmpl lacks): each becomes `%s` of the argument's Go type
    /// name (Sprig's `typeOf`).
    fn type_verbs(&self, format: &str, args: &[V]) -> R<(String, Vec<V>)> {
        let mut out = String::with_capacity(format.len());
        let mut args = args.to_vec();
        let mut next_arg = 0;
        let mut chars = format.chars().peekable();
        while let Some(c) = chars.next() {
            out.push(c);
            if c != '%' {
                continue;
            }
            if chars.peek() == Some(&'%') {
                out.push('%');
                chars.next();
                continue;
            }
            while let Some(&f) = chars.peek() {
                if f.is_ascii_alphabetic() {
                    break;
                }
                out.push(f);
                chars.next();
            }
            match chars.next() {
                Some('T') => {
                    out.push('s');
                    if let Some(a) = args.get(next_arg).cloned() {
                        let t = match a {
                            V::Nil => V::str("<nil>"),
                            other => self.call("typeOf", vec![other])?,
                        };
                        args[next_arg] = t;
                    }
                }
                Some(v) => out.push(v),
                None => {}
            }
            next_arg += 1;
        }
        Ok((out, args))
    }

    fn go_builtin_run(&self, name: &str, args: &[V]) -> R<V> {
        let mark = meter::used();
        let text = self.go_builtin_text(name, args);
        meter::release_to(mark);
        let text = text?;
        if GOTMPL_BOOL.contains(&name) {
            return Ok(V::Bool(text == "true"));
        }
        meter::charge(text.len(), Built::String);
        Ok(V::str(text))
    }

    /// What Go's builtin `name` prints (or answers) for `args`.
    fn go_builtin_text(&self, name: &str, args: &[V]) -> R<String> {
        let data = gotmpl::Value::List(
            args.iter()
                .map(|a| match a {
                    V::Map(d) if d.kind() == Kind::Files => files_as_go(d, false),
                    other => self.conv.to_g(other),
                })
                .collect(),
        );
        if GOTMPL_TEXT.contains(&name)
            && meter::bounded()
            && let gotmpl::Value::List(g) = &data
        {
            // Go's printing can make far more text than its arguments hold (a width of 65535
            // per verb, a map reached through many keys): check the most it can make first.
            let most = g
                .iter()
                .map(super::value::printed_len)
                .fold(0usize, usize::saturating_add);
            let widths = match g.first() {
                Some(gotmpl::Value::String(f)) if name == "printf" => {
                    f.matches('%').count().saturating_mul(1 << 16)
                }
                _ => 0,
            };
            meter::reserve(name, most.saturating_add(widths), Built::String)
                .map_err(|e| super::funcs::message(&e))?;
        }
        let key = (name.to_string(), args.len());
        let mut cache = self.builtins.borrow_mut();
        if !cache.contains_key(&key) {
            let mut src = format!("{{{{{name}");
            for i in 0..args.len() {
                src.push_str(&format!(" (index . {i})"));
            }
            src.push_str("}}");
            let t = gotmpl::Template::new(name)
                .parse(&src)
                .map_err(|e| super::funcs::message(&e))?;
            cache.insert(key.clone(), t);
        }
        let Some(t) = cache.get(&key) else {
            return Err(format!("function {name:?} not defined"));
        };
        t.execute_to_string(&data)
            .map_err(|e| super::funcs::message(&e))
    }

    fn merge(&self, name: &str, args: &[V], overwrite: bool) -> R<V> {
        if args.is_empty() {
            return Err(format!(
                "wrong number of args for {name}: want at least 1 got 0"
            ));
        }
        let dst = match &args[0] {
            V::Map(d) => d.clone(),
            V::Nil => Dict::new(BTreeMap::new()),
            other => {
                return Err(format!(
                    "error calling {name}: expected a dict, got {}",
                    other.type_name()
                ));
            }
        };
        for src in &args[1..] {
            match src {
                V::Map(s) => {
                    if !s.same(&dst) {
                        self.deep_merge(&dst, s, overwrite, 0);
                    }
                }
                V::Nil => {}
                other => {
                    return Err(format!(
                        "error calling {name}: expected a dict, got {}",
                        other.type_name()
                    ));
                }
            }
        }
        Ok(V::Map(dst))
    }

    /// Merges `src` into `dst` in place, as Sprig's mergo does: nested maps merge into `dst`'s
    /// own map; any other value of `src` replaces `dst`'s with `overwrite` (zero values and nil
    /// included: mergo sees them inside interfaces, which are not empty), and without it only
    /// fills a `dst` value that is empty.
    fn deep_merge(&self, dst: &Dict, src: &Dict, overwrite: bool, depth: usize) {
        if depth > 1000 {
            return;
        }
        for (k, sv) in src.entries() {
            let dv = dst.get(&k);
            match (dv, &sv) {
                (Some(V::Map(dm)), V::Map(sm)) => {
                    if !dm.same(sm) {
                        self.deep_merge(&dm, sm, overwrite, depth + 1);
                    }
                }
                (Some(dv), _) => {
                    if overwrite || is_empty(&dv) {
                        dst.update(&self.conv.generation, |m| m.insert(k, sv));
                    }
                }
                (None, _) => {
                    meter::charge(NODE, Built::Map);
                    dst.update(&self.conv.generation, |m| m.insert(k, sv));
                }
            }
        }
    }

    fn index(&self, args: &[V]) -> R<V> {
        let Some(mut cur) = args.first().cloned() else {
            return Err("wrong number of args for index: want at least 1 got 0".into());
        };
        for key in &args[1..] {
            cur = match &cur {
                V::Map(d) => d.get(&self.strval(key)).unwrap_or(V::Nil),
                V::List(l, _) => {
                    let i = match key {
                        V::Int(i) | V::Int64(i) => *i,
                        V::Uint(u) => i64::try_from(*u).unwrap_or(i64::MAX),
                        V::Float(f) if f.fract() == 0.0 => *f as i64,
                        other => {
                            return Err(format!(
                                "cannot index slice/array with type {}",
                                other.type_name()
                            ));
                        }
                    };
                    if i < 0 || i as usize >= l.len() {
                        return Err(format!("error calling index: index out of range: {i}"));
                    }
                    l[i as usize].clone()
                }
                V::Str(s) => {
                    let i = match key {
                        V::Int(i) | V::Int64(i) => *i,
                        _ => return Err("cannot index string with non-integer".into()),
                    };
                    match usize::try_from(i).ok().and_then(|i| s.as_bytes().get(i)) {
                        Some(b) => V::Int(i64::from(*b)),
                        None => {
                            return Err(format!("error calling index: index out of range: {i}"));
                        }
                    }
                }
                V::Nil => return Err("error calling index: index of untyped nil".into()),
                other => {
                    return Err(format!(
                        "error calling index: can't index item of type {}",
                        other.type_name()
                    ));
                }
            };
        }
        Ok(cur)
    }

    fn include(&self, args: &[V]) -> R<V> {
        let name = self.strval(args.first().unwrap_or(&V::Nil));
        let data = args.get(1).cloned().unwrap_or(V::Nil);
        let _guard = self.enter("include")?;
        let tree = self.lookup(&name).ok_or_else(|| {
            format!("template: no template {name:?} associated with template \"gotpl\"")
        })?;
        let mut out = String::new();
        let mut vars: Vars = vec![("$".into(), data.clone())];
        self.in_frame(&name, None, || self.walk(&tree, &data, &mut vars, &mut out))?;
        meter::charge(out.len(), Built::String);
        Ok(V::str(out))
    }

    /// Helm's `tpl text data`: `text` runs as a template named `gotpl`, with the chart's
    /// templates and its own definitions.
    fn tpl(&self, args: &[V]) -> R<V> {
        let text = self.strval(args.first().unwrap_or(&V::Nil));
        let data = args.get(1).cloned().unwrap_or(V::Nil);
        let _guard = self.enter("tpl")?;
        let failed = |e: &str| {
            format!(
                "error during tpl function execution for {}: {}",
                super::value::go_quote(&text),
                e.trim_start_matches(FRAMED)
            )
        };
        let cannot_parse = |e: &str| {
            format!(
                "cannot parse template {}: {e}",
                super::value::go_quote(&text)
            )
        };
        let parsed = gotpl::parse("gotpl", &text, &|name| is_function(&self.funcs, name))
            .map_err(|e| cannot_parse(&e.to_string()))?;
        let defines = parsed.defines;
        let tree = parsed.root;
        let overlay: HashMap<String, Arc<ListNode>> = defines
            .into_iter()
            .map(|d| (d.name.to_string(), Arc::new(d.body)))
            .collect();
        self.overlays.borrow_mut().push(overlay);
        let mut out = String::new();
        let mut vars: Vars = vec![("$".into(), data.clone())];
        let source = Source {
            file: "gotpl".into(),
            text: text.as_str().into(),
        };
        let r = self.in_frame("gotpl", Some(source), || {
            self.walk(&tree, &data, &mut vars, &mut out)
        });
        self.overlays.borrow_mut().pop();
        r.map_err(|e| failed(&e))?;
        meter::charge(out.len(), Built::String);
        Ok(V::str(out.replace("<no value>", "")))
    }

    /// Go's `fmt.Sprint` of one value.
    pub fn sprint(&self, v: &V) -> String {
        match v {
            V::Str(s) => s.to_string(),
            V::Nil => "<nil>".into(),
            V::Bool(b) => b.to_string(),
            V::Int(n) | V::Int64(n) => n.to_string(),
            V::Uint(n) => n.to_string(),
            V::Float(f) => super::value::go_float(*f),
            V::Map(d) => match d.kind() {
                // An action prints what a pointer points to.
                Kind::Struct(fields) | Kind::Pointer(fields) => self.conv.struct_text(d, fields),
                Kind::NilMap if d.entries().is_empty() => "map[]".into(),
                Kind::Stringer(fields) => fields
                    .first()
                    .and_then(|f| d.get(f))
                    .map(|v| self.sprint(&v))
                    .unwrap_or_default(),
                Kind::Semver => d.get("String").map(|v| self.sprint(&v)).unwrap_or_default(),
                Kind::Files => super::value::go_sprint(&files_as_go(d, false)),
                _ => super::value::go_sprint(&self.conv.to_g(v)),
            },
            other => super::value::go_sprint(&self.conv.to_g(other)),
        }
    }

    fn print(&self, v: &V, out: &mut String) {
        match v {
            V::Nil => out.push_str("<no value>"),
            V::Str(s) => out.push_str(s),
            other => out.push_str(&self.sprint(other)),
        }
    }

    pub fn strval(&self, v: &V) -> String {
        match v {
            V::Str(s) => s.to_string(),
            other => super::value::strval(&self.conv.to_g(other)),
        }
    }
}

struct DepthGuard<'a>(&'a Cell<usize>);

impl Drop for DepthGuard<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

fn number(n: &Number) -> V {
    match n {
        Number::Int(i) => V::Int(*i),
        Number::Uint(u) => V::Uint(*u),
        Number::Float(f) => V::Float(*f),
    }
}

fn is_method(recv: &V, name: &str) -> bool {
    match recv {
        V::Map(m) => match m.kind() {
            Kind::Files => matches!(
                name,
                "Get" | "GetBytes" | "Lines" | "Glob" | "AsConfig" | "AsSecrets"
            ),
            // Go looks for a method before a map key.
            Kind::Values => matches!(name, "AsMap" | "Table" | "PathValue" | "YAML"),
            _ => false,
        },
        V::List(..) => name == "Has",
        _ => false,
    }
}

/// Helm's `Values.Table`: the map at the dotted `path`, or `"SEGMENT" is not a table`.
fn table(values: &Dict, path: &str) -> Result<Dict, String> {
    let mut table = values.clone();
    for segment in path.split('.') {
        table = match table.get(segment) {
            Some(V::Map(d)) => d,
            _ => return Err(format!("{} is not a table", go_quote(segment))),
        };
    }
    Ok(table)
}

fn need(name: &str, args: &[V], n: usize) -> R<()> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!(
            "wrong number of args for {name}: want {n} got {}",
            args.len()
        ))
    }
}

fn dict_strict(name: &str, v: &V) -> R<Dict> {
    match v {
        V::Map(d) => Ok(d.clone()),
        other => Err(format!(
            "error calling {name}: expected a dict, got {}",
            other.type_name()
        )),
    }
}

/// Sprig's `empty`: the zero value of its type.
fn is_empty(v: &V) -> bool {
    !v.truthy() && !matches!(v, V::Func(_))
}

/// Whether `name` is a function a template may call: one of the pack's, or one the executor
/// runs itself (Go's parser refuses any other).
pub fn is_function(funcs: &FuncMap, name: &str) -> bool {
    funcs.contains_key(name)
        || NATIVE.contains(&name)
        || GOTMPL_TEXT.contains(&name)
        || GOTMPL_BOOL.contains(&name)
}

/// The last node Go evaluates for an argument (where its errors about the argument's value
/// point): inside a parenthesized pipeline, its last command's last word.
fn last_node(e: &Expr) -> &Expr {
    match e {
        Expr::Pipe(_, p) => match p.commands.last().and_then(|c| c.args.last()) {
            Some(inner) => last_node(inner),
            None => e,
        },
        _ => e,
    }
}

/// Where Go places a field chain in errors: `.a.b.c` at its second field (the first is a
/// node of its own), `$x.a` at its first field.
fn chain_offset(e: &Expr) -> usize {
    match e {
        Expr::Field(p, fs) if fs.len() >= 2 => p.offset + 1 + fs[0].len(),
        Expr::Variable(p, name, fs) if !fs.is_empty() => p.offset + name.len(),
        other => other.pos().offset,
    }
}

/// A node as Go prints it in errors.
fn expr_string(e: &Expr) -> String {
    let fields = |fs: &[Arc<str>]| -> String { fs.iter().map(|f| format!(".{f}")).collect() };
    match e {
        Expr::Dot(_) => ".".into(),
        Expr::Field(_, fs) => fields(fs),
        Expr::Variable(_, name, fs) => format!("{name}{}", fields(fs)),
        Expr::Identifier(_, name) => name.to_string(),
        Expr::String(_, s) => super::value::go_quote(s),
        Expr::Number(_, _, text) => text.to_string(),
        Expr::Bool(_, b) => b.to_string(),
        Expr::Nil(_) => "nil".into(),
        Expr::Pipe(_, p) => format!("({})", pipe_string(p)),
        Expr::Chain(_, inner, fs) => format!("{}{}", expr_string(inner), fields(fs)),
    }
}

fn cmd_string(c: &CommandNode) -> String {
    c.args.iter().map(expr_string).collect::<Vec<_>>().join(" ")
}

fn pipe_string(p: &PipeNode) -> String {
    let cmds = p
        .commands
        .iter()
        .map(cmd_string)
        .collect::<Vec<_>>()
        .join(" | ");
    if p.decl.is_empty() {
        return cmds;
    }
    let decl = p
        .decl
        .iter()
        .map(|d| d.as_ref())
        .collect::<Vec<_>>()
        .join(", ");
    let op = if p.is_assign { "=" } else { ":=" };
    format!("{decl} {op} {cmds}")
}

#[cfg(test)]
mod tests;
