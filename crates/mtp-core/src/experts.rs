//! The expert-gathered linear layer over quantized experts ([`Backend::quant_gather_linear`]),
//! portable body: a loop over the experts in use.
//!
//! A mixture-of-experts layer routes each row (a token, for one of its top-k choices) to one
//! expert. With quantized experts there is no stacked `[experts, out, in]` array to gather from,
//! so the rows are grouped by expert on the host (the ids are a handful of integers per token),
//! each group goes through [`Backend::quant_linear`] with its expert's weight — the backend's
//! quantized kernel, reading each used expert's blocks once for all its rows — and the results
//! are put back in row order with one gather. Experts no row picks are never read, which is the
//! point of a mixture of experts (llama.cpp's `ggml_mul_mat_id` and MLX's `gather_qmm` read the
//! same set).

use crate::{Backend, CoreError};

const OP: &str = "quant_gather_linear";

/// The rows of `0..n` grouped by the expert `ids[r]` each picks: `(expert, rows)` in ascending
/// expert order, rows ascending within a group. An id of `experts` or more is an error.
pub(crate) fn group_rows(ids: &[u32], experts: usize) -> Result<Vec<(usize, Vec<u32>)>, CoreError> {
    let mut groups: Vec<Vec<u32>> = vec![Vec::new(); experts];
    for (row, &id) in ids.iter().enumerate() {
        let Some(group) = groups.get_mut(id as usize) else {
            return Err(CoreError::InvalidArgument {
                op: OP,
                message: format!("row {row} routes to expert {id} of {experts}"),
            });
        };
        group.push(row as u32);
    }
    Ok(groups
        .into_iter()
        .enumerate()
        .filter(|(_, rows)| !rows.is_empty())
        .collect())
}

/// The portable body of [`Backend::quant_gather_linear`]: row `r` of `x` (`[n, in]`) times the
/// transpose of quantized expert `experts[indices[r]]` (each `[out, in]`), giving `[n, out]`.
pub fn default_quant_gather_linear<B: Backend>(
    backend: &B,
    x: &B::Array,
    experts: &[B::QuantWeight],
    indices: &B::Array,
) -> Result<B::Array, B::Error> {
    let x_shape = backend.shape(x);
    let Some(first) = experts.first() else {
        return Err(CoreError::InvalidArgument {
            op: OP,
            message: "no experts".into(),
        }
        .into());
    };
    let [out, inner] = backend.quant_source(first).shape();
    let mismatch = |rhs: Vec<usize>| CoreError::ShapeMismatch {
        op: OP,
        lhs: x_shape.clone(),
        rhs,
    };
    if let Some(other) = experts
        .iter()
        .map(|w| backend.quant_source(w).shape())
        .find(|s| *s != [out, inner])
    {
        return Err(mismatch(other.to_vec()).into());
    }
    let &[n, x_in] = x_shape.as_slice() else {
        return Err(mismatch(vec![out, inner]).into());
    };
    let ids = backend.to_vec_u32(indices)?;
    if x_in != inner || ids.len() != n {
        return Err(mismatch(vec![out, inner]).into());
    }
    let groups = group_rows(&ids, experts.len())?;
    match groups.as_slice() {
        [] => return backend.quant_linear(x, first),
        [(expert, _)] => return backend.quant_linear(x, &experts[*expert]),
        _ => {}
    }
    let mut outputs = Vec::with_capacity(groups.len());
    let mut order = Vec::with_capacity(n);
    for (expert, rows) in &groups {
        let picked = backend.embedding(x, &backend.from_u32(rows, &[rows.len()])?)?;
        outputs.push(backend.quant_linear(&picked, &experts[*expert])?);
        order.extend_from_slice(rows);
    }
    // `stacked` row i is input row order[i]; row r of the result is stacked row inverse[r].
    let mut inverse = vec![0u32; n];
    for (i, &row) in order.iter().enumerate() {
        inverse[row as usize] = i as u32;
    }
    let refs: Vec<&B::Array> = outputs.iter().collect();
    let stacked = backend.concat(&refs, 0)?;
    backend.embedding(&stacked, &backend.from_u32(&inverse, &[n])?)
}

#[cfg(test)]
mod tests {
    use super::group_rows;

    #[test]
    fn rows_are_grouped_by_expert_in_order() {
        let groups = group_rows(&[2, 0, 2, 1, 0], 4).unwrap();
        assert_eq!(groups, vec![(0, vec![1, 4]), (1, vec![3]), (2, vec![0, 2])]);
    }

    #[test]
    fn an_expert_out_of_range_is_an_error() {
        let err = group_rows(&[0, 4], 4).unwrap_err().to_string();
        assert!(err.contains("row 1 routes to expert 4 of 4"), "{err}");
    }
}
