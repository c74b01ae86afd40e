//! What the differential tests of Probe Rust share: copying maps' memory out and back, so that
//! the twin and each engine start from the same maps and their effects can be compared.

use egpu::maps::RawMap;

/// The memory of each map, copied out.
pub(crate) fn snapshot(maps: &[RawMap]) -> Vec<Vec<u8>> {
    maps.iter()
        .map(|m| {
            let (ptr, len) = m.memory();
            // SAFETY: the memory lives as long as the map; nothing else writes it meanwhile.
            unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) }.to_vec()
        })
        .collect()
}

/// Writes `bytes`, taken by [`snapshot`], back into the maps.
pub(crate) fn restore(maps: &[RawMap], bytes: &[Vec<u8>]) {
    for (m, b) in maps.iter().zip(bytes) {
        let (ptr, len) = m.memory();
        assert_eq!(len, b.len());
        // SAFETY: as above; the copy rewrites the map's memory while no one else uses it.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), ptr.as_ptr(), len) };
    }
}
