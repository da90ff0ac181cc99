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
//! - the `/scale` subresource of Deployments, ReplicaSets and StatefulSets;
//! - optional workload simulation (Deployments, ReplicaSets, StatefulSets, DaemonSets
//!   and Jobs report ready after a delay, like kwok; a Deployment also gets a current
//!   ReplicaSet it controls, as kube-controller-manager would create).
//!
//! Client workflows known to work, each exercised by a conformance test in
//! `tests/conformance/kubectl.rs` or `helm.rs` (written to hold against kube-apiserver
//! too, via `BERTH_TEST_KUBECONFIG`; the CLIs come from `PATH` or `target/ci-tools/`,
//! where `.ci/run` installs them, and the tests fail under `CI=true` without them):
//! - kubectl (1.32): `apply -f` (client-side, three-way patch on re-apply), `apply
//!   --server-side`, `get` (tables, `-A`, `-o yaml|jsonpath`, `--show-managed-fields`),
//!   `get -w --output-watch-events`, `delete`, `api-resources`, `create configmap|secret
//!   generic|serviceaccount` (protobuf bodies), `scale` (the `/scale` subresource);
//!   checked by hand only: `create namespace`, `create -f`, `edit`, `label`, `patch`;
//! - helm v4 (4.2): `install`, `upgrade`, `list`, `uninstall` (server-side apply of the
//!   chart, release records as protobuf Secrets decoded with the `k8s-pb` types); `install --wait` with workload simulation
//!   on, with both the default `watcher` (kstatus) strategy and `--wait=legacy` (which
//!   needs the Deployment's current ReplicaSet);
//! - not supported: `kubectl explain` (no OpenAPI schemas), `kubectl logs|exec|
//!   port-forward` (no pods run), typed `kubectl create` of kinds beyond the protobuf
//!   list above.
//!
//! Performance (`cargo bench -p berth-devcluster`, release build, on a shared 2-core
//! machine with a load average near 3; method in `benches/devcluster.rs`): 5,000
//! ConfigMaps created one at a time into 100 namespaces while 50 kube-rs watches see
//! every one (250,000 samples): create→event p50 1.0 ms, p99 4.6 ms (targets: p99
//! < 10 ms), about 870 creates/s; a full list of all 5,100 ConfigMaps through kube-rs
//! 60-80 ms median (target < 100 ms); RSS after loading 62 MiB, about 100 MiB after the
//! lists (target < 200 MiB). With 8 creates in flight the process saturates both cores
//! at about 930 creates/s and latency becomes queueing (p50 8 ms, p99 120 ms). What made
//! the difference: objects shared by `Arc` between store, event log and watchers;
//! watch lines serialized once per event, lists serialized straight from the store;
//! garbage collection woken only by commits that concern it; and `TCP_NODELAY` (Nagle
//! plus delayed ACKs put a 40 ms floor under 1-2 % of events).
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
//! - request bodies may be JSON, YAML or Kubernetes protobuf, but protobuf only for
//!   `v1` Secret, ConfigMap, Namespace, ServiceAccount and DeleteOptions (see
//!   `protobuf`); other protobuf bodies get 415 naming the supported kinds, so e.g.
//!   `kubectl create deployment|service|job …` fail (use `kubectl apply -f`). client-go
//!   cannot be steered to JSON instead: its only 415 fallback is for CBOR, and neither
//!   discovery nor response headers tell it a content type per request;
//! - built-in defaulting covers the commonly read fields only (`store::defaults`), and
//!   there is no admission (no LimitRanges, quotas, webhooks, service-account tokens);
//! - merge keys for strategic merge patch and server-side apply come from a small table
//!   (`merge_keys`) instead of OpenAPI extensions;
//! - `kubectl get` receives a generic Name/Age table, not per-kind columns;
//! - list `resourceVersion`/`resourceVersionMatch` are answered from the latest state;
//! - no authorization, pods that run, or HTTPS (use the token only on loopback);
//! - workload simulation, when on, looks at the whole store after each burst of
//!   commits (at most 50 times a second): fine for charts and dev loops, a steady cost
//!   with tens of thousands of objects;
//! - one process owns a data directory (a pid lock file enforces it); any number of
//!   clients may connect.

mod apply;
mod cluster;
mod config;
pub mod controllers;
#[cfg(feature = "test-support")]
pub mod fake_api;
#[cfg(feature = "test-support")]
pub mod test_namespace;
mod crd;
mod error;
mod fieldset;
mod http;
mod kubeconfig;
mod merge_keys;
mod patch;
mod persistence;
mod protobuf;
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
