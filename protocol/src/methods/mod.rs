//! Every RPC method: its name and the types of its params and result, one file per namespace
//! (all re-exported here, so `methods::X` names any of them).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A JSON-RPC method of the daemon. Implemented by uninhabited marker types so that a method's
/// name and both of its payload types are declared together.
pub trait Method {
    const NAME: &'static str;
    /// A read that changes no task: a client may send it before the handshake's answer
    /// arrives (saving a round trip), since a daemon of another protocol may then run it.
    const READ_ONLY: bool;
    /// Work a stop of the daemon would cut while the call is in flight (commands it runs, a
    /// write, an answer worked out at length): `daemon.status` counts such calls (`serving`),
    /// and a client replaces a daemon of another build only while it serves none and runs no
    /// job. Not work: reads (the stop lets a call in flight finish before it closes the
    /// connection; the `READ_ONLY` ones are pipelined behind a client's own handshake) and
    /// waits (for a job, which counts on its own; a worker's long poll for one; the handshake).
    const WORK: bool;
    type Params: Serialize + DeserializeOwned + Send + 'static;
    type Result: Serialize + DeserializeOwned + Clone + Send + 'static;
}

macro_rules! method {
    ($(#[$doc:meta])* read_only $marker:ident = $name:literal, $params:ty => $result:ty) => {
        method!(@ true, false, $(#[$doc])* $marker = $name, $params => $result);
    };
    // A call that is no work of the daemon's (see `Method::WORK`) but not pipelined either.
    ($(#[$doc:meta])* no_work $marker:ident = $name:literal, $params:ty => $result:ty) => {
        method!(@ false, false, $(#[$doc])* $marker = $name, $params => $result);
    };
    ($(#[$doc:meta])* $marker:ident = $name:literal, $params:ty => $result:ty) => {
        method!(@ false, true, $(#[$doc])* $marker = $name, $params => $result);
    };
    (@ $read_only:literal, $work:literal, $(#[$doc:meta])* $marker:ident = $name:literal, $params:ty => $result:ty) => {
        $(#[$doc])*
        pub enum $marker {}
        impl Method for $marker {
            const NAME: &'static str = $name;
            const READ_ONLY: bool = $read_only;
            const WORK: bool = $work;
            type Params = $params;
            type Result = $result;
        }
    };
}

/// Params of methods that take none. Absent params are treated as `{}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Name of the subscription method, its notifications and its unsubscribe method.
pub const EVENTS_SUBSCRIBE: &str = "events.subscribe";
pub const EVENTS_NOTIFICATION: &str = "events.event";
pub const EVENTS_UNSUBSCRIBE: &str = "events.unsubscribe";

mod daemon;
mod job;
mod receipt;
mod review;
mod task;
mod template;
mod worker;

pub use daemon::*;
pub use job::*;
pub use receipt::*;
pub use review::*;
pub use task::*;
pub use template::*;
pub use worker::*;
// The vocabularies the method types use, reachable beside them.
pub use crate::vocab::*;
