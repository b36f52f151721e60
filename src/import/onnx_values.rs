//! The values of an ONNX graph that an import reads: element types as ShardLab's, dims as
//! sizes, and constants (initializers and `Constant` nodes) with their values when small
//! (shapes, scalars), from the typed fields or the little-endian `raw_data`.

use super::onnx_proto::{data_type, TensorProto};
use super::ImportError;
use crate::ir::DType;

/// Constants whose values an import reads (shapes, scalars): at most this many elements.
const MAX_CONSTANT_VALUES: usize = 1 << 16;

#[derive(Clone, Debug)]
pub struct Constant {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<usize>,
    /// The values, for small constants (see [`MAX_CONSTANT_VALUES`]).
    pub values: Option<Vec<f64>>,
}

/// ONNX's element type as ShardLab's: floats of 16 bits are priced as f32 (the planner's
/// layouts do not depend on it), integers as i64.
pub(super) fn dtype(value: &str, ty: i32) -> Result<DType, ImportError> {
    match ty {
        data_type::FLOAT | data_type::FLOAT16 | data_type::BFLOAT16 => Ok(DType::F32),
        data_type::DOUBLE => Ok(DType::F64),
        data_type::INT64 | data_type::INT32 => Ok(DType::I64),
        other => Err(ImportError::ElementType {
            value: value.to_string(),
            ty: other,
        }),
    }
}

/// A dim as a size (1 to 2^53).
pub(super) fn size(value: &str, dim: usize, d: i64) -> Result<usize, ImportError> {
    let ok = d >= 1 && (d as u64) <= crate::ir::MAX_ELEMENTS;
    ok.then_some(d as usize).ok_or(ImportError::BadDim {
        value: value.to_string(),
        dim,
        size: d,
    })
}

/// An initializer or a `Constant` node's tensor, its values read when it is small.
pub(super) fn constant(t: &TensorProto) -> Result<Constant, ImportError> {
    let name = t.name.clone().unwrap_or_default();
    let ty = t.data_type.unwrap_or(0);
    let dtype = dtype(&name, ty)?;
    // A constant may be empty (an exporter's empty KV cache, `[2, 2, 0, 16]`); a variable
    // may not ([`Importer::var`]).
    let dims = t
        .dims
        .iter()
        .enumerate()
        .map(|(i, &d)| if d == 0 { Ok(0) } else { size(&name, i, d) })
        .collect::<Result<Vec<_>, _>>()?;
    let numel = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
        .filter(|&n| n <= crate::ir::MAX_ELEMENTS)
        .ok_or(ImportError::BadDim {
            value: name.clone(),
            dim: 0,
            size: i64::MAX,
        })?;
    let values = (numel <= MAX_CONSTANT_VALUES as u64)
        .then(|| constant_values(t, ty, numel as usize))
        .flatten();
    Ok(Constant {
        name,
        dtype,
        dims,
        values,
    })
}

/// The value of a one-element constant tensor.
pub(super) fn scalar_constant(t: &TensorProto) -> Option<f64> {
    match constant(t).ok()?.values.as_deref() {
        Some(&[x]) => Some(x),
        Some(_) | None => None,
    }
}

/// The values of an integer constant of at most 16 elements.
pub(super) fn small_ints(t: &TensorProto) -> Option<Vec<i64>> {
    let c = constant(t).ok()?;
    let values = c.values?;
    (c.dtype == DType::I64 && values.len() <= 16)
        .then(|| values.iter().map(|&x| x as i64).collect())
}

/// The values of the initializers or `Constant` nodes `imported`'s parameters and tables
/// came from, whatever their size; 16-bit floats widened.
pub(super) fn of_model(
    bytes: &[u8],
    imported: &super::Imported,
) -> Result<Vec<super::NamedValues>, ImportError> {
    use prost::Message;
    let model = super::onnx_proto::ModelProto::decode(bytes)
        .map_err(|e| ImportError::Decode(e.to_string()))?;
    let graph = model.graph.as_ref().ok_or(ImportError::NoGraph)?;
    let constants = graph
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() == Some("Constant"));
    let constants = constants.filter_map(|n| {
        let t = super::onnx::attr(n, "value")?.t.as_ref()?;
        Some((n.output.first()?.clone(), t))
    });
    let tensors: Vec<(String, &TensorProto)> = graph
        .initializer
        .iter()
        .map(|t| (t.name.clone().unwrap_or_default(), t))
        .chain(constants)
        .collect();
    let mut out = Vec::new();
    for (var, source) in &imported.sources {
        let Some((_, t)) = tensors.iter().find(|(n, _)| n == source) else {
            continue;
        };
        let c = constant(t)?;
        let no = |why: &str| ImportError::NoValues {
            value: source.clone(),
            why: why.into(),
        };
        if t.data_location == Some(1) {
            return Err(no("its weights are in an external data file"));
        }
        let numel = c.dims.iter().product();
        let values = constant_values(t, t.data_type.unwrap_or(0), numel)
            .or_else(|| half_values(t, numel))
            .ok_or_else(|| no("its data is missing or not the size of its dims"))?;
        out.push(super::NamedValues {
            var: var.clone(),
            dims: c.dims,
            values,
        });
    }
    Ok(out)
}

/// A 16-bit float tensor's values (`raw_data`, little-endian; IEEE half or bfloat16).
fn half_values(t: &TensorProto, numel: usize) -> Option<Vec<f64>> {
    let ty = t.data_type?;
    let raw = t.raw_data.as_deref()?;
    if raw.len() != 2 * numel || !matches!(ty, data_type::FLOAT16 | data_type::BFLOAT16) {
        return None;
    }
    let halves = raw
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]));
    Some(if ty == data_type::BFLOAT16 {
        halves
            .map(|h| f64::from(f32::from_bits(u32::from(h) << 16)))
            .collect()
    } else {
        halves.map(f16_to_f64).collect()
    })
}

/// An IEEE 754 half's value.
fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let frac = f64::from(h & 0x3ff);
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

/// A tensor's values, from its typed field or its little-endian `raw_data`.
fn constant_values(t: &TensorProto, ty: i32, numel: usize) -> Option<Vec<f64>> {
    let typed: Vec<f64> = match ty {
        data_type::FLOAT => t.float_data.iter().map(|&x| f64::from(x)).collect(),
        data_type::DOUBLE => t.double_data.clone(),
        data_type::INT64 => t.int64_data.iter().map(|&x| x as f64).collect(),
        data_type::INT32 => t.int32_data.iter().map(|&x| f64::from(x)).collect(),
        _ => Vec::new(),
    };
    if typed.len() == numel {
        return Some(typed);
    }
    let raw = t.raw_data.as_deref()?;
    let width = match ty {
        data_type::FLOAT | data_type::INT32 => 4,
        data_type::DOUBLE | data_type::INT64 => 8,
        _ => return None,
    };
    if raw.len() != numel * width {
        return None;
    }
    let values = raw
        .chunks_exact(width)
        .map(|c| match (ty, c) {
            (data_type::FLOAT, &[a, b, c, d]) => f64::from(f32::from_le_bytes([a, b, c, d])),
            (data_type::INT32, &[a, b, c, d]) => f64::from(i32::from_le_bytes([a, b, c, d])),
            (data_type::DOUBLE, c) => f64::from_le_bytes(c.try_into().unwrap_or([0; 8])),
            (_, c) => i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64,
        })
        .collect();
    Some(values)
}
