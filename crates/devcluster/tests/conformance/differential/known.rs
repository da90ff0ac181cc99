//! The differences between the dev cluster and kube-apiserver that the differential test
//! accepts. Each one is documented, with its reason, in the "Known differences from a real
//! API server" section of the crate docs (`src/lib.rs`), by the same id; a test keeps both
//! lists equal, and an entry that explains no difference fails the run.

use std::collections::BTreeSet;

/// Which side lacks the value, for differences that are about presence.
pub enum When {
    Any,
    /// Only the real server has it.
    #[allow(dead_code)]
    DevAbsent,
    /// Only the dev cluster has it.
    RealAbsent,
}

pub struct Known {
    pub id: &'static str,
    /// Request kinds it applies to (`*` at the end: a prefix).
    pub kinds: &'static [&'static str],
    /// JSON pointers into the answer (`/code`, `/body/...`); a difference at or below one.
    pub paths: &'static [&'static str],
    pub when: When,
}

pub const KNOWN: &[Known] = &[
    Known {
        id: "discovery-subset",
        kinds: &["discovery: core resources", "discovery: group resources"],
        paths: &["/body/resources", "/body/apiVersion"],
        when: When::Any,
    },
    Known {
        id: "unknown-path-body",
        kinds: &[
            "discovery: unknown group",
            "get: unknown resource (404)",
            "scale: of a kind without one (404)",
        ],
        paths: &["/body"],
        when: When::Any,
    },
    Known {
        id: "openapi-v2",
        kinds: &["openapi v2"],
        paths: &[""],
        when: When::Any,
    },
    Known {
        id: "openapi-schemas",
        kinds: &["openapi v3 group document"],
        paths: &["/has ConfigMap schema"],
        when: When::Any,
    },
    Known {
        id: "builtin-validation",
        kinds: &[
            "create: invalid data key (422)",
            "create deployment: missing required fields (422)",
        ],
        paths: &[""],
        when: When::Any,
    },
    Known {
        id: "field-validation",
        kinds: &[
            "create: unknown field, fieldValidation=Strict (400)",
            "create: unknown field, fieldValidation=Warn",
            "update: unknown field, fieldValidation=Strict (400)",
            "custom resource: unknown field, fieldValidation=Strict (400)",
            "custom resource: create (pruned, defaulted)",
        ],
        paths: &[""],
        when: When::Any,
    },
    Known {
        id: "error-wording",
        kinds: &["*"],
        paths: &[
            "/body/message",
            "/body/details/causes",
            "/body/details/kind",
            "/body/details/name",
        ],
        when: When::Any,
    },
    Known {
        id: "option-errors",
        kinds: &[
            "dry run: invalid value (400)",
            "delete: invalid propagationPolicy (400)",
            "watch: invalid resourceVersion (400)",
            "apply: missing fieldManager (400)",
            "create in a terminating namespace (403)",
            "patch: unsupported content type (415)",
        ],
        paths: &["/code", "/body"],
        when: When::Any,
    },
    Known {
        id: "json-patch-errors",
        kinds: &[
            "patch: JSON patch test fails (422)",
            "patch: JSON patch on a missing path (422)",
            "patch: strategic merge",
        ],
        paths: &["/code", "/body"],
        when: When::Any,
    },
    Known {
        id: "list-paging",
        kinds: &[
            "list: first page (limit)",
            "list: next page (continue)",
            "custom resource: list",
        ],
        paths: &[
            "/body/metadata/remainingItemCount",
            "/body/metadata/continue",
        ],
        when: When::Any,
    },
    Known {
        id: "table-columns",
        kinds: &["list: table (kubectl get)"],
        paths: &["/columns"],
        when: When::Any,
    },
    Known {
        id: "controller-managed-fields",
        kinds: &[
            "create deployment",
            "patch: strategic merge of a keyed list",
            "patch: strategic merge $patch: delete",
            "status: get",
            "namespace: *",
            "status: merge patch",
            "crd: *",
            "custom resource: get",
            "apply: second manager shares a value",
            "dry run: apply",
        ],
        paths: &["/body/metadata/managedFields", "/body/metadata/annotations"],
        when: When::Any,
    },
    Known {
        id: "set-lists",
        kinds: &["create with a finalizer", "delete: object with a finalizer"],
        paths: &["/body/metadata/managedFields"],
        when: When::Any,
    },
    Known {
        id: "namespace-conditions",
        kinds: &["namespace: delete", "status: merge patch"],
        paths: &[
            "/body/status/conditions",
            "/body/metadata/deletionGracePeriodSeconds",
        ],
        when: When::Any,
    },
    Known {
        id: "crd-lifecycle",
        kinds: &["crd: *"],
        paths: &[
            "/body/spec/conversion",
            "/body/status",
            "/body/metadata/deletionTimestamp",
            "/body/metadata/finalizers",
        ],
        when: When::Any,
    },
    Known {
        id: "cr-unconditional-update",
        kinds: &["custom resource: status update", "custom resource: get"],
        paths: &[
            "",
            "/body/status",
            "/body/spec",
            "/body/metadata/generation",
        ],
        when: When::Any,
    },
    Known {
        id: "cr-scale",
        kinds: &["custom resource: scale", "custom resource: scale patch"],
        paths: &[""],
        when: When::Any,
    },
    Known {
        id: "scale-zero-replicas",
        kinds: &["scale: update"],
        paths: &["/body/spec/replicas"],
        when: When::RealAbsent,
    },
    Known {
        id: "watch-selector-exit",
        kinds: &["watch from a resourceVersion (label selector)"],
        paths: &[
            "/events/2/object/metadata/labels",
            "/events/2/object/metadata/managedFields",
        ],
        when: When::Any,
    },
];

/// Entries whose difference comes and goes between runs, so that a run they explain nothing
/// in is no sign the difference is gone: kube-apiserver names the first binding that allows a
/// request, in an order that changes with its informer caches' iteration.
pub const INTERMITTENT: &[&str] = &["rbac-reason-order"];

/// The differences the authorization scenario (`authz.rs`) accepts. It runs with this list
/// only: no blanket entry such as `error-wording` hides a difference in a 403's wording.
pub const AUTHZ_KNOWN: &[Known] = &[Known {
    id: "rbac-reason-order",
    kinds: &["authz: access review (non-resource)"],
    paths: &["/body/status/reason"],
    when: When::Any,
}];

/// The differences the Pod Security scenario (`podsecurity.rs`) accepts; like
/// [`AUTHZ_KNOWN`], without the blanket `error-wording`.
pub const PODSECURITY_KNOWN: &[Known] = &[Known {
    id: "allow-privileged",
    kinds: &["podsecurity: baseline refuses privileged (403)"],
    paths: &[""],
    when: When::Any,
}];

/// The ids of the bullets (`` - `id`: … ``) of the "Known differences from a real API
/// server" section of the crate docs.
pub fn documented_ids(lib_rs: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut inside = false;
    for line in lib_rs.lines() {
        let Some(text) = line.strip_prefix("//!") else {
            continue;
        };
        let text = text.trim();
        if text.starts_with("Known differences from a real API server") {
            inside = true;
            continue;
        }
        if inside {
            if let Some(rest) = text.strip_prefix("- `") {
                if let Some(end) = rest.find('`') {
                    ids.insert(rest[..end].to_string());
                }
            } else if !text.is_empty() && !line.starts_with("//!   ") && !text.starts_with('(') {
                // A paragraph that is not a bullet or its continuation ends the section.
                if !ids.is_empty() {
                    break;
                }
            }
        }
    }
    ids
}
