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
    // npyz's dtype is a foreign enum: any kind but a plain one (records, arrays of arrays)
    // is unsupported, whatever new kinds npyz adds.
    #[allow(clippy::wildcard_enum_match_arm)]
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
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    match &t.data {
        Data::F32(v) => write_array(&shape, v),
        Data::F64(v) => write_array(&shape, v),
        Data::I64(v) => write_array(&shape, v),
    }
}

/// `.npy` bytes of one array of any element type numpy knows.
fn write_array<T: npyz::AutoSerialize + Copy>(shape: &[u64], v: &[T]) -> Result<Vec<u8>, String> {
    let err = |e: std::io::Error| e.to_string();
    let mut out = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut out)
        .begin_nd()
        .map_err(err)?;
    w.extend(v.iter().copied()).map_err(err)?;
    w.finish().map_err(err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    #[test]
    fn every_dtype_round_trips() {
        let tensors = [
            Tensor::float(
                DType::F32,
                vec![2, 3],
                vec![0.5, -1.0, 2.25, 3.0, 4.0, -0.125],
            ),
            Tensor::float(DType::F64, vec![3], vec![1e-9, -2.0, 3.5]),
            Tensor {
                shape: vec![2, 1],
                data: Data::I64(vec![7, -3]),
            },
        ];
        for t in tensors {
            let back = read_npy(&write_npy(&t).unwrap()).unwrap();
            assert_eq!(back, t);
        }
    }
}
