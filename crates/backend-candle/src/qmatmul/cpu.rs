//! Which SIMD instruction set the kernels use, chosen at run time (never by compile-time `cfg`
//! alone): on x86-64 AVX-512 VNNI where the CPU has it, else AVX2 + FMA + F16C; NEON on
//! aarch64; else the portable scalar code. `MTP_QMATMUL_SIMD` (`scalar`, `avx2`, `avx512vnni`,
//! `neon`) picks a slower one this CPU has, for A/B benchmarks.

use std::sync::OnceLock;

/// An instruction set the quantized kernels are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Simd {
    /// Portable Rust, every target; also the oracle the SIMD kernels are tested against.
    Scalar,
    /// x86-64 AVX2 with FMA and F16C (256-bit integer dot products, fused multiply-add
    /// accumulation, hardware `f16` scale conversion).
    Avx2,
    /// x86-64 AVX2 plus AVX-512F/VL and AVX-512 VNNI: the AVX2 kernels with the byte and word
    /// dot-product instructions (`vpdpbusd`, `vpdpwssd`) on 256-bit vectors, bit for bit the
    /// AVX2 results.
    Avx512Vnni,
    /// aarch64 NEON (128-bit integer dot products; the scalar kernels' block decoding and
    /// `f32` accumulation, so the scalar results bit for bit).
    Neon,
}

impl Simd {
    /// Every variant: the portable one first, then each architecture's sets from slower to
    /// faster ([`best`](Self::best) takes the last one this CPU has).
    pub const ALL: [Simd; 4] = [Simd::Scalar, Simd::Avx2, Simd::Avx512Vnni, Simd::Neon];

    /// The environment variable that picks the instruction set (one this CPU has).
    pub const ENV: &'static str = "MTP_QMATMUL_SIMD";

    /// Whether this CPU can run it (detected once per process, then a cached load).
    pub fn is_available(self) -> bool {
        match self {
            Simd::Scalar => true,
            Simd::Avx2 => avx2_fma(),
            Simd::Avx512Vnni => avx2_fma() && avx512_vnni(),
            Simd::Neon => neon(),
        }
    }

    /// The instruction set the kernels use: the fastest this CPU has, unless [`ENV`](Self::ENV)
    /// names another it has (one it lacks, or an unknown name, is said once at `warn` and
    /// ignored).
    pub fn best() -> Simd {
        static BEST: OnceLock<Simd> = OnceLock::new();
        *BEST.get_or_init(|| {
            let fastest = Self::ALL
                .into_iter()
                .rev()
                .find(|s| s.is_available())
                .unwrap_or(Simd::Scalar);
            let chosen = match std::env::var(Self::ENV) {
                Ok(name) => match Self::ALL.into_iter().find(|s| s.name() == name.trim()) {
                    Some(s) if s.is_available() => s,
                    Some(s) => {
                        tracing::warn!("{}={name}: this CPU lacks {s}; using {fastest}", Self::ENV);
                        fastest
                    }
                    None => {
                        tracing::warn!(
                            "{}={name}: not one of scalar, avx2, avx512vnni, neon; using {fastest}",
                            Self::ENV
                        );
                        fastest
                    }
                },
                Err(_) => fastest,
            };
            tracing::debug!(simd = %chosen, "batched quantized matmul: instruction set chosen");
            chosen
        })
    }

    /// The name [`ENV`](Self::ENV) takes.
    pub fn name(self) -> &'static str {
        match self {
            Simd::Scalar => "scalar",
            Simd::Avx2 => "avx2",
            Simd::Avx512Vnni => "avx512vnni",
            Simd::Neon => "neon",
        }
    }

    /// Those of [`ALL`](Self::ALL) this CPU can run.
    pub fn available() -> Vec<Simd> {
        Self::ALL.into_iter().filter(|s| s.is_available()).collect()
    }
}

impl std::fmt::Display for Simd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Simd::Scalar => "scalar",
            Simd::Avx2 => "avx2+fma+f16c",
            Simd::Avx512Vnni => "avx2+avx512vl+avx512vnni",
            Simd::Neon => "neon",
        })
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_fma() -> bool {
    // `is_x86_feature_detected!` caches its answer itself.
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_fma() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn avx512_vnni() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512vnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_vnni() -> bool {
    false
}

#[cfg(target_arch = "aarch64")]
fn neon() -> bool {
    std::arch::is_aarch64_feature_detected!("neon")
}

#[cfg(not(target_arch = "aarch64"))]
fn neon() -> bool {
    false
}
