//! The canonical text format: a lexer, a shared statement cursor, the program statement
//! parser and the printer (`Display`).

pub mod cursor;
pub mod lexer;
pub mod parse;
pub mod print;

pub use cursor::{Cursor, ParseError};
pub use parse::parse_program;
