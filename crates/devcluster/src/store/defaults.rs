//! Defaulting for the built-in fields clients most often read back: a real apiserver
//! fills these in on every create/update, so an object read back from the dev cluster
//! should carry them too (drift detection and `kubectl diff` compare against them).
//!
//! Covered: Service type/sessionAffinity/ports/clusterIP, workload replicas and update
//! strategies, and pod templates (restart and DNS policy, scheduler, grace period,
//! container pull policy, termination message, port protocol). Other defaults of the
//! upstream API are not applied.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Map, Value, json};

use crate::resources::ResourceType;

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    map.entry(key.to_string()).or_insert(value);
}

fn object_at<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    v.get_mut(key).and_then(Value::as_object_mut)
}

/// Applies the defaults for `rt`'s kind to `obj` in place.
pub fn apply(rt: &ResourceType, obj: &mut Value) {
    if rt.custom {
        return;
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Service") => service(obj),
        ("", "Pod") => {
            if let Some(spec) = object_at(obj, "spec") {
                pod_spec(spec);
            }
        }
        ("apps", "Deployment") => workload(obj, |spec| {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            set_default(
                spec,
                "strategy",
                json!({ "type": "RollingUpdate", "rollingUpdate": { "maxSurge": "25%", "maxUnavailable": "25%" } }),
            );
        }),
        ("apps", "StatefulSet") => workload(obj, |spec| {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            set_default(
                spec,
                "updateStrategy",
                json!({ "type": "RollingUpdate", "rollingUpdate": { "partition": 0 } }),
            );
        }),
        ("apps", "DaemonSet") => workload(obj, |spec| {
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(
                spec,
                "updateStrategy",
                json!({ "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 0, "maxUnavailable": 1 } }),
            );
        }),
        ("apps", "ReplicaSet") => workload(obj, |spec| set_default(spec, "replicas", json!(1))),
        ("batch", "Job") => workload(obj, |spec| {
            set_default(spec, "backoffLimit", json!(6));
            set_default(spec, "completionMode", json!("NonIndexed"));
            set_default(spec, "suspend", json!(false));
        }),
        _ => {}
    }
}

fn workload(obj: &mut Value, f: impl FnOnce(&mut Map<String, Value>)) {
    let Some(spec) = object_at(obj, "spec") else {
        return;
    };
    f(spec);
    if let Some(pod) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod_spec(pod);
    }
}

fn pod_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "securityContext", json!({}));
    for list in ["containers", "initContainers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            container(c);
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    let tag = image
        .rsplit('/')
        .next()
        .and_then(|last| last.split_once(':'))
        .map(|(_, t)| t);
    let latest = !image.contains('@') && matches!(tag, None | Some("latest"));
    set_default(
        c,
        "imagePullPolicy",
        json!(if latest { "Always" } else { "IfNotPresent" }),
    );
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    set_default(c, "resources", json!({}));
    for p in c
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        set_default(p, "protocol", json!("TCP"));
    }
}

fn service(obj: &mut Value) {
    let Some(spec) = object_at(obj, "spec") else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    let external_name = spec.get("type").and_then(Value::as_str) == Some("ExternalName");
    if !external_name {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    for p in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        set_default(p, "protocol", json!("TCP"));
        if let Some(port) = p.get("port").cloned() {
            set_default(p, "targetPort", port);
        }
    }
}

/// The service CIDR clusterIPs come from, as in kubeadm's default `10.96.0.0/12`.
const SERVICE_CIDR_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const SERVICE_CIDR_SIZE: u32 = 1 << 20;

/// Gives a new ClusterIP/NodePort/LoadBalancer Service a free clusterIP (unless it asked
/// for one or for a headless `None`), with the single-stack IPv4 fields that go with it.
pub fn allocate_cluster_ip(obj: &mut Value, used: &HashSet<String>) {
    let Some(spec) = object_at(obj, "spec") else {
        return;
    };
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return;
    }
    let ip = match spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(ip) => ip.to_string(),
        None => {
            // Skip .0 (network) and .1 (the `kubernetes` service in a real cluster).
            let free = (2..SERVICE_CIDR_SIZE - 1)
                .map(|offset| Ipv4Addr::from(SERVICE_CIDR_BASE + offset).to_string())
                .find(|ip| !used.contains(ip));
            let Some(ip) = free else { return };
            spec.insert("clusterIP".into(), json!(ip));
            ip
        }
    };
    set_default(spec, "clusterIPs", json!([ip]));
    set_default(spec, "ipFamilies", json!(["IPv4"]));
    set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;

    fn rt(group: &str, plural: &str) -> ResourceType {
        Registry::with_builtins()
            .all()
            .find(|r| r.group == group && r.plural == plural)
            .cloned()
            .expect("type")
    }

    #[test]
    fn deployment_and_pod_template_defaults() {
        let mut d = json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "a", "image": "nginx", "ports": [ { "containerPort": 80 } ] },
            { "name": "b", "image": "registry.local:5000/app:1.2" }
        ] } } } });
        apply(&rt("apps", "deployments"), &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(pod["containers"][0]["ports"][0]["protocol"], "TCP");
    }

    #[test]
    fn services_get_a_free_cluster_ip_and_port_defaults() {
        let mut s = json!({ "spec": { "ports": [ { "port": 80 } ] } });
        apply(&rt("", "services"), &mut s);
        let used: HashSet<String> = ["10.96.0.2".to_string()].into();
        allocate_cluster_ip(&mut s, &used);
        assert_eq!(s["spec"]["clusterIP"], "10.96.0.3");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        let mut headless = json!({ "spec": { "clusterIP": "None" } });
        allocate_cluster_ip(&mut headless, &used);
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    }
}
