//! Host events of egpu's own CUDA calls: the launches [`Gpu::launch`](crate::cuda::Gpu::launch)
//! makes. Whoever observes host events (egpu's host probes, `egpu::host::global`) installs an
//! [`Observer`], once per process; egpu-device then reports each launch to it, before and after
//! the driver's call, so that Rust programs that launch through egpu fire the same host probes
//! as unmodified programs under the preloaded library.

use std::sync::OnceLock;

use egpu_ebpf::{LaunchCtx, Phase};

/// What observes egpu's own CUDA calls.
pub trait Observer: Send + Sync {
    /// A launch, before (`Enter`) and after (`Exit`, with the result and the time spent) the
    /// driver's call.
    fn launch(&self, phase: Phase, ctx: &mut LaunchCtx);
}

static OBSERVER: OnceLock<&'static dyn Observer> = OnceLock::new();

/// Installs the process's observer; false when one is installed already (it stays).
pub fn install(observer: &'static dyn Observer) -> bool {
    OBSERVER.set(observer).is_ok()
}

/// Runs `call` (a launch of `function`, kernel id `kernel_id`) as one observed event.
pub(crate) fn launch(
    kernel_id: u64,
    function: u64,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    call: impl FnOnce() -> i32,
) -> i32 {
    let Some(observer) = OBSERVER.get() else { return call() };
    let now = || {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is writable; CLOCK_MONOTONIC always exists.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    };
    let mut ctx = LaunchCtx {
        kernel_id,
        function,
        grid: [grid.0, grid.1, grid.2],
        block: [block.0, block.1, block.2],
        timestamp_ns: now(),
        // SAFETY: gettid has no preconditions.
        host_tid: unsafe { libc::gettid() } as u32,
        ..LaunchCtx::default()
    };
    observer.launch(Phase::Enter, &mut ctx);
    let result = call();
    ctx.duration_ns = now().saturating_sub(ctx.timestamp_ns);
    ctx.result = result;
    observer.launch(Phase::Exit, &mut ctx);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Recorder(Mutex<Vec<(Phase, LaunchCtx)>>);

    impl Observer for Recorder {
        fn launch(&self, phase: Phase, ctx: &mut LaunchCtx) {
            self.0.lock().unwrap().push((phase, *ctx));
        }
    }

    #[test]
    fn a_launch_is_reported_before_and_after_the_call() {
        static RECORDER: Recorder = Recorder(Mutex::new(Vec::new()));
        assert!(install(&RECORDER));
        assert!(!install(&RECORDER), "one observer per process");
        let result = launch(7, 0x1000, (4, 2, 1), (128, 1, 1), || 999);
        assert_eq!(result, 999, "the call's result, unchanged");
        let seen = RECORDER.0.lock().unwrap();
        assert_eq!(seen.len(), 2);
        let (enter, exit) = (&seen[0], &seen[1]);
        assert_eq!(enter.0, Phase::Enter);
        assert_eq!((enter.1.kernel_id, enter.1.function, enter.1.grid), (7, 0x1000, [4, 2, 1]));
        assert_eq!(exit.0, Phase::Exit);
        assert_eq!((exit.1.result, exit.1.block), (999, [128, 1, 1]));
        assert!(exit.1.timestamp_ns > 0 && exit.1.host_tid != 0);
    }
}
