//! `.npy` in and out (through the `npyz` crate), on bytes: the command line reads and
//! writes the files. f32, f64 and i64 arrays (i32 and f16 are widened on read).

use super::tensor::{Data, Tensor};
use npyz::{DType as NpyDType, NpyFile, TypeChar, WriterBuilder};

/// Reads a `.npy` file's bytes.
pub fn read_npy(bytes: &[u8]) -> Result<Tensor, String> {
    let npy = NpyFile::new(bytes).map_err(|e| format!("not a .npy file: {e}"))?;
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    if npy.order() == npyz::Order::Fortran {
        return Err("Fortran-ordered arrays are not supported; save with order='C'".into());
    }
    let dtype = npy.dtype();
    let data = match &dtype {
        NpyDType::Plain(ts) => match (ts.type_char(), ts.size_field()) {
            (TypeChar::Float, 4) => Data::F32(npy.into_vec::<f32>().map_err(|e| e.to_string())?),
            (TypeChar::Float, 8) => Data::F64(npy.into_vec::<f64>().map_err(|e| e.to_string())?),
            (TypeChar::Int, 8) => Data::I64(npy.into_vec::<i64>().map_err(|e| e.to_string())?),
            (TypeChar::Int, 4) => Data::I64(
                npy.into_vec::<i32>()
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(i64::from)
                    .collect(),
            ),
            (c, s) => {
                return Err(format!(
                    "unsupported .npy element type {c:?}{s}; use float32, float64 or int64"
                ))
            }
        },
        other => return Err(format!("unsupported .npy dtype {other:?}")),
    };
    let t = Tensor { shape, data };
    if t.numel() != t.shape.iter().product::<usize>() {
        return Err("the data does not fill the shape".into());
    }
    Ok(t)
}

/// Writes a tensor as `.npy` bytes.
pub fn write_npy(t: &Tensor) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    let err = |e: std::io::Error| e.to_string();
    match &t.data {
        Data::F32(v) => {
            let mut w = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&shape)
                .writer(&mut out)
                .begin_nd()
                .map_err(err)?;
            w.extend(v.iter().copied()).map_err(err)?;
            w.finish().map_err(err)?;
        }
        Data::F64(v) => {
            let mut w = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&shape)
                .writer(&mut out)
                .begin_nd()
                .map_err(err)?;
            w.extend(v.iter().copied()).map_err(err)?;
            w.finish().map_err(err)?;
        }
        Data::I64(v) => {
            let mut w = npyz::WriteOptions::new()
                .default_dtype()
                .shape(&shape)
                .writer(&mut out)
                .begin_nd()
                .map_err(err)?;
            w.extend(v.iter().copied()).map_err(err)?;
            w.finish().map_err(err)?;
        }
    }
    Ok(out)
}
