//! `scafld finalize` (close a task with a signed receipt) and `scafld verify` (the merge wall:
//! exit 0 verified, 3 failed, 2 usage or runtime error).

use scafld_protocol::methods as m;

use super::exec::caller;
use super::tasks::{call, session as connect_workspace};
use crate::cli::exit::{verify as codes, workflow};
use crate::cli::output::CliError;
use crate::cli::{Context, FinalizeArgs, VerifyArgs};

pub fn finalize(ctx: &Context, args: &FinalizeArgs) -> Result<u8, CliError> {
    let task_id = args.task.resolve()?;
    let (root, mut conn) = connect_workspace(ctx)?;
    let params = m::FinalizeParams {
        root,
        task_id,
        base_ref: args.base_ref.clone(),
        scope_hints: args.scope_hints.clone(),
        caller: caller(),
    };
    let r = call::<m::TaskFinalize>(&mut conn, &params)?;
    let human = || {
        let mut text = match (&r.receipt_path, &r.blocked) {
            (Some(path), _) if r.already => format!("{} was already finalized; receipt {path}", r.task_id),
            (Some(path), _) => format!("finalized {}: receipt {path}", r.task_id),
            (None, Some(why)) => format!("{} not finalized: {why}", r.task_id),
            (None, None) => format!("{} not finalized", r.task_id),
        };
        if let Some(receipt) = &r.receipt {
            let b = &receipt.body;
            text.push_str(&format!(
                "\n  {} file(s), tree {}, ledger head {}\n  reviewer {}, independence {:?}\n  signed by {}",
                b.file_digests.len(),
                &b.tree_sha[..12],
                &b.ledger_head[..12],
                b.reviewer.provider,
                b.independence.level,
                receipt.signature.key_id
            ));
        }
        for c in r.criteria.iter().filter(|c| c.status != m::CriterionStatus::Pass) {
            text.push_str(&format!("\n  {} `{}`: {}", c.status, c.criterion_id, c.reason));
        }
        text.push_str(&format!("\nnext: {}", r.next_command));
        text
    };
    ctx.out.document(&r, r.finalized, human);
    Ok(if r.finalized { workflow::OK } else { workflow::REVIEW_GATE })
}

pub fn verify(ctx: &Context, args: &VerifyArgs) -> Result<u8, CliError> {
    let params = |root: String| m::VerifyParams {
        root,
        receipt: args.receipt.clone(),
        target: args.target.clone(),
        material_ref: args.material_ref.clone(),
        trusted_keys: args.trusted_keys.clone(),
        material_only: args.material_only,
        ci: args.ci,
        self_check: args.self_check,
        caller: caller(),
    };
    let r = connect_workspace(ctx)
        .and_then(|(root, mut conn)| call::<m::ReceiptVerify>(&mut conn, &params(root)))
        .map_err(|e| CliError { exit_code: codes::ERROR, ..e })?;
    ctx.out.document(&r, r.verified, || {
        let mut text = format!(
            "{} {}{}",
            r.receipt_path,
            if r.verified { "verified" } else { "NOT verified" },
            if r.task_id.is_empty() { String::new() } else { format!(" (task {})", r.task_id) }
        );
        for c in &r.checks {
            text.push_str(&format!("\n  {} {:<12} {}", if c.ok { "ok  " } else { "FAIL" }, c.name, c.detail));
        }
        text
    });
    Ok(if r.verified { codes::VERIFIED } else { codes::FAILED })
}
