//! Words of the `scafld` command line that the daemon writes into the commands it suggests:
//! the `review` subcommands, which a task id spelt the same must not be read as.
//!
//! The client's clap grammar declares the subcommands (a client test holds it to this list);
//! the daemon uses the list to spell a task's review command so that following it reviews the
//! task rather than running the subcommand.

/// Every subcommand of `scafld review`, built-in template reviews (`arch`, `tasks`, `code`)
/// included.
pub const REVIEW_SUBCOMMANDS: [&str; 12] =
    ["wait", "retry", "status", "accept", "reject", "list", "history", "result", "arch", "tasks", "code", "run"];

/// `scafld review <task>` for task `id`: positional, or `--task <id>` when the id is a
/// `review` subcommand word (positional, `scafld review status` would run `review status`).
pub fn review_task(id: &str) -> String {
    match REVIEW_SUBCOMMANDS.contains(&id) {
        true => format!("scafld review --task {id}"),
        false => format!("scafld review {id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::review_task;

    #[test]
    fn a_subcommand_word_is_named_with_task() {
        assert_eq!(review_task("greet"), "scafld review greet");
        assert_eq!(review_task("code"), "scafld review --task code");
        assert_eq!(review_task("status"), "scafld review --task status");
        assert_eq!(review_task("status-page"), "scafld review status-page");
    }
}
