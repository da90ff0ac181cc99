//! Scalar styles: which one go-yaml picks for a string (plain, single-quoted, double-quoted,
//! literal block) and how each is written, folded at [`BEST_WIDTH`].

use super::push_indent;
use super::resolve::resolves_to_non_string;

/// go-yaml v2's line width: a space past this column becomes a line break.
const BEST_WIDTH: usize = 80;

/// Where a scalar is written.
#[derive(Clone, Copy)]
pub(super) struct At {
    /// Column of its first character.
    pub(super) column: usize,
    /// Indentation of continuation lines and literal block lines.
    pub(super) indent: usize,
    /// Mapping keys are "simple keys": never folded, never block scalars.
    pub(super) simple_key: bool,
    /// Long lines fold at a space past [`BEST_WIDTH`] (go-yaml v2; v3 as `toYamlPretty` uses
    /// it does not fold).
    pub(super) fold: bool,
}

pub(super) fn column(out: &str) -> usize {
    out[out.rfind('\n').map_or(0, |i| i + 1)..].chars().count()
}

/// Renders a string scalar in the style go-yaml v2 picks for it.
pub(super) fn scalar(s: &str, at: At) -> String {
    if resolves_to_non_string(s) {
        return double_quoted(s, at);
    }
    let a = analyze(s);
    if s.contains('\n') {
        if !at.simple_key && a.block_allowed {
            return literal(s, at.indent);
        }
        return double_quoted(s, at);
    }
    if a.plain_allowed {
        plain(s, at)
    } else if a.single_allowed {
        single_quoted(s, at)
    } else {
        double_quoted(s, at)
    }
}

/// Tracks the output column while a scalar is written, and folds at a space once the column
/// is past [`BEST_WIDTH`] (libyaml's `write_plain`/`write_*_quoted` rule).
struct Folder {
    out: String,
    pub(super) column: usize,
    at: At,
}

impl Folder {
    fn new(at: At) -> Self {
        Folder {
            out: String::new(),
            column: at.column,
            at,
        }
    }

    fn push(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn push_str(&mut self, s: &str) {
        self.out.push_str(s);
        self.column += s.chars().count();
    }

    fn can_break(&self) -> bool {
        self.at.fold && !self.at.simple_key && self.column > BEST_WIDTH
    }

    fn line_break(&mut self) {
        self.out.push('\n');
        push_indent(&mut self.out, self.at.indent);
        self.column = self.at.indent;
    }
}

fn plain(s: &str, at: At) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut f = Folder::new(at);
    let mut spaces = false;
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            if !spaces && f.can_break() && chars.get(i + 1) != Some(&' ') {
                f.line_break();
            } else {
                f.push(c);
            }
            spaces = true;
        } else {
            f.push(c);
            spaces = false;
        }
    }
    f.out
}

fn single_quoted(s: &str, at: At) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut f = Folder::new(at);
    f.push('\'');
    let mut spaces = false;
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let inner = i > 0 && i + 1 < chars.len();
            if !spaces && f.can_break() && inner && chars.get(i + 1) != Some(&' ') {
                f.line_break();
            } else {
                f.push(c);
            }
            spaces = true;
        } else {
            if c == '\'' {
                f.push('\'');
            }
            f.push(c);
            spaces = false;
        }
    }
    f.push('\'');
    f.out
}

struct Analysis {
    plain_allowed: bool,
    single_allowed: bool,
    block_allowed: bool,
}

fn is_blank_or_end(c: Option<char>) -> bool {
    matches!(c, None | Some(' ' | '\t' | '\n' | '\r'))
}

/// YAML's notion of a printable character (libyaml `IS_PRINTABLE`).
fn is_printable(c: char) -> bool {
    matches!(c as u32,
        0x0A | 0x20..=0x7E | 0x85 | 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
        && c != '\u{FEFF}'
}

/// Mirrors libyaml's `yaml_emitter_analyze_scalar` for block context.
fn analyze(s: &str) -> Analysis {
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let mut special = false;
    let (mut space_break, mut break_space) = (false, false);
    let mut line_breaks = false;
    for (i, &c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if is_blank_or_end(next) => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if is_blank_or_end(next) => block_indicators = true,
                '#' if matches!(chars[i - 1], ' ' | '\t' | '\n') => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) || (!c.is_ascii() && c == '\u{FEFF}') {
            special = true;
        }
        if c == '\n' {
            line_breaks = true;
        }
        if c == ' ' && next == Some('\n') {
            space_break = true;
        }
        if c == '\n' && next == Some(' ') {
            break_space = true;
        }
    }
    let first = chars.first().copied();
    let last = chars.last().copied();
    let leading = matches!(first, Some(' ' | '\n'));
    let trailing = matches!(last, Some(' ' | '\n'));
    let trailing_space = last == Some(' ');
    let mut a = Analysis {
        plain_allowed: !(block_indicators || leading || trailing || line_breaks),
        single_allowed: true,
        block_allowed: !trailing_space,
    };
    if break_space {
        a.plain_allowed = false;
        a.single_allowed = false;
    }
    if space_break || special {
        a.plain_allowed = false;
        a.single_allowed = false;
        a.block_allowed = false;
    }
    a
}

/// A literal block scalar (`|`, `|-`, `|+`) whose lines sit at `indent`.
fn literal(s: &str, indent: usize) -> String {
    let mut out = String::from("|");
    if s.starts_with([' ', '\n']) {
        out.push('2');
    }
    let body = if !s.ends_with('\n') {
        out.push('-');
        s
    } else if s.len() == 1 || s.ends_with("\n\n") {
        out.push('+');
        &s[..s.len() - 1]
    } else {
        &s[..s.len() - 1]
    };
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            push_indent(&mut out, indent);
            out.push_str(line);
        }
    }
    out
}

fn double_quoted(s: &str, at: At) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut f = Folder::new(at);
    f.push('"');
    let mut spaces = false;
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let inner = i > 0 && i + 1 < chars.len();
            if !spaces && f.can_break() && inner {
                f.line_break();
                // A space right after the break would be eaten by folding; escape it.
                if chars.get(i + 1) == Some(&' ') {
                    f.push('\\');
                }
            } else {
                f.push(c);
            }
            spaces = true;
            continue;
        }
        spaces = false;
        match escape(c) {
            Some(e) => f.push_str(&e),
            None => f.push(c),
        }
    }
    f.push('"');
    f.out
}

/// The double-quoted escape for `c`, if it needs one.
fn escape(c: char) -> Option<String> {
    let e = match c {
        '"' => "\\\"",
        '\\' => "\\\\",
        '\0' => "\\0",
        '\u{7}' => "\\a",
        '\u{8}' => "\\b",
        '\t' => "\\t",
        '\n' => "\\n",
        '\u{B}' => "\\v",
        '\u{C}' => "\\f",
        '\r' => "\\r",
        '\u{1B}' => "\\e",
        '\u{85}' => "\\N",
        '\u{2028}' => "\\L",
        '\u{2029}' => "\\P",
        c if is_printable(c) => return None,
        c if (c as u32) <= 0xFF => return Some(format!("\\x{:02X}", c as u32)),
        c if (c as u32) <= 0xFFFF => return Some(format!("\\u{:04X}", c as u32)),
        c => return Some(format!("\\U{:08X}", c as u32)),
    };
    Some(e.to_string())
}
