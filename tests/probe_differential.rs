//! Probe Rust, judged against itself: every probe of the corpus runs as its native twin and as
//! eBPF on both CPU engines, for random contexts and map contents, and the three must agree on
//! the result, on the context's bytes (the probes write to their user context) and on every
//! map's contents.
//!
//! The corpus together uses every construct the compiler supports so far; each probe says what
//! it is for.

use bytemuck::{Pod, Zeroable};
use egpu::maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RawMap, RingBuf, Shards};
use egpu::probe::Probe;
use egpu::vm::EngineChoice;

use egpu_test_support::Rng;

mod map_memory;
use map_memory::{restore, snapshot};

/// The context every probe of the corpus takes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
struct Ctx {
    a: u64,
    b: u64,
    c: i64,
    d: u32,
    e: i32,
    f: u16,
    g: i16,
    h: u8,
    i: i8,
    j: [u8; 2],
    arr: [u32; 4],
    out: u64,
    out2: i32,
    out3: u32,
}

/// A struct key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
struct FlowKey {
    pid: u32,
    cpu: u32,
    kind: u64,
}

/// A struct value and ring record, with an array field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
struct Record {
    seq: u64,
    size: u32,
    flags: u32,
    tag: [u8; 8],
}

/// Per-key statistics, updated field by field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
struct Stats {
    count: u64,
    bytes: u64,
    hits: [u32; 2],
}

const K: u64 = 0x9e37_79b9_7f4a_7c15;
const N: u32 = 5;

static COUNTS: HashMap<u64, u64> = HashMap::with_capacity(16);
static PAIRS: HashMap<u32, i32> = HashMap::with_capacity(8);
static BUCKETS: Array<u64> = Array::with_len(8);
static SMALL: Array<u32> = Array::with_len(4);
static FLOWS: HashMap<FlowKey, u64> = HashMap::with_capacity(16);
static RECORDS: HashMap<u32, Record> = HashMap::with_capacity(8);
static EVENTS: RingBuf<Record> = RingBuf::with_capacity(64);
// One host shard each, so that the twin and the programs update the same shard whichever CPU
// the test thread is on (device shards stay untouched).
static PAIR_VALUES: HashMap<u64, [u64; 2]> = HashMap::with_capacity(4);
static STATS: HashMap<u32, Stats> = HashMap::with_capacity(8);
static STAT_ARRAY: Array<Stats> = Array::with_len(6);
static PER_CPU: PerCpuArray<u64> = PerCpuArray::with_shards(4, Shards::new(1, 2));
static PER_CPU_HASH: PerCpuHashMap<u32, u64> = PerCpuHashMap::with_shards(8, Shards::new(1, 2));

// --- arithmetic -------------------------------------------------------------------------------

/// u64 arithmetic, wrapping.
#[egpu::probe(user)]
fn arith_u64(ctx: &mut Ctx) -> u64 {
    ctx.a * 3 + ctx.b - (ctx.a ^ K)
}

/// u8 arithmetic wraps at 8 bits.
#[egpu::probe(user)]
fn wrap_u8(ctx: &mut Ctx) -> u8 {
    let x = ctx.h * 7 + 200;
    x - ctx.j[0]
}

/// i8 arithmetic wraps at 8 bits, signed.
#[egpu::probe(user)]
fn wrap_i8(ctx: &mut Ctx) -> i8 {
    ctx.i * 3 - 100
}

/// Division and remainder by a value that is often zero.
#[egpu::probe(user)]
fn div_by_zero(ctx: &mut Ctx) -> u64 {
    let d = ctx.b & 3;
    ctx.out = ctx.a % d;
    ctx.a / d
}

/// Signed division, including MIN / -1 and divisors of both signs.
#[egpu::probe(user)]
fn signed_div(ctx: &mut Ctx) -> i64 {
    let d = (ctx.e % 4) as i64 - 1;
    let n = if ctx.h & 1 == 1 { i64::MIN } else { ctx.c };
    ctx.out = (n % d) as u64;
    n / d
}

/// i32 and i16 division and remainder.
#[egpu::probe(user)]
fn narrow_div(ctx: &mut Ctx) -> i32 {
    let q = ctx.e / (ctx.g as i32);
    ctx.out2 = ctx.e % (ctx.g as i32 | 1);
    q
}

/// Shifts by amounts beyond the width (taken modulo it).
#[egpu::probe(user)]
fn shifts(ctx: &mut Ctx) -> u32 {
    let s = ctx.h;
    ctx.out = ctx.a << s;
    ctx.out3 = ctx.d >> (s + 3);
    (ctx.f << s) as u32 + (ctx.h >> 1) as u32
}

/// Arithmetic right shifts of negative numbers.
#[egpu::probe(user)]
fn signed_shifts(ctx: &mut Ctx) -> i64 {
    ctx.out2 = ctx.e >> (ctx.h & 31);
    ctx.c >> ctx.h
}

/// Every cast between integer widths and signs.
#[egpu::probe(user)]
fn casts(ctx: &mut Ctx) -> u64 {
    let a = ctx.a as u8 as u64;
    let b = ctx.i as u64;
    let c = ctx.e as i64 as u64;
    let d = ctx.d as i32 as i64;
    let e = ctx.g as u16 as u32;
    let f = ctx.c as i8 as i32;
    ctx.out2 = f;
    ctx.out3 = e;
    a + b + c + d as u64
}

/// Unsigned comparisons of values with the top bit set.
#[egpu::probe(user)]
fn unsigned_compare(ctx: &mut Ctx) -> u64 {
    if ctx.a > ctx.b {
        1
    } else if ctx.a == ctx.b {
        2
    } else {
        3
    }
}

/// Signed comparisons.
#[egpu::probe(user)]
fn signed_compare(ctx: &mut Ctx) -> i32 {
    let mut r = 0;
    if ctx.c < 0 {
        r += 1;
    }
    if ctx.e >= ctx.c as i32 {
        r += 2;
    }
    if ctx.i <= -5 {
        r += 4;
    }
    if ctx.g > ctx.i as i16 {
        r += 8;
    }
    r
}

/// Short-circuit logic and bool locals.
#[egpu::probe(user)]
fn logic(ctx: &mut Ctx) -> u64 {
    let big = ctx.a > 1 << 40;
    let odd = ctx.b & 1 == 1;
    let neither = !big && !odd;
    if big && odd || neither {
        10
    } else if big || odd {
        20
    } else {
        30
    }
}

/// Unary minus and not, on several types.
#[egpu::probe(user)]
fn unary(ctx: &mut Ctx) -> i64 {
    ctx.out3 = !ctx.d;
    ctx.out2 = -ctx.e;
    let small = ctx.h > 3;
    let flip = !small;
    if flip { -ctx.c } else { !ctx.c }
}

/// Compound assignments of every operator.
#[egpu::probe(user)]
fn compound(ctx: &mut Ctx) -> u64 {
    let mut x = ctx.a;
    x += ctx.b;
    x -= 7;
    x *= 3;
    x /= ctx.b & 7;
    x %= 1000;
    x <<= ctx.h;
    x >>= 2;
    x &= 0xffff_ff00;
    x |= 5;
    x ^= K;
    ctx.out += x;
    ctx.out2 -= 1;
    x
}

/// Constants above 32 bits, and `const` items.
#[egpu::probe(user)]
fn big_constants(ctx: &mut Ctx) -> u64 {
    let x = ctx.a | 0x8000_0000_0000_0001;
    let y = x * 1;
    y & K
}

/// `if` as a value, and block values.
#[egpu::probe(user)]
fn if_values(ctx: &mut Ctx) -> u64 {
    let y = {
        let t = ctx.a + 1;
        t * 2
    };
    let z = if ctx.h > 100 { y } else { if ctx.h > 50 { y + 1 } else { 7 } };
    z + y
}

/// Shadowing.
#[egpu::probe(user)]
fn shadowing(ctx: &mut Ctx) -> u32 {
    let x = ctx.d;
    let x = x + 1;
    let x = x as u64 * 2;
    x as u32
}

// --- helpers ----------------------------------------------------------------------------------

/// A helper of the user's, inlined where probes call it.
#[egpu::helper]
fn mix(x: u64, y: u64) -> u64 {
    let z = x ^ (y << 7);
    z * 0x9e37_79b9 + (z >> 29)
}

/// A helper with a `mut` argument, a loop and a call of another helper.
#[egpu::helper]
fn fold(mut acc: u64, rounds: u32) -> u64 {
    for _ in 0..4 {
        acc = mix(acc, rounds as u64);
    }
    if acc & 1 == 1 { acc } else { acc + 1 }
}

/// A helper that updates a map.
#[egpu::helper]
fn bump(key: u64) {
    COUNTS.fetch_add(&key, 3);
}

/// Probes calling helpers.
#[egpu::probe(user)]
fn call_helpers(ctx: &mut Ctx) -> u64 {
    let h = mix(ctx.a, ctx.b);
    bump(ctx.b & 7);
    ctx.out = fold(h, ctx.d);
    h
}

/// The warp's helpers, as a thread (a warp of one lane) sees them: it leads, alone (the one
/// peer of its value, no stride), and its access's sectors are those it spans (an access of
/// `d & 127` bytes at `a`).
#[egpu::probe(user)]
fn warp_helpers(ctx: &mut Ctx) -> u64 {
    let mut sectors = egpu::helpers::warp_stride(ctx.a) as u32;
    if egpu::helpers::warp_leader() {
        sectors = egpu::helpers::warp_sectors(ctx.a, ctx.d & 127);
    }
    ctx.out3 = egpu::helpers::warp_lanes() + egpu::helpers::warp_peers(ctx.b >> 12);
    sectors as u64
}

// --- control flow -----------------------------------------------------------------------------

/// `match` as a value: literals, alternatives, ranges, constants and `_`.
#[egpu::probe(user)]
fn match_value(ctx: &mut Ctx) -> u64 {
    let class = match ctx.h {
        0 => 100,
        1 | 3 | 5 => 200,
        4..=15 => ctx.a & 0xff,
        16..64 => 300,
        200.. => 400,
        _ => 500,
    };
    class + 1
}

/// `match` as a statement, on a signed value, with negative patterns.
#[egpu::probe(user)]
fn match_statement(ctx: &mut Ctx) -> i32 {
    let mut r = 0;
    match ctx.i {
        -128..=-100 => r = 1,
        -1 => {
            r = 2;
            ctx.out = 7;
        }
        0 => {}
        _ => r = ctx.i as i32 * 2,
    }
    r
}

/// `while` with a bound the verifier sees: at most 20 iterations.
#[egpu::probe(user)]
fn bounded_while(ctx: &mut Ctx) -> u32 {
    let mut n = ctx.d;
    let mut steps = 0;
    #[bound(20)]
    while n > 1 {
        n = if n & 1 == 0 { n / 2 } else { n * 3 + 1 };
        steps += 1;
    }
    ctx.out3 = n;
    steps
}

/// `loop` with a bound, `break` and `continue`.
#[egpu::probe(user)]
fn bounded_loop(ctx: &mut Ctx) -> u64 {
    let mut x = ctx.a;
    let mut i = 0u64;
    #[bound(12)]
    loop {
        i += 1;
        if x & 3 == 0 {
            x >>= 2;
            continue;
        }
        if x & 0xff == 0xff {
            break;
        }
        x = x * 5 + i;
    }
    x ^ i
}

/// `break` and `continue` in `for` loops.
#[egpu::probe(user)]
fn for_break_continue(ctx: &mut Ctx) -> u32 {
    let mut found = 0;
    for i in 0..32u32 {
        if (ctx.d >> i) & 1 == 0 {
            continue;
        }
        found += 1;
        if found == 3 {
            ctx.out3 = i;
            break;
        }
    }
    found
}

/// A counted loop.
#[egpu::probe(user)]
fn loop_hash(ctx: &mut Ctx) -> u64 {
    let mut acc = ctx.a;
    for i in 0..8 {
        acc = acc * 31 + i;
    }
    acc
}

/// A loop bounded by a `const`, with a branch inside.
#[egpu::probe(user)]
fn loop_const_bound(ctx: &mut Ctx) -> u32 {
    let mut evens = 0;
    for i in 0..N {
        if (ctx.d >> i) & 1 == 0 {
            evens += 1;
        }
    }
    evens
}

/// Nested loops.
#[egpu::probe(user)]
fn nested_loops(ctx: &mut Ctx) -> u64 {
    let mut s = 0u64;
    for i in 0..4u64 {
        for j in 0..3u64 {
            if (ctx.b >> (i * 3 + j)) & 1 == 1 {
                s += i * j + 1;
            }
        }
    }
    s
}

/// An early return from inside a loop.
#[egpu::probe(user)]
fn early_return(ctx: &mut Ctx) -> u32 {
    for i in 0..16u32 {
        if (ctx.d >> i) & 3 == 3 {
            return i;
        }
    }
    99
}

/// Returns from several branches of a unit probe, writing the context on the way.
#[egpu::probe(user)]
fn unit_returns(ctx: &mut Ctx) {
    if ctx.h == 0 {
        ctx.out = 1;
        return;
    }
    if ctx.h < 128 {
        ctx.out = 2;
        return;
    }
    ctx.out = 3;
}

/// More live values than saved registers: some live on the stack.
#[egpu::probe(user)]
fn many_locals(ctx: &mut Ctx) -> u64 {
    let a = ctx.a + 1;
    let b = ctx.b + 2;
    let c = ctx.c as u64 + 3;
    let d = ctx.d as u64 + 4;
    let e = ctx.e as u64 + 5;
    let f = ctx.f as u64 + 6;
    let g = ctx.g as u64 + 7;
    let h = ctx.h as u64 + 8;
    a * b + c * d + e * f + g * h + a + h
}

/// A deep expression.
#[egpu::probe(user)]
fn deep_expression(ctx: &mut Ctx) -> u64 {
    ((ctx.a + ctx.b) * (ctx.c as u64 - ctx.d as u64))
        ^ (((ctx.e as u64) << 3) + (ctx.f as u64 * (ctx.g as u64 + ctx.h as u64)))
        | ((ctx.a - (ctx.b + (ctx.c as u64 + (ctx.d as u64 + ctx.e as u64)))) >> 7)
}

/// Constant indices into a context array, and writes to narrow fields.
#[egpu::probe(user)]
fn context_array(ctx: &mut Ctx) -> u32 {
    ctx.out3 = ctx.arr[0] + ctx.arr[3];
    ctx.out2 = ctx.arr[1] as i32 - ctx.arr[2] as i32;
    ctx.arr[1] ^ ctx.arr[2]
}

/// 16-bit arithmetic, both signs.
#[egpu::probe(user)]
fn sixteen_bits(ctx: &mut Ctx) -> i16 {
    let u = ctx.f * ctx.f + 1234;
    ctx.out3 = u as u32;
    ctx.g * 3 - (u as i16)
}

/// `const` items inside the body, and bool locals assigned later.
#[egpu::probe(user)]
#[allow(
    clippy::needless_late_init,
    clippy::needless_bool_assign,
    reason = "the late initialisation is the construct under test"
)]
fn inner_consts(ctx: &mut Ctx) -> u64 {
    const LIMIT: u64 = 1 << 40;
    const SCALE: u32 = 3;
    let over;
    if ctx.a > LIMIT {
        over = true;
    } else {
        over = false;
    }
    let scaled = ctx.d as u64 * SCALE as u64;
    if over { scaled } else { LIMIT - scaled }
}

/// `usize` arithmetic (64 bits).
#[egpu::probe(user)]
fn usize_math(ctx: &mut Ctx) -> usize {
    let n = ctx.a as usize;
    n * 5 / 3 + ctx.h as usize
}

// --- maps -------------------------------------------------------------------------------------

/// Counting by key in a hash map (the usual counter).
#[egpu::probe(user)]
fn count_by_key(ctx: &mut Ctx) {
    let key = ctx.b & 7;
    COUNTS.fetch_add(&key, ctx.h as u64 + 1);
}

/// Insert and remove.
#[egpu::probe(user)]
fn insert_remove(ctx: &mut Ctx) {
    let key = ctx.d & 7;
    if ctx.h & 1 == 0 {
        let value = ctx.e;
        PAIRS.insert(&key, &value);
    } else {
        PAIRS.remove(&key);
    }
}

/// Array counters, with indices that may be out of range.
#[egpu::probe(user)]
fn array_counters(ctx: &mut Ctx) {
    let i = ctx.d & 15;
    BUCKETS.fetch_add(i, 1);
    SMALL.fetch_add(ctx.h as u32 & 3, ctx.d);
}

/// A loop of map updates.
#[egpu::probe(user)]
fn map_loop(ctx: &mut Ctx) -> u64 {
    for i in 0..4u64 {
        if (ctx.a >> i) & 1 == 1 {
            let key = i + 8;
            COUNTS.fetch_add(&key, i);
        }
    }
    ctx.a & 15
}

/// Several maps in one probe.
#[egpu::probe(user)]
fn several_maps(ctx: &mut Ctx) {
    let k = ctx.b & 3;
    COUNTS.fetch_add(&k, 1);
    BUCKETS.fetch_add(k as u32, 2);
    let pk = k as u32;
    let pv = ctx.e;
    PAIRS.insert(&pk, &pv);
}

/// Struct keys, built by a struct literal, and an inline literal as a key.
#[egpu::probe(user)]
fn struct_keys(ctx: &mut Ctx) {
    let key = FlowKey { pid: ctx.d & 3, cpu: ctx.h as u32 & 1, kind: ctx.a & 1 };
    FLOWS.fetch_add(&key, 1);
    FLOWS.fetch_add(&FlowKey { pid: 9, cpu: 0, kind: ctx.b & 1 }, ctx.h as u64);
}

/// Struct values: a record built field by field (array field included), inserted, then read
/// back in place by a lookup, as a statement and as a value.
#[egpu::probe(user)]
fn struct_values(ctx: &mut Ctx) -> u64 {
    let k = ctx.d & 3;
    if ctx.h & 1 == 0 {
        let mut rec =
            Record { seq: ctx.a, size: ctx.d, flags: 0, tag: [ctx.h, 1, 2, 3, 4, 5, 6, 7] };
        rec.flags = ctx.d ^ 5;
        rec.tag[3] += ctx.j[1];
        RECORDS.insert(&k, &rec);
    }
    if let Some(r) = RECORDS.get(&k) {
        ctx.out = r.seq ^ r.flags as u64;
    } else {
        ctx.out = 1;
    }
    let other = ctx.e as u32 & 7;
    if let Some(r) = RECORDS.get(&other) {
        r.size as u64 + r.tag[0] as u64 + r.tag[3] as u64
    } else {
        77
    }
}

/// Per-CPU maps: the probe updates the shard of the CPU it runs on.
#[egpu::probe(user)]
fn per_cpu_counters(ctx: &mut Ctx) {
    PER_CPU.fetch_add(ctx.d & 7, ctx.h as u64);
    let k = ctx.e as u32 & 3;
    PER_CPU_HASH.fetch_add(&k, 1);
    if ctx.h & 3 == 0 {
        PER_CPU_HASH.remove(&k);
    }
}

/// Array locals: literals, `[x; N]`, constant indices, writes, and an array as a map value.
#[egpu::probe(user)]
fn array_locals(ctx: &mut Ctx) -> u64 {
    let mut weights = [3u64, 5, 7, 11];
    let mut acc = [0u32; 3];
    weights[2] += ctx.a & 0xff;
    acc[1] = ctx.d >> 3;
    acc[2] = acc[1] ^ ctx.arr[0];
    let key = ctx.h as u64 & 1;
    let pair = [ctx.a, weights[2]];
    PAIR_VALUES.insert(&key, &pair);
    weights[0] * weights[1] + weights[2] * weights[3] + acc[2] as u64
}

/// Atomic adds on fields of struct values, in a hash map (inserting zeros first) and an array.
#[egpu::probe(user)]
fn field_counters(ctx: &mut Ctx) {
    let k = ctx.d & 3;
    STATS.fetch_add_field(&k, |s| &s.count, 1);
    STATS.fetch_add_field(&k, |s| &s.bytes, ctx.a & 0xffff);
    STATS.fetch_add_field(&k, |s| &s.hits[1], ctx.h as u32);
    STAT_ARRAY.fetch_add_field(ctx.h as u32 & 7, |s| &s.bytes, ctx.b);
}

/// Ring-buffer records.
#[egpu::probe(user)]
fn ring_records(ctx: &mut Ctx) {
    let rec = Record {
        seq: ctx.a,
        size: ctx.d,
        flags: ctx.e as u32,
        tag: [ctx.h, ctx.j[0], 0, 0, 0, 0, 0, 9],
    };
    EVENTS.output(&rec);
}

// --- the harness ------------------------------------------------------------------------------

struct Case {
    name: &'static str,
    twin: fn(&mut Ctx) -> u64,
    probe: fn() -> &'static Probe,
}

macro_rules! corpus {
    ($($name:ident: $conv:ident),* $(,)?) => {
        vec![$(Case {
            name: stringify!($name),
            twin: |ctx| $conv($name(ctx)),
            probe: $name::probe,
        }),*]
    };
}

fn unit(_: ()) -> u64 {
    0
}
fn zx<T: Into<u64>>(v: T) -> u64 {
    v.into()
}
fn sx<T: Into<i64>>(v: T) -> u64 {
    v.into() as u64
}
fn us(v: usize) -> u64 {
    v as u64
}

fn maps() -> Vec<RawMap> {
    [
        COUNTS.raw(),
        PAIRS.raw(),
        BUCKETS.raw(),
        SMALL.raw(),
        FLOWS.raw(),
        RECORDS.raw(),
        EVENTS.raw(),
    ]
    .into_iter()
    .cloned()
    .collect()
}

fn random_ctx(rng: &mut Rng) -> Ctx {
    let mut ctx = Ctx::zeroed();
    for byte in bytemuck::bytes_of_mut(&mut ctx) {
        *byte = rng.next_u64() as u8;
    }
    if rng.one_in(4) {
        ctx.b = 0;
    }
    if rng.one_in(4) {
        ctx.c = i64::MIN;
    }
    if rng.one_in(4) {
        ctx.e = -1;
    }
    if rng.one_in(8) {
        ctx.g = 0;
    }
    ctx
}

#[test]
fn twins_and_programs_agree() {
    let cases = corpus![
        arith_u64: zx, wrap_u8: zx, wrap_i8: sx, div_by_zero: zx, signed_div: sx, narrow_div: sx,
        shifts: zx, signed_shifts: sx, casts: zx, unsigned_compare: zx, signed_compare: sx,
        logic: zx, unary: sx, compound: zx, big_constants: zx, if_values: zx, shadowing: zx,
        call_helpers: zx, match_value: zx, match_statement: sx, bounded_while: zx, bounded_loop: zx,
        for_break_continue: zx, loop_hash: zx, loop_const_bound: zx, nested_loops: zx, early_return: zx,
        unit_returns: unit, many_locals: zx, deep_expression: zx, context_array: zx,
        sixteen_bits: sx, inner_consts: zx, usize_math: us, count_by_key: unit, insert_remove: unit,
        array_counters: unit, map_loop: zx, several_maps: unit, struct_keys: unit,
        struct_values: zx, ring_records: unit, per_cpu_counters: unit, array_locals: zx,
        field_counters: unit, warp_helpers: zx,
    ];
    let mut rng = Rng::from_env("probe differential", 0x0b5e_55ed_d1ff_0001);
    let maps = maps();
    let (mut runs, mut mismatches) = (0, Vec::new());
    for case in &cases {
        let probe = (case.probe)();
        let program = probe.program().unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let mut vms: Vec<_> = [EngineChoice::Interpreter, EngineChoice::Auto]
            .into_iter()
            .map(|c| probe.vm_with(c).unwrap_or_else(|e| panic!("{}: {e}", case.name)))
            .collect();
        for _ in 0..200 {
            let ctx = random_ctx(&mut rng);
            let before = snapshot(&maps);
            let mut twin_ctx = ctx;
            let want = (case.twin)(&mut twin_ctx);
            let want_maps = snapshot(&maps);
            for vm in &mut vms {
                restore(&maps, &before);
                let mut vm_ctx = ctx;
                let got = vm.run_ctx(&mut vm_ctx).unwrap_or_else(|e| panic!("{}: {e}", case.name));
                runs += 1;
                if (got, vm_ctx) != (want, twin_ctx) || snapshot(&maps) != want_maps {
                    mismatches.push(format!(
                        "{} on {}: {ctx:?}\n  twin {want:#x} {twin_ctx:?}\n  eBPF {got:#x} {vm_ctx:?}\n{}",
                        case.name,
                        vm.engine(),
                        program.disassemble()
                    ));
                }
            }
            restore(&maps, &want_maps);
        }
    }
    println!(
        "probe differential: {} probes, {runs} cases, {} mismatches",
        cases.len(),
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{}",
        mismatches.iter().take(3).cloned().collect::<Vec<_>>().join("\n")
    );
}
