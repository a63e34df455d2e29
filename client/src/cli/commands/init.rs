//! `scafld init`: create `.scafld/` and register the workspace with the daemon.

use scafld_protocol::methods::{WorkspaceInit, WorkspaceInitParams};

use super::exec::caller;
use crate::cli::daemon_control::rpc_error;
use crate::cli::exit::workflow;
use crate::cli::output::CliError;
use crate::cli::workspace::init_root;
use crate::cli::{Context, InitArgs};

pub fn run(ctx: &Context, args: &InitArgs) -> Result<u8, CliError> {
    let root = init_root(ctx.global.root.as_deref())?;
    let mut conn = ctx.connect()?;
    let params = WorkspaceInitParams {
        root: root.display().to_string(),
        ci: args.ci,
        agents: args.agents,
        caller: Some(caller()),
    };
    let result = conn.call::<WorkspaceInit>(&params).map_err(rpc_error)?;
    ctx.out.success(&result, || {
        let headline = if result.created.is_empty() && result.updated.is_empty() {
            "scafld workspace already initialized"
        } else if result.created.iter().any(|p| p == ".scafld") {
            "initialized scafld workspace"
        } else {
            "updated scafld workspace"
        };
        let mut text = format!("{headline}: {}\n", result.workspace.root);
        for path in &result.created {
            text.push_str(&format!("  created {path}\n"));
        }
        for path in &result.updated {
            text.push_str(&format!("  updated {path}\n"));
        }
        text.push_str(&format!("workspace id: {}", result.workspace.workspace_id));
        for warning in &result.warnings {
            text.push_str(&format!("\nwarning: {warning}"));
        }
        text
    });
    Ok(workflow::OK)
}
