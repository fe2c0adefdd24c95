//! Multi-tensor optimizer updates as one custom op each (PyTorch's
//! `foreach`/`fused` Adam and SGD): one kernel reads every parameter, its
//! gradient and its state once and writes the new parameters and the new
//! state into one buffer; the optimizer then copies each new parameter
//! into its parameter (one in-place op, one version bump per parameter)
//! and keeps the new state as views of that buffer.
//!
//! The unfused update is about a dozen elementwise ops per parameter
//! (each a launch, a pass over memory and a fresh temporary); this is one
//! pass and one launch per step, plus one copy per parameter.
//!
//! The kernels compute in the parameters' dtype (f32 or f64), in the
//! order of the unfused formulas, so that the results agree with them to
//! rounding. Other dtypes, and devices without host kernels (CUDA), keep
//! the unfused path: see [`fusable`].

use tensorguard::autograd::{Function, FunctionCtx, HostTensor, HostTensorMut, OutputSpec};
use tensorguard::device::host_for_each_run;
use tensorguard::{DType, Device, Error, Result, Tensor};

fn invalid(op: &'static str, message: String) -> Error {
    Error::InvalidArgument { op, message }
}

/// Whether `p` and its gradient `g` can take the fused update: f32 or f64
/// of one dtype, on the cpu or an emulated device (the fused kernels are
/// host kernels).
pub(crate) fn fusable(p: &Tensor, g: &Tensor) -> bool {
    matches!(p.dtype(), DType::F32 | DType::F64)
        && g.dtype() == p.dtype()
        && g.shape() == p.shape()
        && !crate::ops::composed::on_device(p)
}

/// The hyper-parameters of one Adam step of one parameter.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdamScalars {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub decoupled: bool,
    /// `lr / (1 - beta1^t)`.
    pub step_size: f64,
    /// `sqrt(1 - beta2^t)`.
    pub bc2_sqrt: f64,
}

/// One Adam step over several parameters: inputs `(p, g, exp_avg,
/// exp_avg_sq)` per parameter; the output is `[3 * total]`: the new
/// parameters, then the new `exp_avg`s, then the new `exp_avg_sq`s, each
/// parameter's at its offset in the concatenation.
pub(crate) struct AdamStep {
    pub scalars: Vec<AdamScalars>,
}

/// One SGD step over several parameters: inputs `(p, g, momentum_buffer)`
/// per parameter (the buffer is ignored where `fresh`: the first step with
/// momentum); the output is `[2 * total]` (new parameters, then new
/// buffers) with momentum, `[total]` without.
pub(crate) struct SgdStep {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    /// Per parameter: it has no momentum buffer yet.
    pub fresh: Vec<bool>,
}

/// The inputs in groups of `per`, all of one float dtype and each group
/// of one shape; returns the dtype and the total number of elements.
fn check_groups(op: &'static str, inputs: &[&Tensor], per: usize) -> Result<(DType, usize)> {
    if inputs.is_empty() || !inputs.len().is_multiple_of(per) {
        return Err(invalid(
            op,
            format!(
                "takes {per} tensors per parameter, but got {} tensors (not a positive multiple of {per}).",
                inputs.len()
            ),
        ));
    }
    let dtype = inputs[0].dtype();
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(Error::DTypeMismatch {
            op,
            expected: DType::F32,
            found: dtype,
            message: format!("the parameters are {dtype}, but the fused update computes in f32 or f64; the optimizer uses its unfused update for other dtypes."),
        });
    }
    let mut total = 0usize;
    for (k, group) in inputs.chunks(per).enumerate() {
        for t in group {
            if t.dtype() != dtype {
                return Err(Error::DTypeMismatch {
                    op,
                    expected: dtype,
                    found: t.dtype(),
                    message: format!("parameter {k} has an operand of dtype {} while the first parameter is {dtype}; the fused update takes one dtype (group the parameters by dtype).", t.dtype()),
                });
            }
            if t.shape() != group[0].shape() {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: group[0].shape().to_vec(),
                    rhs: t.shape().to_vec(),
                    hint: format!("parameter {k}'s gradient and state must have its shape."),
                });
            }
        }
        total += group[0].numel();
    }
    Ok((dtype, total))
}

/// The split of a `[parts * total]` output into `parts` runs of `total`.
fn parts<T>(out: &mut [T], total: usize) -> std::slice::ChunksExactMut<'_, T> {
    out.chunks_exact_mut(total.max(1))
}

macro_rules! adam_kernel {
    ($name:ident, $t:ty) => {
        fn $name(
            s: &[AdamScalars],
            out: &mut HostTensorMut<'_>,
            ins: &[HostTensor<'_>],
        ) -> Result<()> {
            let total: usize = ins.chunks(4).map(|g| g[0].numel()).sum();
            let out = out.contiguous_mut::<$t>()?;
            let mut it = parts(out, total);
            let (Some(po), Some(mo), Some(vo)) = (it.next(), it.next(), it.next()) else {
                return Ok(()); // no elements at all
            };
            let mut off = 0;
            for (sc, group) in s.iter().zip(ins.chunks(4)) {
                let [p, g, m, v] = group else {
                    return Err(invalid(
                        "adam_step",
                        "internal error: an incomplete operand group.".into(),
                    ));
                };
                let (p, g) = (p.contiguous::<$t>()?, g.contiguous::<$t>()?);
                let (m, v) = (m.contiguous::<$t>()?, v.contiguous::<$t>()?);
                let n = p.len();
                let (b1, b2) = (sc.beta1 as $t, sc.beta2 as $t);
                let (ob1, ob2) = ((1.0 - sc.beta1) as $t, (1.0 - sc.beta2) as $t);
                let (eps, wd, bc2, step) = (
                    sc.eps as $t,
                    sc.weight_decay as $t,
                    sc.bc2_sqrt as $t,
                    sc.step_size as $t,
                );
                let shrink = (1.0 - sc.lr * sc.weight_decay) as $t;
                let decay = sc.weight_decay != 0.0;
                let (coupled, decoupled) = (decay && !sc.decoupled, decay && sc.decoupled);
                // over tensorguard's spinning team, as its own elementwise
                // kernels (rayon's pool made it 5x slower on the shared
                // 2-core machine: docs/bench-train.md); reads 4, writes 3.
                // `move`: with a closure holding references to the scalars
                // the loop compiled to much slower code (run on one thread,
                // the batch-64 MLP step took 1.4 ms against 0.85)
                let r = off..off + n;
                let outs = (&mut po[r.clone()], &mut mo[r.clone()], &mut vo[r]);
                host_for_each_run(outs, 7 * n, 1, move |start, (po, mo, vo)| {
                    let (p, g, m, v) = (&p[start..], &g[start..], &m[start..], &v[start..]);
                    let rows = po.iter_mut().zip(mo.iter_mut()).zip(vo.iter_mut());
                    for (i, ((po, mo), vo)) in rows.enumerate() {
                        let mut pv = p[i];
                        let mut gv = g[i];
                        if decoupled {
                            pv *= shrink;
                        } else if coupled {
                            gv += pv * wd;
                        }
                        let mv = m[i] * b1 + gv * ob1;
                        let vv = v[i] * b2 + gv * gv * ob2;
                        let denom = vv.sqrt() / bc2 + eps;
                        *po = pv - mv / denom * step;
                        *mo = mv;
                        *vo = vv;
                    }
                })?;
                off += n;
            }
            Ok(())
        }
    };
}

adam_kernel!(adam_f32, f32);
adam_kernel!(adam_f64, f64);

impl Function for AdamStep {
    fn name(&self) -> &'static str {
        "adam_step"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let (dtype, total) = check_groups(self.name(), inputs, 4)?;
        if inputs.len() / 4 != self.scalars.len() {
            return Err(invalid(
                self.name(),
                format!(
                    "got {} parameters but the hyper-parameters of {}.",
                    inputs.len() / 4,
                    self.scalars.len()
                ),
            ));
        }
        Ok(OutputSpec {
            shape: vec![3 * total],
            dtype,
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        match out.dtype() {
            DType::F64 => adam_f64(&self.scalars, out, ins),
            _ => adam_f32(&self.scalars, out, ins),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(no_backward(ctx))
    }
}

macro_rules! sgd_kernel {
    ($name:ident, $t:ty) => {
        fn $name(s: &SgdStep, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
            let total: usize = ins.chunks(3).map(|g| g[0].numel()).sum();
            let out = out.contiguous_mut::<$t>()?;
            let mut it = parts(out, total);
            let Some(po) = it.next() else {
                return Ok(());
            };
            let mut bo = it.next();
            let (lr, mom, damp, wd) = (
                s.lr as $t,
                s.momentum as $t,
                (1.0 - s.dampening) as $t,
                s.weight_decay as $t,
            );
            let decay = s.weight_decay != 0.0;
            let mut off = 0;
            for (&fresh, group) in s.fresh.iter().zip(ins.chunks(3)) {
                let [p, g, b] = group else {
                    return Err(invalid(
                        "sgd_step",
                        "internal error: an incomplete operand group.".into(),
                    ));
                };
                let (p, g, b) = (
                    p.contiguous::<$t>()?,
                    g.contiguous::<$t>()?,
                    b.contiguous::<$t>()?,
                );
                let n = p.len();
                let po = &mut po[off..off + n];
                let nesterov = s.nesterov;
                // over the team as the Adam update (`move`: see there)
                match bo.as_deref_mut() {
                    None => host_for_each_run(po, 3 * n, 1, move |start, po| {
                        let (p, g) = (&p[start..], &g[start..]);
                        for (i, po) in po.iter_mut().enumerate() {
                            let d = if decay { g[i] + p[i] * wd } else { g[i] };
                            *po = p[i] - d * lr;
                        }
                    })?,
                    Some(bo) => {
                        let outs = (po, &mut bo[off..off + n]);
                        host_for_each_run(outs, 5 * n, 1, move |start, (po, bo)| {
                            let (p, g, b) = (&p[start..], &g[start..], &b[start..]);
                            for (i, (po, bo)) in po.iter_mut().zip(bo).enumerate() {
                                let d = if decay { g[i] + p[i] * wd } else { g[i] };
                                let buf = if fresh { d } else { b[i] * mom + d * damp };
                                let d = if nesterov { d + buf * mom } else { buf };
                                *po = p[i] - d * lr;
                                *bo = buf;
                            }
                        })?
                    }
                }
                off += n;
            }
            Ok(())
        }
    };
}

sgd_kernel!(sgd_f32, f32);
sgd_kernel!(sgd_f64, f64);

impl Function for SgdStep {
    fn name(&self) -> &'static str {
        "sgd_step"
    }
    fn output(&self, inputs: &[&Tensor]) -> Result<OutputSpec> {
        let (dtype, total) = check_groups(self.name(), inputs, 3)?;
        if inputs.len() / 3 != self.fresh.len() {
            return Err(invalid(
                self.name(),
                format!(
                    "got {} parameters but buffer flags for {}.",
                    inputs.len() / 3,
                    self.fresh.len()
                ),
            ));
        }
        let parts = if self.momentum != 0.0 { 2 } else { 1 };
        Ok(OutputSpec {
            shape: vec![parts * total],
            dtype,
        })
    }
    fn forward_host(&self, out: &mut HostTensorMut<'_>, ins: &[HostTensor<'_>]) -> Result<()> {
        match out.dtype() {
            DType::F64 => sgd_f64(self, out, ins),
            _ => sgd_f32(self, out, ins),
        }
    }
    fn backward(&self, ctx: &FunctionCtx, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Err(no_backward(ctx))
    }
}

fn no_backward(ctx: &FunctionCtx) -> Error {
    Error::Autograd {
        message: format!(
            "{}: an optimizer update has no gradient; it runs under no_grad (call it from `Optimizer::step`).",
            ctx.node_name()
        ),
    }
}

/// The `k`-th run of `total` elements of a fused update's output, at
/// `offset` within it, shaped like `like`.
pub(crate) fn part(
    out: &Tensor,
    k: usize,
    total: usize,
    offset: usize,
    like: &Tensor,
) -> Result<Tensor> {
    out.narrow(0, (k * total + offset) as isize, like.numel())?
        .view(like.shape().to_vec())
}

/// The parameters of one fused launch: one device and dtype.
pub(crate) struct FuseGroup<S> {
    pub device: Device,
    pub dtype: DType,
    /// (index of the parameter, its gradient).
    pub members: Vec<(usize, Tensor)>,
    pub scalars: Vec<S>,
    pub total: usize,
}

impl<S> FuseGroup<S> {
    /// Add parameter `i` (`p`, gradient `g`) to the group of its device
    /// and dtype, making the group when it is the first. A parameter whose
    /// storage another member shares (tied weights listed twice) starts a
    /// new group, so that it sees the first one's update as the unfused
    /// loop would.
    pub fn push(
        groups: &mut Vec<FuseGroup<S>>,
        p: &Tensor,
        i: usize,
        g: Tensor,
        s: S,
        params: &[(String, Tensor)],
    ) {
        let (device, dtype) = (p.device(), p.dtype());
        let fits = |grp: &FuseGroup<S>| {
            grp.device == device
                && grp.dtype == dtype
                && !grp
                    .members
                    .iter()
                    .any(|(j, _)| params[*j].1.shares_storage(p))
        };
        let n = p.numel();
        match groups.last_mut().filter(|grp| fits(grp)) {
            Some(grp) => {
                grp.members.push((i, g));
                grp.scalars.push(s);
                grp.total += n;
            }
            None => groups.push(FuseGroup {
                device,
                dtype,
                members: vec![(i, g)],
                scalars: vec![s],
                total: n,
            }),
        }
    }
}
