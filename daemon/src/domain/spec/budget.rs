//! How large a spec may be, and how much of it the runner may write: what it writes into a spec
//! (evidence lines, reasons, blockers, the review) is clipped, so that a spec approved within
//! [`MAX_APPROVED_BYTES`] and [`runner_growth`] can never grow past [`MAX_SPEC_BYTES`], the
//! most the daemon reads. The ledger keeps every value whole.

use super::Spec;

/// The largest spec file read (real specs are kilobytes).
pub const MAX_SPEC_BYTES: u64 = 8 << 20;
/// The largest spec `approve` takes: the rest is room for the runner's records.
pub const MAX_APPROVED_BYTES: u64 = 4 << 20;
/// The most acceptance criteria (phases' and task-level together) one spec may have: real specs
/// have a few hundred at most, and each criterion read costs the daemon memory in every parse,
/// outline and report (200 000 one-line criteria in an 8 MiB spec peaked it past 370 MB). A
/// spec with more is a structural error, at the first criterion past the limit.
pub const MAX_CRITERIA: usize = 10_000;
/// The longest value the runner writes on one line of a spec (an evidence line, a reason, a
/// review's summary or a finding's field), in bytes.
pub const MAX_LINE_VALUE: usize = 300;
/// The most a review writes under `## Review`, in bytes.
pub const MAX_REVIEW_BYTES: usize = 64 << 10;
/// Blockers named in `## Current State`; the rest are counted.
pub const MAX_BLOCKERS: usize = 10;

/// What the runner may add per criterion (its `Status`, `Evidence` and `Source event` lines),
/// per phase (its `Status:` line), and once (`## Current State`, with slack).
const PER_CRITERION: u64 = 40 + (16 + MAX_LINE_VALUE as u64) + 48;
const PER_PHASE: u64 = 64;
const CURRENT_STATE: u64 = 16 << 10;

/// The most the runner's records can add to `spec` as it builds, reviews and completes.
pub fn runner_growth(spec: &Spec) -> u64 {
    let criteria = spec.criteria().count() as u64;
    criteria * PER_CRITERION + spec.phases.len() as u64 * PER_PHASE + MAX_REVIEW_BYTES as u64 + CURRENT_STATE
}

/// `value` on one line of at most [`MAX_LINE_VALUE`] bytes: newlines become spaces, any other
/// control character (an escape sequence, a NUL that would make git call the spec binary) is
/// shown in caret notation, and a longer value is cut at a character boundary and ends with `…`.
pub fn clip(value: &str) -> String {
    let one_line = if value.chars().any(|c| c.is_control() && c != '\t') {
        value
            .chars()
            .map(|c| match c {
                '\n' | '\r' => " ".to_string(),
                '\t' => c.to_string(),
                c => scafld_protocol::text::shown_control(c).unwrap_or_else(|| c.to_string()),
            })
            .collect()
    } else {
        value.to_string()
    };
    if one_line.len() <= MAX_LINE_VALUE {
        return one_line;
    }
    let mut end = MAX_LINE_VALUE - '…'.len_utf8();
    while !one_line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &one_line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipped_values_stay_on_one_line_within_the_limit() {
        assert_eq!(clip("exit code was 0"), "exit code was 0");
        assert_eq!(clip("two\nlines\r\n"), "two lines  ");
        assert_eq!(clip("nul\0 esc\u{1b}[31m\ttab \u{9b}"), "nul^@ esc^[[31m\ttab <U+009B>");
        let long = "é".repeat(400);
        let clipped = clip(&long);
        assert!(clipped.len() <= MAX_LINE_VALUE && clipped.ends_with('…'), "{}", clipped.len());
    }
}
