//! The kubeconfig that points kubectl, helm and kube-rs at the dev cluster.

/// Cluster, user, context and current-context names in the generated kubeconfig.
pub const NAME: &str = "berth-dev";

/// A kubeconfig for `url` (HTTPS, trusting `ca_pem`) whose user presents `token`. Written by
/// hand (not serialized) so the file reads like one a person would write; values are quoted
/// as JSON strings, which YAML accepts, so no token can break the syntax.
pub fn render(url: &str, ca_pem: &str, token: &str) -> String {
    use base64::Engine as _;
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let user_block = format!("  user:\n    token: {}\n", q(token));
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {n}\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\nusers:\n- name: {n}\n{user_block}contexts:\n- name: {n}\n  context:\n    cluster: {n}\n    user: {n}\n    namespace: default\ncurrent-context: {n}\npreferences: {{}}\n",
        n = NAME,
        url = q(url),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_parses_as_yaml_with_token() {
        let text = render(
            "https://127.0.0.1:1234",
            "-----BEGIN CERTIFICATE-----\n",
            "s3cr\"et",
        );
        let v: serde_json::Value = serde_saphyr::from_str(&text).expect("yaml");
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:1234"
        );
        assert_eq!(v["users"][0]["user"]["token"], "s3cr\"et");
        assert_eq!(v["current-context"], NAME);
    }
}
