//! The stack frame, all below `r10`: buffers first (each aligned), then the stack homes of
//! variables and pointers, then scratch slots. More than 512 bytes is
//! [`CompileError::StackTooLarge`], naming the largest buffers. Also the base register and offset
//! of each place the IR names. A callback of `bpf_loop` has its own frame (for the homes of the
//! map value pointers it binds), but reaches this one, the main function's, through `Gen::frame`.

use egpu_ebpf::{Program, Reg};

use super::regalloc::Home;
use super::{CompileError, Gen};
use crate::ir::Place;

impl Gen<'_> {
    /// Gives each buffer its offset from `r10`, largest alignment first, each aligned.
    pub(super) fn lay_out_buffers(&mut self) -> Result<(), CompileError> {
        let bufs = &self.ir.bufs;
        let mut order: Vec<usize> = (0..bufs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(bufs[i].align));
        let mut offsets = vec![0i32; bufs.len()];
        for i in order {
            let b = &bufs[i];
            if !matches!(b.align, 1 | 2 | 4 | 8) {
                return Err(CompileError::Malformed(format!(
                    "buffer `{}` aligned to {}",
                    b.name, b.align
                )));
            }
            let low = self.frame_low - b.size as i32;
            self.frame_low = low - low.rem_euclid(b.align as i32);
            offsets[i] = self.frame_low;
        }
        self.check_frame()?;
        self.bufs = offsets.into_iter().map(|o| o as i16).collect();
        Ok(())
    }

    /// A new 8-byte slot of the frame.
    pub(super) fn slot(&mut self) -> Result<i16, CompileError> {
        self.frame_low -= 8;
        self.frame_low -= self.frame_low.rem_euclid(8);
        self.check_frame()?;
        Ok(self.frame_low as i16)
    }

    fn check_frame(&self) -> Result<(), CompileError> {
        let need = (-self.frame_low) as u32;
        let limit = Program::STACK_SIZE as u32;
        if need <= limit {
            return Ok(());
        }
        let mut bufs: Vec<_> = self.ir.bufs.iter().collect();
        bufs.sort_by_key(|b| std::cmp::Reverse(b.size));
        let largest =
            bufs.iter().take(3).map(|b| format!("`{}` ({} bytes)", b.name, b.size)).collect();
        Err(CompileError::StackTooLarge { need, limit, largest })
    }

    /// A scratch slot: one given back earlier, or a new one.
    pub(super) fn scratch(&mut self) -> Result<i16, CompileError> {
        match self.scratch_free.pop() {
            Some(s) => Ok(s),
            None => self.slot(),
        }
    }

    /// The base register and offset of `place`; `tmp` holds a spilled pointer if needed.
    pub(super) fn address(&mut self, place: Place, tmp: Reg) -> Result<(Reg, i16), CompileError> {
        let fit = |off: i64| {
            i16::try_from(off)
                .map_err(|_| CompileError::Malformed(format!("offset {off} of {place:?}")))
        };
        match place {
            Place::Ctx(off) => Ok((self.ctx, fit(off.into())?)),
            Place::Buf(b, off) => {
                let base = *self
                    .bufs
                    .get(b.0 as usize)
                    .ok_or(CompileError::Malformed(format!("{b:?}")))?;
                Ok((self.frame, fit(i64::from(base) + i64::from(off))?))
            }
            Place::Value(p, off) => match self.ptr(p)? {
                Home::Reg(r) => Ok((r, fit(off.into())?)),
                home => {
                    self.load_home(tmp, home);
                    Ok((tmp, fit(off.into())?))
                }
            },
        }
    }
}
