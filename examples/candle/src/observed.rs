//! candle's kernels observed in process: the modules of candle_kernels' PTX (the strings candle
//! itself loads) instrumented by egpu and loaded into candle's CUDA context through cudarc
//! ([`Instrumenter::load_cudarc`]), and [`Observed`], the model's operations as candle custom
//! ops that launch those kernels on candle's tensors, on candle's stream, with the arguments and
//! launch configurations candle's own operations give them.
//!
//! Why not candle's own dispatch: candle keeps the modules it loads in a private table indexed
//! by module (`CudaDevice::get_or_load_func`), with no way to put a module there, so a program
//! cannot hand candle an instrumented module in process. Under `egpu run` the preloaded library
//! instruments the modules when candle loads them (`cuModuleLoadData`), and candle's own
//! dispatch runs the instrumented kernels: that is the other half of the example.

use std::cell::RefCell;
use std::collections::BTreeMap;

use candle_core::backend::BackendStorage;
use candle_core::cuda::kernels;
use candle_core::{CpuStorage, CudaStorage, Layout, Result, Shape, Tensor};
use egpu::device::cudarc::driver::{CudaView, LaunchConfig};
use egpu::device::cudarc_interop::{CudaContext, ProbedCudaFunction, ProbedCudaModule, Ptx};
use egpu::device::instrument::{Instrumenter, Ran};

use crate::model::{EPS, Ops};

/// The modules of candle_kernels the model's kernels live in, with those kernels.
pub const MODULES: [(&str, &kernels::Module, &[&str]); 4] = [
    ("reduce", &kernels::REDUCE, &["layernorm_f32", "softmax_f32"]),
    ("unary", &kernels::UNARY, &["ugelu_f32"]),
    ("binary", &kernels::BINARY, &["badd_f32"]),
    ("affine", &kernels::AFFINE, &["affine_f32"]),
];

/// candle_kernels' modules, loaded through an instrumenter: the original and the instrumented
/// module of each.
pub struct Loaded<'i, 'g> {
    /// By name (`reduce`, `unary`, …).
    pub modules: Vec<(&'static str, ProbedCudaModule<'i, 'g>)>,
}

impl<'i, 'g> Loaded<'i, 'g> {
    /// Loads [`MODULES`] into `context` through `instrumenter`.
    pub fn load(
        instrumenter: &'i Instrumenter<'g>,
        context: &std::sync::Arc<CudaContext>,
    ) -> std::result::Result<Loaded<'i, 'g>, String> {
        let mut modules = Vec::new();
        for (name, module, _) in MODULES {
            let ptx = Ptx::from_src(module.ptx());
            let loaded = instrumenter
                .load_cudarc(context, &ptx)
                .map_err(|e| format!("candle_kernels' {name} module: {e}"))?;
            if let Some(why) = loaded.fallback() {
                return Err(format!("candle_kernels' {name} module runs uninstrumented: {why}"));
            }
            modules.push((name, loaded));
        }
        Ok(Loaded { modules })
    }

    fn function(&self, kernel: &str) -> Result<ProbedCudaFunction<'_>> {
        let (_, module) = self
            .modules
            .iter()
            .find(|(name, _)| MODULES.iter().any(|(n, _, ks)| n == name && ks.contains(&kernel)))
            .ok_or_else(|| candle_core::Error::msg(format!("no module holds {kernel}")))?;
        module.function(kernel).map_err(candle_core::Error::wrap)
    }
}

/// Launches of each kernel through [`Observed`], instrumented and original.
#[derive(Debug, Default)]
pub struct Launches(RefCell<BTreeMap<&'static str, [u64; 2]>>);

impl Launches {
    fn note(&self, kernel: &'static str, ran: Ran) {
        let mut counts = self.0.borrow_mut();
        let entry = counts.entry(kernel).or_default();
        entry[usize::from(ran == Ran::Original)] += 1;
    }

    /// Instrumented launches of `kernel`.
    pub fn instrumented(&self, kernel: &str) -> u64 {
        self.0.borrow().get(kernel).map_or(0, |c| c[0])
    }

    /// Launches of `kernel` that ran the original.
    pub fn original(&self, kernel: &str) -> u64 {
        self.0.borrow().get(kernel).map_or(0, |c| c[1])
    }
}

/// The model's operations launched by this program: candle_kernels' kernels, instrumented
/// unless the instrumenter is paused.
pub struct Observed<'m> {
    layernorm: ProbedCudaFunction<'m>,
    gelu: ProbedCudaFunction<'m>,
    add: ProbedCudaFunction<'m>,
    affine: ProbedCudaFunction<'m>,
    softmax: ProbedCudaFunction<'m>,
    /// What ran.
    pub launches: Launches,
}

impl<'m> Observed<'m> {
    /// The five kernels of `loaded`.
    pub fn new(loaded: &'m Loaded<'_, '_>) -> Result<Observed<'m>> {
        Ok(Observed {
            layernorm: loaded.function("layernorm_f32")?,
            gelu: loaded.function("ugelu_f32")?,
            add: loaded.function("badd_f32")?,
            affine: loaded.function("affine_f32")?,
            softmax: loaded.function("softmax_f32")?,
            launches: Launches::default(),
        })
    }
}

/// The f32 elements of a contiguous operand.
fn contiguous<'s>(s: &'s CudaStorage, l: &Layout, what: &str) -> Result<CudaView<'s, f32>> {
    let (start, end) = l.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::msg(format!("{what}: the operand must be contiguous"))
    })?;
    Ok(s.as_cuda_slice::<f32>()?.slice(start..end))
}

/// Launches `f` as `launch` adds its arguments; counts which kernel ran.
fn launch<'a>(
    f: &'a ProbedCudaFunction<'_>,
    stream: &'a egpu::device::cudarc_interop::CudaStream,
    launches: &Launches,
    kernel: &'static str,
    config: LaunchConfig,
    args: impl FnOnce(&mut egpu::device::cudarc_interop::ProbedLaunch<'a>),
) -> Result<()> {
    let mut builder = f.launch_builder(stream);
    args(&mut builder);
    let ran = builder.ran();
    // SAFETY: each caller gives the kernel the arguments of its signature in candle_kernels'
    // source, with device buffers of the sizes the kernel indexes (as candle's own op does).
    unsafe { builder.launch(config) }.map_err(candle_core::Error::wrap)?;
    launches.note(kernel, ran);
    Ok(())
}

/// A candle custom op that runs one of [`Observed`]'s kernels.
struct Op<'o, 'm> {
    ops: &'o Observed<'m>,
    what: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    Gelu,
    Affine(f32, f32),
    Softmax,
    Add,
    LayerNorm,
}

impl Op<'_, '_> {
    fn cpu_only(&self) -> Result<(CpuStorage, Shape)> {
        candle_core::bail!("the observed operations run on the GPU only")
    }

    /// `ugelu_f32` / `affine_f32`: (numel, num_dims, info = null, inp, out[, mul, add]), one
    /// thread per element in blocks of 1024, as candle's `Tensor::gelu` and `Tensor::affine`.
    fn unary(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        let dev = s.device().clone();
        let src = contiguous(s, l, "unary")?;
        let (numel, dims) = (l.shape().elem_count(), l.dims().len());
        let null = 0usize;
        // SAFETY: written whole by the kernel before anything reads it.
        let out = unsafe { dev.alloc::<f32>(numel)? };
        let stream = dev.cuda_stream();
        let config = LaunchConfig::for_num_elems(numel as u32);
        match self.what {
            Kind::Gelu => {
                launch(&self.ops.gelu, &stream, &self.ops.launches, "ugelu_f32", config, |b| {
                    b.arg(&numel).arg(&dims).arg(&null).arg(&src).arg(&out);
                })?
            }
            Kind::Affine(mul, add) => {
                let f = &self.ops.affine;
                launch(f, &stream, &self.ops.launches, "affine_f32", config, |b| {
                    b.arg(&numel).arg(&dims).arg(&null).arg(&src).arg(&out).arg(&mul).arg(&add);
                })?
            }
            _ => candle_core::bail!("not a unary op"),
        }
        Ok((CudaStorage::wrap_cuda_slice(out, dev), l.shape().clone()))
    }

    /// `softmax_f32`: (src, dst, ncols), a block of 1 × 32 threads per row, as
    /// `candle_nn::ops::softmax_last_dim`.
    fn softmax(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        let dev = s.device().clone();
        let src = contiguous(s, l, "softmax")?;
        let numel = l.shape().elem_count();
        let cols = *l.dims().last().unwrap_or(&1);
        let rows = numel / cols;
        let ncols = cols as i32;
        // SAFETY: written whole by the kernel before anything reads it.
        let dst = unsafe { dev.alloc::<f32>(numel)? };
        let stream = dev.cuda_stream();
        let config = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (1, 32, 1),
            shared_mem_bytes: 0,
        };
        // ANCHOR: softmax
        launch(&self.ops.softmax, &stream, &self.ops.launches, "softmax_f32", config, |b| {
            b.arg(&src).arg(&dst).arg(&ncols);
        })?;
        // ANCHOR_END: softmax
        Ok((CudaStorage::wrap_cuda_slice(dst, dev), l.shape().clone()))
    }
}

impl candle_core::CustomOp1 for Op<'_, '_> {
    fn name(&self) -> &'static str {
        "egpu-observed-op1"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        self.cpu_only()
    }

    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        match self.what {
            Kind::Softmax => self.softmax(s, l),
            _ => self.unary(s, l),
        }
    }
}

impl candle_core::CustomOp2 for Op<'_, '_> {
    fn name(&self) -> &'static str {
        "egpu-observed-add"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu_only()
    }

    /// `badd_f32`: (numel, num_dims, dims_and_strides = null, lhs, rhs, out), one thread per
    /// element in blocks of 1024, as candle's `Tensor::add` of two contiguous tensors.
    fn cuda_fwd(
        &self,
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        if l1.shape() != l2.shape() {
            candle_core::bail!("add: shapes {:?} and {:?} differ", l1.shape(), l2.shape());
        }
        let dev = s1.device().clone();
        let (lhs, rhs) = (contiguous(s1, l1, "add")?, contiguous(s2, l2, "add")?);
        let (numel, dims) = (l1.shape().elem_count(), l1.dims().len());
        let null = 0usize;
        // SAFETY: written whole by the kernel before anything reads it.
        let out = unsafe { dev.alloc::<f32>(numel)? };
        let stream = dev.cuda_stream();
        let config = LaunchConfig::for_num_elems(numel as u32);
        launch(&self.ops.add, &stream, &self.ops.launches, "badd_f32", config, |b| {
            b.arg(&numel).arg(&dims).arg(&null).arg(&lhs).arg(&rhs).arg(&out);
        })?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), l1.shape().clone()))
    }
}

impl candle_core::CustomOp3 for Op<'_, '_> {
    fn name(&self) -> &'static str {
        "egpu-observed-layernorm"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu_only()
    }

    /// `layernorm_f32`: (src, dst, alpha, beta, ncols, block_size, eps), a block per row of 32
    /// threads below 1024 columns, else 1024, as `candle_nn::ops::layer_norm`.
    fn cuda_fwd(
        &self,
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
        s3: &CudaStorage,
        l3: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let dev = s1.device().clone();
        let src = contiguous(s1, l1, "layer norm")?;
        let (alpha, beta) = (contiguous(s2, l2, "layer norm")?, contiguous(s3, l3, "layer norm")?);
        let numel = l1.shape().elem_count();
        let cols = *l1.dims().last().unwrap_or(&1);
        let rows = numel / cols;
        let block = if cols < 1024 { 32u32 } else { 1024 };
        let (ncols, block_size, eps) = (cols as i32, block as i32, EPS);
        // SAFETY: written whole by the kernel before anything reads it.
        let dst = unsafe { dev.alloc::<f32>(numel)? };
        let stream = dev.cuda_stream();
        let config = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        launch(&self.ops.layernorm, &stream, &self.ops.launches, "layernorm_f32", config, |b| {
            b.arg(&src).arg(&dst).arg(&alpha).arg(&beta).arg(&ncols).arg(&block_size).arg(&eps);
        })?;
        Ok((CudaStorage::wrap_cuda_slice(dst, dev), l1.shape().clone()))
    }
}

impl Ops for Observed<'_> {
    fn layer_norm(&self, x: &Tensor, gamma: &Tensor, beta: &Tensor) -> Result<Tensor> {
        x.apply_op3_no_bwd(gamma, beta, &Op { ops: self, what: Kind::LayerNorm })
    }

    fn gelu(&self, x: &Tensor) -> Result<Tensor> {
        x.apply_op1_no_bwd(&Op { ops: self, what: Kind::Gelu })
    }

    fn add(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        a.apply_op2_no_bwd(b, &Op { ops: self, what: Kind::Add })
    }

    fn affine(&self, x: &Tensor, mul: f64, add: f64) -> Result<Tensor> {
        // As candle's `Affine`: the f64 factors converted to the element type.
        x.apply_op1_no_bwd(&Op { ops: self, what: Kind::Affine(mul as f32, add as f32) })
    }

    fn softmax(&self, x: &Tensor) -> Result<Tensor> {
        x.apply_op1_no_bwd(&Op { ops: self, what: Kind::Softmax })
    }
}
