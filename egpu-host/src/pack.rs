//! Probe packs: probes carried out of the program that built them, into egpu's preloaded
//! library (`egpu run --probes PACK -- COMMAND`).
//!
//! A pack holds each probe's name, attach point, map table (with each map's shards) and
//! bytecode, as text:
//!
//! ```text
//! egpu-probes 2
//! probe threads device::kernel_entry
//! map THREADS=hash:8:8:4096 1 0
//! code b7000000000000009500000000000000
//! end
//! ```
//!
//! A `warps N` line after `probe` says the probe runs in one warp in N only, a `blocks N` line in
//! the warps of one block in N (N a power of two; [`Pack::add_sampled`], egpu-ptx's
//! `WarpSampling`); without either, in every warp.
//!
//! `map` lines give the map as a [`MapDef`] in its text form, `NAME=KIND:KEY:VALUE:CAPACITY`, then
//! its CPU shards and SM shards; a `data` line after a `map` line, the map's first contents in
//! hexadecimal (global data: an array of one entry whose value starts with those bytes, see
//! [`PackedProbe::data`]); `code` lines the program's instructions in hexadecimal (several
//! lines are joined, as are several `data` lines). A pack is made from `#[egpu::probe]` functions with [`Pack::add`], written
//! with [`Pack::to_text`], and read back with [`Pack::parse`], which checks everything and
//! verifies each probe's program, once. A crate of probes becomes a shared library that exports
//! its pack with [`export_probes!`](crate::export_probes); [`Pack::load`] reads either form.
//!
//! The first line names the format: `egpu-probes 2` since `map` lines took the one map syntax
//! (version 1 listed the sizes as separate words); a pack of another version is refused with a
//! message that says so, and the library that made it is rebuilt against this egpu.

use std::fmt::Write as _;
use std::path::Path;

use egpu_device::inject::Sample;
use egpu_ebpf::verifier::{Verified, VerifyError, verify};
use egpu_ebpf::{AttachPoint, MapDef, Program};
use egpu_maps::RawMap;
use egpu_maps::layout::Geometry;

use egpu_probe::{BuildError, Probe};

/// The first line of every pack.
const MAGIC: &str = "egpu-probes 2";
/// The symbol a shared library of probes exports (see [`export_probes!`](crate::export_probes)).
pub const SYMBOL: &str = "egpu_probe_pack";

/// One probe of a pack.
#[derive(Clone, Debug)]
pub struct PackedProbe {
    /// The probe's name.
    pub name: String,
    /// Its program (attach point, map table and instructions), verified once when the pack was
    /// made or read: what host probe sets and the device instrumenter take.
    pub program: Verified,
    /// The layout of each map of the program's map table, in its order.
    pub maps: Vec<Geometry>,
    /// The warps it runs in on the GPU (egpu-ptx's `WarpSampling`).
    pub sample: Sample,
    /// Each map's first contents, in its table's order: the first bytes of the value of an
    /// array of one entry (an ELF object's global data, `.rodata` and `.data`), the rest
    /// zeros; empty for a map that starts empty. Whoever creates the maps writes them
    /// ([`PackedProbe::fill`]).
    pub data: Vec<Vec<u8>>,
}

impl PackedProbe {
    /// Writes map `index`'s first contents ([`PackedProbe::data`]) into `map`, a map just made
    /// for it; nothing for a map that starts empty.
    pub fn fill(&self, index: usize, map: &RawMap) -> Result<(), egpu_maps::MapError> {
        let Some(data) = self.data.get(index).filter(|d| !d.is_empty()) else { return Ok(()) };
        let mut value = data.clone();
        value.resize(map.geometry().value_size as usize, 0);
        map.update(&0u32.to_le_bytes(), &value, egpu_maps::UpdateFlags::Any)
    }
}

/// A probe of a pack being read.
struct Reading {
    line: usize,
    name: String,
    attach: AttachPoint,
    defs: Vec<MapDef>,
    maps: Vec<Geometry>,
    data: Vec<Vec<u8>>,
    code: Vec<u8>,
    sample: Sample,
}

/// Probes to carry to another process.
#[derive(Clone, Debug, Default)]
pub struct Pack {
    probes: Vec<PackedProbe>,
}

/// Why a pack could not be read or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// The text is not a pack.
    #[error("line {line}: {reason}")]
    Syntax {
        /// The line (from 1).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A probe's program is not well formed.
    #[error("probe {probe}: {error}")]
    Program {
        /// The probe's name.
        probe: String,
        /// Why.
        error: egpu_ebpf::ProgramError,
    },
    /// A map's layout is impossible.
    #[error("probe {probe}, map {map}: {error}")]
    Map {
        /// The probe's name.
        probe: String,
        /// The map's name.
        map: String,
        /// Why.
        error: egpu_maps::MapError,
    },
    /// A probe could not be built.
    #[error("probe {probe}: {error}")]
    Build {
        /// The probe's name.
        probe: String,
        /// Why.
        error: BuildError,
    },
    /// The verifier refused a probe's program.
    #[error("probe {probe}: {error}")]
    Verify {
        /// The probe's name.
        probe: String,
        /// Why.
        error: VerifyError,
    },
    /// An eBPF ELF object could not be read.
    #[error("{path}: {error}")]
    Object {
        /// The file.
        path: String,
        /// Why.
        error: Box<crate::elf::ElfError>,
    },
    /// The file could not be read, or the library loaded.
    #[error("{path}: {reason}")]
    Load {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

impl Pack {
    /// An empty pack.
    pub fn new() -> Pack {
        Pack::default()
    }

    /// Adds a `#[egpu::probe]` function's probe (`my_probe::probe()`), built and verified.
    pub fn add(&mut self, probe: &Probe) -> Result<&mut Pack, PackError> {
        let build = |error| PackError::Build { probe: probe.name().into(), error };
        let program = probe.verified().map_err(build)?.clone();
        let maps = probe.maps().map_err(build)?.iter().map(|m| *m.geometry()).collect();
        self.push(probe.name(), program, maps)?;
        Ok(self)
    }

    /// Adds a probe as [`add`](Self::add) does, to run in the warps `sample` says on the GPU: a
    /// kernel's other warps run a copy of it without the probe.
    pub fn add_sampled(&mut self, probe: &Probe, sample: Sample) -> Result<&mut Pack, PackError> {
        self.add(probe)?;
        if let Some(p) = self.probes.last_mut() {
            p.sample = sample;
        }
        Ok(self)
    }

    /// Adds a verified program under `name`, with the layout of each map of its table.
    pub fn push(
        &mut self,
        name: &str,
        verified: Verified,
        maps: Vec<Geometry>,
    ) -> Result<&mut Pack, PackError> {
        let program = verified.program();
        let syntax = |reason: String| PackError::Syntax { line: 0, reason };
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(syntax(format!("a probe's name is one word, not {name:?}")));
        }
        if maps.len() != program.maps().len() {
            return Err(syntax(format!(
                "probe {name}: {} maps in its table, {} layouts",
                program.maps().len(),
                maps.len()
            )));
        }
        for (def, g) in program.maps().iter().zip(&maps) {
            if def.name.is_empty() || def.name.contains(|c: char| c.is_whitespace() || c == '=') {
                return Err(syntax(format!("probe {name}: a map's name is one word without `=`")));
            }
            if (def.kind, def.key_size, def.value_size) != (g.kind, g.key_size, g.value_size) {
                return Err(syntax(format!(
                    "probe {name}: map {} differs from its layout",
                    def.name
                )));
            }
        }
        let data = vec![Vec::new(); maps.len()];
        self.probes.push(PackedProbe {
            name: name.into(),
            program: verified,
            maps,
            sample: Sample::EVERY,
            data,
        });
        Ok(self)
    }

    /// Gives map `map` of the probe added last its first contents, `data`: the first bytes of
    /// the value of an array of one entry (global data, see [`PackedProbe::data`]).
    pub fn with_data(&mut self, map: &str, data: Vec<u8>) -> Result<&mut Pack, PackError> {
        let syntax = |reason: String| PackError::Syntax { line: 0, reason };
        let Some(p) = self.probes.last_mut() else {
            return Err(syntax(format!("map {map}'s data: no probe yet")));
        };
        let defs = p.program.program().maps();
        let Some(i) = defs.iter().position(|d| d.name == map) else {
            return Err(syntax(format!("probe {}: no map {map} for its data", p.name)));
        };
        let g = p.maps[i];
        if g.kind != egpu_ebpf::MapKind::Array || g.capacity != 1 {
            return Err(syntax(format!(
                "probe {}: map {map} has data, which only an array of one entry takes",
                p.name
            )));
        }
        if data.len() > g.value_size as usize {
            return Err(syntax(format!(
                "probe {}: map {map}'s data is {} bytes, its value {}",
                p.name,
                data.len(),
                g.value_size
            )));
        }
        p.data[i] = data;
        Ok(self)
    }

    /// Keeps the probes `keep` says yes to.
    pub fn retain(&mut self, keep: impl FnMut(&PackedProbe) -> bool) {
        self.probes.retain(keep);
    }

    /// The probes, in the order they were added.
    pub fn probes(&self) -> &[PackedProbe] {
        &self.probes
    }

    /// The pack as text (see the [module](self) documentation).
    pub fn to_text(&self) -> String {
        let mut text = format!("{MAGIC}\n");
        for p in &self.probes {
            let program = p.program.program();
            let _ = writeln!(text, "probe {} {}", p.name, program.attach_point());
            if p.sample.is_sampled() {
                let unit = match (p.sample.blocks, p.sample.turns) {
                    (true, _) => "blocks",
                    (false, true) => "turns",
                    (false, false) => "warps",
                };
                let _ = writeln!(text, "{unit} {}", 1u64 << p.sample.shift);
            }
            for ((def, g), data) in program.maps().iter().zip(&p.maps).zip(&p.data) {
                // The layout's numbers, as `parse` makes the definition from them.
                let def = MapDef {
                    name: def.name.clone(),
                    kind: g.kind,
                    key_size: g.key_size,
                    value_size: g.value_size,
                    capacity: g.capacity,
                };
                let _ = writeln!(text, "map {def} {} {}", g.cpu_shards, g.sm_shards);
                for chunk in data.chunks(64) {
                    text.push_str("data ");
                    hex(&mut text, chunk);
                }
            }
            for chunk in program.to_bytes().chunks(64) {
                text.push_str("code ");
                hex(&mut text, chunk);
            }
            text.push_str("end\n");
        }
        text
    }

    /// Reads a pack from its text.
    pub fn parse(text: &str) -> Result<Pack, PackError> {
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        let bad = |line: usize, reason: &str| PackError::Syntax { line, reason: reason.into() };
        match lines.next() {
            Some((_, MAGIC)) => {}
            Some((line, l)) if l.starts_with("error ") => {
                return Err(PackError::Syntax { line, reason: l["error ".len()..].into() });
            }
            Some((line, l)) if l.starts_with("egpu-probes ") => {
                return Err(bad(
                    line,
                    &format!("`{l}`: this egpu reads `{MAGIC}` packs; rebuild it"),
                ));
            }
            _ => return Err(bad(1, &format!("not an egpu probe pack (it starts with `{MAGIC}`)"))),
        }
        let mut pack = Pack::new();
        let mut current: Option<Reading> = None;
        for (line, l) in lines {
            let words: Vec<&str> = l.split_whitespace().collect();
            match (words.as_slice(), current.as_mut()) {
                ([], _) => {}
                (["probe", name, attach], None) => {
                    let attach = attach
                        .parse::<AttachPoint>()
                        .map_err(|e| bad(line, &format!("attach point {attach}: {e}")))?;
                    current = Some(Reading {
                        line,
                        name: (*name).into(),
                        attach,
                        defs: vec![],
                        maps: vec![],
                        data: vec![],
                        code: vec![],
                        sample: Sample::EVERY,
                    });
                }
                ([unit @ ("warps" | "blocks" | "turns"), n], Some(r))
                    if r.defs.is_empty() && r.code.is_empty() =>
                {
                    let why = format!("{unit} N: N is a number");
                    let n = n.parse::<u32>().map_err(|_| bad(line, &why))?;
                    let shift = sample_shift(n).map_err(|reason| bad(line, reason))?;
                    r.sample = match *unit {
                        "blocks" => Sample::blocks(shift),
                        "turns" => Sample::turns(shift),
                        _ => Sample::warps(shift),
                    };
                }
                (["map", def, cpu_shards, sm_shards], Some(r)) if r.code.is_empty() => {
                    let def = def.parse::<MapDef>().map_err(|e| bad(line, &e.to_string()))?;
                    let shards = |n: &str| {
                        let why = format!("map {}: shards are numbers, not `{n}`", def.name);
                        n.parse::<u32>().map_err(|_| bad(line, &why))
                    };
                    let (cpu_shards, sm_shards) = (shards(cpu_shards)?, shards(sm_shards)?);
                    let MapDef { kind, key_size, value_size, capacity, .. } = def;
                    let g =
                        Geometry::new(kind, key_size, value_size, capacity, cpu_shards, sm_shards)
                            .map_err(|error| PackError::Map {
                                probe: r.name.clone(),
                                map: def.name.clone(),
                                error,
                            })?;
                    r.defs.push(def);
                    r.maps.push(g);
                    r.data.push(Vec::new());
                }
                (["data", hex], Some(r)) if r.code.is_empty() && !r.data.is_empty() => {
                    let data = r.data.last_mut().expect("a map read");
                    unhex(hex, data)
                        .ok_or_else(|| bad(line, "data is pairs of hexadecimal digits"))?;
                }
                (["code", hex], Some(r)) => {
                    unhex(hex, &mut r.code)
                        .ok_or_else(|| bad(line, "code is pairs of hexadecimal digits"))?;
                }
                (["end"], Some(_)) => {
                    let r = current.take().expect("a probe being read");
                    let names: Vec<String> = r.defs.iter().map(|d| d.name.clone()).collect();
                    let program = Program::from_bytes(&r.code, r.defs, r.attach)
                        .map_err(|error| PackError::Program { probe: r.name.clone(), error })?;
                    // A pack is input from another process: verified here, once.
                    let verified = verify(&program)
                        .map_err(|error| PackError::Verify { probe: r.name.clone(), error })?;
                    let at_line = |e| match e {
                        PackError::Syntax { reason, .. } => PackError::Syntax { line, reason },
                        e => e,
                    };
                    pack.push(&r.name, verified, r.maps).map_err(at_line)?;
                    for (name, data) in names.iter().zip(r.data) {
                        if !data.is_empty() {
                            pack.with_data(name, data).map_err(at_line)?;
                        }
                    }
                    if let Some(p) = pack.probes.last_mut() {
                        p.sample = r.sample;
                    }
                }
                _ => return Err(bad(line, &format!("unexpected `{l}`"))),
            }
        }
        if let Some(r) = current {
            return Err(bad(r.line, &format!("probe {} has no `end`", r.name)));
        }
        Ok(pack)
    }

    /// Reads the pack at `path`: a pack's text, an eBPF ELF object as clang makes them (its
    /// programs, see [`crate::elf`]), or a shared library that exports a pack
    /// ([`export_probes!`](crate::export_probes)), which is loaded into this process.
    pub fn load(path: &Path) -> Result<Pack, PackError> {
        let failed = |reason: String| PackError::Load { path: path.display().to_string(), reason };
        let bytes = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
        if crate::elf::is_object(&bytes) {
            return crate::elf::load(&bytes).map_err(|error| PackError::Object {
                path: path.display().to_string(),
                error: Box::new(error),
            });
        }
        if !bytes.starts_with(b"\x7fELF") {
            let text = String::from_utf8(bytes).map_err(|_| failed("not UTF-8 text".into()))?;
            return Pack::parse(&text);
        }
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| failed("a path with a NUL byte".into()))?;
        // SAFETY: dlopen with a C string; the library's initialisers run, as any library's.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            // SAFETY: dlerror returns null or a C string owned by the loader.
            let why = unsafe { libc::dlerror() };
            let why = if why.is_null() {
                "dlopen failed".into()
            } else {
                // SAFETY: as above.
                unsafe { std::ffi::CStr::from_ptr(why) }.to_string_lossy().into_owned()
            };
            return Err(failed(why));
        }
        let symbol = std::ffi::CString::new(SYMBOL).expect("no NUL");
        // SAFETY: a handle dlopen gave and a C string.
        let f = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
        if f.is_null() {
            return Err(failed(format!("exports no `{SYMBOL}` (see egpu::export_probes!)")));
        }
        // SAFETY: `export_probes!` defines the symbol with this signature. The library stays
        // loaded: the text it returns lives in it.
        let f: extern "C" fn() -> *const std::ffi::c_char = unsafe { std::mem::transmute(f) };
        let text = f();
        if text.is_null() {
            return Err(failed(format!("`{SYMBOL}` returned nothing")));
        }
        // SAFETY: a C string the library keeps for as long as it is loaded.
        let text = unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy();
        Pack::parse(&text)
    }
}

/// Exports `#[egpu::probe]` functions as a probe pack, from a crate built as a shared library
/// (`crate-type = ["cdylib"]`), for `egpu run --probes target/release/libNAME.so -- COMMAND`.
///
/// ```ignore
/// #[egpu::probe(device::kernel_entry)]
/// fn threads(ctx: &KernelCtx) {
///     THREADS.fetch_add(&ctx.kernel_id, 1);
/// }
///
/// egpu::export_probes!(threads);
/// ```
#[macro_export]
macro_rules! export_probes {
    ($($probe:ident),* $(,)?) => {
        /// The probe pack of this library (see `egpu::pack`), made once.
        #[unsafe(no_mangle)]
        pub extern "C" fn egpu_probe_pack() -> *const ::std::ffi::c_char {
            static PACK: ::std::sync::OnceLock<::std::ffi::CString> = ::std::sync::OnceLock::new();
            PACK.get_or_init(|| {
                let mut pack = $crate::pack::Pack::new();
                let made: ::std::result::Result<(), $crate::pack::PackError> = (|| {
                    $( pack.add(&$probe::probe())?; )*
                    Ok(())
                })();
                let text = match made {
                    Ok(()) => pack.to_text(),
                    Err(e) => format!("error {e}\n"),
                };
                ::std::ffi::CString::new(text.replace('\0', " ")).unwrap_or_default()
            })
            .as_ptr()
        }
    };
}

/// Appends `bytes` in hexadecimal, and a new line.
fn hex(text: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(text, "{b:02x}");
    }
    text.push('\n');
}

/// Appends the bytes `hex` spells to `out`; `None` when it is not pairs of hexadecimal digits.
fn unhex(hex: &str, out: &mut Vec<u8>) -> Option<()> {
    if !hex.len().is_multiple_of(2) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    for i in (0..hex.len()).step_by(2) {
        out.push(u8::from_str_radix(&hex[i..i + 2], 16).ok()?);
    }
    Some(())
}

/// log2 of `n`, one warp or block in which a sampled probe runs: a power of two up to 2³¹.
fn sample_shift(n: u32) -> Result<u32, &'static str> {
    match n.is_power_of_two() {
        true => Ok(n.trailing_zeros()),
        false => Err("a probe runs in one warp in N, N a power of two"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egpu_ebpf::{HostEvent, MapKind, Phase, assemble};

    fn counting() -> (Verified, Vec<Geometry>) {
        let text = "ldxdw %r6, [%r1+0]\nstxdw [%r10-8], %r6\nlddw %r1, map[0]\nmov %r2, %r10\n\
                    add %r2, -8\ncall 1\nmov %r0, 0\nexit";
        let def = MapDef {
            name: "COUNTS".into(),
            kind: MapKind::Hash,
            key_size: 8,
            value_size: 8,
            capacity: 64,
        };
        let attach = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
        let program =
            Program::new(assemble(text).expect("assembles"), vec![def], attach).expect("a program");
        let g = Geometry::new(MapKind::Hash, 8, 8, 64, 1, 0).expect("geometry");
        (verify(&program).expect("verifies"), vec![g])
    }

    #[test]
    fn a_pack_reads_back_as_written() {
        let (program, maps) = counting();
        let mut pack = Pack::new();
        pack.push("counts", program.clone(), maps.clone()).expect("push");
        let text = pack.to_text();
        assert!(text.starts_with("egpu-probes 2\nprobe counts host::launch::enter\n"), "{text}");
        assert!(text.contains("\nmap COUNTS=hash:8:8:64 1 0\n"), "{text}");
        let back = Pack::parse(&text).expect("parses");
        assert_eq!(back.probes().len(), 1);
        let p = &back.probes()[0];
        assert_eq!((p.name.as_str(), p.maps.as_slice()), ("counts", maps.as_slice()));
        let (p, program) = (p.program.program(), program.program());
        assert_eq!(p.to_bytes(), program.to_bytes());
        assert_eq!(p.maps(), program.maps());
        assert_eq!(p.attach_point(), program.attach_point());
        assert_eq!(back.to_text(), text);
    }

    /// A probe that adds the launch's first context word to global data: value 0 of an array
    /// of one entry, at offset 8, with no lookup.
    fn global_data() -> (Verified, Vec<Geometry>) {
        let text =
            "ldxdw %r2, [%r1+0]\nlddw %r1, map[0]+8\nlock add [%r1+0], %r2\nmov %r0, 0\nexit";
        let def: MapDef = ".data=array:4:24:1".parse().expect("a definition");
        let attach = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
        let program =
            Program::new(assemble(text).expect("assembles"), vec![def], attach).expect("a program");
        let g = Geometry::new(MapKind::Array, 4, 24, 1, 1, 0).expect("geometry");
        (verify(&program).expect("verifies"), vec![g])
    }

    #[test]
    fn global_data_is_carried_and_filled() {
        let (program, maps) = global_data();
        let mut pack = Pack::new();
        pack.push("globals", program, maps).expect("push");
        pack.with_data(".data", vec![1, 2, 3, 4, 5, 6, 7, 8, 9]).expect("data");
        let text = pack.to_text();
        assert!(text.contains("\nmap .data=array:4:24:1 1 0\ndata 010203040506070809\n"), "{text}");
        let back = Pack::parse(&text).expect("parses");
        let p = &back.probes()[0];
        assert_eq!(p.data, [vec![1, 2, 3, 4, 5, 6, 7, 8, 9]]);
        assert_eq!(back.to_text(), text);
        let map = RawMap::create(p.maps[0], &egpu_maps::Placement::Process).expect("a map");
        p.fill(0, &map).expect("filled");
        let mut vm = egpu_vm::Vm::with_maps(
            &p.program,
            std::slice::from_ref(&map),
            egpu_vm::EngineChoice::Auto,
        )
        .expect("a VM");
        let mut ctx = egpu_ebpf::LaunchCtx { kernel_id: 0x10, ..Default::default() };
        vm.run_ctx(&mut ctx).expect("runs");
        let value = map.lookup(&0u32.to_le_bytes()).expect("a lookup").expect("value 0");
        // SAFETY: value 0 of the map, 24 bytes, which the map keeps while `map` lives.
        let bytes = unsafe { std::slice::from_raw_parts(value.as_ptr(), 24) };
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        assert_eq!((word(0), word(8), word(16)), (0x0807_0605_0403_0201, 0x10 + 9, 0));

        let cases = [
            (
                "map .data=array:4:24:1 1 0\n",
                "map .data=array:4:24:1 1 0\ndata zz\n",
                "line 4: data",
            ),
            ("data 0102", "data 01020304050607080900000000000000000000000000000000", "24"),
            ("map .data=array:4:24:1", "map .data=array:4:24:2", "an array of one entry"),
        ];
        for (from, to, want) in cases {
            let bad = text.replacen(from, to, 1);
            let err = match Pack::parse(&bad) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{bad} read"),
            };
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
    }

    #[test]
    fn bad_packs_are_refused_with_the_line() {
        let (program, maps) = counting();
        let mut pack = Pack::new();
        pack.push("counts", program, maps).expect("push");
        let good = pack.to_text();
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "not an egpu probe pack"),
            ("egpu-probes 1\nprobe p host::launch::enter\n".into(), "reads `egpu-probes 2`"),
            ("egpu-probes\n".into(), "not an egpu probe pack"),
            (good.replace("host::launch::enter", "host::nothing"), "attach point"),
            (good.replace("map COUNTS=hash", "map COUNTS=tree"), "line 3: no map kind `tree`"),
            (good.replace(":64 1 0", ":x 1 0"), "line 3: the capacity `x` is not a number"),
            (good.replace("COUNTS=hash:8:8:64", "COUNTS=hash:8:8"), "expected KIND:KEY:VALUE:CAPA"),
            (good.replace("COUNTS=hash", "COUNTS hash"), "unexpected `map COUNTS hash"),
            (good.replace("COUNTS=", "="), "line 3: a map's name is one word, not ``"),
            (good.replace(":64 1 0", ":64 y 0"), "line 3: map COUNTS: shards are numbers, not `y`"),
            (good.replace(":64 1 0", ":64 1 -1"), "map COUNTS: shards are numbers, not `-1`"),
            (good.replace(":64 1 0", ":64 1"), "unexpected `map COUNTS=hash:8:8:64 1`"),
            (good.replace(":64 1 0", ":64 1 0 0"), "unexpected `map"),
            (good.replace(":64 1 0", ":0 1 0"), "map COUNTS"),
            (good.replace("code ", "code 0"), "pairs of hexadecimal"),
            (good.replace("code ", "code zz"), "pairs of hexadecimal"),
            (good.replace("end\n", ""), "has no `end`"),
            (good.replace("end\n", "end\nend\n"), "unexpected `end`"),
            (good.replace("map COUNTS=hash:8:8:64 1 0\n", ""), "map"),
            (good.replace("code 79", "code ff"), "probe counts"),
            ("error the probe did not build\n".into(), "the probe did not build"),
            (good.replace("enter\n", "enter\nwarps 3\n"), "line 3: a probe runs in one warp in N"),
            (good.replace("enter\n", "enter\nwarps x\n"), "line 3: warps N: N is a number"),
            (good.replace(":64 1 0\n", ":64 1 0\nwarps 32\n"), "unexpected `warps 32`"),
            // Reads a context byte past the launch context: the verifier's refusal, named.
            (good.replace("code 7916000000000000", "code 7916800000000000"), "probe counts: instr"),
        ];
        for (text, want) in cases {
            let err = Pack::parse(&text).expect_err(&text).to_string();
            assert!(err.contains(want), "{err:?} should say {want:?}, for\n{text}");
        }
    }

    #[test]
    fn load_reads_text_and_refuses_what_is_neither() {
        let dir = std::env::temp_dir().join(format!("egpu-pack-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let (program, maps) = counting();
        let mut pack = Pack::new();
        pack.push("counts", program, maps).expect("push");
        let path = dir.join("probes.pack");
        std::fs::write(&path, pack.to_text()).expect("write");
        assert_eq!(Pack::load(&path).expect("loads").probes().len(), 1);
        let elf = dir.join("not-a-library.so");
        std::fs::write(&elf, b"\x7fELF garbage").expect("write");
        let err = Pack::load(&elf).expect_err("not a library").to_string();
        assert!(err.contains("not-a-library.so"), "{err}");
        let err = Pack::load(&dir.join("missing")).expect_err("no file").to_string();
        assert!(err.contains("missing"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
