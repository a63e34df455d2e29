//! The method table: every protocol method bound to its handler.
//!
//! Handlers are plain async functions from `(Arc<Daemon>, Params)` to `RpcResult<Result>`;
//! [`register`] adds params decoding and error mapping, so each handler only does its job.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use jsonrpsee::RpcModule;
use jsonrpsee::core::server::{PendingSubscriptionSink, SubscriptionMessage};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use scafld_protocol::methods::{self as m, NoParams};
use scafld_protocol::{ErrorKind, Event, Method, PROTOCOL_VERSION};
use serde::de::DeserializeOwned;
use tokio::sync::broadcast::error::RecvError;

use crate::daemon::{DAEMON_VERSION, Daemon, Opening};
use crate::domain::lifecycle::Status;
use crate::error::{RpcError, RpcResult};
use crate::rendered::Rendered;
use crate::review;
use crate::rpc::transport::{PeerGone, SubscriptionSettled};
use crate::tasks;
use crate::workspace::layout;
use tokio_util::sync::CancellationToken;

pub fn module(daemon: Arc<Daemon>) -> RpcModule<Daemon> {
    let mut module = RpcModule::from_arc(daemon);
    register::<m::Hello, _, _>(&mut module, |d, _| async move {
        Ok(m::HelloResult {
            protocol_version: PROTOCOL_VERSION,
            daemon_version: DAEMON_VERSION.into(),
            pid: std::process::id(),
            executable: d.options.executable.clone(),
        })
    });
    register::<m::DaemonStatus, _, _>(&mut module, |d, _| async move { d.status().await });
    register::<m::DaemonShutdown, _, _>(&mut module, |d, p| async move {
        let reason = "daemon.shutdown requested by a client";
        if p.if_idle {
            // Begun here, atomically with the check; this call's reply is still written.
            d.request_shutdown_if_idle(reason)?;
        } else {
            // Reply first; the shutdown proceeds once this response is on its way.
            tokio::spawn(async move { d.request_shutdown(reason) });
        }
        Ok(m::ShutdownResult { stopping: true })
    });
    register::<m::WorkspaceInit, _, _>(&mut module, |d, p| async move { workspace_init(&d, p).await });
    register::<m::WorkspaceOpen, _, _>(&mut module, |d, p| async move { d.open_workspace(Path::new(&p.root)).await });
    register::<m::WorkspaceConfig, _, _>(&mut module, |d, p| async move { workspace_config(&d, p).await });
    register::<m::WorkspaceList, _, _>(&mut module, |d, _| async move {
        Ok(m::WorkspaceListResult { workspaces: d.workspace_list().await? })
    });
    register::<m::WorkspaceForget, _, _>(&mut module, |d, p| async move { d.forget_workspace(&p.workspace) });
    register::<m::TaskPlan, _, _>(&mut module, |d, p| async move { tasks::plan(&d, p).await });
    register::<m::TaskValidate, _, _>(&mut module, |d, p| async move { tasks::validate(&d, p).await });
    register::<m::TaskCheck, _, _>(&mut module, |d, p| async move { tasks::check(&d, p).await });
    register::<m::TaskValidateAll, _, _>(&mut module, |d, p| async move { tasks::validate_all(&d, p).await });
    register::<m::TaskStatus, _, _>(&mut module, |d, p| async move { tasks::status(&d, p).await });
    register_rendered::<m::TaskList, _, _>(&mut module, |d, p| async move { tasks::list(&d, p).await });
    register::<m::TaskHarden, _, _>(&mut module, |d, p| async move { tasks::harden(&d, p).await });
    register::<m::TaskHandoff, _, _>(&mut module, |d, p| async move { tasks::handoff(&d, p).await });
    register::<m::TaskReport, _, _>(&mut module, |d, p| async move { tasks::report(&d, p).await });
    register::<m::TaskReconcile, _, _>(&mut module, |d, p| async move { tasks::reconcile(&d, p).await });
    register::<m::TaskApprove, _, _>(&mut module, |d, p| async move { tasks::approve(&d, p).await });
    register::<m::TaskBuild, _, _>(&mut module, |d, p| async move { tasks::build(&d, p).await });
    register::<m::TaskFail, _, _>(&mut module, |d, p| async move { tasks::archive(&d, p, Status::Failed).await });
    register::<m::TaskCancel, _, _>(&mut module, |d, p| async move { tasks::archive(&d, p, Status::Cancelled).await });
    register::<m::TaskReview, _, _>(&mut module, |d, p| async move { tasks::review(&d, p).await });
    register::<m::TaskComplete, _, _>(&mut module, |d, p| async move { tasks::complete(&d, p).await });
    register::<m::TaskFinalize, _, _>(&mut module, |d, p| async move { tasks::finalize(&d, p).await });
    register::<m::ReceiptVerify, _, _>(&mut module, |d, p| async move { tasks::verify(&d, p).await });
    register::<m::ReviewSubmit, _, _>(&mut module, |d, p| async move {
        // A harden answer's anchors are read from the workspace's files: off the runtime.
        let submitted = tokio::task::spawn_blocking(move || d.submissions.submit(&p.token, p.dossier))
            .await
            .map_err(|e| RpcError::internal(format!("the submission's check failed: {e}")))?;
        Ok(match submitted {
            Ok(verdict) => m::SubmitResult { accepted: true, verdict, problems: Vec::new() },
            Err(problems) => m::SubmitResult { accepted: false, verdict: String::new(), problems },
        })
    });
    register::<m::ReviewDiff, _, _>(&mut module, |d, p| async move { review::diff::review_diff(&d, p).await });
    register::<m::ReviewWait, _, _>(
        &mut module,
        |d, p| async move { review::wait(&d, p, Some(tasks::next_step)).await },
    );
    register::<m::ReviewRetry, _, _>(&mut module, |d, p| async move { review::retry(&d, p, tasks::next_hint).await });
    register::<m::ReviewStatus, _, _>(&mut module, |d, p| async move { review::status::status(&d, p).await });
    register::<m::ReviewTemplates, _, _>(&mut module, |d, p| async move { review::template::list(&d, p).await });
    register::<m::ReviewTemplate, _, _>(&mut module, |d, p| async move { review::template::start(&d, p).await });
    register::<m::ReviewResult, _, _>(&mut module, |d, p| async move { review::template::result(&d, p).await });
    register::<m::ReviewHistory, _, _>(&mut module, |d, p| async move { review::template::history(&d, p).await });
    register::<m::ReviewDecide, _, _>(&mut module, |d, p| async move { tasks::decide(&d, p).await });
    register_with_peer::<m::WorkerClaim, _, _>(&mut module, |d, p, gone| async move {
        review::worker::claim(&d, p, gone).await
    });
    register::<m::WorkerHeartbeat, _, _>(&mut module, |d, p| async move { review::worker::heartbeat(&d, p) });
    register::<m::WorkerCheckpoint, _, _>(&mut module, |d, p| async move { review::worker::checkpoint(&d, p) });
    register::<m::WorkerSubmit, _, _>(&mut module, |d, p| async move { review::worker::submit(&d, p).await });
    register::<m::WorkerRelease, _, _>(&mut module, |d, p| async move { review::worker::release(&d, p) });
    register::<m::TaskSession, _, _>(&mut module, |d, p| async move { tasks::session(&d, p).await });
    register::<m::JobList, _, _>(&mut module, |d, p| async move { tasks::job::list(&d, p).await });
    register::<m::JobStatus, _, _>(&mut module, |d, p| async move { tasks::job::status(&d, p) });
    register::<m::JobWait, _, _>(&mut module, |d, p| async move { tasks::job::wait(&d, p).await });
    register::<m::JobCancel, _, _>(&mut module, |d, p| async move { tasks::job::cancel(&d, p).await });
    module
        .register_subscription(m::EVENTS_SUBSCRIBE, m::EVENTS_NOTIFICATION, m::EVENTS_UNSUBSCRIBE, subscribe_events)
        .expect("subscription names are unique");
    module
}

/// `workspace.config`: the configuration as the workspace at `root` reads it, opened to read
/// only (nothing settled or recorded there).
async fn workspace_config(daemon: &Daemon, p: m::WorkspaceRootParams) -> RpcResult<m::WorkspaceConfigResult> {
    let ws = daemon.workspace_to_read(&p.root).await?;
    Ok(match ws.config() {
        Ok(config) => m::WorkspaceConfigResult {
            harden_provider: Some(config.harden.external.provider).filter(|p| !p.is_empty()),
            unknown_keys: config.unknown_keys,
            error: None,
        },
        Err(e) => m::WorkspaceConfigResult {
            unknown_keys: Vec::new(),
            error: Some(m::ConfigProblem { hint: e.hint(), file: e.file, message: e.message }),
            harden_provider: None,
        },
    })
}

/// Bind method `M` to `handler`.
fn register<M, F, Fut>(module: &mut RpcModule<Daemon>, handler: F)
where
    M: Method,
    F: Fn(Arc<Daemon>, M::Params) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = RpcResult<M::Result>> + Send + 'static,
{
    register_answer::<M, _, _, _>(module, move |daemon, params, _| handler(daemon, params));
}

/// [`register`] for a handler that answers with `M::Result` already serialized.
fn register_rendered<M, F, Fut>(module: &mut RpcModule<Daemon>, handler: F)
where
    M: Method,
    F: Fn(Arc<Daemon>, M::Params) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = RpcResult<Rendered<M::Result>>> + Send + 'static,
{
    register_answer::<M, _, _, _>(module, move |daemon, params, _| handler(daemon, params));
}

/// Bind method `M` to a handler that also gets a token cancelled when the caller hangs up, so
/// a long poll never does work (such as claiming a job) for a peer that is gone.
fn register_with_peer<M, F, Fut>(module: &mut RpcModule<Daemon>, handler: F)
where
    M: Method,
    F: Fn(Arc<Daemon>, M::Params, CancellationToken) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = RpcResult<M::Result>> + Send + 'static,
{
    register_answer::<M, _, _, _>(module, handler);
}

/// Bind method `M` to a handler answering with `A`: `M::Result` itself, or it rendered.
fn register_answer<M, A, F, Fut>(module: &mut RpcModule<Daemon>, handler: F)
where
    M: Method,
    A: serde::Serialize + Clone + Send + 'static,
    F: Fn(Arc<Daemon>, M::Params, CancellationToken) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = RpcResult<A>> + Send + 'static,
{
    module
        .register_async_method(M::NAME, move |params, daemon, extensions| {
            let handler = handler.clone();
            let gone = extensions.get::<PeerGone>().map(|g| g.0.clone()).unwrap_or_default();
            async move {
                // Counted for `daemon.status` while it is served (see `Method::WORK`).
                let _serving = M::WORK.then(|| daemon.serving.begin(M::NAME));
                if daemon.shutdown_token().is_cancelled() {
                    return Err(ErrorObjectOwned::from(RpcError::not_started_while_stopping()));
                }
                let params = decode_params::<M::Params>(M::NAME, &params)?;
                handler(daemon, params, gone).await.map_err(ErrorObjectOwned::from)
            }
        })
        .expect("method names are unique");
}

/// Decode params, treating absent params as `{}`; a failure carries serde's own message. They
/// are read once, by the one strict reader (`scafld_protocol::json`), which refuses an object
/// anywhere in them that gives a key twice: serde_json keeps the last copy silently, so a
/// dossier, a template answer or a checkpointed finding sent straight on the socket would
/// otherwise read as its milder copy, where the client refuses the same text.
fn decode_params<T: DeserializeOwned>(method: &str, params: &Params<'_>) -> Result<T, ErrorObjectOwned> {
    let invalid = |e: serde_json::Error| {
        ErrorObjectOwned::from(RpcError::new(ErrorKind::InvalidParams, format!("invalid params for {method}: {e}")))
    };
    let text = params.as_str().unwrap_or("{}");
    match scafld_protocol::json::from_str(text) {
        Ok(value) => serde_json::from_value(value).map_err(invalid),
        Err(e) if scafld_protocol::json::is_repeated_key(&e) => Err(ErrorObjectOwned::from(
            RpcError::new(ErrorKind::InvalidParams, format!("invalid params for {method}: they read two ways: {e}"))
                .with_hint("give each key of every object once; which copy was meant is never guessed"),
        )),
        // Text that is not JSON: serde's own message, with where it stops.
        Err(_) => serde_json::from_str(text).map_err(invalid),
    }
}

async fn workspace_init(daemon: &Daemon, params: m::WorkspaceInitParams) -> RpcResult<m::WorkspaceInitResult> {
    let root = Path::new(&params.root);
    if !root.is_absolute() {
        return Err(RpcError::new(ErrorKind::InvalidInput, "workspace root must be an absolute path"));
    }
    if !root.is_dir() {
        return Err(RpcError::workspace_not_found(format!("{} is not a directory", root.display()))
            .with_hint("create the directory first, or pass --root with an existing directory"));
    }
    // Nor is git's own store (a work tree's `.git/`, or a bare repository): no work tree is
    // there, and git's files are not the project's.
    let canonical = crate::daemon::canonical_root(root)?;
    if let Some(git_dir) = scafld_local::git::store_holding(&canonical) {
        // The work tree git gives it (a submodule's `.git/modules/<name>` has one elsewhere); a
        // `.git` folder git cannot open still belongs to the folder holding it.
        let tree = crate::baseline::work_tree_of(&git_dir).or_else(|| {
            git_dir.file_name().is_some_and(|name| name == ".git").then(|| git_dir.parent().map(Path::to_path_buf))?
        });
        let hint = match tree {
            // With `--root`, so that the command is the same wherever the caller is.
            Some(tree) => format!(
                "make the workspace in the work tree: `scafld --root {} init`",
                scafld_protocol::cli::shell_word(&tree.to_string_lossy())
            ),
            None => format!(
                "scafld does not support bare repositories (they have no work tree): clone it, `git clone {} <folder>`, and run `scafld init` in the clone",
                scafld_protocol::cli::shell_word(&git_dir.to_string_lossy())
            ),
        };
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("{} is inside git's own store {}; no workspace is made there", root.display(), git_dir.display()),
        )
        .with_hint(hint));
    }
    // A workspace's own `.scafld/` folder (or anything below it) is never another's root: a
    // workspace made there would catch every command run below it.
    if let Some(outer) = scafld_local::workspace::enclosing(&canonical) {
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!(
                "{} is inside the .scafld/ folder of the workspace {}; no workspace is made there",
                root.display(),
                outer.display()
            ),
        )
        .with_hint(format!(
            "{} is already a workspace: run scafld commands anywhere below it, or `scafld init` in another project's root",
            outer.display()
        )));
    }
    // A `.scafld` made now is a new workspace: refused before anything is written while a
    // job of the one this folder held still runs here.
    let had_id = layout::read_id(root).is_ok_and(|id| id.is_some());
    let opening = if root.join(layout::SCAFLD_DIR).exists() {
        Opening::Existing
    } else {
        daemon.refuse_while_held(&crate::daemon::canonical_root(root)?, None)?;
        // `.scafld` and its new id in one step, before the rest of the layout.
        if daemon.create_workspace(root)? { Opening::Created } else { Opening::Existing }
    };
    let mut report = match layout::init_layout(root) {
        Ok(report) => report,
        Err(e) => {
            // Nothing of this call's is left: a `.scafld` it made goes with its id file.
            if opening == Opening::Created {
                layout::undo_created(root, &[layout::SCAFLD_DIR.to_string(), layout::ID_FILE.to_string()]);
            }
            return Err(crate::daemon::init_error(e));
        }
    };
    if opening == Opening::Created {
        // Made just above, with its id.
        report.skipped.retain(|path| path != layout::SCAFLD_DIR);
        report.created.insert(0, layout::SCAFLD_DIR.to_string());
    }
    if let Some(caller) = &params.caller {
        crate::receipts::init_trust(root, &caller.env, &mut report);
    }
    if params.agents {
        crate::workspace::agent_guide::add(root, &mut report);
    }
    if params.ci {
        crate::receipts::init_ci(root, &mut report).map_err(|e| RpcError::new(ErrorKind::WorkspaceError, e))?;
    }
    let (workspace, restored) = daemon.open_workspace_as(root, opening).await?;
    if had_id {
        report.skipped.push(layout::ID_FILE.to_string());
    } else {
        report.created.push(layout::ID_FILE.to_string());
    }
    let mut warnings = std::mem::take(&mut report.warnings);
    warnings.extend(match crate::baseline::require_git(root) {
        Ok(()) => match crate::baseline::ignored_workspace(root) {
            Some(crate::baseline::GitFailure::Unmet { message, hint }) => {
                vec![format!("{message}; approval is refused until it is not: {hint}")]
            }
            _ => Vec::new(),
        },
        Err(_) => vec![format!(
            "{} is not a git repository: plan and validate work, but approval records a git baseline; run `git init` before `scafld approve`",
            root.display()
        )],
    });
    // Said here, and so by no later command (as is one an earlier call put back unsaid).
    let unsaid = daemon.take_unsaid(root);
    match restored {
        Some(restored) => warnings.push(restored.message()),
        None => warnings.extend(unsaid),
    }
    Ok(m::WorkspaceInitResult {
        workspace,
        created: report.created,
        updated: report.updated,
        skipped: report.skipped,
        warnings,
    })
}

/// `events.subscribe`: forward daemon events until the client unsubscribes or disconnects, or
/// the daemon shuts down. A subscriber that reads too slowly is told how many it missed.
async fn subscribe_events(
    params: Params<'static>,
    pending: PendingSubscriptionSink,
    daemon: Arc<Daemon>,
    extensions: jsonrpsee::core::server::Extensions,
) -> jsonrpsee::core::SubscriptionResult {
    // Dropped on every path out of the accept/reject step below, releasing held unsubscriptions.
    let settling = extensions.get::<SubscriptionSettled>().map(SubscriptionSettled::guard);
    if let Err(error) = decode_params::<NoParams>(m::EVENTS_SUBSCRIBE, &params) {
        pending.reject(error).await;
        return Ok(());
    }
    if daemon.shutdown_token().is_cancelled() {
        pending.reject(RpcError::new(ErrorKind::ShuttingDown, "the daemon is shutting down")).await;
        return Ok(());
    }
    // Subscribe before accepting so that no event between the two is missed.
    let mut events = daemon.subscribe();
    let sink = pending.accept().await?;
    drop(settling);
    loop {
        let event = tokio::select! {
            biased;
            received = events.recv() => match received {
                Ok(event) => event,
                Err(RecvError::Lagged(missed)) => Event::EventsLagged { missed },
                Err(RecvError::Closed) => break,
            },
            _ = sink.closed() => break,
        };
        let last = matches!(event, Event::DaemonShuttingDown { .. });
        let message = SubscriptionMessage::from(serde_json::value::to_raw_value(&event)?);
        // A subscriber that does not read is waited for however long it takes: meanwhile the
        // events it misses pile up in the broadcast channel, and once more than it holds have
        // passed, the next receive says how many (`events_lagged`) and delivery goes on. The
        // wait ends only when the connection closes; never a subscription ended unsaid.
        let sent = tokio::select! {
            sent = sink.send(message) => sent.is_ok(),
            _ = sink.closed() => false,
        };
        if !sent || last {
            break;
        }
    }
    Ok(())
}
