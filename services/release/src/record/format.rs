//! Helm's release record (the `release.Release` Go struct as JSON) and its storage encoding:
//! JSON, gzip, base64, placed in a Secret's `data.release` (which Kubernetes base64s again).

use base64::Engine as _;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use std::io::{Read as _, Write as _};

/// Go's zero `time.Time`, which Helm writes for `info.deleted` until a release is deleted.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// Decompressed records larger than this are refused: a Secret holds at most 1 MiB, and a
/// small gzip stream must not be able to expand without bound.
const MAX_DECODED_BYTES: u64 = 64 << 20;
/// Most bytes of `data.release` one Secret can hold (Kubernetes refuses Secrets over 1 MiB).
const MAX_ENCODED_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("release record is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("release record is not gzip: {0}")]
    Gzip(#[source] std::io::Error),
    #[error("release record is larger than {MAX_DECODED_BYTES} bytes when decompressed")]
    TooLarge,
    #[error(
        "the release record would be {size} bytes {what}, over the {limit} bytes {why}; \
         render less (fewer or smaller objects)"
    )]
    TooLargeToStore {
        size: usize,
        what: &'static str,
        limit: usize,
        why: &'static str,
    },
    #[error("release record is not the expected JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Helm's release status names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Deployed,
    Superseded,
    Uninstalling,
    Failed,
    /// A revision being installed, upgraded or rolled back to: written before its objects are
    /// applied, so that no one (another berth instance's drift repair, `helm`) takes the
    /// previous revision for the current one meanwhile.
    PendingInstall,
    PendingUpgrade,
    PendingRollback,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Deployed => "deployed",
            Status::Superseded => "superseded",
            Status::Uninstalling => "uninstalling",
            Status::Failed => "failed",
            Status::PendingInstall => "pending-install",
            Status::PendingUpgrade => "pending-upgrade",
            Status::PendingRollback => "pending-rollback",
        }
    }

    /// Whether a stored status string is one of the `pending-*` ones.
    pub fn is_pending(status: &str) -> bool {
        status.starts_with("pending-")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelmRelease {
    pub name: String,
    pub info: Info,
    pub chart: ChartRecord,
    #[serde(default)]
    pub config: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    pub manifest: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<serde_json::Value>,
    pub version: i32,
    pub namespace: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Info {
    pub first_deployed: String,
    pub last_deployed: String,
    #[serde(default = "zero_time")]
    pub deleted: String,
    #[serde(default)]
    pub description: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

/// Go's zero time, Helm's `info.deleted` for releases that are not deleted.
pub fn zero_time() -> String {
    GO_ZERO_TIME.to_string()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChartRecord {
    pub metadata: serde_json::Value,
    #[serde(default)]
    pub lock: Option<serde_json::Value>,
    #[serde(default)]
    pub templates: Vec<FileRecord>,
    #[serde(default)]
    pub values: serde_json::Value,
    #[serde(default)]
    pub schema: Option<String>,
    #[serde(default)]
    pub files: Vec<FileRecord>,
}

/// A chart file; `data` is base64 as Go's `[]byte` marshals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRecord {
    pub name: String,
    pub data: String,
}

impl FileRecord {
    pub fn new(name: &str, bytes: &[u8]) -> Self {
        FileRecord {
            name: name.to_string(),
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// The RFC 3339 timestamp Helm writes (Go's `time.Time` JSON form).
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

impl HelmRelease {
    /// The Secret name Helm uses for this revision.
    pub fn secret_name(&self) -> String {
        secret_name(&self.name, self.version)
    }

    pub fn encode(&self) -> Result<String, FormatError> {
        // Values hold Go-style float64 numbers; write whole ones as Go's encoder does (`8080`).
        let json = serde_json::to_vec(&berth_helm::render::values::go_json_numbers(
            serde_json::to_value(self)?,
        ))?;
        // A record that could not be read back would leave the release unmanageable (no
        // upgrade, no uninstall): refuse it before it is written, and so before anything of
        // the revision is applied.
        let decoded_limit = usize::try_from(MAX_DECODED_BYTES).unwrap_or(usize::MAX);
        if json.len() > decoded_limit {
            return Err(FormatError::TooLargeToStore {
                size: json.len(),
                what: "of JSON",
                limit: decoded_limit,
                why: "berth and Helm read back",
            });
        }
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&json).map_err(FormatError::Gzip)?;
        let compressed = gz.finish().map_err(FormatError::Gzip)?;
        let encoded = base64::engine::general_purpose::STANDARD.encode(compressed);
        if encoded.len() > MAX_ENCODED_BYTES {
            return Err(FormatError::TooLargeToStore {
                size: encoded.len(),
                what: "compressed",
                limit: MAX_ENCODED_BYTES,
                why: "a Secret can hold",
            });
        }
        Ok(encoded)
    }

    /// Decodes a record written by Helm or by berth. Helm 3 always gzips; the magic-number
    /// check also accepts plain JSON as Helm's decoder does.
    pub fn decode(encoded: &[u8]) -> Result<HelmRelease, FormatError> {
        let raw = base64::engine::general_purpose::STANDARD.decode(encoded)?;
        let json = if raw.starts_with(&[0x1f, 0x8b, 0x08]) {
            let mut out = Vec::new();
            GzDecoder::new(raw.as_slice())
                .take(MAX_DECODED_BYTES + 1)
                .read_to_end(&mut out)
                .map_err(FormatError::Gzip)?;
            if out.len() as u64 > MAX_DECODED_BYTES {
                return Err(FormatError::TooLarge);
            }
            out
        } else {
            raw
        };
        Ok(serde_json::from_slice(&json)?)
    }
}

pub fn secret_name(release: &str, version: i32) -> String {
    format!("sh.helm.release.v1.{release}.v{version}")
}

/// Builds the `chart` part of the record from the chart's files.
pub fn chart_record(
    files: &[(String, Vec<u8>)],
    metadata: &serde_json::Value,
    values: &serde_json::Value,
) -> ChartRecord {
    let templates = files
        .iter()
        .filter(|(p, _)| p.starts_with("templates/"))
        .map(|(p, b)| FileRecord::new(p, b))
        .collect();
    ChartRecord {
        metadata: metadata.clone(),
        lock: None,
        templates,
        values: values.clone(),
        schema: None,
        files: Vec::new(),
    }
}

/// The record's manifest as objects (for prune, uninstall and status), parsed back from the
/// Helm text so releases written by Helm itself are understood too.
pub fn recorded_objects(manifest: &str) -> Vec<serde_json::Value> {
    berth_helm::render::manifests::split_documents(manifest)
        .iter()
        .filter_map(|doc| berth_helm::render::funcs::encoding::parse_yaml(doc).ok())
        .filter(|v| v.is_object())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HelmRelease {
        HelmRelease {
            name: "rel".into(),
            info: Info {
                first_deployed: now(),
                last_deployed: now(),
                deleted: zero_time(),
                description: "Install complete".into(),
                status: Status::Deployed.as_str().into(),
                notes: String::new(),
            },
            chart: ChartRecord {
                metadata: serde_json::json!({"name": "hello", "version": "0.1.0", "apiVersion": "v2"}),
                lock: None,
                templates: vec![FileRecord::new("templates/a.yaml", b"kind: ConfigMap")],
                values: serde_json::json!({"a": 1}),
                schema: None,
                files: vec![],
            },
            config: serde_json::Map::new(),
            manifest: "---\n# Source: hello/templates/a.yaml\nkind: ConfigMap\n".into(),
            hooks: vec![],
            version: 3,
            namespace: "ns".into(),
        }
    }

    #[test]
    fn record_round_trips_through_gzip_and_base64() {
        let r = sample();
        let encoded = r.encode().unwrap_or_default();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&encoded)
            .unwrap_or_default();
        assert_eq!(&raw[..2], &[0x1f, 0x8b], "gzip magic");
        assert_eq!(
            HelmRelease::decode(encoded.as_bytes()).ok(),
            Some(r.clone())
        );
        assert_eq!(r.secret_name(), "sh.helm.release.v1.rel.v3");
    }

    #[test]
    fn records_that_could_not_be_stored_or_read_back_are_refused_when_encoded() {
        // Repetitive: compresses far below a Secret's limit, but expands past what is read back.
        let mut huge = sample();
        huge.manifest = "a".repeat(usize::try_from(MAX_DECODED_BYTES).unwrap() + 1);
        let err = huge.encode().unwrap_err().to_string();
        assert!(
            err.contains("of JSON") && err.contains("read back"),
            "{err}"
        );
        // Incompressible: over a Secret's 1 MiB once compressed.
        let mut noisy = sample();
        let mut x = 0x2545_f491_u64;
        noisy.manifest = (0..2_000_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'!' + (x % 90) as u8)
            })
            .collect();
        let err = noisy.encode().unwrap_err().to_string();
        assert!(
            err.contains("compressed") && err.contains("Secret"),
            "{err}"
        );
        assert!(sample().encode().is_ok());
    }

    #[test]
    fn json_uses_helm_field_names() {
        let json = serde_json::to_value(sample()).unwrap_or_default();
        assert!(json.pointer("/info/first_deployed").is_some());
        assert_eq!(
            json.pointer("/info/deleted"),
            Some(&serde_json::json!(GO_ZERO_TIME))
        );
        assert_eq!(
            json.pointer("/chart/metadata/name"),
            Some(&serde_json::json!("hello"))
        );
        assert_eq!(
            json.pointer("/chart/templates/0/data"),
            Some(&serde_json::json!("a2luZDogQ29uZmlnTWFw"))
        );
    }
}
