//! The Helm/Sprig function pack, written by hand because no Rust crate provides Sprig for
//! `gotmpl`. Each submodule holds one family; `include`, `tpl` and the `.Files` helpers need the
//! parsed chart and live in `render::engine`.

mod args;
mod certs;
pub mod collections;
mod crypto;
pub mod encoding;
mod logic;
mod math;
mod paths;
mod semver_fn;
mod strings;
mod time;
mod toml;
mod url;

pub use args::{Builtin, fail, message, register_all, string};

use gotmpl::FuncMap;

/// Every chart-independent function, keyed by its template name.
pub fn sprig() -> FuncMap {
    let mut fm = FuncMap::new();
    strings::register(&mut fm);
    collections::register(&mut fm);
    encoding::register(&mut fm);
    logic::register(&mut fm);
    semver_fn::register(&mut fm);
    math::register(&mut fm);
    time::register(&mut fm);
    paths::register(&mut fm);
    crypto::register(&mut fm);
    certs::register(&mut fm);
    toml::register(&mut fm);
    url::register(&mut fm);
    add_must_aliases(&mut fm);
    fm.insert(
        PRINT_HOOK.to_string(),
        std::sync::Arc::new(|args: &[gotmpl::Value]| Ok(go_printable(args))),
    );
    fm
}

/// The hidden function `render::methods::rewrite` appends to every output action, because
/// `gotmpl` prints floats, lists and maps in Rust's form and Go's differs (`1e+06`,
/// `map[a:1]`).
pub const PRINT_HOOK: &str = "__goprint";

fn go_printable(args: &[gotmpl::Value]) -> gotmpl::Value {
    use gotmpl::Value;
    match args.last() {
        None => Value::Nil,
        Some(v @ (Value::Float(_) | Value::List(_) | Value::Map(_))) => {
            Value::String(crate::render::value::go_sprint(v).into())
        }
        Some(other) => other.clone(),
    }
}

/// Sprig's `mustX` variants return errors where `X` would swallow them; the functions here
/// already report errors, so each `mustX` is the same function.
fn add_must_aliases(fm: &mut FuncMap) {
    const MUST: &[&str] = &[
        "toJson",
        "toPrettyJson",
        "toRawJson",
        "regexMatch",
        "regexFind",
        "regexFindAll",
        "regexReplaceAll",
        "regexReplaceAllLiteral",
        "regexSplit",
        "merge",
        "mergeOverwrite",
        "deepCopy",
        "append",
        "push",
        "prepend",
        "first",
        "last",
        "rest",
        "initial",
        "reverse",
        "uniq",
        "without",
        "has",
        "compact",
        "dateModify",
        "toDate",
        "fromJson",
        "toYaml",
        "slice",
        "chunk",
    ];
    for name in MUST {
        if let Some(f) = fm.get(*name).cloned() {
            let mut must = String::from("must");
            must.push_str(&name[..1].to_uppercase());
            must.push_str(&name[1..]);
            fm.insert(must, f);
        }
    }
    if let Some(f) = fm.get("trimAll").cloned() {
        fm.insert("trimall".into(), f);
    }
    if let Some(f) = fm.get("max").cloned() {
        fm.insert("biggest".into(), f);
    }
}
