//! eBPF ELF objects made by clang from the C probes of `tests/elf/` (`clang -O2 -g -target bpf
//! -c -I include`, with the generated `include/egpu.h`), read into packs (`egpu::host::elf`): each object's programs loaded, verified, and run
//! on the CPU VM beside a Probe Rust twin over the same contexts, their maps compared. Prints
//! `clang objects: N loaded, N verified, N agree with their Probe Rust twins`. Also: malformed
//! objects (truncated, mutated, another machine) are refused with typed errors, never a panic.
//!
//! clang comes from `scripts/clang` (Debian's package) through `EGPU_CLANG`; without it the test
//! says why it skips, and fails with `EGPU_REQUIRE_CLANG=1` (which `scripts/test` sets).

use std::path::{Path, PathBuf};

use egpu::ebpf::MemAccessCtx;
use egpu::host::elf::{self, ElfError};
use egpu::maps::Placement;
use egpu::maps::{Array, HashMap, RawMap, RingBuf};
use egpu::vm::{EngineChoice, Vm};
use egpu_test_support::Rng;

/// clang, or why not.
fn clang() -> Option<PathBuf> {
    egpu_test_support::require_clang("elf")
}

/// `tests/elf/NAME.c` built into an object in `out`.
fn build(clang: &Path, name: &str, out: &Path) -> Vec<u8> {
    std::fs::read(egpu_test_support::bpf_object(clang, name, out)).expect("the object")
}

/// A program of a pack on the CPU VM, with maps of its own (global data's with their first
/// contents).
fn vm_of(pack: &egpu::pack::Pack, name: &str) -> (Vm, Vec<RawMap>) {
    let p = pack.probes().iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name}"));
    let maps: Vec<RawMap> = (p.maps.iter().enumerate())
        .map(|(i, g)| {
            let map = RawMap::create(*g, &Placement::Process).expect("a map");
            p.fill(i, &map).expect("its first contents");
            map
        })
        .collect();
    let vm = Vm::with_maps(&p.program, &maps, EngineChoice::Auto).expect("a VM");
    (vm, maps)
}

/// A pack's programs on the CPU VM, all bound to one map (each table's only map, shared).
fn sharing_one_map(pack: &egpu::pack::Pack) -> (RawMap, Vec<Vm>) {
    let shared = RawMap::create(pack.probes()[0].maps[0], &Placement::Process).expect("a map");
    let vms = (pack.probes().iter())
        .map(|p| Vm::with_maps(&p.program, std::slice::from_ref(&shared), EngineChoice::Auto))
        .collect::<Result<_, _>>()
        .expect("VMs");
    (shared, vms)
}

/// Program `name` of object `object` (built from `tests/elf/OBJECT.c`) and its Probe Rust
/// `twin`, each run over `ctxs`: the program's maps.
fn side_by_side<C: bytemuck::Pod>(
    clang: &Path,
    out: &Path,
    object: &str,
    name: &str,
    twin: &egpu::probe::Probe,
    ctxs: &[C],
) -> Vec<RawMap> {
    let pack = elf::load(&build(clang, object, out)).unwrap_or_else(|e| panic!("{object}: {e}"));
    let (mut vm, maps) = vm_of(&pack, name);
    let mut twin = twin.vm().expect("the twin's VM");
    for c in ctxs {
        vm.run_ctx(&mut c.clone()).expect("runs");
        twin.run_ctx(&mut c.clone()).expect("runs");
    }
    maps
}

/// Contexts of accesses: kernels 1–3, addresses over 64 pages, sizes 1–16.
fn contexts(rng: &mut Rng, n: usize) -> Vec<MemAccessCtx> {
    (0..n)
        .map(|_| MemAccessCtx {
            addr: 0x7f00_0000_0000 + rng.below(64 << 12) as u64,
            kernel_id: 1 + rng.below(3) as u64,
            size: [1, 2, 4, 8, 16][rng.below(5)],
            ..MemAccessCtx::default()
        })
        .collect()
}

mod twins {
    use bytemuck::{Pod, Zeroable};
    use egpu::ebpf::{KernelCtx, LaunchCtx, MemAccessCtx, MemcpyCtx};
    use egpu::maps::{Array, HashMap, PerCpuArray, RingBuf};

    /// host_launch.c's value.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
    pub(super) struct Launches {
        pub(super) launches: u64,
        pub(super) blocks: u64,
    }

    /// stores_atomics.c's key.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Pod, Zeroable)]
    pub(super) struct Written {
        pub(super) kernel: u64,
        pub(super) atomic: u64,
    }

    pub(super) static LAUNCHES: HashMap<u64, Launches> = HashMap::with_capacity(32);
    pub(super) static COPIED: Array<u64> = Array::with_len(5);
    pub(super) static THREADS: PerCpuArray<u64> = PerCpuArray::with_len(1);
    pub(super) static WRITTEN: HashMap<Written, u64> = HashMap::with_capacity(64);

    /// host_launch.c.
    #[egpu::probe(host::launch)]
    pub(super) fn launched(ctx: &LaunchCtx) {
        let blocks = ctx.grid[0] as u64 * ctx.grid[1] as u64 * ctx.grid[2] as u64;
        LAUNCHES.fetch_add_field(&ctx.kernel_id, |v| &v.launches, 1);
        LAUNCHES.fetch_add_field(&ctx.kernel_id, |v| &v.blocks, blocks);
    }

    /// memcpy_exit.c.
    #[egpu::probe(host::memcpy::exit)]
    pub(super) fn copied(ctx: &MemcpyCtx) {
        if ctx.result == 0 {
            COPIED.fetch_add(ctx.kind, ctx.bytes);
        }
    }

    /// kernel_exit.c.
    #[egpu::probe(device::kernel_exit)]
    pub(super) fn exited(_ctx: &KernelCtx) {
        THREADS.fetch_add(0, 1);
    }

    /// stores_atomics.c.
    #[egpu::probe(device::global_store)]
    pub(super) fn stored(ctx: &MemAccessCtx) {
        WRITTEN.fetch_add(&Written { kernel: ctx.kernel_id, atomic: 0 }, ctx.size as u64);
    }

    #[egpu::probe(device::global_atomic)]
    pub(super) fn atomics(ctx: &MemAccessCtx) {
        WRITTEN.fetch_add(&Written { kernel: ctx.kernel_id, atomic: 1 }, ctx.size as u64);
    }

    pub(super) static SCALED: Array<u64> = Array::with_len(1);
    /// global_data.c's `base`, in `.data` (100 at first: the test puts it there).
    pub(super) static BASE: HashMap<u32, u64> = HashMap::with_capacity(1);
    /// global_data.c's `calls`, in `.bss`.
    pub(super) static CALLS: Array<u64> = Array::with_len(1);

    /// global_data.c, with `SCALE` (`.rodata`) a constant.
    #[egpu::probe(device::global_load)]
    pub(super) fn scaled(ctx: &MemAccessCtx) {
        const SCALE: u64 = 3;
        let zero = 0u32;
        CALLS.fetch_add(0, 1);
        let mut base = 100;
        if let Some(b) = BASE.get(&zero) {
            base = b;
        }
        SCALED.fetch_add(0, ctx.size as u64 * SCALE + base);
        if ctx.size == 16 {
            let next = base + 1;
            BASE.insert(&zero, &next);
        }
    }

    /// ring.c's records.
    pub(super) static EVENTS: RingBuf<[u64; 2]> = RingBuf::with_capacity(128);
    /// legacy_ring.c's records.
    pub(super) static STARTS: RingBuf<[u64; 2]> = RingBuf::with_capacity(64);
    /// loop.c's sum.
    pub(super) static SUM: Array<u64> = Array::with_len(1);

    /// ring.c: each atomic's address and size.
    #[egpu::probe(device::global_atomic)]
    pub(super) fn ring_atomics(ctx: &MemAccessCtx) {
        EVENTS.output(&[ctx.addr, ctx.size as u64]);
    }

    /// legacy_ring.c: each kernel entry's kernel and block.
    #[egpu::probe(device::kernel_entry)]
    pub(super) fn started(ctx: &KernelCtx) {
        STARTS.output(&[ctx.kernel_id, ctx.block[0] as u64]);
    }

    /// loop.c: each load adds its size times 0 + 1 + 2 + 3.
    #[egpu::probe(device::global_load)]
    pub(super) fn looped(ctx: &MemAccessCtx) {
        let mut sum = 0u64;
        for i in 0..4u64 {
            sum += i * ctx.size as u64;
        }
        SUM.fetch_add(0, sum);
    }

    pub(super) static BYTES: HashMap<u64, u64> = HashMap::with_capacity(64);
    pub(super) static PAGES: HashMap<u64, u64> = HashMap::with_capacity(256);
    pub(super) static ACCESSES: Array<u64> = Array::with_len(2);

    /// counts_btf.c and counts_legacy.c: bytes read per kernel.
    #[egpu::probe(device::global_load)]
    pub(super) fn count_loads(ctx: &MemAccessCtx) {
        BYTES.fetch_add(&ctx.kernel_id, ctx.size as u64);
    }

    /// subprogram.c: accesses per 4 KiB page.
    #[egpu::probe(device::global_load)]
    pub(super) fn pages(ctx: &MemAccessCtx) {
        PAGES.fetch_add(&(ctx.addr >> 12), 1);
    }

    /// two_programs.c: loads in slot 0, stores in slot 1.
    #[egpu::probe(device::global_load)]
    pub(super) fn loads(_ctx: &MemAccessCtx) {
        ACCESSES.fetch_add(0, 1);
    }

    #[egpu::probe(device::global_store)]
    pub(super) fn stores(_ctx: &MemAccessCtx) {
        ACCESSES.fetch_add(1, 1);
    }
}

fn sorted(map: &HashMap<u64, u64>) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = map.iter().collect();
    all.sort_unstable();
    all
}

#[test]
fn clang_objects_load_verify_and_agree_with_their_twins() {
    let Some(clang) = clang() else { return };
    let out = std::env::temp_dir().join(format!("egpu-elf-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("a folder");
    let mut rng = Rng::from_env("elf", 0x5DEE_CE66_D1CE_4E5B);
    let ctxs = contexts(&mut rng, 500);
    let (mut loaded, mut verified, mut agree) = (0, 0, 0);

    // Bytes read per kernel: BTF map, then legacy map; one twin.
    let twin = twins::count_loads::probe();
    let mut twin_vm = twin.vm().expect("the twin's VM");
    for c in &ctxs {
        twin_vm.run_ctx(&mut c.clone()).expect("runs");
    }
    let want = sorted(&twins::BYTES);
    for name in ["counts_btf", "counts_legacy"] {
        let pack = elf::load(&build(&clang, name, &out)).unwrap_or_else(|e| panic!("{name}: {e}"));
        (loaded, verified) = (loaded + 1, verified + 1);
        let (mut vm, maps) = vm_of(&pack, "count_loads");
        for c in &ctxs {
            vm.run_ctx(&mut c.clone()).expect("runs");
        }
        let got = sorted(&HashMap::<u64, u64>::from_raw(maps[0].clone()).expect("BYTES"));
        assert_eq!(got, want, "{name}");
        agree += 1;
    }

    // A bpf-to-bpf call.
    let maps = side_by_side(&clang, &out, "subprogram", "pages", twins::pages::probe(), &ctxs);
    (loaded, verified) = (loaded + 1, verified + 1);
    let got = sorted(&HashMap::<u64, u64>::from_raw(maps[0].clone()).expect("PAGES"));
    assert_eq!(got, sorted(&twins::PAGES), "subprogram");
    agree += 1;

    // Two programs, one map: each program's table has the map, bound to one map here.
    let pack = elf::load(&build(&clang, "two_programs", &out)).expect("two programs");
    assert_eq!(
        pack.probes().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["loads", "stores"]
    );
    (loaded, verified) = (loaded + 1, verified + 1);
    let (shared, mut vms) = sharing_one_map(&pack);
    let mut twin_vms =
        [twins::loads::probe().vm().expect("vm"), twins::stores::probe().vm().expect("vm")];
    for (i, c) in ctxs.iter().enumerate() {
        vms[i % 3 / 2].run_ctx(&mut c.clone()).expect("runs");
        twin_vms[i % 3 / 2].run_ctx(&mut c.clone()).expect("runs");
    }
    let got: Vec<u64> = (0..2)
        .map(|i| Array::<u64>::from_raw(shared.clone()).expect("array").get(i).expect("slot"))
        .collect();
    let want: Vec<u64> = (0..2).map(|i| twins::ACCESSES.get(i).expect("slot")).collect();
    assert_eq!(got, want, "two programs");
    agree += 1;

    // A ring of fixed-size records: each atomic's address and size, in order.
    let twin = twins::ring_atomics::probe();
    let maps = side_by_side(&clang, &out, "ring", "atomics", twin, &ctxs[..100]);
    (loaded, verified) = (loaded + 1, verified + 1);
    let records = drained(&maps[0]);
    let want: Vec<[u64; 2]> = ctxs[..100].iter().map(|c| [c.addr, u64::from(c.size)]).collect();
    assert_eq!(records, want, "ring");
    assert_eq!(drained(twins::EVENTS.raw()), want, "ring's twin");
    agree += 1;

    // bpf_loop with a callback of .text: each load adds size × (0 + 1 + 2 + 3).
    let maps = side_by_side(&clang, &out, "loop", "looped", twins::looped::probe(), &ctxs);
    (loaded, verified) = (loaded + 1, verified + 1);
    let sum = Array::<u64>::from_raw(maps[0].clone()).expect("SUM").get(0).expect("slot 0");
    assert_eq!(sum, ctxs.iter().map(|c| 6 * u64::from(c.size)).sum::<u64>(), "loop");
    assert_eq!(twins::SUM.get(0).expect("slot 0"), sum, "loop's twin");
    agree += 1;

    // Global data: `.rodata`, `.data` and `.bss`, each an array of one entry.
    global_data(&clang, &out, &ctxs);
    (loaded, verified, agree) = (loaded + 1, verified + 1, agree + 1);
    // Host probes: launches (a BTF map of structs) and copies' exits (a legacy array).
    let (a, v, g) = host_objects(&clang, &out, &mut rng);
    (loaded, verified, agree) = (loaded + a, verified + v, agree + g);
    // Threads' exits into a per-CPU array; stores and atomics through a shared subprogram; a
    // legacy ring.
    let (a, v, g) = device_objects(&clang, &out, &ctxs, &mut rng);
    (loaded, verified, agree) = (loaded + a, verified + v, agree + g);
    // Each object's programs were verified as it was read: `elf::load` refuses one otherwise.
    println!(
        "clang objects: {loaded} loaded, {verified} verified, {agree} agree with their Probe Rust twins"
    );
    assert!(loaded >= 10 && agree == loaded, "{loaded} loaded, {agree} agree");

    malformed_objects_are_refused(&build(&clang, "subprogram", &out), &mut rng);
    refused_by_name(&clang, &out);
    device_programs_pass_ptxas(&clang, &out);
    let _ = std::fs::remove_dir_all(&out);
}

/// Every device program of the corpus, injected into saxpy with its maps in GPU memory:
/// `ptxas` takes the result.
fn device_programs_pass_ptxas(clang: &Path, out: &Path) {
    use egpu_device::inject::{DeviceProbe, Kernels, inject};
    use egpu_device::translate::DeviceMap;
    let Some(ptxas) = egpu_device::testing::require_ptxas() else { return };
    let saxpy = egpu_test_support::read_workspace_file("tests/ptx/saxpy.ptx");
    let mut valid = 0;
    for name in [
        "counts_btf",
        "counts_legacy",
        "subprogram",
        "two_programs",
        "ring",
        "kernel_exit",
        "stores_atomics",
        "legacy_ring",
        "loop",
        "global_data",
        "global_bytes",
    ] {
        let pack = elf::load(&build(clang, name, out)).expect("loads");
        for p in pack.probes() {
            let maps: Vec<DeviceMap> = (0u64..)
                .zip(&p.maps)
                .map(|(i, g)| DeviceMap {
                    addr: 0x7e00_0000_0000 + i * 0x100_0000,
                    geometry: *g,
                    live: false,
                    spread: 0,
                    drained: false,
                })
                .collect();
            let device = [DeviceProbe { program: &p.program, kernels: Kernels::All, maps: &maps }];
            let ptx =
                inject(&saxpy, &device).unwrap_or_else(|e| panic!("{name}/{}: {e}", p.name)).ptx;
            ptxas.check(&ptx, "sm_90").unwrap_or_else(|e| panic!("{name}/{}: {e}", p.name));
            valid += 1;
        }
    }
    println!("device programs of the corpus ptxas-valid after injection: {valid}");
    assert_eq!(valid, 13);
}

/// global_data.c beside its twin, and its pack through its text and back.
fn global_data(clang: &Path, out: &Path, ctxs: &[MemAccessCtx]) {
    let pack = elf::load(&build(clang, "global_data", out)).expect("global data");
    let p = &pack.probes()[0];
    let names: Vec<&str> = p.program.program().maps().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["OUT", ".bss", ".rodata", ".data"]);
    // `.rodata` holds SCALE = 3, `.data` base = 100; `.bss` starts empty.
    assert_eq!(p.data, [vec![], vec![], vec![3], vec![100]]);
    let pack = egpu::pack::Pack::parse(&pack.to_text()).expect("the pack's text reads back");
    assert_eq!(pack.probes()[0].data, p.data);
    twins::BASE.insert(&0, &100).expect("base");
    let maps = side_by_side(clang, out, "global_data", "scaled", twins::scaled::probe(), ctxs);
    let value =
        |m: &RawMap| Array::<u64>::from_raw(m.clone()).expect("an array").get(0).expect("0");
    let want = [
        twins::SCALED.get(0).expect("0"),
        twins::CALLS.get(0).expect("0"),
        3,
        twins::BASE.get(&0).expect("base"),
    ];
    assert_eq!(maps.iter().map(value).collect::<Vec<_>>(), want, "global data");
    assert_eq!(want[1], ctxs.len() as u64);
    assert!(want[3] > 100, "base grew");
}

/// The records a ring holds, drained.
fn drained(ring: &RawMap) -> Vec<[u64; 2]> {
    let ring = RingBuf::<[u64; 2]>::from_raw(ring.clone()).expect("a ring of two words");
    ring.consumer().expect("consumer").drain().collect()
}

/// Objects clang builds that egpu cannot take (`tests/elf/bad/`): a typed error naming the
/// section, map or symbol.
fn refused_by_name(clang: &Path, out: &Path) {
    std::fs::create_dir_all(out.join("bad")).expect("a folder");
    let load = |name: &str| match elf::load(&build(clang, &format!("bad/{name}"), out)) {
        Ok(pack) => panic!("bad/{name}: read, {} probes", pack.probes().len()),
        Err(e) => e,
    };
    match load("attach") {
        ElfError::Attach { section, attach } => {
            assert_eq!(
                (section.as_str(), attach.as_str()),
                ("egpu/device/global_nothing", "device/global_nothing")
            );
        }
        other => panic!("attach: {other}"),
    }
    for (name, map, says) in
        [("huge_map", "HUGE", "capacity"), ("lru_map", "RECENT", "type 9 is not one egpu has")]
    {
        match load(name) {
            ElfError::Map { map: m, why } => {
                assert_eq!(m, map, "{name}");
                assert!(why.contains(says), "{name}: {why}");
            }
            other => panic!("{name}: {other}"),
        }
    }
    match load("extern_symbol") {
        ElfError::Relocation { section, why, .. } => {
            assert_eq!(section, "egpu/device/global_load");
            assert!(why.contains("elsewhere"), "{why}");
        }
        other => panic!("extern_symbol: {other}"),
    }
    println!("objects refused by name: 4 (an attach point, a map too large, a map kind, a symbol)");
}

/// Truncated and mutated objects, and an object for another machine: a typed error or a pack,
/// never a panic.
fn malformed_objects_are_refused(good: &[u8], rng: &mut Rng) {
    assert!(elf::is_bpf_object(good));
    let mut other = good.to_vec();
    other[18] = 62; // EM_X86_64
    assert!(matches!(elf::load(&other), Err(ElfError::NotBpf(62))));
    assert!(matches!(elf::load(b"not an object"), Err(ElfError::Malformed(_))));
    let (mut refused, mut read) = (0, 0);
    for cut in (0..good.len()).step_by(97) {
        match elf::load(&good[..cut]) {
            Ok(_) => read += 1,
            Err(_) => refused += 1,
        }
    }
    for _ in 0..400 {
        let mut bytes = good.to_vec();
        for _ in 0..1 + rng.below(8) {
            let at = rng.below(bytes.len());
            bytes[at] = rng.below(256) as u8;
        }
        match elf::load(&bytes) {
            Ok(_) => read += 1,
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    println!("malformed objects: {refused} refused, {read} read, 0 panics");
    assert!(refused > 0);
}

/// `include/egpu.h` is what `egpu_ebpf::c_header` generates from the field and helper tables
/// (`EGPU_BLESS=1` writes it), and clang takes it.
#[test]
fn the_c_header_is_the_tables() {
    let path = egpu_test_support::workspace_path("include/egpu.h");
    let generated = egpu::ebpf::c_header();
    if std::env::var("EGPU_BLESS").as_deref() == Ok("1") {
        std::fs::write(&path, &generated).expect("written");
    }
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(kept == generated, "include/egpu.h differs from the tables: run with EGPU_BLESS=1");
    let Some(clang) = clang() else { return };
    let out = std::env::temp_dir().join(format!("egpu-h-{}.o", std::process::id()));
    let status = std::process::Command::new(clang)
        .args(["-O2", "-target", "bpf", "-x", "c", "-c", "-include"])
        .arg(&path)
        .arg("-")
        .arg("-o")
        .arg(&out)
        .stdin(std::process::Stdio::null())
        .status()
        .expect("clang runs");
    assert!(status.success(), "clang refused include/egpu.h");
    let _ = std::fs::remove_file(&out);
}

/// host_launch.c and memcpy_exit.c beside their twins: (objects loaded, verified, agreeing).
fn host_objects(clang: &Path, out: &Path, rng: &mut Rng) -> (usize, usize, usize) {
    use egpu::ebpf::{LaunchCtx, MemcpyCtx};
    let launches: Vec<LaunchCtx> = (0..300)
        .map(|_| LaunchCtx {
            kernel_id: 1 + rng.below(4) as u64,
            grid: [1 + rng.below(64) as u32, 1 + rng.below(4) as u32, 1],
            ..LaunchCtx::default()
        })
        .collect();
    let maps =
        side_by_side(clang, out, "host_launch", "launched", twins::launched::probe(), &launches);
    let map = HashMap::<u64, twins::Launches>::from_raw(maps[0].clone()).expect("LAUNCHES");
    let mut got: Vec<(u64, twins::Launches)> = map.iter().collect();
    let mut want: Vec<(u64, twins::Launches)> = twins::LAUNCHES.iter().collect();
    got.sort_by_key(|e| e.0);
    want.sort_by_key(|e| e.0);
    assert_eq!(got, want, "host_launch");
    assert_eq!(got.iter().map(|e| e.1.launches).sum::<u64>(), 300);

    let copies: Vec<MemcpyCtx> = (0..300)
        .map(|_| MemcpyCtx {
            bytes: rng.below(1 << 20) as u64,
            kind: rng.below(5) as u32,
            result: if rng.below(10) == 0 { 2 } else { 0 },
            ..MemcpyCtx::default()
        })
        .collect();
    let maps = side_by_side(clang, out, "memcpy_exit", "copied", twins::copied::probe(), &copies);
    let array = Array::<u64>::from_raw(maps[0].clone()).expect("COPIED");
    let got: Vec<u64> = (0..5).map(|i| array.get(i).expect("slot")).collect();
    let want: Vec<u64> = (0..5).map(|i| twins::COPIED.get(i).expect("slot")).collect();
    assert_eq!(got, want, "memcpy_exit");
    (2, 2, 2)
}

/// kernel_exit.c, stores_atomics.c and legacy_ring.c: (objects loaded, verified, agreeing).
fn device_objects(
    clang: &Path,
    out: &Path,
    ctxs: &[MemAccessCtx],
    rng: &mut Rng,
) -> (usize, usize, usize) {
    use egpu::ebpf::KernelCtx;
    use egpu::maps::PerCpuArray;
    let threads: Vec<KernelCtx> = (0..200)
        .map(|_| KernelCtx {
            kernel_id: 1 + rng.below(3) as u64,
            block: [rng.below(100) as u32, 0, 0],
            ..KernelCtx::default()
        })
        .collect();
    let maps = side_by_side(clang, out, "kernel_exit", "exited", twins::exited::probe(), &threads);
    let got = PerCpuArray::<u64>::from_raw(maps[0].clone()).expect("THREADS").sum(0).expect("sum");
    assert_eq!((got, twins::THREADS.sum(0).expect("sum")), (200, 200), "kernel_exit");

    let pack = elf::load(&build(clang, "stores_atomics", out)).expect("stores_atomics");
    let (shared, mut vms) = sharing_one_map(&pack);
    let mut twin_vms =
        [twins::stored::probe().vm().expect("vm"), twins::atomics::probe().vm().expect("vm")];
    for (i, c) in ctxs.iter().enumerate() {
        vms[i % 2].run_ctx(&mut c.clone()).expect("runs");
        twin_vms[i % 2].run_ctx(&mut c.clone()).expect("runs");
    }
    let map = HashMap::<twins::Written, u64>::from_raw(shared).expect("WRITTEN");
    let mut got: Vec<(twins::Written, u64)> = map.iter().collect();
    let mut want: Vec<(twins::Written, u64)> = twins::WRITTEN.iter().collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "stores_atomics");

    let twin = twins::started::probe();
    let maps = side_by_side(clang, out, "legacy_ring", "started", twin, &threads[..50]);
    let want: Vec<[u64; 2]> =
        threads[..50].iter().map(|c| [c.kernel_id, u64::from(c.block[0])]).collect();
    assert_eq!(drained(&maps[0]), want, "legacy_ring");
    assert_eq!(drained(twins::STARTS.raw()), want, "legacy_ring's twin");
    (3, 3, 3)
}
