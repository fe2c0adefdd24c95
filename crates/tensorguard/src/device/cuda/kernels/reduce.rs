//! Reductions, max/min with indices, softmax: the launches of `reduce.cu`.
//!
//! Every reduction runs one *segment* of `group` threads per output
//! element (see the header of `reduce.cu`): a power of two up to a warp
//! for short lanes, the whole block for long ones. The input is split, as
//! the cpu kernels do, into the kept dims (`outer`, coalesced together
//! with the output's keepdim layout) and the reduced dims (`lanes`).

use smallvec::SmallVec;

use super::env::{DevArg, KernelEnv};
use super::launch::{grid_1d, launch, Args, Strided};
use super::source::Source;
use crate::device::kernel::{Kernel, ReduceOp};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{Dims, Layout};

/// Threads per block of every kernel in `reduce.cu`.
const BLOCK: u32 = 256;

/// The suffix of a kernel for `dtype` (bools reduce as u8, as the cpu's
/// `with_arith` does).
fn suffix(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool | DType::U8 => "u8",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
    }
}

/// The part block (`#if <prefix>_WANT(k)`) each line of a source is in.
#[cfg(test)]
pub(super) fn part_of_line<'a>(text: &'a str, prefix: &str) -> Vec<(Option<u32>, &'a str)> {
    let open = format!("#if {prefix}_WANT(");
    let mut cur = None;
    text.lines()
        .map(|l| {
            if let Some(k) = l.strip_prefix(open.as_str()) {
                cur = k.split(')').next().and_then(|k| k.parse().ok());
            } else if l.starts_with("#endif") {
                cur = None;
            }
            (cur, l)
        })
        .collect()
}

/// The `reduce.cu` kernel that runs `kernel` on an input of `dtype`; an
/// error for the dtypes the cpu rejects too (float-only kernels on ints).
pub(super) fn kernel_name(kernel: &Kernel, dtype: DType) -> Result<String> {
    let float_only = |op: &'static str| -> Result<()> {
        if dtype.is_float() {
            Ok(())
        } else {
            Err(Error::invalid(
                op,
                format!("internal error: a float kernel was launched on {dtype}"),
            ))
        }
    };
    let base = match kernel {
        Kernel::Reduce { op, .. } => match op {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::Var { .. } | ReduceOp::Std { .. } => {
                float_only(op.name())?;
                "var"
            }
        },
        Kernel::ReduceWithIndex { max: true, .. } => "max_dim",
        Kernel::ReduceWithIndex { max: false, .. } => "min_dim",
        Kernel::Softmax { .. } => {
            float_only(kernel.name())?;
            "softmax"
        }
        other => {
            return Err(Error::invalid(
                other.name(),
                "internal error: this kernel is not a reduction.",
            ))
        }
    };
    Ok(format!("tg_{base}_{}", suffix(dtype)))
}

/// An internal error of `op`: the backend launched it with operands that
/// break the kernel's contract.
fn internal(op: &'static str, what: String) -> Error {
    Error::invalid(op, format!("internal error: {what}"))
}

/// How many threads reduce one lane of `len` elements when there are
/// `n_out` lanes: the whole block for long lanes (or few long-ish ones,
/// to spread them over the GPU), else the power of two covering the lane,
/// at most a warp.
fn group_for(len: usize, n_out: usize) -> u32 {
    if len >= 2048 || (len > 32 && n_out < 4096) {
        BLOCK
    } else {
        len.max(1).next_power_of_two().min(32) as u32
    }
}

/// A layout from its parts.
fn layout(shape: Dims, strides: Dims, offset: usize) -> Layout {
    Layout {
        shape,
        strides,
        offset,
    }
}

/// `out` in the input's rank, with size-1 stride-0 dims inserted at the
/// reduced `dims` when they were dropped (the cpu's keepdim_layout).
fn keepdim(out: &Layout, input: &Layout, dims: &[usize]) -> Layout {
    if out.ndim() == input.ndim() {
        return out.clone();
    }
    let mut l = out.clone();
    let mut sorted: SmallVec<[usize; 6]> = dims.iter().copied().collect();
    sorted.sort_unstable();
    for d in sorted {
        let d = d.min(l.shape.len());
        l.shape.insert(d, 1);
        l.strides.insert(d, 0);
    }
    l
}

/// The parts of a reduction launch over `dims` of `input`: the output's
/// keepdim layouts (`outs`) and the input's kept dims, coalesced together;
/// the reduced dims; the number of outputs and the lane length.
struct Split {
    outs: Vec<Strided>,
    outer: Strided,
    lanes: Strided,
    n_out: usize,
    len: usize,
}

fn split(op: &'static str, input: &Layout, outs: &[&Layout], dims: &[usize]) -> Result<Split> {
    let nd = input.ndim();
    if let Some(&d) = dims.iter().find(|&&d| d >= nd) {
        return Err(internal(
            op,
            format!("reduced dim {d} of an input with {nd} dims."),
        ));
    }
    let mut outer = input.clone();
    let (mut rs, mut rst) = (Dims::new(), Dims::new());
    for &d in dims {
        outer.shape[d] = 1;
        rs.push(input.shape[d]);
        rst.push(input.strides[d]);
    }
    let keep: Vec<Layout> = outs.iter().map(|o| keepdim(o, input, dims)).collect();
    if let Some(k) = keep.iter().find(|k| k.shape != outer.shape) {
        return Err(internal(
            op,
            format!(
                "the output has shape {:?}, but reducing dims {dims:?} of shape {:?} gives {:?}.",
                k.shape, input.shape, outer.shape
            ),
        ));
    }
    let n_out = outer.numel();
    let len = rs.iter().product();
    let (lshape, [lst]) = Layout::coalesce(&rs, [&rst[..]]);
    let lanes = Strided::new(&layout(lshape, lst, 0), op)?;
    let strided = |shape: &Dims, strides: &Dims, offset: usize| {
        Strided::new(&layout(shape.clone(), strides.clone(), offset), op)
    };
    // at most one output besides the input: coalesce all layouts together
    let (outs, outer) = match keep.as_slice() {
        [o] => {
            let (s, [so, si]) =
                Layout::coalesce(&outer.shape, [&o.strides[..], &outer.strides[..]]);
            (
                vec![strided(&s, &so, o.offset)?],
                strided(&s, &si, outer.offset)?,
            )
        }
        [v, i] => {
            let (s, [sv, sx, si]) = Layout::coalesce(
                &outer.shape,
                [&v.strides[..], &i.strides[..], &outer.strides[..]],
            );
            (
                vec![strided(&s, &sv, v.offset)?, strided(&s, &sx, i.offset)?],
                strided(&s, &si, outer.offset)?,
            )
        }
        _ => return Err(internal(op, "expected one or two outputs.".to_string())),
    };
    Ok(Split {
        outs,
        outer,
        lanes,
        n_out,
        len,
    })
}

/// Launch a reduction or softmax kernel.
pub(super) fn run(
    env: &KernelEnv<'_>,
    kernel: &Kernel,
    outs: &[DevArg<'_>],
    ins: &[DevArg<'_>],
) -> Result<()> {
    let op = kernel.name();
    let [a] = ins else {
        return Err(internal(
            op,
            format!("expected 1 input, got {}.", ins.len()),
        ));
    };
    let name = kernel_name(kernel, a.dtype)?;
    let want_outs = if matches!(kernel, Kernel::ReduceWithIndex { .. }) {
        2
    } else {
        1
    };
    if outs.len() != want_outs {
        return Err(internal(
            op,
            format!("expected {want_outs} outputs, got {}.", outs.len()),
        ));
    }
    // the output dtypes the kernels write
    let index_out = matches!(
        kernel,
        Kernel::Reduce {
            op: ReduceOp::ArgMax | ReduceOp::ArgMin,
            ..
        }
    );
    let want0 = if index_out { DType::I64 } else { a.dtype };
    if outs[0].dtype != want0 || outs.get(1).is_some_and(|o| o.dtype != DType::I64) {
        return Err(internal(
            op,
            format!(
                "the input is {} but the outputs are {:?}.",
                a.dtype,
                outs.iter().map(|o| o.dtype).collect::<Vec<_>>()
            ),
        ));
    }
    let f = env.state.modules.function(env.cc, Source::Reduce, &name)?;
    match kernel {
        Kernel::Softmax { dim, log } => softmax(env, f, op, *dim, *log, &outs[0], a),
        Kernel::Reduce { op: rop, dims } => {
            let s = split(op, a.layout, &[outs[0].layout], dims)?;
            if s.n_out == 0 {
                return Ok(());
            }
            let group = group_for(s.len, s.n_out);
            let mut args = Args::new()
                .arg(outs[0].ptr)
                .arg(s.outs[0])
                .arg(a.ptr)
                .arg(s.outer)
                .arg(s.lanes)
                .arg(s.n_out as i64)
                .arg(s.len as i64)
                .arg(group as i32);
            if let ReduceOp::Var { correction } | ReduceOp::Std { correction } = rop {
                let root = matches!(rop, ReduceOp::Std { .. });
                args = args.arg(*correction).arg(i32::from(root));
            }
            let grid = grid_1d(s.n_out, BLOCK / group);
            launch(env, f, grid, (BLOCK, 1, 1), 0, args, op)
        }
        Kernel::ReduceWithIndex { dim, .. } => {
            let s = split(op, a.layout, &[outs[0].layout, outs[1].layout], &[*dim])?;
            if s.n_out == 0 {
                return Ok(());
            }
            let group = group_for(s.len, s.n_out);
            let args = Args::new()
                .arg(outs[0].ptr)
                .arg(s.outs[0])
                .arg(outs[1].ptr)
                .arg(s.outs[1])
                .arg(a.ptr)
                .arg(s.outer)
                .arg(s.lanes)
                .arg(s.n_out as i64)
                .arg(s.len as i64)
                .arg(group as i32);
            let grid = grid_1d(s.n_out, BLOCK / group);
            launch(env, f, grid, (BLOCK, 1, 1), 0, args, op)
        }
        other => Err(internal(
            other.name(),
            "this kernel is not a reduction.".to_string(),
        )),
    }
}

/// softmax / log_softmax along `dim`: one segment per row.
fn softmax(
    env: &KernelEnv<'_>,
    f: cudarc::driver::sys::CUfunction,
    op: &'static str,
    dim: usize,
    log: bool,
    out: &DevArg<'_>,
    a: &DevArg<'_>,
) -> Result<()> {
    let (al, ol) = (a.layout, out.layout);
    if dim >= al.ndim() || ol.shape != al.shape {
        return Err(internal(
            op,
            format!(
                "dim {dim} of an input of shape {:?} into an output of shape {:?}.",
                al.shape, ol.shape
            ),
        ));
    }
    let len = al.shape[dim];
    let (ist, ost) = (al.strides[dim], ol.strides[dim]);
    let mut outer = al.shape.clone();
    outer[dim] = 1;
    let n_out: usize = outer.iter().product();
    if len == 0 || n_out == 0 {
        return Ok(());
    }
    let (s, [so, si]) = Layout::coalesce(&outer, [&ol.strides[..], &al.strides[..]]);
    let ostr = Strided::new(&layout(s.clone(), so, ol.offset), op)?;
    let istr = Strided::new(&layout(s, si, al.offset), op)?;
    let group = group_for(len, n_out);
    let args = Args::new()
        .arg(out.ptr)
        .arg(ostr)
        .arg(ost as i64)
        .arg(a.ptr)
        .arg(istr)
        .arg(ist as i64)
        .arg(n_out as i64)
        .arg(len as i64)
        .arg(group as i32)
        .arg(i32::from(log));
    let grid = grid_1d(n_out, BLOCK / group);
    launch(env, f, grid, (BLOCK, 1, 1), 0, args, op)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cuda::kernels::source::reduce::part;

    const DTYPES: [DType; 8] = [
        DType::Bool,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Every kernel the Rust side can request exists in reduce.cu, and
    /// exactly the float-only kernels are refused on integer dtypes.
    #[test]
    fn every_kernel_name_exists() {
        let text = Source::Reduce.text();
        let lines = part_of_line(&text, "RX");
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Prod,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::ArgMax,
            ReduceOp::ArgMin,
            ReduceOp::Var { correction: 1.0 },
            ReduceOp::Std { correction: 0.0 },
        ];
        let mut kernels: Vec<Kernel> = ops
            .iter()
            .map(|&op| Kernel::Reduce {
                op,
                dims: smallvec::smallvec![0],
            })
            .collect();
        for b in [true, false] {
            kernels.push(Kernel::ReduceWithIndex { max: b, dim: 0 });
            kernels.push(Kernel::Softmax { dim: 0, log: b });
        }
        let mut n = 0;
        for k in &kernels {
            for dt in DTYPES {
                let float_only = matches!(
                    k,
                    Kernel::Softmax { .. }
                        | Kernel::Reduce {
                            op: ReduceOp::Var { .. } | ReduceOp::Std { .. },
                            ..
                        }
                );
                match kernel_name(k, dt) {
                    Ok(name) => {
                        assert!(!float_only || dt.is_float(), "{k:?} on {dt}");
                        let def = format!("void {name}(");
                        let found: Vec<Option<u32>> = lines
                            .iter()
                            .filter(|(_, l)| l.contains(&def))
                            .map(|&(k, _)| k)
                            .collect();
                        assert_eq!(found, vec![part(&name)], "{name} in reduce.cu");
                        assert!(part(&name).is_some(), "{name} has no part");
                        n += 1;
                    }
                    Err(e) => assert!(float_only && !dt.is_float(), "{k:?} on {dt}: {e}"),
                }
            }
        }
        assert_eq!(n, 7 * 8 + 2 * 4 + 2 * 8 + 2 * 4);
    }

    #[test]
    fn groups_divide_the_block() {
        for len in [0, 1, 2, 3, 31, 32, 33, 100, 2047, 2048, 1 << 20] {
            for n_out in [1, 100, 5000, 1 << 20] {
                let g = group_for(len, n_out);
                assert!(g.is_power_of_two() && BLOCK.is_multiple_of(g) && (g <= 32 || g == BLOCK));
            }
        }
    }

    #[test]
    fn keepdim_inserts_reduced_dims() {
        let input = Layout::contiguous(&[2, 3, 4]);
        let out = Layout::contiguous(&[3]);
        let k = keepdim(&out, &input, &[2, 0]);
        assert_eq!(k.shape.as_slice(), &[1, 3, 1]);
        assert_eq!(k.strides.as_slice(), &[0, 1, 0]);
    }

    /// reduce.cu and index.cu compile with the real NVRTC for sm_80 and
    /// sm_90 (skipped when libnvrtc is absent).
    #[test]
    fn nvrtc_compiles_reduce_and_index() {
        use cudarc::nvrtc::{result, sys};
        // SAFETY: only loads the library to look for it.
        if !unsafe { sys::is_culib_present() } {
            println!("skipped: NVRTC not found (libnvrtc.so.13 is not on the library path)");
            return;
        }
        for src in [Source::Reduce, Source::Index] {
            let text = std::ffi::CString::new(src.text()).unwrap();
            let file = std::ffi::CString::new(src.file()).unwrap();
            for arch in ["sm_80", "sm_90"] {
                let prog = result::create_program(&text, Some(&file)).unwrap();
                let opts = [
                    format!("--gpu-architecture={arch}"),
                    "--std=c++17".to_string(),
                ];
                // SAFETY: `prog` is a live program; the options are valid strings.
                let compiled = unsafe { result::compile_program(prog, &opts) };
                // SAFETY: as above.
                let log = unsafe { result::get_program_log(prog) }.unwrap();
                let log: String = log
                    .iter()
                    .take_while(|&&c| c != 0)
                    .map(|&c| c as u8 as char)
                    .collect();
                assert!(compiled.is_ok(), "{} for {arch}: {log}", src.file());
                assert!(!log.contains("warning"), "{} for {arch}: {log}", src.file());
                let mut size = 0usize;
                // SAFETY: `prog` compiled; `size` is a valid out-pointer.
                let st = unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) };
                assert_eq!(st, sys::nvrtcResult::NVRTC_SUCCESS);
                assert!(size > 0, "{} for {arch}: empty CUBIN", src.file());
                // SAFETY: `prog` is live and destroyed once.
                unsafe { result::destroy_program(prog) }.unwrap();
            }
        }
    }

    /// The kernels of reduce.cu and index.cu run on the host under
    /// `emu/shim.h` (threads and barriers for the warp shuffles and block
    /// reductions) and match simple references (skipped without g++).
    #[test]
    fn kernels_run_under_host_emulation() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/device/cuda/kernels/emu");
        let exe = std::env::temp_dir().join(format!("tg-kernels-emu-{}", std::process::id()));
        let built = std::process::Command::new("g++")
            .args(["-std=c++20", "-O1", "-pthread", "-w", "-o"])
            .arg(&exe)
            .arg(dir.join("kernels_test.cpp"))
            .output();
        let built = match built {
            Ok(b) => b,
            Err(e) => {
                println!("skipped: g++ not found ({e})");
                return;
            }
        };
        assert!(
            built.status.success(),
            "the emulation harness did not compile: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let run = std::process::Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_file(&exe);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stdout)
        );
    }

    /// The launch layouts of a reduction over dims {0, 2} of a contiguous
    /// [4, 5, 6] into a squeezed [5] output: the harness's first case.
    #[test]
    fn split_builds_outer_and_lanes() {
        let input = Layout::contiguous(&[4, 5, 6]);
        let out = Layout::contiguous(&[5]);
        let s = split("sum", &input, &[&out], &[0, 2]).unwrap();
        assert_eq!((s.n_out, s.len), (5, 24));
        let dims = |x: &Strided| {
            let n = x.ndim as usize;
            (x.offset, x.shape[..n].to_vec(), x.strides[..n].to_vec())
        };
        assert_eq!(dims(&s.outs[0]), (0, vec![5], vec![1]));
        assert_eq!(dims(&s.outer), (0, vec![5], vec![6]));
        assert_eq!(dims(&s.lanes), (0, vec![4, 6], vec![30, 1]));
        // max_dim along 1 with kept dims: values and indices share the shape
        let keep = Layout::contiguous(&[4, 1, 6]);
        let s = split("max", &input, &[&keep, &keep], &[1]).unwrap();
        assert_eq!((s.n_out, s.len), (24, 5));
        assert_eq!(dims(&s.outs[1]), (0, vec![4, 6], vec![6, 1]));
        assert_eq!(dims(&s.outer), (0, vec![4, 6], vec![30, 1]));
        assert_eq!(dims(&s.lanes), (0, vec![5], vec![6]));
        // a mismatched output is an error, not a wrong launch
        assert!(split("sum", &input, &[&Layout::contiguous(&[4])], &[0, 2]).is_err());
    }
}
