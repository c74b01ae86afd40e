//! The launch's tag in device contexts (issue 28): the hidden launch parameter.
//!
//! With [`InjectOptions::launch_tags`](super::InjectOptions::launch_tags), each kernel (`.entry`)
//! whose probes read the contexts' `tag_id` gets one parameter more, a `.param .u64` after its
//! own, which the kernel loads into a register when it starts
//! ([`Options::tag`](crate::translate::Options::tag)): every probe of the kernel reads `tag_id`
//! from that register, with no load at the access. Whoever launches the kernel passes the
//! launch's tag id there: the preloaded library does at every launch of an instrumented kernel
//! and in every graph kernel node of one made or set by hand, with the tag of the thread that
//! launches it or makes the node, in the `kernelParams` form (one pointer more) and the `extra`
//! form (8 bytes more in the buffer, at [`LaunchParam::offset`]), which is why the injection
//! says where it is ([`Injection::launch_params`](super::Injection::launch_params)).
//! Kernels whose probes never read `tag_id`, kernels no probe instruments and device functions
//! keep their parameters as they were (in a device function `tag_id` reads 0).
//!
//! Only the tag: a per-launch sequence number in the parameter would be fixed, like `%gridid`,
//! when a graph's kernel node is made (captured or added), so it would tell a graph's replays
//! apart no better than `launch_id` does; what it would add (a number the host knows, to join
//! device records to host spans) nothing uses yet, and it would cost every launch a counter.
//!
//! The parameter space has a limit: 4,352 bytes before PTX ISA 8.1 (`ptxas`: 0x1100), 32,764
//! from 8.1 on `sm_70` and later. A kernel whose parameters leave no room for 8 more bytes is
//! refused ([`LaunchParamError::Full`]), as is one whose parameter list cannot be read: the
//! module then runs as it came.

use egpu_ebpf::verifier::{AccessRegion, Verified};
use egpu_ebpf::{AttachPoint, DeviceEvent, Instruction, KernelCtx, MemAccessCtx};

/// Where the injector put a kernel's launch parameter ([`Injection::launch_params`]).
///
/// [`Injection::launch_params`]: super::Injection::launch_params
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LaunchParam {
    /// The kernel's (mangled) name.
    pub kernel: String,
    /// The parameter's index: the number of the kernel's own parameters, which come first.
    pub index: u32,
    /// Its byte offset in the parameter buffer (the `extra` form's): past the kernel's own
    /// parameters, aligned to 8.
    pub offset: u32,
}

/// Why a kernel could not be given its launch parameter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchParamError {
    /// A parameter whose type or size the injector cannot read.
    #[error("cannot read parameter `{0}`")]
    Unreadable(String),
    /// The parameter list has no end (`(` without its `)`).
    #[error("the parameter list does not end")]
    Unclosed,
    /// The kernel's parameters leave no room for 8 more bytes.
    #[error(
        "its parameters take {bytes} bytes: with the launch's 8 more the kernel would pass the \
         {limit}-byte limit of the parameter space"
    )]
    Full {
        /// The bytes the parameters take (the end of the last one).
        bytes: u32,
        /// The limit for the module's PTX version and target.
        limit: u32,
    },
}

/// The parameter space's limit in bytes: 32,764 from PTX ISA 8.1 on `sm_70` and later, 4,352
/// before (as `ptxas` 13.0 says).
pub(super) fn param_limit(version: Option<&str>, sm: u32) -> u32 {
    let (major, minor) = version
        .and_then(|v| v.trim().split_once('.'))
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .unwrap_or((0, 0));
    if (major, minor) >= (8, 1) && sm >= 70 { 32_764 } else { 4_352 }
}

/// Whether `program` reads the contexts' `tag_id` (or the context at an offset not known).
pub(super) fn reads_tag(program: &Verified) -> bool {
    let tag = match program.program().attach_point() {
        AttachPoint::Device(DeviceEvent::KernelEntry | DeviceEvent::KernelExit) => {
            std::mem::offset_of!(KernelCtx, tag_id)
        }
        AttachPoint::Device(_) => std::mem::offset_of!(MemAccessCtx, tag_id),
        _ => return false,
    } as i64;
    let runnable = program.runnable();
    runnable.program().decoded().iter().any(|d| {
        let Instruction::Load { size, .. } = d.insn else { return false };
        let Some(a) = runnable.access(d.pc) else { return false };
        match (a.region, a.offset) {
            (AccessRegion::Context, Some(o)) => o < tag + 8 && tag < o + i64::from(size.bytes()),
            (AccessRegion::Context | AccessRegion::Mixed, None) => true,
            _ => false,
        }
    })
}

/// Byte ranges of `text` outside its comments (`//` to the line's end, `/* */`).
fn code_bytes(text: &str) -> Vec<bool> {
    let bytes = text.as_bytes();
    let mut code = vec![true; bytes.len()];
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                code[i] = false;
                i += 1;
            }
        } else if bytes[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(bytes.len(), |e| i + 2 + e + 2);
            code[i..end].iter_mut().for_each(|c| *c = false);
            i = end;
        } else {
            i += 1;
        }
    }
    code
}

/// The size and alignment of one parameter's declaration (the text after `.param`).
fn param_layout(declaration: &str) -> Option<(u64, u32)> {
    let (before, count) = match declaration.split_once('[') {
        Some((before, rest)) => (before, rest.split(']').next()?.trim().parse::<u32>().ok()?),
        None => (declaration, 1),
    };
    let mut words = before.split_whitespace();
    let (mut align, mut element) = (None, None);
    while let Some(w) = words.next() {
        if w == ".align" && element.is_none() {
            align = Some(words.next()?.parse::<u32>().ok()?);
        } else if element.is_none()
            && let Some(ty) = w.strip_prefix('.')
            && ty.starts_with(['b', 'u', 's', 'f'])
            && let Ok(bits) = ty[1..].parse::<u32>()
        {
            element = Some(bits / 8);
        }
    }
    let element = element.filter(|&e| [1, 2, 4, 8, 16].contains(&e))?;
    let align = align.unwrap_or(element);
    if !align.is_power_of_two() {
        return None;
    }
    Some((u64::from(element) * u64::from(count), align))
}

/// Kernel `kernel`'s header with the parameter `name` appended to its list, and where it is:
/// its index and byte offset; refused past `limit` bytes.
pub(super) fn append(
    header: &str,
    kernel: &str,
    name: &str,
    limit: u32,
) -> Result<(String, LaunchParam), LaunchParamError> {
    let code = code_bytes(header);
    let at = |i: usize, c: u8| code[i] && header.as_bytes()[i] == c;
    // The list's `(`: the first outside comments, after `.entry` and the name.
    let entry = header.find(".entry").unwrap_or(0);
    let open = (entry..header.len()).find(|&i| at(i, b'('));
    let param = format!(".param .u64 {name}");
    let Some(open) = open else {
        // No list (`.entry k {`): one, of the launch's parameter alone, after the name.
        let after_name =
            header[entry..].find(kernel).map_or(header.len(), |i| entry + i + kernel.len());
        let text = format!("{}({param}){}", &header[..after_name], &header[after_name..]);
        return Ok((text, LaunchParam { kernel: kernel.to_owned(), index: 0, offset: 0 }));
    };
    let close = (open..header.len()).find(|&i| at(i, b')')).ok_or(LaunchParamError::Unclosed)?;
    let list: String =
        (open + 1..close).filter(|&i| code[i]).map(|i| header.as_bytes()[i] as char).collect();
    // In u64: sizes of u32 elements' counts cannot overflow it.
    let (mut end, mut index) = (0u64, 0u32);
    for declaration in list.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let unreadable = || LaunchParamError::Unreadable(declaration.to_owned());
        let rest = declaration.strip_prefix(".param").ok_or_else(unreadable)?;
        let (size, align) = param_layout(rest).ok_or_else(unreadable)?;
        end = end.next_multiple_of(u64::from(align)) + size;
        index += 1;
    }
    let offset = end.next_multiple_of(8);
    if offset + 8 > u64::from(limit) {
        let bytes = u32::try_from(end).unwrap_or(u32::MAX);
        return Err(LaunchParamError::Full { bytes, limit });
    }
    let offset = offset as u32;
    // Right after the last parameter's text (a comment after it stays on its line), or in
    // the empty list.
    let last =
        (open + 1..close).rev().find(|&i| code[i] && !header.as_bytes()[i].is_ascii_whitespace());
    let text = match last {
        Some(last) if index > 0 => {
            format!("{},\n\t{param}{}", &header[..=last], &header[last + 1..])
        }
        _ => format!("{}\n\t{param}\n{}", &header[..close], &header[close..]),
    };
    Ok((text, LaunchParam { kernel: kernel.to_owned(), index, offset }))
}

/// The kernel's code when it starts: the register `register` declared and loaded from the
/// parameter `name`.
pub(super) fn load(register: &str, name: &str) -> String {
    format!("\t.reg .b64 {register};\n\tld.param.u64 {register}, [{name}];\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NVCC: &str = ".visible .entry _Z4saxpyifPKfPf(\n\t.param .u32 _Z4saxpyifPKfPf_param_0,\n\
        \t.param .f32 _Z4saxpyifPKfPf_param_1, // a comment, with (parentheses)\n\
        \t.param .u64 .ptr .global .align 4 _Z4saxpyifPKfPf_param_2,\n\
        \t.param .align 16 .b8 _Z4saxpyifPKfPf_param_3[36]\n)\n.maxntid 256, 1, 1\n";

    /// The parameters' layout: a pointer's `.align` is its target's, an array's `.align` its
    /// own; the launch's parameter past the last, 8-aligned.
    #[test]
    fn the_parameter_goes_after_the_kernel_s_own() {
        let (text, at) = append(NVCC, "_Z4saxpyifPKfPf", "egpu_tag", 4352).expect("appended");
        // 0..4, 4..8, 8..16, 16..52: the launch's at 56.
        assert_eq!((at.index, at.offset), (4, 56));
        assert!(text.starts_with(&NVCC[..NVCC.find("\n)").unwrap()]), "{text}");
        assert!(text.contains("[36],\n\t.param .u64 egpu_tag\n)\n.maxntid 256, 1, 1\n"), "{text}");
    }

    #[test]
    fn kernels_without_parameters() {
        for header in
            [".visible .entry empty()\n", ".entry empty\n.reqntid 32\n", ".entry empty( )"]
        {
            let (text, at) = append(header, "empty", "egpu_tag", 4352).expect(header);
            assert_eq!((at.index, at.offset), (0, 0), "{header}");
            assert_eq!(text.matches(".param .u64 egpu_tag").count(), 1, "{text}");
            assert!(!text.contains(','), "{text}");
        }
    }

    /// Up to the limit, and not past it; odd lists are typed errors.
    #[test]
    fn the_parameter_space_has_a_limit() {
        let full = |bytes: u32| format!(".entry k(\n\t.param .align 8 .b8 k_param_0[{bytes}]\n)");
        assert!(append(&full(4344), "k", "egpu_tag", 4352).is_ok());
        let refused = append(&full(4345), "k", "egpu_tag", 4352);
        assert_eq!(refused, Err(LaunchParamError::Full { bytes: 4345, limit: 4352 }));
        assert!(append(&full(4345), "k", "egpu_tag", 32_764).is_ok());
        assert_eq!(param_limit(Some("8.1"), 90), 32_764);
        assert_eq!(param_limit(Some("8.0"), 90), 4352);
        assert_eq!(param_limit(Some("8.8"), 61), 4352);
        assert_eq!(param_limit(None, 90), 4352);
        let odd = [
            (".entry k(\n\t.param .u64 a", LaunchParamError::Unclosed),
            (".entry k(.param .u7 a)", LaunchParamError::Unreadable(".param .u7 a".into())),
            (".entry k(.reg .u64 a)", LaunchParamError::Unreadable(".reg .u64 a".into())),
            (".entry k(.param .b8 a[x])", LaunchParamError::Unreadable(".param .b8 a[x]".into())),
            (
                ".entry k(.param .align 3 .b8 a[4])",
                LaunchParamError::Unreadable(".param .align 3 .b8 a[4]".into()),
            ),
            (
                ".entry k(.param .b8 a[4294967295])",
                LaunchParamError::Full { bytes: u32::MAX, limit: 4352 },
            ),
            (
                ".entry k(.param .b64 a[4294967295], .param .b64 b[4294967295])",
                LaunchParamError::Full { bytes: u32::MAX, limit: 4352 },
            ),
        ];
        for (header, want) in odd {
            assert_eq!(append(header, "k", "egpu_tag", 4352).map(|_| ()), Err(want), "{header}");
        }
    }
}
