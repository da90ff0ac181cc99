//! The parser: Go text/template's grammar over [`super::lex`]'s items, building
//! [`super::ast`] trees. It follows Go's parser in what it accepts, where it reports an error
//! and in the words it uses (tests pin them against `helm template`'s), including the
//! checks Go makes while parsing: functions must exist, variables must be declared in an
//! enclosing scope, `break`/`continue` only inside `range`, and one file may not define a
//! name twice with content.

use super::ast::*;
use super::lex::{self, Item, Items, Kind};
use super::literal;
use super::{ParseError, go_quote};
use std::sync::Arc;

/// How deeply parentheses and control actions may nest before the parser refuses the
/// template: each level is a few stack frames, and real charts nest a handful deep (Go allows
/// 10,000 parentheses).
const MAX_NESTING: usize = 100;

/// What `{{ end }}` and `{{ else }}` end a list with.
#[derive(PartialEq, Eq)]
enum Stop {
    End,
    Else,
}

/// A node, or one of the two actions that end a list.
enum Parsed {
    Node(Node),
    Stop(Stop),
}

/// A parsed template: its body and the templates it defines (`define` and `block`).
#[derive(Debug, Default)]
pub struct Tree {
    pub root: ListNode,
    pub defines: Vec<DefineNode>,
}

pub struct Parser<'a> {
    name: &'a str,
    src: &'a str,
    lexed: Items,
    /// The next item.
    at: usize,
    /// The furthest item read so far: Go reports errors at that item's line.
    seen: usize,
    is_func: &'a dyn Fn(&str) -> bool,
    defines: Vec<DefineNode>,
    /// Variables in scope (`$` first).
    vars: Vec<Arc<str>>,
    range_depth: usize,
    /// The line of the action being parsed (0 outside one), for lexer errors inside it.
    action_line: usize,
    nesting: usize,
}

type R<T> = Result<T, ParseError>;

/// Parses template `name` (as errors call it), calling `is_func` for each function name.
pub fn parse(name: &str, src: &str, is_func: &dyn Fn(&str) -> bool) -> R<Tree> {
    let mut p = Parser {
        name,
        src,
        lexed: lex::lex(src),
        at: 0,
        seen: 0,
        is_func,
        defines: Vec::new(),
        vars: vec![Arc::from("$")],
        range_depth: 0,
        action_line: 0,
        nesting: 0,
    };
    let root = p.top()?;
    Ok(Tree {
        root,
        defines: p.defines,
    })
}

impl Parser<'_> {
    fn item(&self, i: usize) -> Item {
        self.lexed.items[i]
    }

    fn kind(&self, i: usize) -> Kind {
        self.lexed.items[i].kind
    }

    fn text(&self, i: usize) -> &str {
        let it = self.lexed.items[i];
        &self.src[it.start..it.end]
    }

    fn pos(&self, i: usize) -> Pos {
        Pos {
            offset: self.lexed.items[i].start,
        }
    }

    /// The next item's index, without consuming it. The last item is `Eof`, so reads stop
    /// there.
    fn peek(&mut self) -> usize {
        let i = self.at.min(self.lexed.items.len() - 1);
        self.seen = self.seen.max(i);
        i
    }

    fn next(&mut self) -> usize {
        let i = self.peek();
        self.at = i + 1;
        i
    }

    fn next_non_space(&mut self) -> usize {
        loop {
            let i = self.next();
            if self.kind(i) != Kind::Space {
                return i;
            }
        }
    }

    /// Skips spaces and returns the next other item without consuming it.
    fn peek_non_space(&mut self) -> usize {
        let i = self.next_non_space();
        self.at = i;
        i
    }

    fn error(&self, message: String) -> ParseError {
        self.error_on(self.item(self.seen).line, message)
    }

    fn error_on(&self, line: usize, message: String) -> ParseError {
        ParseError {
            name: self.name.to_string(),
            line,
            message,
        }
    }

    /// Go's "unexpected ITEM in CONTEXT", or the lexer's error when the item is one.
    fn unexpected(&self, i: usize, context: &str) -> ParseError {
        let item = self.item(i);
        if item.kind == Kind::Error {
            let mut message = self.lexed.error.clone();
            if self.action_line != 0 && self.action_line != item.line {
                let started = format!("started at {}:{}", self.name, self.action_line);
                if message.ends_with(" action") {
                    message = format!("{message} {started}");
                } else {
                    message = format!("{message} in action {started}");
                }
            }
            return self.error(message);
        }
        let described = self.lexed.describe(self.src, &item);
        self.error(format!("unexpected {described} in {context}"))
    }

    fn expect(&mut self, kind: Kind, context: &str) -> R<usize> {
        let i = self.next_non_space();
        if self.kind(i) != kind {
            return Err(self.unexpected(i, context));
        }
        Ok(i)
    }

    fn deeper(&mut self) -> R<()> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(self.error(format!("template nests deeper than {MAX_NESTING}")));
        }
        Ok(())
    }

    /// The whole template: text and actions, with `define`s set aside.
    fn top(&mut self) -> R<ListNode> {
        let mut root = ListNode::default();
        loop {
            let i = self.peek();
            match self.kind(i) {
                Kind::Eof => return Ok(root),
                Kind::LeftDelim => {
                    self.next();
                    let word = self.next_non_space();
                    if self.kind(word) == Kind::Define {
                        self.definition()?;
                        continue;
                    }
                    self.at = i;
                }
                _ => {}
            }
            match self.text_or_action()? {
                Parsed::Node(n) => root.nodes.push(n),
                Parsed::Stop(Stop::End) => return Err(self.error("unexpected {{end}}".into())),
                Parsed::Stop(Stop::Else) => return Err(self.error("unexpected {{else}}".into())),
            }
        }
    }

    /// Runs `f` as the parse of a new template (a `define` or `block` body): own variables,
    /// outside any `range` and action.
    fn in_new_template<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        let vars = std::mem::replace(&mut self.vars, vec![Arc::from("$")]);
        let range_depth = std::mem::take(&mut self.range_depth);
        let action_line = std::mem::take(&mut self.action_line);
        let out = f(self);
        self.vars = vars;
        self.range_depth = range_depth;
        self.action_line = action_line;
        out
    }

    /// `{{ define "name" }}...{{ end }}` (`{{` and `define` are read).
    fn definition(&mut self) -> R<()> {
        const CONTEXT: &str = "define clause";
        self.in_new_template(|p| {
            let i = p.next_non_space();
            if !matches!(p.kind(i), Kind::String | Kind::RawString) {
                return Err(p.unexpected(i, CONTEXT));
            }
            let name = literal::unquote(p.text(i)).map_err(|e| p.error(e))?;
            p.expect(Kind::RightDelim, CONTEXT)?;
            let (body, stop) = p.item_list()?;
            if stop == Stop::Else {
                return Err(p.error(format!("unexpected {{{{else}}}} in {CONTEXT}")));
            }
            p.add_define(name.into(), body)
        })
    }

    /// Go's rule for a name defined twice in one parse: content replaces an empty body, an
    /// empty body is ignored, and two bodies with content are an error.
    fn add_define(&mut self, name: Arc<str>, body: ListNode) -> R<()> {
        match self.defines.iter_mut().find(|d| d.name == name) {
            None => self.defines.push(DefineNode { name, body }),
            Some(d) if d.body.is_empty_tree() => d.body = body,
            Some(_) if body.is_empty_tree() => {}
            Some(_) => {
                return Err(self.error(format!(
                    "template: multiple definition of template {}",
                    go_quote(&name)
                )));
            }
        }
        Ok(())
    }

    /// Nodes up to the `{{ end }}` or `{{ else }}` that ends them.
    fn item_list(&mut self) -> R<(ListNode, Stop)> {
        let mut list = ListNode::default();
        loop {
            let i = self.peek_non_space();
            if self.kind(i) == Kind::Eof {
                return Err(self.error("unexpected EOF".into()));
            }
            match self.text_or_action()? {
                Parsed::Node(n) => list.nodes.push(n),
                Parsed::Stop(stop) => return Ok((list, stop)),
            }
        }
    }

    fn text_or_action(&mut self) -> R<Parsed> {
        let i = self.next_non_space();
        match self.kind(i) {
            Kind::Text => {
                let text = Arc::from(self.text(i));
                Ok(Parsed::Node(Node::Text(TextNode {
                    pos: self.pos(i),
                    text,
                })))
            }
            Kind::LeftDelim => {
                self.action_line = self.item(i).line;
                let out = self.action();
                self.action_line = 0;
                out
            }
            _ => Err(self.unexpected(i, "input")),
        }
    }

    /// What follows `{{`.
    fn action(&mut self) -> R<Parsed> {
        let i = self.next_non_space();
        let node = match self.kind(i) {
            Kind::Block => self.block(i)?,
            Kind::Break | Kind::Continue => self.break_or_continue(i)?,
            Kind::Else => return self.else_action(),
            Kind::End => {
                self.expect(Kind::RightDelim, "end")?;
                return Ok(Parsed::Stop(Stop::End));
            }
            Kind::If => Node::If(self.branch("if")?),
            Kind::Range => Node::Range(self.branch("range")?),
            Kind::With => Node::With(self.branch("with")?),
            Kind::Template => self.template(i)?,
            _ => {
                self.at = i;
                let pipe = self.pipeline("command", Kind::RightDelim)?;
                Node::Action(ActionNode {
                    pos: self.pos(i),
                    pipe,
                })
            }
        };
        Ok(Parsed::Node(node))
    }

    fn break_or_continue(&mut self, i: usize) -> R<Node> {
        let word = if self.kind(i) == Kind::Break {
            "break"
        } else {
            "continue"
        };
        let close = self.next_non_space();
        if self.kind(close) != Kind::RightDelim {
            return Err(self.unexpected(close, &format!("{{{{{word}}}}}")));
        }
        if self.range_depth == 0 {
            return Err(self.error(format!("{{{{{word}}}}} outside {{{{range}}}}")));
        }
        let pos = self.pos(i);
        Ok(if word == "break" {
            Node::Break(pos)
        } else {
            Node::Continue(pos)
        })
    }

    /// `{{ else }}`, or the `else` of `{{ else if ... }}`/`{{ else with ... }}` (whose
    /// keyword is left for the branch to read).
    fn else_action(&mut self) -> R<Parsed> {
        let i = self.peek_non_space();
        if !matches!(self.kind(i), Kind::If | Kind::With) {
            self.expect(Kind::RightDelim, "else")?;
        }
        Ok(Parsed::Stop(Stop::Else))
    }

    /// `if`, `with` or `range` (the keyword is read) up to its `end`.
    fn branch(&mut self, context: &str) -> R<BranchNode> {
        self.deeper()?;
        let mark = self.vars.len();
        let pipe = self.pipeline(context, Kind::RightDelim)?;
        let range = context == "range";
        self.range_depth += usize::from(range);
        let (body, stop) = self.item_list()?;
        self.range_depth -= usize::from(range);
        let else_body = match stop {
            Stop::End => None,
            Stop::Else => Some(self.else_body(context)?),
        };
        self.vars.truncate(mark);
        self.nesting -= 1;
        Ok(BranchNode {
            pos: pipe.pos,
            pipe,
            body,
            else_body,
        })
    }

    /// The `else` part: `else if`/`else with` read as `else` holding the branch (which ends
    /// both), else a list up to `end`.
    fn else_body(&mut self, context: &str) -> R<ListNode> {
        let i = self.peek();
        let chained = match (context, self.kind(i)) {
            ("if", Kind::If) => Some("if"),
            ("with", Kind::With) => Some("with"),
            _ => None,
        };
        if let Some(keyword) = chained {
            self.next();
            let b = self.branch(keyword)?;
            let node = if keyword == "if" {
                Node::If(b)
            } else {
                Node::With(b)
            };
            return Ok(ListNode { nodes: vec![node] });
        }
        let (list, stop) = self.item_list()?;
        if stop != Stop::End {
            return Err(self.error("expected end; found {{else}}".into()));
        }
        Ok(list)
    }

    /// The name of a `template` or `block`.
    fn template_name(&mut self, i: usize, context: &str) -> R<Arc<str>> {
        if !matches!(self.kind(i), Kind::String | Kind::RawString) {
            return Err(self.unexpected(i, context));
        }
        let name = literal::unquote(self.text(i)).map_err(|e| self.error(e))?;
        Ok(name.into())
    }

    /// `{{ template "name" [pipeline] }}` (the keyword is read).
    fn template(&mut self, _keyword: usize) -> R<Node> {
        const CONTEXT: &str = "template clause";
        let i = self.next_non_space();
        let name = self.template_name(i, CONTEXT)?;
        let close = self.next_non_space();
        let pipe = if self.kind(close) == Kind::RightDelim {
            None
        } else {
            self.at = close;
            Some(self.pipeline(CONTEXT, Kind::RightDelim)?)
        };
        Ok(Node::Template(TemplateNode {
            pos: self.pos(i),
            name,
            pipe,
        }))
    }

    /// `{{ block "name" pipeline }}...{{ end }}`: a definition, executed in place.
    fn block(&mut self, _keyword: usize) -> R<Node> {
        const CONTEXT: &str = "block clause";
        let i = self.next_non_space();
        let name = self.template_name(i, CONTEXT)?;
        let pipe = self.pipeline(CONTEXT, Kind::RightDelim)?;
        // Go reports a wrong end of the block at the line its header ends on.
        let header_line = self.item(self.seen).line;
        let (body, stop) = self.in_new_template(|p| p.item_list())?;
        if stop == Stop::Else {
            return Err(self.error_on(header_line, format!("unexpected {{{{else}}}} in {CONTEXT}")));
        }
        self.add_define(name.clone(), body)?;
        Ok(Node::Template(TemplateNode {
            pos: self.pos(i),
            name,
            pipe: Some(pipe),
        }))
    }

    /// Declarations (`$x :=`, `$x =`, `$i, $v :=` in `range`), then commands up to `end`.
    fn pipeline(&mut self, context: &str, end: Kind) -> R<PipeNode> {
        let first = self.peek_non_space();
        let mut pipe = PipeNode {
            pos: self.pos(first),
            decl: Vec::new(),
            commands: Vec::new(),
            is_assign: false,
        };
        self.declarations(&mut pipe, context)?;
        loop {
            let i = self.next_non_space();
            match self.kind(i) {
                k if k == end => {
                    self.check_pipeline(&pipe, context)?;
                    return Ok(pipe);
                }
                Kind::Bool
                | Kind::CharConstant
                | Kind::Complex
                | Kind::Dot
                | Kind::Field
                | Kind::Identifier
                | Kind::Number
                | Kind::Nil
                | Kind::RawString
                | Kind::String
                | Kind::Variable
                | Kind::LeftParen => {
                    self.at = i;
                    let cmd = self.command()?;
                    pipe.commands.push(cmd);
                }
                _ => return Err(self.unexpected(i, context)),
            }
        }
    }

    fn declarations(&mut self, pipe: &mut PipeNode, context: &str) -> R<()> {
        loop {
            let v = self.peek_non_space();
            if self.kind(v) != Kind::Variable {
                return Ok(());
            }
            self.next();
            let after = self.peek_non_space();
            let name: Arc<str> = Arc::from(self.text(v));
            match self.kind(after) {
                Kind::Assign | Kind::Declare => {
                    pipe.is_assign = self.kind(after) == Kind::Assign;
                    self.next();
                    pipe.decl.push(name.clone());
                    self.vars.push(name);
                    return Ok(());
                }
                Kind::Char if self.text(after) == "," => {
                    self.next();
                    pipe.decl.push(name.clone());
                    self.vars.push(name);
                    if context == "range" && pipe.decl.len() < 2 {
                        let n = self.peek_non_space();
                        if matches!(
                            self.kind(n),
                            Kind::Variable | Kind::RightDelim | Kind::RightParen
                        ) {
                            continue;
                        }
                        return Err(self.error("range can only initialize variables".into()));
                    }
                    return Err(self.error(format!("too many declarations in {context}")));
                }
                // `$x` is an operand: read it again as one.
                _ => {
                    self.at = v;
                    return Ok(());
                }
            }
        }
    }

    fn check_pipeline(&self, pipe: &PipeNode, context: &str) -> R<()> {
        if pipe.commands.is_empty() {
            return Err(self.error(format!("missing value for {context}")));
        }
        for (i, c) in pipe.commands.iter().enumerate().skip(1) {
            if matches!(
                c.args.first(),
                Some(
                    Expr::Bool(..)
                        | Expr::Dot(_)
                        | Expr::Nil(_)
                        | Expr::Number(..)
                        | Expr::String(..)
                )
            ) {
                return Err(self.error(format!(
                    "non executable command in pipeline stage {}",
                    i + 1
                )));
            }
        }
        Ok(())
    }

    /// Operands up to `|`, `}}` or `)`.
    fn command(&mut self) -> R<CommandNode> {
        let first = self.peek_non_space();
        let mut cmd = CommandNode {
            pos: self.pos(first),
            args: Vec::new(),
        };
        loop {
            self.peek_non_space();
            if let Some(e) = self.operand()? {
                cmd.args.push(e);
            }
            let i = self.next();
            match self.kind(i) {
                Kind::Space => continue,
                Kind::RightDelim | Kind::RightParen => self.at = i,
                Kind::Pipe => {}
                _ => return Err(self.unexpected(i, "operand")),
            }
            break;
        }
        if cmd.args.is_empty() {
            return Err(self.error("empty command".into()));
        }
        Ok(cmd)
    }

    /// A term with the fields that follow it (`.a.b`, `$x.a`, `(pipe).a`).
    fn operand(&mut self) -> R<Option<Expr>> {
        let start = self.peek_non_space();
        let Some(term) = self.term()? else {
            return Ok(None);
        };
        let i = self.peek();
        if self.kind(i) != Kind::Field {
            return Ok(Some(term));
        }
        let chain_pos = self.pos(i);
        let mut fields = Vec::new();
        loop {
            let f = self.peek();
            if self.kind(f) != Kind::Field {
                break;
            }
            self.next();
            fields.push(Arc::from(&self.text(f)[1..]));
        }
        Ok(Some(match term {
            Expr::Field(p, mut fs) => {
                fs.extend(fields);
                Expr::Field(p, fs)
            }
            Expr::Variable(p, name, mut fs) => {
                fs.extend(fields);
                Expr::Variable(p, name, fs)
            }
            Expr::Bool(..) | Expr::String(..) | Expr::Number(..) | Expr::Nil(_) | Expr::Dot(_) => {
                let text = self.text(start).to_string();
                return Err(self.error(format!("unexpected . after term {}", go_quote(&text))));
            }
            other => Expr::Chain(chain_pos, Box::new(other), fields),
        }))
    }

    fn term(&mut self) -> R<Option<Expr>> {
        let i = self.next_non_space();
        let pos = self.pos(i);
        let e = match self.kind(i) {
            Kind::Identifier => {
                let name = self.text(i);
                if !(self.is_func)(name) {
                    return Err(self.error(format!("function {} not defined", go_quote(name))));
                }
                Expr::Identifier(pos, name.into())
            }
            Kind::Dot => Expr::Dot(pos),
            Kind::Nil => Expr::Nil(pos),
            Kind::Variable => {
                let name = self.text(i);
                let Some(known) = self.vars.iter().rev().find(|v| v.as_ref() == name) else {
                    return Err(self.error(format!("undefined variable {}", go_quote(name))));
                };
                Expr::Variable(pos, known.clone(), Vec::new())
            }
            Kind::Field => Expr::Field(pos, vec![Arc::from(&self.text(i)[1..])]),
            Kind::Bool => Expr::Bool(pos, self.text(i) == "true"),
            Kind::CharConstant => {
                let n = literal::char_constant(self.text(i)).map_err(|e| self.error(e))?;
                Expr::Number(pos, Number::Int(n), Arc::from(self.text(i)))
            }
            Kind::Number | Kind::Complex => {
                let n = literal::number(self.text(i)).map_err(|e| self.error(e))?;
                Expr::Number(pos, n, Arc::from(self.text(i)))
            }
            Kind::LeftParen => {
                self.deeper()?;
                let pipe = self.pipeline("parenthesized pipeline", Kind::RightParen)?;
                self.nesting -= 1;
                Expr::Pipe(pipe.pos, Box::new(pipe))
            }
            Kind::String | Kind::RawString => {
                let s = literal::unquote(self.text(i)).map_err(|e| self.error(e))?;
                Expr::String(pos, s.into())
            }
            _ => {
                self.at = i;
                return Ok(None);
            }
        };
        Ok(Some(e))
    }
}
