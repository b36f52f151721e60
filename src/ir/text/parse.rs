//! Parsing the program statements of the text format:
//!
//! ```text
//! var x: f32[16, 64] input
//! var linear_0.w_0: f32[64, 256] parameter persistable
//! op matmul_v2(X=x, Y=linear_0.w_0) -> (Out=linear_0.tmp_0) {trans_x=false, trans_y=false}
//! op concat(X=[a, b]) -> (Out=c) {axis=1} role=backward scope="/auto_parallel/reshard"
//! ```

use super::cursor::{Cursor, ParseError};
use super::lexer::{lex_line, Tok};
use crate::ir::attr::{Attr, Attrs};
use crate::ir::op_type::{OpRole, OpType};
use crate::ir::program::{Op, Program, Slot};
use crate::ir::schema::SlotSpec;
use crate::ir::types::{DType, TensorType, Var, VarId, VarKind};

/// Runs `stmt` on every non-empty line, collecting every error rather than stopping at the
/// first (each statement is one line, so the next line parses on its own).
pub fn for_each_statement(
    text: &str,
    mut stmt: impl FnMut(&mut Cursor) -> Result<(), ParseError>,
) -> Vec<ParseError> {
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let toks = match lex_line(line) {
            Ok(t) => t,
            Err(e) => {
                errors.push(ParseError {
                    line: i + 1,
                    col: e.col,
                    message: e.message,
                });
                continue;
            }
        };
        if toks.is_empty() {
            continue;
        }
        let mut cur = Cursor::new(toks, i + 1, line.chars().count());
        if let Err(e) = stmt(&mut cur).and_then(|_| cur.finish()) {
            errors.push(e);
        }
    }
    errors
}

/// Parses a program (only `var` and `op` statements). Returns every error found.
pub fn parse_program(text: &str) -> Result<Program, Vec<ParseError>> {
    let mut program = Program::new();
    let errors = for_each_statement(text, |cur| {
        let (kw, col) = cur.ident("`var` or `op`")?;
        match kw.as_str() {
            "var" => parse_var(cur, &mut program),
            "op" => parse_op(cur, &mut program),
            "mesh" | "shard" => Err(cur.error_at(
                col,
                format!("`{kw}` belongs to a plan file; this input is a bare program"),
            )),
            _ => Err(cur.error_at(col, format!("expected `var` or `op`, found `{kw}`"))),
        }
    });
    if errors.is_empty() {
        Ok(program)
    } else {
        Err(errors)
    }
}

/// Parses the rest of a `var` statement (after the keyword) and declares the variable.
pub fn parse_var(cur: &mut Cursor, program: &mut Program) -> Result<(), ParseError> {
    let (name, name_col) = cur.ident("a variable name")?;
    cur.expect_char(':')?;
    let (dt, dt_col) = cur.ident("a dtype (f32, f64, i64)")?;
    let dtype = DType::from_name(&dt).ok_or_else(|| {
        cur.error_at(
            dt_col,
            format!("unknown dtype `{dt}`; expected f32, f64 or i64"),
        )
    })?;
    let shape = cur.list('[', ']', |c| {
        let col = c.col();
        let d = c.int("a dim size")?;
        usize::try_from(d)
            .ok()
            .filter(|&d| d > 0)
            .ok_or_else(|| c.error_at(col, format!("dim size {d} must be positive")))
    })?;
    let (k, k_col) = cur.ident("a variable kind")?;
    let kind = VarKind::from_name(&k).ok_or_else(|| {
        let all: Vec<_> = VarKind::ALL.iter().map(|k| k.name()).collect();
        cur.error_at(
            k_col,
            format!(
                "unknown variable kind `{k}`; expected one of {}",
                all.join(", ")
            ),
        )
    })?;
    let persistable = cur.eat_keyword("persistable");
    let var = Var {
        name: name.clone().into(),
        ty: TensorType::new(dtype, shape),
        kind,
        persistable,
    };
    program
        .add_var(var)
        .map(|_| ())
        .map_err(|_| cur.error_at(name_col, format!("variable `{name}` is declared twice")))
}

/// Parses the rest of an `op` statement (after the keyword) and appends the op.
pub fn parse_op(cur: &mut Cursor, program: &mut Program) -> Result<(), ParseError> {
    let (ty_name, ty_col) = cur.ident("an op type")?;
    let ty = OpType::from_name(&ty_name)
        .ok_or_else(|| cur.error_at(ty_col, format!("unknown op type `{ty_name}`")))?;
    let mut op = Op::new(ty);
    op.inputs = parse_slots(cur, program, ty.input_slots(), "input")?
        .into_iter()
        .map(Slot::from_vec)
        .collect();
    cur.expect_char('>')?;
    op.outputs = parse_slots(cur, program, ty.output_slots(), "output")?
        .into_iter()
        .map(Slot::from_vec)
        .collect();
    if cur.peek() == Some(&Tok::Punct('{')) {
        op.attrs = parse_attrs(cur)?;
    }
    if cur.eat_keyword("role") {
        cur.expect_char('=')?;
        let (r, col) = cur.ident("an op role")?;
        op.role = OpRole::from_name(&r).ok_or_else(|| {
            cur.error_at(
                col,
                format!("unknown role `{r}`; expected forward, backward, optimize or loss"),
            )
        })?;
    }
    if cur.eat_keyword("scope") {
        cur.expect_char('=')?;
        match cur.bump() {
            Some(Tok::Str(s)) => op.namescope = s.into(),
            _ => return Err(cur.error_at(cur.col(), "expected a quoted namescope after `scope=`")),
        }
    }
    cur.finish()?;
    program.push_op(op);
    Ok(())
}

fn parse_slots(
    cur: &mut Cursor,
    program: &Program,
    specs: &[SlotSpec],
    what: &str,
) -> Result<Vec<Vec<VarId>>, ParseError> {
    let mut slots: Vec<Option<Vec<VarId>>> = vec![None; specs.len()];
    cur.list('(', ')', |c| {
        let (slot, col) = c.ident(&format!("an {what} slot name"))?;
        let idx = specs.iter().position(|s| s.name == slot).ok_or_else(|| {
            let names: Vec<_> = specs.iter().map(|s| s.name).collect();
            c.error_at(
                col,
                format!(
                    "unknown {what} slot `{slot}`; expected one of [{}]",
                    names.join(", ")
                ),
            )
        })?;
        if slots[idx].is_some() {
            return Err(c.error_at(col, format!("{what} slot `{slot}` is given twice")));
        }
        c.expect_char('=')?;
        let vars = if c.peek() == Some(&Tok::Punct('[')) {
            c.list('[', ']', |c| var_ref(c, program))?
        } else {
            vec![var_ref(c, program)?]
        };
        slots[idx] = Some(vars);
        Ok(())
    })?;
    Ok(slots.into_iter().map(Option::unwrap_or_default).collect())
}

fn var_ref(cur: &mut Cursor, program: &Program) -> Result<VarId, ParseError> {
    let (name, col) = cur.ident("a variable name")?;
    program.var_id(&name).ok_or_else(|| {
        cur.error_at(
            col,
            format!("unknown variable `{name}` (declare it with `var`)"),
        )
    })
}

fn parse_attrs(cur: &mut Cursor) -> Result<Attrs, ParseError> {
    let mut attrs = Attrs::new();
    let mut dup = None;
    cur.list('{', '}', |c| {
        let (name, col) = c.ident("an attribute name")?;
        c.expect_char('=')?;
        let value = attr_value(c)?;
        if attrs.insert(name.clone(), value).is_some() && dup.is_none() {
            dup = Some(c.error_at(col, format!("attribute `{name}` is given twice")));
        }
        Ok(())
    })?;
    match dup {
        Some(e) => Err(e),
        None => Ok(attrs),
    }
}

fn attr_value(cur: &mut Cursor) -> Result<Attr, ParseError> {
    let col = cur.col();
    let value = match cur.peek().cloned() {
        Some(Tok::Int(i)) => Attr::Int(i),
        Some(Tok::Float(x)) => Attr::Float(x),
        Some(Tok::Str(s)) => Attr::Str(s),
        Some(Tok::Ident(s)) => match s.as_str() {
            "true" => Attr::Bool(true),
            "false" => Attr::Bool(false),
            "inf" => Attr::Float(f64::INFINITY),
            "NaN" => Attr::Float(f64::NAN),
            _ => return Err(cur.error_at(col, format!("expected an attribute value, found `{s}`"))),
        },
        Some(Tok::Punct('-')) => {
            cur.bump();
            if cur.eat_keyword("inf") {
                return Ok(Attr::Float(f64::NEG_INFINITY));
            }
            return Err(cur.expected("`inf` after `-`"));
        }
        Some(Tok::Punct('[')) => {
            return Ok(Attr::Ints(cur.list('[', ']', |c| c.int("an integer"))?))
        }
        _ => return Err(cur.expected("an attribute value")),
    };
    cur.bump();
    Ok(value)
}
