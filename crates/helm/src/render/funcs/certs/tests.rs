//! The certificate functions as a template calls them; `tests/certs_oracle.rs` compares the
//! same functions with helm's output.

use super::*;
use crate::render::value::strval;
use x509_parser::prelude::*;

fn s(text: &str) -> Value {
    string(text)
}

fn list(items: &[&str]) -> Value {
    Value::List(items.iter().map(|i| s(i)).collect())
}

/// Calls `name` from the registered function map, with the error as the user sees it.
fn call(name: &str, args: &[Value]) -> std::result::Result<Value, String> {
    let mut fm = FuncMap::new();
    register(&mut fm);
    let f = fm
        .get(name)
        .unwrap_or_else(|| panic!("{name} is not registered"));
    f(args).map_err(|e| super::super::args::message(&e))
}

fn ok(name: &str, args: &[Value]) -> Value {
    call(name, args).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn err(name: &str, args: &[Value]) -> String {
    match call(name, args) {
        Ok(v) => panic!("{name} should fail, gave {v}"),
        Err(e) => e,
    }
}

fn text(v: &Value, field: &str) -> String {
    match v.field(field) {
        Some(Value::String(t)) => t.to_string(),
        other => panic!("no {field}: {other:?}"),
    }
}

fn der_of(v: &Value) -> Vec<u8> {
    let block = ::pem::parse(text(v, "Cert")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(block.tag(), "CERTIFICATE");
    block.into_contents()
}

fn with_cert<T>(v: &Value, f: impl FnOnce(&X509Certificate<'_>) -> T) -> T {
    let der = der_of(v);
    let (_, cert) = X509Certificate::from_der(&der).unwrap_or_else(|e| panic!("{e}"));
    f(&cert)
}

fn cn(name: &X509Name<'_>) -> Option<String> {
    name.iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .map(str::to_string)
}

fn sans(c: &X509Certificate<'_>) -> Vec<String> {
    c.subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .map(|g| format!("{g}"))
                .collect()
        })
        .unwrap_or_default()
}

fn key_id(c: &X509Certificate<'_>) -> Option<Vec<u8>> {
    c.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        })
}

fn authority_id(c: &X509Certificate<'_>) -> Option<Vec<u8>> {
    c.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                aki.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        })
}

fn validity_days(c: &X509Certificate<'_>) -> i64 {
    (c.validity().not_after.timestamp() - c.validity().not_before.timestamp()) / 86_400
}

#[test]
fn gen_private_key_makes_each_type_and_renders_unknown_types_as_text() {
    let label = |kind: &str| {
        let pem = strval(&ok("genPrivateKey", &[s(kind)]));
        pem.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(label("ecdsa"), "-----BEGIN EC PRIVATE KEY-----");
    assert_eq!(label("ed25519"), "-----BEGIN PRIVATE KEY-----");
    assert_eq!(label("dsa"), "-----BEGIN DSA PRIVATE KEY-----");
    // The default type is RSA, 4096 bits as in Sprig.
    let rsa = strval(&ok("genPrivateKey", &[s("")]));
    let parsed = PrivateKey::from_pem(&rsa).map(|k| match k {
        PrivateKey::Rsa(k) => (
            rsa::traits::PublicKeyParts::size(k.as_ref()) * 8,
            rsa::traits::PublicKeyParts::e(k.as_ref()).to_string(),
            k.validate().is_ok(),
        ),
        _ => (0, String::new(), false),
    });
    // Go's public exponent, and a key whose parts agree.
    assert_eq!(parsed.ok(), Some((4096, "65537".to_string(), true)));
    assert_eq!(
        strval(&ok("genPrivateKey", &[s("RSA")])),
        "Unknown type RSA"
    );
    assert!(err("genPrivateKey", &[Value::Int(1)]).contains("must be a string"));
    assert!(err("genPrivateKey", &[]).contains("genPrivateKey"));
}

#[test]
fn gen_ca_is_a_self_signed_rsa_ca_valid_for_the_days_asked() {
    let ca = ok("genCA", &[s("my-ca"), Value::Int(365)]);
    assert!(text(&ca, "Key").starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
    with_cert(&ca, |c| {
        assert_eq!(cn(c.subject()).as_deref(), Some("my-ca"));
        assert_eq!(c.subject().as_raw(), c.issuer().as_raw());
        assert_eq!(
            c.public_key().parsed().map(|k| k.key_size()).ok(),
            Some(2048)
        );
        assert_eq!(validity_days(c), 365);
        assert!(c.is_ca());
        let ku = c.key_usage().ok().flatten().map(|k| k.value.to_string());
        assert_eq!(
            ku.as_deref(),
            Some("Digital Signature, Key Encipherment, Key Cert Sign")
        );
        assert!(authority_id(c).is_none());
        assert!(c.verify_signature(None).is_ok());
    });
    // A whole float (Go accepts the literal 10.0) but not text.
    let ca = ok("genCA", &[s("x"), Value::Float(10.0)]);
    with_cert(&ca, |c| assert_eq!(validity_days(c), 10));
    let e = err("genCA", &[s("x"), s("10")]);
    assert!(
        e.starts_with("error calling genCA: the number of days"),
        "{e}"
    );
}

#[test]
fn gen_ca_with_key_certifies_the_given_key_and_returns_it() {
    let key = strval(&ok("genPrivateKey", &[s("ecdsa")]));
    let ca = ok("genCAWithKey", &[s("ec-ca"), Value::Int(30), s(&key)]);
    assert_eq!(
        text(&ca, "Key"),
        key,
        "an EC key in Sprig's form comes back unchanged"
    );
    with_cert(&ca, |c| {
        assert_eq!(
            c.signature_algorithm.algorithm.to_id_string(),
            "1.2.840.10045.4.3.2"
        );
        assert!(c.verify_signature(None).is_ok());
    });
    let e = err("genCAWithKey", &[s("x"), Value::Int(1), s("junk")]);
    assert_eq!(
        e,
        "error calling genCAWithKey: parsing private key: no PEM data in input"
    );
}

#[test]
fn gen_self_signed_cert_lists_dns_names_then_ips_as_go_does() {
    let cert = ok(
        "genSelfSignedCert",
        &[
            s("svc"),
            list(&["10.0.0.1", "::ffff:192.168.0.1", "::1"]),
            list(&["svc", "svc.ns.svc"]),
            Value::Int(3),
        ],
    );
    with_cert(&cert, |c| {
        assert_eq!(
            sans(c),
            [
                "DNSName(svc)",
                "DNSName(svc.ns.svc)",
                "IPAddress(0a:00:00:01)",
                // IPv4-mapped IPv6 is written as the 4-byte IPv4 address.
                "IPAddress(c0:a8:00:01)",
                "IPAddress(00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01)",
            ]
        );
        assert!(!c.is_ca());
        assert!(
            key_id(c).is_none(),
            "Go gives leaf certificates no key identifier"
        );
        let bc = c
            .basic_constraints()
            .ok()
            .flatten()
            .map(|b| (b.critical, b.value.ca));
        assert_eq!(bc, Some((true, false)));
        assert_eq!(validity_days(c), 3);
    });
    // No name: an empty subject, and then the SANs are critical.
    let unnamed = ok(
        "genSelfSignedCert",
        &[s(""), list(&["10.1.1.1"]), Value::Nil, Value::Int(1)],
    );
    with_cert(&unnamed, |c| {
        assert_eq!(c.subject().iter().count(), 0);
        assert_eq!(
            c.subject_alternative_name()
                .ok()
                .flatten()
                .map(|e| e.critical),
            Some(true)
        );
    });
    let bad_ip = [s("x"), list(&["300.1.1.1"]), Value::Nil, Value::Int(1)];
    assert_eq!(
        err("genSelfSignedCert", &bad_ip),
        "error calling genSelfSignedCert: error parsing ip: 300.1.1.1"
    );
    let not_a_list = [s("x"), s("1.2.3.4"), Value::Nil, Value::Int(1)];
    assert!(err("genSelfSignedCert", &not_a_list).contains("ips must be a list"));
    let dns_int = [
        s("x"),
        Value::Nil,
        Value::List(vec![Value::Int(5)].into()),
        Value::Int(1),
    ];
    assert_eq!(
        err("genSelfSignedCert", &dns_int),
        "error calling genSelfSignedCert: error processing alternate dns name: 5 is not a string"
    );
}

#[test]
fn gen_self_signed_cert_with_key_uses_the_given_ed25519_key() {
    let key = strval(&ok("genPrivateKey", &[s("ed25519")]));
    let cert = ok(
        "genSelfSignedCertWithKey",
        &[
            s("ed"),
            Value::Nil,
            list(&["ed.example"]),
            Value::Int(2),
            s(&key),
        ],
    );
    assert_eq!(text(&cert, "Key"), key);
    with_cert(&cert, |c| {
        assert_eq!(
            c.public_key().algorithm.algorithm.to_id_string(),
            "1.3.101.112"
        );
        assert!(c.verify_signature(None).is_ok());
    });
}

#[test]
fn gen_signed_cert_is_issued_by_the_ca_with_its_key_identifier() {
    let ca = ok("genCA", &[s("issuer"), Value::Int(10)]);
    let leaf = ok(
        "genSignedCert",
        &[
            s("leaf"),
            Value::Nil,
            list(&["leaf.example"]),
            Value::Int(5),
            ca.clone(),
        ],
    );
    let (ca_der, leaf_der) = (der_of(&ca), der_of(&leaf));
    let (_, ca_cert) = X509Certificate::from_der(&ca_der).unwrap_or_else(|e| panic!("{e}"));
    let (_, leaf_cert) = X509Certificate::from_der(&leaf_der).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(leaf_cert.issuer().as_raw(), ca_cert.subject().as_raw());
    assert_eq!(authority_id(&leaf_cert), key_id(&ca_cert));
    assert!(
        leaf_cert
            .verify_signature(Some(ca_cert.public_key()))
            .is_ok()
    );
    assert_eq!(validity_days(&leaf_cert), 5);

    // The same name as the CA: Go then writes no authority key identifier.
    let twin = ok(
        "genSignedCert",
        &[s("issuer"), Value::Nil, Value::Nil, Value::Int(1), ca],
    );
    with_cert(&twin, |c| assert!(authority_id(c).is_none()));

    let e = err(
        "genSignedCert",
        &[s("x"), Value::Nil, Value::Nil, Value::Int(1), s("ca")],
    );
    assert!(e.contains("the CA must be a certificate"), "{e}");
}

#[test]
fn gen_signed_cert_with_key_checks_the_key_and_the_ca_pair() {
    let ca = ok("genCA", &[s("issuer"), Value::Int(10)]);
    let key = strval(&ok("genPrivateKey", &[s("ecdsa")]));
    let leaf = ok(
        "genSignedCertWithKey",
        &[
            s("leaf"),
            Value::Nil,
            Value::Nil,
            Value::Int(5),
            ca.clone(),
            s(&key),
        ],
    );
    assert_eq!(text(&leaf, "Key"), key);
    with_cert(&leaf, |c| {
        // The EC subject key, signed with the CA's RSA key.
        assert_eq!(
            c.public_key().algorithm.algorithm.to_id_string(),
            "1.2.840.10045.2.1"
        );
        assert_eq!(
            c.signature_algorithm.algorithm.to_id_string(),
            "1.2.840.113549.1.1.11"
        );
    });
    // A CA whose key is not its certificate's.
    let mismatched = ok(
        "buildCustomCert",
        &[s(&b64(&text(&ca, "Cert"))), s(&b64(&key))],
    );
    let e = err(
        "genSignedCert",
        &[s("x"), Value::Nil, Value::Nil, Value::Int(1), mismatched],
    );
    assert_eq!(
        e,
        "error calling genSignedCert: error creating certificate: x509: provided PrivateKey \
         doesn't match parent's PublicKey"
    );
}

fn b64(t: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(t)
}

#[test]
fn build_custom_cert_returns_its_decoded_inputs_once_they_parse() {
    let ca = ok("genCA", &[s("custom"), Value::Int(1)]);
    let (cert, key) = (text(&ca, "Cert"), text(&ca, "Key"));
    // Go's base64 decoder skips line breaks.
    let wrapped = b64(&cert)
        .as_bytes()
        .chunks(76)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("\n");
    let built = ok("buildCustomCert", &[s(&wrapped), s(&b64(&key))]);
    assert_eq!(
        (text(&built, "Cert"), text(&built, "Key")),
        (cert.clone(), key.clone())
    );

    let fails = |c: &str, k: &str| err("buildCustomCert", &[s(c), s(k)]);
    assert_eq!(
        fails("!!", &b64(&key)),
        "error calling buildCustomCert: unable to decode base64 certificate"
    );
    assert_eq!(
        fails(&b64(&cert), "!!"),
        "error calling buildCustomCert: unable to decode base64 private key"
    );
    assert_eq!(
        fails(&b64("text"), &b64(&key)),
        "error calling buildCustomCert: unable to decode certificate"
    );
    let e = fails(&b64(&cert), &b64(&cert));
    assert_eq!(
        e,
        "error calling buildCustomCert: error parsing private key: no private key data in PEM \
         block of type CERTIFICATE"
    );
    let junk_cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let e = fails(&b64(junk_cert), &b64(&key));
    assert!(e.starts_with("error calling buildCustomCert: error parsing certificate: decodedCert.Bytes: x509: malformed certificate"), "{e}");
}
