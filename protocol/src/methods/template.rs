//! `review.template*`: review templates (arch, tasks, code and the user's), standalone and as
//! gate passes.

use serde::{Deserialize, Serialize};

use super::*;

// ---------------------------------------------------------------------------------------------
// Review templates (arch, tasks, code, and user templates): standalone reviews and gate passes.

/// The result of a template review (`schemas/review_result.schema.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateReviewResult {
    pub verdict: TemplateVerdict,
    #[serde(default)]
    pub summary: String,
    pub findings: Vec<TemplateFinding>,
    /// The reviewers' answers as given, kept whole.
    pub raw_output: String,
    pub template: String,
    pub inputs: std::collections::BTreeMap<String, String>,
    pub timestamp: String,
    pub provider: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub session_key: String,
    /// Whether the verdict or any finding is FAIL.
    #[serde(default)]
    pub has_failures: bool,
    /// How many findings are CONCERN.
    #[serde(default)]
    pub concern_count: usize,
}

impl TemplateReviewResult {
    /// The result with its derived counts (`has_failures`, `concern_count`) filled in.
    pub fn counted(mut self) -> TemplateReviewResult {
        self.has_failures =
            self.verdict == TemplateVerdict::Fail || self.findings.iter().any(|f| f.severity == TemplateSeverity::Fail);
        self.concern_count = self.findings.iter().filter(|f| f.severity == TemplateSeverity::Concern).count();
        self
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateFinding {
    pub severity: TemplateSeverity,
    pub title: String,
    pub description: String,
    /// A file (and line) reference, e.g. `src/lib.rs:12`.
    #[serde(default)]
    pub file: Option<String>,
    /// Which reviewer found it, when several reviewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
}

method!(
    /// Every template with its description and source; broken user templates with their error.
    no_work ReviewTemplates = "review.templates", WorkspaceRootParams => TemplateListResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateListResult {
    pub templates: Vec<TemplateInfo>,
    /// User template files that failed to load (the others still work).
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateInfo {
    pub name: String,
    pub description: String,
    /// `built-in`, or the file it came from.
    pub source: String,
    /// Set when a user file overrides the built-in of the same name.
    #[serde(default)]
    pub overrides_builtin: bool,
    pub required_inputs: Vec<String>,
    pub optional_inputs: Vec<String>,
}

method!(
    /// Start a template review (one job per reviewer); optionally wait for its result.
    ReviewTemplate = "review.template", TemplateReviewParams => TemplateReviewStarted
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateReviewParams {
    pub root: String,
    pub template: String,
    #[serde(default)]
    pub inputs: std::collections::BTreeMap<String, String>,
    /// Default: review.external.reviewers, else review.external.provider.
    #[serde(default)]
    pub reviewers: Vec<String>,
    #[serde(default)]
    pub provider_command: Option<String>,
    /// The directory the reviewer works in (default: the caller's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Wait this long for the result (0: return at once).
    #[serde(default)]
    pub wait_seconds: f64,
    pub caller: CallerContext,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TemplateReviewStarted {
    pub session: SpawnResult,
    /// Present once the review has settled.
    #[serde(default)]
    pub result: Option<TemplateReviewResult>,
}

method!(
    /// The result of a template review session, waiting at most `timeout_seconds`.
    no_work ReviewResult = "review.result", ReviewWaitParams => Option<TemplateReviewResult>
);

method!(
    /// Past template reviews of the workspace, newest first.
    no_work ReviewHistory = "review.history", WorkspaceRootParams => ReviewHistoryResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewHistoryResult {
    pub reviews: Vec<TemplateReviewResult>,
}
