//! 2-D max pooling, forward and backward as one custom op each. The
//! forward writes the maxima only; the backward finds each window's argmax
//! again from the saved input (the same scan, with PyTorch's tie and NaN
//! rules) and adds the gradient there, so no index tensor is kept between
//! the passes.

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

use super::host::{
    arity, check_float, check_same_dtype, check_window, for_each_chunk, invalid,
    no_double_backward, operands, Pair, Real,
};

/// The geometry of one pooling: the input plane, the window and the step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geom {
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    oh: usize,
    ow: usize,
}

impl Geom {
    fn new(op: &'static str, h: usize, w: usize, k: Pair, s: Pair) -> Result<Geom> {
        check_window(op, k, s, "the usual stride is the kernel size")?;
        if h < k.0 || w < k.1 {
            return Err(invalid(
                op,
                format!("the input plane ({h}, {w}) is smaller than the window {k}, so there is no output position. Use a smaller kernel."),
            ));
        }
        Ok(Geom {
            h,
            w,
            kh: k.0,
            kw: k.1,
            sh: s.0,
            sw: s.1,
            oh: (h - k.0) / s.0 + 1,
            ow: (w - k.1) / s.1 + 1,
        })
    }

    /// The maxima of output row `oy` of plane `x` into `best` (one value
    /// per output column), with PyTorch's rule: each window is scanned in
    /// row-major order from `-inf`, and a value replaces the maximum when
    /// `val > max || isnan(val)`, so the first of equal maxima wins and a
    /// NaN is the maximum (the last NaN, for its position). The loops run
    /// over the output columns innermost (same scan order per window), so
    /// the bounds checks stay out of the per-element work.
    ///
    /// The 2x2 window with stride 2 (every CNN's pooling) has its own loop
    /// over pairs of columns, which the compiler turns into vector code:
    /// Note [Pooling loops].
    #[inline]
    fn row_max<T: Real>(&self, x: &[T], oy: usize, best: &mut [T]) {
        if self.is_2x2() {
            let windows = self.windows_2x2(x, oy, best.len());
            for (b, window) in best.iter_mut().zip(windows) {
                *b = window.into_iter().fold(T::NEG_INFINITY, take_max);
            }
            return;
        }
        best.fill(T::NEG_INFINITY);
        for ki in 0..self.kh {
            let row = &x[(oy * self.sh + ki) * self.w..][..self.w];
            for kj in 0..self.kw {
                // the window's column kj of each output column, in order
                let column = row[kj..].iter().step_by(self.sw);
                for (b, &v) in best.iter_mut().zip(column) {
                    *b = take_max(*b, v);
                }
            }
        }
    }

    /// A 2x2 window with stride 2.
    fn is_2x2(&self) -> bool {
        (self.kh, self.kw, self.sh, self.sw) == (2, 2, 2, 2)
    }

    /// The first `n` 2x2 windows (stride 2) of output row `oy`, each as
    /// its elements in scan order: at offsets 0, 1, `w` and `w + 1` from
    /// the window's first element.
    #[inline]
    fn windows_2x2<'a, T: Real>(
        &self,
        x: &'a [T],
        oy: usize,
        n: usize,
    ) -> impl Iterator<Item = [T; 4]> + 'a {
        let at = 2 * oy * self.w;
        let r0 = &x[at..][..2 * n];
        let r1 = &x[at + self.w..][..2 * n];
        r0.chunks_exact(2)
            .zip(r1.chunks_exact(2))
            .map(|(p, q)| [p[0], p[1], q[0], q[1]])
    }

    /// As [`row_max`](Geom::row_max), with each maximum's index in the
    /// plane (the window's first element when all are -inf).
    #[inline]
    fn row_argmax<T: Real>(&self, x: &[T], oy: usize, best: &mut [(T, usize)]) {
        if self.is_2x2() {
            let offsets = [0, 1, self.w, self.w + 1];
            let windows = self.windows_2x2(x, oy, best.len());
            for (ox, (b, window)) in best.iter_mut().zip(windows).enumerate() {
                let mut m = (T::NEG_INFINITY, 0);
                for (v, off) in window.into_iter().zip(offsets) {
                    if takes_over(m.0, v) {
                        m = (v, off);
                    }
                }
                *b = (m.0, 2 * oy * self.w + 2 * ox + m.1);
            }
            return;
        }
        let y0 = oy * self.sh;
        for (ox, b) in best.iter_mut().enumerate() {
            *b = (T::NEG_INFINITY, y0 * self.w + ox * self.sw);
        }
        for ki in 0..self.kh {
            let start = (y0 + ki) * self.w;
            let row = &x[start..][..self.w];
            for kj in 0..self.kw {
                let column = row[kj..].iter().step_by(self.sw);
                for (ox, (b, &v)) in best.iter_mut().zip(column).enumerate() {
                    if takes_over(b.0, v) {
                        *b = (v, start + kj + ox * self.sw);
                    }
                }
            }
        }
    }
}

// Note [Pooling loops]
// ~~~~~~~~~~~~~~~~~~~~~
// Indexing the window's elements as `row[ox * stride]` left a bounds check
// on every element and kept the scan scalar: `max_pool2d` of a
// `[64, 16, 28, 28]` f32 input took 1.8-2.3 ms, 15 times a `relu` of the
// same input, and 21% of the op time of a CNN epoch (`tensorguard train
// --dataset fashion-mnist --model cnn --limit 4000 --profile`, on a busy
// machine). Now 0.13-0.18 ms (old and new builds alternated), as long as
// the `relu`, and 5% of the epoch's op time. The general loops now
// walk each window column with `step_by` (no index), and the 2x2 window
// with stride 2 reads pairs of columns (`chunks_exact(2)` of two rows) and
// keeps the running maximum with a select, which vectorises. The scan
// order and PyTorch's rule (`val > max || isnan(val)`, from `-inf`) are
// unchanged, so are ties, NaNs and the argmax the backward recomputes.

/// Whether `v` replaces the running maximum `m` (PyTorch's rule: a larger
/// value or a NaN; the first of equal maxima stays).
#[inline(always)]
fn takes_over<T: Real>(m: T, v: T) -> bool {
    v > m || v.is_nan()
}

/// The running maximum after `v` ([`takes_over`]).
#[inline(always)]
fn take_max<T: Real>(m: T, v: T) -> T {
    if takes_over(m, v) {
        v
    } else {
        m
    }
}

fn forward_typed<T: Real>(g: &Geom, out: &mut HostTensorMut<'_>, x: &HostTensor<'_>) -> Result<()> {
    let x = x.contiguous::<T>()?;
    let (plane, per) = (g.h * g.w, g.oh * g.ow);
    let out = out.contiguous_mut::<T>()?;
    for_each_chunk(out, per, x.len(), |p, o| {
        let x = &x[p * plane..][..plane];
        for (oy, row) in o.chunks_exact_mut(g.ow).enumerate() {
            g.row_max(x, oy, row);
        }
    })?;
    Ok(())
}

fn backward_typed<T: Real>(
    g: &Geom,
    out: &mut HostTensorMut<'_>,
    grad: &HostTensor<'_>,
    x: &HostTensor<'_>,
) -> Result<()> {
    let (grad, x) = (grad.contiguous::<T>()?, x.contiguous::<T>()?);
    let (plane, per) = (g.h * g.w, g.oh * g.ow);
    let out = out.contiguous_mut::<T>()?;
    for_each_chunk(out, plane, 2 * x.len(), |p, o| {
        o.fill(T::ZERO);
        let (x, grad) = (&x[p * plane..][..plane], &grad[p * per..][..per]);
        let mut best = vec![(T::ZERO, 0); g.ow];
        for (oy, grad) in grad.chunks_exact(g.ow).enumerate() {
            g.row_argmax(x, oy, &mut best);
            for (&(_, at), &gv) in best.iter().zip(grad) {
                o[at] += gv;
            }
        }
    })?;
    Ok(())
}

/// `[N, C, H, W]` -> `[N, C, H_out, W_out]`, the maxima.
struct MaxPool2d(Geom);

/// `(grad [N, C, H_out, W_out], x [N, C, H, W])` -> the input's gradient.
struct MaxPool2dGrad(Geom);

fn plane_shape(op: &'static str, g: &Geom, x: &Tensor) -> Result<(usize, usize)> {
    match *x.shape() {
        [n, c, h, w] if (h, w) == (g.h, g.w) => Ok((n, c)),
        _ => Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: vec![g.h, g.w],
            hint: format!(
                "the input must be [N, C, {}, {}] (the geometry the op was made for).",
                g.h, g.w
            ),
        }),
    }
}

impl Function for MaxPool2d {
    fn name(&self) -> &'static str {
        "max_pool2d"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[x] = arity(self.name(), inputs, "one input")?;
        check_float(self.name(), "input", x)?;
        let (n, c) = plane_shape(self.name(), &self.0, x)?;
        Ok(OutputSpec {
            shape: vec![n, c, self.0.oh, self.0.ow],
            dtype: x.dtype(),
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [x] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => forward_typed::<f64>(&self.0, out, x),
            DType::BF16 => forward_typed::<half::bf16>(&self.0, out, x),
            DType::F16 => forward_typed::<half::f16>(&self.0, out, x),
            _ => forward_typed::<f32>(&self.0, out, x),
        }
    }
    fn setup_context(&self, ctx: &mut FunctionCtx, inputs: &[&Tensor], _: &Tensor) -> Result<()> {
        ctx.save_for_backward(inputs);
        Ok(())
    }
    fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        if !ctx.needs_input_grad(0) {
            return Ok(vec![None]);
        }
        let saved = ctx.saved()?;
        let [x] = saved.as_slice() else {
            return Err(Error::Autograd {
                message: format!(
                    "{}: expected the input to be saved, found {} tensors.",
                    ctx.node_name(),
                    saved.len()
                ),
            });
        };
        let grad = if grad.dtype() != x.dtype() {
            grad.to_dtype(x.dtype())?
        } else {
            grad.alias()
        };
        Ok(vec![Some(MaxPool2dGrad(self.0).apply(&[&grad, x])?)])
    }
}

impl Function for MaxPool2dGrad {
    fn name(&self) -> &'static str {
        "max_pool2d_backward"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[grad, x] = arity(self.name(), inputs, "the gradient and the input")?;
        check_float(self.name(), "input", x)?;
        check_same_dtype(self.name(), "gradient", grad, "input", x)?;
        let (n, c) = plane_shape(self.name(), &self.0, x)?;
        if grad.shape() != [n, c, self.0.oh, self.0.ow] {
            return Err(Error::ShapeMismatch {
                op: self.name(),
                lhs: x.shape().to_vec(),
                rhs: grad.shape().to_vec(),
                hint: format!(
                    "the gradient must have the output's shape [{n}, {c}, {}, {}].",
                    self.0.oh, self.0.ow
                ),
            });
        }
        Ok(OutputSpec {
            shape: x.shape().to_vec(),
            dtype: x.dtype(),
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [grad, x] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => backward_typed::<f64>(&self.0, out, grad, x),
            DType::BF16 => backward_typed::<half::bf16>(&self.0, out, grad, x),
            DType::F16 => backward_typed::<half::f16>(&self.0, out, grad, x),
            _ => backward_typed::<f32>(&self.0, out, grad, x),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(no_double_backward(ctx.node_name(), "max_pool2d"))
    }
}

/// 2-D max pooling, PyTorch's `F.max_pool2d(x, kernel_size, stride)` (no
/// padding, dilation 1, `ceil_mode=False`): each output is the maximum of
/// its `kH x kW` window, windows `stride` apart.
///
/// `x` is `[N, C, H, W]` (or `[C, H, W]`), `f32` or `f64`; the output is
/// `[N, C, (H - kH) / sH + 1, (W - kW) / sW + 1]`. `kernel_size` and
/// `stride` are one number or a pair ([`Pair`]); PyTorch's usual stride is
/// the kernel size (`nn::MaxPool2d`'s default). As PyTorch, a NaN in a
/// window is its maximum, and the gradient goes to the window's first
/// maximum (its last NaN); overlapping windows add their gradients. The
/// backward is one kernel that recomputes the argmax from the saved input.
///
/// ```
/// use tensorguard_nn::ops::max_pool2d;
/// use tensorguard_nn::tensorguard::{Device, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let x = Tensor::arange(0.0, 16.0, &Device::Cpu)?.view([1, 1, 4, 4])?.requires_grad(true)?;
/// let y = max_pool2d(&x, 2, 2)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
/// y.sum()?.backward()?;
/// let g = x.grad().unwrap().to_vec::<f32>()?;
/// assert_eq!((g[5], g[7], g[13], g[15], g[0]), (1.0, 1.0, 1.0, 1.0, 0.0));
/// # Ok(()) }
/// ```
#[track_caller]
pub fn max_pool2d(
    x: &Tensor,
    kernel_size: impl Into<Pair>,
    stride: impl Into<Pair>,
) -> Result<Tensor> {
    const OP: &str = "max_pool2d";
    let (k, s) = (kernel_size.into(), stride.into());
    if x.ndim() == 3 {
        return max_pool2d(&x.unsqueeze(0)?, k, s)?.squeeze_dim(0);
    }
    let &[_, c, h, w] = x.shape() else {
        return Err(invalid(
            OP,
            format!(
                "the input must be [N, C, H, W] (or [C, H, W]), got shape {:?}.",
                x.shape()
            ),
        ));
    };
    check_float(OP, "input", x)?;
    let g = Geom::new(OP, h, w, k, s)?;
    if super::composed::on_device(x) {
        let windows = super::composed::Windows {
            h,
            w,
            kh: g.kh,
            kw: g.kw,
            sh: g.sh,
            sw: g.sw,
            ph: 0,
            pw: 0,
            oh: g.oh,
            ow: g.ow,
        };
        return super::composed::max_pool2d(x, c, &windows);
    }
    MaxPool2d(g).apply(&[x])
}
