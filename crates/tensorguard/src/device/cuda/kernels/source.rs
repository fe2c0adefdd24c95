//! The CUDA C sources: their text, and which part of each (`-DTG_PART=k`,
//! compiled as one module) defines a kernel. A leaf: the launchers name a
//! source, NVRTC compiles it.

/// common.cuh, prepended to every source.
const COMMON: &str = include_str!("common.cuh");

/// The CUDA C sources (each compiled as common.cuh + the file, into one
/// module per GPU, or one per part, at first use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// elementwise.cu: copy/cast, fill, unary, binary, clamp, where, masked_fill.
    Elementwise,
    /// reduce.cu: reductions and softmax.
    Reduce,
    /// index.cu: index_select, gather, cat, index_add.
    Index,
}

impl Source {
    /// Every source.
    pub(crate) const ALL: [Source; 3] = [Source::Elementwise, Source::Reduce, Source::Index];

    /// The text NVRTC compiles: common.cuh + the file.
    pub(crate) fn text(self) -> String {
        let body = match self {
            Source::Elementwise => include_str!("elementwise.cu"),
            Source::Reduce => include_str!("reduce.cu"),
            Source::Index => include_str!("index.cu"),
        };
        format!("{COMMON}\n#line 1 \"{}\"\n{body}", self.file())
    }

    /// The file name (for errors and cache entries).
    pub(crate) fn file(self) -> &'static str {
        match self {
            Source::Elementwise => "elementwise.cu",
            Source::Reduce => "reduce.cu",
            Source::Index => "index.cu",
        }
    }

    /// The parts of the source (`-DTG_PART=k`), each compiled as one module.
    pub(crate) fn parts(self) -> std::ops::Range<u32> {
        match self {
            Source::Elementwise => 0..elementwise::PARTS,
            Source::Reduce => 0..reduce::PARTS.len() as u32,
            Source::Index => 0..index::PARTS.len() as u32,
        }
    }

    /// The part of the source that defines kernel `name` (`None`: the
    /// whole source is one part).
    pub(crate) fn part(self, name: &str) -> Option<u32> {
        match self {
            Source::Elementwise => elementwise::part(name),
            Source::Reduce => reduce::part(name),
            Source::Index => index::part(name),
        }
    }
}

/// The parts of `elementwise.cu`.
pub(super) mod elementwise {
    /// How many parts elementwise.cu has (`TG_PART` 0 to 15).
    pub(crate) const PARTS: u32 = 16;

    /// Copy kernels are parts 1..=8 (by output dtype), arithmetic ones 9..=15.
    const COPY_ORDER: [&str; 8] = ["bool", "u8", "i32", "i64", "f16", "bf16", "f32", "f64"];

    /// The part of elementwise.cu (`TG_PART`) that defines kernel `name`
    /// (`None` for a name it does not know: the whole source is compiled).
    pub(crate) fn part(name: &str) -> Option<u32> {
        let n = name.strip_prefix("tg_")?;
        let n = n.strip_suffix("_s").unwrap_or(n);
        if n.starts_with("fill_") || n.starts_with("where_") || n.starts_with("masked_fill_") {
            return Some(0);
        }
        if let Some(rest) = n.strip_prefix("copy_") {
            let out = rest.split('_').next()?;
            return COPY_ORDER
                .iter()
                .position(|&s| s == out)
                .map(|i| 1 + i as u32);
        }
        let dt = n.rsplit('_').next()?;
        COPY_ORDER[1..]
            .iter()
            .position(|&s| s == dt)
            .map(|i| 9 + i as u32)
    }
}

/// The parts of `index.cu`.
pub(super) mod index {
    /// The part of index.cu (`TG_PART`) that defines kernel `name`: the
    /// position of its dtype suffix in bool, u8, i32, i64, f16, bf16, f32, f64
    /// (`None` for a name it does not know: the whole source is compiled).
    /// The dtypes of the parts of `index.cu`, in part order.
    pub(super) const PARTS: [&str; 8] = ["bool", "u8", "i32", "i64", "f16", "bf16", "f32", "f64"];

    pub(crate) fn part(name: &str) -> Option<u32> {
        let dt = name.strip_prefix("tg_")?.rsplit('_').next()?;
        PARTS.iter().position(|&s| s == dt).map(|k| k as u32)
    }
}

/// The parts of `reduce.cu`.
pub(super) mod reduce {
    /// The dtype suffixes of `reduce.cu`'s parts, in part order.
    pub(super) const PARTS: [&str; 7] = ["u8", "i32", "i64", "f16", "bf16", "f32", "f64"];

    /// The part of reduce.cu (`TG_PART`) that defines kernel `name` (`None`
    /// for a name it does not know: the whole source is compiled).
    pub(crate) fn part(name: &str) -> Option<u32> {
        let dt = name.strip_prefix("tg_")?.rsplit('_').next()?;
        PARTS.iter().position(|&s| s == dt).map(|k| k as u32)
    }
}
