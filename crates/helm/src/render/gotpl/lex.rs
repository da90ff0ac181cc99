//! The lexer: splits a template's text into the items Go's text/template lexer emits (text,
//! delimiters, spaces inside actions, operands, keywords), with Go's trim markers (`{{- `,
//! ` -}}`), comments (`{{/* */}}`, which produce no item) and its error texts.
//!
//! It runs to the end (or the first error) before the parser starts: the parser reads items
//! in order, so it reaches an error item exactly where Go's concurrent lexer would hand it
//! over. Text between actions is found with one substring search per action, and every
//! item is a pair of offsets into the source, so lexing allocates only the item vector.

use super::super::value::{go_printable, go_quote};

/// What an item is; the order of the keyword kinds follows nothing in particular.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    LeftDelim,
    RightDelim,
    /// A run of spaces inside an action.
    Space,
    Pipe,
    /// `=`
    Assign,
    /// `:=`
    Declare,
    /// Any other printable ASCII character inside an action (`,` among them).
    Char,
    String,
    RawString,
    CharConstant,
    Number,
    Complex,
    Variable,
    Field,
    Identifier,
    Bool,
    LeftParen,
    RightParen,
    // Keywords: Go prints these as `<word>` in errors.
    Dot,
    Nil,
    Block,
    Break,
    Continue,
    Define,
    Else,
    End,
    If,
    Range,
    Template,
    With,
    Error,
    Eof,
}

impl Kind {
    fn is_keyword(self) -> bool {
        matches!(
            self,
            Kind::Dot
                | Kind::Nil
                | Kind::Block
                | Kind::Break
                | Kind::Continue
                | Kind::Define
                | Kind::Else
                | Kind::End
                | Kind::If
                | Kind::Range
                | Kind::Template
                | Kind::With
        )
    }
}

/// One item: its kind, its text as `src[start..end]` and the line it starts on (from 1).
#[derive(Debug, Clone, Copy)]
pub struct Item {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
    pub line: usize,
}

/// A lexed template: its items, ending with `Eof` (after an `Error` item when lexing failed,
/// whose text is `error`).
pub struct Items {
    pub items: Vec<Item>,
    pub error: String,
}

impl Items {
    /// The item as Go prints it in "unexpected ..." errors.
    pub fn describe(&self, src: &str, item: &Item) -> String {
        let val = &src[item.start..item.end];
        match item.kind {
            Kind::Eof => "EOF".into(),
            Kind::Error => self.error.clone(),
            k if k.is_keyword() => format!("<{val}>"),
            _ if val.chars().count() > 10 => {
                let cut: String = val.chars().take(10).collect();
                format!("{}...", go_quote(&cut))
            }
            _ => go_quote(val),
        }
    }
}

const LEFT: &str = "{{";
const RIGHT: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";

/// Where the next `{{` starts: a SIMD search for `{`, then a look at the byte after it.
fn find_left(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'{', &b[from..]) {
        let at = from + i;
        if b.get(at + 1) == Some(&b'{') {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Go's space inside actions and for trim markers.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

pub fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

/// `{{- ` : a trim marker after a left delimiter.
fn has_left_trim(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0] == b'-' && is_space(char::from(b[1]))
}

/// ` -}}`: a trim marker before a right delimiter.
fn has_right_trim(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && is_space(char::from(b[0])) && b[1] == b'-'
}

fn left_trim_len(s: &str) -> usize {
    s.len() - s.trim_start_matches(is_space).len()
}

fn right_trim_len(s: &str) -> usize {
    s.len() - s.trim_end_matches(is_space).len()
}

/// Go's `%#U`: `U+0023 '#'`, without the quoted character when it is not printable.
pub fn sharp_u(c: char) -> String {
    if go_printable(c) {
        format!("U+{:04X} '{c}'", u32::from(c))
    } else {
        format!("U+{:04X}", u32::from(c))
    }
}

#[derive(Clone, Copy)]
enum State {
    Text,
    LeftDelim,
    Comment,
    InsideAction,
    RightDelim,
    Space,
    Quote,
    RawQuote,
    CharConstant,
    Variable,
    Field,
    Identifier,
    Number,
}

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
    start: usize,
    /// The width of the last character `next` read (0 at the end), for `backup`.
    width: usize,
    /// `line` is the line at byte `line_at` (lines are counted forward as items go out).
    line: usize,
    line_at: usize,
    parens: i32,
    items: Vec<Item>,
    error: String,
}

/// Lexes `src` with Go's `{{`/`}}` delimiters.
pub fn lex(src: &str) -> Items {
    let mut l = Lexer {
        src,
        pos: 0,
        start: 0,
        width: 0,
        line: 1,
        line_at: 0,
        parens: 0,
        // About one item per 8 bytes of template text.
        items: Vec::with_capacity(src.len() / 8 + 4),
        error: String::new(),
    };
    let mut state = State::Text;
    while let Some(next) = l.step(state) {
        state = next;
    }
    let end = l.src.len();
    let line = l.line_of(l.start.min(end));
    l.items.push(Item {
        kind: Kind::Eof,
        start: end,
        end,
        line,
    });
    Items {
        items: l.items,
        error: l.error,
    }
}

impl Lexer<'_> {
    fn step(&mut self, state: State) -> Option<State> {
        match state {
            State::Text => self.text(),
            State::LeftDelim => self.left_delim(),
            State::Comment => self.comment(),
            State::InsideAction => self.inside_action(),
            State::RightDelim => self.right_delim(),
            State::Space => self.space(),
            State::Quote => self.quoted('"', "unterminated quoted string", Kind::String),
            State::RawQuote => self.raw_quote(),
            State::CharConstant => {
                self.quoted('\'', "unterminated character constant", Kind::CharConstant)
            }
            State::Variable => self.field_or_variable(Kind::Variable),
            State::Field => self.field_or_variable(Kind::Field),
            State::Identifier => self.identifier(),
            State::Number => self.number(),
        }
    }

    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn next(&mut self) -> Option<char> {
        let c = self.rest().chars().next();
        self.width = c.map_or(0, char::len_utf8);
        self.pos += self.width;
        c
    }

    fn backup(&mut self) {
        self.pos -= self.width;
        self.width = 0;
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    /// The line `at` is on (`at` never moves backwards between calls).
    fn line_of(&mut self, at: usize) -> usize {
        if at > self.line_at {
            self.line += memchr::memchr_iter(b'\n', &self.src.as_bytes()[self.line_at..at]).count();
            self.line_at = at;
        }
        self.line
    }

    fn emit(&mut self, kind: Kind) {
        let line = self.line_of(self.start);
        self.items.push(Item {
            kind,
            start: self.start,
            end: self.pos,
            line,
        });
        self.start = self.pos;
    }

    fn fail(&mut self, message: String) -> Option<State> {
        let line = self.line_of(self.start);
        self.items.push(Item {
            kind: Kind::Error,
            start: self.start,
            end: self.pos,
            line,
        });
        self.error = message;
        None
    }

    fn accept(&mut self, valid: &str) -> bool {
        match self.next() {
            Some(c) if valid.contains(c) => true,
            _ => {
                self.backup();
                false
            }
        }
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    /// Whether a right delimiter (with or without a trim marker) starts here.
    fn at_right_delim(&self) -> (bool, bool) {
        let rest = self.rest();
        if has_right_trim(rest) && rest[2..].starts_with(RIGHT) {
            (true, true)
        } else {
            (rest.starts_with(RIGHT), false)
        }
    }

    /// Whether the character here may follow an operand.
    fn at_terminator(&self) -> bool {
        match self.peek() {
            None => true,
            Some(c) if is_space(c) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            Some(_) => self.rest().starts_with(RIGHT),
        }
    }

    fn text(&mut self) -> Option<State> {
        let Some(found) = find_left(self.rest()) else {
            self.pos = self.src.len();
            if self.pos > self.start {
                self.emit(Kind::Text);
            }
            return None;
        };
        if found > 0 {
            self.pos += found;
            let trim = if has_left_trim(&self.src[self.pos + LEFT.len()..]) {
                right_trim_len(&self.src[self.start..self.pos])
            } else {
                0
            };
            self.pos -= trim;
            if self.pos > self.start {
                self.emit(Kind::Text);
            }
            self.pos += trim;
            self.start = self.pos;
        }
        Some(State::LeftDelim)
    }

    fn left_delim(&mut self) -> Option<State> {
        self.pos += LEFT.len();
        let marker = if has_left_trim(self.rest()) { 2 } else { 0 };
        if self.rest()[marker..].starts_with(LEFT_COMMENT) {
            self.pos += marker;
            self.start = self.pos;
            return Some(State::Comment);
        }
        self.emit(Kind::LeftDelim);
        self.pos += marker;
        self.start = self.pos;
        self.parens = 0;
        Some(State::InsideAction)
    }

    fn comment(&mut self) -> Option<State> {
        self.pos += LEFT_COMMENT.len();
        let Some(found) = self.rest().find(RIGHT_COMMENT) else {
            return self.fail("unclosed comment".into());
        };
        self.pos += found + RIGHT_COMMENT.len();
        let (delim, trim) = self.at_right_delim();
        if !delim {
            return self.fail("comment ends before closing delimiter".into());
        }
        if trim {
            self.pos += 2;
        }
        self.pos += RIGHT.len();
        if trim {
            self.pos += left_trim_len(self.rest());
        }
        self.start = self.pos;
        Some(State::Text)
    }

    fn right_delim(&mut self) -> Option<State> {
        let (_, trim) = self.at_right_delim();
        if trim {
            self.pos += 2;
            self.start = self.pos;
        }
        self.pos += RIGHT.len();
        self.emit(Kind::RightDelim);
        if trim {
            self.pos += left_trim_len(self.rest());
            self.start = self.pos;
        }
        Some(State::Text)
    }

    fn inside_action(&mut self) -> Option<State> {
        if self.at_right_delim().0 {
            if self.parens == 0 {
                return Some(State::RightDelim);
            }
            return self.fail("unclosed left paren".into());
        }
        let Some(c) = self.next() else {
            return self.fail("unclosed action".into());
        };
        match c {
            c if is_space(c) => {
                self.backup();
                return Some(State::Space);
            }
            '=' => self.emit(Kind::Assign),
            ':' => {
                if self.next() != Some('=') {
                    return self.fail("expected :=".into());
                }
                self.emit(Kind::Declare);
            }
            '|' => self.emit(Kind::Pipe),
            '"' => return Some(State::Quote),
            '`' => return Some(State::RawQuote),
            '$' => return Some(State::Variable),
            '\'' => return Some(State::CharConstant),
            '.' if !self.peek().is_some_and(|d| d.is_ascii_digit()) && self.peek().is_some() => {
                return Some(State::Field);
            }
            '.' | '+' | '-' | '0'..='9' => {
                self.backup();
                return Some(State::Number);
            }
            c if is_alphanumeric(c) => {
                self.backup();
                return Some(State::Identifier);
            }
            '(' => {
                self.parens += 1;
                self.emit(Kind::LeftParen);
            }
            ')' => {
                self.parens -= 1;
                if self.parens < 0 {
                    return self.fail("unexpected right paren".into());
                }
                self.emit(Kind::RightParen);
            }
            c if c.is_ascii() && go_printable(c) => self.emit(Kind::Char),
            c => return self.fail(format!("unrecognized character in action: {}", sharp_u(c))),
        }
        Some(State::InsideAction)
    }

    fn space(&mut self) -> Option<State> {
        let mut count = 0;
        while self.peek().is_some_and(is_space) {
            self.pos += 1;
            count += 1;
        }
        // A trim-marked right delimiter has a space before its `-`: leave that space to it.
        if has_right_trim(&self.src[self.pos - 1..]) && self.src[self.pos + 1..].starts_with(RIGHT)
        {
            self.pos -= 1;
            if count == 1 {
                return Some(State::RightDelim);
            }
        }
        self.emit(Kind::Space);
        Some(State::InsideAction)
    }

    /// A `"` string or `'` character constant (the opening quote is read).
    fn quoted(&mut self, quote: char, unterminated: &str, kind: Kind) -> Option<State> {
        loop {
            match self.next() {
                Some('\\') => {
                    if matches!(self.next(), None | Some('\n')) {
                        return self.fail(unterminated.into());
                    }
                }
                None | Some('\n') => return self.fail(unterminated.into()),
                Some(c) if c == quote => break,
                Some(_) => {}
            }
        }
        self.emit(kind);
        Some(State::InsideAction)
    }

    fn raw_quote(&mut self) -> Option<State> {
        let Some(found) = self.rest().find('`') else {
            self.pos = self.src.len();
            return self.fail("unterminated raw quoted string".into());
        };
        self.pos += found + 1;
        self.emit(Kind::RawString);
        Some(State::InsideAction)
    }

    /// `$name` or `.name` (the `$` or `.` is read); alone they are `$` and dot.
    fn field_or_variable(&mut self, kind: Kind) -> Option<State> {
        if self.at_terminator() {
            self.emit(if kind == Kind::Variable {
                Kind::Variable
            } else {
                Kind::Dot
            });
            return Some(State::InsideAction);
        }
        while self.peek().is_some_and(is_alphanumeric) {
            self.next();
        }
        if !self.at_terminator() {
            return self.bad_character();
        }
        self.emit(kind);
        Some(State::InsideAction)
    }

    fn bad_character(&mut self) -> Option<State> {
        let c = self.peek().unwrap_or('\u{FFFD}');
        self.fail(format!("bad character {}", sharp_u(c)))
    }

    fn identifier(&mut self) -> Option<State> {
        while self.peek().is_some_and(is_alphanumeric) {
            self.next();
        }
        if !self.at_terminator() {
            return self.bad_character();
        }
        let kind = match &self.src[self.start..self.pos] {
            "block" => Kind::Block,
            "break" => Kind::Break,
            "continue" => Kind::Continue,
            "define" => Kind::Define,
            "else" => Kind::Else,
            "end" => Kind::End,
            "if" => Kind::If,
            "range" => Kind::Range,
            "nil" => Kind::Nil,
            "template" => Kind::Template,
            "with" => Kind::With,
            "true" | "false" => Kind::Bool,
            _ => Kind::Identifier,
        };
        self.emit(kind);
        Some(State::InsideAction)
    }

    fn number(&mut self) -> Option<State> {
        if !self.scan_number() {
            return self.bad_number();
        }
        if matches!(self.peek(), Some('+' | '-')) {
            // A complex constant: `1+2i`, no spaces, ending in `i`.
            if !self.scan_number() || !self.src[..self.pos].ends_with('i') {
                return self.bad_number();
            }
            self.emit(Kind::Complex);
        } else {
            self.emit(Kind::Number);
        }
        Some(State::InsideAction)
    }

    fn bad_number(&mut self) -> Option<State> {
        let text = go_quote(&self.src[self.start..self.pos]);
        self.fail(format!("bad number syntax: {text}"))
    }

    /// Go's number scan: sign, base prefix, digits (with `_`), fraction, exponent, `i`.
    fn scan_number(&mut self) -> bool {
        const DECIMAL: &str = "0123456789_";
        const HEX: &str = "0123456789abcdefABCDEF_";
        self.accept("+-");
        let mut digits = DECIMAL;
        if self.accept("0") {
            if self.accept("xX") {
                digits = HEX;
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits == DECIMAL && self.accept("eE") {
            self.accept("+-");
            self.accept_run(DECIMAL);
        }
        if digits == HEX && self.accept("pP") {
            self.accept("+-");
            self.accept_run(DECIMAL);
        }
        self.accept("i");
        if self.peek().is_some_and(is_alphanumeric) {
            self.next();
            return false;
        }
        true
    }
}
