//! The memory budget: what a command may allocate, checked against an estimate before it
//! allocates. The budget covers what the command itself holds (`run`'s tensors; the programs
//! `print` and `plan` build), never the memory a plan describes.

/// `--max-memory`: bytes, or a number with K, M, G or T (powers of 1024).
pub fn parse_bytes(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let scale = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1.0,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "--max-memory `{text}`: write bytes, or e.g. 512M or 4G"
            ))
        }
    };
    match digits.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 => Ok(n * scale),
        _ => Err(format!(
            "--max-memory `{text}`: write bytes, or e.g. 512M or 4G"
        )),
    }
}

/// The default budget: half the memory available now (`/proc/meminfo`), or 4 GiB where
/// that cannot be read.
pub fn default_budget() -> f64 {
    let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb * 1024.0)
    });
    available.map_or(4.0 * 1024.0 * 1024.0 * 1024.0, |b| b / 2.0)
}

/// The budget from `--max-memory`, or the default.
pub fn budget(flag: &Option<String>) -> Result<f64, String> {
    flag.as_deref().map_or(Ok(default_budget()), parse_bytes)
}

fn human(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `Err` with a message saying what would be needed when `needed` exceeds `budget`.
pub fn check(what: &str, needed: f64, budget: f64) -> Result<(), String> {
    if needed <= budget {
        return Ok(());
    }
    Err(format!(
        "{what} would need about {}, more than the memory budget of {} \
         (half the available memory by default; --max-memory to change it)",
        human(needed),
        human(budget)
    ))
}

/// Whether planning every rank of `plan` fits `budget`; prints the error when it does not
/// (the caller exits 1: the input is too big, not a usage error).
pub fn planning_fits(plan: &crate::plan::Plan, budget: f64) -> bool {
    let needed = plan.estimated_planning_bytes(crate::plan::RanksPlanned::All);
    match check("planning", needed, budget) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("error: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("1024").unwrap(), 1024.0);
        assert_eq!(parse_bytes("2K").unwrap(), 2048.0);
        assert_eq!(parse_bytes("1.5G").unwrap(), 1.5 * 1024.0 * 1024.0 * 1024.0);
        assert_eq!(parse_bytes("3GiB").unwrap(), 3.0 * 1024.0 * 1024.0 * 1024.0);
        for bad in ["", "-1", "0", "G", "12Q", "nan", "inf"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert!(check("x", 2.0, 1.0)
            .unwrap_err()
            .contains("more than the memory budget"));
    }
}
