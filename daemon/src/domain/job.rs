//! Jobs: stored records of work the daemon runs (acceptance runs of `build`). A job that
//! produced no verdict ends in a state that can never be read as a pass.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Queued,
    Running,
    /// Ran to the end and every criterion passed.
    Succeeded,
    /// Ran to the end with failing criteria.
    Failed,
    /// A criterion hit its timeout.
    TimedOut,
    Cancelled,
    /// The daemon stopped or died while the job ran; it has no result.
    Abandoned,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::TimedOut => "timed_out",
            JobState::Cancelled => "cancelled",
            JobState::Abandoned => "abandoned",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, JobState::Queued | JobState::Running)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    Acceptance,
    Review,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    pub kind: JobKind,
    pub workspace_id: String,
    pub root: String,
    pub task_id: String,
    pub state: JobState,
    /// `daemon` for the daemon's own runner.
    pub owner: String,
    pub attempt: u32,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub last_heartbeat: Option<String>,
    /// Process group of the command running now, so a restarted daemon can kill an orphan.
    pub pgid: Option<i32>,
    pub activity: Option<String>,
    pub reason: Option<String>,
    /// The build outcome or review result, as sent to clients.
    pub outcome: Option<serde_json::Value>,
    /// The error kind (snake_case) of a job that ended without a result.
    #[serde(default)]
    pub error_kind: Option<String>,
}
