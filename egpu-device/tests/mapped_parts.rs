//! A host map used by kernels on two GPUs of one process (issue 29), through the stand-in driver
//! with two devices (`egpu-preload/tests/fixture/fake_cuda.c`, `FAKE_DEVICES=2`, built as
//! `libcuda.so.1` and put on the loader path of this binary run again): a map mapped into one
//! GPU is refused to the other with a typed error while it is mapped there
//! ([`DriverError::MappedIntoAnotherGpu`]); a map given a part per GPU ([`MappedParts`]) binds
//! each GPU to its own part, mapped into that GPU alone, and merges them exactly into the map
//! while "device writers" (threads, one per GPU, adding to their GPU's part at the address its
//! binding gives: the stand-in maps host memory at its own address) still write. The child
//! prints `mapped map on a second GPU refused: yes` and `mapped parts exact: 2/2 devices`.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use egpu_device::DriverError;
use egpu_device::cuda::Gpu;
use egpu_device::maps::{HostMappedMap, MappedParts, MappedPartsError};
use egpu_maps::Array;

/// Element 0 counts what the writers add; four elements.
static COUNTS: Array<u64> = Array::with_len(4);

const CHILD: &str = "EGPU_MAPPED_PARTS_STAND_IN";

#[test]
fn mapped_maps_through_the_stand_in_driver_with_two_devices() {
    let dir = std::env::temp_dir().join(format!("egpu-mapped-parts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let driver = egpu_test_support::workspace_path("egpu-preload/tests/fixture/fake_cuda.c");
    // cudarc tries `libcuda.so` first, then `libcuda.so.1`: both are the stand-in here.
    for name in ["libcuda.so.1", "libcuda.so"] {
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-pthread", "-o"])
            .arg(dir.join(name))
            .arg(&driver)
            .output()
            .expect("running cc (this test needs a C compiler, as CI has)");
        assert!(out.status.success(), "cc:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "stand_in_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &dir)
        .env("FAKE_DEVICES", "2")
        .output()
        .expect("running the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in ["mapped map on a second GPU refused: yes", "mapped parts exact: 2/2 devices"] {
        // (libtest writes the test's name before its first line.)
        assert!(stdout.lines().any(|l| l.ends_with(line)), "{line:?} in\n{stdout}\n{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What runs under the stand-in driver (only when the test above runs it).
#[test]
fn stand_in_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let gpus = [Gpu::open(0).expect("GPU 0"), Gpu::open(1).expect("GPU 1")];
    let raw = COUNTS.raw();

    // One GPU at a time for a map mapped live: the second is refused while the first maps it.
    let first = HostMappedMap::new(&gpus[0], raw).expect("mapped into GPU 0");
    let again = HostMappedMap::new(&gpus[0], raw);
    let refused = HostMappedMap::new(&gpus[1], raw).expect_err("GPU 1 refused");
    assert_eq!(refused, DriverError::MappedIntoAnotherGpu { gpu: 1, other: 0 });
    assert!(refused.to_string().contains("`MappedParts`"), "{refused}");
    drop(again);
    drop(first);
    let later = HostMappedMap::new(&gpus[1], raw).expect("GPU 1, once GPU 0's mappings are gone");
    drop(later);
    println!("mapped map on a second GPU refused: yes");

    // A part per GPU.
    let same = MappedParts::new(raw, &[&gpus[0], &gpus[0]]).expect_err("one part per GPU");
    assert!(matches!(same, MappedPartsError::SameGpuTwice { gpu: 0 }), "{same}");
    let mut parts = MappedParts::new(raw, &[&gpus[0], &gpus[1]]).expect("a part per GPU");
    let bindings = gpus.each_ref().map(|g| parts.binding(g).expect("a binding"));
    for (g, b) in gpus.iter().zip(&bindings) {
        let part = parts.part(g).expect("its part");
        // The stand-in maps host memory at its own address: the binding is the part's memory.
        assert_eq!(b.addr, part.memory().0.as_ptr() as u64);
        assert!(b.live);
        // Its own, not the map's.
        assert_ne!(b.addr, raw.memory().0.as_ptr() as u64);
    }
    assert_ne!(bindings[0].addr, bindings[1].addr);
    // Element 0's value in a part: an array's first slot (see `egpu_maps::layout`).
    let g = *raw.geometry();
    let value_at = g.slot_offset(0, 0) + g.value_offset as usize;
    // GPU d's writers add 1 (d + 1) × ADDS times at its binding's address, while the host merges.
    const ADDS: u64 = 20_000;
    std::thread::scope(|s| {
        for (d, b) in bindings.iter().enumerate() {
            let at = b.addr as usize + value_at;
            s.spawn(move || {
                // SAFETY: `at` is element 0's value word in GPU d's part, 8-aligned, mapped
                // while `parts` lives (past this scope); words are touched only atomically.
                let word = unsafe { &*(at as *const AtomicU64) };
                for _ in 0..(d as u64 + 1) * ADDS {
                    word.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for _ in 0..20 {
            parts.merge(false).expect("a merge while they write");
        }
    });
    parts.merge(true).expect("the last merge");
    let got = COUNTS.get(0).expect("element 0");
    let own = gpus.each_ref().map(|gpu| {
        Array::<u64>::from_raw(parts.part(gpu).expect("its part").clone())
            .expect("an array")
            .get(0)
            .expect("element 0")
    });
    let exact = (0..2).filter(|&d| own[d] == (d as u64 + 1) * ADDS).count();
    assert_eq!(got, 3 * ADDS, "the map sums the parts: {own:?}");
    // Merged again: nothing changed, nothing added.
    parts.merge(true).expect("a merge with nothing new");
    assert_eq!(COUNTS.get(0).expect("element 0"), 3 * ADDS);
    println!("mapped parts exact: {exact}/2 devices");
    assert_eq!(exact, 2, "{own:?}");
}
