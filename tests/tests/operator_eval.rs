//! `berth operator eval` as a package author runs it: the examples of Δ-controller's
//! expression and pipeline references (`../shared/upstream/dcontroller/doc/reference-*.md`),
//! rewritten here as specs over objects, give the results the docs state; an upstream example
//! operator, read unchanged, evaluates offline; a bad spec or a failing expression exits
//! non-zero and says where.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn eval(dir: &Path, spec: &str, inputs: &[&str]) -> Output {
    let spec_path = dir.join("spec.yaml");
    std::fs::write(&spec_path, spec).expect("write the spec");
    let mut cmd = Command::new(berth_tests::binary("berth"));
    cmd.args(["operator", "eval"])
        .arg(&spec_path)
        .args(["-o", "json"]);
    for (i, input) in inputs.iter().enumerate() {
        let path = dir.join(format!("input-{i}.yaml"));
        std::fs::write(&path, input).expect("write an input");
        cmd.arg("--input").arg(path);
    }
    cmd.output().expect("berth runs")
}

fn received(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "berth operator eval failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON list")
}

/// The objects a kind's target received.
fn of_kind(list: &[Value], kind: &str) -> Vec<Value> {
    list.iter()
        .filter(|r| r["object"]["kind"] == kind)
        .map(|r| r["object"].clone())
        .collect()
}

fn without_identity(mut obj: Value) -> Value {
    if let Value::Object(map) = &mut obj {
        map.remove("apiVersion");
        map.remove("kind");
    }
    obj
}

const EXPRESSIONS: &str = r#"
apiVersion: dcontroller.io/v1alpha1
kind: Operator
metadata:
  name: docs
spec:
  controllers:
    - name: expressions
      sources:
        - apiGroup: example.com
          kind: Workload
      pipeline:
        "@project":
          metadata:
            name: $.metadata.name
            namespace: $.metadata.namespace
          and:
            "@and":
              - "@gt": ["$.spec.replicas", 1]
              - "@eq": ["$.metadata.namespace", "production"]
          or:
            "@or":
              - "@eq": ["$.spec.priorityClassName", "high-priority"]
              - "@exists": "$.metadata.annotations.priority-override"
          not:
            "@not":
              "@eq": ["$.status.phase", "Running"]
          logLevel:
            "@cond":
              - "@eq": ["$.metadata.labels.env", "prod"]
              - "INFO"
              - "DEBUG"
          noop:
            "@noop": null
          priority:
            "@switch":
              - - "@eq": ["$.metadata.labels.env", "prod"]
                - "high"
              - - "@eq": ["$.metadata.labels.env", "staging"]
                - "medium"
              - - true
                - "low"
          specialHandling:
            "@switch":
              - - "@eq": ["$.spec.type", "critical"]
                - "alert-ops"
              - - "@and":
                    - "@eq": ["$.spec.type", "important"]
                    - "@eq": ["$.metadata.namespace", "production"]
                - "notify-team"
          targetPort:
            "@definedOr":
              - "$.metadata.annotations.targetPort"
              - 8080
          ready:
            "@gte": ["$.status.readyReplicas", "$.spec.replicas"]
          containerNames:
            "@map":
              - "$$.name"
              - "$.spec.containers"
          tcpPorts:
            "@filter":
              - "@eq": ["$$.protocol", "TCP"]
              - "$.spec.ports"
          containerCount:
            "@len": "$.spec.containers"
          allowedBandwith:
            "@min": ["$.spec.bandwidth.requested", "$.spec.bandwidth.limit"]
          hasNginx:
            "@in":
              - "nginx"
              - "@map": ["$$.image", "$.spec.containers"]
          podSlots:
            "@range": [0, "$.spec.replicas"]
          name:
            "@concat":
              - "$.metadata.name"
              - "-"
              - "$.metadata.labels.env"
          data:
            replicas:
              "@string": "$.spec.replicas"
          configName:
            "@concat":
              - "config-"
              - "$.metadata.name"
              - "-"
              - "@hash": "$.spec"
          exists:
            "@exists": "$.spec.replicas"
          isnil:
            "@isnil": "$.spec.nothing"
          IPAddress:
            "@concat":
              - "192.168.0."
              - "@rnd": [0, 256]
          reconciledAt: "@now"
          primaryPort:
            "@filter":
              - "@eq": ["$$.name", "$.metadata.annotations.primary-port"]
              - "$.spec.ports"
          containerPorts:
            "@map":
              - containerPort: "$$"
              - "$.spec.portNumbers"
          passingScores:
            "@filter":
              - "@gte": ["$$", 80]
              - "$.spec.scores"
          containerNum:
            "@string":
              "@len": "$.spec.containers"
      target:
        kind: Result
"#;

const WORKLOAD: &str = r#"
apiVersion: example.com/v1
kind: Workload
metadata:
  name: my-pod
  namespace: production
  labels: {env: prod}
  annotations: {primary-port: https-main}
spec:
  replicas: 3
  type: important
  priorityClassName: low
  containers:
    - {name: web, image: nginx}
    - {name: sidecar, image: envoy}
    - {name: log, image: fluentbit}
  ports:
    - {name: http, port: 80, protocol: TCP}
    - {name: https-main, port: 443, protocol: TCP}
    - {name: dns, port: 53, protocol: UDP}
  bandwidth: {requested: 100, limit: 80}
  portNumbers: [80, 443, 8080]
  scores: [50, 95, 80, 20]
status:
  phase: Pending
  readyReplicas: 3
"#;

/// Every example of the expression reference (and of the concepts guide's that state a
/// result) on one object.
#[test]
fn the_expression_references_examples_give_the_documented_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = received(&eval(dir.path(), EXPRESSIONS, &[WORKLOAD]));
    let results = of_kind(&list, "Result");
    assert_eq!(results.len(), 1, "{list:?}");
    let r = &results[0];
    assert_eq!(r["apiVersion"], "docs.view.dcontroller.io/v1alpha1");
    assert_eq!(
        r["metadata"],
        json!({"name": "my-pod", "namespace": "production"})
    );
    let expect = [
        ("and", json!(true)),
        ("or", json!(false)),
        ("not", json!(true)),
        ("logLevel", json!("INFO")),
        ("noop", json!(null)),
        ("priority", json!("high")),
        ("specialHandling", json!("notify-team")),
        ("targetPort", json!(8080)),
        ("ready", json!(true)),
        ("containerNames", json!(["web", "sidecar", "log"])),
        (
            "tcpPorts",
            json!([{"name": "http", "port": 80, "protocol": "TCP"},
                   {"name": "https-main", "port": 443, "protocol": "TCP"}]),
        ),
        ("containerCount", json!(3)),
        ("allowedBandwith", json!(80)),
        ("hasNginx", json!(true)),
        // "Generates [0, 1, 2] for a ReplicaSet with 3 replicas".
        ("podSlots", json!([0, 1, 2])),
        // "Creates a name like my-pod-prod".
        ("name", json!("my-pod-prod")),
        // "ConfigMap data values must be strings".
        ("data", json!({"replicas": "3"})),
        ("exists", json!(true)),
        ("isnil", json!(true)),
        // The concepts guide: the port named by the annotation.
        (
            "primaryPort",
            json!([{"name": "https-main", "port": 443, "protocol": "TCP"}]),
        ),
        (
            "containerPorts",
            json!([{"containerPort": 80}, {"containerPort": 443}, {"containerPort": 8080}]),
        ),
        ("passingScores", json!([95, 80])),
        ("containerNum", json!("3")),
    ];
    for (field, want) in expect {
        assert_eq!(r[field], want, "{field}");
    }
    let config = r["configName"].as_str().expect("a string");
    let hash = config
        .strip_prefix("config-my-pod-")
        .expect("config-<name>-<hash>");
    assert!(
        hash.len() == 6 && hash.chars().all(|c| c.is_ascii_alphanumeric()),
        "{config}"
    );
    let ip = r["IPAddress"].as_str().expect("a string");
    let last: u32 = ip
        .strip_prefix("192.168.0.")
        .and_then(|n| n.parse().ok())
        .expect(ip);
    assert!(last < 256, "{ip}");
    let at = r["reconciledAt"].as_str().expect("a string");
    assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{at}");
}

const PIPELINES: &str = r#"
apiVersion: dcontroller.io/v1alpha1
kind: Operator
metadata:
  name: docs
spec:
  controllers:
    - name: join
      sources:
        - apiGroup: gateway.networking.k8s.io
          kind: Gateway
        - apiGroup: gateway.networking.k8s.io
          kind: UDPRoute
      pipeline:
        - "@join":
            "@and":
              - "@eq": ["$.Gateway.metadata.namespace", "$.UDPRoute.metadata.namespace"]
              - "@in": ["$.Gateway.metadata.name", "@map": ["$$.name", "$.UDPRoute.spec.parentRefs"]]
        - "@project":
            metadata:
              name:
                "@concat": ["$.Gateway.metadata.name", "--", "$.UDPRoute.metadata.name"]
              namespace: $.Gateway.metadata.namespace
      target:
        kind: Attachment
    - name: select
      sources:
        - apiGroup: apps
          kind: Deployment
      pipeline:
        "@select":
          "@gt": ["$.spec.replicas", 3]
      target:
        kind: BigDeployment
    - name: project
      sources:
        - apiGroup: ""
          kind: Pod
      pipeline:
        - "@project":
            metadata:
              name: "$.metadata.name"
            node: "$.spec.nodeName"
      target:
        kind: PodNode
    - name: project-steps
      sources:
        - apiGroup: ""
          kind: ConfigMap
      pipeline:
        - "@project":
            - metadata: "$.metadata"
            - "$.spec.replicas": 3
            - "$.metadata.annotations.new-annotation": "true"
      target:
        kind: Stepped
    - name: unwind
      sources:
        - apiGroup: ""
          kind: Service
      pipeline:
        - "@unwind": "$.spec.ports"
        - "@project":
            metadata: $.metadata
            spec: $.spec
      target:
        kind: ServicePort
    - name: gather
      sources:
        - apiGroup: example.com
          kind: Endpoint
      pipeline:
        - "@gather":
            - "$.spec.port"
            - "$.spec.address"
        - "@project":
            metadata: $.metadata
            spec: $.spec
      target:
        kind: PortAddresses
"#;

const PIPELINE_INPUTS: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw-1, namespace: ns}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw-2, namespace: ns}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw-1, namespace: elsewhere}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: route, namespace: ns}
spec:
  parentRefs: [{name: gw-1}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: small, namespace: ns}
spec: {replicas: 2}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: large, namespace: ns}
spec: {replicas: 5}
---
apiVersion: v1
kind: Pod
metadata: {name: pod-a}
spec: {nodeName: node-1}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: ns}
spec: {x: 1}
---
apiVersion: v1
kind: Service
metadata: {name: my-svc}
spec:
  ports:
    - {name: http, port: 80}
    - {name: https, port: 443}
---
apiVersion: example.com/v1
kind: Endpoint
metadata: {name: my-svc-http-ep0}
spec: {service: my-svc, port: 80, address: 10.1.1.1}
---
apiVersion: example.com/v1
kind: Endpoint
metadata: {name: my-svc-https-ep0}
spec: {service: my-svc, port: 443, address: 10.1.1.2}
---
apiVersion: example.com/v1
kind: Endpoint
metadata: {name: my-svc-http-ep1}
spec: {service: my-svc, port: 80, address: 10.1.1.3}
"#;

/// The pipeline reference's examples, each as a controller: the inputs and outputs it states.
#[test]
fn the_pipeline_references_examples_give_the_documented_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let list = received(&eval(dir.path(), PIPELINES, &[PIPELINE_INPUTS]));
    let names = |kind: &str| -> Vec<String> {
        of_kind(&list, kind)
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    // Only the gateway the route names, in its namespace.
    assert_eq!(names("Attachment"), vec!["gw-1--route"]);
    assert_eq!(names("BigDeployment"), vec!["large"]);
    assert_eq!(
        of_kind(&list, "PodNode")
            .into_iter()
            .map(without_identity)
            .collect::<Vec<_>>(),
        vec![json!({"metadata": {"name": "pod-a"}, "node": "node-1"})]
    );
    assert_eq!(
        of_kind(&list, "Stepped")
            .into_iter()
            .map(without_identity)
            .collect::<Vec<_>>(),
        vec![json!({"metadata": {"name": "cm", "namespace": "ns",
            "annotations": {"new-annotation": "true"}}, "spec": {"replicas": 3}})]
    );
    assert_eq!(
        of_kind(&list, "ServicePort")
            .into_iter()
            .map(without_identity)
            .collect::<Vec<_>>(),
        vec![
            json!({"metadata": {"name": "my-svc-0"}, "spec": {"ports": {"name": "http", "port": 80}}}),
            json!({"metadata": {"name": "my-svc-1"}, "spec": {"ports": {"name": "https", "port": 443}}}),
        ]
    );
    assert_eq!(
        of_kind(&list, "PortAddresses")
            .into_iter()
            .map(without_identity)
            .collect::<Vec<_>>(),
        vec![
            json!({"metadata": {"name": "my-svc-http-ep0"}, "spec": {"service": "my-svc",
                "port": 80, "address": ["10.1.1.1", "10.1.1.3"]}}),
            json!({"metadata": {"name": "my-svc-https-ep0"}, "spec": {"service": "my-svc",
                "port": 443, "address": ["10.1.1.2"]}}),
        ]
    );
}

fn upstream(path: &str) -> PathBuf {
    std::env::var_os("BERTH_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
        .join("upstream/dcontroller")
        .join(path)
}

/// service-health-monitor's operator, read unchanged from upstream: the Service gets the
/// ready count of its monitored pods as a Patcher patch, the HealthView lists them, and the
/// YAML output names each document's controller and target type.
#[test]
fn an_upstream_operator_evaluates_offline() {
    let spec = upstream("examples/service-health-monitor/svc-health-operator.yaml");
    assert!(
        spec.is_file(),
        "{} is missing (set BERTH_SHARED_DIR)",
        spec.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let objects = dir.path().join("objects.yaml");
    std::fs::write(
        &objects,
        r#"
apiVersion: v1
kind: Service
metadata: {name: web-app, namespace: default}
spec: {ports: [{port: 80}]}
---
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Pod
    metadata:
      name: web-app-1
      namespace: default
      labels: {app: web-app, dcontroller.io/health-monitor: enabled}
    status: {conditions: [{type: Ready, status: "True"}]}
  - apiVersion: v1
    kind: Pod
    metadata:
      name: web-app-2
      namespace: default
      labels: {app: web-app, dcontroller.io/health-monitor: enabled}
    status: {conditions: [{type: Ready, status: "False"}]}
"#,
    )
    .expect("write");
    let out = Command::new(berth_tests::binary("berth"))
        .args(["operator", "eval"])
        .arg(&spec)
        .arg("-i")
        .arg(&objects)
        .output()
        .expect("berth runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("a YAML stream");
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    assert_eq!(docs.len(), 2, "{text}");
    assert_eq!(docs[0]["kind"], "HealthView");
    assert_eq!(docs[0]["pods"].as_array().map(Vec::len), Some(2));
    assert_eq!(docs[1]["kind"], "Service");
    assert_eq!(
        docs[1]["metadata"]["annotations"]["dcontroller.io/pod-ready"],
        "1/2"
    );
    assert!(
        text.contains(
            "# operator svc-health-operator, controller svc-health-monitor: Patcher patch"
        ),
        "{text}"
    );
}

/// A spec with mistakes in two controllers fails before anything runs, naming each
/// controller and field; an expression that fails at run time is reported with its place and
/// the command exits 1, the other controllers' results still printed.
#[test]
fn bad_specs_and_failing_expressions_exit_non_zero_and_say_where() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = r#"
apiVersion: dcontroller.io/v1alpha1
kind: Operator
metadata: {name: bad}
spec:
  controllers:
    - name: first
      sources: [{kind: A}]
      pipeline: {"@project": {"x": {"@frobnicate": 1}}}
      target: {kind: B}
    - name: second
      sources: [{kind: A}, {kind: C}]
      pipeline: [{"@project": {}}]
      target: {kind: B, type: Overwriter}
"#;
    let out = eval(dir.path(), bad, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("controller \"first\": pipeline.@project.x.@frobnicate: unknown operator"),
        "{err}"
    );
    assert!(err.contains("controller \"second\": target.type"), "{err}");
    assert!(
        err.contains("controller \"second\": pipeline: a controller with 2 sources needs @join"),
        "{err}"
    );

    let failing = r#"
apiVersion: dcontroller.io/v1alpha1
kind: Operator
metadata: {name: failing}
spec:
  controllers:
    - name: concat
      sources: [{apiGroup: "", kind: ConfigMap}]
      pipeline:
        "@project":
          metadata: {name: {"@concat": ["$.metadata.name", "$.data.missing"]}}
      target: {kind: Broken}
    - name: fine
      sources: [{apiGroup: "", kind: ConfigMap}]
      pipeline: {"@project": {metadata: {name: $.metadata.name}}}
      target: {kind: Fine}
"#;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\n";
    let out = eval(dir.path(), failing, &[cm]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("controller \"concat\": pipeline.@project.metadata.name.@concat: argument 1"),
        "{err}"
    );
    let list: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        of_kind(&list, "Fine").len(),
        1,
        "the other controller's result is printed"
    );
    assert!(of_kind(&list, "Broken").is_empty());
}
