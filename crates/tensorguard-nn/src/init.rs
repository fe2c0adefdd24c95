//! Parameter initialisation, as PyTorch's `torch.nn.init` and the layers'
//! `reset_parameters` defaults.

use tensorguard::{DType, Device, Result, Tensor};

/// A tensor of `shape` with values uniform in `[-bound, bound)`, from the
/// default generator (seed it with [`tensorguard::manual_seed`]).
pub fn uniform(shape: &[usize], bound: f64, dtype: DType, device: &Device) -> Result<Tensor> {
    // rand is [0, 1): scale to [-bound, bound) without recording history
    Tensor::rand(shape.to_vec(), dtype, device)?
        .mul(2.0 * bound)?
        .sub(bound)
}

/// The bound of `kaiming_uniform_(w, a=sqrt(5))`, PyTorch's default for
/// `Linear` and `Conv` weights: `gain * sqrt(3 / fan_in)` with
/// `gain = sqrt(2 / (1 + a^2))`, which is `1 / sqrt(fan_in)`.
pub fn kaiming_uniform_bound(fan_in: usize) -> f64 {
    let a2 = 5.0f64;
    let gain = (2.0 / (1.0 + a2)).sqrt();
    gain * (3.0 / fan_in.max(1) as f64).sqrt()
}

/// PyTorch's default bias bound for `Linear` and `Conv`: `1 / sqrt(fan_in)`.
pub fn bias_bound(fan_in: usize) -> f64 {
    if fan_in == 0 {
        0.0
    } else {
        1.0 / (fan_in as f64).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kaiming_bound_is_one_over_sqrt_fan_in() {
        for fan_in in [1usize, 64, 784] {
            let b = kaiming_uniform_bound(fan_in);
            assert!(
                (b - 1.0 / (fan_in as f64).sqrt()).abs() < 1e-12,
                "{fan_in}: {b}"
            );
        }
    }

    #[test]
    fn uniform_stays_in_bounds() -> Result<()> {
        let t = uniform(&[1000], 0.25, DType::F32, &Device::Cpu)?;
        let v = t.to_vec::<f32>()?;
        assert!(v.iter().all(|x| (-0.25..0.25).contains(x)));
        assert!(v.iter().any(|x| *x < 0.0) && v.iter().any(|x| *x > 0.0));
        Ok(())
    }
}
