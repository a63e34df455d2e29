//! Words of the `scafld` command line that the daemon writes into the commands it suggests:
//! the `review` subcommands, which a task id spelt the same must not be read as, and any value
//! that a shell would otherwise split or run (a criterion id is free text in a spec).
//!
//! The client's clap grammar declares the subcommands (a client test holds it to this list);
//! the daemon uses the list to spell a task's review command so that following it reviews the
//! task rather than running the subcommand.

/// Every subcommand of `scafld review`, built-in template reviews (`arch`, `tasks`, `code`)
/// included.
pub const REVIEW_SUBCOMMANDS: [&str; 12] =
    ["wait", "retry", "status", "accept", "reject", "list", "history", "result", "arch", "tasks", "code", "run"];

/// `scafld review <task>` for task `id`: positional, or `--task <id>` when the positional word
/// would run something else: a `review` subcommand (`scafld review status` runs `review
/// status`), or, `shadowed`, a user review template of that name (`.scafld/templates/`), which
/// the client runs in the task's place.
pub fn review_task(id: &str, shadowed: bool) -> String {
    match shadowed || REVIEW_SUBCOMMANDS.contains(&id) {
        true => format!("scafld review --task {id}"),
        false => format!("scafld review {id}"),
    }
}

/// `value` as one word of a POSIX shell command line: as it is when it holds only characters no
/// shell treats specially, else single-quoted (a `'` inside written `'\''`).
pub fn shell_word(value: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,:/@%+=".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        return value.into();
    }
    format!("'{}'", value.replace('\'', r"'\''")).into()
}

/// `command` as run from `folder` when one is given: `cd <folder> && <command>`. A checkout whose
/// `.scafld` is a link to another checkout's (a git worktree sharing the main checkout's) runs
/// the commands that write under `.scafld` from the checkout the link leads to; the daemon's
/// hints and the client's alike name them so, through this one function.
pub fn run_from(folder: Option<&str>, command: &str) -> String {
    match folder {
        Some(folder) => format!("cd {} && {command}", shell_word(folder)),
        None => command.to_string(),
    }
}

/// `--criterion=<id>`: joined to its flag, so that an id starting with `-` is read as the
/// value, not as a flag of its own; quoted as one shell word when it needs to be.
pub fn criterion_flag(criterion: &str) -> String {
    format!("--criterion={}", shell_word(criterion))
}

/// The command a person runs to record a manual criterion's evidence (passing, as suggested).
pub fn manual_evidence(task: &str, criterion: &str) -> String {
    format!("scafld build {task} {} --disposition pass --reason \"what was checked\"", criterion_flag(criterion))
}

#[cfg(test)]
mod tests {
    use super::{review_task, shell_word};

    #[test]
    fn a_value_a_shell_would_split_or_run_is_quoted() {
        assert_eq!(shell_word("m1"), "m1");
        assert_eq!(shell_word("ui/check-2.1"), "ui/check-2.1");
        assert_eq!(shell_word("check it;touch pwned;echo"), "'check it;touch pwned;echo'");
        assert_eq!(shell_word("it's $(x)"), r"'it'\''s $(x)'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn a_subcommand_word_or_a_user_template_name_is_named_with_task() {
        assert_eq!(review_task("greet", false), "scafld review greet");
        assert_eq!(review_task("greet", true), "scafld review --task greet");
        assert_eq!(review_task("code", false), "scafld review --task code");
        assert_eq!(review_task("status", false), "scafld review --task status");
        assert_eq!(review_task("status-page", false), "scafld review status-page");
    }
}
