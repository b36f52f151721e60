//! Paddle 3's program text (PIR), as `print(program)` writes it: one operation a line,
//!
//! ```text
//! (%10) = "pd_op.matmul" (%7, %3) {transpose_x:false,transpose_y:false} : (tensor<8x64xf32>, tensor<64x256xf32>) -> tensor<8x256xf32>
//! ```
//!
//! results, the op's name, its operands, its attributes and its signature, inside the
//! program's `{ … }` (the grammar of `paddle/pir/src/core/parser/ir_parser.cc`). This is
//! the syntax only: `pir.rs` gives it meaning. Hostile text gets an error naming the line
//! and column, never a panic; an op with a region (`pd_op.if`, `pd_op.while`) is refused,
//! as ShardLab has no control flow.

/// One operation of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct PirOp {
    /// Its line in the text (1-based), for errors.
    pub line: usize,
    /// Its results (`%10`), in order.
    pub results: Vec<String>,
    /// `pd_op.matmul`, `builtin.parameter`, ...
    pub name: String,
    pub operands: Vec<String>,
    pub attrs: Vec<(String, PirAttr)>,
    /// The results' types, in order.
    pub result_types: Vec<PirType>,
}

impl PirOp {
    /// Attribute `name`.
    pub fn attr(&self, name: &str) -> Option<&PirAttr> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum PirAttr {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<PirAttr>),
    /// A bare word: `float32`, `Undefined`, `Place(cpu)`.
    Word(String),
}

impl PirAttr {
    /// The value as a number (an integer is one too).
    pub fn number(&self) -> Option<f64> {
        match self {
            PirAttr::Int(i) => Some(*i as f64),
            PirAttr::Float(f) => Some(*f),
            PirAttr::Bool(_) | PirAttr::Str(_) | PirAttr::List(_) | PirAttr::Word(_) => None,
        }
    }

    /// The value as a list of integers.
    pub fn ints(&self) -> Option<Vec<i64>> {
        let PirAttr::List(xs) = self else {
            return None;
        };
        xs.iter()
            .map(|x| {
                if let PirAttr::Int(i) = x {
                    Some(*i)
                } else {
                    None
                }
            })
            .collect()
    }

    /// The value as a flag (`[true]` lists of one flag included, as Paddle prints
    /// `stop_gradient`).
    pub fn flag(&self) -> Option<bool> {
        if let PirAttr::Bool(b) = self {
            return Some(*b);
        }
        if let PirAttr::List(xs) = self {
            if let [PirAttr::Bool(b)] = xs.as_slice() {
                return Some(*b);
            }
        }
        None
    }

    /// The value as text (a string or a bare word).
    pub fn text(&self) -> Option<&str> {
        match self {
            PirAttr::Str(s) | PirAttr::Word(s) => Some(s),
            PirAttr::Bool(_) | PirAttr::Int(_) | PirAttr::Float(_) | PirAttr::List(_) => None,
        }
    }
}

/// A value's type.
#[derive(Clone, Debug, PartialEq)]
pub enum PirType {
    /// `tensor<2x16xf32>`: its dims (`-1` for a dynamic one) and element type (`f32`,
    /// `i64`, `b`, ...); `tensor<f32>` has no dims.
    Tensor { dims: Vec<i64>, dtype: String },
    /// `vec[tensor<…>, …]`, what `builtin.combine` makes.
    Vec(Vec<PirType>),
    /// Anything else, as written.
    Other(String),
}

/// Why the text is not a program, and where.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("line {line}, column {col}: {message}")]
pub struct PirSyntaxError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// The most nesting an attribute or type may have (a hostile `[[[[…` stops here).
const MAX_DEPTH: usize = 64;

struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
    line: usize,
    line_start: usize,
}

type Res<T> = Result<T, PirSyntaxError>;

/// Parses a program's text: the operations of its top block, in order.
pub fn parse(text: &str) -> Res<Vec<PirOp>> {
    let mut c = Cursor {
        s: text.as_bytes(),
        at: 0,
        line: 1,
        line_start: 0,
    };
    c.skip_space();
    c.expect(b'{', "the program's `{`")?;
    let mut ops = Vec::new();
    loop {
        c.skip_space();
        match c.peek() {
            Some(b'}') => {
                c.bump();
                break;
            }
            None => return Err(c.error("the program ends without its closing `}`")),
            Some(_) => ops.push(c.op()?),
        }
    }
    c.skip_space();
    if c.peek().is_some() {
        return Err(c.error("text after the program's closing `}`"));
    }
    Ok(ops)
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn bump(&mut self) {
        if self.peek() == Some(b'\n') {
            self.line += 1;
            self.line_start = self.at + 1;
        }
        self.at += 1;
    }

    fn error(&self, message: impl Into<String>) -> PirSyntaxError {
        PirSyntaxError {
            line: self.line,
            col: self.at - self.line_start + 1,
            message: message.into(),
        }
    }

    /// Skips blanks on the current line (not its end).
    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
            self.bump();
        }
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.bump();
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.skip_blanks();
        if self.peek() == Some(b) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, b: u8, what: &str) -> Res<()> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(self.error(format!("expected {what}")))
        }
    }

    fn eat_str(&mut self, word: &str) -> bool {
        self.skip_blanks();
        if self.s[self.at..].starts_with(word.as_bytes()) {
            for _ in 0..word.len() {
                self.bump();
            }
            true
        } else {
            false
        }
    }

    /// A run of identifier characters (`[A-Za-z0-9_.@-]`), maybe empty.
    fn word(&mut self) -> String {
        self.skip_blanks();
        let start = self.at;
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'@' | b'-' | b'+'))
        {
            self.bump();
        }
        String::from_utf8_lossy(&self.s[start..self.at]).into_owned()
    }

    /// `"…"`, with `\"` and `\\` escapes.
    fn string(&mut self) -> Res<String> {
        self.expect(b'"', "`\"`")?;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None | Some(b'\n') => return Err(self.error("a string without its closing `\"`")),
                Some(b'"') => {
                    self.bump();
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                Some(b'\\') => {
                    self.bump();
                    match self.peek() {
                        Some(c) if c != b'\n' => {
                            out.push(c);
                            self.bump();
                        }
                        _ => return Err(self.error("a string ends in `\\`")),
                    }
                }
                Some(c) => {
                    out.push(c);
                    self.bump();
                }
            }
        }
    }

    /// `%12` (or `%name`).
    fn value(&mut self) -> Res<String> {
        self.expect(b'%', "a value (`%N`)")?;
        let w = self.word();
        if w.is_empty() {
            return Err(self.error("expected a value's number after `%`"));
        }
        Ok(format!("%{w}"))
    }

    /// `(%1, %2)` or `()`.
    fn values(&mut self) -> Res<Vec<String>> {
        self.expect(b'(', "`(`")?;
        let mut out = Vec::new();
        if self.eat(b')') {
            return Ok(out);
        }
        loop {
            out.push(self.value()?);
            if self.eat(b')') {
                return Ok(out);
            }
            self.expect(b',', "`,` or `)`")?;
        }
    }

    fn op(&mut self) -> Res<PirOp> {
        let line = self.line;
        self.skip_blanks();
        let results = if self.peek() == Some(b'(') {
            let r = self.values()?;
            self.expect(b'=', "`=` after the results")?;
            r
        } else {
            Vec::new()
        };
        self.skip_blanks();
        let name = self.string()?;
        let operands = self.values()?;
        let attrs = self.attrs()?;
        let mut result_types = Vec::new();
        if self.eat(b':') {
            self.expect(b'(', "the operands' types")?;
            if !self.eat(b')') {
                self.types(0)?;
                self.expect(b')', "`)` after the operands' types")?;
            }
            if !self.eat_str("->") {
                return Err(self.error("expected `->` and the results' types"));
            }
            self.skip_blanks();
            if !matches!(self.peek(), Some(b'\n') | None) {
                result_types = self.types(0)?;
            }
        }
        self.skip_blanks();
        match self.peek() {
            Some(b'{') => Err(self.error(format!(
                "`{name}` has a region (control flow), which ShardLab does not import"
            ))),
            Some(b'\n') | None => Ok(PirOp {
                line,
                results,
                name,
                operands,
                attrs,
                result_types,
            }),
            Some(c) => Err(self.error(format!("unexpected `{}` after `{name}`", c as char))),
        }
    }

    fn attrs(&mut self) -> Res<Vec<(String, PirAttr)>> {
        let mut out = Vec::new();
        if !self.eat(b'{') {
            return Ok(out);
        }
        loop {
            if self.eat(b'}') {
                return Ok(out);
            }
            let key = self.word();
            if key.is_empty() {
                return Err(self.error("expected an attribute's name"));
            }
            self.expect(b':', "`:` after the attribute's name")?;
            let value = self.attr_value(0)?;
            out.push((key, value));
            if !self.eat(b',') {
                self.expect(b'}', "`,` or `}` after an attribute")?;
                return Ok(out);
            }
        }
    }

    fn attr_value(&mut self, depth: usize) -> Res<PirAttr> {
        if depth > MAX_DEPTH {
            return Err(self.error("attributes nested too deep"));
        }
        self.skip_blanks();
        match self.peek() {
            Some(b'"') => Ok(PirAttr::Str(self.string()?)),
            Some(b'[') => {
                self.bump();
                let mut xs = Vec::new();
                if self.eat(b']') {
                    return Ok(PirAttr::List(xs));
                }
                loop {
                    xs.push(self.attr_value(depth + 1)?);
                    if self.eat(b']') {
                        return Ok(PirAttr::List(xs));
                    }
                    self.expect(b',', "`,` or `]` in a list")?;
                }
            }
            _ => {
                let w = self.word();
                if w.is_empty() {
                    return Err(self.error("expected an attribute's value"));
                }
                if self.peek() == Some(b'(') {
                    return Ok(PirAttr::Word(format!("{w}{}", self.balanced()?)));
                }
                Ok(scalar(w))
            }
        }
    }

    /// `( … )` as written, nested parentheses included (`Place(undefined:0)`).
    fn balanced(&mut self) -> Res<String> {
        let start = self.at;
        let mut depth = 0usize;
        loop {
            match self.peek() {
                None | Some(b'\n') => return Err(self.error("a `(` without its `)`")),
                Some(b'(') => depth += 1,
                Some(b')') => {
                    depth -= 1;
                    if depth == 0 {
                        self.bump();
                        return Ok(String::from_utf8_lossy(&self.s[start..self.at]).into_owned());
                    }
                }
                Some(_) => {}
            }
            self.bump();
        }
    }

    fn types(&mut self, depth: usize) -> Res<Vec<PirType>> {
        let mut out = vec![self.ty(depth)?];
        while self.eat(b',') {
            out.push(self.ty(depth)?);
        }
        Ok(out)
    }

    fn ty(&mut self, depth: usize) -> Res<PirType> {
        if depth > MAX_DEPTH {
            return Err(self.error("types nested too deep"));
        }
        let w = self.word();
        let base = w.rsplit('.').next().unwrap_or("");
        match base {
            "tensor" => {
                self.expect(b'<', "`<` after `tensor`")?;
                let start = self.at;
                while !matches!(self.peek(), Some(b'>' | b'\n') | None) {
                    self.bump();
                }
                let inner = String::from_utf8_lossy(&self.s[start..self.at]).into_owned();
                self.expect(b'>', "`>` closing a tensor type")?;
                tensor_type(&inner)
                    .ok_or_else(|| self.error(format!("`tensor<{inner}>` is not a tensor type")))
            }
            "vec" => {
                self.expect(b'[', "`[` after `vec`")?;
                if self.eat(b']') {
                    return Ok(PirType::Vec(Vec::new()));
                }
                let xs = self.types(depth + 1)?;
                self.expect(b']', "`]` closing a vec type")?;
                Ok(PirType::Vec(xs))
            }
            "" => Err(self.error("expected a type")),
            _ => {
                let rest = if self.peek() == Some(b'<') {
                    let start = self.at;
                    while !matches!(self.peek(), Some(b'>' | b'\n') | None) {
                        self.bump();
                    }
                    self.expect(b'>', "`>`")?;
                    String::from_utf8_lossy(&self.s[start..self.at]).into_owned()
                } else {
                    String::new()
                };
                Ok(PirType::Other(format!("{w}{rest}")))
            }
        }
    }
}

/// A bare attribute word: a flag, a number or a word.
fn scalar(w: String) -> PirAttr {
    match w.as_str() {
        "true" => return PirAttr::Bool(true),
        "false" => return PirAttr::Bool(false),
        _ => {}
    }
    if let Ok(i) = w.parse::<i64>() {
        return PirAttr::Int(i);
    }
    if w.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') {
        if let Ok(f) = w.parse::<f64>() {
            return PirAttr::Float(f);
        }
    }
    PirAttr::Word(w)
}

/// `2x16xf32` (dims then element type), `f32` (no dims) or `-1x16xf32`.
fn tensor_type(inner: &str) -> Option<PirType> {
    let mut parts: Vec<&str> = inner.split('x').collect();
    let dtype = parts.pop()?.trim().to_string();
    if dtype.is_empty() || dtype.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
        return None;
    }
    let dims = parts
        .iter()
        .map(|d| match d.trim() {
            "?" => Some(-1),
            d => d.parse::<i64>().ok(),
        })
        .collect::<Option<Vec<_>>>()?;
    Some(PirType::Tensor { dims, dtype })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_with_results_operands_attributes_and_types() {
        let ops = parse(
            "{\n    (%7, %8) = \"pd_op.layer_norm\" (%6, %5) {begin_norm_axis:2,epsilon:1e-05,place:Place(undefined:0),stop_gradient:[false,true],name:\"a\\\"b\"} : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>, tensor<f32>\n    \"pd_op.fetch\" (%7) {} : (tensor<8x64xf32>) -> \n}\n",
        )
        .unwrap();
        assert_eq!(ops.len(), 2);
        let ln = &ops[0];
        assert_eq!((ln.line, ln.name.as_str()), (2, "pd_op.layer_norm"));
        assert_eq!(ln.results, ["%7", "%8"]);
        assert_eq!(ln.operands, ["%6", "%5"]);
        assert_eq!(ln.attr("begin_norm_axis"), Some(&PirAttr::Int(2)));
        assert_eq!(ln.attr("epsilon"), Some(&PirAttr::Float(1e-5)));
        assert_eq!(
            ln.attr("place"),
            Some(&PirAttr::Word("Place(undefined:0)".into()))
        );
        assert_eq!(ln.attr("name"), Some(&PirAttr::Str("a\"b".into())));
        assert_eq!(
            ln.result_types,
            [
                PirType::Tensor {
                    dims: vec![8, 64],
                    dtype: "f32".into()
                },
                PirType::Tensor {
                    dims: vec![],
                    dtype: "f32".into()
                }
            ]
        );
        assert!(ops[1].results.is_empty() && ops[1].result_types.is_empty());
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let cases = [
            ("", "line 1, column 1: expected the program's `{`"),
            ("{\n  (%1) = \"x\" (%0 {}\n}", "line 2, column 18: expected `,` or `)`"),
            ("{\n  (%1) = \"pd_op.if\" () {} : () -> tensor<f32> {\n}\n}", "`pd_op.if` has a region"),
            ("{\n  (%1) = \"a\" () {k:[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1", "nested too deep"),
            ("{\n  (%1) = \"a\" () {} : () -> tensor<8xq>", "line 2"),
            ("{\n  (%1) = \"a\" () {} : () -> tensor<4x>\n}", "is not a tensor type"),
            ("{\n}\n}", "text after the program's closing"),
            ("{\n  (%1) = \"a", "without its closing"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
