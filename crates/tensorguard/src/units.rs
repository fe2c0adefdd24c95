//! Byte counts for people. A leaf of the module graph, shared by the
//! allocator's reports and the error messages.

/// Formats a byte count for people: `"512 B"`, `"1.50 KiB"`, `"2.00 MiB"`,
/// `"1.00 GiB"`, `"3.00 TiB"` (binary units, two decimals above 1 KiB).
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_bytes_units() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1.00 KiB");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(2 << 20), "2.00 MiB");
        assert_eq!(format_bytes(1 << 30), "1.00 GiB");
        assert_eq!(format_bytes(3 << 40), "3.00 TiB");
        assert_eq!(format_bytes(u64::MAX), "16.00 EiB");
    }
}
