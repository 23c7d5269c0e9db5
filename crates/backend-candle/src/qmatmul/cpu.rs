//! Which SIMD instruction set the kernels use, chosen at run time (never by compile-time `cfg`
//! alone): AVX2 + FMA + F16C on x86-64 when the CPU has all three, else the portable scalar code.

use std::sync::OnceLock;

/// An instruction set the quantized kernels are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Simd {
    /// Portable Rust, every target; also the oracle the SIMD kernels are tested against.
    Scalar,
    /// x86-64 AVX2 with FMA and F16C (256-bit integer dot products, fused multiply-add
    /// accumulation, hardware `f16` scale conversion).
    Avx2,
    /// aarch64 NEON (128-bit integer dot products; the scalar kernels' block decoding and
    /// `f32` accumulation, so the scalar results bit for bit).
    Neon,
}

impl Simd {
    /// Every variant (at most one SIMD set per architecture), portable first.
    pub const ALL: [Simd; 3] = [Simd::Scalar, Simd::Avx2, Simd::Neon];

    /// Whether this CPU can run it (detected once per process, then a cached load).
    pub fn is_available(self) -> bool {
        match self {
            Simd::Scalar => true,
            Simd::Avx2 => avx2_fma(),
            Simd::Neon => neon(),
        }
    }

    /// The fastest instruction set this CPU has.
    pub fn best() -> Simd {
        static BEST: OnceLock<Simd> = OnceLock::new();
        *BEST.get_or_init(|| {
            let best = Self::ALL
                .into_iter()
                .rev()
                .find(|s| s.is_available())
                .unwrap_or(Simd::Scalar);
            tracing::debug!(simd = ?best, "batched quantized matmul: instruction set chosen");
            best
        })
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

#[cfg(target_arch = "aarch64")]
fn neon() -> bool {
    std::arch::is_aarch64_feature_detected!("neon")
}

#[cfg(not(target_arch = "aarch64"))]
fn neon() -> bool {
    false
}
