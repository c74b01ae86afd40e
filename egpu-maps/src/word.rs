//! Typed access to map memory: values copied in and out word by word, atomic words, and the
//! per-shard values of per-CPU maps.

use std::marker::PhantomData;
use std::sync::atomic::Ordering::SeqCst;

use bytemuck::Pod;

use crate::MapError;
use crate::region::Region;

mod sealed {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

/// A word that map operations update atomically: `u32` or `u64`.
pub trait AtomicWord: Pod + sealed::Sealed + Eq {
    #[doc(hidden)]
    fn from_u64(v: u64) -> Self;
    #[doc(hidden)]
    fn into_u64(self) -> u64;
}

impl AtomicWord for u32 {
    fn from_u64(v: u64) -> u32 {
        v as u32
    }
    fn into_u64(self) -> u64 {
        self.into()
    }
}

impl AtomicWord for u64 {
    fn from_u64(v: u64) -> u64 {
        v
    }
    fn into_u64(self) -> u64 {
        self
    }
}

/// An integer value type whose per-shard values can be summed (with wrapping).
pub trait Integer: Pod {
    #[doc(hidden)]
    fn add(self, other: Self) -> Self;
}

macro_rules! integers {
    ($($t:ty)*) => {$(
        impl Integer for $t {
            fn add(self, other: $t) -> $t {
                self.wrapping_add(other)
            }
        }
    )*};
}
integers!(u8 u16 u32 u64 usize i8 i16 i32 i64 isize);

/// An aligned `u32` or `u64` inside a map value, updated atomically. Atomicity is per word: the
/// other words of the value may change independently.
#[derive(Clone, Copy)]
pub struct Word<'a, W> {
    region: &'a Region,
    offset: usize,
    _word: PhantomData<W>,
}

impl<W> std::fmt::Debug for Word<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Word").field("offset", &self.offset).finish_non_exhaustive()
    }
}

impl<'a, W: AtomicWord> Word<'a, W> {
    /// The word at `field` bytes into the value at `value_offset`, checked against the value's
    /// size and the word's alignment.
    pub(crate) fn at(
        region: &'a Region,
        value_offset: usize,
        field: usize,
        value_size: u32,
    ) -> Result<Word<'a, W>, MapError> {
        check_field::<W>(field, value_size)?;
        Ok(Word { region, offset: value_offset + field, _word: PhantomData })
    }

    fn apply(
        &self,
        op32: impl FnOnce(&std::sync::atomic::AtomicU32) -> u32,
        op64: impl FnOnce(&std::sync::atomic::AtomicU64) -> u64,
    ) -> W {
        if size_of::<W>() == 4 {
            W::from_u64(op32(self.region.word32(self.offset)).into())
        } else {
            W::from_u64(op64(self.region.word(self.offset)))
        }
    }

    /// The current value.
    pub fn load(&self) -> W {
        self.apply(|a| a.load(SeqCst), |a| a.load(SeqCst))
    }

    /// Stores `v`.
    pub fn store(&self, v: W) {
        let v = v.into_u64();
        self.apply(
            |a| {
                a.store(v as u32, SeqCst);
                0
            },
            |a| {
                a.store(v, SeqCst);
                0
            },
        );
    }

    /// Adds `v` (wrapping) and returns the previous value.
    pub fn fetch_add(&self, v: W) -> W {
        let v = v.into_u64();
        self.apply(|a| a.fetch_add(v as u32, SeqCst), |a| a.fetch_add(v, SeqCst))
    }

    /// Ors `v` in and returns the previous value.
    pub fn fetch_or(&self, v: W) -> W {
        let v = v.into_u64();
        self.apply(|a| a.fetch_or(v as u32, SeqCst), |a| a.fetch_or(v, SeqCst))
    }

    /// Stores `v` and returns the previous value.
    pub fn swap(&self, v: W) -> W {
        let v = v.into_u64();
        self.apply(|a| a.swap(v as u32, SeqCst), |a| a.swap(v, SeqCst))
    }

    /// Stores `new` if the value is `current`; returns the previous value, `Ok` when it was
    /// `current`.
    pub fn compare_exchange(&self, current: W, new: W) -> Result<W, W> {
        let (c, n) = (current.into_u64(), new.into_u64());
        let old = self.apply(
            |a| match a.compare_exchange(c as u32, n as u32, SeqCst, SeqCst) {
                Ok(v) | Err(v) => v,
            },
            |a| match a.compare_exchange(c, n, SeqCst, SeqCst) {
                Ok(v) | Err(v) => v,
            },
        );
        if old == current { Ok(old) } else { Err(old) }
    }
}

/// Checks that a `W` at byte `field` of a value is an aligned word inside it.
pub(crate) fn check_field<W: AtomicWord>(field: usize, value_size: u32) -> Result<(), MapError> {
    let size = size_of::<W>();
    let inside = field.checked_add(size).is_some_and(|end| end <= value_size as usize);
    if !field.is_multiple_of(size) || !inside {
        return Err(MapError::Field { offset: field, size, value_size });
    }
    Ok(())
}

/// The byte offset of the field `f` picks out of a `V` (`|v| &v.stats.bytes`), found by running
/// `f` on a zeroed `V`; an error when `f` returns a reference that is not inside it.
pub fn field_offset<V: Pod, W>(f: impl FnOnce(&V) -> &W) -> Result<usize, MapError> {
    let base = V::zeroed();
    let start = &base as *const V as usize;
    let at = f(&base) as *const W as usize;
    match at.checked_sub(start) {
        Some(off) if off + size_of::<W>() <= size_of::<V>() => Ok(off),
        _ => Err(MapError::Field {
            offset: usize::MAX,
            size: size_of::<W>(),
            value_size: size_of::<V>() as u32,
        }),
    }
}

/// Reads a `T` stored at `offset`, word by word.
pub(crate) fn read<T: Pod>(region: &Region, offset: usize) -> T {
    let mut v = T::zeroed();
    region.read_bytes(offset, bytemuck::bytes_of_mut(&mut v));
    v
}

/// The values of one key or index in every shard of a per-CPU map: host shards first, then
/// device shards. A shard without the key (per-CPU hash maps) reads as zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerShard<V> {
    /// One value per host shard.
    pub cpu: Vec<V>,
    /// One value per device shard.
    pub sm: Vec<V>,
}

impl<V: Integer> PerShard<V> {
    /// The sum of every shard's value (wrapping).
    pub fn sum(&self) -> V {
        self.cpu.iter().chain(&self.sm).fold(V::zeroed(), |acc, v| acc.add(*v))
    }
}

/// The `u32`/`u64` value of a map, for `fetch_add` and friends on whole values.
pub(crate) fn value_word<'a, V: AtomicWord>(region: &'a Region, offset: usize) -> Word<'a, V> {
    Word { region, offset, _word: PhantomData }
}
