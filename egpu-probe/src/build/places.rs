//! Places: stack buffers, struct fields, the context, and values passed by reference.

use bytemuck::Pod;

use super::values::{Loc, Scalar, Val, lit_zero};
use super::{BuildError, expr, fail, push, val, with};
use crate::ir::{Buf, BufDecl, Expr, Place, Stmt, Ty};

/// `place`, `by` bytes further.
fn shifted(place: Place, by: u32) -> Place {
    match place {
        Place::Ctx(o) => Place::Ctx(o + by),
        Place::Buf(b, o) => Place::Buf(b, o + by),
        Place::Value(p, o) => Place::Value(p, o + by),
    }
}

/// What can be passed by reference to a map operation: a scalar value (stored into a stack
/// buffer first) or a place.
pub trait AsPlace<T> {
    /// The place holding the value.
    fn place(self, name: &str) -> Place;
}

impl<T: Scalar> AsPlace<T> for Val<T> {
    fn place(self, name: &str) -> Place {
        spill(name, self)
    }
}

impl<T: Pod> AsPlace<T> for Loc<T> {
    fn place(self, _: &str) -> Place {
        self.place
    }
}

/// A new stack buffer for a `T`, not yet written.
pub(super) fn new_buffer<T: Pod>(name: &str) -> Buf {
    let (size, align) = (size_of::<T>() as u32, align_of::<T>() as u32);
    with(|s| {
        s.bufs.push(BufDecl { name: name.into(), size, align });
        Buf(s.bufs.len() as u32 - 1)
    })
}

/// The probe's buffer of zeros for a `T` (of its size and alignment), shared by every insert of
/// a missing key's zero value, each of which writes the zeros again first: a probe that adds to
/// several fields of one map (a `fetch_add_field` each) needs one such buffer, not one each.
pub(super) fn zero_buffer<T: Pod>() -> Buf {
    let (size, align) = (size_of::<T>() as u32, align_of::<T>() as u32);
    if let Some(buf) = with(|s| s.zeros.get(&(size, align)).copied()) {
        return buf;
    }
    let buf = new_buffer::<T>("zero value");
    with(|s| s.zeros.insert((size, align), buf));
    buf
}

/// The stores that zero a buffer of a `T`, in the widest aligned pieces.
pub(super) fn zero_stores<T: Pod>(buf: Buf) -> Vec<Stmt> {
    let (size, align) = (size_of::<T>() as u32, align_of::<T>() as u32);
    let mut stores = Vec::new();
    let mut off = 0;
    while off < size {
        let ty = [Ty::U64, Ty::U32, Ty::U16, Ty::U8]
            .into_iter()
            .find(|t| t.bytes() <= align && off + t.bytes() <= size && off % t.bytes() == 0)
            .unwrap_or(Ty::U8);
        stores.push(Stmt::Store(ty, Place::Buf(buf, off), Expr::Const(ty, 0)));
        off += ty.bytes();
    }
    stores
}

/// A new stack buffer for a `T`, zero-filled (a struct literal fills it next).
pub fn buffer<T: Pod>(name: &str) -> Loc<T> {
    let buf = new_buffer::<T>(name);
    zero_stores::<T>(buf).into_iter().for_each(push);
    Loc::new(Place::Buf(buf, 0))
}

/// The place of the field `f` picks out of the `S` at `loc`.
fn field_place<S: Pod, F>(loc: Loc<S>, f: impl FnOnce(&S) -> &F) -> Option<Place> {
    match offset_in(f) {
        Some(off) => Some(shifted(loc.place, off)),
        None => {
            fail(BuildError::Field);
            None
        }
    }
}

/// Reads the scalar field `f` picks out of the `S` at `loc`.
pub fn field<S: Pod, F: Scalar>(loc: Loc<S>, f: impl FnOnce(&S) -> &F) -> Val<F> {
    match field_place(loc, f) {
        Some(place) => load_place(place),
        None => lit_zero(),
    }
}

/// Stores `v` into the scalar field `f` picks out of the `S` at `loc`.
pub fn store_field<S: Pod, F: Scalar>(loc: Loc<S>, f: impl FnOnce(&S) -> &F, v: Val<F>) {
    if let Some(place) = field_place(loc, f) {
        let e = expr(v);
        push(Stmt::Store(F::TY, place, e));
    }
}

/// The scalar at `loc`.
pub fn load<T: Scalar>(loc: Loc<T>) -> Val<T> {
    load_place(loc.place)
}

/// The scalar at `place`.
fn load_place<T: Scalar>(place: Place) -> Val<T> {
    if T::TY == Ty::Bool {
        fail(BuildError::Field);
        return lit_zero();
    }
    val(Expr::Load(T::TY, place))
}

/// The byte offset of the field `f` picks out of a `C`, which must lie inside it.
pub(super) fn offset_in<C: Pod, F>(f: impl FnOnce(&C) -> &F) -> Option<u32> {
    egpu_maps::field_offset(f).ok().map(|off| off as u32)
}

/// A scalar field of the context (`ctx.grid[0]`), found by `f` on a `C`.
pub fn ctx_field<C: Pod, T: Scalar>(f: impl FnOnce(&C) -> &T) -> Val<T> {
    match offset_in(f) {
        Some(off) => val(Expr::Load(T::TY, Place::Ctx(off))),
        None => {
            fail(BuildError::Field);
            lit_zero()
        }
    }
}

/// Stores `v` into a scalar field of the context (user contexts only; the verifier refuses a
/// write to any other).
pub fn ctx_store<C: Pod, T: Scalar>(f: impl FnOnce(&C) -> &T, v: Val<T>) {
    match offset_in(f) {
        Some(off) => {
            let e = expr(v);
            push(Stmt::Store(T::TY, Place::Ctx(off), e));
        }
        None => fail(BuildError::Field),
    }
}

/// A new stack buffer holding the scalar `v`, for a key or a value passed by reference.
/// An array's index in the frame, for the map call pushed next (which is its only reader): one
/// buffer serves every index of the probe, so that a probe with many lookups keeps a small frame
/// (its stack is at most 512 bytes).
pub(super) fn spill_index(index: Val<u32>) -> Place {
    let buf = with(|s| {
        *s.index.get_or_insert_with(|| {
            s.bufs.push(BufDecl { name: "index".into(), size: 4, align: 4 });
            Buf(s.bufs.len() as u32 - 1)
        })
    });
    let e = expr(index);
    push(Stmt::Store(u32::TY, Place::Buf(buf, 0), e));
    Place::Buf(buf, 0)
}

pub(super) fn spill<T: Scalar>(name: &str, v: Val<T>) -> Place {
    let buf = with(|s| {
        s.bufs.push(BufDecl { name: name.into(), size: T::TY.bytes(), align: T::TY.bytes() });
        Buf(s.bufs.len() as u32 - 1)
    });
    let e = expr(v);
    push(Stmt::Store(T::TY, Place::Buf(buf, 0), e));
    Place::Buf(buf, 0)
}
