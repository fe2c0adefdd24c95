//! Creating tensors: constants, ranges, data from Rust, random numbers.

use std::panic::Location;
use std::sync::LazyLock;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use super::{launch, Kernel, Out};
use crate::device_id::Device;
use crate::dtype::{with_native, DType, Element, Native, Scalar, DEFAULT_FLOAT};
use crate::error::{Error, Result};
use crate::memory::alloc::HostSlice;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// A seedable random number generator for [`Tensor::rand_with`] and friends.
/// The default generator behind [`Tensor::rand`] is seeded with
/// [`manual_seed`]. Streams are reproducible for a given seed (ChaCha8).
///
/// ```
/// use tensorguard::{Device, DType, Generator, Tensor};
/// let g = Generator::new(7);
/// let a = Tensor::rand_with([3], DType::F32, &Device::Cpu, &g).unwrap();
/// let b = Tensor::rand_with([3], DType::F32, &Device::Cpu, &Generator::new(7)).unwrap();
/// assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
/// ```
pub struct Generator(Mutex<ChaCha8Rng>);

impl Generator {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Generator {
        Generator(Mutex::new(ChaCha8Rng::seed_from_u64(seed)))
    }
    /// Reset to `seed`.
    pub fn manual_seed(&self, seed: u64) {
        *self.0.lock() = ChaCha8Rng::seed_from_u64(seed);
    }

    /// Where this generator is in its stream (PyTorch's `get_state`):
    /// [`set_state`](Generator::set_state) with it makes the generator draw
    /// the same numbers again, bit for bit.
    ///
    /// ```
    /// use tensorguard::{Device, DType, Generator, GeneratorState, Tensor};
    /// let g = Generator::new(1);
    /// let saved = g.state().to_bytes();            // e.g. into a checkpoint
    /// let a = Tensor::rand_with([4], DType::F32, &Device::Cpu, &g).unwrap();
    /// g.set_state(&GeneratorState::from_bytes(&saved).unwrap());
    /// let b = Tensor::rand_with([4], DType::F32, &Device::Cpu, &g).unwrap();
    /// assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    /// ```
    pub fn state(&self) -> GeneratorState {
        let rng = self.0.lock();
        GeneratorState {
            seed: rng.get_seed(),
            stream: rng.get_stream(),
            word_pos: rng.get_word_pos(),
        }
    }

    /// Put the generator back where `state` says (PyTorch's `set_state`).
    pub fn set_state(&self, state: &GeneratorState) {
        let mut rng = ChaCha8Rng::from_seed(state.seed);
        rng.set_stream(state.stream);
        rng.set_word_pos(state.word_pos);
        *self.0.lock() = rng;
    }
}

/// A [`Generator`]'s position in its random stream, to save with a
/// checkpoint ([`to_bytes`](GeneratorState::to_bytes)) and restore later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneratorState {
    seed: [u8; 32],
    stream: u64,
    word_pos: u128,
}

/// `to_bytes`' layout: magic, version, seed, stream (LE), word position (LE).
const STATE_MAGIC: &[u8; 4] = b"TGRN";
const STATE_VERSION: u8 = 1;
const STATE_LEN: usize = 4 + 1 + 32 + 8 + 16;
/// ChaCha's word position has 68 bits (a 64-bit block counter, 16 words a block).
const WORD_POS_LIMIT: u128 = 1 << 68;

impl GeneratorState {
    /// The state as bytes (61 of them: a tag, a version, the ChaCha8 seed,
    /// stream and word position).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(STATE_LEN);
        out.extend_from_slice(STATE_MAGIC);
        out.push(STATE_VERSION);
        out.extend_from_slice(&self.seed);
        out.extend_from_slice(&self.stream.to_le_bytes());
        out.extend_from_slice(&self.word_pos.to_le_bytes());
        out
    }

    /// Read a state written by [`to_bytes`](GeneratorState::to_bytes); any
    /// other byte string (truncated, of another version, corrupt) is an error.
    pub fn from_bytes(bytes: &[u8]) -> Result<GeneratorState> {
        let bad = |why: String| {
            Err(Error::invalid(
                "GeneratorState::from_bytes",
                format!("{why}. Pass the bytes of `Generator::state().to_bytes()` unchanged (a checkpoint's RNG state may be damaged)."),
            ))
        };
        if bytes.len() != STATE_LEN {
            return bad(format!(
                "a generator state is {STATE_LEN} bytes, but {} were given",
                bytes.len()
            ));
        }
        if &bytes[..4] != STATE_MAGIC {
            return bad(format!(
                "the bytes do not start with the tag {:?} of a generator state (they start with {:?})",
                STATE_MAGIC,
                &bytes[..4]
            ));
        }
        if bytes[4] != STATE_VERSION {
            return bad(format!(
                "the state has version {}, but this build reads version {STATE_VERSION}",
                bytes[4]
            ));
        }
        let mut seed = [0u8; 32];
        seed.copy_from_slice(&bytes[5..37]);
        let mut stream = [0u8; 8];
        stream.copy_from_slice(&bytes[37..45]);
        let mut pos = [0u8; 16];
        pos.copy_from_slice(&bytes[45..61]);
        let word_pos = u128::from_le_bytes(pos);
        if word_pos >= WORD_POS_LIMIT {
            return bad(format!(
                "the word position {word_pos} is beyond the end of a ChaCha stream (2^68 words)"
            ));
        }
        Ok(GeneratorState {
            seed,
            stream: u64::from_le_bytes(stream),
            word_pos,
        })
    }
}

static DEFAULT_GEN: LazyLock<Generator> = LazyLock::new(|| Generator::new(0x5eed));

/// The default generator behind [`Tensor::rand`], [`Tensor::randn`] and
/// [`Tensor::randint`] (PyTorch's `torch.default_generator`), e.g. to save
/// its [`state`](Generator::state) with a checkpoint.
pub fn default_generator() -> &'static Generator {
    &DEFAULT_GEN
}

/// Seed the default generator (PyTorch's `torch.manual_seed`).
pub fn manual_seed(seed: u64) {
    DEFAULT_GEN.manual_seed(seed);
}

/// Write host-computed elements into the fresh tensor `t`: in place on the
/// cpu; for a device, into a pinned host buffer that the copy engine
/// uploads asynchronously on the device's current stream (so it is ordered
/// before later ops; counted by the transfer ledger as `op` at `site`).
pub(crate) fn fill_from_host<T: Native>(
    t: &Tensor,
    op: &'static str,
    site: &'static Location<'static>,
    fill: impl FnOnce(&mut [T]),
) -> Result<()> {
    if t.device().is_cpu() {
        let mut guard = t.storage().data.write();
        fill(guard.host_bytes_mut()?.typed_mut());
        return Ok(());
    }
    let host = Tensor::uninit_pinned(t.shape(), t.dtype(), site)?;
    {
        let mut guard = host.storage().data.write();
        fill(guard.host_bytes_mut()?.typed_mut());
    }
    super::transfer_into(t, &host, true, op, site)
}

fn float_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if !dtype.is_float() {
        return Err(Error::invalid(
            op,
            format!("{op} makes floating point numbers, so the dtype must be floating, got {dtype}. Use `randint` for integers."),
        ));
    }
    Ok(())
}

impl Tensor {
    #[track_caller]
    fn filled(shape: Shape, value: Scalar, dtype: DType, device: &Device) -> Result<Tensor> {
        let site = Location::caller();
        let t = Tensor::uninit(shape.dims(), dtype, device, site)?;
        launch(
            &Kernel::Fill(value),
            &[Out { t: &t, dtype }],
            &[],
            false,
            site,
        )?;
        Ok(t)
    }

    /// A tensor of zeros.
    ///
    /// ```
    /// use tensorguard::{Device, DType, Tensor};
    /// let t = Tensor::zeros([2, 3], DType::F32, &Device::Cpu).unwrap();
    /// assert_eq!(t.to_string(), "tensor([[0., 0., 0.],\n        [0., 0., 0.]])");
    /// ```
    #[track_caller]
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::filled(shape.into(), Scalar::Int(0), dtype, device)
    }

    /// A tensor of ones.
    #[track_caller]
    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::filled(shape.into(), Scalar::Int(1), dtype, device)
    }

    /// A tensor with every element `value`.
    #[track_caller]
    pub fn full(
        shape: impl Into<Shape>,
        value: impl Into<Scalar>,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::filled(shape.into(), value.into(), dtype, device)
    }

    /// A tensor whose elements are not initialised to any particular value
    /// (PyTorch's `empty`; the memory may hold earlier data).
    #[track_caller]
    pub fn empty(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::uninit(shape.into().dims(), dtype, device, Location::caller())
    }

    /// Zeros with the shape, dtype and device of `self`.
    #[track_caller]
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape(), self.dtype(), &self.device())
    }

    /// Ones with the shape, dtype and device of `self`.
    #[track_caller]
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape(), self.dtype(), &self.device())
    }

    /// An uninitialised tensor with the shape, dtype and device of `self`.
    #[track_caller]
    pub fn empty_like(&self) -> Result<Tensor> {
        Tensor::empty(self.shape(), self.dtype(), &self.device())
    }

    /// A 0-dim tensor holding `value`.
    #[track_caller]
    pub fn scalar<T: Element>(value: T, device: &Device) -> Result<Tensor> {
        Tensor::from_vec(vec![value], (), device)
    }

    /// A tensor holding `data` in row-major order with `shape`.
    ///
    /// ```
    /// use tensorguard::{Device, Tensor};
    /// let t = Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2], &Device::Cpu).unwrap();
    /// assert_eq!(t.to_vec2::<i64>().unwrap(), vec![vec![1, 2], vec![3, 4]]);
    /// assert!(Tensor::from_vec(vec![1i64, 2, 3], [2, 2], &Device::Cpu).is_err());
    /// ```
    #[track_caller]
    pub fn from_vec<T: Element>(
        data: Vec<T>,
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::from_slice(&data, shape, device)
    }

    /// A tensor holding a copy of `data` with `shape`.
    #[track_caller]
    pub fn from_slice<T: Element>(
        data: &[T],
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        if shape.numel() != data.len() {
            return Err(Error::ShapeMismatch {
                op: "from_vec",
                lhs: vec![data.len()],
                rhs: shape.dims().to_vec(),
                hint: format!(
                    "{} elements were given but shape {:?} holds {}.",
                    data.len(),
                    shape.dims(),
                    shape.numel()
                ),
            });
        }
        let site = Location::caller();
        let t = Tensor::uninit(shape.dims(), T::DTYPE, device, site)?;
        fill_from_host::<T::Native>(&t, "from_vec", site, |dst| {
            for (d, s) in dst.iter_mut().zip(data) {
                *d = s.to_native();
            }
        })?;
        Ok(t)
    }

    /// A tensor whose element `i` (row-major) is `f(i)` converted to
    /// `dtype`. The tensor is allocated first, so a shape too large for the
    /// device is an out-of-memory error, not a failed host allocation.
    fn generate(
        op: &'static str,
        shape: &[usize],
        dtype: DType,
        device: &Device,
        site: &'static Location<'static>,
        mut f: impl FnMut(usize) -> f64,
    ) -> Result<Tensor> {
        let t = Tensor::uninit(shape, dtype, device, site)?;
        let to_bool = dtype == DType::Bool;
        with_native!(dtype, T => fill_from_host::<T>(&t, op, site, |dst| {
            for (i, d) in dst.iter_mut().enumerate() {
                let s = f(i);
                *d = if to_bool { T::from_i64((s != 0.0) as i64) } else { T::from_f64(s) };
            }
        }))?;
        Ok(t)
    }

    /// `start, start+1, ..` below `end`: i64 for integer bounds, the default
    /// float dtype when either bound is a float (PyTorch's `arange`).
    ///
    /// ```
    /// use tensorguard::{Device, DType, Tensor};
    /// let t = Tensor::arange(0, 5, &Device::Cpu).unwrap();
    /// assert_eq!(t.dtype(), DType::I64);
    /// assert_eq!(Tensor::arange(0.0, 2.0, &Device::Cpu).unwrap().dtype(), DType::F32);
    /// ```
    #[track_caller]
    pub fn arange(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::arange_step(start, end, 1, device)
    }

    /// `start, start+step, ..` up to (not including) `end`.
    #[track_caller]
    pub fn arange_step(
        start: impl Into<Scalar>,
        end: impl Into<Scalar>,
        step: impl Into<Scalar>,
        device: &Device,
    ) -> Result<Tensor> {
        let (s, e, st) = (start.into(), end.into(), step.into());
        let is_float = [s, e, st].iter().any(|x| matches!(x, Scalar::Float(_)));
        let dtype = if is_float { DEFAULT_FLOAT } else { DType::I64 };
        let (a, b, c) = (s.to_f64(), e.to_f64(), st.to_f64());
        if c == 0.0 || !c.is_finite() || !a.is_finite() || !b.is_finite() {
            return Err(Error::invalid("arange", format!("invalid range {s}..{e} with step {st}: the step must be nonzero and all bounds finite.")));
        }
        if (b - a) * c < 0.0 {
            return Err(Error::invalid(
                "arange",
                format!("the step {st} moves away from the end: {s}..{e} would never reach it. Use a step with the sign of end - start."),
            ));
        }
        let n = ((b - a) / c).ceil().max(0.0) as usize;
        let site = Location::caller();
        if !is_float {
            let (a, c) = (s.to_i64(), st.to_i64());
            let t = Tensor::uninit(&[n], DType::I64, device, site)?;
            fill_from_host::<i64>(&t, "arange", site, |dst| {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = a.wrapping_add((i as i64).wrapping_mul(c));
                }
            })?;
            return Ok(t);
        }
        Tensor::generate("arange", &[n], dtype, device, site, |i| a + i as f64 * c)
    }

    /// `steps` evenly spaced values from `start` to `end` inclusive (f32).
    #[track_caller]
    pub fn linspace(start: f64, end: f64, steps: usize, device: &Device) -> Result<Tensor> {
        let step = if steps > 1 {
            (end - start) / (steps - 1) as f64
        } else {
            0.0
        };
        let half = steps / 2;
        // PyTorch fills the first half from the start and the second from the
        // end, so both endpoints are exact.
        Tensor::generate(
            "linspace",
            &[steps],
            DEFAULT_FLOAT,
            device,
            Location::caller(),
            |i| {
                // one step is `start` (PyTorch fills it with start)
                if i < half || steps == 1 {
                    start + step * i as f64
                } else {
                    end - step * (steps - 1 - i) as f64
                }
            },
        )
    }

    /// An `n` x `m` matrix with ones on the diagonal.
    #[track_caller]
    pub fn eye(n: usize, m: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::generate("eye", &[n, m], dtype, device, Location::caller(), |i| {
            if i / m == i % m {
                1.0
            } else {
                0.0
            }
        })
    }

    /// Uniform random numbers in `[0, 1)` from the default generator.
    #[track_caller]
    pub fn rand(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::rand_with(shape, dtype, device, &DEFAULT_GEN)
    }

    /// Uniform random numbers in `[0, 1)` from `gen`.
    #[track_caller]
    pub fn rand_with(
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
        gen: &Generator,
    ) -> Result<Tensor> {
        float_dtype("rand", dtype)?;
        let shape = shape.into();
        let mut rng = gen.0.lock();
        Tensor::generate(
            "rand",
            shape.dims(),
            dtype,
            device,
            Location::caller(),
            |_| rng.random::<f64>(),
        )
    }

    /// Standard normal random numbers from the default generator.
    #[track_caller]
    pub fn randn(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::randn_with(shape, dtype, device, &DEFAULT_GEN)
    }

    /// Standard normal random numbers from `gen`.
    #[track_caller]
    pub fn randn_with(
        shape: impl Into<Shape>,
        dtype: DType,
        device: &Device,
        gen: &Generator,
    ) -> Result<Tensor> {
        float_dtype("randn", dtype)?;
        let shape = shape.into();
        let mut rng = gen.0.lock();
        Tensor::generate(
            "randn",
            shape.dims(),
            dtype,
            device,
            Location::caller(),
            |_| StandardNormal.sample(&mut *rng),
        )
    }

    /// Random integers in `[low, high)` (i64) from the default generator.
    #[track_caller]
    pub fn randint(
        low: i64,
        high: i64,
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        Tensor::randint_with(low, high, shape, device, &DEFAULT_GEN)
    }

    /// Random integers in `[low, high)` from `gen`.
    #[track_caller]
    pub fn randint_with(
        low: i64,
        high: i64,
        shape: impl Into<Shape>,
        device: &Device,
        gen: &Generator,
    ) -> Result<Tensor> {
        if low >= high {
            return Err(Error::invalid(
                "randint",
                format!("low ({low}) must be less than high ({high})."),
            ));
        }
        let shape = shape.into();
        let site = Location::caller();
        let t = Tensor::uninit(shape.dims(), DType::I64, device, site)?;
        let mut rng = gen.0.lock();
        fill_from_host::<i64>(&t, "randint", site, |dst| {
            dst.iter_mut()
                .for_each(|d| *d = rng.random_range(low..high));
        })?;
        Ok(t)
    }
}
