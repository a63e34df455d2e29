//! Library half of the `scafld` client: how to talk to the daemon ([`Connection`]), with where it
//! lives ([`paths`], from the `scafld-local` crate the daemon shares), and the language server
//! ([`lsp`]). Blocking std IO only, so the client starts in a millisecond or two.

pub mod connection;
pub mod lsp;
pub mod terminal;

pub use connection::{ClientError, Connection};
pub use scafld_local::paths;
pub use scafld_local::paths::Paths;
