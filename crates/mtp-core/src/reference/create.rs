//! Creation, host reads and dtype casts.

use super::array::{
    checked_numel, float_to_int, int_range, narrow, require_int, HostArray, Storage,
};
use crate::{CoreError, CoreResult, DType};

use crate::backend::{check_data_len as check_len, check_f32_source};

pub(super) fn from_f32(data: &[f32], shape: &[usize], dtype: DType) -> CoreResult<HostArray> {
    const OP: &str = "from_f32";
    check_f32_source(OP, data.len(), shape, dtype)?;
    Ok(HostArray::from_f32_values(
        shape.to_vec(),
        dtype,
        data.to_vec(),
    ))
}

pub(super) fn from_u32(data: &[u32], shape: &[usize]) -> CoreResult<HostArray> {
    check_len("from_u32", data.len(), shape)?;
    let values = data.iter().map(|&v| i64::from(v)).collect();
    Ok(HostArray::from_int_values(
        shape.to_vec(),
        DType::U32,
        values,
    ))
}

pub(super) fn from_i32(data: &[i32], shape: &[usize]) -> CoreResult<HostArray> {
    check_len("from_i32", data.len(), shape)?;
    let values = data.iter().map(|&v| i64::from(v)).collect();
    Ok(HostArray::from_int_values(
        shape.to_vec(),
        DType::I32,
        values,
    ))
}

pub(super) fn full(shape: &[usize], value: f32, dtype: DType) -> CoreResult<HostArray> {
    const OP: &str = "full";
    let numel = checked_numel(OP, shape)?;
    if dtype.is_float() {
        let v = narrow(dtype, f64::from(value));
        Ok(HostArray::from_rounded_f32(
            shape.to_vec(),
            dtype,
            vec![v; numel],
        ))
    } else {
        let v = float_to_int(OP, dtype, f64::from(value))?;
        Ok(HostArray::from_int_values(
            shape.to_vec(),
            dtype,
            vec![v; numel],
        ))
    }
}

pub(super) fn to_vec_f32(x: &HostArray) -> Vec<f32> {
    match x.storage() {
        Storage::Float(v) => v.to_vec(),
        Storage::Int(v) => v.iter().map(|&i| i as f32).collect(),
    }
}

pub(super) fn to_vec_u32(x: &HostArray) -> CoreResult<Vec<u32>> {
    const OP: &str = "to_vec_u32";
    require_int(OP, x)?;
    let Storage::Int(values) = x.storage() else {
        return Err(CoreError::DTypeMismatch {
            op: OP,
            expected: "an integer dtype",
            got: x.dtype(),
        });
    };
    values
        .iter()
        .map(|&v| {
            u32::try_from(v).map_err(|_| CoreError::InvalidArgument {
                op: OP,
                message: format!("value {v} is not a u32"),
            })
        })
        .collect()
}

pub(super) fn cast(x: &HostArray, dtype: DType) -> CoreResult<HostArray> {
    const OP: &str = "cast";
    let shape = x.shape().to_vec();
    match (x.storage(), dtype.is_float()) {
        (Storage::Float(v), true) => Ok(HostArray::from_f32_values(shape, dtype, v.to_vec())),
        (Storage::Int(v), true) => Ok(HostArray::from_f64_values(
            shape,
            dtype,
            v.iter().map(|&i| i as f64).collect(),
        )),
        (Storage::Float(v), false) => {
            let values = v
                .iter()
                .map(|&f| float_to_int(OP, dtype, f64::from(f)))
                .collect::<CoreResult<Vec<_>>>()?;
            Ok(HostArray::from_int_values(shape, dtype, values))
        }
        (Storage::Int(v), false) => {
            let (lo, hi) = int_range(dtype);
            if let Some(&bad) = v.iter().find(|&&i| i < lo || i > hi) {
                return Err(CoreError::InvalidArgument {
                    op: OP,
                    message: format!("{bad} does not fit {dtype}"),
                });
            }
            Ok(HostArray::from_int_values(shape, dtype, v.to_vec()))
        }
    }
}
