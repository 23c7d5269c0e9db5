//! The policy against simulated batches: a cost world with known rates, driven round by round
//! with a deterministic clock and seeded noise (no timing).

use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A simulated machine and load: a round of `n` sequences costs `a + b·n + c·rows` seconds in
/// the target and `h` per sequence of the sequences' own time; speculating, each sequence
/// forwards `r` rows and commits `y` tokens per round.
#[derive(Clone, Copy)]
struct World {
    a: f64,
    b: f64,
    c: f64,
    plain_h: f64,
    spec_h: f64,
    spec_y: f64,
    spec_r: f64,
}

/// Verify rows are cheap beside the weights' read until about eight sequences; past that,
/// speculation's extra rows and drafting cost more than they commit.
const WORLD: World = World {
    a: 2.0e-3,
    b: 0.05e-3,
    c: 0.1e-3,
    plain_h: 0.05e-3,
    spec_h: 0.3e-3,
    spec_y: 2.2,
    spec_r: 4.0,
};

impl World {
    fn round(&self, n: usize, speculative: bool, rng: &mut ChaCha8Rng) -> Round {
        let (h, y, r) = match speculative {
            true => (self.spec_h, self.spec_y, self.spec_r),
            false => (self.plain_h, 1.0, 1.0),
        };
        let noise = |rng: &mut ChaCha8Rng| rng.random_range(0.95..1.05);
        let nf = n as f64;
        let rows = (nf * r).round() as usize;
        let tokens = (nf * y * noise(rng)).round() as usize;
        Round {
            batch: n,
            rows,
            speculative,
            target_secs: (self.a + self.b * nf + self.c * rows as f64) * noise(rng),
            member_secs: nf * h * noise(rng),
            tokens,
            decode_forwards: n,
            decode_rows: rows,
        }
    }

    /// Committed tokens per second at `n` in one mode, without noise.
    fn rate(&self, n: usize, speculative: bool) -> f64 {
        let nf = n as f64;
        let (h, y, r) = match speculative {
            true => (self.spec_h, self.spec_y, self.spec_r),
            false => (self.plain_h, 1.0, 1.0),
        };
        nf * y / (self.a + self.b * nf + self.c * nf * r + nf * h)
    }
}

/// Run `rounds` rounds at size `n`: (tokens, seconds, rounds that speculated).
fn run_phase(
    p: &mut PolicyState,
    world: &World,
    n: usize,
    rounds: usize,
    rng: &mut ChaCha8Rng,
) -> (f64, f64, usize) {
    let (mut tokens, mut secs, mut speculated) = (0.0, 0.0, 0);
    for _ in 0..rounds {
        // The scheduler asks before the round, at the size it is about to run.
        p.size = n;
        let speculative = p.speculate();
        let round = world.round(n, speculative, rng);
        tokens += round.tokens as f64;
        secs += round.target_secs + round.member_secs;
        speculated += usize::from(speculative);
        p.round(round);
    }
    (tokens, secs, speculated)
}

#[test]
fn the_simulated_world_has_a_crossover() {
    assert!(WORLD.rate(1, true) > 1.5 * WORLD.rate(1, false));
    assert!(WORLD.rate(4, true) > WORLD.rate(4, false));
    assert!(WORLD.rate(16, true) < 0.85 * WORLD.rate(16, false));
}

#[test]
fn regret_against_the_best_fixed_choice_per_size_stays_small() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut p = PolicyState::new(SpeculationPolicy::Measured);
    let phases = [1, 2, 4, 16, 8, 2, 16, 1];
    let (mut got, mut best) = (0.0, 0.0);
    for &n in &phases {
        let (tokens, secs, _) = run_phase(&mut p, &WORLD, n, 3000, &mut rng);
        got += tokens;
        // What the better mode would have committed in the same time.
        best += secs * WORLD.rate(n, true).max(WORLD.rate(n, false));
    }
    let regret = 1.0 - got / best;
    assert!(regret < 0.05, "regret {regret:.3}");
}

#[test]
fn each_size_runs_its_better_mode_most_of_the_time() {
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let mut p = PolicyState::new(SpeculationPolicy::Measured);
    run_phase(&mut p, &WORLD, 1, 1000, &mut rng);
    run_phase(&mut p, &WORLD, 16, 1000, &mut rng);
    for (n, speculate_wins) in [(1, true), (2, true), (4, true), (16, false)] {
        let rounds = 2400;
        let (_, _, speculated) = run_phase(&mut p, &WORLD, n, rounds, &mut rng);
        let share = speculated as f64 / rounds as f64;
        match speculate_wins {
            true => assert!(share > 0.85, "n = {n}: speculated {share:.2}"),
            false => assert!(share < 0.15, "n = {n}: speculated {share:.2}"),
        }
    }
}

#[test]
fn a_size_never_run_is_decided_by_the_model_without_trying_the_worse_mode_first() {
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut p = PolicyState::new(SpeculationPolicy::Measured);
    // Only sizes 1 and 2 seen, long enough for both modes to be measured.
    run_phase(&mut p, &WORLD, 1, 600, &mut rng);
    run_phase(&mut p, &WORLD, 2, 600, &mut rng);
    let r = p.report();
    assert!(r.iter().all(|s| s.batch <= 2), "{r:?}");
    // Sixteen sequences: plain is predicted and run from the first round, and it stays so for
    // the whole first window.
    let (_, _, speculated) = run_phase(&mut p, &WORLD, 16, WINDOW_FIRINGS, &mut rng);
    assert_eq!(speculated, 0);
    let at16 = p.report().into_iter().find(|s| s.batch == 16).expect("16");
    let (on, off) = (
        at16.predicted_speculate_rate.expect("predicted"),
        at16.predicted_plain_rate.expect("predicted"),
    );
    let truth = WORLD.rate(16, true) / WORLD.rate(16, false);
    assert!(
        (on / off - truth).abs() < 0.1 * truth,
        "predicted {:.3}, true {truth:.3}",
        on / off
    );
    // Four: speculation, likewise.
    let (_, _, speculated) = run_phase(&mut p, &WORLD, 4, WINDOW_FIRINGS, &mut rng);
    assert_eq!(speculated, WINDOW_FIRINGS);
}

#[test]
fn a_change_in_acceptance_is_noticed() {
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let mut p = PolicyState::new(SpeculationPolicy::Measured);
    run_phase(&mut p, &WORLD, 2, 2000, &mut rng);
    assert!(p.speculate());
    // The load turns to text the proposers cannot guess: a draft commits almost nothing more.
    let poor = World {
        spec_y: 1.1,
        ..WORLD
    };
    run_phase(&mut p, &poor, 2, 3000, &mut rng);
    let (_, _, speculated) = run_phase(&mut p, &poor, 2, 2400, &mut rng);
    assert!(
        speculated < 2400 / 5,
        "still speculating {speculated} rounds"
    );
}

#[test]
fn fixed_policies_never_switch() {
    let p = PolicyState::new(SpeculationPolicy::Never);
    assert!(!p.speculate());
    let p = PolicyState::new(SpeculationPolicy::Always);
    assert!(p.speculate());
    let fresh = PolicyState::new(SpeculationPolicy::Measured);
    assert!(
        fresh.speculate(),
        "with nothing measured, speculation is tried first"
    );
}

#[test]
fn the_fit_recovers_a_linear_cost() {
    let mut fit = TargetFit::default();
    for (n, rows) in [(1, 1), (1, 4), (4, 4), (4, 16), (8, 8), (8, 30)] {
        let (n, rows) = (n as f64, rows as f64);
        fit.add(n, rows, 2.0 + 0.5 * n + 0.25 * rows);
    }
    let [a, b, c] = fit.coefficients().expect("fitted");
    assert!((a - 2.0).abs() < 0.01 && (b - 0.5).abs() < 0.01 && (c - 0.25).abs() < 0.01);
    assert!(solve3(
        [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]],
        [1.0; 3]
    )
    .is_none());
}

#[test]
fn a_pass_is_split_by_rows_until_fitted_then_by_marginal_cost() {
    let mut p = PolicyState::new(SpeculationPolicy::Always);
    // Nothing fitted: by rows (a drafting member with 4 rows beside a plain one).
    let shares = p.pass_shares(&[4, 1]);
    assert!((shares[0] - 0.8).abs() < 1e-12 && (shares[1] - 0.2).abs() < 1e-12);
    // Fitted under a fixed policy too: a = 2, b = 0.5, c = 0.25 (per ms).
    for (n, rows) in [(1, 1), (1, 4), (2, 5), (2, 8), (4, 4), (4, 16)] {
        p.round(Round {
            batch: n,
            rows,
            speculative: true,
            target_secs: 2.0 + 0.5 * n as f64 + 0.25 * rows as f64,
            member_secs: 0.0,
            tokens: n,
            decode_forwards: n,
            decode_rows: rows,
        });
    }
    let shares = p.pass_shares(&[4, 1]);
    // a/2 + b + c·rows: 1 + 0.5 + 1 = 2.5 and 1 + 0.5 + 0.25 = 1.75 of 4.25.
    assert!((shares[0] - 2.5 / 4.25).abs() < 1e-6, "{shares:?}");
    assert!((shares[1] - 1.75 / 4.25).abs() < 1e-6, "{shares:?}");
    // One member pays the whole pass; shares always sum to one.
    assert_eq!(p.pass_shares(&[3]), vec![1.0]);
    let sum: f64 = p.pass_shares(&[1, 2, 3, 9]).iter().sum();
    assert!((sum - 1.0).abs() < 1e-12);
}
