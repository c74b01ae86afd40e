//! The helpers other than the maps', inlined: `bpf_ktime_get_ns` (`%globaltimer`),
//! `bpf_get_prandom_u32` (a hash of the clock and the thread's place in the grid),
//! `bpf_get_smp_processor_id` (the SM id) and `bpf_get_current_pid_tgid` (the host process, a
//! constant). The map helpers go to [`maps`](super::maps); any other is refused.

use egpu_ebpf::Reg;
use egpu_ebpf::helpers::id as helper_id;

use super::TranslateError;
use super::emit::Emitter;

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
            helper_id::MAP_LOOKUP_ELEM
            | helper_id::MAP_UPDATE_ELEM
            | helper_id::MAP_DELETE_ELEM => {
                self.map_helper(pc, id)?;
            }
            helper_id::RINGBUF_OUTPUT => self.ring_output(pc)?,
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

    /// The refusal of helper `id`, called at `pc`.
    pub(super) fn unsupported(&self, pc: usize, id: u32) -> Result<(), TranslateError> {
        let name = egpu_ebpf::helpers::helper(id).map_or("unknown", |h| h.name);
        Err(TranslateError::Helper { pc, id, name })
    }
}
