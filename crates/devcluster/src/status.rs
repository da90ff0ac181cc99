//! Kubernetes `Status` error bodies.
//!
//! Clients branch on `code` and `reason` (kube-rs maps 404 to "not found", helm retries on
//! 409 Conflict, kubectl prints `message`), so every failure the REST layer reports is an
//! [`ApiError`] carrying exactly those fields, rendered the way kube-apiserver renders them.

use serde_json::{Value, json};

/// A failed API request, rendered as a `kind: Status` body with the same HTTP code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (name, group, kind, causes), when the failure is about one object.
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> ApiError {
        // As in kube-apiserver, an empty group (the core group) and an empty name are left out.
        let mut d = serde_json::Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        d.insert("kind".into(), json!(kind));
        self.details = Some(Value::Object(d));
        self
    }

    /// `<resource>.<group> "<name>" not found`, with `kind` set to the plural as the apiserver does.
    pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// A URL that names no servable resource (unknown group, version or kind).
    pub fn no_route(path: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .with_details(group, resource, name)
    }

    /// Optimistic-concurrency failure on a stale `metadata.resourceVersion`.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .with_details(group, resource, name)
    }

    /// Server-side apply conflicts: one cause per conflicting field, as kubectl prints them.
    pub fn apply_conflict(message: String, causes: Vec<Value>) -> ApiError {
        let mut e = ApiError::new(409, "Conflict", message);
        e.details = Some(json!({ "causes": causes }));
        e
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// A well-formed request whose object fails validation.
    pub fn invalid(group: &str, kind: &str, name: &str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {message}"),
        )
        .with_details(group, kind, name)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "Forbidden", message)
    }

    /// kube-apiserver's `NewForbidden`: `<resource>.<group> "<name>" is forbidden: <reason>`
    /// (without the name when there is none; `forbidden: <reason>` without a resource, with
    /// empty details).
    pub fn forbidden_for(group: &str, resource: &str, name: &str, reason: &str) -> ApiError {
        if resource.is_empty() {
            let mut e = ApiError::forbidden(format!("forbidden: {reason}"));
            e.details = Some(json!({}));
            return e;
        }
        let what = qualified(group, resource);
        let message = if name.is_empty() {
            format!("{what} is forbidden: {reason}")
        } else {
            format!("{what} \"{name}\" is forbidden: {reason}")
        };
        ApiError::forbidden(message).with_details(group, resource, name)
    }

    /// [`ApiError::forbidden_for`] an object of `rt`.
    pub fn forbidden_object(
        rt: &crate::resources::ResourceType,
        name: &str,
        reason: &str,
    ) -> ApiError {
        ApiError::forbidden_for(&rt.group, &rt.plural, name, reason)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// A body in a format this endpoint does not take; `accepted` lists the ones it does.
    /// 415 for a media type that is understood only for some bodies, saying why this one
    /// was not.
    pub fn unsupported_media_type_because(content_type: &str, why: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request in {content_type:?} cannot be used: {why}"),
        )
    }

    pub fn unsupported_media_type(content_type: &str, accepted: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted} (got {content_type:?})"
            ),
        )
    }

    /// 410 Gone: a watch or continue token from a resourceVersion the server no longer keeps.
    pub fn gone(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }

    /// The `kind: Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// A `Status` reporting success, returned by deletes that complete immediately for
/// callers that asked for it and by deletecollection-like operations.
pub fn success_status(details: Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_reads_like_the_apiserver() {
        let s = ApiError::not_found("apps", "deployments", "web").to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "deployments.apps \"web\" not found");
        assert_eq!(s["details"]["name"], "web");
    }
}
