//! Operators on values: arithmetic, bitwise, shifts, comparisons, `&&`/`||` and `as`.

use super::values::{Int, Scalar, Val};
use super::{expr, val};
use crate::ir::{BinOp, CmpOp, Expr, UnOp};

fn binary<T: Scalar>(op: BinOp, a: Val<T>, b: Expr) -> Val<T> {
    val(Expr::Binary(op, T::TY, Box::new(expr(a)), Box::new(b)))
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name<T: Int>(a: Val<T>, b: Val<T>) -> Val<T> {
            let b = expr(b);
            binary(BinOp::$op, a, b)
        }
    )*};
}

binary_ops! {
    /// `a + b`, wrapping.
    add => Add;
    /// `a - b`, wrapping.
    sub => Sub;
    /// `a * b`, wrapping.
    mul => Mul;
    /// `a / b`; `a / 0 == 0`.
    div => Div;
    /// `a % b`; `a % 0 == a`.
    rem => Rem;
    /// `a & b`.
    bitand => And;
    /// `a | b`.
    bitor => Or;
    /// `a ^ b`.
    bitxor => Xor;
}

/// `a & b` on `bool`s (no short-circuit).
pub fn bool_and(a: Val<bool>, b: Val<bool>) -> Val<bool> {
    let b = expr(b);
    binary(BinOp::And, a, b)
}

/// `a << b`, the amount modulo the width.
pub fn shl<T: Int, U: Int>(a: Val<T>, b: Val<U>) -> Val<T> {
    let b = expr(b);
    binary(BinOp::Shl, a, b)
}

/// `a >> b` (arithmetic for signed types), the amount modulo the width.
pub fn shr<T: Int, U: Int>(a: Val<T>, b: Val<U>) -> Val<T> {
    let b = expr(b);
    binary(BinOp::Shr, a, b)
}

/// `-a`, wrapping.
pub fn neg<T: Int>(a: Val<T>) -> Val<T> {
    val(Expr::Unary(UnOp::Neg, T::TY, Box::new(expr(a))))
}

/// `!a`: bitwise, or logical on `bool`.
pub fn not<T: Scalar>(a: Val<T>) -> Val<T> {
    val(Expr::Unary(UnOp::Not, T::TY, Box::new(expr(a))))
}

macro_rules! comparisons {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name<T: Scalar>(a: Val<T>, b: Val<T>) -> Val<bool> {
            val(Expr::Cmp(CmpOp::$op, T::TY, Box::new(expr(a)), Box::new(expr(b))))
        }
    )*};
}

comparisons! {
    /// `a == b`.
    eq => Eq;
    /// `a != b`.
    ne => Ne;
    /// `a < b`.
    lt => Lt;
    /// `a <= b`.
    le => Le;
    /// `a > b`.
    gt => Gt;
    /// `a >= b`.
    ge => Ge;
}

/// `a && b`, short-circuit.
pub fn and(a: Val<bool>, b: Val<bool>) -> Val<bool> {
    val(Expr::And(Box::new(expr(a)), Box::new(expr(b))))
}

/// `a || b`, short-circuit.
pub fn or(a: Val<bool>, b: Val<bool>) -> Val<bool> {
    val(Expr::Or(Box::new(expr(a)), Box::new(expr(b))))
}

/// `a as T`.
pub fn cast<T: Scalar, U: Scalar>(a: Val<U>) -> Val<T> {
    if T::TY == U::TY {
        return val(expr(a));
    }
    val(Expr::Cast { to: T::TY, from: U::TY, arg: Box::new(expr(a)) })
}
