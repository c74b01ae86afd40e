//! The ABI's behaviour on bad arguments: null pointers, sizes, garbage where a program is,
//! handles of the wrong kind or thread. Each is an error code with a message; none panics.

use std::ffi::{CStr, c_char};
use std::ptr::{null, null_mut};

use crate::*;

fn last() -> String {
    // SAFETY: never null; valid until this thread's next call.
    unsafe { CStr::from_ptr(egpu_last_error()) }.to_string_lossy().into_owned()
}

/// A status that is not `EGPU_PANIC`, with its message, for a failed assertion.
#[track_caller]
fn expect(status: egpu_status, want: egpu_status) {
    assert_eq!(status, want, "{status:?} ({}), not {want:?}", last());
    assert_ne!(last(), "", "a failure without a message");
}

const COUNT: &CStr = c"ldxw %r6, [%r1+4]
    ldxw %r2, [%r1+0]
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, +1
    lock add [%r0+0], %r6
    mov %r0, %r6
    exit";

fn desc(attach: &'static CStr, maps: &'static CStr) -> egpu_program_desc {
    egpu_program_desc {
        size: size_of::<egpu_program_desc>(),
        name: c"test".as_ptr(),
        attach: attach.as_ptr(),
        maps: maps.as_ptr(),
    }
}

fn program(attach: &'static CStr, maps: &'static CStr, text: &CStr) -> *mut egpu_program {
    let mut out = null_mut();
    let d = desc(attach, maps);
    // SAFETY: a valid descriptor, a C string, an out-pointer.
    let status = unsafe { egpu_program_from_assembly(&d, text.as_ptr(), &mut out) };
    assert_eq!(status, EGPU_OK, "{}", last());
    out
}

fn hash_map(key: u32, value: u32) -> *mut egpu_map {
    let d = egpu_map_desc {
        size: size_of::<egpu_map_desc>(),
        kind: egpu_map_kind::EGPU_MAP_HASH as u32,
        key_size: key,
        value_size: value,
        capacity: 64,
        cpu_shards: 0,
        sm_shards: 0,
        shared_name: null(),
    };
    let mut out = null_mut();
    // SAFETY: a valid descriptor and out-pointer.
    assert_eq!(unsafe { egpu_map_create(&d, &mut out) }, EGPU_OK, "{}", last());
    out
}

#[test]
fn status_names_are_the_codes() {
    for status in [EGPU_OK, EGPU_NULL_ARGUMENT, EGPU_VERIFY, EGPU_WRONG_THREAD, EGPU_PANIC] {
        // SAFETY: static C strings.
        let name = unsafe { CStr::from_ptr(egpu_status_name(status as i32)) };
        assert_eq!(name.to_str(), Ok(format!("{status:?}").as_str()));
    }
    assert_eq!(egpu_abi_version(), EGPU_ABI_VERSION);
    // SAFETY: a static C string.
    assert_eq!(unsafe { CStr::from_ptr(egpu_version()) }.to_str(), Ok(env!("CARGO_PKG_VERSION")));
}

#[test]
fn null_pointers_are_errors() {
    let d = desc(c"user(8)", c"");
    let mut p = null_mut();
    // SAFETY: every pointer is null or valid; nulls are what is tested.
    unsafe {
        expect(egpu_program_from_assembly(null(), COUNT.as_ptr(), &mut p), EGPU_NULL_ARGUMENT);
        expect(egpu_program_from_assembly(&d, null(), &mut p), EGPU_NULL_ARGUMENT);
        expect(egpu_program_from_assembly(&d, COUNT.as_ptr(), null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_program_from_bytecode(&d, null(), 16, &mut p), EGPU_NULL_ARGUMENT);
        expect(egpu_program_verify(null()), EGPU_NULL_ARGUMENT);
        expect(egpu_object_from_elf(null(), 64, null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_object_from_file(null(), null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_vm_new(null(), null(), 0, null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_vm_run(null(), null_mut(), 0, null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_map_create(null(), null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_map_open(null(), null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_map_lookup(null(), null(), 0, null_mut(), 0), EGPU_NULL_ARGUMENT);
        expect(egpu_probes_new(null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_probes_fire(null(), 1, 0, null(), 0), EGPU_NULL_ARGUMENT);
        expect(egpu_ptx_instrument(null(), null_mut()), EGPU_NULL_ARGUMENT);
        assert!(egpu_ptx_result_text(null()).is_null());
        egpu_program_free(null_mut());
        egpu_object_free(null_mut());
        egpu_vm_free(null_mut());
        egpu_map_free(null_mut());
        egpu_probes_free(null_mut());
        egpu_ptx_result_free(null_mut());
    }
    let count = program(c"user(8)", c"counts=hash:4:8:64", COUNT);
    let map = hash_map(4, 8);
    let maps = [map.cast_const()];
    let mut vm = null_mut();
    // SAFETY: live handles; the nulls are what is tested.
    unsafe {
        expect(egpu_vm_new(count, null(), 1, &mut vm), EGPU_NULL_ARGUMENT);
        expect(egpu_vm_new(count, [null::<egpu_map>()].as_ptr(), 1, &mut vm), EGPU_NULL_ARGUMENT);
        assert!(last().contains("maps[0]"), "{}", last());
        assert_eq!(egpu_vm_new(count, maps.as_ptr(), 1, &mut vm), EGPU_OK, "{}", last());
        expect(egpu_vm_run(vm, null_mut(), 8, &mut 0), EGPU_NULL_ARGUMENT);
        expect(egpu_vm_run(vm, [0u8; 8].as_mut_ptr(), 8, null_mut()), EGPU_NULL_ARGUMENT);
        expect(egpu_map_keys(map, null_mut(), 0, null_mut()), EGPU_NULL_ARGUMENT);
        egpu_vm_free(vm);
        egpu_map_free(map);
        egpu_program_free(count);
    }
}

#[test]
fn sizes_are_checked_and_larger_structs_are_taken() {
    let mut p = null_mut();
    for size in [0, 8, size_of::<egpu_program_desc>() - 1, 1 << 20] {
        let d = egpu_program_desc { size, ..desc(c"user(8)", c"") };
        // SAFETY: a descriptor readable for its size or more (the sizes past it are refused
        // before anything past the struct is read).
        expect(unsafe { egpu_program_from_assembly(&d, COUNT.as_ptr(), &mut p) }, EGPU_BAD_SIZE);
        assert!(last().contains("sizeof(egpu_program_desc)"), "{}", last());
    }
    // A caller built against a newer header passes a larger struct: the known fields are read.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Newer {
        known: egpu_program_desc,
        added: u64,
    }
    let newer = Newer {
        known: egpu_program_desc {
            size: size_of::<Newer>(),
            ..desc(c"user(8)", c"counts=hash:4:8:64")
        },
        added: 7,
    };
    // SAFETY: the struct is valid for its size.
    let status = unsafe { egpu_program_from_assembly(&newer.known, COUNT.as_ptr(), &mut p) };
    assert_eq!(status, EGPU_OK, "{}", last());
    let _ = newer.added;
    // Out structs: too small refused, larger filled as far as this library knows.
    #[repr(C)]
    struct NewerInfo {
        known: egpu_program_info,
        added: u64,
    }
    let mut info = NewerInfo {
        known: egpu_program_info {
            size: size_of::<NewerInfo>(),
            name: null(),
            attach: null(),
            context_size: 0,
            instructions: 0,
            maps: 0,
            host: 9,
            device: 9,
            verified: 9,
        },
        added: 0xfeed,
    };
    // SAFETY: a live program; the struct is valid for its size.
    unsafe {
        assert_eq!(egpu_program_get_info(p, &mut info.known), EGPU_OK, "{}", last());
        assert_eq!(info.known.size, size_of::<NewerInfo>(), "the caller's size is kept");
        assert_eq!((info.known.context_size, info.known.maps, info.known.host), (8, 1, 0));
        assert_eq!(CStr::from_ptr(info.known.attach).to_str(), Ok("user(8 bytes)"));
        assert_eq!(info.added, 0xfeed, "nothing past the known struct is written");
        info.known.size = 16;
        expect(egpu_program_get_info(p, &mut info.known), EGPU_BAD_SIZE);
        egpu_program_free(p);
    }
    // A context of the wrong size, a value of the wrong size.
    let map = hash_map(4, 8);
    let mut value = [0u8; 8];
    // SAFETY: a live map; buffers of the lengths given.
    unsafe {
        expect(egpu_map_lookup(map, [0u8; 2].as_ptr(), 2, value.as_mut_ptr(), 8), EGPU_MAP);
        expect(egpu_map_lookup(map, [0u8; 4].as_ptr(), 4, value.as_mut_ptr(), 4), EGPU_MAP);
        expect(egpu_map_update(map, [0u8; 4].as_ptr(), 4, value.as_ptr(), 8, 3), EGPU_BAD_ARGUMENT);
        expect(egpu_map_lookup(map, [0u8; 4].as_ptr(), 4, value.as_mut_ptr(), 8), EGPU_NOT_FOUND);
        for k in 0u32..3 {
            let status = egpu_map_update(map, k.to_le_bytes().as_ptr(), 4, value.as_ptr(), 8, 0);
            assert_eq!(status, EGPU_OK);
        }
        let mut count = 0;
        expect(egpu_map_keys(map, value.as_mut_ptr(), 8, &mut count), EGPU_BUFFER_TOO_SMALL);
        assert_eq!(count, 3);
        expect(egpu_map_drain(map, value.as_mut_ptr(), 8, &mut count), EGPU_MAP);
        egpu_map_free(map);
    }
}

#[test]
fn garbage_where_a_program_is_gets_codes_not_panics() {
    // A small generator, seeded: the same bytes every run.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let d = desc(c"host::launch", c"");
    let pack = "egpu-probes 2\nprobe p host::launch::enter\ncode b700000000000000\ncode \
                9500000000000000\nend\n";
    for round in 0..600 {
        let len = (next() % 300) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 3 == 0 && bytes.len() >= 64 {
            // An ELF header's first bytes, so that the reader looks further.
            bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        }
        let mut p = null_mut();
        let mut o = null_mut();
        // SAFETY: buffers of their lengths; out-pointers.
        unsafe {
            let s = egpu_program_from_bytecode(&d, bytes.as_ptr(), bytes.len(), &mut p);
            assert!(matches!(s, EGPU_BAD_PROGRAM | EGPU_OK), "{s:?}: {}", last());
            egpu_program_free(p);
            let s = egpu_object_from_elf(bytes.as_ptr(), bytes.len(), &mut o);
            assert!(matches!(s, EGPU_BAD_PROGRAM | EGPU_VERIFY), "{s:?}: {}", last());
            // A pack with one byte changed.
            let mut text = pack.as_bytes().to_vec();
            let at = (next() as usize) % text.len();
            text[at] = next() as u8;
            let s = egpu_object_from_pack(text.as_ptr(), text.len(), &mut o);
            assert!(matches!(s, EGPU_OK | EGPU_BAD_PROGRAM | EGPU_VERIFY), "{s:?}: {}", last());
            egpu_object_free(o);
        }
    }
    // Assembly that does not assemble, and a refused program: the line, the instruction.
    let mut p = null_mut();
    let d = desc(c"user(8)", c"");
    // SAFETY: as above.
    unsafe {
        expect(
            egpu_program_from_assembly(&d, c"mov %r0, 1\nfrob %r1".as_ptr(), &mut p),
            EGPU_BAD_PROGRAM,
        );
        let text = c"ldxdw %r0, [%r1+8]\nexit";
        assert_eq!(egpu_program_from_assembly(&d, text.as_ptr(), &mut p), EGPU_OK);
        expect(egpu_program_verify(p), EGPU_VERIFY);
        assert!(last().contains("instruction 0 `ldxdw %r0, [%r1+8]`"), "{}", last());
        let mut vm = null_mut();
        expect(egpu_vm_new(p, null(), 0, &mut vm), EGPU_VERIFY);
        egpu_program_free(p);
        let bad = desc(c"user(8)", c"counts=tree:4:8:64");
        expect(egpu_program_from_assembly(&bad, COUNT.as_ptr(), &mut p), EGPU_BAD_ARGUMENT);
        assert!(last().contains("no map kind `tree`"), "{}", last());
        let missing = c"/nonexistent/egpu-capi-test.o";
        expect(egpu_object_from_file(missing.as_ptr(), &mut null_mut()), EGPU_IO);
    }
}

#[test]
fn handles_of_the_wrong_kind_or_thread_are_refused() {
    let count = program(c"user(8)", c"counts=hash:4:8:64", COUNT);
    let map = hash_map(4, 8);
    let mut vm = null_mut();
    // SAFETY: live handles, some passed as another kind on purpose (each starts with its tag).
    unsafe {
        expect(egpu_vm_run(map.cast(), null_mut(), 0, &mut 0), EGPU_BAD_ARGUMENT);
        assert!(last().contains("is not an egpu_vm (egpu_map)"), "{}", last());
        expect(egpu_program_verify(map.cast()), EGPU_BAD_ARGUMENT);
        egpu_map_free(count.cast());
        assert!(last().contains("egpu_program"), "the program was not freed as a map");
        assert_eq!(egpu_vm_new(count, [map.cast_const()].as_ptr(), 1, &mut vm), EGPU_OK);
    }
    let address = vm as usize;
    let other = std::thread::spawn(move || {
        let vm = address as *mut egpu_vm;
        let mut ctx = [0u8; 8];
        let mut r0 = 0;
        // SAFETY: a live VM, used from another thread: what is tested.
        let status = unsafe { egpu_vm_run(vm, ctx.as_mut_ptr(), 8, &mut r0) };
        // SAFETY: as above; left allocated.
        unsafe { egpu_vm_free(vm) };
        (status, last())
    });
    let (status, message) = other.join().expect("the thread");
    assert_eq!(status, EGPU_WRONG_THREAD);
    assert!(message.contains("belongs to the thread that made it"), "{message}");
    let mut ctx = [1u8, 0, 0, 0, 5, 0, 0, 0];
    let mut r0 = 0;
    // SAFETY: the VM is alive (the other thread's free was refused); this is its thread.
    unsafe {
        assert_eq!(egpu_vm_run(vm, ctx.as_mut_ptr(), 8, &mut r0), EGPU_OK, "{}", last());
        assert_eq!(r0, 5);
        expect(egpu_vm_run(vm, ctx.as_mut_ptr(), 4, &mut r0), EGPU_RUN);
        egpu_vm_free(vm);
        egpu_map_free(map);
        egpu_program_free(count);
    }
}

#[test]
fn host_events_check_their_contexts() {
    let text = c"ldxdw %r0, [%r1+0]\nexit";
    let launch = program(c"host::launch", c"", text);
    let user = program(c"user(8)", c"", text);
    let mut probes = null_mut();
    let mut id = 0;
    let mut ctx = [0u8; 128];
    // SAFETY: live handles and buffers of their lengths.
    unsafe {
        assert_eq!(egpu_probes_new(&mut probes), EGPU_OK);
        expect(egpu_probes_attach(probes, user, null(), 0, &mut id), EGPU_LOAD);
        assert!(last().contains("not a host attach point"), "{}", last());
        assert_eq!(egpu_probes_attach(probes, launch, null(), 0, &mut id), EGPU_OK, "{}", last());
        expect(egpu_probes_fire(probes, 1, 0, ctx.as_ptr(), 80), EGPU_BAD_SIZE);
        assert!(last().contains("128 bytes"), "{}", last());
        expect(egpu_probes_fire(probes, 9, 0, ctx.as_ptr(), 128), EGPU_BAD_ARGUMENT);
        expect(egpu_probes_fire(probes, 1, 2, ctx.as_ptr(), 128), EGPU_BAD_ARGUMENT);
        assert_eq!(egpu_probes_fire(probes, 1, 0, ctx.as_ptr(), 128), EGPU_OK, "{}", last());
        // A memcpy context's tag on a launch.
        ctx[76..80].copy_from_slice(&egpu_context_tag(2).to_le_bytes());
        expect(egpu_probes_fire(probes, 1, 0, ctx.as_ptr(), 128), EGPU_BAD_ARGUMENT);
        ctx[76..80].copy_from_slice(&egpu_context_tag(1).to_le_bytes());
        assert_eq!(egpu_probes_fire(probes, 1, 0, ctx.as_ptr(), 128), EGPU_OK, "{}", last());
        assert_eq!(egpu_context_size(1), 128);
        assert_eq!((egpu_context_size(0), egpu_context_tag(6)), (0, 0));
        let mut health = egpu_probes_health { size: size_of::<egpu_probes_health>(), ..zeroed() };
        assert_eq!(egpu_probes_get_health(probes, &mut health), EGPU_OK);
        assert_eq!((health.runs, health.faults), (2, 0));
        assert_eq!(egpu_probes_detach(probes, id), EGPU_OK);
        expect(egpu_probes_detach(probes, id), EGPU_NOT_FOUND);
        // Without the preloaded library, CUDA events are not there, and say why.
        assert_eq!(egpu_cuda_available(), 0);
        expect(egpu_cuda_attach(launch, null(), 0, &mut id), EGPU_UNAVAILABLE);
        expect(egpu_cuda_flush(), EGPU_UNAVAILABLE);
        assert!(last().contains("LD_PRELOAD"), "{}", last());
        egpu_probes_free(probes);
        egpu_program_free(launch);
        egpu_program_free(user);
    }
}

fn zeroed<T: Copy>() -> T {
    // SAFETY: the structs it is used for are plain integers and nullable pointers.
    unsafe { std::mem::zeroed() }
}

#[test]
fn ptx_requests_are_checked() {
    let probe = program(c"device::kernel_entry", c"", c"mov %r0, 0\nexit");
    let host = program(c"host::launch", c"", c"mov %r0, 0\nexit");
    let ptx = c".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n";
    let mut probes = [egpu_device_probe {
        size: size_of::<egpu_device_probe>(),
        program: probe,
        maps: null(),
        map_count: 0,
    }];
    let mut request = egpu_ptx_request {
        size: size_of::<egpu_ptx_request>(),
        ptx: ptx.as_ptr(),
        probes: probes.as_ptr(),
        probe_count: 1,
        kernels: null(),
        kernel_count: 0,
    };
    let mut result = null_mut();
    // SAFETY: a valid request over live handles; the faults are what is tested.
    unsafe {
        assert_eq!(egpu_ptx_instrument(&request, &mut result), EGPU_OK, "{}", last());
        let mut site: egpu_ptx_site = zeroed();
        site.size = size_of::<egpu_ptx_site>();
        assert_eq!(egpu_ptx_result_site(result, 0, &mut site), EGPU_OK);
        assert_eq!((site.event, CStr::from_ptr(site.function).to_str()), (0, Ok("k")));
        expect(egpu_ptx_result_site(result, 1, &mut site), EGPU_NOT_FOUND);
        egpu_ptx_result_free(result);
        let kernels: [*const c_char; 1] = [c"other".as_ptr()];
        request.kernels = kernels.as_ptr();
        request.kernel_count = 1;
        expect(egpu_ptx_instrument(&request, &mut result), EGPU_NOT_FOUND);
        request.kernel_count = 0;
        request.ptx = c".version 8.0\n.address_size 32\n".as_ptr();
        expect(egpu_ptx_instrument(&request, &mut result), EGPU_PTX);
        request.ptx = ptx.as_ptr();
        probes[0].program = host;
        request.probes = probes.as_ptr();
        expect(egpu_ptx_instrument(&request, &mut result), EGPU_PTX);
        probes[0].program = probe;
        probes[0].map_count = 1;
        request.probes = probes.as_ptr();
        expect(egpu_ptx_instrument(&request, &mut result), EGPU_NULL_ARGUMENT);
        probes[0].size = 8;
        request.probes = probes.as_ptr();
        expect(egpu_ptx_instrument(&request, &mut result), EGPU_BAD_SIZE);
        egpu_program_free(probe);
        egpu_program_free(host);
    }
}

#[test]
fn global_data_starts_in_the_maps_made_for_it() {
    let code = egpu_ebpf::assemble(
        "mov %r2, 0
         stxw [%r10-4], %r2
         lddw %r1, map[0]
         mov %r2, %r10
         add %r2, -4
         call 1
         jne %r0, 0, +2
         mov %r0, 0
         exit
         ldxdw %r0, [%r0+0]
         exit",
    )
    .expect("assembles");
    let hex: String =
        egpu_ebpf::insn::slots_to_bytes(&code).iter().map(|b| format!("{b:02x}")).collect();
    let pack = format!(
        "egpu-probes 2\nprobe constant user(8)\nmap .rodata=array:4:8:1 1 0\n\
         data 2a00000000000000\ncode {hex}\nend\n"
    );
    let (mut object, mut program, mut vm, mut map) =
        (null_mut(), null_mut(), null_mut(), null_mut());
    let mut ctx = [0u8; 8];
    let (mut r0, mut value) = (0, [0u8; 8]);
    // SAFETY: buffers of their lengths, live handles, out-pointers.
    unsafe {
        let status = egpu_object_from_pack(pack.as_ptr(), pack.len(), &mut object);
        assert_eq!(status, EGPU_OK, "{}", last());
        assert_eq!(egpu_object_program(object, 0, &mut program), EGPU_OK);
        expect(egpu_object_program(object, 1, &mut program), EGPU_NOT_FOUND);
        egpu_object_free(object);
        assert_eq!(egpu_vm_new(program, null(), 0, &mut vm), EGPU_OK, "{}", last());
        assert_eq!(egpu_vm_run(vm, ctx.as_mut_ptr(), 8, &mut r0), EGPU_OK, "{}", last());
        assert_eq!(r0, 42, "the VM's own map starts with the data");
        egpu_vm_free(vm);
        assert_eq!(egpu_map_create_for(program, 0, null(), &mut map), EGPU_OK, "{}", last());
        assert_eq!(egpu_map_array_get(map, 0, value.as_mut_ptr(), 8), EGPU_OK, "{}", last());
        assert_eq!(u64::from_le_bytes(value), 42, "a map made for it too");
        egpu_map_free(map);
        egpu_program_free(program);
    }
}
