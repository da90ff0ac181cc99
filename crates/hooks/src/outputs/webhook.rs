//! The answers of webhook hooks: `VALIDATING_RESPONSE_PATH` (admission) and
//! `CONVERSION_RESPONSE_PATH` (conversion), turned into the API server's review responses.
//!
//! As in shell-operator, an empty or malformed admission answer denies the request (with a
//! message naming the problem) and an empty or malformed conversion answer fails the
//! conversion; neither is a failed run.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::AdmissionKind;

/// What an admission hook answered.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionAnswer {
    pub allowed: bool,
    pub message: Option<String>,
    pub warnings: Vec<String>,
    /// A mutating hook's RFC 6902 patch, checked to be a JSON Patch, as its JSON text.
    pub patch: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmission {
    allowed: bool,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
    /// Base64 of the JSON Patch (Go's `[]byte` in JSON).
    #[serde(default)]
    patch: Option<String>,
}

/// Reads an admission hook's answer. Never fails: what cannot be read denies, saying why.
pub fn parse_admission_response(text: &str, kind: AdmissionKind) -> AdmissionAnswer {
    let deny = |why: String| AdmissionAnswer {
        allowed: false,
        message: Some(why),
        warnings: vec![],
        patch: None,
    };
    if text.trim().is_empty() {
        return deny("the hook wrote no answer to VALIDATING_RESPONSE_PATH".into());
    }
    let raw: RawAdmission = match serde_json::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            return deny(format!(
                "the hook's answer in VALIDATING_RESPONSE_PATH is invalid: {e}"
            ));
        }
    };
    let patch = match raw.patch.filter(|p| !p.is_empty()) {
        None => None,
        Some(_) if kind == AdmissionKind::Validating => {
            return deny("a kubernetesValidating hook may not answer with a patch".into());
        }
        Some(b64) => match decode_patch(&b64) {
            Ok(p) => Some(p),
            Err(e) => return deny(format!("the hook's patch is invalid: {e}")),
        },
    };
    AdmissionAnswer {
        allowed: raw.allowed,
        message: raw.message.filter(|m| !m.is_empty()),
        warnings: raw.warnings,
        patch,
    }
}

fn decode_patch(b64: &str) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let patch: json_patch::Patch =
        serde_json::from_slice(&bytes).map_err(|e| format!("not a JSON Patch: {e}"))?;
    serde_json::to_string(&patch).map_err(|e| e.to_string())
}

impl AdmissionAnswer {
    /// The `AdmissionReview` (v1) answering the request `uid`.
    pub fn review(&self, uid: &str) -> Value {
        let mut response = json!({"uid": uid, "allowed": self.allowed});
        if !self.allowed {
            response["status"] = json!({
                "code": 403,
                "reason": "Forbidden",
                "message": self.message.clone().unwrap_or_default(),
            });
        } else if let Some(message) = &self.message {
            response["status"] = json!({"message": message});
        }
        if !self.warnings.is_empty() {
            response["warnings"] = json!(self.warnings);
        }
        if let Some(patch) = self.patch.as_ref().filter(|_| self.allowed) {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConversion {
    #[serde(default)]
    failed_message: String,
    #[serde(default)]
    converted_objects: Option<Vec<Value>>,
}

/// Reads a conversion hook's answer: the converted objects, or why the conversion failed.
pub fn parse_conversion_response(text: &str, expected: usize) -> Result<Vec<Value>, String> {
    if text.trim().is_empty() {
        return Err("the hook wrote no answer to CONVERSION_RESPONSE_PATH".into());
    }
    let raw: RawConversion = serde_json::from_str(text)
        .map_err(|e| format!("the hook's answer in CONVERSION_RESPONSE_PATH is invalid: {e}"))?;
    if !raw.failed_message.is_empty() {
        return Err(raw.failed_message);
    }
    let objects = raw.converted_objects.unwrap_or_default();
    if objects.len() != expected {
        return Err(format!(
            "the hook converted {} objects, the request had {expected}",
            objects.len()
        ));
    }
    Ok(objects)
}

/// The `ConversionReview` (v1) answering `uid`.
pub fn conversion_review(uid: &str, result: Result<Vec<Value>, String>) -> Value {
    let response = match result {
        Ok(objects) => {
            json!({"uid": uid, "convertedObjects": objects, "result": {"status": "Success"}})
        }
        Err(message) => {
            json!({"uid": uid, "convertedObjects": [], "result": {"status": "Failed", "message": message}})
        }
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_answers() {
        let a = parse_admission_response(
            r#"{"allowed":false,"message":"no"}"#,
            AdmissionKind::Validating,
        );
        assert_eq!(
            a.review("u")["response"],
            json!({"uid":"u","allowed":false,"status":{"code":403,"reason":"Forbidden","message":"no"}})
        );
        let empty = parse_admission_response("  ", AdmissionKind::Validating);
        assert!(!empty.allowed && empty.message.unwrap().contains("no answer"));
        let bad = parse_admission_response("{\"allowed\":\"yes\"}", AdmissionKind::Validating);
        assert!(!bad.allowed && bad.message.unwrap().contains("invalid"));
        let b64 = base64::engine::general_purpose::STANDARD
            .encode(r#"[{"op":"add","path":"/data/x","value":"1"}]"#);
        let m = parse_admission_response(
            &format!(r#"{{"allowed":true,"patch":"{b64}"}}"#),
            AdmissionKind::Mutating,
        );
        let review = m.review("u");
        assert_eq!(review["response"]["patchType"], "JSONPatch");
        let v = parse_admission_response(
            &format!(r#"{{"allowed":true,"patch":"{b64}"}}"#),
            AdmissionKind::Validating,
        );
        assert!(!v.allowed, "a validating hook's patch denies");
        let junk = base64::engine::general_purpose::STANDARD.encode("{}");
        let j = parse_admission_response(
            &format!(r#"{{"allowed":true,"patch":"{junk}"}}"#),
            AdmissionKind::Mutating,
        );
        assert!(!j.allowed && j.message.unwrap().contains("JSON Patch"));
    }

    #[test]
    fn conversion_answers() {
        assert_eq!(
            parse_conversion_response(r#"{"convertedObjects":[{"a":1}]}"#, 1),
            Ok(vec![json!({"a":1})])
        );
        assert_eq!(
            parse_conversion_response(r#"{"failedMessage":"nope"}"#, 1),
            Err("nope".into())
        );
        assert!(
            parse_conversion_response(r#"{"convertedObjects":[]}"#, 1)
                .unwrap_err()
                .contains("had 1")
        );
        assert!(parse_conversion_response("", 1).is_err());
    }
}
