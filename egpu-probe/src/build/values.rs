//! The typed handles of the builder ([`Val`], [`Local`], [`Loc`]), the [`Scalar`] types they
//! hold, and constants and variables.

use std::fmt;
use std::marker::PhantomData;

use super::{expr, push, val, with};
use crate::ir::{Expr, Place, Stmt, Ty, Var};

/// A Rust scalar type of Probe Rust.
pub trait Scalar: Copy + 'static {
    /// Its IR type.
    const TY: Ty;
    /// Its canonical 64-bit form (see the IR's docs).
    fn to_canonical(self) -> u64;
    /// The value whose canonical form is `v`.
    fn from_canonical(v: u64) -> Self;
}

/// The integer types.
pub trait Int: Scalar {}

macro_rules! scalars {
    ($($t:ty => $ty:ident),*) => {$(
        impl Scalar for $t {
            const TY: Ty = Ty::$ty;
            fn to_canonical(self) -> u64 {
                self as i128 as u64
            }
            fn from_canonical(v: u64) -> $t {
                v as $t
            }
        }
        impl Int for $t {}
    )*};
}
scalars!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, usize => U64,
         i8 => I8, i16 => I16, i32 => I32, i64 => I64, isize => I64);

impl Scalar for bool {
    const TY: Ty = Ty::Bool;
    fn to_canonical(self) -> u64 {
        u64::from(self)
    }
    fn from_canonical(v: u64) -> bool {
        v != 0
    }
}

/// Declares a typed handle of the builder: a `Copy` wrapper of an IR reference, whatever `T`
/// is (derives would ask `T: Copy`).
macro_rules! handles {
    ($($(#[$doc:meta])* $name:ident($field:ident: $ty:ty);)*) => {$(
        $(#[$doc])*
        pub struct $name<T> {
            pub(super) $field: $ty,
            _t: PhantomData<T>,
        }

        impl<T> $name<T> {
            /// The handle of `$field`.
            pub(super) fn new($field: $ty) -> $name<T> {
                $name { $field, _t: PhantomData }
            }
        }

        impl<T> Clone for $name<T> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<T> Copy for $name<T> {}

        impl<T> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.$field)
            }
        }
    )*};
}

handles! {
    /// A value of type `T` in the probe being built: an expression of its IR.
    Val(id: usize);
    /// A scalar variable of type `T` of the probe being built.
    Local(var: Var);
    /// A place holding a `T` (a struct, an array or a scalar): a stack buffer, a map value a
    /// lookup found, or the context, at an offset.
    Loc(place: Place);
}

/// A constant.
pub fn lit<T: Scalar>(v: T) -> Val<T> {
    val(Expr::Const(T::TY, v.to_canonical()))
}

/// The value of a variable.
pub fn get<T: Scalar>(l: Local<T>) -> Val<T> {
    val(Expr::Var(l.var))
}

/// A new variable, set to `init`.
pub fn local<T: Scalar>(init: Val<T>) -> Local<T> {
    let l = local_uninit::<T>();
    set(l, init);
    l
}

/// A new variable, set later (by every branch of an `if` or `match` expression).
pub fn local_uninit<T: Scalar>() -> Local<T> {
    let var = with(|s| {
        s.vars.push(T::TY);
        Var(s.vars.len() as u32 - 1)
    });
    Local::new(var)
}

/// `l = v`.
pub fn set<T: Scalar>(l: Local<T>, v: Val<T>) {
    let e = expr(v);
    push(Stmt::Set(l.var, e));
}

/// The zero of `T`.
pub(super) fn lit_zero<T: Scalar>() -> Val<T> {
    val(Expr::Const(T::TY, 0))
}
