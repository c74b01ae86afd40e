//! Map operations: the probe's map table, lookups, atomic adds, inserts, removes and ring
//! outputs (`print!` among them).

use bytemuck::Pod;
use egpu_ebpf::{MapDef, helpers::id};
use egpu_maps::{Array, HashMap, MapError, PerCpuArray, PerCpuHashMap, RawMap, RingBuf};

use super::ops::cast;
use super::places::{
    AsPlace, buffer, offset_in, spill_index, store_field, zero_buffer, zero_stores,
};
use super::values::{Int, Loc, Scalar, Val, lit};
use super::{BuildError, block, expr, fail, push, with};
use crate::ir::{CallArg, Expr, MapRef, Place, Ptr, Stmt, Ty};

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

/// A new pointer to a map value.
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
    let zero_buf = zero_buffer::<M::Value>();
    let zero = Place::Buf(zero_buf, 0);
    let mut zeroing = zero_stores::<M::Value>(zero_buf);
    let delta = expr(delta);
    let ptr = new_ptr();
    let add = vec![Stmt::AtomicAdd(W::TY, Place::Value(ptr, off), delta)];
    let insert = Expr::Call(
        Ty::I64,
        id::MAP_UPDATE_ELEM,
        vec![
            CallArg::Map(m),
            CallArg::Addr(key),
            CallArg::Addr(zero),
            CallArg::Value(Expr::Const(Ty::U64, 1)),
        ],
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
    let key = spill_index(index);
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
    update(m, key.place("key"), value.place("value"));
}

/// `bpf_map_update_elem(map, key, value, BPF_ANY)`, its result dropped.
fn update(m: MapRef, key: Place, value: Place) {
    push(Stmt::Eval(Expr::Call(
        Ty::I64,
        id::MAP_UPDATE_ELEM,
        vec![
            CallArg::Map(m),
            CallArg::Addr(key),
            CallArg::Addr(value),
            CallArg::Value(Expr::Const(Ty::U64, 0)),
        ],
    )));
}

/// `array.set(index, &value)` (`bpf_map_update_elem`, any flags): the element replaced whole,
/// when the index is in range.
pub fn array_set<M: IndexedMap>(
    map: &'static M,
    name: &str,
    index: Val<u32>,
    value: impl AsPlace<M::Value>,
) {
    let Some(m) = map_ref(map as *const M as usize, name, map.raw_map()) else { return };
    update(m, spill_index(index), value.place("value"));
}

/// `map.remove(&key)` on a hash map (`bpf_map_delete_elem`).
pub fn hash_remove<M: KeyedMap>(map: &'static M, name: &str, key: impl AsPlace<M::Key>) {
    let Some(m) = map_ref(map as *const M as usize, name, map.raw_map()) else { return };
    let key = key.place("key");
    push(Stmt::Eval(Expr::Call(
        Ty::I64,
        id::MAP_DELETE_ELEM,
        vec![CallArg::Map(m), CallArg::Addr(key)],
    )));
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
    let found = block(|| found(Loc::new(Place::Value(ptr, 0))));
    let missing = block(missing);
    push(Stmt::Lookup { map: m, key, ptr, found, missing });
}

/// `if let Ok(v) = array.get(index) { found } else { missing }` on an array: `missing` past the
/// end.
pub fn array_get<V: Pod>(
    map: &'static Array<V>,
    name: &str,
    index: Val<u32>,
    found: impl FnOnce(Loc<V>),
    missing: impl FnOnce(),
) {
    let Some(m) = map_ref(map as *const _ as usize, name, map.try_raw()) else { return };
    let key = spill_index(index);
    let ptr = new_ptr();
    let found = block(|| found(Loc::new(Place::Value(ptr, 0))));
    let missing = block(missing);
    push(Stmt::Lookup { map: m, key, ptr, found, missing });
}

/// `ring.output(&record)` (`bpf_ringbuf_output`): a full ring drops the record and counts it.
pub fn ring_output<T: Pod>(ring: &'static RingBuf<T>, name: &str, record: impl AsPlace<T>) {
    ring_call(id::RINGBUF_OUTPUT, ring, name, record);
}

/// `ring.output_warp(&record)` (`egpu_ringbuf_output_warp`): one record per warp-level call,
/// the lowest lane's; a full ring drops it and counts it.
pub fn ring_output_warp<T: Pod>(ring: &'static RingBuf<T>, name: &str, record: impl AsPlace<T>) {
    ring_call(id::RINGBUF_OUTPUT_WARP, ring, name, record);
}

/// A call of ring helper `helper` with `record`, its size, and no flags.
fn ring_call<T: Pod>(helper: u32, ring: &'static RingBuf<T>, name: &str, record: impl AsPlace<T>) {
    let Some(m) = map_ref(ring as *const _ as usize, name, ring.try_raw()) else { return };
    let record = record.place("record");
    push(Stmt::Eval(Expr::Call(
        Ty::I64,
        helper,
        vec![
            CallArg::Map(m),
            CallArg::Addr(record),
            CallArg::Value(Expr::Const(Ty::U64, size_of::<T>() as u64)),
            CallArg::Value(Expr::Const(Ty::U64, 0)),
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
    use crate::print::{MAX_ARGS, PRINTS, PrintRecord, format_id};
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
