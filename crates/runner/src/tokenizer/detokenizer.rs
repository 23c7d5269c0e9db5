//! Incremental detokenization: text pieces for a stream of token ids.

use super::error::TokenizerResult;
use super::{SpecialTokens, Tokenizer};

/// What a decoder produces for bytes that are not (yet) valid UTF-8.
const REPLACEMENT: char = '\u{FFFD}';

/// Turns a stream of token ids into text pieces whose concatenation is the decode of all the ids.
///
/// Decoding token by token is wrong for most tokenizers: a byte-fallback tokenizer may split one
/// character over several tokens, and SentencePiece-style decoders drop or add spaces depending on
/// what comes before. The detokenizer therefore decodes a small window of the growing id list
/// twice — with and without the new ids — and emits only the new suffix. While the window ends in
/// `U+FFFD` (an incomplete multi-byte sequence) it holds the text back; [`finish`](Self::finish)
/// emits whatever is left, so nothing is dropped at the end.
///
/// The pieces concatenate to the decode of all the ids, with one exception: when the ids end
/// inside a multi-byte character that directly follows complete characters made of byte tokens,
/// a byte-fallback decoder replaces that whole run of bytes with `U+FFFD`s, while the stream has
/// already emitted the complete characters (and flushes `U+FFFD` for the cut one).
///
/// ```
/// use runner::tokenizer::{Tokenizer, TokenizerSettings};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Byte fallback: "日" is three byte tokens.
/// let json = r#"{"version": "1.0", "added_tokens": [], "normalizer": null,
///   "pre_tokenizer": null, "post_processor": null,
///   "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
///   "model": {"type": "WordLevel", "unk_token": "a",
///             "vocab": {"a": 0, "<0xE6>": 1, "<0x97>": 2, "<0xA5>": 3}}}"#;
/// let tokenizer = Tokenizer::from_json(json, TokenizerSettings::default())?;
/// let mut detok = tokenizer.detokenizer();
/// let pieces: Vec<Option<String>> =
///     [0, 1, 2, 3].iter().map(|&id| detok.push(id)).collect::<Result<_, _>>()?;
/// assert_eq!(pieces, [Some("a".into()), None, None, Some("日".into())]);
/// assert_eq!(detok.finish()?, None);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Detokenizer<'t> {
    tokenizer: &'t Tokenizer,
    special: SpecialTokens,
    ids: Vec<u32>,
    /// Start of the decode window (one emitted step of context before `read_offset`).
    prefix_offset: usize,
    /// Ids before this index have been emitted as text.
    read_offset: usize,
}

impl<'t> Detokenizer<'t> {
    /// A detokenizer with no ids yet.
    pub fn new(tokenizer: &'t Tokenizer) -> Self {
        Self {
            tokenizer,
            special: SpecialTokens::Skip,
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
        }
    }

    /// Add one id; returns the new text it completes, if any (`None` while held back).
    pub fn push(&mut self, id: u32) -> TokenizerResult<Option<String>> {
        self.ids.push(id);
        let (prefix, full) = self.window()?;
        if full.len() <= prefix.len() || full.ends_with(REPLACEMENT) {
            return Ok(None);
        }
        let piece = self.new_text(&full, &prefix)?;
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(Some(piece))
    }

    /// Emit whatever is still held back (an incomplete sequence decodes to `U+FFFD`, exactly as
    /// a full decode does). Later pushes continue after it.
    pub fn finish(&mut self) -> TokenizerResult<Option<String>> {
        let (prefix, full) = self.window()?;
        let piece = if full.len() > prefix.len() {
            Some(self.new_text(&full, &prefix)?)
        } else {
            None
        };
        self.prefix_offset = self.ids.len();
        self.read_offset = self.ids.len();
        Ok(piece)
    }

    /// Every id pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// The same detokenizer writing special tokens out (or not).
    pub fn with_special_tokens(mut self, special: SpecialTokens) -> Self {
        self.special = special;
        self
    }

    /// The text the ids not yet emitted add: the part of `full` after `prefix`. When the decoder
    /// rewrote the emitted text so that `prefix` is no longer a prefix of `full` (a byte-fallback
    /// run that ends inside a character), emitted text cannot be taken back: the new ids are then
    /// decoded on their own.
    fn new_text(&self, full: &str, prefix: &str) -> TokenizerResult<String> {
        match full.strip_prefix(prefix) {
            Some(rest) => Ok(rest.to_string()),
            None => {
                tracing::debug!(full, prefix, "decoder rewrote emitted text");
                self.tokenizer
                    .decode_with(&self.ids[self.read_offset..], self.special)
            }
        }
    }

    /// The decode of the window without and with the ids not yet emitted.
    fn window(&self) -> TokenizerResult<(String, String)> {
        let prefix = self.tokenizer.decode_with(
            &self.ids[self.prefix_offset..self.read_offset],
            self.special,
        )?;
        let full = self
            .tokenizer
            .decode_with(&self.ids[self.prefix_offset..], self.special)?;
        Ok((prefix, full))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::TokenizerSettings;

    /// A SentencePiece-style byte-fallback tokenizer: `▁` words, byte tokens `<0xNN>`, the
    /// Gemma decoder (replace `▁`, byte fallback, fuse), and a special `<eos>`.
    fn byte_fallback() -> Tokenizer {
        let mut vocab = vec![
            ("<eos>".to_string(), 0),
            ("▁Hello".to_string(), 1),
            ("▁world".to_string(), 2),
            ("!".to_string(), 3),
        ];
        for (i, b) in [0xE6u8, 0x97, 0xA5, 0xF0, 0x9F, 0x99, 0x82, 0xC3, 0xA9]
            .iter()
            .enumerate()
        {
            vocab.push((format!("<0x{b:02X}>"), 4 + i as u32));
        }
        let vocab: serde_json::Map<String, serde_json::Value> =
            vocab.into_iter().map(|(k, v)| (k, v.into())).collect();
        let json = serde_json::json!({
            "version": "1.0",
            "added_tokens": [{"id": 0, "content": "<eos>", "single_word": false, "lstrip": false,
                              "rstrip": false, "normalized": false, "special": true}],
            "normalizer": null,
            "pre_tokenizer": null,
            "post_processor": null,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"}
            ]},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "!"}
        });
        Tokenizer::from_json(&json.to_string(), TokenizerSettings::default()).unwrap()
    }

    // ids: ▁Hello 1, ▁world 2, ! 3, E6 4, 97 5, A5 6, F0 7, 9F 8, 99 9, 82 10, C3 11, A9 12
    const HELLO: u32 = 1;
    const WORLD: u32 = 2;
    const BANG: u32 = 3;
    const NICHI: [u32; 3] = [4, 5, 6]; // 日
    const SMILE: [u32; 4] = [7, 8, 9, 10]; // 🙂
    const E_ACUTE: [u32; 2] = [11, 12]; // é

    fn stream(tok: &Tokenizer, ids: &[u32]) -> (Vec<Option<String>>, String) {
        let mut detok = tok.detokenizer();
        let mut pieces: Vec<Option<String>> =
            ids.iter().map(|&id| detok.push(id).unwrap()).collect();
        pieces.push(detok.finish().unwrap());
        let text = pieces.iter().flatten().cloned().collect();
        (pieces, text)
    }

    #[test]
    fn split_characters_are_held_until_complete() {
        let tok = byte_fallback();
        let ids: Vec<u32> = [
            vec![HELLO],
            NICHI.to_vec(),
            vec![WORLD],
            SMILE.to_vec(),
            E_ACUTE.to_vec(),
            vec![BANG],
        ]
        .concat();
        let (pieces, text) = stream(&tok, &ids);
        assert_eq!(text, tok.decode(&ids).unwrap());
        assert_eq!(text, " Hello日 world🙂é!");
        let emitted: Vec<&str> = pieces.iter().flatten().map(String::as_str).collect();
        assert_eq!(emitted, [" Hello", "日", " world", "🙂", "é", "!"]);
        // No piece is ever a partial character: every held step returned None.
        assert_eq!(pieces.iter().filter(|p| p.is_none()).count(), 2 + 3 + 1 + 1);
    }

    #[test]
    fn every_prefix_streams_to_its_full_decode() {
        let tok = byte_fallback();
        let ids: Vec<u32> = [
            vec![HELLO],
            SMILE.to_vec(),
            NICHI.to_vec(),
            vec![0, WORLD],
            E_ACUTE.to_vec(),
        ]
        .concat();
        // Every prefix that ends on a character boundary (or right after a non-byte token).
        for n in [0, 1, 5, 8, 9, 10, 12] {
            let (_, text) = stream(&tok, &ids[..n]);
            assert_eq!(text, tok.decode(&ids[..n]).unwrap(), "prefix of {n} ids");
        }
    }

    #[test]
    fn a_cut_character_after_complete_ones_keeps_them() {
        // The byte-fallback decoder turns a whole run of byte tokens into U+FFFD when the run
        // ends inside a character; the stream has already emitted the complete characters of
        // the run, so it keeps them and flushes one U+FFFD per leftover byte run.
        let tok = byte_fallback();
        let ids = [HELLO, SMILE[0], SMILE[1], SMILE[2], SMILE[3], NICHI[0]];
        let (_, text) = stream(&tok, &ids);
        assert_eq!(text, " Hello🙂\u{FFFD}");
        assert_eq!(
            tok.decode(&ids).unwrap(),
            " Hello\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}"
        );
    }

    #[test]
    fn incomplete_tail_is_flushed_not_dropped() {
        let tok = byte_fallback();
        let ids = [HELLO, SMILE[0], SMILE[1]];
        let (pieces, text) = stream(&tok, &ids);
        assert_eq!(pieces[1..3], [None, None]);
        assert_eq!(text, tok.decode(&ids).unwrap());
        assert!(text.ends_with(REPLACEMENT), "{text:?}");
    }

    #[test]
    fn invalid_bytes_followed_by_text_are_emitted() {
        let tok = byte_fallback();
        let ids = [E_ACUTE[1], WORLD, NICHI[0], BANG];
        let (_, text) = stream(&tok, &ids);
        assert_eq!(text, tok.decode(&ids).unwrap());
        assert_eq!(text, "\u{FFFD} world\u{FFFD}!");
    }
}
