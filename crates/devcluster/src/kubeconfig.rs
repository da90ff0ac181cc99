//! The kubeconfig that points kubectl, helm and kube-rs at the dev cluster.

/// Cluster, user, context and current-context names in the generated kubeconfig.
pub const NAME: &str = "berth-dev";

/// A kubeconfig for `url`, with a token user when `token` is set. Written by hand (not
/// serialized) so the file reads like one a person would write; values are quoted as
/// JSON strings, which YAML accepts, so no token can break the syntax.
pub fn render(url: &str, token: Option<&str>) -> String {
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let user_block = match token {
        Some(t) => format!("  user:\n    token: {}\n", q(t)),
        None => "  user: {}\n".to_string(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {n}\n  cluster:\n    server: {url}\nusers:\n- name: {n}\n{user_block}contexts:\n- name: {n}\n  context:\n    cluster: {n}\n    user: {n}\n    namespace: default\ncurrent-context: {n}\npreferences: {{}}\n",
        n = NAME,
        url = q(url),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_parses_as_yaml_with_token() {
        let text = render("http://127.0.0.1:1234", Some("s3cr\"et"));
        let v: serde_json::Value = serde_saphyr::from_str(&text).expect("yaml");
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:1234"
        );
        assert_eq!(v["users"][0]["user"]["token"], "s3cr\"et");
        assert_eq!(v["current-context"], NAME);
        let anon: serde_json::Value =
            serde_saphyr::from_str(&render("http://x", None)).expect("yaml");
        assert!(
            anon["users"][0]["user"]
                .as_object()
                .is_some_and(|m| m.is_empty())
        );
    }
}
