//! The Markdown spec: its model ([`Spec`]), the parser ([`parse`]), canonical renderers for the
//! runner-owned sections ([`render`]) and the projection writer that splices them into the
//! file while keeping every other byte ([`project`]), within a size budget ([`budget`]).
//!
//! Grammar (compatible with the original tool): YAML-like front matter of `key: value` lines
//! (each key once), an H1 title, top-level `## ` sections found by a scan aware of code fences
//! and HTML comments (text in a comment is never structure), `## Phase N: Name` sections with
//! `Objective:`/`Goal:`, `Status:`, `Dependencies:`, `Changes:` and `Acceptance:` (the phase's
//! criteria are the checklist after it), and criterion lines ``- [ ] `id` type - title``
//! followed by indented `- Key: value` details.

pub mod budget;
pub mod dialect;
mod model;
mod parse;
pub mod project;
pub mod render;

pub use dialect::Dialect;
pub use model::*;
pub(crate) use parse::is_unset;
pub use parse::{Diagnostic, Parsed, Severity, criterion_problems, not_utf8, parse, parse_as};

#[cfg(test)]
mod corpus;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
