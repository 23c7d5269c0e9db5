//! `--model owner/name`: repo ids resolved from a cache directory laid out as `huggingface_hub`
//! writes it (no network: without the `hf-hub` feature a repo that is not cached is an error that
//! says how to get it).

mod cli_common;

use std::path::{Path, PathBuf};

use cli_common::{mtp, Case};
use runner::hub::{cached_snapshot, hub_cache_dir, resolve_model_in, HubError, RepoId};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// `cache/models--owner--name/{refs/main, blobs/, snapshots/COMMIT/}` holding the files of `src`
/// (the snapshot's files link into blobs/, as HF's are).
fn cache_repo(cache: &Path, owner: &str, name: &str, src: &Path) -> PathBuf {
    let root = cache.join(format!("models--{owner}--{name}"));
    let snapshot = root.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    std::fs::create_dir_all(root.join("refs")).unwrap();
    std::fs::write(root.join("refs/main"), COMMIT).unwrap();
    for (i, entry) in std::fs::read_dir(src).unwrap().enumerate() {
        let entry = entry.unwrap();
        let blob = root.join("blobs").join(format!("blob{i}"));
        std::fs::copy(entry.path(), &blob).unwrap();
        let link = snapshot.join(entry.file_name());
        #[cfg(unix)]
        std::os::unix::fs::symlink(Path::new("../../blobs").join(format!("blob{i}")), &link)
            .unwrap();
        #[cfg(not(unix))]
        std::fs::copy(&blob, &link).unwrap();
    }
    snapshot
}

fn env_with<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |key: &str| {
        vars.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn repo_ids_parse_and_paths_do_not() {
    let id = RepoId::parse("google/gemma-4-E2B-it").expect("a repo id");
    assert_eq!(
        (id.owner.as_str(), id.name.as_str()),
        ("google", "gemma-4-E2B-it")
    );
    assert_eq!(id.revision(), "main");
    assert_eq!(id.cache_folder(), "models--google--gemma-4-E2B-it");
    assert_eq!(
        RepoId::parse("google/gemma-4-E2B-it@v1.0")
            .unwrap()
            .revision(),
        "v1.0"
    );
    for not_an_id in [
        "/abs/path",
        "a/b/c",
        "gemma",
        "./x",
        "a/",
        "../x",
        "a b/c",
        "a/b@",
    ] {
        assert!(RepoId::parse(not_an_id).is_none(), "{not_an_id}");
    }
}

#[test]
fn the_cache_location_follows_huggingface_hub() {
    let env = env_with(&[("HF_HUB_CACHE", "/c"), ("HF_HOME", "/h"), ("HOME", "/u")]);
    assert_eq!(hub_cache_dir(&env), Some(PathBuf::from("/c")));
    let env = env_with(&[("HF_HOME", "/h"), ("HOME", "/u")]);
    assert_eq!(hub_cache_dir(&env), Some(PathBuf::from("/h/hub")));
    let env = env_with(&[("HOME", "/u")]);
    assert_eq!(
        hub_cache_dir(&env),
        Some(PathBuf::from("/u/.cache/huggingface/hub"))
    );
}

#[test]
fn empty_cache_variables_count_as_unset() {
    let env = env_with(&[("HF_HUB_CACHE", ""), ("HF_HOME", "/h"), ("HOME", "/u")]);
    assert_eq!(hub_cache_dir(&env), Some(PathBuf::from("/h/hub")));
    let env = env_with(&[("HF_HUB_CACHE", ""), ("HF_HOME", ""), ("HOME", "/u")]);
    assert_eq!(
        hub_cache_dir(&env),
        Some(PathBuf::from("/u/.cache/huggingface/hub"))
    );
    assert_eq!(hub_cache_dir(&env_with(&[])), None);
    // No cache location at all: a clear error naming the variables, no panic.
    match resolve_model_in(Path::new("google/absent"), &env_with(&[])) {
        Err(e @ HubError::NotCached { .. }) => {
            assert!(e.to_string().contains("HF_HUB_CACHE"), "{e}")
        }
        other => panic!("expected NotCached, got {other:?}"),
    }
}

#[test]
fn hf_home_is_searched_when_hf_hub_cache_is_unset_and_yields_to_it() {
    let home = tempfile::tempdir().unwrap();
    let case = Case::named("mm_e2b");
    let snapshot = cache_repo(
        &home.path().join("hub"),
        "google",
        "tiny-e2b",
        &case.target(),
    );
    // HF writes refs without a newline; one written by hand often has one.
    let refs = home.path().join("hub/models--google--tiny-e2b/refs/main");
    std::fs::write(&refs, format!("{COMMIT}\n")).unwrap();
    let home_str = home.path().to_str().unwrap();
    let vars = [("HF_HOME", home_str), ("HOME", "/nonexistent")];
    let resolved = resolve_model_in(Path::new("google/tiny-e2b"), &env_with(&vars)).unwrap();
    assert_eq!(resolved, snapshot);
    // HF_HUB_CACHE wins over HF_HOME: an empty cache there does not fall back to HF_HOME's.
    let other = tempfile::tempdir().unwrap();
    let other_str = other.path().to_str().unwrap();
    let vars = [("HF_HUB_CACHE", other_str), ("HF_HOME", home_str)];
    if cfg!(not(feature = "hf-hub")) {
        assert!(matches!(
            resolve_model_in(Path::new("google/tiny-e2b"), &env_with(&vars)),
            Err(HubError::NotCached { .. })
        ));
    }
}

#[test]
fn a_ref_to_a_missing_snapshot_is_an_incomplete_cache() {
    let cache = tempfile::tempdir().unwrap();
    let case = Case::named("mm_e2b");
    let snapshot = cache_repo(cache.path(), "google", "tiny-e2b", &case.target());
    let repo = RepoId::parse("google/tiny-e2b").unwrap();
    let cache_str = cache.path().to_str().unwrap();
    let vars = [("HF_HUB_CACHE", cache_str)];
    // The snapshot without its config.json (a partial download), then without the snapshot.
    std::fs::remove_file(snapshot.join("config.json")).unwrap();
    assert_eq!(cached_snapshot(cache.path(), &repo).unwrap(), None);
    let partial = resolve_model_in(Path::new("google/tiny-e2b"), &env_with(&vars));
    std::fs::remove_dir_all(cache.path().join("models--google--tiny-e2b/snapshots")).unwrap();
    assert_eq!(cached_snapshot(cache.path(), &repo).unwrap(), None);
    let missing = resolve_model_in(Path::new("google/tiny-e2b"), &env_with(&vars));
    // (With `hf-hub` the snapshot would be downloaded again: not in a test.)
    if cfg!(feature = "hf-hub") {
        return;
    }
    for result in [partial, missing] {
        match result {
            Err(e @ HubError::BadCache { .. }) => {
                let message = e.to_string();
                for part in ["google/tiny-e2b", "refs/main", COMMIT, "config.json"] {
                    assert!(message.contains(part), "{part:?} missing: {message}");
                }
                assert!(message.contains("huggingface-cli download"), "{message}");
            }
            other => panic!("expected BadCache, got {other:?}"),
        }
    }
}

#[test]
fn a_cached_repo_resolves_to_its_snapshot() {
    let cache = tempfile::tempdir().unwrap();
    let case = Case::named("mm_e2b");
    let snapshot = cache_repo(cache.path(), "google", "tiny-e2b", &case.target());
    let cache_str = cache.path().to_str().unwrap();
    let vars = [("HF_HUB_CACHE", cache_str)];
    let env = env_with(&vars);
    let resolved = resolve_model_in(Path::new("google/tiny-e2b"), &env).unwrap();
    assert_eq!(resolved, snapshot);
    // By commit hash, and by a ref that is not cached.
    let by_commit = format!("google/tiny-e2b@{COMMIT}");
    assert_eq!(
        resolve_model_in(Path::new(&by_commit), &env).unwrap(),
        snapshot
    );
    // (With the `hf-hub` feature an uncached ref would be downloaded: not in a test.)
    if cfg!(not(feature = "hf-hub")) {
        match resolve_model_in(Path::new("google/tiny-e2b@v2"), &env) {
            Err(HubError::NotCached { repo, hint, .. }) => {
                assert_eq!(repo, "google/tiny-e2b");
                assert!(hint.contains("huggingface-cli download"), "{hint}");
            }
            other => panic!("expected NotCached, got {other:?}"),
        }
    }
    // A broken ref is reported.
    let root = cache.path().join("models--google--tiny-e2b");
    std::fs::write(root.join("refs/main"), "not a hash").unwrap();
    assert!(matches!(
        cached_snapshot(cache.path(), &RepoId::parse("google/tiny-e2b").unwrap()),
        Err(HubError::BadCache { .. })
    ));
    // Paths stay paths.
    let dir = case.target();
    assert_eq!(resolve_model_in(&dir, &env).unwrap(), dir);
}

#[test]
fn mtp_generate_runs_a_cached_repo_id() {
    let cache = tempfile::tempdir().unwrap();
    let case = Case::named("mm_e2b");
    cache_repo(cache.path(), "google", "tiny-e2b", &case.target());
    cache_repo(
        cache.path(),
        "google",
        "tiny-e2b-assistant",
        &case.assistant(),
    );
    let n = case.greedy_ids.len().to_string();
    let out = mtp()
        .env("HF_HUB_CACHE", cache.path())
        .args(["generate", "--model", "google/tiny-e2b"])
        .args(["--draft", "google/tiny-e2b-assistant"])
        .args(["--temperature", "0", "--num-predict", &n, "--json"])
        .arg(&case.prompt_text)
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(cli_common::ids(&json["tokens"]), case.greedy_ids);
    // Not cached: a clear error, no panic (with `hf-hub` it would be downloaded: not in a test).
    if cfg!(feature = "hf-hub") {
        return;
    }
    let out = mtp()
        .env("HF_HUB_CACHE", cache.path())
        .args(["generate", "--model", "google/absent", "w5"])
        .output()
        .expect("mtp runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("google/absent"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
