//! Rendering tests for strings that are bytes (see `render::bytes`): binary `.Files`, `b64dec`
//! output, and the functions that work on bytes in Go. Expected values come from the bytes
//! themselves (encoded or hashed here with the same crates) or, where noted, from what
//! `helm template` printed for the same input (`tests/oracle/binary` checks the whole chart
//! against helm byte for byte).

use super::*;
use base64::Engine as _;
use serde_json::json;
use sha2::Digest as _;

/// Every byte value, then a UTF-8 sequence cut short.
fn all_bytes() -> Vec<u8> {
    let mut b: Vec<u8> = (0..=255).collect();
    b.extend_from_slice(b"\xE2\x82");
    b
}

const CUT: &[u8] = b"ab\xE2\x82";

use super::tests::release;

fn chart(templates: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![
        (
            "Chart.yaml".to_string(),
            b"apiVersion: v2\nname: bin\nversion: 0.1.0\n".to_vec(),
        ),
        ("bin/all.bin".to_string(), all_bytes()),
        ("bin/cut.bin".to_string(), CUT.to_vec()),
    ];
    files.extend(
        templates
            .iter()
            .map(|(p, t)| (p.to_string(), t.as_bytes().to_vec())),
    );
    files
}

fn render(templates: &[(&str, &str)]) -> Result<Rendered, RenderError> {
    render_release(
        &chart(templates),
        &json!({}),
        &release(),
        &Capabilities::default(),
    )
}

/// The `data` of the one ConfigMap a `data:` body renders to, and the document's text.
fn config_map(data: &str) -> (serde_json::Value, String) {
    let t = format!("kind: ConfigMap\ndata:\n{data}");
    match render(&[("templates/cm.yaml", &t)]) {
        Ok(r) => (
            r.manifests[0].object["data"].clone(),
            r.manifests[0].text.clone(),
        ),
        Err(e) => panic!("render failed: {e}"),
    }
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[test]
fn binary_files_reach_encoders_and_hashes_with_every_byte() {
    let (data, _) = config_map(
        "  {{- $all := .Files.Get \"bin/all.bin\" }}
  b64: {{ $all | b64enc }}
  b32: {{ $all | b32enc }}
  sha1: {{ $all | sha1sum }}
  sha256: {{ sha256sum (.Files.Get \"bin/all.bin\") }}
  sha512: {{ $all | sha512sum }}
  adler32: {{ $all | adler32sum | quote }}
  len: {{ len $all | quote }}
  getbytes-len: {{ .Files.GetBytes \"bin/all.bin\" | len | quote }}
  cut-lines: {{ .Files.Lines \"bin/cut.bin\" | first | b64enc }}
  glob: {{ range $p, $c := .Files.Glob \"bin/*\" }}{{ $p }}={{ len $c }};{{ end }}",
    );
    let all = all_bytes();
    assert_eq!(data["b64"], json!(b64(&all)));
    assert_eq!(data["b32"], json!(data_encoding::BASE32.encode(&all)));
    assert_eq!(data["sha1"], json!(hex::encode(sha1::Sha1::digest(&all))));
    assert_eq!(
        data["sha256"],
        json!(hex::encode(sha2::Sha256::digest(&all)))
    );
    assert_eq!(
        data["sha512"],
        json!(hex::encode(sha2::Sha512::digest(&all)))
    );
    // What `helm template` prints for these 258 bytes.
    assert_eq!(data["adler32"], json!("2941092069"));
    assert_eq!(data["len"], json!("258"));
    assert_eq!(data["getbytes-len"], json!("258"));
    assert_eq!(data["cut-lines"], json!(b64(CUT)));
    assert_eq!(data["glob"], json!("bin/all.bin=258;bin/cut.bin=4;"));
}

#[test]
fn as_secrets_encodes_the_bytes_and_as_config_writes_u_fffd_per_bad_byte() {
    let t = "kind: Secret\ndata:\n{{ (.Files.Glob \"bin/*\").AsSecrets | indent 2 }}\n---\n\
             kind: ConfigMap\ndata:\n{{ (.Files.Glob \"bin/cut.bin\").AsConfig | indent 2 }}";
    let r = render(&[("templates/s.yaml", t)]).unwrap_or_else(|e| panic!("{e}"));
    let object = |kind: &str| {
        r.manifests
            .iter()
            .find(|m| m.kind() == kind)
            .map(|m| m.object["data"].clone())
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let secret = object("Secret");
    assert_eq!(secret["all.bin"], json!(b64(&all_bytes())));
    assert_eq!(secret["cut.bin"], json!(b64(CUT)));
    // Helm's AsConfig goes through Go's JSON encoder: one U+FFFD for each of the two bytes.
    assert_eq!(object("ConfigMap")["cut.bin"], json!("ab\u{FFFD}\u{FFFD}"));
}

#[test]
fn decoded_bytes_survive_and_len_counts_bytes() {
    let (data, _) = config_map(
        "  ff-len: {{ b64dec \"/w==\" | len | quote }}
  ff-b64: {{ b64dec \"/w==\" | b64enc }}
  b32-b64: {{ b32dec \"74======\" | b64enc }}
  all-round-trip: {{ .Files.Get \"bin/all.bin\" | b64enc | b64dec | b64enc }}
  e-acute-len: {{ len \"é\" | quote }}
  list-len: {{ list 1 2 3 | len | quote }}
  dict-len: {{ dict \"a\" 1 | len | quote }}",
    );
    assert_eq!(data["ff-len"], json!("1"));
    assert_eq!(data["ff-b64"], json!("/w=="));
    assert_eq!(data["b32-b64"], json!("/w=="));
    assert_eq!(data["all-round-trip"], json!(b64(&all_bytes())));
    assert_eq!(
        data["e-acute-len"],
        json!("2"),
        "Go's len counts UTF-8 bytes"
    );
    assert_eq!(data["list-len"], json!("3"));
    assert_eq!(data["dict-len"], json!("1"));
    let err = render(&[("templates/cm.yaml", "a: {{ len 3 }}")]).err();
    assert!(
        matches!(&err, Some(RenderError::Execute { message, .. }) if message.contains("len")),
        "{err:?}"
    );
}

#[test]
fn json_and_yaml_write_u_fffd_for_each_bad_byte_and_never_an_escape() {
    let (data, text) = config_map(
        "  json: {{ .Files.Get \"bin/cut.bin\" | toJson | quote }}
  json-key: {{ dict (b64dec \"/w==\") 1 | toJson | quote }}
  yaml: {{ dict \"a\" (b64dec \"/w==\") | toYaml | quote }}
  from-json: {{ fromJson (printf \"{\\\"a\\\": \\\"%s\\\"}\" (b64dec \"/w==\")) | toJson | quote }}
  from-yaml: {{ (fromYaml (b64dec \"/w==\")).Error | quote }}",
    );
    // Go's encoding/json writes the escape `\ufffd` for each invalid byte.
    assert_eq!(data["json"], json!(r#""ab\ufffd\ufffd""#));
    assert_eq!(data["json-key"], json!(r#"{"\ufffd":1}"#));
    assert_eq!(data["yaml"], json!("a: \u{FFFD}"));
    assert_eq!(data["from-json"], json!("{\"a\":\"\u{FFFD}\"}"));
    assert_eq!(
        data["from-yaml"],
        json!("error converting YAML to JSON: yaml: invalid leading UTF-8 octet")
    );
    assert!(
        !text
            .chars()
            .any(|c| ('\u{10FF80}'..='\u{10FFFF}').contains(&c)),
        "an escape leaked: {text:?}"
    );
}

#[test]
fn bytes_printed_into_a_manifest_fail_the_render_naming_the_template() {
    let raw = "kind: ConfigMap\ndata:\n  raw: {{ .Files.Get \"bin/cut.bin\" }}\n";
    let good = "kind: ConfigMap\nmetadata:\n  name: fine\n";
    let files = [("templates/a-good.yaml", good), ("templates/raw.yaml", raw)];
    let check = |err: RenderError| {
        let text = err.to_string();
        assert!(matches!(err, RenderError::Yaml { .. }), "{text}");
        assert!(text.contains("bin/templates/raw.yaml"), "{text}");
        assert!(text.contains("invalid trailing UTF-8 octet"), "{text}");
        assert!(text.contains("b64enc"), "the hint is missing: {text}");
    };
    // Installing (objects are built) and `berth render` (documents only) both refuse it.
    check(render(&files).err().unwrap_or_else(|| panic!("rendered")));
    let listing = render_listing(
        &chart(&files),
        &json!({}),
        &release(),
        &Capabilities::default(),
    );
    check(listing.err().unwrap_or_else(|| panic!("listed")));
    // A comment is YAML too.
    let comment = "# {{ b64dec \"/w==\" }}\nkind: ConfigMap\n";
    let err = render(&[("templates/c.yaml", comment)]).err();
    assert!(
        err.is_some_and(|e| e.to_string().contains("invalid leading UTF-8 octet")),
        "a comment with a stray byte rendered"
    );
}

#[test]
fn bytes_that_spell_text_render_and_notes_replace_the_rest() {
    let t =
        "kind: ConfigMap\ndata:\n  e: {{ printf \"%s%s\" (b64dec \"ww==\") (b64dec \"qQ==\") }}\n";
    let notes = "bytes: {{ b64dec \"/2E=\" }}";
    let r = render(&[("templates/cm.yaml", t), ("templates/NOTES.txt", notes)])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.manifests[0].object["data"]["e"], json!("é"));
    assert_eq!(r.manifests[0].text, "kind: ConfigMap\ndata:\n  e: é\n");
    assert_eq!(r.notes, "bytes: \u{FFFD}a");
}

#[test]
fn byte_cutting_and_quoting_follow_go() {
    // Each line is what `helm template` prints for it.
    let (_, text) = config_map(
        "  quote: {{ .Files.Get \"bin/cut.bin\" | quote }}
  abbrev-cut: {{ abbrev 4 \"ééééé\" | quote }}
  abbrev-whole: {{ abbrev 5 \"ééééé\" | quote }}
  trunc-cut: {{ trunc 1 \"é!\" | quote }}
  trunc-tail: {{ trunc -1 \"!é\" | quote }}
  substr-cut: {{ substr 1 3 \"éa\" | quote }}
  upper: {{ b64dec \"/w==\" | upper | b64enc }}
  url-path: {{ (urlParse \"http://x/%ff\").path | b64enc }}
  url-join: {{ urlParse \"http://x/%ff\" | urlJoin | quote }}
  aes: {{ encryptAES \"pw\" (.Files.Get \"bin/all.bin\") | decryptAES \"pw\" | sha256sum }}",
    );
    let want = format!(
        "kind: ConfigMap\ndata:\n  quote: \"ab\\xe2\\x82\"\n  abbrev-cut: \"\\xc3...\"\n  \
         abbrev-whole: \"é...\"\n  trunc-cut: \"\\xc3\"\n  trunc-tail: \"\\xa9\"\n  \
         substr-cut: \"\\xa9a\"\n  upper: 77+9\n  url-path: L/8=\n  \
         url-join: \"http://x/%FF\"\n  aes: {}",
        hex::encode(sha2::Sha256::digest(all_bytes()))
    );
    assert_eq!(text, want);
}
