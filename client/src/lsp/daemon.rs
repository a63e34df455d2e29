//! The language server's link to the daemon: a request connection that reconnects (starting
//! the daemon when allowed), and a thread holding the `events.subscribe` connection that
//! forwards events and reconnects with backoff when the daemon goes away.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use scafld_protocol::{ErrorKind, Event, Method};

use crate::{ClientError, Connection};

/// Opens a connection to the daemon; `autostart` allows starting one when none answers.
pub type Connector = Arc<dyn Fn(bool) -> Result<Connection, String> + Send + Sync>;

/// Why a call to the daemon failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// No daemon could be reached (or the connection broke).
    Unavailable(String),
    /// The daemon answered with an error.
    Refused { kind: ErrorKind, message: String },
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Unavailable(why) => write!(f, "the scafld daemon is unavailable: {why}"),
            LinkError::Refused { message, .. } => f.write_str(message),
        }
    }
}

impl From<ClientError> for LinkError {
    fn from(error: ClientError) -> Self {
        match &error {
            ClientError::Rpc { data, .. } => {
                let message = match &data.hint {
                    Some(hint) => format!("{} (hint: {hint})", data.message),
                    None => data.message.clone(),
                };
                LinkError::Refused { kind: data.kind, message }
            }
            _ => LinkError::Unavailable(error.to_string()),
        }
    }
}

/// A request connection, opened on first use and again after it broke.
pub struct Link {
    connect: Connector,
    conn: Option<Connection>,
}

impl Link {
    pub fn new(connect: Connector) -> Link {
        Link { connect, conn: None }
    }

    /// Call a read-only method; a broken connection is reopened and the call tried once more
    /// (a restarted daemon answers it as the old one would have).
    pub fn call<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, LinkError> {
        match self.call_once::<M>(params) {
            Err(LinkError::Unavailable(_)) => self.call_once::<M>(params),
            other => other,
        }
    }

    /// Call a method once (for calls that change something: never repeated blindly).
    pub fn call_once<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, LinkError> {
        if self.conn.is_none() {
            self.conn = Some((self.connect)(true).map_err(LinkError::Unavailable)?);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let result = conn.call::<M>(params).map_err(LinkError::from);
        if matches!(result, Err(LinkError::Unavailable(_))) {
            self.conn = None;
        }
        result
    }
}

/// What the event thread reports.
#[derive(Debug)]
pub enum LinkEvent {
    /// Subscribed (again): state may have changed while disconnected, so re-read it.
    Connected,
    /// The subscription broke; the thread is reconnecting.
    Lost(String),
    Event(Event),
}

/// Longest pause between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Start the event thread. It ends when `events` is disconnected (the server is gone). It
/// never starts a daemon itself: a daemon someone stopped stays stopped until a request
/// needs one.
pub fn spawn_events(connect: Connector, events: Sender<LinkEvent>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("scafld-lsp-events".into()).spawn(move || {
        let mut backoff = Duration::from_millis(10);
        let mut lost_reported = false;
        loop {
            let subscribed =
                connect(false).and_then(|mut conn| conn.subscribe().map(|_| conn).map_err(|e| e.to_string()));
            let mut conn = match subscribed {
                Ok(conn) => conn,
                Err(why) => {
                    if !lost_reported {
                        lost_reported = true;
                        if events.send(LinkEvent::Lost(why)).is_err() {
                            return;
                        }
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            backoff = Duration::from_millis(10);
            if events.send(LinkEvent::Connected).is_err() {
                return;
            }
            let why = loop {
                match conn.next_event() {
                    Ok(Some(event)) => {
                        if events.send(LinkEvent::Event(event)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => break "the daemon closed the connection".to_string(),
                    Err(e) => break e.to_string(),
                }
            };
            lost_reported = true;
            if events.send(LinkEvent::Lost(why)).is_err() {
                return;
            }
        }
    })
}
