//! `job.*`: the daemon's jobs (acceptance runs of `build`, one reviewer each of a review
//! session): list, status, bounded wait, cancel.

use serde::{Deserialize, Serialize};

use super::*;

method!(
    /// Jobs of one workspace (or all, without a root), newest first.
    no_work JobList = "job.list", JobListParams => JobListResult
);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobListParams {
    #[serde(default)]
    pub root: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobListResult {
    pub jobs: Vec<JobInfo>,
}

method!(
    /// One job's current record.
    no_work JobStatus = "job.status", JobParams => JobInfo
);

method!(
    /// Wait until the job is finished or `timeout_seconds` pass; either way return its record.
    no_work JobWait = "job.wait", JobWaitParams => JobInfo
);

method!(
    /// Kill the job's process group and record it cancelled.
    JobCancel = "job.cancel", JobParams => JobInfo
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobParams {
    pub job_id: String,
    /// The caller's workspace root: `job.cancel` then refuses a job of another workspace
    /// (naming it). Absent: any job of this daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobWaitParams {
    pub job_id: String,
    pub timeout_seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub job_id: String,
    pub kind: JobKind,
    pub workspace_id: String,
    pub root: String,
    pub task_id: String,
    pub state: JobState,
    pub finished: bool,
    pub owner: String,
    pub attempt: u32,
    pub created_at: String,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub last_heartbeat: Option<String>,
    /// What the job is doing now (the criterion being run).
    #[serde(default)]
    pub activity: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub outcome: Option<BuildOutcome>,
    /// The error kind of a job that ended without a result (for example `review_failed`).
    #[serde(default)]
    pub error_kind: Option<String>,
    /// For a reviewer job: its reviewer and review session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
}
