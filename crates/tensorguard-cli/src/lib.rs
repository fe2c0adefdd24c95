//! The `tensorguard` command line's library: the pieces of the CLI that are
//! worth testing and reusing on their own.
//!
//! - [`memviz`]: reads memory snapshots (PyTorch's `_dump_snapshot` pickles
//!   or JSON) and analyzes them; `tensorguard memviz` prints its report.
//! - [`train`]: the main job, `tensorguard train`: trains a classifier and
//!   reports accuracy, time, memory, copies and synchronisations.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod memviz;
pub mod train;
