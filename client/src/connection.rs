//! A blocking JSON-RPC connection to the daemon: one request at a time, typed by
//! [`scafld_protocol::Method`], with the protocol-version handshake done on connect (or, for
//! [`Connection::connect_pipelined`], answered together with the first read-only call).

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use scafld_protocol::methods::{self, EVENTS_NOTIFICATION, EVENTS_SUBSCRIBE, HelloParams};
use scafld_protocol::{ErrorData, ErrorKind, Event, Method, PROTOCOL_VERSION};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no scafld daemon is answering at {}", socket.display())]
    Unreachable { socket: PathBuf, source: io::Error },
    #[error(
        "this scafld client speaks protocol {client} but the daemon at {} speaks protocol {daemon} \
         (daemon {daemon_version}); restart the daemon with `scafld daemon stop` followed by \
         `scafld daemon start` so both come from the same installation",
        socket.display()
    )]
    ProtocolMismatch {
        client: u32,
        daemon: u32,
        daemon_version: String,
        socket: PathBuf,
        /// The process the daemon says it is.
        pid: u32,
    },
    #[error("refusing to talk to {}: {why}", socket.display())]
    Untrusted { socket: PathBuf, why: String },
    /// The daemon's handshake was refused by the connection's [`HelloCheck`] (a daemon of
    /// another build the caller would not, or could not, replace): `kind` names why.
    #[error("{message}")]
    Refused { kind: String, message: String, hint: Option<String> },
    #[error("{}", data.message)]
    Rpc { code: i32, data: ErrorData },
    #[error("the daemon did not answer within {} ms", .0.as_millis())]
    TimedOut(Duration),
    #[error("lost the connection to the daemon: {0}")]
    Io(#[from] io::Error),
    #[error("the daemon sent a reply this client cannot read: {0}")]
    Decode(String),
}

impl ClientError {
    /// The error kind reported by the daemon, if the daemon reported one.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ClientError::Rpc { data, .. } => Some(data.kind),
            _ => None,
        }
    }
}

/// How long the daemon may take to answer the handshake (see [`Connection::daemon`]).
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// How long a call that only reads ([`Method::READ_ONLY`]: status, list, ...) may take.
pub const READ_DEADLINE: Duration = Duration::from_secs(60);

/// An open, version-checked connection.
pub struct Connection {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    socket: PathBuf,
    next_id: u64,
    /// Notifications that arrived while waiting for a reply.
    pending_events: VecDeque<Event>,
    /// How long a read or write may block (see [`Connection::connect_with_timeout`]).
    timeout: Option<Duration>,
    /// The daemon's answer to the handshake: `Err(id)` while it is still to be read.
    daemon: Result<methods::HelloResult, u64>,
    /// A reply that arrived while another was awaited (the daemon answers pipelined calls in
    /// the order they finish).
    early: Option<(u64, Incoming)>,
    /// The handshake of a pipelined connection, held back to go out in one write with the
    /// first call (one wake-up of the daemon, not two).
    unsent: Vec<u8>,
    /// What every call's result passes through before it is used (the CLI's
    /// `runnable::Caller`: printed commands made to run where the caller is).
    results: Option<ResultHook>,
    /// What decides, once the handshake is answered, whether this daemon may serve the
    /// connection (see [`Connection::checking_hello`]); taken when it runs.
    hello_check: Option<HelloCheck>,
    /// How many times the connection was moved to another daemon by its [`HelloCheck`]: a
    /// call sent before that is sent again.
    moves: u32,
    /// How to reach the next daemon when this one refuses a call it never started because it
    /// is stopping (see [`Connection::reconnecting`]).
    reconnect: Option<Reconnect>,
}

/// Opens a connection to whichever daemon serves the socket now (starting one if the caller
/// may), for a call a stopping daemon refused unstarted.
pub type Reconnect = std::sync::Arc<dyn Fn() -> Result<Connection, ClientError> + Send + Sync>;

/// How long a call refused unstarted by a stopping daemon keeps being sent again (each time to
/// a fresh connection) before the refusal is reported: a stop takes a few seconds at most.
const RESTART_DEADLINE: Duration = Duration::from_secs(30);
/// The pause before a refused call is sent again, so the stopping daemon can let go.
const RESTART_PAUSE: Duration = Duration::from_millis(20);

/// Whether `error` is a stopping daemon's refusal of a call it never started (nothing of it
/// ran: see [`scafld_protocol::error::NOT_STARTED`]), so sending it again elsewhere is safe.
pub fn refused_unstarted(error: &ClientError) -> bool {
    match error {
        ClientError::Rpc { data, .. } => {
            data.kind == ErrorKind::ShuttingDown
                && data
                    .details
                    .as_ref()
                    .and_then(|d| d.get(scafld_protocol::error::NOT_STARTED))
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
        }
        _ => false,
    }
}

/// Judges a daemon by its handshake: `Ok(None)` it may serve; `Ok(Some(connection))`, it was
/// replaced and the calls go to `connection` instead; `Err`, it may not (nothing is sent to it
/// but a read-only call pipelined with the handshake, whose answer is never used).
pub type HelloCheck = Box<dyn FnOnce(&methods::HelloResult) -> Result<Option<Connection>, ClientError> + Send>;

/// A rewrite of a call's result, see [`Connection::with_results`].
pub type ResultHook = std::sync::Arc<dyn Fn(&mut Value) + Send + Sync>;

/// One line from the daemon: a reply (`id` with `result` or `error`) or a notification
/// (`method`, `params`). The result stays raw text, so a typed call parses it once, straight
/// into its type (not into a JSON tree first: a `list` reply is hundreds of kilobytes).
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
}

#[derive(Deserialize)]
struct RawError {
    code: i32,
    message: String,
    #[serde(default)]
    data: Option<Value>,
}

/// Whether the daemon behind `stream` is ours: its socket's directory is safe (see
/// [`crate::paths::unsafe_dir`]) and the peer runs with our uid.
fn trusted(socket: &Path, stream: &UnixStream) -> Result<(), String> {
    let dir = socket.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if let Some(why) = crate::paths::unsafe_dir(dir) {
        return Err(why);
    }
    let uid = nix::unistd::getuid().as_raw();
    let peer = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("cannot read the peer's credentials: {e}"))?;
    if peer.uid() != uid {
        return Err(format!("the process listening there runs as uid {}, not as you (uid {uid})", peer.uid()));
    }
    Ok(())
}

impl Connection {
    /// Connect and check that the daemon speaks our protocol version. Before anything is sent
    /// (requests carry the caller's environment), the socket's directory must be ours and
    /// closed to others, and the process listening must run as our user: a directory another
    /// user created first (the `/tmp` fallback) cannot receive our requests.
    pub fn connect(socket: &Path) -> Result<Connection, ClientError> {
        Connection::connect_with_timeout(socket, None)
    }

    /// [`Connection::connect`], where every read and write (the handshake's too) gives up after
    /// `timeout` with [`ClientError::TimedOut`]: a daemon that accepts but never answers (hung,
    /// stopped) cannot block the caller for longer. After a time-out the connection is
    /// unusable (a late reply would answer the wrong call): drop it.
    pub fn connect_with_timeout(socket: &Path, timeout: Option<Duration>) -> Result<Connection, ClientError> {
        let mut conn = Connection::connect_pipelined(socket, timeout)?;
        conn.daemon()?;
        Ok(conn)
    }

    /// [`Connection::connect_with_timeout`], but the handshake's answer is read only with the
    /// first call's: a read-only call ([`Method::READ_ONLY`]) goes out right behind the
    /// handshake, any other waits for its answer. A daemon of another protocol is still
    /// refused before a call's result is used.
    pub fn connect_pipelined(socket: &Path, timeout: Option<Duration>) -> Result<Connection, ClientError> {
        let stream = scafld_local::probe(socket)
            .map_err(|source| ClientError::Unreachable { socket: socket.to_path_buf(), source })?;
        trusted(socket, &stream).map_err(|why| ClientError::Untrusted { socket: socket.to_path_buf(), why })?;
        stream.set_read_timeout(timeout)?;
        stream.set_write_timeout(timeout)?;
        let writer = stream.try_clone()?;
        let mut conn = Connection {
            // Replies can be megabytes (a large workspace's list): fewer, larger reads.
            reader: BufReader::with_capacity(64 * 1024, stream),
            writer,
            socket: socket.to_path_buf(),
            next_id: 1,
            pending_events: VecDeque::new(),
            timeout,
            daemon: Err(0),
            early: None,
            unsent: Vec::new(),
            results: None,
            hello_check: None,
            moves: 0,
            reconnect: None,
        };
        let params = HelloParams { protocol_version: PROTOCOL_VERSION, client_version: CLIENT_VERSION.into() };
        let params = serde_json::to_value(params).map_err(|e| ClientError::Decode(e.to_string()))?;
        let (id, line) = conn.request_line(methods::Hello::NAME, params)?;
        (conn.daemon, conn.unsent) = (Err(id), line);
        Ok(conn)
    }

    /// The daemon's answer to the handshake, read now if it has not been yet. A daemon that
    /// speaks another protocol is an error.
    pub fn daemon(&mut self) -> Result<&methods::HelloResult, ClientError> {
        if let Err(id) = self.daemon {
            // However long the calls may take, the handshake is answered at once by a daemon
            // that works: one that accepted but does not answer (stopped, stuck) is reported
            // after a bound, never waited on for ever.
            let bound = self.timeout.map_or(HANDSHAKE_DEADLINE, |t| t.min(HANDSHAKE_DEADLINE));
            let raw = self.reply_within(id, bound)?;
            let hello: methods::HelloResult = serde_json::from_str(raw.get())
                .map_err(|e| ClientError::Decode(format!("{}: {e}", methods::Hello::NAME)))?;
            if hello.protocol_version != PROTOCOL_VERSION {
                return Err(ClientError::ProtocolMismatch {
                    client: PROTOCOL_VERSION,
                    daemon: hello.protocol_version,
                    daemon_version: hello.daemon_version,
                    socket: self.socket.clone(),
                    pid: hello.pid,
                });
            }
            if let Some(check) = self.hello_check.take() {
                match check(&hello) {
                    Ok(None) => {}
                    Ok(Some(fresh)) => self.move_to(fresh),
                    Err(refused) => {
                        // Nothing more goes to that daemon on this connection.
                        let _ = self.writer.shutdown(std::net::Shutdown::Both);
                        return Err(refused);
                    }
                }
            }
            if self.daemon.is_err() {
                self.daemon = Ok(hello);
            }
        }
        Ok(self.daemon.as_ref().expect("answered above"))
    }

    /// Judge the daemon by its handshake with `check` before any call's answer is used (see
    /// [`HelloCheck`]). A check that replaces the daemon moves the connection to the new one,
    /// and a call already sent goes again there.
    pub fn checking_hello(mut self, check: HelloCheck) -> Connection {
        self.hello_check = Some(check);
        self
    }

    /// Go on with `fresh` (its handshake answered) in place of this connection; what was
    /// waiting on the old one is dropped with it.
    fn move_to(&mut self, fresh: Connection) {
        let (results, moves, reconnect) = (self.results.take(), self.moves + 1, self.reconnect.take());
        *self = Connection { results, moves, reconnect, ..fresh };
    }

    /// A call (the handshake included) that the daemon refuses because it is stopping and
    /// never started the call goes again, to the connection `reconnect` opens (the next
    /// daemon), until [`RESTART_DEADLINE`]; later calls use that connection too. Without it
    /// the refusal is the call's error.
    pub fn reconnecting(mut self, reconnect: Option<Reconnect>) -> Connection {
        self.reconnect = reconnect;
        self
    }

    /// How many times the connection moved to another daemon (see
    /// [`Connection::reconnecting`] and [`Connection::checking_hello`]): what a caller holds
    /// of the daemon it reached before (a lease) is to be checked with the new one.
    pub fn moves(&self) -> u32 {
        self.moves
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Every call's result passes through `hook` before it is parsed or passed on.
    pub fn with_results(mut self, hook: Option<ResultHook>) -> Connection {
        self.results = hook;
        self
    }

    /// Call `M` and wait for its reply.
    pub fn call<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, ClientError> {
        let params = serde_json::to_value(params).map_err(|e| ClientError::Decode(e.to_string()))?;
        let raw = self.call_text(M::NAME, M::READ_ONLY, params)?;
        serde_json::from_str(raw.get()).map_err(|e| ClientError::Decode(format!("{}: {e}", M::NAME)))
    }

    /// Call `M` and return its result as the daemon wrote it, unparsed: for a caller that only
    /// passes it on (`list --json` over thousands of specs).
    pub fn call_verbatim<M: Method>(&mut self, params: &M::Params) -> Result<Box<RawValue>, ClientError> {
        let params = serde_json::to_value(params).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.call_text(M::NAME, M::READ_ONLY, params)
    }

    /// Call a method by name with JSON params.
    pub fn call_raw(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let raw = self.call_text(method, false, params)?;
        serde_json::from_str(raw.get()).map_err(|e| ClientError::Decode(format!("{method}: {e}")))
    }

    /// The result of a call as the daemon wrote it, after the handshake's answer (read before
    /// the call is sent unless the call is `read_only`).
    fn call_text(&mut self, method: &str, read_only: bool, params: Value) -> Result<Box<RawValue>, ClientError> {
        let raw = self.call_unhooked(method, read_only, params)?;
        let Some(hook) = &self.results else { return Ok(raw) };
        let mut value: Value =
            serde_json::from_str(raw.get()).map_err(|e| ClientError::Decode(format!("{method}: {e}")))?;
        hook(&mut value);
        serde_json::value::to_raw_value(&value).map_err(|e| ClientError::Decode(format!("{method}: {e}")))
    }

    /// The call's result; one a stopping daemon refused unstarted goes again to the next
    /// daemon (see [`Connection::reconnecting`]).
    fn call_unhooked(&mut self, method: &str, read_only: bool, params: Value) -> Result<Box<RawValue>, ClientError> {
        let Some(reconnect) = self.reconnect.clone() else { return self.call_once(method, read_only, params) };
        let deadline = Instant::now() + RESTART_DEADLINE;
        loop {
            match self.call_once(method, read_only, params.clone()) {
                Err(error) if refused_unstarted(&error) && Instant::now() < deadline => {
                    std::thread::sleep(RESTART_PAUSE);
                    let fresh = reconnect()?;
                    self.move_to(fresh);
                }
                other => return other,
            }
        }
    }

    fn call_once(&mut self, method: &str, read_only: bool, params: Value) -> Result<Box<RawValue>, ClientError> {
        if !read_only {
            self.daemon()?;
        }
        // A call pipelined with the handshake goes again if the handshake's check moves the
        // connection to another daemon.
        let (again, moves) = (self.daemon.is_err().then(|| params.clone()), self.moves);
        let sent = self.guard_timeout(|conn| conn.send(method, params));
        // A daemon that refuses the connection (busy) answers the handshake with why and hangs
        // up: that answer says more than the broken pipe.
        self.daemon()?;
        let id = match (sent, again) {
            (_, Some(params)) if self.moves != moves => self.guard_timeout(|conn| conn.send(method, params))?,
            (sent, _) => sent?,
        };
        if !read_only || self.timeout.is_some() {
            return self.guard_timeout(|conn| conn.reply(id));
        }
        // A call that only reads is due at once from a daemon that works (none of them waits
        // for a job or a person): bounded too, as the handshake is.
        self.reply_within(id, READ_DEADLINE)
    }

    /// The reply to `id`, waited for `bound` at most ([`ClientError::TimedOut`] past it); the
    /// connection's own read timeout holds again afterwards.
    fn reply_within(&mut self, id: u64, bound: Duration) -> Result<Box<RawValue>, ClientError> {
        self.reader.get_ref().set_read_timeout(Some(bound))?;
        let reply = self.reply(id).map_err(|error| ran_out(error, bound));
        self.reader.get_ref().set_read_timeout(self.timeout)?;
        reply
    }

    /// `step`, with a read or write that ran out of time reported as [`ClientError::TimedOut`].
    fn guard_timeout<T>(&mut self, step: impl FnOnce(&mut Self) -> Result<T, ClientError>) -> Result<T, ClientError> {
        match self.timeout {
            Some(timeout) => step(self).map_err(|error| ran_out(error, timeout)),
            None => step(self),
        }
    }

    /// Write one request; its id is returned.
    fn send(&mut self, method: &str, params: Value) -> Result<u64, ClientError> {
        let (id, line) = self.request_line(method, params)?;
        if self.unsent.is_empty() {
            self.writer.write_all(&line)?;
        } else {
            self.unsent.extend_from_slice(&line);
            self.send_unsent()?;
        }
        Ok(id)
    }

    /// The next request's id and its line.
    fn request_line(&mut self, method: &str, params: Value) -> Result<(u64, Vec<u8>), ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut line = serde_json::to_vec(&request).map_err(|e| ClientError::Decode(e.to_string()))?;
        line.push(b'\n');
        Ok((id, line))
    }

    fn send_unsent(&mut self) -> io::Result<()> {
        let unsent = std::mem::take(&mut self.unsent);
        self.writer.write_all(&unsent)
    }

    /// Read until the reply to request `id` arrives; a reply to another pending request is
    /// kept for its own turn, notifications are stashed.
    fn reply(&mut self, id: u64) -> Result<Box<RawValue>, ClientError> {
        let message = match self.early.take() {
            Some((early, message)) if early == id => message,
            other => {
                self.early = other;
                loop {
                    let message = self.read_message()?;
                    // An error with a null id concerns the connection itself (the daemon
                    // refused us, or could not parse what we sent): it answers this call too.
                    if let (None, Some(error)) = (&message.id, &message.error) {
                        return Err(decode_error(error));
                    }
                    match message.id.as_ref().and_then(Value::as_u64) {
                        Some(answered) if answered == id => break message,
                        Some(answered) if answered < self.next_id && message.method.is_none() => {
                            self.early = Some((answered, message));
                        }
                        _ => self.stash_notification(message),
                    }
                }
            }
        };
        if let Some(error) = &message.error {
            return Err(decode_error(error));
        }
        match message.result {
            Some(result) => Ok(result),
            None => RawValue::from_string("null".into()).map_err(|e| ClientError::Decode(e.to_string())),
        }
    }

    /// Subscribe to daemon events; read them with [`Connection::next_event`].
    pub fn subscribe(&mut self) -> Result<(), ClientError> {
        self.call_raw(EVENTS_SUBSCRIBE, serde_json::json!({})).map(|_| ())
    }

    /// Block until the next event arrives. `Ok(None)` when the daemon closed the connection.
    pub fn next_event(&mut self) -> Result<Option<Event>, ClientError> {
        loop {
            if let Some(event) = self.pending_events.pop_front() {
                return Ok(Some(event));
            }
            match self.read_message() {
                Ok(message) => self.stash_notification(message),
                Err(ClientError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    fn stash_notification(&mut self, message: Incoming) {
        if message.method.as_deref() != Some(EVENTS_NOTIFICATION) {
            return;
        }
        let result = message.params.and_then(|p| p.pointer("/result").cloned()).unwrap_or(Value::Null);
        // Unknown event kinds come from a newer daemon; skipping them is the compatible choice.
        if let Ok(event) = serde_json::from_value::<Event>(result) {
            self.pending_events.push_back(event);
        }
    }

    fn read_message(&mut self) -> Result<Incoming, ClientError> {
        if !self.unsent.is_empty() {
            self.send_unsent()?;
        }
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the daemon closed the connection").into());
        }
        serde_json::from_str(&line).map_err(|e| ClientError::Decode(e.to_string()))
    }
}

fn decode_error(error: &Value) -> ClientError {
    let Ok(raw) = serde_json::from_value::<RawError>(error.clone()) else {
        return ClientError::Decode(format!("malformed error object: {error}"));
    };
    use scafld_protocol::error::codes;
    let data = raw.data.and_then(|d| serde_json::from_value::<ErrorData>(d).ok()).unwrap_or_else(|| {
        // The RPC library's refusal of a reply past the cap says only "Response is too big".
        let (message, hint) = match raw.code {
            codes::OVERSIZED_RESPONSE => (
                format!(
                    "the daemon's answer is too large to send: over the {} MiB one reply may carry",
                    scafld_protocol::MAX_RESPONSE_BYTES >> 20
                ),
                Some("ask for less at a time".to_string()),
            ),
            _ => (raw.message, None),
        };
        ErrorData { kind: kind_of_code(raw.code), message, hint, details: None }
    });
    ClientError::Rpc { code: raw.code, data }
}

/// Whether `error` is the daemon's refusal of a reply past [`scafld_protocol::MAX_RESPONSE_BYTES`].
pub fn is_oversized_response(error: &ClientError) -> bool {
    matches!(error, ClientError::Rpc { code: scafld_protocol::error::codes::OVERSIZED_RESPONSE, .. })
}

fn kind_of_code(code: i32) -> ErrorKind {
    use scafld_protocol::error::codes;
    match code {
        codes::PARSE_ERROR => ErrorKind::ParseError,
        codes::INVALID_REQUEST => ErrorKind::InvalidRequest,
        codes::METHOD_NOT_FOUND => ErrorKind::MethodNotFound,
        codes::INVALID_PARAMS => ErrorKind::InvalidParams,
        codes::OVERSIZED_REQUEST => ErrorKind::OversizedRequest,
        _ => ErrorKind::Internal,
    }
}

/// `error` as [`ClientError::TimedOut`] when it is a read or write that ran out of `bound`.
fn ran_out(error: ClientError, bound: Duration) -> ClientError {
    match error {
        ClientError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            ClientError::TimedOut(bound)
        }
        error => error,
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    use super::*;

    /// A daemon that refuses the connection (busy, like the daemon's `transport::refuse`)
    /// answers the hello with a null-id error and hangs up. A pipelined read-only call written
    /// after that fails with EPIPE; the refusal waiting in the socket is what the caller gets.
    /// The RPC library's bare "Response is too big" becomes a message that says which limit.
    #[test]
    fn an_oversized_reply_is_reported_with_its_limit() {
        let raw = serde_json::json!({"code": -32008, "message": "Response is too big"});
        let error = decode_error(&raw);
        assert!(is_oversized_response(&error));
        let ClientError::Rpc { data, .. } = error else { unreachable!() };
        assert!(data.message.contains("too large to send: over the 64 MiB one reply may carry"), "{}", data.message);
        assert!(data.hint.is_some());
    }

    #[test]
    fn a_refusal_of_a_pipelined_connection_is_reported_not_a_broken_pipe() {
        let dir = std::env::temp_dir().join(format!("scafld-refusal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = dir.join("s.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        // A busy daemon reads the first line (when it comes soon) and answers with a refusal;
        // here it answers once before the client writes (its write then fails: a broken pipe)
        // and once after reading the handshake and the call, sent together.
        for reads_first in [false, true] {
            let server = std::thread::scope(|scope| {
                let server = scope.spawn(|| {
                    let (stream, _) = listener.accept().unwrap();
                    let mut line = String::new();
                    if reads_first {
                        let mut reader = BufReader::new(stream.try_clone().unwrap());
                        reader.read_line(&mut line).unwrap();
                        assert!(line.contains(methods::Hello::NAME), "the handshake comes first: {line}");
                        line.clear();
                        reader.read_line(&mut line).unwrap();
                    }
                    let refusal = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000,
                        "message": "the daemon already serves 1024 connections",
                        "data": {"kind": "busy", "message": "the daemon already serves 1024 connections"}}});
                    (&stream).write_all(format!("{refusal}\n").as_bytes()).unwrap();
                    line // the call, when read; the connection closes as the stream drops
                });
                let mut conn = Connection::connect_pipelined(&socket, None).unwrap();
                if !reads_first {
                    // The refusal is there and the daemon's end closed before the call is sent.
                    while !server.is_finished() {
                        std::thread::yield_now();
                    }
                }
                let params = methods::ListParams { root: "/w".into(), status: None, counts: false };
                let error = conn.call::<methods::TaskList>(&params).expect_err("refused");
                assert_eq!(error.kind(), Some(ErrorKind::Busy), "the refusal is lost: {error:?}");
                server.join().unwrap()
            });
            assert_eq!(server.contains(methods::TaskList::NAME), reads_first, "{server}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
