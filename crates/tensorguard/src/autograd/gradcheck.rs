//! Finite-difference checking of gradients, in f64.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

use super::no_grad;

/// Tolerances of [`gradcheck`] (PyTorch's defaults).
#[derive(Clone, Copy, Debug)]
pub struct GradcheckOptions {
    /// Perturbation for central differences.
    pub eps: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
}

impl Default for GradcheckOptions {
    fn default() -> Self {
        GradcheckOptions {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-3,
        }
    }
}

fn leaves(
    values: &[(Vec<f64>, Vec<usize>, bool)],
    device: &crate::device_id::Device,
) -> Result<Vec<Tensor>> {
    values
        .iter()
        .map(|(v, s, rg)| {
            let t = Tensor::from_slice(v, s.clone(), device)?;
            if *rg {
                t.requires_grad(true)
            } else {
                Ok(t)
            }
        })
        .collect()
}

/// Compare the gradients autograd computes for `f` at `inputs` with central
/// finite differences. `inputs` must be f64; those that require grad are
/// checked. Returns an error naming the input, element and output element
/// of the first mismatch.
///
/// ```
/// use tensorguard::{autograd, Device, Tensor};
/// let x = Tensor::from_vec(vec![0.5f64, -1.0, 2.0], [3], &Device::Cpu).unwrap().requires_grad(true).unwrap();
/// autograd::gradcheck(|xs| xs[0].exp()?.mul(&xs[0])?.sum(), &[x], Default::default()).unwrap();
/// ```
#[allow(clippy::needless_range_loop)]
pub fn gradcheck(
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    opts: GradcheckOptions,
) -> Result<()> {
    let device = inputs.first().map(|t| t.device()).unwrap_or_default();
    let mut values = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        if t.dtype() != DType::F64 {
            return Err(Error::invalid(
                "gradcheck",
                format!("input {i} has dtype {}; gradcheck needs f64 inputs to be accurate. Convert with `.to_dtype(DType::F64)?`.", t.dtype()),
            ));
        }
        values.push((
            t.detach().to_vec::<f64>()?,
            t.shape().to_vec(),
            t.is_requires_grad(),
        ));
    }
    let eval = |vals: &[(Vec<f64>, Vec<usize>, bool)]| -> Result<Vec<f64>> {
        let xs = leaves(vals, &device)?;
        no_grad(|| f(&xs)?.to_dtype(DType::F64)?.to_vec::<f64>())
    };
    let base = eval(&values)?;
    let n_out = base.len();
    // analytical: one backward per output element
    let mut analytical: Vec<Vec<Vec<f64>>> = Vec::with_capacity(n_out);
    for k in 0..n_out {
        let xs = leaves(&values, &device)?;
        let out = f(&xs)?;
        let mut onehot = vec![0.0f64; n_out];
        onehot[k] = 1.0;
        let g = Tensor::from_vec(onehot, out.shape(), &device)?.to_dtype(out.dtype())?;
        if out.is_requires_grad() {
            out.backward_with(&g, false)?;
        }
        analytical.push(
            xs.iter()
                .map(|x| match x.grad() {
                    Some(g) => g.to_vec::<f64>(),
                    None => Ok(vec![0.0; x.numel()]),
                })
                .collect::<Result<_>>()?,
        );
    }
    for (i, (v, _, rg)) in values.iter().enumerate() {
        if !rg {
            continue;
        }
        for j in 0..v.len() {
            let mut plus = values.clone();
            plus[i].0[j] += opts.eps;
            let mut minus = values.clone();
            minus[i].0[j] -= opts.eps;
            let (fp, fm) = (eval(&plus)?, eval(&minus)?);
            for k in 0..n_out {
                let num = (fp[k] - fm[k]) / (2.0 * opts.eps);
                let ana = analytical[k][i][j];
                if (ana - num).abs() > opts.atol + opts.rtol * num.abs()
                    || ana.is_nan() != num.is_nan()
                {
                    return Err(Error::Autograd {
                        message: format!(
                            "gradcheck: the gradient of output element {k} with respect to element {j} of input {i} is {ana} by autograd but {num} by finite differences (eps {}, atol {}, rtol {}).",
                            opts.eps, opts.atol, opts.rtol
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}
