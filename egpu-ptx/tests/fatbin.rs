//! Fat binaries as CUDA 13.0's nvcc makes them (plain, and compressed with Zstandard and LZ4,
//! cubins too), read back to the PTX nvcc gives for the same file; then mutated, truncated and
//! made to lie about their sizes, which must give errors, never panics.

use std::panic::{AssertUnwindSafe, catch_unwind};

use egpu_ptx::fatbin::{Compression, Kind, entries, ptx_for};
use egpu_ptx::testing::require_nvcc;
use egpu_test_support::workspace_path;

/// The ways the test makes fat binaries: a name, and nvcc's arguments.
const MODES: [(&str, &[&str]); 4] = [
    ("plain", &["-arch=sm_90", "-Xfatbin", "-compress=false"]),
    ("zstd", &["-arch=sm_90"]),
    ("lz4", &["-arch=sm_90", "-Xfatbin", "-compress-mode=speed"]),
    ("all", &["-arch=sm_90", "-Xfatbin", "-compress-all"]),
];

/// Everything a reader of `b` does: its entries, each decompressed, and the PTX for sm_90.
fn read_all(b: &[u8]) -> Result<(), String> {
    let found = entries(b).map_err(|e| e.to_string())?;
    for e in &found {
        e.data().map_err(|e| e.to_string())?;
    }
    ptx_for(b, 90).map(|_| ()).map_err(|e| e.to_string())
}

/// PTX's lines without comments, spaces collapsed, empty ones dropped.
fn normalized(ptx: &str) -> Vec<String> {
    ptx.lines()
        .map(|l| l.split("//").next().unwrap_or_default().split_whitespace().collect::<Vec<_>>())
        .filter(|words| !words.is_empty())
        .map(|words| words.join(" "))
        .collect()
}

/// A small deterministic generator (xorshift64*), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Copies of `b` that are wrong: cut short at every length, with an entry header's size fields
/// set to lies, and with random bytes changed.
fn mutations(b: &[u8], rng: &mut Rng) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> =
        (0..b.len()).map(|n| (format!("cut to {n}"), b[..n].to_vec())).collect();
    // The first entry's header follows the container's (16 bytes): lie in each size field.
    for (field, width) in [(4, 4), (8, 8), (16, 4), (40, 8), (56, 8)] {
        for value in [0u64, 1, 7, 63, 65, u32::MAX as u64, u64::MAX, b.len() as u64 * 2] {
            let mut m = b.to_vec();
            let at = 16 + field;
            if at + width <= m.len() {
                m[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
                out.push((format!("entry field {field} = {value:#x}"), m));
            }
        }
    }
    // The container's own size.
    for value in [0u64, 15, b.len() as u64, u64::MAX] {
        let mut m = b.to_vec();
        m[8..16].copy_from_slice(&value.to_le_bytes());
        out.push((format!("container size = {value:#x}"), m));
    }
    for i in 0..300 {
        let mut m = b.to_vec();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(m.len());
            m[at] ^= 1 << rng.below(8);
        }
        out.push((format!("random flips {i}"), m));
    }
    out
}

#[test]
fn nvccs_fatbins_are_read_and_mutated_ones_refused() {
    let Some(nvcc) = require_nvcc() else { return };
    let kernels = workspace_path("tests/kernels");
    let (mut plain, mut compressed, mut refused, mut panics) = (0, 0, 0, 0);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for name in ["saxpy", "atomics", "async_copy"] {
        let cu = kernels.join(format!("{name}.cu"));
        let expected = nvcc.compile_ptx(&cu, "sm_90").expect("nvcc makes PTX");
        for (mode, args) in MODES {
            let fatbin = nvcc.compile_fatbin(&cu, args).expect("nvcc makes a fat binary");
            let found = entries(&fatbin).unwrap_or_else(|e| panic!("{name} {mode}: {e}"));
            let ptx = found.iter().find(|e| e.kind == Kind::Ptx).expect("a PTX entry");
            let cubin = found.iter().find(|e| e.kind == Kind::Cubin).expect("a cubin");
            assert_eq!((ptx.arch, cubin.arch), (90, 90), "{name} {mode}");
            let want = match mode {
                "plain" => Compression::None,
                "lz4" => Compression::Lz4,
                _ => Compression::Zstd,
            };
            assert_eq!(ptx.compression, want, "{name} {mode}");
            let cubin_compressed = mode == "all";
            assert_eq!(cubin.compression != Compression::None, cubin_compressed, "{name} {mode}");
            assert!(cubin.data().expect("the cubin").starts_with(b"\x7fELF"), "{name} {mode}");
            let text = ptx_for(&fatbin, 90).expect("reads").expect("PTX for sm_90");
            // nvcc stores the PTX without comments and indentation.
            assert_eq!(normalized(&text), normalized(&expected), "{name} {mode}: nvcc's PTX");
            if want == Compression::None {
                plain += 1
            } else {
                compressed += 1
            }
            for (what, m) in mutations(&fatbin, &mut rng) {
                match catch_unwind(AssertUnwindSafe(|| read_all(&m))) {
                    Err(_) => {
                        eprintln!("{name} {mode}: {what}: panicked");
                        panics += 1;
                    }
                    Ok(Err(_)) => refused += 1,
                    Ok(Ok(())) => {}
                }
            }
        }
    }
    // Two architectures' PTX in one fat binary: the device takes the newest it runs.
    let cu = kernels.join("saxpy.cu");
    let both = ["-gencode=arch=compute_80,code=compute_80", "-gencode=arch=compute_90,code=sm_90"];
    let fatbin = nvcc.compile_fatbin(&cu, &both).expect("nvcc makes a fat binary");
    let for_arch = |arch| ptx_for(&fatbin, arch).expect("reads").expect("PTX");
    assert!(for_arch(86).contains(".target sm_80"));
    assert!(for_arch(90).contains(".target sm_80"), "no compute_90 PTX: sm_80's runs");
    assert_eq!(ptx_for(&fatbin, 75), Ok(None));
    compressed += 1;
    println!(
        "fatbins: {plain} plain and {compressed} compressed read, {refused} mutated refused, {panics} panics"
    );
    assert_eq!(panics, 0);
    assert!(plain >= 3 && compressed >= 3 && refused >= 1000);
}
