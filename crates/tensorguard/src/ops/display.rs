//! `Display` and `Debug` for tensors, in PyTorch's format.

use std::fmt;
use std::panic::Location;

use crate::dtype::{with_native, DType, Native};
use crate::memory::alloc::HostSlice;
use crate::tensor::format::{format_tensor, FmtValue, PrintOptions};
use crate::tensor::Tensor;

impl Tensor {
    fn repr(&self) -> String {
        let mut suffixes = Vec::new();
        if !self.device().is_cpu() {
            suffixes.push(format!("device='{}'", self.device()));
        }
        let default_dtype = if self.numel() == 0 {
            self.dtype() == DType::F32
        } else {
            matches!(self.dtype(), DType::F32 | DType::I64 | DType::Bool)
        };
        if !default_dtype {
            suffixes.push(format!("dtype=torch.{}", self.dtype().name()));
        }
        // Printing a device tensor waits for the device and copies it to
        // the host. Rust's formatting machinery does not pass the caller's
        // line on, so the sync and transfer ledgers count it here, as op
        // `Display`.
        let host = match super::read_to_host(self, "Display", Location::caller()) {
            Ok(h) => h,
            Err(e) => return format!("tensor(<unavailable: {e}>)"),
        };
        let host = host.as_ref().unwrap_or(self);
        let layout = host.layout();
        let guard = match crate::device::holds::hold_read(host.storage(), "Display") {
            Ok(g) => g,
            Err(e) => return format!("tensor(<unavailable: {e}>)"),
        };
        let bytes = match guard.host_bytes() {
            Ok(b) => b,
            Err(e) => return format!("tensor(<unavailable: {e}>)"),
        };
        let dtype = self.dtype();
        with_native!(dtype, T => {
            let data: &[T] = bytes.typed();
            let get = |i: usize| -> FmtValue {
                // unravel the row-major index into a storage offset
                let mut rem = i;
                let mut off = layout.offset;
                for d in (0..layout.shape.len()).rev() {
                    let n = layout.shape[d];
                    off += (rem % n) * layout.strides[d];
                    rem /= n;
                }
                let x = data.get(off).copied().unwrap_or(T::zero());
                match dtype {
                    DType::Bool => FmtValue::Bool(x.to_i64() != 0),
                    d if d.is_float() => FmtValue::Float(x.to_f64()),
                    _ => FmtValue::Int(x.to_i64()),
                }
            };
            format_tensor(&layout.shape, &get, &suffixes, &PrintOptions::default())
        })
    }
}

impl fmt::Display for Tensor {
    /// Prints like PyTorch: `tensor([[1., 2.], [3., 4.]], dtype=torch.float16)`,
    /// summarising tensors of more than 1000 elements.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repr())
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor {{ shape: {:?}, strides: {:?}, offset: {}, dtype: {}, device: {}, version: {}, data: {} }}",
            self.shape(),
            self.stride(),
            self.storage_offset(),
            self.dtype(),
            self.device(),
            self.version(),
            self.repr()
        )
    }
}
