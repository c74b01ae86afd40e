//! The bytes a tensor copy moves: its tensor map's box.
//!
//! A tensor copy (`cp.async.bulk.tensor`, the tensor memory accelerator) names its global
//! memory by a tensor map: 128 bytes the driver encodes (`cuTensorMapEncodeTiled`,
//! `cuTensorMapEncodeIm2col`) in a format it does not document. The box, and so the bytes each
//! copy moves (out-of-bounds fill included), are in there, but cannot be read back. So egpu
//! learns them where maps are made: the preloaded library interposes the encoders and records
//! each map's box bytes under a hash of the map's 128 bytes ([`map_hash`]) in a table that every
//! context keeps in GPU memory ([`BoxTable`], copied there whole when a context first loads an
//! instrumented module and a slot at a time after each new map); at a tensor copy, the
//! instrumented kernel hashes the 128 bytes its map holds and looks the hash up
//! ([`InjectOptions::tensor_boxes`](super::InjectOptions::tensor_boxes)).
//!
//! | the tensor map | the copy's `size` |
//! |---|---|
//! | encoded on the host through an interposed encoder, passed to the kernel as it was (a `__grid_constant__` parameter, or copied to global or constant memory) | the box's bytes |
//! | changed on the host by `cuTensorMapReplaceAddress` | the box's bytes (recorded again) |
//! | built or changed on the device (`tensormap.replace`, Triton's `tl.make_tensor_descriptor`), encoded before egpu was loaded, or of sub-byte elements (`16U4`, `16U6` types) | 0: unknown |
//!
//! A table holds [`SLOTS`] maps; a map recorded where another was (the hash's low bits) takes
//! its place, and the older one's copies read 0 from then on. Each slot is two words, the hash
//! and the bytes with the hash's high half above them, so a kernel that reads a slot while the
//! host rewrites it sees the slot whole or not at all.

use std::collections::{BTreeMap, BTreeSet};

use crate::ptx::PtxInstruction;

/// Bytes of a tensor map (`CUtensorMap`).
pub const MAP_BYTES: usize = 128;

/// Maps a table holds (a power of two).
pub const SLOTS: usize = 4096;

/// Bytes of a slot: the map's hash, then its box's bytes with the hash's high half above them.
pub const SLOT_BYTES: usize = 16;

/// Bytes of a whole table in GPU memory.
pub const TABLE_BYTES: usize = SLOTS * SLOT_BYTES;

const SEED: u64 = 0x6567_7075_746d_6170;
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// The hash of a tensor map's 128 bytes, as the kernels compute it: never 0 (an empty slot).
pub fn map_hash(map: &[u8; MAP_BYTES]) -> u64 {
    let mut h = SEED;
    for word in map.chunks_exact(8) {
        let w = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(MULTIPLIER);
    }
    h ^= h >> 29;
    if h == 0 { 1 } else { h }
}

/// Bytes of one element of `CUtensorMapDataType` `data_type`; `None` for the packed sub-byte
/// types and values the driver does not define.
pub fn element_bytes(data_type: u32) -> Option<u32> {
    match data_type {
        0 => Some(1),                        // UINT8
        1 | 6 | 9 => Some(2),                // UINT16, FLOAT16, BFLOAT16
        2 | 3 | 7 | 10 | 11 | 12 => Some(4), // UINT32, INT32, FLOAT32(_FTZ), TFLOAT32(_FTZ)
        4 | 5 | 8 => Some(8),                // UINT64, INT64, FLOAT64
        _ => None,
    }
}

/// The bytes a copy of a tiled map's box moves: along each of its dimensions, the box's size
/// divided by the element stride (rounded up), times the element's bytes. `None` when the
/// data type is unknown, a stride is 0, the dimensions disagree, or the bytes exceed `u32`.
pub fn tiled_box_bytes(data_type: u32, box_dim: &[u32], element_strides: &[u32]) -> Option<u32> {
    if box_dim.is_empty() || box_dim.len() != element_strides.len() {
        return None;
    }
    let mut bytes = u64::from(element_bytes(data_type)?);
    for (&size, &stride) in box_dim.iter().zip(element_strides) {
        if stride == 0 {
            return None;
        }
        bytes = bytes.checked_mul(u64::from(size.div_ceil(stride)))?;
    }
    u32::try_from(bytes).ok()
}

/// The bytes a copy of an im2col map's box moves: `pixels` pixels of `channels` channels.
pub fn im2col_box_bytes(data_type: u32, channels: u32, pixels: u32) -> Option<u32> {
    let bytes = u64::from(element_bytes(data_type)?) * u64::from(channels) * u64::from(pixels);
    u32::try_from(bytes).ok()
}

/// The host's copy of a table: what each context's table in GPU memory holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoxTable {
    slots: Vec<[u64; 2]>,
}

impl Default for BoxTable {
    fn default() -> BoxTable {
        BoxTable { slots: vec![[0; 2]; SLOTS] }
    }
}

impl BoxTable {
    /// An empty table.
    pub fn new() -> BoxTable {
        BoxTable::default()
    }

    /// The slot of the map whose hash is `hash`.
    pub fn slot_of(hash: u64) -> usize {
        (hash & (SLOTS as u64 - 1)) as usize
    }

    /// Records that copies of `map` move `bytes` bytes; returns the slot written, or `None`
    /// when it already said so.
    pub fn record(&mut self, map: &[u8; MAP_BYTES], bytes: u32) -> Option<usize> {
        let hash = map_hash(map);
        let slot = BoxTable::slot_of(hash);
        let entry = [hash, (hash >> 32) << 32 | u64::from(bytes)];
        (self.slots[slot] != entry).then(|| {
            self.slots[slot] = entry;
            slot
        })
    }

    /// The bytes recorded for `map`, as a kernel finds them.
    pub fn bytes_of(&self, map: &[u8; MAP_BYTES]) -> Option<u32> {
        let hash = map_hash(map);
        let [h, bytes] = self.slots[BoxTable::slot_of(hash)];
        (h == hash && bytes >> 32 == hash >> 32).then_some(bytes as u32)
    }

    /// Slot `slot` as its bytes in GPU memory.
    pub fn slot_bytes(&self, slot: usize) -> [u8; SLOT_BYTES] {
        let mut out = [0; SLOT_BYTES];
        out[..8].copy_from_slice(&self.slots[slot][0].to_le_bytes());
        out[8..].copy_from_slice(&self.slots[slot][1].to_le_bytes());
        out
    }

    /// The whole table as its bytes in GPU memory ([`TABLE_BYTES`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        (0..SLOTS).flat_map(|s| self.slot_bytes(s)).collect()
    }
}

/// PTX that computes, into the 32-bit register `{SIZE}`, the bytes of the box of the tensor map
/// at the generic address in `{ADDR}`, from the table at `table` (0 when it is not there).
pub(super) fn lookup_code(table: u64) -> String {
    let r = |what: &str| format!("{{SIZE}}_{what}");
    let (h, p, s, e0, e1) = (r("h"), r("p"), r("s"), r("e0"), r("e1"));
    let w = |i: usize| r(&format!("w{i}"));
    let mut code = format!(
        "\t{{\n\t.reg .b64 {h}, {s}, {e0}, {e1}, {};\n\t.reg .pred {p};\n",
        (0..16).map(w).collect::<Vec<_>>().join(", ")
    );
    for pair in 0..8 {
        code.push_str(&format!(
            "\tld.v2.u64 {{{}, {}}}, [{{ADDR}}+{}];\n",
            w(2 * pair),
            w(2 * pair + 1),
            16 * pair
        ));
    }
    code.push_str(&format!("\tmov.b64 {h}, {};\n", SEED as i64));
    for i in 0..16 {
        code.push_str(&format!("\txor.b64 {h}, {h}, {};\n", w(i)));
        code.push_str(&format!("\tmul.lo.u64 {h}, {h}, {};\n", MULTIPLIER as i64));
    }
    code.push_str(&format!(
        "\tshr.u64 {s}, {h}, 29;\n\txor.b64 {h}, {h}, {s};\n\
         \tsetp.eq.u64 {p}, {h}, 0;\n\t@{p} mov.b64 {h}, 1;\n\
         \tand.b64 {s}, {h}, {mask};\n\tshl.b64 {s}, {s}, 4;\n\tadd.s64 {s}, {s}, {table};\n\
         \tld.global.cg.v2.u64 {{{e0}, {e1}}}, [{s}];\n\
         \tsetp.eq.u64 {p}, {e0}, {h};\n\
         \tshr.u64 {s}, {h}, 32;\n\tshr.u64 {e0}, {e1}, 32;\n\
         \tsetp.eq.and.u64 {p}, {s}, {e0}, {p};\n\
         \tcvt.u32.u64 {{SIZE}}, {e1};\n\tselp.u32 {{SIZE}}, {{SIZE}}, 0, {p};\n",
        mask = SLOTS - 1,
        table = table as i64,
    ));
    code.push_str("\t}\n");
    code
}

/// PTX for a kernel's start that declares the 32-bit register `known` and looks up there the
/// bytes of the tensor map at `offset` in kernel parameter `param` ([`ParamMaps`]): such a map
/// cannot change while the kernel runs, so its copies take their size from `known`. Looked up
/// before the kernel's own code, where few of its registers are live, rather than at a copy,
/// maybe in a loop whose registers (a matmul's accumulators) would share the register file
/// with the lookup's.
pub(super) fn param_lookup_code(table: u64, param: &str, offset: i64, known: &str) -> String {
    let addr = format!("{known}_a");
    let lookup = lookup_code(table).replace("{SIZE}", known).replace("{ADDR}", &addr);
    format!(
        "\t.reg .b32 {known};\n\t{{\n\t.reg .b64 {addr};\n\tmov.b64 {addr}, {param};\n\
         \tcvta.param.u64 {addr}, {addr};\n\tadd.s64 {addr}, {addr}, {offset};\n{lookup}\t}}\n"
    )
}

/// The tensor maps of a kernel that are its parameters (`__grid_constant__ const CUtensorMap`,
/// Triton's host-side tensor descriptors, a map inside a parameter struct as CUTLASS passes
/// them): such a map cannot change while the kernel runs, so its bytes are looked up once per
/// thread, when the kernel starts ([`param_lookup_code`]).
///
/// A copy's map register is traced back through its definitions, each the only one of its
/// register in the function and unguarded: `cvta.param` (to a generic address) of a parameter's
/// address (`mov` of the parameter's name, plus a constant), with `add`s of constants before or
/// after. Any other definition, or more than one, and the map is not known to be a parameter.
pub(super) struct ParamMaps<'a> {
    instructions: &'a [(usize, PtxInstruction<'a>)],
    /// Each register's definitions: the instructions that name it in their first operand
    /// (outside an address).
    definitions: BTreeMap<&'a str, Vec<usize>>,
    /// The kernel's parameters' names.
    params: BTreeSet<&'a str>,
}

impl<'a> ParamMaps<'a> {
    /// The kernel with header `header` (its text, parameters included) and `instructions`.
    pub(super) fn new(header: &'a str, instructions: &'a [(usize, PtxInstruction<'a>)]) -> Self {
        let mut definitions: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (k, (_, insn)) in instructions.iter().enumerate() {
            let written = insn.operands.first().copied().unwrap_or_default();
            for name in registers(written) {
                definitions.entry(name).or_default().push(k);
            }
        }
        let params = header
            .split(['(', ')', ','])
            .filter_map(|d| d.trim().strip_prefix(".param"))
            .filter_map(|d| d.split('[').next()?.split_whitespace().last())
            .collect();
        ParamMaps { instructions, definitions, params }
    }

    /// The parameter, and the offset in it, whose generic address `register` holds wherever it
    /// is read; `None` when that is not known.
    pub(super) fn param(&self, register: &str) -> Option<(&'a str, i64)> {
        match self.value(register, 0)? {
            (param, offset, true) => Some((param, offset)),
            _ => None,
        }
    }

    /// What `register` holds: a parameter's address plus an offset, and whether it is generic.
    fn value(&self, register: &str, depth: usize) -> Option<(&'a str, i64, bool)> {
        let [k] = self.definitions.get(register)?.as_slice() else { return None };
        let insn = &self.instructions.get(*k)?.1;
        if insn.guard.is_some() || depth > 8 {
            return None;
        }
        let source = |i: usize| insn.operands.get(i).copied();
        match (insn.base(), insn.operands.len()) {
            ("mov", 2) => {
                let from = source(1)?;
                if from.starts_with('%') {
                    return self.value(from, depth + 1);
                }
                let (name, offset) = match from.split_once('+') {
                    Some((name, offset)) => (name.trim(), offset.trim().parse().ok()?),
                    None => (from, 0),
                };
                let param = self.params.get(name)?;
                Some((param, offset, false))
            }
            ("cvta", 2) if insn.has("param") && !insn.has("to") => {
                let (param, offset, generic) = self.value(source(1)?, depth + 1)?;
                (!generic).then_some((param, offset, true))
            }
            ("add", 3) if insn.has("s64") || insn.has("u64") => {
                let (from, constant) = match (source(1)?, source(2)?) {
                    (a, b) if a.starts_with('%') && !b.starts_with('%') => (a, b),
                    (a, b) if b.starts_with('%') && !a.starts_with('%') => (b, a),
                    _ => return None,
                };
                let constant: i64 = constant.parse().ok()?;
                let (param, offset, generic) = self.value(from, depth + 1)?;
                Some((param, offset.checked_add(constant)?, generic))
            }
            _ => None,
        }
    }
}

/// The registers an instruction whose first operand is `operand` writes: `%r1`, `{%r1, %r2}`,
/// `%r1|%p1`, `(%r1)`; none in an address (`[%rd1+8]`, which it reads).
fn registers(operand: &str) -> impl Iterator<Item = &str> {
    let written = if operand.starts_with('[') { "" } else { operand };
    written
        .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%')))
        .filter(|t| t.starts_with('%'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(seed: u8) -> [u8; MAP_BYTES] {
        std::array::from_fn(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
    }

    #[test]
    fn boxes() {
        // A Triton matmul's 128 x 64 box of fp16, and of bf16 with every other column.
        assert_eq!(tiled_box_bytes(6, &[64, 128], &[1, 1]), Some(16384));
        assert_eq!(tiled_box_bytes(9, &[64, 128], &[2, 1]), Some(8192));
        assert_eq!(tiled_box_bytes(7, &[5], &[2]), Some(12), "strides round up");
        assert_eq!(tiled_box_bytes(8, &[256; 5], &[1; 5]), None, "past u32");
        assert_eq!(tiled_box_bytes(13, &[64], &[1]), None, "packed 4-bit elements");
        assert_eq!(tiled_box_bytes(6, &[64, 64], &[1]), None);
        assert_eq!(tiled_box_bytes(6, &[64], &[0]), None);
        assert_eq!(tiled_box_bytes(6, &[], &[]), None);
        assert_eq!(im2col_box_bytes(9, 64, 128), Some(16384));
        assert_eq!(im2col_box_bytes(99, 64, 128), None);
    }

    #[test]
    fn a_table_finds_what_it_recorded_until_another_map_takes_the_slot() {
        let mut table = BoxTable::new();
        let (a, b) = (map(1), map(2));
        assert_ne!(map_hash(&a), map_hash(&b));
        assert_eq!(table.bytes_of(&a), None);
        let slot = table.record(&a, 16384).expect("a new map");
        assert_eq!(table.record(&a, 16384), None, "nothing new");
        assert_eq!(table.bytes_of(&a), Some(16384));
        assert_eq!(table.bytes_of(&b), None);
        let bytes = table.slot_bytes(slot);
        assert_eq!(u64::from_le_bytes(bytes[..8].try_into().unwrap()), map_hash(&a));
        assert_eq!(table.to_bytes().len(), TABLE_BYTES);
        assert_eq!(&table.to_bytes()[slot * SLOT_BYTES..][..SLOT_BYTES], &bytes);
        // Another map in the same slot takes it.
        let mut c = map(3);
        while BoxTable::slot_of(map_hash(&c)) != slot {
            c[0] = c[0].wrapping_add(1);
            c[1] = c[1].wrapping_add(u8::from(c[0] == 0));
        }
        assert_eq!(table.record(&c, 512), Some(slot));
        assert_eq!((table.bytes_of(&a), table.bytes_of(&c)), (None, Some(512)));
    }

    #[test]
    fn the_kernels_hash_is_the_hosts() {
        let code = lookup_code(0x7000_0000);
        assert_eq!(code.matches("ld.v2.u64").count(), 8, "the map's 16 words");
        assert_eq!(code.matches("mul.lo.u64").count(), 16);
        assert!(code.contains(&format!("mov.b64 {{SIZE}}_h, {};", SEED as i64)));
        assert!(code.contains(&format!(", {};", MULTIPLIER as i64)));
        assert!(code.contains("and.b64 {SIZE}_s, {SIZE}_h, 4095;"));
        assert!(code.contains("add.s64 {SIZE}_s, {SIZE}_s, 1879048192;"));
        assert!(code.trim_end().ends_with('}'));
        // A map that is a kernel parameter is looked up when the kernel starts, from its address.
        let start = param_lookup_code(0x7000_0000, "k_param_0", 128, "%k");
        assert!(start.starts_with("\t.reg .b32 %k;\n"));
        let address = "mov.b64 %k_a, k_param_0;\n\tcvta.param.u64 %k_a, %k_a;\n\t\
                       add.s64 %k_a, %k_a, 128;\n";
        assert!(start.contains(address), "{start}");
        assert!(start.contains("ld.v2.u64 {%k_w0, %k_w1}, [%k_a+0];"), "{start}");
        assert!(start.contains("selp.u32 %k, %k, 0, %k_p;"), "{start}");
        assert!(!start.contains("{SIZE}") && !start.contains("{ADDR}"), "{start}");
    }

    /// What `ParamMaps` makes of each register of `kernel`'s only kernel.
    fn params_of(kernel: &str, registers: &[&str]) -> Vec<Option<(String, i64)>> {
        let module = crate::ptx::PtxModule::parse(kernel).expect("the test's PTX");
        let f = module.entries().next().expect("a kernel");
        let instructions = module.instructions(f);
        let maps = ParamMaps::new(module.piece_text(f.header), &instructions);
        registers.iter().map(|r| maps.param(r).map(|(p, o)| (p.to_owned(), o))).collect()
    }

    #[test]
    fn maps_that_are_kernel_parameters_are_found() {
        // nvcc's `__grid_constant__ const CUtensorMap` parameters (tests/kernels/tensor_copy.cu).
        let copy = include_str!("../../../tests/ptx/tensor_copy.ptx");
        let found = params_of(copy, &["%rd4", "%rd6"]);
        let param = |name: &str, offset| Some((name.to_owned(), offset));
        assert_eq!(found, [param("tensor_copy_param_0", 0), param("tensor_copy_param_1", 0)]);
        let kernel = "
.version 8.0
.target sm_90
.address_size 64
.global .align 128 .b8 map[128];
.visible .entry k(
	.param .align 64 .b8 k_param_0[384],
	.param .u64 k_param_1
)
{
	.reg .b64 %rd<20>;
	.reg .pred %p<2>;
	mov.b64 %rd1, k_param_0;
	add.s64 %rd2, %rd1, 128;
	cvta.param.u64 %rd3, %rd2;
	cvta.param.u64 %rd4, %rd1;
	add.s64 %rd5, 256, %rd4;
	mov.u64 %rd6, %rd5;
	mov.b64 %rd7, k_param_0+128;
	cvta.param.u64 %rd8, %rd7;
	cvta.param.u64 %rd9, %rd1;
	mov.b64 %rd9, %rd3;
	@%p1 cvta.param.u64 %rd10, %rd1;
	ld.param.u64 %rd11, [k_param_1];
	cvta.to.global.u64 %rd12, %rd11;
	mov.u64 %rd13, map;
	cvta.global.u64 %rd14, %rd13;
	mov.b64 %rd15, k_param_1;
	add.s64 %rd16, %rd3, %rd4;
	ret;
}
";
        let registers = [
            "%rd3", "%rd5", "%rd6", "%rd8", // a map in a struct: +128, +256, +256, +128
            "%rd1", "%rd7", // a parameter's address, not generic
            "%rd9", "%rd10", // two definitions; a guarded one
            "%rd12", "%rd14", // a map in global memory, by a pointer or a variable's address
            "%rd16", "%rd19", // a sum of registers; never written
        ];
        let p = |offset| Some(("k_param_0".to_owned(), offset));
        let expected = [p(128), p(256), p(256), p(128), None, None, None, None, None, None];
        assert_eq!(params_of(kernel, &registers), [&expected[..], &[None, None]].concat());
    }
}
