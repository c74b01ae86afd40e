//! The driver's entry points ([`driver`]): on x86-64 Linux each is entered through a trampoline
//! ([`trampolined`]) that hands the call on to the driver with the caller's registers and stack
//! untouched; elsewhere (the fallback) each is an entry point as the runtime's are (`runtime!`).
//!
//! Only the driver's own entry points are trampolined: they call no other interposed function,
//! and a call the driver makes to itself is known by its return address.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use egpu::ebpf::Phase;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use super::event::{Event, rare};
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use crate::defaults;

/// Defines an interposed entry point of the driver that makes one event of each call
/// ([`observe`](super::event::observe)), from `$build` and `$after` as `runtime!` takes them: on
/// x86-64 Linux entered through a trampoline ([`trampolined`]), elsewhere as the runtime's. A
/// launch's function (the argument named `f`) is swapped as [`swapped`] says.
macro_rules! driver {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $build:expr, $after:expr
        $(; timed($f:expr, $stream:expr))? $(; tagged($tf:ident; $($targ:ident),+))?) => {
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            $(let $arg = swapped!($arg $arg);)*
            $(
                let mut tag_storage = crate::device::launch_tags::Storage::new();
                // SAFETY: the caller's launch arguments.
                let ($($targ,)+) = unsafe { tag_storage.args($tf, ($($targ,)+)) };
            )?
            // SAFETY: the driver's function, with the caller's arguments (a launch's function
            // swapped, its tag added: `launch_tags`).
            let call = move || unsafe { real($($arg),*) };
            $(let call = crate::kernel_times::around($f, $stream, PER_THREAD, call);)?
            observe($build, call, $after)
        });
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        trampolined!($hook $name $symbol; ($($arg: $ty),*) $build, $after
            $(; timed($f, $stream))? $(; tagged($tf; $($targ),+))?);
    };
}
pub(super) use driver;

/// An argument of a driver's entry point as the driver is to get it: a launch's function (`f`)
/// swapped for the one the launch runs (`crate::device::libraries::launched`: a waiting
/// library's kernel handle becomes its instrumented function in the current context); any
/// other, as it is. The trampolines leave launches to the whole way while any function may be
/// swapped (`defaults::swap_launches`).
macro_rules! swapped {
    (f $value:expr) => {
        crate::device::libraries::launched($value)
    };
    ($other:ident $value:expr) => {
        $value
    };
}
pub(super) use swapped;

/// The probes' part of a call entered through a trampoline ([`trampolined`]), before the
/// driver's function, to which the trampoline then jumps: the event posted to the probes at its
/// entry, in the common case. `false` leaves the whole call to
/// [`observe`](super::event::observe), having done nothing: when the call may synchronise and
/// the maps have device parts to merge after it, when probes are attached to its exit
/// (they wait for the call's result), read the clock or the thread id, or the thread has no
/// poster of its own or no room in its queue.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(always)]
pub(super) fn enter_only<C: Event>(
    build: impl FnOnce(u16, &crate::Local) -> C,
    frame: (usize, usize),
) -> bool {
    // A synchronisation, when the maps have device parts: the whole way, which merges after it.
    if C::SYNC_POINT && crate::device::merging() {
        rare();
        return false;
    }
    let Some(probes) = defaults::active() else { return true };
    let (enter, exit) = (probes.armed(C::EVENT, Phase::Enter), probes.armed(C::EVENT, Phase::Exit));
    let local = crate::local();
    if !enter & !exit || local.inside.get() {
        rare();
        return true;
    }
    // The caller's frame, for its launch site (when sites are captured).
    crate::attribution::keep_frame(local, frame);
    let words = probes.context_words(C::EVENT, Phase::Enter);
    let stamped = words & (1 << (C::TIMESTAMP / 8) | 1 << (C::TID / 8)) != 0;
    let Some(poster) = local.poster() else { return false };
    if exit | stamped {
        return false;
    }
    local.inside.set(true);
    let posted = poster.post_line(Phase::Enter, || {
        let mut ctx = build(words, local);
        crate::attribution::attribute(&mut ctx, local);
        super::devices::fill(&mut ctx, words);
        ctx
    });
    local.inside.set(false);
    posted
}

/// Defines an interposed entry point of the driver entered through a trampoline: the exported
/// function is a few instructions of assembly that jump to the driver's function (the real one,
/// `$hook`'s) with the caller's registers and stack untouched, so that the driver returns
/// straight to the caller. When the probes are paused that is all it does. When they run, it
/// first calls `$name::enter` with the argument registers it saved, which lets a call from the
/// driver's own code through and posts the event to the probes at its entry ([`enter_only`]),
/// and restores them. What it does not handle (the probes not set up yet, a fork, probes at the
/// call's exit, a real function not found yet) it leaves to `$name::full`, the entry point as
/// `runtime!` makes it, to which it jumps instead. The exported function is named `$symbol`.
///
/// What a call costs here is mostly cache lines, cold after the driver's previous call: so the
/// trampoline is one line of code (its way to the driver, up to `jmp rax`, within 64 bytes, and
/// each trampoline 64-byte aligned), reads the hook's line and [`defaults::HOT`]'s, and neither
/// copies the arguments nor calls the driver itself (a C function cannot hand its caller's stack
/// arguments on without copying them).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
macro_rules! trampolined {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $build:expr, $after:expr
        $(; timed($f:expr, $stream:expr))? $(; tagged($tf:ident; $($targ:ident),+))?) => {
        hook!($hook $name $symbol; ($($ty),*));

        /// The Rust half of the entry point's trampoline.
        mod $name {
            use super::*;

            /// The words of the save area that hold the arguments (see [`Saved`]).
            const SAVED: usize = match <[&str]>::len(&[$(stringify!($arg)),*]) {
                n if n > 6 => n + 2,
                _ => 8,
            };

            /// The whole call as one event, where the trampoline does not handle it.
            ///
            /// # Safety
            ///
            /// As the driver's function.
            pub(super) unsafe extern "C" fn full($($arg: $ty),*) -> CuResult {
                let Some(real) = $hook.get() else { return NOT_FOUND };
                $(let $arg = swapped!($arg $arg);)*
                $(
                    let mut tag_storage = crate::device::launch_tags::Storage::new();
                    // SAFETY: the caller's launch arguments.
                    let ($($targ,)+) = unsafe { tag_storage.args($tf, ($($targ,)+)) };
                )?
                // SAFETY: the driver's function, with the caller's arguments (a launch's
                // function swapped, `swapped!`; its tag added, `launch_tags`).
                let call = move || unsafe { real($($arg),*) };
                $(let call = crate::kernel_times::around($f, $stream, PER_THREAD, call);)?
                observe_apart($build, call, $after)
            }

            /// The event posted before the call ([`enter_only`]), from the arguments as the
            /// trampoline saved them and the caller's frame pointer (`rbp`, as the caller left
            /// it: the trampoline does not touch it).
            ///
            /// # Safety
            ///
            /// `saved` is the trampoline's save area, as [`Saved`] describes it.
            #[allow(unused_variables, unused_mut)] // arguments the event does not read, or none
            pub(super) unsafe extern "C" fn enter(saved: &[u64; SAVED], rbp: usize) -> bool {
                let mut saved = Saved { at: saved, next: 0 };
                // A call from the driver's own code: the driver calling itself, part of the
                // call the program made, which is its event.
                if $hook.holds_code_at(saved.return_address()) {
                    rare();
                    return true;
                }
                let frame = (rbp, saved.return_address());
                $(let $arg: $ty = saved.take();)*
                enter_only($build, frame)
            }
        }

        #[doc = concat!("The driver's `", $symbol, "`, interposed.")]
        ///
        /// # Safety
        ///
        /// As the driver's.
        #[unsafe(export_name = $symbol)]
        #[unsafe(naked)]
        #[unsafe(link_section = ".text.egpu_trampolines")]
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
            std::arch::naked_asm!(
                ".cfi_startproc",
                // The real function, and the gate.
                "mov rax, qword ptr [rip + {hook} + {real}]",
                "movzx r11d, byte ptr [rip + {hot} + {gate}]",
                "test rax, rax",
                "jz 2f",
                // Paused: straight to the driver.
                "cmp r11d, {paused}",
                "je 3f",
                "cmp r11d, {ready}",
                "jne 2f",
                // Probes running: the argument registers and the real function saved (which
                // leaves the stack aligned for a call), `enter` called with their address.
                "push rax", ".cfi_adjust_cfa_offset 8",
                "push r9", ".cfi_adjust_cfa_offset 8",
                "push r8", ".cfi_adjust_cfa_offset 8",
                "push rcx", ".cfi_adjust_cfa_offset 8",
                "push rdx", ".cfi_adjust_cfa_offset 8",
                "push rsi", ".cfi_adjust_cfa_offset 8",
                "push rdi", ".cfi_adjust_cfa_offset 8",
                "mov rdi, rsp",
                "mov rsi, rbp",
                "call {enter}",
                "test al, al",
                "pop rdi", ".cfi_adjust_cfa_offset -8",
                "pop rsi", ".cfi_adjust_cfa_offset -8",
                "pop rdx", ".cfi_adjust_cfa_offset -8",
                "pop rcx", ".cfi_adjust_cfa_offset -8",
                "pop r8", ".cfi_adjust_cfa_offset -8",
                "pop r9", ".cfi_adjust_cfa_offset -8",
                "pop rax", ".cfi_adjust_cfa_offset -8",
                "jz 2f",
                "3:",
                "jmp rax",
                // Anything else: the whole way.
                "2:",
                "jmp {full}",
                ".cfi_endproc",
                // The next trampoline on a line of its own: each one's way to the driver, up
                // to its `jmp rax`, fits in its first 64 bytes.
                ".p2align 6",
                hook = sym $hook,
                real = const Hook::<()>::REAL,
                hot = sym defaults::HOT,
                gate = const defaults::Hot::GATE,
                ready = const defaults::READY,
                paused = const defaults::READY | defaults::PAUSED,
                enter = sym $name::enter,
                full = sym $name::full,
            )
        }
    };
}
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(super) use trampolined;

/// The arguments of a call as a trampoline ([`trampolined`]) saved them: the six argument
/// registers in order, the real function, the return address, then the caller's stack
/// arguments, one 8-byte word each (the System V ABI's, for arguments of integer class).
/// (`N` words: as far as the entry point's arguments reach.)
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(super) struct Saved<'a, const N: usize> {
    pub(super) at: &'a [u64; N],
    pub(super) next: usize,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl<const N: usize> Saved<'_, N> {
    /// Where the trampoline returns to: the caller.
    #[inline(always)]
    pub(super) fn return_address(&self) -> usize {
        self.at[7] as usize
    }

    /// The next argument, as a `T` (its type).
    #[inline(always)]
    pub(super) fn take<T: Word>(&mut self) -> T {
        let slot = if self.next < 6 { self.next } else { self.next + 2 };
        self.next += 1;
        T::from_word(self.at[slot])
    }
}

/// An argument of integer class, passed in one word (of which it reads the low bits only: the
/// rest is undefined).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub(super) trait Word {
    fn from_word(word: u64) -> Self;
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
macro_rules! words {
    ($($t:ty),*) => {$(
        impl Word for $t {
            #[inline(always)]
            fn from_word(word: u64) -> $t {
                word as $t
            }
        }
    )*};
}
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
words!(u8, u16, u32, i32, u64, usize);

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl<T> Word for *mut T {
    #[inline(always)]
    fn from_word(word: u64) -> *mut T {
        word as usize as *mut T
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl<T> Word for *const T {
    #[inline(always)]
    fn from_word(word: u64) -> *const T {
        word as usize as *const T
    }
}
