//! `shardlab import FILE [-o PLAN] [--parallel SPEC]`: an ONNX model or a Paddle program
//! (PIR text, told apart by content) as a plan file (the
//! program, annotated under `--parallel`'s strategy or later with `--mesh`/`--shard` or
//! `--parallel` in the other commands). Prints the census of
//! the graph's operators and what the import decided (fusions, folded constants, the loss).

use super::emit;
use super::files::{read_limited, ReadError};
use crate::import::{import_model, plan_under, ImportOptions, MAX_IMPORT_BYTES};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The model: an ONNX file (`.onnx`, as torch.onnx.export, Optimum or paddle2onnx write
    /// it) or a Paddle program's text (PIR, as `print(program)` writes it in Paddle 3).
    pub file: String,
    /// Write the plan here instead of standard output (`-` is standard output).
    #[arg(short, long)]
    pub output: Option<String>,
    /// A size for a symbolic dim of the graph's inputs, NAME=N (repeatable), e.g.
    /// --dim batch_size=8.
    #[arg(long = "dim", value_name = "NAME=N")]
    pub dims: Vec<String>,
    /// Plan the program under a strategy by sizes, as `--parallel` takes it (dp=2,tp=2):
    /// the plan gets its mesh and Megatron's annotations found by pattern. Without it the
    /// plan is the program alone, for the other commands' --mesh/--shard or --parallel.
    #[arg(long, value_name = "SPEC")]
    pub parallel: Option<String>,
    /// Write the values the ONNX file holds for the plan's parameters and tables (its
    /// weights, the exporter's rotary tables and masks) into this directory as
    /// `<variable>.npy`, for `run --inputs DIR` to train from the model's own weights.
    #[arg(long, value_name = "DIR")]
    pub with_values: Option<String>,
    /// The memory an import may use (e.g. 2G; default half the memory available). The file
    /// may be at most half of it (its bytes and the decoded model), and at most 2 GiB.
    #[arg(long, value_name = "BYTES")]
    pub max_memory: Option<String>,
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    match crate::import::parse_dims(s) {
        Ok(mut v) if v.len() == 1 => Ok(v.remove(0)),
        Ok(_) => Err(format!(
            "--dim {s}: expected one NAME=N, e.g. --dim batch_size=8"
        )),
        Err(e) => Err(format!("--dim {e}")),
    }
}

pub(crate) fn import(args: &ImportArgs) -> Result<ExitCode, String> {
    let dims = args
        .dims
        .iter()
        .map(|d| parse_dim(d))
        .collect::<Result<Vec<_>, _>>()?;
    let budget = super::budget::budget(&args.max_memory)?;
    let limit = (MAX_IMPORT_BYTES as u64).min((budget / 2.0) as u64);
    let bytes = match read_limited(std::path::Path::new(&args.file), limit) {
        Ok(b) => b,
        Err(ReadError::Io(e)) => return Err(format!("{}: {e}", args.file)),
        Err(ReadError::TooLarge { limit }) => {
            eprintln!(
                "error: {}: larger than {} (2 GiB is protobuf's limit, and the file and the \
                 decoded model must fit in the memory budget, --max-memory)",
                args.file,
                super::files::human(limit)
            );
            return Ok(ExitCode::from(1));
        }
    };
    let imported = match import_model(&bytes, &ImportOptions { dims }) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {}: {e}", args.file);
            return Ok(ExitCode::from(1));
        }
    };
    // A strategy that does not parse or apply is a usage error (2), as in `plan`.
    let plan = plan_under(&imported, args.parallel.as_deref().unwrap_or_default())
        .map_err(|e| format!("--parallel: {e}"))?;
    if let Some(dir) = &args.with_values {
        match write_values(dir, &bytes, &imported)? {
            Ok(n) => eprintln!("wrote the values of {n} variables into {dir}"),
            Err(e) => {
                eprintln!("error: {}: {e}", args.file);
                return Ok(ExitCode::from(1));
            }
        }
    }
    let (report, text) = (imported.header(&args.file), plan.to_string());
    match args.output.as_deref().filter(|p| *p != "-") {
        Some(path) => {
            std::fs::write(path, format!("{report}{text}")).map_err(|e| format!("{path}: {e}"))?;
            emit(&format!("{report}wrote {path}\n"));
        }
        None => emit(&format!("{report}{text}")),
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `<variable>.npy` into `dir` for each parameter and table with values in the
/// file; returns how many. The outer error is the directory's (a usage error), the inner
/// the file's (a Paddle program's text has no weights).
fn write_values(
    dir: &str,
    bytes: &[u8],
    imported: &crate::import::Imported,
) -> Result<Result<usize, String>, String> {
    if crate::import::is_paddle_text(bytes) {
        return Ok(Err(
            "--with-values: a Paddle program's text has no weights (only an ONNX file does)".into(),
        ));
    }
    let values = match crate::import::onnx_values(bytes, imported) {
        Ok(v) => v,
        Err(e) => return Ok(Err(e.to_string())),
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("--with-values {dir}: {e}"))?;
    let mut written = 0;
    for v in &values {
        // A mask's −∞ written as −3.4e38 would make run's tolerances (derived from the
        // magnitudes in the computation) astronomical: such a table keeps seeded values.
        if let Some(x) = v.values.iter().find(|x| x.abs() > HUGE) {
            eprintln!(
                "note: `{}` holds {x:e} (a mask's -inf): not written, run feeds it seeded values \
                 so its tolerances stay meaningful",
                v.var
            );
            continue;
        }
        written += 1;
        // In f64, as the verification computes: a float32 file would be read as values
        // rounded to f32, and run's tolerances would follow f32's rounding.
        let var = imported
            .program
            .var_id(&v.var)
            .map(|id| imported.program.var(id));
        let dtype = match var.map(|var| var.ty.dtype) {
            Some(crate::ir::DType::I64) => crate::ir::DType::I64,
            _ => crate::ir::DType::F64,
        };
        let t = crate::exec::tensor::Tensor::float(dtype, v.dims.clone(), v.values.clone());
        let npy = crate::exec::npy::write_npy(&t).map_err(|e| format!("{}: {e}", v.var))?;
        let path = std::path::Path::new(dir).join(format!("{}.npy", v.var));
        std::fs::write(&path, npy).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(Ok(written))
}

/// Values past this magnitude stand for infinities (see [`write_values`]).
const HUGE: f64 = 1e30;
