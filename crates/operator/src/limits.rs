//! The bounds of operator specs and their evaluation.

/// Work one evaluation may do (list items, string bytes and joined rows it makes): one event
/// through one controller, or one resync. Past it the evaluation fails with that named.
pub const EVAL_BUDGET: u64 = 4_000_000;

/// How deeply an expression may nest (its evaluation recurses as deep).
pub const MAX_EXPR_DEPTH: usize = 128;

/// How deeply a JSONPath filter may nest parentheses and negations.
pub const MAX_FILTER_DEPTH: usize = 32;

/// The highest list index a JSONPath setter extends a list to.
pub const MAX_SET_INDEX: usize = 10_000;

/// Controllers in one Operator (upstream's limit).
pub const MAX_CONTROLLERS: usize = 255;

/// Sources of one controller.
pub const MAX_SOURCES: usize = 16;

/// Operators one package may have (all its `operators/` files together).
pub const MAX_OPERATORS_PER_PACKAGE: usize = 256;

/// Bytes of one operator spec file.
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// Events an offline evaluation may process (inputs, views and the writes fed back) before it
/// stops as a loop.
pub const MAX_EVAL_EVENTS: usize = 1_000_000;

/// Errors a controller keeps (upstream's ring).
pub const ERROR_RING: usize = 10;
