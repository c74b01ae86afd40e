//! CUDA graphs' kernel nodes made or changed by hand (issue 28): the launch's tag in device
//! contexts for them.
//!
//! A kernel whose device probes read `tag_id` has one parameter more than its source says
//! ([`crate::device::launch_tags`]). A kernel node captured from a stream gets it from the
//! launch that made it; a node made or changed through the graph API is given it here, at
//! `cuGraphAddKernelNode`, `cuGraphKernelNodeSetParams`, `cuGraphExecKernelNodeSetParams` (each
//! in CUDA 10's form with `CUDA_KERNEL_NODE_PARAMS_v1` and CUDA 12's `_v2` with `_v2`), and
//! `cuGraphAddNode` (and `_v2`), `cuGraphNodeSetParams`, `cuGraphExecNodeSetParams` with a
//! `CUgraphNodeParams` of type `CU_GRAPH_NODE_TYPE_KERNEL` (`CUDA_KERNEL_NODE_PARAMS_v3`). The
//! symbol says which struct the parameters are; the function is the struct's `func`, or, where
//! that is null, its `kern` (a `CUkernel`, `_v2` and `_v3`).
//!
//! When that function has the parameter, the driver gets a copy of the caller's struct whose
//! `kernelParams` or `extra` are the launch path's own ([`Storage::args`]): the caller's entries
//! as they were and the tag of the calling thread after them. The driver copies a node's
//! arguments when the node is made or set (the CUDA documentation: the pointers are where "the
//! actual parameter will be copied" from, and the `kernelParams` a node hands back are "owned by
//! the node"), so the copy and the lists live on the stack for the call. A node keeps the tag
//! it was made or last set with, for every launch of its graph, as a node captured from a
//! stream keeps its launch's; an executable graph's node set by
//! `cuGraphExecKernelNodeSetParams` takes the setting thread's. Lists that hold a tag already
//! (a node's parameters read back with `cuGraphKernelNodeGetParams` and set again) are rewritten
//! the same way: the caller's entries before the parameter's index or offset are kept, the
//! setting thread's tag replaces the one after them. Any other node, a kernel node of a function
//! without the parameter, and lists the driver would refuse (an `extra` of other keys) go to the
//! driver as the caller made them.
//!
//! `cuGetProcAddress` hands these out by base name like every driver entry point; where the
//! driver's answer is a function it exports under no name, [`form_at`] says which form the
//! version asked for means.

use std::ffi::{CStr, c_int, c_uint, c_void};
use std::mem::MaybeUninit;

use crate::Handle;
use crate::device::launch_tags::Storage;

type List = *mut *mut c_void;

/// `CUDA_KERNEL_NODE_PARAMS_v1`, which the unversioned entry points take.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct KernelNodeV1 {
    func: Handle,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    kernel_params: List,
    extra: List,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (the `_v2` entry points') and `_v3` (`CUgraphNodeParams`'s),
/// which have the same fields: v1's, then a `CUkernel` launched when `func` is null, and its
/// context.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct KernelNodeV2 {
    v1: KernelNodeV1,
    kern: Handle,
    ctx: Handle,
}

/// `CUgraphNodeParams` (CUDA 12.2): the node's type, three reserved words, a union of 29
/// words (a kernel node's `CUDA_KERNEL_NODE_PARAMS_v3` first), one reserved word.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct NodeParams {
    kind: c_int,
    reserved0: [c_int; 3],
    kernel: KernelNodeV2,
    union_rest: [i64; 29 - size_of::<KernelNodeV2>() / 8],
    reserved2: i64,
}

/// `CU_GRAPH_NODE_TYPE_KERNEL`.
const KERNEL: c_int = 0;

const _: () = {
    assert!(size_of::<KernelNodeV1>() == 56 && std::mem::offset_of!(KernelNodeV1, extra) == 48);
    assert!(size_of::<KernelNodeV2>() == 72 && std::mem::offset_of!(KernelNodeV2, ctx) == 64);
    assert!(size_of::<NodeParams>() == 256 && std::mem::offset_of!(NodeParams, kernel) == 16);
};

/// A graph node's parameters as an entry point takes them.
pub(crate) trait Node: Copy {
    /// The kernel's function, `kernelParams` and `extra`; `None` for another kind of node.
    fn kernel(&self) -> Option<(Handle, List, List)>;
    /// These with the lists `params` and `extra`.
    fn with(self, params: List, extra: List) -> Self;
}

impl Node for KernelNodeV1 {
    fn kernel(&self) -> Option<(Handle, List, List)> {
        Some((self.func, self.kernel_params, self.extra))
    }
    fn with(self, params: List, extra: List) -> Self {
        KernelNodeV1 { kernel_params: params, extra, ..self }
    }
}

impl Node for KernelNodeV2 {
    fn kernel(&self) -> Option<(Handle, List, List)> {
        let f = if self.v1.func.is_null() { self.kern } else { self.v1.func };
        Some((f, self.v1.kernel_params, self.v1.extra))
    }
    fn with(self, params: List, extra: List) -> Self {
        KernelNodeV2 { v1: self.v1.with(params, extra), ..self }
    }
}

impl Node for NodeParams {
    fn kernel(&self) -> Option<(Handle, List, List)> {
        if self.kind == KERNEL { self.kernel.kernel() } else { None }
    }
    fn with(self, params: List, extra: List) -> Self {
        NodeParams { kernel: self.kernel.with(params, extra), ..self }
    }
}

/// The pointer an entry point takes its node's parameters by (`const` or not).
pub(crate) trait NodePtr: Copy {
    /// What it points at.
    type To: Node;
    /// Where.
    fn at(self) -> *const Self::To;
    /// A pointer of this kind to `to`.
    fn to(to: &mut Self::To) -> Self;
}

impl<P: Node> NodePtr for *const P {
    type To = P;
    fn at(self) -> *const P {
        self
    }
    fn to(to: &mut P) -> Self {
        to
    }
}

impl<P: Node> NodePtr for *mut P {
    type To = P;
    fn at(self) -> *const P {
        self.cast_const()
    }
    fn to(to: &mut P) -> Self {
        to
    }
}

/// The node's parameters `p` as the driver is to get them: `p` itself, or, when the node is a
/// kernel node whose function has the launch parameter, a copy in `copy` with the calling
/// thread's tag added to its lists (in `storage`, as a launch's: [`Storage::args`]).
///
/// # Safety
///
/// `p` is null or points at the parameters as the entry point's signature says, valid as the
/// driver takes them.
#[inline]
pub(crate) unsafe fn tagged<T: NodePtr>(
    storage: &mut Storage,
    copy: &mut MaybeUninit<T::To>,
    p: T,
) -> T {
    let at = p.at();
    if at.is_null() || !crate::device::launch_tags::any() {
        return p;
    }
    // SAFETY: the caller's parameters, as the caller promises.
    let node = unsafe { at.read_unaligned() };
    let Some((f, params, extra)) = node.kernel() else { return p };
    // SAFETY: the node's argument lists, valid as the driver takes them.
    let (tagged_params, tagged_extra) = unsafe { storage.args(f, (params, extra)) };
    if (tagged_params, tagged_extra) == (params, extra) {
        return p;
    }
    T::to(copy.write(node.with(tagged_params, tagged_extra)))
}

/// Defines an entry point that makes or changes a graph node from the parameters its argument
/// `$p` points at: no event, but a kernel node's function with the launch parameter given the
/// calling thread's tag ([`tagged`]).
macro_rules! kernel_node {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $p:ident) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            let mut storage = crate::device::launch_tags::Storage::new();
            let mut copy = std::mem::MaybeUninit::uninit();
            // SAFETY: the caller's node parameters, as the driver takes them.
            let $p = unsafe { graphs::tagged(&mut storage, &mut copy, $p) };
            // SAFETY: the driver's function, with the caller's arguments (a kernel node's tag
            // added: `graphs`); `storage` and `copy` outlive the call, which copies them.
            unsafe { real($($arg),*) }
        });
    };
}
pub(super) use kernel_node;

/// The graph entry points of several forms, each form with the CUDA version from which
/// `cuGetProcAddress` means it by the base name (`cudaTypedefs.h`'s `PFN_…_v10000`,
/// `_v12000`, …): base name, exact name, version. (The other graph entry points have one
/// form.)
const FORMS: &[(&[u8], &CStr, c_int)] = &[
    (b"cuGraphAddKernelNode", c"cuGraphAddKernelNode", 10000),
    (b"cuGraphAddKernelNode", c"cuGraphAddKernelNode_v2", 12000),
    (b"cuGraphKernelNodeSetParams", c"cuGraphKernelNodeSetParams", 10000),
    (b"cuGraphKernelNodeSetParams", c"cuGraphKernelNodeSetParams_v2", 12000),
    (b"cuGraphExecKernelNodeSetParams", c"cuGraphExecKernelNodeSetParams", 10010),
    (b"cuGraphExecKernelNodeSetParams", c"cuGraphExecKernelNodeSetParams_v2", 12000),
    (b"cuGraphAddNode", c"cuGraphAddNode", 12020),
    (b"cuGraphAddNode", c"cuGraphAddNode_v2", 12030),
];

/// The exact name of the form of the graph entry point `name` (a base name) that
/// `cuGetProcAddress` means at `version`: for a driver's answer exported under no name,
/// whose signature the version alone says. `None` for other names and versions before the
/// first form.
pub(crate) fn form_at(name: &[u8], version: c_int) -> Option<&'static CStr> {
    FORMS
        .iter()
        .filter(|(base, _, since)| *base == name && *since <= version)
        .max_by_key(|(_, _, since)| *since)
        .map(|(_, exact, _)| *exact)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_is_an_entry_point_of_its_base_name() {
        for (base, exact, _) in FORMS {
            let entry = super::super::exact(exact.to_bytes()).expect("interposed");
            assert_eq!(entry.base, *base, "{exact:?}");
        }
        // Every graph entry point of several forms is listed.
        let graphs = || super::super::ENTRIES.iter().filter(|e| !e.per_thread);
        for e in graphs().filter(|e| e.base.starts_with(b"cuGraph")) {
            let forms = graphs().filter(|o| o.base == e.base).count();
            let listed = FORMS.iter().any(|(_, exact, _)| *exact == e.exact);
            assert_eq!(forms > 1, listed, "{:?}", e.exact);
        }
    }

    #[test]
    fn the_version_picks_the_form() {
        assert_eq!(form_at(b"cuGraphAddKernelNode", 11080), Some(c"cuGraphAddKernelNode"));
        assert_eq!(form_at(b"cuGraphAddKernelNode", 12000), Some(c"cuGraphAddKernelNode_v2"));
        assert_eq!(form_at(b"cuGraphAddKernelNode", 13000), Some(c"cuGraphAddKernelNode_v2"));
        assert_eq!(form_at(b"cuGraphExecKernelNodeSetParams", 10000), None);
        assert_eq!(form_at(b"cuGraphAddNode", 12020), Some(c"cuGraphAddNode"));
        assert_eq!(form_at(b"cuGraphAddNode", 12080), Some(c"cuGraphAddNode_v2"));
        assert_eq!(form_at(b"cuLaunchKernel", 12000), None);
    }

    #[test]
    fn only_kernel_nodes_have_a_kernel() {
        // SAFETY: all zeros is a valid `NodeParams` (null pointers, zero words).
        let mut node: NodeParams = unsafe { std::mem::zeroed() };
        let f = 0x1234 as Handle;
        node.kernel.kern = f;
        assert_eq!(node.kernel().map(|k| k.0), Some(f));
        node.kernel.v1.func = 0x5678 as Handle;
        assert_eq!(node.kernel().map(|k| k.0), Some(0x5678 as Handle));
        node.kind = 1; // CU_GRAPH_NODE_TYPE_MEMCPY
        assert!(node.kernel().is_none());
        let list = 0x10 as List;
        let changed = node.with(list, std::ptr::null_mut());
        assert_eq!((changed.kernel.v1.kernel_params, changed.kind), (list, 1));
    }
}
