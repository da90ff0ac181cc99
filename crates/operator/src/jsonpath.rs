//! JSONPath as Δ-controller's specs write it: the dialect of ohler55/ojg's `jp`, which upstream
//! evaluates with, in the part operator specs use.
//!
//! Written here rather than taken from a crate: the RFC 9535 crates have no setter, which
//! `@project` keys (`"$.metadata.annotations.x": ...`), `@unwind` and `@gather` need, and they
//! refuse the dotted names with `-` and `/` that specs use
//! (`$.metadata.annotations.primary-port`).
//!
//! Supported: `$`, `.name` (any characters up to the next `.` or `[`), `['name']` and
//! `["name"]` (comma-separated for several), `[n]` (negative from the end), `[a,b]`,
//! `[start:end:step]`, `*` and `[*]`, `..` (descent), and filters `[?(...)]` with `@`-relative
//! and `$`-rooted paths, literals, `==`, `!=`, `<`, `<=`, `>`, `>=`, `&&`, `||`, `!` and
//! parentheses. A get returns the first match, as upstream does.

use std::fmt;

use serde_json::{Map, Value};

/// A parse or set error, naming the path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("JSONPath {path:?}: {reason}")]
pub struct PathError {
    pub path: String,
    pub reason: String,
}

/// A parsed JSONPath, rooted at `$`.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Child(String),
    Children(Vec<String>),
    Index(i64),
    Indexes(Vec<i64>),
    Slice(Option<i64>, Option<i64>, i64),
    Wildcard,
    /// `..` followed by the segment it selects at every depth.
    Descend(Box<Segment>),
    Filter(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
enum Filter {
    Or(Box<Filter>, Box<Filter>),
    And(Box<Filter>, Box<Filter>),
    Not(Box<Filter>),
    Compare(Operand, Cmp, Operand),
    /// A bare operand: true when it selects something (a path) or is truthy (a literal).
    Test(Operand),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `@...`: relative to the element under test.
    Current(Vec<Segment>),
    /// `$...`: the document's root.
    Root(Vec<Segment>),
    Literal(Value),
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl JsonPath {
    /// Parses a path that starts with `$`.
    pub fn parse(text: &str) -> Result<JsonPath, PathError> {
        let err = |reason: String| PathError {
            path: text.to_owned(),
            reason,
        };
        // Upstream reads `$.` as the root itself.
        let body = match text.strip_prefix('$') {
            Some(".") => "",
            Some(rest) => rest,
            None => return Err(err("a path starts with `$`".into())),
        };
        let mut parser = Parser {
            chars: body.chars().collect(),
            at: 0,
            depth: 0,
        };
        let segments = parser.segments(false).map_err(err)?;
        if parser.at != parser.chars.len() {
            return Err(err(format!("unexpected {:?}", parser.rest())));
        }
        Ok(JsonPath {
            text: text.to_owned(),
            segments,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True for `$` itself.
    pub fn is_root(&self) -> bool {
        self.segments.is_empty()
    }

    /// The first segment when it names one child (`$.Kind...`), for subjects whose top level is
    /// a set of documents.
    pub fn first_child(&self) -> Option<&str> {
        match self.segments.first() {
            Some(Segment::Child(name)) => Some(name),
            _ => None,
        }
    }

    /// The first value the path selects in `root`.
    pub fn get<'v>(&self, root: &'v Value) -> Option<&'v Value> {
        first(&self.segments, root, root)
    }

    /// The first value the path below its first segment selects in `doc` (see `first_child`).
    pub fn get_below_first<'v>(&self, doc: &'v Value) -> Option<&'v Value> {
        first(&self.segments[1..], doc, doc)
    }

    /// Every value the path selects, in document order.
    pub fn get_all<'v>(&self, root: &'v Value) -> Vec<&'v Value> {
        let mut out = Vec::new();
        all(&self.segments, root, root, &mut out);
        out
    }

    /// Writes `value` where the path points, creating the maps (and lists, for an index) on
    /// the way. Wildcards and filters write every element they select.
    pub fn set(&self, root: &mut Value, value: Value) -> Result<(), PathError> {
        if self.segments.is_empty() {
            *root = value;
            return Ok(());
        }
        let snapshot = if self.segments.iter().any(uses_root) {
            Some(root.clone())
        } else {
            None
        };
        let doc_root = snapshot.as_ref();
        set_at(&self.segments, root, &value, doc_root).map_err(|reason| PathError {
            path: self.text.clone(),
            reason,
        })
    }
}

fn uses_root(segment: &Segment) -> bool {
    match segment {
        Segment::Filter(f) => filter_uses_root(f),
        Segment::Descend(inner) => uses_root(inner),
        _ => false,
    }
}

fn filter_uses_root(f: &Filter) -> bool {
    match f {
        Filter::Or(a, b) | Filter::And(a, b) => filter_uses_root(a) || filter_uses_root(b),
        Filter::Not(a) => filter_uses_root(a),
        Filter::Compare(a, _, b) => matches!(a, Operand::Root(_)) || matches!(b, Operand::Root(_)),
        Filter::Test(a) => matches!(a, Operand::Root(_)),
    }
}

// ---- parsing ----

struct Parser {
    chars: Vec<char>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.at).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.at + offset).copied()
    }

    fn rest(&self) -> String {
        self.chars[self.at..].iter().collect()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.at += 1;
        }
    }

    /// Segments up to the end, or (inside a filter) up to an operator or `)`.
    fn segments(&mut self, in_filter: bool) -> Result<Vec<Segment>, String> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                Some('.') => {
                    self.at += 1;
                    if self.eat('.') {
                        let inner = match self.peek() {
                            Some('[') => {
                                self.at += 1;
                                self.bracket()?
                            }
                            _ => self.dot_name(in_filter)?,
                        };
                        out.push(Segment::Descend(Box::new(inner)));
                    } else {
                        out.push(self.dot_name(in_filter)?);
                    }
                }
                Some('[') => {
                    self.at += 1;
                    out.push(self.bracket()?);
                }
                _ => return Ok(out),
            }
        }
    }

    fn dot_name(&mut self, in_filter: bool) -> Result<Segment, String> {
        let start = self.at;
        while let Some(c) = self.peek() {
            let stop =
                c == '.' || c == '[' || (in_filter && (c.is_whitespace() || "=!<>&|)".contains(c)));
            if stop {
                break;
            }
            self.at += 1;
        }
        let name: String = self.chars[start..self.at].iter().collect();
        match name.as_str() {
            "" => Err("empty name after `.`".into()),
            "*" => Ok(Segment::Wildcard),
            _ => Ok(Segment::Child(name)),
        }
    }

    fn bracket(&mut self) -> Result<Segment, String> {
        self.skip_ws();
        let segment = match self.peek() {
            Some('*') => {
                self.at += 1;
                Segment::Wildcard
            }
            Some('?') => {
                self.at += 1;
                self.skip_ws();
                let filter = self.filter_or()?;
                Segment::Filter(Box::new(filter))
            }
            Some('\'' | '"') => {
                let mut names = vec![self.quoted()?];
                loop {
                    self.skip_ws();
                    if !self.eat(',') {
                        break;
                    }
                    self.skip_ws();
                    names.push(self.quoted()?);
                }
                if names.len() == 1 {
                    Segment::Child(names.remove(0))
                } else {
                    Segment::Children(names)
                }
            }
            _ => self.numbers()?,
        };
        self.skip_ws();
        if !self.eat(']') {
            return Err(format!("expected `]` at {:?}", self.rest()));
        }
        Ok(segment)
    }

    fn quoted(&mut self) -> Result<String, String> {
        let quote = self.peek().ok_or("unterminated string")?;
        self.at += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err("unterminated string".into()),
                Some('\\') => {
                    self.at += 1;
                    let c = self.peek().ok_or("unterminated string")?;
                    out.push(c);
                    self.at += 1;
                }
                Some(c) if c == quote => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(c) => {
                    out.push(c);
                    self.at += 1;
                }
            }
        }
    }

    fn int(&mut self) -> Result<Option<i64>, String> {
        self.skip_ws();
        let start = self.at;
        if self.peek() == Some('-') {
            self.at += 1;
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.at += 1;
        }
        let text: String = self.chars[start..self.at].iter().collect();
        self.skip_ws();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse()
            .map(Some)
            .map_err(|_| format!("{text:?} is not an index"))
    }

    fn numbers(&mut self) -> Result<Segment, String> {
        let first = self.int()?;
        if self.eat(':') {
            let end = self.int()?;
            let step = if self.eat(':') {
                self.int()?.unwrap_or(1)
            } else {
                1
            };
            if step == 0 {
                return Err("a slice's step is not 0".into());
            }
            return Ok(Segment::Slice(first, end, step));
        }
        let first = first.ok_or_else(|| format!("unexpected {:?} in `[]`", self.rest()))?;
        let mut all = vec![first];
        while self.eat(',') {
            all.push(self.int()?.ok_or("expected an index after `,`")?);
        }
        Ok(if all.len() == 1 {
            Segment::Index(first)
        } else {
            Segment::Indexes(all)
        })
    }

    fn filter_or(&mut self) -> Result<Filter, String> {
        let mut left = self.filter_and()?;
        loop {
            self.skip_ws();
            if self.peek() == Some('|') && self.peek_at(1) == Some('|') {
                self.at += 2;
                let right = self.filter_and()?;
                left = Filter::Or(Box::new(left), Box::new(right));
            } else {
                return Ok(left);
            }
        }
    }

    fn filter_and(&mut self) -> Result<Filter, String> {
        let mut left = self.filter_unary()?;
        loop {
            self.skip_ws();
            if self.peek() == Some('&') && self.peek_at(1) == Some('&') {
                self.at += 2;
                let right = self.filter_unary()?;
                left = Filter::And(Box::new(left), Box::new(right));
            } else {
                return Ok(left);
            }
        }
    }

    fn filter_unary(&mut self) -> Result<Filter, String> {
        self.depth += 1;
        if self.depth > crate::limits::MAX_FILTER_DEPTH {
            return Err(format!(
                "a filter nested deeper than {} levels",
                crate::limits::MAX_FILTER_DEPTH
            ));
        }
        let out = self.filter_unary_inner();
        self.depth -= 1;
        out
    }

    fn filter_unary_inner(&mut self) -> Result<Filter, String> {
        self.skip_ws();
        if self.peek() == Some('!') && self.peek_at(1) != Some('=') {
            self.at += 1;
            return Ok(Filter::Not(Box::new(self.filter_unary()?)));
        }
        if self.eat('(') {
            let inner = self.filter_or()?;
            self.skip_ws();
            if !self.eat(')') {
                return Err(format!("expected `)` at {:?}", self.rest()));
            }
            return Ok(inner);
        }
        let left = self.operand()?;
        self.skip_ws();
        let cmp = match (self.peek(), self.peek_at(1)) {
            (Some('='), Some('=')) => Some((Cmp::Eq, 2)),
            (Some('!'), Some('=')) => Some((Cmp::Ne, 2)),
            (Some('<'), Some('=')) => Some((Cmp::Le, 2)),
            (Some('>'), Some('=')) => Some((Cmp::Ge, 2)),
            (Some('<'), _) => Some((Cmp::Lt, 1)),
            (Some('>'), _) => Some((Cmp::Gt, 1)),
            _ => None,
        };
        match cmp {
            Some((cmp, width)) => {
                self.at += width;
                let right = self.operand()?;
                Ok(Filter::Compare(left, cmp, right))
            }
            None => Ok(Filter::Test(left)),
        }
    }

    fn operand(&mut self) -> Result<Operand, String> {
        self.skip_ws();
        match self.peek() {
            Some('@') => {
                self.at += 1;
                Ok(Operand::Current(self.segments(true)?))
            }
            Some('$') => {
                self.at += 1;
                Ok(Operand::Root(self.segments(true)?))
            }
            Some('\'' | '"') => Ok(Operand::Literal(Value::String(self.quoted()?))),
            _ => {
                let start = self.at;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || "-+._".contains(c))
                {
                    self.at += 1;
                }
                let word: String = self.chars[start..self.at].iter().collect();
                let value = match word.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    "null" => Value::Null,
                    _ => serde_json::from_str::<serde_json::Number>(&word)
                        .map(Value::Number)
                        .map_err(|_| format!("unexpected {:?} in a filter", self.rest()))?,
                };
                Ok(Operand::Literal(value))
            }
        }
    }
}

// ---- reading ----

fn index_of(len: usize, i: i64) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let i = if i < 0 { len + i } else { i };
    (0..len)
        .contains(&i)
        .then(|| usize::try_from(i).ok())
        .flatten()
}

fn slice_indexes(len: usize, start: Option<i64>, end: Option<i64>, step: i64) -> Vec<usize> {
    let n = i64::try_from(len).unwrap_or(i64::MAX);
    let norm = |i: i64| if i < 0 { (n + i).max(0) } else { i.min(n) };
    let mut out = Vec::new();
    if step > 0 {
        let (mut i, stop) = (norm(start.unwrap_or(0)), norm(end.unwrap_or(n)));
        while i < stop {
            out.extend(usize::try_from(i).ok());
            i += step;
        }
    } else {
        let mut i = start.map_or(n - 1, |s| if s < 0 { n + s } else { s.min(n - 1) });
        let stop = end.map_or(-1, |e| if e < 0 { (n + e).max(-1) } else { e });
        while i > stop {
            out.extend(usize::try_from(i).ok());
            i += step;
        }
    }
    out
}

/// The children one segment selects, in order.
fn children<'v>(segment: &Segment, node: &'v Value, root: &'v Value) -> Vec<&'v Value> {
    match (segment, node) {
        (Segment::Child(name), Value::Object(map)) => map.get(name).into_iter().collect(),
        (Segment::Children(names), Value::Object(map)) => {
            names.iter().filter_map(|n| map.get(n)).collect()
        }
        (Segment::Index(i), Value::Array(list)) => index_of(list.len(), *i)
            .map(|i| &list[i])
            .into_iter()
            .collect(),
        (Segment::Indexes(is), Value::Array(list)) => is
            .iter()
            .filter_map(|i| index_of(list.len(), *i).map(|i| &list[i]))
            .collect(),
        (Segment::Slice(s, e, step), Value::Array(list)) => {
            slice_indexes(list.len(), *s, *e, *step)
                .into_iter()
                .map(|i| &list[i])
                .collect()
        }
        (Segment::Wildcard, Value::Array(list)) => list.iter().collect(),
        (Segment::Wildcard, Value::Object(map)) => map.values().collect(),
        (Segment::Filter(f), Value::Array(list)) => {
            list.iter().filter(|v| test(f, v, root)).collect()
        }
        (Segment::Filter(f), Value::Object(map)) => {
            map.values().filter(|v| test(f, v, root)).collect()
        }
        (Segment::Descend(inner), _) => {
            let mut out = Vec::new();
            descend(inner, node, root, &mut out);
            out
        }
        _ => Vec::new(),
    }
}

fn descend<'v>(inner: &Segment, node: &'v Value, root: &'v Value, out: &mut Vec<&'v Value>) {
    out.extend(children(inner, node, root));
    match node {
        Value::Array(list) => list.iter().for_each(|v| descend(inner, v, root, out)),
        Value::Object(map) => map.values().for_each(|v| descend(inner, v, root, out)),
        _ => {}
    }
}

fn first<'v>(segments: &[Segment], node: &'v Value, root: &'v Value) -> Option<&'v Value> {
    let Some((head, tail)) = segments.split_first() else {
        return Some(node);
    };
    match (head, node) {
        // The common case, without building a list.
        (Segment::Child(name), Value::Object(map)) => first(tail, map.get(name)?, root),
        (Segment::Index(i), Value::Array(list)) => {
            first(tail, &list[index_of(list.len(), *i)?], root)
        }
        _ => children(head, node, root)
            .into_iter()
            .find_map(|child| first(tail, child, root)),
    }
}

fn all<'v>(segments: &[Segment], node: &'v Value, root: &'v Value, out: &mut Vec<&'v Value>) {
    let Some((head, tail)) = segments.split_first() else {
        out.push(node);
        return;
    };
    for child in children(head, node, root) {
        all(tail, child, root, out);
    }
}

fn operand_value<'v>(op: &'v Operand, current: &'v Value, root: &'v Value) -> Option<&'v Value> {
    match op {
        Operand::Current(segments) => first(segments, current, root),
        Operand::Root(segments) => first(segments, root, root),
        Operand::Literal(v) => Some(v),
    }
}

fn test(f: &Filter, current: &Value, root: &Value) -> bool {
    match f {
        Filter::Or(a, b) => test(a, current, root) || test(b, current, root),
        Filter::And(a, b) => test(a, current, root) && test(b, current, root),
        Filter::Not(a) => !test(a, current, root),
        Filter::Test(op) => match operand_value(op, current, root) {
            None | Some(Value::Null | Value::Bool(false)) => false,
            Some(_) => true,
        },
        Filter::Compare(a, cmp, b) => {
            let (Some(a), Some(b)) = (
                operand_value(a, current, root),
                operand_value(b, current, root),
            ) else {
                // A missing side equals nothing and differs from everything.
                return *cmp == Cmp::Ne;
            };
            compare(a, *cmp, b)
        }
    }
}

fn compare(a: &Value, cmp: Cmp, b: &Value) -> bool {
    let order = match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .zip(y.as_f64())
            .and_then(|(x, y)| x.partial_cmp(&y)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    };
    match cmp {
        Cmp::Eq => order.map_or(a == b, |o| o.is_eq()),
        Cmp::Ne => order.map_or(a != b, |o| o.is_ne()),
        Cmp::Lt => order.is_some_and(|o| o.is_lt()),
        Cmp::Le => order.is_some_and(|o| o.is_le()),
        Cmp::Gt => order.is_some_and(|o| o.is_gt()),
        Cmp::Ge => order.is_some_and(|o| o.is_ge()),
    }
}

// ---- writing ----

fn set_at(
    segments: &[Segment],
    node: &mut Value,
    value: &Value,
    root: Option<&Value>,
) -> Result<(), String> {
    let Some((head, tail)) = segments.split_first() else {
        *node = value.clone();
        return Ok(());
    };
    match head {
        Segment::Child(name) => {
            let map = as_map(node, name)?;
            let child = map.entry(name.clone()).or_insert(Value::Null);
            set_at(tail, child, value, root)
        }
        Segment::Children(names) => {
            for name in names {
                let map = as_map(node, name)?;
                let child = map.entry(name.clone()).or_insert(Value::Null);
                set_at(tail, child, value, root)?;
            }
            Ok(())
        }
        Segment::Index(i) => {
            if node.is_null() {
                *node = Value::Array(Vec::new());
            }
            let Value::Array(list) = node else {
                return Err(format!("[{i}] of a value that is not a list"));
            };
            let at = if *i < 0 {
                index_of(list.len(), *i).ok_or_else(|| format!("[{i}] is out of range"))?
            } else {
                let at = usize::try_from(*i).map_err(|_| format!("[{i}] is out of range"))?;
                if at > crate::limits::MAX_SET_INDEX {
                    return Err(format!(
                        "[{i}] is past the {} a path may set",
                        crate::limits::MAX_SET_INDEX
                    ));
                }
                if at >= list.len() {
                    list.resize(at + 1, Value::Null);
                }
                at
            };
            set_at(tail, &mut list[at], value, root)
        }
        Segment::Indexes(_) | Segment::Slice(..) | Segment::Wildcard | Segment::Filter(_) => {
            let empty = Value::Null;
            let root = root.unwrap_or(&empty);
            match node {
                Value::Array(list) => {
                    let picked: Vec<usize> = match head {
                        Segment::Indexes(is) => {
                            is.iter().filter_map(|i| index_of(list.len(), *i)).collect()
                        }
                        Segment::Slice(s, e, step) => slice_indexes(list.len(), *s, *e, *step),
                        Segment::Filter(f) => (0..list.len())
                            .filter(|&i| test(f, &list[i], root))
                            .collect(),
                        _ => (0..list.len()).collect(),
                    };
                    for i in picked {
                        set_at(tail, &mut list[i], value, Some(root))?;
                    }
                    Ok(())
                }
                Value::Object(map) => {
                    for (_, child) in map.iter_mut() {
                        let hit = match head {
                            Segment::Filter(f) => test(f, child, root),
                            Segment::Wildcard => true,
                            _ => false,
                        };
                        if hit {
                            set_at(tail, child, value, Some(root))?;
                        }
                    }
                    Ok(())
                }
                _ => Ok(()),
            }
        }
        Segment::Descend(_) => Err("`..` cannot be written through".into()),
    }
}

fn as_map<'v>(node: &'v mut Value, name: &str) -> Result<&'v mut Map<String, Value>, String> {
    if node.is_null() {
        *node = Value::Object(Map::new());
    }
    match node {
        Value::Object(map) => Ok(map),
        other => Err(format!(
            "cannot set {name:?} in a {}",
            crate::value::type_name(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn get(path: &str, doc: &Value) -> Option<Value> {
        JsonPath::parse(path).expect("parses").get(doc).cloned()
    }

    #[test]
    fn dotted_names_keep_dashes_and_slashes() {
        let doc = json!({"metadata": {"annotations": {"primary-port": "https", "a.b/c": 1}}});
        assert_eq!(
            get("$.metadata.annotations.primary-port", &doc),
            Some(json!("https"))
        );
        assert_eq!(
            get("$['metadata']['annotations']['a.b/c']", &doc),
            Some(json!(1))
        );
        assert_eq!(
            get("$[\"metadata\"].annotations['a.b/c']", &doc),
            Some(json!(1))
        );
        assert_eq!(get("$.metadata.missing", &doc), None);
    }

    #[test]
    fn indexes_slices_and_wildcards() {
        let doc = json!({"a": [1, 2, 3, 4]});
        assert_eq!(get("$.a[2]", &doc), Some(json!(3)));
        assert_eq!(get("$.a[-1]", &doc), Some(json!(4)));
        assert_eq!(get("$.a[9]", &doc), None);
        let p = JsonPath::parse("$.a[1:3]").expect("parses");
        assert_eq!(p.get_all(&doc), vec![&json!(2), &json!(3)]);
        let p = JsonPath::parse("$.a[::-2]").expect("parses");
        assert_eq!(p.get_all(&doc), vec![&json!(4), &json!(2)]);
        assert_eq!(get("$.a[*]", &doc), Some(json!(1)));
        assert_eq!(get("$.", &doc), Some(doc.clone()));
        assert_eq!(get("$", &doc), Some(doc.clone()));
    }

    #[test]
    fn filters_select_by_field() {
        let doc = json!({"status": {"conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "False"}]}});
        assert_eq!(
            get("$.status.conditions[?(@.type=='Ready')].status", &doc),
            Some(json!("False"))
        );
        assert_eq!(
            get(
                "$.status.conditions[?(@.type == \"Ready\" || @.type=='x')].type",
                &doc
            ),
            Some(json!("Ready"))
        );
        assert_eq!(get("$.status.conditions[?(@.missing)].type", &doc), None);
        assert_eq!(
            get("$.status.conditions[?(!(@.status=='True'))].type", &doc),
            Some(json!("Ready"))
        );
        let doc = json!({"ports": [{"port": 80}, {"port": 443}]});
        assert_eq!(get("$.ports[?(@.port > 100)].port", &doc), Some(json!(443)));
        assert_eq!(get("$..port", &doc), Some(json!(80)));
    }

    #[test]
    fn set_creates_maps_and_writes_filtered_elements() {
        let mut doc = json!({});
        JsonPath::parse("$.metadata.annotations.x")
            .expect("parses")
            .set(&mut doc, json!("1"))
            .expect("sets");
        assert_eq!(doc, json!({"metadata": {"annotations": {"x": "1"}}}));
        let mut doc =
            json!({"spec": {"a": [{"name": "l1", "port": 1}, {"name": "l2", "port": 2}]}});
        JsonPath::parse("$.spec.a[?(@.name=='l2')].port")
            .expect("parses")
            .set(&mut doc, json!(123))
            .expect("sets");
        assert_eq!(doc["spec"]["a"][1]["port"], json!(123));
        assert_eq!(doc["spec"]["a"][0]["port"], json!(1));
        let mut doc = json!({"a": "text"});
        let e = JsonPath::parse("$.a.b")
            .expect("parses")
            .set(&mut doc, json!(1));
        assert!(e.expect_err("refused").reason.contains("string"));
    }

    #[test]
    fn bad_paths_are_named() {
        for bad in ["metadata.name", "$.a[", "$.a[?(@.x==)]", "$.a..", "$.a['x"] {
            let e = JsonPath::parse(bad).expect_err(bad);
            assert_eq!(e.path, bad);
        }
    }
}
