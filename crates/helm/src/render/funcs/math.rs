//! Sprig's float math and rounding (`addf`, `floor`, `round`, ...), plus a few checksums.

use super::args::{Builtin, arg, register_all, str_arg};
use crate::render::value::{to_f64, to_i64};
use gotmpl::{FuncMap, Result, Value};

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("addf", |a| Ok(Value::Float(a.iter().map(to_f64).sum()))),
        ("add1f", |a| {
            Ok(Value::Float(to_f64(arg("add1f", a, 0)?) + 1.0))
        }),
        ("subf", |a| fold_f("subf", a, |x, y| x - y)),
        ("mulf", |a| Ok(Value::Float(a.iter().map(to_f64).product()))),
        ("divf", |a| fold_f("divf", a, |x, y| x / y)),
        ("maxf", |a| {
            Ok(Value::Float(a.iter().map(to_f64).fold(f64::MIN, f64::max)))
        }),
        ("minf", |a| {
            Ok(Value::Float(a.iter().map(to_f64).fold(f64::MAX, f64::min)))
        }),
        ("floor", |a| {
            Ok(Value::Float(to_f64(arg("floor", a, 0)?).floor()))
        }),
        ("ceil", |a| {
            Ok(Value::Float(to_f64(arg("ceil", a, 0)?).ceil()))
        }),
        ("round", round),
        ("toDecimal", |a| {
            let s = str_arg("toDecimal", a, 0)?;
            Ok(Value::Int(i64::from_str_radix(s.trim(), 8).unwrap_or(0)))
        }),
        ("adler32sum", |a| {
            super::encoding::on_bytes("adler32sum", a, |b| adler32(b).to_string())
        }),
    ];
    register_all(fm, funcs);
}

fn fold_f(name: &str, args: &[Value], f: fn(f64, f64) -> f64) -> Result<Value> {
    let first = to_f64(arg(name, args, 0)?);
    Ok(Value::Float(args[1..].iter().map(to_f64).fold(first, f)))
}

/// `round x places [half]`: rounds half away from zero (or at `half`, default .5).
fn round(args: &[Value]) -> Result<Value> {
    let x = to_f64(arg("round", args, 0)?);
    let places = args.get(1).map_or(0, to_i64).clamp(0, 15) as i32;
    let half = args.get(2).map_or(0.5, to_f64);
    let pow = 10f64.powi(places);
    let scaled = x.abs() * pow;
    let int = scaled.trunc();
    let rounded = if scaled - int >= half { int + 1.0 } else { int };
    Ok(Value::Float(rounded.copysign(x) / pow))
}

/// Adler-32 (RFC 1950), tiny enough not to warrant a crate.
fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % MOD;
        b = (b + a) % MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_and_checksums() {
        let r = round(&[Value::Float(123.5555), Value::Int(3)]).unwrap_or(Value::Nil);
        assert_eq!(r, Value::Float(123.556));
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }
}
