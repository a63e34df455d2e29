//! The RPC edge of the daemon: the socket transport and the method table.

pub mod api;
pub mod framing;
pub mod ids;
pub mod transport;
