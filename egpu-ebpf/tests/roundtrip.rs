//! Property tests with a small deterministic PRNG (seeded from `EGPU_SEED`, printed on every run):
//! random bytes and random text never panic the decoder, the program checks, the disassembler or
//! the assembler, and every valid instruction survives slots → `Instruction` → slots and
//! slots → text → slots.

use std::collections::BTreeMap;

use egpu_ebpf::insn::{slots_from_bytes, slots_to_bytes};
use egpu_ebpf::instruction::encode;
use egpu_ebpf::{
    AluOp, AtomicOp, AttachPoint, ByteOrder, CallTarget, DecodeError, Decoded, Imm64, Insn,
    Instruction, JmpCond, MapDef, MapKind, Operand, Program, ProgramError, Reg, Size, Width,
    assemble, decode, disassemble,
};
use egpu_test_support::Rng;

const ITERATIONS: usize = 20_000;
const DEFAULT_SEED: u64 = 0x5eed_e6b0_0dd1_ce55;

// ---------------------------------------------------------------------------------------------
// PRNG
// ---------------------------------------------------------------------------------------------

/// A generator for test `name`, from `EGPU_SEED` (decimal or `0x` hex) or the default seed, salted
/// with the name: each test gets its own stream, so adding a test does not change the others'.
fn rng_for(name: &str) -> Rng {
    Rng::from_env_salted(name, DEFAULT_SEED)
}

/// Draws of the operands these tests need.
trait Draws {
    fn reg(&mut self) -> Reg;
    /// A 32-bit immediate, often an edge value.
    fn imm32(&mut self) -> i32;
    /// A 16-bit offset, often an edge value.
    fn off16(&mut self) -> i16;
    /// A jump offset from `pc` in a sequence of `len` slots: mostly near the sequence (in range,
    /// just outside, or into an `lddw`), sometimes anywhere in `bits` bits.
    fn jump_off(&mut self, pc: usize, len: usize, bits: u32) -> i64;
}

impl Draws for Rng {
    fn reg(&mut self) -> Reg {
        Reg::new(self.below(11) as u8).unwrap()
    }

    fn imm32(&mut self) -> i32 {
        match self.below(4) {
            0 => self.pick(&[0, 1, -1, i32::MIN, i32::MAX, 16, 32, 64, 0x7fff, -0x8000]),
            1 => self.range(-300, 300) as i32,
            _ => self.next_u64() as i32,
        }
    }

    fn off16(&mut self) -> i16 {
        match self.below(4) {
            0 => self.pick(&[0, 1, -1, i16::MIN, i16::MAX, 8, -8]),
            1 => self.range(-600, 600) as i16,
            _ => self.next_u64() as i16,
        }
    }

    fn jump_off(&mut self, pc: usize, len: usize, bits: u32) -> i64 {
        if self.chance(3, 4) {
            let target = self.range(-2, len as i64 + 1);
            target - pc as i64 - 1
        } else if bits == 16 {
            self.off16().into()
        } else {
            self.imm32().into()
        }
    }
}

fn user() -> AttachPoint {
    AttachPoint::User { ctx_size: 0 }
}

// ---------------------------------------------------------------------------------------------
// Random valid instructions
// ---------------------------------------------------------------------------------------------

const ATOMIC_OPS: [AtomicOp; 6] =
    [AtomicOp::Add, AtomicOp::Or, AtomicOp::And, AtomicOp::Xor, AtomicOp::Xchg, AtomicOp::CmpXchg];
const SIZES: [Size; 4] = [Size::B, Size::H, Size::W, Size::DW];
const WIDTHS: [Width; 2] = [Width::W32, Width::W64];

/// One instruction of every valid shape (opcode, operand kind, flags), with placeholder operands.
fn shapes() -> Vec<Instruction> {
    let r0 = Reg::R0;
    let mut v = Vec::new();
    for width in WIDTHS {
        for op in AluOp::PLAIN {
            v.push(Instruction::Alu { op, width, dst: r0, src: Operand::Imm(0) });
            v.push(Instruction::Alu { op, width, dst: r0, src: Operand::Reg(r0) });
        }
        let sx: &[u8] = if width == Width::W64 { &[8, 16, 32] } else { &[8, 16] };
        for &bits in sx {
            v.push(Instruction::Alu {
                op: AluOp::MovSx(bits),
                width,
                dst: r0,
                src: Operand::Reg(r0),
            });
        }
        v.push(Instruction::Neg { width, dst: r0 });
        for cond in JmpCond::ALL {
            for src in [Operand::Imm(0), Operand::Reg(r0)] {
                v.push(Instruction::Branch { cond, width, dst: r0, src, off: 0 });
            }
        }
    }
    for order in [ByteOrder::Le, ByteOrder::Be, ByteOrder::Swap] {
        for bits in [16, 32, 64] {
            v.push(Instruction::Endian { order, bits, dst: r0 });
        }
    }
    v.push(Instruction::LoadImm64 { dst: r0, imm: Imm64::Value(0) });
    v.push(Instruction::LoadImm64 { dst: r0, imm: Imm64::Map(0) });
    v.push(Instruction::LoadImm64 { dst: r0, imm: Imm64::MapValue { map: 0, offset: 0 } });
    v.push(Instruction::LoadImm64 { dst: r0, imm: Imm64::Func(0) });
    for size in SIZES {
        v.push(Instruction::Load { size, signed: false, dst: r0, base: r0, off: 0 });
        if size != Size::DW {
            v.push(Instruction::Load { size, signed: true, dst: r0, base: r0, off: 0 });
        }
        v.push(Instruction::Store { size, base: r0, off: 0, src: Operand::Reg(r0) });
        v.push(Instruction::Store { size, base: r0, off: 0, src: Operand::Imm(0) });
    }
    for size in [Size::W, Size::DW] {
        for op in ATOMIC_OPS {
            let fetches: &[bool] = match op {
                AtomicOp::Xchg | AtomicOp::CmpXchg => &[true],
                _ => &[false, true],
            };
            for &fetch in fetches {
                v.push(Instruction::Atomic { op, fetch, size, base: r0, off: 0, src: r0 });
            }
        }
    }
    v.push(Instruction::Jump { off: 0, long: false });
    v.push(Instruction::Jump { off: 0, long: true });
    v.push(Instruction::Call(CallTarget::Helper(0)));
    v.push(Instruction::Call(CallTarget::Local(0)));
    v.push(Instruction::Call(CallTarget::Reg(r0)));
    v.push(Instruction::Exit);
    v
}

/// `shape` with random operands, for an instruction at `pc` of a sequence of `len` slots.
fn fill(rng: &mut Rng, shape: Instruction, pc: usize, len: usize) -> Instruction {
    let operand = |rng: &mut Rng, like: Operand| match like {
        Operand::Reg(_) => Operand::Reg(rng.reg()),
        Operand::Imm(_) => Operand::Imm(rng.imm32()),
    };
    match shape {
        Instruction::Alu { op, width, src, .. } => {
            Instruction::Alu { op, width, dst: rng.reg(), src: operand(rng, src) }
        }
        Instruction::Neg { width, .. } => Instruction::Neg { width, dst: rng.reg() },
        Instruction::Endian { order, bits, .. } => {
            Instruction::Endian { order, bits, dst: rng.reg() }
        }
        Instruction::LoadImm64 { imm, .. } => {
            let imm = match imm {
                Imm64::Value(_) => Imm64::Value(match rng.below(3) {
                    0 => rng.pick(&[0, u64::MAX, 1 << 63, u64::from(u32::MAX), 1 << 32]),
                    1 => rng.imm32() as i64 as u64,
                    _ => rng.next_u64(),
                }),
                Imm64::Map(_) => Imm64::Map(if rng.chance(1, 2) {
                    rng.below(4) as u32
                } else {
                    rng.next_u64() as u32
                }),
                Imm64::MapValue { .. } => Imm64::MapValue {
                    map: if rng.chance(1, 2) { rng.below(4) as u32 } else { rng.next_u64() as u32 },
                    offset: rng.next_u64() as u32,
                },
                Imm64::Func(_) => Imm64::Func(rng.jump_off(pc, len, 32) as i32),
            };
            Instruction::LoadImm64 { dst: rng.reg(), imm }
        }
        Instruction::Load { size, signed, .. } => {
            Instruction::Load { size, signed, dst: rng.reg(), base: rng.reg(), off: rng.off16() }
        }
        Instruction::Store { size, src, .. } => {
            Instruction::Store { size, base: rng.reg(), off: rng.off16(), src: operand(rng, src) }
        }
        Instruction::Atomic { op, fetch, size, .. } => Instruction::Atomic {
            op,
            fetch,
            size,
            base: rng.reg(),
            off: rng.off16(),
            src: rng.reg(),
        },
        Instruction::Jump { long, .. } => {
            let off = rng.jump_off(pc, len, if long { 32 } else { 16 });
            let off = if long { off as i32 } else { off as i16 as i32 };
            Instruction::Jump { off, long }
        }
        Instruction::Branch { cond, width, src, .. } => Instruction::Branch {
            cond,
            width,
            dst: rng.reg(),
            src: operand(rng, src),
            off: rng.jump_off(pc, len, 16) as i16,
        },
        Instruction::Call(CallTarget::Helper(_)) => {
            Instruction::Call(CallTarget::Helper(if rng.chance(1, 2) {
                rng.below(40) as u32
            } else {
                rng.imm32() as u32
            }))
        }
        Instruction::Call(CallTarget::Local(_)) => {
            Instruction::Call(CallTarget::Local(rng.jump_off(pc, len, 32) as i32))
        }
        Instruction::Call(CallTarget::Reg(_)) => Instruction::Call(CallTarget::Reg(rng.reg())),
        Instruction::Exit => Instruction::Exit,
    }
}

/// A name for the shape of an instruction, the same for `shape` and `fill(shape)`.
fn shape_key(insn: &Instruction) -> String {
    let kind = |op: &Operand| match op {
        Operand::Reg(_) => "reg",
        Operand::Imm(_) => "imm",
    };
    match insn {
        Instruction::Alu { op, width, src, .. } => format!("alu {op:?} {width:?} {}", kind(src)),
        Instruction::Neg { width, .. } => format!("neg {width:?}"),
        Instruction::Endian { order, bits, .. } => format!("endian {order:?} {bits}"),
        Instruction::LoadImm64 { imm: Imm64::Value(_), .. } => "lddw value".into(),
        Instruction::LoadImm64 { imm: Imm64::Map(_), .. } => "lddw map".into(),
        Instruction::LoadImm64 { imm: Imm64::MapValue { .. }, .. } => "lddw map value".into(),
        Instruction::LoadImm64 { imm: Imm64::Func(_), .. } => "lddw func".into(),
        Instruction::Load { size, signed, .. } => format!("load {size:?} signed={signed}"),
        Instruction::Store { size, src, .. } => format!("store {size:?} {}", kind(src)),
        Instruction::Atomic { op, fetch, size, .. } => format!("atomic {op:?} {fetch} {size:?}"),
        Instruction::Jump { long, .. } => format!("ja long={long}"),
        Instruction::Branch { cond, width, src, .. } => {
            format!("branch {cond:?} {width:?} {}", kind(src))
        }
        Instruction::Call(CallTarget::Helper(_)) => "call helper".into(),
        Instruction::Call(CallTarget::Local(_)) => "call local".into(),
        Instruction::Call(CallTarget::Reg(_)) => "call reg".into(),
        Instruction::Exit => "exit".into(),
    }
}

/// A random sequence of 1 to 12 valid instructions; half of them end with `exit`, so that some
/// are well-formed programs.
fn random_sequence(rng: &mut Rng, shapes: &[Instruction]) -> Vec<Instruction> {
    let n = 1 + rng.below(12);
    let mut picked: Vec<Instruction> = (0..n).map(|_| rng.pick(shapes)).collect();
    if rng.chance(1, 2) {
        picked.push(Instruction::Exit);
    }
    let len: usize = picked.iter().map(Instruction::slots).sum();
    let mut pc = 0;
    picked
        .into_iter()
        .map(|shape| {
            let insn = fill(rng, shape, pc, len);
            pc += insn.slots();
            insn
        })
        .collect()
}

/// Where a jump or call target falls relative to a sequence of slots.
fn target_class(target: i64, starts: &[usize], len: usize) -> &'static str {
    if !(0..len as i64).contains(&target) {
        "outside"
    } else if starts.contains(&(target as usize)) {
        "instruction"
    } else {
        "lddw middle"
    }
}

#[test]
fn valid_instructions_round_trip() {
    let mut rng = rng_for("valid_instructions_round_trip");
    let shapes = shapes();
    let mut hits: BTreeMap<String, usize> = shapes.iter().map(|s| (shape_key(s), 0)).collect();
    assert_eq!(hits.len(), shapes.len(), "shape keys are not unique");
    let mut targets: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut programs_ok = 0;

    for iteration in 0..ITERATIONS {
        let insns = random_sequence(&mut rng, &shapes);
        let slots = encode(&insns);
        let ctx = || format!("iteration {iteration}: {insns:?}");

        // slots -> Instruction: the same instructions at the same pcs.
        let mut pc = 0;
        let expected: Vec<Decoded> = insns
            .iter()
            .map(|&insn| {
                let d = Decoded { pc, insn };
                pc += insn.slots();
                d
            })
            .collect();
        assert_eq!(slots.len(), pc);
        let decoded = decode(&slots).unwrap_or_else(|e| panic!("{}: {e}", ctx()));
        assert_eq!(decoded, expected, "{}", ctx());

        // Each instruction alone: encode_into agrees with encode, and its Display (relative
        // offsets) assembles back into its slots.
        for insn in &insns {
            *hits.get_mut(&shape_key(insn)).expect("generated from a shape") += 1;
            let mut one = Vec::new();
            insn.encode_into(&mut one);
            let (a, b) = insn.encode();
            assert_eq!(one, std::iter::once(a).chain(b).collect::<Vec<_>>());
            let text = insn.to_string();
            match assemble(&text) {
                Ok(back) => assert_eq!(back, one, "{}: `{text}`", ctx()),
                Err(e) => panic!("{}: `{text}` does not assemble: {e}", ctx()),
            }
        }

        // slots -> text -> slots, with labels for targets inside and `+n` for the rest.
        let text = disassemble(&slots).unwrap_or_else(|e| panic!("{}: {e}", ctx()));
        match assemble(&text) {
            Ok(back) => assert_eq!(back, slots, "{}\nlisting:\n{text}", ctx()),
            Err(e) => panic!("{}\nlisting:\n{text}\ndoes not assemble: {e}", ctx()),
        }

        let starts: Vec<usize> = expected.iter().map(|d| d.pc).collect();
        for d in &expected {
            if let Some(t) = d.insn.jump_target(d.pc).or(d.insn.call_target(d.pc)) {
                *targets.entry(target_class(t, &starts, slots.len())).or_default() += 1;
            }
        }

        // Where the sequence happens to be a well-formed program, the program's own listing is
        // the same text.
        let maps = vec![
            MapDef {
                name: "m".into(),
                kind: MapKind::Hash,
                key_size: 4,
                value_size: 4,
                capacity: 1,
            };
            4
        ];
        if let Ok(program) = Program::new(slots.clone(), maps, user()) {
            programs_ok += 1;
            assert_eq!(program.disassemble(), text, "{}", ctx());
            assert_eq!(program.insns(), &slots[..]);
            assert_eq!(program.decoded(), &expected[..]);
        }
    }

    let missed: Vec<&String> = hits.iter().filter(|&(_, &n)| n == 0).map(|(k, _)| k).collect();
    assert!(missed.is_empty(), "shapes never generated: {missed:?}");
    println!("{} shapes, targets {targets:?}, {programs_ok} well-formed programs", hits.len());
    for class in ["outside", "instruction", "lddw middle"] {
        assert!(
            targets.get(class).copied().unwrap_or(0) > 100,
            "few `{class}` targets: {targets:?}"
        );
    }
    assert!(programs_ok > 0, "no generated sequence was a well-formed program");
}

/// Jump targets outside the listed slots are printed as `+n`/`-n` and assemble back to the same
/// offset, at the limits of each offset width too.
#[test]
fn out_of_range_relative_offsets_round_trip() {
    let exit = Instruction::Exit;
    let mut cases = Vec::new();
    for off in [i16::MIN, i16::MIN + 1, -3, 1, 2, 3, i16::MAX] {
        cases.push(vec![Instruction::Jump { off: off.into(), long: false }, exit]);
        let src = Operand::Imm(-1);
        let branch =
            Instruction::Branch { cond: JmpCond::Sle, width: Width::W32, dst: Reg::R9, src, off };
        cases.push(vec![exit, branch, exit]);
    }
    for off in [i32::MIN, i32::MIN + 1, -3, 1, 2, i32::MAX] {
        cases.push(vec![Instruction::Jump { off, long: true }, exit]);
        cases.push(vec![exit, Instruction::Call(CallTarget::Local(off)), exit]);
    }
    for insns in cases {
        let slots = encode(&insns);
        let text = disassemble(&slots).unwrap();
        assert!(!text.contains(':'), "no target is inside, so no label:\n{text}");
        assert_eq!(assemble(&text).unwrap(), slots, "listing:\n{text}");
        assert!(Program::new(slots, vec![], user()).is_err());
    }
}

// ---------------------------------------------------------------------------------------------
// Random bytes
// ---------------------------------------------------------------------------------------------

/// Random bytes: pure noise, or a valid sequence with a few bytes changed and maybe cut.
fn random_bytes(rng: &mut Rng, shapes: &[Instruction]) -> Vec<u8> {
    if rng.chance(1, 3) {
        let len = if rng.chance(1, 2) { 8 * rng.below(33) } else { rng.below(257) };
        return (0..len).map(|_| rng.next_u64() as u8).collect();
    }
    let mut bytes = slots_to_bytes(&encode(&random_sequence(rng, shapes)));
    for _ in 0..rng.below(4) {
        if bytes.is_empty() {
            break;
        }
        let i = rng.below(bytes.len());
        bytes[i] = match rng.below(3) {
            0 => rng.next_u64() as u8,
            1 => bytes[i] ^ (1 << rng.below(8)),
            _ => 0,
        };
    }
    if rng.chance(1, 8) {
        bytes.truncate(rng.below(bytes.len() + 1));
    }
    bytes.truncate(256);
    bytes
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = rng_for("random_bytes_never_panic");
    let shapes = shapes();
    let mut outcomes: BTreeMap<&'static str, usize> = BTreeMap::new();
    for iteration in 0..ITERATIONS {
        let bytes = random_bytes(&mut rng, &shapes);
        let ctx = || format!("iteration {iteration}: bytes {bytes:02x?}");
        let program = Program::from_bytes(&bytes, vec![], user());
        let slots = match slots_from_bytes(&bytes) {
            Err(e) => {
                assert_eq!(e, DecodeError::TruncatedSlot { len: bytes.len() }, "{}", ctx());
                assert_ne!(bytes.len() % 8, 0);
                assert_eq!(program.map(|_| ()), Err(ProgramError::Decode(e)), "{}", ctx());
                *outcomes.entry("truncated").or_default() += 1;
                continue;
            }
            Ok(slots) => slots,
        };
        assert_eq!(bytes.len() % 8, 0);
        assert_eq!(slots_to_bytes(&slots), bytes, "{}", ctx());
        let decoded = decode(&slots);
        let listing = disassemble(&slots);
        match decoded {
            Err(e) => {
                assert_eq!(listing, Err(e.clone()), "{}", ctx());
                let pc = e.pc().unwrap_or_else(|| panic!("{}: {e:?}", ctx()));
                assert!(pc < slots.len(), "{}: {e:?}", ctx());
                assert!(e.to_string().contains(&format!("instruction {pc}")), "{e}");
                assert_eq!(program.map(|_| ()), Err(ProgramError::Decode(e)), "{}", ctx());
                *outcomes.entry("does not decode").or_default() += 1;
            }
            Ok(decoded) => {
                // Decoding is canonical: re-encoding gives the same slots.
                let insns: Vec<Instruction> = decoded.iter().map(|d| d.insn).collect();
                assert_eq!(encode(&insns), slots, "{}", ctx());
                let text = listing.unwrap_or_else(|e| panic!("{}: {e}", ctx()));
                match assemble(&text) {
                    Ok(back) => assert_eq!(back, slots, "{}\nlisting:\n{text}", ctx()),
                    Err(e) => panic!("{}\nlisting:\n{text}\ndoes not assemble: {e}", ctx()),
                }
                match program {
                    Ok(p) => {
                        assert_eq!(p.to_bytes(), bytes);
                        assert_eq!(p.disassemble(), text);
                        *outcomes.entry("program").or_default() += 1;
                    }
                    Err(ProgramError::Empty) => assert!(slots.is_empty()),
                    Err(_) => *outcomes.entry("decodes, not a program").or_default() += 1,
                }
            }
        }
    }
    println!("outcomes: {outcomes:?}");
    for outcome in ["truncated", "does not decode", "decodes, not a program", "program"] {
        assert!(outcomes.get(outcome).copied().unwrap_or(0) > 0, "never {outcome}: {outcomes:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Random text
// ---------------------------------------------------------------------------------------------

const SOUP: &[&str] = &[
    "mov",
    "mov32",
    "add",
    "sub64",
    "lddw",
    "ldxw",
    "ldxsb",
    "ldxsdw",
    "stxdw",
    "stw",
    "st",
    "stx",
    "lock",
    "fetch",
    "xchg",
    "cmpxchg32",
    "add32",
    "call",
    "local",
    "helper",
    "ja",
    "ja32",
    "jeq",
    "jsle32",
    "exit",
    "neg",
    "be16",
    "le64",
    "bswap32",
    "swap",
    "movsx832",
    "movsx3232",
    "movsx",
    "%r0",
    "%r1",
    "%r10",
    "%r11",
    "%r15",
    "%r",
    "%rx",
    "r3",
    "%R2",
    "0",
    "-1",
    "+1",
    "0x",
    "0x-",
    "-0x",
    "--1",
    "+-1",
    "0xffffffff",
    "0x100000000",
    "-2147483649",
    "99999999999999999999999999999999999999999",
    "[%r1+4]",
    "[%r10-8]",
    "[%r1]",
    "[%r1",
    "%r1]",
    "[]",
    "[+]",
    "[%r1+]",
    "[%r1-x]",
    "[%r1+70000]",
    "map[0]",
    "map[-1]",
    "map[]",
    "map[",
    "a:",
    "b:",
    "L1:",
    "fn2:",
    "exit:",
    "1a:",
    ":",
    "a",
    "b",
    "L1",
    "fn2",
    "+0",
    "-0",
    "+32768",
    "-32769",
    ",",
    ",,",
    "#",
    "# c",
    ";",
    "\t",
    " ",
    "é",
    "∑",
    "🦀",
    "\u{0}",
    "]",
    "[",
    "[[%r1]]",
    "]%r1[",
];

fn random_number(rng: &mut Rng) -> String {
    let sign = rng.pick(&["", "-", "+", "--", "+-"]);
    let prefix = rng.pick(&["", "0x", "0X", "0x-", "0x+"]);
    let digits = rng.below(40);
    let alphabet = if prefix.is_empty() { "0123456789" } else { "0123456789abcdefABCDEF" };
    let body: String =
        (0..digits).map(|_| alphabet.as_bytes()[rng.below(alphabet.len())] as char).collect();
    format!("{sign}{prefix}{body}")
}

fn random_line(rng: &mut Rng, shapes: &[Instruction]) -> String {
    match rng.below(5) {
        // A valid instruction.
        0 => {
            let shape = rng.pick(shapes);
            fill(rng, shape, 0, 4).to_string()
        }
        // A valid instruction with one token replaced, removed or repeated.
        1 | 2 => {
            let shape = rng.pick(shapes);
            let insn = fill(rng, shape, 0, 4);
            let mut tokens: Vec<String> = insn.to_string().split(' ').map(str::to_string).collect();
            let i = rng.below(tokens.len());
            match rng.below(4) {
                0 => tokens[i] = rng.pick(SOUP).to_string(),
                1 => tokens[i] = random_number(rng),
                2 => {
                    tokens.remove(i);
                }
                _ => {
                    let t = tokens[i].clone();
                    tokens.insert(i, t);
                }
            }
            tokens.join(" ")
        }
        // Token soup.
        3 => {
            let n = rng.below(6);
            let mut line = String::new();
            for _ in 0..n {
                let tok =
                    if rng.chance(1, 4) { random_number(rng) } else { rng.pick(SOUP).to_string() };
                line += &tok;
                line += rng.pick(&[" ", ", ", ",", "", "\t"]);
            }
            line
        }
        // Random characters.
        _ => (0..rng.below(30))
            .map(|_| match rng.below(8) {
                0 => char::from_u32(rng.below(0x3000) as u32).unwrap_or('?'),
                _ => (0x20 + rng.below(0x5f) as u8) as char,
            })
            .collect(),
    }
}

#[test]
fn random_text_never_panics() {
    let mut rng = rng_for("random_text_never_panics");
    let shapes = shapes();
    let (mut ok, mut err) = (0usize, 0usize);
    for iteration in 0..ITERATIONS {
        let n = 1 + rng.below(8);
        let lines: Vec<String> = (0..n).map(|_| random_line(&mut rng, &shapes)).collect();
        let text = lines.join("\n");
        let line_count = text.lines().count();
        match assemble(&text) {
            Err(e) => {
                err += 1;
                assert!(
                    (1..=line_count).contains(&e.line),
                    "iteration {iteration}: {e:?} for {line_count} lines:\n{text}"
                );
                assert!(e.pc <= 2 * line_count, "iteration {iteration}: {e:?}:\n{text}");
                assert!(!e.message.is_empty());
            }
            Ok(slots) => {
                ok += 1;
                assert!(slots.len() <= 2 * line_count, "iteration {iteration}:\n{text}");
                // What the assembler makes is canonical: it decodes, and lists back into itself.
                let listing = disassemble(&slots)
                    .unwrap_or_else(|e| panic!("iteration {iteration}: {e}\n{text}"));
                assert_eq!(
                    assemble(&listing).as_ref(),
                    Ok(&slots),
                    "iteration {iteration}:\n{text}\nlisting:\n{listing}"
                );
            }
        }
    }
    println!("{ok} texts assembled, {err} refused");
    assert!(ok > ITERATIONS / 50 && err > ITERATIONS / 2, "{ok} assembled, {err} refused");
}

/// A sanity check of the generator itself: every shape is valid and decodes to itself.
#[test]
fn every_shape_is_valid() {
    let shapes = shapes();
    assert!(shapes.len() > 150, "{} shapes", shapes.len());
    for shape in shapes {
        let slots: Vec<Insn> = encode(&[shape]);
        assert_eq!(decode(&slots).map(|d| d[0].insn), Ok(shape), "{shape:?}");
    }
}
