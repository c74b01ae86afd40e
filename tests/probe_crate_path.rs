//! `#[probe(.., crate = PATH)]` and `#[helper(crate = PATH)]`: the generated code names egpu by
//! `PATH`, so that crates beneath the facade (which cannot name `egpu`) write probes in Probe
//! Rust. Here `PATH` is a module built from those crates, as such a crate builds it, and nothing
//! below names `egpu`; its builder and twin count their calls, so the test sees that the
//! generated code went through it.

use egpu_ebpf::{AttachPoint, HostEvent, LaunchCtx, Phase};
use egpu_macros::{helper, probe};
use egpu_maps::HashMap;

/// egpu's surface, re-exported from the crates beneath the facade.
mod egpu_root {
    pub(crate) use egpu_ebpf as ebpf;
    pub(crate) use egpu_probe as probe;

    pub(crate) mod __private {
        use std::sync::atomic::{AtomicUsize, Ordering};

        /// The builder, counting the constants it records.
        pub(crate) mod probe {
            pub(crate) use egpu_probe::build::*;

            pub(crate) static LITERALS: super::AtomicUsize = super::AtomicUsize::new(0);

            pub(crate) fn lit<T: Scalar>(v: T) -> Val<T> {
                LITERALS.fetch_add(1, super::Ordering::Relaxed);
                egpu_probe::build::lit(v)
            }
        }

        /// The twin's arithmetic, counting its additions.
        pub(crate) mod twin {
            pub(crate) use egpu_probe::twin::*;

            pub(crate) static ADDS: super::AtomicUsize = super::AtomicUsize::new(0);

            pub(crate) fn add<T: egpu_probe::build::Int>(a: T, b: T) -> T {
                ADDS.fetch_add(1, super::Ordering::Relaxed);
                egpu_probe::twin::add(a, b)
            }
        }

        /// Counted, so the imports above are used.
        pub(crate) fn counts() -> (usize, usize) {
            (probe::LITERALS.load(Ordering::Relaxed), twin::ADDS.load(Ordering::Relaxed))
        }
    }
}

static LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(16);

#[helper(crate = crate::egpu_root)]
fn threads(grid: u32, block: u32) -> u64 {
    grid as u64 * block as u64
}

#[probe(host::launch, crate = crate::egpu_root)]
fn count_launches(ctx: &LaunchCtx) -> u64 {
    let threads = threads(ctx.grid[0], ctx.block[0]);
    if threads >= 1 << 10 {
        LAUNCHES.fetch_add(&ctx.kernel_id, 1);
    }
    threads + 1
}

#[test]
fn a_probe_names_egpu_by_its_crate_path() {
    let before = egpu_root::__private::counts();
    let probe = count_launches::probe();
    let attach = probe.program().unwrap_or_else(|e| panic!("{e}")).attach_point();
    assert_eq!(attach, AttachPoint::Host(HostEvent::Launch, Phase::Enter));
    let mut vm = probe.vm().unwrap();
    let mut ctx =
        LaunchCtx { kernel_id: 9, grid: [64, 1, 1], block: [32, 1, 1], ..Default::default() };
    assert_eq!(vm.run_ctx(&mut ctx).unwrap(), 64 * 32 + 1);
    assert_eq!(count_launches(&ctx), 64 * 32 + 1, "the twin agrees");
    assert_eq!(LAUNCHES.get(&9), Some(2), "the program's and the twin's");
    let (literals, adds) = egpu_root::__private::counts();
    assert!(literals > before.0, "the builder is the crate path's");
    assert!(adds > before.1, "the twin's arithmetic is the crate path's");
}
