//! The PTX that egpu generates, kept in `tests/golden/ptx/` so that every change to it is seen in
//! review: the translation ([`kernel_module`]) of three small probes, and the injection of one of
//! them into `tests/ptx/saxpy.ptx`. The comparison is exact; `EGPU_BLESS=1` rewrites the files.
//!
//! **Expect to re-bless.** The translator and the injector (`egpu-ptx`: `translate/`,
//! `inject.rs`) are being worked on: register allocation, stack frames, the combining of atomic
//! adds. A change to the code they generate fails this test by design, and is accepted by
//! reviewing the diff and running `EGPU_BLESS=1 cargo test -p egpu-device --test golden`. A
//! failure here means "look at the generated code", not that the code is wrong; what must hold
//! whatever the code looks like (ptxas accepts it) is checked here too, before the comparison.
//!
//! | file | what |
//! |---|---|
//! | `load_ctx.ptx` | a `device::global_load` probe that reads its context (address, size, thread, warp, store flag) |
//! | `array_count.ptx` | a `device::global_load` probe that counts into an `Array` map bound at a made-up device address |
//! | `user_calls.ptx` | a conformance-style program on `user(8)` memory, with a local call and 32-bit division and remainder |
//! | `saxpy_array_count.ptx` | `tests/ptx/saxpy.ptx` with the counting probe at every global load (combined adds) |
//! | `saxpy_array_count.sites.txt` | the sites of that injection |

use egpu_device::inject::{DeviceProbe, Kernels, inject};
use egpu_device::ptx::PtxModule;
use egpu_device::testing::require_ptxas;
use egpu_device::translate::{DeviceMap, kernel_module, kernel_module_with};
use egpu_ebpf::verifier::{Verified, verify};
use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
use egpu_maps::layout::Geometry;
use egpu_test_support::{Golden, read_workspace_file, workspace_path};

/// The GPU machine's target (an H200).
const ARCH: &str = "sm_90";

fn program(text: &str, maps: Vec<MapDef>, attach: AttachPoint) -> Verified {
    let slots = assemble(text).unwrap_or_else(|e| panic!("assembling {text:?}: {e}"));
    let program = Program::new(slots, maps, attach).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    verify(&program).unwrap_or_else(|e| panic!("verifying {text:?}: {e}"))
}

/// Reads `MemAccessCtx`: the address (8 bytes), the size, `thread.x`, the warp, and the low byte
/// of `is_store`.
const LOAD_CTX: &str = "\
ldxdw %r0, [%r1+0]
ldxw %r2, [%r1+16]
add %r0, %r2
ldxw %r2, [%r1+24]
add %r0, %r2
ldxw %r2, [%r1+48]
add %r0, %r2
ldxb %r2, [%r1+60]
add %r0, %r2
exit
";

/// Adds 1 to element 0 of an array.
const ARRAY_COUNT: &str = "\
stw [%r10-4], 0
lddw %r1, map[0]
mov %r2, %r10
add %r2, -4
call 1
jeq %r0, 0, +2
mov %r1, 1
lock add [%r0+0], %r1
mov %r0, 0
exit
";

/// In the style of the bpf_conformance suite: reads a word of memory and calls a local function
/// that divides and takes a remainder in 32 bits.
const USER_CALLS: &str = "\
ldxw %r1, [%r1+0]
mov %r2, 7
call local quotient
add %r0, 1
exit
quotient:
mov32 %r0, %r1
div32 %r0, %r2
mod32 %r1, %r2
add32 %r0, %r1
exit
";

fn count_map() -> MapDef {
    MapDef { name: "counts".into(), kind: MapKind::Array, key_size: 4, value_size: 8, capacity: 4 }
}

/// A made-up device address: ptxas only checks the code.
fn count_binding() -> DeviceMap {
    DeviceMap {
        addr: 0x7f00_0000_0000,
        geometry: Geometry::new(MapKind::Array, 4, 8, 4, 1, 0).expect("geometry"),
        live: false,
        spread: 0,
        drained: false,
    }
}

/// (file name, generated text, whether it is PTX for ptxas).
fn generated() -> Vec<(&'static str, String, bool)> {
    let load = AttachPoint::Device(DeviceEvent::GlobalLoad);
    let load_ctx = program(LOAD_CTX, vec![], load);
    let count = program(ARRAY_COUNT, vec![count_map()], load);
    let user = program(USER_CALLS, vec![], AttachPoint::User { ctx_size: 8 });
    let module = |r: Result<String, _>, what: &str| {
        r.unwrap_or_else(|e: egpu_device::translate::TranslateError| panic!("{what}: {e}"))
    };
    let saxpy = read_workspace_file("tests/ptx/saxpy.ptx");
    let bindings = [count_binding()];
    let probes = [DeviceProbe { program: &count, kernels: Kernels::All, maps: &bindings }];
    let injected = inject(&saxpy, &probes).unwrap_or_else(|e| panic!("saxpy: {e}"));
    let sites: String = injected
        .sites
        .iter()
        .map(|s| {
            format!(
                "{} line {}: {} in {}, {} bytes, site {}\n",
                "saxpy.ptx",
                s.line,
                AttachPoint::Device(s.event),
                s.function,
                s.size,
                s.index
            )
        })
        .collect();
    vec![
        ("load_ctx.ptx", module(kernel_module(&load_ctx, "load_ctx"), "load_ctx"), true),
        (
            "array_count.ptx",
            module(kernel_module_with(&count, "array_count", &bindings), "array_count"),
            true,
        ),
        ("user_calls.ptx", module(kernel_module(&user, "user_calls"), "user_calls"), true),
        ("saxpy_array_count.ptx", injected.ptx, true),
        ("saxpy_array_count.sites.txt", sites, false),
    ]
}

#[test]
fn generated_ptx_matches_the_golden_files() {
    let ptxas = require_ptxas();
    let mut golden = Golden::new(workspace_path("tests/golden/ptx"));
    for (name, text, is_ptx) in generated() {
        // What must hold whatever the code looks like.
        if is_ptx {
            let module = PtxModule::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(module.entries().count() >= 1, "{name}: no kernel");
            if let Some(ptxas) = &ptxas {
                let report = ptxas.check(&text, ARCH).unwrap_or_else(|e| panic!("{name}: {e}"));
                let regs: Vec<String> = report
                    .functions
                    .iter()
                    .map(|f| {
                        let regs = f.registers.map_or("?".into(), |r| r.to_string());
                        format!("{} {regs} registers", f.name)
                    })
                    .collect();
                println!("{name}: ptxas {ARCH}: {}", regs.join(", "));
            }
        }
        golden.check(name, &text);
    }
    golden.finish();
}
