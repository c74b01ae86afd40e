//! The tensor map encoders, and `cuTensorMapReplaceAddress`: no event, but each map they make
//! recorded with its box's bytes ([`crate::device::boxes`]), where the instrumented tensor
//! copies find them.
//!
//! What the driver returns is returned unchanged; a map is recorded only when the call
//! succeeded. Arguments the box cannot be read from (null pointers, a rank outside 1 to 5, a data
//! type without whole bytes) make its bytes unknown, which is counted.

use std::ffi::{c_uint, c_void};

use egpu::device::inject::tensor_maps::{MAP_BYTES, im2col_box_bytes, tiled_box_bytes};

use crate::CuResult;
use crate::device::boxes;

/// The most dimensions a tensor map has.
const MAX_RANK: c_uint = 5;

/// A tensor map (`CUtensorMap`): 128 bytes the driver writes.
pub(super) type TensorMap = c_void;

/// The 128 bytes of the map at `map`, if not null.
///
/// # Safety
///
/// `map` is null or points to a tensor map's 128 bytes.
unsafe fn bytes_at(map: *const TensorMap) -> Option<[u8; MAP_BYTES]> {
    // SAFETY: the caller's map, 128 readable bytes.
    (!map.is_null()).then(|| unsafe { map.cast::<[u8; MAP_BYTES]>().read_unaligned() })
}

/// An encoder's call, `call`, into the map at `map`: when it succeeds, the map is recorded with
/// the bytes `bytes` computes.
pub(super) fn encoded(
    map: *mut TensorMap,
    call: impl FnOnce() -> CuResult,
    bytes: impl FnOnce() -> Option<u32>,
) -> CuResult {
    let result = call();
    if result == 0 {
        // SAFETY: the driver just wrote the map there.
        if let Some(map) = unsafe { bytes_at(map) } {
            boxes::record(&map, bytes());
        }
    }
    result
}

/// `cuTensorMapReplaceAddress`'s call, `call`, on the map at `map`: when it succeeds, the map's
/// new bytes are recorded with the box's bytes recorded for its old ones (unknown when none
/// were).
pub(super) fn replaced(map: *mut TensorMap, call: impl FnOnce() -> CuResult) -> CuResult {
    // SAFETY: the caller's map, which the driver reads too.
    let before = unsafe { bytes_at(map) }.and_then(|old| boxes::bytes_of(&old));
    let result = call();
    if result == 0 {
        // SAFETY: the driver just wrote the map there.
        if let Some(map) = unsafe { bytes_at(map) } {
            boxes::record(&map, before);
        }
    }
    result
}

/// The first `rank` elements at `p`, when `p` is not null and `rank` is 1 to 5.
///
/// # Safety
///
/// `p` is null or points to `rank` elements.
unsafe fn dims<'a>(p: *const c_uint, rank: c_uint) -> Option<&'a [c_uint]> {
    if p.is_null() || rank == 0 || rank > MAX_RANK {
        return None;
    }
    // SAFETY: the caller's `rank` elements.
    Some(unsafe { std::slice::from_raw_parts(p, rank as usize) })
}

/// The bytes of the box of a tiled map: `rank` dimensions of `box_dim`, each every
/// `element_strides` elements, of `data_type`.
///
/// # Safety
///
/// As the encoder's arguments: each pointer null or to `rank` elements.
pub(super) unsafe fn tiled(
    data_type: c_uint,
    rank: c_uint,
    box_dim: *const c_uint,
    element_strides: *const c_uint,
) -> Option<u32> {
    // SAFETY: the caller's pointers, to `rank` elements each.
    let (sizes, strides) = unsafe { (dims(box_dim, rank)?, dims(element_strides, rank)?) };
    tiled_box_bytes(data_type, sizes, strides)
}

/// The bytes of the box of an im2col map: `pixels` pixels of `channels` channels of
/// `data_type`, in `rank` dimensions.
pub(super) fn im2col(
    data_type: c_uint,
    rank: c_uint,
    channels: c_uint,
    pixels: c_uint,
) -> Option<u32> {
    if rank == 0 || rank > MAX_RANK {
        return None;
    }
    im2col_box_bytes(data_type, channels, pixels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_is_read_from_rank_elements_or_is_unknown() {
        let (sizes, strides) = ([64, 128, 7], [1, 1, 1]);
        // SAFETY: arrays of 3 elements, or null.
        unsafe {
            assert_eq!(tiled(6, 2, sizes.as_ptr(), strides.as_ptr()), Some(16384));
            assert_eq!(tiled(6, 0, sizes.as_ptr(), strides.as_ptr()), None);
            assert_eq!(tiled(6, 6, sizes.as_ptr(), strides.as_ptr()), None);
            assert_eq!(tiled(6, 2, std::ptr::null(), strides.as_ptr()), None);
            assert_eq!(tiled(6, 2, sizes.as_ptr(), std::ptr::null()), None);
            assert_eq!(tiled(13, 2, sizes.as_ptr(), strides.as_ptr()), None);
        }
        assert_eq!(im2col(9, 4, 64, 128), Some(16384));
        assert_eq!(im2col(9, 6, 64, 128), None);
        assert_eq!(im2col(13, 4, 64, 128), None);
    }

    #[test]
    fn the_encoders_are_found_by_dlsym_and_by_cu_get_proc_address() {
        for name in
            ["cuTensorMapEncodeTiled", "cuTensorMapEncodeIm2col", "cuTensorMapReplaceAddress"]
        {
            let found: Vec<_> = super::super::by_base(name.as_bytes(), 12000, true).collect();
            assert_eq!(found.len(), 1, "{name}");
            assert_eq!(found[0].exact.to_bytes(), name.as_bytes());
            assert!(super::super::exact(name.as_bytes()).is_some(), "{name}");
        }
    }
}
