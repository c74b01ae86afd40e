//! Probe Rust loops whose bodies branch: the code generator makes each a `bpf_loop` call with a
//! callback, which the verifier checks in time linear in the body instead of following every
//! iteration's paths. Each probe here runs as its native twin and as eBPF on both CPU engines,
//! for fixed and random contexts and map contents, and the three must agree on the result, the
//! context's bytes and every map's contents (as in `probe_differential`).

use bytemuck::{Pod, Zeroable};
use egpu::maps::{Array, HashMap, RawMap};
use egpu::probe::Probe;
use egpu::vm::EngineChoice;

use egpu_test_support::Rng;

mod map_memory;
use map_memory::{restore, snapshot};

/// The context every probe here takes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
struct Ctx {
    a: u64,
    b: u64,
    d: u32,
    h: u8,
    pad: [u8; 3],
    out: u64,
    out3: u32,
    pad2: u32,
}

static STEPS: HashMap<u64, u64> = HashMap::with_capacity(16);
static HITS: Array<u64> = Array::with_len(16);
static PAIRS: HashMap<u64, u64> = HashMap::with_capacity(64);
/// Held by each test: they share the maps, and tests run in parallel.
static MAPS_IN_USE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Collatz: the verifier follows both sides of the `if` on every iteration of a plain loop, so
/// 1000 iterations are too many paths; as a callback, the body is verified a few times.
#[egpu::probe(user)]
fn collatz(ctx: &mut Ctx) -> u64 {
    let mut n = (ctx.a & 0xffff) | 1;
    let k = ctx.h as u64 & 7;
    let mut steps = 0u64;
    #[bound(1000)]
    while n != 1 {
        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
        STEPS.fetch_add(&k, 1);
        steps += 1;
    }
    ctx.out = n;
    steps
}

/// A bounded search that stops at the first match with `break`.
#[egpu::probe(user)]
fn search_break(ctx: &mut Ctx) -> u32 {
    let mut at = 99u32;
    for i in 0..62u32 {
        if (ctx.a >> i) & 7 == 7 {
            at = i;
            break;
        }
    }
    ctx.out3 = at;
    at
}

/// `continue` skips small nibbles; the others are summed.
#[egpu::probe(user)]
fn skip_continue(ctx: &mut Ctx) -> u64 {
    let mut s = 0u64;
    let mut skipped = 0u32;
    for i in 0..16u64 {
        let nib = (ctx.b >> (i * 4)) & 15;
        if nib < 5 {
            skipped += 1;
            continue;
        }
        s += nib * (i + 1);
    }
    ctx.out3 = skipped;
    s
}

/// `return` from inside the loop, with the value computed there.
#[egpu::probe(user)]
fn return_inside(ctx: &mut Ctx) -> u64 {
    let mut acc = ctx.a & 0xff;
    for i in 0..40u64 {
        acc = acc * 31 + i;
        if acc % 23 == (ctx.h as u64) % 23 {
            ctx.out = acc;
            return i + 1000;
        }
        acc &= 0xffff;
    }
    acc
}

/// Nested branching loops, the inner one leaving early.
#[egpu::probe(user)]
fn nested_break(ctx: &mut Ctx) -> u64 {
    let mut s = 0u64;
    for i in 0..8u64 {
        for j in 0..8u64 {
            if (ctx.a >> (i * 8 + j)) & 1 == 1 {
                s += i * j + 1;
            } else if j > i {
                break;
            }
        }
        if s > 200 {
            s -= 100;
        }
    }
    s
}

/// A context field read in the loop, and map updates in a branch.
#[egpu::probe(user)]
fn context_and_maps(ctx: &mut Ctx) -> u64 {
    let mut total = 0u64;
    for i in 0..16u32 {
        if (ctx.d >> i) & 1 == 1 {
            HITS.fetch_add(i, ctx.h as u64);
            let key = (i as u64) ^ (ctx.b & 3);
            PAIRS.fetch_add(&key, 1);
            total += ctx.h as u64 + 1;
        }
    }
    total
}

// --- the harness ------------------------------------------------------------------------------

struct Case {
    name: &'static str,
    twin: fn(&mut Ctx) -> u64,
    probe: fn() -> &'static Probe,
}

macro_rules! corpus {
    ($($name:ident),* $(,)?) => {
        vec![$(Case {
            name: stringify!($name),
            twin: |ctx| u64::from($name(ctx)),
            probe: $name::probe,
        }),*]
    };
}

fn maps() -> Vec<RawMap> {
    [STEPS.raw(), HITS.raw(), PAIRS.raw()].into_iter().cloned().collect()
}

fn random_ctx(rng: &mut Rng) -> Ctx {
    let mut ctx = Ctx::zeroed();
    for byte in bytemuck::bytes_of_mut(&mut ctx) {
        *byte = rng.next_u64() as u8;
    }
    if rng.one_in(4) {
        ctx.a = u64::MAX;
    }
    ctx
}

/// Runs `case` on `ctx` as its twin and on both engines; a mismatch is described.
fn compare(case: &Case, vms: &mut [egpu::vm::Vm], ctx: Ctx, mismatches: &mut Vec<String>) {
    let maps = maps();
    let before = snapshot(&maps);
    let mut twin_ctx = ctx;
    let want = (case.twin)(&mut twin_ctx);
    let want_maps = snapshot(&maps);
    for vm in vms {
        restore(&maps, &before);
        let mut vm_ctx = ctx;
        let got = vm.run_ctx(&mut vm_ctx).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        if (got, vm_ctx) != (want, twin_ctx) || snapshot(&maps) != want_maps {
            mismatches.push(format!(
                "{} on {}: {ctx:?}\n  twin {want:#x} {twin_ctx:?}\n  eBPF {got:#x} {vm_ctx:?}",
                case.name,
                vm.engine(),
            ));
        }
    }
    restore(&maps, &want_maps);
}

#[test]
fn branching_loops_agree_with_their_twins_on_both_engines() {
    let _maps = MAPS_IN_USE.lock().unwrap_or_else(|e| e.into_inner());
    let cases = corpus![
        collatz,
        search_break,
        skip_continue,
        return_inside,
        nested_break,
        context_and_maps
    ];
    let mut rng = Rng::from_env("probe loops", 0x0b5e_55ed_100b_0001);
    let (mut runs, mut mismatches) = (0, Vec::new());
    for case in &cases {
        let probe = (case.probe)();
        let verified = probe.verified().unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let program = verified.program();
        let text = program.disassemble();
        assert!(text.contains("call 181"), "{}: no bpf_loop\n{text}", case.name);
        println!(
            "{}: {} functions, {} instructions, {} insns processed by the verifier",
            case.name,
            program.functions().len(),
            program.insns().len(),
            verified.insns_processed()
        );
        let mut vms: Vec<_> = [EngineChoice::Interpreter, EngineChoice::Auto]
            .into_iter()
            .map(|c| probe.vm_with(c).unwrap_or_else(|e| panic!("{}: {e}", case.name)))
            .collect();
        let fixed = [0u64, 1, 2, 3, 6, 7, 27, 97, 871, 0xffff, 0x7777, u64::MAX];
        for a in fixed {
            let ctx =
                Ctx { a, b: a.rotate_left(17), d: a as u32 ^ 0x5a5a, h: a as u8, ..Ctx::zeroed() };
            compare(case, &mut vms, ctx, &mut mismatches);
            runs += 2;
        }
        for _ in 0..150 {
            compare(case, &mut vms, random_ctx(&mut rng), &mut mismatches);
            runs += 2;
        }
    }
    println!("probe loops: {} probes, {runs} runs, {} mismatches", cases.len(), mismatches.len());
    assert!(
        mismatches.is_empty(),
        "{}",
        mismatches.iter().take(3).cloned().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn collatz_with_a_bound_of_1000_verifies_and_counts_its_steps() {
    let _maps = MAPS_IN_USE.lock().unwrap_or_else(|e| e.into_inner());
    let probe = collatz::probe();
    let verified = probe.verified().unwrap_or_else(|e| panic!("{e}"));
    println!(
        "collatz (#[bound(1000)] while, an if and a map update per step): {} insns processed by \
         the verifier, {} functions",
        verified.insns_processed(),
        verified.program().functions().len()
    );
    assert_eq!(verified.program().functions().len(), 2);
    let mut vm = probe.vm_with(EngineChoice::Interpreter).unwrap();
    // 27 takes 111 steps; 97, 118; 871, 178.
    for (a, steps) in [(1u64, 0u64), (3, 7), (27, 111), (97, 118), (871, 178)] {
        let mut ctx = Ctx { a, ..Ctx::zeroed() };
        assert_eq!(vm.run_ctx(&mut ctx).unwrap(), steps, "collatz({a})");
        assert_eq!(ctx.out, 1);
    }
}

/// A plain loop too long to verify, inside a loop lowered to a callback.
const INNER_LOOP: u32 = line!() + 9;
#[egpu::probe(user)]
fn too_complex_in_callback(ctx: &mut Ctx) -> u64 {
    let mut x = ctx.a;
    for _ in 0..4u32 {
        if x & 1 == 1 {
            x += 1;
        }
        // The loop the refusal must name: its body is straight, so it stays a plain loop.
        for i in 0..1_000_000u32 {
            x += i as u64;
        }
    }
    x
}

#[test]
fn a_refusal_inside_a_callback_names_the_rust_line() {
    let e = too_complex_in_callback::probe().program().unwrap_err();
    let egpu::probe::BuildError::Verify(refusal) = &e else { panic!("not a refusal: {e}") };
    assert_eq!(refusal.error.violation, egpu::ebpf::verifier::Violation::TooComplex, "{e}");
    let text = e.to_string();
    println!("{text}");
    let at = format!("the loop at {}:{INNER_LOOP}:9 [too-complex]", file!());
    assert!(text.contains(&at), "{text}\nshould contain {at}");
    let statement = refusal.statement.expect("a located instruction");
    assert!((INNER_LOOP..=INNER_LOOP + 1).contains(&statement.line), "{text}");
}
