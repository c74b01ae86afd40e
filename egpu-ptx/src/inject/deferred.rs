//! Deferred misses, the injector's side ([`InjectOptions::defer_misses`], the translation's
//! side in `translate/defer.rs`): a kernel keeps a mask register whose bits are the accesses of
//! the current straight line of code whose counted lookup missed, and a `.local` slot per bit
//! with the access's address. Where the straight line ends (before a label, a branch, a call,
//! a return, the kernel's end), a thread with a bit set branches out of line to the run's
//! stub, which runs each deferred access's probe again from its slot, clears the mask and
//! comes back. A run defers at most 64 accesses; the next ones search where they are.
//!
//! [`InjectOptions::defer_misses`]: super::InjectOptions::defer_misses

use super::access::Observed;
use crate::translate::Defer;

/// Accesses a run defers at most: the mask's bits.
const MOST: usize = 64;

/// A deferred access of the run.
pub(super) struct Pending {
    /// Its probe's index.
    pub(super) probe: usize,
    /// The access.
    pub(super) observed: Observed,
    /// Its index among the kernel's observed accesses.
    pub(super) index: u32,
}

/// The deferred accesses of a module's kernels, one straight line of code at a time.
pub(super) struct Deferrals {
    stem: String,
    /// Whether the current kernel defers.
    on: bool,
    /// The runs with deferred accesses so far, in the module (they number the labels).
    runs: u32,
    /// The current run's deferred accesses, by bit.
    pending: Vec<Pending>,
    /// The kernel's most deferred accesses in one run: its slots.
    slots: usize,
    /// The kernel's stubs.
    stubs: String,
}

impl Deferrals {
    pub(super) fn new(stem: &str) -> Deferrals {
        Deferrals {
            stem: stem.to_owned(),
            on: false,
            runs: 0,
            pending: Vec::new(),
            slots: 0,
            stubs: String::new(),
        }
    }

    /// A new kernel, which defers its misses when `on`.
    pub(super) fn begin(&mut self, on: bool) {
        self.on = on;
        self.pending.clear();
        self.slots = 0;
        self.stubs.clear();
    }

    fn name(&self, what: &str) -> String {
        format!("%{}_d{what}", self.stem)
    }

    /// Where the next access's miss goes, while the run has room.
    pub(super) fn offer(&self) -> Option<Defer> {
        let bit = self.pending.len();
        (self.on && bit < MOST).then(|| Defer {
            slot: format!("{}+{}", self.name("s"), 8 * bit),
            mask: self.name("m"),
            bit: bit as u32,
        })
    }

    /// The access offered the last place deferred its misses there.
    pub(super) fn taken(&mut self, pending: Pending) {
        self.pending.push(pending);
    }

    /// Ends the run: the code to place where it ends (nothing when no access deferred), and its
    /// stub kept for [`Deferrals::stubs`]. `probe` translates a pending access's probe with the
    /// address in the 64-bit register and the size in the 32-bit register it is given.
    pub(super) fn end<E>(
        &mut self,
        mut probe: impl FnMut(&Pending, &str, &str) -> Result<String, E>,
    ) -> Result<String, E> {
        if self.pending.is_empty() {
            return Ok(String::new());
        }
        let run = self.runs;
        self.runs += 1;
        let (mask, test, q) = (self.name("m"), self.name("t"), self.name("q"));
        let label = |what: &str| format!("${}_d{what}{run}", self.stem);
        let (out, back) = (label("F"), label("B"));
        let mut stub = format!("{out}:\n");
        for (bit, p) in self.pending.iter().enumerate() {
            let next = format!("{}_{bit}", label("N"));
            let (addr, size) = (format!("{}a{run}_{bit}", self.name("")), self.name("z"));
            let code = probe(p, &addr, &size)?;
            stub.push_str(&format!(
                "\tand.b64 {test}, {mask}, {};\n\tsetp.eq.u64 {q}, {test}, 0;\n\t@{q} bra \
                 {next};\n\t{{\n\t.reg .b64 {addr};\n\t.reg .b32 {size};\n\tld.local.u64 {addr}, \
                 [{}+{}];\n\tmov.u32 {size}, 0;\n{code}\t}}\n{next}:\n",
                1u64 << bit,
                self.name("s"),
                8 * bit
            ));
        }
        stub.push_str(&format!("\tmov.b64 {mask}, 0;\n\tbra {back};\n"));
        self.stubs.push_str(&stub);
        self.slots = self.slots.max(self.pending.len());
        self.pending.clear();
        // The lanes that ran their stub join the others again before the kernel's own code
        // goes on (a `wgmma` after it must find its warp whole).
        let lanes = self.name("l");
        Ok(format!(
            "\tactivemask.b32 {lanes};\n\tsetp.ne.u64 {q}, {mask}, 0;\n\t@{q} bra {out};\n{back}:\n\
             \tbar.warp.sync {lanes};\n"
        ))
    }

    /// What the kernel declares when it starts (nothing when no access deferred).
    pub(super) fn declarations(&self) -> String {
        if self.slots == 0 {
            return String::new();
        }
        let (mask, test, q, slots) =
            (self.name("m"), self.name("t"), self.name("q"), self.name("s"));
        let lanes = self.name("l");
        format!(
            "\t.reg .b64 {mask}, {test};\n\t.reg .b32 {lanes};\n\t.reg .pred {q};\n\
             \t.local .align 8 .b64 {slots}[{}];\n\tmov.b64 {mask}, 0;\n",
            self.slots
        )
    }

    /// The stubs, out of the way at the kernel's end (nothing when no access deferred).
    pub(super) fn stubs(&self) -> String {
        if self.stubs.is_empty() {
            return String::new();
        }
        let past = format!("${}_dE{}", self.stem, self.runs);
        format!("\tbra.uni {past};\n{}{past}:\n", self.stubs)
    }
}
