//! The launch's tag in device contexts (issue 28): the parameter the injector appends to each
//! kernel whose probes read `tag_id` ([`InjectOptions::launch_tags`]), checked by `ptxas`.

use egpu_ebpf::verifier::{Verified, verify};
use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
use egpu_maps::layout::Geometry;
use egpu_ptx::inject::{
    DeviceProbe, InjectError, InjectOptions, Kernels, LaunchParam, LaunchParamError, inject_with,
};
use egpu_ptx::testing::require_ptxas;
use egpu_ptx::translate::DeviceMap;

/// A kernel with a loop of accesses and parameters of three sizes, one with none, one that
/// calls a device function with an access of its own, and one no tag probe instruments.
const MODULE: &str = "\
.version 8.0
.target sm_90
.address_size 64

.func (.param .b32 out) load_one(.param .b64 at)
{
\t.reg .b32 %r<2>;
\t.reg .b64 %rd<2>;
\tld.param.u64 %rd1, [at];
\tld.global.u32 %r1, [%rd1];
\tst.param.b32 [out], %r1;
\tret;
}

.visible .entry saxpy(
\t.param .u32 saxpy_param_0,
\t.param .f32 saxpy_param_1, // a comment, (with parentheses)
\t.param .u64 .ptr .global .align 4 saxpy_param_2,
\t.param .u64 saxpy_param_3
)
.maxntid 256, 1, 1
{
\t.reg .pred %p<3>;
\t.reg .f32 %f<5>;
\t.reg .b32 %r<11>;
\t.reg .b64 %rd<8>;
\tld.param.u32 %r6, [saxpy_param_0];
\tld.param.f32 %f1, [saxpy_param_1];
\tld.param.u64 %rd3, [saxpy_param_2];
\tld.param.u64 %rd4, [saxpy_param_3];
\tmov.u32 %r10, %tid.x;
\tsetp.ge.s32 %p1, %r10, %r6;
\t@%p1 bra $L__BB0_3;
\tcvta.to.global.u64 %rd1, %rd3;
\tcvta.to.global.u64 %rd2, %rd4;
$L__BB0_2:
\tmul.wide.s32 %rd5, %r10, 4;
\tadd.s64 %rd6, %rd1, %rd5;
\tld.global.nc.f32 %f2, [%rd6];
\tadd.s64 %rd7, %rd2, %rd5;
\tld.global.f32 %f3, [%rd7];
\tfma.rn.f32 %f4, %f2, %f1, %f3;
\tst.global.f32 [%rd7], %f4;
\tadd.s32 %r10, %r10, 256;
\tsetp.lt.s32 %p2, %r10, %r6;
\t@%p2 bra $L__BB0_2;
$L__BB0_3:
\tret;
}

.visible .entry empty()
{
\tret;
}

.visible .entry calls(
\t.param .u64 calls_param_0
)
{
\t.reg .b32 %r<2>;
\t.reg .b64 %rd<2>;
\tld.param.u64 %rd1, [calls_param_0];
\tcvta.to.global.u64 %rd1, %rd1;
\t{
\t.param .b64 arg;
\t.param .b32 ret;
\tst.param.b64 [arg], %rd1;
\tcall.uni (ret), load_one, (arg);
\tld.param.b32 %r1, [ret];
\t}
\tst.global.u32 [%rd1], %r1;
\tret;
}

.visible .entry untagged(
\t.param .u64 untagged_param_0
)
{
\t.reg .b64 %rd<2>;
\t.reg .b32 %r<2>;
\tld.param.u64 %rd1, [untagged_param_0];
\tcvta.to.global.u64 %rd1, %rd1;
\tld.global.u32 %r1, [%rd1];
\tret;
}
";

/// Adds each access's size to element `tag_id % 8` of an array (`MemAccessCtx::tag_id` at 88).
const BYTES_BY_TAG: &str = "\
ldxdw %r6, [%r1+88]
and %r6, 7
stxw [%r10-4], %r6
ldxw %r7, [%r1+16]
lddw %r1, map[0]
mov %r2, %r10
add %r2, -4
call 1
jeq %r0, 0, +1
lock add [%r0+0], %r7
mov %r0, 0
exit
";

/// Counts the threads that enter a kernel by `tag_id % 8` (`KernelCtx::tag_id` at 80).
const ENTRIES_BY_TAG: &str = "\
ldxdw %r6, [%r1+80]
and %r6, 7
stxw [%r10-4], %r6
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

/// Counts accesses in element 0: no tag read.
const COUNT: &str = "\
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

fn program(text: &str, attach: AttachPoint) -> Verified {
    let def = MapDef {
        name: "by_tag".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 8,
        capacity: 8,
    };
    let slots = assemble(text).unwrap_or_else(|e| panic!("assembling: {e}"));
    let program = Program::new(slots, vec![def], attach).expect("a program");
    verify(&program).unwrap_or_else(|e| panic!("verifying: {e}"))
}

fn map(addr: u64) -> Vec<DeviceMap> {
    let geometry = Geometry::new(MapKind::Array, 4, 8, 8, 1, 0).expect("a geometry");
    vec![DeviceMap { addr, geometry, live: false, spread: 0, drained: false }]
}

struct Probes {
    bytes: Verified,
    entries: Verified,
    count: Verified,
    maps: [Vec<DeviceMap>; 3],
}

impl Probes {
    fn new() -> Probes {
        Probes {
            bytes: program(BYTES_BY_TAG, AttachPoint::Device(DeviceEvent::GlobalLoad)),
            entries: program(ENTRIES_BY_TAG, AttachPoint::Device(DeviceEvent::KernelEntry)),
            count: program(COUNT, AttachPoint::Device(DeviceEvent::GlobalLoad)),
            maps: [map(0x7f00_0000_0000), map(0x7f00_0010_0000), map(0x7f00_0020_0000)],
        }
    }

    /// The tag probes on every kernel but `untagged`, the counting probe on `untagged`.
    fn list(&self) -> Vec<DeviceProbe<'_>> {
        const TAGGED: &[&str] = &["saxpy", "empty", "calls", "load_one", "big"];
        let tagged = Kernels::Named(TAGGED);
        vec![
            DeviceProbe { program: &self.bytes, kernels: tagged, maps: &self.maps[0] },
            DeviceProbe { program: &self.entries, kernels: tagged, maps: &self.maps[1] },
            DeviceProbe {
                program: &self.count,
                kernels: Kernels::Named(&["untagged"]),
                maps: &self.maps[2],
            },
        ]
    }
}

/// A kernel's text in `ptx`, from its `.entry` to the next function.
fn kernel<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start = ptx.find(&format!(".entry {name}")).unwrap_or_else(|| panic!("{name} in {ptx}"));
    let end = ptx[start + 1..].find(".entry").map_or(ptx.len(), |e| start + 1 + e);
    &ptx[start..end]
}

#[test]
fn tagged_kernels_get_the_parameter_and_read_it_once() {
    let probes = Probes::new();
    let options = InjectOptions { launch_tags: true, ..InjectOptions::default() };
    let injection = inject_with(MODULE, &probes.list(), &options).expect("instrumented");
    let ptx = &injection.ptx;
    let at = |kernel: &str, index, offset| LaunchParam { kernel: kernel.into(), index, offset };
    // saxpy: 4, 4, 8 and 8 bytes; empty: nothing; calls: 8 bytes. Not `untagged`.
    assert_eq!(injection.launch_params, [at("saxpy", 4, 24), at("empty", 0, 0), at("calls", 1, 8)]);
    for (name, own) in [("saxpy", 4), ("empty", 0), ("calls", 1)] {
        let text = kernel(ptx, name);
        let header = &text[..text.find('{').expect("a body")];
        assert_eq!(header.matches(".param").count(), own + 1, "{header}");
        assert!(
            header.trim_end().ends_with(".param .u64 egpu_tag_param\n)")
                || header.contains(".param .u64 egpu_tag_param\n)\n"),
            "{header}"
        );
        // Loaded once, when the kernel starts; the probes read the register.
        assert_eq!(text.matches("ld.param.u64 %egpu_tag, [egpu_tag_param];").count(), 1, "{text}");
        assert!(text.matches("%egpu_tag").count() > 2, "{text}");
        assert!(!text.contains("[egpu_tag_param+"), "{text}");
    }
    // The kernels' own parameters as they were.
    for line in MODULE.lines().filter(|l| l.trim_start().starts_with(".param")) {
        assert!(ptx.contains(line), "{line} in\n{ptx}");
    }
    // The device function reads 0 (no register of a kernel there), and `untagged` is untouched.
    let func = &ptx[ptx.find(".func (.param .b32 out) load_one").expect("the function")..];
    let func = &func[..func.find(".entry").expect("a kernel after it")];
    assert!(!func.contains("egpu_tag"), "{func}");
    assert!(!kernel(ptx, "untagged").contains("egpu_tag"), "{}", kernel(ptx, "untagged"));
    let Some(ptxas) = require_ptxas() else { return };
    let report = ptxas.check(ptx, "sm_90").unwrap_or_else(|e| panic!("{e}\n{ptx}"));
    for name in ["saxpy", "empty", "calls", "untagged"] {
        assert!(report.function(name).is_some(), "{name}: {report:?}");
    }
}

#[test]
fn without_the_option_no_kernel_changes_its_parameters() {
    let probes = Probes::new();
    let injection =
        inject_with(MODULE, &probes.list(), &InjectOptions::default()).expect("instrumented");
    assert_eq!(injection.launch_params, []);
    assert!(!injection.ptx.contains("egpu_tag"), "{}", injection.ptx);
    let Some(ptxas) = require_ptxas() else { return };
    ptxas.check(&injection.ptx, "sm_90").unwrap_or_else(|e| panic!("{e}"));
}

/// A kernel whose parameters fill the space: up to 4,352 bytes in all before PTX ISA 8.1, and
/// a typed error past it; 32,764 from 8.1.
#[test]
fn the_parameter_space_limit() {
    let probes = Probes::new();
    let options = InjectOptions { launch_tags: true, ..InjectOptions::default() };
    let module = |version: &str, bytes: u32| {
        format!(
            ".version {version}\n.target sm_90\n.address_size 64\n\n.visible .entry big(\n\
             \t.param .align 8 .b8 big_param_0[{bytes}]\n)\n{{\n\t.reg .b64 %rd<2>;\n\
             \t.reg .b32 %r<2>;\n\tld.param.u64 %rd1, [big_param_0];\n\
             \tcvta.to.global.u64 %rd1, %rd1;\n\tld.global.u32 %r1, [%rd1];\n\tret;\n}}\n"
        )
    };
    let fits = inject_with(&module("8.0", 4344), &probes.list(), &options).expect("room");
    assert_eq!(fits.launch_params[0].offset, 4344);
    let full = inject_with(&module("8.0", 4345), &probes.list(), &options);
    let want = LaunchParamError::Full { bytes: 4345, limit: 4352 };
    assert_eq!(full, Err(InjectError::LaunchParam { kernel: "big".into(), why: want }));
    let message = full.expect_err("full").to_string();
    assert!(message.contains("`big`") && message.contains("4352-byte limit"), "{message}");
    let large = inject_with(&module("8.1", 32_752), &probes.list(), &options).expect("8.1");
    assert_eq!(large.launch_params[0].offset, 32_752);
    let Some(ptxas) = require_ptxas() else { return };
    for ptx in [&fits.ptx, &large.ptx] {
        ptxas.check(ptx, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Headers mutated a byte at a time (deleted, or made a `(`, `)`, `,`, `[` or `/`): the
/// injector answers each with a module or an error, never a panic, and every module it gives
/// with a launch parameter says where.
#[test]
fn mutated_headers_never_panic() {
    let probes = Probes::new();
    let options = InjectOptions { launch_tags: true, ..InjectOptions::default() };
    let start = MODULE.find(".visible .entry saxpy").expect("saxpy");
    let end = start + MODULE[start..].find('{').expect("its body");
    let (mut modules, mut errors) = (0, 0);
    for at in start..end {
        for with in ["", "(", ")", ",", "[", "/"] {
            let mutated = format!("{}{with}{}", &MODULE[..at], &MODULE[at + 1..]);
            match inject_with(&mutated, &probes.list(), &options) {
                Ok(injection) => {
                    modules += 1;
                    let appended = injection.ptx.matches(".param .u64 egpu_tag_param").count();
                    assert_eq!(appended, injection.launch_params.len(), "{mutated}");
                }
                Err(_) => errors += 1,
            }
        }
    }
    assert!(modules > 0 && errors > 0, "{modules} modules, {errors} errors");
}
