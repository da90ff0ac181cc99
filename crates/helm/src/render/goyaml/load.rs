//! Reading YAML the way Helm does: go-yaml v2's decoder (YAML 1.1 scalars, merge keys, aliases)
//! followed by `sigs.k8s.io/yaml`'s conversion to JSON (map keys become strings: `on:` and
//! `yes:` keys turn into `"true"`, `1:` into `"1"`; NaN and infinities are refused).
//!
//! The syntax is parsed by `granit-parser` (the event parser `serde-saphyr` is built on);
//! what those events mean is decided here, because no crate reproduces go-yaml v2's typing
//! rules and the JSON conversion Helm applies after them. Composing straight from events also
//! lets [`head`] check a whole rendered document while materialising only the few fields Helm
//! reads from it.

use super::super::value::go_float32;
use base64::Engine as _;
use granit_parser::{Event, Parser, ScalarStyle, Tag};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::collections::HashMap;

const CORE: &str = "tag:yaml.org,2002:";

/// How many nodes alias expansion may produce in one document before it counts as an alias
/// bomb (go-yaml refuses such documents too: "excessive aliasing").
const MAX_ALIAS_NODES: usize = 1 << 22;

/// Reads the first document of `text` as `yaml.Unmarshal` into `interface{}` would (later
/// documents are not read), then converts it to JSON as `sigs.k8s.io/yaml` does. Empty input
/// gives `null`.
pub fn from_str(text: &str) -> Result<Value, String> {
    let read = |quick| Composer::new(text, true, quick).first_document(|c, ev| c.value(ev, true));
    match read(true) {
        Err(Failure::Unsupported) => read(false),
        other => other,
    }
    .map_err(Failure::into_message)
}

/// The text a template produced as go-yaml's reader sees it: bytes carried as escapes (see
/// `render::bytes`) that together are UTF-8 become text; any other such byte is refused with
/// go-yaml's message for it, as Helm refuses a manifest or `fromYaml` input that is not UTF-8.
/// Call it once on template output before [`from_str`] or [`head`], which take text as it is
/// (a second pass would read a real plane-16 character as an escape).
pub fn utf8(text: &str) -> Result<Cow<'_, str>, String> {
    super::super::bytes::to_utf8(text).map_err(|e| {
        let bad = &e.as_bytes()[e.utf8_error().valid_up_to()..];
        format!("yaml: {}", reader_problem(bad))
    })
}

/// go-yaml's reader's complaint about the invalid UTF-8 sequence `bad` starts with (its
/// checks, in its order: the leading octet, the length, the trailing octets, overlong forms,
/// surrogates and values past U+10FFFF).
fn reader_problem(bad: &[u8]) -> &'static str {
    let lead = bad.first().copied().unwrap_or(0);
    let width = match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return "invalid leading UTF-8 octet",
    };
    if bad.len() < width {
        return "incomplete UTF-8 octet sequence";
    }
    let mut value = u32::from(lead & (0x7F >> width));
    for &octet in &bad[1..width] {
        if octet & 0xC0 != 0x80 {
            return "invalid trailing UTF-8 octet";
        }
        value = (value << 6) | u32::from(octet & 0x3F);
    }
    let shortest = match width {
        2 => value >= 0x80,
        3 => value >= 0x800,
        _ => value >= 0x1_0000,
    };
    if !shortest {
        return "invalid length of a UTF-8 sequence";
    }
    "invalid Unicode character"
}

/// Helm's values-file reader (`loader.LoadValues`): the text is cut into documents at lines
/// starting with `---` (Kubernetes' `YAMLReader`), each document must be a map (or empty),
/// and the maps are deep-merged in order, later ones winning.
pub fn values_from_str(text: &str) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for doc in yaml_reader_documents(text)? {
        match from_str(doc)? {
            Value::Null => {}
            Value::Object(m) => merge_maps(&mut out, m),
            other => {
                return Err(format!(
                    "cannot unmarshal {} into a map of values",
                    json_type(&other)
                ));
            }
        }
    }
    Ok(out)
}

/// `k8s.io/apimachinery`'s `YAMLReader`: a line beginning with `---` ends a document; only
/// spaces or a comment may follow the marker.
fn yaml_reader_documents(text: &str) -> Result<Vec<&str>, String> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    while pos < text.len() {
        let end = text[pos..].find('\n').map_or(text.len(), |i| pos + i + 1);
        let line = &text[pos..end];
        if let Some(rest) = line.strip_prefix("---") {
            let rest = rest.trim();
            if !rest.is_empty() && !rest.starts_with('#') {
                return Err(format!("invalid Yaml document separator: {rest}"));
            }
            if pos > start {
                docs.push(&text[start..pos]);
            }
            start = end;
        }
        pos = end;
    }
    if text.len() > start {
        docs.push(&text[start..]);
    }
    Ok(docs)
}

/// Helm's `MergeMaps`: maps merge key by key, anything else from `over` replaces.
fn merge_maps(base: &mut Map<String, Value>, over: Map<String, Value>) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => merge_maps(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// What Helm reads from each rendered document (`SimpleHead`): its kind and, for hooks, the
/// `helm.sh/hook` annotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    pub kind: String,
    /// The `helm.sh/hook` annotation, when the document has it.
    pub hook: Option<String>,
}

/// Checks that `doc` is YAML Helm accepts as a manifest and reads its [`Head`], without
/// building the rest of the document. Same result as [`head_of`] applied to [`from_str`].
pub fn head(doc: &str) -> Result<Head, String> {
    let read = |quick| Composer::new(doc, false, quick).first_document(Composer::head_value);
    let first = match read(true) {
        Err(Failure::Unsupported) => read(false),
        other => other,
    };
    match first {
        Ok(v) => head_of(&v),
        // Aliases and merge keys can move data between the parts Helm reads and the parts
        // skipped here: read such (rare) documents in full.
        Err(Failure::NeedsFull) => head_of(&from_str(doc)?),
        Err(Failure::Invalid(e)) => Err(e),
        Err(Failure::Unsupported) => Err("internal error: quick reader used twice".into()),
    }
}

/// Decodes a composed document into Helm's `SimpleHead` the way `encoding/json` does: field
/// names match case-insensitively (of several spellings the last in sorted order wins), and
/// `sigs.k8s.io/yaml` turns scalars aimed at string fields into strings.
pub fn head_of(doc: &Value) -> Result<Head, String> {
    let top = match doc {
        Value::Null => return Ok(Head::default()),
        Value::Object(m) => m,
        other => {
            return Err(format!(
                "cannot unmarshal {} into a manifest head",
                json_type(other)
            ));
        }
    };
    let mut head = Head::default();
    let mut annotations: Option<Map<String, Value>> = None;
    for (key, value) in fields(top, &["apiversion", "kind", "metadata"]) {
        match key {
            "apiversion" => {
                target_string("apiVersion", value)?;
            }
            "kind" => head.kind = target_string("kind", value)?.unwrap_or_default(),
            _ => match value {
                Value::Null => annotations = None,
                Value::Object(meta) => {
                    annotations = None;
                    for (key, value) in fields(meta, &["name", "annotations"]) {
                        if key == "name" {
                            target_string("metadata.name", value)?;
                            continue;
                        }
                        match value {
                            Value::Null => annotations = None,
                            Value::Object(a) => {
                                for (k, v) in a {
                                    target_string(&format!("annotation {k}"), v)?;
                                }
                                annotations = Some(a.clone());
                            }
                            other => {
                                return Err(format!(
                                    "cannot unmarshal {} into metadata.annotations",
                                    json_type(other)
                                ));
                            }
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "cannot unmarshal {} into metadata",
                        json_type(other)
                    ));
                }
            },
        }
    }
    head.hook = annotations
        .as_ref()
        .and_then(|a| a.get("helm.sh/hook"))
        .map(|v| {
            target_string("helm.sh/hook", v)
                .ok()
                .flatten()
                .unwrap_or_default()
        });
    Ok(head)
}

/// The entries of `m` whose keys match `names` case-insensitively, in the order Go's JSON
/// decoder sees them (keys sorted bytewise), with the matched lower-case name.
fn fields<'m>(m: &'m Map<String, Value>, names: &[&'static str]) -> Vec<(&'static str, &'m Value)> {
    let mut found: Vec<(&String, &'static str, &Value)> = m
        .iter()
        .filter_map(|(k, v)| {
            names
                .iter()
                .find(|n| k.eq_ignore_ascii_case(n))
                .map(|n| (k, *n, v))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(b.0));
    found.into_iter().map(|(_, n, v)| (n, v)).collect()
}

/// A scalar decoded into a Go string field: strings as they are, numbers and booleans in
/// their text form (floats as float32 `%g`), null as the zero value.
fn target_string(field: &str, v: &Value) -> Result<Option<String>, String> {
    Ok(Some(match v {
        Value::Null => return Ok(None),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => go_float32(f),
            _ => n.to_string(),
        },
        other => {
            return Err(format!(
                "cannot unmarshal {} into the string field {field}",
                json_type(other)
            ));
        }
    }))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Why composing stopped.
enum Failure {
    /// The document is not acceptable YAML (or JSON cannot represent it).
    Invalid(String),
    /// [`head`] met an alias or merge key and needs the full document.
    NeedsFull,
    /// The quick reader gave up: start again with the full parser.
    Unsupported,
}

impl Failure {
    fn into_message(self) -> String {
        match self {
            Failure::Invalid(m) => m,
            Failure::NeedsFull | Failure::Unsupported => {
                "internal error: partial read of a full document".into()
            }
        }
    }
}

impl From<String> for Failure {
    fn from(m: String) -> Self {
        Failure::Invalid(m)
    }
}

type Result<T, E = Failure> = std::result::Result<T, E>;

/// A scalar as go-yaml v2 types it.
#[derive(Debug, Clone, PartialEq)]
enum Scalar<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(Cow<'a, str>),
}

impl<'a> Scalar<'a> {
    fn into_owned(self) -> Scalar<'static> {
        match self {
            Scalar::Str(s) => Scalar::Str(Cow::Owned(s.into_owned())),
            Scalar::Null => Scalar::Null,
            Scalar::Bool(b) => Scalar::Bool(b),
            Scalar::Int(i) => Scalar::Int(i),
            Scalar::Uint(u) => Scalar::Uint(u),
            Scalar::Float(f) => Scalar::Float(f),
        }
    }

    /// `sigs.k8s.io/yaml`'s JSON form of a value.
    fn to_json(&self) -> Result<Value, String> {
        Ok(match self {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(*b),
            Scalar::Int(i) => Value::Number((*i).into()),
            Scalar::Uint(u) => Value::Number((*u).into()),
            Scalar::Float(f) => Value::Number(
                Number::from_f64(*f)
                    .ok_or_else(|| format!("json: unsupported value: {}", go_float32(*f)))?,
            ),
            Scalar::Str(s) => Value::String(s.to_string()),
        })
    }

    /// Fails where [`Scalar::to_json`] would, without building anything.
    fn check_json(&self) -> Result<(), String> {
        match self {
            Scalar::Float(f) if !f.is_finite() => {
                Err(format!("json: unsupported value: {}", go_float32(*f)))
            }
            _ => Ok(()),
        }
    }

    /// `sigs.k8s.io/yaml`'s string form of a map key.
    fn into_key(self) -> Result<Cow<'a, str>, String> {
        Ok(match self {
            Scalar::Str(s) => s,
            Scalar::Int(i) => i.to_string().into(),
            Scalar::Bool(b) => b.to_string().into(),
            Scalar::Float(f) => match go_float32(f).as_str() {
                "+Inf" => ".inf".into(),
                "-Inf" => "-.inf".into(),
                "NaN" => ".nan".into(),
                other => other.to_string().into(),
            },
            Scalar::Uint(u) => {
                return Err(format!("unsupported map key of type: uint64, key: {u:#x}"));
            }
            Scalar::Null => return Err("unsupported map key of type: <nil>".into()),
        })
    }
}

/// A node kept for later aliases.
#[derive(Clone)]
enum Anchored {
    Scalar(Scalar<'static>),
    Collection(Value),
}

/// A mapping key: a plain key, or the merge key `<<`.
enum Key<'a> {
    Str(Cow<'a, str>),
    Merge,
}

/// Where events come from: the quick reader, or the full parser.
enum Source<'a> {
    Quick(super::fast::Events<'a>),
    Full(Box<Parser<'a, granit_parser::StrInput<'a>>>),
}

struct Composer<'a> {
    source: Source<'a>,
    /// Anchors seen so far, by the parser's anchor id; `None` while the anchored node is still
    /// being composed (an alias to it would make it contain itself).
    anchors: HashMap<usize, Option<Anchored>>,
    alias_nodes: usize,
    /// Whether aliases and merge keys are followed (false in [`head`]'s partial reads).
    follow_aliases: bool,
}

impl<'a> Composer<'a> {
    /// A composer over the quick reader when `quick` (and it takes the text), else over the
    /// full parser.
    fn new(text: &'a str, follow_aliases: bool, quick: bool) -> Self {
        let source = match super::fast::Events::new(text).filter(|_| quick) {
            Some(events) => Source::Quick(events),
            None => {
                let mut options = granit_parser::Options::default();
                options.emit_comments = false;
                Source::Full(Box::new(Parser::new_from_str_with_options(text, options)))
            }
        };
        Composer {
            source,
            anchors: HashMap::new(),
            alias_nodes: 0,
            follow_aliases,
        }
    }

    fn next(&mut self) -> Result<Event<'a>> {
        match &mut self.source {
            Source::Quick(events) => match events.next() {
                Some(Ok(ev)) => Ok(ev),
                Some(Err(super::fast::Unsupported)) => Err(Failure::Unsupported),
                None => Err(Failure::Invalid("yaml: unexpected end of input".into())),
            },
            Source::Full(parser) => match parser.next() {
                Some(Ok((ev, _))) => Ok(ev),
                Some(Err(e)) => Err(Failure::Invalid(format!("yaml: {e}"))),
                None => Err(Failure::Invalid("yaml: unexpected end of input".into())),
            },
        }
    }

    /// The root node of the first document (null for an empty stream).
    fn first_document(
        &mut self,
        root: impl FnOnce(&mut Self, Event<'a>) -> Result<Value>,
    ) -> Result<Value> {
        loop {
            match self.next()? {
                Event::StreamStart => {}
                Event::StreamEnd => return Ok(Value::Null),
                Event::DocumentStart(..) => {
                    let ev = self.next()?;
                    if matches!(ev, Event::DocumentEnd) {
                        return Ok(Value::Null);
                    }
                    return root(self, ev);
                }
                _ => {}
            }
        }
    }

    /// Composes the node that starts with `ev`; with `build` false it is only checked.
    fn value(&mut self, ev: Event<'a>, build: bool) -> Result<Value> {
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let scalar = resolve(text, style, tag.as_deref())?;
                let json = if build {
                    scalar.to_json()?
                } else {
                    scalar.check_json()?;
                    Value::Null
                };
                if anchor != 0 {
                    self.anchors
                        .insert(anchor, Some(Anchored::Scalar(scalar.into_owned())));
                }
                Ok(json)
            }
            Event::Alias(id) => match self.alias(id)? {
                Anchored::Scalar(s) => Ok(s.to_json()?),
                Anchored::Collection(v) => Ok(v),
            },
            Event::SequenceStart(_, anchor, _) => {
                self.open(anchor);
                let mut items = Vec::new();
                loop {
                    match self.next()? {
                        Event::SequenceEnd => break,
                        ev => {
                            let v = self.value(ev, build)?;
                            if build {
                                items.push(v);
                            }
                        }
                    }
                }
                let v = if build {
                    Value::Array(items)
                } else {
                    Value::Null
                };
                self.close(anchor, &v);
                Ok(v)
            }
            Event::MappingStart(_, anchor, _) => {
                self.open(anchor);
                let mut map = Map::new();
                self.mapping_entries(&mut map, build, |_| build)?;
                let v = if build {
                    Value::Object(map)
                } else {
                    Value::Null
                };
                self.close(anchor, &v);
                Ok(v)
            }
            other => Err(Failure::Invalid(format!(
                "yaml: unexpected event {other:?}"
            ))),
        }
    }

    /// The root of a document for [`head`]: a top-level map keeps only the fields Helm reads.
    fn head_value(&mut self, ev: Event<'a>) -> Result<Value> {
        match ev {
            Event::MappingStart(_, anchor, _) => {
                self.open(anchor);
                let mut map = Map::new();
                self.mapping_entries(&mut map, false, |k| {
                    ["apiversion", "kind", "metadata"]
                        .iter()
                        .any(|n| k.eq_ignore_ascii_case(n))
                })?;
                Ok(Value::Object(map))
            }
            // Not a map: nothing to skip, and the type decides the outcome.
            ev => self.value(ev, true),
        }
    }

    /// Reads the entries of a mapping (after its start event) into `map`; values whose key
    /// `keep` rejects are only checked (and left out when `all` is false).
    fn mapping_entries(
        &mut self,
        map: &mut Map<String, Value>,
        all: bool,
        keep: impl Fn(&str) -> bool,
    ) -> Result<()> {
        loop {
            let ev = self.next()?;
            if matches!(ev, Event::MappingEnd) {
                return Ok(());
            }
            match self.key(ev)? {
                Key::Merge => {
                    if !self.follow_aliases {
                        return Err(Failure::NeedsFull);
                    }
                    let ev = self.next()?;
                    self.merge(ev, map)?;
                }
                Key::Str(k) => {
                    let ev = self.next()?;
                    let build = all || keep(&k);
                    let v = self.value(ev, build)?;
                    if build {
                        map.insert(k.into_owned(), v);
                    }
                }
            }
        }
    }

    /// A mapping key; collections cannot be keys once converted to JSON.
    fn key(&mut self, ev: Event<'a>) -> Result<Key<'a>> {
        let scalar = match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let merge = text == "<<"
                    && match tag.as_deref() {
                        None => style == ScalarStyle::Plain,
                        Some(t) => t.handle() == CORE && t.suffix() == "merge",
                    };
                if merge {
                    return Ok(Key::Merge);
                }
                let scalar = resolve(text, style, tag.as_deref())?;
                if anchor != 0 {
                    self.anchors
                        .insert(anchor, Some(Anchored::Scalar(scalar.clone().into_owned())));
                }
                scalar
            }
            Event::Alias(id) => match self.alias(id)? {
                Anchored::Scalar(s) => s,
                Anchored::Collection(v) => {
                    return Err(Failure::Invalid(format!("yaml: invalid map key: {v}")));
                }
            },
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                return Err(Failure::Invalid(
                    "yaml: invalid map key: a sequence or mapping".into(),
                ));
            }
            other => {
                return Err(Failure::Invalid(format!(
                    "yaml: unexpected event {other:?}"
                )));
            }
        };
        Ok(Key::Str(scalar.into_key()?))
    }

    /// go-yaml v2's `<<`: a map (or alias to one) is written into `map` entry by entry, over
    /// what is there; a sequence of maps is written last to first, so earlier maps win.
    fn merge(&mut self, ev: Event<'a>, map: &mut Map<String, Value>) -> Result<()> {
        let want_map = || {
            Failure::Invalid("yaml: map merge requires map or sequence of maps as the value".into())
        };
        match ev {
            Event::SequenceStart(_, anchor, _) => {
                self.open(anchor);
                let mut items = Vec::new();
                loop {
                    match self.next()? {
                        Event::SequenceEnd => break,
                        ev @ (Event::MappingStart(..) | Event::Alias(_)) => {
                            match self.value(ev, true)? {
                                Value::Object(m) => items.push(m),
                                _ => return Err(want_map()),
                            }
                        }
                        _ => return Err(want_map()),
                    }
                }
                self.close(
                    anchor,
                    &Value::Array(items.iter().cloned().map(Value::Object).collect()),
                );
                for m in items.into_iter().rev() {
                    map.extend(m);
                }
                Ok(())
            }
            ev @ (Event::MappingStart(..) | Event::Alias(_)) => match self.value(ev, true)? {
                Value::Object(m) => {
                    map.extend(m);
                    Ok(())
                }
                _ => Err(want_map()),
            },
            _ => Err(want_map()),
        }
    }

    fn alias(&mut self, id: usize) -> Result<Anchored> {
        if !self.follow_aliases {
            return Err(Failure::NeedsFull);
        }
        let anchored = match self.anchors.get(&id) {
            Some(Some(a)) => a.clone(),
            Some(None) => {
                return Err(Failure::Invalid(
                    "yaml: anchor value contains itself".into(),
                ));
            }
            None => return Err(Failure::Invalid("yaml: unknown anchor referenced".into())),
        };
        if let Anchored::Collection(v) = &anchored {
            let nodes = node_count(v);
            // The copy is charged to the render's memory budget (when one is in force).
            if !crate::render::meter::charge(
                nodes.saturating_mul(crate::render::meter::NODE),
                crate::render::meter::Built::Map,
            ) {
                let spent = crate::render::meter::over().map(|e| e.to_string());
                return Err(Failure::Invalid(spent.unwrap_or_default()));
            }
            self.alias_nodes += nodes;
            if self.alias_nodes > MAX_ALIAS_NODES {
                return Err(Failure::Invalid(
                    "yaml: document contains excessive aliasing".into(),
                ));
            }
        }
        Ok(anchored)
    }

    fn open(&mut self, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, None);
        }
    }

    fn close(&mut self, anchor: usize, v: &Value) {
        if anchor != 0 {
            self.anchors
                .insert(anchor, Some(Anchored::Collection(v.clone())));
        }
    }
}

fn node_count(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(node_count).sum::<usize>(),
        Value::Object(m) => 1 + m.values().map(node_count).sum::<usize>(),
        _ => 1,
    }
}

/// go-yaml v2's `resolve`: untagged plain scalars are typed by the YAML 1.1 rules, quoted and
/// block scalars are strings, and an explicit tag must agree with what the text resolves to.
fn resolve<'v>(
    text: Cow<'v, str>,
    style: ScalarStyle,
    tag: Option<&Tag>,
) -> Result<Scalar<'v>, String> {
    let Some(tag) = tag else {
        return Ok(if style == ScalarStyle::Plain {
            implicit(text)
        } else {
            Scalar::Str(text)
        });
    };
    let suffix = if tag.handle() == CORE {
        tag.suffix()
    } else {
        ""
    };
    match suffix {
        "str" => Ok(Scalar::Str(text)),
        "binary" => {
            let cleaned: String = text.chars().filter(|c| *c != '\n' && *c != '\r').collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(cleaned.as_bytes())
                .map_err(|_| "yaml: !!binary value contains invalid base64 data".to_string())?;
            // Lossy on purpose, not `render::bytes`: Helm reads YAML through
            // `sigs.k8s.io/yaml`, whose JSON step writes U+FFFD for bytes that are not UTF-8
            // (`(fromYaml "a: !!binary /w==").a | b64enc` is `77+9` in Helm).
            Ok(Scalar::Str(Cow::Owned(
                String::from_utf8_lossy(&bytes).into_owned(),
            )))
        }
        "bool" | "int" | "float" | "timestamp" => {
            let resolved = implicit(text.clone());
            let ok = match (&resolved, suffix) {
                (Scalar::Bool(_), "bool") | (Scalar::Int(_) | Scalar::Uint(_), "int") => true,
                (Scalar::Float(_), "float") => true,
                (Scalar::Int(i), "float") => return Ok(Scalar::Float(*i as f64)),
                (Scalar::Uint(u), "float") => return Ok(Scalar::Float(*u as f64)),
                // Timestamps stay text when decoded into `interface{}`.
                (Scalar::Str(s), "timestamp") if looks_like_timestamp(s) => true,
                _ => false,
            };
            if ok {
                Ok(resolved)
            } else {
                let got = match resolved {
                    Scalar::Null => "!!null",
                    Scalar::Bool(_) => "!!bool",
                    Scalar::Int(_) | Scalar::Uint(_) => "!!int",
                    Scalar::Float(_) => "!!float",
                    Scalar::Str(_) => "!!str",
                };
                Err(format!(
                    "yaml: cannot decode {got} `{text}` as a !!{suffix}"
                ))
            }
        }
        // Other tags (`!!null`, `!!merge`, local `!foo`) are not resolved: the text stays.
        _ => Ok(Scalar::Str(text)),
    }
}

/// The YAML 1.1 type of an untagged plain scalar.
fn implicit(text: Cow<'_, str>) -> Scalar<'_> {
    let s: &str = &text;
    let Some(&first) = s.as_bytes().first() else {
        return Scalar::Null;
    };
    match first {
        b'+'
        | b'-'
        | b'0'..=b'9'
        | b'.'
        | b'y'
        | b'Y'
        | b'n'
        | b'N'
        | b't'
        | b'T'
        | b'f'
        | b'F'
        | b'o'
        | b'O'
        | b'~' => {}
        _ => return Scalar::Str(text),
    }
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false);
        }
        "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        _ => {}
    }
    match first {
        b'.' => match s.parse::<f64>() {
            Ok(f) if is_decimal_float(s) => Scalar::Float(f),
            _ => Scalar::Str(text),
        },
        b'+' | b'-' | b'0'..=b'9' => {
            let plain: Cow<'_, str> = if s.contains('_') {
                Cow::Owned(s.replace('_', ""))
            } else {
                Cow::Borrowed(s)
            };
            if let Some(n) = go_parse_int(&plain) {
                return n;
            }
            if is_decimal_float(&plain)
                && let Ok(f) = plain.parse::<f64>()
            {
                return Scalar::Float(f);
            }
            Scalar::Str(text)
        }
        _ => Scalar::Str(text),
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)`, falling back to `ParseUint` for values above
/// `i64::MAX`: optional sign, then `0x`/`0o`/`0b` prefixes, a leading `0` for octal, else
/// decimal.
fn go_parse_int(s: &str) -> Option<Scalar<'static>> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, digits) = match body.as_bytes() {
        [b'0', b'x' | b'X', ..] => (16, &body[2..]),
        [b'0', b'o' | b'O', ..] => (8, &body[2..]),
        [b'0', b'b' | b'B', ..] => (2, &body[2..]),
        [b'0', _, ..] => (8, &body[1..]),
        _ => (10, body),
    };
    if digits.is_empty() || !digits.bytes().all(|b| (b as char).is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if neg {
        if magnitude <= i64::MAX as u64 {
            Some(Scalar::Int(-(magnitude as i64)))
        } else if magnitude == i64::MAX as u64 + 1 {
            Some(Scalar::Int(i64::MIN))
        } else {
            None
        }
    } else if let Ok(i) = i64::try_from(magnitude) {
        Some(Scalar::Int(i))
    } else if s.starts_with('+') {
        // `ParseUint` takes no sign.
        None
    } else {
        Some(Scalar::Uint(magnitude))
    }
}

/// go-yaml's float pattern: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_decimal_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// The shapes go-yaml accepts as timestamps: `YYYY-M-D`, optionally followed by a time.
fn looks_like_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 8 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_1_1_scalars_and_key_conversion_follow_helm() {
        let v = from_str(
            "on: push\nyes: 1\nNo: 2\n1: int\n1.5: flt\n0x10: hex\noctal: 0644\nhex: 0x1F\n\
             eight: 08\nunder: 1_000\ndate: 2001-12-14\nbig: 18446744073709551615\n\
             neg: -0b101\nflt: 1e3\ndot: .5\nstr: !!str 123\nint: !!int \"42\"\n\
             b64: !!binary aGVsbG8=\ncustom: !foo bar\nq: \"yes\"\nempty:\nlit: |\n  x\n",
        )
        .expect("valid YAML");
        assert_eq!(
            v,
            json!({
                "true": 1, "false": 2, "1": "int", "1.5": "flt", "16": "hex", "octal": 420,
                "hex": 31, "eight": 8.0, "under": 1000, "date": "2001-12-14",
                "big": 18446744073709551615u64, "neg": -5, "flt": 1000.0, "dot": 0.5,
                "str": "123", "int": 42, "b64": "hello", "custom": "bar", "q": "yes",
                "empty": null, "lit": "x\n"
            })
        );
    }

    #[test]
    fn merge_keys_follow_go_yaml_v2_order() {
        // v2 writes merged entries over keys that came before `<<`.
        let v = from_str("a: &a {x: 1, k: 2}\nm:\n  k: 9\n  <<: *a\n  z: 3\nq:\n  \"<<\": *a\n")
            .expect("valid YAML");
        assert_eq!(v["m"], json!({"k": 2, "x": 1, "z": 3}));
        assert_eq!(v["q"], json!({"<<": {"x": 1, "k": 2}}));
        let seq =
            from_str("a: &a {x: 1}\nb: &b {x: 2, w: 2}\nm:\n  <<: [*a, *b]\n").expect("valid YAML");
        assert_eq!(seq["m"], json!({"x": 1, "w": 2}));
        assert!(from_str("a: &a 1\nm:\n  <<: *a\n").is_err());
    }

    #[test]
    fn refuses_what_json_cannot_hold() {
        for bad in [
            "a: .inf\n",
            "~: 1\n",
            "? [a]\n: 1\n",
            "18446744073709551615: 1\n",
            "a: !!int abc\n",
            "a: !!binary zzz\n",
            "kind: *x\n",
            "a: [\n",
        ] {
            assert!(from_str(bad).is_err(), "{bad:?} should fail");
        }
        assert_eq!(from_str("").ok(), Some(Value::Null));
        assert_eq!(from_str("# only a comment\n").ok(), Some(Value::Null));
        assert_eq!(from_str("a: 1\n...\nb: [\n").ok(), Some(json!({"a": 1})));
        assert_eq!(from_str("a: 1\na: 2\n").ok(), Some(json!({"a": 2})));
    }

    #[test]
    fn values_files_merge_their_documents() {
        let v = values_from_str("a: {x: 1}\n---\na: {z: 2}\nb: [1]\n--- # c\nb: [2]\n")
            .expect("valid values");
        assert_eq!(Value::Object(v), json!({"a": {"x": 1, "z": 2}, "b": [2]}));
        assert!(values_from_str("a: 1\n--- b: 2\n").is_err());
        assert!(values_from_str("- 1\n").is_err());
        assert_eq!(values_from_str("--- \n# c\n---\n").ok(), Some(Map::new()));
    }

    #[test]
    fn head_reads_what_helm_reads_and_checks_the_rest() {
        let doc = "apiVersion: v1\nKind: Pod\nkind: Job\nmetadata:\n  name: 5\n  annotations:\n    \
                   helm.sh/hook: pre-install\n    helm.sh/hook-weight: 5\nspec:\n  x: [1, {a: b}]\n";
        let want = Head {
            kind: "Job".into(),
            hook: Some("pre-install".into()),
        };
        assert_eq!(head(doc), Ok(want.clone()));
        assert_eq!(head_of(&from_str(doc).unwrap_or_default()), Ok(want));
        assert_eq!(head("# comment only\n"), Ok(Head::default()));
        assert_eq!(head("kind: 5\n").map(|h| h.kind), Ok("5".into()));
        assert_eq!(
            head("a: &x {k: v}\nkind: Secret\nb: *x\n").map(|h| h.kind),
            Ok("Secret".into())
        );
        for bad in [
            "foo\n",
            "[1]\n",
            "metadata: x\n",
            "kind: [a]\n",
            "spec: {a: .nan}\n",
            "spec:\n  - ~: 1\n",
            "metadata:\n  annotations:\n    a: [1]\n",
        ] {
            assert!(head(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_get_go_yaml_s_reader_messages() {
        let message = |b: &[u8]| utf8(&crate::render::bytes::from_bytes(b)).err();
        for (bad, problem) in [
            (&b"a: \xFF"[..], "invalid leading UTF-8 octet"),
            (b"a: \x80", "invalid leading UTF-8 octet"),
            (b"a: \xE2\x82", "incomplete UTF-8 octet sequence"),
            (b"a: \xE2\x82\n", "invalid trailing UTF-8 octet"),
            (b"a: \xC0\xAF", "invalid length of a UTF-8 sequence"),
            (b"a: \xED\xA0\x80", "invalid Unicode character"),
            (b"a: \xF5\x80\x80\x80", "invalid Unicode character"),
        ] {
            assert_eq!(message(bad), Some(format!("yaml: {problem}")), "{bad:x?}");
        }
        assert_eq!(message("a: é".as_bytes()), None);
        assert!(matches!(utf8("plain"), Ok(Cow::Borrowed("plain"))));
    }
}
