//! The builder that `#[egpu::probe]`'s generated code drives, and [`Probe`], the handle it
//! gives users.
//!
//! The macro turns a probe's body into Rust code that calls the functions of this module (under
//! `egpu::__private::probe`) instead of computing: `a + b` becomes `add(a, b)` on typed handles
//! ([`Val<T>`]), `if` becomes [`if_`] with closures for its branches, and so on. rustc type-checks
//! that code, so every type, size and offset in the probe (a map's key and value types, a
//! context field's offset) comes from rustc. Running it, the first time the probe is used,
//! records the probe IR on a thread-local builder; [`Probe`] then compiles and verifies it once.
//!
//! Its parts: `values` (the typed handles and [`Scalar`] types, constants and variables), `ops`
//! (operators), `places` (buffers, fields, the context), `control` (`if`, loops, `return`,
//! inlining), `maps` (map operations and `print!`), [`helpers`], and `probe` ([`Probe`], the
//! errors, [`attach_point`]). This module holds the thread-local builder state they record into.

mod control;
mod maps;
mod ops;
mod places;
mod probe;
mod values;

pub mod helpers;

use std::cell::RefCell;
use std::collections::HashMap as StdHashMap;

use egpu_ebpf::{AttachPoint, MapDef};
use egpu_maps::RawMap;

use crate::ir::{BufDecl, Expr, ProbeIr, SourceLoc, Stmt, Ty};

pub use control::{Inline, Placeholder, at, brk, cont, if_, repeat, ret, ret_unit};
pub use maps::{
    IndexedMap, KeyedMap, array_fetch_add, array_fetch_add_field, array_get, array_set,
    hash_fetch_add, hash_fetch_add_field, hash_get, hash_insert, hash_remove, print, print_arg,
    ring_output, ring_output_warp,
};
pub use ops::{
    add, and, bitand, bitor, bitxor, bool_and, cast, div, eq, ge, gt, le, lt, mul, ne, neg, not,
    or, rem, shl, shr, sub,
};
pub use places::{AsPlace, buffer, ctx_field, ctx_store, field, load, store_field};
pub use probe::{BuildError, Probe, ProbeError, attach_point};
pub use values::{Int, Loc, Local, Scalar, Val, get, lit, local, local_uninit, set};

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
    /// The buffers of zeros that inserts of missing keys copy, one per size and alignment.
    zeros: StdHashMap<(u32, u32), crate::ir::Buf>,
    /// The buffer every array index is stored to for its map call ([`places::spill_index`]).
    index: Option<crate::ir::Buf>,
    error: Option<BuildError>,
    /// The last [`at`] in force: what the code generator will take the code recorded next for.
    loc: Option<SourceLoc>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Runs `f` on the builder's state.
fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| {
        f(s.borrow_mut().as_mut().expect("probe builder functions run inside Probe::build"))
    })
}

/// Records `e` (folded) and returns its handle.
fn val<T>(e: Expr) -> Val<T> {
    let e = e.folded();
    with(|s| {
        s.exprs.push(e);
        Val::new(s.exprs.len() - 1)
    })
}

/// The expression `v` stands for.
fn expr<T>(v: Val<T>) -> Expr {
    with(|s| s.exprs[v.id].clone())
}

/// Appends `stmt` to the innermost statement list.
fn push(stmt: Stmt) {
    with(|s| s.blocks.last_mut().expect("a block").push(stmt));
}

/// Runs `f` with a new statement list and returns it. The location in force after it is the
/// one before it, as for the code generator.
fn block(f: impl FnOnce()) -> Vec<Stmt> {
    let outer = with(|s| {
        s.blocks.push(Vec::new());
        s.loc
    });
    f();
    with(|s| {
        s.loc = outer;
        s.blocks.pop().expect("the block pushed")
    })
}

/// Records `e`, unless an error came first: building then fails with it.
fn fail(e: BuildError) {
    with(|s| {
        s.error.get_or_insert(e);
    });
}

/// Runs `build` (generated code) on a new builder for `attach`: the IR it records, and the maps
/// of its table in order.
fn record(attach: AttachPoint, build: fn()) -> Result<(ProbeIr, Vec<RawMap>), BuildError> {
    let state = State {
        attach,
        exprs: Vec::new(),
        blocks: vec![Vec::new()],
        vars: Vec::new(),
        bufs: Vec::new(),
        ptrs: 0,
        maps: Vec::new(),
        map_index: StdHashMap::new(),
        zeros: StdHashMap::new(),
        index: None,
        error: None,
        loc: None,
    };
    let previous = STATE.with(|s| s.borrow_mut().replace(state));
    build();
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
    Ok((ir, maps))
}
