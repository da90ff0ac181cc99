//! berth-package: what a package is and where it comes from.
//!
//! - [`load`] reads a package directory (package format v1, compatible with Deckhouse packages)
//!   into a [`Package`]: its [`Definition`], static values, settings and values [`Schema`]s.
//! - [`Schema`] compiles the OpenAPI v3 subset packages use, applies `default`s and validates,
//!   reporting [`ValidationError`]s with paths like `.ingress.host` or `.items[2]`.
//! - [`validate_settings`] and [`compute_values`] implement the settings check and the values
//!   layering (static values → settings defaults → settings → values defaults → hook patches).
//! - [`LocalRepository`] (`<root>/<package>/<version>/`) and [`ArchiveRepository`]
//!   (`<root>/<package>-<version>.tar.gz`) publish package versions into a local directory,
//!   checked and atomically; [`OciRepository`] pulls them from an OCI registry.
//! - [`Repositories`] is the installation's configuration of named repositories and roots:
//!   what an Update may name, resolved to a [`Source`] that fetches.
//!
//! The crate knows neither gRPC nor Kubernetes; services call it and map its errors.

mod chart;
mod checksum;
mod constraint;
mod conversions;
mod definition;
mod limits;
mod load;
mod patches;
mod rbac;
mod repo;
mod requirements;
mod schema;
mod settings;
mod tree;
mod values;

pub use chart::{MAX_CHART_BYTES, MAX_CHART_FILES};
pub use checksum::checksum;
pub use constraint::{ConstraintError, VersionConstraint, parse_version};
pub use conversions::{
    CONVERSIONS_DIR, ConversionError, Conversions, MAX_CONVERSION_BYTES, MAX_CONVERSIONS_PER_STEP,
    MAX_SETTINGS_VERSION, Step,
};
pub use definition::{
    Definition, DefinitionError, GLOBAL_NAME, MAX_NAME_LEN, PackageType, ValuesLayout,
};
pub use limits::{
    HookLimits, MAX_HOOK_CPU_MILLIS, MAX_HOOK_MEMORY, MAX_HOOK_PROCESSES, MIN_HOOK_CPU_MILLIS,
    MIN_HOOK_MEMORY, parse_cpu, parse_memory,
};
pub use load::{LoadError, MAX_METADATA_BYTES, Package, is_package_dir, load};
pub use patches::{compact_patches, replay_patches};
pub use rbac::{MAX_ENTRY_LEN, MAX_RULE_ENTRIES, MAX_RULES, PolicyRule, Rbac};
pub use repo::{
    ArchiveRepository, CONFIG_MEDIA_TYPE, ConfigError, Credentials, DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ENTRIES, DEFAULT_MAX_TOTAL_BYTES, Defined, Fetched, Limits, LocalRepository,
    MAX_CONFIG_BYTES, MAX_REPOSITORIES, OciAuth, OciFetched, OciRepository, OciSource, Packed,
    RepoError, Repositories, Requested, Resolved, Source, SourceFetched, digest_tree, pack,
    write_archive,
};
pub use requirements::{Dependency, DependencyGroup, Requirements};
pub use schema::{Schema, SchemaError, ValidationError};
pub use settings::{MAX_SETTINGS_BYTES, MAX_SETTINGS_DEPTH, validate_settings};
pub use values::{
    ValuesError, assemble, base_values, check_patch_scope, compute_values, config_values,
    deep_merge, own_values, patch_error, patch_settings, rebuild_values, validate_values,
    values_section,
};
