//! [`Pipeline`]: a model pair, its tokenizer and the decode engine behind one small facade.

use std::path::{Path, PathBuf};

use mtp_core::engine::{CancelToken, Engine, GenerateRequest, Response, SinkFlow, TokenSink};
use mtp_core::model::TargetModel;
use mtp_core::proposer::{DraftModel, NgramOptions, NgramProposer};
use mtp_core::schedule::ScheduleMemory;
use mtp_core::Backend;

use crate::defaults::ModelPaths;
use crate::loading::gguf::{is_gguf_path, GgufFile};
use crate::loading::{LoadError, LoadOptions};
use crate::models::registry::{load_drafter_with_centroids, load_gguf_target, load_target_model};
use crate::models::{LoadedDrafter, LoadedTarget};
use crate::tokenizer::{ChatMessage, ChatOptions, PromptFormat, Tokenizer, TokenizerError};

/// What can go wrong in a [`Pipeline`].
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A model directory does not exist (or is not a directory).
    #[error("the {role} model directory {} does not exist", .path.display())]
    MissingDir {
        /// `target` or `drafter`.
        role: ModelRole,
        /// The directory.
        path: PathBuf,
    },
    /// The target's GGUF file does not exist (or is not a file).
    #[error("the target model file {} does not exist", .path.display())]
    MissingModelFile {
        /// The file.
        path: PathBuf,
    },
    /// A model directory could not be loaded.
    #[error("cannot load the {role} model from {}", .path.display())]
    Load {
        /// `target` or `drafter`.
        role: ModelRole,
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: LoadError,
    },
    /// The tokenizer could not be loaded or used.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The prompt has no tokens.
    #[error("the prompt is empty: give some text")]
    EmptyPrompt,
    /// A structured-output format could not be compiled for this model.
    #[cfg(feature = "structured")]
    #[error(transparent)]
    Structured(#[from] crate::structured::StructuredError),
    /// The prompt does not fit the context.
    #[error(
        "the prompt has {prompt} tokens but at most {} fit: the model's context holds \
         {context} positions (prompt and generated tokens together) and one must stay free for \
         the first generated token; shorten the prompt",
        .context.saturating_sub(1)
    )]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// The model's context.
        context: usize,
    },
    /// The engine failed while generating.
    #[error("generation failed")]
    Generate(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A draft model whose vocabulary is not the target's (drafts are target token ids).
    #[error(
        "the draft model in {} has a vocabulary of {draft} tokens, the target {target}: a \
         draft model must share the target's tokenizer",
        .path.display()
    )]
    DraftVocabulary {
        /// The draft model's directory.
        path: PathBuf,
        /// Its vocabulary size.
        draft: usize,
        /// The target's.
        target: usize,
    },
}

/// Which model of a pair an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelRole {
    /// The target model.
    Target,
    /// The MTP drafter.
    Drafter,
    /// A draft model (a causal LM drafting for the target).
    DraftModel,
}

impl std::fmt::Display for ModelRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModelRole::Target => "target",
            ModelRole::Drafter => "drafter",
            ModelRole::DraftModel => "draft",
        })
    }
}

/// A step of [`Pipeline::load_with_progress`], for progress displays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadStage {
    /// Reading the tokenizer.
    Tokenizer,
    /// Loading the target's weights.
    Target,
    /// Loading the drafter's weights.
    Drafter,
    /// `done` of the target's `total` tensors are loaded (reported after each tensor).
    TargetTensors {
        /// Tensors taken so far (read or skipped).
        done: usize,
        /// Tensors in the target's files.
        total: usize,
    },
}

impl std::fmt::Display for LoadStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LoadStage::Tokenizer => "reading the tokenizer",
            LoadStage::Target => "loading the target model",
            LoadStage::Drafter => "loading the drafter",
            LoadStage::TargetTensors { .. } => "loading the target model's tensors",
        })
    }
}

/// The result of [`Pipeline::generate_text`].
#[derive(Debug, Clone)]
pub struct Generation {
    /// The engine's response: generated ids, done reason, counts, durations, MTP statistics.
    pub response: Response,
    /// The decode of the generated ids (special tokens skipped).
    pub text: String,
}

/// A target of any registered family, an optional MTP drafter of its family (or prompt lookup)
/// and the target's tokenizer on one backend.
///
/// ```
/// use mtp_core::engine::{CancelToken, GenerateRequest, SinkFlow};
/// use mtp_core::reference::ReferenceBackend;
/// use runner::{ModelPaths, Pipeline, PromptFormat};
///
/// # fn main() -> Result<(), runner::PipelineError> {
/// # let case = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
/// #     .join("../../tests/fixtures/gemma4/swa_basic");
/// let paths = ModelPaths {
///     target: case.join("target"),
///     drafter: Some(case.join("assistant")),
///     draft_centroids: None,
///     tokenizer: None,
///     chat_template: None,
/// };
/// let pipeline = Pipeline::load(ReferenceBackend::default(), &paths, &Default::default())?;
///
/// // Greedy by default; EOS from the model's configuration.
/// let prompt = pipeline.encode("<bos> w45 w109", PromptFormat::Raw)?;
/// let mut request = GenerateRequest::greedy(prompt, 8);
/// request.eos = pipeline.tokenizer().eos_ids().to_vec();
///
/// // Text streams through the callback as it is produced...
/// let mut streamed = String::new();
/// let out = pipeline.generate_text(
///     &request,
///     &mut |piece: &str| {
///         streamed.push_str(piece);
///         SinkFlow::Continue
///     },
///     &CancelToken::new(),
/// )?;
/// assert_eq!(streamed, out.text);
/// // ...and the response carries the ids and the MTP statistics.
/// let stats = out.response.mtp.as_ref().expect("a drafter was loaded");
/// assert!(stats.iterations > 0);
///
/// // Token ids can go to a channel instead (a closed receiver stops generation).
/// let (tx, rx) = std::sync::mpsc::channel();
/// let response = pipeline.generate(&request, &mut tx.clone(), &CancelToken::new())?;
/// drop(tx);
/// assert_eq!(rx.iter().collect::<Vec<u32>>(), response.tokens);
/// # Ok(())
/// # }
/// ```
pub struct Pipeline<B: Backend> {
    backend: B,
    target: LoadedTarget<B>,
    drafter: Option<LoadedDrafter<B>>,
    draft_model: Option<DraftModel<LoadedTarget<B>>>,
    ngram: Option<NgramProposer>,
    tokenizer: Tokenizer,
    /// The adaptive schedule's state, learned across this pair's requests.
    schedules: ScheduleMemory,
    /// The grammar engine's view of the vocabulary, built on the first structured request.
    #[cfg(feature = "structured")]
    grammar_vocabulary: std::sync::OnceLock<crate::structured::GrammarVocabulary>,
}

impl<B: Backend> std::fmt::Debug for Pipeline<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("backend", &self.backend.name())
            .field("drafter", &self.drafter.is_some())
            .field("draft_model", &self.draft_model.is_some())
            .field("ngram", &self.ngram.map(|n| n.options()))
            .finish()
    }
}

fn check_dir(role: ModelRole, path: &Path) -> Result<(), PipelineError> {
    if is_gguf_path(path) {
        return if path.is_file() {
            Ok(())
        } else {
            Err(PipelineError::MissingModelFile {
                path: path.to_path_buf(),
            })
        };
    }
    if path.is_dir() {
        Ok(())
    } else {
        Err(PipelineError::MissingDir {
            role,
            path: path.to_path_buf(),
        })
    }
}

impl<B: Backend> Pipeline<B> {
    /// Load the pair in `paths` (the tokenizer is `paths.tokenizer`, else the target's own: its
    /// directory's `tokenizer.json` or the vocabulary its GGUF file embeds).
    pub fn load(
        backend: B,
        paths: &ModelPaths,
        options: &LoadOptions,
    ) -> Result<Self, PipelineError> {
        Self::load_with_progress(backend, paths, options, &mut |_| {})
    }

    /// [`load`](Self::load), telling `progress` each stage as it starts.
    pub fn load_with_progress(
        backend: B,
        paths: &ModelPaths,
        options: &LoadOptions,
        progress: &mut dyn FnMut(LoadStage),
    ) -> Result<Self, PipelineError> {
        check_dir(ModelRole::Target, &paths.target)?;
        if let Some(drafter) = &paths.drafter {
            check_dir(ModelRole::Drafter, drafter)?;
        }
        let load_error = |source| PipelineError::Load {
            role: ModelRole::Target,
            path: paths.target.clone(),
            source,
        };
        progress(LoadStage::Tokenizer);
        let gguf = if is_gguf_path(&paths.target) {
            Some(GgufFile::open(&paths.target).map_err(load_error)?)
        } else {
            None
        };
        let tokenizer = match (&gguf, &paths.tokenizer) {
            (Some(file), Some(json)) => {
                Tokenizer::from_file(json, Tokenizer::gguf_settings(file)?)?
            }
            (Some(file), None) => Tokenizer::from_gguf(file)?,
            (None, Some(json)) => Tokenizer::from_file_with_dir(json, &paths.target)?,
            (None, None) => Tokenizer::from_dir(&paths.target)?,
        };
        let tokenizer = match &paths.chat_template {
            Some(file) => tokenizer.with_chat_template_file(file)?,
            None => tokenizer,
        };
        progress(LoadStage::Target);
        let mut on_tensor =
            |done: usize, total: usize| progress(LoadStage::TargetTensors { done, total });
        let loaded = match &gguf {
            Some(file) => load_gguf_target(&backend, file, options, &mut on_tensor),
            None => load_target_model(&backend, &paths.target, options, &mut on_tensor),
        };
        let (target, _) = loaded.map_err(load_error)?;
        let drafter = match &paths.drafter {
            Some(dir) => {
                progress(LoadStage::Drafter);
                Some(
                    load_drafter_with_centroids(
                        &backend,
                        dir,
                        &target,
                        options,
                        paths.draft_centroids.as_deref(),
                    )
                    .map_err(|source| PipelineError::Load {
                        role: ModelRole::Drafter,
                        path: dir.clone(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        if tokenizer.vocab_size() > target.vocab_size() {
            tracing::warn!(
                tokenizer = tokenizer.vocab_size(),
                model = target.vocab_size(),
                "the tokenizer has more tokens than the model's vocabulary"
            );
        }
        Ok(Self {
            backend,
            target,
            drafter,
            draft_model: None,
            ngram: None,
            tokenizer,
            schedules: ScheduleMemory::new(),
            #[cfg(feature = "structured")]
            grammar_vocabulary: std::sync::OnceLock::new(),
        })
    }

    /// The grammar engine's view of this model's vocabulary (built on first use, about a
    /// second for a 262k-token vocabulary, then kept).
    #[cfg(feature = "structured")]
    pub fn grammar_vocabulary(
        &self,
    ) -> Result<&crate::structured::GrammarVocabulary, PipelineError> {
        if let Some(vocabulary) = self.grammar_vocabulary.get() {
            return Ok(vocabulary);
        }
        let built =
            crate::structured::GrammarVocabulary::new(&self.tokenizer, self.target.vocab_size())?;
        Ok(self.grammar_vocabulary.get_or_init(|| built))
    }

    /// `format` compiled for this model, as what a request carries
    /// ([`GenerateRequest::constraint`]): an error naming the problem when the schema, regex or
    /// grammar is invalid or unsupported.
    #[cfg(feature = "structured")]
    pub fn constraint(
        &self,
        format: &crate::structured::OutputFormat,
    ) -> Result<mtp_core::constraint::ConstraintSource, PipelineError> {
        Ok(self.grammar_vocabulary()?.compile(format)?.source())
    }

    /// Draft with prompt lookup ([`NgramProposer`]) matching `options`' n-gram sizes, or not
    /// (`None`). It drafts alone when no drafter was loaded.
    pub fn with_ngram(mut self, options: Option<NgramOptions>) -> Self {
        self.ngram = options.map(NgramProposer::new);
        self
    }

    /// The prompt-lookup proposer, when on.
    pub fn ngram(&self) -> Option<&NgramProposer> {
        self.ngram.as_ref()
    }

    /// Draft also with the draft model in `dir` (a target-family checkpoint with the target's
    /// vocabulary, loaded on the same backend with `options`), or with none (`None`). It drafts
    /// beside the assistant and prompt lookup when those are on (the engine picks one per
    /// round, see [`Engine::also_proposer`]).
    pub fn with_draft_model(
        mut self,
        dir: Option<&Path>,
        options: &LoadOptions,
    ) -> Result<Self, PipelineError> {
        let Some(dir) = dir else {
            self.draft_model = None;
            return Ok(self);
        };
        check_dir(ModelRole::DraftModel, dir)?;
        let (model, _) =
            load_target_model(&self.backend, dir, options, &mut |_, _| {}).map_err(|source| {
                PipelineError::Load {
                    role: ModelRole::DraftModel,
                    path: dir.to_path_buf(),
                    source,
                }
            })?;
        let (draft, target) = (model.vocab_size(), self.target.vocab_size());
        let draft_model =
            DraftModel::new(model, target).map_err(|_| PipelineError::DraftVocabulary {
                path: dir.to_path_buf(),
                draft,
                target,
            })?;
        self.draft_model = Some(draft_model);
        Ok(self)
    }

    /// The draft model, when one was loaded.
    pub fn draft_model(&self) -> Option<&LoadedTarget<B>> {
        self.draft_model.as_ref().map(|d| d.model())
    }

    /// The backend the models run on.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The target model (of the family its `model_type` is registered to).
    pub fn target(&self) -> &LoadedTarget<B> {
        &self.target
    }

    /// The MTP drafter (of the target's family), when one was loaded.
    pub fn drafter(&self) -> Option<&LoadedDrafter<B>> {
        self.drafter.as_ref()
    }

    /// The longest sequence (prompt + generated tokens) the target accepts.
    pub fn max_context(&self) -> usize {
        self.target.max_context()
    }

    /// The adaptive schedule's learned state, shared by every engine of this pipeline (to
    /// keep between processes with [`crate::schedule_store::ScheduleStore`]).
    pub fn schedule_memory(&self) -> &ScheduleMemory {
        &self.schedules
    }

    /// A decode engine over the target and every proposer that is on — the assistant, the
    /// draft model, prompt lookup, in that order; with several, each round drafts with the one
    /// whose running expected accepted length is highest — keeping the adaptive schedule's
    /// learned state in the pipeline (so it carries over between requests).
    pub fn engine(&self) -> Engine<'_, B> {
        let mut engine =
            Engine::new(&self.backend, &self.target).with_schedule_memory(self.schedules.clone());
        if let Some(drafter) = &self.drafter {
            engine = engine.also_drafter(drafter);
        }
        if let Some(model) = &self.draft_model {
            engine = engine.also_proposer(model);
        }
        if let Some(ngram) = &self.ngram {
            engine = engine.also_proposer(ngram);
        }
        engine
    }

    /// Token ids of a prompt (see [`Tokenizer::encode_prompt`]), checked to be non-empty and to
    /// fit the context.
    pub fn encode(&self, prompt: &str, format: PromptFormat) -> Result<Vec<u32>, PipelineError> {
        let ids = self.tokenizer.encode_prompt(prompt, format)?;
        self.check_prompt(&ids)?;
        Ok(ids)
    }

    /// Token ids of a conversation rendered with the model's chat template (see
    /// [`Tokenizer::encode_chat`]), checked as [`encode`](Self::encode) checks them.
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        options: &ChatOptions,
    ) -> Result<Vec<u32>, PipelineError> {
        let template = self.tokenizer.chat_template()?;
        let ids = self.tokenizer.encode_chat(&template, messages, options)?;
        self.check_prompt(&ids)?;
        Ok(ids)
    }

    /// Check that prompt ids are non-empty and fit the context (as [`encode`](Self::encode) does).
    pub fn check_prompt(&self, ids: &[u32]) -> Result<(), PipelineError> {
        if ids.is_empty() {
            return Err(PipelineError::EmptyPrompt);
        }
        let context = self.max_context();
        if ids.len() >= context {
            return Err(PipelineError::PromptTooLong {
                prompt: ids.len(),
                context,
            });
        }
        Ok(())
    }

    /// Generate; token ids go to `sink` as they are committed (a closure, a channel sender, ...).
    pub fn generate(
        &self,
        request: &GenerateRequest,
        sink: &mut dyn TokenSink,
        cancel: &CancelToken,
    ) -> Result<Response, PipelineError> {
        self.check_prompt(&request.prompt)?;
        self.engine()
            .generate(request, sink, cancel)
            .map_err(|e| PipelineError::Generate(Box::new(e)))
    }

    /// Generate; text goes to `on_text` piece by piece as it is produced (never a partial
    /// character; see [`Detokenizer`](crate::tokenizer::Detokenizer)). `on_text` may stop the
    /// generation by returning [`SinkFlow::Stop`].
    pub fn generate_text(
        &self,
        request: &GenerateRequest,
        on_text: &mut dyn FnMut(&str) -> SinkFlow,
        cancel: &CancelToken,
    ) -> Result<Generation, PipelineError> {
        let mut detok = self.tokenizer.detokenizer();
        let mut failure = None;
        let response = {
            let mut sink = |id: u32| match detok.push(id) {
                Ok(Some(piece)) => on_text(&piece),
                Ok(None) => SinkFlow::Continue,
                Err(e) => {
                    failure = Some(e);
                    SinkFlow::Stop
                }
            };
            self.generate(request, &mut sink, cancel)?
        };
        if let Some(e) = failure {
            return Err(e.into());
        }
        if let Some(rest) = detok.finish()? {
            on_text(&rest);
        }
        let text = self.tokenizer.decode(&response.tokens)?;
        Ok(Generation { response, text })
    }
}
