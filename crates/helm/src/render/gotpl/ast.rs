//! The tree [`super::parse`] builds: Go text/template's node kinds, cut down to what the
//! executor (`render::exec`) walks. Names (fields, variables, strings) are `Arc<str>` so
//! executing a node never allocates to read them.

use std::sync::Arc;

/// A byte offset into the template's text (lines and columns are derived from it when an
/// error is reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub offset: usize,
}

/// A sequence of nodes: a template's body, a branch of `if`/`with`/`range`.
#[derive(Debug, Clone, Default)]
pub struct ListNode {
    pub nodes: Vec<Node>,
}

impl ListNode {
    /// Go's `IsEmptyTree`: only whitespace text (comments are dropped by the lexer). An
    /// empty definition does not replace one with content.
    pub fn is_empty_tree(&self) -> bool {
        self.nodes.iter().all(|n| match n {
            Node::Text(t) => t.text.trim().is_empty(),
            _ => false,
        })
    }
}

#[derive(Debug, Clone)]
pub enum Node {
    Text(TextNode),
    Action(ActionNode),
    If(BranchNode),
    With(BranchNode),
    Range(BranchNode),
    Template(TemplateNode),
    Break(Pos),
    Continue(Pos),
}

#[derive(Debug, Clone)]
pub struct TextNode {
    pub pos: Pos,
    pub text: Arc<str>,
}

/// `{{ pipeline }}`: printed unless it declares or assigns variables.
#[derive(Debug, Clone)]
pub struct ActionNode {
    pub pos: Pos,
    pub pipe: PipeNode,
}

/// `$a, $b := cmd | cmd ...` (or `=` when `is_assign`).
#[derive(Debug, Clone)]
pub struct PipeNode {
    pub pos: Pos,
    pub decl: Vec<Arc<str>>,
    pub commands: Vec<CommandNode>,
    pub is_assign: bool,
}

/// One command of a pipeline: an operand, or a function or method with arguments.
#[derive(Debug, Clone)]
pub struct CommandNode {
    pub pos: Pos,
    pub args: Vec<Expr>,
}

/// A number constant as Go's executor reads it where any type is accepted: an `int` unless
/// its text has a fraction or exponent (or it is too large for `int64`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i64),
    Uint(u64),
    Float(f64),
}

#[derive(Debug, Clone)]
pub enum Expr {
    Dot(Pos),
    Nil(Pos),
    Bool(Pos, bool),
    /// A number literal, with its text as written (Go quotes it in errors).
    Number(Pos, Number, Arc<str>),
    String(Pos, Arc<str>),
    /// `.a.b` (the names without dots).
    Field(Pos, Vec<Arc<str>>),
    /// `$x.a.b`: the variable's name (with `$`) and its fields.
    Variable(Pos, Arc<str>, Vec<Arc<str>>),
    /// A function name.
    Identifier(Pos, Arc<str>),
    /// `(pipeline)`.
    Pipe(Pos, Box<PipeNode>),
    /// `(pipeline).a.b` or `fn.a`: fields of another term's value; the position is the
    /// first field's, as Go places it.
    Chain(Pos, Box<Expr>, Vec<Arc<str>>),
}

impl Expr {
    pub fn pos(&self) -> Pos {
        match self {
            Expr::Dot(p)
            | Expr::Nil(p)
            | Expr::Bool(p, _)
            | Expr::Number(p, ..)
            | Expr::String(p, _)
            | Expr::Field(p, _)
            | Expr::Variable(p, ..)
            | Expr::Identifier(p, _)
            | Expr::Pipe(p, _)
            | Expr::Chain(p, ..) => *p,
        }
    }
}

/// `if`, `with` and `range`: the pipeline, the body and the `else` body.
#[derive(Debug, Clone)]
pub struct BranchNode {
    pub pos: Pos,
    pub pipe: PipeNode,
    pub body: ListNode,
    pub else_body: Option<ListNode>,
}

/// `{{ template "name" pipeline }}` (also what a `block` leaves in place).
#[derive(Debug, Clone)]
pub struct TemplateNode {
    pub pos: Pos,
    pub name: Arc<str>,
    pub pipe: Option<PipeNode>,
}

/// A `define` (or `block`): the name and the body.
#[derive(Debug, Clone)]
pub struct DefineNode {
    pub name: Arc<str>,
    pub body: ListNode,
}
