//! The verifier, judged three ways.
//!
//! * The suite: every file of `tests/verifier/` is a program in assembly whose header says
//!   whether it must be accepted or rejected, and for which reason (`# expect: reject
//!   uninit-register`), with its attach point and maps. Accepted programs also run on both
//!   engines, each with new maps, with zeroed, all-ones and random contexts, and must complete
//!   alike, leaving the maps in the same state.
//! * A property: random programs shaped like probes (pointers to the context, the stack and a map
//!   value, loads, stores, atomics, helper calls, forward branches and counted loops) either are
//!   refused, or run on the interpreter with random contexts without a single fault, and give
//!   the JIT's result and map contents.
//! * Errors: a refusal names the instruction, shows its disassembly and the registers it reads.
//!
//! Random cases come from a fixed seed, or from `EGPU_SEED` to reproduce a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use egpu::ebpf::verifier::{Verified, Violation, verify};
use egpu::ebpf::{
    AluOp, AtomicOp, AttachPoint, CallTarget, Imm64, Instruction, JmpCond, MapDef, MapKind,
    Operand, Program, Reg, Size, Width, assemble, instruction::encode,
};
use egpu::vm::{EngineChoice, LoadError, Vm};

use egpu_test_support::{Rng, files_with_extension, workspace_path};

/// The default seed of these tests.
const SEED: u64 = 0x7e51_f1ed_0bad_cafe;

// ---------------------------------------------------------------------------------------------
// The suite.

struct Case {
    name: String,
    expect: Option<String>,
    program: Result<Program, String>,
}

fn load_case(path: &Path) -> Case {
    let name = path.file_name().expect("a file").to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).expect("readable");
    let (mut expect, mut attach, mut maps) = (None, None, Vec::new());
    for line in text.lines() {
        let Some(header) = line.strip_prefix("# ") else { continue };
        if let Some(e) = header.strip_prefix("expect:") {
            expect = match e.trim() {
                "accept" => Some(None),
                r => Some(Some(
                    r.strip_prefix("reject ")
                        .unwrap_or_else(|| panic!("{name}: bad expect `{r}`"))
                        .trim()
                        .to_string(),
                )),
            };
        } else if let Some(a) = header.strip_prefix("attach:") {
            attach =
                Some(a.trim().parse::<AttachPoint>().unwrap_or_else(|e| panic!("{name}: {e}")));
        } else if let Some(m) = header.strip_prefix("map:") {
            let def = m.trim().parse::<MapDef>().unwrap_or_else(|e| {
                panic!("{name}: `# map: NAME=KIND:KEY:VALUE:CAPACITY`, not `{m}`: {e}")
            });
            maps.push(def);
        }
    }
    let expect = expect.unwrap_or_else(|| panic!("{name}: no `# expect:` line"));
    let attach = attach.unwrap_or_else(|| panic!("{name}: no `# attach:` line"));
    let slots = assemble(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let program = Program::new(slots, maps, attach).map_err(|e| e.code().to_string());
    Case { name, expect, program }
}

fn suite_files() -> Vec<PathBuf> {
    files_with_extension(&workspace_path("tests/verifier"), "s")
}

/// Runs an accepted program on both engines, each with new maps, with several contexts; the
/// results, the contexts and the maps' memory must agree.
fn run_both(case: &str, verified: &Verified, rng: &mut Rng) -> Result<(), String> {
    let program = verified.program();
    let size = program.attach_point().context_size();
    let mut contexts = vec![vec![0u8; size], vec![0xff; size]];
    for _ in 0..8 {
        contexts.push((0..size).map(|_| rng.next_u64() as u8).collect());
    }
    let mut interp = Vm::with_engine(verified, EngineChoice::Interpreter)
        .map_err(|e| format!("the interpreter refuses it: {e}"))?;
    let mut jit = Vm::with_engine(verified, EngineChoice::Auto)
        .map_err(|e| format!("the VM refuses it: {e}"))?;
    let random = calls_nondeterministic_helpers(program);
    for ctx in contexts {
        let (mut a, mut b) = (ctx.clone(), ctx);
        let ra = interp.run(&mut a).map_err(|e| format!("{case}: interpreter: {e}"))?;
        let rb = jit.run(&mut b).map_err(|e| format!("{case}: {}: {e}", jit.engine()))?;
        if !random && (ra, &a) != (rb, &b) {
            return Err(format!("the engines disagree: {ra:#x} and {rb:#x}"));
        }
    }
    for (n, (x, y)) in interp.maps().iter().zip(jit.maps()).enumerate() {
        if !random && map_bytes(x) != map_bytes(y) {
            return Err(format!("the engines leave map {n} in different states"));
        }
    }
    Ok(())
}

/// A map's memory, copied out.
fn map_bytes(map: &egpu::maps::RawMap) -> Vec<u8> {
    let (ptr, len) = map.memory();
    // SAFETY: the memory lives as long as `map`, and no VM runs while it is copied.
    unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) }.to_vec()
}

/// Whether the program calls a helper whose result changes from call to call.
fn calls_nondeterministic_helpers(program: &Program) -> bool {
    program.decoded().iter().any(|d| {
        matches!(
            d.insn,
            Instruction::Call(CallTarget::Helper(5 | 7 | 8 | 14))
                | Instruction::Call(CallTarget::Reg(_))
        )
    })
}

#[test]
fn verifier_suite() {
    let files = suite_files();
    assert!(files.len() >= 40, "the suite has only {} programs", files.len());
    let mut rng = Rng::from_env("verifier suite", SEED);
    let (mut accepted, mut rejected) = (0, 0);
    let mut wrong = BTreeMap::new();
    let mut codes = std::collections::BTreeSet::new();
    for path in &files {
        let case = load_case(path);
        let verdict = match &case.program {
            Err(code) => Err((code.clone(), String::new())),
            Ok(p) => verify(p).map_err(|e| (e.violation.code().to_string(), e.to_string())),
        };
        match (&case.expect, verdict) {
            (None, Ok(verified)) => {
                if let Err(e) = run_both(&case.name, &verified, &mut rng) {
                    wrong.insert(case.name.clone(), format!("accepted, but {e}"));
                    continue;
                }
                accepted += 1;
            }
            (Some(want), Err((got, _))) if *want == got => {
                codes.insert(got);
                rejected += 1;
            }
            (None, Err((got, msg))) => {
                wrong.insert(
                    case.name.clone(),
                    format!("rejected ({got}), expected acceptance: {msg}"),
                );
            }
            (Some(want), Ok(_)) => {
                wrong.insert(case.name.clone(), format!("accepted, expected rejection ({want})"));
            }
            (Some(want), Err((got, msg))) => {
                wrong.insert(
                    case.name.clone(),
                    format!("rejected for {got}, expected {want}: {msg}"),
                );
            }
        }
    }
    for (name, why) in &wrong {
        println!("  wrong: {name}: {why}");
    }
    println!(
        "verifier suite: {accepted} accepted as expected, {rejected} rejected as expected, {} wrong",
        wrong.len()
    );
    assert!(wrong.is_empty(), "{} programs of the suite were judged wrongly", wrong.len());
    // Every rule the verifier enforces is exercised by at least one program.
    let all = [
        Violation::UninitRegister,
        Violation::UninitStack,
        Violation::StackBounds,
        Violation::ContextWrite,
        Violation::ContextBounds,
        Violation::ContextOffset,
        Violation::MaybeNull,
        Violation::MapValueBounds,
        Violation::UnboundedOffset,
        Violation::NotAPointer,
        Violation::HelperArg,
        Violation::UnknownHelper,
        Violation::PointerLeak,
        Violation::PointerArithmetic,
        Violation::InfiniteLoop,
        Violation::TooComplex,
        Violation::StackLimit,
        Violation::Misaligned,
        Violation::CallbackReturn,
        Violation::UnboundedDelay,
    ];
    let missing: Vec<_> = all.iter().filter(|v| !codes.contains(v.code())).collect();
    assert!(missing.is_empty(), "no program of the suite is rejected for {missing:?}");
}

// ---------------------------------------------------------------------------------------------
// The property: accepted programs never fault.

/// The map of the random programs: an array of 4 values of 16 bytes.
static VALUES: MapDef =
    MapDef { name: String::new(), kind: MapKind::Array, key_size: 4, value_size: 16, capacity: 4 };

/// A random program shaped like a probe. `r6` starts as the context pointer, `r7` as a stack
/// pointer and `r8` as a pointer to a value of the map [`VALUES`] (the program looks up a small
/// index, and ends when the lookup fails), the other registers as numbers. The body mostly keeps
/// to that: arithmetic on numbers, pointers moved by masked numbers, loads and stores through
/// `r10`, `r6`, `r7` and `r8` at offsets near the valid ones, atomics, helper calls (which
/// clobber `r1`–`r5`, so the generator sets them again), forward branches and, now and then, a
/// loop counted down in `r9`. One instruction in ten ignores the plan and uses any register, so
/// some programs are unsafe.
fn probe_like(rng: &mut Rng, ctx_size: usize) -> Vec<Instruction> {
    const NUMBERS: [u8; 5] = [0, 2, 3, 4, 5];
    let number = |rng: &mut Rng| Reg::new(rng.pick(&NUMBERS)).expect("a register");
    let any = |rng: &mut Rng| Reg::new(rng.below(10) as u8).expect("r0..r9");
    let mov =
        |dst: Reg, src: Operand| Instruction::Alu { op: AluOp::Mov, width: Width::W64, dst, src };
    let mut p = Vec::new();
    let initialised = if rng.one_in(3) { rng.below(8) } else { 8 };
    for i in 0..initialised as i16 {
        p.push(Instruction::Store {
            size: Size::DW,
            base: Reg::FP,
            off: -8 * (i + 1),
            src: Operand::Imm(rng.next_u64() as i32),
        });
    }
    let set_numbers = |rng: &mut Rng, p: &mut Vec<Instruction>, regs: &[u8]| {
        for &r in regs {
            let any_value = rng.next_u64() % 600;
            let v = rng.pick(&[0, 1, 7, 8, 64, u64::MAX, any_value]);
            p.push(Instruction::LoadImm64 {
                dst: Reg::new(r).expect("a register"),
                imm: Imm64::Value(v),
            });
        }
    };
    p.push(mov(Reg::R6, Operand::Reg(Reg::R1)));
    // r8 = lookup(values, &index), or the program ends.
    let index = rng.below(VALUES.capacity as usize + 2) as i32;
    p.push(Instruction::Store { size: Size::W, base: Reg::FP, off: -4, src: Operand::Imm(index) });
    p.push(Instruction::LoadImm64 { dst: Reg::R1, imm: Imm64::Map(0) });
    p.push(mov(Reg::R2, Operand::Reg(Reg::FP)));
    p.push(Instruction::Alu {
        op: AluOp::Add,
        width: Width::W64,
        dst: Reg::R2,
        src: Operand::Imm(-4),
    });
    p.push(Instruction::Call(CallTarget::Helper(1)));
    p.push(Instruction::Branch {
        cond: JmpCond::Ne,
        width: Width::W64,
        dst: Reg::R0,
        src: Operand::Imm(0),
        off: 2,
    });
    p.push(mov(Reg::R0, Operand::Imm(0)));
    p.push(Instruction::Exit);
    p.push(mov(Reg::R8, Operand::Reg(Reg::R0)));
    set_numbers(rng, &mut p, &NUMBERS);
    p.push(mov(Reg::R7, Operand::Reg(Reg::FP)));
    p.push(Instruction::Alu {
        op: AluOp::Add,
        width: Width::W64,
        dst: Reg::R7,
        src: Operand::Imm(-8 * (1 + rng.below(8) as i32)),
    });
    let looped = rng.one_in(4);
    if looped {
        p.push(mov(Reg::R9, Operand::Imm(1 + rng.below(6) as i32)));
    }
    let body = p.len();
    let mut branches = Vec::new();
    let off = |rng: &mut Rng, base: Reg, size: Size| -> i16 {
        let bytes = size.bytes() as usize;
        match (base, rng.below(8)) {
            (_, 0) => rng.next_u64() as i16 % 600,
            (Reg::R6, _) => (rng.below(ctx_size + 4) / bytes * bytes) as i16,
            (Reg::R7, _) => -(rng.below(64 / bytes) as i16 * bytes as i16),
            (Reg::R8, _) => (rng.below(VALUES.value_size as usize + 4) / bytes * bytes) as i16,
            _ => -((1 + rng.below(64 / bytes)) as i16 * bytes as i16),
        }
    };
    for _ in 0..4 + rng.below(20) {
        let wild = rng.one_in(10);
        let dst = if wild { any(rng) } else { number(rng) };
        let size = rng.pick(&[Size::B, Size::H, Size::W, Size::DW]);
        let base = if wild { any(rng) } else { rng.pick(&[Reg::FP, Reg::R6, Reg::R7, Reg::R8]) };
        let src = match rng.below(3) {
            0 => Operand::Reg(if wild { any(rng) } else { number(rng) }),
            _ => Operand::Imm(rng.next_u64() as i32 % 64),
        };
        match rng.below(14) {
            0..=3 => p.push(Instruction::Alu {
                op: rng.pick(&AluOp::PLAIN),
                width: rng.pick(&[Width::W32, Width::W64]),
                dst,
                src,
            }),
            4 => {
                // Move a pointer by a masked number.
                let by = number(rng);
                p.push(Instruction::Alu {
                    op: AluOp::And,
                    width: Width::W64,
                    dst: by,
                    src: Operand::Imm(rng.pick(&[7, 8, 15, 0x38])),
                });
                p.push(Instruction::Alu {
                    op: AluOp::Add,
                    width: Width::W64,
                    dst: rng.pick(&[Reg::R6, Reg::R7, Reg::R8]),
                    src: Operand::Reg(by),
                });
            }
            5..=7 => p.push(Instruction::Load {
                size,
                signed: size != Size::DW && rng.one_in(3),
                dst,
                base,
                off: off(rng, base, size),
            }),
            8 | 9 => p.push(Instruction::Store { size, base, off: off(rng, base, size), src }),
            10 => p.push(Instruction::Atomic {
                op: rng.pick(&[AtomicOp::Add, AtomicOp::Or, AtomicOp::Xchg, AtomicOp::CmpXchg]),
                fetch: rng.one_in(2),
                size: rng.pick(&[Size::W, Size::DW]),
                base,
                off: off(rng, base, Size::DW),
                src: number(rng),
            }),
            11 => {
                p.push(Instruction::Call(CallTarget::Helper(rng.pick(&[5, 7, 8, 14]))));
                set_numbers(rng, &mut p, &[2, 3, 4, 5]);
            }
            _ => {
                branches.push(p.len());
                p.push(Instruction::Branch {
                    cond: rng.pick(&JmpCond::ALL),
                    width: rng.pick(&[Width::W32, Width::W64]),
                    dst,
                    src,
                    off: 0,
                });
            }
        }
    }
    if looped {
        p.push(Instruction::Alu {
            op: AluOp::Sub,
            width: Width::W64,
            dst: Reg::R9,
            src: Operand::Imm(1),
        });
        let back = body as i64 - (p.len() as i64 + 1);
        p.push(Instruction::Branch {
            cond: JmpCond::Ne,
            width: Width::W64,
            dst: Reg::R9,
            src: Operand::Imm(0),
            off: back as i16,
        });
    }
    let end = p.len();
    p.push(mov(Reg::R0, Operand::Reg(number(rng))));
    p.push(Instruction::Exit);
    // Branches jump forward, and stay inside the loop body when they are in one.
    let limit = if looped { end - 2 } else { end };
    let slot = |p: &[Instruction], i: usize| p[..i].iter().map(Instruction::slots).sum::<usize>();
    for j in branches {
        let target = j + 1 + rng.below(limit - j);
        let o = (slot(&p, target) - slot(&p, j) - 1) as i16;
        if let Instruction::Branch { off, .. } = &mut p[j] {
            *off = o;
        }
    }
    p
}

#[test]
fn accepted_programs_never_fault_and_both_engines_agree() {
    let mut rng = Rng::from_env("accepted programs", SEED);
    let rounds = 6000;
    let (mut accepted, mut accepted_loops) = (0, 0);
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for round in 0..rounds {
        let ctx_size = rng.pick(&[0, 8, 16, 64]);
        let insns = probe_like(&mut rng, ctx_size);
        let attach = AttachPoint::User { ctx_size: ctx_size as u32 };
        let Ok(program) = Program::new(encode(&insns), vec![VALUES.clone()], attach) else {
            continue;
        };
        let verified = match verify(&program) {
            Ok(v) => v,
            Err(e) => {
                *reasons.entry(e.violation.code()).or_default() += 1;
                continue;
            }
        };
        let mut interp = match Vm::with_engine(&verified, EngineChoice::Interpreter) {
            Ok(vm) => vm,
            Err(LoadError::UnknownHelper { .. }) => continue,
            Err(e) => panic!("round {round}: {e}\n{}", program.disassemble()),
        };
        accepted += 1;
        let looped = program
            .decoded()
            .iter()
            .any(|d| d.insn.jump_target(d.pc).is_some_and(|t| t <= d.pc as i64));
        accepted_loops += usize::from(looped);
        let mut jit =
            Vm::with_engine(&verified, EngineChoice::Auto).expect("verified once, loads again");
        let random = calls_nondeterministic_helpers(&program);
        for _ in 0..4 {
            let ctx: Vec<u8> = (0..ctx_size).map(|_| rng.next_u64() as u8).collect();
            let (mut a, mut b) = (ctx.clone(), ctx);
            let ra = interp.run(&mut a).unwrap_or_else(|e| {
                panic!("round {round}: an accepted program faulted: {e}\n{}", program.disassemble())
            });
            let rb = jit.run(&mut b).unwrap_or_else(|e| {
                panic!(
                    "round {round}: an accepted program faulted on {}: {e}\n{}",
                    jit.engine(),
                    program.disassemble()
                )
            });
            if !random {
                assert_eq!(
                    (ra, &a),
                    (rb, &b),
                    "round {round}: the engines disagree on\n{}",
                    program.disassemble()
                );
            }
        }
        if !random {
            assert_eq!(
                map_bytes(&interp.maps()[0]),
                map_bytes(&jit.maps()[0]),
                "round {round}: the engines leave the map in different states after\n{}",
                program.disassemble()
            );
        }
    }
    println!(
        "accepted programs: {accepted} of {rounds} accepted ({accepted_loops} with a loop) and ran \
         without a fault; refusals: {reasons:?}"
    );
    assert!(accepted >= rounds / 10, "only {accepted} programs accepted: the generator needs work");
    assert!(accepted_loops >= rounds / 100, "only {accepted_loops} accepted programs loop");
}

// ---------------------------------------------------------------------------------------------
// Messages.

#[test]
fn a_refusal_names_the_instruction_its_disassembly_and_the_registers_it_reads() {
    let text = "mov %r2, %r1\nand %r3, 7\nldxw %r0, [%r2+4]\nexit";
    let program =
        Program::new(assemble(text).unwrap(), vec![], AttachPoint::User { ctx_size: 8 }).unwrap();
    let e = verify(&program).unwrap_err();
    assert_eq!((e.pc, e.violation), (1, Violation::UninitRegister));
    assert_eq!(e.insn, "and %r3, 7");
    assert_eq!(e.registers, ["%r3 = uninitialised"]);

    let text = "ldxw %r2, [%r1+0]\nand %r2, 0xff\nmul %r2, %r10\nexit";
    let program =
        Program::new(assemble(text).unwrap(), vec![], AttachPoint::User { ctx_size: 8 }).unwrap();
    let e = verify(&program).unwrap_err();
    assert_eq!((e.pc, e.violation), (2, Violation::PointerArithmetic), "{e}");
    let shown = e.to_string();
    for part in [
        "instruction 2",
        "`mul %r2, %r10`",
        "%r2 = scalar u[0x0, 0xff]",
        "%r10 = stack",
        "[pointer-arithmetic]",
    ] {
        assert!(shown.contains(part), "`{part}` missing from:\n{shown}");
    }
    // No engine can be given it: every engine takes a `Verified`, which only `verify` makes.
}

// ---------------------------------------------------------------------------------------------
// bpf_loop: loops whose body branches, verified in time linear in the body.

/// Most instructions the verifier may follow per instruction of a `bpf_loop` callback, for the
/// whole program: the callback is followed a few rounds (until the caller's stack it writes
/// settles), each over the body's paths, never once per iteration.
const FOLLOWED_PER_BODY_INSTRUCTION: usize = 16;

/// The suite's Collatz program (`tests/verifier/ok_loop_collatz_branchy.s`) with `count`
/// iterations.
fn collatz(count: u32) -> Program {
    let text = std::fs::read_to_string(workspace_path("tests/verifier/ok_loop_collatz_branchy.s"))
        .expect("the suite's Collatz program");
    let text = text.replace("mov %r1, 1000\n", &format!("mov %r1, {count}\n"));
    let map = "steps=array:4:8:1".parse().expect("a map");
    Program::new(assemble(&text).expect("assembles"), vec![map], AttachPoint::User { ctx_size: 8 })
        .expect("valid")
}

/// Collatz steps from `n` to 1, at most `limit`.
fn collatz_steps(mut n: u64, limit: u64) -> u64 {
    let mut steps = 0;
    while n > 1 && steps < limit {
        n = if n.is_multiple_of(2) { n / 2 } else { 3 * n + 1 };
        steps += 1;
    }
    steps
}

#[test]
fn a_branchy_loop_verifies_in_time_linear_in_its_body() {
    let program = collatz(1000);
    let callback = &program.functions()[1];
    let body = program.decoded().iter().filter(|d| (callback.start..callback.end).contains(&d.pc));
    let body = body.count();
    let verified = verify(&program).expect("the branchy loop verifies");
    let followed = verified.insns_processed();
    println!(
        "branchy loop: 1000 iterations, {followed} instructions followed, body {body} instructions"
    );
    assert!(
        followed <= FOLLOWED_PER_BODY_INSTRUCTION * body,
        "{followed} instructions followed for a body of {body}: more than \
         {FOLLOWED_PER_BODY_INSTRUCTION} per body instruction"
    );
    // The count does not enter into it.
    for count in [1, 10, 1 << 23] {
        let v = verify(&collatz(count)).expect("verifies");
        assert!(v.insns_processed() <= followed, "{count} iterations: {}", v.insns_processed());
    }
    // And it runs as a loop, on both engines: 27 takes 111 steps, 97 takes 118.
    for engine in [EngineChoice::Interpreter, EngineChoice::Auto] {
        for (count, n) in [(1000, 27u32), (1000, 97), (50, 27), (1000, 1), (0, 27)] {
            let verified = verify(&collatz(count)).expect("verifies");
            let mut vm = Vm::with_engine(&verified, engine).expect("loads");
            let steps = vm.run(&mut u64::from(n).to_le_bytes()).expect("runs");
            let want = collatz_steps(n.into(), count.into());
            assert_eq!(steps, want, "{engine:?}: {count} iterations from {n}");
            let map = map_bytes(&vm.maps()[0]);
            let counted = u64::from_le_bytes(map[map.len() - 8..].try_into().expect("8 bytes"));
            assert!(counted == want, "{engine:?}: the map counted {counted}, not {want}");
        }
    }
}

/// A suite program, verified.
fn suite_program(name: &str) -> Verified {
    let case = load_case(&workspace_path("tests/verifier").join(name));
    verify(&case.program.expect("valid")).expect("verifies")
}

#[test]
fn bpf_loop_programs_compute_what_their_loops_do() {
    for engine in [EngineChoice::Interpreter, EngineChoice::Auto] {
        let mut vm =
            Vm::with_engine(&suite_program("ok_loop_index_within_array.s"), engine).expect("loads");
        assert_eq!(vm.run(&mut [0; 8]).expect("runs"), (0..8).map(|i| i * i).sum::<u64>());
        let mut vm =
            Vm::with_engine(&suite_program("ok_loop_nested_search.s"), engine).expect("loads");
        for w in [0u64, 1, 7, 12, 49, 81, 97, 127] {
            let mut count = 0u64;
            let found = (0..10u64).any(|i| {
                (0..10u64).any(|j| {
                    count += 1;
                    i * j == w
                })
            });
            let want = count | u64::from(found) << 63;
            assert_eq!(vm.run(&mut w.to_le_bytes()).expect("runs"), want, "{engine:?}: {w}");
        }
    }
}
