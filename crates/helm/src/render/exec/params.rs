//! The Go parameter types of the template functions, and Go's executor's checks of an
//! argument against them (`text/template`'s `evalArg` and `validateType`): a literal of the
//! wrong kind (`expected integer; found "2"`), nil (`cannot assign nil to bool`; a missing
//! value is `invalid value; expected bool`, a map's missing entry `wrong type for value;
//! expected bool; got interface {}`), and a value of another type (`got float64`).
//!
//! The signatures are Sprig's and Helm's function declarations, as facts; a function not
//! listed takes `interface{}` everywhere and gets no check.

use super::value::{Elem, Kind, V};
use crate::render::gotpl::ast::{Expr, Number};

/// A parameter's Go type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Param {
    Str,
    Int,
    Uint32,
    Float,
    Bool,
    Map,
    Slice,
    Time,
    Any,
}

impl Param {
    fn from_code(c: u8) -> Param {
        match c {
            b'S' => Param::Str,
            b'I' => Param::Int,
            b'U' => Param::Uint32,
            b'F' => Param::Float,
            b'B' => Param::Bool,
            b'M' => Param::Map,
            b'L' => Param::Slice,
            b'T' => Param::Time,
            _ => Param::Any,
        }
    }

    fn go(self) -> &'static str {
        match self {
            Param::Str => "string",
            Param::Int => "int",
            Param::Uint32 => "uint32",
            Param::Float => "float64",
            Param::Bool => "bool",
            Param::Map => "map[string]interface {}",
            Param::Slice => "[]interface {}",
            Param::Time => "time.Time",
            Param::Any => "interface {}",
        }
    }

    /// Go's `canBeNil`: nil is the zero value of maps, slices and interfaces.
    fn nilable(self) -> bool {
        matches!(self, Param::Map | Param::Slice | Param::Any)
    }
}

/// `name`'s fixed parameters (one code each: `S` string, `I` int, `U` uint32, `F` float64,
/// `B` bool, `M` map[string]interface{}, `L` []interface{}, `A` anything) and the variadic
/// element's code. `time.Time` and Sprig's certificate struct are written `A` (not checked).
fn signature(name: &str) -> Option<(&'static [u8], Option<u8>)> {
    let fixed: &'static [u8] = match name {
        "trim" | "upper" | "lower" | "title" | "untitle" | "nospace" | "swapcase" | "shuffle"
        | "snakecase" | "camelcase" | "kebabcase" | "initials" | "base" | "dir" | "clean"
        | "ext" | "isAbs" | "osBase" | "osClean" | "osDir" | "osExt" | "osIsAbs" | "sha1sum"
        | "sha256sum" | "sha512sum" | "adler32sum" | "atoi" | "fromJson" | "mustFromJson"
        | "fromJsonArray" | "mustFromJsonArray" | "fromYaml" | "mustFromYaml" | "fromYamlArray"
        | "mustFromYamlArray" | "fromToml" | "getHostByName" | "b64enc" | "b64dec" | "b32enc"
        | "b32dec" | "bcrypt" | "genPrivateKey" | "semver" | "fail" | "regexQuoteMeta"
        | "urlParse" => b"S",
        "trimall" | "trimAll" | "trimSuffix" | "trimPrefix" | "contains" | "hasPrefix"
        | "hasSuffix" | "split" | "splitList" | "htpasswd" | "buildCustomCert" | "encryptAES"
        | "decryptAES" | "semverCompare" | "regexMatch" | "mustRegexMatch" | "regexFind"
        | "mustRegexFind" | "toDate" | "mustToDate" => b"SS",
        "replace"
        | "regexReplaceAll"
        | "mustRegexReplaceAll"
        | "regexReplaceAllLiteral"
        | "mustRegexReplaceAllLiteral" => b"SSS",
        "regexFindAll" | "mustRegexFindAll" | "regexSplit" | "mustRegexSplit" => b"SSI",
        "abbrev" | "trunc" | "repeat" | "wrap" | "indent" | "nindent" => b"IS",
        "abbrevboth" | "substr" => b"IIS",
        "wrapWith" => b"ISS",
        "plural" => b"SSI",
        "splitn" => b"SIS",
        "randAlphaNum" | "randAlpha" | "randAscii" | "randNumeric" | "until" | "randBytes" => b"I",
        "untilStep" => b"III",
        "randInt" => b"II",
        "join" | "typeIs" | "typeIsLike" | "kindIs" | "include" | "tpl" | "required" | "date" => {
            b"SA"
        }
        "dateModify" | "date_modify" | "mustDateModify" | "must_date_modify" => b"ST",
        "unixEpoch" => b"T",
        "dateInZone" | "date_in_zone" => b"SAS",
        "htmlDateInZone" => b"AS",
        "ternary" => b"AAB",
        "get" | "unset" | "hasKey" => b"MS",
        "set" => b"MSA",
        "values" | "urlJoin" => b"M",
        "chunk" | "mustChunk" => b"IA",
        "derivePassword" => b"USSSS",
        "genCA" => b"SI",
        "genCAWithKey" => b"SIS",
        "genSelfSignedCert" => b"SLLI",
        "genSelfSignedCertWithKey" => b"SLLIS",
        "genSignedCert" => b"SLLIA",
        "genSignedCertWithKey" => b"SLLIAS",
        "lookup" => b"SSSS",
        "round" => return Some((b"AI", Some(b'F'))),
        "seq" => return Some((b"", Some(b'I'))),
        "pluck" => return Some((b"S", Some(b'M'))),
        "keys" => return Some((b"", Some(b'M'))),
        "pick" | "omit" => return Some((b"M", Some(b'S'))),
        "merge" | "mergeOverwrite" | "mustMerge" | "mustMergeOverwrite" => {
            return Some((b"M", Some(b'M')));
        }
        "printf" => return Some((b"S", Some(b'A'))),
        _ => return None,
    };
    Some((fixed, None))
}

/// The type of argument `i` of `n` (written and piped) of function `name`, or `Any` when the
/// count is wrong for the function (that fails as such) or the function is not listed.
pub fn param(name: &str, i: usize, n: usize) -> Param {
    let Some((fixed, variadic)) = signature(name) else {
        return Param::Any;
    };
    match variadic {
        None if n != fixed.len() => Param::Any,
        Some(_) if n < fixed.len() => Param::Any,
        _ => fixed
            .get(i)
            .copied()
            .or(variadic)
            .map_or(Param::Any, Param::from_code),
    }
}

/// Go's refusal of a literal argument (checked before anything is evaluated), or `None`.
pub fn literal_refusal(ty: Param, arg: &Expr, shown: &dyn Fn(&Expr) -> String) -> Option<String> {
    if ty == Param::Any {
        return None;
    }
    let expected = |what: &str| Some(format!("expected {what}; found {}", shown(arg)));
    let cannot_handle = || {
        Some(format!(
            "can't handle {} for arg of type {}",
            shown(arg),
            ty.go()
        ))
    };
    match arg {
        Expr::Nil(_) if ty.nilable() => None,
        Expr::Nil(_) => Some(format!("cannot assign nil to {}", ty.go())),
        Expr::String(..) | Expr::Number(..) | Expr::Bool(..)
            if matches!(ty, Param::Map | Param::Slice | Param::Time) =>
        {
            cannot_handle()
        }
        Expr::String(..) => match ty {
            Param::Str => None,
            Param::Int => expected("integer"),
            Param::Uint32 => expected("unsigned integer"),
            Param::Float => expected("float"),
            _ => expected("bool"),
        },
        Expr::Bool(..) => match ty {
            Param::Bool => None,
            Param::Str => expected("string"),
            Param::Int => expected("integer"),
            Param::Uint32 => expected("unsigned integer"),
            _ => expected("float"),
        },
        Expr::Number(_, n, _) => {
            let integral = match n {
                Number::Int(_) => true,
                Number::Uint(u) => i64::try_from(*u).is_ok(),
                Number::Float(f) => f.fract() == 0.0 && f.abs() < 9.2e18,
            };
            let unsigned = match n {
                Number::Int(i) => *i >= 0,
                Number::Uint(_) => true,
                Number::Float(f) => f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19,
            };
            match ty {
                Param::Str => expected("string"),
                Param::Bool => expected("bool"),
                Param::Int if !integral => expected("integer"),
                Param::Uint32 if !unsigned => expected("unsigned integer"),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Go's type name of a value, in its errors.
pub fn go_type(v: &V) -> &'static str {
    match v {
        V::Map(d) if d.kind() == Kind::Values => "common.Values",
        V::Map(d) if d.kind() == Kind::Semver => "*semver.Version",
        V::Map(d) => match d.kind() {
            Kind::Files => "engine.files",
            Kind::Pointer(_) => "*common.Capabilities",
            Kind::Stringer(_) => "common.KubeVersion",
            Kind::Struct(_) => "version.BuildInfo",
            Kind::NilMap | Kind::StrMap => "map[string]string",
            Kind::Time => "time.Time",
            _ => "map[string]interface {}",
        },
        other => other.type_name(),
    }
}

fn assignable(ty: Param, v: &V) -> bool {
    match ty {
        Param::Any => true,
        Param::Str => matches!(v, V::Str(_) | V::Func(_)),
        Param::Int => matches!(v, V::Int(_)),
        Param::Uint32 => false,
        Param::Float => matches!(v, V::Float(_)),
        Param::Bool => matches!(v, V::Bool(_)),
        Param::Map => matches!(v, V::Map(d) if matches!(d.kind(), Kind::Plain | Kind::Values)),
        Param::Slice => matches!(v, V::List(_, Elem::Any)),
        Param::Time => v.time_text().is_some(),
    }
}

/// Go's refusal of an evaluated argument: `typed_nil` when it is a map's missing or nil entry
/// or a function's nil result (a nil `interface {}`), else a nil is "no value" (a variable's or
/// a pipeline's nil).
pub fn value_refusal(ty: Param, v: &V, typed_nil: bool) -> Option<String> {
    if ty == Param::Any {
        return None;
    }
    let wrong = |got: &str| {
        Some(format!(
            "wrong type for value; expected {}; got {got}",
            ty.go()
        ))
    };
    match v {
        V::Nil if typed_nil => wrong("interface {}"),
        V::Nil if ty.nilable() => None,
        V::Nil => Some(format!("invalid value; expected {}", ty.go())),
        v if assignable(ty, v) => None,
        v => wrong(go_type(v)),
    }
}
