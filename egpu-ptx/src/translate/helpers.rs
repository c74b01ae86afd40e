//! The helpers other than the maps', inlined: `bpf_ktime_get_ns` (`%globaltimer`),
//! `bpf_get_prandom_u32` (a hash of the clock and the thread's place in the grid),
//! `bpf_get_smp_processor_id` (the SM id), `bpf_get_current_pid_tgid` (the host process, a
//! constant) and the warp's (`egpu_warp_lanes`, `egpu_warp_leader`, `egpu_warp_sectors`,
//! `egpu_warp_peers`, `egpu_warp_stride`: over the lanes that run the call together,
//! `activemask`), `egpu_clock` and `egpu_delay_ns` (a spin on `%clock64`, or `%globaltimer`).
//! The map helpers go to [`maps`](super::maps); any other is refused.

use egpu_ebpf::Reg;
use egpu_ebpf::helpers::{MAX_DELAY_NS, id as helper_id};

use super::TranslateError;
use super::emit::Emitter;

/// The cycles a spin on `%clock64` takes, past its deadline, to see it pass and leave: a read
/// of the clock, the compare, the branch back, half a turn on average, and the branch out. The
/// spin aims that much early. Measured on the H200 (`examples/cxl_chase.rs`: a far load of a
/// one-thread pointer chase against a near one): a constant 14.7 to 17.7 ns (29 to 35 cycles at
/// 1.98 GHz) over Δ at Δ = 100 to 800 ns, whatever the lookup before the wait.
const SPIN_EXIT_CYCLES: u64 = 32;

impl Emitter<'_> {
    /// A call of helper `id` at `pc`, inlined; its result in `r0`.
    pub(super) fn helper(&mut self, pc: usize, id: u32) -> Result<(), TranslateError> {
        let r0 = self.reg(Reg::R0);
        let w0 = self.tmp32(0);
        match id {
            helper_id::KTIME_GET_NS => self.line(format!("mov.u64 {r0}, %globaltimer;")),
            helper_id::GET_SMP_PROCESSOR_ID => {
                let smid = self.smid();
                self.line(format!("mov.u32 {w0}, {smid};"));
                self.line(format!("cvt.u64.u32 {r0}, {w0};"));
            }
            helper_id::GET_CURRENT_PID_TGID => {
                let v = u64::from(self.options.pid) << 32;
                self.line(format!("mov.b64 {r0}, {};", v as i64));
            }
            helper_id::GET_PRANDOM_U32 => self.prandom_u32(),
            helper_id::WARP_LANES => {
                // The lanes below this one and the others: a count `ptxas` cannot take for the
                // same in every lane, so a leader's atomic add of it is not aggregated with
                // other groups' leaders' (see `warp_add`).
                let (w1, w2) = (self.tmp32(1), self.tmp32(2));
                self.line(format!("activemask.b32 {w0};"));
                self.line(format!("mov.u32 {w1}, %lanemask_lt;"));
                self.line(format!("and.b32 {w1}, {w1}, {w0};"));
                self.line(format!("popc.b32 {w1}, {w1};"));
                self.line(format!("mov.u32 {w2}, %lanemask_ge;"));
                self.line(format!("and.b32 {w2}, {w2}, {w0};"));
                self.line(format!("popc.b32 {w2}, {w2};"));
                self.line(format!("add.u32 {w0}, {w1}, {w2};"));
                self.line(format!("cvt.u64.u32 {r0}, {w0};"));
            }
            helper_id::WARP_LEADER => {
                let (w1, q0) = (self.tmp32(1), self.pred(0));
                self.line(format!("activemask.b32 {w0};"));
                self.line(format!("mov.u32 {w1}, %lanemask_lt;"));
                self.line(format!("and.b32 {w1}, {w1}, {w0};"));
                self.line(format!("setp.eq.u32 {q0}, {w1}, 0;"));
                self.line(format!("selp.u64 {r0}, 1, 0, {q0};"));
            }
            helper_id::WARP_SECTORS => self.warp_sectors(),
            helper_id::WARP_STRIDE => self.warp_stride(),
            helper_id::DELAY_NS => self.delay_ns(pc),
            helper_id::CLOCK => {
                let (r0, clock) = (self.reg(Reg::R0), self.wait_clock());
                self.line(format!("mov.u64 {r0}, {clock};"));
            }
            helper_id::WARP_PEERS => {
                let (value, w1, q0) = (self.reg(Reg::R1), self.tmp32(1), self.pred(0));
                self.line(format!("activemask.b32 {w0};"));
                self.line(format!("match.any.sync.b64 {w0}, {value}, {w0};"));
                self.line(format!("mov.u32 {w1}, %lanemask_lt;"));
                self.line(format!("and.b32 {w1}, {w1}, {w0};"));
                self.line(format!("setp.eq.u32 {q0}, {w1}, 0;"));
                self.line(format!("popc.b32 {w0}, {w0};"));
                self.line(format!("selp.u32 {w0}, {w0}, 0, {q0};"));
                self.line(format!("cvt.u64.u32 {r0}, {w0};"));
            }
            helper_id::MAP_LOOKUP_ELEM
            | helper_id::MAP_UPDATE_ELEM
            | helper_id::MAP_DELETE_ELEM => {
                self.map_helper(pc, id)?;
            }
            helper_id::RINGBUF_OUTPUT => self.ring_output(pc)?,
            helper_id::RINGBUF_OUTPUT_WARP => self.ring_output_warp(pc)?,
            _ => return self.unsupported(pc, id),
        }
        Ok(())
    }

    /// `bpf_get_prandom_u32`: a hash of the clock and the thread's place in the grid
    /// (splitmix64's finaliser).
    fn prandom_u32(&mut self) {
        let (r0, w0) = (self.reg(Reg::R0), self.tmp32(0));
        let [t0, t1] = [self.tmp64(0), self.tmp64(1)];
        self.line(format!("mov.u64 {t0}, %clock64;"));
        self.line(format!("mov.u32 {w0}, %tid.x;"));
        self.line(format!("cvt.u64.u32 {t1}, {w0};"));
        self.line(format!("mad.lo.u64 {t0}, {t1}, -7046029254386353131, {t0};"));
        self.line(format!("mov.u32 {w0}, %ctaid.x;"));
        self.line(format!("cvt.u64.u32 {t1}, {w0};"));
        self.line(format!("mad.lo.u64 {t0}, {t1}, 7640891576956012809, {t0};"));
        for (shift, mul) in [(30, -4658895280553007687i64), (27, -7723592293110705685)] {
            self.line(format!("shr.u64 {t1}, {t0}, {shift};"));
            self.line(format!("xor.b64 {t0}, {t0}, {t1};"));
            self.line(format!("mul.lo.u64 {t0}, {t0}, {mul};"));
        }
        self.line(format!("shr.u64 {t1}, {t0}, 31;"));
        self.line(format!("xor.b64 {t0}, {t0}, {t1};"));
        self.line(format!("and.b64 {r0}, {t0}, 4294967295;"));
    }

    /// `egpu_warp_sectors(addr, size)`: the distinct 32-byte sectors of the lanes' accesses
    /// running together: the groups of lanes whose first sector is the same
    /// (`match.any.sync`), counted by their lowest lanes (a vote), plus each lane's sectors past
    /// its first (`redux.sync`; none for a naturally aligned access of at most 32 bytes).
    fn warp_sectors(&mut self) {
        let (r0, addr, size) = (self.reg(Reg::R0), self.reg(Reg::R1), self.reg(Reg::R2));
        let [w0, w1, w2, w3] = [self.tmp32(0), self.tmp32(1), self.tmp32(2), self.tmp32(3)];
        let [t0, t1] = [self.tmp64(0), self.tmp64(1)];
        let q0 = self.pred(0);
        self.line(format!("activemask.b32 {w0};"));
        self.line(format!("shr.u64 {t0}, {addr}, 5;"));
        // The lane's sectors past its first, at most 2^20.
        self.line(format!("max.u64 {t1}, {size}, 1;"));
        self.line(format!("add.u64 {t1}, {t1}, {addr};"));
        self.line(format!("sub.u64 {t1}, {t1}, 1;"));
        self.line(format!("shr.u64 {t1}, {t1}, 5;"));
        self.line(format!("sub.u64 {t1}, {t1}, {t0};"));
        self.line(format!("min.u64 {t1}, {t1}, 1048576;"));
        self.line(format!("match.any.sync.b64 {w1}, {t0}, {w0};"));
        self.line(format!("mov.u32 {w2}, %lanemask_lt;"));
        self.line(format!("and.b32 {w2}, {w2}, {w1};"));
        self.line(format!("setp.eq.u32 {q0}, {w2}, 0;"));
        self.line(format!("vote.sync.ballot.b32 {w3}, {q0}, {w0};"));
        self.line(format!("popc.b32 {w3}, {w3};"));
        self.line(format!("cvt.u32.u64 {w2}, {t1};"));
        self.line(format!("redux.sync.add.u32 {w2}, {w2}, {w0};"));
        self.line(format!("add.u32 {w3}, {w3}, {w2};"));
        self.line(format!("cvt.u64.u32 {r0}, {w3};"));
    }

    /// `egpu_warp_stride(addr)`: the lowest lane's address and the next lane's give a stride
    /// (their difference over their distance in lanes, `shfl.sync`); when every lane's address
    /// is the lowest's plus its distance times that stride (a vote), its magnitude, else
    /// `u64::MAX`. A lane alone: 0.
    fn warp_stride(&mut self) {
        let (r0, addr) = (self.reg(Reg::R0), self.reg(Reg::R1));
        let [w0, w1, w2, w3, w4, w5, w6] = [0, 1, 2, 3, 4, 5, 6].map(|i| self.tmp32(i));
        let [t0, t1, t2, t3] = [0, 1, 2, 3].map(|i| self.tmp64(i));
        let [q0, q1] = [self.pred(0), self.pred(1)];
        self.line(format!("activemask.b32 {w0};"));
        // The lowest lane, and the next (the lowest again when it is alone).
        self.line(format!("brev.b32 {w1}, {w0};"));
        self.line(format!("bfind.shiftamt.u32 {w1}, {w1};"));
        self.line(format!("sub.u32 {w2}, {w0}, 1;"));
        self.line(format!("and.b32 {w2}, {w2}, {w0};"));
        self.line(format!("setp.eq.u32 {q1}, {w2}, 0;"));
        self.line(format!("brev.b32 {w2}, {w2};"));
        self.line(format!("bfind.shiftamt.u32 {w2}, {w2};"));
        self.line(format!("@{q1} mov.u32 {w2}, {w1};"));
        // Their addresses.
        self.line(format!("mov.b64 {{{w3}, {w4}}}, {addr};"));
        for (lane, into) in [(&w1, &t0), (&w2, &t1)] {
            self.line(format!("shfl.sync.idx.b32 {w5}, {w3}, {lane}, 31, {w0};"));
            self.line(format!("shfl.sync.idx.b32 {w6}, {w4}, {lane}, 31, {w0};"));
            self.line(format!("mov.b64 {into}, {{{w5}, {w6}}};"));
        }
        // The stride: their difference over their distance, when it divides.
        self.line(format!("sub.s64 {t1}, {t1}, {t0};"));
        self.line(format!("sub.u32 {w5}, {w2}, {w1};"));
        self.line(format!("max.u32 {w5}, {w5}, 1;"));
        self.line(format!("cvt.u64.u32 {t2}, {w5};"));
        self.line(format!("mov.b64 {t3}, {t1};"));
        self.line(format!("setp.ne.u32 {q1}, {w5}, 1;"));
        self.line(format!("@{q1} div.s64 {t3}, {t1}, {t2};"));
        self.line(format!("mul.lo.s64 {t2}, {t3}, {t2};"));
        self.line(format!("setp.eq.s64 {q0}, {t2}, {t1};"));
        // Every lane where the stride puts it.
        self.line(format!("mov.u32 {w6}, %laneid;"));
        self.line(format!("sub.u32 {w6}, {w6}, {w1};"));
        self.line(format!("cvt.u64.u32 {t2}, {w6};"));
        self.line(format!("mad.lo.s64 {t2}, {t2}, {t3}, {t0};"));
        self.line(format!("setp.eq.and.u64 {q0}, {t2}, {addr}, {q0};"));
        self.line(format!("vote.sync.all.pred {q0}, {q0}, {w0};"));
        self.line(format!("abs.s64 {t3}, {t3};"));
        self.line(format!("selp.b64 {r0}, {t3}, -1, {q0};"));
    }

    /// The clock waits count on: `%clock64` where the SM's clock is known
    /// ([`Options::sm_clock_khz`](super::Options::sm_clock_khz)), else `%globaltimer`.
    fn wait_clock(&self) -> &'static str {
        if self.options.sm_clock_khz.is_some_and(|k| k > 0) { "%clock64" } else { "%globaltimer" }
    }

    /// `egpu_delay_ns(ns, since)` at `pc`: the lane spins until `ns` nanoseconds (at most
    /// [`MAX_DELAY_NS`], which the verifier proved of the argument; bounded here again) have
    /// passed since `since` (`egpu_clock`'s; 0: now); the nanoseconds since then. With the SM's
    /// clock known ([`Options::sm_clock_khz`](super::Options::sm_clock_khz)) it reads
    /// `%clock64` (a read takes a cycle or two, and counts every cycle) against the wait in
    /// cycles at the rated clock, converted in fixed point; otherwise `%globaltimer`, whose
    /// steps (32 ns on the H200) round the wait. On `%clock64` the deadline is
    /// [`SPIN_EXIT_CYCLES`] early. Each lane waits on its own; the probe's `bar.warp.sync`
    /// brings the warp's lanes together after it.
    fn delay_ns(&mut self, pc: usize) {
        let (r0, ns, since) = (self.reg(Reg::R0), self.reg(Reg::R1), self.reg(Reg::R2));
        let [t0, t1] = [self.tmp64(0), self.tmp64(1)];
        let q0 = self.pred(0);
        let spin = self.local_label('Z', pc);
        let clock = self.wait_clock();
        self.line(format!("min.u64 {t1}, {ns}, {MAX_DELAY_NS};"));
        self.line(format!("mov.u64 {t0}, {clock};"));
        self.line(format!("setp.ne.u64 {q0}, {since}, 0;"));
        self.line(format!("selp.b64 {t0}, {since}, {t0}, {q0};"));
        let khz = self.options.sm_clock_khz.filter(|&k| k > 0).map(u128::from);
        // Fixed point with 32 fraction bits: a wait (< 2^20 ns) times cycles per ns (< 2^3)
        // fits in 64 bits, as does a time since the start of up to 2^31 cycles (about a second
        // at 2 GHz; longer ones saturate there) times ns per cycle (< 2^33 from 0.5 GHz up).
        if let Some(khz) = khz {
            let cycles_per_ns = ((khz << 32) + 500_000) / 1_000_000;
            self.line(format!("mul.lo.u64 {t1}, {t1}, {cycles_per_ns};"));
            self.line(format!("shr.u64 {t1}, {t1}, 32;"));
            // Aimed early by the cycles the spin takes to see its deadline pass and leave.
            self.line(format!("max.u64 {t1}, {t1}, {SPIN_EXIT_CYCLES};"));
            self.line(format!("sub.u64 {t1}, {t1}, {SPIN_EXIT_CYCLES};"));
        }
        // The spin compares the clock with the deadline: one step less per turn than a
        // subtraction from the start would take, so it ends closer to the deadline.
        self.line(format!("add.u64 {t1}, {t1}, {t0};"));
        self.place(&spin);
        self.line(format!("mov.u64 {r0}, {clock};"));
        self.line(format!("setp.lt.u64 {q0}, {r0}, {t1};"));
        self.line(format!("@{q0} bra {spin};"));
        self.line(format!("sub.u64 {r0}, {r0}, {t0};"));
        if let Some(khz) = khz {
            let ns_per_cycle = ((1_000_000u128 << 32) + khz / 2) / khz;
            self.line(format!("min.u64 {r0}, {r0}, 2147483648;"));
            self.line(format!("mul.lo.u64 {r0}, {r0}, {ns_per_cycle};"));
            self.line(format!("shr.u64 {r0}, {r0}, 32;"));
        }
    }

    /// The refusal of helper `id`, called at `pc`.
    pub(super) fn unsupported(&self, pc: usize, id: u32) -> Result<(), TranslateError> {
        let name = egpu_ebpf::helpers::helper(id).map_or("unknown", |h| h.name);
        Err(TranslateError::Helper { pc, id, name })
    }
}

#[cfg(test)]
mod tests {
    use egpu_ebpf::helpers::{ArgKind, HELPERS};
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
    use egpu_maps::layout::Geometry;

    use super::super::{Context, DeviceMap, Options, TranslateError, translate};

    /// The helper table says where each helper runs (`egpu list` prints it): the translation
    /// inlines every helper the table marks `on_gpu` and refuses the others. Each call is made
    /// from the table's own argument kinds, so a helper added to the table is tried here.
    #[test]
    fn the_gpu_translates_exactly_the_helpers_the_table_runs_on_the_gpu() {
        let def = |name: &str, kind, key_size| MapDef {
            name: name.into(),
            kind,
            key_size,
            value_size: 8,
            capacity: 16,
        };
        let maps = vec![def("table", MapKind::Hash, 8), def("ring", MapKind::RingBuf, 0)];
        let bind = |kind, key_size| DeviceMap {
            addr: 0x7f00_0000_0000,
            geometry: Geometry::new(kind, key_size, 8, 16, 1, 0).expect("a geometry"),
            live: false,
            spread: 0,
            drained: false,
        };
        let mut options = Options::new("t", Context::Kernel { kernel_id: 1 });
        options.maps = vec![bind(MapKind::Hash, 8), bind(MapKind::RingBuf, 0)];
        for h in HELPERS {
            let mut text = "mov %r6, 0\nstxdw [%r10-8], %r6\nstxdw [%r10-16], %r6\n".to_string();
            for (r, arg) in (1..).zip(h.args) {
                text += &match arg.kind {
                    ArgKind::MapRef => format!("lddw %r{r}, map[0]\n"),
                    ArgKind::RingBuf => format!("lddw %r{r}, map[1]\n"),
                    ArgKind::MapKey | ArgKind::Mem => format!("mov %r{r}, %r10\nadd %r{r}, -8\n"),
                    ArgKind::MapValue => format!("mov %r{r}, %r10\nadd %r{r}, -16\n"),
                    ArgKind::MemSize => format!("mov %r{r}, 8\n"),
                    ArgKind::Nanoseconds => format!("mov %r{r}, 100\n"),
                    ArgKind::Scalar => format!("mov %r{r}, 0\n"),
                    ArgKind::Count => format!("mov %r{r}, 3\n"),
                    ArgKind::Func => format!("lddw %r{r}, func callback\n"),
                    ArgKind::StackOrNull => format!("mov %r{r}, %r10\n"),
                };
            }
            text += &format!("call {}\nmov %r0, 0\nexit\n", h.id);
            text += "callback:\nmov %r0, 0\nexit\n";
            let slots = assemble(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", h.name));
            let entry = AttachPoint::Device(DeviceEvent::KernelEntry);
            let program = Program::new(slots, maps.clone(), entry).expect("a program");
            let verified = verify(&program).unwrap_or_else(|e| panic!("{}: {e}", h.name));
            match translate(&verified, &options) {
                Ok(t) => assert!(h.on_gpu && !t.body.is_empty(), "{} is translated", h.name),
                Err(TranslateError::Helper { id, .. }) => {
                    assert!(!h.on_gpu && id == h.id, "{} is refused", h.name)
                }
                Err(e) => panic!("{}: {e}", h.name),
            }
        }
    }
}
