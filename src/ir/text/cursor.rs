//! A cursor over one line's tokens with the small vocabulary every statement parser uses.
//! Shared by the program statements here and the plan statements in `crate::plan`.

use super::lexer::{Tok, Token};
use std::fmt;

/// A parse error at a line and column (both 1-based), saying what was expected.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, thiserror::Error)]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

/// Tokens of one line and a position in them.
pub struct Cursor {
    toks: Vec<Token>,
    pos: usize,
    line: usize,
    /// Column just past the end of the line, for "found end of line" errors.
    end_col: usize,
}

impl Cursor {
    /// A cursor over `toks` from line `line` whose text is `len` characters long.
    pub fn new(toks: Vec<Token>, line: usize, len: usize) -> Cursor {
        Cursor {
            toks,
            pos: 0,
            line,
            end_col: len + 1,
        }
    }

    /// The line number (1-based).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The next token, if any, without consuming it.
    pub fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.kind)
    }

    /// The column of the next token (or of the end of the line).
    pub fn col(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end_col, |t| t.col)
    }

    /// Whether every token was consumed.
    pub fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    /// An error at the next token.
    pub fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            col: self.col(),
            message: message.into(),
        }
    }

    /// An error at a given column of this line.
    pub fn error_at(&self, col: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            col,
            message: message.into(),
        }
    }

    /// "expected WHAT, found X" at the next token.
    pub fn expected(&self, what: &str) -> ParseError {
        let found = match self.peek() {
            Some(t) => t.to_string(),
            None => "end of line".to_string(),
        };
        self.error(format!("expected {what}, found {found}"))
    }

    /// Consumes and returns the next token.
    pub fn bump(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|t| t.kind.clone());
        self.pos += 1;
        t
    }

    /// Consumes `c` if it is next.
    pub fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Punct(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes `c` or fails saying it was expected.
    pub fn expect_char(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(&if c == '>' {
                "`->`".to_string()
            } else {
                format!("`{c}`")
            }))
        }
    }

    /// Consumes the keyword `kw` if it is next.
    pub fn eat_keyword(&mut self, kw: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Ident(s)) if s == kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes a name, returning it with its column.
    pub fn ident(&mut self, what: &str) -> Result<(String, usize), ParseError> {
        let col = self.col();
        match self.peek() {
            Some(Tok::Ident(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok((s, col))
            }
            _ => Err(self.expected(what)),
        }
    }

    /// Consumes an integer.
    pub fn int(&mut self, what: &str) -> Result<i64, ParseError> {
        match self.peek() {
            Some(Tok::Int(i)) => {
                let i = *i;
                self.pos += 1;
                Ok(i)
            }
            _ => Err(self.expected(what)),
        }
    }

    /// Parses `open item (, item)* close`, allowing an empty list and a trailing comma.
    pub fn list<T>(
        &mut self,
        open: char,
        close: char,
        mut item: impl FnMut(&mut Cursor) -> Result<T, ParseError>,
    ) -> Result<Vec<T>, ParseError> {
        self.expect_char(open)?;
        let mut out = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(out);
            }
            out.push(item(self)?);
            if !self.eat(',') {
                self.expect_char(close)
                    .map_err(|_| self.expected(&format!("`,` or `{close}`")))?;
                return Ok(out);
            }
        }
    }

    /// Fails unless the line is fully consumed.
    pub fn finish(&self) -> Result<(), ParseError> {
        if self.at_end() {
            Ok(())
        } else {
            Err(self.expected("end of line"))
        }
    }
}
