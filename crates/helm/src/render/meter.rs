//! The render's memory budget: every string, list and map a render builds is charged here, on
//! the thread that renders, and a render whose charges pass the budget fails naming it.
//!
//! The budget counts what is *built* (an allocation budget, never credited back), so it bounds
//! the render's peak memory from above whatever the template does with its values: a variable
//! that doubles a string forty times, a list of lists that shares each level (`list $l $l`,
//! cheap in the executor but expanded by every conversion or printing of it), a map reached
//! through many keys (expanded by `toYaml`). Charges are made where values come into being,
//! not per function:
//!
//! - the executor ([`crate::render::exec`]) charges every function's result (new strings by
//!   their length, new lists and maps by their entries), `include`/`tpl` text, `dict`/`set`/
//!   `merge` entries, `deepCopy`, and each template's output;
//! - the conversions every function call goes through (executor values ⇄ `gotmpl` values ⇄
//!   JSON) charge each node they make, and so do Go's printing of a value and the YAML reader's
//!   alias expansion, so a value that expands as it is converted or printed is stopped while
//!   it expands. What a call builds and drops before it returns (its arguments' conversions,
//!   its own work) is released when it returns ([`release_to`]): it bounds the call's peak,
//!   and only the result stays charged;
//! - the few functions whose one call can build far more than their arguments (`repeat`,
//!   `indent`, `replace`, `join`, `printf`' widths, ...) ask [`reserve`] for their result's size
//!   before they build it.
//!
//! Builders that cannot fail (conversions, printing) stop building once the budget is spent
//! and leave the rest out; the budget stays spent ([`over`]), so the executor fails the render
//! at its next step, before the truncated value is used for anything. Without a budget
//! ([`scoped`] with `None`) charges are only counted.

use std::cell::Cell;

/// What was being built when the budget ran out (for the error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Built {
    String,
    List,
    Map,
    Output,
}

impl std::fmt::Display for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Built::String => "a string",
            Built::List => "a list",
            Built::Map => "a map",
            Built::Output => "the template's output",
        })
    }
}

/// The budget ran out: its size, and what was being built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exceeded {
    pub limit: usize,
    pub what: Built,
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "render: memory budget of {} exceeded building {}",
            size_text(self.limit),
            self.what
        )
    }
}

/// `256 MiB`, or bytes below 1 MiB.
fn size_text(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// What one value node costs besides its text: a list slot or map entry and its share of the
/// container (the executor's values are 24 bytes, gotmpl's and JSON's a little more, and a map
/// entry carries its key and tree node). An estimate, kept on the high side.
pub const NODE: usize = 48;

thread_local! {
    static LIMIT: Cell<usize> = const { Cell::new(usize::MAX) };
    static USED: Cell<usize> = const { Cell::new(0) };
    static OVER: Cell<Option<Exceeded>> = const { Cell::new(None) };
}

/// Runs `f` with a fresh count and, with `Some(limit)`, that budget; returns what `f` gave
/// and the bytes it charged. The previous count and budget are restored afterwards.
pub fn scoped<T>(limit: Option<usize>, f: impl FnOnce() -> T) -> (T, usize) {
    struct Restore(usize, usize, Option<Exceeded>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LIMIT.with(|l| l.set(self.0));
            USED.with(|u| u.set(self.1));
            OVER.with(|o| o.set(self.2));
        }
    }
    let _restore = Restore(
        LIMIT.with(|l| l.replace(limit.unwrap_or(usize::MAX))),
        USED.with(|u| u.replace(0)),
        OVER.with(|o| o.replace(None)),
    );
    let out = f();
    (out, used())
}

/// Charges `bytes` built as `what`; false once the budget is spent (then builders stop).
#[inline]
pub fn charge(bytes: usize, what: Built) -> bool {
    let used = USED.with(|u| {
        let n = u.get().saturating_add(bytes);
        u.set(n);
        n
    });
    if used <= LIMIT.with(Cell::get) {
        return true;
    }
    spend(what);
    false
}

/// Whether `bytes` more can still be built, without charging them (for a builder that is
/// about to make a result of that size and charges it once made).
#[inline]
pub fn fits(bytes: usize, what: Built) -> bool {
    if USED.with(Cell::get).saturating_add(bytes) <= LIMIT.with(Cell::get) {
        return true;
    }
    spend(what);
    false
}

/// [`fits`] as a function's error (`error calling NAME: ...`), for the functions that check
/// their result's size before building it.
pub fn reserve(name: &str, bytes: usize, what: Built) -> gotmpl::Result<()> {
    if fits(bytes, what) {
        return Ok(());
    }
    Err(crate::render::funcs::fail(
        name,
        over().map_or_else(String::new, |e| e.to_string()),
    ))
}

/// Forgets what was charged since `mark` (a [`used`] reading): what a function call built and
/// dropped before it returned (its arguments' conversions, its own work). A spent budget
/// stays spent.
#[inline]
pub fn release_to(mark: usize) {
    USED.with(|u| {
        if u.get() > mark {
            u.set(mark);
        }
    });
}

/// Marks the budget spent (the first cause is kept).
fn spend(what: Built) {
    OVER.with(|o| {
        if o.get().is_none() {
            o.set(Some(Exceeded {
                limit: LIMIT.with(Cell::get),
                what,
            }));
        }
    });
}

/// Whether the budget is spent (and on what): once it is, it stays so for the render.
#[inline]
pub fn over() -> Option<Exceeded> {
    OVER.with(Cell::get)
}

/// Bytes charged so far in this scope.
pub fn used() -> usize {
    USED.with(Cell::get)
}

/// Whether the budget is bounded (charging costs a little; unbounded renders skip the
/// estimates that are not free).
#[inline]
pub fn bounded() -> bool {
    LIMIT.with(Cell::get) != usize::MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_budget_stays_spent_and_names_what_was_built() {
        let ((), used) = scoped(Some(100), || {
            assert!(charge(60, Built::String));
            assert!(fits(40, Built::List));
            assert!(!fits(41, Built::List));
            assert!(!charge(60, Built::Map));
            assert_eq!(
                over().map(|e| e.to_string()).as_deref(),
                Some("render: memory budget of 100 bytes exceeded building a list")
            );
        });
        assert_eq!(used, 120);
        // The scope is gone: unbounded again, nothing spent.
        assert!(over().is_none());
        assert!(!bounded());
        assert!(charge(usize::MAX / 2, Built::String));
    }

    #[test]
    fn scopes_nest_and_restore_the_outer_count() {
        let ((), outer) = scoped(Some(1 << 30), || {
            charge(10, Built::String);
            let ((), inner) = scoped(Some(5), || {
                charge(6, Built::String);
            });
            assert_eq!(inner, 6);
            assert!(over().is_none());
            charge(1, Built::String);
        });
        assert_eq!(outer, 11);
        assert_eq!(
            Exceeded {
                limit: 256 << 20,
                what: Built::String
            }
            .to_string(),
            "render: memory budget of 256 MiB exceeded building a string"
        );
    }
}
