//! Minimal readiness rules (full kstatus comes later): an object is ready when it exists, and
//! a Deployment additionally when its controller has observed the current generation and
//! enough replicas are ready.

use serde_json::Value;

/// `None` when ready, otherwise why not.
pub fn ready_reason(kind: &str, object: Option<&Value>) -> Option<String> {
    let Some(o) = object else {
        return Some("not found".into());
    };
    match kind {
        "Deployment" | "StatefulSet" => {
            let generation = o
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let observed = o
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if observed < generation {
                return Some(format!(
                    "observed generation {observed} < generation {generation}"
                ));
            }
            let want = o
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let ready = o
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            (ready < want).then(|| format!("{ready}/{want} replicas ready"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::ready_reason;
    use serde_json::json;

    #[test]
    fn deployment_needs_observed_generation_and_ready_replicas() {
        let pending = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "readyReplicas": 2}});
        assert!(ready_reason("Deployment", Some(&pending)).is_some());
        let partial = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": {"observedGeneration": 2, "readyReplicas": 1}});
        assert_eq!(
            ready_reason("Deployment", Some(&partial)).as_deref(),
            Some("1/2 replicas ready")
        );
        let done = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": {"observedGeneration": 2, "readyReplicas": 2}});
        assert_eq!(ready_reason("Deployment", Some(&done)), None);
        assert!(ready_reason("ConfigMap", None).is_some());
        assert_eq!(ready_reason("ConfigMap", Some(&json!({}))), None);
    }
}
