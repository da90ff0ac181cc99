//! Sprig's password and encryption functions: `bcrypt`, `htpasswd`, `derivePassword`,
//! `encryptAES`, `decryptAES`. The primitives come from RustCrypto crates (`bcrypt`, `scrypt`,
//! `aes`); what is written here is Sprig's use of them (key handling, padding, output form).

use super::args::{Builtin, exact, fail, register_all, str_arg, string};
use crate::render::bytes;
use crate::render::value::to_i64;
use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use base64::Engine as _;
use gotmpl::{FuncMap, Result, Value};
use hmac::Mac;
use rand::Rng as _;

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("bcrypt", |a| {
            exact("bcrypt", a, 1)?;
            Ok(string(bcrypt_hash(&str_arg("bcrypt", a, 0)?)))
        }),
        ("htpasswd", htpasswd),
        ("derivePassword", derive_password),
        ("encryptAES", encrypt_aes),
        ("decryptAES", decrypt_aes),
    ];
    register_all(fm, funcs);
}

/// Go's bcrypt at its default cost, in the `$2a$` form Go writes.
fn bcrypt_hash(password: &str) -> String {
    match bcrypt::hash_with_result(bytes::to_bytes(password), 10) {
        Ok(h) => h.format_for_version(bcrypt::Version::TwoA),
        Err(e) => format!("failed to encrypt string with bcrypt: {e}"),
    }
}

/// `htpasswd user password`: an Apache `htpasswd` line with a bcrypt hash.
fn htpasswd(args: &[Value]) -> Result<Value> {
    exact("htpasswd", args, 2)?;
    let user = str_arg("htpasswd", args, 0)?;
    if user.contains(':') {
        return Ok(string(format!("invalid username: {user}")));
    }
    let password = str_arg("htpasswd", args, 1)?;
    Ok(string(format!("{user}:{}", bcrypt_hash(&password))))
}

/// Character classes of the Master Password algorithm's templates.
fn template_chars(c: u8) -> &'static [u8] {
    match c {
        b'V' => b"AEIOU",
        b'C' => b"BCDFGHJKLMNPQRSTVWXYZ",
        b'v' => b"aeiou",
        b'c' => b"bcdfghjklmnpqrstvwxyz",
        b'A' => b"AEIOUBCDFGHJKLMNPQRSTVWXYZ",
        b'a' => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz",
        b'n' => b"0123456789",
        b'o' => b"@&%?,=[]_:-+*$#!'^~;()/.",
        b'x' => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz0123456789!@#$%^&*()",
        _ => b"",
    }
}

fn password_templates(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "maximum" => &["anoxxxxxxxxxxxxxxxxx", "axxxxxxxxxxxxxxxxxno"],
        "long" => &[
            "CvcvnoCvcvCvcv",
            "CvcvCvcvnoCvcv",
            "CvcvCvcvCvcvno",
            "CvccnoCvcvCvcv",
            "CvccCvcvnoCvcv",
            "CvccCvcvCvcvno",
            "CvcvnoCvccCvcv",
            "CvcvCvccnoCvcv",
            "CvcvCvccCvcvno",
            "CvcvnoCvcvCvcc",
            "CvcvCvcvnoCvcc",
            "CvcvCvcvCvccno",
            "CvccnoCvccCvcv",
            "CvccCvccnoCvcv",
            "CvccCvccCvcvno",
            "CvcvnoCvccCvcc",
            "CvcvCvccnoCvcc",
            "CvcvCvccCvccno",
            "CvccnoCvcvCvcc",
            "CvccCvcvnoCvcc",
            "CvccCvcvCvccno",
        ],
        "medium" => &["CvcnoCvc", "CvcCvcno"],
        "short" => &["Cvcn"],
        "basic" => &["aaanaaan", "aannaaan", "aaannaaa"],
        "pin" => &["nnnn"],
        _ => return None,
    })
}

/// `derivePassword counter type password user site`: the Master Password algorithm
/// (scrypt N=32768 r=8 p=2 over the user, HMAC-SHA256 over the site), as Sprig implements it.
fn derive_password(args: &[Value]) -> Result<Value> {
    exact("derivePassword", args, 5)?;
    let counter = to_i64(&args[0]) as u32;
    let kind = str_arg("derivePassword", args, 1)?;
    let (password, user, site) = (
        str_arg("derivePassword", args, 2)?,
        str_arg("derivePassword", args, 3)?,
        str_arg("derivePassword", args, 4)?,
    );
    // Go hashes the strings' bytes.
    let (password, user, site) = (
        bytes::to_bytes(&password),
        bytes::to_bytes(&user),
        bytes::to_bytes(&site),
    );
    let Some(templates) = password_templates(&kind) else {
        return Ok(string(format!("cannot find password template {kind}")));
    };
    const SEED: &[u8] = b"com.lyndir.masterpassword";
    let mut salt = SEED.to_vec();
    salt.extend_from_slice(&(user.len() as u32).to_be_bytes());
    salt.extend_from_slice(&user);
    let mut key = [0u8; 64];
    let params = scrypt::Params::new(15, 8, 2).map_err(|e| fail("derivePassword", e))?;
    scrypt::scrypt(&password, &salt, &params, &mut key)
        .map_err(|e| fail("derivePassword", format!("failed to derive password: {e}")))?;
    let mut message = SEED.to_vec();
    message.extend_from_slice(&(site.len() as u32).to_be_bytes());
    message.extend_from_slice(&site);
    message.extend_from_slice(&counter.to_be_bytes());
    let mut mac = hmac::Hmac::<sha2_11::Sha256>::new_from_slice(&key)
        .map_err(|e| fail("derivePassword", e))?;
    mac.update(&message);
    let seed = mac.finalize().into_bytes();
    let template = templates[usize::from(seed[0]) % templates.len()].as_bytes();
    let out: String = template
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let chars = template_chars(*c);
            char::from(chars[usize::from(seed[i + 1]) % chars.len()])
        })
        .collect();
    Ok(string(out))
}

/// The AES-256 key Sprig makes from a password: its bytes, cut or zero-padded to 32.
fn aes_key(password: &str) -> Result<aes::Aes256> {
    let mut key = [0u8; 32];
    let password = bytes::to_bytes(password);
    let n = password.len().min(32);
    key[..n].copy_from_slice(&password[..n]);
    aes::Aes256::new_from_slice(&key).map_err(|e| fail("encryptAES", e))
}

/// `encryptAES password text`: AES-256-CBC with PKCS#7 padding and a random IV, base64 of
/// IV followed by the ciphertext. (CBC chaining is a few lines over the block cipher.)
fn encrypt_aes(args: &[Value]) -> Result<Value> {
    exact("encryptAES", args, 2)?;
    let password = str_arg("encryptAES", args, 0)?;
    let text = str_arg("encryptAES", args, 1)?;
    if text.is_empty() {
        return Ok(string(""));
    }
    let cipher = aes_key(&password)?;
    // The text's Go bytes, so `decryptAES` gives back exactly what went in.
    let mut data = bytes::to_bytes(&text).into_owned();
    let pad = 16 - data.len() % 16;
    data.extend(std::iter::repeat_n(pad as u8, pad));
    let mut prev = [0u8; 16];
    rand::rng().fill(&mut prev[..]);
    let mut out = prev.to_vec();
    for chunk in data.chunks(16) {
        let mut block = aes::Block::default();
        for (i, b) in block.iter_mut().enumerate() {
            *b = chunk[i] ^ prev[i];
        }
        cipher.encrypt_block(&mut block);
        prev.copy_from_slice(&block);
        out.extend_from_slice(&block);
    }
    Ok(string(
        base64::engine::general_purpose::STANDARD.encode(out),
    ))
}

/// `decryptAES password base64`: the inverse of `encryptAES`. Like Sprig it strips as many
/// bytes as the last byte says without checking the padding.
fn decrypt_aes(args: &[Value]) -> Result<Value> {
    exact("decryptAES", args, 2)?;
    let password = str_arg("decryptAES", args, 0)?;
    let text = str_arg("decryptAES", args, 1)?;
    if text.is_empty() {
        return Ok(string(""));
    }
    let data = base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .map_err(|e| fail("decryptAES", e))?;
    if data.len() < 32 || data.len() % 16 != 0 {
        return Err(fail(
            "decryptAES",
            "input is not a whole number of AES blocks after the IV",
        ));
    }
    let cipher = aes_key(&password)?;
    let mut out = Vec::with_capacity(data.len() - 16);
    for pair in data.windows(32).step_by(16) {
        let (prev, chunk) = pair.split_at(16);
        let mut block = aes::Block::default();
        block.copy_from_slice(chunk);
        cipher.decrypt_block(&mut block);
        out.extend(block.iter().zip(prev).map(|(b, p)| b ^ p));
    }
    let pad = usize::from(out.last().copied().unwrap_or(0));
    if pad > out.len() {
        return Err(fail("decryptAES", "invalid padding"));
    }
    out.truncate(out.len() - pad);
    // Sprig returns the plaintext bytes as a string, UTF-8 or not.
    Ok(string(bytes::from_bytes(&out)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::value::strval;

    fn call(f: Builtin, args: &[&str]) -> String {
        let args: Vec<Value> = args.iter().map(|s| string(*s)).collect();
        f(&args)
            .map(|v| strval(&v))
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn bcrypt_hashes_verify_and_use_go_s_prefix() {
        let line = call(htpasswd, &["user", "pass"]);
        let (user, hash) = line.split_once(':').unwrap_or_default();
        assert_eq!(user, "user");
        assert!(hash.starts_with("$2a$10$") && hash.len() == 60, "{hash}");
        assert!(bcrypt::verify("pass", hash).unwrap_or(false));
        assert_eq!(call(htpasswd, &["us:er", "p"]), "invalid username: us:er");
    }

    #[test]
    fn aes_round_trips_with_a_fresh_iv_each_time() {
        let a = call(encrypt_aes, &["secretkey", "exactly sixteen!"]);
        let b = call(encrypt_aes, &["secretkey", "exactly sixteen!"]);
        assert_ne!(a, b);
        // IV plus two blocks: a full block of padding follows 16 bytes of text.
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&a)
            .unwrap_or_default();
        assert_eq!(raw.len(), 48);
        assert_eq!(call(decrypt_aes, &["secretkey", &a]), "exactly sixteen!");
        assert!(call(decrypt_aes, &["k", "c2hvcnQ="]).starts_with("error:"));
    }
}
