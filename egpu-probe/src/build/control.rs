//! Control flow: `if`, counted loops, `break`, `continue`, `return`, and the inlining of
//! helpers.

use super::ops::cast;
use super::values::{Int, Scalar, Val, get, lit_zero, local_uninit};
use super::{BuildError, STATE, block, expr, fail, push, with};
use crate::ir::{Expr, SourceLoc, Stmt, Ty};

/// The code recorded next comes from `file:line:column` of the Rust source (`#[egpu::probe]`
/// calls it before each statement, with `file!()`, `line!()` and `column!()` at its first
/// token).
pub fn at(file: &'static str, line: u32, column: u32) {
    set_loc(SourceLoc { file, line, column });
}

/// Marks `loc` in force, unless it already is.
fn set_loc(loc: SourceLoc) {
    let changed = with(|s| s.loc.replace(loc) != Some(loc));
    if changed {
        push(Stmt::At(loc));
    }
}

/// `if cond { then() } else { otherwise() }`.
pub fn if_(cond: Val<bool>, then: impl FnOnce(), otherwise: impl FnOnce()) {
    let c = expr(cond);
    let then = block(then);
    let otherwise = block(otherwise);
    push(Stmt::If(c, then, otherwise));
}

/// `for i in 0..count { body(i) }`, with `count` known when the probe is built.
pub fn repeat<T: Int>(count: T, body: impl FnOnce(Val<T>)) {
    let count = count.to_canonical();
    let Ok(n) = u32::try_from(count) else {
        fail(BuildError::Loop { count });
        return;
    };
    let counter = local_uninit::<u32>();
    let body = block(|| body(cast::<T, u32>(get(counter))));
    push(Stmt::Repeat(counter.var, n, body));
}

/// How deep helpers are inlined into one another, at most.
const MAX_INLINE_DEPTH: u32 = 16;

/// A helper being inlined (see `#[egpu::helper]`): deeper than 16 levels means helpers call each
/// other in a cycle, which a probe cannot do. When it ends, the code recorded next is the
/// caller's statement's again (the helper's statements have their own locations).
#[derive(Debug)]
pub struct Inline {
    caller: Option<SourceLoc>,
}

thread_local! {
    static INLINE_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl Inline {
    /// Enters helper `name`; `None` (with the error recorded) when that is too deep.
    pub fn enter(name: &str) -> Option<Inline> {
        let depth = INLINE_DEPTH.with(|d| d.get());
        if depth >= MAX_INLINE_DEPTH {
            fail(BuildError::Recursion(name.to_owned()));
            return None;
        }
        INLINE_DEPTH.with(|d| d.set(depth + 1));
        Some(Inline { caller: with(|s| s.loc) })
    }
}

/// What an abandoned inlining returns: nothing, or a zero.
pub trait Placeholder {
    /// The placeholder.
    fn placeholder() -> Self;
}

impl Placeholder for () {
    fn placeholder() {}
}

impl<T: Scalar> Placeholder for Val<T> {
    fn placeholder() -> Val<T> {
        lit_zero()
    }
}

impl Drop for Inline {
    fn drop(&mut self) {
        INLINE_DEPTH.with(|d| d.set(d.get() - 1));
        // Not `with`: a drop while the builder's state is borrowed (unwinding) must not panic.
        let building = STATE.with(|s| s.try_borrow().is_ok_and(|s| s.is_some()));
        if let Some(caller) = self.caller
            && building
        {
            set_loc(caller);
        }
    }
}

/// `break` out of the innermost loop.
pub fn brk() {
    push(Stmt::Break);
}

/// `continue` with the innermost loop's next iteration.
pub fn cont() {
    push(Stmt::Continue);
}

/// `return v` (the value is the program's result).
pub fn ret<T: Scalar>(v: Val<T>) {
    let e = expr(v);
    push(Stmt::Return(e));
}

/// `return` from a probe without a result.
pub fn ret_unit() {
    push(Stmt::Return(Expr::Const(Ty::U64, 0)));
}
