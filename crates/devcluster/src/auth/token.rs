//! ServiceAccount tokens: JSON Web Tokens with the claims kube-apiserver puts in the tokens of
//! its TokenRequest API (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti`, `kubernetes.io`), so
//! a hook that decodes its token sees what it would see in a pod.
//!
//! They are signed with HMAC-SHA256 (`HS256`) under a key only the dev cluster holds (kept in
//! its 0600 state): the dev cluster is the only party that verifies them, so a shared-key MAC
//! does what kube-apiserver's RS256 signature does here without a key pair. A token is valid
//! while its signature holds, the clock is within `nbf`..`exp`, its audiences include the API
//! server's, and the ServiceAccount (and the object it is bound to, if any) still exists with
//! the uid it was minted for.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{KeyInit as _, Mac as _};
use serde_json::{Value, json};

type HmacSha256 = hmac::Hmac<sha2_11::Sha256>;

/// The issuer kube-apiserver is usually configured with (`--service-account-issuer`), and the
/// audience its tokens carry by default.
pub const ISSUER: &str = "https://kubernetes.default.svc";

/// What a token says about whom it was minted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub audiences: Vec<String>,
    pub issued_at: i64,
    pub expires_at: i64,
    pub id: String,
    /// The Pod or Secret the token is bound to: (kind, name, uid).
    pub bound: Option<(String, String, String)>,
}

impl Claims {
    fn to_json(&self) -> Value {
        let mut k8s = json!({
            "namespace": self.namespace,
            "serviceaccount": { "name": self.name, "uid": self.uid },
        });
        if let Some((kind, name, uid)) = &self.bound {
            k8s[kind.to_lowercase()] = json!({ "name": name, "uid": uid });
        }
        json!({
            "aud": self.audiences,
            "exp": self.expires_at,
            "iat": self.issued_at,
            "iss": ISSUER,
            "jti": self.id,
            "kubernetes.io": k8s,
            "nbf": self.issued_at,
            "sub": super::service_account_username(&self.namespace, &self.name),
        })
    }

    fn from_json(v: &Value) -> Option<Claims> {
        let k8s = v.get("kubernetes.io")?;
        let sa = k8s.get("serviceaccount")?;
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(String::from);
        let bound = ["pod", "secret"].iter().find_map(|kind| {
            let o = k8s.get(*kind)?;
            let mut kind = kind.to_string();
            kind[..1].make_ascii_uppercase();
            Some((kind, s(o, "name")?, s(o, "uid")?))
        });
        Some(Claims {
            namespace: s(k8s, "namespace")?,
            name: s(sa, "name")?,
            uid: s(sa, "uid")?,
            audiences: v
                .get("aud")?
                .as_array()?
                .iter()
                .filter_map(|a| a.as_str().map(String::from))
                .collect(),
            issued_at: v.get("iat")?.as_i64()?,
            expires_at: v.get("exp")?.as_i64()?,
            id: s(v, "jti")?,
            bound,
        })
    }
}

/// Why a token was not accepted (logged; the client sees 401 Unauthorized only).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("not a token this server issued")]
    Malformed,
    #[error("invalid signature")]
    Signature,
    #[error("token has expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token audiences {0:?} do not include the API server's")]
    Audience(Vec<String>),
}

/// Signs and verifies tokens with one key.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
    /// `kid` of the header: names the key without revealing it.
    key_id: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("key_id", &self.key_id)
            .finish()
    }
}

impl Signer {
    pub fn new(key: Vec<u8>) -> Signer {
        use sha2_11::Digest as _;
        let digest = sha2_11::Sha256::digest(&key);
        let key_id = B64.encode(&digest[..16]);
        Signer { key, key_id }
    }

    fn mac(&self, signing_input: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(signing_input);
        mac
    }

    pub fn mint(&self, claims: &Claims) -> String {
        let header = json!({ "alg": "HS256", "kid": self.key_id });
        let input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_json().to_string())
        );
        let signature = self.mac(input.as_bytes()).finalize().into_bytes();
        format!("{input}.{}", B64.encode(signature))
    }

    /// The claims of a token this signer made, checked against `now` (Unix seconds) and the
    /// API server's audience.
    #[cfg(test)]
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        self.verify_for(token, now, &[ISSUER])
    }

    /// [`Signer::verify`] for a token meant for one of `audiences`.
    pub fn verify_for(
        &self,
        token: &str,
        now: i64,
        audiences: &[&str],
    ) -> Result<Claims, TokenError> {
        let (input, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let (header, payload) = input.split_once('.').ok_or(TokenError::Malformed)?;
        let signature = B64.decode(signature).map_err(|_| TokenError::Malformed)?;
        self.mac(input.as_bytes())
            .verify_slice(&signature)
            .map_err(|_| TokenError::Signature)?;
        let header: Value = B64
            .decode(header)
            .ok()
            .and_then(|h| serde_json::from_slice(&h).ok())
            .ok_or(TokenError::Malformed)?;
        if header.get("alg").and_then(Value::as_str) != Some("HS256") {
            return Err(TokenError::Malformed);
        }
        let payload: Value = B64
            .decode(payload)
            .ok()
            .and_then(|p| serde_json::from_slice(&p).ok())
            .ok_or(TokenError::Malformed)?;
        if payload.get("iss").and_then(Value::as_str) != Some(ISSUER) {
            return Err(TokenError::Malformed);
        }
        let claims = Claims::from_json(&payload).ok_or(TokenError::Malformed)?;
        if now >= claims.expires_at {
            return Err(TokenError::Expired);
        }
        if now < claims.issued_at {
            return Err(TokenError::NotYetValid);
        }
        if !claims
            .audiences
            .iter()
            .any(|a| audiences.contains(&a.as_str()))
        {
            return Err(TokenError::Audience(claims.audiences));
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(expires_at: i64) -> Claims {
        Claims {
            namespace: "ns".into(),
            name: "sa".into(),
            uid: "u-1".into(),
            audiences: vec![ISSUER.into()],
            issued_at: 1000,
            expires_at,
            id: "j-1".into(),
            bound: Some(("Pod".into(), "p".into(), "pu".into())),
        }
    }

    #[test]
    fn a_minted_token_verifies_until_it_expires() {
        let signer = Signer::new(b"0123456789abcdef0123456789abcdef".to_vec());
        let token = signer.mint(&claims(2000));
        assert_eq!(signer.verify(&token, 1500), Ok(claims(2000)));
        assert_eq!(signer.verify(&token, 2000), Err(TokenError::Expired));
        assert_eq!(signer.verify(&token, 999), Err(TokenError::NotYetValid));
    }

    #[test]
    fn tokens_of_another_key_or_tampered_ones_are_refused() {
        let signer = Signer::new(vec![1; 32]);
        let other = Signer::new(vec![2; 32]);
        let token = other.mint(&claims(2000));
        assert_eq!(signer.verify(&token, 1500), Err(TokenError::Signature));
        let mine = signer.mint(&claims(2000));
        let (input, sig) = mine.rsplit_once('.').unwrap();
        let (header, _) = input.split_once('.').unwrap();
        let mut forged = claims(2000);
        forged.name = "admin".into();
        let forged_payload = B64.encode(forged.to_json().to_string());
        let tampered = format!("{header}.{forged_payload}.{sig}");
        assert_eq!(signer.verify(&tampered, 1500), Err(TokenError::Signature));
        assert_eq!(signer.verify("admin", 1500), Err(TokenError::Malformed));
        let mut elsewhere = claims(2000);
        elsewhere.audiences = vec!["vault".into()];
        assert_eq!(
            signer.verify(&signer.mint(&elsewhere), 1500),
            Err(TokenError::Audience(vec!["vault".into()]))
        );
    }
}
