//! Gemma 4's vocabulary (`tokenizer.ggml.model = "gemma4"`, written by llama.cpp's converter) as
//! a [`tokenizers::Tokenizer`] that gives llama.cpp's token ids.
//!
//! # llama.cpp's algorithm
//!
//! `llama_vocab::impl::tokenize` with the `gemma4` pre-tokenizer:
//!
//! 1. The text is cut at every control, user-defined and unknown token
//!    (`tokenizer_st_partition`, longest token first). The tokens llama.cpp ends generation at
//!    by their text (`<eos>`, `<turn|>`, `<|tool_response>`, ...) count as control tokens whatever
//!    their type in the file.
//! 2. In the remaining fragments spaces become `▁`; no space is prepended.
//! 3. Each fragment is split into words by `[^\n]+|[\n]+`: runs of newlines, and the text between
//!    them, on raw UTF-8.
//! 4. A word made only of newlines that is itself a token is that token. Any other word is split
//!    into characters and merged pair by pair, the pair of lowest rank in `tokenizer.ggml.merges`
//!    first (ties: the leftmost). A piece that is not a token falls back to its UTF-8 bytes as
//!    `<0xXX>` tokens.
//!
//! Decoding writes normal tokens with `▁` as a space, byte tokens as their byte, and control and
//! user-defined tokens as their text (control ones left out when special tokens are skipped).
//!
//! # The `tokenizers` pipeline that reproduces it
//!
//! - Control and unknown tokens (and the end-of-generation ones) are special added tokens,
//!   user-defined ones plain added tokens; both are matched on the raw text, as llama.cpp
//!   partitions it (the `tokenizers` crate matches all of them at once, leftmost-longest, which
//!   picks the same tokens unless two of them overlap in the text).
//! - The normalizer escapes spaces as `▁`, then brackets every run of newlines with a plain space
//!   on each side (`"\n"` → `" \n "`, then `"  "` → `""`). After the escape the text has no other
//!   spaces, so `" \n…\n "` stands for exactly one whole run.
//! - Every newline-only token `t` of the BPE is also an added token matched on the *normalized*
//!   text, where its pattern is the normalized `t`, the bracketed run `" t "`: it matches a run
//!   of exactly `t`'s length and nothing inside a longer one. This is step 4's first rule. (Making
//!   them plain added tokens would cut a longer run into the longest tokens it holds, which is not
//!   what the merges make of it; the BPE's `ignore_merges` flag would apply the rule to the text
//!   words too, where llama.cpp does not.)
//! - The pre-tokenizer splits at the bracketing spaces and removes them, leaving step 3's words
//!   (without the runs already matched).
//! - The model is a BPE over the vocabulary with `tokenizer.ggml.merges` in their order and byte
//!   fallback, as step 4's second rule. Both pick the lowest rank, then the leftmost pair, and drop
//!   a stale pair the same way.
//! - The decoder is `▁ → " "`, byte fallback, fuse. (`tokenizers` decodes the newline-run added
//!   tokens from their normalized form `" t "`; a first step maps each such whole token string
//!   back to `t`.)
//!
//! Where the two can differ, the build refuses the vocabulary instead: a merge whose parts or
//! result are not tokens (llama.cpp merges such pieces; the `tokenizers` BPE cannot hold them, and
//! neither could the `tokenizer.json` the converter read), or a token text that repeats. A repeated
//! merge keeps its first (best) rank, as llama.cpp does. Three corners stay apart: a merge with a
//! byte token as a part would also apply to the byte-fallback pieces here (no converter writes
//! one); a character only some of whose bytes are tokens is dropped here where llama.cpp keeps
//! those bytes (Gemma vocabularies have all 256); and a token spelled as a space, newlines and a
//! space would decode without its spaces (token texts spell spaces as `▁`).

use std::collections::HashSet;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::replace::ReplacePattern;
use tokenizers::normalizers::{Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, DecoderWrapper, SplitDelimiterBehavior};

use super::gguf::{
    GgufVocab, END_OF_GENERATION, SPACE_MARK, TYPE_CONTROL, TYPE_UNKNOWN, TYPE_USER_DEFINED,
};

/// The character that brackets newline runs in the normalized text (a plain space: the
/// normalizer has made every space of the text `▁` before).
const BRACKET: &str = " ";

/// The token types llama.cpp tokenizes with: those of the file, except that the
/// [`END_OF_GENERATION`] tokens are control tokens.
fn effective_types(vocab: &GgufVocab) -> Vec<i64> {
    vocab
        .tokens
        .iter()
        .zip(&vocab.types)
        .map(|(token, &ty)| {
            if END_OF_GENERATION.contains(&token.as_str()) {
                TYPE_CONTROL
            } else {
                ty
            }
        })
        .collect()
}

/// Whether llama.cpp cuts tokens of type `ty` out of the raw text before the BPE.
fn is_partitioned(ty: i64) -> bool {
    matches!(ty, TYPE_CONTROL | TYPE_USER_DEFINED | TYPE_UNKNOWN)
}

/// `tokenizer.ggml.merges` as pairs, in rank order: each entry split at its first space after
/// the first byte (as llama.cpp splits them), a repeated pair kept at its first rank, entries
/// without a split or with an empty part skipped (llama.cpp never applies them).
///
/// Errors when a part or the merged piece is not a token (see the [module docs](self)).
fn ranked_merges(merges: &[String], ids: &Vocab) -> Result<Vec<(String, String)>, String> {
    let mut seen = HashSet::with_capacity(merges.len());
    let mut ranked = Vec::with_capacity(merges.len());
    for (rank, merge) in merges.iter().enumerate() {
        let Some(space) = merge.bytes().skip(1).position(|b| b == b' ') else {
            continue;
        };
        // A space is one byte: both sides of it are character boundaries.
        let (left, right) = (&merge[..space + 1], &merge[space + 2..]);
        if right.is_empty() {
            continue;
        }
        let merged = format!("{left}{right}");
        for piece in [left, right, merged.as_str()] {
            if !ids.contains_key(piece) {
                return Err(format!(
                    "tokenizer.ggml.merges[{rank}] = {merge:?}: {piece:?} is not a token of the \
                     vocabulary"
                ));
            }
        }
        if seen.insert((left, right)) {
            ranked.push((left.to_string(), right.to_string()));
        }
    }
    Ok(ranked)
}

/// Build the tokenizer of a `"gemma4"` vocabulary (see the [module docs](self)).
pub(super) fn build(vocab: &GgufVocab) -> Result<tokenizers::Tokenizer, String> {
    let ids = vocab.ids()?;
    let merges = ranked_merges(&vocab.merges, &ids)?;
    let bpe = BPE::builder()
        .vocab_and_merges(ids, merges)
        .byte_fallback(true)
        .build()
        .map_err(|e| e.to_string())?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    let replace = |from: &str, to: &str| Replace::new(from, to).map_err(|e| e.to_string());
    // The normalizer comes first: the newline-run tokens are matched by its output.
    let normalizer = NormalizerSequence::new(vec![
        replace(" ", SPACE_MARK)?.into(),
        replace("\n", &format!("{BRACKET}\n{BRACKET}"))?.into(),
        replace(&BRACKET.repeat(2), "")?.into(),
    ]);
    tokenizer
        .with_normalizer(Some(normalizer))
        .map_err(|e| e.to_string())?;
    let split = Split::new(
        SplitPattern::String(BRACKET.into()),
        SplitDelimiterBehavior::Removed,
        false,
    )
    .map_err(|e| e.to_string())?;
    tokenizer.with_pre_tokenizer(Some(split));

    let types = effective_types(vocab);
    let tokens_where = |keep: &dyn Fn(&str, i64) -> bool| -> Vec<&str> {
        vocab
            .tokens
            .iter()
            .zip(&types)
            .filter(|(token, &ty)| keep(token, ty))
            .map(|(token, _)| token.as_str())
            .collect()
    };
    let raw = |tokens: Vec<&str>, special: bool| -> Vec<AddedToken> {
        tokens
            .into_iter()
            .map(|t| AddedToken::from(t.to_string(), special).normalized(false))
            .collect()
    };
    let control = tokens_where(&|_, ty| matches!(ty, TYPE_CONTROL | TYPE_UNKNOWN));
    let user_defined = tokens_where(&|_, ty| ty == TYPE_USER_DEFINED);
    let newline_runs = tokens_where(&|token, ty| {
        !is_partitioned(ty) && !token.is_empty() && token.bytes().all(|b| b == b'\n')
    });
    tokenizer
        .add_special_tokens(raw(control, true))
        .map_err(|e| e.to_string())?;
    tokenizer
        .add_tokens(raw(user_defined, false))
        .map_err(|e| e.to_string())?;
    // `tokenizers` decodes a normalized added token from its normalized form: each bracketed
    // run `" t "` is turned back into `t` (whole token strings only) before the usual steps.
    let mut decoders: Vec<DecoderWrapper> = Vec::with_capacity(newline_runs.len() + 3);
    for run in &newline_runs {
        let bracketed = format!("^{BRACKET}\\n{{{}}}{BRACKET}$", run.len());
        decoders.push(
            Replace::new(ReplacePattern::Regex(bracketed), *run)
                .map_err(|e| e.to_string())?
                .into(),
        );
    }
    decoders.extend([
        replace(SPACE_MARK, " ")?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ]);
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
    let newline_runs: Vec<AddedToken> = newline_runs
        .into_iter()
        .map(|t| AddedToken::from(t.to_string(), false).normalized(true))
        .collect();
    tokenizer
        .add_tokens(newline_runs)
        .map_err(|e| e.to_string())?;
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(tokens: &[&str]) -> Vocab {
        tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect()
    }

    #[test]
    fn merges_split_at_the_first_space_after_the_first_byte() {
        let vocab = ids(&["a", "b", "ab", " ", " a"]);
        let merges: Vec<String> = ["a b", "  a", "a b", "ab", "a "]
            .iter()
            .map(|m| m.to_string())
            .collect();
        let ranked = ranked_merges(&merges, &vocab).unwrap();
        // "  a" is (" ", "a"); the repeated "a b" keeps its first rank; "ab" has no split and
        // "a " an empty right part.
        assert_eq!(ranked, [("a".into(), "b".into()), (" ".into(), "a".into())]);
    }

    #[test]
    fn merges_outside_the_vocabulary_are_refused() {
        let vocab = ids(&["a", "b"]);
        let err = ranked_merges(&["a b".to_string()], &vocab).unwrap_err();
        assert!(err.contains("\"ab\" is not a token"), "{err}");
        let err = ranked_merges(&["a c".to_string()], &vocab).unwrap_err();
        assert!(err.contains("merges[0]"), "{err}");
    }
}
