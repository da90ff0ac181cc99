//! berth's own reader of Go templates: a lexer ([`lex`]), a parser ([`parse`]) and the tree
//! it builds ([`ast`]), which `render::exec` executes.
//!
//! Written by hand because no crate reads Go's text/template faithfully and fast enough:
//! Helm charts depend on Go's quirks (trim markers next to comments, a pipeline ending in
//! `|`, `else with`, number and string literals as Go spells them, which names are
//! functions), and a chart's error must read as helm's does. The grammar and error texts
//! follow Go's documented behaviour and what `helm template` prints; the code is our own.

pub mod ast;
mod lex;
mod literal;
mod parse;

#[cfg(test)]
mod tests;

pub use parse::{Tree, parse};

use super::value::go_quote;

/// A template that does not parse, in Go's words: `template: NAME:LINE: MESSAGE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub name: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "template: {}:{}: {}", self.name, self.line, self.message)
    }
}

impl ParseError {
    /// The error as Helm's engine reports a chart template that does not parse: `parse error
    /// at (NAME:LINE): MESSAGE`, where Helm keeps only the text after the error's last `": "`.
    pub fn helm_message(&self) -> String {
        let full = self.to_string();
        let last = full.rsplit(": ").next().unwrap_or(&full);
        format!("parse error at ({}:{}): {last}", self.name, self.line)
    }
}
