//! One function per command; each returns its exit code or a [`CliError`].

mod daemon;
mod demo;
mod docs;
mod doctor;
mod exec;
mod init;
mod lsp;
mod mcp;
mod receipt;
mod review;
mod tasks;
mod template;
mod worker;

use super::output::CliError;
use super::{Command, Context, DaemonCommand, JobCommand, McpCommand, ReceiptCommand};

pub fn run(ctx: &Context, command: Command) -> Result<u8, CliError> {
    match command {
        Command::Init(args) => init::run(ctx, &args),
        Command::Doctor => doctor::run(ctx),
        Command::Lsp => lsp::run(ctx),
        Command::Daemon(DaemonCommand::Start) => daemon::start(ctx),
        Command::Daemon(DaemonCommand::Stop) => daemon::stop(ctx),
        Command::Daemon(DaemonCommand::Status) => daemon::status(ctx),
        Command::Daemon(DaemonCommand::Forget { workspace }) => daemon::forget(ctx, &workspace),
        Command::Plan(args) => tasks::plan(ctx, &args),
        Command::Validate(args) if args.all => tasks::validate_all(ctx),
        Command::Validate(args) => tasks::validate(ctx, &args.task),
        Command::Status(args) => tasks::status(ctx, &args),
        Command::List(args) => tasks::list(ctx, &args),
        Command::Harden(args) => tasks::harden(ctx, &args),
        Command::Handoff(task) => tasks::handoff(ctx, &task),
        Command::Report => tasks::report(ctx),
        Command::Reconcile(task) => tasks::reconcile(ctx, &task),
        Command::Approve(args) => exec::approve(ctx, &args),
        Command::Build(args) => exec::build(ctx, &args),
        Command::Fail(args) => exec::archive(ctx, &args, true),
        Command::Cancel(args) => exec::archive(ctx, &args, false),
        Command::Session(args) => exec::session(ctx, &args),
        Command::Review(args) => review::review(ctx, &args),
        Command::Complete(task) => exec::complete(ctx, &task),
        Command::Finalize(args) => receipt::finalize(ctx, &args),
        Command::Verify(args) => receipt::verify(ctx, &args),
        Command::Receipt(ReceiptCommand::Show { receipt }) => receipt::show(ctx, receipt.as_deref()),
        Command::Completions { shell } => docs::completions(ctx, shell),
        Command::Demo { keep } => demo::run(ctx, keep),
        Command::Man { out, force } => docs::man(ctx, &out, force),
        Command::Mcp(McpCommand::SubmitReview { token, answer }) => mcp::submit_review(ctx, &token, &answer),
        Command::Job(JobCommand::List) => exec::job_list(ctx),
        Command::Job(JobCommand::Status { job_id }) => exec::job_status(ctx, &job_id),
        Command::Job(JobCommand::Wait { job_id, timeout }) => exec::job_wait(ctx, &job_id, timeout),
        Command::Job(JobCommand::Cancel { job_id }) => exec::job_cancel(ctx, &job_id),
        Command::Worker(args) => worker::run(ctx, &args),
    }
}
