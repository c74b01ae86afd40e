//! Loops lowered to `bpf_loop`: which loops take a callback, the shape of the program, and the
//! results of branching loops (Collatz, searches, nests, returns) against the plain loop.

use egpu_ebpf::verifier::verify;
use egpu_ebpf::{AttachPoint, MapDef, MapKind};
use egpu_vm::{EngineChoice, Vm};

use super::ir::*;
use super::*;

fn b(e: Expr) -> Box<Expr> {
    Box::new(e)
}

fn var(v: u32) -> Expr {
    Expr::Var(Var(v))
}

fn c64(v: u64) -> Expr {
    Expr::Const(Ty::U64, v)
}

fn bin(op: BinOp, l: Expr, r: Expr) -> Expr {
    Expr::Binary(op, Ty::U64, b(l), b(r))
}

fn cmp(op: CmpOp, l: Expr, r: Expr) -> Expr {
    Expr::Cmp(op, Ty::U64, b(l), b(r))
}

fn probe(vars: Vec<Ty>, body: Vec<Stmt>) -> ProbeIr {
    ProbeIr {
        attach: AttachPoint::User { ctx_size: 16 },
        vars,
        bufs: vec![BufDecl { name: "key".into(), size: 8, align: 8 }],
        ptrs: 1,
        maps: vec![MapDef {
            name: "hits".into(),
            kind: MapKind::Array,
            key_size: 4,
            value_size: 8,
            capacity: 4,
        }],
        body,
    }
}

/// `M[key] += 1` for the `u32` key in `buf`.
fn count_hit() -> Stmt {
    Stmt::Lookup {
        map: MapRef(0),
        key: Place::Buf(Buf(0), 0),
        ptr: Ptr(0),
        found: vec![Stmt::AtomicAdd(Ty::U64, Place::Value(Ptr(0), 0), c64(1))],
        missing: vec![],
    }
}

/// n = ctx.a (at least 1); steps = 0;
/// #[bound(1000)] while n != 1 { n = if n.is_multiple_of(2) { n / 2 } else { 3 * n + 1 }; M[1] += 1;
/// steps += 1 } return steps * 1_000_000 + i (the loop's counter after the loop).
fn collatz() -> ProbeIr {
    let (n, steps, i) = (0, 1, 2);
    let body = vec![
        Stmt::If(cmp(CmpOp::Eq, var(n), c64(1)), vec![Stmt::Break], vec![]),
        Stmt::If(
            cmp(CmpOp::Eq, bin(BinOp::Rem, var(n), c64(2)), c64(0)),
            vec![Stmt::Set(Var(n), bin(BinOp::Div, var(n), c64(2)))],
            vec![Stmt::Set(Var(n), bin(BinOp::Add, bin(BinOp::Mul, c64(3), var(n)), c64(1)))],
        ),
        count_hit(),
        Stmt::Set(Var(steps), bin(BinOp::Add, var(steps), c64(1))),
    ];
    let counter = Expr::Cast { to: Ty::U64, from: Ty::U32, arg: b(var(i)) };
    probe(
        vec![Ty::U64, Ty::U64, Ty::U32],
        vec![
            Stmt::Set(Var(n), bin(BinOp::Or, Expr::Load(Ty::U64, Place::Ctx(0)), c64(1))),
            Stmt::Set(Var(steps), c64(0)),
            Stmt::Store(Ty::U32, Place::Buf(Buf(0), 0), Expr::Const(Ty::U32, 1)),
            Stmt::Repeat(Var(i), 1000, body),
            Stmt::Return(bin(BinOp::Add, bin(BinOp::Mul, var(steps), c64(1_000_000)), counter)),
        ],
    )
}

fn collatz_steps(mut n: u64) -> u64 {
    let mut steps = 0;
    while n != 1 && steps < 1000 {
        n = if n.is_multiple_of(2) { n / 2 } else { 3 * n + 1 };
        steps += 1;
    }
    steps
}

#[test]
fn a_branching_loop_becomes_a_bpf_loop_callback_and_a_straight_one_stays() {
    let program = compile(&collatz()).unwrap();
    let text = program.disassemble();
    assert_eq!(program.functions().len(), 2, "{text}");
    assert_eq!(text.matches("call 181").count(), 1, "{text}");
    assert!(text.contains("lddw %r2, func"), "{text}");

    // for i in 0..8 { x = x * 3 + i }: straight-line, a plain loop.
    let straight = probe(
        vec![Ty::U64, Ty::U32],
        vec![
            Stmt::Set(Var(0), c64(1)),
            Stmt::Repeat(
                Var(1),
                8,
                vec![Stmt::Set(
                    Var(0),
                    bin(
                        BinOp::Add,
                        bin(BinOp::Mul, var(0), c64(3)),
                        Expr::Cast { to: Ty::U64, from: Ty::U32, arg: b(var(1)) },
                    ),
                )],
            ),
            Stmt::Return(var(0)),
        ],
    );
    let program = compile(&straight).unwrap();
    let text = program.disassemble();
    assert_eq!(program.functions().len(), 1, "{text}");
    assert!(!text.contains("call 181"), "{text}");
}

#[test]
fn nests_take_three_callbacks_at_most_and_outer_pointers_keep_loops_plain() {
    // Four nested loops, each with an `if`: three callbacks, the innermost loop plain.
    let mut body = vec![Stmt::If(
        cmp(CmpOp::Gt, var(0), c64(5)),
        vec![Stmt::Set(Var(0), bin(BinOp::Sub, var(0), c64(1)))],
        vec![Stmt::Set(Var(0), bin(BinOp::Add, var(0), c64(2)))],
    )];
    for level in (1..=4).rev() {
        body = vec![Stmt::Repeat(Var(level), 5, body)];
    }
    body.insert(0, Stmt::Set(Var(0), c64(0)));
    body.push(Stmt::Return(var(0)));
    let nest = probe(vec![Ty::U64, Ty::U32, Ty::U32, Ty::U32, Ty::U32], body);
    let program = compile(&nest).unwrap();
    let text = program.disassemble();
    assert_eq!(program.functions().len(), 4, "{text}");
    assert_eq!(text.matches("call 181").count(), 3, "{text}");
    let mut x = 0u64;
    for _ in 0..625 {
        x = if x > 5 { x - 1 } else { x + 2 };
    }
    let processed = check(&nest, &[(0, x), (7, x)]);
    println!("four nested branching loops: {processed} insns processed");

    // A loop using a map value pointer bound outside it stays plain.
    let plain = probe(
        vec![Ty::U32],
        vec![
            Stmt::Store(Ty::U32, Place::Buf(Buf(0), 0), Expr::Const(Ty::U32, 0)),
            Stmt::Lookup {
                map: MapRef(0),
                key: Place::Buf(Buf(0), 0),
                ptr: Ptr(0),
                found: vec![Stmt::Repeat(
                    Var(0),
                    30,
                    vec![Stmt::If(
                        Expr::Cmp(CmpOp::Eq, Ty::U32, b(var(0)), b(Expr::Const(Ty::U32, 1))),
                        vec![Stmt::AtomicAdd(Ty::U64, Place::Value(Ptr(0), 0), c64(5))],
                        vec![],
                    )],
                )],
                missing: vec![],
            },
            Stmt::Return(c64(0)),
        ],
    );
    let program = compile(&plain).unwrap();
    assert_eq!(program.functions().len(), 1, "{}", program.disassemble());
}

/// Runs `ir` on both engines for each context's first `u64`, checking the result.
fn check(ir: &ProbeIr, cases: &[(u64, u64)]) -> usize {
    let program = compile(ir).unwrap_or_else(|e| panic!("{e}"));
    let text = program.disassemble();
    let verified = verify(&program).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for choice in [EngineChoice::Interpreter, EngineChoice::Auto] {
        let mut vm = Vm::with_engine(&verified, choice).unwrap_or_else(|e| panic!("{e}"));
        for &(a, want) in cases {
            let mut ctx = [0u8; 16];
            ctx[..8].copy_from_slice(&a.to_le_bytes());
            let got = vm.run(&mut ctx).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(got, want, "{} for {a}\n{text}", vm.engine());
        }
    }
    verified.insns_processed()
}

#[test]
fn collatz_verifies_in_a_callback_and_counts_its_steps() {
    let cases: Vec<(u64, u64)> = [1u64, 2, 3, 6, 7, 27, 97, 871, 0]
        .into_iter()
        .map(|a| {
            let steps = collatz_steps(a | 1);
            // The counter after the loop: where `break` left it, or 1000 when it ran out.
            let i = if steps < 1000 { steps } else { 1000 };
            (a, steps * 1_000_000 + i)
        })
        .collect();
    let processed = check(&collatz(), &cases);
    println!("collatz IR in a bpf_loop callback: {processed} insns processed");
}

#[test]
fn return_and_continue_inside_a_callback() {
    // for i in 0..10 { if i % 3 == 0 { continue } s += i; if s > ctx.a { return 100 + i } }
    // return s
    let (s, i) = (0, 1);
    let i64_ = || Expr::Cast { to: Ty::U64, from: Ty::U32, arg: b(var(i)) };
    let body = vec![
        Stmt::If(
            cmp(CmpOp::Eq, bin(BinOp::Rem, i64_(), c64(3)), c64(0)),
            vec![Stmt::Continue],
            vec![],
        ),
        Stmt::Set(Var(s), bin(BinOp::Add, var(s), i64_())),
        Stmt::If(
            cmp(CmpOp::Gt, var(s), Expr::Load(Ty::U64, Place::Ctx(0))),
            vec![Stmt::Return(bin(BinOp::Add, c64(100), i64_()))],
            vec![],
        ),
    ];
    let ir = probe(
        vec![Ty::U64, Ty::U32],
        vec![Stmt::Set(Var(s), c64(0)), Stmt::Repeat(Var(i), 10, body), Stmt::Return(var(s))],
    );
    let native = |a: u64| {
        let mut s = 0;
        for i in 0..10u64 {
            if i.is_multiple_of(3) {
                continue;
            }
            s += i;
            if s > a {
                return 100 + i;
            }
        }
        s
    };
    let cases: Vec<(u64, u64)> = [0, 1, 2, 5, 10, 20, 27, 100].map(|a| (a, native(a))).to_vec();
    check(&ir, &cases);
}

/// 100 variables, each live from its `Set` to the next one's (more than the 64 slots of eBPF's
/// 512-byte stack if each had its own), summed into a variable that crosses a loop whose body
/// has variables of its own: those whose ranges do not meet share slots, and the loop's carried
/// sum keeps its slot through every iteration.
#[test]
fn variables_whose_ranges_do_not_meet_share_slots() {
    const CHAIN: u32 = 100;
    let ctx = || Expr::Load(Ty::U64, Place::Ctx(0));
    // v0 = ctx.a; v(k) = v(k-1) + k; ... s = v(CHAIN-1)
    let mut body = vec![Stmt::Set(Var(0), ctx())];
    for k in 1..CHAIN {
        body.push(Stmt::Set(Var(k), bin(BinOp::Add, var(k - 1), c64(u64::from(k)))));
    }
    let (s, i, t, u) = (CHAIN, CHAIN + 1, CHAIN + 2, CHAIN + 3);
    body.push(Stmt::Set(Var(s), var(CHAIN - 1)));
    // for i in 0..5 { t = s * 3; u = t + i; s = u - s; } (s += 2s + i)
    let widen = |e: Expr| Expr::Cast { to: Ty::U64, from: Ty::U32, arg: b(e) };
    let step = vec![
        Stmt::Set(Var(t), bin(BinOp::Mul, var(s), c64(3))),
        Stmt::Set(Var(u), bin(BinOp::Add, var(t), widen(var(i)))),
        Stmt::Set(Var(s), bin(BinOp::Sub, var(u), var(s))),
    ];
    body.push(Stmt::Repeat(Var(i), 5, step));
    body.push(Stmt::Return(var(s)));
    let mut vars = vec![Ty::U64; CHAIN as usize + 4];
    vars[i as usize] = Ty::U32;
    let ir = probe(vars, body);
    let native = |a: u64| {
        let mut s = a.wrapping_add(u64::from(CHAIN * (CHAIN - 1) / 2));
        for i in 0..5u64 {
            s = s.wrapping_mul(3).wrapping_add(i).wrapping_sub(s);
        }
        s
    };
    let cases: Vec<(u64, u64)> = [0, 1, 7, 1 << 40].map(|a| (a, native(a))).to_vec();
    check(&ir, &cases);
    let program = compile(&ir).expect("compiles");
    let deepest = program
        .decoded()
        .iter()
        .filter_map(|d| match d.insn {
            egpu_ebpf::Instruction::Store { base: egpu_ebpf::Reg::FP, off, .. } => Some(-off),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    assert!(deepest <= 64, "{deepest} bytes of stack for variables two at a time live");
}
