//! Library half of the `scafld` client: where the daemon lives ([`paths`]) and how to talk to it
//! ([`Connection`]). Blocking std IO only, so the client starts in a millisecond or two; the
//! daemon links this crate too, for path resolution and its "is another daemon alive?" probe.

pub mod connection;
pub mod paths;

pub use connection::{ClientError, Connection};
pub use paths::Paths;
