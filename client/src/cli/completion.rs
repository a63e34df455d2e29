//! Values the shell completes by asking the daemon (task ids, review session keys): only when
//! a daemon already answers (completion never starts one), and silently empty otherwise.

use std::collections::BTreeSet;
use std::ffi::OsStr;

use clap_complete::CompletionCandidate;
use scafld_local::Paths;
use scafld_protocol::methods as m;

use super::workspace::find_root;

fn candidates(current: &OsStr, values: impl IntoIterator<Item = String>) -> Vec<CompletionCandidate> {
    let prefix = current.to_string_lossy();
    values.into_iter().filter(|v| v.starts_with(prefix.as_ref())).map(CompletionCandidate::new).collect()
}

/// The workspace root and a connection to a daemon that already runs, if both are there.
fn session() -> Option<(String, scafld_client::Connection)> {
    let root = find_root(None).ok()?;
    let conn = super::daemon_control::connect(&Paths::from_env().ok()?, false).ok()?;
    Some((root.display().to_string(), conn))
}

pub fn task_ids(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some((root, mut conn)) = session() else { return Vec::new() };
    let Ok(list) = conn.call::<m::TaskList>(&m::ListParams { root, status: None, counts: false }) else {
        return Vec::new();
    };
    candidates(current, list.tasks.into_iter().map(|t| t.task_id))
}

pub fn session_keys(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some((root, mut conn)) = session() else { return Vec::new() };
    let Ok(jobs) = conn.call::<m::JobList>(&m::JobListParams { root: Some(root) }) else { return Vec::new() };
    let keys: BTreeSet<String> = jobs.jobs.into_iter().filter_map(|j| j.session_key).collect();
    candidates(current, keys)
}
