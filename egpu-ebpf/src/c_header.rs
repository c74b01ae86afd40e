//! The header for probes written in C (`include/egpu.h` in the repository, checked against
//! [`c_header`] by a test): egpu's context structs from the same field table as Probe Rust and
//! `egpu list` (each with its size and offsets asserted at compile time), the helpers of
//! [`HELPERS`] declared as libbpf declares Linux's, and libbpf's map-definition macros.

use std::fmt::Write as _;

use crate::fields::ContextType;
use crate::helpers::{ArgKind, HELPERS, RetKind};
use crate::{AllocCtx, KernelCtx, LaunchCtx, MemAccessCtx, MemcpyCtx, ModuleLoadCtx, SyncCtx};

/// Every context, with the name of its C struct.
const CONTEXTS: [(&ContextType, &str); 7] = [
    (&LaunchCtx::TYPE, "egpu_launch_ctx"),
    (&MemcpyCtx::TYPE, "egpu_memcpy_ctx"),
    (&AllocCtx::TYPE, "egpu_alloc_ctx"),
    (&SyncCtx::TYPE, "egpu_sync_ctx"),
    (&ModuleLoadCtx::TYPE, "egpu_module_load_ctx"),
    (&KernelCtx::TYPE, "egpu_kernel_ctx"),
    (&MemAccessCtx::TYPE, "egpu_mem_access_ctx"),
];

/// A field's C declaration from its Rust type (`u32`, `i64`, `[u32; 3]`), or `None` for a type
/// the table does not use.
fn c_field(ty: &str, name: &str) -> Option<String> {
    let scalar = |t: &str| match t {
        "u8" => Some("__u8"),
        "u16" => Some("__u16"),
        "u32" => Some("__u32"),
        "u64" => Some("__u64"),
        "i8" => Some("__s8"),
        "i16" => Some("__s16"),
        "i32" => Some("__s32"),
        "i64" => Some("__s64"),
        _ => None,
    };
    if let Some(inner) = ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let (elem, n) = inner.split_once(';')?;
        return Some(format!("{} {name}[{}]", scalar(elem.trim())?, n.trim()));
    }
    Some(format!("{} {name}", scalar(ty)?))
}

/// An argument's C type.
fn c_arg(kind: ArgKind) -> &'static str {
    match kind {
        ArgKind::MapRef | ArgKind::RingBuf => "void *",
        ArgKind::MapKey | ArgKind::MapValue | ArgKind::Mem => "const void *",
        ArgKind::StackOrNull => "void *",
        ArgKind::Func => "void *",
        ArgKind::Scalar | ArgKind::MemSize | ArgKind::Count | ArgKind::Nanoseconds => "__u64 ",
    }
}

/// The header's text.
pub fn c_header() -> String {
    let mut h = String::from(
        "/* egpu.h: what probes written in C need of egpu, generated from its field and helper\n \
         * tables (egpu_ebpf::c_header; a test keeps this file equal to it). Build probes with\n \
         * `clang -O2 -g -target bpf -c probe.c`; put each in a section named `egpu/` and its\n \
         * attach point with `/` for `::` (SEC(\"egpu/device/global_load\")). */\n\
         #ifndef EGPU_H\n#define EGPU_H\n\n",
    );
    for (c, bits) in [("u", ["8", "16", "32", "64"]), ("s", ["8", "16", "32", "64"])] {
        for b in bits {
            let base = match (c, b) {
                ("u", "8") => "unsigned char",
                ("u", "16") => "unsigned short",
                ("u", "32") => "unsigned int",
                ("u", _) => "unsigned long long",
                (_, "8") => "signed char",
                (_, "16") => "short",
                (_, "32") => "int",
                _ => "long long",
            };
            let _ = writeln!(h, "typedef {base} __{c}{b};");
        }
    }
    h.push_str(
        "\n/* libbpf's: a section, and a BTF-defined map's members. */\n\
         #define SEC(name) __attribute__((section(name), used))\n\
         #define __uint(name, val) int (*name)[val]\n\
         #define __type(name, val) typeof(val) *name\n\n\
         /* The map kinds egpu has (Linux's numbers); a ring buffer's value is its record. */\n\
         enum {\n    BPF_MAP_TYPE_HASH = 1,\n    BPF_MAP_TYPE_ARRAY = 2,\n    \
         BPF_MAP_TYPE_PERCPU_HASH = 5,\n    BPF_MAP_TYPE_PERCPU_ARRAY = 6,\n    \
         BPF_MAP_TYPE_RINGBUF = 27,\n};\n\
         enum { BPF_ANY = 0, BPF_NOEXIST = 1, BPF_EXIST = 2 };\n\n\
         /* A legacy map definition, in a `maps` section. */\n\
         struct bpf_map_def {\n    __u32 type;\n    __u32 key_size;\n    __u32 value_size;\n    \
         __u32 max_entries;\n    __u32 map_flags;\n};\n",
    );
    for (t, name) in CONTEXTS {
        let _ = write!(h, "\n/* {}: {} */\nstruct {name} {{\n", t.name, t.summary());
        for f in t.fields {
            let decl =
                c_field(f.ty, f.name).unwrap_or_else(|| format!("__u8 {}[{}]", f.name, f.size));
            let _ = writeln!(h, "    {decl}; /* {} */", f.summary().replace("*/", "* /"));
        }
        let _ = writeln!(h, "}};");
        let _ = writeln!(
            h,
            "_Static_assert(sizeof(struct {name}) == {}, \"{} is {} bytes\");",
            t.size, t.name, t.size
        );
        for f in t.fields {
            let _ = writeln!(
                h,
                "_Static_assert(__builtin_offsetof(struct {name}, {}) == {}, \"{}.{}\");",
                f.name, f.offset, t.name, f.name
            );
        }
    }
    h.push_str("\n/* The helpers, by number, as libbpf declares Linux's. */\n");
    for helper in HELPERS {
        let ret = match helper.ret {
            RetKind::MapValueOrNull => "void *",
            RetKind::Scalar => "long ",
        };
        let args: Vec<String> =
            helper.args.iter().map(|a| format!("{}{}", c_arg(a.kind), a.name)).collect();
        let args = if args.is_empty() { "void".to_owned() } else { args.join(", ") };
        let _ = writeln!(h, "static {ret}(*{})({args}) = (void *){};", helper.name, helper.id);
    }
    h.push_str("\n#endif /* EGPU_H */\n");
    h
}
