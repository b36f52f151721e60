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
