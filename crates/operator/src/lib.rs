//! Declarative operators in packages: Δ-controller's `Operator` specs (`dcontroller.io/v1alpha1`),
//! read, checked and evaluated.
//!
//! - [`spec`]: the Operator document, every error naming the controller and field;
//! - [`expr`] and [`jsonpath`]: the expression language and the JSONPath it reads with;
//! - [`pipeline`]: `@join`, `@select`, `@project`, `@unwind`, `@gather`;
//! - [`engine`]: one controller evaluated incrementally (an event recomputes only the rows and
//!   groups it touches), producing the writes its target receives;
//! - [`target`]: the Updater and Patcher write rules;
//! - [`offline`]: operators run over a set of objects with no cluster (`berth operator eval`).
//!
//! A domain crate: no cluster client, transport or storage.

pub mod engine;
pub mod expr;
pub mod group;
pub mod jsonpath;
pub mod limits;
pub mod offline;
pub mod pipeline;
pub mod spec;
pub mod status;
pub mod target;
pub mod value;

pub use engine::{Engine, Event, Outcome, Write};
pub use offline::{Evaluation, Received, Simulation, evaluate};
pub use spec::{Operator, SpecError, read_operators};
