//! Recycled whole-vocabulary `f32` rows.
//!
//! A sampled distribution over Gemma's 262,144 tokens keeps one 1 MiB row of weights, and a
//! round makes several (the target's k+1 rows, the drafter's, the residual). Freshly allocated,
//! each is fresh pages from the kernel — one page fault per 4 KiB, written before use and
//! handed back on free — which cost more than the vectorised pass that fills the row. Rows
//! freed on a thread are kept there (a few, bounded in length) and handed to the next whole-row
//! pass on that thread instead.

use std::cell::RefCell;

/// Rows kept per thread: a verify round's distributions, the drafter's and a residual.
const KEPT_ROWS: usize = 8;

/// Longest row kept, in values (4 Mi values, 16 MiB): a vocabulary beyond it is allocated.
const MAX_KEPT_VALUES: usize = 1 << 22;

thread_local! {
    static SPARE: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// A row of `len` values for a pass that writes every one of them: a spare row when this
/// thread has one long enough (its old values left in place), else a new zeroed one.
pub(crate) fn take_row(len: usize) -> Vec<f32> {
    let spare = SPARE
        .try_with(|spare| {
            let mut spare = spare.try_borrow_mut().ok()?;
            let at = spare.iter().position(|row| row.capacity() >= len)?;
            Some(spare.swap_remove(at))
        })
        .ok()
        .flatten();
    match spare {
        Some(mut row) => {
            row.resize(len, 0.0);
            row
        }
        None => vec![0.0; len],
    }
}

/// Keeps `row` for a later [`take_row`] on this thread (dropped when the thread keeps enough
/// rows already, or when it is too long to keep).
pub(crate) fn give_row(row: Vec<f32>) {
    if row.capacity() == 0 || row.capacity() > MAX_KEPT_VALUES {
        return;
    }
    let _ = SPARE.try_with(|spare| {
        if let Ok(mut spare) = spare.try_borrow_mut() {
            if spare.len() < KEPT_ROWS {
                spare.push(row);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_row_is_taken_again_at_any_length_it_holds() {
        let row = vec![1.0f32; 1000];
        let at = row.as_ptr();
        give_row(row);
        let shorter = take_row(10);
        assert_eq!(shorter.len(), 10);
        assert_eq!(shorter.as_ptr(), at, "the spare row is reused");
        give_row(shorter);
        let longer = take_row(1000);
        assert_eq!(longer.len(), 1000);
        // Past the values it held at 10 long, the row is extended with zeros.
        assert!(longer[10..].iter().all(|&v| v == 0.0));
        let fresh = take_row(5000);
        assert_eq!(
            fresh,
            vec![0.0; 5000],
            "nothing spare is long enough: a zeroed row"
        );
    }

    #[test]
    fn kept_rows_are_bounded() {
        for _ in 0..3 * KEPT_ROWS {
            give_row(vec![0.0; 4]);
        }
        SPARE.with(|spare| assert!(spare.borrow().len() <= KEPT_ROWS));
        give_row(vec![0.0; MAX_KEPT_VALUES + 1]);
        SPARE.with(|spare| {
            assert!(spare
                .borrow()
                .iter()
                .all(|r| r.capacity() <= MAX_KEPT_VALUES));
        });
    }
}
