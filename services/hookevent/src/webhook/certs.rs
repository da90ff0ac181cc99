//! The webhook server's certificate: a CA and a serving certificate made with rcgen when
//! hookevent starts, kept in memory only. The CA goes into every configuration hookevent
//! registers (`caBundle`); a restarted hookevent makes a new pair and registers again, so no
//! key is ever written to disk and none outlives the process.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

pub struct ServingCert {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A fresh CA and a certificate it signed for `host` (a DNS name or an IP address).
pub fn generate(host: &str) -> Result<ServingCert, rcgen::Error> {
    let now = time::OffsetDateTime::now_utc();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "berth hookevent webhook CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now - time::Duration::hours(1);
    ca.not_after = now + time::Duration::days(3650);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut params = CertificateParams::new(vec![host.to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "berth hookevent webhooks");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(3650);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(ServingCert {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
