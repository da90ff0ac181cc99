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

pub mod value;

use super::gotpl::{
    self,
    ast::{BranchNode, CommandNode, Expr, ListNode, Node, Number, PipeNode},
};
use gotmpl::FuncMap;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
pub use value::{Conv, Dict, Kind, V};

/// How deep `include`/`tpl`/`template` may nest. Helm allows 1000 per template name; a lower
/// global bound keeps a runaway recursive chart from overflowing the thread's stack.
const MAX_DEPTH: usize = 100;

/// How many iterations one `range` may run (a range over a huge integer).
const MAX_RANGE: i64 = 10_000_000;

type R<T> = Result<T, String>;

/// A render's bounds, checked as the templates execute (so a runaway chart stops where it is
/// rather than running on after its caller gave up): a deadline and a cap on the text one
/// template may produce. Set for the renders on this thread with [`with_budget`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Budget {
    /// How long the render may take (named in the error)...
    pub time: Option<std::time::Duration>,
    /// ...counted from here (default: when [`with_budget`] starts).
    pub since: Option<std::time::Instant>,
    /// How many bytes one template's output may reach.
    pub output: Option<usize>,
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
/// `budget.time` or produce more than `budget.output` bytes fail with an error naming the
/// bound. A thread-local rather than a parameter so that every render entry point honours it.
pub fn with_budget<T>(budget: Budget, f: impl FnOnce() -> T) -> T {
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
    f()
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
        }
    }

    /// Fails once the render is past its deadline or `out` past its size bound.
    fn tick(&self, out: &str) -> R<()> {
        let Some(bound) = &self.bound else {
            return Ok(());
        };
        if let Some(max) = bound.budget.output
            && out.len() > max
        {
            return Err(format!(
                "the template's output is over the render output limit of {max} bytes"
            ));
        }
        let steps = self.steps.get().wrapping_add(1);
        self.steps.set(steps);
        if steps.is_multiple_of(STEPS_PER_CLOCK_CHECK)
            && let (Some(deadline), Some(time)) = (bound.deadline, bound.budget.time)
            && std::time::Instant::now() > deadline
        {
            return Err(format!(
                "the render took longer than the render time limit of {time:?}"
            ));
        }
        Ok(())
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
        let items: Vec<(V, V)> = match &v {
            V::List(l) => l
                .iter()
                .enumerate()
                .map(|(i, x)| (V::Int(i as i64), x.clone()))
                .collect(),
            V::Map(m) => m
                .entries()
                .into_iter()
                .map(|(k, x)| (V::Str(k), x))
                .collect(),
            V::Int(n) => {
                if *n > MAX_RANGE {
                    return Err(format!("range over {n}: too many iterations"));
                }
                (0..(*n).max(0)).map(|i| (V::Int(i), V::Int(i))).collect()
            }
            V::Uint(n) => {
                if *n > MAX_RANGE as u64 {
                    return Err(format!("range over {n}: too many iterations"));
                }
                (0..*n as i64).map(|i| (V::Int(i), V::Int(i))).collect()
            }
            V::Nil => Vec::new(),
            other => return Err(format!("range can't iterate over {}", self.sprint(other))),
        };
        if items.is_empty() {
            if let Some(e) = &b.else_body {
                self.walk(e, dot, vars, out)?;
            }
            return Ok(());
        }
        let inner_mark = vars.len();
        for (k, x) in items {
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
            Expr::Number(_, n) => {
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
            Expr::Number(_, n) => Ok(number(n)),
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
                Ok(m.get(name).unwrap_or(V::Nil))
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
        let map_params = map_params(name, args.len());
        let given = args.len() + usize::from(fin.is_some());
        let strings = string_params(name, given);
        for (i, a) in args.iter().enumerate() {
            let (v, typed_nil) = self.eval_arg_typed(a, dot, vars)?;
            if strings.contains(&i)
                && let Some(e) = not_a_string(a, &v, typed_nil)
            {
                let at = last_node(a);
                return Err(self.frame(e, chain_offset(at), &|| expr_string(at)));
            }
            // Go hands a nil variable to a map parameter as an empty map, but refuses a map's
            // missing entry passed directly.
            if typed_nil && map_params.contains(&i) {
                return Err(self.frame(
                    "wrong type for value; expected map[string]interface {}; got interface {}"
                        .into(),
                    chain_offset(a),
                    &|| expr_string(a),
                ));
            }
            vals.push(v);
        }
        if let Some(f) = &fin
            && strings.contains(&args.len())
            && let Some(e) = piped_not_a_string(f)
        {
            // Go places it at the last node it evaluated: the last written argument.
            return Err(match args.last().map(last_node) {
                Some(at) => self.frame(e, chain_offset(at), &|| expr_string(at)),
                None => self.frame(e, offset, &|| name.to_string()),
            });
        }
        vals.extend(fin);
        // Go says which function failed, around whatever the function said.
        self.call(name, vals).map_err(|e| {
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
                Ok(self.conv.deep_copy(&args[0]))
            }
            "dict" => {
                let mut m = BTreeMap::new();
                for pair in args.chunks(2) {
                    let key: Arc<str> = self.strval(&pair[0]).into();
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
            _ => self.call_pack(name, &args),
        }
    }

    /// A function of the Sprig pack, on converted values.
    fn call_pack(&self, name: &str, args: &[V]) -> R<V> {
        let f = self
            .funcs
            .get(name)
            .ok_or_else(|| format!("function {name:?} not defined"))?;
        let g: Vec<gotmpl::Value> = args.iter().map(|a| self.conv.to_g(a)).collect();
        let out = f(&g).map_err(|e| match e {
            // Go checks the count before calling, in its own words.
            gotmpl::TemplateError::ArgCount {
                name,
                expected,
                got,
            } => format!("wrong number of args for {name}: want {expected} got {got}"),
            other => super::funcs::message(&other),
        })?;
        Ok(self.conv.to_v(&out))
    }

    /// Go's own `printf`, `eq`, ... through a one-action `gotmpl` template.
    fn go_builtin(&self, name: &str, args: &[V]) -> R<V> {
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
                            other => self.call_pack("typeOf", &[other])?,
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
        let data = gotmpl::Value::List(args.iter().map(|a| self.conv.to_g(a)).collect());
        let text = t
            .execute_to_string(&data)
            .map_err(|e| super::funcs::message(&e))?;
        if GOTMPL_BOOL.contains(&name) {
            return Ok(V::Bool(text == "true"));
        }
        Ok(V::str(text))
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

    /// Merges `src` into `dst` in place: nested maps merge into `dst`'s own map; other keys
    /// keep `dst`'s value unless `overwrite` (an empty `dst` value is always filled).
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
                    let dv_empty = is_empty(&dv);
                    if dv_empty || (overwrite && !is_empty(&sv)) {
                        dst.update(&self.conv.generation, |m| m.insert(k, sv));
                    }
                }
                (None, _) => {
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
                V::List(l) => {
                    let i = match key {
                        V::Int(i) => *i,
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
                        V::Int(i) => *i,
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
        Ok(V::str(out.replace("<no value>", "")))
    }

    /// Go's `fmt.Sprint` of one value.
    pub fn sprint(&self, v: &V) -> String {
        match v {
            V::Str(s) => s.to_string(),
            V::Nil => "<nil>".into(),
            V::Bool(b) => b.to_string(),
            V::Int(n) => n.to_string(),
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
        V::Map(m) => {
            m.kind() == Kind::Files
                && matches!(
                    name,
                    "Get" | "GetBytes" | "Lines" | "Glob" | "AsConfig" | "AsSecrets"
                )
        }
        V::List(_) => name == "Has",
        _ => false,
    }
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

/// Which of the `n` arguments (written and piped) of function `name` are Go `string`
/// parameters, when `n` is the function's arity (a wrong count fails as such instead).
fn string_params(name: &str, n: usize) -> std::ops::Range<usize> {
    let (arity, strings) = match name {
        "upper" | "lower" | "title" | "untitle" | "trim" | "nospace" | "snakecase"
        | "camelcase" | "kebabcase" | "swapcase" | "shuffle" | "initials" | "b64enc" | "b64dec"
        | "b32enc" | "b32dec" | "sha1sum" | "sha256sum" | "sha512sum" | "adler32sum" | "base"
        | "dir" | "ext" | "clean" | "isAbs" | "fromYaml" | "fromJson" | "fromYamlArray"
        | "fromJsonArray" | "regexQuoteMeta" | "semver" | "fail" => (1, 0..1),
        "trimAll" | "trimall" | "trimPrefix" | "trimSuffix" | "contains" | "hasPrefix"
        | "hasSuffix" | "split" | "splitList" | "regexMatch" | "mustRegexMatch" | "regexFind"
        | "mustRegexFind" | "semverCompare" | "htpasswd" => (2, 0..2),
        "replace"
        | "regexReplaceAll"
        | "mustRegexReplaceAll"
        | "regexReplaceAllLiteral"
        | "mustRegexReplaceAllLiteral" => (3, 0..3),
        "regexFindAll" | "mustRegexFindAll" | "regexSplit" | "mustRegexSplit" => (3, 0..2),
        "repeat" | "trunc" | "abbrev" | "wrap" | "indent" | "nindent" => (2, 1..2),
        "substr" | "abbrevboth" => (3, 2..3),
        "wrapWith" => (3, 1..3),
        "include" | "tpl" | "required" => (2, 0..1),
        _ => return 0..0,
    };
    if n == arity { strings } else { 0..0 }
}

/// Go's refusal of a written argument for a `string` parameter (`value`, and whether it is a
/// map's missing or nil entry), in its words; `None` when it is a string.
fn not_a_string(arg: &Expr, value: &V, typed_nil: bool) -> Option<String> {
    match (arg, value) {
        (Expr::String(..), _) | (_, V::Str(_) | V::Func(_)) => None,
        (Expr::Nil(_), _) => Some("cannot assign nil to string".into()),
        (Expr::Number(..) | Expr::Bool(..), _) => {
            Some(format!("expected string; found {}", expr_string(arg)))
        }
        // A function's nil result is still typed (`interface {}`).
        (Expr::Identifier(..), V::Nil) => Some(wrong_type("interface {}")),
        (_, V::Nil) if typed_nil => Some(wrong_type("interface {}")),
        (_, V::Nil) => Some("invalid value; expected string".into()),
        (_, other) => Some(wrong_type(other.type_name())),
    }
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

/// The same for the value piped into the call (a pipeline's nil has no type left).
fn piped_not_a_string(value: &V) -> Option<String> {
    match value {
        V::Str(_) | V::Func(_) => None,
        V::Nil => Some("invalid value; expected string".into()),
        other => Some(wrong_type(other.type_name())),
    }
}

fn wrong_type(got: &str) -> String {
    format!("wrong type for value; expected string; got {got}")
}

/// Which of `n` written arguments of Sprig function `name` are map parameters.
fn map_params(name: &str, n: usize) -> std::ops::Range<usize> {
    match name {
        "hasKey" | "get" | "set" | "unset" | "values" | "pick" | "omit" => 0..n.min(1),
        "keys" | "merge" | "mergeOverwrite" | "mustMerge" | "mustMergeOverwrite" => 0..n,
        "pluck" => 1.min(n)..n,
        "dig" => n.saturating_sub(1)..n,
        _ => 0..0,
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
        Expr::Number(_, Number::Int(i)) => i.to_string(),
        Expr::Number(_, Number::Uint(u)) => u.to_string(),
        Expr::Number(_, Number::Float(f)) => super::value::go_float(*f),
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
