//! 2-D convolution as im2col + one matrix product: `im2col` unfolds the
//! input's windows into columns (a custom op), the core's `matmul`
//! multiplies them with the weight (its fast gemm, and its autograd for the
//! weight's gradient), and the product is already NCHW. The gradient of
//! `im2col` is `col2im` (a second custom op), which folds columns back,
//! adding where windows overlap.
//!
//! Layouts: the columns of image `n` are `[C_in * kH * kW, H_out * W_out]`
//! (row `(c * kH + i) * kW + j` holds input channel `c` shifted by the
//! kernel offset `(i, j)`), so `weight.view([C_out, C_in * kH * kW])`
//! times the columns is `[N, C_out, H_out * W_out]`, a view of the NCHW
//! output: no transpose, no copy.

use std::panic::Location;

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::{DType, Error, Result, Tensor};

use super::channel_bias::add_channel_bias;
use super::composed::{self, Windows};
use super::host::{
    arity, check_float, check_same_dtype, check_window, for_each_chunk, invalid, operands, Pair,
    Real,
};

/// The geometry of one convolution: input planes, kernel, stride, padding
/// and the output size they give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geom {
    c: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    oh: usize,
    ow: usize,
}

impl Geom {
    /// The geometry of an input `[C, H, W]`, or an error naming `op` when
    /// the kernel, stride or padding cannot be used on it.
    fn new(op: &'static str, chw: [usize; 3], k: Pair, s: Pair, p: Pair) -> Result<Geom> {
        let [c, h, w] = chw;
        check_window(op, k, s, "1 visits every position")?;
        let padded = |n: usize, p: usize| p.checked_mul(2).and_then(|p2| n.checked_add(p2));
        let (Some(hp), Some(wp)) = (padded(h, p.0), padded(w, p.1)) else {
            return Err(invalid(
                op,
                format!("the padding {p} is too large: the padded input size overflows. Use a padding below the input's size."),
            ));
        };
        if hp < k.0 || wp < k.1 {
            return Err(invalid(
                op,
                format!(
                    "the padded input is ({hp}, {wp}) (input ({h}, {w}) with padding {p}), smaller than the kernel {k}. Use a smaller kernel or more padding."
                ),
            ));
        }
        Ok(Geom {
            c,
            h,
            w,
            kh: k.0,
            kw: k.1,
            sh: s.0,
            sw: s.1,
            ph: p.0,
            pw: p.1,
            oh: (hp - k.0) / s.0 + 1,
            ow: (wp - k.1) / s.1 + 1,
        })
    }

    /// The window geometry of one plane, for the composed version.
    fn windows(&self) -> Windows {
        Windows {
            h: self.h,
            w: self.w,
            kh: self.kh,
            kw: self.kw,
            sh: self.sh,
            sw: self.sw,
            ph: self.ph,
            pw: self.pw,
            oh: self.oh,
            ow: self.ow,
        }
    }

    /// Rows of the columns of one image: `C * kH * kW`.
    fn rows(&self) -> usize {
        self.c * self.kh * self.kw
    }

    /// Columns of one image: `H_out * W_out`.
    fn cols(&self) -> usize {
        self.oh * self.ow
    }

    /// The output columns `ox` whose input column `ox * sw + kj - pw` lies
    /// inside the image, as a range.
    fn valid_ox(&self, kj: usize) -> std::ops::Range<usize> {
        let lo = if self.pw > kj {
            (self.pw - kj).div_ceil(self.sw)
        } else {
            0
        };
        let hi = if self.w + self.pw > kj {
            ((self.w + self.pw - kj - 1) / self.sw + 1).min(self.ow)
        } else {
            0
        };
        lo.min(hi)..hi
    }

    /// The input row of output row `oy` at kernel row `ki`, if inside.
    fn iy(&self, oy: usize, ki: usize) -> Option<usize> {
        (oy * self.sh + ki)
            .checked_sub(self.ph)
            .filter(|&y| y < self.h)
    }
}

/// im2col of one input plane `x` (`[H, W]`) into its `kH * kW` rows of
/// columns `out` (`[kH * kW, H_out * W_out]`).
fn im2col_plane<T: Real>(g: &Geom, x: &[T], out: &mut [T]) {
    let l = g.cols();
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            let row = &mut out[(ki * g.kw + kj) * l..][..l];
            let valid = g.valid_ox(kj);
            for oy in 0..g.oh {
                let d = &mut row[oy * g.ow..][..g.ow];
                let Some(iy) = g.iy(oy, ki) else {
                    d.fill(T::ZERO);
                    continue;
                };
                let src = &x[iy * g.w..][..g.w];
                d[..valid.start].fill(T::ZERO);
                d[valid.end..].fill(T::ZERO);
                if valid.is_empty() {
                    continue;
                }
                // the input column of output column ox is ox * sw + kj - pw
                let first = valid.start * g.sw + kj - g.pw;
                if g.sw == 1 {
                    d[valid.clone()].copy_from_slice(&src[first..][..valid.len()]);
                } else {
                    for (k, o) in d[valid.clone()].iter_mut().enumerate() {
                        *o = src[first + k * g.sw];
                    }
                }
            }
        }
    }
}

/// col2im of the `kH * kW` rows of columns `cols` of one plane into that
/// plane `out` (`[H, W]`), adding where windows overlap.
fn col2im_plane<T: Real>(g: &Geom, cols: &[T], out: &mut [T]) {
    out.fill(T::ZERO);
    let l = g.cols();
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            let row = &cols[(ki * g.kw + kj) * l..][..l];
            let valid = g.valid_ox(kj);
            if valid.is_empty() {
                continue;
            }
            let first = valid.start * g.sw + kj - g.pw;
            for oy in 0..g.oh {
                let Some(iy) = g.iy(oy, ki) else { continue };
                let src = &row[oy * g.ow..][valid.clone()];
                let dst = &mut out[iy * g.w..][..g.w];
                if g.sw == 1 {
                    for (o, &v) in dst[first..][..src.len()].iter_mut().zip(src) {
                        *o += v;
                    }
                } else {
                    for (k, &v) in src.iter().enumerate() {
                        dst[first + k * g.sw] += v;
                    }
                }
            }
        }
    }
}

fn im2col_typed<T: Real>(g: &Geom, out: &mut HostTensorMut<'_>, x: &HostTensor<'_>) -> Result<()> {
    let x = x.contiguous::<T>()?;
    let plane = g.h * g.w;
    let per = g.kh * g.kw * g.cols();
    let out = out.contiguous_mut::<T>()?;
    for_each_chunk(out, per, out.len() + x.len(), |p, o| {
        im2col_plane(g, &x[p * plane..][..plane], o)
    })?;
    Ok(())
}

fn col2im_typed<T: Real>(g: &Geom, out: &mut HostTensorMut<'_>, c: &HostTensor<'_>) -> Result<()> {
    let cols = c.contiguous::<T>()?;
    let plane = g.h * g.w;
    let per = g.kh * g.kw * g.cols();
    let out = out.contiguous_mut::<T>()?;
    for_each_chunk(out, plane, out.len() + cols.len(), |p, o| {
        col2im_plane(g, &cols[p * per..][..per], o)
    })?;
    Ok(())
}

/// The batch size of `x` for the geometry `g` (`x` is `[N, C, H, W]`).
fn check_images(op: &'static str, g: &Geom, x: &Tensor) -> Result<usize> {
    match *x.shape() {
        [n, c, h, w] if [c, h, w] == [g.c, g.h, g.w] => Ok(n),
        _ => Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: vec![g.c, g.h, g.w],
            hint: format!(
                "the input must be [N, {}, {}, {}] (the geometry the op was made for).",
                g.c, g.h, g.w
            ),
        }),
    }
}

/// `[N, C, H, W]` -> `[N, C * kH * kW, H_out * W_out]`.
struct Im2col(Geom);

impl Function for Im2col {
    fn name(&self) -> &'static str {
        "im2col"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[x] = arity(self.name(), inputs, "one input")?;
        check_float(self.name(), "input", x)?;
        let n = check_images(self.name(), &self.0, x)?;
        Ok(OutputSpec {
            shape: vec![n, self.0.rows(), self.0.cols()],
            dtype: x.dtype(),
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [x] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => im2col_typed::<f64>(&self.0, out, x),
            DType::BF16 => im2col_typed::<half::bf16>(&self.0, out, x),
            DType::F16 => im2col_typed::<half::f16>(&self.0, out, x),
            _ => im2col_typed::<f32>(&self.0, out, x),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        if !ctx.needs_input_grad(0) {
            return Ok(vec![None]);
        }
        Ok(vec![Some(Col2im(self.0).apply(&[grad])?)])
    }
}

/// `[N, C * kH * kW, H_out * W_out]` -> `[N, C, H, W]`, summing overlaps.
struct Col2im(Geom);

impl Function for Col2im {
    fn name(&self) -> &'static str {
        "col2im"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let &[c] = arity(self.name(), inputs, "one input")?;
        check_float(self.name(), "input", c)?;
        let g = &self.0;
        match *c.shape() {
            [n, r, l] if r == g.rows() && l == g.cols() => Ok(OutputSpec {
                shape: vec![n, g.c, g.h, g.w],
                dtype: c.dtype(),
            }),
            _ => Err(Error::ShapeMismatch {
                op: self.name(),
                lhs: c.shape().to_vec(),
                rhs: vec![g.rows(), g.cols()],
                hint: format!(
                    "the columns must be [N, {}, {}] (C * kH * kW rows, H_out * W_out columns).",
                    g.rows(),
                    g.cols()
                ),
            }),
        }
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        let [c] = operands(self.name(), ins)?;
        match out.dtype() {
            DType::F64 => col2im_typed::<f64>(&self.0, out, c),
            DType::BF16 => col2im_typed::<half::bf16>(&self.0, out, c),
            DType::F16 => col2im_typed::<half::f16>(&self.0, out, c),
            _ => col2im_typed::<f32>(&self.0, out, c),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        if !ctx.needs_input_grad(0) {
            return Ok(vec![None]);
        }
        // col2im is linear and im2col is its adjoint
        Ok(vec![Some(Im2col(self.0).apply(&[grad])?)])
    }
}

/// 2-D convolution over `x`, PyTorch's `F.conv2d(x, weight, bias, stride,
/// padding)` (cross-correlation, zero padding, dilation 1, groups 1).
///
/// - `x`: `[N, C_in, H, W]`, or `[C_in, H, W]` for one image (the result
///   then has no batch dimension either);
/// - `weight`: `[C_out, C_in, kH, kW]`; `bias`: `[C_out]`;
/// - `stride`, `padding`: one number for both spatial dimensions or a
///   pair (see [`Pair`]); the output is `[N, C_out, H_out, W_out]` with
///   `H_out = (H + 2 * padding - kH) / stride + 1` (likewise `W_out`).
///
/// All operands share one device and one float dtype (`f32` or `f64`).
/// The input's windows are unfolded by a custom op (`im2col`, a host
/// kernel parallel over the planes), multiplied with the weight by one
/// [`Tensor::matmul`] (the core's gemm) and viewed as NCHW; the input's
/// gradient folds the columns' gradient back (`col2im`), the weight's comes
/// from the matmul's autograd; the bias is one more custom op, whose
/// gradient is one per-channel sum. Strided inputs are copied to
/// contiguous memory first.
///
/// ```
/// use tensorguard_nn::ops::conv2d;
/// use tensorguard_nn::tensorguard::{Device, DType, Tensor};
/// # fn main() -> tensorguard_nn::tensorguard::Result<()> {
/// let x = Tensor::arange(0.0, 16.0, &Device::Cpu)?.view([1, 1, 4, 4])?.requires_grad(true)?;
/// let w = Tensor::ones([2, 1, 3, 3], DType::F32, &Device::Cpu)?.requires_grad(true)?;
/// let b = Tensor::from_vec(vec![0.0f32, 100.0], [2], &Device::Cpu)?;
/// let y = conv2d(&x, &w, Some(&b), 1, 0)?;
/// assert_eq!(y.shape(), &[1, 2, 2, 2]);
/// // the top-left window holds 0, 1, 2, 4, 5, 6, 8, 9, 10
/// assert_eq!(y.to_vec::<f32>()?, vec![45.0, 54.0, 81.0, 90.0, 145.0, 154.0, 181.0, 190.0]);
/// y.sum()?.backward()?;
/// assert_eq!(x.grad().unwrap().shape(), &[1, 1, 4, 4]);
/// assert_eq!(w.grad().unwrap().to_vec::<f32>()?[0], 0.0 + 1.0 + 4.0 + 5.0);
/// # Ok(()) }
/// ```
#[track_caller]
pub fn conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: impl Into<Pair>,
    padding: impl Into<Pair>,
) -> Result<Tensor> {
    const OP: &str = "conv2d";
    let (stride, padding) = (stride.into(), padding.into());
    // conv is on autocast's lower-precision list: inside an autocast
    // region its floating operands are cast first (recorded casts, so f32
    // parameters get f32 gradients), and the columns, the matmul and the
    // output are in the 16-bit dtype
    if tensorguard::autocast::is_autocast_enabled() {
        let d = tensorguard::autocast::autocast_dtype();
        let needs = |t: &Tensor| matches!(t.dtype(), DType::F32) && t.dtype() != d;
        if needs(x) || needs(weight) || bias.is_some_and(needs) {
            let cast = |t: &Tensor| {
                if needs(t) {
                    t.to_dtype(d)
                } else {
                    Ok(t.alias())
                }
            };
            let (xc, wc) = (cast(x)?, cast(weight)?);
            let bc = bias.map(cast).transpose()?;
            return conv2d(&xc, &wc, bc.as_ref(), stride, padding);
        }
    }
    if x.ndim() == 3 {
        let y = conv2d(&x.unsqueeze(0)?, weight, bias, stride, padding)?;
        return y.squeeze_dim(0);
    }
    let site = Location::caller();
    for (arg, t) in std::iter::once(("weight", weight)).chain(bias.map(|b| ("bias", b))) {
        if t.device() != x.device() {
            return Err(Error::DeviceMismatch {
                op: OP,
                arg,
                expected: x.device(),
                found: t.device(),
                location: site,
            });
        }
    }
    check_float(OP, "input", x)?;
    check_same_dtype(OP, "weight", weight, "input", x)?;
    let &[n, c, h, w] = x.shape() else {
        return Err(invalid(
            OP,
            format!(
                "the input must be [N, C_in, H, W] (or [C_in, H, W] for one image), got shape {:?}. Add the missing dimensions with `unsqueeze`.",
                x.shape()
            ),
        ));
    };
    let &[c_out, c_in, kh, kw] = weight.shape() else {
        return Err(invalid(
            OP,
            format!(
                "the weight must be [C_out, C_in, kH, kW], got shape {:?}.",
                weight.shape()
            ),
        ));
    };
    if c_in != c {
        return Err(Error::ShapeMismatch {
            op: OP,
            lhs: x.shape().to_vec(),
            rhs: weight.shape().to_vec(),
            hint: format!(
                "the input has {c} channels but the weight expects {c_in} (its dimension 1). Give the input [N, {c_in}, H, W] or a weight [C_out, {c}, kH, kW]."
            ),
        });
    }
    if let Some(b) = bias {
        check_same_dtype(OP, "bias", b, "input", x)?;
        if b.shape() != [c_out] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: weight.shape().to_vec(),
                rhs: b.shape().to_vec(),
                hint: format!("the bias must be [{c_out}], one value per output channel."),
            });
        }
    }
    let g = Geom::new(OP, [c, h, w], Pair(kh, kw), stride, padding)?;
    let on_device = composed::on_device(x);
    let cols = if (kh, kw, g.sh, g.sw, g.ph, g.pw) == (1, 1, 1, 1, 0, 0) {
        // a 1x1 convolution's columns are the input itself
        x.reshape([n, c, h * w])?
    } else if on_device {
        composed::im2col(x, c, &g.windows())?
    } else {
        Im2col(g).apply(&[x])?
    };
    let w2 = weight.reshape([c_out, c * kh * kw])?;
    let y = w2.matmul(&cols)?;
    let y = match bias {
        Some(b) if on_device => composed::channel_bias(&y, b)?,
        Some(b) => add_channel_bias(&y, b)?,
        None => y,
    };
    y.view([n, c_out, g.oh, g.ow])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_columns_cover_exactly_the_inside_of_the_image() {
        for (w, k, s, p) in [(5, 3, 1, 1), (6, 3, 2, 1), (4, 4, 3, 2), (7, 2, 2, 0)] {
            let g = Geom::new("t", [1, w, w], Pair(k, k), Pair(s, s), Pair(p, p)).unwrap();
            for kj in 0..k {
                let want: Vec<usize> = (0..g.ow)
                    .filter(|ox| {
                        let ix = (ox * s + kj) as isize - p as isize;
                        (0..w as isize).contains(&ix)
                    })
                    .collect();
                let got: Vec<usize> = g.valid_ox(kj).collect();
                assert_eq!(got, want, "w {w} k {k} s {s} p {p} kj {kj}");
            }
        }
    }
}
