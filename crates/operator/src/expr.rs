//! Δ-controller's expression language: JSON/YAML values where a map with one `@`-key is an
//! operator, a string starting with `$` a JSONPath into the subject (`$$` into the list item
//! of `@map`, `@filter`, `@any`, `@all`, `@none`), `"@now"` the time, and every other value
//! itself.
//!
//! Expressions are compiled once, when a spec is read: an unknown operator, a bad JSONPath or
//! a wrong number of arguments fails there, naming where in the spec it is. Evaluation borrows
//! from the subject wherever it can (`$.a.b` costs no copy until a value is kept).
//!
//! Where upstream's evaluator has an accident, berth does the documented thing and says so:
//! `null` is null (upstream reads it as `false`), `""` is the empty string (upstream refuses
//! it), a literal list is unpacked only when it holds one list (upstream unpacks whenever its
//! first item is a list, dropping the rest), `@none` is true when no item matches (upstream's
//! is always false), a string is not evaluated a second time as a JSONPath, and `@bool`
//! accepts `"true"`/`"false"`.

use std::borrow::Cow;
use std::cell::Cell;

use rand::Rng as _;
use serde_json::{Map, Value};

use crate::jsonpath::JsonPath;
use crate::limits::{EVAL_BUDGET, MAX_EXPR_DEPTH};
use crate::value::{self, as_float, as_int, as_string, float, int, show, type_name};

/// Where a spec is wrong, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{at}: {reason}")]
pub struct CompileError {
    pub at: String,
    pub reason: String,
}

/// An evaluation that failed: where the expression is in the spec, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{at}: {reason}")]
pub struct EvalError {
    pub at: String,
    pub reason: String,
}

/// The operators. Their names are the keys specs write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
pub enum Op {
    #[strum(serialize = "@and")]
    And,
    #[strum(serialize = "@or")]
    Or,
    #[strum(serialize = "@not")]
    Not,
    #[strum(serialize = "@cond")]
    Cond,
    #[strum(serialize = "@switch")]
    Switch,
    #[strum(serialize = "@definedOr")]
    DefinedOr,
    #[strum(serialize = "@noop")]
    Noop,
    #[strum(serialize = "@eq")]
    Eq,
    #[strum(serialize = "@gt")]
    Gt,
    #[strum(serialize = "@gte")]
    Gte,
    #[strum(serialize = "@lt")]
    Lt,
    #[strum(serialize = "@lte")]
    Lte,
    #[strum(serialize = "@map")]
    Map,
    #[strum(serialize = "@filter")]
    Filter,
    #[strum(serialize = "@any")]
    Any,
    #[strum(serialize = "@all")]
    All,
    #[strum(serialize = "@none")]
    None,
    #[strum(serialize = "@len")]
    Len,
    #[strum(serialize = "@min")]
    Min,
    #[strum(serialize = "@max")]
    Max,
    #[strum(serialize = "@sum")]
    Sum,
    #[strum(serialize = "@in")]
    In,
    #[strum(serialize = "@range")]
    Range,
    #[strum(serialize = "@concat")]
    Concat,
    #[strum(serialize = "@string")]
    String,
    #[strum(serialize = "@int")]
    Int,
    #[strum(serialize = "@float")]
    Float,
    #[strum(serialize = "@bool")]
    Bool,
    #[strum(serialize = "@hash")]
    Hash,
    #[strum(serialize = "@exists", serialize = "@has")]
    Exists,
    #[strum(serialize = "@isnil")]
    IsNil,
    #[strum(serialize = "@rnd")]
    Rnd,
    #[strum(serialize = "@selector")]
    Selector,
    #[strum(serialize = "@abs")]
    Abs,
    #[strum(serialize = "@ceil")]
    Ceil,
    #[strum(serialize = "@floor")]
    Floor,
    #[strum(serialize = "@add")]
    Add,
    #[strum(serialize = "@sub")]
    Sub,
    #[strum(serialize = "@mul")]
    Mul,
    #[strum(serialize = "@div")]
    Div,
    #[strum(serialize = "@list")]
    List,
    #[strum(serialize = "@dict")]
    Dict,
}

impl Op {
    fn name(self) -> &'static str {
        self.into()
    }

    /// How many arguments the operator takes when they are written as a list.
    fn arity(self) -> Option<&'static [usize]> {
        use Op::*;
        match self {
            Cond => Some(&[2, 3]),
            DefinedOr | Eq | Gt | Gte | Lt | Lte | Map | Filter | Any | All | None | In | Range
            | Rnd | Selector | Add | Sub | Mul | Div => Some(&[2]),
            _ => Option::None,
        }
    }
}

/// A key of a literal map.
#[derive(Debug, Clone, PartialEq)]
pub enum Key {
    /// `"$."`: the value (a map) is merged over the result's top level.
    Root,
    /// `"$.a.b"`: the value is set at that path.
    Path(JsonPath),
    Plain(String),
}

/// A compiled expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Lit(Value),
    Path {
        local: bool,
        path: JsonPath,
    },
    Now,
    List(Vec<Expr>),
    Dict {
        at: Box<str>,
        items: Vec<(Key, Expr)>,
    },
    Op {
        at: Box<str>,
        op: Op,
        arg: Box<Expr>,
    },
}

/// What an expression is evaluated against.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    Doc(&'a Value),
    /// A joined row: one document per source kind (`$.Kind...`).
    Row(&'a [(&'a str, &'a Value)]),
}

impl<'a> Subject<'a> {
    fn get(&self, path: &JsonPath) -> Option<Cow<'a, Value>> {
        match *self {
            Subject::Doc(doc) => path.get(doc).map(Cow::Borrowed),
            Subject::Row(row) => {
                if let Some(kind) = path.first_child() {
                    let (_, doc) = row.iter().find(|(k, _)| *k == kind)?;
                    return path.get_below_first(doc).map(Cow::Borrowed);
                }
                let whole = self.to_value();
                path.get(&whole).cloned().map(Cow::Owned)
            }
        }
    }

    /// The subject as one document.
    pub fn to_value(&self) -> Value {
        match *self {
            Subject::Doc(doc) => doc.clone(),
            Subject::Row(row) => Value::Object(
                row.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).clone()))
                    .collect(),
            ),
        }
    }
}

/// What one evaluation shares: the time `@now` gives, and a budget of work (list items, string
/// bytes and joined rows made) past which it fails instead of exhausting memory.
#[derive(Debug)]
pub struct Env {
    now: chrono::DateTime<chrono::Utc>,
    spent: Cell<u64>,
    budget: u64,
}

impl Env {
    pub fn new(now: chrono::DateTime<chrono::Utc>) -> Env {
        Env {
            now,
            spent: Cell::new(0),
            budget: EVAL_BUDGET,
        }
    }

    /// Counts `units` of work; past the budget the evaluation fails.
    pub fn charge(&self, units: u64) -> Result<(), String> {
        let spent = self.spent.get().saturating_add(units);
        self.spent.set(spent);
        if spent > self.budget {
            return Err(format!(
                "the evaluation made more than {} list items, string bytes and joined rows",
                self.budget
            ));
        }
        Ok(())
    }
}

/// A subject, the list item under `$$` (if any) and the shared environment.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub subject: Subject<'a>,
    pub local: Option<&'a Value>,
    pub env: &'a Env,
}

fn join_at(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

fn compile_path(text: &str, at: &str) -> Result<Expr, CompileError> {
    let (local, rooted) = match text.strip_prefix("$$") {
        Some(rest) => (true, format!("${rest}")),
        None => (false, text.to_owned()),
    };
    let path = JsonPath::parse(&rooted).map_err(|e| CompileError {
        at: at.to_owned(),
        reason: format!("JSONPath {text:?}: {}", e.reason),
    })?;
    Ok(Expr::Path { local, path })
}

impl Expr {
    /// Compiles a value; `at` names where it is in the spec, for errors.
    pub fn compile(v: &Value, at: &str) -> Result<Expr, CompileError> {
        Expr::compile_at(v, at, 0)
    }

    fn compile_at(v: &Value, at: &str, depth: usize) -> Result<Expr, CompileError> {
        if depth > MAX_EXPR_DEPTH {
            return Err(CompileError {
                at: at.to_owned(),
                reason: format!("nested deeper than {MAX_EXPR_DEPTH} levels"),
            });
        }
        match v {
            Value::String(s) if s == "@now" => Ok(Expr::Now),
            Value::String(s) if s.starts_with('$') => compile_path(s, at),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, item)| Expr::compile_at(item, &format!("{at}[{i}]"), depth + 1))
                .collect::<Result<_, _>>()
                .map(Expr::List),
            Value::Object(map) if map.len() == 1 && map.keys().all(|k| k.starts_with('@')) => {
                let (name, arg) = map.iter().next().expect("one key");
                let here = join_at(at, name);
                let op: Op = name.parse().map_err(|_| CompileError {
                    at: here.clone(),
                    reason: format!("unknown operator {name}"),
                })?;
                let arg = Expr::compile_at(arg, &here, depth + 1)?;
                check_arity(op, &arg, &here)?;
                Ok(Expr::Op {
                    at: here.into(),
                    op,
                    arg: Box::new(arg),
                })
            }
            Value::Object(map) => {
                let mut items = Vec::with_capacity(map.len());
                for (k, v) in map {
                    let here = join_at(at, k);
                    let key = if k == "$." {
                        Key::Root
                    } else if k.starts_with('$') {
                        let path = JsonPath::parse(k).map_err(|e| CompileError {
                            at: here.clone(),
                            reason: format!("JSONPath key {k:?}: {}", e.reason),
                        })?;
                        Key::Path(path)
                    } else {
                        Key::Plain(k.clone())
                    };
                    items.push((key, Expr::compile_at(v, &here, depth + 1)?));
                }
                Ok(Expr::Dict {
                    at: at.into(),
                    items,
                })
            }
            other => Ok(Expr::Lit(other.clone())),
        }
    }

    /// The JSONPath this expression is, when it is one (`@unwind`'s and `@gather`'s paths).
    pub fn as_path(&self) -> Option<&JsonPath> {
        match self {
            Expr::Path { local: false, path } => Some(path),
            _ => Option::None,
        }
    }

    /// Evaluates to an owned value.
    pub fn eval(&self, s: &Scope<'_>) -> Result<Value, EvalError> {
        self.eval_cow(s).map(Cow::into_owned)
    }

    /// Evaluates, borrowing from the subject or the spec where the result is a part of them.
    pub fn eval_cow<'a>(&'a self, s: &Scope<'a>) -> Result<Cow<'a, Value>, EvalError> {
        match self {
            Expr::Lit(v) => Ok(Cow::Borrowed(v)),
            Expr::Now => Ok(Cow::Owned(Value::String(
                s.env.now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            ))),
            Expr::Path { local: true, path } => {
                let item = s.local.ok_or_else(|| EvalError {
                    at: path.to_string(),
                    reason: "`$$` is the item of @map, @filter, @any, @all or @none, and \
                             there is none here"
                        .into(),
                })?;
                Ok(path
                    .get(item)
                    .map_or(Cow::Owned(Value::Null), Cow::Borrowed))
            }
            Expr::Path { local: false, path } => {
                Ok(s.subject.get(path).unwrap_or(Cow::Owned(Value::Null)))
            }
            Expr::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    out.push(item.eval(s)?);
                }
                // A list holding one list stands for that list (`"@len": ["$.spec.items"]`).
                if out.len() == 1 && out[0].is_array() {
                    return Ok(Cow::Owned(out.remove(0)));
                }
                Ok(Cow::Owned(Value::Array(out)))
            }
            Expr::Dict { at, items } => {
                let mut out = Value::Object(Map::new());
                for (key, e) in items {
                    let v = e.eval(s)?;
                    s.env.charge(weight(&v)).map_err(|reason| EvalError {
                        at: at.to_string(),
                        reason,
                    })?;
                    set_key(&mut out, key, v).map_err(|reason| EvalError {
                        at: at.to_string(),
                        reason,
                    })?;
                }
                Ok(Cow::Owned(out))
            }
            Expr::Op { at, op, arg } => eval_op(*op, arg, s).map_err(|reason| match reason {
                Failure::Here(reason) => EvalError {
                    at: at.to_string(),
                    reason,
                },
                Failure::Inner(e) => e,
            }),
        }
    }
}

fn set_key(out: &mut Value, key: &Key, v: Value) -> Result<(), String> {
    match key {
        Key::Plain(k) => {
            if let Value::Object(map) = out {
                map.insert(k.clone(), v);
            }
            Ok(())
        }
        Key::Path(path) => path.set(out, v).map_err(|e| e.to_string()),
        Key::Root => match (out, v) {
            (Value::Object(map), Value::Object(v)) => {
                for (k, v) in v {
                    map.insert(k, v);
                }
                Ok(())
            }
            (_, other) => Err(format!(
                "\"$.\" sets the whole result, which is a map, to a {}",
                type_name(&other)
            )),
        },
    }
}

fn check_arity(op: Op, arg: &Expr, at: &str) -> Result<(), CompileError> {
    let fail = |reason: String| {
        Err(CompileError {
            at: at.to_owned(),
            reason,
        })
    };
    if let (Some(counts), Expr::List(items)) = (op.arity(), arg)
        && !counts.contains(&items.len())
    {
        let want = counts
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(" or ");
        return fail(format!(
            "{} takes {want} arguments, not {}",
            op.name(),
            items.len()
        ));
    }
    if matches!(op, Op::Switch) {
        for (i, pair) in items(arg).iter().enumerate() {
            if !matches!(pair, Expr::List(p) if p.len() == 2) {
                return fail(format!("@switch case {i} is not a [case, action] pair"));
            }
        }
    }
    if matches!(op, Op::And | Op::Or) && matches!(arg, Expr::Lit(_) | Expr::Dict { .. }) {
        return fail(format!("{} takes a list of conditions", op.name()));
    }
    Ok(())
}

/// Why an operator failed: here (with this operator's place), or inside an argument (which
/// names its own place).
enum Failure {
    Here(String),
    Inner(EvalError),
}

impl From<EvalError> for Failure {
    fn from(e: EvalError) -> Failure {
        Failure::Inner(e)
    }
}

impl From<String> for Failure {
    fn from(reason: String) -> Failure {
        Failure::Here(reason)
    }
}

type OpResult<'a> = Result<Cow<'a, Value>, Failure>;

/// The argument expressions of a lazily evaluated operator: a literal list's items, else the
/// one argument.
fn items(arg: &Expr) -> &[Expr] {
    match arg {
        Expr::List(items) => items,
        other => std::slice::from_ref(other),
    }
}

fn as_bool(v: &Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s == "true" => Ok(true),
        Value::String(s) if s == "false" => Ok(false),
        Value::Null => Err("expected a boolean, got null".into()),
        other => Err(format!("expected a boolean, got {}", show(other))),
    }
}

fn as_list<'v>(v: &'v Value, what: &str) -> Result<&'v Vec<Value>, String> {
    match v {
        Value::Array(list) => Ok(list),
        other => Err(format!("{what} is not a list: {}", show(other))),
    }
}

fn owned<'a>(v: Value) -> OpResult<'a> {
    Ok(Cow::Owned(v))
}

/// Evaluates two arguments: the items of a two-item literal list one by one (borrowing), or
/// the argument, which must give a two-item list.
fn pair<'a>(arg: &'a Expr, s: &Scope<'a>) -> Result<(Cow<'a, Value>, Cow<'a, Value>), Failure> {
    if let Expr::List(items) = arg
        && items.len() == 2
    {
        return Ok((items[0].eval_cow(s)?, items[1].eval_cow(s)?));
    }
    match arg.eval(s)? {
        Value::Array(mut list) if list.len() == 2 => {
            let b = list.pop().unwrap_or(Value::Null);
            let a = list.pop().unwrap_or(Value::Null);
            Ok((Cow::Owned(a), Cow::Owned(b)))
        }
        other => Err(Failure::Here(format!(
            "expected two arguments, got {}",
            show(&other)
        ))),
    }
}

enum Numbers {
    Ints(Vec<i64>),
    Floats(Vec<f64>),
}

fn numbers(list: &[&Value]) -> Result<Numbers, String> {
    if let Some(ints) = list.iter().map(|v| as_int(v)).collect::<Option<Vec<_>>>() {
        return Ok(Numbers::Ints(ints));
    }
    if let Some(floats) = list.iter().map(|v| as_float(v)).collect::<Option<Vec<_>>>() {
        return Ok(Numbers::Floats(floats));
    }
    let bad = list
        .iter()
        .find(|v| as_float(v).is_none())
        .map_or_else(String::new, |v| show(v));
    Err(format!("expected numbers, got {bad}"))
}

/// What keeping a value costs, for the budget: its nodes and string bytes.
pub fn weight(v: &Value) -> u64 {
    match v {
        Value::String(s) => 1 + s.len() as u64,
        Value::Array(list) => 1 + list.iter().map(weight).sum::<u64>(),
        Value::Object(map) => {
            1 + map
                .iter()
                .map(|(k, v)| k.len() as u64 + weight(v))
                .sum::<u64>()
        }
        _ => 1,
    }
}

fn each_item<'a>(
    op: Op,
    arg: &'a Expr,
    s: &Scope<'a>,
    mut f: impl FnMut(&Value, Value) -> Result<bool, String>,
) -> Result<(), Failure> {
    let args = items(arg);
    let [body, list] = args else {
        return Err(Failure::Here(format!("{} takes 2 arguments", op.name())));
    };
    let list = list.eval_cow(s)?;
    let list = as_list(&list, "the second argument")?;
    s.env.charge(list.len() as u64)?;
    for item in list {
        let inner = Scope {
            subject: s.subject,
            local: Some(item),
            env: s.env,
        };
        let r = body.eval(&inner)?;
        s.env.charge(weight(&r))?;
        if !f(item, r)? {
            break;
        }
    }
    Ok(())
}

fn eval_op<'a>(op: Op, arg: &'a Expr, s: &Scope<'a>) -> OpResult<'a> {
    match op {
        Op::Noop => owned(Value::Null),
        Op::And | Op::Or => {
            let want = matches!(op, Op::Or);
            for a in items(arg) {
                if as_bool(a.eval_cow(s)?.as_ref())? == want {
                    return owned(Value::Bool(want));
                }
            }
            owned(Value::Bool(!want))
        }
        Op::Not => owned(Value::Bool(!as_bool(arg.eval_cow(s)?.as_ref())?)),
        Op::Cond => {
            let args = items(arg);
            if !(2..=3).contains(&args.len()) {
                return Err(Failure::Here("@cond takes 2 or 3 arguments".into()));
            }
            if as_bool(args[0].eval_cow(s)?.as_ref())? {
                Ok(args[1].eval_cow(s)?)
            } else if let Some(otherwise) = args.get(2) {
                Ok(otherwise.eval_cow(s)?)
            } else {
                owned(Value::Null)
            }
        }
        Op::Switch => {
            for (i, case) in items(arg).iter().enumerate() {
                let [when, then] = items(case) else {
                    return Err(Failure::Here(format!(
                        "case {i} is not a [case, action] pair"
                    )));
                };
                let hit =
                    as_bool(when.eval_cow(s)?.as_ref()).map_err(|e| format!("case {i}: {e}"))?;
                if hit {
                    return Ok(then.eval_cow(s)?);
                }
            }
            owned(Value::Null)
        }
        Op::DefinedOr => {
            let [first, otherwise] = items(arg) else {
                return Err(Failure::Here("@definedOr takes 2 arguments".into()));
            };
            let v = first.eval_cow(s)?;
            if v.is_null() {
                Ok(otherwise.eval_cow(s)?)
            } else {
                Ok(v)
            }
        }
        Op::Map => {
            let mut out = Vec::new();
            each_item(op, arg, s, |_, r| {
                out.push(r);
                Ok(true)
            })?;
            owned(Value::Array(out))
        }
        Op::Filter => {
            let mut out = Vec::new();
            each_item(op, arg, s, |item, r| {
                if as_bool(&r)? {
                    out.push(item.clone());
                }
                Ok(true)
            })?;
            owned(Value::Array(out))
        }
        Op::Any | Op::All | Op::None => {
            // @any stops at the first match, @all at the first miss, @none at the first match.
            let stop_on = !matches!(op, Op::All);
            let mut stopped = false;
            each_item(op, arg, s, |_, r| {
                if as_bool(&r)? == stop_on {
                    stopped = true;
                    return Ok(false);
                }
                Ok(true)
            })?;
            let v = match op {
                Op::Any => stopped,
                Op::All => !stopped,
                _ => !stopped,
            };
            owned(Value::Bool(v))
        }
        Op::Eq => {
            let (a, b) = pair(arg, s)?;
            owned(Value::Bool(!a.is_null() && !b.is_null() && a == b))
        }
        Op::Gt | Op::Gte | Op::Lt | Op::Lte => {
            let (a, b) = pair(arg, s)?;
            let ordering = match numbers(&[&a, &b])? {
                Numbers::Ints(v) => v[0].partial_cmp(&v[1]),
                Numbers::Floats(v) => v[0].partial_cmp(&v[1]),
            };
            let Some(o) = ordering else {
                return owned(Value::Bool(false));
            };
            let v = match op {
                Op::Gt => o.is_gt(),
                Op::Gte => o.is_ge(),
                Op::Lt => o.is_lt(),
                _ => o.is_le(),
            };
            owned(Value::Bool(v))
        }
        Op::Len => {
            let v = arg.eval_cow(s)?;
            let n = match &*v {
                Value::Array(list) => list.len(),
                Value::Object(map) => map.len(),
                Value::String(text) => text.chars().count(),
                other => {
                    return Err(Failure::Here(format!(
                        "cannot count a {}",
                        type_name(other)
                    )));
                }
            };
            owned(int(i64::try_from(n).unwrap_or(i64::MAX)))
        }
        Op::Min | Op::Max | Op::Sum => {
            let v = arg.eval_cow(s)?;
            let list: Vec<&Value> = as_list(&v, "the argument")?.iter().collect();
            let out = match (numbers(&list)?, op) {
                (Numbers::Ints(v), Op::Sum) => v
                    .iter()
                    .try_fold(0i64, |acc, x| acc.checked_add(*x))
                    .map(int)
                    .ok_or_else(|| "the sum overflows a 64-bit integer".to_owned())?,
                (Numbers::Floats(v), Op::Sum) => float(v.iter().sum()),
                (Numbers::Ints(v), Op::Min) => v.iter().min().map_or(Value::Null, |x| int(*x)),
                (Numbers::Ints(v), _) => v.iter().max().map_or(Value::Null, |x| int(*x)),
                (Numbers::Floats(v), Op::Min) => v
                    .iter()
                    .copied()
                    .reduce(f64::min)
                    .map_or(Value::Null, float),
                (Numbers::Floats(v), _) => v
                    .iter()
                    .copied()
                    .reduce(f64::max)
                    .map_or(Value::Null, float),
            };
            owned(out)
        }
        Op::In => {
            let (elem, list) = pair(arg, s)?;
            let list = as_list(&list, "the second argument")?;
            owned(Value::Bool(list.contains(&elem)))
        }
        Op::Range => {
            let (a, b) = pair(arg, s)?;
            let (Some(start), Some(end)) = (as_int(&a), as_int(&b)) else {
                return Err(Failure::Here(format!(
                    "expected two integers, got {} and {}",
                    show(&a),
                    show(&b)
                )));
            };
            let n = end.saturating_sub(start).max(0);
            s.env.charge(n.unsigned_abs())?;
            owned(Value::Array((start..end.max(start)).map(int).collect()))
        }
        Op::Concat => {
            let v = arg.eval_cow(s)?;
            let mut out = String::new();
            for (i, item) in as_list(&v, "the argument")?.iter().enumerate() {
                let text = as_string(item).ok_or_else(|| {
                    format!("argument {i} is not a string or a number: {}", show(item))
                })?;
                out.push_str(&text);
            }
            s.env.charge(out.len() as u64)?;
            owned(Value::String(out))
        }
        Op::String => {
            let v = arg.eval_cow(s)?;
            let text =
                as_string(&v).ok_or_else(|| format!("cannot make a string of {}", show(&v)))?;
            owned(Value::String(text))
        }
        Op::Int => {
            let v = arg.eval_cow(s)?;
            let i = as_int(&v).ok_or_else(|| format!("not an integer: {}", show(&v)))?;
            owned(int(i))
        }
        Op::Float => {
            let v = arg.eval_cow(s)?;
            let f = as_float(&v).ok_or_else(|| format!("not a number: {}", show(&v)))?;
            owned(float(f))
        }
        Op::Bool => owned(Value::Bool(as_bool(arg.eval_cow(s)?.as_ref())?)),
        Op::Hash => owned(Value::String(value::hash6(arg.eval_cow(s)?.as_ref()))),
        Op::Exists => owned(Value::Bool(!arg.eval_cow(s)?.is_null())),
        Op::IsNil => owned(Value::Bool(arg.eval_cow(s)?.is_null())),
        Op::Rnd => {
            let (a, b) = pair(arg, s)?;
            let (Some(min), Some(max)) = (as_int(&a), as_int(&b)) else {
                return Err(Failure::Here("expected [min, max] integers".into()));
            };
            if max <= min {
                return Err(Failure::Here(format!("an empty range [{min}, {max})")));
            }
            owned(int(rand::rng().random_range(min..max)))
        }
        Op::Selector => {
            let (selector, labels) = pair(arg, s)?;
            if selector.is_null() || labels.is_null() {
                return owned(Value::Bool(false));
            }
            let selector =
                berth_hooks::config::LabelSelector::parse(selector.into_owned(), "selector")
                    .map_err(|e| format!("not a label selector: {e}"))?;
            let Value::Object(labels) = &*labels else {
                return Err(Failure::Here(format!(
                    "labels are not a map: {}",
                    show(&labels)
                )));
            };
            owned(Value::Bool(selector.matches(labels)))
        }
        Op::Abs | Op::Ceil | Op::Floor => {
            let v = arg.eval_cow(s)?;
            let f = as_float(&v).ok_or_else(|| format!("not a number: {}", show(&v)))?;
            let r = match op {
                Op::Abs => f.abs(),
                Op::Ceil => f.ceil(),
                _ => f.floor(),
            };
            owned(float(r))
        }
        Op::Add | Op::Sub | Op::Mul => {
            let (a, b) = pair(arg, s)?;
            let out = match numbers(&[&a, &b])? {
                Numbers::Ints(v) => {
                    let r = match op {
                        Op::Add => v[0].checked_add(v[1]),
                        Op::Sub => v[0].checked_sub(v[1]),
                        _ => v[0].checked_mul(v[1]),
                    };
                    int(r.ok_or_else(|| format!("{} overflows a 64-bit integer", op.name()))?)
                }
                Numbers::Floats(v) => float(match op {
                    Op::Add => v[0] + v[1],
                    Op::Sub => v[0] - v[1],
                    _ => v[0] * v[1],
                }),
            };
            owned(out)
        }
        Op::Div => {
            let (a, b) = pair(arg, s)?;
            let (Some(x), Some(y)) = (as_float(&a), as_float(&b)) else {
                return Err(Failure::Here(format!(
                    "expected two numbers, got {} and {}",
                    show(&a),
                    show(&b)
                )));
            };
            if y == 0.0 {
                return Err(Failure::Here("division by zero".into()));
            }
            owned(float(x / y))
        }
        Op::List => {
            let v = arg.eval_cow(s)?;
            as_list(&v, "the argument")?;
            Ok(v)
        }
        Op::Dict => {
            let v = arg.eval_cow(s)?;
            if !v.is_object() {
                return Err(Failure::Here(format!("not a map: {}", show(&v))));
            }
            Ok(v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(expr: Value, subject: Value) -> Result<Value, EvalError> {
        let e = Expr::compile(&expr, "test").expect("compiles");
        let env = Env::new(chrono::Utc::now());
        let s = Scope {
            subject: Subject::Doc(&subject),
            local: None,
            env: &env,
        };
        e.eval(&s)
    }

    #[test]
    fn literals_paths_and_maps() {
        let pod =
            json!({"metadata": {"name": "p", "labels": {"env": "prod"}}, "spec": {"replicas": 3}});
        assert_eq!(run(json!("hello"), pod.clone()), Ok(json!("hello")));
        assert_eq!(run(json!(null), pod.clone()), Ok(json!(null)));
        assert_eq!(run(json!("$.spec.replicas"), pod.clone()), Ok(json!(3)));
        assert_eq!(run(json!("$.spec.missing"), pod.clone()), Ok(json!(null)));
        assert_eq!(
            run(json!({"n": "$.metadata.name", "$.a.b": 1}), pod.clone()),
            Ok(json!({"n": "p", "a": {"b": 1}}))
        );
        assert_eq!(
            run(json!({"$.": "$.spec"}), pod),
            Ok(json!({"replicas": 3}))
        );
    }

    #[test]
    fn logic_and_conditionals() {
        let obj = json!({"metadata": {"labels": {"env": "staging"}}, "spec": {"replicas": 3}});
        let sw = json!({"@switch": [
            [{"@eq": ["$.metadata.labels.env", "prod"]}, "high"],
            [{"@eq": ["$.metadata.labels.env", "staging"]}, "medium"],
            [true, "low"]]});
        assert_eq!(run(sw, obj.clone()), Ok(json!("medium")));
        let none = json!({"@switch": [[{"@eq": ["$.x", 1]}, "a"]]});
        assert_eq!(run(none, obj.clone()), Ok(json!(null)));
        assert_eq!(
            run(
                json!({"@cond": [{"@gt": ["$.spec.replicas", 1]}, "many", "one"]}),
                obj.clone()
            ),
            Ok(json!("many"))
        );
        assert_eq!(
            run(
                json!({"@and": [{"@gt": ["$.spec.replicas", 1]}, {"@not": false}]}),
                obj.clone()
            ),
            Ok(json!(true))
        );
        // @and stops at the first false: the second argument, not a boolean, is never read.
        assert_eq!(
            run(json!({"@and": [false, "x"]}), obj.clone()),
            Ok(json!(false))
        );
        assert_eq!(
            run(json!({"@or": [true, "x"]}), obj.clone()),
            Ok(json!(true))
        );
        assert_eq!(
            run(
                json!({"@definedOr": ["$.metadata.annotations.port", 8080]}),
                obj
            ),
            Ok(json!(8080))
        );
        assert_eq!(
            run(json!({"@eq": [null, null]}), json!({})),
            Ok(json!(false))
        );
    }

    #[test]
    fn list_operators() {
        let svc = json!({"metadata": {"annotations": {"primary-port": "https-main"}},
            "spec": {"ports": [{"name": "http", "port": 80}, {"name": "https-main", "port": 443}],
                     "scores": [50, 95, 80, 20], "nums": [80, 443, 8080]}});
        assert_eq!(
            run(
                json!({"@filter": [{"@eq": ["$$.name", "$.metadata.annotations.primary-port"]}, "$.spec.ports"]}),
                svc.clone()
            ),
            Ok(json!([{"name": "https-main", "port": 443}]))
        );
        assert_eq!(
            run(
                json!({"@filter": [{"@gte": ["$$", 80]}, "$.spec.scores"]}),
                svc.clone()
            ),
            Ok(json!([95, 80]))
        );
        assert_eq!(
            run(
                json!({"@map": [{"containerPort": "$$"}, "$.spec.nums"]}),
                svc.clone()
            ),
            Ok(json!([{"containerPort": 80}, {"containerPort": 443}, {"containerPort": 8080}]))
        );
        assert_eq!(
            run(json!({"@len": "$.spec.ports"}), svc.clone()),
            Ok(json!(2))
        );
        assert_eq!(
            run(json!({"@len": ["$.spec.ports"]}), svc.clone()),
            Ok(json!(2))
        );
        assert_eq!(run(json!({"@min": [3, 1, 2]}), svc.clone()), Ok(json!(1)));
        assert_eq!(run(json!({"@max": [1.5, 2]}), svc.clone()), Ok(json!(2.0)));
        assert_eq!(
            run(json!({"@sum": "$.spec.scores"}), svc.clone()),
            Ok(json!(245))
        );
        assert_eq!(
            run(json!({"@range": [0, 3]}), svc.clone()),
            Ok(json!([0, 1, 2]))
        );
        assert_eq!(run(json!({"@range": [3, 0]}), svc.clone()), Ok(json!([])));
        assert_eq!(
            run(
                json!({"@in": ["http", {"@map": ["$$.name", "$.spec.ports"]}]}),
                svc.clone()
            ),
            Ok(json!(true))
        );
        assert_eq!(
            run(
                json!({"@any": [{"@eq": ["$$", 20]}, "$.spec.scores"]}),
                svc.clone()
            ),
            Ok(json!(true))
        );
        assert_eq!(
            run(
                json!({"@all": [{"@gt": ["$$", 10]}, "$.spec.scores"]}),
                svc.clone()
            ),
            Ok(json!(true))
        );
        assert_eq!(
            run(
                json!({"@none": [{"@gt": ["$$", 100]}, "$.spec.scores"]}),
                svc
            ),
            Ok(json!(true))
        );
    }

    #[test]
    fn strings_conversions_and_arithmetic() {
        let obj = json!({"metadata": {"name": "my-pod", "labels": {"env": "prod"}}, "spec": {"replicas": 3}});
        assert_eq!(
            run(
                json!({"@concat": ["$.metadata.name", "-", "$.metadata.labels.env"]}),
                obj.clone()
            ),
            Ok(json!("my-pod-prod"))
        );
        assert_eq!(
            run(json!({"@string": "$.spec.replicas"}), obj.clone()),
            Ok(json!("3"))
        );
        assert_eq!(run(json!({"@int": "42"}), obj.clone()), Ok(json!(42)));
        assert_eq!(run(json!({"@float": 2}), obj.clone()), Ok(json!(2.0)));
        assert_eq!(run(json!({"@add": [1, 2]}), obj.clone()), Ok(json!(3)));
        assert_eq!(run(json!({"@mul": [1.5, 2]}), obj.clone()), Ok(json!(3.0)));
        assert_eq!(run(json!({"@div": [3, 2]}), obj.clone()), Ok(json!(1.5)));
        assert_eq!(
            run(json!({"@exists": "$.spec.replicas"}), obj.clone()),
            Ok(json!(true))
        );
        assert_eq!(
            run(json!({"@isnil": "$.spec.x"}), obj.clone()),
            Ok(json!(true))
        );
        let r = run(json!({"@rnd": [0, 256]}), obj.clone()).expect("evaluates");
        assert!((0..256).contains(&r.as_i64().expect("int")));
        let now = run(json!("@now"), obj.clone()).expect("evaluates");
        assert!(chrono::DateTime::parse_from_rfc3339(now.as_str().expect("string")).is_ok());
        assert_eq!(
            run(
                json!({"@selector": [{"matchLabels": {"env": "prod"}}, "$.metadata.labels"]}),
                obj
            ),
            Ok(json!(true))
        );
    }

    #[test]
    fn errors_name_the_place() {
        let e = Expr::compile(&json!({"a": {"@frobnicate": 1}}), "pipeline[0].@project")
            .expect_err("unknown");
        assert_eq!(e.at, "pipeline[0].@project.a.@frobnicate");
        assert!(e.reason.contains("unknown operator @frobnicate"));
        let e = Expr::compile(&json!({"@eq": [1]}), "p").expect_err("arity");
        assert!(e.reason.contains("@eq takes 2 arguments, not 1"), "{e}");
        let e = Expr::compile(&json!({"x": "$.a["}), "p").expect_err("path");
        assert_eq!(e.at, "p.x");
        let e = run(json!({"v": {"@concat": ["a", "$.missing"]}}), json!({})).expect_err("nil");
        assert_eq!(e.at, "test.v.@concat");
        assert!(e.reason.contains("argument 1"), "{e}");
        let e = run(json!({"@and": [{"@eq": [1, 1]}, 3]}), json!({})).expect_err("not bool");
        assert!(e.reason.contains("expected a boolean"), "{e}");
    }

    #[test]
    fn deep_nesting_is_refused_when_compiled() {
        let mut v = json!(true);
        for _ in 0..1000 {
            v = json!({"@not": v});
        }
        let e = Expr::compile(&v, "p").expect_err("too deep");
        assert!(e.reason.contains("nested deeper than 128"), "{e}");
        let e = JsonPath::parse(&format!(
            "$.a[?({}@.x{})]",
            "(".repeat(100),
            ")".repeat(100)
        ))
        .expect_err("too deep");
        assert!(e.reason.contains("nested deeper"), "{e}");
    }

    #[test]
    fn copying_the_subject_per_item_counts_against_the_budget() {
        let big: Vec<Value> = (0..2000).map(|i| json!(format!("{i:0>500}"))).collect();
        let e = run(json!({"@map": ["$", "$.items"]}), json!({"items": big})).expect_err("bounded");
        assert!(e.reason.contains("more than"), "{e}");
    }

    #[test]
    fn copying_the_subject_per_key_counts_against_the_budget() {
        let big: Vec<Value> = (0..2000).map(|i| json!(format!("{i:0>500}"))).collect();
        let spec: serde_json::Map<String, Value> =
            (0..100).map(|i| (format!("k{i}"), json!("$"))).collect();
        let e = run(Value::Object(spec), json!({"items": big})).expect_err("bounded");
        assert!(e.reason.contains("more than"), "{e}");
    }

    #[test]
    fn a_range_bomb_stops_at_the_budget() {
        let e = run(
            json!({"@map": [{"@range": [0, 100000]}, {"@range": [0, 100000]}]}),
            json!({}),
        )
        .expect_err("bounded");
        assert!(e.reason.contains("more than"), "{e}");
    }
}
