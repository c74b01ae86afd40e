//! How many registers an instrumented kernel may take without fewer of its blocks fitting on an
//! SM. A probe's registers (a sum kept through the kernel, a cached lookup) add to the kernel's
//! own; past a threshold an SM holds fewer blocks, and a grid sized to fill the SMs runs in two
//! waves (measured on the H200: nvcc's grid-stride saxpy, 30 registers, took 48 with the
//! `counts` set, 5 blocks of 256 threads per SM instead of 8: 2.03× its time). When the
//! registers the kernel was compiled to are known (a cubin's `EIATTR_REGCOUNT`,
//! [`crate::cubin::register_counts`]) and given ([`InjectOptions::registers`](super::InjectOptions::registers)),
//! the instrumented kernel declares `.maxnreg`: the most registers that keep every block size's
//! blocks per SM, so that `ptxas` keeps what does not fit in local memory instead. Whether that
//! pays depends on where the spills land: on the H200 the saxpy above took 2.69× with its sums
//! spilled in its loop, against 2.01× with fewer blocks, so the preloaded library asks for it
//! only with `EGPU_MAXNREG=1`.

/// An SM's limits, by architecture: registers, resident warps and resident blocks.
fn limits(sm: u32) -> Option<(u32, u32, u32)> {
    match sm {
        70 | 72 | 80 | 90 | 100 | 103 => Some((65536, 64, 32)),
        75 => Some((65536, 32, 16)),
        86 | 87 => Some((65536, 48, 16)),
        89 => Some((65536, 48, 24)),
        120 | 121 => Some((65536, 48, 24)),
        _ => None,
    }
}

/// Blocks of `warps` warps that fit on an SM of these `limits` at `registers` per thread
/// (allotted to a warp in units of 256).
fn blocks(registers: u32, warps: u32, (file, max_warps, max_blocks): (u32, u32, u32)) -> u32 {
    let per_warp = registers.div_ceil(8) * 8 * 32;
    let by_registers = (file / per_warp) / warps;
    by_registers.min(max_warps / warps).min(max_blocks)
}

/// Blocks of `threads` threads that fit on an SM of `sm_NN` at `registers` per thread, as far as
/// registers, resident warps and resident blocks limit them (shared memory aside); `None` for
/// an architecture whose limits egpu does not know.
pub fn blocks_per_sm(registers: u32, threads: u32, sm: u32) -> Option<u32> {
    Some(blocks(registers.max(1), threads.div_ceil(32).max(1), limits(sm)?))
}

/// The most registers per thread (at most 255) a kernel compiled to `registers` may take on
/// `sm_NN` with as many blocks per SM as before at every block size; `None` for an
/// architecture whose limits egpu does not know.
pub(super) fn most_registers(registers: u32, sm: u32) -> Option<u32> {
    let limits = limits(sm)?;
    let registers = registers.clamp(1, 255);
    let same = |r: u32| (1..=32).all(|w| blocks(r, w, limits) == blocks(registers, w, limits));
    let mut most = registers;
    while most < 255 && same(most + 1) {
        most += 1;
    }
    Some(most)
}

/// The `.maxnreg` line to put before the body of the kernel whose header is `header`, compiled
/// to `registers`, for `sm_NN`: none when the kernel limits its registers or its blocks per SM
/// itself (`.maxnreg`, `.minnctapersm`, `.maxnctapersm`) or moves registers between its warps
/// (`moves_registers`: it has `setmaxnreg`), or for an unknown architecture.
pub(super) fn limit(
    header: &str,
    moves_registers: bool,
    registers: u32,
    sm: u32,
) -> Option<String> {
    let own = [".maxnreg", ".minnctapersm", ".maxnctapersm"];
    if moves_registers || own.iter().any(|d| header.contains(d)) {
        return None;
    }
    most_registers(registers, sm).map(|n| format!(".maxnreg {n}\n"))
}

/// Whether the kernel whose header is `header` keeps its blocks per SM on `sm_NN` with `more`
/// registers per thread than `registers` (those it was compiled to, when known): only for a
/// kernel that declares its block size (`.reqntid` or `.maxntid`, as Triton's do); without it
/// egpu cannot tell (nvcc's grid-stride saxpy, 40 registers with the `pages` set, lost a block
/// of 256 threads per SM of six with 8 more).
pub(super) fn room_for(header: &str, registers: Option<u32>, more: u32, sm: u32) -> bool {
    let declared = [".reqntid", ".maxntid"].iter().find_map(|d| {
        let rest = &header[header.find(d)? + d.len()..];
        let mut dims = rest.split(|c: char| !(c.is_ascii_digit() || c == ',' || c.is_whitespace()));
        let dims = dims.next()?.split(',').map(|n| n.trim().parse::<u32>().ok());
        dims.collect::<Option<Vec<u32>>>().map(|d| d.iter().product::<u32>())
    });
    match (declared, registers) {
        (Some(threads), Some(r)) => {
            blocks_per_sm(r + more, threads, sm) == blocks_per_sm(r, threads, sm)
        }
        (Some(_), None) => true,
        (None, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_per_sm_by_registers_warps_and_blocks() {
        // An H200: 30 registers, 8 blocks of 256 threads; 53 registers (56 allotted), 4.
        assert_eq!(blocks_per_sm(30, 256, 90), Some(8));
        assert_eq!(blocks_per_sm(53, 256, 90), Some(4));
        // 64 resident warps: 16 blocks of 128 threads at most; 32 blocks of one warp.
        assert_eq!(blocks_per_sm(16, 128, 90), Some(16));
        assert_eq!(blocks_per_sm(16, 32, 90), Some(32));
        assert_eq!(blocks_per_sm(255, 1024, 90), Some(0));
        assert_eq!(blocks_per_sm(30, 256, 61), None);
    }

    #[test]
    fn the_registers_that_keep_every_block_size_s_blocks() {
        // 30 registers: 8 blocks of 256 threads on an H200's SM; 33 would make it 7.
        assert_eq!(most_registers(30, 90), Some(32));
        assert_eq!(blocks(32, 8, limits(90).unwrap()), 8);
        assert_eq!(blocks(40, 8, limits(90).unwrap()), 6);
        // 10 registers: 64 warps fit by registers up to 32 per thread.
        assert_eq!(most_registers(10, 90), Some(32));
        // 168 registers (a matmul's): one block of 256 threads fits up to 255... unless a
        // smaller block would lose a block: 168 keeps 12 warps, so 1-warp blocks cap it.
        let most = most_registers(168, 90).unwrap();
        assert!((168..=255).contains(&most));
        let l = limits(90).unwrap();
        assert!((1..=32).all(|w| blocks(most, w, l) == blocks(168, w, l)));
        assert!(most == 255 || (1..=32).any(|w| blocks(most + 1, w, l) != blocks(168, w, l)));
        assert_eq!(most_registers(30, 61), None);
        assert_eq!(most_registers(255, 90), Some(255));
    }

    #[test]
    fn room_for_more_registers_is_judged_at_the_declared_block_size() {
        // A Triton matmul: 128 threads, 118 registers (4 blocks by registers) keeps 4 at 126.
        assert!(room_for(".entry k() .reqntid 128", Some(118), 8, 90));
        assert!(room_for(".entry k()\n.maxntid 64, 2, 1\n{", Some(118), 8, 90));
        // 256 threads at 40 registers: 6 blocks, 5 at 48.
        assert!(!room_for(".entry k() .reqntid 256", Some(40), 8, 90));
        assert!(room_for(".entry k() .reqntid 256", None, 8, 90));
        // No declared block size: unknown, so no.
        assert!(!room_for(".entry k()", Some(30), 8, 90));
    }

    #[test]
    fn kernels_that_bound_themselves_get_no_limit() {
        assert_eq!(limit(".entry k()", false, 30, 90).as_deref(), Some(".maxnreg 32\n"));
        assert_eq!(limit(".entry k() .maxnreg 40", false, 30, 90), None);
        assert_eq!(limit(".entry k() .minnctapersm 2", false, 30, 90), None);
        assert_eq!(limit(".entry k()", true, 30, 90), None);
    }
}
