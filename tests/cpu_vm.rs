//! The CPU VM against a reference model of RFC 9669, on both engines.
//!
//! * Every ALU operation, branch condition and atomic, at both widths, with register and immediate
//!   operands, over edge values and random ones, and over every pairing of registers: the result
//!   register holds the reference value and every other register is unchanged.
//! * Random programs built to be safe (registers and initialised stack slots only, forward jumps):
//!   the interpreter and the JIT agree on `r0` and on the context's bytes.
//! * Programs with random bytes mutated: loading never panics, and whatever the verifier accepts
//!   runs alike on both engines. (Random programs shaped like probes, against the verifier, are in
//!   `tests/verifier.rs`.)
//!
//! Random cases come from a fixed seed, or from `EGPU_SEED` to reproduce a failure.

use egpu::ebpf::verifier::verify;
use egpu::ebpf::{
    AluOp, AtomicOp, AttachPoint, ByteOrder, Imm64, Instruction, JmpCond, Operand, Program, Reg,
    Size, Width, instruction::encode,
};
use egpu::vm::{EngineChoice, JitRefusal, LoadError, RunError, Vm};

// ---------------------------------------------------------------------------------------------
// Randomness.

use egpu_test_support::Rng;

/// The generator of test `test`, from `EGPU_SEED` or this file's seed.
fn rng_for(test: &str) -> Rng {
    Rng::from_env(test, 0x00e6_9d0c_cafe_f00d)
}

/// Draws of the values these tests need.
trait Draws {
    /// A value that is an edge case half of the time.
    fn value(&mut self) -> u64;
    fn imm(&mut self) -> i32;
    fn reg(&mut self) -> Reg;
}

impl Draws for Rng {
    fn value(&mut self) -> u64 {
        const EDGES: [u64; 16] = [
            0,
            1,
            2,
            7,
            u64::MAX,
            u64::MAX - 6,
            i64::MIN as u64,
            i64::MAX as u64,
            i32::MIN as i64 as u64,
            i32::MAX as u64,
            u32::MAX as u64,
            0x8000_0000,
            0xff,
            0x80,
            0x8000,
            0xffff_ffff_0000_0001,
        ];
        if self.one_in(2) { self.pick(&EDGES) } else { self.next_u64() >> self.below(64) }
    }
    fn imm(&mut self) -> i32 {
        const EDGES: [i32; 12] = [0, 1, -1, 2, -7, 7, 31, 32, 63, 64, i32::MIN, i32::MAX];
        if self.one_in(2) { self.pick(&EDGES) } else { self.next_u64() as i32 >> self.below(32) }
    }
    fn reg(&mut self) -> Reg {
        Reg::new(self.below(10) as u8).expect("r0..r9")
    }
}

// ---------------------------------------------------------------------------------------------
// The reference model.

fn imm_value(width: Width, imm: i32) -> u64 {
    match width {
        Width::W64 => imm as i64 as u64,
        Width::W32 => imm as u32 as u64,
    }
}

// ---------------------------------------------------------------------------------------------
// Programs that set every register, apply one instruction, and write every register to the
// context, so the test sees all ten.

const DUMP: usize = 80;

fn lddw(dst: Reg, v: u64) -> Instruction {
    Instruction::LoadImm64 { dst, imm: Imm64::Value(v) }
}
fn mov(dst: Reg, src: Reg) -> Instruction {
    Instruction::Alu { op: AluOp::Mov, width: Width::W64, dst, src: Operand::Reg(src) }
}
fn stxdw(base: Reg, off: i16, src: Reg) -> Instruction {
    Instruction::Store { size: Size::DW, base, off, src: Operand::Reg(src) }
}
fn ldxdw(dst: Reg, base: Reg, off: i16) -> Instruction {
    Instruction::Load { size: Size::DW, signed: false, dst, base, off }
}

/// `init` sets the registers, `body` runs, then all ten registers are written to the context.
fn harness(init: &[u64; 10], body: &[Instruction]) -> Program {
    let fp = Reg::FP;
    let r = |n: u8| Reg::new(n).expect("register");
    let mut p = vec![stxdw(fp, -8, Reg::R1)];
    for (i, &v) in init.iter().enumerate() {
        p.push(lddw(r(i as u8), v));
    }
    p.extend_from_slice(body);
    for i in 0..10u8 {
        p.push(stxdw(fp, -96 + 8 * i16::from(i), r(i)));
    }
    p.push(ldxdw(Reg::R1, fp, -8));
    for i in 0..10u8 {
        p.push(ldxdw(Reg::R2, fp, -96 + 8 * i16::from(i)));
        p.push(stxdw(Reg::R1, 8 * i16::from(i), Reg::R2));
    }
    p.push(Instruction::Alu {
        op: AluOp::Mov,
        width: Width::W64,
        dst: Reg::R0,
        src: Operand::Imm(0),
    });
    p.push(Instruction::Exit);
    Program::new(encode(&p), vec![], AttachPoint::User { ctx_size: DUMP as u32 }).expect("valid")
}

fn engines(p: &Program) -> [Vm; 2] {
    let p = &verify(p).expect("verifies");
    let interp = Vm::with_engine(p, EngineChoice::Interpreter).expect("interpreter loads");
    let jit = Vm::with_engine(p, EngineChoice::Jit).expect("the JIT takes register programs");
    [interp, jit]
}

/// Runs the harness on both engines; returns the ten registers after `body`.
fn registers_after(init: &[u64; 10], body: &[Instruction]) -> [[u64; 10]; 2] {
    let p = harness(init, body);
    engines(&p).map(|mut vm| {
        let mut ctx = [0u8; DUMP];
        vm.run(&mut ctx).unwrap_or_else(|e| panic!("{}: {e}\n{}", vm.engine(), vm.legalised()));
        std::array::from_fn(|i| {
            u64::from_le_bytes(ctx[8 * i..8 * i + 8].try_into().expect("8 bytes"))
        })
    })
}

fn random_init(rng: &mut Rng) -> [u64; 10] {
    std::array::from_fn(|_| rng.value())
}

#[test]
fn every_alu_operation_matches_the_reference() {
    let mut rng = rng_for("alu");
    let mut cases = 0;
    for op in AluOp::PLAIN.into_iter().chain([AluOp::MovSx(8), AluOp::MovSx(16), AluOp::MovSx(32)])
    {
        for width in [Width::W32, Width::W64] {
            if op == AluOp::MovSx(32) && width == Width::W32 {
                continue;
            }
            for round in 0..40 {
                let init = random_init(&mut rng);
                let dst = rng.reg();
                let imm_form = !matches!(op, AluOp::MovSx(_)) && round % 2 == 0;
                let (src, b) = if imm_form {
                    let imm = rng.imm();
                    (Operand::Imm(imm), imm_value(width, imm))
                } else {
                    // Every fourth register case uses dst as the source too.
                    let s = if round % 4 == 1 { dst } else { rng.reg() };
                    (Operand::Reg(s), init[usize::from(s.index())])
                };
                let insn = Instruction::Alu { op, width, dst, src };
                let mut want = init;
                want[usize::from(dst.index())] = op.eval(width, init[usize::from(dst.index())], b);
                for (engine, got) in
                    ["interpreter", "jit"].iter().zip(registers_after(&init, &[insn]))
                {
                    assert_eq!(got, want, "{engine}: `{insn}` with registers {init:#x?}");
                }
                cases += 1;
            }
        }
    }
    println!("alu: {cases} cases on both engines");
}

#[test]
fn negation_byte_swaps_and_sign_extending_loads_match_the_reference() {
    let mut rng = rng_for("unary");
    for round in 0..300 {
        let init = random_init(&mut rng);
        let dst = rng.reg();
        let a = init[usize::from(dst.index())];
        let (insns, result) = match round % 4 {
            0 => {
                let width = rng.pick(&[Width::W32, Width::W64]);
                let r = match width {
                    Width::W64 => (a as i64).wrapping_neg() as u64,
                    Width::W32 => u64::from((a as i32).wrapping_neg() as u32),
                };
                (vec![Instruction::Neg { width, dst }], r)
            }
            1 => {
                let order = rng.pick(&[ByteOrder::Le, ByteOrder::Be, ByteOrder::Swap]);
                let bits = rng.pick(&[16u8, 32, 64]);
                let r = match (order, bits) {
                    (ByteOrder::Le, 16) => u64::from(a as u16),
                    (ByteOrder::Le, 32) => u64::from(a as u32),
                    (ByteOrder::Le, _) => a,
                    (_, 16) => u64::from((a as u16).swap_bytes()),
                    (_, 32) => u64::from((a as u32).swap_bytes()),
                    (_, _) => a.swap_bytes(),
                };
                (vec![Instruction::Endian { order, bits, dst }], r)
            }
            _ => {
                // Store the value, then load it back with a sign-extending or plain load.
                let size = rng.pick(&[Size::B, Size::H, Size::W, Size::DW]);
                let signed = size != Size::DW && round % 4 == 2;
                let off = -104 - 8 * rng.below(8) as i16;
                let r = match (size, signed) {
                    (Size::B, true) => a as i8 as u64,
                    (Size::H, true) => a as i16 as u64,
                    (Size::W, true) => a as i32 as u64,
                    (Size::B, false) => u64::from(a as u8),
                    (Size::H, false) => u64::from(a as u16),
                    (Size::W, false) => u64::from(a as u32),
                    (Size::DW, _) => a,
                };
                let store = stxdw(Reg::FP, off, dst);
                (vec![store, Instruction::Load { size, signed, dst, base: Reg::FP, off }], r)
            }
        };
        let mut want = init;
        want[usize::from(dst.index())] = result;
        for got in registers_after(&init, &insns) {
            assert_eq!(got, want, "{insns:?} with registers {init:#x?}");
        }
    }
}

#[test]
fn every_branch_condition_matches_the_reference() {
    let mut rng = rng_for("branch");
    let mut cases = 0;
    for cond in JmpCond::ALL {
        for width in [Width::W32, Width::W64] {
            for round in 0..40 {
                let mut init = random_init(&mut rng);
                let dst = Reg::R1;
                let (src, b) = if round % 2 == 0 {
                    let imm = rng.imm();
                    (Operand::Imm(imm), imm_value(Width::W64, imm))
                } else {
                    (Operand::Reg(Reg::R2), init[2])
                };
                if round % 5 == 0 {
                    // Equal operands, and neighbours, are where conditions differ.
                    init[1] = b.wrapping_add(rng.below(3) as u64).wrapping_sub(1);
                }
                // r0 = 1 when taken, 2 when not.
                let body = [
                    Instruction::Branch { cond, width, dst, src, off: 2 },
                    Instruction::Alu {
                        op: AluOp::Mov,
                        width: Width::W64,
                        dst: Reg::R0,
                        src: Operand::Imm(2),
                    },
                    Instruction::Jump { off: 1, long: false },
                    Instruction::Alu {
                        op: AluOp::Mov,
                        width: Width::W64,
                        dst: Reg::R0,
                        src: Operand::Imm(1),
                    },
                ];
                let taken = cond.holds(width, init[1], b);
                let mut want = init;
                want[0] = if taken { 1 } else { 2 };
                for got in registers_after(&init, &body) {
                    assert_eq!(
                        got[0], want[0],
                        "`{}` with r1={:#x}, r2={:#x}",
                        body[0], init[1], init[2]
                    );
                    assert_eq!(got, want);
                }
                cases += 1;
            }
        }
    }
    println!("branch: {cases} cases on both engines");
}

#[test]
fn every_atomic_matches_the_reference_and_keeps_other_registers() {
    let mut rng = rng_for("atomic");
    let ops = [
        AtomicOp::Add,
        AtomicOp::Or,
        AtomicOp::And,
        AtomicOp::Xor,
        AtomicOp::Xchg,
        AtomicOp::CmpXchg,
    ];
    for op in ops {
        for size in [Size::W, Size::DW] {
            for round in 0..30 {
                let mut init = random_init(&mut rng);
                let fetch = matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg) || round % 2 == 0;
                let src = rng.reg();
                // The address register: r10, or another register holding a stack address.
                let base = if round % 3 == 0 {
                    Reg::FP
                } else {
                    Reg::new(6 + rng.below(4) as u8).unwrap()
                };
                let base = if base == src { Reg::FP } else { base };
                let mem = rng.value();
                if round % 4 == 1 && op == AtomicOp::CmpXchg {
                    init[0] = mem; // a matching comparison
                }
                let slot: i16 = -112;
                let mut body =
                    vec![lddw(Reg::R0, mem), stxdw(Reg::FP, slot, Reg::R0), lddw(Reg::R0, init[0])];
                let off = if base == Reg::FP {
                    slot
                } else {
                    body.push(mov(base, Reg::FP));
                    body.push(Instruction::Alu {
                        op: AluOp::Add,
                        width: Width::W64,
                        dst: base,
                        src: Operand::Imm(-120),
                    });
                    8
                };
                let atomic = Instruction::Atomic { op, fetch, size, base, off, src };
                body.push(atomic);
                if base != Reg::FP {
                    // The harness dumps every register into the context: a pointer must not go.
                    body.push(lddw(base, init[usize::from(base.index())]));
                }
                body.push(ldxdw(Reg::R0, Reg::FP, slot));
                let s = init[usize::from(src.index())];
                let mask = if size == Size::W { u64::from(u32::MAX) } else { u64::MAX };
                let old = mem & mask;
                let (new, fetched) = match op {
                    AtomicOp::Add => (old.wrapping_add(s) & mask, old),
                    AtomicOp::Or => ((old | s) & mask, old),
                    AtomicOp::And => (old & s & mask, old),
                    AtomicOp::Xor => ((old ^ s) & mask, old),
                    AtomicOp::Xchg => (s & mask, old),
                    AtomicOp::CmpXchg => {
                        if old == init[0] & mask {
                            (s & mask, old)
                        } else {
                            (old, old)
                        }
                    }
                };
                let stored = (mem & !mask) | new;
                let mut want = init;
                match op {
                    AtomicOp::CmpXchg => {}
                    _ if fetch => want[usize::from(src.index())] = fetched,
                    _ => {}
                }
                // r0 ends up holding the memory word (the fetched value of cmpxchg is checked by
                // the variant below).
                want[0] = stored;
                for got in registers_after(&init, &body) {
                    assert_eq!(got, want, "`{atomic}` with memory {mem:#x}, registers {init:#x?}");
                }
                if op == AtomicOp::CmpXchg {
                    // Without the final load, r0 holds the old value.
                    body.pop();
                    let mut want = init;
                    want[0] = fetched;
                    for got in registers_after(&init, &body) {
                        assert_eq!(
                            got[0], want[0],
                            "cmpxchg's r0, memory {mem:#x}, r0 {:#x}",
                            init[0]
                        );
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Random programs.

/// A random program that only touches registers and the 64 initialised bytes below r10; its
/// jumps go forward. It ends by folding every register into r0.
fn safe_program(rng: &mut Rng) -> Vec<Instruction> {
    let mut p: Vec<Instruction> = Vec::new();
    for i in 0..8 {
        p.push(Instruction::Store {
            size: Size::DW,
            base: Reg::FP,
            off: -8 * (i + 1),
            src: Operand::Imm(rng.imm()),
        });
    }
    for r in 0..10 {
        p.push(lddw(Reg::new(r).unwrap(), rng.value()));
    }
    let len = 5 + rng.below(30);
    // Jumps are placed with a placeholder offset and patched to a later instruction.
    let mut jumps = Vec::new();
    for _ in 0..len {
        let dst = rng.reg();
        let width = rng.pick(&[Width::W32, Width::W64]);
        let insn = match rng.below(9) {
            0..=2 => {
                let op = rng.pick(&AluOp::PLAIN);
                let src =
                    if rng.one_in(2) { Operand::Imm(rng.imm()) } else { Operand::Reg(rng.reg()) };
                Instruction::Alu { op, width, dst, src }
            }
            3 => {
                let bits = rng.pick(&[8u8, 16, 32]);
                let width = if bits == 32 { Width::W64 } else { width };
                Instruction::Alu {
                    op: AluOp::MovSx(bits),
                    width,
                    dst,
                    src: Operand::Reg(rng.reg()),
                }
            }
            4 => match rng.below(2) {
                0 => Instruction::Neg { width, dst },
                _ => Instruction::Endian {
                    order: rng.pick(&[ByteOrder::Le, ByteOrder::Be, ByteOrder::Swap]),
                    bits: rng.pick(&[16, 32, 64]),
                    dst,
                },
            },
            5 => {
                let size = rng.pick(&[Size::B, Size::H, Size::W, Size::DW]);
                let off = -(rng.below(64 / size.bytes() as usize) as i16 + 1) * size.bytes() as i16;
                if rng.one_in(2) {
                    Instruction::Load {
                        size,
                        signed: size != Size::DW && rng.one_in(2),
                        dst,
                        base: Reg::FP,
                        off,
                    }
                } else {
                    let src = if rng.one_in(2) {
                        Operand::Imm(rng.imm())
                    } else {
                        Operand::Reg(rng.reg())
                    };
                    Instruction::Store { size, base: Reg::FP, off, src }
                }
            }
            6 => {
                let size = rng.pick(&[Size::W, Size::DW]);
                let off = -(rng.below(64 / size.bytes() as usize) as i16 + 1) * size.bytes() as i16;
                let op = rng.pick(&[
                    AtomicOp::Add,
                    AtomicOp::Or,
                    AtomicOp::And,
                    AtomicOp::Xor,
                    AtomicOp::Xchg,
                    AtomicOp::CmpXchg,
                ]);
                let fetch = matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg) || rng.one_in(2);
                Instruction::Atomic { op, fetch, size, base: Reg::FP, off, src: rng.reg() }
            }
            _ => {
                jumps.push(p.len());
                let src =
                    if rng.one_in(2) { Operand::Imm(rng.imm()) } else { Operand::Reg(rng.reg()) };
                if rng.one_in(8) {
                    Instruction::Jump { off: 0, long: rng.one_in(2) }
                } else {
                    Instruction::Branch { cond: rng.pick(&JmpCond::ALL), width, dst, src, off: 0 }
                }
            }
        };
        p.push(insn);
    }
    let tail = p.len();
    for r in 1..10 {
        p.push(Instruction::Alu {
            op: AluOp::Mul,
            width: Width::W64,
            dst: Reg::R0,
            src: Operand::Imm(0x3b9a_ca07),
        });
        p.push(Instruction::Alu {
            op: AluOp::Xor,
            width: Width::W64,
            dst: Reg::R0,
            src: Operand::Reg(Reg::new(r).unwrap()),
        });
    }
    p.push(Instruction::Exit);
    // Patch jumps to a random later instruction (up to the start of the tail).
    let slot_of =
        |p: &[Instruction], i: usize| p[..i].iter().map(Instruction::slots).sum::<usize>();
    for j in jumps {
        let target = j + 1 + rng.below(tail - j);
        let off = (slot_of(&p, target) - slot_of(&p, j) - 1) as i32;
        match &mut p[j] {
            Instruction::Jump { off: o, .. } => *o = off,
            Instruction::Branch { off: o, .. } => *o = off as i16,
            _ => unreachable!(),
        }
    }
    p
}

#[test]
fn random_safe_programs_agree_on_both_engines() {
    let mut rng = rng_for("safe programs");
    let rounds = 1500;
    let mut too_large = 0;
    for round in 0..rounds {
        let insns = safe_program(&mut rng);
        let p = Program::new(encode(&insns), vec![], AttachPoint::User { ctx_size: 8 })
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let v = verify(&p).unwrap_or_else(|e| panic!("round {round}: {e}"));
        let mut interp = Vm::with_engine(&v, EngineChoice::Interpreter).expect("interpreter loads");
        let mut jit = match Vm::with_engine(&v, EngineChoice::Jit) {
            Ok(vm) => vm,
            Err(LoadError::Jit(JitRefusal::CodeTooLarge { .. })) => {
                too_large += 1;
                continue;
            }
            Err(e) => {
                panic!("round {round}: the JIT refuses a safe program: {e}\n{}", p.disassemble())
            }
        };
        let a = interp
            .run(&mut [0; 8])
            .unwrap_or_else(|e| panic!("round {round}: {e}\n{}", p.disassemble()));
        let b = jit
            .run(&mut [0; 8])
            .unwrap_or_else(|e| panic!("round {round}: {e}\n{}", p.disassemble()));
        assert_eq!(a, b, "round {round}: the engines disagree on\n{}", p.disassemble());
    }
    println!("safe programs: {} agree, {too_large} too large for the JIT page", rounds - too_large);
    assert!(too_large < rounds / 10, "too many programs outgrew the JIT page to compare");
}

#[test]
fn local_calls_get_frames_of_their_own_to_the_full_depth() {
    // Each of 8 frames writes its depth into its own [r10-8] and [r10-64] (the verifier allows
    // 512 bytes for the whole chain), bumps the first with an atomic, calls the next, then adds
    // both back into r0 after the callee returned: overlapping frames, or a clobbered r6, would
    // change the sum.
    let mut text = String::new();
    for depth in 0..8 {
        text.push_str(&format!(
            "f{depth}:
             mov %r6, {depth}
             stxdw [%r10-8], %r6
             stxdw [%r10-64], %r6
             mov %r1, 100
             lock add [%r10-8], %r1
             mov %r0, 0\n"
        ));
        if depth < 7 {
            text.push_str(&format!("call local f{}\n", depth + 1));
        }
        text.push_str(
            "ldxdw %r1, [%r10-8]
             add %r0, %r1
             ldxdw %r1, [%r10-64]
             add %r0, %r1
             mul %r6, 1000
             add %r0, %r6
             exit\n",
        );
    }
    let p = Program::new(
        egpu::ebpf::assemble(&text).unwrap(),
        vec![],
        AttachPoint::User { ctx_size: 0 },
    )
    .unwrap();
    let want: u64 = (0..8).map(|d| (d + 100) + d + d * 1000).sum();
    for mut vm in engines(&p) {
        assert_eq!(vm.run(&mut []).unwrap(), want, "{}", vm.engine());
    }
    // A ninth frame is refused when the program is built.
    let deeper = text.replace("mov %r0, 0\nldxdw", "mov %r0, 0\ncall local f8\nldxdw")
        + "f8:\nmov %r0, 0\nexit\n";
    let slots = egpu::ebpf::assemble(&deeper).unwrap();
    assert!(matches!(
        Program::new(slots, vec![], AttachPoint::User { ctx_size: 0 }),
        Err(egpu::ebpf::ProgramError::CallTooDeep { depth: 9, .. })
    ));
}

#[test]
fn programs_with_random_bytes_load_or_fail_cleanly_and_run_alike() {
    let mut rng = rng_for("mutated programs");
    let (mut decoded, mut compared) = (0, 0);
    for round in 0..3000 {
        let mut bytes = egpu::ebpf::insn::slots_to_bytes(&encode(&safe_program(&mut rng)));
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(bytes.len());
            bytes[i] = rng.next_u64() as u8;
        }
        let Ok(program) = Program::from_bytes(&bytes, vec![], AttachPoint::User { ctx_size: 8 })
        else {
            continue;
        };
        decoded += 1;
        let Ok(verified) = verify(&program) else { continue };
        for choice in [EngineChoice::Auto, EngineChoice::Jit] {
            let _ = Vm::with_engine(&verified, choice);
        }
        // Only programs whose jumps all go forward are sure to end.
        let forward = program
            .decoded()
            .iter()
            .all(|d| d.insn.jump_target(d.pc).is_none_or(|t| t > d.pc as i64));
        if !forward {
            continue;
        }
        let Ok(mut interp) = Vm::with_engine(&verified, EngineChoice::Interpreter) else {
            continue;
        };
        let mut ctx = [0u8; 8];
        let a = interp.run(&mut ctx);
        let insns: Vec<Instruction> = program.decoded().iter().map(|d| d.insn).collect();
        let calls = insns.iter().any(|i| matches!(i, Instruction::Call(_)));
        if let Ok(mut jit) = Vm::with_engine(&verified, EngineChoice::Jit) {
            let ctx_a = ctx;
            ctx = [0; 8];
            let b = jit.run(&mut ctx);
            if !calls {
                // A fault names an address in each VM's own stack: compare its kind.
                let kind = |r: &Result<u64, RunError>| match r {
                    Err(RunError::Fault(f)) => Err(std::mem::discriminant(f)),
                    other => Ok(other.clone()),
                };
                assert_eq!(
                    kind(&a),
                    kind(&b),
                    "round {round}: the engines disagree on\n{}",
                    program.disassemble()
                );
                assert_eq!(ctx_a, ctx, "round {round}");
                compared += 1;
            }
        }
    }
    println!("mutated programs: {decoded} decoded, {compared} compared on both engines");
    assert!(compared > 100, "too few mutated programs compared for the test to mean anything");
}
