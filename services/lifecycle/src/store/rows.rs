//! A [`Package`] as a `packages` row: the one place that knows its columns and their encoding
//! (text for phases and kinds, JSON text for documents, 0/1 for flags).

use std::str::FromStr;

use berth_lifecycle_core::scheduler::LoadedSpec;
use berth_lifecycle_core::{
    Generation, Kind, Owner, Package, PackageId, PackageKey, Phase, VersionRequest,
};
use berth_package::{Conversions, Step};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::Row as _;
use sqlx::any::{AnyArguments, AnyRow};

use super::StoreError;

type Query<'q> = sqlx::query::Query<'q, sqlx::Any, AnyArguments>;

/// Stores a package for the first time: the columns [`bind`] binds, then the identity and the
/// principal number and the owner (none of them changes while the row exists).
pub(super) const INSERT: &str = "INSERT INTO packages (repository, package, version, generation, removing, phase,
     observed_generation, conditions, values_json, values_patch, settings_schema, schema_version, hooks,
     last_error, enabled, loaded_version, weight, requirements, reads_global, settings, settings_version,
     conversions, after_all_due, hook_configs, rbac, suspended, started, key, kind, name, namespace,
     principal, owner)
   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
     $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33)";

/// Writes every column a change may change (all but the identity, the principal number and
/// the owner).
pub(super) const SAVE: &str = "UPDATE packages SET repository = $1, package = $2, version = $3, generation = $4,
     removing = $5, phase = $6, observed_generation = $7, conditions = $8, values_json = $9,
     values_patch = $10, settings_schema = $11, schema_version = $12, hooks = $13, last_error = $14,
     enabled = $15, loaded_version = $16, weight = $17, requirements = $18, reads_global = $19,
     settings = $20, settings_version = $21, conversions = $22, after_all_due = $23, hook_configs = $24,
     rbac = $25, suspended = $26, started = $27
   WHERE key = $28";

/// Binds `row`'s changeable columns as `$1`..`$27`, in [`INSERT`]'s and [`SAVE`]'s order.
pub(super) fn bind<'q>(query: Query<'q>, row: &Package) -> Query<'q> {
    let schema = row.settings_schema.as_ref().map(|s| {
        s.as_ref()
            .map(Value::to_string)
            .unwrap_or_else(|| "null".to_owned())
    });
    let (loaded_version, weight, requirements, reads_global) = match &row.loaded {
        Some(l) => (
            Some(l.version.to_string()),
            l.weight,
            to_json(&l.requirements),
            l.reads_global,
        ),
        None => (None, 0, "{}".to_owned(), false),
    };
    query
        .bind(row.repository.clone())
        .bind(row.package.clone())
        .bind(row.version.as_str().to_owned())
        .bind(row.generation.get())
        .bind(i64::from(row.removing))
        .bind(row.phase.as_str())
        .bind(row.observed_generation.get())
        .bind(to_json(&row.conditions))
        .bind(row.values.to_string())
        .bind(Value::Array(row.values_patch.clone()).to_string())
        .bind(schema)
        .bind(row.schema_version.clone())
        .bind(to_json(&row.hooks))
        .bind(row.last_error.clone())
        .bind(i64::from(row.enabled))
        .bind(loaded_version)
        .bind(weight)
        .bind(requirements)
        .bind(i64::from(reads_global))
        .bind(row.settings.to_string())
        .bind(i64::from(row.settings_version))
        .bind(row.conversions.as_ref().map(conversions_json))
        .bind(i64::from(row.after_all_due))
        .bind(row.hook_configs.clone())
        .bind(row.rbac.clone())
        .bind(i64::from(row.suspended))
        .bind(i64::from(row.started))
}

/// JSON text of a value the domain defines; they all serialize.
fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// A stored row as the domain's package.
pub(super) fn decode(r: &AnyRow) -> Result<Package, StoreError> {
    let key: String = r.get("key");
    let corrupt = |column: &'static str, reason: String| StoreError::Corrupt {
        key: key.clone(),
        column,
        reason,
    };
    let json = |column: &'static str| doc::<Value>(r, &key, column);
    let kind: String = r.get("kind");
    let phase: String = r.get("phase");
    let schema: Option<String> = r.get("settings_schema");
    let settings_schema = match schema {
        None => None,
        Some(text) => {
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| corrupt("settings_schema", e.to_string()))?;
            Some(if v.is_null() { None } else { Some(v) })
        }
    };
    let loaded_version: Option<String> = r.get("loaded_version");
    let loaded = match loaded_version {
        None => None,
        Some(text) => Some(LoadedSpec {
            version: berth_package::parse_version(&text)
                .map_err(|e| corrupt("loaded_version", e.to_string()))?,
            weight: r.get("weight"),
            requirements: doc(r, &key, "requirements")?,
            reads_global: r.get::<i64, _>("reads_global") != 0,
        }),
    };
    let conversions: Option<String> = r.get("conversions");
    let conversions = conversions
        .map(|text| conversions_from_json(&text))
        .transpose()
        .map_err(|e| corrupt("conversions", e))?;
    let settings_version = u32::try_from(r.get::<i64, _>("settings_version"))
        .map_err(|e| corrupt("settings_version", e.to_string()))?;
    let values_patch = match json("values_patch")? {
        Value::Array(ops) => ops,
        _ => return Err(corrupt("values_patch", "not an array".into())),
    };
    let version: String = r.get("version");
    let principal = u32::try_from(r.get::<i64, _>("principal"))
        .ok()
        .filter(|p| *p >= 1)
        .ok_or_else(|| corrupt("principal", "not a number from 1 to 2^32-1".into()))?;
    Ok(Package {
        id: PackageId {
            kind: Kind::from_str(&kind).map_err(|_| corrupt("kind", kind.clone()))?,
            name: r.get("name"),
            namespace: r.get("namespace"),
        },
        repository: r.get("repository"),
        package: r.get("package"),
        version: VersionRequest::parse(&version),
        generation: Generation::new(r.get("generation")),
        observed_generation: Generation::new(r.get("observed_generation")),
        settings: json("settings")?,
        settings_version,
        phase: Phase::from_str(&phase).map_err(|_| corrupt("phase", phase.clone()))?,
        conditions: doc(r, &key, "conditions")?,
        values: json("values_json")?,
        values_patch,
        settings_schema,
        schema_version: r.get("schema_version"),
        conversions,
        hooks: doc(r, &key, "hooks")?,
        last_error: r.get("last_error"),
        removing: r.get::<i64, _>("removing") != 0,
        enabled: r.get::<i64, _>("enabled") != 0,
        loaded,
        after_all_due: r.get::<i64, _>("after_all_due") != 0,
        hook_configs: r.get("hook_configs"),
        rbac: r.get("rbac"),
        principal,
        owner: Owner::from_stored(r.get("owner")),
        suspended: r.get::<i64, _>("suspended") != 0,
        started: r.get::<i64, _>("started") != 0,
        key: PackageKey::from_issued(key),
    })
}

/// The JSON document in `column` of `key`'s row.
fn doc<T: serde::de::DeserializeOwned>(
    r: &AnyRow,
    key: &str,
    column: &'static str,
) -> Result<T, StoreError> {
    let text: String = r.get(column);
    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        column,
        reason: e.to_string(),
    })
}

/// Conversions as the `conversions` column keeps them (JSON).
#[derive(Serialize, Deserialize)]
struct StoredConversions {
    latest: u32,
    steps: Vec<StoredStep>,
}

#[derive(Serialize, Deserialize)]
struct StoredStep {
    version: u32,
    expressions: Vec<String>,
}

pub(super) fn conversions_json(c: &Conversions) -> String {
    to_json(&StoredConversions {
        latest: c.latest(),
        steps: c
            .steps()
            .map(|s| StoredStep {
                version: s.version,
                expressions: s.expressions.clone(),
            })
            .collect(),
    })
}

pub(super) fn conversions_from_json(text: &str) -> Result<Conversions, String> {
    let stored: StoredConversions = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Conversions::from_steps(
        stored.latest,
        stored.steps.into_iter().map(|s| Step {
            version: s.version,
            expressions: s.expressions,
        }),
    )
    .map_err(|(file, e)| format!("{file}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip_through_the_store() {
        let c = Conversions::from_steps(
            3,
            [
                Step {
                    version: 2,
                    expressions: vec![".replicas = .size | del(.size)".into()],
                },
                Step {
                    version: 3,
                    expressions: vec![".scale = {replicas}".into(), "del(.replicas)".into()],
                },
            ],
        )
        .unwrap();
        assert_eq!(conversions_from_json(&conversions_json(&c)).unwrap(), c);
        let e = conversions_from_json(r#"{"latest": 3, "steps": []}"#).unwrap_err();
        assert!(e.contains("v2.yaml"), "{e}");
    }
}
