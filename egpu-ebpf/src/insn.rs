//! The wire form of eBPF: 8-byte instruction slots, registers and opcode fields (RFC 9669 §3).
//!
//! [`Insn`] is one slot exactly as it is stored, with no interpretation. The typed form that the
//! rest of egpu reasons about is [`Instruction`](crate::Instruction); it is decoded from slots by
//! [`decode`](crate::decode) and encoded back by [`Instruction::encode`](crate::Instruction::encode).

use std::fmt;

/// One of the eleven eBPF registers, `r0` to `r10`.
///
/// `r0` holds return values, `r1`–`r5` carry arguments and are clobbered by calls, `r6`–`r9` are
/// preserved across calls, and `r10` is the read-only frame pointer.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reg(u8);

impl Reg {
    /// `r0`: return value of calls and of the program.
    pub const R0: Reg = Reg(0);
    /// `r1`: first argument; holds the context pointer when a program starts.
    pub const R1: Reg = Reg(1);
    /// `r2`: second argument.
    pub const R2: Reg = Reg(2);
    /// `r3`: third argument.
    pub const R3: Reg = Reg(3);
    /// `r4`: fourth argument.
    pub const R4: Reg = Reg(4);
    /// `r5`: fifth argument.
    pub const R5: Reg = Reg(5);
    /// `r6`: preserved across calls.
    pub const R6: Reg = Reg(6);
    /// `r7`: preserved across calls.
    pub const R7: Reg = Reg(7);
    /// `r8`: preserved across calls.
    pub const R8: Reg = Reg(8);
    /// `r9`: preserved across calls.
    pub const R9: Reg = Reg(9);
    /// `r10`: the read-only frame pointer.
    pub const R10: Reg = Reg(10);
    /// The frame pointer, by its role.
    pub const FP: Reg = Reg::R10;

    /// The register numbered `n`, if `n` names one (0 to 10).
    pub const fn new(n: u8) -> Option<Reg> {
        if n <= 10 { Some(Reg(n)) } else { None }
    }

    /// The register's number, 0 to 10.
    pub const fn index(self) -> u8 {
        self.0
    }

    /// All eleven registers, in order.
    pub fn all() -> impl Iterator<Item = Reg> {
        (0..=10).map(Reg)
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%r{}", self.0)
    }
}

impl fmt::Debug for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// One 8-byte instruction slot, as stored (little endian).
///
/// `dst` and `src` are the raw 4-bit register fields, which may name registers that do not exist
/// (11 to 15); decoding rejects those. A 64-bit immediate load (`lddw`) takes two slots; the second
/// has opcode 0 and carries the upper half of the immediate.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Insn {
    /// The opcode byte: class in the low 3 bits, then source or size/mode, then operation.
    pub opcode: u8,
    /// The destination register field (low nibble of byte 1).
    pub dst: u8,
    /// The source register field (high nibble of byte 1).
    pub src: u8,
    /// The signed 16-bit offset.
    pub off: i16,
    /// The signed 32-bit immediate.
    pub imm: i32,
}

impl Insn {
    /// Size of one slot in bytes.
    pub const SIZE: usize = 8;

    /// A slot from its fields. `dst` and `src` are masked to 4 bits.
    pub const fn new(opcode: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { opcode, dst: dst & 0xf, src: src & 0xf, off, imm }
    }

    /// Decodes one slot from 8 little-endian bytes.
    pub fn from_bytes(b: [u8; 8]) -> Insn {
        Insn {
            opcode: b[0],
            dst: b[1] & 0xf,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Encodes the slot as 8 little-endian bytes.
    pub fn to_bytes(self) -> [u8; 8] {
        let off = self.off.to_le_bytes();
        let imm = self.imm.to_le_bytes();
        [
            self.opcode,
            (self.src << 4) | (self.dst & 0xf),
            off[0],
            off[1],
            imm[0],
            imm[1],
            imm[2],
            imm[3],
        ]
    }

    /// The instruction class (low 3 bits of the opcode).
    pub const fn class(self) -> u8 {
        self.opcode & 0x07
    }
}

impl fmt::Debug for Insn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Insn {{ op: {:#04x}, dst: {}, src: {}, off: {}, imm: {} }}",
            self.opcode, self.dst, self.src, self.off, self.imm
        )
    }
}

/// Splits bytes into slots. Fails when the length is not a multiple of 8.
pub fn slots_from_bytes(bytes: &[u8]) -> Result<Vec<Insn>, crate::DecodeError> {
    if !bytes.len().is_multiple_of(Insn::SIZE) {
        return Err(crate::DecodeError::TruncatedSlot { len: bytes.len() });
    }
    Ok(bytes
        .chunks_exact(Insn::SIZE)
        .map(|c| Insn::from_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect())
}

/// Joins slots into bytes.
pub fn slots_to_bytes(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.to_bytes()).collect()
}

/// Opcode fields of RFC 9669, named as in the RFC and in Linux's `bpf.h`.
#[allow(missing_docs)]
pub mod opcode {
    // Classes.
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const ST: u8 = 0x02;
    pub const STX: u8 = 0x03;
    pub const ALU: u8 = 0x04;
    pub const JMP: u8 = 0x05;
    pub const JMP32: u8 = 0x06;
    pub const ALU64: u8 = 0x07;

    // Source operand (ALU and JMP classes).
    pub const K: u8 = 0x00;
    pub const X: u8 = 0x08;

    // Sizes (load and store classes).
    pub const W: u8 = 0x00;
    pub const H: u8 = 0x08;
    pub const B: u8 = 0x10;
    pub const DW: u8 = 0x18;

    // Modes (load and store classes).
    pub const IMM: u8 = 0x00;
    pub const ABS: u8 = 0x20;
    pub const IND: u8 = 0x40;
    pub const MEM: u8 = 0x60;
    pub const MEMSX: u8 = 0x80;
    pub const ATOMIC: u8 = 0xc0;

    // ALU operations.
    pub const ADD: u8 = 0x00;
    pub const SUB: u8 = 0x10;
    pub const MUL: u8 = 0x20;
    pub const DIV: u8 = 0x30;
    pub const OR: u8 = 0x40;
    pub const AND: u8 = 0x50;
    pub const LSH: u8 = 0x60;
    pub const RSH: u8 = 0x70;
    pub const NEG: u8 = 0x80;
    pub const MOD: u8 = 0x90;
    pub const XOR: u8 = 0xa0;
    pub const MOV: u8 = 0xb0;
    pub const ARSH: u8 = 0xc0;
    pub const END: u8 = 0xd0;

    // Jump operations.
    pub const JA: u8 = 0x00;
    pub const JEQ: u8 = 0x10;
    pub const JGT: u8 = 0x20;
    pub const JGE: u8 = 0x30;
    pub const JSET: u8 = 0x40;
    pub const JNE: u8 = 0x50;
    pub const JSGT: u8 = 0x60;
    pub const JSGE: u8 = 0x70;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
    pub const JLT: u8 = 0xa0;
    pub const JLE: u8 = 0xb0;
    pub const JSLT: u8 = 0xc0;
    pub const JSLE: u8 = 0xd0;

    // Atomic operations, in the immediate of `STX | ATOMIC`.
    pub const FETCH: i32 = 0x01;
    pub const XCHG: i32 = 0xe0 | FETCH;
    pub const CMPXCHG: i32 = 0xf0 | FETCH;

    // Source field of a 64-bit immediate load.
    /// `lddw` with `src = 4`: the immediate is the offset of a local function.
    pub const PSEUDO_FUNC: u8 = 4;
    /// `lddw` with `src = 5`: the immediate is an index into the program's map table.
    pub const PSEUDO_MAP_IDX: u8 = 5;
    /// `lddw` with `src = 6`: the immediate is an index into the program's map table, the next
    /// slot's an offset into the map's value.
    pub const PSEUDO_MAP_IDX_VALUE: u8 = 6;

    // Source field of a call.
    pub const CALL_HELPER: u8 = 0;
    pub const CALL_LOCAL: u8 = 1;
    pub const CALL_KFUNC: u8 = 2;

    /// The opcode of `lddw`.
    pub const LDDW: u8 = LD | IMM | DW;
    /// The opcode of `exit`.
    pub const EXIT_OP: u8 = JMP | EXIT;
    /// The opcode of a call by immediate.
    pub const CALL_OP: u8 = JMP | CALL;
}
