//! Tokens of the text format. The format is line-oriented: each statement is one line, so
//! the lexer works a line at a time and a parse error never hides the next line's errors.

use std::fmt;

/// One token with the column (1-based, in characters) where it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub kind: Tok,
    pub col: usize,
}

/// Token kinds.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// A name: `[A-Za-z_][A-Za-z0-9_.@]*` (Paddle names such as `linear_0.w_0@GRAD`).
    Ident(String),
    Int(i64),
    Float(f64),
    Str(String),
    /// One of `[ ] ( ) { } , : = ? * -`, or `->` (as `'>'`).
    Punct(char),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Int(i) => write!(f, "`{i}`"),
            Tok::Float(x) => write!(f, "`{x:?}`"),
            Tok::Str(s) => write!(f, "string {s:?}"),
            Tok::Punct('>') => f.write_str("`->`"),
            Tok::Punct(c) => write!(f, "`{c}`"),
        }
    }
}

/// A lexing error: column and message.
#[derive(Clone, Debug, PartialEq)]
pub struct LexError {
    pub col: usize,
    pub message: String,
}

/// The longest name the text format accepts: longer names are errors, not tables that
/// cannot be laid out or megabytes of output per mention.
pub const MAX_IDENT_LEN: usize = 1024;

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '@')
}

/// Splits one line into tokens; `#` starts a comment outside strings.
pub fn lex_line(line: &str) -> Result<Vec<Token>, LexError> {
    let chars: Vec<char> = line.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            break;
        } else if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            if i - start > MAX_IDENT_LEN {
                return Err(LexError {
                    col,
                    message: format!(
                        "a name of {} characters; names are at most {MAX_IDENT_LEN}",
                        i - start
                    ),
                });
            }
            toks.push(Token {
                kind: Tok::Ident(chars[start..i].iter().collect()),
                col,
            });
        } else if c.is_ascii_digit()
            || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let (tok, next) = lex_number(&chars, i)?;
            toks.push(Token { kind: tok, col });
            i = next;
        } else if c == '"' {
            let (s, next) = lex_string(&chars, i)?;
            toks.push(Token {
                kind: Tok::Str(s),
                col,
            });
            i = next;
        } else if c == '-' && chars.get(i + 1) == Some(&'>') {
            toks.push(Token {
                kind: Tok::Punct('>'),
                col,
            });
            i += 2;
        } else if "[](){},:=?*-".contains(c) {
            toks.push(Token {
                kind: Tok::Punct(c),
                col,
            });
            i += 1;
        } else {
            return Err(LexError {
                col,
                message: format!("unexpected character `{c}`"),
            });
        }
    }
    Ok(toks)
}

fn lex_number(chars: &[char], start: usize) -> Result<(Tok, usize), LexError> {
    let mut i = start + usize::from(chars[start] == '-');
    let digits = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(&mut i);
    let mut is_float = false;
    if i < chars.len() && chars[i] == '.' {
        is_float = true;
        i += 1;
        digits(&mut i);
    }
    if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
        is_float = true;
        i += 1;
        if i < chars.len() && (chars[i] == '+' || chars[i] == '-') {
            i += 1;
        }
        digits(&mut i);
    }
    let text: String = chars[start..i].iter().collect();
    let bad = |what: &str| LexError {
        col: start + 1,
        message: format!("invalid {what} `{text}`"),
    };
    let tok = if is_float {
        Tok::Float(text.parse().map_err(|_| bad("number"))?)
    } else {
        Tok::Int(text.parse().map_err(|_| bad("integer (out of range?)"))?)
    };
    Ok((tok, i))
}

fn lex_string(chars: &[char], start: usize) -> Result<(String, usize), LexError> {
    let mut s = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' => return Ok((s, i + 1)),
            '\\' => {
                let esc = chars.get(i + 1).copied();
                s.push(match esc {
                    Some('"') => '"',
                    Some('\\') => '\\',
                    Some('n') => '\n',
                    _ => {
                        return Err(LexError {
                            col: i + 1,
                            message: "unknown escape in string (use \\\", \\\\ or \\n)".into(),
                        })
                    }
                });
                i += 2;
            }
            c => {
                s.push(c);
                i += 1;
            }
        }
    }
    Err(LexError {
        col: start + 1,
        message: "unterminated string".into(),
    })
}
