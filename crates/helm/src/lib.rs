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
//!   [`render::Capabilities::default`]: helm v4.2.3's offline answer (Kubernetes v1.36.0, its
//!   client library's API versions, its `HelmVersion` fields), which moves with helm's
//!   version. `.Capabilities.HelmVersion` and `.Capabilities.KubeVersion` printed whole show as
//!   maps, not as Go prints them (a struct; the version string).
//! - Maps are not shared by reference (see "Maps are references" below): `set`, `unset` and
//!   `merge*` change `.Values` (any map inside it, through any path) and a variable they are
//!   assigned back to (`$_ := set $d ...`), but not a dict reached any other way: the root data
//!   (`set . "k" v`, `set $ "Values" ...`), a dict passed to `include` (`set .target ...`), a
//!   local dict's nested field (`set $o.in ...`), a dict inside a deep copy.
//! - A nil where a dict is expected reads as an empty dict in `merge`, `mergeOverwrite`,
//!   `get`, `hasKey`, `keys`, ... (Go does this for a nil variable; for a missing field
//!   passed directly, helm fails with "wrong type for value", berth does not).
//! - Errors name the template and the message (`execution error in NAME: ...`), not Go's
//!   `template: NAME:LINE:COL: executing "NAME" at <...>:` form.
//!
//! # Maps are references (the engine berth needs)
//!
//! In Go templates a map is a reference: `set`, `unset`, `merge` and `mergeOverwrite` change
//! the one map every path to it sees (`.`, `$`, a variable, a nested field, an `include`
//! argument, a subchart's `.Values` inside its parent's). Charts rely on it everywhere
//! (jupyterhub's and harbor's `set . "k" v` helpers, coredns building `$ports` in a `range`,
//! nats and linkerd filling defaults into `$tree.Values.x`, falco's and consul's merges).
//! gotmpl 0.6 cannot express it: its `Value::Map` is an immutable `Arc<BTreeMap>`, functions
//! take `&[Value]` and return a new value, and variables hold copies. berth emulates the
//! `.Values` part (`render::live_values`: reads of `.Values` rewritten in the source to ask a
//! store, changed maps swapped into the tree by identity) and the `$_ := set $d` idiom (a
//! source rewrite, `render::methods`); that emulation cannot reach the other paths above and
//! rewriting template source is not a fix. The design change:
//!
//! - Own the executor. gotmpl's parse tree is public (`gotmpl::parse`; berth already edits
//!   it), so berth executes it itself: `render::exec` walks `ListNode`s with Go's rules
//!   (pipelines, variables and their scopes, `if`/`range`/`with`/`else with`, `define`/
//!   `template`/`block`, `break`/`continue`, missing keys, `<no value>`, Go's printing).
//! - Its value type has a map that is a shared cell: `Map(Rc<RefCell<Dict>>)` (a render runs
//!   on one thread; parsing stays parallel because trees hold no values), compared and
//!   indexed by identity. `set`/`unset`/`merge*` mutate the cell and return it; `dict`,
//!   `deepCopy`, `fromYaml`, `pick`, `omit` make new cells; lists stay immutable
//!   (`Arc<[Value]>`: Sprig's list functions all copy). `nil` keeps Go's two kinds: a nil
//!   interface from a variable (passes as an empty map) and a missing field (does not).
//! - Chart values become cells once per render: a subchart's `.Values` is the same cell as
//!   its parent's `.Values.<name>`, and the root data of every template shares those cells,
//!   so `set $ "Values" (merge ...)` and every later template see each change in Helm's
//!   order. `render::live_values` and the `.Values`/`$_ := set` source rewrites go.
//! - Method calls become real: `.Files.Get`, `(.Files.Glob x).AsConfig`,
//!   `.Capabilities.APIVersions.Has`, `.Capabilities.KubeVersion.GitVersion`, printing of
//!   Helm's structs (`{v4.2.3 ...}`), so the method rewrites go too.
//! - Errors carry node positions, giving helm's `template: NAME:LINE:COL: executing "NAME"
//!   at <.Values.x>: ...` texts.
//! - The lexer and parser fixes `render::methods::lexer_fixes` respells (a comment with a left
//!   trim marker only; a pipeline ending in `|`) need a parser berth owns too: either a fork
//!   of gotmpl's `parse` module (MIT) or berth's own.
//!
//! The function pack (`render::funcs`) moves to the new value type; the YAML emitter/reader,
//! chart loading and values coalescing stay. This is several sessions of work; it fixes the
//! corpus cases listed as "maps are references" in the fidelity report.
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
