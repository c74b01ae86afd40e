//! eBPF ELF objects made by clang from the C probes of `tests/elf/` (`clang -O2 -g -target bpf
//! -c -I include`, with the generated `include/egpu.h`), read into packs (`egpu::host::elf`): each object's programs loaded, verified, and run
//! on the CPU VM beside a Probe Rust twin over the same contexts, their maps compared. Prints
//! `clang objects: N loaded, N verified, N agree with their Probe Rust twins`. Also: what egpu
//! does not take yet (global data) and malformed objects (truncated, mutated, another machine)
//! are refused with typed errors, never a panic.
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
    let found = std::env::var_os("EGPU_CLANG").map(PathBuf::from).or_else(|| {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|d| d.join("clang")).find(|p| p.is_file())
    });
    if found.is_none() {
        let why = "no clang (EGPU_CLANG, or on PATH; scripts/clang installs Debian's)";
        assert!(std::env::var("EGPU_REQUIRE_CLANG").as_deref() != Ok("1"), "{why}");
        eprintln!("elf: skipped: {why}");
    }
    found
}

/// `tests/elf/NAME.c` built into an object in `out`.
fn build(clang: &Path, name: &str, out: &Path) -> Vec<u8> {
    let source = egpu_test_support::workspace_path(format!("tests/elf/{name}.c"));
    let object = out.join(format!("{name}.o"));
    let include = egpu_test_support::workspace_path("include");
    let status = std::process::Command::new(clang)
        .args(["-O2", "-g", "-target", "bpf", "-c", "-I"])
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(&object)
        .status()
        .expect("clang runs");
    assert!(status.success(), "clang failed on {}", source.display());
    std::fs::read(&object).expect("the object")
}

/// A program of a pack on the CPU VM, with maps of its own.
fn vm_of(pack: &egpu::pack::Pack, name: &str) -> (Vm, Vec<RawMap>) {
    let p = pack.probes().iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name}"));
    let maps: Vec<RawMap> =
        (p.maps.iter()).map(|g| RawMap::create(*g, &Placement::Process).expect("a map")).collect();
    let vm = Vm::with_maps(&p.program, &maps, EngineChoice::Auto).expect("a VM");
    (vm, maps)
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
    use egpu::ebpf::MemAccessCtx;
    use egpu::maps::{Array, HashMap};

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
        loaded += 1;
        verified += pack.probes().len();
        let (mut vm, maps) = vm_of(&pack, "count_loads");
        for c in &ctxs {
            vm.run_ctx(&mut c.clone()).expect("runs");
        }
        let got = sorted(&HashMap::<u64, u64>::from_raw(maps[0].clone()).expect("BYTES"));
        assert_eq!(got, want, "{name}");
        agree += 1;
    }

    // A bpf-to-bpf call.
    let pack = elf::load(&build(&clang, "subprogram", &out)).expect("subprogram");
    (loaded, verified) = (loaded + 1, verified + pack.probes().len());
    let (mut vm, maps) = vm_of(&pack, "pages");
    let mut twin_vm = twins::pages::probe().vm().expect("the twin's VM");
    for c in &ctxs {
        vm.run_ctx(&mut c.clone()).expect("runs");
        twin_vm.run_ctx(&mut c.clone()).expect("runs");
    }
    let got = sorted(&HashMap::<u64, u64>::from_raw(maps[0].clone()).expect("PAGES"));
    assert_eq!(got, sorted(&twins::PAGES), "subprogram");
    agree += 1;

    // Two programs, one map: each program's table has the map, bound to one map here.
    let pack = elf::load(&build(&clang, "two_programs", &out)).expect("two programs");
    assert_eq!(
        pack.probes().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["loads", "stores"]
    );
    (loaded, verified) = (loaded + 1, verified + pack.probes().len());
    let shared = RawMap::create(pack.probes()[0].maps[0], &Placement::Process).expect("a map");
    let mut vms: Vec<Vm> = (pack.probes().iter())
        .map(|p| Vm::with_maps(&p.program, std::slice::from_ref(&shared), EngineChoice::Auto))
        .collect::<Result<_, _>>()
        .expect("VMs");
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
    let pack = elf::load(&build(&clang, "ring", &out)).expect("ring");
    (loaded, verified) = (loaded + 1, verified + pack.probes().len());
    let (mut vm, maps) = vm_of(&pack, "atomics");
    for c in &ctxs[..100] {
        vm.run_ctx(&mut c.clone()).expect("runs");
    }
    let ring = RingBuf::<[u64; 2]>::from_raw(maps[0].clone()).expect("EVENTS");
    let records: Vec<[u64; 2]> = ring.consumer().expect("consumer").drain().collect();
    let want: Vec<[u64; 2]> = ctxs[..100].iter().map(|c| [c.addr, u64::from(c.size)]).collect();
    assert_eq!(records, want, "ring");

    println!(
        "clang objects: {loaded} loaded, {verified} verified, {agree} agree with their Probe Rust twins"
    );

    // Global data: refused, naming the section.
    match elf::load(&build(&clang, "global_data", &out)) {
        Err(ElfError::GlobalData { program, section }) => {
            assert_eq!(program, "scaled");
            assert!(section.starts_with(".rodata"), "{section}");
        }
        other => panic!("global data: {:?}", other.map(|p| p.probes().len())),
    }
    malformed_objects_are_refused(&build(&clang, "subprogram", &out), &mut rng);
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
    for name in ["counts_btf", "counts_legacy", "subprogram", "two_programs", "ring"] {
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
    assert_eq!(valid, 6);
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
