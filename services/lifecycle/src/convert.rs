//! proto ↔ domain conversions for the lifecycle service, in one place.

use berth_proto::json;
use berth_proto::v1;

use crate::model::{Condition, Kind, PackageId};
use crate::store::PackageRow;

/// Parses a requested package reference. Apps are the default kind.
pub fn package_id(r: Option<&v1::PackageRef>) -> Result<PackageId, tonic::Status> {
    let r =
        r.ok_or_else(|| tonic::Status::invalid_argument("ref: required (the package's name)"))?;
    let kind = match v1::PackageKind::try_from(r.kind) {
        Ok(v1::PackageKind::Unspecified | v1::PackageKind::App) => Kind::App,
        Ok(v1::PackageKind::Module) => Kind::Module,
        Err(_) => {
            return Err(tonic::Status::invalid_argument(format!(
                "ref.kind: unknown value {}",
                r.kind
            )));
        }
    };
    PackageId::new(kind, &r.name, &r.namespace)
        .map_err(|e| tonic::Status::invalid_argument(format!("ref.{e}")))
}

pub fn package_ref(id: &PackageId) -> v1::PackageRef {
    v1::PackageRef {
        kind: match id.kind {
            Kind::App => v1::PackageKind::App,
            Kind::Module => v1::PackageKind::Module,
        } as i32,
        name: id.name.clone(),
        namespace: id.namespace.clone(),
    }
}

fn timestamp(rfc3339: &str) -> Option<prost_types::Timestamp> {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    Some(prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    })
}

fn condition(c: &Condition) -> v1::Condition {
    v1::Condition {
        r#type: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        observed_generation: c.observed_generation,
        last_transition_time: timestamp(&c.last_transition_time),
    }
}

pub fn package(row: &PackageRow) -> v1::Package {
    v1::Package {
        r#ref: Some(package_ref(&row.id)),
        key: row.key.clone(),
        repository: row.repository.clone(),
        package: row.package.clone(),
        version: row.version.clone(),
        generation: row.generation,
        phase: row.phase.as_str().to_owned(),
        conditions: row.conditions.iter().map(condition).collect(),
        settings: Some(json::to_struct(&row.settings)),
        values: Some(json::to_struct(&row.values)),
        hooks: row
            .hooks
            .iter()
            .map(|h| v1::Hook {
                name: h.name.clone(),
                bindings: h.bindings.clone(),
                runs: h.runs,
                last_run: h.last_run.as_deref().and_then(timestamp),
                last_error: h.last_error.clone(),
            })
            .collect(),
        last_error: row.last_error.clone(),
        observed_generation: row.observed_generation,
    }
}
