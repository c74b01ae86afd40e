//! The numeric domain: what the verifier knows about a 64-bit number.
//!
//! A [`Scalar`] is the intersection of three facts, each kept sound on its own and used to sharpen
//! the others: an unsigned interval, a signed interval and a [`Tnum`] (which bits are known, and
//! their values). Intervals bound offsets and sizes; known bits prove alignment and make masks
//! (`and r1, 0xff`) and shifts precise.

use crate::instruction::{AluOp, JmpCond, Width};

/// Known bits: a bit of `mask` is unknown, a bit outside it has the value it has in `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Tnum {
    value: u64,
    mask: u64,
}

impl Tnum {
    const UNKNOWN: Tnum = Tnum { value: 0, mask: u64::MAX };

    const fn constant(v: u64) -> Tnum {
        Tnum { value: v, mask: 0 }
    }

    /// The tightest tnum holding every number of `min..=max`.
    fn range(min: u64, max: u64) -> Tnum {
        let differing = 64 - (min ^ max).leading_zeros();
        if differing >= 64 {
            return Tnum::UNKNOWN;
        }
        let delta = (1u64 << differing) - 1;
        Tnum { value: min & !delta, mask: delta }
    }

    fn add(self, b: Tnum) -> Tnum {
        let sm = self.mask.wrapping_add(b.mask);
        let sv = self.value.wrapping_add(b.value);
        let chi = sm.wrapping_add(sv) ^ sv;
        let mu = chi | self.mask | b.mask;
        Tnum { value: sv & !mu, mask: mu }
    }

    fn sub(self, b: Tnum) -> Tnum {
        let dv = self.value.wrapping_sub(b.value);
        let alpha = dv.wrapping_add(self.mask);
        let beta = dv.wrapping_sub(b.mask);
        let mu = (alpha ^ beta) | self.mask | b.mask;
        Tnum { value: dv & !mu, mask: mu }
    }

    fn and(self, b: Tnum) -> Tnum {
        let alpha = self.value | self.mask;
        let beta = b.value | b.mask;
        let v = self.value & b.value;
        Tnum { value: v, mask: alpha & beta & !v }
    }

    fn or(self, b: Tnum) -> Tnum {
        let v = self.value | b.value;
        Tnum { value: v, mask: (self.mask | b.mask) & !v }
    }

    fn xor(self, b: Tnum) -> Tnum {
        let mu = self.mask | b.mask;
        Tnum { value: (self.value ^ b.value) & !mu, mask: mu }
    }

    fn mul(self, b: Tnum) -> Tnum {
        let (mut a, mut b) = (self, b);
        let product = Tnum::constant(a.value.wrapping_mul(b.value));
        let mut acc = Tnum::constant(0);
        while a.value != 0 || a.mask != 0 {
            if a.value & 1 != 0 {
                acc = acc.add(Tnum { value: 0, mask: b.mask });
            } else if a.mask & 1 != 0 {
                acc = acc.add(Tnum { value: 0, mask: b.value | b.mask });
            }
            a = Tnum { value: a.value >> 1, mask: a.mask >> 1 };
            b = Tnum { value: b.value << 1, mask: b.mask << 1 };
        }
        product.add(acc)
    }

    fn shl(self, k: u32) -> Tnum {
        Tnum { value: self.value << k, mask: self.mask << k }
    }

    fn shr(self, k: u32) -> Tnum {
        Tnum { value: self.value >> k, mask: self.mask >> k }
    }

    fn sar(self, k: u32) -> Tnum {
        Tnum { value: ((self.value as i64) >> k) as u64, mask: ((self.mask as i64) >> k) as u64 }
    }

    /// Bits known in either.
    fn intersect(self, b: Tnum) -> Tnum {
        let mu = self.mask & b.mask;
        Tnum { value: (self.value | b.value) & !mu, mask: mu }
    }

    /// Bits known, and equal, in both.
    fn union(self, b: Tnum) -> Tnum {
        let mu = self.mask | b.mask | (self.value ^ b.value);
        Tnum { value: self.value & !mu, mask: mu }
    }

    /// Every number of `self` is one of `b`.
    fn within(self, b: Tnum) -> bool {
        self.mask & !b.mask == 0 && self.value & !b.mask == b.value
    }

    fn low32(self) -> Tnum {
        Tnum { value: self.value & 0xffff_ffff, mask: self.mask & 0xffff_ffff }
    }

    /// Whether the bits can agree with each other at all.
    fn conflicts(self, b: Tnum) -> bool {
        (self.value ^ b.value) & !(self.mask | b.mask) != 0
    }
}

/// A set of 64-bit numbers: an unsigned interval, a signed interval and known bits, all holding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Scalar {
    pub(crate) umin: u64,
    pub(crate) umax: u64,
    pub(crate) smin: i64,
    pub(crate) smax: i64,
    bits: Tnum,
}

const SIGN: u64 = 1 << 63;

impl Scalar {
    /// Any number.
    pub(crate) const UNKNOWN: Scalar =
        Scalar { umin: 0, umax: u64::MAX, smin: i64::MIN, smax: i64::MAX, bits: Tnum::UNKNOWN };

    pub(crate) const fn constant(v: u64) -> Scalar {
        Scalar { umin: v, umax: v, smin: v as i64, smax: v as i64, bits: Tnum::constant(v) }
    }

    /// `0..=max`, unsigned.
    pub(crate) fn below(max: u64) -> Scalar {
        Scalar::unsigned(0, max)
    }

    pub(crate) fn unsigned(min: u64, max: u64) -> Scalar {
        Scalar { umin: min, umax: max, ..Scalar::UNKNOWN }.normalise().unwrap_or(Scalar::UNKNOWN)
    }

    pub(crate) fn signed(min: i64, max: i64) -> Scalar {
        Scalar { smin: min, smax: max, ..Scalar::UNKNOWN }.normalise().unwrap_or(Scalar::UNKNOWN)
    }

    /// The numbers a load of `bytes` bytes gives, sign-extended or not.
    pub(crate) fn loaded(bytes: u32, signed: bool) -> Scalar {
        match (bytes, signed) {
            (8, _) => Scalar::UNKNOWN,
            (_, false) => Scalar::below(u64::MAX >> (64 - 8 * bytes)),
            (_, true) => {
                let half = 1i64 << (8 * bytes - 1);
                Scalar::signed(-half, half - 1)
            }
        }
    }

    pub(crate) fn as_constant(self) -> Option<u64> {
        (self.bits.mask == 0).then_some(self.bits.value)
    }

    /// Whether every number of the set is a multiple of `align` (a power of two).
    pub(crate) fn aligned(self, align: u64) -> bool {
        (self.bits.value | self.bits.mask) & (align - 1) == 0
    }

    /// Makes the three facts agree; `None` when no number satisfies them all.
    fn normalise(mut self) -> Option<Scalar> {
        for _ in 0..2 {
            // Known bits bound both intervals.
            self.umin = self.umin.max(self.bits.value);
            self.umax = self.umax.min(self.bits.value | self.bits.mask);
            self.smin = self.smin.max((self.bits.value | (self.bits.mask & SIGN)) as i64);
            self.smax = self.smax.min((self.bits.value | (self.bits.mask & !SIGN)) as i64);
            // A signed interval that does not cross zero is an unsigned one, and back.
            if self.smin >= 0 || self.smax < 0 {
                self.umin = self.umin.max(self.smin as u64);
                self.umax = self.umax.min(self.smax as u64);
            }
            if (self.umin ^ self.umax) & SIGN == 0 {
                self.smin = self.smin.max(self.umin as i64);
                self.smax = self.smax.min(self.umax as i64);
            }
            if self.umin > self.umax || self.smin > self.smax {
                return None;
            }
            let from_range = Tnum::range(self.umin, self.umax);
            if self.bits.conflicts(from_range) {
                return None;
            }
            self.bits = self.bits.intersect(from_range);
        }
        Some(self)
    }

    fn with_bits(self, bits: Tnum) -> Scalar {
        Scalar { bits, ..self }.normalise().unwrap_or(Scalar { bits, ..Scalar::UNKNOWN })
    }

    /// The six words that make the scalar, for hashing.
    pub(crate) fn words(self) -> [u64; 6] {
        let Scalar { umin, umax, smin, smax, bits } = self;
        [umin, umax, smin as u64, smax as u64, bits.value, bits.mask]
    }

    /// Every number of `self` is one of `other`.
    pub(crate) fn within(self, other: Scalar) -> bool {
        self.umin >= other.umin
            && self.umax <= other.umax
            && self.smin >= other.smin
            && self.smax <= other.smax
            && self.bits.within(other.bits)
    }

    /// The smallest scalar holding both.
    pub(crate) fn union(self, other: Scalar) -> Scalar {
        Scalar {
            umin: self.umin.min(other.umin),
            umax: self.umax.max(other.umax),
            smin: self.smin.min(other.smin),
            smax: self.smax.max(other.smax),
            bits: self.bits.union(other.bits),
        }
    }

    /// The set its known bits describe, forgetting the intervals: widening, so that a chain of
    /// joins converges in a few steps (each step can only unset known bits).
    pub(crate) fn widened(self) -> Scalar {
        Scalar::UNKNOWN.with_bits(self.bits)
    }

    /// The low 32 bits, zero-extended.
    pub(crate) fn low32(self) -> Scalar {
        if self.umax <= u64::from(u32::MAX) {
            return self;
        }
        Scalar::below(u64::from(u32::MAX)).with_bits(self.bits.low32())
    }

    /// The low `bits` bits, sign-extended.
    pub(crate) fn sign_extend(self, bits: u32) -> Scalar {
        if let Some(v) = self.as_constant() {
            let shift = 64 - bits;
            return Scalar::constant((((v << shift) as i64) >> shift) as u64);
        }
        let half = 1u64 << (bits - 1);
        if self.umax < half {
            return self;
        }
        Scalar::signed(-(half as i64), half as i64 - 1)
    }

    /// `self op other` at `width`, for every pair of numbers of the two sets.
    pub(crate) fn alu(self, op: AluOp, width: Width, other: Scalar) -> Scalar {
        if let (Some(a), Some(b)) = (self.as_constant(), other.as_constant()) {
            return Scalar::constant(op.eval(width, a, b));
        }
        match width {
            Width::W64 => self.alu64(op, other),
            Width::W32 => {
                let (a, b) = (self.low32(), other.low32());
                // Signed 32-bit operations see the operands sign-extended from bit 31, which
                // changes nothing while both are below 2^31.
                let positive = a.umax <= i32::MAX as u64 && b.umax <= i32::MAX as u64;
                let result = match op {
                    AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => match b.as_constant() {
                        Some(_) if op == AluOp::Arsh && !positive => Scalar::UNKNOWN,
                        Some(k) => a.alu64(op, Scalar::constant(k & 31)),
                        None => Scalar::UNKNOWN,
                    },
                    AluOp::SDiv | AluOp::SMod | AluOp::MovSx(_) if !positive => Scalar::UNKNOWN,
                    _ => a.alu64(op, b),
                };
                result.low32()
            }
        }
    }

    fn alu64(self, op: AluOp, b: Scalar) -> Scalar {
        let a = self;
        let shift = b.as_constant().map(|k| (k & 63) as u32);
        match op {
            AluOp::Mov => b,
            AluOp::MovSx(bits) => b.sign_extend(u32::from(bits)),
            AluOp::Add => {
                let mut r = Scalar { bits: a.bits.add(b.bits), ..Scalar::UNKNOWN };
                if let (Some(lo), Some(hi)) =
                    (a.umin.checked_add(b.umin), a.umax.checked_add(b.umax))
                {
                    (r.umin, r.umax) = (lo, hi);
                }
                if let (Some(lo), Some(hi)) =
                    (a.smin.checked_add(b.smin), a.smax.checked_add(b.smax))
                {
                    (r.smin, r.smax) = (lo, hi);
                }
                r.normalise().unwrap_or(Scalar::UNKNOWN)
            }
            AluOp::Sub => {
                let mut r = Scalar { bits: a.bits.sub(b.bits), ..Scalar::UNKNOWN };
                if a.umin >= b.umax {
                    (r.umin, r.umax) = (a.umin - b.umax, a.umax - b.umin);
                }
                if let (Some(lo), Some(hi)) =
                    (a.smin.checked_sub(b.smax), a.smax.checked_sub(b.smin))
                {
                    (r.smin, r.smax) = (lo, hi);
                }
                r.normalise().unwrap_or(Scalar::UNKNOWN)
            }
            AluOp::Mul => {
                let bits = a.bits.mul(b.bits);
                match a.umax.checked_mul(b.umax) {
                    Some(hi) => Scalar::unsigned(a.umin * b.umin, hi).with_bits(bits),
                    None => Scalar::UNKNOWN.with_bits(bits),
                }
            }
            AluOp::Div => match b.as_constant() {
                Some(0) => Scalar::constant(0),
                Some(c) => Scalar::unsigned(a.umin / c, a.umax / c),
                None => Scalar::below(a.umax),
            },
            AluOp::Mod => match b.as_constant() {
                Some(c) if c != 0 && a.umax >= c => Scalar::below(c - 1),
                Some(_) => a,
                None => Scalar::below(a.umax),
            },
            AluOp::SDiv => match b.as_constant() {
                Some(0) => Scalar::constant(0),
                Some(c) if (c as i64) > 0 => Scalar::signed(a.smin / c as i64, a.smax / c as i64),
                _ => Scalar::UNKNOWN,
            },
            AluOp::SMod => match b.as_constant() {
                Some(0) => a,
                Some(c) if c as i64 != i64::MIN => {
                    let m = (c as i64).abs() - 1;
                    if a.smin >= 0 {
                        Scalar::signed(0, a.smax.min(m))
                    } else {
                        Scalar::signed(-m, m)
                    }
                }
                _ => Scalar::UNKNOWN,
            },
            AluOp::And => Scalar::below(a.umax.min(b.umax)).with_bits(a.bits.and(b.bits)),
            AluOp::Or => {
                Scalar::unsigned(a.umin.max(b.umin), u64::MAX).with_bits(a.bits.or(b.bits))
            }
            AluOp::Xor => Scalar::UNKNOWN.with_bits(a.bits.xor(b.bits)),
            AluOp::Lsh => match shift {
                Some(k) if a.umax.leading_zeros() >= k => {
                    Scalar::unsigned(a.umin << k, a.umax << k).with_bits(a.bits.shl(k))
                }
                Some(k) => Scalar::UNKNOWN.with_bits(a.bits.shl(k)),
                None => Scalar::UNKNOWN,
            },
            AluOp::Rsh => match shift {
                Some(k) => Scalar::unsigned(a.umin >> k, a.umax >> k).with_bits(a.bits.shr(k)),
                None => Scalar::below(a.umax),
            },
            AluOp::Arsh => match shift {
                Some(k) => Scalar::signed(a.smin >> k, a.smax >> k).with_bits(a.bits.sar(k)),
                None => Scalar::signed(a.smin.min(0), a.smax.max(0)),
            },
        }
    }

    /// Refines `a` and `b` for the outcome `holds` of `a cond b`; `None` when that outcome is
    /// impossible.
    pub(crate) fn refine(
        a: Scalar,
        b: Scalar,
        cond: JmpCond,
        width: Width,
        holds: bool,
    ) -> Option<(Scalar, Scalar)> {
        if let (Some(x), Some(y)) = (a.as_constant(), b.as_constant()) {
            return (cond.holds(width, x, y) == holds).then_some((a, b));
        }
        // A 32-bit comparison says something about the 64-bit values only when both are 32-bit
        // numbers already (and, for signed conditions, non-negative as `i32`); otherwise the low
        // halves still decide whether the outcome is possible.
        let limit = if is_signed(cond) { i32::MAX as u64 } else { u64::from(u32::MAX) };
        let narrow = width == Width::W32 && (a.umax > limit || b.umax > limit);
        if narrow && is_signed(cond) {
            return Some((a, b));
        }
        let (x, y) = if narrow { (a.low32(), b.low32()) } else { (a, b) };
        let refined = match (cond, holds) {
            (JmpCond::Set, _) => refine_set(x, y, holds)?,
            (_, true) => refine64(x, y, cond)?,
            (_, false) => refine64(x, y, negate(cond))?,
        };
        Some(if narrow { (a, b) } else { refined })
    }
}

/// Refines for `a & b != 0` (`holds`) or `a & b == 0`.
fn refine_set(a: Scalar, b: Scalar, holds: bool) -> Option<(Scalar, Scalar)> {
    let (mut a, mut b) = (a, b);
    if holds {
        if (a.bits.value | a.bits.mask) & (b.bits.value | b.bits.mask) == 0 {
            return None;
        }
        if let Some(c) = b.as_constant()
            && c.is_power_of_two()
        {
            a = Scalar { bits: a.bits.intersect(Tnum { value: c, mask: !c }), ..a }.normalise()?;
        }
    } else {
        if a.bits.value & b.bits.value != 0 {
            return None;
        }
        if let Some(c) = b.as_constant() {
            a = a.clear_bits(c)?;
        }
        if let Some(c) = a.as_constant() {
            b = b.clear_bits(c)?;
        }
    }
    Some((a, b))
}

fn is_signed(cond: JmpCond) -> bool {
    matches!(cond, JmpCond::Sgt | JmpCond::Sge | JmpCond::Slt | JmpCond::Sle)
}

/// The condition that holds exactly when `cond` does not (`Set` has none; callers treat it by
/// hand).
fn negate(cond: JmpCond) -> JmpCond {
    match cond {
        JmpCond::Eq => JmpCond::Ne,
        JmpCond::Ne => JmpCond::Eq,
        JmpCond::Gt => JmpCond::Le,
        JmpCond::Le => JmpCond::Gt,
        JmpCond::Ge => JmpCond::Lt,
        JmpCond::Lt => JmpCond::Ge,
        JmpCond::Sgt => JmpCond::Sle,
        JmpCond::Sle => JmpCond::Sgt,
        JmpCond::Sge => JmpCond::Slt,
        JmpCond::Slt => JmpCond::Sge,
        JmpCond::Set => JmpCond::Set,
    }
}

fn refine64(a: Scalar, b: Scalar, cond: JmpCond) -> Option<(Scalar, Scalar)> {
    let (mut a, mut b) = (a, b);
    match cond {
        JmpCond::Eq => {
            let both = Scalar {
                umin: a.umin.max(b.umin),
                umax: a.umax.min(b.umax),
                smin: a.smin.max(b.smin),
                smax: a.smax.min(b.smax),
                bits: if a.bits.conflicts(b.bits) { return None } else { a.bits.intersect(b.bits) },
            }
            .normalise()?;
            return Some((both, both));
        }
        JmpCond::Ne => {
            // Only a constant can be cut off an end of the other's interval.
            if let Some(c) = b.as_constant() {
                a = a.without(c)?;
            }
            if let Some(c) = a.as_constant() {
                b = b.without(c)?;
            }
        }
        JmpCond::Gt | JmpCond::Ge => {
            let strict = u64::from(cond == JmpCond::Gt);
            a.umin = a.umin.max(b.umin.checked_add(strict)?);
            b.umax = b.umax.min(a.umax.checked_sub(strict)?);
        }
        JmpCond::Lt | JmpCond::Le => {
            let flipped = if cond == JmpCond::Lt { JmpCond::Gt } else { JmpCond::Ge };
            let (b2, a2) = refine64(b, a, flipped)?;
            return Some((a2, b2));
        }
        JmpCond::Sgt | JmpCond::Sge => {
            let strict = i64::from(cond == JmpCond::Sgt);
            a.smin = a.smin.max(b.smin.checked_add(strict)?);
            b.smax = b.smax.min(a.smax.checked_sub(strict)?);
        }
        JmpCond::Slt | JmpCond::Sle => {
            let flipped = if cond == JmpCond::Slt { JmpCond::Sgt } else { JmpCond::Sge };
            let (b2, a2) = refine64(b, a, flipped)?;
            return Some((a2, b2));
        }
        JmpCond::Set => return refine_set(a, b, true),
    }
    Some((a.normalise()?, b.normalise()?))
}

impl Scalar {
    /// The set without the number `c`, where that shrinks an interval.
    fn without(mut self, c: u64) -> Option<Scalar> {
        if self.umin == c {
            self.umin = c.checked_add(1)?;
        }
        if self.umax == c {
            self.umax = c.checked_sub(1)?;
        }
        if self.smin == c as i64 {
            self.smin = (c as i64).checked_add(1)?;
        }
        if self.smax == c as i64 {
            self.smax = (c as i64).checked_sub(1)?;
        }
        self.normalise()
    }

    /// Refines for `a & c == 0` (the negated `jset` with a constant).
    pub(crate) fn clear_bits(self, c: u64) -> Option<Scalar> {
        if self.bits.value & c != 0 {
            return None;
        }
        Scalar { bits: self.bits.intersect(Tnum { value: 0, mask: !c }), ..self }.normalise()
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(v) = self.as_constant() {
            return if (v as i64) < 0 && (v as i64) > -4096 {
                write!(f, "{}", v as i64)
            } else {
                write!(f, "{v:#x}")
            };
        }
        if *self == Scalar::UNKNOWN {
            return f.write_str("any scalar");
        }
        write!(f, "scalar")?;
        if self.umin != 0 || self.umax != u64::MAX {
            write!(f, " u[{:#x}, {:#x}]", self.umin, self.umax)?;
        }
        if (self.smin, self.smax) != (i64::MIN, i64::MAX)
            && (self.smin as u64, self.smax as u64) != (self.umin, self.umax)
        {
            write!(f, " s[{}, {}]", self.smin, self.smax)?;
        }
        let known = !self.bits.mask;
        if known != 0 && Tnum::range(self.umin, self.umax) != self.bits {
            write!(f, " bits {:#x}/{:#x}", self.bits.value, known)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests' seeded generator, with the draws these checks need.
    struct Rng(egpu_test_support::Rng);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0.next_u64()
        }
        fn edge(&mut self) -> u64 {
            const EDGES: [u64; 10] =
                [0, 1, 2, 7, 8, 255, 0x7fff_ffff, 0xffff_ffff, 1 << 63, u64::MAX];
            match self.next() % 4 {
                0 => EDGES[(self.next() % 10) as usize],
                1 => self.next() % 64,
                2 => (self.next() % 4096).wrapping_sub(2048),
                _ => self.next() >> (self.next() % 64),
            }
        }
        /// A scalar and a few of its members.
        fn scalar(&mut self) -> (Scalar, Vec<u64>) {
            let (x, y) = (self.edge(), self.edge());
            let s = match self.next() % 5 {
                0 => Scalar::constant(x),
                1 => Scalar::unsigned(x.min(y), x.max(y)),
                2 => Scalar::signed((x as i64).min(y as i64), (x as i64).max(y as i64)),
                3 => Scalar::UNKNOWN.alu(AluOp::And, Width::W64, Scalar::constant(y)),
                _ => Scalar::unsigned(x.min(y), x.max(y)).alu(
                    AluOp::Lsh,
                    Width::W64,
                    Scalar::constant(self.next() % 4),
                ),
            };
            let mut members: Vec<u64> =
                [s.umin, s.umax, s.smin as u64, s.smax as u64].into_iter().collect();
            for _ in 0..8 {
                let v = s.umin.wrapping_add(self.next() % (s.umax - s.umin).saturating_add(1));
                members.push(v);
            }
            members.retain(|&v| s.contains(v));
            (s, members)
        }
    }

    impl Scalar {
        fn contains(self, v: u64) -> bool {
            (self.umin..=self.umax).contains(&v)
                && (self.smin..=self.smax).contains(&(v as i64))
                && (v & !self.bits.mask) == self.bits.value
        }
    }

    #[test]
    fn alu_results_hold_every_concrete_result() {
        let mut rng = Rng(egpu_test_support::Rng::new(0x9e37_79b9_7f4a_7c15));
        for _ in 0..20_000 {
            let ((a, xs), (b, ys)) = (rng.scalar(), rng.scalar());
            let ops: Vec<AluOp> = AluOp::PLAIN.into_iter().chain([AluOp::MovSx(16)]).collect();
            let op = ops[(rng.next() % ops.len() as u64) as usize];
            for width in [Width::W64, Width::W32] {
                let r = a.alu(op, width, b);
                for &x in &xs {
                    for &y in &ys {
                        let v = op.eval(width, x, y);
                        assert!(
                            r.contains(v),
                            "{a} {op:?} {width:?} {b}: {x:#x}, {y:#x} -> {v:#x} not in {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn refinements_keep_every_pair_on_its_side() {
        let mut rng = Rng(egpu_test_support::Rng::new(0x1234_5678_9abc_def1));
        for _ in 0..20_000 {
            let ((a, xs), (b, ys)) = (rng.scalar(), rng.scalar());
            let cond = JmpCond::ALL[(rng.next() % 11) as usize];
            for width in [Width::W64, Width::W32] {
                for holds in [true, false] {
                    let refined = Scalar::refine(a, b, cond, width, holds);
                    for &x in &xs {
                        for &y in &ys {
                            if cond.holds(width, x, y) != holds {
                                continue;
                            }
                            let Some((ra, rb)) = refined else {
                                panic!(
                                    "{a} {cond:?} {width:?} {b} = {holds} judged impossible, but {x:#x}, {y:#x}"
                                )
                            };
                            assert!(
                                ra.contains(x) && rb.contains(y),
                                "{a} {cond:?} {b} = {holds}: {x:#x} {y:#x} lost: {ra}, {rb}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn masks_and_shifts_are_precise() {
        let any = Scalar::UNKNOWN;
        let byte = any.alu(AluOp::And, Width::W64, Scalar::constant(0xff));
        assert_eq!((byte.umin, byte.umax), (0, 255));
        let scaled = byte.alu(AluOp::Lsh, Width::W64, Scalar::constant(3));
        assert_eq!((scaled.umin, scaled.umax), (0, 255 * 8));
        assert!(scaled.aligned(8));
        let low = any.low32();
        assert_eq!(low.umax, u64::from(u32::MAX));
        let (lt, _) = Scalar::refine(any, Scalar::constant(10), JmpCond::Lt, Width::W64, true)
            .expect("possible");
        assert_eq!((lt.umin, lt.umax), (0, 9));
        assert!(
            Scalar::refine(
                Scalar::constant(5),
                Scalar::constant(3),
                JmpCond::Gt,
                Width::W64,
                false
            )
            .is_none()
        );
    }
}
