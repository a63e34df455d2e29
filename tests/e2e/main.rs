//! End-to-end tests: the real `scafld` and `scafldd` binaries in hermetic temp environments.
//! One test binary with a module per area (see ARCHITECTURE.md, "Tests").

mod cli;
mod corpus;
mod daemon;
mod exec;
mod gate;
mod git_layouts;
mod harden;
mod identity;
mod lsp;
mod next;
mod output;
mod providers;
mod real_clis;
mod receipts;
mod review;
mod sessions;
mod spec_lines;
mod specs;
mod templates;
mod wire;
