//! What a request asks to do, as kube-apiserver's request-info parser derives it from the URL
//! and method: a resource request (verb, group, version, namespace, resource, subresource,
//! name) or a non-resource one (verb and path). RBAC, impersonation and the 403 message all
//! work on these.
//!
//! The rules, as kube-apiserver applies them:
//! - `/api/{version}/...` and `/apis/{group}/{version}/...` with at least one part after the
//!   version are resource requests; everything else (including `/api/v1` and `/apis/apps/v1`)
//!   is a non-resource request whose verb is the lower-case HTTP method;
//! - POST is `create`, GET and HEAD `get`, PUT `update`, PATCH `patch`, DELETE `delete`; a GET
//!   without a name is `list`, or `watch` when `watch` is given and not `false`/`0`; a DELETE
//!   without a name is `deletecollection`; a list or watch with the field selector
//!   `metadata.name=x` is about the object `x`;
//! - `namespaces/{ns}/...` sets the namespace; `namespaces/{ns}` itself and its `status` and
//!   `finalize` subresources are the Namespace object (namespace attribute set to its name).

use std::collections::HashMap;

/// A request's query parameters (decoded).
pub type Query = HashMap<String, String>;

/// A request's authorization attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    /// The URL path (non-resource requests).
    pub path: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

impl Attributes {
    /// Parses a request the way kube-apiserver does.
    pub fn from_request(method: &http::Method, path: &str, query: &Query) -> Attributes {
        let mut a = Attributes {
            verb: method.as_str().to_lowercase(),
            path: path.to_string(),
            ..Default::default()
        };
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let parts: Vec<&str> = if parts == [""] { Vec::new() } else { parts };
        if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
            return a;
        }
        let mut rest = &parts[1..];
        if parts[0] == "apis" {
            if rest.len() < 3 {
                return a;
            }
            a.api_group = rest[0].to_string();
            rest = &rest[1..];
        }
        a.resource_request = true;
        a.api_version = rest[0].to_string();
        rest = &rest[1..];
        a.verb = match *method {
            http::Method::POST => "create",
            http::Method::GET | http::Method::HEAD => "get",
            http::Method::PUT => "update",
            http::Method::PATCH => "patch",
            http::Method::DELETE => "delete",
            _ => "",
        }
        .to_string();
        if rest.first() == Some(&"namespaces")
            && let Some(ns) = rest.get(1)
        {
            a.namespace = ns.to_string();
            if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        if let Some(r) = rest.first() {
            a.resource = r.to_string();
        }
        if let Some(n) = rest.get(1) {
            a.name = n.to_string();
        }
        if let Some(s) = rest.get(2) {
            a.subresource = s.to_string();
        }
        if a.name.is_empty() && a.verb == "get" {
            let watch = query
                .get("watch")
                .is_some_and(|w| w != "0" && !w.eq_ignore_ascii_case("false"));
            a.verb = if watch { "watch" } else { "list" }.to_string();
            if let Some(name) = query.get("fieldSelector").and_then(|s| exact_name(s)) {
                a.name = name;
            }
        }
        if a.name.is_empty() && a.verb == "delete" {
            a.verb = "deletecollection".to_string();
        }
        a
    }
}

/// The `x` of a field selector that requires `metadata.name=x` (or `==x`), when `x` is a valid
/// path segment.
fn exact_name(selector: &str) -> Option<String> {
    selector
        .split(',')
        .find_map(|term| {
            let term = term.trim();
            let (key, value) = term
                .split_once("==")
                .or_else(|| term.split_once('='))
                .filter(|(k, _)| !k.ends_with('!'))?;
            (key.trim() == "metadata.name").then(|| value.trim().to_string())
        })
        .filter(|n| !n.is_empty() && n != "." && n != ".." && !n.contains('/') && !n.contains('%'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: http::Method, path: &str, query: &[(&str, &str)]) -> Attributes {
        let q = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Attributes::from_request(&method, path, &q)
    }

    #[test]
    fn resource_requests_are_parsed_as_kube_apiserver_does() {
        let a = parse(http::Method::GET, "/api/v1/namespaces/ns/pods", &[]);
        assert_eq!(
            (a.verb.as_str(), a.namespace.as_str(), a.resource.as_str()),
            ("list", "ns", "pods")
        );
        let a = parse(
            http::Method::GET,
            "/api/v1/namespaces/ns/pods",
            &[("watch", "true")],
        );
        assert_eq!(a.verb, "watch");
        let a = parse(
            http::Method::GET,
            "/api/v1/namespaces/ns/pods",
            &[("fieldSelector", "metadata.name=web")],
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", "web"));
        let a = parse(http::Method::GET, "/api/v1/namespaces/ns/pods/web/log", &[]);
        assert_eq!(
            (a.verb.as_str(), a.name.as_str(), a.subresource.as_str()),
            ("get", "web", "log")
        );
        let a = parse(http::Method::GET, "/api/v1/namespaces/ns", &[]);
        assert_eq!(
            (a.resource.as_str(), a.name.as_str(), a.namespace.as_str()),
            ("namespaces", "ns", "ns")
        );
        let a = parse(http::Method::PUT, "/api/v1/namespaces/ns/finalize", &[]);
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.subresource.as_str()),
            ("update", "namespaces", "finalize")
        );
        let a = parse(
            http::Method::DELETE,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            &[],
        );
        assert_eq!(
            (a.verb.as_str(), a.api_group.as_str(), a.namespace.as_str()),
            ("deletecollection", "rbac.authorization.k8s.io", "")
        );
        let a = parse(
            http::Method::POST,
            "/api/v1/namespaces/ns/serviceaccounts/sa/token",
            &[],
        );
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.subresource.as_str()),
            ("create", "serviceaccounts", "token")
        );
    }

    #[test]
    fn short_paths_are_non_resource_requests() {
        for p in [
            "/api",
            "/api/v1",
            "/apis/apps/v1",
            "/healthz",
            "/",
            "/version",
        ] {
            let a = parse(http::Method::GET, p, &[]);
            assert!(!a.resource_request, "{p}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", p));
        }
        assert_eq!(parse(http::Method::POST, "/foo", &[]).verb, "post");
    }
}
