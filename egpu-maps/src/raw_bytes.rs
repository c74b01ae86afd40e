//! [`RawMap`] read as bytes, for callers that know a map only by its header (the C ABI,
//! tracers): every key of a hash map, a key's value in every shard, a ring's records drained.
//! The typed maps do the same with their types; these copy through the region's word-wise
//! atomic reads, so a reader never races a writer's plain stores.

use egpu_ebpf::MapKind;

use crate::MapError;
use crate::raw::RawMap;

impl RawMap {
    /// The keys of a hash map present in any shard, each once, in slot order (writers may go
    /// on meanwhile: a key inserted during the walk may be missed); for an array, every index
    /// (`0..capacity`, as 4 little-endian bytes). A ring buffer has no keys
    /// ([`MapError::Unsupported`]).
    pub fn keys(&self) -> Result<Vec<Vec<u8>>, MapError> {
        let g = *self.geometry();
        match g.kind {
            MapKind::Hash | MapKind::PerCpuHash => {
                let mut seen = std::collections::HashSet::new();
                let mut keys = Vec::new();
                for s in 0..g.shards() {
                    let table = self.table(s);
                    for i in 0..table.slots() {
                        let mut key = vec![0u8; g.key_size as usize];
                        if table.key_at(i, &mut key) && seen.insert(key.clone()) {
                            keys.push(key);
                        }
                    }
                }
                Ok(keys)
            }
            MapKind::Array | MapKind::PerCpuArray => {
                Ok((0..g.capacity).map(|i| i.to_le_bytes().to_vec()).collect())
            }
            kind => Err(MapError::Unsupported { op: "keys", kind }),
        }
    }

    /// Copies `key`'s value in every shard into `out`, which holds
    /// `value_size × shards` bytes: host shards first, then device shards, zeros where a shard
    /// of a per-CPU hash map lacks the key (a map of one shard: its value). Whether any shard
    /// has the key (an array index in range always is).
    pub fn read_shards(&self, key: &[u8], out: &mut [u8]) -> Result<bool, MapError> {
        let g = *self.geometry();
        if key.len() != g.key_size as usize {
            return Err(MapError::Geometry {
                reason: format!(
                    "the key is {} bytes; the map's keys are {}",
                    key.len(),
                    g.key_size
                ),
            });
        }
        let size = g.value_size as usize;
        let want = size * g.shards() as usize;
        if out.len() != want {
            return Err(MapError::Geometry {
                reason: format!(
                    "{} bytes given for the values; the map's {} shards of {size}-byte values \
                     take {want}",
                    out.len(),
                    g.shards()
                ),
            });
        }
        let mut found = false;
        for (s, value) in (0..g.shards()).zip(out.chunks_exact_mut(size.max(1))) {
            let offset = match g.kind {
                MapKind::Hash | MapKind::PerCpuHash => {
                    let table = self.table(s);
                    table.find(key).map(|(i, _)| table.value_offset(i))
                }
                MapKind::Array | MapKind::PerCpuArray => {
                    let index = u32::from_le_bytes(key.try_into().unwrap_or([0xff; 4]));
                    self.element(s, index).ok()
                }
                kind => return Err(MapError::Unsupported { op: "read_shards", kind }),
            };
            match offset {
                Some(off) => {
                    self.region().read_bytes(off, value);
                    found = true;
                }
                None => value.fill(0),
            }
        }
        Ok(found)
    }

    /// Takes the consumer's role of a ring buffer for the call and copies its committed
    /// records, oldest first per shard, into `out` (whole records of `value_size` bytes, as
    /// many as fit); the number copied. [`MapError::ConsumerBusy`] while another consumer holds
    /// the role.
    pub fn drain_records(&self, out: &mut [u8]) -> Result<usize, MapError> {
        let g = *self.geometry();
        if g.kind != MapKind::RingBuf {
            return Err(MapError::Unsupported { op: "drain_records", kind: g.kind });
        }
        for s in 0..g.shards() {
            if let Err(e) = self.ring(s).claim_consumer() {
                (0..s).for_each(|s| self.ring(s).release_consumer());
                return Err(e);
            }
        }
        let mut next = 0;
        let mut copied = 0;
        for record in out.chunks_exact_mut(g.value_size as usize) {
            if !self.next_record(&mut next, record) {
                break;
            }
            copied += 1;
        }
        (0..g.shards()).for_each(|s| self.ring(s).release_consumer());
        Ok(copied)
    }
}
