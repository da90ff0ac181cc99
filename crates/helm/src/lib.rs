//! berth-helm: the Helm engine. It loads a chart (a directory, a packed `.tgz`, or `(path,
//! bytes)` pairs), coalesces its values as Helm does, executes its templates with Go template
//! semantics (`gotmpl`) and a hand-written Helm/Sprig function pack, and splits, checks and
//! orders the result as Helm does. It knows neither tonic nor kube: whatever a render needs
//! from a cluster comes in as plain data ([`render::Capabilities`]) or through a trait the
//! caller implements ([`render::Lookup`] for Helm's `lookup`); berth-release implements both
//! against a cluster.
//!
//! - [`render`]: chart loading (`chart`, `archive`, `.helmignore`), values (`values`, schema
//!   validation, live `.Values` that `set`/`merge` change in place), the template data
//!   (`.Release`, `.Chart`, `.Capabilities`, `.Files`), the function pack (`render::funcs`,
//!   Sprig's certificate and key functions in `render::funcs::certs`), the go-yaml-compatible
//!   emitter and reader (`render::goyaml`), and manifest splitting (`render::manifests`).
//! - [`template`]: `helm template`'s command-line semantics (chart from disk, `-f`/`--set`,
//!   the printed layout), and [`template::command`], the whole `berth render` command from its
//!   arguments to its output.
//! - [`order`]: Helm's install order by kind (uninstall walks it backwards).
//! - [`helm_binary`]: where the real `helm` is, for the comparisons with it (tests, benches).
//!
//! # Fidelity
//!
//! The output of [`template::template`] is checked byte for byte against `helm template`
//! (Helm 4) by `tests/oracle.rs` over the corpus in `tests/oracle/` (Sprig, Helm's own
//! functions, subcharts, `.Files`, schemas, binary files, YAML shapes, charts that must fail),
//! and against helm's stored output for `helm create`'s chart by `tests/render_fixtures.rs`.
//! The certificate and key functions are random (keys, serials, times), so
//! `tests/certs_oracle.rs` compares every certificate field, key form and error text with
//! `helm template` instead of bytes. `berth render` goes through the same code, so what the
//! oracles prove holds for the command.
//!
//! Go strings are bytes: bytes that are not UTF-8 (binary `.Files`, `b64dec`) travel through
//! gotmpl's `String`s as plane-16 private-use escapes (`render::bytes`) and fail a manifest as
//! in Helm. YAML is written by a go-yaml v2-compatible emitter and read by a go-yaml-compatible
//! reader (a quick block-YAML reader backed by granit-parser), since chart authors rely on
//! go-yaml's exact text.
//!
//! # Known differences
//!
//! - A chart whose text (outside `.Files`) holds the private-use code points
//!   U+10FF80..=U+10FFFF is read as escaped bytes (`render::bytes`).
//! - Certificate functions: `DAYS` may be any whole number, the CA may be any map with `Cert`
//!   and `Key`, EC keys must be on P-256 or P-384 and carry their public key, and a result
//!   printed whole shows as a map (`render::funcs::certs`); extensions come in rcgen's order.
//! - Without a cluster, `lookup` finds nothing (as in `helm template`) and `.Capabilities` is
//!   [`render::Capabilities::default`], berth's own table, whose default Kubernetes version
//!   need not match the one helm's client library carries (the oracles pass `--kube-version`).
//! - Functions whose output is random or time-dependent (`randAlphaNum`, `now`, `uuidv4`, ...)
//!   are outside the byte-for-byte corpus.

pub mod helm_binary;
pub mod order;
pub mod render;
pub mod template;

pub use render::{Manifest, RenderError, render_chart};

/// The release a render is for, as templates see it in `.Release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseInfo {
    pub name: String,
    pub namespace: String,
    pub revision: i32,
    pub is_install: bool,
    pub is_upgrade: bool,
}
