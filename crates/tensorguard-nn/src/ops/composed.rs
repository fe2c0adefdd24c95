//! The nn ops on devices whose memory the host cannot address (`cuda:N`),
//! composed of the core's ops.
//!
//! The fused kernels of this crate are host kernels (`forward_host`): they
//! run on the cpu and on `emu:N`, whose stream workers address the host.
//! On a GPU the same ops are written with the core's ops, which have device
//! kernels and their own autograd, so each result and gradient is the
//! fused kernel's within float rounding (the tests below run both on the cpu
//! and compare). It costs more launches and temporaries than a fused
//! kernel would; device kernels of their own for these ops are the next
//! step (`Function::forward_device`).
//!
//! Windows (convolution columns, pooling windows) are gathered with
//! `index_select` from the flattened input with one extra element (0 for a
//! convolution's zero padding, -inf for pooling's); the index is built on
//! the device from `arange`s, so no host data is copied per call.

use tensorguard::{Device, Result, Tensor};

/// Whether `t` lives where the host kernels cannot run: there the ops of
/// this crate are composed of the core's ops.
pub(crate) fn on_device(t: &Tensor) -> bool {
    #[cfg(test)]
    if tests::FORCED.with(std::cell::Cell::get) {
        return true;
    }
    matches!(t.device(), Device::Cuda(_))
}

/// A window geometry over planes of `h × w`: kernel, stride, padding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Windows {
    pub h: usize,
    pub w: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub ph: usize,
    pub pw: usize,
    pub oh: usize,
    pub ow: usize,
}

fn i64s(n: usize, shape: [usize; 5], dev: &Device) -> Result<Tensor> {
    Tensor::arange(0i64, n as i64, dev)?.view(shape)
}

/// The flat index into `[planes * h * w + 1]` of each window element, as
/// `[planes, kh, kw, oh, ow]`: plane `p`, kernel offset `(ki, kj)`, output
/// position `(oy, ox)`. Positions in the padding point at the extra last
/// element `planes * h * w`.
fn window_index(planes: usize, g: &Windows, dev: &Device) -> Result<Tensor> {
    let (h, w) = (g.h as i64, g.w as i64);
    let p = i64s(planes, [planes, 1, 1, 1, 1], dev)?;
    let ki = i64s(g.kh, [1, g.kh, 1, 1, 1], dev)?;
    let kj = i64s(g.kw, [1, 1, g.kw, 1, 1], dev)?;
    let oy = i64s(g.oh, [1, 1, 1, g.oh, 1], dev)?;
    let ox = i64s(g.ow, [1, 1, 1, 1, g.ow], dev)?;
    let iy = oy.mul(g.sh as i64)?.add(&ki)?.sub(g.ph as i64)?;
    let ix = ox.mul(g.sw as i64)?.add(&kj)?.sub(g.pw as i64)?;
    let flat = p.mul(h * w)?.add(&iy.mul(w)?)?.add(&ix)?;
    let pad = (planes * g.h * g.w) as i64;
    let inside = |t: &Tensor, n: i64, v: &Tensor| -> Result<Tensor> {
        let v = Tensor::where_cond(&t.ge(0i64)?, v, pad)?;
        Tensor::where_cond(&t.lt(n)?, &v, pad)
    };
    inside(&ix, w, &inside(&iy, h, &flat)?)
}

/// The windows of `x` (`[N, planes, h, w]`) as `[N, planes, kh * kw, oh * ow]`,
/// padding read as `fill`.
fn gather_windows(x: &Tensor, planes: usize, g: &Windows, fill: f64) -> Result<Tensor> {
    let n = x.shape()[0];
    let dev = x.device();
    let flat = x.reshape([n, planes * g.h * g.w])?;
    let extra = Tensor::full([n, 1], fill, x.dtype(), &dev)?;
    let flat = Tensor::cat(&[&flat, &extra], 1)?;
    let idx = window_index(planes, g, &dev)?.reshape([planes * g.kh * g.kw * g.oh * g.ow])?;
    flat.index_select(1, &idx)?
        .view([n, planes, g.kh * g.kw, g.oh * g.ow])
}

/// im2col: the convolution columns `[N, C * kh * kw, oh * ow]` of `x`
/// (`[N, C, h, w]`), zero padded.
pub(crate) fn im2col(x: &Tensor, c: usize, g: &Windows) -> Result<Tensor> {
    let n = x.shape()[0];
    gather_windows(x, c, g, 0.0)?.view([n, c * g.kh * g.kw, g.oh * g.ow])
}

/// Max pooling of `x` (`[N, C, h, w]`) to `[N, C, oh, ow]` (no padding is
/// read: the windows of `max_pool2d` lie inside the input).
pub(crate) fn max_pool2d(x: &Tensor, c: usize, g: &Windows) -> Result<Tensor> {
    let n = x.shape()[0];
    let (best, _) = gather_windows(x, c, g, f64::NEG_INFINITY)?.max_dim(2, false)?;
    best.view([n, c, g.oh, g.ow])
}

/// `y + bias` per channel of `y` (`[N, C, L]`).
pub(crate) fn channel_bias(y: &Tensor, bias: &Tensor) -> Result<Tensor> {
    let c = bias.shape()[0];
    y.add(&bias.view([1, c, 1])?)
}

/// GELU with the tanh approximation:
/// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
pub(crate) fn gelu_tanh(x: &Tensor) -> Result<Tensor> {
    const K: f64 = 0.797_884_560_802_865_4; // sqrt(2 / pi)
    let inner = x.pow(3.0)?.mul(0.044715)?.add(x)?.mul(K)?;
    x.mul(0.5)?.mul(&inner.tanh()?.add(1.0)?)
}

/// Exact GELU, `x * Phi(x)`, with the normal CDF from erf by Abramowitz and
/// Stegun's 7.1.26 (absolute error below 1.5e-7, under f32's rounding at
/// the values GELU takes).
pub(crate) fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    const P: f64 = 0.327_591_1;
    const A: [f64; 5] = [
        0.254_829_592,
        -0.284_496_736,
        1.421_413_741,
        -1.453_152_027,
        1.061_405_429,
    ];
    let z = x.abs()?.mul(std::f64::consts::FRAC_1_SQRT_2)?;
    let t = z.mul(P)?.add(1.0)?.pow(-1.0)?;
    // a1 t + a2 t^2 + ... + a5 t^5 by Horner
    let mut poly = t.mul(A[4])?;
    for a in A[..4].iter().rev() {
        poly = poly.add(*a)?.mul(&t)?;
    }
    // 1 - erf(|x| / sqrt 2)
    let tail = poly.mul(&z.mul(&z)?.neg()?.exp()?)?;
    let half_tail = tail.mul(0.5)?;
    let phi = Tensor::where_cond(&x.ge(0.0)?, &half_tail.neg()?.add(1.0)?, &half_tail)?;
    x.mul(&phi)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::ops::{bias_gelu, conv2d, gelu, max_pool2d, GeluApproximate};
    use tensorguard::DType;

    thread_local! {
        /// Makes [`on_device`] answer yes on this thread, so that the
        /// public ops take the path a GPU takes, on the cpu.
        pub(crate) static FORCED: Cell<bool> = const { Cell::new(false) };
    }

    /// `f` with the ops composed as on a GPU (see [`FORCED`]).
    pub(crate) fn composed<R>(f: impl FnOnce() -> R) -> R {
        FORCED.with(|c| c.set(true));
        let r = f();
        FORCED.with(|c| c.set(false));
        r
    }

    fn close(a: &Tensor, b: &Tensor, tol: f32, what: &str) -> Result<()> {
        let (a, b) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
        assert_eq!(a.len(), b.len(), "{what}");
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{what}[{i}]: {x} vs {y}"
            );
        }
        Ok(())
    }

    fn leaf(shape: &[usize], seed: f32) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| (i as f32 * 0.37 + seed).sin() * 2.0)
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu)?.requires_grad(true)
    }

    /// Fresh leaves with the values of `ts`, for the second run.
    fn twins(ts: &[&Tensor]) -> Result<Vec<Tensor>> {
        ts.iter().map(|t| t.detach().requires_grad(true)).collect()
    }

    /// `op` run fused and composed on the same values: equal outputs and
    /// equal gradients of every input, for an upstream gradient that is not
    /// all ones (so that the backward's weighting is checked too).
    fn fused_equals_composed(
        inputs: &[&Tensor],
        op: impl Fn(&[Tensor]) -> Result<Tensor>,
        tols: (f32, f32),
        what: &str,
    ) -> Result<()> {
        let up = |shape: &[usize]| Ok(leaf(shape, 1.9)?.detach());
        fused_equals_composed_with(inputs, op, up, tols, what)
    }

    /// [`fused_equals_composed`] with the upstream gradient `up(shape)`.
    fn fused_equals_composed_with(
        inputs: &[&Tensor],
        op: impl Fn(&[Tensor]) -> Result<Tensor>,
        up: impl Fn(&[usize]) -> Result<Tensor>,
        (tol, grad_tol): (f32, f32),
        what: &str,
    ) -> Result<()> {
        let (a, b) = (twins(inputs)?, twins(inputs)?);
        let fused = op(&a)?;
        let comp = composed(|| op(&b))?;
        close(&comp, &fused, tol, &format!("{what} forward"))?;
        let up = up(fused.shape())?;
        fused.mul(&up)?.sum()?.backward()?;
        comp.mul(&up)?.sum()?.backward()?;
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let (gx, gy) = (x.grad().expect("grad"), y.grad().expect("grad"));
            close(&gy, &gx, grad_tol, &format!("{what} grad {i}"))?;
        }
        Ok(())
    }

    /// The convolution composed as on a GPU equals the fused one, forward
    /// and backward, with stride and padding (and a 1x1 kernel, whose
    /// columns are the input itself).
    #[test]
    fn composed_conv_equals_the_fused_kernel() -> Result<()> {
        for (k, s, p) in [(3, 1, 1), (3, 2, 1), (2, 2, 0), (5, 1, 2), (1, 1, 0)] {
            let x = leaf(&[2, 3, 7, 6], 0.1)?;
            let wt = leaf(&[4, 3, k, k], 0.7)?;
            let b = leaf(&[4], 0.3)?;
            fused_equals_composed(
                &[&x, &wt, &b],
                |t| conv2d(&t[0], &t[1], Some(&t[2]), s, p),
                (1e-5, 1e-4),
                &format!("conv k {k} s {s} p {p}"),
            )?;
        }
        Ok(())
    }

    #[test]
    fn composed_pool_equals_the_fused_kernel() -> Result<()> {
        for (k, s) in [(2, 2), (3, 2), (3, 1)] {
            let x = leaf(&[2, 3, 7, 6], 0.2)?;
            let pool = |t: &[Tensor]| max_pool2d(&t[0], k, s);
            // the same window maxima, so the same gradient, exactly, for
            // `sum()`; weighted, overlapping windows add in another order
            let ones = |shape: &[usize]| Tensor::ones(shape, DType::F32, &Device::Cpu);
            fused_equals_composed_with(
                &[&x],
                pool,
                ones,
                (0.0, 0.0),
                &format!("pool k {k} s {s}"),
            )?;
            fused_equals_composed(
                &[&x],
                pool,
                (0.0, 1e-6),
                &format!("pool k {k} s {s}, weighted"),
            )?;
        }
        Ok(())
    }

    #[test]
    fn composed_gelu_equals_the_fused_kernels() -> Result<()> {
        let x = leaf(&[3, 40], 0.5)?.mul(2.5)?;
        let b = leaf(&[40], 0.9)?;
        for approx in [GeluApproximate::None, GeluApproximate::Tanh] {
            fused_equals_composed(&[&x], |t| gelu(&t[0], approx), (2e-6, 2e-5), "gelu")?;
        }
        fused_equals_composed(
            &[&x, &b],
            |t| bias_gelu(&t[0], &t[1]),
            (2e-6, 2e-5),
            "bias_gelu",
        )
    }
}
