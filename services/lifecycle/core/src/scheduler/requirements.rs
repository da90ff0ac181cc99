//! What a loaded package requires (`requirements` of package.yaml) and what else the scheduler
//! needs of it, as Load reports them.

use berth_package::VersionConstraint;
use semver::Version;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A version constraint, stored as the text the package wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint(pub VersionConstraint);

impl Serialize for Constraint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for Constraint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        VersionConstraint::parse(&text)
            .map(Constraint)
            .map_err(serde::de::Error::custom)
    }
}

/// A dependency on another package by name; no constraint accepts any version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<Constraint>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub members: Vec<Dependency>,
}

/// `requirements` of a loaded package.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Requirements {
    pub kubernetes: Option<Constraint>,
    pub platform: Option<Constraint>,
    pub mandatory: Vec<Dependency>,
    pub conditional: Vec<Dependency>,
    pub any_of: Vec<Group>,
    pub none_of: Vec<Group>,
}

/// What Load found out about a package that the scheduler needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedSpec {
    /// The version `package.yaml` declares.
    pub version: Version,
    /// `weight` as written (0: unset).
    pub weight: i64,
    pub requirements: Requirements,
    /// The chart may read the global values (not a scheduling fact: a change of the global
    /// values re-runs the packages that have it).
    pub reads_global: bool,
}
