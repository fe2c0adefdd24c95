//! The models `tensorguard train` builds: an MLP and a two-conv-layer CNN,
//! split into blocks so that `--checkpoint-activations` can recompute each
//! block in backward instead of keeping its activations.

use tensorguard::{Device, Error, Result, Tensor};
use tensorguard_nn::{Checkpointed, Conv2d, Flatten, Linear, MaxPool2d, Module, ReLU, Sequential};

/// Which model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelKind {
    /// Fully connected: input -> 256 -> 256 -> classes (ReLU).
    Mlp,
    /// Two 3x3 conv layers (16 and 32 channels, ReLU, 2x2 max-pool each), then 128 hidden units and the classifier.
    Cnn,
}

/// A model made of blocks run one after the other; with checkpointing,
/// each block but the last is recomputed in backward.
pub struct Net {
    blocks: Sequential,
    kind: ModelKind,
    /// `[C, H, W]` for the CNN (inputs are reshaped to `[N, C, H, W]`).
    image: Option<[usize; 3]>,
}

impl Net {
    /// A model for inputs of `shape` (`[C, H, W]`) and `classes` outputs.
    pub fn new(
        kind: ModelKind,
        shape: &[usize],
        classes: usize,
        checkpoint: bool,
        dev: &Device,
    ) -> Result<Net> {
        let numel: usize = shape.iter().product();
        let blocks: Vec<Sequential> = match kind {
            ModelKind::Mlp => vec![
                Sequential::new()
                    .add(Flatten::new())
                    .add(Linear::new(numel, 256, true, dev)?)
                    .add(ReLU),
                Sequential::new()
                    .add(Linear::new(256, 256, true, dev)?)
                    .add(ReLU),
                Sequential::new().add(Linear::new(256, classes, true, dev)?),
            ],
            ModelKind::Cnn => {
                let (c, h, w) = image_shape(shape).ok_or_else(|| Error::InvalidArgument {
                    op: "train",
                    message: format!("the CNN needs image inputs ([C, H, W], [H, W] or a square number of pixels), got examples of shape {shape:?}. Use --model mlp."),
                })?;
                let (h2, w2) = (h / 2 / 2, w / 2 / 2);
                vec![
                    Sequential::new()
                        .add(Conv2d::new(c, 16, 3, 1, 1, true, dev)?)
                        .add(ReLU)
                        .add(MaxPool2d::new(2, None)?),
                    Sequential::new()
                        .add(Conv2d::new(16, 32, 3, 1, 1, true, dev)?)
                        .add(ReLU)
                        .add(MaxPool2d::new(2, None)?),
                    Sequential::new()
                        .add(Flatten::new())
                        .add(Linear::new(32 * h2 * w2, 128, true, dev)?)
                        .add(ReLU)
                        .add(Linear::new(128, classes, true, dev)?),
                ]
            }
        };
        let n = blocks.len();
        let mut seq = Sequential::new();
        for (i, b) in blocks.into_iter().enumerate() {
            if checkpoint && i + 1 < n {
                seq = seq.add(Checkpointed::new(b));
            } else {
                seq = seq.add(b);
            }
        }
        let image = (kind == ModelKind::Cnn)
            .then(|| image_shape(shape).map(|(c, h, w)| [c, h, w]))
            .flatten();
        Ok(Net {
            blocks: seq,
            kind,
            image,
        })
    }

    /// Which model this is.
    pub fn kind(&self) -> ModelKind {
        self.kind
    }
}

impl Module for Net {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.image {
            Some([c, h, w]) => self
                .blocks
                .forward(&x.reshape([-1, c as isize, h as isize, w as isize])?),
            None => self.blocks.forward(x),
        }
    }
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        self.blocks.visit_params(prefix, f)
    }
    fn visit_params_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        self.blocks.visit_params_mut(prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor)) {
        self.blocks.visit_buffers(prefix, f)
    }
    fn visit_buffers_mut(
        &mut self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>,
    ) -> Result<()> {
        self.blocks.visit_buffers_mut(prefix, f)
    }
    fn set_training(&mut self, on: bool) {
        self.blocks.set_training(on)
    }
    fn describe(&self) -> String {
        self.blocks.describe()
    }
}

/// `(C, H, W)` of an example shape: `[C, H, W]`, `[H, W]`, or a square
/// number of pixels (`[64]` is one 8x8 channel).
fn image_shape(shape: &[usize]) -> Option<(usize, usize, usize)> {
    match *shape {
        [c, h, w] => Some((c, h, w)),
        [h, w] => Some((1, h, w)),
        [n] => {
            let s = (n as f64).sqrt().round() as usize;
            (s * s == n && s >= 4).then_some((1, s, s))
        }
        _ => None,
    }
}
