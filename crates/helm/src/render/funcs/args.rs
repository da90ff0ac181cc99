//! Argument access for template functions. Go templates pass a piped value as the last
//! argument, so Sprig's signatures put the "subject" last (`indent 4 .x`).

use crate::render::value::strval;
use gotmpl::{Result, TemplateError, Value};

/// The argument at `i`, or an arity error naming the function.
pub fn arg<'a>(name: &str, args: &'a [Value], i: usize) -> Result<&'a Value> {
    args.get(i).ok_or_else(|| TemplateError::ArgCount {
        name: name.to_string(),
        expected: i + 1,
        got: args.len(),
    })
}

/// The argument at `i` formatted as Sprig's `strval` would.
pub fn str_arg(name: &str, args: &[Value], i: usize) -> Result<String> {
    arg(name, args, i).map(strval)
}

/// Requires exactly `n` arguments.
pub fn exact(name: &str, args: &[Value], n: usize) -> Result<()> {
    if args.len() == n {
        Ok(())
    } else {
        Err(TemplateError::ArgCount {
            name: name.to_string(),
            expected: n,
            got: args.len(),
        })
    }
}

/// A function-level error in the text Go's template engine would show after
/// `error calling NAME:`.
pub fn fail(name: &str, msg: impl std::fmt::Display) -> TemplateError {
    TemplateError::Exec(format!("error calling {name}: {msg}"))
}

pub fn string(s: impl Into<std::sync::Arc<str>>) -> Value {
    Value::String(s.into())
}

/// A stateless template function.
pub type Builtin = fn(&[Value]) -> Result<Value>;

/// Adds `(name, function)` pairs to a function map.
pub fn register_all(fm: &mut gotmpl::FuncMap, funcs: &[(&str, Builtin)]) {
    for (name, f) in funcs {
        fm.insert((*name).to_string(), std::sync::Arc::new(*f));
    }
}

/// An error's text without the engine's generic `execution error:` prefix, so messages from
/// `fail`/`required` reach the user as the chart author wrote them.
pub fn message(e: &TemplateError) -> String {
    match e {
        TemplateError::Exec(m) => m.clone(),
        other => other.to_string(),
    }
}
