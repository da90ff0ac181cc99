//! The key release records are authenticated with, and the MAC every record berth writes
//! carries (see `docs/decisions/release-records.md`).
//!
//! A record's Secret lives in the release's namespace, where an App (its chart, its hooks, its
//! ServiceAccount) may create and change Secrets. Where a record was found therefore says
//! nothing about who wrote it: berth acts only on records whose MAC, made with a key only the
//! release service holds, checks out.
//!
//! The MAC is HMAC-SHA256 over the Secret's name and namespace, the revision, the package the
//! release belongs to (its key, and for an App its namespace), the render checksum label and
//! the record's payload (`data.release`, exactly as stored), each length-prefixed after a
//! domain tag, so no two different records share an input. It is written in the annotation
//! [`MAC_ANNOTATION`] (`hmac-sha256:<hex>`); the record itself stays Helm's, so `helm list` and
//! `helm get manifest` read it unchanged.

use hmac::{KeyInit as _, Mac as _};
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;

type HmacSha256 = hmac::Hmac<sha2_11::Sha256>;

/// Annotation holding a record's MAC.
pub const MAC_ANNOTATION: &str = "berth.io/record-mac";
/// Annotation naming the package (its key) a record's release belongs to.
pub const PACKAGE_ANNOTATION: &str = "berth.io/package";
/// Annotation naming the namespace an App's release is confined to (absent for a Module).
pub const APP_NAMESPACE_ANNOTATION: &str = "berth.io/app-namespace";

/// The form of [`MAC_ANNOTATION`]'s value: the algorithm, then the MAC in lowercase hex.
const MAC_PREFIX: &str = "hmac-sha256:";
/// Separates this MAC's inputs from any other use of the key.
const DOMAIN: &[u8] = b"berth.io/release-record/v1";

/// Fewest bytes a key may have (256 bits of text: a 64-character hex or alphanumeric string has
/// far more entropy than HMAC-SHA256 needs).
pub const MIN_KEY_BYTES: usize = 32;
/// Most bytes read from a key file.
const MAX_KEY_BYTES: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("release record key file {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "release record key file {path}: {found} bytes, but a key needs at least {MIN_KEY_BYTES} \
         (e.g. 64 random hex digits: `openssl rand -hex 32`)"
    )]
    TooShort { path: String, found: usize },
    #[error("release record key file {path}: larger than {MAX_KEY_BYTES} bytes")]
    TooLong { path: String },
}

/// The key release records are authenticated with. Cheap to clone.
#[derive(Clone)]
pub struct RecordKey(Arc<[u8]>);

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordKey(..)")
    }
}

/// What a record's MAC covers.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub secret: &'a str,
    pub namespace: &'a str,
    pub revision: i32,
    pub package: &'a str,
    /// Empty for a Module (or a release written without a package).
    pub app_namespace: &'a str,
    /// The render checksum label (empty when the Secret has none).
    pub checksum: &'a str,
    /// `data.release` as stored (the base64 text, not decoded).
    pub release: &'a [u8],
}

impl RecordKey {
    /// A key of `bytes` (at least [`MIN_KEY_BYTES`]); `origin` names where they came from.
    pub fn from_bytes(bytes: &[u8], origin: &str) -> Result<RecordKey, KeyError> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort {
                path: origin.to_owned(),
                found: bytes.len(),
            });
        }
        Ok(RecordKey(bytes.into()))
    }

    /// Reads the key from `path`: its contents without trailing whitespace (so a file written
    /// by `echo`, or a Secret made with `kubectl create secret --from-literal`, works).
    pub fn load(path: &Path) -> Result<RecordKey, KeyError> {
        let shown = path.display().to_string();
        let io = |source| KeyError::Io {
            path: shown.clone(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(MAX_KEY_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.len() as u64 > MAX_KEY_BYTES {
            return Err(KeyError::TooLong { path: shown });
        }
        while bytes.last().is_some_and(u8::is_ascii_whitespace) {
            bytes.pop();
        }
        RecordKey::from_bytes(&bytes, &shown)
    }

    /// The key in `path`, written first (64 random hex digits, mode 0600, never replacing a
    /// file that exists) when there is none: what `berth up` and the test harnesses use.
    pub fn load_or_generate(path: &Path) -> Result<RecordKey, KeyError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let io = |source| KeyError::Io {
            path: path.display().to_string(),
            source,
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut file) => {
                let mut raw = [0u8; 32];
                rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut raw)
                    .map_err(|e| io(std::io::Error::other(e.to_string())))?;
                let text = format!("{}\n", hex::encode(raw));
                file.write_all(text.as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(io)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        RecordKey::load(path)
    }

    fn mac(&self, signed: &Signed<'_>) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        let mut field = |bytes: &[u8]| {
            mac.update(&(bytes.len() as u64).to_be_bytes());
            mac.update(bytes);
        };
        field(DOMAIN);
        field(signed.secret.as_bytes());
        field(signed.namespace.as_bytes());
        field(signed.revision.to_string().as_bytes());
        field(signed.package.as_bytes());
        field(signed.app_namespace.as_bytes());
        field(signed.checksum.as_bytes());
        field(signed.release);
        mac
    }

    /// The value of [`MAC_ANNOTATION`] for `signed`.
    pub fn sign(&self, signed: &Signed<'_>) -> String {
        format!(
            "{MAC_PREFIX}{}",
            hex::encode(self.mac(signed).finalize().into_bytes())
        )
    }

    /// Whether `annotation` (the value of [`MAC_ANNOTATION`]) is `signed`'s MAC under this key.
    /// Compared in constant time.
    pub fn verify(&self, signed: &Signed<'_>, annotation: &str) -> bool {
        let Some(given) = annotation
            .strip_prefix(MAC_PREFIX)
            .and_then(|h| hex::decode(h).ok())
        else {
            return false;
        };
        self.mac(signed).verify_slice(&given).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> RecordKey {
        RecordKey::from_bytes(&[byte; 32], "test").unwrap()
    }

    fn signed(release: &[u8]) -> Signed<'_> {
        Signed {
            secret: "sh.helm.release.v1.web.v2",
            namespace: "team",
            revision: 2,
            package: "team.web",
            app_namespace: "team",
            checksum: "abc",
            release,
        }
    }

    #[test]
    fn a_mac_verifies_under_its_key_only() {
        let mac = key(1).sign(&signed(b"payload"));
        assert!(mac.starts_with("hmac-sha256:"), "{mac}");
        assert!(key(1).verify(&signed(b"payload"), &mac));
        assert!(!key(2).verify(&signed(b"payload"), &mac), "wrong key");
    }

    #[test]
    fn every_covered_field_changes_the_mac() {
        let k = key(1);
        let base = signed(b"payload");
        let mac = k.sign(&base);
        let tampered = [
            Signed {
                release: b"payloae",
                ..base
            },
            Signed {
                secret: "sh.helm.release.v1.web.v3",
                ..base
            },
            Signed {
                namespace: "other",
                ..base
            },
            Signed {
                revision: 3,
                ..base
            },
            Signed {
                package: "web",
                ..base
            },
            Signed {
                app_namespace: "",
                ..base
            },
            Signed {
                checksum: "abd",
                ..base
            },
        ];
        for t in &tampered {
            assert!(!k.verify(t, &mac), "{t:?}");
        }
        // Length prefixes: moving a byte from one field to the next is another input.
        let shifted = Signed {
            package: "team.we",
            app_namespace: "bteam",
            ..base
        };
        assert_ne!(k.sign(&shifted), mac);
    }

    #[test]
    fn missing_or_malformed_annotations_do_not_verify() {
        let k = key(1);
        let s = signed(b"payload");
        let mac = k.sign(&s);
        for bad in [
            "",
            "hmac-sha256:",
            "hmac-sha256:zz",
            &mac[..mac.len() - 2],
            mac.trim_start_matches("hmac-sha256:"),
            &mac.replace("hmac-sha256", "hmac-sha512"),
        ] {
            assert!(!k.verify(&s, bad), "{bad:?}");
        }
    }

    #[test]
    fn keys_come_from_files_of_at_least_32_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "too short\n").unwrap();
        let err = RecordKey::load(&short).unwrap_err().to_string();
        assert!(
            err.contains("9 bytes") && err.contains("at least 32"),
            "{err}"
        );
        let missing = RecordKey::load(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("missing"), "{missing}");

        // Generated once (0600), then read back unchanged; trailing newlines do not count.
        let path = dir.path().join("record.key");
        let first = RecordKey::load_or_generate(&path).unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let again = RecordKey::load_or_generate(&path).unwrap();
        let s = signed(b"x");
        assert!(again.verify(&s, &first.sign(&s)));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim_end().len(), 64, "{text:?}");
        let other = dir.path().join("other.key");
        let second = RecordKey::load_or_generate(&other).unwrap();
        assert!(!second.verify(&s, &first.sign(&s)), "each key is random");
    }
}
