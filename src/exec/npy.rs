//! `.npy` in and out (through the `npyz` crate), on bytes: the command line reads and
//! writes the files. f32, f64 and i64 arrays (i32 and f16 are widened on read).

use super::tensor::{Data, Tensor};
use npyz::{DType as NpyDType, NpyFile, TypeChar, WriterBuilder};

impl From<std::io::Error> for NpyError {
    fn from(e: std::io::Error) -> NpyError {
        NpyError::Io(e.to_string())
    }
}

/// Why `.npy` bytes could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NpyError {
    #[error("not a .npy file: {0}")]
    NotNpy(String),
    #[error("Fortran-ordered arrays are not supported; save with order='C'")]
    Fortran,
    #[error("unsupported .npy element type {0}; use float32, float64 or int64")]
    ElementType(String),
    #[error("unsupported .npy dtype {0}")]
    DType(String),
    #[error("the data does not fill the shape")]
    Short,
    /// npyz's own reading or writing error.
    #[error("{0}")]
    Io(String),
}

/// Reads a `.npy` file's bytes.
pub fn read_npy(bytes: &[u8]) -> Result<Tensor, NpyError> {
    let npy = NpyFile::new(bytes).map_err(|e| NpyError::NotNpy(e.to_string()))?;
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    if npy.order() == npyz::Order::Fortran {
        return Err(NpyError::Fortran);
    }
    let dtype = npy.dtype();
    // npyz's dtype is a foreign enum: any kind but a plain one (records, arrays of arrays)
    // is unsupported, whatever new kinds npyz adds.
    #[allow(clippy::wildcard_enum_match_arm)]
    let data = match &dtype {
        NpyDType::Plain(ts) => match (ts.type_char(), ts.size_field()) {
            (TypeChar::Float, 4) => Data::f32(npy.into_vec::<f32>()?),
            (TypeChar::Float, 8) => Data::f64(npy.into_vec::<f64>()?),
            (TypeChar::Int, 8) => Data::i64(npy.into_vec::<i64>()?),
            (TypeChar::Int, 4) => {
                Data::i64(npy.into_vec::<i32>()?.into_iter().map(i64::from).collect())
            }
            (c, s) => return Err(NpyError::ElementType(format!("{c:?}{s}"))),
        },
        other => return Err(NpyError::DType(format!("{other:?}"))),
    };
    let t = Tensor { shape, data };
    if t.numel() != t.shape.iter().product::<usize>() {
        return Err(NpyError::Short);
    }
    Ok(t)
}

/// Writes a tensor as `.npy` bytes.
pub fn write_npy(t: &Tensor) -> Result<Vec<u8>, NpyError> {
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    match &t.data {
        Data::F32(v) => write_array(&shape, v),
        Data::F64(v) => write_array(&shape, v),
        Data::I64(v) => write_array(&shape, v),
    }
}

/// `.npy` bytes of one array of any element type numpy knows.
fn write_array<T: npyz::AutoSerialize + Copy>(shape: &[u64], v: &[T]) -> Result<Vec<u8>, NpyError> {
    let err = |e: std::io::Error| NpyError::Io(e.to_string());
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
                data: Data::i64(vec![7, -3]),
            },
        ];
        for t in tensors {
            let back = read_npy(&write_npy(&t).unwrap()).unwrap();
            assert_eq!(back, t);
        }
    }
}
