//! Δ-controller's three example operators, read unchanged from `../shared/upstream/dcontroller`
//! (or `$BERTH_SHARED_DIR/upstream/dcontroller`), driven through the same steps as upstream's
//! own tests of them, with no cluster: objects go in and out of a `Simulation` one change at a
//! time, and the tests look at the objects the operators wrote, as a user of the cluster would.

use std::path::PathBuf;

use berth_operator::{Operator, Simulation, read_operators};
use serde_json::{Value, json};

fn upstream(path: &str) -> PathBuf {
    let shared = std::env::var_os("BERTH_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    shared.join("upstream/dcontroller").join(path)
}

fn spec(path: &str) -> Vec<Operator> {
    let file = upstream(path);
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{} (set BERTH_SHARED_DIR): {e}", file.display()));
    read_operators(&text, path, "test-ep-operator").expect("the upstream spec reads")
}

fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

fn pod_view(name: &str, ready: &str) -> Value {
    json!({"apiVersion": "svc-health-operator.view.dcontroller.io/v1alpha1", "kind": "PodView",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web-app"}},
        "status": {"conditions": [{"type": "Ready", "status": ready}]}})
}

fn service(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"app": "example"}, "type": "ClusterIP",
            "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8080}]}})
}

fn health(sim: &Simulation, svc: &str) -> Option<String> {
    let s = sim
        .object("", "Service", "default", svc)
        .expect("the service exists");
    s.pointer("/metadata/annotations/dcontroller.io~1pod-ready")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// service-health-monitor, as upstream tests it (pods as PodViews): the Service's
/// `dcontroller.io/pod-ready` annotation counts its ready pods, follows them, goes when they
/// go, and a Service without pods gets none.
#[test]
fn service_health_monitor_follows_the_pods() {
    let ops = spec("examples/service-health-monitor/svc-health-operator-test.yaml");
    let mut sim = Simulation::new(&ops, vec![service("web-app")], now()).expect("starts");
    assert_eq!(health(&sim, "web-app"), None);
    sim.upsert(pod_view("web-app-pod-1", "True"))
        .expect("settles");
    sim.upsert(pod_view("web-app-pod-2", "True"))
        .expect("settles");
    assert_eq!(health(&sim, "web-app").as_deref(), Some("2/2"));
    sim.upsert(pod_view("web-app-pod-3", "False"))
        .expect("settles");
    assert_eq!(health(&sim, "web-app").as_deref(), Some("2/3"));
    sim.upsert(pod_view("web-app-pod-3", "True"))
        .expect("settles");
    assert_eq!(health(&sim, "web-app").as_deref(), Some("3/3"));
    for pod in ["web-app-pod-1", "web-app-pod-2", "web-app-pod-3"] {
        sim.delete(&pod_view(pod, "True")).expect("settles");
    }
    assert_eq!(
        health(&sim, "web-app"),
        None,
        "the annotation goes with the pods"
    );
    sim.upsert(service("other")).expect("settles");
    assert_eq!(health(&sim, "other"), None);
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
    let statuses = sim.statuses();
    assert_eq!(statuses.len(), 2);
    for (operator, s) in statuses {
        assert_eq!(operator, "svc-health-operator");
        assert_eq!(s.ready, berth_operator::status::Readiness::True, "{s:?}");
    }
}

/// A controller whose expression fails on some objects reports them (Ready Unknown, the error
/// in its ring) and is Ready again once the objects that failed are gone.
#[test]
fn a_failing_controller_reports_and_recovers() {
    let ops = read_operators(
        r#"
apiVersion: dcontroller.io/v1alpha1
kind: Operator
metadata: {name: strict}
spec:
  controllers:
    - name: needs-port
      sources: [{apiGroup: "", kind: Service}]
      pipeline:
        "@project":
          metadata:
            name: {"@concat": ["$.metadata.name", "-", "$.spec.ports[0].port"]}
            namespace: $.metadata.namespace
      target: {kind: PortView}
"#,
        "strict.yaml",
        "strict",
    )
    .expect("reads");
    let mut portless = service("portless");
    portless["spec"]["ports"] = json!([]);
    let mut sim =
        Simulation::new(&ops, vec![service("web"), portless.clone()], now()).expect("starts");
    let (_, status) = sim.statuses().remove(0);
    assert_eq!(status.ready, berth_operator::status::Readiness::Unknown);
    assert!(
        status.last_errors[0].contains("argument 2"),
        "{:?}",
        status.last_errors
    );
    assert_eq!(sim.received().len(), 1, "the other Service's view is made");
    sim.delete(&portless).expect("settles");
    sim.upsert(service("web2")).expect("settles");
    let (_, status) = sim.statuses().remove(0);
    assert_eq!(
        status.ready,
        berth_operator::status::Readiness::True,
        "{status:?}"
    );
    assert_eq!(status.last_errors.len(), 1, "the error stays on record");
}

/// service-health-monitor as its README runs it: real Pods (the label selector picks the
/// monitored ones) through a HealthView into the Service.
#[test]
fn service_health_monitor_reads_labelled_pods() {
    let ops = spec("examples/service-health-monitor/svc-health-operator.yaml");
    let pod = |name: &str, ready: &str, monitored: bool| {
        let mut labels = json!({"app": "web-app"});
        if monitored {
            labels["dcontroller.io/health-monitor"] = json!("enabled");
        }
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "status": {"conditions": [{"type": "Initialized", "status": "True"},
                                      {"type": "Ready", "status": ready}]}})
    };
    let mut sim = Simulation::new(
        &ops,
        vec![
            service("web-app"),
            pod("web-app-a", "True", true),
            pod("web-app-b", "False", true),
            pod("web-app-c", "True", false),
        ],
        now(),
    )
    .expect("starts");
    assert_eq!(health(&sim, "web-app").as_deref(), Some("1/2"));
    let view = sim
        .object(
            "svc-health-operator.view.dcontroller.io",
            "HealthView",
            "default",
            "web-app",
        )
        .expect("the view is there");
    assert_eq!(
        view["pods"],
        json!([{"podName": "web-app-a", "ready": "True"}, {"podName": "web-app-b", "ready": "False"}])
    );
    sim.upsert(pod("web-app-b", "True", true)).expect("settles");
    assert_eq!(health(&sim, "web-app").as_deref(), Some("2/2"));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

fn config_map(rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dcontroller-config", "namespace": "default", "resourceVersion": rv},
        "data": {"key1": "value1"}})
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "dcontroller-deployment", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

/// configmap-deployment-controller: a ConfigDeployment names a ConfigMap and a Deployment;
/// the Deployment's pod template carries the ConfigMap's resourceVersion, so a change of the
/// ConfigMap rolls the Deployment.
#[test]
fn configmap_deployment_controller_rolls_the_deployment() {
    let ops = spec("examples/configmap-deployment-controller/configdeployment-operator.yaml");
    let cd = json!({"apiVersion": "dcontroller.io/v1alpha1", "kind": "ConfigDeployment",
        "metadata": {"name": "dcontroller-config", "namespace": "default"},
        "spec": {"configMap": "dcontroller-config", "deployment": "dcontroller-deployment"}});
    let mut sim =
        Simulation::new(&ops, vec![config_map("1"), deployment(), cd], now()).expect("starts");
    let annotation = |sim: &Simulation| {
        sim.object("apps", "Deployment", "default", "dcontroller-deployment")
            .expect("the deployment exists")
            .pointer("/spec/template/metadata/annotations/dcontroller.io~1configmap-version")
            .cloned()
    };
    assert_eq!(annotation(&sim), Some(json!("1")));
    let d = sim
        .object("apps", "Deployment", "default", "dcontroller-deployment")
        .expect("there");
    assert_eq!(
        d["spec"]["replicas"],
        json!(1),
        "a Patcher leaves the rest of the object"
    );
    sim.upsert(config_map("2")).expect("settles");
    assert_eq!(annotation(&sim), Some(json!("2")));
    // A ConfigMap in another namespace is not joined.
    let mut other = config_map("9");
    other["metadata"]["namespace"] = json!("other");
    sim.upsert(other).expect("settles");
    assert_eq!(annotation(&sim), Some(json!("2")));
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

fn ep_service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "test-service-1", "namespace": "testnamespace",
            "annotations": {"dcontroller.io/endpointslice-controller-enabled": "true"}},
        "spec": {"selector": {"app": "example"}, "type": "ClusterIP", "ports": [
            {"name": "tcp-port", "protocol": "TCP", "port": 80, "targetPort": 8080},
            {"name": "udp-port", "protocol": "UDP", "port": 3478, "targetPort": 33478}]}})
}

fn endpoint_slice(addresses: &[&str]) -> Value {
    let endpoints: Vec<Value> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            json!({"addresses": [a], "conditions": {"ready": true}, "hostname": format!("pod-{i}"),
                "targetRef": {"kind": "Pod", "name": format!("example-pod-{i}")}})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "test-endpointslice-1", "namespace": "testnamespace",
            "labels": {"kubernetes.io/service-name": "test-service-1"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        "endpoints": endpoints})
}

fn endpoint_specs(sim: &Simulation) -> Vec<Value> {
    let mut specs: Vec<Value> = sim
        .received()
        .into_iter()
        .filter(|r| r.object["kind"] == "EndpointView")
        .map(|r| {
            let name = r.object["metadata"]["name"]
                .as_str()
                .expect("named")
                .to_owned();
            assert!(name.starts_with("test-service-1-"), "{name}");
            assert_eq!(r.object["metadata"]["namespace"], "testnamespace");
            r.object["spec"].clone()
        })
        .collect();
    specs.sort_by_key(ToString::to_string);
    specs
}

fn want_specs(addresses: &[&str]) -> Vec<Value> {
    let mut want = Vec::new();
    for a in addresses {
        want.push(
            json!({"serviceName": "test-service-1", "type": "ClusterIP", "port": 80,
            "targetPort": 8080, "protocol": "TCP", "address": a}),
        );
        want.push(
            json!({"serviceName": "test-service-1", "type": "ClusterIP", "port": 3478,
            "targetPort": 33478, "protocol": "UDP", "address": a}),
        );
    }
    want.sort_by_key(ToString::to_string);
    want
}

/// endpointslice-controller (its operator spec): one EndpointView per ready address and
/// service port, following the EndpointSlice, gone with the Service's annotation.
#[test]
fn endpointslice_controller_makes_an_endpoint_view_per_address_and_port() {
    let ops = spec("examples/endpointslice-controller/endpointslice-operator.yaml");
    let mut sim = Simulation::new(&ops, vec![ep_service()], now()).expect("starts");
    assert!(endpoint_specs(&sim).is_empty());
    sim.upsert(endpoint_slice(&["192.0.2.1", "192.0.2.2"]))
        .expect("settles");
    assert_eq!(
        endpoint_specs(&sim),
        want_specs(&["192.0.2.1", "192.0.2.2"])
    );
    sim.upsert(endpoint_slice(&["192.0.2.1", "192.0.2.3"]))
        .expect("settles");
    assert_eq!(
        endpoint_specs(&sim),
        want_specs(&["192.0.2.1", "192.0.2.3"])
    );
    let mut unready = endpoint_slice(&["192.0.2.1", "192.0.2.3"]);
    unready["endpoints"][1]["conditions"]["ready"] = json!(false);
    sim.upsert(unready).expect("settles");
    assert_eq!(endpoint_specs(&sim), want_specs(&["192.0.2.1"]));
    let mut plain = ep_service();
    plain["metadata"]["annotations"] = json!({});
    sim.upsert(plain).expect("settles");
    assert!(
        endpoint_specs(&sim).is_empty(),
        "the views go with the annotation"
    );
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

/// The declarative specs of endpointslice-controller (bare `controllers:` documents, as its
/// main.go loads them): the plain one makes the same views as the operator; the gather one one
/// view per service port with the ready addresses collected.
#[test]
fn endpointslice_controller_declarative_specs() {
    let ops = spec("examples/endpointslice-controller/endpointslice-controller-spec.yaml");
    assert_eq!(ops[0].name, "test-ep-operator");
    let sim = Simulation::new(
        &ops,
        vec![ep_service(), endpoint_slice(&["192.0.2.1", "192.0.2.2"])],
        now(),
    )
    .expect("starts");
    assert_eq!(
        endpoint_specs(&sim),
        want_specs(&["192.0.2.1", "192.0.2.2"])
    );

    let ops = spec("examples/endpointslice-controller/endpointslice-controller-gather-spec.yaml");
    let mut sim = Simulation::new(
        &ops,
        vec![ep_service(), endpoint_slice(&["192.0.2.2", "192.0.2.1"])],
        now(),
    )
    .expect("starts");
    let views = |sim: &Simulation| -> Vec<(String, Value)> {
        sim.received()
            .into_iter()
            .filter(|r| r.object["kind"] == "EndpointView")
            .map(|r| {
                (
                    r.object["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    r.object["spec"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        views(&sim),
        vec![
            (
                "test-service-1-TCP-80".to_owned(),
                json!({"serviceName": "test-service-1",
                "type": "ClusterIP", "port": 80, "targetPort": 8080, "protocol": "TCP",
                "addresses": ["192.0.2.1", "192.0.2.2"]})
            ),
            (
                "test-service-1-UDP-3478".to_owned(),
                json!({"serviceName": "test-service-1",
                "type": "ClusterIP", "port": 3478, "targetPort": 33478, "protocol": "UDP",
                "addresses": ["192.0.2.1", "192.0.2.2"]})
            ),
        ]
    );
    sim.upsert(endpoint_slice(&["192.0.2.9"])).expect("settles");
    let now_views = views(&sim);
    assert_eq!(now_views.len(), 2);
    assert!(
        now_views
            .iter()
            .all(|(_, s)| s["addresses"] == json!(["192.0.2.9"])),
        "{now_views:?}"
    );
    assert!(sim.errors().is_empty(), "{:?}", sim.errors());
}

fn pod(name: &str, ready: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
            "labels": {"app": "web", "dcontroller.io/health-monitor": "enabled"}},
        "spec": {"containers": [{"name": "main", "image": "pause"}]},
        "status": {"phase": "Pending"}});
    if let Some(r) = ready {
        p["status"]["conditions"] = json!([{"type": "Ready", "status": r}]);
    }
    p
}

/// service-health-monitor with real Pods changing one at a time, as a cluster delivers them:
/// created without conditions, then each one's Ready set. The count follows each pod's
/// latest state, not an earlier one's.
#[test]
fn service_health_monitor_follows_pods_changing_one_at_a_time() {
    let ops = spec("examples/service-health-monitor/svc-health-operator.yaml");
    let mut sim = Simulation::new(&ops, vec![service("web")], now()).expect("starts");
    sim.upsert(pod("web-1", None)).expect("settles");
    sim.upsert(pod("web-2", None)).expect("settles");
    assert_eq!(health(&sim, "web").as_deref(), Some("0/2"));
    sim.upsert(pod("web-1", Some("True"))).expect("settles");
    assert_eq!(health(&sim, "web").as_deref(), Some("1/2"));
    sim.upsert(pod("web-2", Some("False"))).expect("settles");
    assert_eq!(health(&sim, "web").as_deref(), Some("1/2"));
    sim.upsert(pod("web-2", Some("True"))).expect("settles");
    assert_eq!(health(&sim, "web").as_deref(), Some("2/2"));
}
