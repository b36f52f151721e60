//! Python literals: strings, numbers, lists, so generated code reads back exactly what
//! the plan holds (names with quotes or `@`, floats to the last bit, infinities).

/// A Python string literal (double-quoted, escaped).
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A Python float literal that reads back as the same f64.
pub fn float(x: f64) -> String {
    if x.is_nan() {
        "float(\"nan\")".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "float(\"inf\")".into()
        } else {
            "float(\"-inf\")".into()
        }
    } else {
        // Rust's shortest round-trip form; always with a point or exponent.
        let s = format!("{x:?}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    }
}

/// `True` / `False`.
pub fn boolean(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// `[a, b, c]` from already formatted items.
pub fn list<I: IntoIterator<Item = String>>(items: I) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(", "))
}

/// A Python tuple literal (with the trailing comma of a 1-tuple).
pub fn tuple<I: IntoIterator<Item = String>>(items: I) -> String {
    let items: Vec<String> = items.into_iter().collect();
    match items.len() {
        1 => format!("({},)", items[0]),
        _ => format!("({})", items.join(", ")),
    }
}

/// A list of integers.
pub fn ints<T: std::fmt::Display, I: IntoIterator<Item = T>>(items: I) -> String {
    list(items.into_iter().map(|i| i.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_read_back() {
        assert_eq!(string("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(string("x\u{1}"), "\"x\\x01\"");
        assert_eq!(float(1.0), "1.0");
        assert_eq!(float(1e-5), "1e-5");
        assert_eq!(float(0.1), "0.1");
        assert_eq!(float(f64::INFINITY), "float(\"inf\")");
        assert_eq!(float(f64::NAN), "float(\"nan\")");
        assert_eq!(tuple(["\"dp\"".to_string()]), "(\"dp\",)");
        assert_eq!(ints([1, 2]), "[1, 2]");
    }
}
