//! The certificates Sprig's `gen*` functions make, field for field as Go's `x509` package
//! writes them from Sprig's template (`getBaseCertTemplate`): subject CN only, a random
//! 128-bit serial, valid from now for DAYS×24h, key usage digitalSignature+keyEncipherment
//! (+certSign for a CA), extended key usage serverAuth+clientAuth, critical basic constraints,
//! SANs (DNS names, then IPs). As Go does, a CA gets a subject key identifier (the first 20
//! bytes of the SHA-256 of its public key), and a signed certificate gets an authority key
//! identifier copied from its CA's, unless the CA has none or both names are the same.
//!
//! rcgen writes and signs the DER; what is here is the choice of fields. Each field encodes as
//! Go's does; only the order of the extensions differs (rcgen's), which no reader depends on.

use super::CertError;
use super::keys::{PrivateKey, pem_string};
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyUsagePurpose, PublicKeyData as _,
    SanType, SerialNumber,
};
use rsa::rand_core::{OsRng, RngCore as _};
use sha2::Digest as _;
use std::net::IpAddr;
use x509_parser::prelude::{FromDer as _, ParsedExtension, X509Certificate};

/// A certificate and its key, both PEM: the `.Cert` and `.Key` of Sprig's result.
pub struct CertAndKey {
    pub cert: String,
    pub key: String,
}

/// What the caller asked for: Sprig's `cn`, `ips`, `alternateDNS`, `daysValid`.
pub struct Request {
    pub cn: String,
    pub ips: Vec<IpAddr>,
    pub dns: Vec<String>,
    pub days: i64,
}

/// `genCA`/`genCAWithKey`: a self-signed CA.
pub fn ca(req: &Request, key: PrivateKey) -> Result<CertAndKey, CertError> {
    let signer = key.signer()?;
    let mut params = base_params(req)?;
    params.key_usages.push(KeyUsagePurpose::KeyCertSign);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.custom_extensions.clear();
    params.key_identifier_method = KeyIdMethod::PreSpecified(go_key_id(signer.der_bytes()));
    let cert = params.self_signed(&signer).map_err(create)?;
    finish(cert.der().to_vec(), &key)
}

/// `genSelfSignedCert`/`genSelfSignedCertWithKey`.
pub fn self_signed(req: &Request, key: PrivateKey) -> Result<CertAndKey, CertError> {
    let signer = key.signer()?;
    let cert = base_params(req)?.self_signed(&signer).map_err(create)?;
    finish(cert.der().to_vec(), &key)
}

/// The CA a signed certificate is issued from: its certificate and key as PEM.
pub struct Ca<'a> {
    pub cert: &'a str,
    pub key: &'a str,
}

/// `genSignedCert`/`genSignedCertWithKey`: a certificate for `key` issued by `ca`.
pub fn signed(req: &Request, key: PrivateKey, ca: &Ca<'_>) -> Result<CertAndKey, CertError> {
    let ca_der = pem::parse(ca.cert)
        .map_err(|_| CertError::Message("unable to decode certificate".into()))?
        .into_contents();
    let ca_cert = parse_certificate(&ca_der).map_err(|e| {
        CertError::Message(format!(
            "error parsing certificate: decodedSignerCert.Bytes: {e}"
        ))
    })?;
    let ca_key = PrivateKey::from_pem(ca.key)
        .map_err(|e| CertError::Message(format!("error parsing private key: {e}")))?;
    let mut params = base_params(req)?;
    let ca_signer = ca_key.signer()?;
    let subject = key.public()?;
    if ca_cert.public_key().subject_public_key.data.as_ref() != ca_signer.der_bytes() {
        return Err(CertError::Create(
            "x509: provided PrivateKey doesn't match parent's PublicKey".into(),
        ));
    }
    let issuer = Issuer::from_ca_cert_der(&ca_der.as_slice().into(), &ca_signer)
        .map_err(|e| CertError::Unsupported(format!("issuing from this CA certificate ({e})")))?;
    params.use_authority_key_identifier_extension = has_subject_key_id(&ca_cert);
    let mut der = params
        .signed_by(&subject, &issuer)
        .map_err(create)?
        .der()
        .to_vec();
    let issued = parse_certificate(&der).map_err(|e| CertError::Create(e.to_string()))?;
    // rcgen writes the CA's name anew; a name it cannot reproduce byte for byte (several
    // attributes in one RDN, a repeated attribute type) would break the chain.
    if issued.issuer().as_raw() != ca_cert.subject().as_raw() {
        return Err(CertError::Unsupported(format!(
            "issuing from a CA whose subject name is {}",
            ca_cert.subject()
        )));
    }
    // Go adds no authority key identifier when the names are equal.
    if params.use_authority_key_identifier_extension
        && issued.subject().as_raw() == issued.issuer().as_raw()
    {
        params.use_authority_key_identifier_extension = false;
        der = params
            .signed_by(&subject, &issuer)
            .map_err(create)?
            .der()
            .to_vec();
    }
    finish(der, &key)
}

/// `buildCustomCert`: checks that both decode and parse, and returns them unchanged.
pub fn custom(cert: &str, key: &str) -> Result<(), CertError> {
    let der = pem::parse(cert)
        .map_err(|_| CertError::Message("unable to decode certificate".into()))?
        .into_contents();
    parse_certificate(&der).map_err(|e| {
        CertError::Message(format!("error parsing certificate: decodedCert.Bytes: {e}"))
    })?;
    PrivateKey::from_pem(key)
        .map_err(|e| CertError::Message(format!("error parsing private key: {e}")))?;
    Ok(())
}

fn parse_certificate(der: &[u8]) -> Result<X509Certificate<'_>, String> {
    match X509Certificate::from_der(der) {
        Ok(([], cert)) => Ok(cert),
        Ok(_) => Err("x509: trailing data".into()),
        Err(e) => Err(format!("x509: malformed certificate ({e})")),
    }
}

fn has_subject_key_id(cert: &X509Certificate<'_>) -> bool {
    cert.extensions().iter().any(|e| {
        matches!(
            e.parsed_extension(),
            ParsedExtension::SubjectKeyIdentifier(_)
        )
    })
}

fn create(e: rcgen::Error) -> CertError {
    CertError::Create(e.to_string())
}

fn finish(der: Vec<u8>, key: &PrivateKey) -> Result<CertAndKey, CertError> {
    Ok(CertAndKey {
        cert: pem_string("CERTIFICATE", der),
        key: key.to_pem()?,
    })
}

/// Go's subject key identifier since Go 1.25: SHA-256 of the subjectPublicKey bits, cut to
/// 160 bits (rcgen's own method hashes the whole SubjectPublicKeyInfo).
fn go_key_id(public_key: &[u8]) -> Vec<u8> {
    sha2::Sha256::digest(public_key)[..20].to_vec()
}

/// Sprig's `getBaseCertTemplate`, as rcgen parameters.
fn base_params(req: &Request) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    // Go leaves an empty CN out of the name, and writes a PrintableString when the text
    // allows one (the same character set rcgen checks), a UTF8String otherwise.
    if !req.cn.is_empty() {
        let value = match rcgen::string::PrintableString::try_from(req.cn.as_str()) {
            Ok(p) => DnValue::PrintableString(p),
            Err(_) => DnValue::Utf8String(req.cn.clone()),
        };
        params.distinguished_name.push(DnType::CommonName, value);
    }
    params.serial_number = Some(random_serial());
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now;
    params.not_after = time::Duration::checked_mul(time::Duration::DAY, saturate(req.days))
        .and_then(|d| now.checked_add(d))
        .filter(|t| t.year() <= 9999)
        .ok_or_else(|| {
            CertError::Create(format!("a validity of {} days is out of range", req.days))
        })?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    // Go writes DNS names before IP addresses.
    for name in &req.dns {
        let ia5 = rcgen::string::Ia5String::try_from(name.as_str()).map_err(|_| {
            CertError::Create(format!("x509: {name:?} cannot be encoded as an IA5String"))
        })?;
        params.subject_alt_names.push(SanType::DnsName(ia5));
    }
    params
        .subject_alt_names
        .extend(req.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    // A non-CA certificate still carries a critical, empty basic constraints extension
    // (Go's BasicConstraintsValid). rcgen's `ExplicitNoCa` would also add a subject key
    // identifier, which Go does not, so the extension is written as a custom one.
    params.is_ca = IsCa::NoCa;
    let mut constraints = CustomExtension::from_oid_content(&[2, 5, 29, 19], vec![0x30, 0x00]);
    constraints.set_criticality(true);
    params.custom_extensions = vec![constraints];
    Ok(params)
}

fn saturate(days: i64) -> i32 {
    i32::try_from(days).unwrap_or(if days < 0 { i32::MIN } else { i32::MAX })
}

/// Go's `rand.Int(rand.Reader, 2^128)`: uniform below 2^128, written as a minimal INTEGER.
fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    OsRng.fill_bytes(&mut bytes);
    SerialNumber::from_slice(&bytes)
}
