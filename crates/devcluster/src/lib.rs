//! berth-devcluster: an embedded Kubernetes API server for development and tests.
//!
//! **This is a development and test cluster, not a production control plane.** It
//! speaks the Kubernetes REST API over HTTPS on loopback well enough that kube-rs,
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
//! - persistence in a data directory; HTTPS with a CA of its own (`tls`);
//! - authentication (the admin token of its kubeconfig, ServiceAccount tokens from the
//!   TokenRequest API), RBAC authorization from the bootstrap policy and the stored Roles and
//!   bindings (escalation checked), impersonation, and Self/SubjectAccessReviews (`auth`);
//! - the `/scale` subresource of Deployments, ReplicaSets and StatefulSets;
//! - admission webhooks: Validating/MutatingWebhookConfigurations are stored and their
//!   webhooks called (AdmissionReview v1 over HTTPS, trusting `caBundle`) for creates,
//!   updates, patches and deletes of the main resource: rules, `namespaceSelector`,
//!   `objectSelector`, mutating JSON patches, `failurePolicy`, `timeoutSeconds`, the answers'
//!   `warnings` as `Warning` headers, denials in kube-apiserver's words (`http::admission`);
//! - Pod Security admission (`podsecurity`), as kube-apiserver's PodSecurity plugin: the
//!   `pod-security.kubernetes.io/<enforce|audit|warn>[-version]` labels of a namespace are
//!   validated (422) and set its policy; a Pod whose spec breaks the `enforce` level (the
//!   `baseline` or `restricted` profile at that policy version) is refused with 403
//!   `violates PodSecurity "baseline:latest": host namespaces (hostPID=true), ...` in
//!   kube-apiserver's words and order; workload objects are never refused, their pod
//!   templates get `Warning`s against `warn`, as does raising a namespace's level over the
//!   pods already in it (differential test: `podsecurity.rs`; audit events are not written);
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
//! - admission webhooks: only `clientConfig.url` is called (a `service` reference counts as a
//!   failed call), `matchConditions` are not evaluated (the webhook is called), subresources
//!   (`/status`, `/scale`) and deletecollection are not sent to webhooks, and a patch is
//!   admitted by previewing it (a dry run) and writing the mutated result whole;
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
//!   admission is only webhooks, RBAC's escalation prevention and Pod Security (no
//!   LimitRanges, quotas, token controller Secrets);
//! - merge keys for strategic merge patch and server-side apply come from a small table
//!   (`merge_keys`) instead of OpenAPI extensions;
//! - `kubectl get` receives a generic Name/Age table for built-in kinds, not their own columns
//!   (custom resources get their CRD's `additionalPrinterColumns`, as kube-apiserver prints them);
//! - list `resourceVersion`/`resourceVersionMatch` are answered from the latest state;
//! - no pods that run (workload simulation only reports them ready);
//! - workload simulation, when on, looks at the whole store after each burst of
//!   commits (at most 50 times a second): fine for charts and dev loops, a steady cost
//!   with tens of thousands of objects;
//! - one process owns a data directory (a pid lock file enforces it); any number of
//!   clients may connect.
//!
//! Known differences from a real API server (each found by the differential test in
//! `tests/conformance/differential/`, which sends the same requests to the dev cluster and
//! to kube-apiserver 1.36 and accepts exactly these, by id, in its allow-list `known.rs`):
//! - `discovery-subset`: `/api/v1` and group resource lists name only the resources the dev
//!   cluster serves (no nodes, endpoints, pod subresources, ...), carry no
//!   `storageVersionHash`, and namespaces list `deletecollection`;
//! - `unknown-path-body`: a URL naming no servable resource gets a 404 `Status` with a
//!   message, where kube-apiserver answers plain text `404 page not found` or an empty
//!   `details` (clients see 404 either way);
//! - `openapi-v2`: no `/openapi/v2` (404), see the limits below;
//! - `openapi-schemas`: OpenAPI v3 documents have no component schemas;
//! - `builtin-validation`: built-in kinds are not validated beyond names (a ConfigMap key
//!   with spaces, a Deployment without selector or template are stored);
//! - `field-validation`: unknown fields of built-in kinds are kept, not dropped, and
//!   `fieldValidation=Strict|Warn` is not applied (no 400, no `Warning` header), for custom
//!   resources too (unknown fields are pruned silently);
//! - `error-wording`: the messages and `details.causes` of error Statuses are worded by the
//!   dev cluster (same code and reason; kube-apiserver's messages quote Go types and
//!   regular expressions);
//! - `option-errors`: bad query options (`dryRun`, `propagationPolicy`, a watch's
//!   `resourceVersion`), an apply without `fieldManager`, a create in a terminating
//!   namespace and an unsupported patch content type are refused with other codes or
//!   details (400 where kube-apiserver says 422 Invalid or 500; a missing `fieldManager`
//!   falls back to `unknown`);
//! - `json-patch-errors`: a JSON patch `replace` of a missing path is refused with 422
//!   (kube-apiserver adds the value), and a failed `test` names the operation in its
//!   message (kube-apiserver: a generic one);
//! - `list-paging`: a page of a label-selected list carries `remainingItemCount`
//!   (kube-apiserver leaves it out when a selector is given) and the last page no
//!   `continue` key (kube-apiserver: an empty one);
//! - `table-columns`: `kubectl get` tables of built-in kinds have generic Name/Age columns;
//! - `controller-managed-fields`: managedFields of objects that kube-controller-manager
//!   or the apiserver's own defaulting touch differ (no controller entries, defaulted
//!   fields owned by the creating manager, Apply/Update entry order and times);
//! - `set-lists`: lists of scalars such as `metadata.finalizers` are owned as a whole, not
//!   per value (`v:` entries);
//! - `namespace-conditions`: a terminating namespace has no deletion conditions and
//!   carries `deletionGracePeriodSeconds: 0`;
//! - `crd-lifecycle`: CRDs get no defaulted `spec.conversion`, their status conditions are
//!   written at create by the creating manager, and deletion needs no
//!   `customresourcecleanup` finalizer (a deleted CRD is gone at once);
//! - `cr-unconditional-update`: custom resources may be updated without a
//!   `resourceVersion` (kube-apiserver requires one: 422);
//! - `cr-scale`: custom resources have no `/scale` subresource (404);
//! - `scale-zero-replicas`: a `Scale` with 0 replicas shows `spec.replicas: 0`
//!   (kube-apiserver leaves it out);
//! - `watch-selector-exit`: an object modified out of a watch's label selector is reported
//!   DELETED with its new state (kube-apiserver: its last state that matched);
//! - `rbac-reason-order`: when several bindings allow a request, an access review's
//!   "RBAC: allowed by ..." names the first in name order (ClusterRoleBindings, then
//!   RoleBindings); kube-apiserver names the first its informer cache happens to list (the
//!   decision is the same).
//! - `allow-privileged`: a container with `securityContext.privileged: true` is admitted as
//!   by a kube-apiserver started with `--allow-privileged=true` (kubeadm's and most
//!   distributions' setting), so only Pod Security refuses it (403); the control plane of the
//!   differential test runs without that flag and refuses it at validation first (422
//!   `disallowed by cluster policy`), in every namespace and workload.

mod apply;
mod auth;
mod cluster;
mod config;
pub mod controllers;
mod crd;
mod error;
#[cfg(feature = "test-support")]
pub mod fake_api;
mod fieldset;
mod http;
mod kubeconfig;
mod merge_keys;
mod patch;
mod persistence;
mod podsecurity;
pub mod private;
mod protobuf;
mod resources;
mod schema;
mod selectors;
mod status;
mod store;
#[cfg(feature = "test-support")]
pub mod test_namespace;
mod tls;
mod watch;

pub use cluster::DevCluster;
pub use config::{DEFAULT_WORKLOAD_DELAY, DevClusterConfig};
pub use error::Error;
pub use persistence::PersistError;
pub use status::ApiError;
