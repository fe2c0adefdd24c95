//! Byte sizes on the command line: `1KiB`, `64MiB`, `1GiB`, `4096`.

/// The default sizes: powers of 4 from 1 KiB to 1 GiB (the article's and
/// the reference script's).
pub fn default_sizes() -> Vec<usize> {
    (0..11).map(|k| 1024usize << (2 * k)).collect()
}

/// Parse one size ([`tensorguard::memory::parse_bytes`]: units are powers
/// of 1024, a plain number is bytes) that a float32 copy can have.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let bad = |why: &str| {
        format!("bench copy: `{s}` is not a size: {why}. Write sizes like `1KiB`, `64MiB`, `1GiB` or a number of bytes, separated by commas.")
    };
    let bytes = tensorguard::memory::parse_bytes(s).map_err(|e| match e {
        tensorguard::Error::InvalidArgument { message, .. } => bad(message.trim_end_matches('.')),
        other => bad(&other.to_string()),
    })?;
    if bytes == 0 {
        return Err(bad("a copy of 0 bytes measures nothing"));
    }
    if bytes % 4 != 0 {
        return Err(bad(
            "the copies use float32 tensors, so a size must be a multiple of 4 bytes",
        ));
    }
    Ok(bytes)
}

/// Parse a comma-separated list, sorted and without repeats.
pub fn parse_list(s: &str) -> Result<Vec<usize>, String> {
    let mut v = s
        .split(',')
        .map(parse_size)
        .collect::<Result<Vec<_>, _>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// `1 KiB`, `64 MiB`, `1.5 GiB`, `100 B`: exact binary units when they fit.
pub fn format_size(bytes: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, name) in UNITS {
        if bytes >= u {
            return if bytes.is_multiple_of(u) {
                format!("{} {name}", bytes / u)
            } else {
                format!("{:.1} {name}", bytes as f64 / u as f64)
            };
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size(" 64MiB "), Ok(64 << 20));
        assert_eq!(parse_size("1gb"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_list("64MiB,1KiB,1KiB"), Ok(vec![1024, 64 << 20]));
        assert!(parse_size("lots")
            .unwrap_err()
            .contains("`lots` is not a size"));
        assert!(parse_size("3KiX")
            .unwrap_err()
            .contains("`KiX` is not a unit"));
        assert!(parse_size("0").is_err());
        assert!(parse_size("6").unwrap_err().contains("multiple of 4"));
        assert_eq!(default_sizes().first(), Some(&1024));
        assert_eq!(default_sizes().last(), Some(&(1 << 30)));
        assert_eq!(default_sizes().len(), 11);
        assert_eq!(format_size(1024), "1 KiB");
        assert_eq!(format_size(1 << 30), "1 GiB");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(12), "12 B");
    }
}
