//! berth-helm: the Helm engine. It loads a chart (a directory, a packed `.tgz`, or `(path,
//! bytes)` pairs), coalesces its values as Helm does, executes its templates with Go template
//! semantics (its own lexer and parser, `render::gotpl`, and executor, `render::exec`) and a
//! hand-written Helm/Sprig function pack, and splits, checks and orders the result as Helm
//! does. It knows neither tonic nor kube: whatever a render needs
//! from a cluster comes in as plain data ([`render::Capabilities`]) or through a trait the
//! caller implements ([`render::Lookup`] for Helm's `lookup`); berth-release implements both
//! against a cluster.
//!
//! - [`render`]: chart loading (`chart`, `archive`, `.helmignore`), values (`values`, schema
//!   validation), the Go-template reader (`render::gotpl`: lexer, parser, tree), the template
//!   executor (`render::exec`, maps shared by reference), the
//!   template data (`.Release`, `.Chart`, `.Capabilities`, `.Files`), the function pack
//!   (`render::funcs`,
//!   Sprig's certificate and key functions in `render::funcs::certs`), the go-yaml-compatible
//!   emitter and reader (`render::goyaml`), and manifest splitting (`render::manifests`).
//! - [`template`]: `helm template`'s command-line semantics (chart from disk, `-f`/`--set`,
//!   the printed layout), and [`template::command`], the whole `berth render` command from its
//!   arguments to its output.
//! - [`order`]: Helm's install order by kind (uninstall walks it backwards).
//! - [`helm_binary`]: where the real `helm` is, for the comparisons with it (tests, benches).
//! - [`memory`]: the process setting the rendering binaries start with (no huge pages).
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
//!   [`render::Capabilities::default`]: helm v4.2.3's offline answer (Kubernetes v1.36.0, its
//!   client library's API versions, its `HelmVersion` fields), which moves with helm's
//!   version. `.Capabilities.KubeVersion` and `.HelmVersion` print whole as Go prints their
//!   structs; `toYaml`/`toJson` of them give maps of their fields.
//! - Go's type checks of function arguments follow every Sprig and Helm signature
//!   (`render::exec::params`), with helm's texts and places. Not modelled: a struct
//!   (`.Capabilities`, `.Files`) is accepted where Go's map parameter refuses it only by
//!   type name, and `.Capabilities.APIVersions` is a plain list to `typeOf` (Go:
//!   `common.VersionSet`), `.Files.GetBytes` a string (Go: `[]uint8`).
//! - Texts that are other libraries' words: YAML and TOML syntax errors inside
//!   `fromYaml`/`fromToml`'s `Error` (go-yaml's, BurntSushi's), regexp compile errors, and
//!   Go's runtime panics' texts in the errors of `len`. `dateInZone` refuses an IANA zone
//!   name (no time-zone database is bundled). `printf`'s `%p` and `%#v`, `#` on floats and
//!   verbs other than `%v`/`%s` on Helm's structs and times go through gotmpl's formatter.
//! - A template calling a function helm does not have, or using a variable no enclosing
//!   action declared, fails when parsed, as in helm. `getHostByName` resolves nothing and
//!   answers "" (as `helm template` does offline; berth renders untrusted charts).
//! - Execution errors are helm's texts (`execution error at (FILE:LINE:COL): ...` for `fail`
//!   and `required`, Go's `template: FILE:LINE:COL: executing "NAME" at <NODE>: ...` for a
//!   function's error, helm v4's lines for the executor's own), except that a few messages
//!   are worded differently (those of functions the pack checks itself, nesting limits). Parse
//!   errors are helm's (`parse error at (FILE:LINE): ...`), Go's texts and lines throughout.
//! - Complex number constants (`1+2i`) are refused when parsed (Go accepts them; no chart
//!   uses them). Templates may nest 100 deep (actions or parentheses).
//! - `.Capabilities` printed whole by an action is helm's struct text, but handed to a
//!   function (`toString`, `printf "%v"`) it is a map. `.Chart.Annotations` is Go's nil map
//!   when `Chart.yaml` has none (`toJson` gives `null`), but map functions take it where helm
//!   refuses its `map[string]string` (`hasKey .Chart.Annotations "k"`), and unset lists
//!   (`.Chart.Keywords`) are empty lists where Go's are nil (`toJson` gives `[]` for `null`).
//!
//! # Maps are references (berth's executor)
//!
//! In Go templates a map is a reference: `set`, `unset`, `merge` and `mergeOverwrite` change
//! the one map every path to it sees (`.`, `$`, a variable, a nested field, an `include`
//! argument, a subchart's `.Values` inside its parent's). Charts rely on it everywhere
//! (jupyterhub's and harbor's `set . "k" v` helpers, coredns building `$ports` in a `range`,
//! nats and linkerd filling defaults into `$tree.Values.x`, falco's and consul's merges).
//! gotmpl 0.6's `Value::Map` is an immutable `Arc<BTreeMap>`, so berth does not run templates
//! on gotmpl's executor; it reads templates with its own lexer and parser and executes the
//! tree itself:
//!
//! - `render::gotpl` reads Go's text/template grammar (trim markers, comments, pipelines,
//!   declarations, `define`/`block`/`template`, `if`/`with`/`range` with `else if`/`else
//!   with`, `break`/`continue`, Go's string, raw string, character and number literals) and
//!   refuses what Go's parser refuses (unknown functions, undeclared variables, a name defined
//!   twice in a file) with Go's texts. It replaced gotmpl's parser, whose lexer took a quarter
//!   of a render and read two spellings differently from Go.
//! - `render::exec` walks `ListNode`s with Go's rules: pipelines, variables and their scopes,
//!   `if`/`range`/`with`/`else with`, `define`/`template`/`block`, `break`/`continue`, range
//!   over an integer, lazy `and`/`or`, missing keys (`<no value>`, which Helm removes), Go's
//!   two nils (a field of a nil variable or pipeline is no value; a field of a map's missing
//!   entry fails with helm's "nil pointer evaluating interface {}.x"), Go's printing.
//! - Its value type (`render::exec::value`) has a map that is a shared cell
//!   (`Rc<RefCell<..>>`, a render runs on one thread; parsing stays parallel because trees hold
//!   no values). `set`/`unset`/`merge*` change the cell and return it; `dict`, `deepCopy`,
//!   `fromYaml`, `pick`, `omit` make new cells (whose entries, as in Go, are the same maps);
//!   lists are immutable. Maps that hold themselves, which reference counting would keep, are
//!   emptied when the render ends (`CellScope`).
//! - Chart values become cells once per render: a subchart's `.Values` is the same cell as its
//!   parent's `.Values.<name>`, and each chart has one root data map that all its templates
//!   see, so `set . "k" v` and `set $ "Values" (merge ...)` are seen by the templates rendered
//!   after it, in Helm's order (deepest first, then reverse name order).
//! - Method calls are real: `.Files.Get`/`GetBytes`/`Lines`/`Glob`,
//!   `(.Files.Glob x).AsConfig`/`AsSecrets`, `.Capabilities.APIVersions.Has`.
//! - The Sprig pack (`render::funcs`) still works on gotmpl values: arguments are converted at
//!   the call and the result back, and a map keeps its identity through the round trip (each
//!   cell caches its converted copy, and a copy a function returns, e.g. from `default`,
//!   `first` or `ternary`, turns back into its cell). The functions that change or must keep
//!   maps (`set`, `unset`, `merge*`, `deepCopy`, `dict`, `get`, `hasKey`, `index`) and
//!   `include`/`tpl` are native. Go's `printf`, `eq`, `lt`, ... run through one-action
//!   gotmpl templates (cached per name and arity), the one use of gotmpl's own parser left.
//!
//! - Functions whose output is random or time-dependent (`randAlphaNum`, `now`, `uuidv4`, ...)
//!   are outside the byte-for-byte corpus.

pub mod helm_binary;
pub mod memory;
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
