//! Unit tests of the VM's internals: helper calls under the JIT, the JIT's code-size bound, and
//! faults raised by helpers.

use egpu_ebpf::{
    AluOp, AttachPoint, CallTarget, Imm64, Instruction, JmpCond, Operand, Program, Reg, Size,
    Width, assemble, instruction::encode,
};

use super::helpers::ALIGNMENT_PROBE;
use super::*;
use egpu_ebpf::verifier::verify;

fn program(text: &str, ctx_size: u32) -> Program {
    Program::new(assemble(text).expect("assembles"), vec![], AttachPoint::User { ctx_size })
        .expect("valid program")
}

/// Both engines, for a program the verifier would refuse (it calls test-only helpers, or
/// reaches a path the verifier closes).
fn both_unverified(p: &Program) -> [Vm; 2] {
    [
        Vm::load(p, 0, Box::new([]), EngineChoice::Interpreter).expect("interpreter loads"),
        Vm::load(p, 0, Box::new([]), EngineChoice::Jit).expect("JIT loads"),
    ]
}

#[test]
#[cfg(target_arch = "x86_64")]
fn helpers_see_an_aligned_stack_at_every_depth() {
    // Depth 0, then depth 1 and 2 through local calls: rbpf's JIT calls helpers with the stack
    // misaligned by 8 at even depths; the trampoline must realign it.
    let p = program(
        &format!(
            "call {ALIGNMENT_PROBE}
             mov %r6, %r0
             call local one
             or %r0, %r6
             exit
             one:
             call {ALIGNMENT_PROBE}
             mov %r6, %r0
             call local two
             or %r0, %r6
             exit
             two:
             call {ALIGNMENT_PROBE}
             exit"
        ),
        0,
    );
    for mut vm in both_unverified(&p) {
        assert_eq!(
            vm.run(&mut []).unwrap(),
            0,
            "{:?}: a helper saw a misaligned stack",
            vm.engine()
        );
    }
}

/// The largest program of `n` copies of `insn` and an exit that the bound admits.
fn filled(insn: Instruction) -> Vec<Instruction> {
    let mut insns =
        vec![Instruction::LoadImm64 { dst: Reg::FP, imm: Imm64::Value(0) }, Instruction::Exit];
    while jit_code_bound(&[insns.as_slice(), &[insn]].concat()) <= JIT_PAGE {
        insns.insert(1, insn);
    }
    insns
}

#[test]
#[cfg(target_arch = "x86_64")]
fn the_code_bound_keeps_every_instruction_inside_the_jit_page() {
    // For each kind of instruction, the most copies the bound admits, with the largest operands
    // (high registers need REX prefixes; large offsets and immediates the long encodings).
    let r = |n| Reg::new(n).unwrap();
    let kinds = [
        Instruction::Alu {
            op: AluOp::Add,
            width: Width::W64,
            dst: r(9),
            src: Operand::Imm(1 << 20),
        },
        Instruction::Alu { op: AluOp::Lsh, width: Width::W32, dst: r(9), src: Operand::Reg(r(8)) },
        Instruction::Alu { op: AluOp::Arsh, width: Width::W64, dst: r(9), src: Operand::Reg(r(5)) },
        Instruction::Alu { op: AluOp::Arsh, width: Width::W64, dst: r(9), src: Operand::Imm(63) },
        Instruction::Alu { op: AluOp::Mov, width: Width::W32, dst: r(9), src: Operand::Reg(r(8)) },
        Instruction::Alu { op: AluOp::And, width: Width::W32, dst: r(9), src: Operand::Imm(-1) },
        Instruction::Neg { width: Width::W64, dst: r(9) },
        Instruction::Alu { op: AluOp::Div, width: Width::W32, dst: r(9), src: Operand::Reg(r(5)) },
        Instruction::Alu { op: AluOp::Mod, width: Width::W64, dst: r(5), src: Operand::Reg(r(9)) },
        Instruction::Endian { order: egpu_ebpf::ByteOrder::Be, bits: 64, dst: r(9) },
        Instruction::Store { size: Size::DW, base: r(9), off: -30000, src: Operand::Imm(i32::MIN) },
        Instruction::Store { size: Size::H, base: r(9), off: 30000, src: Operand::Reg(r(8)) },
        Instruction::Load { size: Size::H, signed: false, dst: r(9), base: r(8), off: 30000 },
        Instruction::Branch {
            cond: JmpCond::Set,
            width: Width::W64,
            dst: r(9),
            src: Operand::Imm(-1),
            off: 0,
        },
        Instruction::Branch {
            cond: JmpCond::Gt,
            width: Width::W32,
            dst: r(9),
            src: Operand::Reg(r(8)),
            off: 0,
        },
        Instruction::Alu { op: AluOp::Div, width: Width::W64, dst: r(9), src: Operand::Reg(r(8)) },
        Instruction::Alu { op: AluOp::Mod, width: Width::W32, dst: r(7), src: Operand::Imm(-7) },
        Instruction::Alu {
            op: AluOp::Mul,
            width: Width::W64,
            dst: r(0),
            src: Operand::Imm(1 << 30),
        },
        Instruction::Endian { order: egpu_ebpf::ByteOrder::Be, bits: 16, dst: r(9) },
        Instruction::LoadImm64 { dst: r(9), imm: Imm64::Value(u64::MAX - 1) },
        Instruction::Load { size: Size::DW, signed: false, dst: r(9), base: r(8), off: -30000 },
        Instruction::Store { size: Size::H, base: r(9), off: -30000, src: Operand::Imm(-1) },
        Instruction::Store { size: Size::B, base: r(9), off: 30000, src: Operand::Reg(r(8)) },
        Instruction::Branch {
            cond: JmpCond::Sle,
            width: Width::W64,
            dst: r(9),
            src: Operand::Imm(1 << 20),
            off: 0,
        },
        Instruction::Jump { off: 0, long: false },
        Instruction::Call(CallTarget::Helper(egpu_ebpf::helpers::id::KTIME_GET_NS)),
    ];
    for insn in kinds {
        let insns = filled(insn);
        let code: Vec<u8> = egpu_ebpf::insn::slots_to_bytes(&encode(&insns));
        let mut rbpf = rbpf::EbpfVmRaw::new(None).unwrap();
        rbpf.set_verifier(|_| Ok(())).unwrap();
        rbpf.set_program(&code).unwrap();
        for b in helpers::bindings() {
            rbpf.register_helper(b.id, b.jit).unwrap();
        }
        // rbpf asserts when its page overflows; catch it to name the instruction.
        let compiled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rbpf.jit_compile()));
        assert!(
            matches!(compiled, Ok(Ok(()))),
            "{} copies of `{insn}` overflow the JIT page although the bound admits them",
            insns.len() - 2
        );
    }
}

#[test]
fn a_program_too_large_for_the_jit_runs_on_the_interpreter() {
    let body = "add %r0, 1\n".repeat(600);
    let p = program(&format!("mov %r0, 0\n{body}exit"), 0);
    let mut vm = Vm::new(&verify(&p).unwrap()).unwrap();
    assert_eq!(vm.engine(), Engine::Interpreter);
    assert!(matches!(vm.jit_refusal(), Some(JitRefusal::CodeTooLarge { .. })), "{vm:?}");
    assert_eq!(vm.run(&mut []).unwrap(), 600);
    assert!(matches!(
        Vm::with_engine(&verify(&p).unwrap(), EngineChoice::Jit),
        Err(LoadError::Jit(JitRefusal::CodeTooLarge { .. }))
    ));
}

#[test]
fn unsafe_programs_are_refused_before_any_engine_sees_them() {
    use egpu_ebpf::verifier::Violation;
    let mut target = 5u64;
    let cases = [
        // An atomic through a number: rbpf's interpreter would leave it to the helper's check.
        (
            format!(
                "lddw %r1, {:#x}\nmov %r2, 1\nlock add [%r1], %r2\nmov %r0, 7\nexit",
                &raw mut target as u64
            ),
            Violation::NotAPointer,
        ),
        (
            "mov %r1, 1\nstxdw [%r10-16], %r1\nlock add [%r10-12], %r1\nexit".into(),
            Violation::Misaligned,
        ),
        ("ldxdw %r0, [%r1+64]\nexit".into(), Violation::ContextBounds),
        ("ldxdw %r0, [%r10-8]\nexit".into(), Violation::UninitStack),
    ];
    for (text, violation) in cases {
        let p = program(&text, 8);
        // No engine can be given a program the verifier refused: `Vm` takes a `Verified`.
        match verify(&p) {
            Err(e) => assert_eq!(e.violation, violation, "{text}: {e}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    assert_eq!(target, 5);
}

#[test]
fn callx_of_an_unbound_number_faults() {
    // The verifier refuses it; the legalised code still stops it, should one get through.
    let p = program("mov %r2, 77\ncall %r2\nmov %r0, 1\nexit", 0);
    assert!(
        matches!(verify(&p), Err(e) if e.violation == egpu_ebpf::verifier::Violation::UnknownHelper)
    );
    for mut vm in both_unverified(&p) {
        assert_eq!(vm.run(&mut []).unwrap_err(), RunError::Fault(Fault::BadCallx));
    }
}

#[test]
fn the_jit_refuses_a_context_shorter_than_the_program_reads() {
    let p = program("ldxdw %r0, [%r1+8]\nexit", 16);
    let mut vm = Vm::with_engine(&verify(&p).unwrap(), EngineChoice::Jit).unwrap();
    assert_eq!(vm.run(&mut [0; 8]).unwrap_err(), RunError::ContextTooShort { len: 8, need: 16 });
    let mut ctx = [0u8; 16];
    ctx[8] = 9;
    assert_eq!(vm.run(&mut ctx).unwrap(), 9);
}

#[test]
fn internal_helpers_are_refused_at_load() {
    // Helpers outside the table are refused by the verifier, internal ones included.
    let internal = program(
        &format!("call {}\nexit", helpers::atomic_helper(egpu_ebpf::AtomicOp::Add, Size::DW)),
        0,
    );
    assert!(verify(&internal).is_err());
}

fn array_def(value_size: u32) -> egpu_ebpf::MapDef {
    egpu_ebpf::MapDef {
        name: "m".into(),
        kind: egpu_ebpf::MapKind::Array,
        key_size: 4,
        value_size,
        capacity: 2,
    }
}

/// `m[1] += 5` through a lookup and an atomic add, returning the old value.
fn array_adder() -> Program {
    Program::new(
        assemble(
            "stw [%r10-4], 1
             lddw %r1, map[0]
             mov %r2, %r10
             add %r2, -4
             call 1
             mov %r6, 99
             jeq %r0, 0, +2
             mov %r6, 5
             lock fetch add [%r0+0], %r6
             mov %r0, %r6
             exit",
        )
        .unwrap(),
        vec![array_def(8)],
        AttachPoint::User { ctx_size: 0 },
    )
    .unwrap()
}

#[test]
fn maps_are_bound_and_shared_by_both_engines() {
    let p = array_adder();
    let mut interp = Vm::with_engine(&verify(&p).unwrap(), EngineChoice::Interpreter).unwrap();
    let map = interp.maps()[0].clone();
    let mut jit =
        Vm::with_maps(&verify(&p).unwrap(), std::slice::from_ref(&map), EngineChoice::Auto)
            .unwrap();
    assert_eq!(interp.run(&mut []).unwrap(), 0);
    assert_eq!(jit.run(&mut []).unwrap(), 5);
    assert_eq!(interp.run(&mut []).unwrap(), 10);
    let value = map.lookup(&1u32.to_le_bytes()).unwrap().unwrap();
    // SAFETY: the map lives, and nothing else writes it now.
    assert_eq!(unsafe { value.cast::<u64>().read() }, 15);
}

#[test]
fn maps_that_do_not_fit_the_table_are_refused() {
    let p = array_adder();
    assert_eq!(
        Vm::with_maps(&verify(&p).unwrap(), &[], EngineChoice::Auto).unwrap_err(),
        LoadError::MapCount { expected: 1, given: 0 }
    );
    let other = Program::new(
        assemble("mov %r0, 0\nexit").unwrap(),
        vec![array_def(16)],
        AttachPoint::User { ctx_size: 0 },
    )
    .unwrap();
    let wrong = Vm::new(&verify(&other).unwrap()).unwrap().maps()[0].clone();
    let err = Vm::with_maps(&verify(&p).unwrap(), &[wrong], EngineChoice::Auto).unwrap_err();
    assert!(matches!(&err, LoadError::Map { index: 0, .. }), "{err}");
    assert!(err.to_string().contains("16-byte values"), "{err}");
}

#[test]
fn typed_contexts_must_match_the_attach_point() {
    use egpu_ebpf::{HostEvent, LaunchCtx, Phase};
    let slots = assemble("ldxw %r0, [%r1+40]\nexit").unwrap();
    let p =
        Program::new(slots, vec![], AttachPoint::Host(HostEvent::Launch, Phase::Enter)).unwrap();
    let mut vm = Vm::new(&verify(&p).unwrap()).unwrap();
    assert_eq!(vm.engine(), Engine::Jit);
    let mut ctx = LaunchCtx { grid: [7, 1, 1], ..Default::default() };
    assert_eq!(vm.run_ctx(&mut ctx).unwrap(), 7);
    let mut wrong = [0u64; 2];
    assert!(matches!(vm.run_ctx(&mut wrong), Err(RunError::ContextSize { len: 16, .. })));
}

#[test]
fn the_legalised_listing_names_each_origin() {
    let p = program("mov %r1, 5\nmov32 %r0, %r1\nexit", 0);
    let vm = Vm::new(&verify(&p).unwrap()).unwrap();
    let listing = vm.legalised();
    assert!(listing.contains("and32 %r0, -1"), "{listing}");
    assert!(listing.lines().last().unwrap().ends_with("# from 2"), "{listing}");
}

/// The helper table says where each helper runs (`egpu list` prints it): the VM binds, for
/// programs to call, exactly the helpers the table marks `on_cpu`, but `bpf_loop`, which the
/// runnable program makes a loop of local calls (`Verified::runnable`).
#[test]
fn the_vm_binds_exactly_the_helpers_the_table_runs_on_the_cpu() {
    let mut bound = helpers::callable();
    bound.retain(|&id| id != ALIGNMENT_PROBE);
    bound.push(egpu_ebpf::helpers::id::LOOP);
    bound.sort_unstable();
    let mut table: Vec<u32> =
        egpu_ebpf::helpers::HELPERS.iter().filter(|h| h.on_cpu).map(|h| h.id).collect();
    table.sort_unstable();
    assert_eq!(bound, table);
    assert!(!table.is_empty());
}
