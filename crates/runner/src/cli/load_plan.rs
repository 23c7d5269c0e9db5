//! What `generate` and `bench` settle before loading: the compute dtype (`--dtype auto`) and
//! whether the models fit in memory at the context the run needs.

use std::path::Path;

use anyhow::bail;
use mtp_core::{Backend, DType};
use runner::loading::gguf::is_gguf_path;
use runner::loading::{auto_dtype, available_memory, estimate_memory, LoadOptions, StoredQuant};
use runner::ModelPaths;

use super::args::ModelArgs;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The load options for `paths` on `backend`: `--dtype` (auto: the backend's best for the
/// checkpoint), after printing the memory the weights and a KV cache of `context` positions
/// need (with a draft model's weights and KV cache when `draft_model` drafts), and refusing
/// when that exceeds the available memory (unless `--ignore-memory-limit`).
pub fn prepare_load<B: Backend>(
    backend: &B,
    args: &ModelArgs,
    paths: &ModelPaths,
    draft_model: Option<&Path>,
    (context, sequences): (usize, usize),
) -> anyhow::Result<LoadOptions> {
    // An unreadable directory is reported by the load itself, with its context: `auto` then
    // falls back to what the backend computes f32 weights in.
    let options = |dtype| LoadOptions {
        dtype,
        quantize: args.quantize.map(|q| q.scheme()),
        stored_quant: if args.dequantize {
            StoredQuant::Dequantize
        } else {
            StoredQuant::Keep
        },
    };
    let dtype = match args.dtype.fixed() {
        Some(dtype) => dtype,
        None => auto_dtype(backend, &paths.target)
            .unwrap_or_else(|_| backend.preferred_dtype(DType::F32)),
    };
    let Ok(mut estimate) = estimate_memory(
        &paths.target,
        paths.drafter.as_deref(),
        &options(dtype),
        context,
    ) else {
        // The load itself reports what is wrong with the directory, with its context.
        return Ok(options(dtype));
    };
    // A draft model holds its own weights and its own KV cache at the same context.
    if let Some(Ok(draft)) =
        draft_model.map(|dir| estimate_memory(dir, None, &options(dtype), context))
    {
        estimate.weights = estimate.weights.saturating_add(draft.weights);
        estimate.kv_cache = estimate.kv_cache.saturating_add(draft.kv_cache);
    }
    // Every sequence generated at once (a server's batch) holds its own KV caches.
    estimate.kv_cache = estimate.kv_cache.saturating_mul(sequences.max(1) as u64);
    let needed = estimate.total();
    let available = available_memory();
    let shown = available.map_or(String::new(), |a| {
        format!(", {:.2} GiB available", a as f64 / GIB)
    });
    let gguf = is_gguf_path(&paths.target);
    let held = match (args.quantize, args.dequantize, gguf) {
        (Some(scheme), _, _) => format!("{dtype}, matrices --quantize {}", scheme.scheme()),
        (None, false, true) => format!("{dtype}; GGUF blocks as stored"),
        (None, true, _) => format!("{dtype}; quantized tensors decoded"),
        (None, false, false) => dtype.to_string(),
    };
    eprintln!(
        "memory: {:.2} GiB of weights ({held}) + {:.2} GiB KV cache at {} positions{} + {:.2} GiB \
         prefill activations + {:.2} GiB runtime = {:.2} GiB{shown}",
        estimate.weights as f64 / GIB,
        estimate.kv_cache as f64 / GIB,
        estimate.context,
        if sequences > 1 {
            format!(" x {sequences} sequences")
        } else {
            String::new()
        },
        estimate.activations as f64 / GIB,
        estimate.runtime as f64 / GIB,
        needed as f64 / GIB,
    );
    if let Some(available) = available {
        if needed > available && !args.ignore_memory_limit {
            bail!(
                "the models need about {:.2} GiB but only {:.2} GiB of memory is available: use a \
                 smaller model, a half-precision --dtype, a shorter --num-predict, or pass \
                 --ignore-memory-limit to load anyway",
                needed as f64 / GIB,
                available as f64 / GIB
            );
        }
    }
    Ok(options(dtype))
}
