//! Random number generators: [`Generator`] (ChaCha8, seedable), its
//! saved [`GeneratorState`], and the default generator behind
//! `Tensor::rand` and friends. A leaf: tensors are made in `ops`.

use std::sync::LazyLock;

use parking_lot::Mutex;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};

/// A seedable random number generator for
/// [`Tensor::rand_with`](crate::Tensor::rand_with) and friends.
/// The default generator behind [`Tensor::rand`](crate::Tensor::rand) is seeded with
/// [`manual_seed`]. Streams are reproducible for a given seed (ChaCha8).
///
/// ```
/// use tensorguard::{Device, DType, Generator, Tensor};
/// let g = Generator::new(7);
/// let a = Tensor::rand_with([3], DType::F32, &Device::Cpu, &g).unwrap();
/// let b = Tensor::rand_with([3], DType::F32, &Device::Cpu, &Generator::new(7)).unwrap();
/// assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
/// ```
pub struct Generator(pub(crate) Mutex<ChaCha8Rng>);

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

pub(crate) static DEFAULT_GEN: LazyLock<Generator> = LazyLock::new(|| Generator::new(0x5eed));

/// The default generator behind [`Tensor::rand`](crate::Tensor::rand),
/// [`Tensor::randn`](crate::Tensor::randn) and
/// [`Tensor::randint`](crate::Tensor::randint) (PyTorch's `torch.default_generator`), e.g. to save
/// its [`state`](Generator::state) with a checkpoint.
pub fn default_generator() -> &'static Generator {
    &DEFAULT_GEN
}

/// Seed the default generator (PyTorch's `torch.manual_seed`).
pub fn manual_seed(seed: u64) {
    DEFAULT_GEN.manual_seed(seed);
}
