//! `scafldd`, the scafld daemon: owns workspace state, the session ledger and jobs, and serves
//! JSON-RPC over a Unix socket. The binary in `main.rs` only parses flags, sets up logging,
//! obtains the socket and turns signals into a shutdown future; everything else starts at [`run`].

pub mod baseline;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod domain;
pub mod error;
pub mod evidence;
pub mod jobs;
pub mod ledger;
pub mod providers;
pub mod receipts;
pub mod rendered;
pub mod review;
pub mod rpc;
pub mod runner;
pub mod serving;
pub mod socket;
pub mod store;
pub mod sweep;
pub mod sync;
pub mod tasks;
pub mod templates;
pub mod unshown;
pub mod workspace;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

pub use daemon::{Daemon, DaemonOptions};
use store::Store;

/// Error type of the start-up and shutdown paths, where the caller only reports.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Serve on `listener` until `shutdown` resolves (with a reason) or a client calls
/// `daemon.shutdown`; then stop accepting, let in-flight calls finish and flush the store.
pub async fn run(
    listener: UnixListener,
    options: DaemonOptions,
    store: Arc<dyn Store>,
    shutdown: impl Future<Output = String>,
) -> Result<(), BoxError> {
    let stop = CancellationToken::new();
    let daemon = Arc::new(Daemon::new(options, store.clone(), stop.clone()));
    // Before any call: what calls of the last daemon left running is killed, jobs and reviews
    // cut short by the last stop are settled, and what the retention period let go is forgotten.
    daemon.call_runs.recover();
    tasks::recover_jobs(&daemon).await;
    review::clear_scratch(&daemon);
    review::recover(&daemon).await;
    // The diagnostics files' sweep reads every ledger: it runs in the background (`sweep_loop`).
    sweep::sweep_records(&daemon);
    let reaper = tokio::spawn(review::worker::reaper_loop(daemon.clone()));
    // Detached: it ends with the runtime.
    tokio::spawn(scafld_local::reaper::reap_forever());
    let watcher = tokio::spawn(daemon.clone().watch_loop());
    let methods = rpc::api::module(daemon.clone());
    info!(socket = %daemon.options.socket_path.display(), pid = std::process::id(), "listening");
    let ours = !daemon.options.socket_activated;
    let server = tokio::spawn(rpc::transport::serve(
        listener,
        methods.into(),
        stop.clone(),
        daemon.options.limits.clone(),
        ours,
    ));
    // Then, while calls are served (a call opens its own workspace if it comes first), the
    // workspaces registered before a restart are reopened: watched and indexed.
    let reopener = tokio::spawn({
        let daemon = daemon.clone();
        async move { reopen_workspaces(&daemon).await }
    });
    let sweeper = tokio::spawn(sweep::sweep_loop(daemon.clone()));
    let unshown = tokio::spawn(unshown::retry_loop(daemon.clone()));
    // A socket of our own whose file goes (a cleaner emptying its folder): nobody can reach
    // this daemon, so it stops, and the next command starts one that can be reached.
    let socket_gone = {
        let path = daemon.options.socket_path.clone();
        async move {
            match ours {
                true => socket::until_removed(path).await,
                false => std::future::pending().await,
            }
        }
    };
    tokio::select! {
        reason = shutdown => daemon.request_shutdown(&reason),
        path = socket_gone => {
            tracing::warn!("the socket file {} was removed or replaced; stopping (the next command starts a daemon)", path.display());
            daemon.request_shutdown("the socket file was removed");
        }
        _ = stop.cancelled() => {}
    }
    if let Err(e) = server.await {
        error!("server task failed: {e}");
    }
    let _ = reopener.await;
    let _ = watcher.await;
    let _ = reaper.await;
    let _ = sweeper.await;
    let _ = unshown.await;
    // No process of ours outlives the daemon: kill the groups of jobs still running. Their
    // records stay `running`; the next start marks them abandoned. Halted first, so that what
    // the kill does to their commands is never recorded as their evidence.
    daemon.jobs.halt();
    for job in daemon.jobs.matching(|job| !job.state.is_finished() && job.group.is_some()) {
        if let Some(group) = &job.group {
            group.kill_if_ours();
        }
    }
    // The commands of calls, cancelled by the stop: what a call dropped since left.
    daemon.call_runs.kill_all();
    // And whatever any run orphaned onto us that is still alive.
    scafld_local::reaper::kill_all_runs_left();
    // A job whose end could not be saved (a full disk since freed) is saved as it ended, or
    // the next start would read its older `running` record and call it abandoned.
    daemon.jobs.save_unsaved(daemon.store());
    store.flush()?;
    let closing = store.clone();
    let _ = tokio::task::spawn_blocking(move || closing.close()).await;
    info!("stopped");
    Ok(())
}

async fn reopen_workspaces(daemon: &Daemon) {
    let records = daemon.store().workspaces().unwrap_or_else(|e| {
        tracing::warn!("cannot read the registered workspaces: {e}");
        Vec::new()
    });
    for record in records {
        if daemon.shutdown_token().is_cancelled() {
            return;
        }
        if let Some(gone) = crate::daemon::gone_from(Path::new(&record.root)) {
            info!(workspace = %record.id, "not reopening workspace: {gone} (`scafld daemon forget {}` forgets it)", record.id);
        } else if let Some(why) = crate::daemon::not_reopened(&record) {
            info!(workspace = %record.id, "not reopening workspace: {why}");
        } else if let Err(e) = daemon.open_workspace(Path::new(&record.root)).await {
            info!(workspace = %record.id, root = %record.root, "not reopening workspace: {e}");
        }
    }
}
