//! Parsing a plan file: `mesh` and `shard` statements here, `var` and `op` statements by
//! the IR's parser. Every error carries its line and column; all errors are reported.

use super::{Annotation, Plan};
use crate::dist::{
    DimAxes, Layout, MeshAxis, MeshId, MeshTable, ProcessMesh, ReduceType, TensorDistAttr,
    MAX_MESH_NDIM,
};
use crate::ir::text::lexer::Tok;
use crate::ir::text::parse::{for_each_statement, parse_op, parse_var};
use crate::ir::text::{Cursor, ParseError};
use crate::ir::Program;
use std::sync::Arc;

/// Where each statement of a parsed plan came from (1-based lines).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceMap {
    pub mesh_line: Option<usize>,
    /// The `options` statement's line, where errors of the options point.
    pub options_line: Option<usize>,
    pub var_lines: Vec<usize>,
    pub op_lines: Vec<usize>,
    pub annotation_lines: Vec<usize>,
    pub stage_lines: Vec<usize>,
    /// The column of each statement's subject: a variable's name, an op's type, the
    /// annotated variable's name.
    pub var_cols: Vec<usize>,
    pub op_cols: Vec<usize>,
    pub annotation_cols: Vec<usize>,
}

impl SourceMap {
    /// Where a verifier problem points: the line and column of its subject's statement (the
    /// plan's first line when the subject is not from the text).
    pub fn locate(&self, plan: &Plan, subject: &crate::plan::PlanSubject) -> (usize, usize) {
        use crate::plan::PlanSubject;
        let at = |lines: &[usize], cols: &[usize], i: usize| {
            lines
                .get(i)
                .map(|&l| (l, cols.get(i).copied().unwrap_or(1)))
        };
        let found = match subject {
            PlanSubject::Op(id) => at(&self.op_lines, &self.op_cols, id.index()),
            PlanSubject::Annotation(i) => at(&self.annotation_lines, &self.annotation_cols, *i),
            PlanSubject::Var(name) => plan
                .program
                .var_id(name)
                .and_then(|v| at(&self.var_lines, &self.var_cols, v.index())),
            PlanSubject::Options => self.options_line.map(|l| (l, 1)),
            PlanSubject::Mesh => self.mesh_line.map(|l| (l, 1)),
        };
        found.unwrap_or((1, 1))
    }
}

/// Parses a plan. Returns every parse error found, not just the first.
pub fn parse_plan(text: &str) -> Result<(Plan, SourceMap), Vec<ParseError>> {
    let mut program = Program::new();
    let mut mesh: Option<Arc<ProcessMesh>> = None;
    let mut annotations = Vec::new();
    let mut options: Option<super::PlanOptions> = None;
    let mut stages = Vec::new();
    let mut map = SourceMap::default();
    let errors = for_each_statement(text, |cur| {
        let line = cur.line();
        let (kw, col) =
            cur.ident("a statement (`mesh`, `options`, `var`, `op`, `shard` or `stage`)")?;
        match kw.as_str() {
            "var" => {
                let at = cur.col();
                parse_var(cur, &mut program)?;
                map.var_lines.push(line);
                map.var_cols.push(at);
            }
            "op" => {
                let at = cur.col();
                parse_op(cur, &mut program)?;
                map.op_lines.push(line);
                map.op_cols.push(at);
            }
            "mesh" => {
                if mesh.is_some() {
                    return Err(cur.error_at(col, "the mesh is declared twice"));
                }
                mesh = Some(Arc::new(parse_mesh(cur)?));
                map.mesh_line = Some(line);
            }
            "options" => {
                if options.is_some() {
                    return Err(cur.error_at(col, "the options are given twice"));
                }
                let mut o = super::PlanOptions::default();
                super::parse_options(cur, &mut o)?;
                options = Some(o);
                map.options_line = Some(line);
            }
            "shard" => {
                let m = mesh.clone().ok_or_else(|| {
                    cur.error_at(col, "`shard` needs a mesh: declare `mesh [..] (..)` first")
                })?;
                let at = cur.col();
                annotations.push(parse_shard(cur, &program, m)?);
                map.annotation_lines.push(line);
                map.annotation_cols.push(at);
            }
            "stage" => {
                stages.push(super::parse_stage(cur, &program)?);
                map.stage_lines.push(line);
            }
            _ => {
                return Err(cur.error_at(
                    col,
                    format!(
                        "expected `mesh`, `options`, `var`, `op`, `shard` or `stage`, found `{kw}`"
                    ),
                ))
            }
        }
        Ok(())
    });
    if errors.is_empty() {
        Ok((
            Plan {
                meshes: mesh.map(MeshTable::single).unwrap_or_default(),
                program,
                annotations,
                options: options.unwrap_or_default(),
                stages,
            },
            map,
        ))
    } else {
        Err(errors)
    }
}

/// `[2, 4] (dp, mp)` with an optional `ids [..]`.
fn parse_mesh(cur: &mut Cursor) -> Result<ProcessMesh, ParseError> {
    let col = cur.col();
    let shape = cur.list('[', ']', |c| {
        let col = c.col();
        let s = c.int("an axis size")?;
        usize::try_from(s).map_err(|_| c.error_at(col, format!("axis size {s} must be at least 1")))
    })?;
    let names = cur.list('(', ')', |c| c.ident("an axis name").map(|(n, _)| n))?;
    let ids = if cur.eat_keyword("ids") {
        cur.list('[', ']', |c| {
            let col = c.col();
            let id = c.int("a process id")?;
            u32::try_from(id)
                .map_err(|_| c.error_at(col, format!("process id {id} must be in 0..2^32")))
        })?
    } else {
        let size = shape
            .iter()
            .try_fold(1usize, |a, &s| a.checked_mul(s))
            .unwrap_or(usize::MAX);
        (0..size.min(crate::dist::MAX_MESH_SIZE + 1) as u32).collect()
    };
    ProcessMesh::new(shape, ids, names).map_err(|e| cur.error_at(col, format!("invalid mesh: {e}")))
}

/// `NAME [dp, -, ?, (dp, mp)] partial(mp=SUM)`.
fn parse_shard(
    cur: &mut Cursor,
    program: &Program,
    mesh: Arc<ProcessMesh>,
) -> Result<Annotation, ParseError> {
    let (name, name_col) = cur.ident("the annotated variable's name")?;
    let var = program.var_id(&name).ok_or_else(|| {
        cur.error_at(
            name_col,
            format!("unknown variable `{name}` (declare it before annotating it)"),
        )
    })?;
    let axis = |c: &mut Cursor| -> Result<MeshAxis, ParseError> {
        let (a, col) = c.ident("a mesh axis name")?;
        mesh.axis_by_name(&a).ok_or_else(|| {
            c.error_at(
                col,
                format!(
                    "unknown mesh axis `{a}`; the mesh has ({})",
                    mesh.dim_names().join(", ")
                ),
            )
        })
    };
    let mut annotated = Vec::new();
    let dims = cur.list('[', ']', |c| {
        let (axes, pinned) = match c.peek() {
            Some(Tok::Punct('-')) => (DimAxes::WHOLE, true),
            Some(Tok::Punct('?')) => (DimAxes::WHOLE, false),
            Some(Tok::Punct('(')) => {
                let axes = c.list('(', ')', axis)?;
                annotated.push(true);
                return DimAxes::from_axes(axes).ok_or_else(|| {
                    c.error(format!(
                        "a dim is split by at most {MAX_MESH_NDIM} mesh axes"
                    ))
                });
            }
            Some(Tok::Ident(_)) => {
                return axis(c).map(|a| {
                    annotated.push(true);
                    DimAxes::one(a)
                })
            }
            _ => {
                return Err(c.expected("a mesh axis name, `(a, b)`, `-` (replicated) or `?` (free)"))
            }
        };
        c.bump();
        annotated.push(pinned);
        Ok(axes)
    })?;
    let mut attr = TensorDistAttr {
        mesh: MeshId::JOB,
        layout: Layout::from_dims(dims),
        annotated: annotated.into_iter().collect(),
    };
    if cur.eat_keyword("partial") {
        let parts = cur.list('(', ')', |c| {
            let a = axis(c)?;
            c.expect_char('=')?;
            let (r, col) = c.ident("a reduce type")?;
            let r = ReduceType::from_name(&r).ok_or_else(|| {
                c.error_at(
                    col,
                    format!("unknown reduce type `{r}`; expected SUM, AVG, MAX, MIN or PROD"),
                )
            })?;
            Ok((a, r))
        })?;
        for (a, r) in parts {
            if attr.partial.get(a).is_some() {
                return Err(cur.error(format!(
                    "mesh axis `{}` is partial twice",
                    mesh.axis_name(a)
                )));
            }
            attr.set_partial(a, r);
        }
    }
    Ok(Annotation { var, attr })
}
