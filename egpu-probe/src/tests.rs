//! The code generator against a reference evaluator of the IR: random probes (typed
//! expressions over every scalar type, variables, the context, stack buffers, a map value,
//! branches, short-circuits, counted loops and early returns) must pass the verifier and give,
//! on both engines, the evaluator's result, context bytes and map contents.

use egpu_ebpf::{AttachPoint, MapDef, MapKind};
use egpu_maps::RawMap;

use super::ir::*;
use super::*;
use egpu_ebpf::verifier::verify;
use egpu_vm::{EngineChoice, Vm};

use egpu_test_support::Rng;

const CTX_SIZE: u32 = 32;
const BUF_SIZE: u32 = 16;
const VALUE_SIZE: u32 = 16;
const INTS: [Ty; 8] = [Ty::U8, Ty::U16, Ty::U32, Ty::U64, Ty::I8, Ty::I16, Ty::I32, Ty::I64];

fn b(e: Expr) -> Box<Expr> {
    Box::new(e)
}

/// The reference evaluator.
struct Eval<'a> {
    vars: Vec<u64>,
    bufs: Vec<Vec<u8>>,
    ctx: &'a mut [u8],
    values: Vec<Option<*mut u8>>,
    maps: &'a [RawMap],
}

enum Flow {
    Next,
    Break,
    Continue,
    Return(u64),
}

impl Eval<'_> {
    fn bytes(&mut self, place: Place, len: u32) -> &mut [u8] {
        match place {
            Place::Ctx(off) => &mut self.ctx[off as usize..(off + len) as usize],
            Place::Buf(buf, off) => {
                &mut self.bufs[buf.0 as usize][off as usize..(off + len) as usize]
            }
            Place::Value(p, off) => {
                let base = self.values[p.0 as usize].expect("a bound pointer");
                // SAFETY: the pointer is a lookup result inside the map's memory, which outlives
                // the evaluation; offsets stay inside the value.
                unsafe { std::slice::from_raw_parts_mut(base.add(off as usize), len as usize) }
            }
        }
    }

    fn expr(&mut self, e: &Expr) -> u64 {
        match e {
            Expr::Const(_, v) => *v,
            Expr::Var(v) => self.vars[v.0 as usize],
            Expr::Load(ty, place) => {
                let mut w = [0u8; 8];
                w[..ty.bytes() as usize].copy_from_slice(self.bytes(*place, ty.bytes()));
                ty.canonical(u64::from_le_bytes(w))
            }
            Expr::Unary(op, ty, a) => {
                let a = self.expr(a);
                Expr::eval_unary(*op, *ty, a)
            }
            Expr::Binary(op, ty, a, c) => {
                let (a, c) = (self.expr(a), self.expr(c));
                Expr::eval_binary(*op, *ty, a, c)
            }
            Expr::Cmp(op, ty, a, c) => {
                let (a, c) = (self.expr(a), self.expr(c));
                u64::from(op.holds(*ty, a, c))
            }
            Expr::Cast { to, arg, .. } => {
                let a = self.expr(arg);
                to.cast(a)
            }
            Expr::And(a, c) => u64::from(self.expr(a) != 0 && self.expr(c) != 0),
            Expr::Or(a, c) => u64::from(self.expr(a) != 0 || self.expr(c) != 0),
            Expr::Call(..) => unreachable!("the random probes call no helper in expressions"),
        }
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Flow {
        for s in stmts {
            match self.stmt(s) {
                Flow::Next => {}
                other => return other,
            }
        }
        Flow::Next
    }

    fn stmt(&mut self, s: &Stmt) -> Flow {
        match s {
            Stmt::Set(v, e) => self.vars[v.0 as usize] = self.expr(e),
            Stmt::Store(ty, place, e) => {
                let v = self.expr(e);
                let n = ty.bytes();
                self.bytes(*place, n).copy_from_slice(&v.to_le_bytes()[..n as usize]);
            }
            Stmt::AtomicAdd(ty, place, e) => {
                let v = self.expr(e);
                let n = ty.bytes();
                let mut w = [0u8; 8];
                w[..n as usize].copy_from_slice(self.bytes(*place, n));
                let sum = u64::from_le_bytes(w).wrapping_add(v);
                self.bytes(*place, n).copy_from_slice(&sum.to_le_bytes()[..n as usize]);
            }
            Stmt::Eval(e) => {
                self.expr(e);
            }
            Stmt::If(c, then, otherwise) => {
                return if self.expr(c) != 0 { self.stmts(then) } else { self.stmts(otherwise) };
            }
            Stmt::Repeat(v, count, body) => {
                for i in 0..*count {
                    self.vars[v.0 as usize] = u64::from(i);
                    match self.stmts(body) {
                        Flow::Return(r) => return Flow::Return(r),
                        Flow::Break => return Flow::Next,
                        Flow::Next | Flow::Continue => {}
                    }
                }
                if *count > 0 {
                    self.vars[v.0 as usize] = u64::from(*count);
                }
            }
            Stmt::Break => return Flow::Break,
            Stmt::Continue => return Flow::Continue,
            Stmt::At(_) => {}
            Stmt::Lookup { map, key, ptr, found, missing } => {
                let size = self.maps[map.0 as usize].geometry().key_size;
                let key = self.bytes(*key, size).to_vec();
                let value = self.maps[map.0 as usize].lookup(&key).expect("lookup");
                self.values[ptr.0 as usize] = value.map(|p| p.as_ptr());
                return if value.is_some() { self.stmts(found) } else { self.stmts(missing) };
            }
            Stmt::Return(e) => return Flow::Return(self.expr(e)),
        }
        Flow::Next
    }
}

/// Builds random probes.
struct Gen<'r> {
    rng: &'r mut Rng,
    vars: Vec<Ty>,
    /// Loop counters: never assigned but by their loop.
    counters: Vec<Var>,
    /// The counters of the loops around the generator, the only ones it may read.
    in_scope: Vec<Var>,
    /// Whether the map value pointer is bound where the generator is.
    in_found: bool,
}

impl Gen<'_> {
    fn constant(&mut self, ty: Ty) -> Expr {
        let v = match self.rng.below(4) {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            _ => self.rng.next_u64() >> self.rng.below(64),
        };
        Expr::Const(ty, if ty == Ty::Bool { v & 1 } else { ty.canonical(v) })
    }

    fn place(&mut self, ty: Ty) -> Place {
        let n = ty.bytes();
        let aligned =
            |rng: &mut Rng, size: u32| (rng.below(((size - n) / n + 1) as usize) as u32) * n;
        match self.rng.below(if self.in_found { 3 } else { 2 }) {
            0 => Place::Ctx(aligned(self.rng, CTX_SIZE)),
            1 => Place::Buf(Buf(0), aligned(self.rng, BUF_SIZE)),
            _ => Place::Value(Ptr(0), aligned(self.rng, VALUE_SIZE)),
        }
    }

    fn expr(&mut self, ty: Ty, depth: u32) -> Expr {
        let leaf = depth == 0 || self.rng.one_in(3);
        if ty == Ty::Bool {
            return match (leaf, self.rng.below(4)) {
                (true, _) => self.constant(Ty::Bool),
                (false, 0) => {
                    Expr::And(b(self.expr(Ty::Bool, depth - 1)), b(self.expr(Ty::Bool, depth - 1)))
                }
                (false, 1) => {
                    Expr::Or(b(self.expr(Ty::Bool, depth - 1)), b(self.expr(Ty::Bool, depth - 1)))
                }
                (false, 2) => Expr::Unary(UnOp::Not, Ty::Bool, b(self.expr(Ty::Bool, depth - 1))),
                _ => {
                    let t = self.rng.pick(&INTS);
                    let op = self.rng.pick(&[
                        CmpOp::Eq,
                        CmpOp::Ne,
                        CmpOp::Lt,
                        CmpOp::Le,
                        CmpOp::Gt,
                        CmpOp::Ge,
                    ]);
                    Expr::Cmp(op, t, b(self.expr(t, depth - 1)), b(self.expr(t, depth - 1)))
                }
            };
        }
        if leaf {
            let vars: Vec<Var> = (0..self.vars.len())
                .map(|v| Var(v as u32))
                .filter(|v| self.vars[v.0 as usize] == ty)
                .filter(|v| !self.counters.contains(v) || self.in_scope.contains(v))
                .collect();
            return match self.rng.below(3) {
                0 if !vars.is_empty() => Expr::Var(self.rng.pick(&vars)),
                1 => {
                    let place = self.place(ty);
                    Expr::Load(ty, place)
                }
                _ => self.constant(ty),
            };
        }
        match self.rng.below(8) {
            0 => {
                let op = self.rng.pick(&[UnOp::Neg, UnOp::Not]);
                Expr::Unary(op, ty, b(self.expr(ty, depth - 1)))
            }
            1 => {
                let from = self.rng.pick(&Ty::ALL);
                Expr::Cast { to: ty, from, arg: b(self.expr(from, depth - 1)) }
            }
            _ => {
                let op = self.rng.pick(&[
                    BinOp::Add,
                    BinOp::Sub,
                    BinOp::Mul,
                    BinOp::Div,
                    BinOp::Rem,
                    BinOp::And,
                    BinOp::Or,
                    BinOp::Xor,
                    BinOp::Shl,
                    BinOp::Shr,
                ]);
                Expr::Binary(op, ty, b(self.expr(ty, depth - 1)), b(self.expr(ty, depth - 1)))
            }
        }
    }

    fn stmts(&mut self, n: usize, depth: u32) -> Vec<Stmt> {
        (0..n).map(|_| self.stmt(depth)).collect()
    }

    fn stmt(&mut self, depth: u32) -> Stmt {
        let nested = depth > 0 && self.rng.one_in(3);
        match (nested, self.rng.below(5)) {
            (true, 0) if !self.in_found => {
                let key = self.rng.below(3) as u64; // index 2 is past the end: missing
                self.in_found = true;
                let found = {
                    let n = 1 + self.rng.below(3);
                    self.stmts(n, depth - 1)
                };
                self.in_found = false;
                let missing = {
                    let n = self.rng.below(2);
                    self.stmts(n, depth - 1)
                };
                Stmt::If(
                    Expr::Const(Ty::Bool, 1),
                    vec![
                        Stmt::Store(Ty::U32, Place::Buf(Buf(1), 0), Expr::Const(Ty::U32, key)),
                        Stmt::Lookup {
                            map: MapRef(0),
                            key: Place::Buf(Buf(1), 0),
                            ptr: Ptr(0),
                            found,
                            missing,
                        },
                    ],
                    vec![],
                )
            }
            // Loops nest two deep at most: the verifier follows a loop iteration by iteration,
            // so deeper nests of branchy loops multiply its work, as in Linux.
            (true, 1) if self.in_scope.len() < 2 => {
                let counter = Var(self.vars.len() as u32);
                self.vars.push(Ty::U32);
                self.counters.push(counter);
                self.in_scope.push(counter);
                let body = {
                    let n = 1 + self.rng.below(2);
                    self.stmts(n, depth - 1)
                };
                self.in_scope.pop();
                // Now and then enough iterations for a branching body to become a bpf_loop.
                let count = if self.rng.one_in(3) { 9 } else { 1 } + self.rng.below(4) as u32;
                Stmt::Repeat(counter, count, body)
            }
            (true, _) => {
                let c = self.expr(Ty::Bool, 3);
                let then = {
                    let n = 1 + self.rng.below(3);
                    self.stmts(n, depth - 1)
                };
                let otherwise = {
                    let n = self.rng.below(3);
                    self.stmts(n, depth - 1)
                };
                Stmt::If(c, then, otherwise)
            }
            (false, 0) if self.rng.one_in(4) => {
                let ty = self.rng.pick(&INTS);
                Stmt::Return(self.expr(ty, 3))
            }
            (false, 2) if !self.in_scope.is_empty() && self.rng.one_in(3) => {
                let c = self.expr(Ty::Bool, 2);
                let jump = if self.rng.one_in(2) { Stmt::Break } else { Stmt::Continue };
                Stmt::If(c, vec![jump], vec![])
            }
            (false, 1) => {
                let ty = self.rng.pick(&INTS);
                let place = self.place(ty);
                let value = self.expr(ty, 3);
                if matches!(ty, Ty::U32 | Ty::U64) && self.rng.one_in(2) {
                    Stmt::AtomicAdd(ty, place, value)
                } else {
                    Stmt::Store(ty, place, value)
                }
            }
            _ => {
                let targets: Vec<usize> = (0..self.vars.len())
                    .filter(|&v| !self.counters.contains(&Var(v as u32)))
                    .collect();
                let v = targets[self.rng.below(targets.len())];
                let ty = self.vars[v];
                Stmt::Set(Var(v as u32), self.expr(ty, 3))
            }
        }
    }
}

fn random_probe(rng: &mut Rng) -> ProbeIr {
    let mut g =
        Gen { rng, vars: Vec::new(), counters: Vec::new(), in_scope: Vec::new(), in_found: false };
    let mut body = Vec::new();
    for _ in 0..1 + g.rng.below(7) {
        let ty = g.rng.pick(&Ty::ALL);
        let v = Var(g.vars.len() as u32);
        g.vars.push(ty);
        let init = g.constant(ty);
        body.push(Stmt::Set(v, init));
    }
    // The buffers start zeroed, as the evaluator's do.
    for (buf, size) in [(0, BUF_SIZE), (1, 8)] {
        for off in (0..size).step_by(8) {
            body.push(Stmt::Store(Ty::U64, Place::Buf(Buf(buf), off), Expr::Const(Ty::U64, 0)));
        }
    }
    let n = 2 + g.rng.below(8);
    body.extend(g.stmts(n, 3));
    let ty = g.rng.pick(&INTS);
    body.push(Stmt::Return(g.expr(ty, 4)));
    ProbeIr {
        attach: AttachPoint::User { ctx_size: CTX_SIZE },
        vars: g.vars,
        bufs: vec![
            BufDecl { name: "buf".into(), size: BUF_SIZE, align: 8 },
            BufDecl { name: "key".into(), size: 8, align: 8 },
        ],
        ptrs: 1,
        maps: vec![MapDef {
            name: "values".into(),
            kind: MapKind::Array,
            key_size: 4,
            value_size: VALUE_SIZE,
            capacity: 2,
        }],
        body,
    }
}

fn map_bytes(map: &RawMap) -> Vec<u8> {
    let (ptr, len) = map.memory();
    // SAFETY: the memory lives as long as `map`, and nothing writes it meanwhile.
    unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) }.to_vec()
}

#[test]
fn random_probes_compile_verify_and_match_the_evaluator_on_both_engines() {
    let mut rng = Rng::from_env("random probes", 0x9e0b_e5ee_d000_0001);
    let rounds = 400;
    let (mut insns, mut with_callbacks) = (0, 0);
    for round in 0..rounds {
        let ir = random_probe(&mut rng);
        let program = compile(&ir).unwrap_or_else(|e| panic!("round {round}: {e}\n{ir:#?}"));
        insns += program.insns().len();
        with_callbacks += usize::from(program.functions().len() > 1);
        let verified = verify(&program).unwrap_or_else(|e| {
            panic!(
                "round {round}: the verifier refused generated code: {e}\n{}",
                program.disassemble()
            )
        });
        for choice in [EngineChoice::Interpreter, EngineChoice::Auto] {
            let mut vm = match Vm::with_engine(&verified, choice) {
                Ok(vm) => vm,
                Err(e) => panic!("round {round}: {e}"),
            };
            let reference =
                RawMap::create(*vm.maps()[0].geometry(), &egpu_maps::Placement::Process).unwrap();
            for _ in 0..3 {
                let ctx: Vec<u8> = (0..CTX_SIZE).map(|_| rng.next_u64() as u8).collect();
                let (mut a, mut want_ctx) = (ctx.clone(), ctx);
                let got = vm
                    .run(&mut a)
                    .unwrap_or_else(|e| panic!("round {round}: {e}\n{}", program.disassemble()));
                let mut eval = Eval {
                    vars: vec![0; ir.vars.len()],
                    bufs: ir.bufs.iter().map(|b| vec![0; b.size as usize]).collect(),
                    ctx: &mut want_ctx,
                    values: vec![None],
                    maps: std::slice::from_ref(&reference),
                };
                let Flow::Return(want) = eval.stmts(&ir.body) else { panic!("no return") };
                assert_eq!(
                    (got, &a),
                    (want, &want_ctx),
                    "round {round}, {}: result and context\n{}\n{ir:#?}",
                    vm.engine(),
                    program.disassemble()
                );
                assert_eq!(
                    map_bytes(&vm.maps()[0]),
                    map_bytes(&reference),
                    "round {round}: map contents\n{}",
                    program.disassemble()
                );
            }
        }
    }
    println!(
        "probe codegen: {rounds} random probes, {} instructions on average, {with_callbacks} with \
         bpf_loop callbacks, all verified and matching",
        insns / rounds
    );
    assert!(with_callbacks >= rounds / 20, "only {with_callbacks} probes have a callback");
}

/// `stmts` with a [`Stmt::At`] before each statement, at lines counted from `line`; the lines
/// of the marks before loops go to `loops`.
fn marked(stmts: &[Stmt], line: &mut u32, loops: &mut Vec<u32>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in stmts {
        *line += 1;
        out.push(Stmt::At(SourceLoc { file: "probe.rs", line: *line, column: 1 }));
        out.push(match s {
            Stmt::If(c, a, b) => {
                Stmt::If(c.clone(), marked(a, line, loops), marked(b, line, loops))
            }
            Stmt::Repeat(v, n, body) => {
                loops.push(*line);
                Stmt::Repeat(*v, *n, marked(body, line, loops))
            }
            Stmt::Lookup { map, key, ptr, found, missing } => Stmt::Lookup {
                map: *map,
                key: *key,
                ptr: *ptr,
                found: marked(found, line, loops),
                missing: marked(missing, line, loops),
            },
            other => other.clone(),
        });
    }
    out
}

#[test]
fn source_marks_change_no_instruction_and_locate_every_one() {
    let mut rng = Rng::from_env("random probes", 0x9e0b_e5ee_d000_0002);
    let mut in_loops = 0;
    for round in 0..300 {
        let ir = random_probe(&mut rng);
        let (plain, none) = compile_mapped(&ir).unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(none.statement(0), None, "no marks, no locations");
        let (mut line, mut loops) = (0, Vec::new());
        let body = marked(&ir.body, &mut line, &mut loops);
        let ir = ProbeIr { body, ..ir };
        let (program, map) = compile_mapped(&ir).unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(program.insns(), plain.insns(), "round {round}: the marks changed the code");
        assert_eq!(map.len(), program.insns().len(), "round {round}");
        for pc in 0..map.len() {
            let at = map.statement(pc).unwrap_or_else(|| panic!("round {round}: {pc} unlocated"));
            assert!((1..=line).contains(&at.line), "round {round}: {pc} at {at}");
            if let Some(l) = map.enclosing_loop(pc) {
                assert!(loops.contains(&l.line), "round {round}: {pc} in {l}, not a loop");
                in_loops += 1;
            }
        }
    }
    assert!(in_loops > 0, "no instruction was in a loop: the test tests nothing");
}

#[test]
fn a_frame_over_512_bytes_names_the_largest_locals() {
    let ir = ProbeIr {
        attach: AttachPoint::User { ctx_size: 0 },
        vars: vec![],
        bufs: vec![
            BufDecl { name: "small".into(), size: 8, align: 8 },
            BufDecl { name: "records".into(), size: 400, align: 8 },
            BufDecl { name: "key".into(), size: 120, align: 8 },
        ],
        ptrs: 0,
        maps: vec![],
        body: vec![],
    };
    let e = compile(&ir).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the probe needs 528 bytes of stack, more than eBPF's 512; the largest locals: \
         `records` (400 bytes), `key` (120 bytes), `small` (8 bytes)"
    );
}

#[test]
fn busy_variables_live_in_saved_registers_and_calls_keep_temporaries() {
    // x = ctx.a; for i in 0..4 { x = x * 3 + ktime() % 2 }; return x + ctx.a
    let ctx_a = || Expr::Load(Ty::U64, Place::Ctx(0));
    let ktime = Expr::Call(Ty::U64, egpu_ebpf::helpers::id::KTIME_GET_NS, vec![]);
    let body = vec![
        Stmt::Set(Var(0), ctx_a()),
        Stmt::Repeat(
            Var(1),
            4,
            vec![Stmt::Set(
                Var(0),
                Expr::Binary(
                    BinOp::Add,
                    Ty::U64,
                    b(Expr::Binary(
                        BinOp::Mul,
                        Ty::U64,
                        b(Expr::Var(Var(0))),
                        b(Expr::Const(Ty::U64, 3)),
                    )),
                    b(Expr::Binary(BinOp::Rem, Ty::U64, b(ktime), b(Expr::Const(Ty::U64, 2)))),
                ),
            )],
        ),
        Stmt::Return(Expr::Binary(BinOp::Add, Ty::U64, b(Expr::Var(Var(0))), b(ctx_a()))),
    ];
    let ir = ProbeIr {
        attach: AttachPoint::User { ctx_size: 8 },
        vars: vec![Ty::U64, Ty::U32],
        bufs: vec![],
        ptrs: 0,
        maps: vec![],
        body,
    };
    let program = compile(&ir).unwrap();
    let text = program.disassemble();
    // The only stack accesses: the temporary `x * 3` saved around the call and loaded again.
    assert_eq!(text.matches("[%r10").count(), 2, "variables spilled to the stack:\n{text}");
    assert!(text.contains("mov %r9, %r1"), "the context pointer kept in r9:\n{text}");
    let mut vm = Vm::new(&verify(&program).unwrap()).unwrap();
    let mut ctx = 5u64.to_le_bytes();
    let r = vm.run(&mut ctx).unwrap();
    // x0 = 5; each step x = 3x + (0 or 1): 405 + [0, 40], then + 5.
    assert!((410..=450).contains(&r), "{r}\n{text}");
}
