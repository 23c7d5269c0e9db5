//! mtp-rs's build script for mlx-sys 0.7.0 on Linux: mlx-c against the PyPI `mlx-cpu` wheel.
//!
//! `scripts/setup-mlx.sh` copies the registry's mlx-sys source into an ignored folder and puts
//! this file in place of its `build.rs`; nothing else of the crate changes. Upstream builds MLX
//! from a git checkout and links macOS frameworks; this script instead
//!
//! 1. builds mlx-c's static `libmlxc` with cmake against the wheel's `libmlx.so`
//!    (`MLX_C_USE_SYSTEM_MLX`, `MLX_DIR` = `$MLX_SYS_MLX_PREFIX/share/cmake/MLX`);
//! 2. force-includes a shim header in the C++ build and in bindgen: the `float16_t` /
//!    `bfloat16_t` typedefs mlx-c's `half.h` only defines on aarch64 (mlx-rs uses them
//!    everywhere), and a minimal `std::format` for libstdc++ < 13 (mlx-c's `io.h` needs it);
//! 3. compiles a C stand-in for `mach_approximate_time` (mlx-rs's `random` module calls this
//!    macOS API) on `CLOCK_MONOTONIC`;
//! 4. links `static=mlxc`, `dylib=mlx` and `dylib=stdc++`. The search path is a symlink to the
//!    wheel inside `OUT_DIR`, so `cargo run` and `cargo test` find `libmlx.so` without an rpath.
//!
//! The wheel version must equal the MLX tag mlx-c pins (`GIT_TAG` in `src/mlx-c/CMakeLists.txt`):
//! mlx-c is C++ compiled against the wheel's headers.

use std::{
    env, fs,
    path::{Path, PathBuf},
};

// mlx-sys's own bindgen settings (header list, blocklist), shared with upstream's build script.
#[allow(dead_code)]
#[path = "src/bindgen_config.rs"]
mod bindgen_config;

/// Force-included into every mlx-c translation unit and into bindgen.
const SHIM: &str = r#"/* mtp-rs: mlx-c on x86_64 Linux (see scripts/mlx-sys/build.rs). */
#pragma once
#include <stdint.h>
#if !defined(__aarch64__)
#define MLX_HALF_H 1 /* skip mlx-c's half.h: it defines the types below on aarch64 only */
#define HAS_FLOAT16 1
#define HAS_BFLOAT16 1
#if defined(__clang__) && !defined(__cplusplus)
typedef __fp16 float16_t; /* bindgen: __BindgenFloat16(u16), as mlx-rs expects */
#else
typedef uint16_t float16_t; /* C++: only passed by pointer */
#endif
typedef uint16_t bfloat16_t;
#endif
#ifdef __cplusplus
#include <version>
#if !defined(__cpp_lib_format)
#include <sstream>
#include <string>
#include <string_view>
namespace std {
/* The subset mlx-c uses: each `{}` replaced by the next argument. */
template <class... A> std::string format(std::string_view fmt, A&&... args) {
  std::ostringstream values[sizeof...(A) + 1];
  std::size_t n = 0;
  ((values[n++] << args), ...);
  std::string out;
  std::size_t next = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] == '{' && i + 1 < fmt.size() && fmt[i + 1] == '}' && next < n) {
      out += values[next++].str();
      ++i;
    } else {
      out += fmt[i];
    }
  }
  return out;
}
} // namespace std
#endif
#endif
"#;

/// `mach_approximate_time` for mlx-rs's random seed, in nanoseconds of `CLOCK_MONOTONIC`.
const MACH_TIME: &str = r#"#include <stdint.h>
#include <time.h>
uint64_t mach_approximate_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
"#;

fn main() {
    println!("cargo:rerun-if-env-changed=MLX_SYS_MLX_PREFIX");
    println!("cargo:rerun-if-changed=build.rs");
    let Some(prefix) = env::var_os("MLX_SYS_MLX_PREFIX").map(PathBuf::from) else {
        panic!(
            "MLX_SYS_MLX_PREFIX is not set: it must name the `mlx` folder of the mlx-cpu wheel \
             (run the build through scripts/cargo-mlx)"
        );
    };
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let shim = out.join("mlx_sys_linux_shim.h");
    fs::write(&shim, SHIM).expect("cannot write the shim header");

    let mlx_c_root = Path::new("src/mlx-c");
    let dst = cmake::Config::new(mlx_c_root)
        .define("MLX_C_USE_SYSTEM_MLX", "ON")
        .define("MLX_C_BUILD_EXAMPLES", "OFF")
        .define("MLX_DIR", prefix.join("share/cmake/MLX"))
        .profile("Release")
        .cxxflag(format!("-include {}", shim.display()))
        .build_target("mlxc")
        .build();

    let mach_time = out.join("mach_approximate_time.c");
    fs::write(&mach_time, MACH_TIME).expect("cannot write mach_approximate_time.c");
    cc::Build::new()
        .file(&mach_time)
        .compile("mlx_sys_mach_time");

    // A link path inside OUT_DIR is added to the dynamic library path of `cargo run/test`.
    let system_mlx = out.join("system-mlx");
    let _ = fs::remove_file(&system_mlx);
    std::os::unix::fs::symlink(&prefix, &system_mlx).expect("cannot link the MLX prefix");
    println!("cargo:rustc-link-search=native={}/build", dst.display());
    println!("cargo:rustc-link-search=native={}/lib", system_mlx.display());
    println!("cargo:rustc-link-lib=static=mlxc");
    println!("cargo:rustc-link-lib=dylib=mlx");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo::metadata=include={}", prefix.join("include").display());

    let headers = bindgen_config::discover_headers(mlx_c_root).expect("cannot list mlx-c headers");
    for header in &headers {
        println!("cargo:rerun-if-changed={}", header.display());
    }
    bindgen_config::builder(mlx_c_root, &headers)
        .clang_arg("-include")
        .clang_arg(shim.display().to_string())
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("cannot generate the mlx-c bindings")
        .write_to_file(out.join("bindings.rs"))
        .expect("cannot write bindings.rs");
}
