//! Write the features a Gemma-4-assistant-style drafter learns from, computed by this engine on
//! the target it will draft for (a quantized GGUF included): per position of a corpus, the
//! target's post-norm hidden state, the keys and values of the two layers an assistant reads
//! (the last sliding and the last full attention layer) and the target's top-k log-probabilities.
//! `tools/train_drafter/` trains from them.
//!
//! ```text
//! cargo run --release -p runner --example drafter_features -- \
//!     --model gemma-3-270m-q4_k_m.gguf --corpus corpus.jsonl --out features/ \
//!     [--window 256] [--top-k 32] [--max-windows N]
//! ```
//!
//! `corpus.jsonl` holds one document per line, `{"text": "..."}`. Each document is tokenized
//! (no BOS) and cut into windows of `window - 1` tokens (a shorter last piece is dropped); every
//! window is `BOS + its tokens`, forwarded from position 0 in fresh caches (so the sliding
//! layer's cache holds the whole window: `window` must not exceed the target's sliding window).
//!
//! Output, appended one window at a time (a run that stops goes on where it stopped: files are
//! cut back to the last whole window recorded in `meta.json`, and the windows already written
//! are skipped):
//!
//! | file | rows of | what |
//! |---|---|---|
//! | `tokens.u32` | `window` u32 | the window's ids |
//! | `hidden.f16` | `window × hidden` f16 | the target's post-norm hidden state |
//! | `sliding_k.f16`, `sliding_v.f16` | `window × kv_heads × head_dim` f16 | keys (rotated, normed) and values of the last sliding layer |
//! | `full_k.f16`, `full_v.f16` | same | the last full layer's |
//! | `topk_ids.u32`, `topk_logp.f16` | `window × top_k` | the target's `top_k` most likely next tokens and their log-probabilities |
//!
//! All little-endian; `meta.json` gives the sizes, the layers and how many windows are complete.
//! `embeddings.f16` (`vocab × hidden`, written once) holds the target's input embedding of every
//! token as the assistant receives it (`token_embeddings`: Gemma's scaled embedding): the
//! trainer's token inputs, and the start of its LM head and centroids.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use mtp_core::model::TargetModel;
use mtp_core::{Backend, DType};
use runner::backend_candle::CandleBackend;
use runner::loading::LoadOptions;
use runner::models::config::LayerType;
use runner::{ModelPaths, Pipeline};
use serde_json::json;

type Failure = Box<dyn std::error::Error>;

struct Args {
    model: PathBuf,
    corpus: PathBuf,
    out: PathBuf,
    window: usize,
    top_k: usize,
    max_windows: usize,
}

const USAGE: &str = "usage: drafter_features --model PATH --corpus FILE.jsonl --out DIR \
                     [--window 256] [--top-k 32] [--max-windows N]";

fn parse_args() -> Result<Args, Failure> {
    let mut args = std::env::args().skip(1);
    let (mut model, mut corpus, mut out) = (None, None, None);
    let (mut window, mut top_k, mut max_windows) = (256, 32, usize::MAX);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))?;
        match flag.as_str() {
            "--model" => model = Some(PathBuf::from(value)),
            "--corpus" => corpus = Some(PathBuf::from(value)),
            "--out" => out = Some(PathBuf::from(value)),
            "--window" => window = value.parse()?,
            "--top-k" => top_k = value.parse()?,
            "--max-windows" => max_windows = value.parse()?,
            other => return Err(format!("unknown flag {other}; {USAGE}").into()),
        }
    }
    if !(2..=4096).contains(&window) || !(1..=1024).contains(&top_k) {
        return Err(format!("--window must be 2..=4096 and --top-k 1..=1024; {USAGE}").into());
    }
    Ok(Args {
        model: model.ok_or(USAGE)?,
        corpus: corpus.ok_or(USAGE)?,
        out: out.ok_or(USAGE)?,
        window,
        top_k,
        max_windows,
    })
}

/// The output files, in the order of [`Window::rows`].
const FILES: [&str; 8] = [
    "tokens.u32",
    "hidden.f16",
    "sliding_k.f16",
    "sliding_v.f16",
    "full_k.f16",
    "full_v.f16",
    "topk_ids.u32",
    "topk_logp.f16",
];

/// One window's bytes for each of [`FILES`].
struct Window {
    rows: [Vec<u8>; 8],
}

fn u32_bytes(xs: &[u32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f16_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect()
}

/// `[1, heads, t, dim]` on the host as `[t, heads, dim]`.
fn positions_first(x: &[f32], heads: usize, t: usize, dim: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for h in 0..heads {
        for p in 0..t {
            let from = (h * t + p) * dim;
            let to = (p * heads + h) * dim;
            out[to..to + dim].copy_from_slice(&x[from..from + dim]);
        }
    }
    out
}

/// The `k` largest log-probabilities of each row of `logits` (`rows × vocab`), best first.
fn top_log_probs(logits: &[f32], vocab: usize, k: usize) -> (Vec<u32>, Vec<f32>) {
    let mut ids = Vec::with_capacity(logits.len() / vocab * k);
    let mut logp = Vec::with_capacity(ids.capacity());
    let mut order: Vec<u32> = Vec::with_capacity(vocab);
    for row in logits.chunks(vocab) {
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let lse = max + row.iter().map(|&v| (v - max).exp()).sum::<f32>().ln();
        order.clear();
        order.extend(0..vocab as u32);
        let by_logit = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]);
        order.select_nth_unstable_by(k - 1, by_logit);
        order[..k].sort_by(by_logit);
        for &id in &order[..k] {
            ids.push(id);
            logp.push(row[id as usize] - lse);
        }
    }
    (ids, logp)
}

struct Layers {
    sliding: (usize, usize, usize),
    full: (usize, usize, usize),
}

fn features<B: Backend>(
    b: &B,
    target: &dyn TargetModel<B>,
    layers: &Layers,
    ids: &[u32],
    top_k: usize,
) -> Result<Window, B::Error> {
    let t = ids.len();
    let mut caches = target.new_caches(b)?;
    let out = target.forward(b, &b.from_u32(ids, &[1, t])?, 0, &mut caches)?;
    let hidden = b.to_vec_f32(&b.cast(&out.draft_hidden, DType::F32)?)?;
    let logits = b.to_vec_f32(&target.unembed(b, &out.hidden)?)?;
    let (top_ids, top_logp) = top_log_probs(&logits, target.vocab_size(), top_k);
    let mut kv = Vec::new();
    for (index, heads, dim) in [layers.sliding, layers.full] {
        let view = caches
            .layer(index)?
            .view(b)?
            .ok_or_else(|| mtp_core::CoreError::Model(format!("layer {index} cached nothing")))?;
        if view.start != 0 || view.len(b) != t {
            return Err(mtp_core::CoreError::Model(format!(
                "layer {index} keeps {} positions from {}, not the window's {t}",
                view.len(b),
                view.start
            ))
            .into());
        }
        for x in [&view.keys, &view.values] {
            let host = b.to_vec_f32(&b.cast(x, DType::F32)?)?;
            kv.push(f16_bytes(&positions_first(&host, heads, t, dim)));
        }
    }
    let [sk, sv, fk, fv]: [Vec<u8>; 4] = kv
        .try_into()
        .map_err(|_| mtp_core::CoreError::Model("two layers of keys and values".into()))?;
    Ok(Window {
        rows: [
            u32_bytes(ids),
            f16_bytes(&hidden),
            sk,
            sv,
            fk,
            fv,
            u32_bytes(&top_ids),
            f16_bytes(&top_logp),
        ],
    })
}

/// Every token's input embedding, `vocab × hidden` f16, to `path`.
fn write_embeddings<B: Backend>(
    b: &B,
    target: &dyn TargetModel<B>,
    path: &Path,
) -> Result<(), Failure> {
    const CHUNK: usize = 8192;
    let vocab = target.vocab_size() as u32;
    let mut file = File::create(path)?;
    let mut start = 0;
    while start < vocab {
        let end = (start + CHUNK as u32).min(vocab);
        let ids: Vec<u32> = (start..end).collect();
        let rows = b.from_u32(&ids, &[1, ids.len()])?;
        let embedded = b.cast(&target.token_embeddings(b, &rows)?, DType::F32)?;
        file.write_all(&f16_bytes(&b.to_vec_f32(&embedded)?))?;
        start = end;
    }
    file.sync_all()?;
    Ok(())
}

/// The corpus's windows, in order.
fn windows(
    pipeline: &Pipeline<CandleBackend>,
    corpus: &Path,
    window: usize,
) -> Result<Vec<Vec<u32>>, Failure> {
    let bos = pipeline
        .tokenizer()
        .bos_id()
        .ok_or("the tokenizer has no BOS token")?;
    let mut all = Vec::new();
    for line in BufReader::new(File::open(corpus)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let doc: serde_json::Value = serde_json::from_str(&line)?;
        let text = doc["text"]
            .as_str()
            .ok_or("a corpus line without \"text\"")?;
        let ids = pipeline.tokenizer().encode_plain(text)?;
        for piece in ids.chunks_exact(window - 1) {
            let mut w = Vec::with_capacity(window);
            w.push(bos);
            w.extend_from_slice(piece);
            all.push(w);
        }
    }
    Ok(all)
}

fn main() -> Result<(), Failure> {
    let args = parse_args()?;
    let paths = ModelPaths {
        target: args.model.clone(),
        drafter: None,
        draft_centroids: None,
        tokenizer: None,
        chat_template: None,
    };
    let pipeline = Pipeline::load(
        CandleBackend::cpu(),
        &paths,
        &LoadOptions::with_dtype(DType::F32),
    )?;
    let target = pipeline.target();
    let host = target.as_assistant_target().assistant_host();
    let source = |layer_type: LayerType| {
        host.sources
            .get(&layer_type)
            .map(|s| (s.index, s.kv_heads, s.head_dim))
            .ok_or(format!("the target has no {} layer", layer_type.hf_name()))
    };
    let frequencies = |layer_type: LayerType| {
        host.sources
            .get(&layer_type)
            .map(|s| s.inv_freq.clone())
            .unwrap_or_default()
    };
    let layers = Layers {
        sliding: source(LayerType::Sliding)?,
        full: source(LayerType::Full)?,
    };
    if args.top_k > host.vocab_size {
        return Err(format!(
            "--top-k {} exceeds the vocabulary ({})",
            args.top_k, host.vocab_size
        )
        .into());
    }
    let all = windows(&pipeline, &args.corpus, args.window)?;
    let total = all.len().min(args.max_windows);
    std::fs::create_dir_all(&args.out)?;
    let meta_path = args.out.join("meta.json");
    let mut meta = json!({
        "target": args.model.display().to_string(),
        "corpus": args.corpus.display().to_string(),
        "window": args.window,
        "top_k": args.top_k,
        "hidden_size": host.hidden_size,
        "vocab_size": host.vocab_size,
        "layers": {
            "sliding_attention": {"index": layers.sliding.0, "kv_heads": layers.sliding.1, "head_dim": layers.sliding.2},
            "full_attention": {"index": layers.full.0, "kv_heads": layers.full.1, "head_dim": layers.full.2},
        },
        "inv_freq": {
            "sliding_attention": frequencies(LayerType::Sliding),
            "full_attention": frequencies(LayerType::Full),
        },
        "corpus_bytes": std::fs::metadata(&args.corpus)?.len(),
        "files": FILES,
        "windows": 0,
    });
    let done = match std::fs::read_to_string(&meta_path) {
        Ok(text) => {
            let old: serde_json::Value = serde_json::from_str(&text)?;
            let mut same = old.clone();
            same["windows"] = json!(0);
            if same != meta {
                return Err(
                    format!("{} was written with other settings", meta_path.display()).into(),
                );
            }
            old["windows"].as_u64().unwrap_or(0) as usize
        }
        Err(_) => {
            // No record of what an earlier table belongs to: compute it again.
            let _ = std::fs::remove_file(args.out.join("embeddings.f16"));
            0
        }
    };
    // Cut every file back to the windows recorded as complete.
    let row_bytes = {
        let (h, k) = (host.hidden_size, args.top_k);
        let kv = |l: (usize, usize, usize)| l.1 * l.2;
        let w = args.window;
        [
            4 * w,
            2 * w * h,
            2 * w * kv(layers.sliding),
            2 * w * kv(layers.sliding),
            2 * w * kv(layers.full),
            2 * w * kv(layers.full),
            4 * w * k,
            2 * w * k,
        ]
    };
    let mut files = Vec::new();
    for (name, bytes) in FILES.iter().zip(row_bytes) {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(args.out.join(name))?;
        let complete = (done * bytes) as u64;
        if file.metadata()?.len() < complete {
            return Err(
                format!("{name} is shorter than the {done} windows meta.json records").into(),
            );
        }
        file.set_len(complete)?;
        files.push(file);
    }
    let b = pipeline.backend();
    let embeddings = args.out.join("embeddings.f16");
    if !embeddings.exists() {
        let partial = args.out.join("embeddings.f16.partial");
        write_embeddings(b, target, &partial)?;
        std::fs::rename(&partial, &embeddings)?;
    }
    let started = std::time::Instant::now();
    for (i, ids) in all.iter().enumerate().take(total).skip(done) {
        let window = features(b, target, &layers, ids, args.top_k)?;
        for (file, bytes) in files.iter_mut().zip(&window.rows) {
            file.write_all(bytes)?;
        }
        for file in &files {
            file.sync_data()?;
        }
        meta["windows"] = json!(i + 1);
        let partial = args.out.join("meta.json.partial");
        std::fs::write(&partial, serde_json::to_string_pretty(&meta)?)?;
        std::fs::rename(&partial, &meta_path)?;
        let rate = ((i + 1 - done) * args.window) as f64 / started.elapsed().as_secs_f64();
        eprintln!("window {}/{total}: {rate:.0} positions/s", i + 1);
    }
    Ok(())
}
