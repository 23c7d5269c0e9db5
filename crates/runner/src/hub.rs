//! Models named by Hugging Face repo id (`google/gemma-4-E2B-it`, optionally `@revision`),
//! resolved to a snapshot directory of the local HF cache, the one `huggingface_hub` writes:
//!
//! ```text
//! $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub)
//!   models--google--gemma-4-E2B-it/
//!     refs/main                  the commit hash the revision `main` points at
//!     snapshots/<commit hash>/   config.json, *.safetensors, tokenizer.json, ... (links into blobs/)
//! ```
//!
//! A repo that is not cached is downloaded into that cache with the `hf-hub` crate when the
//! runner is built with the `hf-hub` feature (and the network allows); without it the error says
//! how to get the files.

use std::path::{Path, PathBuf};

/// The files a model directory is made of (besides the weights, found from the index).
#[cfg_attr(not(feature = "hf-hub"), allow(dead_code))]
const MODEL_FILES: [&str; 6] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "preprocessor_config.json",
];

/// What can go wrong resolving a repo id.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The repo is not in the local cache and cannot be downloaded by this build.
    #[error(
        "{repo} is neither a directory nor in the Hugging Face cache ({}){hint}",
        .cache.display()
    )]
    NotCached {
        /// The repo id.
        repo: String,
        /// The cache directory searched.
        cache: PathBuf,
        /// How to get it.
        hint: String,
    },
    /// A cached ref or snapshot is unusable.
    #[error("the cached copy of {repo} is incomplete: {reason}")]
    BadCache {
        /// The repo id.
        repo: String,
        /// What is wrong.
        reason: String,
    },
    /// Downloading failed.
    #[error("cannot download {file} of {repo}: {reason}")]
    Download {
        /// The repo id.
        repo: String,
        /// The file.
        file: String,
        /// The client's message.
        reason: String,
    },
}

/// A Hugging Face model repo id: `owner/name`, with an optional `@revision` (branch, tag or
/// commit hash; `main` when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoId {
    /// The owner (user or organisation).
    pub owner: String,
    /// The repo name.
    pub name: String,
    /// The revision, if given.
    pub revision: Option<String>,
}

fn is_name(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 96
        && part != "."
        && part != ".."
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl RepoId {
    /// Parse `owner/name[@revision]`; `None` for anything else (a path, say).
    pub fn parse(spec: &str) -> Option<Self> {
        let (id, revision) = match spec.split_once('@') {
            Some((id, rev))
                if is_name(rev) || (rev.contains('/') && rev.split('/').all(is_name)) =>
            {
                (id, Some(rev.to_string()))
            }
            Some(_) => return None,
            None => (spec, None),
        };
        let (owner, name) = id.split_once('/')?;
        (is_name(owner) && is_name(name)).then(|| Self {
            owner: owner.to_string(),
            name: name.to_string(),
            revision,
        })
    }

    /// `owner/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    /// The revision (`main` when none was given).
    pub fn revision(&self) -> &str {
        self.revision.as_deref().unwrap_or("main")
    }

    /// The repo's folder in the cache: `models--owner--name`.
    pub fn cache_folder(&self) -> String {
        format!("models--{}--{}", self.owner, self.name)
    }
}

/// The HF hub cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`
/// (`huggingface_hub`'s rule), from the variables `env` returns.
pub fn hub_cache_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |key: &str| env(key).filter(|v| !v.is_empty());
    if let Some(cache) = set("HF_HUB_CACHE") {
        return Some(PathBuf::from(cache));
    }
    if let Some(home) = set("HF_HOME") {
        return Some(Path::new(&home).join("hub"));
    }
    set("HOME").map(|home| Path::new(&home).join(".cache/huggingface/hub"))
}

fn is_commit_hash(revision: &str) -> bool {
    revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit())
}

/// The cached snapshot directory of `repo` under `cache`, if there is one with a `config.json`.
pub fn cached_snapshot(cache: &Path, repo: &RepoId) -> Result<Option<PathBuf>, HubError> {
    let root = cache.join(repo.cache_folder());
    if !root.is_dir() {
        return Ok(None);
    }
    let revision = repo.revision();
    let commit = if is_commit_hash(revision) {
        revision.to_string()
    } else {
        let reference = root.join("refs").join(revision);
        match std::fs::read_to_string(&reference) {
            Ok(text) => text.trim().to_string(),
            Err(_) => return Ok(None),
        }
    };
    if !is_commit_hash(&commit) {
        return Err(HubError::BadCache {
            repo: repo.id(),
            reason: format!("refs/{revision} holds {commit:?}, not a commit hash"),
        });
    }
    let snapshot = root.join("snapshots").join(&commit);
    if snapshot.join("config.json").is_file() {
        Ok(Some(snapshot))
    } else {
        Ok(None)
    }
}

/// Where `--model SPEC` points: SPEC itself when it is an existing path or not a repo id;
/// otherwise the repo's snapshot in the HF cache, downloaded first (feature `hf-hub`) if needed.
pub fn resolve_model(spec: &Path) -> Result<PathBuf, HubError> {
    resolve_model_in(spec, &|key| std::env::var(key).ok())
}

/// [`resolve_model`] with the environment variables `env` returns.
pub fn resolve_model_in(
    spec: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf, HubError> {
    let Some(repo) = spec.to_str().and_then(RepoId::parse) else {
        return Ok(spec.to_path_buf());
    };
    if spec.exists() {
        return Ok(spec.to_path_buf());
    }
    let Some(cache) = hub_cache_dir(env) else {
        return Err(HubError::NotCached {
            repo: repo.id(),
            cache: PathBuf::from("(no HF_HUB_CACHE, HF_HOME or HOME)"),
            hint: String::new(),
        });
    };
    if let Some(snapshot) = cached_snapshot(&cache, &repo)? {
        tracing::info!(repo = %repo.id(), snapshot = %snapshot.display(), "from the HF cache");
        return Ok(snapshot);
    }
    download(&cache, &repo)
}

/// What is wrong when `repo`'s revision has a ref in `cache` but its snapshot has no
/// `config.json` (an interrupted or partial download), if that is the case.
#[cfg_attr(feature = "hf-hub", allow(dead_code))]
fn dangling_ref(cache: &Path, repo: &RepoId) -> Option<String> {
    let revision = repo.revision();
    let root = cache.join(repo.cache_folder());
    let commit = std::fs::read_to_string(root.join("refs").join(revision)).ok()?;
    let commit = commit.trim();
    let snapshot = root.join("snapshots").join(commit);
    (!snapshot.join("config.json").is_file()).then(|| {
        format!(
            "refs/{revision} points at {commit}, but {} has no config.json (an interrupted \
             download?)",
            snapshot.display()
        )
    })
}

#[cfg(not(feature = "hf-hub"))]
fn download(cache: &Path, repo: &RepoId) -> Result<PathBuf, HubError> {
    let hint = format!(
        "download it (e.g. `huggingface-cli download {}`) or build mtp with the `hf-hub` feature \
         to fetch it",
        repo.id()
    );
    if let Some(reason) = dangling_ref(cache, repo) {
        return Err(HubError::BadCache {
            repo: repo.id(),
            reason: format!("{reason}; {hint}"),
        });
    }
    Err(HubError::NotCached {
        repo: repo.id(),
        cache: cache.to_path_buf(),
        hint: format!("; {hint}"),
    })
}

#[cfg(feature = "hf-hub")]
fn download(cache: &Path, repo: &RepoId) -> Result<PathBuf, HubError> {
    use hf_hub::api::sync::ApiBuilder;
    use hf_hub::{Repo, RepoType};

    let failed = |file: &str, reason: String| HubError::Download {
        repo: repo.id(),
        file: file.to_string(),
        reason,
    };
    let api = ApiBuilder::from_env()
        .with_cache_dir(cache.to_path_buf())
        .with_progress(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .build()
        .map_err(|e| failed("(client)", e.to_string()))?;
    let remote = api.repo(Repo::with_revision(
        repo.id(),
        RepoType::Model,
        repo.revision().to_string(),
    ));
    let get = |file: &str| remote.get(file).map_err(|e| failed(file, e.to_string()));
    tracing::info!(repo = %repo.id(), cache = %cache.display(), "downloading from the Hugging Face Hub");
    let config = get("config.json")?;
    let Some(snapshot) = config.parent().map(Path::to_path_buf) else {
        return Err(failed("config.json", "no snapshot directory".into()));
    };
    match get("model.safetensors.index.json") {
        Ok(index) => {
            let text = std::fs::read_to_string(&index)
                .map_err(|e| failed("model.safetensors.index.json", e.to_string()))?;
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| failed("model.safetensors.index.json", e.to_string()))?;
            let mut shards: Vec<&str> = value["weight_map"]
                .as_object()
                .map(|m| m.values().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            shards.sort_unstable();
            shards.dedup();
            for shard in shards {
                get(shard)?;
            }
        }
        Err(_) => {
            get("model.safetensors")?;
        }
    }
    for file in MODEL_FILES {
        // Optional files: a repo without one is fine.
        if let Err(e) = remote.get(file) {
            tracing::debug!(file, error = %e, "not downloaded");
        }
    }
    Ok(snapshot)
}
