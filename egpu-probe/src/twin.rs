//! The native twin's arithmetic: the probe IR's semantics, for Rust values.
//!
//! `#[egpu::probe]` keeps the function it is given as a native Rust function (its twin), with
//! `+`, `-`, `*`, `/`, `%`, `<<`, `>>` and unary `-` rewritten to these functions, so that the
//! twin and the eBPF program agree on every input: arithmetic wraps, `x / 0 == 0`, `x % 0 == x`,
//! and a shift amount is taken modulo the width. Each function computes through
//! [`Expr::eval_binary`], the reference the code generator follows.

use super::build::Int;
use super::ir::{BinOp, Expr, UnOp};

fn binary<T: Int>(op: BinOp, a: T, b: u64) -> T {
    T::from_canonical(Expr::eval_binary(op, T::TY, a.to_canonical(), b))
}

macro_rules! ops {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name<T: Int>(a: T, b: T) -> T {
            binary(BinOp::$op, a, b.to_canonical())
        }
    )*};
}

ops! {
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
}

/// `a << b`, the amount modulo the width.
pub fn shl<T: Int, U: Int>(a: T, b: U) -> T {
    binary(BinOp::Shl, a, b.to_canonical())
}

/// `a >> b`, the amount modulo the width.
pub fn shr<T: Int, U: Int>(a: T, b: U) -> T {
    binary(BinOp::Shr, a, b.to_canonical())
}

/// `-a`, wrapping.
pub fn neg<T: Int>(a: T) -> T {
    T::from_canonical(Expr::eval_unary(UnOp::Neg, T::TY, a.to_canonical()))
}
