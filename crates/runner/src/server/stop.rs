//! Stop strings on streamed text: text after a stop string is never released, and text that
//! could be the start of a stop string is held back until the next piece settles it.
//!
//! Speculative rounds commit several tokens at once, so a stop string may span tokens that
//! were accepted together; the matcher works on text, piece by piece, so it does not matter how
//! the tokens were grouped.

/// What [`StopMatcher::push`] releases.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Released {
    /// Text that is safe to send now.
    pub text: String,
    /// Whether a stop string was found (generation should stop; nothing more is released).
    pub stopped: bool,
}

/// Finds the first occurrence of any stop string in a stream of text pieces.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop string was found.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Add `piece`; release what can no longer be part of a stop string.
    pub fn push(&mut self, piece: &str) -> Released {
        if self.stopped {
            return Released {
                text: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(piece);
        if let Some(at) = self.first_stop() {
            self.stopped = true;
            let text = self.held[..at].to_string();
            self.held.clear();
            return Released {
                text,
                stopped: true,
            };
        }
        let keep = self.partial_suffix();
        let cut = self.held.len() - keep;
        let text = self.held[..cut].to_string();
        self.held.drain(..cut);
        Released {
            text,
            stopped: false,
        }
    }

    /// The end of generation: release whatever is still held (it matched no stop string).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        std::mem::take(&mut self.held)
    }

    fn first_stop(&self) -> Option<usize> {
        self.stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
    }

    /// Length of the longest suffix of the held text that is a proper prefix of a stop string.
    fn partial_suffix(&self) -> usize {
        let mut longest = 0;
        for stop in &self.stops {
            for (end, _) in stop.char_indices().skip(1) {
                let prefix = &stop[..end];
                if end > longest && self.held.ends_with(prefix) {
                    longest = end;
                }
            }
        }
        longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool, String) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = Vec::new();
        let mut stopped = false;
        for p in pieces {
            let r = m.push(p);
            out.push(r.text);
            stopped |= r.stopped;
        }
        (out, stopped, m.finish())
    }

    #[test]
    fn a_stop_string_across_pieces_ends_the_text_before_it() {
        let (out, stopped, rest) = run(&["END"], &["hello E", "N", "D and more"]);
        assert_eq!(out, ["hello ", "", ""]);
        assert!(stopped);
        assert_eq!(rest, "");
    }

    #[test]
    fn a_partial_match_is_released_once_it_fails() {
        let (out, stopped, rest) = run(&["END"], &["a E", "Nx", "y"]);
        assert_eq!(out, ["a ", "ENx", "y"]);
        assert!(!stopped);
        assert_eq!(rest, "");
        // Held at the very end: released by finish.
        let (out, _, rest) = run(&["END"], &["a EN"]);
        assert_eq!((out[0].as_str(), rest.as_str()), ("a ", "EN"));
    }

    #[test]
    fn the_earliest_of_several_stops_wins_and_multibyte_is_safe() {
        let (out, stopped, _) = run(&["日本", "b"], &["é日", "本 b"]);
        assert_eq!(out.concat(), "é");
        assert!(stopped);
        let (out, stopped, _) = run(&[], &["x", "y"]);
        assert_eq!((out.concat(), stopped), ("xy".to_string(), false));
        let (out, stopped, _) = run(&["", "zz"], &["z", "a"]);
        assert_eq!((out.concat(), stopped), ("za".to_string(), false));
    }
}
