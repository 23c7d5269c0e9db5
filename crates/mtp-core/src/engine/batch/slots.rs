//! The batch's places as coroutines on the calling thread.
//!
//! A place is a stackful coroutine ([`corosensei`]) that runs one job after another: started
//! with a job, it runs it (the engine's ordinary synchronous code) and suspends at each target
//! call with the work to do; resumed with the result, it goes on. When its job ends it suspends
//! as free and waits for the next job. Everything runs on the thread that called
//! [`with_places`], so nothing the coroutines touch needs to be `Send` or `Sync`.
//!
//! The coroutines borrow the caller's engine, models and callbacks, so they must be dropped
//! before those borrows end: each is entered through [`ScopedCoroutine::scope`], which drops it
//! at the end of its scope. The scopes are nested, one per place, and the scheduler runs in the
//! innermost, where it holds every place. The number of places is fixed for a batch (its
//! `max_batch`), so the nesting is as deep as the batch is wide, never deeper as jobs come and go.

use corosensei::stack::DefaultStack;
use corosensei::{ScopedCoroutine, ScopedCoroutineRef, Yielder};

/// Stack size of one place: as much as a main thread gets, so a model or proposer running in a
/// place (a drafter's forward) has the room it would have anywhere else. It is reserved address
/// space; pages are committed as they are touched.
pub(super) const PLACE_STACK_BYTES: usize = 8 << 20;

/// One place, as the scheduler holds it.
pub(super) type Place<'r, I, Y> = ScopedCoroutineRef<'r, I, Y, (), DefaultStack>;

/// Make `count` places, each running `body` from its first resume, and call `drive` with all of
/// them; they are dropped (any still suspended is unwound) before this returns.
///
/// Fails only when a stack cannot be reserved.
pub(super) fn with_places<'env, I, Y, T, F, D>(
    count: usize,
    body: &'env F,
    drive: D,
) -> std::io::Result<T>
where
    F: Fn(&Yielder<I, Y>, I) + 'env,
    D: FnOnce(&mut [Place<'_, I, Y>]) -> T,
{
    let mut pending = Vec::with_capacity(count);
    for _ in 0..count {
        let stack = DefaultStack::new(PLACE_STACK_BYTES)?;
        pending.push(ScopedCoroutine::with_stack(
            stack,
            move |yielder: &Yielder<I, Y>, input: I| body(yielder, input),
        ));
    }
    Ok(nest(pending, Vec::with_capacity(count), drive))
}

/// Enter the scope of each pending place in turn, then drive them all from the innermost.
fn nest<'env, I, Y, T, D>(
    mut pending: Vec<ScopedCoroutine<'env, I, Y, (), DefaultStack>>,
    held: Vec<Place<'_, I, Y>>,
    drive: D,
) -> T
where
    D: FnOnce(&mut [Place<'_, I, Y>]) -> T,
{
    match pending.pop() {
        None => {
            let mut held = held;
            // Places were entered last-made first; hand them over in the order they were made.
            held.reverse();
            drive(&mut held)
        }
        Some(place) => place.scope(move |entered| {
            let mut held: Vec<Place<'_, I, Y>> = held;
            held.push(entered);
            nest(pending, held, drive)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corosensei::CoroutineResult;
    use std::cell::RefCell;

    #[test]
    fn places_run_interleaved_on_one_thread_and_borrow_the_caller() {
        let log = RefCell::new(Vec::new());
        let body = |yielder: &Yielder<u32, u32>, first: u32| {
            let mut input = first;
            while input != 0 {
                log.borrow_mut().push(input);
                input = yielder.suspend(input * 10);
            }
        };
        let answers = with_places(3, &body, |places| {
            let mut answers = Vec::new();
            for round in 1..=2u32 {
                for (i, place) in places.iter_mut().enumerate() {
                    match place.as_mut().resume(round * 100 + i as u32) {
                        CoroutineResult::Yield(v) => answers.push(v),
                        CoroutineResult::Return(()) => panic!("ended early"),
                    }
                }
            }
            for place in places.iter_mut() {
                assert!(matches!(
                    place.as_mut().resume(0),
                    CoroutineResult::Return(())
                ));
            }
            answers
        })
        .expect("stacks reserved");
        assert_eq!(answers, vec![1000, 1010, 1020, 2000, 2010, 2020]);
        assert_eq!(*log.borrow(), vec![100, 101, 102, 200, 201, 202]);
    }

    #[test]
    fn the_widest_batch_gets_its_places() {
        let body = |yielder: &Yielder<usize, usize>, first: usize| {
            yielder.suspend(first);
        };
        let widest = crate::engine::batch::MAX_BATCH_LIMIT;
        let sum = with_places(widest, &body, |places| {
            let mut sum = 0;
            for (i, place) in places.iter_mut().enumerate() {
                if let CoroutineResult::Yield(v) = place.as_mut().resume(i) {
                    sum += v;
                }
            }
            sum
        })
        .expect("stacks reserved");
        assert_eq!(sum, widest * (widest - 1) / 2);
    }

    #[test]
    fn a_suspended_place_is_unwound_when_the_batch_ends() {
        struct Flag<'a>(&'a RefCell<bool>);
        impl Drop for Flag<'_> {
            fn drop(&mut self) {
                *self.0.borrow_mut() = true;
            }
        }
        let dropped = RefCell::new(false);
        let body = |yielder: &Yielder<(), ()>, ()| {
            let _flag = Flag(&dropped);
            yielder.suspend(());
        };
        with_places(1, &body, |places| {
            assert!(matches!(
                places[0].as_mut().resume(()),
                CoroutineResult::Yield(())
            ));
        })
        .expect("stacks reserved");
        assert!(
            *dropped.borrow(),
            "the suspended place's values were dropped"
        );
    }
}
