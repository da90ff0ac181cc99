//! The Helm/Sprig function pack, written by hand because no Rust crate provides Sprig for
//! `gotmpl`. Each submodule holds one family; `include`, `tpl` and the `.Files` helpers need the
//! parsed chart and live in `render::engine`.

mod args;
mod certs;
pub mod collections;
mod crypto;
pub mod encoding;
pub mod gocase;
mod logic;
mod math;
mod paths;
pub mod semver_fn;
mod strings;
pub mod time;
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
    fm
}

/// Sprig's `mustX` variants return errors where `X` would swallow them; the functions here
/// already report errors, so each `mustX` is the same function.
fn add_must_aliases(fm: &mut FuncMap) {
    const MUST: &[&str] = &[
        "toJson",
        "toPrettyJson",
        "toRawJson",
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
        // `mustDateModify` and `mustToDate` are registered by `time` (dateModify is lenient,
        // its must form is not).
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
