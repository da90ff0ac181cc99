//! Sprig's certificate and key functions: `genPrivateKey`, `genCA`, `genCAWithKey`,
//! `genSelfSignedCert`, `genSelfSignedCertWithKey`, `genSignedCert`, `genSignedCertWithKey`,
//! `buildCustomCert`. The certificate functions return a map with `Cert` and `Key` (PEM), as
//! Sprig's `certificate` struct has; a failure fails the render with Sprig's error text, except
//! in `genPrivateKey`, which like Sprig renders its error as the result.
//!
//! Differences from Sprig, all where Go's types differ from the template values berth has:
//! `DAYS` may be any whole number (Go takes only an `int`, so a number from `.Values` fails
//! there), the CA may be any map with `Cert` and `Key` strings (Go takes only its own struct),
//! and EC keys must be on P-256 or P-384 and carry their public key (berth signs with ring).
//! Printed whole, the result shows as a map (`map[Cert:… Key:…]`, Go: `{… …}`); `toJson`,
//! `toYaml` and field access are the same.

mod build;
mod keys;
#[cfg(test)]
mod tests;

use super::args::{Builtin, exact, fail, register_all, string};
use crate::render::value::go_sprint;
use build::{Ca, CertAndKey, Request};
use gotmpl::{FuncMap, Result, Value};
use keys::{KeyType, PrivateKey};
use std::sync::Arc;

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("genPrivateKey", gen_private_key),
        ("genCA", |a| gen_ca("genCA", a, None)),
        ("genCAWithKey", |a| gen_ca("genCAWithKey", a, Some(2))),
        ("genSelfSignedCert", |a| {
            gen_self_signed("genSelfSignedCert", a, None)
        }),
        ("genSelfSignedCertWithKey", |a| {
            gen_self_signed("genSelfSignedCertWithKey", a, Some(4))
        }),
        ("genSignedCert", |a| gen_signed("genSignedCert", a, None)),
        ("genSignedCertWithKey", |a| {
            gen_signed("genSignedCertWithKey", a, Some(5))
        }),
        ("buildCustomCert", build_custom_cert),
    ];
    register_all(fm, funcs);
}

/// Why a certificate function failed, in Sprig's words where Sprig has them.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("no PEM data in input")]
    NoPem,
    #[error("no private key data in PEM block of type {0}")]
    NotAKey(String),
    #[error("invalid private key type {0}")]
    KeyType(String),
    /// A key that did not decode: what was being read, and why.
    #[error("{0}: {1}")]
    KeyFormat(&'static str, String),
    #[error("{0}")]
    Asn1(String),
    #[error("berth does not support {0}")]
    Unsupported(String),
    #[error("error generating key: {0}")]
    Generate(String),
    #[error("error encoding key: {0}")]
    Encode(String),
    #[error("error creating certificate: {0}")]
    Create(String),
    #[error("{0}")]
    Message(String),
}

/// RSA size of the keys the `gen*` functions make themselves.
const CERT_RSA_BITS: usize = 2048;
/// RSA size of `genPrivateKey "rsa"`.
const PRIVATE_KEY_RSA_BITS: usize = 4096;

/// `genPrivateKey TYPE`: a PEM key, or (as Sprig) the error as text.
fn gen_private_key(args: &[Value]) -> Result<Value> {
    exact("genPrivateKey", args, 1)?;
    let kind = text_arg("genPrivateKey", args, 0, "the key type")?;
    let kind = match kind {
        "" | "rsa" => KeyType::Rsa(PRIVATE_KEY_RSA_BITS),
        "ecdsa" => KeyType::Ecdsa,
        "ed25519" => KeyType::Ed25519,
        "dsa" => KeyType::Dsa,
        other => return Ok(string(format!("Unknown type {other}"))),
    };
    let pem = PrivateKey::generate(kind).and_then(|k| k.to_pem());
    Ok(string(pem.unwrap_or_else(|e| {
        format!("failed to generate private key: {e}")
    })))
}

/// `genCA CN DAYS` and `genCAWithKey CN DAYS KEY` (`key_at`: where KEY is).
fn gen_ca(name: &str, args: &[Value], key_at: Option<usize>) -> Result<Value> {
    exact(name, args, 2 + usize::from(key_at.is_some()))?;
    let key = given_key(name, args, key_at)?;
    let req = Request {
        cn: text_arg(name, args, 0, "the common name")?.to_string(),
        ips: Vec::new(),
        dns: Vec::new(),
        days: days_arg(name, args, 1)?,
    };
    let key = own_key(name, key)?;
    certificate(name, build::ca(&req, key))
}

/// `genSelfSignedCert CN IPS DNS DAYS` and its `WithKey KEY` form.
fn gen_self_signed(name: &str, args: &[Value], key_at: Option<usize>) -> Result<Value> {
    exact(name, args, 4 + usize::from(key_at.is_some()))?;
    let key = given_key(name, args, key_at)?;
    let req = request(name, args)?;
    let key = own_key(name, key)?;
    certificate(name, build::self_signed(&req, key))
}

/// `genSignedCert CN IPS DNS DAYS CA` and its `WithKey KEY` form.
fn gen_signed(name: &str, args: &[Value], key_at: Option<usize>) -> Result<Value> {
    exact(name, args, 5 + usize::from(key_at.is_some()))?;
    let key = given_key(name, args, key_at)?;
    let ca = Ca {
        cert: ca_field(name, &args[4], "Cert")?,
        key: ca_field(name, &args[4], "Key")?,
    };
    let req = request(name, args)?;
    let key = own_key(name, key)?;
    certificate(name, build::signed(&req, key, &ca))
}

/// `buildCustomCert B64CERT B64KEY`: the decoded PEM pair, once both parse.
fn build_custom_cert(args: &[Value]) -> Result<Value> {
    const NAME: &str = "buildCustomCert";
    exact(NAME, args, 2)?;
    let cert = base64_text(text_arg(NAME, args, 0, "the certificate")?)
        .ok_or_else(|| fail(NAME, "unable to decode base64 certificate"))?;
    let key = base64_text(text_arg(NAME, args, 1, "the private key")?)
        .ok_or_else(|| fail(NAME, "unable to decode base64 private key"))?;
    build::custom(&cert, &key).map_err(|e| fail(NAME, e))?;
    Ok(certificate_value(CertAndKey { cert, key }))
}

/// Go's `base64.StdEncoding`, which skips line breaks; the PEM inside must be text.
fn base64_text(text: &str) -> Option<String> {
    use base64::Engine as _;
    let compact: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The KEY argument parsed, when the function takes one (Sprig parses it first).
fn given_key(name: &str, args: &[Value], at: Option<usize>) -> Result<Option<PrivateKey>> {
    let Some(at) = at else { return Ok(None) };
    let pem = text_arg(name, args, at, "the private key")?;
    PrivateKey::from_pem(pem)
        .map(Some)
        .map_err(|e| fail(name, format!("parsing private key: {e}")))
}

/// The given key, or a new RSA 2048 key as Sprig makes for the functions without KEY.
fn own_key(name: &str, given: Option<PrivateKey>) -> Result<PrivateKey> {
    match given {
        Some(key) => Ok(key),
        None => PrivateKey::generate(KeyType::Rsa(CERT_RSA_BITS))
            .map_err(|e| fail(name, format!("error generating rsa key: {e}"))),
    }
}

fn certificate(name: &str, made: std::result::Result<CertAndKey, CertError>) -> Result<Value> {
    made.map(certificate_value).map_err(|e| fail(name, e))
}

fn certificate_value(c: CertAndKey) -> Value {
    let entries = [("Cert", c.cert), ("Key", c.key)];
    Value::Map(Arc::new(
        entries
            .into_iter()
            .map(|(k, v)| (Arc::from(k), string(v)))
            .collect(),
    ))
}

/// CN, IPS, DNS, DAYS: the first four arguments of the non-CA functions.
fn request(name: &str, args: &[Value]) -> Result<Request> {
    Ok(Request {
        cn: text_arg(name, args, 0, "the common name")?.to_string(),
        ips: list_arg(name, &args[1], "ips")?
            .iter()
            .map(|v| ip(name, v))
            .collect::<Result<_>>()?,
        dns: list_arg(name, &args[2], "alternate DNS names")?
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.to_string()),
                other => Err(fail(
                    name,
                    format!(
                        "error processing alternate dns name: {} is not a string",
                        go_sprint(other)
                    ),
                )),
            })
            .collect::<Result<_>>()?,
        days: days_arg(name, args, 3)?,
    })
}

/// Go's `net.ParseIP`: dotted IPv4 (no leading zeros) or IPv6 without a zone. Go writes an
/// IPv4-mapped IPv6 address as the 4-byte IPv4 one.
fn ip(name: &str, v: &Value) -> Result<std::net::IpAddr> {
    use std::net::IpAddr;
    let Value::String(s) = v else {
        return Err(fail(
            name,
            format!("error parsing ip: {} is not a string", go_sprint(v)),
        ));
    };
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => Ok(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)),
        Ok(v4) => Ok(v4),
        Err(_) => Err(fail(name, format!("error parsing ip: {s}"))),
    }
}

/// A list argument; `nil` is an empty list, as in Go.
fn list_arg<'a>(name: &str, v: &'a Value, what: &str) -> Result<&'a [Value]> {
    match v {
        Value::Nil => Ok(&[]),
        Value::List(items) => Ok(items),
        other => Err(fail(
            name,
            format!(
                "{what} must be a list, got {} {}",
                kind(other),
                go_sprint(other)
            ),
        )),
    }
}

fn text_arg<'a>(name: &str, args: &'a [Value], i: usize, what: &str) -> Result<&'a str> {
    match &args[i] {
        Value::String(s) => Ok(s),
        other => Err(fail(
            name,
            format!(
                "{what} must be a string, got {} {}",
                kind(other),
                go_sprint(other)
            ),
        )),
    }
}

/// DAYS: a whole number.
fn days_arg(name: &str, args: &[Value], i: usize) -> Result<i64> {
    match &args[i] {
        Value::Int(n) => Ok(*n),
        Value::Uint(n) => i64::try_from(*n).map_err(|_| fail(name, "days out of range")),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e15 => Ok(*f as i64),
        other => Err(fail(
            name,
            format!(
                "the number of days must be a whole number, got {} {}",
                kind(other),
                go_sprint(other)
            ),
        )),
    }
}

/// The CA's `Cert` or `Key`.
fn ca_field<'a>(name: &str, ca: &'a Value, field: &str) -> Result<&'a str> {
    match ca.field(field) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(fail(
            name,
            format!(
                "the CA must be a certificate from genCA or buildCustomCert (a map with Cert \
                 and Key), got a {}",
                kind(ca)
            ),
        )),
    }
}

/// A value's type as a template author would name it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Bool(_) => "bool",
        Value::Int(_) | Value::Uint(_) => "int",
        Value::Float(_) => "float",
        Value::String(_) => "string",
        Value::List(_) => "list",
        Value::Map(_) => "map",
        Value::Function(_) => "function",
    }
}
