//! The Helm/Sprig function pack, written by hand because no Rust crate provides Sprig for
//! `gotmpl`. Each submodule holds one family; `include`, `tpl` and the `.Files` helpers need the
//! parsed chart and live in `render::engine`.

mod args;
pub mod collections;
pub mod encoding;
mod logic;
mod semver_fn;
mod strings;

pub use args::{Builtin, fail, register_all, string};

use gotmpl::FuncMap;

/// Every chart-independent function, keyed by its template name.
pub fn sprig() -> FuncMap {
    let mut fm = FuncMap::new();
    strings::register(&mut fm);
    collections::register(&mut fm);
    encoding::register(&mut fm);
    logic::register(&mut fm);
    semver_fn::register(&mut fm);
    fm
}
