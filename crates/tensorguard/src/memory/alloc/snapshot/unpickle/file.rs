//! Reading a snapshot file into memory, refusing what is not a snapshot
//! file: a device (`/dev/zero` never ends), a FIFO (opening one waits for a
//! writer), a directory, or a file larger than [`max_file_bytes`].

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// The largest snapshot file read by default: 4 GiB (a snapshot of a
/// million trace events is about 100 MB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 4 << 30;

/// The environment variable that overrides [`DEFAULT_MAX_FILE_BYTES`]
/// (a size such as `16GiB` or a number of bytes).
pub const MAX_FILE_BYTES_ENV: &str = "TENSORGUARD_SNAPSHOT_MAX_BYTES";

/// The largest snapshot file [`read_file`] reads: `$TENSORGUARD_SNAPSHOT_MAX_BYTES`
/// when set, else [`DEFAULT_MAX_FILE_BYTES`].
///
/// ```
/// use tensorguard::memory::snapshot_pickle::{max_file_bytes, DEFAULT_MAX_FILE_BYTES, MAX_FILE_BYTES_ENV};
/// if std::env::var_os(MAX_FILE_BYTES_ENV).is_none() {
///     assert_eq!(max_file_bytes()?, DEFAULT_MAX_FILE_BYTES);
/// }
/// # Ok::<(), tensorguard::Error>(())
/// ```
pub fn max_file_bytes() -> Result<u64> {
    match std::env::var(MAX_FILE_BYTES_ENV) {
        Ok(s) => crate::memory::alloc::parse_bytes(&s)
            .map(|n| n as u64)
            .map_err(|e| {
                Error::invalid(
                    "memory::snapshot_pickle::max_file_bytes",
                    format!(
                        "{MAX_FILE_BYTES_ENV}={s:?} is not a size ({e}); set it to a size such as \
                     `16GiB`, or unset it for the default of 4 GiB."
                    ),
                )
            }),
        Err(_) => Ok(DEFAULT_MAX_FILE_BYTES),
    }
}

/// Reads the whole snapshot file at `path`, after checking that it is a
/// regular file of at most [`max_file_bytes`] bytes (and reading no more
/// than that, should it grow meanwhile).
///
/// ```
/// use tensorguard::memory::snapshot_pickle::read_file;
/// let err = read_file(std::path::Path::new("/")).unwrap_err().to_string();
/// assert!(err.contains("/ is not a regular file (it is a directory)"), "{err}");
/// ```
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    read_file_as("memory::snapshot_pickle::read_file", path)
}

/// [`read_file`], with errors naming `api`.
pub(crate) fn read_file_as(api: &'static str, path: &Path) -> Result<Vec<u8>> {
    let limit = max_file_bytes()?;
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::invalid(
            api,
            format!("could not open {shown}: {e}. Check the path; snapshots are written by memory::dump_snapshot or torch.cuda.memory._dump_snapshot."),
        )
    })?;
    let not_regular = |meta: &std::fs::Metadata| {
        Error::invalid(
            api,
            format!(
                "{shown} is not a regular file (it is {}); a memory snapshot is a file written by \
                 memory::dump_snapshot or torch.cuda.memory._dump_snapshot. Pass the path of \
                 such a file.",
                kind(meta)
            ),
        )
    };
    let too_big = |len: u64| {
        Error::invalid(
            api,
            format!(
                "{shown} is {len} bytes, more than the limit of {limit} bytes for a snapshot \
                 file; a snapshot of a million trace events is about 100 MB. If the file \
                 really is a snapshot, raise the limit with {MAX_FILE_BYTES_ENV}=<size> \
                 (e.g. 16GiB)."
            ),
        )
    };
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    if meta.len() > limit {
        return Err(too_big(meta.len()));
    }
    let could_not_read = |e: std::io::Error| {
        Error::invalid(
            api,
            format!("could not read {shown}: {e}. Check that the file is readable."),
        )
    };
    let file = File::open(path).map_err(could_not_read)?;
    // The path may have been replaced between the two looks.
    let meta = file.metadata().map_err(could_not_read)?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.len().min(limit)).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(could_not_read)?;
    if data.len() as u64 > limit {
        return Err(too_big(data.len() as u64));
    }
    Ok(data)
}

/// What a file that is not a regular file is, for messages.
fn kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO, whose data never ends while a writer keeps it open";
        }
        if t.is_char_device() {
            return "a character device such as /dev/zero, whose data may never end";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a plain file"
}
