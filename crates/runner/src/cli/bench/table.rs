//! The readable table printed on stdout.

use std::fmt::Write;

use super::report::{Report, VariantReport};
use super::spread::Spread;
use super::timed::ClockMode;

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

fn med(s: Option<Spread>, digits: usize) -> String {
    opt(s.map(|s| s.median), digits)
}

fn range(s: Option<Spread>, digits: usize) -> String {
    s.map_or_else(
        || "-".to_string(),
        |s| format!("{:.digits$}–{:.digits$}", s.min, s.max),
    )
}

fn ms(s: Option<Spread>) -> String {
    opt(s.map(|s| s.median * 1e3), 3)
}

fn yes_no(x: Option<bool>) -> &'static str {
    match x {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "n/a",
    }
}

/// The whole report as text.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let u = &r.setup;
    let mode = if u.sampling.temperature == 0.0 {
        "greedy".to_string()
    } else {
        format!("temperature {}", u.sampling.temperature)
    };
    let _ = writeln!(
        s,
        "mtp bench: {} {} | {} prompts x {} tokens | {} reps (+{} warm-up) | {mode}{}{}",
        u.backend,
        u.dtype,
        u.prompts,
        u.num_predict,
        u.reps,
        u.warmup,
        match u.model_clock {
            ClockMode::Eval => "",
            ClockMode::Dispatch => " | model clock: dispatch",
        },
        if u.quick {
            " | QUICK (numbers mean nothing)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "prefill: {} prompt tok/s (min–max {})",
        med(r.prefill_tokens_per_second, 1),
        range(r.prefill_tokens_per_second, 1)
    );
    cost_lines(&mut s, r);
    let _ = writeln!(
        s,
        "\n{:<14} {:>10} {:>17} {:>9} {:>7} {:>7} {:>9} {:>6} {:>6} {:>7} {:>11} {:>6}",
        "variant",
        "decode t/s",
        "(min–max)",
        "e2e t/s",
        "xplain",
        "ideal",
        "ach/ideal",
        "E[L]",
        "accept",
        "vs best",
        "host ms/rnd",
        "greedy"
    );
    for v in &r.variants {
        variant_line(&mut s, v);
    }
    let _ = writeln!(s, "\nper-position acceptance (draft position 1, 2, ...):");
    for v in r
        .variants
        .iter()
        .filter(|v| !v.per_position_acceptance.is_empty())
    {
        let cells: Vec<String> = v
            .per_position_acceptance
            .iter()
            .map(|a| format!("{a:.2}"))
            .collect();
        let _ = writeln!(s, "  {:<14} {}", v.name, cells.join(" "));
    }
    round_lines(&mut s, r);
    phase_lines(&mut s, r);
    controller_lines(&mut s, r);
    let twins: Vec<&VariantReport> = r
        .variants
        .iter()
        .filter(|v| v.overlap_speedup.is_some())
        .collect();
    if !twins.is_empty() {
        let _ = writeln!(
            s,
            "\nevaluation overlap (decode t/s with ÷ without, per pass; median, min–max):"
        );
        for v in twins {
            let _ = writeln!(
                s,
                "  {:<14} {} ({})",
                v.name,
                med(v.overlap_speedup, 3),
                range(v.overlap_speedup, 3)
            );
        }
    }
    let _ = writeln!(
        s,
        "\nbest fixed depth: {}",
        r.best_fixed_depth
            .map_or_else(|| "-".to_string(), |k| k.to_string())
    );
    let _ = writeln!(
        s,
        "greedy MTP output identical to plain on every prompt: {}",
        yes_no(r.greedy_identical)
    );
    let _ = writeln!(
        s,
        "peak RSS: {}",
        r.peak_rss_bytes.map_or_else(
            || "unavailable".to_string(),
            |b| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
        )
    );
    s
}

/// For the varying schedules: how many rounds drafted each depth and their median round time.
fn round_lines(s: &mut String, r: &Report) {
    let varying: Vec<&VariantReport> = r
        .variants
        .iter()
        .filter(|v| v.round_log.is_some())
        .collect();
    if varying.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nrounds by drafted depth (depth:rounds@median ms; capped rounds apart):"
    );
    for v in varying {
        let cells: Vec<String> = v
            .round_secs_by_depth
            .iter()
            .map(|d| format!("{}:{}@{}", d.depth, d.rounds, ms(d.secs)))
            .collect();
        let _ = writeln!(
            s,
            "  {:<14} {} | capped {}",
            v.name,
            cells.join(" "),
            v.capped_rounds
        );
    }
}

/// Every MTP variant's rounds by drafted depth: the mean time of each part and the round
/// against the cost model's k·t_d + t_v(k+1).
fn phase_lines(s: &mut String, r: &Report) {
    let mtp: Vec<&VariantReport> = r
        .variants
        .iter()
        .filter(|v| v.depth.is_some() || v.schedule.is_some())
        .collect();
    if mtp.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nwhere a round goes, mean ms by drafted depth (draft forward unembed host commit emit \
         other = wall | model k*t_d+t_v(k+1) | wall/model):"
    );
    for v in mtp {
        for d in &v.round_secs_by_depth {
            let p = &d.mean_phases;
            let parts = [
                p.draft, p.forward, p.unembed, p.host, p.commit, p.emit, p.other,
            ]
            .map(|x| format!("{:.3}", x * 1e3))
            .join(" ");
            let _ = writeln!(
                s,
                "  {:<14} k={:<2} {:>5} rounds: {parts} = {:.3} | {} | {}",
                v.name,
                d.depth,
                d.rounds,
                p.wall * 1e3,
                opt(d.model_secs.map(|m| m * 1e3), 3),
                opt(d.wall_over_model, 3),
            );
        }
    }
}

/// What each adaptive controller learned by the end of the run.
fn controller_lines(s: &mut String, r: &Report) {
    for c in &r.controllers {
        let rates: Vec<String> = c
            .state
            .acceptance
            .iter()
            .map(|a| format!("{a:.2}"))
            .collect();
        let costs: Vec<String> = c
            .state
            .cost_secs
            .iter()
            .map(|x| opt(x.map(|x| x * 1e3), 2))
            .collect();
        let _ = writeln!(
            s,
            "\nadaptive controller ({}, {:?}): next depth {}, frontier {}, probe every {}\n  \
             acceptance a_j  {}\n  round ms by depth {}",
            c.key.proposer,
            c.key.mode,
            c.state.planned,
            c.state.frontier,
            c.state.probe_interval,
            rates.join(" "),
            costs.join(" ")
        );
    }
}

fn cost_lines(s: &mut String, r: &Report) {
    let _ = writeln!(
        s,
        "cost (context {} tokens, median of {}): drafter step t_d = {} ms",
        r.cost.context_tokens,
        r.cost.reps,
        ms(r.cost.draft_step_secs)
    );
    let widths: Vec<String> = r
        .cost
        .verify_secs
        .iter()
        .map(|w| format!("{:>8}", w.width))
        .collect();
    let times: Vec<String> = r
        .cost
        .verify_secs
        .iter()
        .map(|w| format!("{:>8}", ms(w.secs)))
        .collect();
    let _ = writeln!(s, "  width    {}", widths.join(""));
    let _ = writeln!(s, "  t_v ms   {}", times.join(""));
}

fn variant_line(s: &mut String, v: &VariantReport) {
    let _ = writeln!(
        s,
        "{:<14} {:>10} {:>17} {:>9} {:>7} {:>7} {:>9} {:>6} {:>6} {:>7} {:>11} {:>6}",
        v.name,
        med(v.decode_tokens_per_second, 1),
        range(v.decode_tokens_per_second, 1),
        med(v.end_to_end_tokens_per_second, 1),
        med(v.speedup_vs_plain, 3),
        opt(v.ideal_speedup, 3),
        opt(v.achieved_over_ideal, 3),
        format!("{:.2}", v.mean_emitted_per_round),
        format!("{:.2}", v.acceptance),
        opt(v.vs_best_fixed_depth, 3),
        ms(v.host_overhead_per_round_secs),
        yes_no(v.greedy_match)
    );
}
