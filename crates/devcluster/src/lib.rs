//! berth-devcluster: an embedded Kubernetes API server for development and tests.
//!
//! **This is a development and test cluster, not a production control plane.** It
//! speaks the Kubernetes REST API over HTTP on loopback well enough that kube-rs,
//! kubectl and helm cannot tell it from kube-apiserver for the things berth does, and
//! keeps everything in one process with no etcd, no scheduler and no kubelet.
//!
//! What it does (see `tests/` for the observable behaviour):
//! - discovery: `/version`, `/api`, `/apis`, per group/version resource lists, and
//!   aggregated discovery (`apidiscovery.k8s.io/v2`) when asked for in `Accept`;
//! - the built-in kinds berth and common charts use (namespaces, configmaps, secrets,
//!   services, serviceaccounts, pods, events, persistentvolumeclaims, workloads,
//!   ingresses, RBAC, leases, PDBs, HPAs, CRDs) stored schemalessly as JSON, and custom
//!   kinds as soon as a CRD for them is created;
//! - get, list (label selectors with every operator, field selectors on
//!   `metadata.name`/`metadata.namespace` and a few per-kind fields, limit/continue),
//!   watch (resourceVersion, bookmarks, `sendInitialEvents`, 410 Gone when too old),
//!   create, update with optimistic concurrency, delete and deletecollection, `dryRun=All`;
//! - JSON merge patch, JSON patch, strategic merge patch for built-in kinds, and
//!   server-side apply with managedFields, conflicts and force;
//! - `/status` subresources, generation, finalizers and deletionTimestamp, namespace
//!   termination, owner-reference garbage collection (background, foreground, orphan);
//! - persistence in a data directory and an optional bearer token;
//! - optional workload simulation (Deployments, ReplicaSets, StatefulSets, DaemonSets
//!   and Jobs report ready after a delay, like kwok).
//!
//! Known limits, by design:
//! - custom resources are pruned, defaulted and validated against their CRD schema
//!   (types, required, enum, bounds; not `pattern`, `format`, CEL rules); built-in kinds
//!   get no schema validation or defaulting beyond a few observable cases (Secret
//!   `stringData`, namespace finalizers, CRD status, namespace defaults);
//! - objects are served at every version of their group/resource with only
//!   `apiVersion` rewritten (no conversion webhooks or schema conversion);
//! - OpenAPI v3 documents list operations and parameters but no schemas, and there is
//!   no `/openapi/v2`: enough for `kubectl apply` to use server-side field validation
//!   and its compiled-in types for patches (see `http::openapi`), not for `kubectl explain`;
//! - request bodies must be JSON or YAML: protobuf bodies get 415, so kubectl's
//!   imperative typed commands (`kubectl create configmap …`, `kubectl scale`) fail,
//!   while `kubectl apply`, `create -f`, `edit`, `label`, `patch`, `delete` and all reads
//!   work;
//! - built-in defaulting covers the commonly read fields only (`store::defaults`), and
//!   there is no admission (no LimitRanges, quotas, webhooks, service-account tokens);
//! - merge keys for strategic merge patch and server-side apply come from a small table
//!   (`merge_keys`) instead of OpenAPI extensions;
//! - `kubectl get` receives a generic Name/Age table, not per-kind columns;
//! - list `resourceVersion`/`resourceVersionMatch` are answered from the latest state;
//! - no authorization, pods that run, or HTTPS (use the token only on loopback);
//! - one process owns a data directory (a pid lock file enforces it); any number of
//!   clients may connect.

mod apply;
mod cluster;
mod config;
pub mod controllers;
mod crd;
mod error;
mod fieldset;
mod http;
mod kubeconfig;
mod merge_keys;
mod patch;
mod persistence;
mod resources;
mod schema;
mod selectors;
mod status;
mod store;
mod watch;

pub use cluster::DevCluster;
pub use config::{DEFAULT_WORKLOAD_DELAY, DevClusterConfig};
pub use error::Error;
pub use persistence::PersistError;
pub use status::ApiError;
