//! Redis's `long double` numbers, for INCRBYFLOAT.
//!
//! Redis reads INCRBYFLOAT's operands with `strtold`, adds them in `long double` and writes the
//! sum with `%.17Lf` less its trailing zeros. On x86-64 a `long double` is the x87 80-bit extended
//! format: a 64-bit significand, exponents down to -16382, subnormals below. An f64 would answer
//! differently in the simplest case (0 + 0.1 prints as 0.10000000000000001 in f64, 0.1 in
//! extended precision), so this module does Redis's arithmetic in software, exactly: reading and
//! printing are correctly rounded (to nearest, ties to even, as glibc's are), and so is the sum (as
//! the x87 FPU's is).

use std::cmp::Ordering;

/// The exponent of the least significant bit of the smallest subnormal (and of the smallest
/// normal number's significand).
const MIN_EXPONENT: i64 = -16445;
/// The exponent of the least significant bit of the largest finite number's significand.
const MAX_EXPONENT: i64 = 16320;
/// Redis refuses to read a number this long or longer (`MAX_LONG_DOUBLE_CHARS`).
const MAX_CHARS: usize = 5 * 1024;

/// A number as x87 extended precision holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongDouble {
    /// `significand * 2^exponent`. The significand has its top bit set, except at
    /// `MIN_EXPONENT` (subnormals and zero).
    Finite {
        negative: bool,
        significand: u64,
        exponent: i64,
    },
    Infinite {
        negative: bool,
    },
}

impl LongDouble {
    /// Positive zero: what INCRBYFLOAT adds to when the key is missing.
    pub const ZERO: LongDouble = LongDouble::Finite {
        negative: false,
        significand: 0,
        exponent: MIN_EXPONENT,
    };

    fn zero(negative: bool) -> LongDouble {
        LongDouble::Finite {
            negative,
            significand: 0,
            exponent: MIN_EXPONENT,
        }
    }

    /// Reads `text` as Redis's `string2ld` does, or None where it refuses: empty or too long
    /// text, a leading blank, anything `strtold` does not consume entirely, NaN, and a finite
    /// number too large for the format or so small that it rounds to zero. The text ends at its
    /// first NUL byte, as the C string Redis hands `strtold` does.
    pub fn parse(text: &[u8]) -> Option<LongDouble> {
        if text.is_empty() || text.len() >= MAX_CHARS || is_c_space(text[0]) {
            return None;
        }
        let text = &text[..text.iter().position(|&b| b == 0).unwrap_or(text.len())];
        if text.is_empty() {
            // strtold converts nothing and stops at the NUL, which Redis takes as the end.
            return Some(LongDouble::zero(false));
        }
        let (negative, rest) = match text[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
            return Some(LongDouble::Infinite { negative });
        }
        let exact = match rest {
            [b'0', b'x' | b'X', hex @ ..] => parse_hex(hex)?,
            _ => parse_decimal(rest)?,
        };
        match exact {
            Exact::Zero => Some(LongDouble::zero(negative)),
            Exact::Value(n, Scale::Binary(exp)) => round_nonzero(negative, n, exp),
            Exact::Value(n, Scale::Decimal { exponent, digits }) => {
                from_decimal(negative, n, exponent, digits)
            }
        }
    }

    /// The sum, rounded to nearest as the x87 FPU rounds it; None if it is infinite or not a
    /// number (Redis: "increment would produce NaN or Infinity").
    pub fn checked_add(self, other: LongDouble) -> Option<LongDouble> {
        let (
            LongDouble::Finite {
                negative: na,
                significand: sa,
                exponent: ea,
            },
            LongDouble::Finite {
                negative: nb,
                significand: sb,
                exponent: eb,
            },
        ) = (self, other)
        else {
            return None;
        };
        if sa == 0 && sb == 0 {
            return Some(LongDouble::zero(na && nb));
        }
        if sb == 0 {
            return Some(self);
        }
        if sa == 0 {
            return Some(other);
        }
        // a has the larger exponent.
        let ((na, sa, ea), (nb, sb, eb)) = if ea >= eb {
            ((na, sa, ea), (nb, sb, eb))
        } else {
            ((nb, sb, eb), (na, sa, ea))
        };
        let shift = ea - eb;
        if shift > 130 {
            // a is normal here, and b is below a quarter of its smallest neighbouring gap: the
            // rounded sum is a.
            return Some(LongDouble::Finite {
                negative: na,
                significand: sa,
                exponent: ea,
            });
        }
        let a = Big::from_u128(u128::from(sa)).shl(shift as u64);
        let b = Big::from_u128(u128::from(sb));
        let (negative, sum) = if na == nb {
            (na, a.add(&b))
        } else {
            match a.cmp(&b) {
                Ordering::Greater => (na, a.sub(&b)),
                Ordering::Less => (nb, b.sub(&a)),
                // x + -x is +0 when rounding to nearest.
                Ordering::Equal => return Some(LongDouble::zero(false)),
            }
        };
        round(negative, &sum, eb)
    }

    /// The number as Redis's `ld2string` writes it in human mode: `%.17Lf` without trailing
    /// zeros (nor a trailing point), and `-0` as `0`.
    pub fn to_human(&self) -> String {
        let (negative, significand, exponent) = match *self {
            LongDouble::Infinite { negative } => {
                return if negative { "-inf" } else { "inf" }.to_string()
            }
            LongDouble::Finite {
                negative,
                significand,
                exponent,
            } => (negative, significand, exponent),
        };
        let mut text = String::new();
        if negative {
            text.push('-');
        }
        if exponent >= 0 {
            let integer = Big::from_u128(u128::from(significand)).shl(exponent as u64);
            text.push_str(&integer.to_decimal());
        } else {
            // The value times 10^17, rounded to an integer: the digits %.17Lf prints.
            let scaled = u128::from(significand) * 10u128.pow(17);
            let shift = exponent.unsigned_abs();
            let digits = if shift >= 128 {
                // scaled < 2^121, far below half of 2^shift.
                0
            } else {
                let q = scaled >> shift;
                let rest = scaled & ((1u128 << shift) - 1);
                let half = 1u128 << (shift - 1);
                if rest > half || (rest == half && q & 1 == 1) {
                    q + 1
                } else {
                    q
                }
            };
            let digits = format!("{digits:018}");
            let (integer, fraction) = digits.split_at(digits.len() - 17);
            text.push_str(integer);
            let fraction = fraction.trim_end_matches('0');
            if !fraction.is_empty() {
                text.push('.');
                text.push_str(fraction);
            }
        }
        if text == "-0" {
            text.remove(0);
        }
        text
    }
}

/// C's `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A number read exactly: zero, or a positive integer times a power of two or of ten.
enum Exact {
    Zero,
    Value(Big, Scale),
}

enum Scale {
    /// Times `2^exponent`.
    Binary(i64),
    /// Times `10^exponent`; the integer has `digits` decimal digits.
    Decimal { exponent: i64, digits: i64 },
}

/// Exponents beyond this are out of range whatever the digits (at most `MAX_CHARS` of them).
const EXPONENT_CAP: i64 = 1_000_000;

/// An optionally signed decimal exponent that must end the text, saturated at `EXPONENT_CAP`.
fn parse_exponent(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let magnitude = digits.iter().fold(0i64, |n, &d| {
        (n * 10 + i64::from(d - b'0')).min(EXPONENT_CAP)
    });
    Some(if negative { -magnitude } else { magnitude })
}

/// Splits `digits[.digits][<marker>exponent]` into the digits before and after the point and
/// the exponent; None if the text is anything else or has no digit at all.
fn split_number(text: &[u8], is_digit: fn(&u8) -> bool, marker: u8) -> Option<(&[u8], &[u8], i64)> {
    let integer_end = text.iter().position(|b| !is_digit(b)).unwrap_or(text.len());
    let (integer, mut rest) = text.split_at(integer_end);
    let mut fraction: &[u8] = &[];
    if let Some(after_point) = rest.strip_prefix(b".") {
        let end = after_point
            .iter()
            .position(|b| !is_digit(b))
            .unwrap_or(after_point.len());
        (fraction, rest) = after_point.split_at(end);
    }
    if integer.is_empty() && fraction.is_empty() {
        return None;
    }
    let exponent = match rest.split_first() {
        None => 0,
        Some((m, exponent)) if m.to_ascii_lowercase() == marker => parse_exponent(exponent)?,
        Some(_) => return None,
    };
    Some((integer, fraction, exponent))
}

fn parse_decimal(text: &[u8]) -> Option<Exact> {
    let (integer, fraction, exponent) = split_number(text, u8::is_ascii_digit, b'e')?;
    let digits = || integer.iter().chain(fraction).map(|d| d - b'0');
    let mut n = Big::zero();
    let mut scale = exponent - fraction.len() as i64;
    // Trailing zeros only scale the number.
    let significant = digits().count() - digits().rev().take_while(|&d| d == 0).count();
    scale += (digits().count() - significant) as i64;
    for d in digits().take(significant) {
        n.mul_small(10);
        n.add_small(u32::from(d));
    }
    if n.is_zero() {
        return Some(Exact::Zero);
    }
    let digits = (significant - digits().take_while(|&d| d == 0).count()) as i64;
    Some(Exact::Value(
        n,
        Scale::Decimal {
            exponent: scale,
            digits,
        },
    ))
}

fn parse_hex(text: &[u8]) -> Option<Exact> {
    let (integer, fraction, exponent) = split_number(text, u8::is_ascii_hexdigit, b'p')?;
    let mut n = Big::zero();
    for d in integer.iter().chain(fraction) {
        n.mul_small(16);
        n.add_small((*d as char).to_digit(16).expect("a hex digit"));
    }
    if n.is_zero() {
        return Some(Exact::Zero);
    }
    let exponent = exponent - 4 * fraction.len() as i64;
    Some(Exact::Value(n, Scale::Binary(exponent)))
}

/// `n * 10^exp`, where n has `digits` digits, rounded; None when it is out of range (too
/// large, or rounding to zero).
fn from_decimal(negative: bool, n: Big, exp: i64, digits: i64) -> Option<LongDouble> {
    // The value lies in [10^(digits-1+exp), 10^(digits+exp)); the largest finite number is
    // about 1.19e4932, half the smallest subnormal about 1.82e-4951.
    if digits - 1 + exp >= 4933 || digits + exp < -4951 {
        return None;
    }
    let k = exp.unsigned_abs();
    if exp >= 0 {
        return round_nonzero(negative, n.mul_pow5(k), exp);
    }
    // n / 5^k, to some 67 bits and a sticky bit, then scaled by 2^exp.
    let d = Big::from_u128(1).mul_pow5(k);
    let shift = d.bits() as i64 + 67 - n.bits() as i64;
    let (numerator, mut sticky) = if shift >= 0 {
        (n.shl(shift as u64), false)
    } else {
        let s = shift.unsigned_abs();
        (n.shr(s), n.low_bits_nonzero(s))
    };
    let (quotient, remainder_nonzero) = numerator.div_rem_to_u128(&d);
    sticky |= remainder_nonzero;
    let bits = Big::from_u128((quotient << 1) | u128::from(sticky));
    round_nonzero(negative, bits, exp - shift - 1)
}

/// `n * 2^exp` (n > 0), rounded; None when it overflows or rounds to zero, which `strtold`
/// reports as a range error that Redis refuses.
fn round_nonzero(negative: bool, n: Big, exp: i64) -> Option<LongDouble> {
    let bits = n.bits() as i64;
    if bits + exp > MAX_EXPONENT + 65 || bits + exp < MIN_EXPONENT - 2 {
        return None;
    }
    match round(negative, &n, exp)? {
        LongDouble::Finite { significand: 0, .. } => None,
        finite => Some(finite),
    }
}

/// `n * 2^exp` rounded to the format, to nearest with ties to even; None if it overflows.
fn round(negative: bool, n: &Big, exp: i64) -> Option<LongDouble> {
    if n.is_zero() {
        return Some(LongDouble::zero(negative));
    }
    let bits = n.bits() as i64;
    let mut exponent = (exp + bits - 64).max(MIN_EXPONENT);
    let shift = exponent - exp;
    let significand = if shift <= 0 {
        n.shl(shift.unsigned_abs()).to_u128() as u64
    } else {
        let s = shift as u64;
        let q = n.shr(s).to_u128() as u64;
        let half = n.bit(s - 1);
        let rest = n.low_bits_nonzero(s - 1);
        if half && (rest || q & 1 == 1) {
            match q.checked_add(1) {
                Some(q) => q,
                None => {
                    exponent += 1;
                    1 << 63
                }
            }
        } else {
            q
        }
    };
    if exponent > MAX_EXPONENT {
        return None;
    }
    Some(LongDouble::Finite {
        negative,
        significand,
        exponent,
    })
}

/// A non-negative integer of any size: little-endian 32-bit limbs, without high zero limbs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn zero() -> Big {
        Big(Vec::new())
    }

    fn from_u128(mut v: u128) -> Big {
        let mut limbs = Vec::new();
        while v != 0 {
            limbs.push(v as u32);
            v >>= 32;
        }
        Big(limbs)
    }

    fn trim(mut self) -> Big {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bits(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(top) => self.0.len() as u64 * 32 - u64::from(top.leading_zeros()),
        }
    }

    fn bit(&self, i: u64) -> bool {
        self.0
            .get((i / 32) as usize)
            .is_some_and(|limb| limb >> (i % 32) & 1 == 1)
    }

    /// Whether any of the lowest `n` bits is set.
    fn low_bits_nonzero(&self, n: u64) -> bool {
        let whole = ((n / 32) as usize).min(self.0.len());
        if self.0[..whole].iter().any(|&l| l != 0) {
            return true;
        }
        let part = n % 32;
        part != 0
            && self
                .0
                .get(whole)
                .is_some_and(|l| l & ((1 << part) - 1) != 0)
    }

    fn to_u128(&self) -> u128 {
        assert!(self.bits() <= 128, "fits 128 bits");
        self.0
            .iter()
            .rev()
            .fold(0u128, |v, &l| (v << 32) | u128::from(l))
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let v = u64::from(*limb) * u64::from(m) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
        *self = std::mem::take(self).trim();
    }

    fn add_small(&mut self, a: u32) {
        let mut carry = u64::from(a);
        for limb in &mut self.0 {
            if carry == 0 {
                return;
            }
            let v = u64::from(*limb) + carry;
            *limb = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    fn mul_pow5(mut self, mut k: u64) -> Big {
        // 5^13 is the largest power of five below 2^32.
        while k > 0 {
            let step = k.min(13);
            self.mul_small(5u32.pow(step as u32));
            k -= step;
        }
        self
    }

    fn shl(&self, n: u64) -> Big {
        if self.is_zero() {
            return Big::zero();
        }
        let (limbs, bits) = ((n / 32) as usize, n % 32);
        let mut out = vec![0u32; limbs];
        let mut carry = 0u32;
        for &l in &self.0 {
            if bits == 0 {
                out.push(l);
            } else {
                out.push((l << bits) | carry);
                carry = l >> (32 - bits);
            }
        }
        out.push(carry);
        Big(out).trim()
    }

    fn shr(&self, n: u64) -> Big {
        let (limbs, bits) = ((n / 32) as usize, n % 32);
        if limbs >= self.0.len() {
            return Big::zero();
        }
        let src = &self.0[limbs..];
        let out = (0..src.len())
            .map(|i| {
                let high = src.get(i + 1).copied().unwrap_or(0);
                if bits == 0 {
                    src[i]
                } else {
                    (src[i] >> bits) | (high << (32 - bits))
                }
            })
            .collect();
        Big(out).trim()
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn add(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len().max(other.0.len()) + 1);
        let mut carry = 0u64;
        for i in 0..self.0.len().max(other.0.len()) {
            let v = u64::from(self.0.get(i).copied().unwrap_or(0))
                + u64::from(other.0.get(i).copied().unwrap_or(0))
                + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        out.push(carry as u32);
        Big(out).trim()
    }

    /// `self - other`, for `self >= other`.
    fn sub(&self, other: &Big) -> Big {
        let mut out = Vec::with_capacity(self.0.len());
        let mut borrow = 0i64;
        for (i, &l) in self.0.iter().enumerate() {
            let v = i64::from(l) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            out.push(v.rem_euclid(1 << 32) as u32);
            borrow = i64::from(v < 0);
        }
        debug_assert_eq!(borrow, 0, "self >= other");
        Big(out).trim()
    }

    /// The quotient by `d` (which must fit 128 bits) and whether a remainder is left, by long
    /// division one quotient bit at a time.
    fn div_rem_to_u128(&self, d: &Big) -> (u128, bool) {
        let mut rest = self.clone();
        let mut quotient = 0u128;
        let top = (self.bits() + 1).saturating_sub(d.bits());
        assert!(top <= 128, "the quotient fits 128 bits");
        for i in (0..top).rev() {
            let shifted = d.shl(i);
            if rest.cmp(&shifted) != Ordering::Less {
                rest = rest.sub(&shifted);
                quotient |= 1 << i;
            }
        }
        (quotient, !rest.is_zero())
    }

    /// Divides by `d` in place and returns the remainder.
    fn div_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for limb in self.0.iter_mut().rev() {
            let v = (rem << 32) | u64::from(*limb);
            *limb = (v / u64::from(d)) as u32;
            rem = v % u64::from(d);
        }
        *self = std::mem::take(self).trim();
        rem as u32
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".to_string();
        }
        let mut n = self.clone();
        let mut chunks = Vec::new();
        while !n.is_zero() {
            chunks.push(n.div_small(1_000_000_000));
        }
        let mut text = chunks.pop().expect("nonzero").to_string();
        for chunk in chunks.iter().rev() {
            text.push_str(&format!("{chunk:09}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn human(text: &str) -> String {
        LongDouble::parse(text.as_bytes())
            .unwrap_or_else(|| panic!("{text} parses"))
            .to_human()
    }

    fn sum(a: &str, b: &str) -> Option<String> {
        let a = LongDouble::parse(a.as_bytes()).unwrap();
        let b = LongDouble::parse(b.as_bytes()).unwrap();
        a.checked_add(b).map(|s| s.to_human())
    }

    /// Outputs of Redis 7.0 (x86-64) for `SET f <a>`, `INCRBYFLOAT f <b>`.
    #[test]
    fn sums_print_as_redis_prints_them() {
        for (a, b, expected) in [
            ("0", "0.1", "0.1"),
            ("10.5", "0.1", "10.6"),
            ("0.1", "0.2", "0.3"),
            ("3", "1e-18", "3"),
            ("1.5", "-1.5", "0"),
            ("0", "5.0e3", "5000"),
            ("0", "-10.6", "-10.6"),
            ("0", "0x1p-3", "0.125"),
            ("0", "0x10", "16"),
            ("0", "1e-20", "0"),
            ("0", "-1e-20", "0"),
            ("0", "1e20", "100000000000000000000"),
            ("0", "9223372036854775807", "9223372036854775807"),
            // 2^-18 ends in a 5 at the 18th decimal: the tie goes to the even digit.
            ("0", "0.000003814697265625", "0.00000381469726562"),
            ("0", "1e-4940", "0"),
            ("-0.0", "-0", "0"),
            ("1", "-0", "1"),
        ] {
            assert_eq!(sum(a, b).as_deref(), Some(expected), "{a} + {b}");
        }
        assert_eq!(
            human("1e308"),
            "99999999999999999996685879655845645660560099847415567207797047994921734868838061872\
             10012692188853932044674722505401322315213474959396058359742081443019641876795910001\
             96031907786631096045071066679391533957889389145605435630612683649016186302170865892\
             53444881623791300855757318142424510452728255046343928578048"
        );
    }

    #[test]
    fn what_redis_refuses_to_read() {
        for bad in [
            "", "abc", " 1", "1 ", "\t1", ".", "+", "-", "1.5e", "1e+", "0x", "0x1p", "0xg", "nan",
            "-nan", "NaN(1)", "1e5000", "-1e5000", "1e-5000", "1e-4960", "1.2e4932", "infinit",
            "+-1", "1..2", "1e1.5",
        ] {
            assert_eq!(LongDouble::parse(bad.as_bytes()), None, "{bad:?}");
        }
        let long = |len: usize| format!("0.{}", "1".repeat(len - 2)).into_bytes();
        assert_eq!(LongDouble::parse(&long(MAX_CHARS)), None, "too long");
        assert_eq!(
            LongDouble::parse(&long(MAX_CHARS - 1)).map(|n| n.to_human()),
            Some("0.11111111111111111".to_string())
        );
    }

    #[test]
    fn what_redis_reads() {
        for (text, expected) in [
            ("+1.5", "1.5"),
            (".5", "0.5"),
            ("5.", "5"),
            ("-0", "0"),
            ("0e99999999999", "0"),
            ("1E2", "100"),
            ("0X1.8P1", "3"),
            ("0x.8", "0.5"),
            ("00012.5000", "12.5"),
            // The C string ends at the NUL.
            ("1.5\0abc", "1.5"),
            ("\0abc", "0"),
        ] {
            assert_eq!(human(text), expected, "{text:?}");
        }
        assert_eq!(
            LongDouble::parse(b"INFINITY"),
            Some(LongDouble::Infinite { negative: false })
        );
        assert_eq!(
            LongDouble::parse(b"-inf"),
            Some(LongDouble::Infinite { negative: true })
        );
        // The largest finite number reads; one a little larger does not.
        assert!(LongDouble::parse(b"1.18973149535723176502e4932").is_some());
        assert!(LongDouble::parse(b"1.18973149535723176509e4932").is_none());
        // The smallest subnormal (about 3.6e-4951) reads, and so does anything rounding to it.
        assert!(LongDouble::parse(b"2e-4951").is_some());
        assert!(LongDouble::parse(b"1e-4951").is_none());
    }

    #[test]
    fn infinities_and_overflow_have_no_sum() {
        let max = "1.18973149535723176502e4932";
        assert_eq!(sum(max, max), None);
        assert_eq!(sum("inf", "1"), None);
        assert_eq!(sum("inf", "-inf"), None);
        assert_eq!(sum(max, "-1").as_deref().map(str::len), Some(4933));
    }

    #[test]
    fn reading_is_correctly_rounded() {
        // 2^64 + 1 lies halfway between 2^64 and 2^64 + 2: ties go to the even significand.
        let two64 = human("18446744073709551616");
        assert_eq!(human("18446744073709551617"), two64);
        assert_eq!(human("18446744073709551619"), "18446744073709551620");
        // 2^64 - 1 is exact.
        assert_eq!(human("18446744073709551615"), "18446744073709551615");
        // Digits far beyond the significand still decide the rounding.
        assert_eq!(
            human(&format!(
                "18446744073709551617{}1e-{}",
                "0".repeat(200),
                201
            )),
            "18446744073709551618"
        );
    }

    #[test]
    fn big_integers() {
        let n = Big::from_u128(u128::MAX);
        assert_eq!(n.bits(), 128);
        assert_eq!(n.shl(70).shr(70), n);
        assert_eq!(n.to_decimal(), u128::MAX.to_string());
        assert_eq!(n.add(&Big::from_u128(1)).sub(&Big::from_u128(1)), n);
        assert_eq!(Big::from_u128(1).mul_pow5(3).to_decimal(), "125");
        let (q, rest) = Big::from_u128(1000).div_rem_to_u128(&Big::from_u128(7));
        assert_eq!((q, rest), (142, true));
        assert!(Big::from_u128(0b1000).low_bits_nonzero(4));
        assert!(!Big::from_u128(0b1000).low_bits_nonzero(3));
    }
}
