//! Pipeline plans: placeholder while the stage runner is written.

use super::{Constrain, ExportError};
use crate::passes::pipeline::Pipeline;

pub fn shard_map_script(_p: &Pipeline) -> Result<String, ExportError> {
    Err(ExportError::Plan(
        "pipeline export is not written yet".into(),
    ))
}

pub fn gspmd_script(_p: &Pipeline, _c: Constrain) -> Result<String, ExportError> {
    Err(ExportError::Plan(
        "pipeline export is not written yet".into(),
    ))
}
