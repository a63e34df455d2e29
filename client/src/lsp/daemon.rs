//! The language server's link to the daemon: a request connection that reconnects (starting
//! the daemon when allowed), a thread holding the `events.subscribe` connection that
//! forwards events and reconnects with backoff when the daemon goes away, and a probe that
//! says when a daemon that did not answer answers again.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use scafld_protocol::{ErrorKind, Event, Method};

use crate::{ClientError, Connection};

/// Opens a connection to the daemon as [`Dial`] says; fails with
/// [`LinkError::Unavailable`] or [`LinkError::TimedOut`].
pub type Connector = Arc<dyn Fn(Dial) -> Result<Connection, LinkError> + Send + Sync>;

/// How to open a connection to the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dial {
    /// Start a daemon when none answers.
    pub autostart: bool,
    /// Give up on any read or write (the handshake's too) after this long.
    pub timeout: Option<Duration>,
}

/// How long the main loop waits for any one answer of the daemon: a hung daemon costs the
/// editor one failed request, not a frozen server.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest the answer to `initialize` waits for the first subscription to the daemon's events.
pub const SUBSCRIBE_WAIT: Duration = Duration::from_secs(2);

/// Why a call to the daemon failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// No daemon could be reached (or the connection broke).
    Unavailable(String),
    /// The daemon did not answer in time; the next call opens a new connection.
    TimedOut(String),
    /// The daemon answered with an error.
    Refused { kind: ErrorKind, message: String },
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Unavailable(why) => write!(f, "the scafld daemon is unavailable: {why}"),
            LinkError::TimedOut(why) => write!(f, "the scafld daemon is not responding: {why}"),
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
            ClientError::TimedOut(_) => LinkError::TimedOut(error.to_string()),
            _ => LinkError::Unavailable(error.to_string()),
        }
    }
}

/// A request connection, opened on first use and again after it broke or timed out.
pub struct Link {
    connect: Connector,
    timeout: Option<Duration>,
    conn: Option<Connection>,
    /// Whether opening it may start a daemon (see [`Link::set_autostart`]).
    autostart: bool,
}

impl Link {
    /// A link whose calls may wait for the daemon as long as they take.
    pub fn new(connect: Connector) -> Link {
        Link { connect, timeout: None, conn: None, autostart: true }
    }

    /// A link whose calls fail with [`LinkError::TimedOut`] after `timeout`.
    pub fn with_timeout(connect: Connector, timeout: Duration) -> Link {
        Link { connect, timeout: Some(timeout), conn: None, autostart: true }
    }

    /// Whether a connection opened from now on may start a daemon when none answers (on by
    /// default); what it was. Reads the server makes on its own account (what an event or a
    /// reconnection announced) turn it off: a daemon stopped or crashed while one was under
    /// way stays stopped until a request of the editor's needs it.
    pub fn set_autostart(&mut self, autostart: bool) -> bool {
        std::mem::replace(&mut self.autostart, autostart)
    }

    /// Call a read-only method; a broken connection is reopened and the call tried once more
    /// (a restarted daemon answers it as the old one would have). A time-out is not retried:
    /// a hung daemon would only hang the retry too.
    pub fn call<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, LinkError> {
        match self.call_once::<M>(params) {
            Err(LinkError::Unavailable(_)) => self.call_once::<M>(params),
            other => other,
        }
    }

    /// Connect (starting the daemon when allowed) unless connected already.
    pub fn ensure(&mut self) -> Result<&mut Connection, LinkError> {
        if self.conn.is_none() {
            let dial = Dial { autostart: self.autostart, timeout: self.timeout };
            self.conn = Some((self.connect)(dial)?);
        }
        self.conn.as_mut().ok_or_else(|| LinkError::Unavailable("not connected".into()))
    }

    /// Call a method once (for calls that change something: never repeated blindly).
    pub fn call_once<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, LinkError> {
        let conn = self.ensure()?;
        let result = conn.call::<M>(params).map_err(LinkError::from);
        // The connection is unusable after either (a late reply would answer the wrong call).
        if matches!(result, Err(LinkError::Unavailable(_) | LinkError::TimedOut(_))) {
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
    /// The daemon answers again (after a read failed because it did not): what that read
    /// would have shown is owed, so re-read it (see [`spawn_probe`]).
    Answering,
}

/// Longest pause between two attempts of the events thread to subscribe again: a restarted
/// daemon is to be republished from promptly.
const EVENTS_MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Longest pause between two attempts of the probe: it may wait on a daemon someone stopped
/// for as long as it stays stopped, and the events thread already notices a restart.
const PROBE_MAX_BACKOFF: Duration = Duration::from_secs(4);

/// The pauses between attempts to reach a daemon that does not answer: doubling from 10 ms up
/// to a cap.
struct Backoff {
    next: Duration,
    cap: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(10);

    fn new(cap: Duration) -> Backoff {
        Backoff { next: Backoff::FIRST, cap }
    }

    /// The pause before the next attempt.
    fn pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(self.cap);
        pause
    }

    /// An attempt succeeded: the next failure starts again from the shortest pause.
    fn reset(&mut self) {
        self.next = Backoff::FIRST;
    }
}

/// Start the event thread. It ends when `events` is disconnected (the server is gone). It
/// never starts a daemon itself: a daemon someone stopped stays stopped until a request
/// needs one.
pub fn spawn_events(connect: Connector, events: Sender<LinkEvent>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("scafld-lsp-events".into()).spawn(move || {
        let mut backoff = Backoff::new(EVENTS_MAX_BACKOFF);
        let mut lost_reported = false;
        loop {
            let subscribed = connect(Dial { autostart: false, timeout: None })
                .and_then(|mut conn| conn.subscribe().map(|_| conn).map_err(LinkError::from));
            let mut conn = match subscribed {
                Ok(conn) => conn,
                Err(why) => {
                    if !lost_reported {
                        lost_reported = true;
                        if events.send(LinkEvent::Lost(why.to_string())).is_err() {
                            return;
                        }
                    }
                    std::thread::sleep(backoff.pause());
                    continue;
                }
            };
            backoff.reset();
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

/// Start a thread that waits until a daemon answers a request, then reports
/// [`LinkEvent::Answering`] and ends. A hung daemon keeps its subscription open, so no
/// `Connected` would ever follow its recovery: this is how the server learns of it. Each
/// attempt is a `daemon.status` on a connection of its own, with no time limit (a stopped
/// daemon answers it once continued); one that fails (no daemon, a broken connection) is
/// tried again with backoff, doubling up to [`PROBE_MAX_BACKOFF`]. It never starts a daemon:
/// one stopped stays stopped until a request of the editor's needs it.
pub fn spawn_probe(connect: Connector, events: Sender<LinkEvent>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("scafld-lsp-probe".into())
        .spawn(move || probe(connect, &events, std::thread::sleep))?;
    Ok(())
}

/// The probe's work (see [`spawn_probe`]), pausing with `sleep`.
fn probe(connect: Connector, events: &Sender<LinkEvent>, mut sleep: impl FnMut(Duration)) {
    let mut link = Link::new(connect);
    link.set_autostart(false);
    let mut backoff = Backoff::new(PROBE_MAX_BACKOFF);
    // A refusal is an answer too. Once per attempt: the backoff is the retry.
    while let Err(LinkError::Unavailable(_) | LinkError::TimedOut(_)) =
        link.call_once::<scafld_protocol::methods::DaemonStatus>(&Default::default())
    {
        sleep(backoff.pause());
    }
    let _ = events.send(LinkEvent::Answering);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use scafld_protocol::methods as m;

    use super::*;

    /// A link whose every dial fails with `error`; how many dials it made.
    fn failing_link(error: LinkError) -> (Link, Arc<AtomicUsize>) {
        let dials = Arc::new(AtomicUsize::new(0));
        let counted = dials.clone();
        let connect: Connector = Arc::new(move |dial: Dial| {
            assert_eq!(dial, Dial { autostart: true, timeout: Some(REQUEST_TIMEOUT) });
            counted.fetch_add(1, Ordering::SeqCst);
            Err(error.clone())
        });
        (Link::with_timeout(connect, REQUEST_TIMEOUT), dials)
    }

    fn status(link: &mut Link) -> Result<m::StatusResult, LinkError> {
        link.call::<m::TaskStatus>(&m::StatusParams::plain(m::TaskParams { root: "/w".into(), task_id: "t".into() }))
    }

    /// The probe after `scafld daemon stop`: it never dials to start a daemon, its pauses
    /// double up to a few seconds (not a dial every half second for as long as the daemon
    /// stays stopped), and the first answer, a refusal included, is reported.
    #[test]
    fn the_probe_backs_off_to_a_few_seconds_and_never_starts_a_daemon() {
        let dials = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = dials.clone();
        let connect: Connector = Arc::new(move |dial: Dial| {
            let mut dials = recorded.lock().unwrap();
            dials.push(dial);
            match dials.len() {
                ..=12 => Err(LinkError::Unavailable("no daemon".into())),
                _ => Err(LinkError::Refused {
                    kind: scafld_protocol::ErrorKind::ShuttingDown,
                    message: "stopping".into(),
                }),
            }
        });
        let (events, reported) = crossbeam_channel::unbounded();
        let mut pauses = Vec::new();
        probe(connect, &events, |pause| pauses.push(pause.as_millis()));
        assert!(matches!(reported.try_recv(), Ok(LinkEvent::Answering)));
        let dials = dials.lock().unwrap();
        assert_eq!(dials.len(), 13, "one dial per attempt");
        assert!(dials.iter().all(|d| !d.autostart), "{dials:?}");
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1280, 2560, 4000, 4000, 4000]);
    }

    #[test]
    fn a_lost_daemon_is_dialled_again_but_a_hung_one_is_not() {
        let (mut link, dials) = failing_link(LinkError::Unavailable("gone".into()));
        assert!(matches!(status(&mut link), Err(LinkError::Unavailable(_))));
        assert_eq!(dials.load(Ordering::SeqCst), 2, "one retry after a lost connection");

        let (mut link, dials) = failing_link(LinkError::TimedOut("hung".into()));
        assert!(matches!(status(&mut link), Err(LinkError::TimedOut(_))));
        assert_eq!(dials.load(Ordering::SeqCst), 1, "no retry after a time-out");
        assert!(matches!(status(&mut link), Err(LinkError::TimedOut(_))));
        assert_eq!(dials.load(Ordering::SeqCst), 2, "the next call dials afresh");
    }
}
