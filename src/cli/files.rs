//! Reading the files a user names, bounded: a plan file or an `.npy` input is read up to a
//! limit and refused past it, so `/dev/zero`, a FIFO that never ends or a huge file is an
//! error named at once, not gigabytes of memory.

use std::io::Read;

/// The most a plan file may be: 64 MiB is some 600,000 lines of ops, far past any model
/// the planner handles in memory.
pub const PLAN_FILE_LIMIT: u64 = 64 << 20;

/// The most an `.npy` header may be: numpy writes at most 64 KiB (format 1.0) and a few
/// KiB in practice (format 2.0 allows 4 GiB, which no array needs).
pub const NPY_HEADER_LIMIT: u64 = 1 << 20;

/// Why a bounded read failed.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be opened or read (a usage error: a missing file).
    Io(String),
    /// The file is larger than `limit` bytes (invalid input).
    TooLarge { limit: u64 },
}

/// Reads at most `limit` bytes of `path`; more is an error, found after reading `limit + 1`.
pub fn read_limited(path: &std::path::Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::File::open(path).map_err(|e| ReadError::Io(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Io(e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// `bytes` as UTF-8 text, or where the first invalid byte is (1-based line and column,
/// counted in characters) and what it is.
pub fn utf8(bytes: Vec<u8>) -> Result<String, (usize, usize, String)> {
    String::from_utf8(bytes).map_err(|e| {
        let good = e.utf8_error().valid_up_to();
        let bytes = e.into_bytes();
        // The prefix is valid UTF-8 by construction.
        let prefix = std::str::from_utf8(&bytes[..good]).unwrap_or_default();
        let line = prefix.matches('\n').count() + 1;
        let col = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        let byte = bytes.get(good).copied().unwrap_or(0);
        (
            line,
            col,
            format!("byte 0x{byte:02x} is not UTF-8: a plan file is UTF-8 text"),
        )
    })
}

/// `n` bytes as `64 MiB`, `1 MiB`, `512 KiB` or bytes.
pub fn human(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_is_placed_at_its_line_and_column() {
        let (line, col, why) = utf8(b"mesh [2] (dp)\nvar \xe9x".to_vec()).unwrap_err();
        assert_eq!((line, col), (2, 5));
        assert!(why.contains("0xe9"), "{why}");
        assert_eq!(utf8("héllo".as_bytes().to_vec()).unwrap(), "héllo");
    }

    #[test]
    fn sizes_read_as_humans_write_them() {
        assert_eq!(human(64 << 20), "64 MiB");
        assert_eq!(human(3 << 10), "3 KiB");
        assert_eq!(human(1000), "1000 bytes");
    }
}
