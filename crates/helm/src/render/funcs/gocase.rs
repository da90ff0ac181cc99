//! Go's `unicode` classes and one-to-one case mappings, and the case conversions Sprig takes
//! from Go's `strings`, `goutils` and `xstrings`, rule for rule.
//!
//! Rust's `char::to_uppercase` applies full mappings (`ß` → `SS`, `ᾳ` → `ΑΙ`) and
//! `char::is_uppercase` the derived property (circled `Ⓐ` is upper); Go maps one rune to one
//! rune and classifies by general category (`Lu`, `Ll`, `Lt`, `L*`, `N*`, `P*`). The tables
//! come from ICU4X (`icu_casemap`, `icu_properties`); the conversions are written here because
//! no crate implements these three libraries' word rules, which charts' output depends on.

use icu_casemap::CaseMapper;
use icu_properties::CodePointMapData;
use icu_properties::props::{GeneralCategory as Gc, GeneralCategoryGroup as Group};

fn category(c: char) -> Gc {
    CodePointMapData::<Gc>::new().get(c)
}

/// `unicode.IsUpper`: category `Lu`.
pub fn is_upper(c: char) -> bool {
    category(c) == Gc::UppercaseLetter
}

/// `unicode.IsLower`: category `Ll`.
pub fn is_lower(c: char) -> bool {
    category(c) == Gc::LowercaseLetter
}

/// `unicode.IsTitle`: category `Lt`.
pub fn is_title(c: char) -> bool {
    category(c) == Gc::TitlecaseLetter
}

/// `unicode.IsLetter`: any `L*` category.
pub fn is_letter(c: char) -> bool {
    Group::Letter.contains(category(c))
}

/// `unicode.IsDigit`: category `Nd`.
pub fn is_digit(c: char) -> bool {
    category(c) == Gc::DecimalNumber
}

/// `unicode.IsNumber`: any `N*` category.
pub fn is_number(c: char) -> bool {
    Group::Number.contains(category(c))
}

/// `unicode.IsPunct`: any `P*` category (symbols such as `$`, `+`, `<` are not punctuation).
pub fn is_punct(c: char) -> bool {
    Group::Punctuation.contains(category(c))
}

/// `unicode.IsSpace`: Latin-1's `\t \n \v \f \r`, space, U+0085 and U+00A0, and the
/// `White_Space` property beyond (the same set as `char::is_whitespace`).
pub fn is_space(c: char) -> bool {
    c.is_whitespace()
}

/// `unicode.ToUpper`: the simple uppercase mapping (`ß` stays `ß`).
pub fn to_upper(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    CaseMapper::new().simple_uppercase(c)
}

/// `unicode.ToLower`: the simple lowercase mapping (`İ` becomes `i`).
pub fn to_lower(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    CaseMapper::new().simple_lowercase(c)
}

/// `unicode.ToTitle`: the simple titlecase mapping (`ǆ` becomes `ǅ`).
pub fn to_title(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    CaseMapper::new().simple_titlecase(c)
}

/// `strings.ToUpper`.
pub fn upper(s: &str) -> String {
    s.chars().map(to_upper).collect()
}

/// `strings.ToLower` (no final-sigma rule: `ΣΑΣ` is `σασ`).
pub fn lower(s: &str) -> String {
    s.chars().map(to_lower).collect()
}

/// Go's deprecated `strings.Title`: the first rune of each word in title case, where ASCII
/// letters, digits and `_` continue a word, other ASCII separates, and beyond ASCII letters
/// and decimal digits continue, spaces separate and anything else continues.
pub fn title(s: &str) -> String {
    let separates = |c: char| {
        if c.is_ascii() {
            !(c.is_ascii_alphanumeric() || c == '_')
        } else if is_letter(c) || is_digit(c) {
            false
        } else {
            is_space(c)
        }
    };
    let mut out = String::with_capacity(s.len());
    let mut prev_separates = true;
    for c in s.chars() {
        out.push(if prev_separates { to_title(c) } else { c });
        prev_separates = separates(c);
    }
    out
}

/// Sprig's `untitle` (goutils' `Uncapitalize`): the first rune after each run of spaces
/// lower-cased.
pub fn untitle(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut after_space = true;
    for c in s.chars() {
        if is_space(c) {
            after_space = true;
            out.push(c);
        } else if after_space {
            out.push(to_lower(c));
            after_space = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Sprig's `swapcase` (goutils' `SwapCase`): upper and title case become lower; a lower-case
/// rune at the start or after a space becomes title case, any other upper case.
pub fn swapcase(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut after_space = true;
    for c in s.chars() {
        if is_upper(c) || is_title(c) {
            out.push(to_lower(c));
            after_space = false;
        } else if is_lower(c) {
            out.push(if after_space {
                to_title(c)
            } else {
                to_upper(c)
            });
            after_space = false;
        } else {
            out.push(c);
            after_space = is_space(c);
        }
    }
    out
}

/// Sprig's `initials` (goutils' `Initials`), which walks the string's bytes, not its runes:
/// the first byte of the string and each byte after a space byte, each written as the
/// Latin-1 character of that value (`ü`, bytes C3 BC, gives `Ã`; byte 0x85 counts as a space).
pub fn initials(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut after_space = true;
    for &b in bytes {
        let c = char::from(b);
        if is_space(c) {
            after_space = true;
        } else if after_space {
            out.push(c);
            after_space = false;
        }
    }
    out
}

/// xstrings' connector runes: `-`, `_` and spaces.
fn is_connector(c: char) -> bool {
    c == '-' || c == '_' || is_space(c)
}

/// Sprig's `camelcase` (xstrings' `ToPascalCase`): leading connectors kept; each other run
/// of connectors loses its last rune and upper-cases the rune after it; a word that starts
/// upper-case has the upper-case runes right after its first lower-cased (`HTTPServer` →
/// `Httpserver`, `ABC1def` → `Abc1def`); a trailing connector stays, and a string of one
/// connector doubles it (`-` → `--`), as xstrings does.
pub fn pascalcase(s: &str) -> String {
    let mut chars = s.chars();
    let mut out = String::with_capacity(s.len());
    // The first rune that is not a connector, upper-cased.
    let mut prev = None;
    let mut last_connector = None;
    let mut shout = false;
    for c in chars.by_ref() {
        if is_connector(c) {
            out.push(c);
            last_connector = Some(c);
        } else {
            shout = is_upper(c);
            prev = Some(to_upper(c));
            break;
        }
    }
    let Some(mut prev) = prev else {
        // Only connectors: xstrings writes the last one twice.
        out.extend(last_connector);
        return out;
    };
    for mut c in chars {
        if is_connector(c) && is_connector(prev) {
            out.push(prev);
        } else if is_connector(prev) {
            shout = is_upper(c);
            c = to_upper(c);
        } else {
            if shout {
                if is_upper(c) {
                    c = to_lower(c);
                } else {
                    shout = false;
                }
            }
            out.push(prev);
        }
        prev = c;
    }
    out.push(prev);
    out
}

/// The kinds of word xstrings splits a string into.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Word {
    /// Nothing left (the end of the string).
    End,
    Number,
    /// An upper-case rune, with the lower-case letters after it or the rest of an upper-case
    /// run (whose last rune starts the next word when a letter follows it).
    Upper,
    /// Letters that are not upper case (and not CJK ideographs).
    Alphabet,
    Connector,
    Punct,
    Other,
}

/// xstrings' "alphabet": a letter outside the CJK ideograph blocks.
fn is_alphabet(c: char) -> bool {
    is_letter(c)
        && !matches!(c, '\u{4E00}'..='\u{9FCC}' | '\u{3400}'..='\u{4D85}' | '\u{20000}'..='\u{2B81D}')
}

/// The class of the text's first rune (U+FFFD is skipped as Go's invalid runes are, the rune
/// after it standing for both; a text of nothing else takes the class of `prev`), and the
/// byte length of that rune with the U+FFFDs before it.
fn first_rune(text: &str, prev: char) -> (char, usize) {
    let mut len = 0;
    for c in text.chars() {
        len += c.len_utf8();
        if c != char::REPLACEMENT_CHARACTER {
            return (c, len);
        }
    }
    (prev, len)
}

/// The next word of `text`: its kind, and its length in bytes.
fn next_word(text: &str) -> (Word, usize) {
    if text.is_empty() {
        return (Word::End, 0);
    }
    let (c, mut len) = first_rune(text, char::REPLACEMENT_CHARACTER);
    if c == char::REPLACEMENT_CHARACTER {
        // Nothing but U+FFFD: xstrings' invalid word.
        return (Word::End, text.len());
    }
    // Extends the word while `keep` holds for the next rune; the last rune seen.
    let extend = |len: &mut usize, mut last: char, keep: &dyn Fn(char) -> bool| -> char {
        while *len < text.len() {
            let (c, n) = first_rune(&text[*len..], last);
            last = c;
            if !keep(c) {
                break;
            }
            *len += n;
        }
        last
    };
    let kind = if is_connector(c) {
        extend(&mut len, c, &is_connector);
        Word::Connector
    } else if is_punct(c) {
        extend(&mut len, c, &is_punct);
        Word::Punct
    } else if is_upper(c) {
        if len < text.len() {
            let (next, n) = first_rune(&text[len..], c);
            if is_upper(next) {
                len += n;
                let mut last_len = n;
                let mut stop = next;
                while len < text.len() {
                    let (c, n) = first_rune(&text[len..], stop);
                    stop = c;
                    if !is_upper(c) {
                        break;
                    }
                    last_len = n;
                    len += n;
                }
                // `HTTPServer`: the `S` starts the next word.
                if len < text.len() && is_alphabet(stop) {
                    len -= last_len;
                }
            } else if is_alphabet(next) {
                len += n;
                extend(&mut len, next, &|c| is_alphabet(c) && !is_upper(c));
            }
        }
        Word::Upper
    } else if is_alphabet(c) {
        extend(&mut len, c, &|c| is_alphabet(c) && !is_upper(c));
        Word::Alphabet
    } else if is_number(c) {
        extend(&mut len, c, &is_number);
        Word::Number
    } else {
        extend(&mut len, c, &|c| {
            !(is_connector(c) || is_alphabet(c) || is_number(c) || is_punct(c))
        });
        Word::Other
    };
    (kind, len)
}

/// Writes a word: upper-case words lower-cased and connectors replaced by `sep` rune for
/// rune, any other word as it is.
fn write_word(out: &mut String, kind: Word, word: &str, sep: char) {
    if !matches!(kind, Word::Upper | Word::Connector) {
        out.push_str(word);
        return;
    }
    for c in word.chars() {
        if is_connector(c) {
            out.push(sep);
        } else {
            out.push(to_lower(c));
        }
    }
}

/// Sprig's `snakecase` and `kebabcase` (xstrings' `ToSnakeCase`/`ToKebabCase`): the text
/// split into words (runs of connectors, of punctuation, of digits, upper-case-led words,
/// lower-case letters and anything else), upper case lowered, each connector replaced by
/// `sep`, and `sep` put between two words that touch, except next to punctuation or a
/// connector, and except that digits join the word before them unless letters follow the
/// digits (`Bld4Floor` → `bld4_floor`, `HTTP2xx` → `http_2xx`).
pub fn separate_words(s: &str, sep: char) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    let mut rest = s;
    fn take<'a>(rest: &mut &'a str) -> (Word, &'a str) {
        let (kind, n) = next_word(rest);
        let (word, tail) = rest.split_at(n);
        *rest = tail;
        (kind, word)
    }
    let (mut kind, mut word) = take(&mut rest);
    let joins = |k: Word| !matches!(k, Word::End | Word::Punct | Word::Connector);
    while !rest.is_empty() {
        if kind != Word::Connector {
            write_word(&mut out, kind, word, sep);
        }
        let (prev, prev_word) = (kind, word);
        (kind, word) = take(&mut rest);
        match prev {
            Word::Number => {
                while matches!(kind, Word::Alphabet | Word::Number) {
                    write_word(&mut out, kind, word, sep);
                    (kind, word) = take(&mut rest);
                }
                if joins(kind) {
                    out.push(sep);
                }
            }
            Word::Connector => write_word(&mut out, prev, prev_word, sep),
            Word::Punct => {}
            _ if kind != Word::Number => {
                if joins(kind) {
                    out.push(sep);
                }
            }
            _ if rest.is_empty() => {}
            _ => {
                let digits = word;
                (kind, word) = take(&mut rest);
                if kind != Word::Alphabet {
                    // The digits belong to the word before them.
                    write_word(&mut out, Word::Number, digits, sep);
                    if !matches!(kind, Word::Connector | Word::Punct) {
                        out.push(sep);
                    }
                } else {
                    out.push(sep);
                    write_word(&mut out, Word::Number, digits, sep);
                    while matches!(kind, Word::Alphabet | Word::Number) {
                        write_word(&mut out, kind, word, sep);
                        (kind, word) = take(&mut rest);
                    }
                    if joins(kind) {
                        out.push(sep);
                    }
                }
            }
        }
    }
    write_word(&mut out, kind, word, sep);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every expected value here is what `helm template` (v4.2.3) printed.
    #[test]
    fn snake_and_kebab_case_follow_xstrings_word_classes() {
        for (input, snake, kebab) in [
            ("  pad  ", "__pad__", "--pad--"),
            ("a,b,c", "a,b,c", "a,b,c"),
            ("<nil>", "<_nil_>", "<-nil->"),
            ("x-y_z w", "x_y_z_w", "x-y-z-w"),
            ("__a--b  c__", "__a__b__c__", "--a--b--c--"),
            ("ABCdef", "ab_cdef", "ab-cdef"),
            ("ABC1def", "abc_1def", "abc-1def"),
            ("a1B2c3", "a1_b_2c3", "a1-b-2c3"),
            ("HTTP20xOK", "http_20x_ok", "http-20x-ok"),
            ("ünïCode", "ünï_code", "ünï-code"),
            ("ßtraße", "ßtraße", "ßtraße"),
            ("ǅemal", "ǅemal", "ǅemal"),
            ("İstanbul", "istanbul", "istanbul"),
            ("ΣΑΣ", "σασ", "σασ"),
            ("A", "a", "a"),
            ("-", "_", "-"),
            ("", "", ""),
            ("x.y/z", "x.y/z", "x.y/z"),
            ("Ⓐbc", "Ⓐ_bc", "Ⓐ-bc"),
            ("日本Go", "日本_go", "日本-go"),
            ("a$b+c", "a_$_b_+_c", "a-$-b-+-c"),
            ("x:Y;z", "x:y;z", "x:y;z"),
            ("it's", "it's", "it's"),
            ("a\tb", "a_b", "a-b"),
        ] {
            assert_eq!(separate_words(input, '_'), snake, "snakecase {input:?}");
            assert_eq!(separate_words(input, '-'), kebab, "kebabcase {input:?}");
        }
    }

    #[test]
    fn camelcase_is_xstrings_pascal_case() {
        for (input, want) in [
            ("  pad  ", "  Pad  "),
            ("a,b,c", "A,b,c"),
            ("<nil>", "<nil>"),
            ("x-y_z w", "XYZW"),
            ("__a--b  c__", "__A-B C__"),
            ("ABCdef", "Abcdef"),
            ("HTTP20xOK", "Http20xOK"),
            ("a1B2c3", "A1B2c3"),
            ("ǅemal", "Ǆemal"),
            ("İstanbul", "İstanbul"),
            ("ΣΑΣ", "Σασ"),
            ("-", "--"),
            ("", ""),
            ("a\tb", "AB"),
            ("ᾳx", "ᾼx"),
        ] {
            assert_eq!(pascalcase(input), want, "camelcase {input:?}");
        }
    }

    #[test]
    fn go_case_mappings_are_one_to_one() {
        assert_eq!(upper("ßtraße ᾳx ŉx"), "ßTRAßE ᾼX ŉX");
        assert_eq!(lower("İstanbul ΣΑΣ Ⓐbc"), "istanbul σασ ⓐbc");
        assert_eq!(swapcase("ßtraße ǅemal Ⓐbc ᾳx"), "ßTRAßE ǆEMAL ⒶBC ᾼX");
        assert_eq!(untitle("İstanbul ΣΑΣ ǅemal"), "istanbul σΑΣ ǆemal");
        assert_eq!(title("it's x-y_z a\tb ᾳx"), "It'S X-Y_z A\tB ᾼx");
        assert_eq!(initials("ünïCode".as_bytes()), "Ã");
        assert_eq!(initials("ǅemal".as_bytes()), "Çe");
        assert_eq!(initials("x-y_z w".as_bytes()), "xw");
    }
}
