//! A quick reader for the plain block YAML that values files and rendered manifests are
//! almost always written in: block mappings and sequences by indentation, one-line plain and
//! quoted scalars, literal blocks (`|`), empty `[]`/`{}`, comments.
//!
//! It yields the same events `granit-parser` would, about ten times faster, and gives up
//! (returns `None`) on anything else — anchors, tags, flow collections, folded or multi-line
//! scalars, tabs in indentation, unusual characters, and every syntax error — so the full
//! parser handles those and reports errors. Written by hand because no crate offers a fast
//! path for this subset; keeping the subset small keeps it checkable.

use granit_parser::{Event, ScalarStyle, StructureStyle};
use std::borrow::Cow;

/// Longest implicit key YAML allows.
const MAX_KEY: usize = 1024;

/// The events of `text` (one document), or `None` when the quick reader does not handle it.
#[cfg(test)]
pub(super) fn events(text: &str) -> Option<Vec<Event<'_>>> {
    Events::new(text)?
        .collect::<Result<Vec<_>, Unsupported>>()
        .ok()
}

/// The quick reader met something it leaves to the full parser.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Unsupported;

/// The events of one document, read a line at a time; an [`Unsupported`] item means the
/// caller must start over with the full parser.
pub(super) struct Events<'a> {
    r: Reader<'a>,
    /// Next unread event in `r.out`.
    pos: usize,
    stage: Stage,
}

enum Stage {
    Start,
    Lines,
    Done,
}

impl<'a> Events<'a> {
    pub(super) fn new(text: &'a str) -> Option<Self> {
        if text.contains('\r') {
            return None;
        }
        let mut lines = Vec::with_capacity(text.len() / 24 + 1);
        let mut start = 0;
        while start < text.len() {
            let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
            lines.push((start, end));
            start = end + 1;
        }
        Some(Events {
            r: Reader {
                text,
                lines,
                next: 0,
                out: Vec::with_capacity(16),
                stack: Vec::new(),
                pending: Pending::None,
                root: false,
            },
            pos: 0,
            stage: Stage::Start,
        })
    }
}

impl<'a> Iterator for Events<'a> {
    type Item = Result<Event<'a>, Unsupported>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.pos < self.r.out.len() {
                let ev = std::mem::replace(&mut self.r.out[self.pos], Event::StreamEnd);
                self.pos += 1;
                return Some(Ok(ev));
            }
            self.r.out.clear();
            self.pos = 0;
            match self.stage {
                Stage::Start => {
                    self.r.out.push(Event::StreamStart);
                    self.stage = Stage::Lines;
                }
                Stage::Lines => match self.r.step() {
                    Some(true) => {}
                    Some(false) => {
                        self.r.finish();
                        self.r.out.push(Event::StreamEnd);
                        self.stage = Stage::Done;
                    }
                    None => {
                        self.stage = Stage::Done;
                        return Some(Err(Unsupported));
                    }
                },
                Stage::Done => return None,
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Map,
    Seq,
}

struct Frame {
    indent: usize,
    kind: Kind,
}

/// A node whose value starts on a later line (or is null).
#[derive(Clone, Copy)]
enum Pending {
    None,
    /// After `key:` at this indent.
    MapValue(usize),
    /// After a bare `-` at this column.
    SeqItem(usize),
}

struct Reader<'a> {
    text: &'a str,
    /// Byte ranges of the lines, without their `\n`.
    lines: Vec<(usize, usize)>,
    next: usize,
    out: Vec<Event<'a>>,
    stack: Vec<Frame>,
    pending: Pending,
    /// Whether the root node has started.
    root: bool,
}

fn scalar(text: Cow<'_, str>, style: ScalarStyle) -> Event<'_> {
    Event::Scalar(text, style, 0, None)
}

impl<'a> Reader<'a> {
    /// Reads the next line: `Some(true)` while lines remain, `Some(false)` at the end,
    /// `None` when the quick reader gives up.
    fn step(&mut self) -> Option<bool> {
        let Some(&(start, end)) = self.lines.get(self.next) else {
            return Some(false);
        };
        self.next += 1;
        let line = &self.text[start..end];
        let rest = line.trim_start_matches(' ');
        let indent = line.len() - rest.len();
        if rest.starts_with('\t') {
            // Tabs may only separate, never indent: fine on blank and comment lines.
            let r = rest.trim_start_matches([' ', '\t']);
            return (r.is_empty() || r.starts_with('#')).then_some(true);
        }
        if rest.is_empty() || rest.starts_with('#') {
            return Some(true);
        }
        if indent == 0
            && (rest.starts_with("---") || rest.starts_with("...") || rest.starts_with('%'))
        {
            return None;
        }
        self.content_line(indent, rest)?;
        Some(true)
    }

    /// Closes what is open at the end of the document.
    fn finish(&mut self) {
        if !self.root {
            return;
        }
        if !matches!(self.pending, Pending::None) {
            self.out
                .push(scalar(Cow::Borrowed("~"), ScalarStyle::Plain));
        }
        while let Some(f) = self.stack.pop() {
            self.end(f.kind);
        }
        self.out.push(Event::DocumentEnd);
    }

    fn start(&mut self, kind: Kind, indent: usize) {
        if !self.root {
            self.root = true;
            self.out.push(Event::DocumentStart(false, None));
        }
        self.out.push(match kind {
            Kind::Map => Event::MappingStart(StructureStyle::Block, 0, None),
            Kind::Seq => Event::SequenceStart(StructureStyle::Block, 0, None),
        });
        self.stack.push(Frame { indent, kind });
    }

    fn end(&mut self, kind: Kind) {
        self.out.push(match kind {
            Kind::Map => Event::MappingEnd,
            Kind::Seq => Event::SequenceEnd,
        });
    }

    fn content_line(&mut self, indent: usize, rest: &'a str) -> Option<()> {
        let dash = rest == "-" || rest.starts_with("- ");
        let pending = std::mem::replace(&mut self.pending, Pending::None);
        let nested = match pending {
            Pending::None => None,
            // A sequence may sit at its key's indent; anything else must be deeper.
            Pending::MapValue(p) if (dash && indent >= p) || (!dash && indent > p) => Some(()),
            Pending::SeqItem(p) if indent > p => Some(()),
            _ => {
                self.out
                    .push(scalar(Cow::Borrowed("~"), ScalarStyle::Plain));
                None
            }
        };
        if nested.is_some() {
            self.start(if dash { Kind::Seq } else { Kind::Map }, indent);
        } else {
            while let Some(top) = self.stack.last() {
                if top.indent > indent || (top.kind == Kind::Seq && top.indent == indent && !dash) {
                    let kind = top.kind;
                    self.stack.pop();
                    self.end(kind);
                } else {
                    break;
                }
            }
            match self.stack.last() {
                None if self.root => return None,
                None => self.start(if dash { Kind::Seq } else { Kind::Map }, indent),
                Some(top) => {
                    if top.indent != indent || (top.kind == Kind::Seq) != dash {
                        return None;
                    }
                }
            }
        }
        if dash {
            let after = &rest[1..];
            let item = after.trim_start_matches(' ');
            if item.is_empty() || item.starts_with('#') {
                self.pending = Pending::SeqItem(indent);
                return Some(());
            }
            if item.starts_with('\t') || item == "-" || item.starts_with("- ") {
                return None;
            }
            let col = indent + 1 + (after.len() - item.len());
            if let Some((key, value)) = mapping_entry(item)? {
                self.start(Kind::Map, col);
                self.out.push(key);
                return self.value(col, value);
            }
            return self.scalar_value(item, indent);
        }
        let (key, value) = mapping_entry(rest)??;
        self.out.push(key);
        self.value(indent, value)
    }

    /// The value after `key:` (at `indent`): inline, or pending until the next line.
    fn value(&mut self, indent: usize, after_colon: &'a str) -> Option<()> {
        let v = after_colon.trim_start_matches(' ');
        if v.starts_with('\t') {
            return None;
        }
        if v.is_empty() || v.starts_with('#') {
            self.pending = Pending::MapValue(indent);
            return Some(());
        }
        self.scalar_value(v, indent)
    }

    /// An inline value; `parent` is the indent a literal block's lines must exceed.
    fn scalar_value(&mut self, v: &'a str, parent: usize) -> Option<()> {
        let (event, rest) = match v.as_bytes()[0] {
            b'"' => double_quoted(v)?,
            b'\'' => single_quoted(v)?,
            b'|' => return self.literal(&v[1..], parent),
            b'[' | b'{' => {
                let mut events = Vec::new();
                let rest = flow(v, &mut events, 0)?;
                if !is_trailer(rest) {
                    return None;
                }
                self.out.extend(events);
                return Some(());
            }
            _ => {
                let text = plain(v)?;
                if text.contains(": ") || text.contains(":\t") || text.ends_with(':') {
                    return None;
                }
                (scalar(Cow::Borrowed(text), ScalarStyle::Plain), "")
            }
        };
        if !is_trailer(rest) {
            return None;
        }
        self.out.push(event);
        Some(())
    }

    /// A literal block scalar (`|`, `|-`, `|+`) whose header follows `|` in `header`; its
    /// lines are those after the current one indented more than `parent`.
    fn literal(&mut self, header: &str, parent: usize) -> Option<()> {
        let (chomp, rest) = match header.as_bytes().first() {
            Some(b'-') => (Chomp::Strip, &header[1..]),
            Some(b'+') => (Chomp::Keep, &header[1..]),
            _ => (Chomp::Clip, header),
        };
        let trimmed = rest.trim_start_matches(' ');
        if !(trimmed.is_empty() || (trimmed.starts_with('#') && trimmed.len() < rest.len())) {
            return None;
        }
        // The content indent is that of the first non-empty line.
        let mut indent = None;
        for &(s, e) in &self.lines[self.next..] {
            let line = &self.text[s..e];
            let body = line.trim_start_matches(' ');
            if !body.is_empty() {
                if body.starts_with('\t') {
                    return None;
                }
                indent = Some(line.len() - body.len());
                break;
            }
        }
        let m = match indent {
            Some(m) if m > parent => m,
            // No content: the scalar is empty (and the next line belongs to the parent).
            _ if chomp == Chomp::Keep => return None,
            _ => {
                self.out
                    .push(scalar(Cow::Borrowed(""), ScalarStyle::Literal));
                return Some(());
            }
        };
        let mut value = String::new();
        let mut empties = 0usize;
        let mut last_break = false;
        let mut trailing_breaks = 0usize;
        while self.next < self.lines.len() {
            let (s, e) = self.lines[self.next];
            let line = &self.text[s..e];
            let body = line.trim_start_matches(' ');
            let has_break = e < self.text.len();
            if body.is_empty() {
                if line.len() > m {
                    // Spaces beyond the indent would be content: leave that to the full parser.
                    return None;
                }
                empties += 1;
                if has_break {
                    trailing_breaks += 1;
                }
                self.next += 1;
                continue;
            }
            if line.len() - body.len() < m {
                break;
            }
            let content = &line[m..];
            if !printable(content) {
                return None;
            }
            if !value.is_empty() || empties > 0 {
                for _ in 0..empties + usize::from(!value.is_empty()) {
                    value.push('\n');
                }
            }
            value.push_str(content);
            empties = 0;
            trailing_breaks = 0;
            last_break = has_break;
            self.next += 1;
        }
        match chomp {
            Chomp::Strip => {}
            Chomp::Clip => {
                if last_break {
                    value.push('\n');
                }
            }
            Chomp::Keep => {
                if last_break {
                    value.push('\n');
                }
                for _ in 0..trailing_breaks {
                    value.push('\n');
                }
            }
        }
        self.out
            .push(scalar(Cow::Owned(value), ScalarStyle::Literal));
        Some(())
    }
}

/// Deepest flow nesting the quick reader follows.
const MAX_FLOW_DEPTH: usize = 16;

/// A one-line flow collection (`[a, "b", {c: d}]`) at the start of `v`: its events go to
/// `out`, and the text after it is returned.
fn flow<'a>(v: &'a str, out: &mut Vec<Event<'a>>, depth: usize) -> Option<&'a str> {
    if depth > MAX_FLOW_DEPTH {
        return None;
    }
    let map = v.starts_with('{');
    let close = if map { '}' } else { ']' };
    out.push(if map {
        Event::MappingStart(StructureStyle::Flow, 0, None)
    } else {
        Event::SequenceStart(StructureStyle::Flow, 0, None)
    });
    let mut rest = v[1..].trim_start_matches(' ');
    if let Some(after) = rest.strip_prefix(close) {
        out.push(if map {
            Event::MappingEnd
        } else {
            Event::SequenceEnd
        });
        return Some(after);
    }
    loop {
        if map {
            let (key, after) = flow_scalar(rest)?;
            out.push(key);
            rest = after.trim_start_matches(' ').strip_prefix(": ")?;
            rest = rest.trim_start_matches(' ');
        }
        rest = flow_item(rest, out, depth)?.trim_start_matches(' ');
        if let Some(after) = rest.strip_prefix(close) {
            out.push(if map {
                Event::MappingEnd
            } else {
                Event::SequenceEnd
            });
            return Some(after);
        }
        rest = rest.strip_prefix(',')?.trim_start_matches(' ');
        // A trailing comma or an empty entry is left to the full parser.
        if rest.starts_with([',', ']', '}']) || rest.is_empty() {
            return None;
        }
    }
}

/// One entry of a flow collection: a nested collection or a scalar.
fn flow_item<'a>(v: &'a str, out: &mut Vec<Event<'a>>, depth: usize) -> Option<&'a str> {
    if v.starts_with(['[', '{']) {
        return flow(v, out, depth + 1);
    }
    let (event, rest) = flow_scalar(v)?;
    // `[a: b]` is a one-pair mapping: not handled here.
    if rest.trim_start_matches(' ').starts_with(':') {
        return None;
    }
    out.push(event);
    Some(rest)
}

/// A scalar inside a flow collection: quoted, or plain up to `,`, `]`, `}` or `: `.
fn flow_scalar(v: &str) -> Option<(Event<'_>, &str)> {
    match v.as_bytes().first()? {
        b'"' => double_quoted(v),
        b'\'' => single_quoted(v),
        _ => {
            let b = v.as_bytes();
            let mut end = b.len();
            for (i, &c) in b.iter().enumerate() {
                match c {
                    b',' | b'[' | b']' | b'{' | b'}' | b'#' | b'\t' => {
                        end = i;
                        break;
                    }
                    b':' if matches!(b.get(i + 1), None | Some(b' ' | b',' | b']' | b'}')) => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            let text = v[..end].trim_end_matches(' ');
            if text.is_empty() || plain(text)? != text {
                return None;
            }
            Some((
                scalar(Cow::Borrowed(text), ScalarStyle::Plain),
                &v[text.len()..],
            ))
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Chomp {
    Clip,
    Strip,
    Keep,
}

/// What may follow a value on its line: spaces, then nothing or a comment.
fn is_trailer(rest: &str) -> bool {
    let t = rest.trim_start_matches([' ', '\t']);
    t.is_empty() || (t.starts_with('#') && t.len() < rest.len())
}

/// Whether YAML accepts every character of `s` in content (and the quick reader too: no
/// C0/C1 controls but tab, no byte-order mark, none of the YAML 1.1 line breaks).
fn printable(s: &str) -> bool {
    if s.is_ascii() {
        return s.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b));
    }
    s.chars().all(|c| {
        c == '\t'
            || (c >= ' ' && c != '\u{7f}' && !('\u{80}'..='\u{9f}').contains(&c))
                && !matches!(
                    c,
                    '\u{feff}' | '\u{2028}' | '\u{2029}' | '\u{fffe}' | '\u{ffff}'
                )
    })
}

/// A plain scalar at the start of `v` up to a comment, trailing spaces removed; `None` when
/// it could not start a plain scalar here or holds characters left to the full parser.
fn plain(v: &str) -> Option<&str> {
    let b = v.as_bytes();
    let first = b[0];
    let ok_first = first.is_ascii_alphanumeric()
        || matches!(
            first,
            b'/' | b'.'
                | b'_'
                | b'$'
                | b'('
                | b'~'
                | b'+'
                | b'='
                | b'^'
                | b';'
                | b'<'
                | b'\\'
                | b')'
        )
        || (first == b'-' && b.get(1).is_some_and(|c| !matches!(c, b' ' | b'\t')));
    if !ok_first {
        return None;
    }
    let mut end = v.len();
    for (i, w) in b.windows(2).enumerate() {
        if matches!(w[0], b' ' | b'\t') && w[1] == b'#' {
            end = i;
            break;
        }
    }
    let text = v[..end].trim_end_matches([' ', '\t']);
    printable(text).then_some(text)
}

/// If `s` is a `key: value` entry: the key's event and the text after the colon. `None`
/// inside means the quick reader cannot handle the line.
#[allow(clippy::type_complexity)]
fn mapping_entry(s: &str) -> Option<Option<(Event<'_>, &str)>> {
    let colon_after = |rest: &str| -> Option<usize> {
        let t = rest.trim_start_matches(' ');
        let b = t.as_bytes();
        (b.first() == Some(&b':') && matches!(b.get(1), None | Some(b' ')))
            .then_some(rest.len() - t.len())
    };
    match s.as_bytes()[0] {
        b'"' | b'\'' => {
            let (key, rest) = if s.starts_with('"') {
                double_quoted(s)?
            } else {
                single_quoted(s)?
            };
            Some(colon_after(rest).map(|i| (key, &rest[i + 1..])))
        }
        _ => {
            let b = s.as_bytes();
            let mut colon = None;
            for i in 0..b.len() {
                match b[i] {
                    b':' if matches!(b.get(i + 1), None | Some(b' ')) => {
                        colon = Some(i);
                        break;
                    }
                    b'#' if i > 0 && matches!(b[i - 1], b' ' | b'\t') => break,
                    _ => {}
                }
            }
            let Some(i) = colon else {
                return Some(None);
            };
            let key = s[..i].trim_end_matches(' ');
            if key.is_empty() || key.len() > MAX_KEY || key.contains('\t') {
                return None;
            }
            if plain(key)? != key {
                return None;
            }
            Some(Some((
                scalar(Cow::Borrowed(key), ScalarStyle::Plain),
                &s[i + 1..],
            )))
        }
    }
}

/// A one-line single-quoted scalar at the start of `v`, and the text after it.
fn single_quoted(v: &str) -> Option<(Event<'_>, &str)> {
    let b = v.as_bytes();
    let mut i = 1;
    let mut escaped = false;
    while i < b.len() {
        if b[i] == b'\'' {
            if b.get(i + 1) == Some(&b'\'') {
                escaped = true;
                i += 2;
                continue;
            }
            let inner = &v[1..i];
            if !printable(inner) {
                return None;
            }
            let text = if escaped {
                Cow::Owned(inner.replace("''", "'"))
            } else {
                Cow::Borrowed(inner)
            };
            return Some((scalar(text, ScalarStyle::SingleQuoted), &v[i + 1..]));
        }
        i += 1;
    }
    None
}

/// A one-line double-quoted scalar at the start of `v`, and the text after it.
fn double_quoted(v: &str) -> Option<(Event<'_>, &str)> {
    let b = v.as_bytes();
    let mut i = 1;
    let mut has_escape = false;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                has_escape = true;
                i += 2;
            }
            b'"' => {
                let inner = &v[1..i];
                if !printable(inner) {
                    return None;
                }
                let text = if has_escape {
                    Cow::Owned(unescape(inner)?)
                } else {
                    Cow::Borrowed(inner)
                };
                return Some((scalar(text, ScalarStyle::DoubleQuoted), &v[i + 1..]));
            }
            _ => i += 1,
        }
    }
    None
}

/// YAML's double-quoted escapes.
fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let hex = |chars: &mut std::str::Chars<'_>, n: usize| -> Option<char> {
            let digits: String = chars.by_ref().take(n).collect();
            if digits.len() != n {
                return None;
            }
            char::from_u32(u32::from_str_radix(&digits, 16).ok()?)
        };
        out.push(match chars.next()? {
            '0' => '\0',
            'a' => '\u{7}',
            'b' => '\u{8}',
            't' | '\t' => '\t',
            'n' => '\n',
            'v' => '\u{b}',
            'f' => '\u{c}',
            'r' => '\r',
            'e' => '\u{1b}',
            ' ' => ' ',
            '"' => '"',
            '/' => '/',
            '\\' => '\\',
            'N' => '\u{85}',
            '_' => '\u{a0}',
            'L' => '\u{2028}',
            'P' => '\u{2029}',
            'x' => hex(&mut chars, 2)?,
            'u' => hex(&mut chars, 4)?,
            'U' => hex(&mut chars, 8)?,
            _ => return None,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quick reader must produce exactly the full parser's events where it answers.
    fn same_as_granit(text: &str) {
        let fast = events(text);
        let mut options = granit_parser::Options::default();
        options.emit_comments = false;
        let full: Result<Vec<Event<'_>>, _> =
            granit_parser::Parser::new_from_str_with_options(text, options)
                .map(|r| r.map(|(ev, _)| ev))
                .collect();
        let Some(fast) = fast else {
            panic!("quick reader gave up on {text:?}");
        };
        assert_eq!(Some(fast), full.ok(), "for {text:?}");
    }

    #[test]
    fn matches_the_full_parser_on_block_yaml() {
        for text in [
            "a: 1\nb:\n  c: \"x\\ty\" # comment\n  d: 'it''s'\ne:\n- 1\n- k: v\n  k2: [] \n- {}\nf: -1\n",
            "# only a comment\n",
            "",
            "kind: Pod\nmetadata:\n  name: x\n  labels:\n    app.kubernetes.io/name: x\nspec:\n  containers:\n    - name: main\n      image: \"r/x:1\"\n      args:\n        - --flag=1\n",
            "a:\n  - x\n  -\n  - y\nb: ~\nc:\n",
            "data:\n  cfg: |\n    line 1\n\n      indented\n    # not a comment\n  next: |-\n    x\n\n  keep: |+\n    y\n\n\nz: 1\n",
            "url: http://a:b@host/x?y=1#frag\nempty: \"\"\nq: \"\\u00e9\\x41\"\n",
            "  indented: root\n  b: 2\n",
            "l: [1, \"two\", 'three', {a: b, c: [d]}, [], {}] # c\nm: {cpu: 200m, memory: 256Mi}\nn: [ a , b ]\n",
            "resources:\n  limits: {cpu: 200m, memory: 256Mi}\n  list: [http://a/b, x:y]\n",
            "- a\n- - b\n",
        ] {
            if text.contains("- - b") {
                assert!(events(text).is_none());
                continue;
            }
            same_as_granit(text);
        }
    }

    /// Whenever the quick reader answers, the full parser must agree: checked on every file
    /// of the test corpus and on many small mutations of them (deterministic).
    #[test]
    fn never_disagrees_with_the_full_parser() {
        fn files(dir: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = entry.path();
                if p.is_dir() {
                    files(&p, out);
                } else if let Ok(text) = std::fs::read_to_string(&p) {
                    out.push(text);
                }
            }
        }
        let mut corpus = Vec::new();
        files(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
            &mut corpus,
        );
        assert!(corpus.len() > 10, "test corpus not found");
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rand = move |n: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((seed >> 33) as usize) % n.max(1)
        };
        const EDITS: &[&str] = &[
            " ", "  ", "\n", "-", "- ", ":", ": ", "#", " #", "|", "|-", "'", "\"", "\\", "[]",
            "{}", "\t", "~", "a", "[", "]", "{", "}", ",", ", ", "[a, b]", "{k: v}",
        ];
        let mut checked = 0;
        for text in &corpus {
            let mut variants = vec![text.clone()];
            for _ in 0..200 {
                let mut t = text.clone();
                for _ in 0..1 + rand(3) {
                    let mut at = rand(t.len() + 1);
                    while !t.is_char_boundary(at) {
                        at -= 1;
                    }
                    if rand(2) == 0 {
                        t.insert_str(at, EDITS[rand(EDITS.len())]);
                    } else {
                        let mut end = (at + 1 + rand(3)).min(t.len());
                        while !t.is_char_boundary(end) {
                            end += 1;
                        }
                        t.replace_range(at..end, "");
                    }
                }
                // A literal block at the very end reads like go-yaml's (no final newline),
                // where the full parser adds one: keep that known difference out.
                if !t.ends_with('\n') {
                    t.push('\n');
                }
                variants.push(t);
            }
            for v in &variants {
                if events(v).is_some() {
                    same_as_granit(v);
                    checked += 1;
                }
            }
        }
        assert!(
            checked > 100,
            "only {checked} documents exercised the quick reader"
        );
    }

    #[test]
    fn gives_up_on_what_it_does_not_handle() {
        for text in [
            "a: &x 1\n",
            "a: *x\n",
            "a: !!str 1\n",
            "a: [1, 2,]\n",
            "a: [1, [2\n",
            "a: [k: v]\n",
            "a: >\n  folded\n",
            "a: b: c\n",
            "a:\n  plain\n",
            "a: 1\n  b: 2\n",
            "a:\n\tb: 1\n",
            "? a\n: b\n",
            "a: \"multi\n  line\"\n",
            "foo\n",
            "a: 1\n---\nb: 2\n",
            "a: 1\r\n",
            "a: |\n    x\n  y\n",
        ] {
            assert!(
                events(text).is_none(),
                "{text:?} should be left to the full parser"
            );
        }
    }

    #[test]
    fn literal_blocks_end_like_go_yaml_at_the_end_of_input() {
        let ev = events("a: |\n  x").unwrap_or_default();
        assert!(ev.contains(&scalar(Cow::Borrowed("x"), ScalarStyle::Literal)));
    }
}
