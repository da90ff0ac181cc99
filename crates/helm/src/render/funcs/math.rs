//! Sprig's float math and rounding (`addf`, `floor`, `round`, ...), plus a few checksums.

use super::args::{Builtin, arg, fail, register_all, str_arg};
use crate::render::value::{to_f64, to_i64};
use bigdecimal::num_traits::Zero as _;
use bigdecimal::{BigDecimal, RoundingMode};
use gotmpl::{FuncMap, Result, Value};
use std::str::FromStr as _;

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("addf", |a| {
            decimal_op("addf", &Value::Float(0.0), a, |x, y| Ok(x + y))
        }),
        ("add1f", |a| {
            decimal_op("add1f", arg("add1f", a, 0)?, &[Value::Int(1)], |x, y| {
                Ok(x + y)
            })
        }),
        ("subf", |a| {
            decimal_op("subf", arg("subf", a, 0)?, &a[1..], |x, y| Ok(x - y))
        }),
        ("mulf", |a| {
            decimal_op("mulf", arg("mulf", a, 0)?, &a[1..], |x, y| Ok(x * y))
        }),
        ("divf", |a| {
            decimal_op("divf", arg("divf", a, 0)?, &a[1..], decimal_div)
        }),
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

/// Sprig's float arithmetic (shopspring/decimal's): each float becomes the exact decimal of
/// its shortest digits (`0.1` is 0.1), the operation is exact (division rounds to 16 places,
/// half away from zero), and the result is the float nearest the decimal (`addf 0.1 0.2` is
/// 0.3, `divf 2 3` 0.6666666666666667).
fn decimal_op(
    name: &str,
    first: &Value,
    rest: &[Value],
    op: fn(BigDecimal, BigDecimal) -> std::result::Result<BigDecimal, &'static str>,
) -> Result<Value> {
    let dec = |v: &Value| {
        let f = to_f64(v);
        if !f.is_finite() {
            return Err(fail(
                name,
                "Cannot create a Decimal from a non-finite float",
            ));
        }
        BigDecimal::from_str(&format!("{f:e}")).map_err(|e| fail(name, e))
    };
    let mut acc = dec(first)?;
    for v in rest {
        acc = op(acc, dec(v)?).map_err(|e| fail(name, e))?;
    }
    Ok(Value::Float(acc.to_string().parse().unwrap_or(0.0)))
}

/// shopspring's `Div`: to 16 decimal places, half away from zero.
fn decimal_div(x: BigDecimal, y: BigDecimal) -> std::result::Result<BigDecimal, &'static str> {
    if y.is_zero() {
        return Err("decimal division by 0");
    }
    Ok((x / y).with_scale_round(16, RoundingMode::HalfUp))
}

/// `round x places [half]`: rounds half away from zero (or at `half`, default .5).
fn round(args: &[Value]) -> Result<Value> {
    let x = to_f64(arg("round", args, 0)?);
    // Sprig's: up when the fraction (negative below zero) reaches `half`, else down, so every
    // negative number with a fraction rounds down (`round -0.25 0` is -1, as in helm).
    let places = args.get(1).map_or(0, to_i64).clamp(-400, 400) as i32;
    let half = args.get(2).map_or(0.5, to_f64);
    let pow = 10f64.powi(places);
    let digit = pow * x;
    let rounded = if digit.fract() >= half {
        digit.ceil()
    } else {
        digit.floor()
    };
    Ok(Value::Float(rounded / pow))
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
