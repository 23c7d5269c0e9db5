//! [`TokenGrammar`]: a finite automaton over token ids, the constraint of the engine's tests.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::constraint::{Constraint, ConstraintFactory, TokenMask};
use crate::CoreError;

/// Most tokens [`Constraint::forced`] returns from one state (a cycle of one-way states would
/// otherwise force forever).
const FORCED_MAX: usize = 32;

/// A deterministic finite automaton over token ids: each state allows a few tokens, each
/// leading to one next state; in an accepting state the EOS token (when given) is allowed too
/// and ends the text. A state with one transition and no EOS forces its token.
///
/// [`TokenGrammar::random`] builds one from a seed, so property tests range over grammars with
/// choices, forced runs, cycles and accepting states.
#[derive(Debug, Clone)]
pub struct TokenGrammar {
    /// `transitions[s]`: `(token, next state)`, distinct tokens.
    transitions: Vec<Vec<(u32, usize)>>,
    accepting: Vec<bool>,
    eos: Option<u32>,
}

impl TokenGrammar {
    /// A grammar from its transition table; every state must have a transition or accept,
    /// and every next state must exist.
    pub fn new(
        transitions: Vec<Vec<(u32, usize)>>,
        accepting: Vec<bool>,
        eos: Option<u32>,
    ) -> Result<Self, CoreError> {
        let states = transitions.len();
        if states == 0 || accepting.len() != states {
            return Err(CoreError::Constraint(format!(
                "a token grammar needs one accepting flag per state ({states} states, {} flags)",
                accepting.len()
            )));
        }
        for (s, moves) in transitions.iter().enumerate() {
            if moves.is_empty() && !accepting[s] {
                return Err(CoreError::Constraint(format!(
                    "state {s} has no transition and does not accept"
                )));
            }
            if let Some(&(_, next)) = moves.iter().find(|(_, n)| *n >= states) {
                return Err(CoreError::Constraint(format!(
                    "state {s} moves to state {next} of {states}"
                )));
            }
        }
        Ok(Self {
            transitions,
            accepting,
            eos,
        })
    }

    /// A random grammar over tokens `0..vocab` (EOS excluded from transitions) with `states`
    /// states: each allows one to four tokens (one in about a third of the states, which then
    /// force them), about a quarter accept.
    pub fn random(seed: u64, vocab: u32, states: usize, eos: Option<u32>) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let states = states.max(1);
        let tokens: Vec<u32> = (0..vocab).filter(|&t| Some(t) != eos).collect();
        let mut transitions = Vec::with_capacity(states);
        let mut accepting = Vec::with_capacity(states);
        for _ in 0..states {
            let n = if rng.random_bool(0.35) {
                1
            } else {
                rng.random_range(2..=4)
            };
            let mut moves: Vec<(u32, usize)> = Vec::new();
            while moves.len() < n.min(tokens.len()) {
                let t = tokens[rng.random_range(0..tokens.len())];
                if moves.iter().all(|&(u, _)| u != t) {
                    moves.push((t, rng.random_range(0..states)));
                }
            }
            transitions.push(moves);
            accepting.push(rng.random_bool(0.25));
        }
        Self {
            transitions,
            accepting,
            eos,
        }
    }

    /// The tokens allowed in `state` (EOS in an accepting one, when given).
    fn allowed(&self, state: Option<usize>) -> Vec<u32> {
        let Some(s) = state else {
            return Vec::new();
        };
        let mut ids: Vec<u32> = self.transitions[s].iter().map(|&(t, _)| t).collect();
        if self.accepting[s] {
            ids.extend(self.eos);
        }
        ids
    }

    /// The state after `token` from `state` (`None`: after EOS, the end).
    fn step(&self, state: Option<usize>, token: u32) -> Result<Option<usize>, CoreError> {
        let Some(s) = state else {
            return Err(CoreError::Constraint(format!(
                "token {token} after the end of the text"
            )));
        };
        if self.accepting[s] && Some(token) == self.eos {
            return Ok(None);
        }
        match self.transitions[s].iter().find(|&&(t, _)| t == token) {
            Some(&(_, next)) => Ok(Some(next)),
            None => Err(CoreError::Constraint(format!(
                "token {token} is not allowed in state {s}"
            ))),
        }
    }

    /// Whether `tokens` (from the start) are a complete sentence of the grammar (`Some(true)`),
    /// a prefix of one (`Some(false)`), or not a path of it (`None`).
    pub fn accepts(&self, tokens: &[u32]) -> Option<bool> {
        let mut state = Some(0);
        for &t in tokens {
            state = self.step(state, t).ok()?;
        }
        Some(state.is_none_or(|s| self.accepting[s]))
    }
}

impl ConstraintFactory for TokenGrammar {
    fn start(&self, vocab: usize) -> Result<Box<dyn Constraint>, CoreError> {
        Ok(Box::new(GrammarRun {
            grammar: Arc::new(self.clone()),
            path: vec![Some(0)],
            vocab,
        }))
    }
}

/// One generation's walk through a [`TokenGrammar`].
struct GrammarRun {
    grammar: Arc<TokenGrammar>,
    /// The states visited, the start first; the last is the current one.
    path: Vec<Option<usize>>,
    vocab: usize,
}

impl GrammarRun {
    fn state(&self) -> Option<usize> {
        self.path.last().copied().flatten()
    }
}

impl Constraint for GrammarRun {
    fn mask(&mut self) -> Result<TokenMask, CoreError> {
        Ok(TokenMask::of(
            self.vocab,
            &self.grammar.allowed(self.state()),
        ))
    }

    fn advance(&mut self, ids: &[u32]) -> Result<(), CoreError> {
        let mut state = self.state();
        let mut visited = Vec::with_capacity(ids.len());
        for &id in ids {
            state = self.grammar.step(state, id)?;
            visited.push(state);
        }
        self.path.extend(visited);
        Ok(())
    }

    fn rollback(&mut self, n: usize) -> Result<(), CoreError> {
        if n >= self.path.len() {
            return Err(CoreError::Constraint(format!(
                "rollback of {n} tokens after {}",
                self.path.len() - 1
            )));
        }
        self.path.truncate(self.path.len() - n);
        Ok(())
    }

    fn forced(&mut self) -> Result<Vec<u32>, CoreError> {
        let mut forced = Vec::new();
        let mut state = self.state();
        while forced.len() < FORCED_MAX {
            let allowed = self.grammar.allowed(state);
            match allowed.as_slice() {
                [only] if Some(*only) != self.grammar.eos => {
                    forced.push(*only);
                    state = self.grammar.step(state, *only)?;
                }
                _ => break,
            }
        }
        Ok(forced)
    }

    fn is_complete(&mut self) -> bool {
        self.state().is_none_or(|s| self.grammar.accepting[s])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_masks_forces_and_rolls_back() {
        // 0 --5--> 1 --7--> 2 (accepting) --{3 → 0, 4 → 2}
        let g = TokenGrammar::new(
            vec![vec![(5, 1)], vec![(7, 2)], vec![(3, 0), (4, 2)]],
            vec![false, false, true],
            Some(9),
        )
        .unwrap();
        let mut run = g.start(10).unwrap();
        assert_eq!(run.mask().unwrap().ids(), vec![5]);
        assert_eq!(run.forced().unwrap(), vec![5, 7]);
        assert!(!run.is_complete());
        run.advance(&[5, 7]).unwrap();
        assert!(run.is_complete());
        assert_eq!(run.mask().unwrap().ids(), vec![3, 4, 9]);
        assert!(run.forced().unwrap().is_empty());
        assert!(run.advance(&[4, 5]).is_err());
        assert_eq!(
            run.mask().unwrap().ids(),
            vec![3, 4, 9],
            "a failed advance changes nothing"
        );
        run.advance(&[9]).unwrap();
        assert!(run.mask().unwrap().is_empty() && run.is_complete());
        assert!(run.advance(&[3]).is_err());
        run.rollback(3).unwrap();
        assert_eq!(run.mask().unwrap().ids(), vec![5]);
        assert!(run.rollback(1).is_err());
        assert_eq!(g.accepts(&[5, 7, 4, 9]), Some(true));
        assert_eq!(g.accepts(&[5]), Some(false));
        assert_eq!(g.accepts(&[7]), None);
    }

    #[test]
    fn random_grammars_are_valid() {
        for seed in 0..50 {
            let g = TokenGrammar::random(seed, 32, 6, Some(31));
            let g = TokenGrammar::new(g.transitions, g.accepting, g.eos).unwrap();
            let mut run = g.start(32).unwrap();
            let forced = run.forced().unwrap();
            run.advance(&forced).unwrap();
            assert!(!run.mask().unwrap().is_empty() || run.is_complete());
        }
    }
}
