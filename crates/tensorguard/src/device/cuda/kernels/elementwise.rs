//! Elementwise kernels (copy/cast, fill, unary, binary, scalar, clamp,
//! where, masked_fill): the kernel names and parameters of `elementwise.cu`.
//!
//! Each launch takes one of two paths. When every operand, coalesced with
//! the others, is one contiguous run, the kernel indexes linearly and, when
//! every pointer is aligned, moves 16-byte vectors (`NAME`); otherwise it
//! computes each operand's offset from the shared shape (`NAME_s`, up to 8
//! dims after merging). Semantics mirror the cpu kernels
//! (`device/cpu/{copy,elementwise}.rs`): bool arithmetic runs as u8,
//! scalars are converted to the operand's dtype on the host exactly as the
//! cpu converts them, and an integer `pow` with a negative exponent tensor
//! is reported through the fault record (the cpu refuses it up front).

use std::fmt::Write as _;

use super::env::{DevArg, KernelEnv};
use super::launch::{grid_1d, launch, Args, Strided};
use super::source::Source;
use crate::device::kernel::{BinaryOp, Kernel};
use crate::dtype::{with_native, DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Dims, Layout};

/// Threads per block.
const BLOCK: u32 = 256;

/// A kernel name, built on the stack (no allocation per launch).
pub(crate) struct Name {
    buf: [u8; 48],
    len: usize,
}

impl Name {
    fn new() -> Name {
        Name {
            buf: [0; 48],
            len: 0,
        }
    }

    /// The name as text.
    pub(crate) fn as_str(&self) -> &str {
        // only `write_str` fills the buffer, with whole `&str`s
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for Name {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The dtype suffix of kernel names.
pub(crate) fn suffix(dt: DType) -> &'static str {
    match dt {
        DType::Bool => "bool",
        DType::U8 => "u8",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

/// The suffix of arithmetic kernels: bool computes as u8, as on the cpu.
fn arith_suffix(dt: DType) -> &'static str {
    if dt == DType::Bool {
        "u8"
    } else {
        suffix(dt)
    }
}

/// The suffix of kernels that only move elements: their size in bits.
fn size_suffix(dt: DType) -> &'static str {
    match dt.size_in_bytes() {
        1 => "x8",
        2 => "x16",
        4 => "x32",
        _ => "x64",
    }
}

fn internal(op: &'static str, what: &str) -> Error {
    Error::invalid(
        op,
        format!("internal error: {what}. This is a bug in tensorguard; please report it."),
    )
}

/// The base name (without `_s`) of the kernel for `kernel` with output
/// dtype `out` and first input dtype `in0` (the dtype the op computes in).
pub(crate) fn kernel_name(kernel: &Kernel, out: DType, in0: Option<DType>) -> Result<Name> {
    let op = kernel.name();
    let input = || in0.ok_or_else(|| internal(op, "the kernel was launched without its input"));
    let mut n = Name::new();
    let w = match kernel {
        Kernel::Copy => write!(n, "tg_copy_{}_{}", suffix(out), suffix(input()?)),
        Kernel::Fill(_) => write!(n, "tg_fill_{}", size_suffix(out)),
        Kernel::Unary(u) => {
            if u.is_float_only() && !out.is_float() {
                return Err(internal(
                    op,
                    &format!("a float kernel was launched on {out}"),
                ));
            }
            write!(n, "tg_{}_{}", u.name(), arith_suffix(out))
        }
        Kernel::Binary(b) => write!(n, "tg_{}_{}", b.name(), arith_suffix(input()?)),
        Kernel::BinaryScalar { op: b, .. } => {
            write!(n, "tg_{}_scalar_{}", b.name(), arith_suffix(input()?))
        }
        Kernel::Clamp { .. } => write!(n, "tg_clamp_{}", arith_suffix(out)),
        Kernel::Where => write!(n, "tg_where_{}", size_suffix(out)),
        Kernel::MaskedFill(_) => write!(n, "tg_masked_fill_{}", size_suffix(out)),
        _ => {
            return Err(internal(
                op,
                "a non-elementwise kernel reached elementwise.rs",
            ))
        }
    };
    w.map_err(|_| internal(op, "a kernel name is too long"))?;
    Ok(n)
}

/// The bits of `s` converted to the native type of `dt` as the cpu converts
/// it (`Scalar::to_native`; for fills into bool, `!= 0`).
fn scalar_bits(s: Scalar, dt: DType, fill: bool) -> u64 {
    if dt == DType::Bool {
        return if fill {
            (s.to_f64() != 0.0) as u64
        } else {
            s.to_native::<u8>() as u64
        };
    }
    with_native!(dt, T => {
        let v: T = s.to_native();
        let mut b = [0u8; 8];
        b[..std::mem::size_of::<T>()].copy_from_slice(bytemuck::bytes_of(&v));
        u64::from_le_bytes(b)
    })
}

/// Append a scalar parameter of `dt`'s size.
fn scalar_arg(args: Args, bits: u64, dt: DType) -> Args {
    match dt.size_in_bytes() {
        1 => args.arg(bits as u8),
        2 => args.arg(bits as u16),
        4 => args.arg(bits as u32),
        _ => args.arg(bits),
    }
}

/// How a launch indexes its operands.
#[allow(
    clippy::large_enum_variant,
    reason = "lives on the stack for one launch; boxing would allocate per launch"
)]
enum Path {
    /// One contiguous run per operand: element pointers, and whether every
    /// one is aligned for 16-byte vectors of `vn` elements.
    Linear {
        ptrs: [u64; 4],
        vec: bool,
        vn: usize,
    },
    /// Offsets computed from the shared (coalesced) shape.
    Strided([Strided; 4]),
}

/// Choose the path for `ops` (the output first). Inputs have the output's
/// shape (broadcast before launch); one that is merely broadcastable to it
/// is broadcast here.
fn path(op: &'static str, ops: &[&DevArg<'_>]) -> Result<Path> {
    let shape = &ops[0].layout.shape;
    let mut bcast: [Dims; 4] = Default::default();
    for (k, a) in ops.iter().enumerate().skip(1) {
        let s = &a.layout.shape;
        if s == shape {
            continue;
        }
        let fits = s.len() <= shape.len()
            && s.iter()
                .zip(&shape[shape.len() - s.len()..])
                .all(|(&x, &y)| x == y || x == 1);
        if !fits {
            return Err(internal(
                op,
                &format!("an input of shape {s:?} reached a kernel writing shape {shape:?}"),
            ));
        }
        bcast[k] = a.layout.broadcast_strides(shape);
    }
    let strides: [&[usize]; 4] = std::array::from_fn(|k| match ops.get(k) {
        Some(a) if a.layout.shape == *shape => &a.layout.strides[..],
        Some(_) => &bcast[k][..],
        None => &[][..],
    });
    // in the output's memory order (as the cpu's `iter::drive`): the
    // transposed result of a transposed input is one linear run
    let perm = ops[0].layout.memory_order();
    let permuted: Option<(Dims, [Dims; 4])> = perm.as_ref().map(|p| {
        let pick = |s: &[usize]| -> Dims { p.iter().map(|&d| s[d]).collect() };
        (
            pick(shape),
            std::array::from_fn(|k| {
                if k < ops.len() {
                    pick(strides[k])
                } else {
                    Dims::new()
                }
            }),
        )
    });
    let (shape, strides): (&[usize], [&[usize]; 4]) = match &permuted {
        Some((ps, pst)) => (&ps[..], std::array::from_fn(|k| &pst[k][..])),
        None => (&shape[..], strides),
    };
    let (cshape, cstrides) = coalesce(shape, &strides[..ops.len()]);
    if cshape.len() == 1 && cstrides[..ops.len()].iter().all(|s| s[0] == 1) {
        let max = ops
            .iter()
            .map(|a| a.dtype.size_in_bytes())
            .max()
            .unwrap_or(1);
        let vn = 16 / max;
        let mut ptrs = [0u64; 4];
        let mut vec = true;
        for (k, a) in ops.iter().enumerate() {
            let size = a.dtype.size_in_bytes() as u64;
            ptrs[k] = a.ptr + a.layout.offset as u64 * size;
            vec &= ptrs[k] % (vn as u64 * size) == 0;
        }
        return Ok(Path::Linear { ptrs, vec, vn });
    }
    let mut s = [Strided::from_parts(&[], &[], 0, op)?; 4];
    for (k, a) in ops.iter().enumerate() {
        s[k] = Strided::from_parts(&cshape, &cstrides[k], a.layout.offset, op)?;
    }
    Ok(Path::Strided(s))
}

/// `Layout::coalesce` for 1 to 4 operands (unused slots stay empty).
fn coalesce(shape: &[usize], strides: &[&[usize]]) -> (Dims, [Dims; 4]) {
    let e = Dims::new;
    match strides {
        [a] => {
            let (s, [a]) = Layout::coalesce(shape, [a]);
            (s, [a, e(), e(), e()])
        }
        [a, b] => {
            let (s, [a, b]) = Layout::coalesce(shape, [a, b]);
            (s, [a, b, e(), e()])
        }
        [a, b, c] => {
            let (s, [a, b, c]) = Layout::coalesce(shape, [a, b, c]);
            (s, [a, b, c, e()])
        }
        [a, b, c, d, ..] => {
            let (s, [a, b, c, d]) = Layout::coalesce(shape, [a, b, c, d]);
            (s, [a, b, c, d])
        }
        [] => (shape.iter().copied().collect(), [e(), e(), e(), e()]),
    }
}

/// Launch an elementwise kernel.
pub(super) fn run(
    env: &KernelEnv<'_>,
    kernel: &Kernel,
    outs: &[DevArg<'_>],
    ins: &[DevArg<'_>],
) -> Result<()> {
    let op = kernel.name();
    let out = outs
        .first()
        .ok_or_else(|| internal(op, "the kernel was launched without an output"))?;
    let wanted = match kernel {
        Kernel::Fill(_) => 0,
        Kernel::Copy | Kernel::Unary(_) | Kernel::BinaryScalar { .. } | Kernel::Clamp { .. } => 1,
        Kernel::Binary(_) | Kernel::MaskedFill(_) => 2,
        Kernel::Where => 3,
        _ => {
            return Err(internal(
                op,
                "a non-elementwise kernel reached elementwise.rs",
            ))
        }
    };
    if ins.len() < wanted {
        return Err(internal(
            op,
            &format!(
                "the kernel needs {wanted} inputs and was given {}",
                ins.len()
            ),
        ));
    }
    if let Kernel::BinaryScalar {
        op: BinaryOp::Pow,
        scalar,
        reversed: false,
    } = kernel
    {
        if !ins[0].dtype.is_float() && scalar.to_i64() < 0 {
            return Err(Error::invalid(
                "pow",
                "integers cannot be raised to negative integer powers. Cast the base to a float dtype first.",
            ));
        }
    }
    let n = out.layout.numel();
    if n == 0 {
        return Ok(());
    }
    let mut ops: [&DevArg<'_>; 4] = [out; 4];
    for (k, a) in ins[..wanted].iter().enumerate() {
        ops[k + 1] = a;
    }
    let ops = &ops[..wanted + 1];
    let base = kernel_name(kernel, out.dtype, ins.first().map(|a| a.dtype))?;
    let path = path(op, ops)?;
    let mut name = Name::new();
    let strided = matches!(path, Path::Strided(_));
    let sfx = if strided { "_s" } else { "" };
    write!(name, "{}{sfx}", base.as_str())
        .map_err(|_| internal(op, "a kernel name is too long"))?;
    let f = env
        .state
        .modules
        .function(env.cc, Source::Elementwise, name.as_str())?;

    let mut args = Args::new().arg(n as i64);
    let grid = match path {
        Path::Linear { ptrs, vec, vn } => {
            args = args.arg(vec as i32);
            for p in &ptrs[..ops.len()] {
                args = args.arg(*p);
            }
            grid_1d(if vec { n.div_ceil(vn) } else { n }, BLOCK)
        }
        Path::Strided(s) => {
            for (k, a) in ops.iter().enumerate() {
                args = args.arg(a.ptr).arg(s[k]);
            }
            grid_1d(n, BLOCK)
        }
    };
    args = match kernel {
        Kernel::Fill(v) | Kernel::MaskedFill(v) => {
            scalar_arg(args, scalar_bits(*v, out.dtype, true), out.dtype)
        }
        Kernel::Binary(_) => args.arg(env.fault.ptr).arg(env.fault.launch),
        Kernel::BinaryScalar {
            scalar, reversed, ..
        } => {
            let dt = ins[0].dtype;
            scalar_arg(args, scalar_bits(*scalar, dt, false), dt).arg(*reversed as i32)
        }
        Kernel::Clamp { min, max } => {
            let dt = out.dtype;
            let bits = |s: &Option<Scalar>| s.map_or(0, |s| scalar_bits(s, dt, false));
            let args = scalar_arg(args, bits(min), dt);
            scalar_arg(args, bits(max), dt)
                .arg(min.is_some() as i32)
                .arg(max.is_some() as i32)
        }
        _ => args,
    };
    launch(env, f, grid, (BLOCK, 1, 1), 0, args, op)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::device::cuda::kernels::source::elementwise::part;
    use crate::device::kernel::UnaryOp;

    const BINARY: [BinaryOp; 13] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
    ];

    /// Every (kernel, output dtype, input dtype) elementwise.rs can launch,
    /// with the base name it asks for.
    pub(crate) fn every_name() -> Vec<String> {
        let mut kernels = vec![
            Kernel::Copy,
            Kernel::Fill(Scalar::Int(1)),
            Kernel::Clamp {
                min: None,
                max: None,
            },
            Kernel::Where,
            Kernel::MaskedFill(Scalar::Int(1)),
        ];
        kernels.extend(UnaryOp::ALL.iter().map(|&u| Kernel::Unary(u)));
        kernels.extend(BINARY.iter().map(|&b| Kernel::Binary(b)));
        kernels.extend(BINARY.iter().map(|&b| Kernel::BinaryScalar {
            op: b,
            scalar: Scalar::Int(1),
            reversed: false,
        }));
        let mut names = Vec::new();
        for k in &kernels {
            for &o in &DType::ALL {
                for &i in &DType::ALL {
                    match kernel_name(k, o, Some(i)) {
                        Ok(n) => names.push(n.as_str().to_string()),
                        Err(_) => assert!(
                            matches!(k, Kernel::Unary(u) if u.is_float_only() && !o.is_float()),
                            "{k:?} {o} {i}"
                        ),
                    }
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// The part block (`#if TG_WANT(k)`) each line of elementwise.cu is in.
    fn part_of_line(text: &str) -> Vec<(Option<u32>, &str)> {
        let mut cur = None;
        text.lines()
            .map(|l| {
                if let Some(k) = l.strip_prefix("#if TG_WANT(") {
                    cur = k.trim_end_matches(')').parse().ok();
                } else if l.starts_with("#endif") {
                    cur = None;
                }
                (cur, l)
            })
            .collect()
    }

    #[test]
    fn every_requested_kernel_is_defined_in_its_part() {
        let text = Source::Elementwise.text();
        let lines = part_of_line(&text);
        let names = every_name();
        // 64 copies, 4 fills/wheres/masked_fills, each unary op on the 7
        // arithmetic dtypes or the 4 float ones, 13 * 7 binary and as many
        // with a scalar, 7 clamps
        let unary: usize = UnaryOp::ALL
            .iter()
            .map(|u| if u.is_float_only() { 4 } else { 7 })
            .sum();
        assert_eq!(unary, 3 * 7 + 6 * 4);
        assert_eq!(names.len(), 64 + 12 + unary + 91 * 2 + 7);
        for name in &names {
            let def = format!("({name},");
            let found: Vec<Option<u32>> = lines
                .iter()
                .filter(|(_, l)| l.contains(&def))
                .map(|(p, _)| *p)
                .collect();
            assert_eq!(found.len(), 1, "{name} is defined {} times", found.len());
            assert_eq!(found[0], part(name), "{name} is in the wrong part");
            let mut s = name.clone();
            s.push_str("_s");
            assert_eq!(part(&s), part(name), "{s}");
        }
        assert_eq!(part("tg_nothing"), None);
        assert_eq!(part("tg_copy_f16_f32_s"), Some(5));
        assert_eq!(part("tg_masked_fill_x8"), Some(0));
        assert_eq!(part("tg_add_f32"), Some(14));
    }

    #[test]
    fn bool_arithmetic_runs_as_u8_and_moves_by_size() {
        let add = Kernel::Binary(BinaryOp::Add);
        assert_eq!(
            kernel_name(&add, DType::Bool, Some(DType::Bool))
                .unwrap()
                .as_str(),
            "tg_add_u8"
        );
        let lt = Kernel::BinaryScalar {
            op: BinaryOp::Lt,
            scalar: Scalar::Float(0.5),
            reversed: true,
        };
        assert_eq!(
            kernel_name(&lt, DType::Bool, Some(DType::F16))
                .unwrap()
                .as_str(),
            "tg_lt_scalar_f16"
        );
        let w = kernel_name(&Kernel::Where, DType::BF16, Some(DType::Bool)).unwrap();
        assert_eq!(w.as_str(), "tg_where_x16");
        let c = kernel_name(&Kernel::Copy, DType::Bool, Some(DType::F64)).unwrap();
        assert_eq!(c.as_str(), "tg_copy_bool_f64");
        assert!(kernel_name(&Kernel::Unary(UnaryOp::Exp), DType::I64, Some(DType::I64)).is_err());
    }

    fn arg(layout: &Layout, dtype: DType, ptr: u64) -> DevArg<'_> {
        DevArg { ptr, layout, dtype }
    }

    #[test]
    fn contiguous_operands_go_linear_and_vectorise_when_aligned() {
        let l = Layout::contiguous(&[4, 5]);
        let (o, a) = (arg(&l, DType::F32, 4096), arg(&l, DType::F32, 8192));
        match path("add", &[&o, &a]).unwrap() {
            Path::Linear { ptrs, vec, vn } => {
                assert_eq!((ptrs[0], ptrs[1], vec, vn), (4096, 8192, true, 4));
            }
            Path::Strided(_) => panic!("contiguous went strided"),
        }
        // a view at element 1: pointers move, vectors no longer line up
        let off = Layout {
            offset: 1,
            ..Layout::contiguous(&[4, 5])
        };
        let b = arg(&off, DType::F32, 8192);
        match path("add", &[&o, &b]).unwrap() {
            Path::Linear { ptrs, vec, .. } => assert_eq!((ptrs[1], vec), (8196, false)),
            Path::Strided(_) => panic!("offset view went strided"),
        }
        // bool output of an f64 comparison: 2-element vectors
        let c = arg(&l, DType::Bool, 4098);
        let d = arg(&l, DType::F64, 8192);
        match path("lt", &[&c, &d, &d]).unwrap() {
            Path::Linear { vec, vn, .. } => assert_eq!((vec, vn), (true, 2)),
            Path::Strided(_) => panic!(),
        }
    }

    #[test]
    fn broadcast_and_transposed_operands_go_strided() {
        let out = Layout::contiguous(&[3, 4]);
        let row = Layout::contiguous(&[4]);
        let (o, r) = (arg(&out, DType::F32, 0), arg(&row, DType::F32, 0));
        match path("add", &[&o, &o, &r]).unwrap() {
            Path::Strided(s) => {
                assert_eq!(s[0].ndim, 2);
                assert_eq!(
                    (&s[0].shape[..2], &s[0].strides[..2]),
                    (&[3, 4][..], &[4, 1][..])
                );
                assert_eq!(&s[2].strides[..2], &[0, 1]);
            }
            Path::Linear { .. } => panic!("broadcast went linear"),
        }
        let t = Layout::contiguous(&[4, 3]).permuted(&[1, 0]);
        let tt = arg(&t, DType::F16, 0);
        match path("copy_", &[&o, &tt]).unwrap() {
            Path::Strided(s) => assert_eq!(&s[1].strides[..2], &[1, 3]),
            Path::Linear { .. } => panic!("transpose went linear"),
        }
        let nine: Vec<usize> = vec![2; 9];
        let mut strided = Layout::contiguous(&nine);
        for s in strided.strides.iter_mut() {
            *s *= 2;
        }
        let (big, sb) = (Layout::contiguous(&nine), strided);
        let merged = path(
            "neg",
            &[&arg(&big, DType::F32, 0), &arg(&sb, DType::F32, 0)],
        );
        match merged.unwrap() {
            Path::Strided(s) => assert_eq!((s[0].ndim, s[1].strides[0]), (1, 2)),
            Path::Linear { .. } => panic!("a stride-2 input went linear"),
        }
        let rev: Vec<usize> = (0..9).rev().collect();
        let p = Layout::contiguous(&nine).permuted(&rev);
        let err = path("neg", &[&arg(&big, DType::F32, 0), &arg(&p, DType::F32, 0)]);
        assert!(err.is_err(), "9 dims that cannot merge");
        let bad = Layout::contiguous(&[5]);
        assert!(path("add", &[&o, &arg(&bad, DType::F32, 0)]).is_err());
    }

    #[test]
    fn scalars_convert_like_the_cpu() {
        assert_eq!(scalar_bits(Scalar::Float(2.5), DType::Bool, true), 1);
        assert_eq!(scalar_bits(Scalar::Float(0.0), DType::Bool, true), 0);
        assert_eq!(scalar_bits(Scalar::Float(-1.0), DType::U8, false), 255);
        assert_eq!(
            scalar_bits(Scalar::Int(-2), DType::I32, false),
            (-2i32) as u32 as u64
        );
        assert_eq!(
            scalar_bits(Scalar::Float(1.5), DType::F32, false),
            1.5f32.to_bits() as u64
        );
        assert_eq!(
            scalar_bits(Scalar::Int(3), DType::F16, false),
            half::f16::from_f64(3.0).to_bits() as u64
        );
        assert_eq!(
            scalar_bits(Scalar::Bool(true), DType::BF16, false),
            half::bf16::ONE.to_bits() as u64
        );
        assert_eq!(
            scalar_bits(Scalar::Float(-0.5), DType::F64, false),
            (-0.5f64).to_bits()
        );
    }
}
