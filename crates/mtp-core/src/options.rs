//! MTP options: model defaults, then environment, then the request.

/// MTP defaults a model provides (the seed's `MTPDefaults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MtpDefaults {
    /// Draft depth of the first round.
    pub initial_draft_tokens: usize,
    /// Upper bound on the draft depth.
    pub max_draft_tokens: usize,
    /// Whether MTP is used at all with this model.
    pub enabled: bool,
}

impl Default for MtpDefaults {
    /// The seed's defaults: 4 initial, 16 max, enabled.
    fn default() -> Self {
        Self {
            initial_draft_tokens: 4,
            max_draft_tokens: 16,
            enabled: true,
        }
    }
}
