//! The field table of the contexts: for each `#[repr(C)]` context, its fields with their names,
//! types, offsets, sizes and documentation.
//!
//! The table is not written beside the structs: `contexts!` declares each context struct and
//! its [`ContextType`] from one definition (offsets and sizes by `offset_of!` and `size_of`, the
//! documentation from the fields' doc comments), so the struct that Probe Rust reads through
//! (rustc computes the offsets of `ctx.field`), the PTX translator's `offset_of!`, `egpu list`
//! and the book's listing of it all come from the same lines.
//!
//! ```
//! use egpu_ebpf::KernelCtx;
//!
//! let lane = KernelCtx::TYPE.field("lane").expect("a field");
//! assert_eq!((lane.ty, lane.offset, lane.size), ("u32", 60, 4));
//! assert_eq!(KernelCtx::TYPE.field_at(62).map(|f| f.name), Some("lane"));
//! assert_eq!(lane.summary(), "Lane in the warp (`%laneid`).");
//! ```

/// One field of a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Its name in the struct, as a probe reads it (`ctx.grid`).
    pub name: &'static str,
    /// Its Rust type as declared (`u64`, `[u32; 3]`).
    pub ty: &'static str,
    /// Its offset in bytes from the start of the context.
    pub offset: usize,
    /// Its size in bytes.
    pub size: usize,
    /// Its documentation (the doc comment's lines, joined; Markdown).
    pub doc: &'static str,
}

impl Field {
    /// The documentation as one line of plain text (see [`plain`]).
    pub fn summary(&self) -> String {
        plain(self.doc)
    }

    /// The offsets this field covers.
    pub fn bytes(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.size
    }
}

/// A context type: the struct's name, size, documentation and fields, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextType {
    /// The struct's name (`LaunchCtx`).
    pub name: &'static str,
    /// Its size in bytes, the context size of its attach points.
    pub size: usize,
    /// Its documentation (Markdown).
    pub doc: &'static str,
    /// Its fields, in declaration (and so offset) order.
    pub fields: &'static [Field],
}

impl ContextType {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The field that holds the byte at `offset`.
    pub fn field_at(&self, offset: usize) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.bytes().contains(&offset))
    }

    /// The documentation as one line of plain text (see [`plain`]).
    pub fn summary(&self) -> String {
        plain(self.doc)
    }
}

/// Documentation as one line of plain text: trimmed, with the brackets of intra-doc links
/// (`` [`LaunchCtx::GRAPH`] ``, `[tag](context_tag)`) dropped and their text kept, and code
/// spans that touch joined (`` [`f`]`(x)` `` reads `` `f(x)` ``).
///
/// ```
/// assert_eq!(
///     egpu_ebpf::fields::plain(" [`context_tag`]`(x)`, [tag](context_tag). "),
///     "`context_tag(x)`, tag."
/// );
/// ```
pub fn plain(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc.trim();
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else {
            out.push_str(&rest[open..]);
            rest = "";
            break;
        };
        out.push_str(&after[..close]);
        rest = &after[close + 1..];
        // A link's target, `(path)`, is not text.
        if rest.starts_with('(')
            && let Some(end) = rest.find(')')
            && !rest[..end].contains(' ')
        {
            rest = &rest[end + 1..];
        }
    }
    out.push_str(rest);
    out.replace("``", "").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Declares context structs, each `#[repr(C)]` and [`bytemuck::Pod`], with its field table as the
/// associated constant `TYPE`: a [`ContextType`] whose offsets and sizes rustc computes from
/// the struct itself. Only doc comments are allowed on the structs and their fields (the derives
/// are the macro's, the same for every context).
macro_rules! contexts {
    ($(
        $(#[doc = $doc:literal])*
        pub struct $name:ident {
            $( $(#[doc = $fdoc:literal])* pub $field:ident: $ty:ty, )*
        }
    )*) => {$(
        $(#[doc = $doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, ::bytemuck::Pod, ::bytemuck::Zeroable)]
        #[repr(C)]
        pub struct $name {
            $( $(#[doc = $fdoc])* pub $field: $ty, )*
        }

        impl $name {
            /// This context's field table (what `egpu list -v` prints), from the struct's own
            /// layout.
            pub const TYPE: $crate::fields::ContextType = $crate::fields::ContextType {
                name: stringify!($name),
                size: ::core::mem::size_of::<$name>(),
                doc: concat!($($doc),*),
                fields: &[$($crate::fields::Field {
                    name: stringify!($field),
                    ty: stringify!($ty),
                    offset: ::core::mem::offset_of!($name, $field),
                    size: ::core::mem::size_of::<$ty>(),
                    doc: concat!($($fdoc),*),
                },)*],
            };
        }
    )*};
}
pub(crate) use contexts;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::*;
    use std::mem::size_of;

    /// Every context, with its size as rustc lays the struct out.
    fn contexts() -> [(&'static ContextType, usize); 7] {
        [
            (&LaunchCtx::TYPE, size_of::<LaunchCtx>()),
            (&MemcpyCtx::TYPE, size_of::<MemcpyCtx>()),
            (&AllocCtx::TYPE, size_of::<AllocCtx>()),
            (&SyncCtx::TYPE, size_of::<SyncCtx>()),
            (&ModuleLoadCtx::TYPE, size_of::<ModuleLoadCtx>()),
            (&KernelCtx::TYPE, size_of::<KernelCtx>()),
            (&MemAccessCtx::TYPE, size_of::<MemAccessCtx>()),
        ]
    }

    /// The size of a field type as the table writes it: a scalar, or an array of scalars.
    fn size_of_written(ty: &str) -> Option<usize> {
        let scalar = |t: &str| match t.trim() {
            "u8" | "i8" => Some(1),
            "u16" | "i16" => Some(2),
            "u32" | "i32" => Some(4),
            "u64" | "i64" => Some(8),
            _ => None,
        };
        match ty.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            Some(array) => {
                let (elem, n) = array.split_once(';')?;
                Some(scalar(elem)? * n.trim().parse::<usize>().ok()?)
            }
            None => scalar(ty),
        }
    }

    /// The table is the struct: its fields cover every byte of the context once, in order, each
    /// as wide as its written type, documented, and the size is `size_of`.
    #[test]
    fn the_field_table_is_the_structs_layout() {
        for (context, size) in contexts() {
            let name = context.name;
            assert_eq!(context.size, size, "{name}");
            assert!(!context.summary().is_empty(), "{name} is documented");
            let mut next = 0;
            for f in context.fields {
                assert_eq!(f.offset, next, "{name}.{}: no padding before it", f.name);
                assert_eq!(size_of_written(f.ty), Some(f.size), "{name}.{}: {}", f.name, f.ty);
                assert!(!f.summary().is_empty(), "{name}.{} is documented", f.name);
                assert_eq!(context.field(f.name), Some(f));
                for byte in f.bytes() {
                    assert_eq!(context.field_at(byte), Some(f), "{name} byte {byte}");
                }
                next = f.offset + f.size;
            }
            assert_eq!(next, size, "{name}: the fields end where the struct does");
            assert_eq!(context.field_at(size), None);
        }
        // Spot checks against offsets known independently of the macro (the book's tables).
        let at = |c: &ContextType, f: &str| c.field(f).map(|f| (f.offset, f.size));
        assert_eq!(at(&KernelCtx::TYPE, "lane"), Some((60, 4)));
        assert_eq!(at(&KernelCtx::TYPE, "launch_id"), Some((72, 8)));
        assert_eq!(at(&MemAccessCtx::TYPE, "size"), Some((16, 4)));
        assert_eq!(at(&MemAccessCtx::TYPE, "thread"), Some((24, 12)));
        assert_eq!(at(&LaunchCtx::TYPE, "grid"), Some((40, 12)));
        assert_eq!(at(&LaunchCtx::TYPE, "nothing"), None);
        assert_eq!(LaunchCtx::TYPE.field("tag").map(|f| f.ty), Some("u32"));
        assert_eq!(LaunchCtx::TYPE.field("result").map(|f| f.ty), Some("i32"));
    }

    /// Every attach point of an event is listed once, under a spelling that parses back to it,
    /// and names the context of the table that its size and name come from.
    #[test]
    fn every_attach_point_is_listed_with_its_context() {
        let events = AttachPoint::EVENTS;
        for (i, a) in events.iter().enumerate() {
            assert!(!events[..i].contains(a), "{a} is listed twice");
            assert_eq!(a.spelling().parse(), Ok(*a), "{}", a.spelling());
            assert_eq!(a.to_string().parse(), Ok(*a), "{a}");
            let context = a.context_type().expect("an event's context");
            assert_eq!((a.context_name(), a.context_size()), (context.name, context.size));
            assert!(contexts().iter().any(|(c, _)| c == &context), "{a}");
            assert!(!a.describe().is_empty());
        }
        // Adding a variant breaks this match; then add it to `EVENTS`.
        let listed = |a: AttachPoint| match a {
            AttachPoint::Host(
                HostEvent::Launch
                | HostEvent::Memcpy
                | HostEvent::Alloc
                | HostEvent::Sync
                | HostEvent::ModuleLoad,
                Phase::Enter | Phase::Exit,
            )
            | AttachPoint::Device(
                DeviceEvent::KernelEntry
                | DeviceEvent::KernelExit
                | DeviceEvent::GlobalLoad
                | DeviceEvent::GlobalStore
                | DeviceEvent::GlobalAtomic,
            ) => events.contains(&a),
            AttachPoint::User { .. } => !events.contains(&a),
        };
        assert!(events.iter().all(|&a| listed(a)));
        assert_eq!(events.len(), 5 * 2 + 5);
        assert!(listed(AttachPoint::User { ctx_size: 8 }));
        let user = AttachPoint::User { ctx_size: 16 };
        assert_eq!((user.context_type(), user.context_size()), (None, 16));
        assert_eq!(user.spelling(), "user(16)");
        assert_eq!(user.spelling().parse(), Ok(user));
        let launch = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
        assert_eq!(launch.spelling(), "host::launch");
        // Every context type is some attach point's.
        for (c, _) in contexts() {
            assert!(events.iter().any(|a| a.context_type() == Some(c)), "{}", c.name);
        }
    }

    #[test]
    fn plain_text_keeps_the_words_and_never_panics() {
        assert_eq!(
            plain(" [`LaunchCtx::CAPTURED`], [`LaunchCtx::GRAPH`]."),
            "`LaunchCtx::CAPTURED`, `LaunchCtx::GRAPH`."
        );
        assert_eq!(plain("a [b](c d) e"), "a b(c d) e");
        assert_eq!(plain("an [unclosed link"), "an [unclosed link");
        assert_eq!(plain("two\n  lines"), "two lines");
        for odd in ["", "[", "]", "[]", "[](", "[x](", "é[ü]ß(", "[[]]", "[a](b"] {
            assert!(plain(odd).len() <= odd.len(), "{odd}");
        }
        assert_eq!(plain("[[x]]"), "[x]");
    }
}
