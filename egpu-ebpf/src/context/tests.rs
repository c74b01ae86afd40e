//! The contexts' layout and spellings.

use super::*;
use std::mem::{offset_of, size_of};

/// The layout is an ABI (see the module documentation): these offsets and sizes change only
/// by appending, with [`CONTEXT_REVISION`].
#[test]
fn the_layout_is_the_documented_abi() {
    let sizes = [
        ("LaunchCtx", size_of::<LaunchCtx>(), 128),
        ("MemcpyCtx", size_of::<MemcpyCtx>(), 120),
        ("AllocCtx", size_of::<AllocCtx>(), 96),
        ("SyncCtx", size_of::<SyncCtx>(), 48),
        ("ModuleLoadCtx", size_of::<ModuleLoadCtx>(), 56),
        ("KernelCtx", size_of::<KernelCtx>(), 88),
        ("MemAccessCtx", size_of::<MemAccessCtx>(), 96),
    ];
    for (name, size, want) in sizes {
        assert_eq!(size, want, "{name}");
        assert_eq!(size % 8, 0, "{name} is a whole number of words");
    }
    // A launch probe's hot fields are in the first cache line.
    for end in [
        offset_of!(LaunchCtx, kernel_id) + 8,
        offset_of!(LaunchCtx, flags) + 4,
        offset_of!(LaunchCtx, grid) + 12,
        offset_of!(LaunchCtx, block) + 12,
    ] {
        assert!(end <= 64, "{end}");
    }
    // Revision 4: the launch site and the tags, appended to the launch, copy and allocation
    // contexts alike (issue 28); after them, what later revisions appended (`after` fields).
    for (ty, site, after) in [
        (&LaunchCtx::TYPE, offset_of!(LaunchCtx, site_id), 0),
        (&MemcpyCtx::TYPE, offset_of!(MemcpyCtx, site_id), 2),
        (&AllocCtx::TYPE, offset_of!(AllocCtx, site_id), 0),
    ] {
        let later: usize = ty.fields.iter().rev().take(after).map(|f| f.size).sum();
        assert_eq!(site, ty.size - later - 40, "{}", ty.name);
        let names: Vec<&str> = ty.fields.iter().rev().skip(after).take(4).map(|f| f.name).collect();
        assert_eq!(names, ["span_id", "trace_id", "tag_id", "site_id"], "{}", ty.name);
    }
    assert_eq!(offset_of!(LaunchCtx, duration_ns), 80);
    // Revision 5: a peer copy's source and destination devices, after the tags (issue 29).
    assert_eq!(offset_of!(MemcpyCtx, src_device), 112);
    assert_eq!(offset_of!(MemcpyCtx, dst_device), 116);
    assert_eq!(offset_of!(KernelCtx, launch_id), 72);
    assert_eq!(offset_of!(MemAccessCtx, launch_id), 64);
    assert_eq!(offset_of!(MemAccessCtx, class), 76);
    assert_eq!(offset_of!(MemAccessCtx, op), 80);
    assert_eq!(offset_of!(MemAccessCtx, fetch), 84);
    // Revision 6: the launch's tag id in the device contexts, after everything (issue 28).
    assert_eq!(offset_of!(KernelCtx, tag_id), 80);
    assert_eq!(offset_of!(MemAccessCtx, tag_id), 88);
}

#[test]
fn host_contexts_say_what_they_are() {
    let tags = [
        LaunchCtx::default().tag,
        MemcpyCtx::default().tag,
        AllocCtx::default().tag,
        SyncCtx::default().tag,
        ModuleLoadCtx::default().tag,
    ];
    let events = [
        HostEvent::Launch,
        HostEvent::Memcpy,
        HostEvent::Alloc,
        HostEvent::Sync,
        HostEvent::ModuleLoad,
    ];
    for (tag, event) in tags.iter().zip(events) {
        assert_eq!(*tag, context_tag(event));
        assert_eq!(tag >> 24, 0xec);
        assert_eq!(tag >> 8 & 0xffff, CONTEXT_REVISION);
    }
    let mut distinct = tags.to_vec();
    distinct.dedup();
    assert_eq!(distinct.len(), 5);
    assert_eq!(LaunchCtx { tag: 0, ..Default::default() }, Zeroable::zeroed());
}

/// Item 5 of issue 18: the macro's spellings are the CLI's and the packs'.
#[test]
fn item5_attach_points_read_the_macros_spellings() {
    let launch = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
    assert_eq!("host::launch".parse(), Ok(launch));
    assert_eq!("host::launch::enter".parse(), Ok(launch));
    assert_eq!(
        "host::module_load::exit".parse(),
        Ok(AttachPoint::Host(HostEvent::ModuleLoad, Phase::Exit))
    );
    assert_eq!("user(16)".parse(), Ok(AttachPoint::User { ctx_size: 16 }));
    for every in
        [launch, AttachPoint::Device(DeviceEvent::GlobalStore), AttachPoint::User { ctx_size: 8 }]
    {
        assert_eq!(every.to_string().parse(), Ok(every), "{every}");
    }
    for bad in ["host::nothing", "host::launch::during", "host", "device::launch", "user"] {
        let err = bad.parse::<AttachPoint>().expect_err(bad);
        assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
    }
}
