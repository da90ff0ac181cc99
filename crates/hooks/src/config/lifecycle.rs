//! Lifecycle bindings: the points of a package's life at which ordered hooks run.

use std::fmt;

/// A binding that runs hooks in order at a fixed point of the package
/// lifecycle (as opposed to `schedule` and `kubernetes`, which are event driven).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LifecycleBinding {
    OnStartup,
    /// Global hooks only: before converging all packages.
    BeforeAll,
    /// Global hooks only: after converging all packages.
    AfterAll,
    BeforeHelm,
    AfterHelm,
    BeforeDeleteHelm,
    AfterDeleteHelm,
}

impl LifecycleBinding {
    /// Every lifecycle binding, in the order they appear in a package's life.
    pub const ALL: [LifecycleBinding; 7] = [
        Self::OnStartup,
        Self::BeforeAll,
        Self::BeforeHelm,
        Self::AfterHelm,
        Self::AfterAll,
        Self::BeforeDeleteHelm,
        Self::AfterDeleteHelm,
    ];

    /// The config key, which is also the `binding` value of the binding context.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnStartup => "onStartup",
            Self::BeforeAll => "beforeAll",
            Self::AfterAll => "afterAll",
            Self::BeforeHelm => "beforeHelm",
            Self::AfterHelm => "afterHelm",
            Self::BeforeDeleteHelm => "beforeDeleteHelm",
            Self::AfterDeleteHelm => "afterDeleteHelm",
        }
    }
}

impl fmt::Display for LifecycleBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
