//! Go template strings are byte strings; `gotmpl`'s are Rust `String`s. This module carries the
//! bytes that are not UTF-8 (a binary file from `.Files.Get`, the output of `b64dec`) through
//! a render without loss, so functions that work on bytes in Go (`b64enc`, `sha256sum`, `len`,
//! `AsSecrets`, ...) see the same bytes Helm's do.
//!
//! The representation is Python's "surrogateescape" idea moved to code points a Rust string can
//! hold: valid UTF-8 is copied, and each byte of an invalid sequence becomes one code point
//! U+10FF00 + byte. Only bytes 0x80..=0xFF can be part of an invalid sequence, so the escapes
//! are U+10FF80..=U+10FFFF, the top of Supplementary Private Use Area-B (plane 16). Hand-written
//! because no crate offers a reversible byte escape inside `String` (`bstr` and
//! `String::from_utf8_lossy` either need their own string type or lose the bytes).
//!
//! [`from_bytes`] also escapes the UTF-8 of a reserved code point found in the input (byte by
//! byte), so `to_bytes(&from_bytes(b)) == b` holds for every byte string.
//!
//! The one ambiguity: a reserved code point that reaches a template by any other road (a
//! template's own text, values, `Chart.yaml`) is read as the escape of a byte. A chart that
//! legitimately contains U+10FF80..=U+10FFFF outside `.Files` would therefore print invalid
//! UTF-8 (and fail to render) where Helm prints the character. Private-use characters of
//! plane 16 have no assigned meaning and do not occur in Kubernetes manifests in practice.

use std::borrow::Cow;

/// The code point that stands for byte 0: byte `b` (0x80..=0xFF) is `ESCAPE_BASE + b`.
const ESCAPE_BASE: u32 = 0x10_FF00;

/// Every escape is encoded in UTF-8 as `F4 8F BE xx` or `F4 8F BF xx`; a string without an
/// 0xF4 byte (no plane-16 character at all) holds no escape.
const ESCAPE_LEAD: u8 = 0xF4;

/// The code point standing for byte `b` (which is 0x80 or above).
fn escape(b: u8) -> char {
    debug_assert!(b >= 0x80);
    char::from_u32(ESCAPE_BASE + u32::from(b)).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte an escape code point stands for, or `None` for any other character.
fn unescape(c: char) -> Option<u8> {
    let n = u32::from(c);
    if (ESCAPE_BASE + 0x80..=ESCAPE_BASE + 0xFF).contains(&n) {
        u8::try_from(n - ESCAPE_BASE).ok()
    } else {
        None
    }
}

/// Whether `s` may hold an escape (cheap: one byte scan).
fn may_hold_escape(s: &str) -> bool {
    s.as_bytes().contains(&ESCAPE_LEAD)
}

/// A Go byte string as a template string: valid UTF-8 copied, every other byte escaped.
pub fn from_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        push_valid(&mut out, chunk.valid());
        out.extend(chunk.invalid().iter().map(|&b| escape(b)));
    }
    out
}

/// Appends valid text, escaping the bytes of any reserved code point it holds so that
/// [`to_bytes`] gives them back unchanged.
fn push_valid(out: &mut String, valid: &str) {
    if !may_hold_escape(valid) {
        out.push_str(valid);
        return;
    }
    for c in valid.chars() {
        if unescape(c).is_some() {
            let mut buf = [0; 4];
            out.extend(c.encode_utf8(&mut buf).bytes().map(escape));
        } else {
            out.push(c);
        }
    }
}

/// The Go bytes a template string stands for. Borrowed when `s` holds no escape.
pub fn to_bytes(s: &str) -> Cow<'_, [u8]> {
    if !may_hold_escape(s) {
        return Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    // Copy the runs between plane-16 characters whole; a binary file's string is mostly
    // escapes, so this loop is what `b64enc` of one costs.
    let bytes = s.as_bytes();
    let mut from = 0;
    while let Some(at) = next_plane16(bytes, from) {
        out.extend_from_slice(&bytes[from..at]);
        let char = &bytes[at..at + 4];
        match escaped_byte(char) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(char),
        }
        from = at + 4;
    }
    out.extend_from_slice(&bytes[from..]);
    Cow::Owned(out)
}

/// Where the next character of plane 16 (lead byte 0xF4, four bytes long) starts.
fn next_plane16(bytes: &[u8], from: usize) -> Option<usize> {
    bytes[from..]
        .iter()
        .position(|&b| b == ESCAPE_LEAD)
        .map(|i| from + i)
}

/// The byte an escape stands for, from the escape's UTF-8 (`F4 8F BE xx` is byte
/// 0x80 + (xx & 0x3F), `F4 8F BF xx` is 0xC0 + (xx & 0x3F)); `None` for another character.
fn escaped_byte(utf8: &[u8]) -> Option<u8> {
    match utf8 {
        [ESCAPE_LEAD, 0x8F, 0xBE, last] => Some(0x80 | (last & 0x3F)),
        [ESCAPE_LEAD, 0x8F, 0xBF, last] => Some(0xC0 | (last & 0x3F)),
        _ => None,
    }
}

/// Go's `len` of the string: its byte count.
pub fn len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut n = bytes.len();
    let mut from = 0;
    while let Some(at) = next_plane16(bytes, from) {
        if escaped_byte(&bytes[at..at + 4]).is_some() {
            n -= 3;
        }
        from = at + 4;
    }
    n
}

/// The text as UTF-8 when its bytes are valid UTF-8 (escapes that together spell a character,
/// as after `printf "%s%s"` of two halves, become that character), or the error describing
/// the first invalid byte.
pub fn to_utf8(s: &str) -> Result<Cow<'_, str>, std::string::FromUtf8Error> {
    match to_bytes(s) {
        Cow::Borrowed(_) => Ok(Cow::Borrowed(s)),
        Cow::Owned(bytes) => String::from_utf8(bytes).map(Cow::Owned),
    }
}

/// A stretch of a byte string as Go's UTF-8 decoding sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Valid UTF-8.
    Text(&'a str),
    /// One byte that is not part of a valid UTF-8 sequence (Go decodes it as `utf8.RuneError`
    /// of width 1).
    Byte(u8),
}

/// Calls `f` with each piece of the bytes `s` stands for, in order.
pub fn for_each_piece(s: &str, mut f: impl FnMut(Piece<'_>)) {
    let bytes = match to_bytes(s) {
        Cow::Borrowed(_) => return f(Piece::Text(s)),
        Cow::Owned(bytes) => bytes,
    };
    for chunk in bytes.utf8_chunks() {
        if !chunk.valid().is_empty() {
            f(Piece::Text(chunk.valid()));
        }
        for &b in chunk.invalid() {
            f(Piece::Byte(b));
        }
    }
}

/// The text with each invalid byte replaced by U+FFFD, as Go's `encoding/json` (and so
/// `toYaml`, `AsConfig`, a release record) writes it. Unlike `String::from_utf8_lossy`,
/// which replaces a truncated sequence once, Go replaces every byte.
pub fn lossy(s: &str) -> Cow<'_, str> {
    if !may_hold_escape(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    for_each_piece(s, |p| match p {
        Piece::Text(t) => out.push_str(t),
        Piece::Byte(_) => out.push(char::REPLACEMENT_CHARACTER),
    });
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (splitmix64), so the property loop is reproducible.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// Random bytes biased towards UTF-8 lead and continuation bytes and the escapes'
        /// own encoding, where the interesting cases are.
        fn bytes(&mut self, len: usize) -> Vec<u8> {
            const PARTS: &[&[u8]] = &[
                b"a",
                b"\n",
                "é".as_bytes(),
                "€".as_bytes(),
                "𝄞".as_bytes(),
                &[0xF4, 0x8F, 0xBE, 0x80],
                &[0xF4, 0x8F, 0xBF, 0xBF],
                &[0xE2, 0x82],
                &[0xF0, 0x9D],
                &[0xC3],
                &[0x80],
                &[0xFF],
                &[0xED, 0xA0, 0x80],
            ];
            let mut out = Vec::new();
            while out.len() < len {
                let r = self.next();
                if r.is_multiple_of(3) {
                    out.push((r >> 8) as u8);
                } else {
                    out.extend_from_slice(PARTS[(r >> 8) as usize % PARTS.len()]);
                }
            }
            out
        }
    }

    #[test]
    fn valid_utf8_is_copied_and_borrowed_back() {
        let text = "plain ascii, é, € and 𝄞";
        let s = from_bytes(text.as_bytes());
        assert_eq!(s, text);
        assert!(matches!(to_bytes(&s), Cow::Borrowed(b) if b == text.as_bytes()));
        assert!(matches!(to_utf8(&s), Ok(Cow::Borrowed(t)) if t == text));
        assert!(matches!(lossy(&s), Cow::Borrowed(_)));
        assert_eq!(len("é"), 2, "Go's len counts bytes");
        // Plane 16 below U+10FF80 is not reserved: copied, and read back as itself.
        let near = "\u{10FF7F}\u{10FF00}";
        assert_eq!(from_bytes(near.as_bytes()), near);
        assert_eq!(to_bytes(near).as_ref(), near.as_bytes());
        assert_eq!(len(near), 8);
    }

    #[test]
    fn reading_escapes_from_utf8_agrees_with_their_code_points() {
        for n in 0x10_0000..=0x10_FFFF {
            let Some(c) = char::from_u32(n) else { continue };
            let mut buf = [0; 4];
            c.encode_utf8(&mut buf);
            assert_eq!(escaped_byte(&buf), unescape(c), "U+{n:X}");
        }
        assert_eq!(unescape('\u{10FF7F}'), None);
        assert_eq!(unescape('\u{10FF80}'), Some(0x80));
        assert_eq!(unescape('\u{10FFFF}'), Some(0xFF));
    }

    #[test]
    fn every_byte_value_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let s = from_bytes(&all);
        assert_eq!(to_bytes(&s).as_ref(), all.as_slice());
        assert_eq!(len(&s), 256);
        // ASCII stays itself; each high byte (alone, so invalid) is one escape.
        assert_eq!(s.chars().count(), 256);
        assert_eq!(s.chars().nth(0x41), Some('A'));
        assert_eq!(s.chars().nth(0xFF), Some('\u{10FFFF}'));
    }

    #[test]
    fn truncated_and_invalid_sequences_escape_each_byte() {
        for bytes in [
            &b"ab\xE2\x82"[..],
            b"\xE2\x82ab",
            b"\xF0\x9D\x84",
            b"\xC3",
            b"\xED\xA0\x80",
            b"\xC0\xAF",
            b"\xF5\x80\x80\x80",
        ] {
            let s = from_bytes(bytes);
            assert_eq!(to_bytes(&s).as_ref(), bytes, "{bytes:x?}");
            assert_eq!(len(&s), bytes.len(), "{bytes:x?}");
            assert!(to_utf8(&s).is_err(), "{bytes:x?}");
        }
        let s = from_bytes(b"ab\xE2\x82");
        assert_eq!(s, "ab\u{10FFE2}\u{10FF82}");
        assert_eq!(
            lossy(&s),
            "ab\u{FFFD}\u{FFFD}",
            "Go replaces every invalid byte"
        );
    }

    #[test]
    fn reserved_code_points_in_valid_input_still_round_trip() {
        let text = "x\u{10FF80}y\u{10FFFF}";
        let s = from_bytes(text.as_bytes());
        assert_ne!(s, text, "the reserved code points must be escaped");
        assert_eq!(to_bytes(&s).as_ref(), text.as_bytes());
        assert_eq!(len(&s), text.len());
        assert!(matches!(to_utf8(&s), Ok(t) if t == text));
    }

    #[test]
    fn escapes_that_spell_a_character_become_it() {
        // `printf "%s%s" (b64dec "ww==") (b64dec "qQ==")` is "é" in Go.
        let joined = from_bytes(b"\xC3") + &from_bytes(b"\xA9");
        assert_eq!(to_utf8(&joined).ok().as_deref(), Some("é"));
        assert_eq!(lossy(&joined), "é");
        let mut pieces = Vec::new();
        for_each_piece(&joined, |p| pieces.push(format!("{p:?}")));
        assert_eq!(pieces, vec![r#"Text("é")"#]);
    }

    #[test]
    fn pieces_follow_go_decoding() {
        let s = from_bytes(b"a\xFF\xE2\x82b\xC3\xA9");
        let mut pieces = Vec::new();
        for_each_piece(&s, |p| {
            pieces.push(match p {
                Piece::Text(t) => t.to_string(),
                Piece::Byte(b) => format!("<{b:02x}>"),
            })
        });
        assert_eq!(pieces, vec!["a", "<ff>", "<e2>", "<82>", "bé"]);
    }

    #[test]
    fn random_byte_strings_round_trip() {
        let mut rng = Rng(0x5EED);
        for round in 0..2000 {
            let n = (rng.next() % 64) as usize;
            let bytes = rng.bytes(n);
            let s = from_bytes(&bytes);
            assert_eq!(to_bytes(&s).as_ref(), bytes.as_slice(), "round {round}");
            assert_eq!(len(&s), bytes.len(), "round {round}");
            assert_eq!(
                to_utf8(&s).is_ok(),
                std::str::from_utf8(&bytes).is_ok(),
                "round {round}"
            );
            // Splitting the string anywhere and joining the halves keeps the bytes.
            let cut = s
                .char_indices()
                .map(|(i, _)| i)
                .nth((rng.next() % 8) as usize)
                .unwrap_or(0);
            let (a, b) = s.split_at(cut);
            let joined = [to_bytes(a).as_ref(), to_bytes(b).as_ref()].concat();
            assert_eq!(joined, bytes, "round {round}");
        }
    }
}
