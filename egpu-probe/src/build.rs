//! The builder that `#[egpu::probe]`'s generated code drives, and [`Probe`], the handle it
//! gives users.
//!
//! The macro turns a probe's body into Rust code that calls the functions of this module (under
//! `egpu::__private::probe`) instead of computing: `a + b` becomes `add(a, b)` on typed handles
//! ([`Val<T>`]), `if` becomes [`if_`] with closures for its branches, and so on. rustc type-checks
//! that code, so every type, size and offset in the probe (a map's key and value types, a
//! context field's offset) comes from rustc. Running it, the first time the probe is used,
//! records the probe IR on a thread-local builder; [`Probe`] then compiles and verifies it once.

use std::cell::RefCell;
use std::collections::HashMap as StdHashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::OnceLock;

use bytemuck::Pod;
use egpu_ebpf::verifier::{Verified, VerifyError, verify};
use egpu_ebpf::{AttachPoint, MapDef, Program, helpers::id};
use egpu_maps::{Array, HashMap, MapError, PerCpuArray, PerCpuHashMap, RawMap, RingBuf};
use thiserror::Error;

use super::ir::{
    Arg, BinOp, Buf, BufDecl, CmpOp, Expr, MapRef, Place, ProbeIr, Ptr, Stmt, Ty, UnOp, Var,
};
use super::{CompileError, compile};

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
            $field: $ty,
            _t: PhantomData<T>,
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
fn new_buffer<T: Pod>(name: &str) -> Buf {
    let (size, align) = (size_of::<T>() as u32, align_of::<T>() as u32);
    with(|s| {
        s.bufs.push(BufDecl { name: name.into(), size, align });
        Buf(s.bufs.len() as u32 - 1)
    })
}

/// The stores that zero a buffer of a `T`, in the widest aligned pieces.
fn zero_stores<T: Pod>(buf: Buf) -> Vec<Stmt> {
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
    Loc { place: Place::Buf(buf, 0), _t: PhantomData }
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

fn load_place<T: Scalar>(place: Place) -> Val<T> {
    if T::TY == Ty::Bool {
        fail(BuildError::Field);
        return lit_zero();
    }
    val(Expr::Load(T::TY, place))
}

/// What the builder has recorded so far.
struct State {
    attach: AttachPoint,
    exprs: Vec<Expr>,
    /// The statement lists being filled, innermost last.
    blocks: Vec<Vec<Stmt>>,
    vars: Vec<Ty>,
    bufs: Vec<BufDecl>,
    ptrs: u32,
    maps: Vec<(MapDef, RawMap)>,
    /// Map statics already in the table, by address.
    map_index: StdHashMap<usize, u32>,
    error: Option<BuildError>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| {
        f(s.borrow_mut().as_mut().expect("probe builder functions run inside Probe::build"))
    })
}

fn val<T>(e: Expr) -> Val<T> {
    let e = e.folded();
    with(|s| {
        s.exprs.push(e);
        Val { id: s.exprs.len() - 1, _t: PhantomData }
    })
}

fn expr<T>(v: Val<T>) -> Expr {
    with(|s| s.exprs[v.id].clone())
}

fn push(stmt: Stmt) {
    with(|s| s.blocks.last_mut().expect("a block").push(stmt));
}

/// Runs `f` with a new statement list and returns it.
fn block(f: impl FnOnce()) -> Vec<Stmt> {
    with(|s| s.blocks.push(Vec::new()));
    f();
    with(|s| s.blocks.pop().expect("the block pushed"))
}

fn fail(e: BuildError) {
    with(|s| {
        s.error.get_or_insert(e);
    });
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
    Local { var, _t: PhantomData }
}

/// `l = v`.
pub fn set<T: Scalar>(l: Local<T>, v: Val<T>) {
    let e = expr(v);
    push(Stmt::Set(l.var, e));
}

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
/// other in a cycle, which a probe cannot do.
#[derive(Debug)]
pub struct Inline(());

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
        Some(Inline(()))
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

/// The byte offset of the field `f` picks out of a `C`, which must lie inside it.
fn offset_in<C: Pod, F>(f: impl FnOnce(&C) -> &F) -> Option<u32> {
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

fn lit_zero<T: Scalar>() -> Val<T> {
    val(Expr::Const(T::TY, 0))
}

/// A new stack buffer holding the scalar `v`, for a key or a value passed by reference.
fn spill<T: Scalar>(name: &str, v: Val<T>) -> Place {
    let buf = with(|s| {
        s.bufs.push(BufDecl { name: name.into(), size: T::TY.bytes(), align: T::TY.bytes() });
        Buf(s.bufs.len() as u32 - 1)
    });
    let e = expr(v);
    push(Stmt::Store(T::TY, Place::Buf(buf, 0), e));
    Place::Buf(buf, 0)
}

/// Enters `raw` in the probe's map table (once per map) and returns its reference.
fn map_ref(addr: usize, name: &str, raw: Result<&RawMap, MapError>) -> Option<MapRef> {
    let raw = match raw {
        Ok(raw) => raw.clone(),
        Err(e) => {
            fail(BuildError::Map(e.to_string()));
            return None;
        }
    };
    Some(with(|s| {
        if let Some(&i) = s.map_index.get(&addr) {
            return MapRef(i);
        }
        let g = *raw.geometry();
        let def = MapDef {
            name: name.into(),
            kind: g.kind,
            key_size: g.key_size,
            value_size: g.value_size,
            capacity: g.capacity,
        };
        s.maps.push((def, raw));
        let i = s.maps.len() as u32 - 1;
        s.map_index.insert(addr, i);
        MapRef(i)
    }))
}

fn new_ptr() -> Ptr {
    with(|s| {
        s.ptrs += 1;
        Ptr(s.ptrs - 1)
    })
}

/// Maps with keys, which probes update by key: hash maps and per-CPU hash maps (a probe updates
/// the shard of the CPU or SM it runs on).
pub trait KeyedMap: Sync + 'static {
    /// The key type.
    type Key: Pod;
    /// The value type.
    type Value: Pod;
    /// The map's memory.
    fn raw_map(&self) -> Result<&RawMap, MapError>;
}

impl<K: Pod, V: Pod> KeyedMap for HashMap<K, V> {
    type Key = K;
    type Value = V;
    fn raw_map(&self) -> Result<&RawMap, MapError> {
        self.try_raw()
    }
}

impl<K: Pod, V: Pod> KeyedMap for PerCpuHashMap<K, V> {
    type Key = K;
    type Value = V;
    fn raw_map(&self) -> Result<&RawMap, MapError> {
        self.try_raw()
    }
}

/// Maps indexed by a `u32`: arrays and per-CPU arrays.
pub trait IndexedMap: Sync + 'static {
    /// The value type.
    type Value: Pod;
    /// The map's memory.
    fn raw_map(&self) -> Result<&RawMap, MapError>;
}

impl<V: Pod> IndexedMap for Array<V> {
    type Value = V;
    fn raw_map(&self) -> Result<&RawMap, MapError> {
        self.try_raw()
    }
}

impl<V: Pod> IndexedMap for PerCpuArray<V> {
    type Value = V;
    fn raw_map(&self) -> Result<&RawMap, MapError> {
        self.try_raw()
    }
}

/// `map.fetch_add(&key, delta)` on a hash map of integer values: looks the key up, inserting a
/// zero value first when it is absent (unless another writer just did), and adds atomically.
pub fn hash_fetch_add<M: KeyedMap>(
    map: &'static M,
    name: &str,
    key: impl AsPlace<M::Key>,
    delta: Val<M::Value>,
) where
    M::Value: Int,
{
    hash_fetch_add_field(map, name, key, |v| v, delta);
}

/// `map.fetch_add_field(&key, |v| &v.field, delta)`: as [`hash_fetch_add`], on one integer
/// field of a struct value.
pub fn hash_fetch_add_field<M: KeyedMap, W: Int>(
    map: &'static M,
    name: &str,
    key: impl AsPlace<M::Key>,
    field: impl FnOnce(&M::Value) -> &W,
    delta: Val<W>,
) {
    let Some(m) = map_ref(map as *const M as usize, name, map.raw_map()) else { return };
    if !matches!(W::TY, Ty::U32 | Ty::U64 | Ty::I32 | Ty::I64) {
        fail(BuildError::Atomic(W::TY));
        return;
    }
    let Some(off) = offset_in(field) else {
        fail(BuildError::Field);
        return;
    };
    let key = key.place("key");
    // The zero value is written only when the key is missing.
    let zero_buf = new_buffer::<M::Value>("value");
    let zero = Place::Buf(zero_buf, 0);
    let mut zeroing = zero_stores::<M::Value>(zero_buf);
    let delta = expr(delta);
    let ptr = new_ptr();
    let add = vec![Stmt::AtomicAdd(W::TY, Place::Value(ptr, off), delta)];
    let insert = Expr::Call(
        Ty::I64,
        id::MAP_UPDATE_ELEM,
        vec![Arg::Map(m), Arg::Addr(key), Arg::Addr(zero), Arg::Value(Expr::Const(Ty::U64, 1))],
    );
    let retry = Stmt::Lookup { map: m, key, ptr, found: add.clone(), missing: vec![] };
    zeroing.extend([Stmt::Eval(insert), retry]);
    push(Stmt::Lookup { map: m, key, ptr, found: add, missing: zeroing });
}

/// `array.fetch_add_field(index, |v| &v.field, delta)`: an atomic add on one integer field of an
/// element, when the index is in range.
pub fn array_fetch_add_field<M: IndexedMap, W: Int>(
    map: &'static M,
    name: &str,
    index: Val<u32>,
    field: impl FnOnce(&M::Value) -> &W,
    delta: Val<W>,
) {
    let Some(m) = map_ref(map as *const M as usize, name, map.raw_map()) else { return };
    if !matches!(W::TY, Ty::U32 | Ty::U64 | Ty::I32 | Ty::I64) {
        fail(BuildError::Atomic(W::TY));
        return;
    }
    let Some(off) = offset_in(field) else {
        fail(BuildError::Field);
        return;
    };
    let key = spill("index", index);
    let delta = expr(delta);
    let ptr = new_ptr();
    push(Stmt::Lookup {
        map: m,
        key,
        ptr,
        found: vec![Stmt::AtomicAdd(W::TY, Place::Value(ptr, off), delta)],
        missing: vec![],
    });
}

/// `map.insert(&key, &value)` on a hash map (`bpf_map_update_elem`, any flags).
pub fn hash_insert<M: KeyedMap>(
    map: &'static M,
    name: &str,
    key: impl AsPlace<M::Key>,
    value: impl AsPlace<M::Value>,
) {
    let Some(m) = map_ref(map as *const M as usize, name, map.raw_map()) else { return };
    let key = key.place("key");
    let value = value.place("value");
    push(Stmt::Eval(Expr::Call(
        Ty::I64,
        id::MAP_UPDATE_ELEM,
        vec![Arg::Map(m), Arg::Addr(key), Arg::Addr(value), Arg::Value(Expr::Const(Ty::U64, 0))],
    )));
}

/// `map.remove(&key)` on a hash map (`bpf_map_delete_elem`).
pub fn hash_remove<M: KeyedMap>(map: &'static M, name: &str, key: impl AsPlace<M::Key>) {
    let Some(m) = map_ref(map as *const M as usize, name, map.raw_map()) else { return };
    let key = key.place("key");
    push(Stmt::Eval(Expr::Call(Ty::I64, id::MAP_DELETE_ELEM, vec![Arg::Map(m), Arg::Addr(key)])));
}

/// `if let Some(v) = map.get(&key) { found(v) } else { missing() }`: the value in place, read
/// only.
pub fn hash_get<K: Pod, V: Pod>(
    map: &'static HashMap<K, V>,
    name: &str,
    key: impl AsPlace<K>,
    found: impl FnOnce(Loc<V>),
    missing: impl FnOnce(),
) {
    let Some(m) = map_ref(map as *const _ as usize, name, map.try_raw()) else { return };
    let key = key.place("key");
    let ptr = new_ptr();
    let found = block(|| found(Loc { place: Place::Value(ptr, 0), _t: PhantomData }));
    let missing = block(missing);
    push(Stmt::Lookup { map: m, key, ptr, found, missing });
}

/// `ring.output(&record)` (`bpf_ringbuf_output`): a full ring drops the record and counts it.
pub fn ring_output<T: Pod>(ring: &'static RingBuf<T>, name: &str, record: impl AsPlace<T>) {
    let Some(m) = map_ref(ring as *const _ as usize, name, ring.try_raw()) else { return };
    let record = record.place("record");
    push(Stmt::Eval(Expr::Call(
        Ty::I64,
        id::RINGBUF_OUTPUT,
        vec![
            Arg::Map(m),
            Arg::Addr(record),
            Arg::Value(Expr::Const(Ty::U64, size_of::<T>() as u64)),
            Arg::Value(Expr::Const(Ty::U64, 0)),
        ],
    )));
}

/// `array.fetch_add(index, delta)`: an atomic add on an element, when the index is in range.
pub fn array_fetch_add<M: IndexedMap>(
    map: &'static M,
    name: &str,
    index: Val<u32>,
    delta: Val<M::Value>,
) where
    M::Value: Int,
{
    array_fetch_add_field(map, name, index, |v| v, delta);
}

/// An argument of `print!`: its 64-bit value and whether it is signed.
pub fn print_arg<T: Scalar>(v: Val<T>) -> (Val<u64>, bool) {
    (cast::<u64, T>(v), T::TY.signed())
}

/// `egpu::print!(format, args..)`: a record in the process's print ring.
pub fn print(format: &'static str, args: &[(Val<u64>, bool)]) {
    use super::print::{MAX_ARGS, PRINTS, PrintRecord, format_id};
    if args.len() > MAX_ARGS {
        fail(BuildError::Print(args.len()));
        return;
    }
    let record = buffer::<PrintRecord>("print");
    store_field(record, |r| &r.format, lit(format_id(format)));
    let signed = args.iter().enumerate().fold(0u32, |m, (i, &(_, s))| m | u32::from(s) << i);
    store_field(record, |r| &r.signed, lit(signed));
    for (i, &(v, _)) in args.iter().enumerate() {
        store_field(record, |r| &r.args[i], v);
    }
    ring_output(&PRINTS, "prints", record);
}

/// Probe Rust's helpers, as the builder records them.
pub mod helpers {
    use super::*;

    /// Time in ns: the monotonic clock on the CPU, `%globaltimer` on the GPU.
    pub fn ktime_ns() -> Val<u64> {
        val(Expr::Call(Ty::U64, id::KTIME_GET_NS, vec![]))
    }

    /// The CPU (or, on the GPU, the SM) the probe runs on.
    pub fn cpu_id() -> Val<u32> {
        val(Expr::Call(Ty::U32, id::GET_SMP_PROCESSOR_ID, vec![]))
    }

    /// A pseudo-random `u32`.
    pub fn prandom_u32() -> Val<u32> {
        val(Expr::Call(Ty::U32, id::GET_PRANDOM_U32, vec![]))
    }
}

/// Why a probe could not be built.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The attach point named in `#[egpu::probe(..)]` is unknown.
    #[error("{0}")]
    Attach(String),
    /// A context field expression that does not pick a field of the context.
    #[error("a context access does not name a field of the context")]
    Field,
    /// A loop bound that does not fit in 32 bits.
    #[error("a loop runs {count} times, more than a probe may")]
    Loop {
        /// The bound.
        count: u64,
    },
    /// An atomic operation on a type without one.
    #[error("no atomic add on `{}` values: use u32, u64, i32 or i64", .0.name())]
    Atomic(Ty),
    /// Helpers call each other in a cycle (or more than 16 deep).
    #[error("helper `{0}` is inlined more than 16 deep: helpers cannot call each other in a cycle")]
    Recursion(String),
    /// A `print!` with more arguments than a record holds.
    #[error("`print!` takes at most 6 arguments, not {0}")]
    Print(usize),
    /// A map could not be created.
    #[error("a map of the probe could not be created: {0}")]
    Map(String),
    /// The code generator refused the probe.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The verifier refused the generated program (a bug in the code generator).
    #[error("the verifier refused the generated program: {0}")]
    Verify(#[from] VerifyError),
}

/// A probe compiled from a Rust function by `#[egpu::probe]`: its program and maps are built
/// the first time they are asked for.
pub struct Probe {
    name: &'static str,
    build: fn(),
    attach: fn() -> Result<AttachPoint, BuildError>,
    built: OnceLock<Result<Built, BuildError>>,
}

struct Built {
    verified: Verified,
    maps: Vec<RawMap>,
    ir: ProbeIr,
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Probe {
    /// A probe built by `build` (generated code) for the attach point `attach` gives.
    #[doc(hidden)]
    pub const fn new(
        name: &'static str,
        attach: fn() -> Result<AttachPoint, BuildError>,
        build: fn(),
    ) -> Probe {
        Probe { name, build, attach, built: OnceLock::new() }
    }

    /// The probe function's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    fn built(&self) -> Result<&Built, BuildError> {
        self.built.get_or_init(|| self.make()).as_ref().map_err(Clone::clone)
    }

    fn make(&self) -> Result<Built, BuildError> {
        let attach = (self.attach)()?;
        let state = State {
            attach,
            exprs: Vec::new(),
            blocks: vec![Vec::new()],
            vars: Vec::new(),
            bufs: Vec::new(),
            ptrs: 0,
            maps: Vec::new(),
            map_index: StdHashMap::new(),
            error: None,
        };
        let previous = STATE.with(|s| s.borrow_mut().replace(state));
        (self.build)();
        let state = STATE
            .with(|s| std::mem::replace(&mut *s.borrow_mut(), previous))
            .expect("the builder's state");
        if let Some(e) = state.error {
            return Err(e);
        }
        let (defs, maps): (Vec<MapDef>, Vec<RawMap>) = state.maps.into_iter().unzip();
        let body = state.blocks.into_iter().next().unwrap_or_default();
        let ir = ProbeIr {
            attach: state.attach,
            vars: state.vars,
            bufs: state.bufs,
            ptrs: state.ptrs,
            maps: defs,
            body,
        };
        let verified = verify(&compile(&ir)?)?;
        Ok(Built { verified, maps, ir })
    }

    /// The eBPF program, compiled and verified (once, the first time the probe is used): what
    /// every engine takes ([`Vm`](egpu_vm::Vm), host probe sets, the device instrumenter, packs).
    pub fn verified(&self) -> Result<&Verified, BuildError> {
        self.built().map(|b| &b.verified)
    }

    /// The eBPF program, compiled and verified.
    pub fn program(&self) -> Result<&Program, BuildError> {
        self.built().map(|b| b.verified.program())
    }

    /// The maps of the program's table, in order.
    pub fn maps(&self) -> Result<&[RawMap], BuildError> {
        self.built().map(|b| b.maps.as_slice())
    }

    /// The probe's IR.
    pub fn ir(&self) -> Result<&ProbeIr, BuildError> {
        self.built().map(|b| &b.ir)
    }

    /// A CPU VM running the probe, with its maps bound (one VM per thread).
    pub fn vm(&self) -> Result<egpu_vm::Vm, ProbeError> {
        let built = self.built()?;
        Ok(egpu_vm::Vm::with_maps(&built.verified, &built.maps, egpu_vm::EngineChoice::Auto)?)
    }

    /// A CPU VM on the engine chosen.
    pub fn vm_with(&self, choice: egpu_vm::EngineChoice) -> Result<egpu_vm::Vm, ProbeError> {
        let built = self.built()?;
        Ok(egpu_vm::Vm::with_maps(&built.verified, &built.maps, choice)?)
    }
}

/// Why a probe could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// Building the probe failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The VM refused it.
    #[error(transparent)]
    Load(#[from] egpu_vm::LoadError),
}

/// The attach point named `spec` in `#[egpu::probe(spec)]`, with a context of type `C`: `user`
/// takes the size of `C`, `host::EVENT` means `host::EVENT::enter`.
pub fn attach<C>(spec: &str) -> Result<AttachPoint, BuildError> {
    let spec = spec.replace(' ', "");
    let parsed = match spec.as_str() {
        "user" => Ok(AttachPoint::User { ctx_size: size_of::<C>() as u32 }),
        s if s.starts_with("host::") && s.matches("::").count() == 1 => {
            format!("{s}::enter").parse()
        }
        s => s.parse(),
    };
    let attach = parsed.map_err(|e| BuildError::Attach(e.to_string()))?;
    if attach.context_size() != size_of::<C>() {
        return Err(BuildError::Attach(format!(
            "{attach} passes a {}-byte context; the probe takes {} bytes",
            attach.context_size(),
            size_of::<C>()
        )));
    }
    Ok(attach)
}
