//! Query parameters and DeleteOptions bodies, parsed into store options at the edge.

use std::collections::HashMap;
use std::time::Duration;

use http::HeaderMap;
use serde_json::Value;

use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{DeleteOptions, ListOptions, Propagation, WatchStart, WriteOptions};

pub type Query = HashMap<String, String>;

/// Parses the raw query string (`application/x-www-form-urlencoded`: percent-decoded,
/// `+` as space). Decoded by hand because axum's `Query` extractor wants a typed struct
/// per verb and we want one raw map for all of them.
pub fn parse(raw: Option<&str>) -> Query {
    raw.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn flag(q: &Query, key: &str) -> bool {
    matches!(q.get(key).map(String::as_str), Some("true" | "1"))
}

pub fn is_watch(q: &Query) -> bool {
    flag(q, "watch")
}

pub fn list_options(
    q: &Query,
    rt: &ResourceType,
    namespace: Option<&str>,
) -> Result<ListOptions, ApiError> {
    let limit = match q.get("limit") {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    Ok(ListOptions {
        namespace: namespace.map(String::from),
        labels: LabelSelector::parse(q.get("labelSelector").map_or("", String::as_str))?,
        fields: FieldSelector::parse(q.get("fieldSelector").map_or("", String::as_str), &rt.kind)?,
        limit,
        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
    })
}

/// Watch parameters beyond the selectors.
pub struct WatchParams {
    pub start: WatchStart,
    pub bookmarks: bool,
    pub timeout: Duration,
}

/// The apiserver's default watch timeout is randomised between 30 and 60 minutes; a
/// fixed 30 minutes keeps the dev cluster predictable.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

pub fn watch_params(q: &Query) -> Result<WatchParams, ApiError> {
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let start = if flag(q, "sendInitialEvents") {
        if q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        WatchStart::InitialEvents
    } else if rv.is_empty() || rv == "0" {
        WatchStart::Now
    } else {
        WatchStart::After(
            rv.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?,
        )
    };
    let timeout = match q.get("timeoutSeconds") {
        Some(t) => Duration::from_secs(
            t.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
        ),
        None => DEFAULT_WATCH_TIMEOUT,
    };
    Ok(WatchParams {
        start,
        bookmarks: flag(q, "allowWatchBookmarks"),
        timeout,
    })
}

fn dry_run(q: &Query) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "Invalid dry run value {other:?}: only \"All\" is supported"
        ))),
    }
}

/// Write options; the default field manager is the User-Agent's product name, as in
/// kube-apiserver (`kubectl/v1.32 ...` becomes `kubectl`).
pub fn write_options(q: &Query, headers: &HeaderMap) -> Result<WriteOptions, ApiError> {
    let manager = match q.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => m.clone(),
        None => headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string(),
    };
    Ok(WriteOptions {
        dry_run: dry_run(q)?,
        manager,
        force: flag(q, "force"),
        check: None,
    })
}

/// Delete options from the query and the optional `DeleteOptions` body.
pub fn delete_options(q: &Query, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else if crate::protobuf::is_protobuf(body) {
        crate::protobuf::decode(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions body: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions body: {e}")))?
    };
    let policy = q
        .get("propagationPolicy")
        .map(String::as_str)
        .or_else(|| body.get("propagationPolicy").and_then(Value::as_str));
    let orphan = q
        .get("orphanDependents")
        .map(|v| v == "true")
        .or_else(|| body.get("orphanDependents").and_then(Value::as_bool));
    let propagation = match (policy, orphan) {
        (Some("Foreground"), _) => Propagation::Foreground,
        (Some("Orphan"), _) | (None, Some(true)) => Propagation::Orphan,
        (Some("Background") | None, _) => Propagation::Background,
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "invalid propagationPolicy {other:?}"
            )));
        }
    };
    let body_dry_run = body
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        dry_run: dry_run(q)? || body_dry_run,
        propagation,
        precondition_uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from),
        precondition_rv: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        let q = parse(Some("labelSelector=app%20in%20(a%2Cb)&watch=true&x=a+b"));
        assert_eq!(q["labelSelector"], "app in (a,b)");
        assert!(is_watch(&q));
        assert_eq!(q["x"], "a b");
    }

    #[test]
    fn delete_options_from_body() {
        let d = delete_options(
            &Query::new(),
            br#"{"propagationPolicy":"Foreground","preconditions":{"uid":"u"}}"#,
        )
        .expect("parse");
        assert_eq!(d.propagation, Propagation::Foreground);
        assert_eq!(d.precondition_uid.as_deref(), Some("u"));
    }
}
