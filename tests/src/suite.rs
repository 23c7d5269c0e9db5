//! The instantiation macro: the list of every case, expanded into one `#[test]` each.

/// Instantiate the conformance suite for one backend: one `#[test]` per case, grouped in
/// modules named after the case groups (`creation::from_f32`, `fused::attention`, ...), so a
/// failure names the op. A failing test panics with the [`report`](crate::report): the case,
/// the op with its parameters, the inputs' dtypes, shapes and layouts, and the maximum
/// absolute and relative errors against the tolerance.
///
/// `$backend` is an expression of a type implementing [`Backend`](mtp_core::Backend),
/// evaluated afresh in every test (tests run on parallel threads, and MLX arrays must stay on
/// their thread); it may use names imported at the call site.
///
/// ```ignore
/// // tests/tests/candle_cpu.rs
/// mtp_tests::conformance_suite!(backend_candle::CandleBackend::cpu());
/// ```
///
/// A backend that cannot support a case yet lists it, with the reason in a comment; a skipped
/// case prints a line and passes, and a name that is not a case fails `skip_list_names_real_cases`:
///
/// ```ignore
/// mtp_tests::conformance_suite!(
///     backend_mlx::MlxBackend::gpu(),
///     skip = [
///         "reduce::cumsum", // integer cumsum not in mlx-c 0.2
///     ]
/// );
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($backend:expr $(,)?) => {
        $crate::conformance_suite!($backend, skip = []);
    };
    ($backend:expr, skip = [$($skip:literal),* $(,)?] $(,)?) => {
        /// The backend under test (evaluated once per test).
        fn __conformance_backend() -> impl $crate::mtp_core::Backend {
            $backend
        }

        /// Cases this backend skips (`"group::case"`), each with a reason at the call site.
        const __CONFORMANCE_SKIP: &[&str] = &[$($skip),*];

        $crate::__conformance_cases! {
            creation: [
                from_f32, from_le_bytes, from_u32, from_i32, host_reads_of_integers,
                full_and_scalar, cast_all_pairs,
            ],
            shape: [reshape, transpose, slice, concat, squeeze_last],
            elementwise: [binary, derived_arithmetic, unary, compare, where_cond, affine],
            reduce: [reduce, argmax, argsort, argsort_is_stable, cumsum],
            indexing: [embedding, take_along_axis, scatter],
            linalg: [matmul, linear, gather_linear],
            fused: [
                softmax, log_softmax, gelu_tanh, rms_norm, rope, attention, top_k,
                non_finite_rows,
            ],
            hooks: [write_slice, deep_copy, eval_and_async_eval],
            errors: [
                mismatched_shapes_are_errors, bad_axes_are_errors, fused_argument_errors,
                host_errors,
            ],
            invariance: [linear_rows, quant_linear_rows, attention_rows, row_ops_rows],
            caches: [full_cache_rollback, rotating_cache_rollback, cache_forks_are_isolated],
            engine: [
                greedy_mtp_matches_plain, greedy_tokens_match_reference, logits_match_reference,
                constrained_greedy_matches_reference, greedy_mtp_matches_plain_in_every_format,
            ],
            proposers: [scripted_share_is_accepted, prompt_lookup_matches_plain],
            batch: [sequences_emit_what_they_emit_alone, sampled_sequences_keep_the_distribution],
        }
    };
}

/// Expands the case list of [`conformance_suite!`] (an implementation detail).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($($group:ident : [$($case:ident),* $(,)?]),* $(,)?) => {
        $(
            mod $group {
                $(
                    #[test]
                    fn $case() {
                        let name = concat!(stringify!($group), "::", stringify!($case));
                        if super::__CONFORMANCE_SKIP.contains(&name) {
                            eprintln!("conformance case {name} skipped for this backend");
                            return;
                        }
                        let backend = super::__conformance_backend();
                        if let Err(error) = $crate::cases::$group::$case(&backend) {
                            panic!(
                                "{}",
                                $crate::report(stringify!($group), stringify!($case), &error)
                            );
                        }
                    }
                )*
            }
        )*

        /// Every entry of the skip list names a case of the suite.
        #[test]
        fn skip_list_names_real_cases() {
            let cases: &[&str] = &[$($(concat!(stringify!($group), "::", stringify!($case))),*),*];
            for skipped in __CONFORMANCE_SKIP {
                assert!(cases.contains(skipped), "{skipped} is not a conformance case");
            }
        }
    };
}
