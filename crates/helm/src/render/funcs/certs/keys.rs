//! Private keys as Sprig handles them: made by `genPrivateKey` and the `gen*` functions, read
//! from PEM in the forms Go's `x509` package reads (Sprig's `parsePrivateKeyPEM`), and written
//! back in the one form Sprig writes for each type (`pemBlockForKey`): RSA as PKCS#1, EC as
//! SEC1, Ed25519 as PKCS#8, DSA as OpenSSL's `DSA PRIVATE KEY`.
//!
//! The encodings come from RustCrypto's format crates; what is written here is only which
//! form each key type takes.
//!
//! RSA keys are made and used by the `rsa` crate, which carries advisory RUSTSEC-2023-0071
//! (the Marvin timing side channel on decryption). It does not apply in a way that matters here:
//! the keys are generated for the rendered output or passed in by the chart, nothing is ever
//! decrypted, and the only private-key operation is signing the certificate being rendered
//! (blinded, with the OS random generator), so there is no oracle for an attacker to time.

use super::CertError;
use der::asn1::{ObjectIdentifier, OctetStringRef, UintRef};
use der::{Decode as _, Encode as _};
use rcgen::{PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, PKCS_ED25519, PKCS_RSA_SHA256};
use rsa::pkcs1::{DecodeRsaPrivateKey as _, EncodeRsaPrivateKey as _, EncodeRsaPublicKey as _};
use rsa::rand_core::{OsRng, RngCore as _};
use rsa::signature::{RandomizedSigner as _, SignatureEncoding as _};

const OID_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const OID_EC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const OID_ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
const OID_P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const OID_P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");

/// The key types `genPrivateKey` makes, with Sprig's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// Sprig's `genPrivateKey "rsa"` is 4096 bits; the `gen*` certificate functions use 2048.
    Rsa(usize),
    /// P-256.
    Ecdsa,
    Ed25519,
    /// L = 2048, N = 256.
    Dsa,
}

/// The EC curves berth can sign with (ring's); Go also reads P-224 and P-521 keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    P256,
    P384,
}

impl Curve {
    fn from_oid(oid: ObjectIdentifier) -> Result<Curve, CertError> {
        match oid {
            OID_P256 => Ok(Curve::P256),
            OID_P384 => Ok(Curve::P384),
            other => Err(CertError::Unsupported(format!(
                "EC keys on curve {other} (berth signs with P-256 and P-384 keys only)"
            ))),
        }
    }

    fn oid(self) -> ObjectIdentifier {
        match self {
            Curve::P256 => OID_P256,
            Curve::P384 => OID_P384,
        }
    }

    /// Bytes of a private scalar, which Go's SEC1 encoding pads to.
    fn scalar_len(self) -> usize {
        match self {
            Curve::P256 => 32,
            Curve::P384 => 48,
        }
    }

    fn algorithm(self) -> &'static rcgen::SignatureAlgorithm {
        match self {
            Curve::P256 => &PKCS_ECDSA_P256_SHA256,
            Curve::P384 => &PKCS_ECDSA_P384_SHA384,
        }
    }
}

/// A private key of one of the types Sprig handles.
pub enum PrivateKey {
    Rsa(Box<rsa::RsaPrivateKey>),
    Ec {
        curve: Curve,
        /// The private scalar, padded to the curve's size.
        secret: Vec<u8>,
        /// The public point, uncompressed.
        public: Vec<u8>,
    },
    Ed25519([u8; 32]),
    /// Big-endian `p, q, g, y, x`. Go reads DSA keys but cannot certify or sign with them.
    Dsa([Vec<u8>; 5]),
}

/// The sizes AWS-LC generates RSA keys of (every size Sprig uses); others are made by `rsa`.
/// Both use Go's public exponent, 65537.
fn aws_rsa_size(bits: usize) -> Option<aws_lc_rs::rsa::KeySize> {
    use aws_lc_rs::rsa::KeySize;
    match bits {
        2048 => Some(KeySize::Rsa2048),
        3072 => Some(KeySize::Rsa3072),
        4096 => Some(KeySize::Rsa4096),
        8192 => Some(KeySize::Rsa8192),
        _ => None,
    }
}

/// A new RSA key from AWS-LC, as PKCS#8.
fn aws_rsa_pkcs8(size: aws_lc_rs::rsa::KeySize) -> Result<Vec<u8>, aws_lc_rs::error::Unspecified> {
    use aws_lc_rs::encoding::AsDer as _;
    let pair = aws_lc_rs::rsa::KeyPair::generate(size)?;
    let der: aws_lc_rs::encoding::Pkcs8V1Der<'_> = pair.as_der()?;
    Ok(der.as_ref().to_vec())
}

/// A new key of the size the certificate functions make (`genCA`, `genSelfSignedCert`,
/// `genSignedCert`, ... without a key of the chart's), with the next one made meanwhile.
///
/// Charts that make certificates make several, one after the other (a CA and the
/// certificates it signs, often a set per component), and each RSA-2048 key is a prime search
/// of ~0.1 s. Asking for a key starts the search for the next one in a background thread
/// before this one is made (or the one made ahead is waited for), so two searches run on two
/// cores and the next certificate function finds its key made or half made. One key at most
/// waits (fresh, and handed out once), and one thread at most makes it.
fn spare_cert_key() -> Result<Vec<u8>, aws_lc_rs::error::Unspecified> {
    use std::sync::{Mutex, PoisonError};
    use std::thread::JoinHandle;
    type Spare = JoinHandle<Result<Vec<u8>, aws_lc_rs::error::Unspecified>>;
    static SPARE: Mutex<Option<Spare>> = Mutex::new(None);
    let size = aws_lc_rs::rsa::KeySize::Rsa2048;
    let ahead = {
        let mut slot = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
        let ahead = slot.take();
        // When the system refuses a thread, the next key is made when it is asked for.
        *slot = std::thread::Builder::new()
            .name("spare-rsa-key".into())
            .spawn(move || aws_rsa_pkcs8(size))
            .ok();
        ahead
    };
    // A key made ahead that failed (or whose thread did) is not used: it is made here instead.
    match ahead
        .and_then(|spare| spare.join().ok())
        .and_then(Result::ok)
    {
        Some(der) => Ok(der),
        None => aws_rsa_pkcs8(size),
    }
}

/// A new key of `size` from the first of two searches run at once, for the larger keys a chart
/// asks for one at a time (`genPrivateKey "rsa"`, 4096 bits).
///
/// An RSA key's time is that of its prime search, which varies widely from key to key (0.2
/// to 1.5 s at 4096 bits); two searches on two cores give the first one found, which is as
/// random a key as either. The other search runs on to its end in its thread and is dropped
/// (its result goes into a channel with room for both, so it never waits). At most
/// `MAX_LOSERS` such searches run on: past that, a key is made by one search here.
fn raced_rsa_pkcs8(
    size: aws_lc_rs::rsa::KeySize,
) -> Result<Vec<u8>, aws_lc_rs::error::Unspecified> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    /// Searches started by a race that have not ended.
    static RUNNING: AtomicUsize = AtomicUsize::new(0);
    const MAX_LOSERS: usize = 2;
    if RUNNING.load(Ordering::Relaxed) >= MAX_LOSERS {
        return aws_rsa_pkcs8(size);
    }
    let (tx, rx) = mpsc::sync_channel(2);
    let mut started = 0;
    for _ in 0..2 {
        let tx = tx.clone();
        RUNNING.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("raced-rsa-key".into())
            .spawn(move || {
                let _ = tx.send(aws_rsa_pkcs8(size));
                RUNNING.fetch_sub(1, Ordering::Relaxed);
            });
        match spawned {
            Ok(_) => started += 1,
            Err(_) => {
                RUNNING.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
    drop(tx);
    if started == 0 {
        return aws_rsa_pkcs8(size);
    }
    let mut last = Err(aws_lc_rs::error::Unspecified);
    for result in rx.iter().take(started) {
        if result.is_ok() {
            return result;
        }
        last = result;
    }
    last
}

impl PrivateKey {
    /// A new key from the operating system's random generator (AWS-LC's for RSA keys).
    pub fn generate(kind: KeyType) -> Result<PrivateKey, CertError> {
        let generation = |e: &dyn std::fmt::Display| CertError::Generate(e.to_string());
        match kind {
            KeyType::Rsa(bits) => {
                let key = match aws_rsa_size(bits) {
                    Some(size) => {
                        use rsa::pkcs8::DecodePrivateKey as _;
                        let der = if bits == super::CERT_RSA_BITS {
                            spare_cert_key()
                        } else if bits == super::PRIVATE_KEY_RSA_BITS {
                            raced_rsa_pkcs8(size)
                        } else {
                            aws_rsa_pkcs8(size)
                        };
                        rsa::RsaPrivateKey::from_pkcs8_der(&der.map_err(|e| generation(&e))?)
                            .map_err(|e| generation(&e))?
                    }
                    None => {
                        rsa::RsaPrivateKey::new(&mut OsRng, bits).map_err(|e| generation(&e))?
                    }
                };
                Ok(PrivateKey::Rsa(Box::new(key)))
            }
            KeyType::Ecdsa => {
                let pair = rcgen::KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
                    .map_err(|e| generation(&e))?;
                PrivateKey::from_pkcs8(&pair.serialize_der())
            }
            KeyType::Ed25519 => {
                let mut seed = [0u8; 32];
                OsRng.fill_bytes(&mut seed);
                Ok(PrivateKey::Ed25519(seed))
            }
            KeyType::Dsa => {
                let components = dsa::Components::generate(&mut OsRng, dsa::KeySize::DSA_2048_256);
                let key = dsa::SigningKey::generate(&mut OsRng, components);
                let c = key.verifying_key().components();
                Ok(PrivateKey::Dsa([
                    c.p().to_bytes_be(),
                    c.q().to_bytes_be(),
                    c.g().to_bytes_be(),
                    key.verifying_key().y().to_bytes_be(),
                    key.x().to_bytes_be(),
                ]))
            }
        }
    }

    /// Reads the first PEM block of `text` as Sprig's `parsePrivateKeyPEM` does, with its
    /// error texts.
    pub fn from_pem(text: &str) -> Result<PrivateKey, CertError> {
        let block = pem::parse(text).map_err(|_| CertError::NoPem)?;
        let der = block.contents();
        match block.tag() {
            "PRIVATE KEY" => PrivateKey::from_pkcs8(der)
                .map_err(|e| CertError::KeyFormat("decoding PEM as PKCS#8", e.to_string())),
            "RSA PRIVATE KEY" => rsa::RsaPrivateKey::from_pkcs1_der(der)
                .map(|k| PrivateKey::Rsa(Box::new(k)))
                .map_err(|e| {
                    CertError::KeyFormat("parsing RSA private key from PEM", e.to_string())
                }),
            "EC PRIVATE KEY" => PrivateKey::from_sec1(der, None).map_err(|e| {
                CertError::KeyFormat("parsing EC private key from PEM", e.to_string())
            }),
            "DSA PRIVATE KEY" => PrivateKey::from_dsa(der).map_err(|e| {
                CertError::KeyFormat("parsing DSA private key from PEM", e.to_string())
            }),
            tag if tag.ends_with(" PRIVATE KEY") => Err(CertError::KeyType(tag.to_string())),
            tag => Err(CertError::NotAKey(tag.to_string())),
        }
    }

    fn from_pkcs8(der: &[u8]) -> Result<PrivateKey, CertError> {
        let bad = |e: &dyn std::fmt::Display| CertError::Asn1(e.to_string());
        let info = pkcs8::PrivateKeyInfo::try_from(der).map_err(|e| bad(&e))?;
        match info.algorithm.oid {
            OID_RSA => rsa::RsaPrivateKey::from_pkcs1_der(info.private_key)
                .map(|k| PrivateKey::Rsa(Box::new(k)))
                .map_err(|e| bad(&e)),
            OID_EC => {
                let curve = info
                    .algorithm
                    .parameters_oid()
                    .map_err(|e| bad(&e))
                    .and_then(Curve::from_oid)?;
                PrivateKey::from_sec1(info.private_key, Some(curve))
            }
            OID_ED25519 => {
                let seed = OctetStringRef::from_der(info.private_key).map_err(|e| bad(&e))?;
                let seed = <[u8; 32]>::try_from(seed.as_bytes())
                    .map_err(|_| bad(&"an Ed25519 private key is not 32 bytes"))?;
                Ok(PrivateKey::Ed25519(seed))
            }
            other => Err(bad(&format!(
                "PKCS#8 wrapping contained private key with unknown algorithm: {other}"
            ))),
        }
    }

    /// A SEC1 `ECPrivateKey`; `curve` comes from the PKCS#8 wrapping when there is one.
    fn from_sec1(der: &[u8], curve: Option<Curve>) -> Result<PrivateKey, CertError> {
        let bad = |e: &dyn std::fmt::Display| CertError::Asn1(e.to_string());
        let key = sec1::EcPrivateKey::from_der(der).map_err(|e| bad(&e))?;
        let curve = match (curve, key.parameters) {
            (Some(c), _) => c,
            (None, Some(p)) => Curve::from_oid(p.named_curve().ok_or_else(|| bad(&"no curve"))?)?,
            (None, None) => return Err(bad(&"the key does not name its curve")),
        };
        let len = curve.scalar_len();
        if key.private_key.len() > len {
            return Err(bad(&"invalid private key length"));
        }
        let mut secret = vec![0u8; len - key.private_key.len()];
        secret.extend_from_slice(key.private_key);
        // Go recomputes the public point; ring needs it stored, as every common tool does.
        let public = key
            .public_key
            .ok_or_else(|| {
                CertError::Unsupported("EC private keys without their public key".into())
            })?
            .to_vec();
        let parsed = PrivateKey::Ec {
            curve,
            secret,
            public,
        };
        // Checks that the scalar and the point belong together.
        parsed.signer()?;
        Ok(parsed)
    }

    /// OpenSSL's DSA key: `SEQUENCE { version 0, p, q, g, y, x }`. A sequence of six integers
    /// encodes the same as a SEQUENCE OF INTEGER, so the `der` crate reads it without a
    /// dedicated type.
    fn from_dsa(der: &[u8]) -> Result<PrivateKey, CertError> {
        let bad = |e: &dyn std::fmt::Display| CertError::Asn1(e.to_string());
        let ints: Vec<UintRef<'_>> = Vec::from_der(der).map_err(|e| bad(&e))?;
        match ints.as_slice() {
            [_version, p, q, g, y, x] => Ok(PrivateKey::Dsa(
                [p, q, g, y, x].map(|i| i.as_bytes().to_vec()),
            )),
            _ => Err(bad(&"a DSA key is six integers")),
        }
    }

    /// The PEM Sprig writes for the key (`pemBlockForKey`), with Go's 64-column lines.
    pub fn to_pem(&self) -> Result<String, CertError> {
        let encoding = |e: &dyn std::fmt::Display| CertError::Encode(e.to_string());
        let (tag, der) = match self {
            PrivateKey::Rsa(k) => (
                "RSA PRIVATE KEY",
                k.to_pkcs1_der()
                    .map_err(|e| encoding(&e))?
                    .as_bytes()
                    .to_vec(),
            ),
            PrivateKey::Ec {
                curve,
                secret,
                public,
            } => ("EC PRIVATE KEY", ec_sec1_der(*curve, secret, public)?),
            PrivateKey::Ed25519(seed) => ("PRIVATE KEY", ed25519_pkcs8(seed)?),
            PrivateKey::Dsa(parts) => {
                let mut ints = vec![UintRef::new(&[0]).map_err(|e| encoding(&e))?];
                for part in parts {
                    ints.push(UintRef::new(part).map_err(|e| encoding(&e))?);
                }
                ("DSA PRIVATE KEY", ints.to_der().map_err(|e| encoding(&e))?)
            }
        };
        Ok(pem_string(tag, der))
    }

    /// The key as a certificate signer. Go's x509 cannot sign with DSA keys.
    pub fn signer(&self) -> Result<Signer, CertError> {
        let ring = |pkcs8: Vec<u8>, alg| {
            rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8.into(), alg)
                .map(Signer::Ring)
                .map_err(|e| CertError::Asn1(e.to_string()))
        };
        match self {
            PrivateKey::Rsa(k) => {
                let public = k
                    .to_public_key()
                    .to_pkcs1_der()
                    .map_err(|e| CertError::Encode(e.to_string()))?;
                Ok(Signer::Rsa {
                    key: rsa::pkcs1v15::SigningKey::new(k.as_ref().clone()),
                    public: public.as_bytes().to_vec(),
                })
            }
            PrivateKey::Ec {
                curve,
                secret,
                public,
            } => {
                let sec1 = ec_sec1_der(*curve, secret, public)?;
                let curve_oid = curve.oid();
                let params = der::asn1::AnyRef::from(&curve_oid);
                let info = pkcs8::PrivateKeyInfo::new(
                    pkcs8::AlgorithmIdentifierRef {
                        oid: OID_EC,
                        parameters: Some(params),
                    },
                    &sec1,
                );
                ring(
                    info.to_der()
                        .map_err(|e| CertError::Encode(e.to_string()))?,
                    curve.algorithm(),
                )
            }
            PrivateKey::Ed25519(seed) => ring(ed25519_pkcs8(seed)?, &PKCS_ED25519),
            PrivateKey::Dsa(_) => Err(CertError::Create(
                "x509: certificate private key does not implement crypto.Signer".into(),
            )),
        }
    }

    /// The key's public half as a certificate subject. Go's x509 cannot certify DSA keys.
    pub fn public(&self) -> Result<Signer, CertError> {
        match self {
            PrivateKey::Dsa(_) => Err(CertError::Create(
                "x509: unsupported public key type: *dsa.PublicKey".into(),
            )),
            other => other.signer(),
        }
    }
}

/// Go's `MarshalECPrivateKey`: version 1, the scalar, the named curve, the public point.
fn ec_sec1_der(curve: Curve, secret: &[u8], public: &[u8]) -> Result<Vec<u8>, CertError> {
    sec1::EcPrivateKey {
        private_key: secret,
        parameters: Some(sec1::EcParameters::NamedCurve(curve.oid())),
        public_key: Some(public),
    }
    .to_der()
    .map_err(|e| CertError::Encode(e.to_string()))
}

/// Go's `MarshalPKCS8PrivateKey` for Ed25519: version 1, the seed only (RFC 8410).
fn ed25519_pkcs8(seed: &[u8; 32]) -> Result<Vec<u8>, CertError> {
    let encoding = |e: der::Error| CertError::Encode(e.to_string());
    let inner = OctetStringRef::new(seed)
        .and_then(|o| o.to_der())
        .map_err(encoding)?;
    pkcs8::PrivateKeyInfo::new(
        pkcs8::AlgorithmIdentifierRef {
            oid: OID_ED25519,
            parameters: None,
        },
        &inner,
    )
    .to_der()
    .map_err(encoding)
}

/// PEM as Go's `pem.Encode` writes it: 64-column base64, `\n` line ends.
pub fn pem_string(tag: &str, der: Vec<u8>) -> String {
    pem::encode_config(
        &pem::Pem::new(tag, der),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// A key that signs certificates (and is also what rcgen reads a subject's public key from).
/// RSA signs with the `rsa` crate because ring refuses RSA keys under 2048 bits, which Go
/// accepts; EC and Ed25519 sign with ring through rcgen.
pub enum Signer {
    Rsa {
        key: rsa::pkcs1v15::SigningKey<rsa::sha2::Sha256>,
        /// PKCS#1 `RSAPublicKey`, the subjectPublicKey of an RSA certificate.
        public: Vec<u8>,
    },
    Ring(rcgen::KeyPair),
}

impl rcgen::PublicKeyData for Signer {
    fn der_bytes(&self) -> &[u8] {
        match self {
            Signer::Rsa { public, .. } => public,
            Signer::Ring(pair) => pair.der_bytes(),
        }
    }

    /// Go signs with SHA-256 for RSA, the curve's own hash for ECDSA, pure Ed25519.
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        match self {
            Signer::Rsa { .. } => &PKCS_RSA_SHA256,
            Signer::Ring(pair) => pair.algorithm(),
        }
    }
}

impl rcgen::SigningKey for Signer {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        match self {
            Signer::Rsa { key, .. } => key
                .try_sign_with_rng(&mut OsRng, msg)
                .map(|s| s.to_vec())
                .map_err(|_| rcgen::Error::RemoteKeyError),
            Signer::Ring(pair) => pair.sign(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData as _;

    fn round_trip(kind: KeyType, label: &str) -> PrivateKey {
        let key = PrivateKey::generate(kind).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        let pem = key.to_pem().unwrap_or_default();
        assert!(
            pem.starts_with(&format!("-----BEGIN {label}-----\n")),
            "{pem}"
        );
        assert!(pem.ends_with(&format!("-----END {label}-----\n")), "{pem}");
        assert!(pem.lines().all(|l| l.len() <= 64), "Go wraps at 64 columns");
        let back = PrivateKey::from_pem(&pem).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(
            back.to_pem().unwrap_or_default(),
            pem,
            "{kind:?} re-encodes the same"
        );
        back
    }

    #[test]
    fn each_key_type_writes_sprig_s_pem_form_and_reads_back() {
        let ec = round_trip(KeyType::Ecdsa, "EC PRIVATE KEY");
        let ec_pub = ec.public().map(|s| s.der_bytes().len()).unwrap_or_default();
        assert_eq!(ec_pub, 65, "an uncompressed P-256 point");
        let ed = round_trip(KeyType::Ed25519, "PRIVATE KEY");
        // RFC 8410's 48-byte PKCS#8 v1 form, as Go writes it.
        let der = pem::parse(ed.to_pem().unwrap_or_default()).map(|p| p.contents().len());
        assert_eq!(der.ok(), Some(48));
        let rsa = round_trip(KeyType::Rsa(1024), "RSA PRIVATE KEY");
        assert!(
            matches!(rsa, PrivateKey::Rsa(k) if rsa::traits::PublicKeyParts::size(k.as_ref()) == 128)
        );
    }

    #[test]
    fn rsa_keys_in_pkcs8_are_written_back_as_pkcs1() {
        use rsa::pkcs8::EncodePrivateKey as _;
        let key = rsa::RsaPrivateKey::new(&mut OsRng, 1024).map(Box::new);
        let Ok(key) = key else { panic!("rsa keygen") };
        let pkcs8 = key
            .to_pkcs8_der()
            .map(|d| d.as_bytes().to_vec())
            .unwrap_or_default();
        let parsed = PrivateKey::from_pem(&pem_string("PRIVATE KEY", pkcs8));
        let pem = parsed.and_then(|k| k.to_pem()).unwrap_or_default();
        assert!(pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"), "{pem}");
    }

    #[test]
    fn bad_pem_gives_sprig_s_errors() {
        let err = |text: &str| PrivateKey::from_pem(text).err().map(|e| e.to_string());
        assert_eq!(err("junk").as_deref(), Some("no PEM data in input"));
        let block =
            |tag: &str, body: &str| format!("-----BEGIN {tag}-----\n{body}\n-----END {tag}-----\n");
        assert_eq!(
            err(&block("CERTIFICATE", "MIIB")).as_deref(),
            Some("no private key data in PEM block of type CERTIFICATE")
        );
        assert_eq!(
            err(&block("FOO PRIVATE KEY", "MIIB")).as_deref(),
            Some("invalid private key type FOO PRIVATE KEY")
        );
        for (tag, prefix) in [
            ("RSA PRIVATE KEY", "parsing RSA private key from PEM: "),
            ("EC PRIVATE KEY", "parsing EC private key from PEM: "),
            ("PRIVATE KEY", "decoding PEM as PKCS#8: "),
            ("DSA PRIVATE KEY", "parsing DSA private key from PEM: "),
        ] {
            let e = err(&block(tag, "MIIB")).unwrap_or_default();
            assert!(
                e.starts_with(prefix) && e.len() > prefix.len(),
                "{tag}: {e}"
            );
        }
    }

    #[test]
    fn dsa_keys_are_read_but_neither_sign_nor_get_certified() {
        // A structurally valid (tiny, made-up) DSA key: Go reads any six integers.
        let ints: Vec<UintRef<'_>> = [0u8, 23, 11, 4, 9, 3]
            .iter()
            .map(|b| UintRef::new(std::slice::from_ref(b)).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let pem = pem_string("DSA PRIVATE KEY", ints.to_der().unwrap_or_default());
        let key = PrivateKey::from_pem(&pem).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key.to_pem().unwrap_or_default(), pem);
        let signer = key
            .signer()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            signer.contains("does not implement crypto.Signer"),
            "{signer}"
        );
        let public = key
            .public()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(public.contains("unsupported public key type"), "{public}");
    }
}
