//! Sprig's list and dict functions.
//!
//! `gotmpl` values are immutable (shared `Arc`s), while Sprig's `set`, `unset`, `merge` and
//! `deepCopy` work on maps by reference; `render::exec` runs those (and `dict`, `get`,
//! `hasKey`) on its own shared maps. The versions here return an updated copy, for callers of
//! the pack on plain `gotmpl` values.

use super::args::{Builtin, arg, exact, fail, register_all, str_arg, string};
use crate::render::value::{is_empty, strval, to_i64};
use gotmpl::{FuncMap, Result, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

type Dict = BTreeMap<Arc<str>, Value>;

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("list", |a| Ok(Value::List(a.iter().cloned().collect()))),
        ("tuple", |a| Ok(Value::List(a.iter().cloned().collect()))),
        ("dict", dict),
        ("get", get),
        ("set", set),
        ("unset", unset),
        ("hasKey", has_key),
        ("keys", keys),
        ("values", values),
        ("pluck", pluck),
        ("merge", |a| merge("merge", a, false)),
        ("mergeOverwrite", |a| merge("mergeOverwrite", a, true)),
        ("pick", |a| pick_omit("pick", a, true)),
        ("omit", |a| pick_omit("omit", a, false)),
        ("deepCopy", |a| arg("deepCopy", a, 0).map(deep_copy)),
        ("dig", dig),
        ("first", |a| {
            list_part("first", a, |l| l.first().cloned().unwrap_or(Value::Nil))
        }),
        ("last", |a| {
            list_part("last", a, |l| l.last().cloned().unwrap_or(Value::Nil))
        }),
        ("rest", |a| {
            list_part("rest", a, |l| {
                Value::List(l.iter().skip(1).cloned().collect())
            })
        }),
        ("initial", |a| {
            list_part("initial", a, |l| {
                Value::List(l.iter().take(l.len().saturating_sub(1)).cloned().collect())
            })
        }),
        ("reverse", |a| {
            list_part("reverse", a, |l| {
                Value::List(l.iter().rev().cloned().collect())
            })
        }),
        ("compact", |a| {
            list_part("compact", a, |l| {
                Value::List(l.iter().filter(|v| !is_empty(v)).cloned().collect())
            })
        }),
        ("uniq", |a| list_part("uniq", a, uniq)),
        ("sortAlpha", |a| list_part("sortAlpha", a, sort_alpha)),
        ("append", append),
        ("push", append),
        ("prepend", prepend),
        ("concat", concat),
        ("without", without),
        ("has", has),
        ("until", until),
        ("untilStep", until_step),
        ("seq", seq),
        ("chunk", chunk),
        ("slice", slice),
        ("shuffle", |a| {
            // Sprig shuffles characters of a string.
            use rand::seq::SliceRandom as _;
            let mut chars: Vec<char> = str_arg("shuffle", a, 0)?.chars().collect();
            chars.shuffle(&mut rand::rng());
            Ok(string(chars.into_iter().collect::<String>()))
        }),
    ];
    register_all(fm, funcs);
}

/// A dict argument. A nil one reads as an empty dict, as Go passes a nil variable to a map
/// parameter as a nil map (`mergeOverwrite $d $nil`, `hasKey $nil "k"`); functions that write
/// into their argument take [`dict_arg_strict`].
fn dict_arg<'a>(name: &str, args: &'a [Value], i: usize) -> Result<&'a Dict> {
    static EMPTY: Dict = BTreeMap::new();
    match arg(name, args, i)? {
        Value::Nil => Ok(&EMPTY),
        _ => dict_arg_strict(name, args, i),
    }
}

fn dict_arg_strict<'a>(name: &str, args: &'a [Value], i: usize) -> Result<&'a Dict> {
    match arg(name, args, i)? {
        Value::Map(m) => Ok(m),
        other => Err(fail(
            name,
            format!("expected a dict, got {}", other.type_name()),
        )),
    }
}

fn list_items(v: &Value) -> Vec<Value> {
    match v {
        Value::List(items) => items.to_vec(),
        Value::Nil => Vec::new(),
        other => vec![other.clone()],
    }
}

fn dict(args: &[Value]) -> Result<Value> {
    let mut m = Dict::new();
    for pair in args.chunks(2) {
        let key: Arc<str> = strval(&pair[0]).into();
        m.insert(key, pair.get(1).cloned().unwrap_or_else(|| string("")));
    }
    Ok(Value::Map(Arc::new(m)))
}

/// `get d k`: the value or the empty string.
fn get(args: &[Value]) -> Result<Value> {
    exact("get", args, 2)?;
    let m = dict_arg("get", args, 0)?;
    Ok(m.get(str_arg("get", args, 1)?.as_str())
        .cloned()
        .unwrap_or_else(|| string("")))
}

fn set(args: &[Value]) -> Result<Value> {
    exact("set", args, 3)?;
    let mut m = dict_arg_strict("set", args, 0)?.clone();
    m.insert(str_arg("set", args, 1)?.into(), args[2].clone());
    Ok(Value::Map(Arc::new(m)))
}

fn unset(args: &[Value]) -> Result<Value> {
    exact("unset", args, 2)?;
    let mut m = dict_arg_strict("unset", args, 0)?.clone();
    m.remove(str_arg("unset", args, 1)?.as_str());
    Ok(Value::Map(Arc::new(m)))
}

fn has_key(args: &[Value]) -> Result<Value> {
    exact("hasKey", args, 2)?;
    let m = dict_arg("hasKey", args, 0)?;
    Ok(Value::Bool(
        m.contains_key(str_arg("hasKey", args, 1)?.as_str()),
    ))
}

/// `keys` of one or more dicts. Go's map order is random, so charts sort the result; a sorted
/// answer is one of the valid orders.
fn keys(args: &[Value]) -> Result<Value> {
    let mut out = Vec::new();
    for i in 0..args.len() {
        out.extend(
            dict_arg("keys", args, i)?
                .keys()
                .map(|k| Value::String(k.clone())),
        );
    }
    Ok(Value::List(out.into()))
}

fn values(args: &[Value]) -> Result<Value> {
    exact("values", args, 1)?;
    Ok(Value::List(
        dict_arg("values", args, 0)?.values().cloned().collect(),
    ))
}

fn pluck(args: &[Value]) -> Result<Value> {
    let key = str_arg("pluck", args, 0)?;
    let mut out = Vec::new();
    for i in 1..args.len() {
        if let Some(v) = dict_arg("pluck", args, i)?.get(key.as_str()) {
            out.push(v.clone());
        }
    }
    Ok(Value::List(out.into()))
}

/// `merge dst src...`: deep merge where earlier dicts win (`mergeOverwrite`: later win).
fn merge(name: &str, args: &[Value], overwrite: bool) -> Result<Value> {
    let mut dst = dict_arg(name, args, 0)?.clone();
    for i in 1..args.len() {
        let src = dict_arg(name, args, i)?;
        deep_merge(&mut dst, src, overwrite);
    }
    Ok(Value::Map(Arc::new(dst)))
}

/// Merges `src` into `dst`. Nested dicts merge recursively; for other keys `dst` keeps its
/// value unless `overwrite` (mergo's `WithOverride`, which replaces with zero values and nil
/// too), and an empty `dst` value is always filled.
pub fn deep_merge(dst: &mut Dict, src: &Dict, overwrite: bool) {
    for (k, sv) in src {
        match dst.get_mut(k) {
            Some(Value::Map(dm)) if matches!(sv, Value::Map(_)) => {
                if let Value::Map(sm) = sv {
                    deep_merge(Arc::make_mut(dm), sm, overwrite);
                }
            }
            Some(dv) if overwrite || is_empty(dv) => {
                *dv = sv.clone();
            }
            Some(_) => {}
            None => {
                dst.insert(k.clone(), sv.clone());
            }
        }
    }
}

fn pick_omit(name: &str, args: &[Value], keep: bool) -> Result<Value> {
    let m = dict_arg(name, args, 0)?;
    let wanted: Vec<String> = args[1..].iter().map(strval).collect();
    let out: Dict = m
        .iter()
        .filter(|(k, _)| wanted.iter().any(|w| w.as_str() == k.as_ref()) == keep)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(Value::Map(Arc::new(out)))
}

/// `dig "a" "b" default dict`.
/// `dig k1 k2 ... default dict`: Sprig asserts the dict, each key and each map on the way to
/// be what it expects, and Go's failed assertion is the error.
fn dig(args: &[Value]) -> Result<Value> {
    if args.len() < 3 {
        return Err(fail("dig", "dig needs at least three arguments"));
    }
    let conversion = |v: &Value, want: &str| {
        let is = match v {
            Value::Nil => "nil",
            Value::List(_) => "[]interface {}",
            Value::Map(_) => "map[string]interface {}",
            other => other.type_name(),
        };
        fail(
            "dig",
            format!("interface conversion: interface {{}} is {is}, not {want}"),
        )
    };
    const MAP: &str = "map[string]interface {}";
    let mut cur = match &args[args.len() - 1] {
        m @ Value::Map(_) => m.clone(),
        other => return Err(conversion(other, MAP)),
    };
    let default = &args[args.len() - 2];
    let keys = &args[..args.len() - 2];
    let mut names = Vec::with_capacity(keys.len());
    for key in keys {
        match key {
            Value::String(k) => names.push(k.clone()),
            other => return Err(conversion(other, "string")),
        }
    }
    for (i, key) in names.iter().enumerate() {
        let Value::Map(m) = &cur else {
            return Err(conversion(&cur, MAP));
        };
        match m.get(key) {
            None => return Ok(default.clone()),
            Some(v) if i + 1 == names.len() => return Ok(v.clone()),
            Some(v) => cur = v.clone(),
        }
    }
    Ok(cur)
}

fn list_part(name: &str, args: &[Value], f: impl Fn(&[Value]) -> Value) -> Result<Value> {
    exact(name, args, 1)?;
    if name == "sortAlpha" {
        // Sprig sorts a list, and makes a one-element list of anything else (`<nil>` too).
        return Ok(match &args[0] {
            Value::List(items) => f(items),
            other => Value::List(vec![string(strval(other))].into()),
        });
    }
    let verb = match name {
        "compact" => "Cannot compact on type".to_string(),
        _ => format!("Cannot find {name} on type"),
    };
    Ok(f(&go_list(name, &verb, &args[0])?))
}

/// What Sprig's list functions do with their list: a nil one is a nil `reflect.Type` (a Go
/// panic), a value of another kind an error naming it.
fn go_list(name: &str, refusal: &str, v: &Value) -> Result<Vec<Value>> {
    match v {
        Value::List(items) => Ok(items.to_vec()),
        Value::Nil => Err(fail(
            name,
            "runtime error: invalid memory address or nil pointer dereference",
        )),
        other => Err(fail(name, format!("{refusal} {}", go_kind(other)))),
    }
}

/// Go's `reflect.Kind` name of a value.
fn go_kind(v: &Value) -> &'static str {
    match v {
        Value::Map(_) => "map",
        Value::Uint(_) => "uint64",
        Value::List(_) => "slice",
        Value::Function(_) => "func",
        other => other.type_name(),
    }
}

fn uniq(items: &[Value]) -> Value {
    let mut out: Vec<Value> = Vec::new();
    for v in items {
        if !out.iter().any(|o| o == v) {
            out.push(v.clone());
        }
    }
    Value::List(out.into())
}

fn sort_alpha(items: &[Value]) -> Value {
    let mut strs: Vec<String> = items.iter().map(strval).collect();
    strs.sort();
    Value::List(strs.into_iter().map(string).collect())
}

fn append(args: &[Value]) -> Result<Value> {
    exact("append", args, 2)?;
    let mut items = go_list("append", "Cannot push on type", &args[0])?;
    items.push(args[1].clone());
    Ok(Value::List(items.into()))
}

fn prepend(args: &[Value]) -> Result<Value> {
    exact("prepend", args, 2)?;
    let mut items = vec![args[1].clone()];
    items.extend(go_list("prepend", "Cannot prepend on type", &args[0])?);
    Ok(Value::List(items.into()))
}

fn concat(args: &[Value]) -> Result<Value> {
    let mut out = Vec::new();
    for a in args {
        out.extend(
            go_list("concat", "Cannot concat type", a).map_err(|e| match (a, e) {
                (Value::Nil, e) => e,
                (other, _) => fail(
                    "concat",
                    format!("Cannot concat type {} as list", go_kind(other)),
                ),
            })?,
        );
    }
    Ok(Value::List(out.into()))
}

fn without(args: &[Value]) -> Result<Value> {
    let items = go_list(
        "without",
        "Cannot find without on type",
        arg("without", args, 0)?,
    )?;
    let drop = &args[1..];
    Ok(Value::List(
        items.into_iter().filter(|v| !drop.contains(v)).collect(),
    ))
}

/// `chunk size list`: the list cut into lists of at most `size`.
fn chunk(args: &[Value]) -> Result<Value> {
    exact("chunk", args, 2)?;
    let size = usize::try_from(to_i64(&args[0])).unwrap_or(0).max(1);
    let items = go_list("chunk", "Cannot chunk type", &args[1])?;
    Ok(Value::List(
        items
            .chunks(size)
            .map(|c| Value::List(c.to_vec().into()))
            .collect(),
    ))
}

/// `has needle list`.
fn has(args: &[Value]) -> Result<Value> {
    exact("has", args, 2)?;
    // Sprig's one nil check: a nil haystack has nothing.
    if matches!(args[1], Value::Nil) {
        return Ok(Value::Bool(false));
    }
    let items = go_list("has", "Cannot find has on type", &args[1])?;
    Ok(Value::Bool(items.contains(&args[0])))
}

/// The longest list `until`/`untilStep`/`seq` may build, so a template can't exhaust memory.
const MAX_RANGE: i64 = 100_000;

fn until(args: &[Value]) -> Result<Value> {
    exact("until", args, 1)?;
    step_range(
        "until",
        0,
        to_i64(&args[0]),
        if to_i64(&args[0]) < 0 { -1 } else { 1 },
    )
}

fn until_step(args: &[Value]) -> Result<Value> {
    exact("untilStep", args, 3)?;
    step_range(
        "untilStep",
        to_i64(&args[0]),
        to_i64(&args[1]),
        to_i64(&args[2]),
    )
}

/// `seq` like the Unix tool: `seq end`, `seq start end`, `seq start step end`, inclusive.
fn seq(args: &[Value]) -> Result<Value> {
    let nums: Vec<i64> = args.iter().map(to_i64).collect();
    let (start, step, end) = match nums.as_slice() {
        [end] => (1, 1, *end),
        [start, end] => (*start, if start <= end { 1 } else { -1 }, *end),
        [start, step, end] => (*start, *step, *end),
        _ => return Err(fail("seq", "expects 1 to 3 arguments")),
    };
    let stop = if step > 0 { end + 1 } else { end - 1 };
    let list = step_range("seq", start, stop, step)?;
    let parts: Vec<String> = list_items(&list).iter().map(strval).collect();
    Ok(string(parts.join(" ")))
}

fn step_range(name: &str, start: i64, stop: i64, step: i64) -> Result<Value> {
    if step == 0 || (step > 0 && start >= stop) || (step < 0 && start <= stop) {
        return Ok(Value::List(Arc::from([])));
    }
    let count = (stop - start).abs() / step.abs();
    if count > MAX_RANGE {
        return Err(fail(
            name,
            format!("range of {count} items exceeds the limit of {MAX_RANGE}"),
        ));
    }
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        out.push(Value::Int(i));
        i += step;
    }
    Ok(Value::List(out.into()))
}

/// Sprig's `slice list [start [end]]`, which replaces Go's builtin and takes lists only.
fn slice(args: &[Value]) -> Result<Value> {
    let list = match arg("slice", args, 0)? {
        Value::List(items) => items,
        other => {
            return Err(fail(
                "slice",
                format!(
                    "list should be type of slice or array but {}",
                    kind_name(other)
                ),
            ));
        }
    };
    // Sprig hands back nil for an empty list, whatever the indexes.
    if list.is_empty() {
        return Ok(Value::Nil);
    }
    let bound = |i: usize, default: usize| -> Result<usize> {
        match args.get(i) {
            None => Ok(default),
            Some(v) => usize::try_from(to_i64(v))
                .ok()
                .filter(|n| *n <= list.len())
                .ok_or_else(|| fail("slice", "slice index out of range")),
        }
    };
    let start = bound(1, 0)?;
    let end = bound(2, list.len())?;
    if start > end {
        return Err(fail("slice", "slice bounds out of range"));
    }
    Ok(Value::List(list[start..end].to_vec().into()))
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Map(_) => "map",
        Value::Int(_) | Value::Uint(_) => "int64",
        Value::Float(_) => "float64",
        Value::Bool(_) => "bool",
        _ => "invalid",
    }
}

/// A copy that shares no map or list with `v`.
fn deep_copy(v: &Value) -> Value {
    match v {
        Value::Map(m) => Value::Map(std::sync::Arc::new(
            m.iter().map(|(k, v)| (k.clone(), deep_copy(v))).collect(),
        )),
        Value::List(l) => Value::List(l.iter().map(deep_copy).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, Value)]) -> Dict {
        pairs
            .iter()
            .map(|(k, v)| (Arc::from(*k), v.clone()))
            .collect()
    }

    #[test]
    fn merge_keeps_destination_values_and_fills_missing() {
        let mut dst = m(&[
            ("a", Value::Int(1)),
            ("n", Value::Map(Arc::new(m(&[("x", Value::Int(1))])))),
        ]);
        let src = m(&[
            ("a", Value::Int(2)),
            ("b", Value::Int(3)),
            (
                "n",
                Value::Map(Arc::new(m(&[("x", Value::Int(9)), ("y", Value::Int(2))]))),
            ),
        ]);
        deep_merge(&mut dst, &src, false);
        assert_eq!(
            Value::Map(Arc::new(dst)).to_string(),
            "map[a:1 b:3 n:map[x:1 y:2]]"
        );
    }

    #[test]
    fn until_step_counts() {
        let v = until_step(&[Value::Int(0), Value::Int(10), Value::Int(3)]).unwrap_or(Value::Nil);
        assert_eq!(v.to_string(), "[0 3 6 9]");
    }
}
