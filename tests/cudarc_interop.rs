//! cudarc interop (`egpu::device::cudarc_interop`, feature `cudarc-interop`) and raw-handle
//! interop (`egpu::device::raw`).
//!
//! Without a GPU: the test builds egpu-preload's stand-in driver (`fake_cuda.c`) as
//! `libcuda.so.1` and runs this binary again with it on the loader path, where cudarc loads it.
//! With `FAKE_MODULES=1` each PTX module is a module of its own whose entries are its kernels;
//! a launch records its module's text and its parameters' bytes; a launch of an instrumented
//! kernel runs emulated device writers that add to element 0 of the u64 arrays in "device
//! memory" (the probes' maps), an original kernel's does not. The child prints each check and
//! then `cudarc interop: N checks ok (stand-in driver)`; every check asserts something that
//! could fail.
//!
//! On a GPU (`on_the_gpu`, skipped with the reason without one, failing under
//! `EGPU_REQUIRE_GPU=1`): saxpy loaded through cudarc, its bytes counted exactly by a Rust
//! probe and by `egpu mem`'s `counts` set, its results identical with and without the probes.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::process::Command;
use std::sync::Arc;

use egpu::device::cuda::{Arg, Gpu, Module};
use egpu::device::cudarc_interop::{CudaContext, CudaMapBuffer, LaunchConfig, Ptx, PushKernelArg};
use egpu::device::instrument::{Fallback, Instrumenter, Ran};
use egpu::device::raw::Stream;
use egpu::device::{DriverError, cuda::DeviceBuffer, cuda::Kernel};
use egpu::ebpf::{KernelCtx, MemAccessCtx, kernel_id};
use egpu::host::mem::{MemSession, Set, table};
use egpu::maps::{Array, HashMap};

/// nvcc's PTX of `tests/kernels/saxpy.cu`: `saxpy(int n, float a, const float *x, float *y)`.
const SAXPY: &str = include_str!("ptx/saxpy.ptx");

/// Threads that entered an instrumented kernel (element 0; the stand-in's writers add there).
static ENTERED: Array<u64> = Array::with_len(4);
/// Bytes read from global memory, per kernel.
static LOADED: HashMap<u64, u64> = HashMap::with_capacity(64);
/// Bytes written to global memory, per kernel.
static STORED: HashMap<u64, u64> = HashMap::with_capacity(64);

#[egpu::probe(device::kernel_entry)]
fn entered(_ctx: &KernelCtx) {
    ENTERED.fetch_add(0, 1);
}

#[egpu::probe(device::global_load)]
fn loaded(ctx: &MemAccessCtx) {
    LOADED.fetch_add(&ctx.kernel_id, ctx.size as u64);
}

#[egpu::probe(device::global_store)]
fn stored(ctx: &MemAccessCtx) {
    STORED.fetch_add(&ctx.kernel_id, ctx.size as u64);
}

const CHILD: &str = "EGPU_CUDARC_STAND_IN";

#[test]
fn cudarc_interop_through_the_stand_in_driver() {
    let dir = std::env::temp_dir().join(format!("egpu-cudarc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let driver = egpu_test_support::workspace_path("egpu-preload/tests/fixture/fake_cuda.c");
    // cudarc tries `libcuda.so` first, then `libcuda.so.1`: both are the stand-in here.
    for name in ["libcuda.so.1", "libcuda.so"] {
        let lib = dir.join(name);
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-pthread", "-o"])
            .arg(&lib)
            .arg(&driver)
            .output()
            .expect("running cc (this test needs a C compiler, as CI has)");
        assert!(out.status.success(), "cc:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "stand_in_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_LIBRARY_PATH", &dir)
        .env("FAKE_MODULES", "1")
        .env("FAKE_DEVICE_INFO", "1")
        .env("FAKE_DEVICES", "2")
        .env("FAKE_DEVICE_WRITERS", "1")
        .env("FAKE_DEVICE_ADDS", "5")
        .env_remove("EGPU_REQUIRE_GPU")
        .output()
        .expect("running the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "the child failed ({}):\n{stdout}\n{stderr}", out.status);
    let done = stdout.lines().find(|l| l.starts_with("cudarc interop: ")).expect("the last line");
    assert!(done.ends_with(" checks ok (stand-in driver)"), "{done}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The stand-in's own functions (not CUDA), found in the library cudarc loaded.
struct StandIn(*mut c_void);

unsafe extern "C" {
    fn dlopen(name: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
}

impl StandIn {
    fn open() -> StandIn {
        // SAFETY: RTLD_NOLOAD (4) | RTLD_NOW (2) only finds the library already loaded.
        let handle = unsafe { dlopen(c"libcuda.so".as_ptr(), 4 | 2) };
        assert!(!handle.is_null(), "the stand-in driver is not loaded");
        StandIn(handle)
    }

    fn symbol(&self, name: &CStr) -> *mut c_void {
        // SAFETY: the handle is the loaded library's; `name` is NUL-terminated.
        let f = unsafe { dlsym(self.0, name.as_ptr()) };
        assert!(!f.is_null(), "the stand-in has no {name:?}");
        f
    }

    fn text(&self, name: &CStr) -> String {
        // SAFETY: the stand-in's `const char *f(void)` functions.
        let f: unsafe extern "C" fn() -> *const c_char =
            unsafe { std::mem::transmute(self.symbol(name)) };
        // SAFETY: they return a NUL-terminated string that lives as long as the library.
        unsafe { CStr::from_ptr(f()) }.to_string_lossy().into_owned()
    }

    fn count(&self, name: &CStr) -> i64 {
        // SAFETY: the stand-in's `long f(void)` counters.
        let f: unsafe extern "C" fn() -> i64 = unsafe { std::mem::transmute(self.symbol(name)) };
        // SAFETY: no arguments.
        unsafe { f() }
    }

    /// The last launch's parameters, packed as the kernel declares them.
    fn params(&self) -> Vec<u8> {
        type Params = unsafe extern "C" fn(*mut u32) -> *const u8;
        // SAFETY: `const unsigned char *fake_last_params(unsigned *len)`.
        let f: Params = unsafe { std::mem::transmute(self.symbol(c"fake_last_params")) };
        let mut len = 0u32;
        // SAFETY: `len` is writable; the bytes live in the library, `len` of them.
        unsafe { std::slice::from_raw_parts(f(&mut len), len as usize).to_vec() }
    }

    /// The last `cuLaunchKernel`'s arguments: function, grid, block, shared, stream, ….
    fn last_launch(&self) -> [u64; 11] {
        // SAFETY: `const uint64_t *fake_last_launch(void)`, 11 words.
        let f: unsafe extern "C" fn() -> *const u64 =
            unsafe { std::mem::transmute(self.symbol(c"fake_last_launch")) };
        // SAFETY: 11 words in the library.
        unsafe { std::slice::from_raw_parts(f(), 11).try_into().expect("11 words") }
    }
}

/// Counts and prints the checks.
struct Checks(usize);

impl Checks {
    #[track_caller]
    fn check(&mut self, what: &str, ok: bool, found: impl std::fmt::Debug) {
        assert!(ok, "check failed: {what}: found {found:?}");
        self.0 += 1;
        println!("ok {:>2} {what}", self.0);
    }
}

/// saxpy's parameters as the driver must get them: n, a, x, y.
fn saxpy_params(n: u32, a: f32, x: u64, y: u64) -> Vec<u8> {
    [&n.to_le_bytes()[..], &a.to_le_bytes(), &x.to_le_bytes(), &y.to_le_bytes()].concat()
}

#[test]
fn stand_in_child() {
    if std::env::var_os(CHILD).is_none() {
        println!("{CHILD} is not set: run by cudarc_interop_through_the_stand_in_driver");
        return;
    }
    let mut c = Checks(0);
    let ctx = CudaContext::new(0).expect("a cudarc context on the stand-in");
    let fake = StandIn::open(); // loaded by cudarc, on first use
    let stream = ctx.default_stream();
    let gpu = Gpu::from_cudarc(&ctx).expect("a Gpu over the cudarc context");
    c.check("Gpu::from_cudarc is the cudarc context", gpu.is_context_of(&ctx), gpu.raw_context());

    // The probes' maps in cudarc slices.
    let (e, l, s) = (entered::probe(), loaded::probe(), stored::probe());
    let mut maps = Vec::new();
    let mut instrumenter = Instrumenter::new(&gpu);
    for probe in [&e, &l, &s] {
        let mut bindings = Vec::new();
        for raw in probe.maps().expect("maps") {
            let map = CudaMapBuffer::upload(&gpu, &stream, raw).expect("a map in a CudaSlice");
            bindings.push(map.binding());
            maps.push((map, raw.clone()));
        }
        instrumenter.attach(probe.verified().expect("verified"), &bindings, &[]).expect("attach");
    }
    let (entered_map, entered_raw) = &maps[0];
    let on_device = stream.clone_dtoh(entered_map.slice()).expect("the slice read by cudarc");
    // SAFETY: the host map's bytes, read while nothing writes them.
    let host = unsafe {
        let (ptr, len) = entered_raw.memory();
        std::slice::from_raw_parts(ptr.as_ptr(), len).to_vec()
    };
    c.check(
        "a map's CudaSlice holds the host map's bytes (header `egpu-map` and slots)",
        on_device == host && on_device.starts_with(b"egpu-map"),
        on_device.len(),
    );

    // Loading through cudarc, instrumented.
    let modules = fake.count(c"fake_modules");
    let module = instrumenter.load_cudarc(&ctx, &Ptx::from_src(SAXPY)).expect("load_cudarc");
    c.check("the module is instrumented", module.fallback().is_none(), module.fallback());
    c.check(
        "both modules reached the driver through cudarc",
        fake.count(c"fake_modules") == modules + 2,
        fake.count(c"fake_modules") - modules,
    );
    let injection = module.injection().expect("an injection");
    c.check(
        "the driver's last module is the instrumented PTX",
        fake.text(c"fake_last_module") == injection.ptx && injection.ptx != SAXPY,
        injection.ptx.len(),
    );
    let addresses: Vec<i64> = maps.iter().map(|(m, _)| m.binding().addr as i64).collect();
    c.check(
        "every map's device address is in the instrumented PTX",
        addresses.iter().all(|a| injection.ptx.contains(&format!(", {a};"))),
        &addresses,
    );
    let coverage = module.coverage().expect("coverage");
    c.check(
        "saxpy's three global accesses are observed",
        coverage.observed == 3 && coverage.memory_instructions == 3,
        coverage,
    );

    // A launch through the builder: the original arguments, nothing added.
    let n = 1000u32;
    let x = stream.clone_htod(&vec![1.0f32; n as usize]).expect("x");
    let mut y = stream.alloc_zeros::<f32>(n as usize).expect("y");
    let (xp, yp) = (slice_ptr(&x, &stream), slice_ptr(&y, &stream));
    let saxpy = module.function("saxpy").expect("saxpy");
    let config = LaunchConfig { grid_dim: (4, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut launch = saxpy.launch_builder(&stream);
    launch.arg(&n).arg(&2.0f32).arg(&x).arg(&mut y);
    c.check("the builder picked the instrumented kernel", launch.ran() == Ran::Instrumented, ());
    // SAFETY: saxpy's parameters, y and x of n floats.
    unsafe { launch.launch(config) }.expect("the launch");
    c.check(
        "the driver got saxpy's arguments unchanged (24 bytes: no hidden parameter)",
        fake.params() == saxpy_params(n, 2.0, xp, yp),
        fake.params(),
    );
    let last = fake.last_launch();
    c.check("grid and block as configured", last[1..7] == [4, 1, 1, 256, 1, 1], &last[1..7]);
    c.check(
        "the kernel launched is the instrumented module's",
        fake.text(c"fake_launched_module") == injection.ptx,
        (),
    );
    entered_map.download().expect("download");
    c.check(
        "maps read back after the sync (device adds seen)",
        ENTERED.get(0).ok() == Some(5),
        ENTERED.get(0),
    );
    c.check(
        "the launch counted",
        instrumenter.launched() == [("saxpy".to_owned(), 1)],
        instrumenter.launched(),
    );

    // Paused: the original kernel, the map unchanged.
    instrumenter.pause();
    let mut launch = saxpy.launch_builder(&stream);
    launch.arg(&n).arg(&2.0f32).arg(&x).arg(&mut y);
    c.check("paused, the builder picks the original", launch.ran() == Ran::Original, ());
    // SAFETY: as above.
    unsafe { launch.launch(config) }.expect("the launch");
    c.check("the original module's kernel ran", fake.text(c"fake_launched_module") == SAXPY, ());
    entered_map.download().expect("download");
    c.check("the original left the map alone", ENTERED.get(0).ok() == Some(5), ENTERED.get(0));
    instrumenter.resume();

    // cudarc's own builder on the instrumented function: runs instrumented, uncounted.
    let f = saxpy.instrumented().expect("an instrumented function");
    // SAFETY: as above.
    unsafe { stream.launch_builder(f).arg(&n).arg(&2.0f32).arg(&x).arg(&mut y).launch(config) }
        .expect("cudarc's launch");
    c.check(
        "cudarc's builder launches the instrumented kernel with the same arguments",
        fake.text(c"fake_launched_module") == injection.ptx
            && fake.params() == saxpy_params(n, 2.0, xp, yp),
        (),
    );
    c.check(
        "…and egpu does not count it",
        instrumenter.launched() == [("saxpy".to_owned(), 2)],
        instrumenter.launched(),
    );

    raw_handles(&mut c, &fake, &ctx, &gpu, &instrumenter);
    bad_input(&mut c, &ctx, &gpu, &instrumenter, entered_raw);
    mem_session(&mut c, &ctx);
    println!("cudarc interop: {} checks ok (stand-in driver)", c.0);
}

/// A cudarc slice's device address.
fn slice_ptr<T>(
    slice: &egpu::device::cudarc_interop::CudaSlice<T>,
    stream: &Arc<egpu::device::cudarc_interop::CudaStream>,
) -> u64 {
    use egpu::device::cudarc::driver::DevicePtr;
    let (ptr, _recorded) = slice.device_ptr(stream);
    ptr
}

fn raw_handles(
    c: &mut Checks,
    fake: &StandIn,
    ctx: &Arc<CudaContext>,
    gpu: &Gpu,
    instrumenter: &Instrumenter<'_>,
) {
    let null = |e: Result<(), DriverError>, handle| matches!(e, Err(DriverError::NullHandle { handle: h }) if h == handle);
    // SAFETY: null handles, refused before any use.
    unsafe {
        c.check(
            "a null CUcontext refused",
            null(Gpu::from_raw_context(std::ptr::null_mut()).map(drop), "CUcontext"),
            (),
        );
        c.check(
            "a null CUmodule refused",
            null(Module::from_raw(gpu, std::ptr::null_mut()).map(drop), "CUmodule"),
            (),
        );
        c.check(
            "a null CUfunction refused",
            null(Kernel::from_raw(std::ptr::null_mut(), "k").map(drop), "CUfunction"),
            (),
        );
        c.check(
            "a null CUdeviceptr refused",
            null(DeviceBuffer::from_raw(gpu, 0, 4).map(drop), "CUdeviceptr"),
            (),
        );
    }
    // SAFETY: cudarc's context, alive while `ctx` is (past this function).
    let raw = unsafe { Gpu::from_raw_context(ctx.cu_ctx()) }.expect("a raw context");
    c.check(
        "Gpu::from_raw_context finds the device",
        raw.ordinal() == 0 && raw.raw_context() == ctx.cu_ctx(),
        raw.ordinal(),
    );
    let injection = instrumenter.instrument_ptx(SAXPY).expect("instrument_ptx");
    c.check(
        "instrument_ptx: saxpy instrumented, not loaded",
        injection.kernels == ["saxpy"] && injection.ptx.contains("egpu"),
        &injection.kernels,
    );
    let handle = raw.load_ptx(&injection.ptx).expect("loaded").into_raw();
    {
        // SAFETY: `handle` was loaded just above in this context, and is not unloaded.
        let borrowed = unsafe { Module::from_raw(&raw, handle) }.expect("a borrowed module");
        let kernel = borrowed.kernel("saxpy").expect("saxpy");
        c.check(
            "a borrowed module's kernel",
            !kernel.as_raw().is_null() && kernel.id() == kernel_id("saxpy"),
            kernel.id(),
        );
        let other = ctx.new_stream().expect("a cudarc stream");
        // SAFETY: cudarc's stream of this context, alive while `other` is.
        let stream = unsafe { Stream::from_raw(&raw, other.cu_stream()) };
        let out = raw.alloc(16).expect("memory");
        let args = [Arg::U32(4), Arg::F32(3.0), Arg::Ptr(&out), Arg::Ptr(&out)];
        raw.launch_on(&stream, &kernel, (1, 1, 1), (32, 1, 1), &args).expect("launch_on");
        let last = fake.last_launch();
        c.check(
            "launch_on reaches the driver on the caller's stream with the arguments",
            last[8] == other.cu_stream() as u64
                && fake.params() == saxpy_params(4, 3.0, out.device_ptr(), out.device_ptr()),
            last[8],
        );
        stream.synchronize().expect("synchronize");
        let module = instrumenter.load_cudarc(ctx, &Ptx::from_src(SAXPY)).expect("load");
        let saxpy = module.function("saxpy").expect("saxpy");
        // SAFETY: cudarc's function of this context, alive while `module` is, past `from`.
        let from =
            unsafe { Kernel::from_raw(saxpy.original().cu_function(), "saxpy") }.expect("a kernel");
        c.check(
            "Kernel::from_raw takes cudarc's function",
            from.as_raw() == saxpy.original().cu_function(),
            (),
        );
        let unloads = fake.count(c"fake_unloads");
        drop(borrowed);
        let after = fake.count(c"fake_unloads") - unloads;
        c.check(
            "a borrowed module (and one handed over) is not unloaded by egpu",
            after == 0,
            after,
        );
    }
    let probed = instrumenter.load(SAXPY).expect("egpu's own load");
    let stream = Stream::default_stream(gpu);
    let out = gpu.alloc(16).expect("memory");
    let args = [Arg::U32(4), Arg::F32(3.0), Arg::Ptr(&out), Arg::Ptr(&out)];
    let ran = probed.launch_on(&stream, "saxpy", (1, 1, 1), (32, 1, 1), &args).expect("launch_on");
    c.check(
        "ProbedModule::launch_on runs instrumented on the stream",
        ran == Ran::Instrumented && fake.last_launch()[8] == 0,
        ran,
    );
}

fn bad_input(
    c: &mut Checks,
    ctx: &Arc<CudaContext>,
    gpu: &Gpu,
    instrumenter: &Instrumenter<'_>,
    raw: &egpu::maps::RawMap,
) {
    let code = |r: Result<_, egpu::device::cuda::JitError>| r.err().and_then(|e| e.error.code());
    c.check(
        "PTX with a NUL byte refused (218)",
        code(instrumenter.load_cudarc(ctx, &Ptx::from_src("a\0b")).map(drop)) == Some(218),
        (),
    );
    let missing = Ptx::from_file("/nonexistent/egpu.ptx");
    c.check(
        "an unreadable PTX file refused (301)",
        code(instrumenter.load_cudarc(ctx, &missing).map(drop)) == Some(301),
        (),
    );
    let cubin = instrumenter
        .load_cudarc(ctx, &Ptx::from_binary(b"\x7fELF\x02\x01\x01".to_vec()))
        .expect("a cubin loads as it is");
    c.check(
        "a cubin runs as it came, with why",
        matches!(cubin.fallback(), Some(Fallback::Inject(why)) if why.contains("cubin")),
        cubin.fallback(),
    );
    let module = instrumenter.load_cudarc(ctx, &Ptx::from_src(SAXPY)).expect("load");
    let missing = module.function("nope").err().and_then(|e| e.code());
    let nul = module.function("sa\0xpy").err().and_then(|e| e.code());
    c.check(
        "unknown kernels and names with NUL: CUDA_ERROR_NOT_FOUND",
        missing == Some(500) && nul == Some(500),
        (missing, nul),
    );
    let second = CudaContext::new(1).expect("a second context (FAKE_DEVICES=2)");
    c.check(
        "another context's PTX refused (201)",
        code(instrumenter.load_cudarc(&second, &Ptx::from_src(SAXPY)).map(drop)) == Some(201),
        (),
    );
    let stream = second.default_stream();
    c.check(
        "another context's stream refused for a map (201)",
        CudaMapBuffer::upload(gpu, &stream, raw).err().and_then(|e| e.code()) == Some(201),
        (),
    );
    // SAFETY: the child runs one test on one thread; the stand-in reads it at each load.
    unsafe { std::env::set_var("FAKE_REFUSE_PROBES", "1") };
    let refused = instrumenter.load_cudarc(ctx, &Ptx::from_src(SAXPY)).expect("the original loads");
    // SAFETY: as above.
    unsafe { std::env::remove_var("FAKE_REFUSE_PROBES") };
    let log = match refused.fallback() {
        Some(Fallback::Load(jit)) => jit.log,
        other => format!("{other:?}"),
    };
    c.check("a JIT refusal falls back with the JIT's log", log.contains("stand-in ptxas"), &log);
    let f = refused.function("saxpy").expect("saxpy");
    c.check(
        "…and launches the original",
        f.launch_builder(&ctx.default_stream()).ran() == Ran::Original
            && f.instrumented().is_none(),
        (),
    );
}

fn mem_session(c: &mut Checks, ctx: &Arc<CudaContext>) {
    let gpu = Gpu::from_cudarc(ctx).expect("a Gpu");
    let mem = MemSession::new(&gpu, &[Set::Counts, Set::Timing]).expect("a session");
    let module = mem.load_cudarc(ctx, &Ptx::from_src(SAXPY)).expect("load_cudarc");
    let stream = ctx.default_stream();
    let saxpy = module.function("saxpy").expect("saxpy");
    let x = stream.clone_htod(&[1.0f32; 64]).expect("x");
    let mut y = stream.alloc_zeros::<f32>(64).expect("y");
    for _ in 0..3 {
        let mut launch = saxpy.launch_builder(&stream);
        launch.arg(&64u32).arg(&2.0f32).arg(&x).arg(&mut y);
        // SAFETY: saxpy's parameters, 64 floats each.
        unsafe { launch.launch(LaunchConfig::for_num_elems(64)) }.expect("launch");
    }
    let recording = mem.recording().expect("the recording");
    let kernel = recording.kernels.iter().find(|k| k.name == "saxpy");
    c.check(
        "MemSession over cudarc: saxpy's 3 launches, instrumented",
        kernel.is_some_and(|k| k.launches == 3 && k.instrumented && k.traffic.is_some()),
        kernel,
    );
    c.check(
        "…the header from the driver, the table printed",
        recording.header.device == "Stand-in GPU"
            && recording.header.sms == 132
            && table::render(&recording).contains("saxpy"),
        &recording.header.device,
    );
}

#[test]
fn on_the_gpu() {
    let Some(info) = egpu::device::testing::require_gpu() else { return };
    let ctx = CudaContext::new(info.ordinal as usize).expect("a cudarc context");
    let stream = ctx.default_stream();
    let gpu = Gpu::from_cudarc(&ctx).expect("a Gpu");
    let (l, s) = (loaded::probe(), stored::probe());
    let mut maps = Vec::new();
    let mut instrumenter = Instrumenter::new(&gpu);
    for probe in [&l, &s] {
        let mut bindings = Vec::new();
        for raw in probe.maps().expect("maps") {
            let map = CudaMapBuffer::upload(&gpu, &stream, raw).expect("map");
            bindings.push(map.binding());
            maps.push(map);
        }
        instrumenter
            .attach(probe.verified().expect("verified"), &bindings, &["saxpy"])
            .expect("attach");
    }
    let module = instrumenter.load_cudarc(&ctx, &Ptx::from_src(SAXPY)).expect("load");
    assert!(module.fallback().is_none(), "{:?}", module.fallback());
    let saxpy = module.function("saxpy").expect("saxpy");
    let n: u32 = 1 << 22;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 10) as f32).collect();
    let x = stream.clone_htod(&xs).expect("x");
    let mut results = Vec::new();
    for instrumented in [false, true] {
        if instrumented {
            instrumenter.resume()
        } else {
            instrumenter.pause()
        }
        let mut y = stream.clone_htod(&ys).expect("y");
        let mut launch = saxpy.launch_builder(&stream);
        launch.arg(&n).arg(&2.0f32).arg(&x).arg(&mut y);
        assert_eq!(launch.ran() == Ran::Instrumented, instrumented);
        let config = LaunchConfig {
            grid_dim: (info.sm_count * 4, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: saxpy's parameters, x and y of n floats.
        unsafe { launch.launch(config) }.expect("launch");
        results.push(stream.clone_dtoh(&y).expect("y back"));
    }
    let identical = results[0] == results[1];
    for map in &maps {
        map.download().expect("download");
    }
    let id = kernel_id("saxpy");
    let (read, written) = (LOADED.get(&id).unwrap_or(0), STORED.get(&id).unwrap_or(0));
    println!(
        "cudarc saxpy over {n} floats: {read} bytes read, {written} written, results identical: {}",
        if identical { "yes" } else { "no" }
    );
    assert!(identical, "the instrumented saxpy computed something else");
    assert_eq!(read, 8 * u64::from(n), "bytes read");
    assert_eq!(written, 4 * u64::from(n), "bytes written");

    let mem = MemSession::new(&gpu, &[Set::Counts]).expect("a session");
    let module = mem.load_cudarc(&ctx, &Ptx::from_src(SAXPY)).expect("load");
    let saxpy = module.function("saxpy").expect("saxpy");
    let mut y = stream.clone_htod(&ys).expect("y");
    let mut launch = saxpy.launch_builder(&stream);
    launch.arg(&n).arg(&2.0f32).arg(&x).arg(&mut y);
    // SAFETY: as above.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.expect("launch");
    let recording = mem.recording().expect("recording");
    println!("{}", table::render(&recording));
    let k = recording.kernels.iter().find(|k| k.name == "saxpy").expect("saxpy recorded");
    let t = k.traffic.expect("counts");
    assert_eq!((k.launches, t.read(), t.written()), (1, 8 * u64::from(n), 4 * u64::from(n)));
}
