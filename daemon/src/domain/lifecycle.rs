//! Lifecycle statuses (the words are the protocol's), how a spec's front matter spells them,
//! and the directory each lives in.

pub use scafld_protocol::vocab::{Folder, HardenStatus, Status, UnknownWord};

/// Read a front-matter status, accepting the Python scafld 2.x names (`in_progress` is `active`;
/// `under_review` is a draft under discussion) beside the current ones.
pub fn read_status(s: &str) -> Option<Status> {
    match s {
        "in_progress" => Some(Status::Active),
        "under_review" => Some(Status::Draft),
        other => other.parse().ok(),
    }
}

/// Every word [`statuses_named`] takes: this tool's statuses (the Go original's too), then
/// Python scafld 2.x's own.
pub const STATUS_FILTER_WORDS: &[&str] = &[
    "draft",
    "approved",
    "active",
    "blocked",
    "review",
    "completed",
    "failed",
    "cancelled",
    "in_progress",
    "under_review",
];

/// The statuses a status word asked for (`list --status`) stands for: one of this tool's, or a
/// word of Python scafld 2.x, which writes `in_progress` for an active, blocked or reviewed task
/// alike and `under_review` for a draft under discussion.
pub fn statuses_named(word: &str) -> Result<&'static [Status], UnknownWord> {
    match word {
        "in_progress" => Ok(&[Status::Active, Status::Blocked, Status::Review]),
        "under_review" => Ok(&[Status::Draft]),
        other => match Status::ALL.iter().position(|s| s.as_str() == other) {
            Some(at) => Ok(&Status::ALL[at..=at]),
            None => Err(UnknownWord { what: "status", got: other.to_string(), expected: STATUS_FILTER_WORDS }),
        },
    }
}

/// Read a front-matter `harden_status`; an empty one has not run.
pub fn read_harden_status(s: &str) -> Result<HardenStatus, UnknownWord> {
    if s.is_empty() { Ok(HardenStatus::NotRun) } else { s.parse() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scafld_protocol::vocab::Vocabulary;

    /// Every status word the tool reads in a front matter, its own and the original's, names
    /// statuses to list, as the front matter's reading takes it; any other is refused naming them.
    #[test]
    fn every_status_word_read_in_a_spec_names_statuses() {
        assert_eq!(&STATUS_FILTER_WORDS[..Status::WORDS.len()], Status::WORDS);
        for word in STATUS_FILTER_WORDS {
            let named = statuses_named(word).unwrap();
            let read = read_status(word).unwrap();
            assert!(named.contains(&read), "{word}: {named:?}");
        }
        assert_eq!(statuses_named("in_progress").unwrap(), [Status::Active, Status::Blocked, Status::Review]);
        let unknown = statuses_named("done").unwrap_err().to_string();
        assert!(unknown.ends_with("cancelled, in_progress, under_review)"), "{unknown}");
    }
}
