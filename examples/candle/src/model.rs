//! The model: a stack of MLP blocks with a softmax head, in f32, with random weights drawn from
//! a fixed seed (nothing is downloaded), and the traffic each of candle's kernels must have in
//! one forward pass, worked out from the shapes and the kernels' CUDA source.
//!
//! One forward pass over `x` (`rows × width`):
//!
//! ```text
//! for each layer:  h = layer_norm(x; γ, β)      candle-nn's `layernorm_f32`   (candle_kernels::REDUCE)
//!                  u = h · Wupᵀ                  cuBLAS (no PTX: not instrumentable)
//!                  g = gelu(u)                   `ugelu_f32`                    (UNARY)
//!                  v = g · Wdownᵀ                cuBLAS
//!                  x = x + v                     `badd_f32`                     (BINARY)
//! z = x · Wheadᵀ                                 cuBLAS
//! p = softmax(z / τ)                             `affine_f32` (AFFINE), then candle-nn's `softmax_f32` (REDUCE)
//! ```
//!
//! Every operand of the five kernels is contiguous, so candle passes them no strides (a null
//! `info` pointer) and the elementwise kernels take their one-element-per-thread branch: what
//! they read and write is the elements and nothing else.

use candle_core::{DType, Device, Result, Tensor};

/// The sizes of the model and of its input.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Rows of the input (tokens).
    pub rows: usize,
    /// Width of the residual stream.
    pub width: usize,
    /// Width of each MLP's hidden layer.
    pub hidden: usize,
    /// Outputs of the head (classes).
    pub classes: usize,
    /// MLP blocks.
    pub layers: usize,
}

/// The model the example runs: GPT-2-small-like widths, two blocks.
pub const SHAPE: Shape = Shape { rows: 512, width: 768, hidden: 3072, classes: 1024, layers: 2 };

/// The layer norm's epsilon.
pub const EPS: f32 = 1e-5;
/// The softmax temperature τ (the head's logits are multiplied by 1/τ by `affine_f32`).
pub const TEMPERATURE: f64 = 2.0;

/// The operations of the forward pass that run candle's own PTX kernels; matrix products are
/// candle's `matmul` (cuBLAS) everywhere. [`CandleOps`] is candle's own dispatch;
/// `observed::Observed` launches the same kernels of the same PTX itself.
pub trait Ops {
    /// `candle_nn::ops::layer_norm`.
    fn layer_norm(&self, x: &Tensor, gamma: &Tensor, beta: &Tensor) -> Result<Tensor>;
    /// `Tensor::gelu` (the tanh approximation).
    fn gelu(&self, x: &Tensor) -> Result<Tensor>;
    /// `Tensor::add` of two tensors of one shape.
    fn add(&self, a: &Tensor, b: &Tensor) -> Result<Tensor>;
    /// `Tensor::affine`: `x * mul + add`.
    fn affine(&self, x: &Tensor, mul: f64, add: f64) -> Result<Tensor>;
    /// `candle_nn::ops::softmax_last_dim`.
    fn softmax(&self, x: &Tensor) -> Result<Tensor>;
}

/// candle's own operations: candle picks, loads and launches the kernels.
pub struct CandleOps;

impl Ops for CandleOps {
    fn layer_norm(&self, x: &Tensor, gamma: &Tensor, beta: &Tensor) -> Result<Tensor> {
        candle_nn::ops::layer_norm(x, gamma, beta, EPS)
    }

    fn gelu(&self, x: &Tensor) -> Result<Tensor> {
        x.gelu()
    }

    fn add(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        a.add(b)
    }

    fn affine(&self, x: &Tensor, mul: f64, add: f64) -> Result<Tensor> {
        x.affine(mul, add)
    }

    fn softmax(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::softmax_last_dim(x)
    }
}

/// One MLP block's weights.
struct Block {
    gamma: Tensor,
    beta: Tensor,
    /// `hidden × width`.
    up: Tensor,
    /// `width × hidden`.
    down: Tensor,
}

/// The model's weights, on one device.
pub struct Model {
    blocks: Vec<Block>,
    /// `classes × width`.
    head: Tensor,
}

/// SplitMix64: the weights' generator, so that every run (and every process) has the same model.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `n` floats uniform in `[centre - spread, centre + spread)`.
    fn floats(&mut self, n: usize, centre: f32, spread: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let unit = (self.next() >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                centre + spread * (2.0 * unit - 1.0)
            })
            .collect()
    }
}

impl Model {
    /// The model of `shape` with weights drawn from `seed` (uniform, scaled by 1/√fan-in as a
    /// linear layer's initialisation is), and an input of `shape.rows` rows, on `device`.
    pub fn random(shape: &Shape, seed: u64, device: &Device) -> Result<(Model, Tensor)> {
        let mut rng = SplitMix(seed);
        let mut tensor = |n: usize, dims: &[usize], centre: f32, spread: f32| {
            Tensor::from_vec(rng.floats(n, centre, spread), dims, device)
        };
        let (w, h) = (shape.width, shape.hidden);
        let mut blocks = Vec::new();
        for _ in 0..shape.layers {
            blocks.push(Block {
                gamma: tensor(w, &[w], 1.0, 0.1)?,
                beta: tensor(w, &[w], 0.0, 0.1)?,
                up: tensor(h * w, &[h, w], 0.0, 1.0 / (w as f32).sqrt())?,
                down: tensor(w * h, &[w, h], 0.0, 1.0 / (h as f32).sqrt())?,
            });
        }
        let head = tensor(shape.classes * w, &[shape.classes, w], 0.0, 1.0 / (w as f32).sqrt())?;
        let x = tensor(shape.rows * w, &[shape.rows, w], 0.0, 1.0)?;
        Ok((Model { blocks, head }, x))
    }

    /// One forward pass: the head's probabilities, `rows × classes`.
    pub fn forward(&self, ops: &dyn Ops, x: &Tensor) -> Result<Tensor> {
        let mut x = x.clone();
        for b in &self.blocks {
            let h = ops.layer_norm(&x, &b.gamma, &b.beta)?;
            let u = h.matmul(&b.up.t()?)?;
            let g = ops.gelu(&u)?;
            let v = g.matmul(&b.down.t()?)?;
            x = ops.add(&x, &v)?;
        }
        let z = x.matmul(&self.head.t()?)?;
        let s = ops.affine(&z, 1.0 / TEMPERATURE, 0.0)?;
        ops.softmax(&s)
    }
}

/// A tensor's bits, and their FNV-1a hash: what "results identical" compares, within a
/// process (the bits) and across processes (the digest).
pub fn bits(t: &Tensor) -> Result<(Vec<u32>, u64)> {
    let values = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let bits: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in &bits {
        for byte in b.to_le_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    Ok((bits, h))
}

/// What one of candle's kernels must do in one forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The kernel's name in candle_kernels' PTX.
    pub kernel: &'static str,
    /// Its launches.
    pub launches: u64,
    /// Threads launched (grid × block, over the launches): each enters the kernel once.
    pub threads: u64,
    /// Bytes read from global memory.
    pub loaded: u64,
    /// Bytes written to global memory.
    pub stored: u64,
}

impl Expected {
    /// The same kernel over `steps` forward passes.
    pub fn times(self, steps: u64) -> Expected {
        Expected {
            launches: self.launches * steps,
            threads: self.threads * steps,
            loaded: self.loaded * steps,
            stored: self.stored * steps,
            ..self
        }
    }
}

/// The kernels the probes are attached to, in the order of the forward pass.
pub const KERNELS: [&str; 5] =
    ["layernorm_f32", "ugelu_f32", "badd_f32", "affine_f32", "softmax_f32"];

/// Threads of `LaunchConfig::for_num_elems(n)`, candle's configuration for elementwise kernels:
/// blocks of 1024 threads, enough of them to cover `n`.
fn elementwise_threads(n: u64) -> u64 {
    n.div_ceil(1024) * 1024
}

/// The traffic of one forward pass, per kernel, from the shapes (f32: 4 bytes an element):
///
/// - `layernorm_f32` (one block of 32 threads per row below 1024 columns, else 1024): its first
///   loop reads the row's `x` for the mean and variance, its second reads `γ`, `β` and `x` again
///   and writes the row: 4 × width reads and width writes per row.
/// - `ugelu_f32`, `affine_f32`: one read and one write per element (`inp` is not null).
/// - `badd_f32`: two reads and one write per element.
/// - `softmax_f32` (one block of 1 × 32 threads per row): a pass reading `x` for the maximum, a
///   pass reading `x` and writing the exponentials to `dst`, a pass reading and writing `dst`
///   (`dst[i] *= 1 / sum`): 3 × classes reads and 2 × classes writes per row.
pub fn per_step(s: &Shape) -> Vec<Expected> {
    let f = 4u64;
    let (rows, width, hidden, classes, layers) =
        (s.rows as u64, s.width as u64, s.hidden as u64, s.classes as u64, s.layers as u64);
    let norm_block = if width < 1024 { 32 } else { 1024 };
    let (residual, inner, logits) = (rows * width, rows * hidden, rows * classes);
    vec![
        Expected {
            kernel: "layernorm_f32",
            launches: layers,
            threads: layers * rows * norm_block,
            loaded: layers * rows * 4 * width * f,
            stored: layers * residual * f,
        },
        Expected {
            kernel: "ugelu_f32",
            launches: layers,
            threads: layers * elementwise_threads(inner),
            loaded: layers * inner * f,
            stored: layers * inner * f,
        },
        Expected {
            kernel: "badd_f32",
            launches: layers,
            threads: layers * elementwise_threads(residual),
            loaded: layers * 2 * residual * f,
            stored: layers * residual * f,
        },
        Expected {
            kernel: "affine_f32",
            launches: 1,
            threads: elementwise_threads(logits),
            loaded: logits * f,
            stored: logits * f,
        },
        Expected {
            kernel: "softmax_f32",
            launches: 1,
            threads: rows * 32,
            loaded: 3 * logits * f,
            stored: 2 * logits * f,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_follow_the_shapes() {
        let s = Shape { rows: 2, width: 3, hidden: 5, classes: 7, layers: 1 };
        let e = per_step(&s);
        assert_eq!(e.iter().map(|e| e.kernel).collect::<Vec<_>>(), KERNELS);
        // Layer norm: 2 rows × (x twice, γ, β) × 3 columns × 4 bytes; 2 × 3 written.
        assert_eq!((e[0].loaded, e[0].stored, e[0].threads), (96, 24, 64));
        // gelu over 10 elements: one block of 1024 threads.
        assert_eq!((e[1].loaded, e[1].stored, e[1].threads), (40, 40, 1024));
        assert_eq!((e[2].loaded, e[2].stored), (48, 24));
        assert_eq!((e[3].loaded, e[3].stored), (56, 56));
        assert_eq!((e[4].loaded, e[4].stored, e[4].threads), (168, 112, 64));
        assert_eq!(e[4].times(3).loaded, 504);
        let wide = per_step(&Shape { width: 1024, ..s });
        assert_eq!(wide[0].threads, 2 * 1024);
    }

    #[test]
    fn the_model_is_the_same_every_time() -> Result<()> {
        let s = Shape { rows: 4, width: 8, hidden: 16, classes: 6, layers: 2 };
        let (a, x) = Model::random(&s, 7, &Device::Cpu)?;
        let (b, y) = Model::random(&s, 7, &Device::Cpu)?;
        let (pa, pb) = (a.forward(&CandleOps, &x)?, b.forward(&CandleOps, &y)?);
        assert_eq!(bits(&pa)?, bits(&pb)?);
        // Each row of the head is a distribution.
        let sums = pa.sum(1)?.to_vec1::<f32>()?;
        assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5), "{sums:?}");
        Ok(())
    }
}
