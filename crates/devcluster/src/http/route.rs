//! Parsing request paths into what they address.
//!
//! Kubernetes paths are irregular enough (`/api/v1/namespaces/x` is a namespace object,
//! `/api/v1/namespaces/x/pods` a collection inside it) that a table of axum routes would
//! be longer and less clear than this one function.

/// What a request path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Version,
    /// `/api`: the core group's versions.
    CoreVersions,
    /// `/apis`: all named groups.
    Groups,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`: the resource list.
    Resources {
        group: String,
        version: String,
    },
    OpenApiV2,
    OpenApiV3(Option<String>),
    Health,
    Object(ObjectRoute),
    Unknown,
}

/// A path inside a group/version's resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRoute {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

pub fn parse(path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "readyz" | "livez", ..] => Route::Health,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3(None),
        ["openapi", "v3", rest @ ..] => Route::OpenApiV3(Some(rest.join("/"))),
        ["api"] => Route::CoreVersions,
        ["api", v] => Route::Resources {
            group: String::new(),
            version: v.to_string(),
        },
        ["api", v, rest @ ..] => object("", v, rest),
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group(g.to_string()),
        ["apis", g, v] => Route::Resources {
            group: g.to_string(),
            version: v.to_string(),
        },
        ["apis", g, v, rest @ ..] => object(g, v, rest),
        _ => Route::Unknown,
    }
}

fn object(group: &str, version: &str, rest: &[&str]) -> Route {
    let namespaced = rest.first() == Some(&"namespaces")
        && rest.len() >= 3
        && !(group.is_empty() && rest.len() == 3 && matches!(rest[2], "status" | "finalize"));
    let (namespace, rest) = if namespaced {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    if rest.is_empty() || rest.len() > 3 {
        return Route::Unknown;
    }
    Route::Object(ObjectRoute {
        group: group.to_string(),
        version: version.to_string(),
        plural: rest[0].to_string(),
        namespace,
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(r: Route) -> ObjectRoute {
        match r {
            Route::Object(o) => o,
            other => panic!("expected an object route, got {other:?}"),
        }
    }

    #[test]
    fn namespace_objects_and_namespaced_collections_are_told_apart() {
        let ns = obj(parse("/api/v1/namespaces/team"));
        assert_eq!(
            (ns.plural.as_str(), ns.name.as_deref(), ns.namespace),
            ("namespaces", Some("team"), None)
        );
        let status = obj(parse("/api/v1/namespaces/team/status"));
        assert_eq!(
            (status.name.as_deref(), status.subresource.as_deref()),
            (Some("team"), Some("status"))
        );
        let cms = obj(parse("/api/v1/namespaces/team/configmaps"));
        assert_eq!(
            (cms.plural.as_str(), cms.namespace.as_deref(), cms.name),
            ("configmaps", Some("team"), None)
        );
        let dep = obj(parse("/apis/apps/v1/namespaces/a/deployments/web/status"));
        assert_eq!(
            (dep.group.as_str(), dep.subresource.as_deref()),
            ("apps", Some("status"))
        );
        assert_eq!(
            parse("/apis/apps/v1"),
            Route::Resources {
                group: "apps".into(),
                version: "v1".into()
            }
        );
        assert_eq!(parse("/nope"), Route::Unknown);
    }
}
