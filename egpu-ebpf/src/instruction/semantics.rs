//! What ALU operations and jump conditions compute on 64-bit values, as RFC 9669 defines it.

use super::{AluOp, JmpCond, Width};

impl AluOp {
    /// The result of `a op b` at `width`, as RFC 9669 defines it: 32-bit operations use the low
    /// halves and zero-extend the result, shift amounts are masked to the width, `x / 0 = 0`,
    /// `x % 0 = x`, and signed division of the minimum by -1 wraps. `b` is the second operand
    /// as the instruction sees it (an immediate sign-extended to 64 bits).
    pub fn eval(self, width: Width, a: u64, b: u64) -> u64 {
        match width {
            Width::W64 => match self {
                AluOp::Add => a.wrapping_add(b),
                AluOp::Sub => a.wrapping_sub(b),
                AluOp::Mul => a.wrapping_mul(b),
                AluOp::Div => a.checked_div(b).unwrap_or(0),
                AluOp::SDiv if b == 0 => 0,
                AluOp::SDiv => (a as i64).wrapping_div(b as i64) as u64,
                AluOp::Or => a | b,
                AluOp::And => a & b,
                AluOp::Lsh => a << (b & 63),
                AluOp::Rsh => a >> (b & 63),
                AluOp::Mod => a.checked_rem(b).unwrap_or(a),
                AluOp::SMod if b == 0 => a,
                AluOp::SMod => (a as i64).wrapping_rem(b as i64) as u64,
                AluOp::Xor => a ^ b,
                AluOp::Mov => b,
                AluOp::MovSx(8) => b as i8 as u64,
                AluOp::MovSx(16) => b as i16 as u64,
                AluOp::MovSx(_) => b as i32 as u64,
                AluOp::Arsh => ((a as i64) >> (b & 63)) as u64,
            },
            Width::W32 => {
                let (a, b) = (a as u32, b as u32);
                u64::from(match self {
                    AluOp::Add => a.wrapping_add(b),
                    AluOp::Sub => a.wrapping_sub(b),
                    AluOp::Mul => a.wrapping_mul(b),
                    AluOp::Div => a.checked_div(b).unwrap_or(0),
                    AluOp::SDiv if b == 0 => 0,
                    AluOp::SDiv => (a as i32).wrapping_div(b as i32) as u32,
                    AluOp::Or => a | b,
                    AluOp::And => a & b,
                    AluOp::Lsh => a << (b & 31),
                    AluOp::Rsh => a >> (b & 31),
                    AluOp::Mod => a.checked_rem(b).unwrap_or(a),
                    AluOp::SMod if b == 0 => a,
                    AluOp::SMod => (a as i32).wrapping_rem(b as i32) as u32,
                    AluOp::Xor => a ^ b,
                    AluOp::Mov => b,
                    AluOp::MovSx(8) => b as i8 as u32,
                    AluOp::MovSx(_) => b as i16 as u32,
                    AluOp::Arsh => ((a as i32) >> (b & 31)) as u32,
                })
            }
        }
    }
}

impl JmpCond {
    /// Evaluates the condition on two 64-bit values at the given width.
    pub fn holds(self, width: Width, a: u64, b: u64) -> bool {
        let (ua, ub, sa, sb) = match width {
            Width::W64 => (a, b, a as i64, b as i64),
            Width::W32 => (a as u32 as u64, b as u32 as u64, a as i32 as i64, b as i32 as i64),
        };
        match self {
            JmpCond::Eq => ua == ub,
            JmpCond::Ne => ua != ub,
            JmpCond::Gt => ua > ub,
            JmpCond::Ge => ua >= ub,
            JmpCond::Lt => ua < ub,
            JmpCond::Le => ua <= ub,
            JmpCond::Set => ua & ub != 0,
            JmpCond::Sgt => sa > sb,
            JmpCond::Sge => sa >= sb,
            JmpCond::Slt => sa < sb,
            JmpCond::Sle => sa <= sb,
        }
    }
}
