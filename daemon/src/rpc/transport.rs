//! Newline-delimited JSON-RPC 2.0 over a Unix socket, dispatched into jsonrpsee [`Methods`].
//!
//! jsonrpsee ships no IPC transport, so this module does what its own server does per connection:
//! frame lines, parse requests, call the registered [`MethodCallback`]s and write the replies.
//! The calls of one connection are polled together by its task, so pipelined requests proceed
//! concurrently and replies may come back out of order (clients match them by id).

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use jsonrpsee::core::id_providers::RandomIntegerIdProvider;
use jsonrpsee::core::server::{
    BoundedSubscriptions, ConnectionId, Extensions, MethodCallback, MethodResponse, MethodResponseNotifyTx, MethodSink,
    Methods, SubscriptionState,
};
use jsonrpsee::core::traits::IdProvider;
use jsonrpsee::types::{ErrorObjectOwned, Id, InvalidRequest, Notification, Request};
use scafld_protocol::{ErrorKind, MAX_REQUEST_LINE_BYTES};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::error::RpcError;
use crate::rpc::framing::{Frame, LineDecoder, PartialLines};
use crate::rpc::ids::{self, IdSwaps, Swapped};

/// Lines a connection's outbox holds before it reads no more requests and takes no more
/// notifications; also the notification queue's bound, past which subscriptions wait.
const OUTBOUND_QUEUE: usize = 256;
/// Subscriptions one connection may hold.
const MAX_SUBSCRIPTIONS_PER_CONNECTION: u32 = 64;
/// Largest single reply.
const MAX_RESPONSE_BYTES: u32 = scafld_protocol::MAX_RESPONSE_BYTES as u32;
/// How long a closing connection waits for its in-flight calls and queued replies.
const CLOSE_GRACE: Duration = Duration::from_secs(10);
/// How long a connection the daemon's stop is closing still reads (and answers
/// `shutting_down`) once its calls are answered: the gap between two calls of one command.
const STOP_LINGER: Duration = Duration::from_millis(500);
/// How long unsubscriptions wait for a subscription call to settle. A bound only: a handler
/// future dropped before its first poll (runtime shutdown) never signals.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// What one local client may hold of the daemon: it must not be able to exhaust it for the
/// others (memory, file descriptors, the runtime).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Requests of one connection being handled at once; past it the connection is not read
    /// until one finishes (the client's writes then block: backpressure, not memory).
    pub in_flight_per_connection: usize,
    /// Bytes of unfinished request lines held across all connections. Past it, of the
    /// connections holding more than [`framing::SMALL_PARTIAL`] of them the one whose line
    /// was begun the longest ago is told so and closed.
    pub partial_line_budget: usize,
    /// Connections open at once. Past it, the connection idle the longest (nothing in flight,
    /// no subscription) is closed to make room; when none is idle the new one gets `busy`.
    pub max_connections: usize,
    /// A connection that sends nothing and has no call in flight and no subscription for this
    /// long is closed.
    pub idle_timeout: Duration,
}

impl Limits {
    /// Connections that may hold a subscription at once: half of [`Limits::max_connections`].
    /// A subscribed connection is never idle, so never closed to make room; without this bound
    /// idle subscriptions could take every slot and lock the calls of every other client out.
    pub fn max_subscribed(&self) -> usize {
        (self.max_connections / 2).max(1)
    }
}

/// How many connections hold a subscription now, against [`Limits::max_subscribed`].
struct Subscribed {
    max: usize,
    /// Subscribed connections, and of each connection its live subscriptions (under one lock).
    count: std::sync::Mutex<usize>,
}

/// A subscription's share of its connection's place among the subscribed ones, put in the
/// subscription call's extensions: the handler owns it for as long as the subscription lives
/// (clones share it), and the connection gives its place back with its last subscription.
#[derive(Clone)]
struct SubscribedPlace(
    #[allow(dead_code, reason = "held, never read: dropping the last clone gives the place back")] Arc<PlaceHeld>,
);

struct PlaceHeld {
    all: Arc<Subscribed>,
    /// This connection's live subscriptions, changed only under `all.count`'s lock.
    live: Arc<AtomicUsize>,
}

impl Subscribed {
    /// A place for one more subscription of the connection whose live count is `live`; none
    /// when it holds none yet and the subscribed connections are already at the bound.
    fn take(self: &Arc<Self>, live: &Arc<AtomicUsize>) -> Option<SubscribedPlace> {
        let mut count = crate::sync::lock(&self.count);
        if live.load(Ordering::Relaxed) == 0 {
            if *count >= self.max {
                return None;
            }
            *count += 1;
        }
        live.fetch_add(1, Ordering::Relaxed);
        Some(SubscribedPlace(Arc::new(PlaceHeld { all: self.clone(), live: live.clone() })))
    }
}

impl Drop for PlaceHeld {
    fn drop(&mut self) {
        let mut count = crate::sync::lock(&self.all.count);
        if self.live.fetch_sub(1, Ordering::Relaxed) == 1 {
            *count -= 1;
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            in_flight_per_connection: 64,
            partial_line_budget: 64 * 1024 * 1024,
            max_connections: 1024,
            idle_timeout: Duration::from_secs(600),
        }
    }
}

/// Accept connections until `shutdown` fires, then let every connection finish. `ours`: the
/// listening socket is this daemon's alone (bound by it, not a service manager's), so at the
/// stop it refuses new connections at once (`ECONNREFUSED`, which a client calls unreachable,
/// and may start a new daemon for) and those the kernel queued before that are taken and
/// answered `shutting_down`, never reset when the socket closes with them unaccepted.
pub async fn serve(listener: UnixListener, methods: Methods, shutdown: CancellationToken, limits: Limits, ours: bool) {
    let connections = TaskTracker::new();
    let next_conn_id = AtomicUsize::new(1);
    let own_uid = nix::unistd::getuid().as_raw();
    let limits = Arc::new(limits);
    let partial_bytes = PartialLines::new(limits.partial_line_budget);
    let idle = Arc::new(IdleConnections::default());
    let subscribed = Arc::new(Subscribed { max: limits.max_subscribed(), count: std::sync::Mutex::new(0) });
    let mut last_accept_warning: Option<tokio::time::Instant> = None;
    let admit = |stream: UnixStream| {
        let conn_id = ConnectionId(next_conn_id.fetch_add(1, Ordering::Relaxed));
        let methods = methods.clone();
        let shutdown = shutdown.clone();
        let (limits, partial_bytes, idle) = (limits.clone(), partial_bytes.clone(), idle.clone());
        let subscribed = subscribed.clone();
        let full = connections.len() >= limits.max_connections && !idle.evict_oldest();
        // A new connection is idle until it sends something; registered here, in
        // order, so a burst of new connections evicts the oldest first.
        let evicted = CancellationToken::new();
        idle.set(conn_id.0, Some(&evicted));
        connections.spawn(async move {
            match stream.peer_cred().map(|cred| cred.uid()) {
                Ok(uid) if uid != own_uid => {
                    let message = format!("connection refused: peer uid {uid} is not the daemon's uid {own_uid}");
                    let error = RpcError::new(ErrorKind::PeerRefused, message)
                        .with_hint("each user runs their own scafld daemon; connect to the socket of your own daemon");
                    info!("refused a connection from uid {uid}");
                    refuse(stream, error).await
                }
                Ok(_) if full => {
                    let error = RpcError::new(
                        ErrorKind::Busy,
                        format!("the daemon already serves {} connections", limits.max_connections),
                    )
                    .with_hint("close idle connections, or retry in a moment");
                    refuse(stream, error).await
                }
                Ok(_) => {
                    let conn = ConnectionLimits { limits, partial_bytes, idle: idle.clone(), evicted, subscribed };
                    serve_connection(stream, methods, conn_id, shutdown, conn).await
                }
                Err(e) => warn!("could not read peer credentials: {e}"),
            }
            idle.set(conn_id.0, None);
        });
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => admit(stream),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning, and say so once a
                    // minute rather than on every try.
                    let now = tokio::time::Instant::now();
                    if last_accept_warning.is_none_or(|at| now - at >= Duration::from_secs(60)) {
                        warn!("accept failed (connections open: {}): {e}", connections.len());
                        last_accept_warning = Some(now);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    if ours {
        // From now on a connect is refused (a shut-down listening socket takes no more),
        // though the socket stays open until the process ends (`main` holds it too).
        use std::os::fd::AsRawFd;
        if let Err(e) = nix::sys::socket::shutdown(listener.as_raw_fd(), nix::sys::socket::Shutdown::Read) {
            warn!("cannot refuse new connections while stopping: {e}");
        }
        // What was queued before, taken by plain non-blocking accepts (no readiness to wait
        // for), and answered `shutting_down` (the connection sees the stop).
        if let Ok(listener) = listener.into_std() {
            while let Ok((stream, _)) = listener.accept() {
                match stream.set_nonblocking(true).and_then(|()| UnixStream::from_std(stream)) {
                    Ok(stream) => admit(stream),
                    Err(e) => warn!("cannot answer a connection queued before the stop: {e}"),
                }
            }
        }
        return connections_end(connections).await;
    }
    drop(listener);
    connections_end(connections).await;
}

/// Wait for every connection to finish, none accepted after this.
async fn connections_end(connections: TaskTracker) {
    connections.close();
    connections.wait().await;
}

/// Answer a connection with one error and close it.
async fn refuse(mut stream: UnixStream, error: RpcError) {
    // Read what the peer sent first (bounded), so closing does not reset the connection
    // before our answer is read.
    let mut first = Vec::new();
    let mut limited = (&mut stream).take(64 * 1024);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut reader = tokio::io::BufReader::new(&mut limited);
        reader.read_until(b'\n', &mut first).await
    })
    .await;
    let reply = MethodResponse::error(Id::Null, ErrorObjectOwned::from(error)).into_json();
    let _ = stream.write_all(format!("{}\n", reply.get()).as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Cancelled when the peer of a call's connection has gone (put in each call's extensions),
/// so that long polls such as `worker.claim` stop instead of claiming work for nobody.
#[derive(Clone)]
pub struct PeerGone(pub CancellationToken);

/// Put in a subscription call's extensions; the subscription handler drops the guard from
/// [`SubscriptionSettled::guard`] once `accept` or `reject` has returned.
///
/// jsonrpsee writes the subscription id to the client *before* it registers the subscription for
/// unsubscription, so a client that unsubscribes at once could be told the id is unknown. The
/// connection holds unsubscriptions back until every subscription call in progress has settled.
#[derive(Clone)]
pub struct SubscriptionSettled(CancellationToken);

impl SubscriptionSettled {
    pub fn guard(&self) -> tokio_util::sync::DropGuard {
        self.0.clone().drop_guard()
    }
}

struct Connection {
    closed: CancellationToken,
    methods: Methods,
    sink: MethodSink,
    conn_id: ConnectionId,
    subscriptions: BoundedSubscriptions,
    /// Places among the subscribed connections, and this connection's live subscriptions.
    subscribed: Arc<Subscribed>,
    live_subscriptions: Arc<AtomicUsize>,
    /// Subscription calls hold it shared until settled; unsubscriptions take it exclusively.
    subscribing: tokio::sync::RwLock<()>,
    id_provider: Arc<dyn IdProvider>,
    /// Request ids jsonrpsee cannot carry, dispatched under tokens (see [`ids`]).
    ids: Arc<IdSwaps>,
}

/// The limits one connection works under, with the count of partial-line bytes it shares.
struct ConnectionLimits {
    limits: Arc<Limits>,
    partial_bytes: Arc<PartialLines>,
    idle: Arc<IdleConnections>,
    /// Cancelled when the connection is closed to make room for a new one.
    evicted: CancellationToken,
    subscribed: Arc<Subscribed>,
}

/// The connections idle now (nothing in flight, no subscription), with when they went idle
/// and how to close them: when the daemon is full, the one idle longest makes room.
#[derive(Default)]
struct IdleConnections(std::sync::Mutex<std::collections::HashMap<usize, (tokio::time::Instant, CancellationToken)>>);

impl IdleConnections {
    fn set(&self, conn: usize, evict: Option<&CancellationToken>) {
        let mut idle = crate::sync::lock(&self.0);
        match evict {
            // An evicted connection on its way out does not come back.
            Some(token) if !token.is_cancelled() => {
                idle.entry(conn).or_insert_with(|| (tokio::time::Instant::now(), token.clone()));
            }
            Some(_) => {}
            None => {
                idle.remove(&conn);
            }
        }
    }

    /// Close the connection idle the longest; false when none is idle.
    fn evict_oldest(&self) -> bool {
        let mut idle = crate::sync::lock(&self.0);
        let Some(oldest) = idle.iter().min_by_key(|(_, (since, _))| *since).map(|(conn, _)| *conn) else {
            return false;
        };
        if let Some((_, token)) = idle.remove(&oldest) {
            token.cancel();
        }
        true
    }
}

/// How a connection's read loop ended.
#[derive(PartialEq, Eq)]
enum Ending {
    /// The peer stopped sending, went idle, was evicted or cannot be written to.
    Connection,
    /// The daemon is shutting down.
    Daemon,
}

/// A call's reply ready to be written, with whom to tell once it has been.
type Reply = (Box<RawValue>, Option<MethodResponseNotifyTx>);

/// One connection is one task: it reads request lines, polls the calls in flight and writes
/// their replies and the subscriptions' notifications itself. A call hops no thread of its own
/// (profiled: a task per line and a writer task behind a queue cost a status call about six
/// context switches). Nothing in the loop awaits a write: replies wait in the [`Outbox`] and go
/// out when the socket takes them, so a peer that does not read holds back only its own
/// requests, never a call already running (nor the locks it holds).
async fn serve_connection(
    stream: UnixStream,
    methods: Methods,
    conn_id: ConnectionId,
    shutdown: CancellationToken,
    limits: ConnectionLimits,
) {
    debug!(conn = conn_id.0, "connection opened");
    let (read_half, mut write_half) = stream.into_split();
    // Subscriptions write through this queue; they hold clones of its sender, so more than the
    // connection's own one means the connection is subscribed (and so not idle).
    let (tx, mut notifications) = mpsc::channel::<Box<RawValue>>(OUTBOUND_QUEUE);
    let senders = tx.downgrade();
    let conn = Arc::new(Connection {
        closed: CancellationToken::new(),
        methods,
        sink: MethodSink::new_with_limit(tx, MAX_RESPONSE_BYTES),
        conn_id,
        subscriptions: BoundedSubscriptions::new(MAX_SUBSCRIPTIONS_PER_CONNECTION),
        subscribed: limits.subscribed.clone(),
        live_subscriptions: Arc::new(AtomicUsize::new(0)),
        subscribing: tokio::sync::RwLock::new(()),
        id_provider: Arc::new(RandomIntegerIdProvider),
        ids: Arc::new(IdSwaps::default()),
    });
    let ids = conn.ids.clone();
    let mut out = Outbox::default();
    let mut calls = FuturesUnordered::new();
    let line_dropped = CancellationToken::new();
    let decoder =
        LineDecoder::new(MAX_REQUEST_LINE_BYTES).with_shared_budget(limits.partial_bytes.clone(), line_dropped.clone());
    let mut frames = FramedRead::new(read_half, decoder);
    let (idle_timeout, in_flight_cap) = (limits.limits.idle_timeout, limits.limits.in_flight_per_connection);
    let evicted = limits.evicted.clone();
    let ending = loop {
        // Lines waiting in the outbox do not count: a peer that reads none of them is idle.
        let is_idle = calls.is_empty() && senders.strong_count() <= 1;
        limits.idle.set(conn_id.0, is_idle.then_some(&evicted));
        tokio::select! {
            // Work first, so that what it produced goes out in one write when none is ready.
            biased;
            _ = shutdown.cancelled() => break Ending::Daemon,
            _ = evicted.cancelled() => {
                info!(conn = conn_id.0, "closing the longest idle connection to make room for a new one");
                break Ending::Connection;
            }
            // Its unfinished line was dropped to make room for a newer one's.
            _ = line_dropped.cancelled() => {
                out.push(line_dropped_reply());
                break Ending::Connection;
            }
            Some(reply) = calls.next(), if !calls.is_empty() => out.push(reply),
            Some(message) = notifications.recv(), if out.has_room() => out.push(Some((ids.restore_queued(message), None))),
            // No more than the cap in flight, and no more read while replies back up.
            frame = frames.next(), if calls.len() < in_flight_cap && out.has_room() => match frame {
                Some(Ok(Frame::Line(line))) => calls.push(conn.clone().handle_line(line)),
                Some(Ok(Frame::OverBudget)) => {
                    out.push(line_dropped_reply());
                    break Ending::Connection;
                }
                Some(Ok(Frame::Oversized)) => {
                    let error = RpcError::new(
                        ErrorKind::OversizedRequest,
                        format!("request line exceeds the {MAX_REQUEST_LINE_BYTES}-byte limit and was discarded"),
                    );
                    out.push(reply(MethodResponse::error(Id::Null, ErrorObjectOwned::from(error))));
                }
                Some(Ok(Frame::NotUtf8)) => {
                    let error = RpcError::new(ErrorKind::ParseError, "parse error: the line is not valid UTF-8");
                    out.push(reply(MethodResponse::error(Id::Null, ErrorObjectOwned::from(error))));
                }
                Some(Err(e)) => {
                    debug!(conn = conn_id.0, "read error: {e}");
                    break Ending::Connection;
                }
                None => break Ending::Connection,
            },
            written = out.write_some(&mut write_half), if out.can_write() => {
                if written.is_err() {
                    break Ending::Connection; // the peer reads no more
                }
            }
            _ = tokio::time::sleep(idle_timeout), if is_idle => {
                info!(conn = conn_id.0, "closing a connection idle for {}s", idle_timeout.as_secs());
                break Ending::Connection;
            }
        }
    };
    // When the daemon stops, the peer may be between two calls of one command (a build's or a
    // review's bounded waits): what it sends while the connection drains, and up to
    // `STOP_LINGER` after its last reply, is read and answered `shutting_down` instead of
    // meeting a closed socket ("Broken pipe"), however the stop fell between its calls.
    // Otherwise the reader goes now and gives its share of the partial-line budget back.
    let mut frames = (ending == Ending::Daemon).then_some(frames);
    limits.idle.set(conn_id.0, None);
    conn.closed.cancel();
    drop(conn);
    // The peer may only have half-closed and still read: the calls in flight finish and their
    // replies are written, with what is queued (bounded). When the daemon stops, subscription
    // tasks end after forwarding the shutdown event, which closes the queue; otherwise what is
    // queued now is written and dropping the queue ends this connection's subscriptions.
    let mut queue_open = ending == Ending::Daemon;
    let mut quiet_from = tokio::time::Instant::now();
    let drained = tokio::time::timeout(CLOSE_GRACE, async {
        loop {
            if !queue_open {
                while let Ok(message) = notifications.try_recv() {
                    out.push(Some((ids.restore_queued(message), None)));
                }
            }
            let lingering = frames.is_some() && quiet_from.elapsed() < STOP_LINGER;
            if calls.is_empty() && !queue_open && !out.can_write() && !lingering {
                break;
            }
            tokio::select! {
                biased;
                Some(reply) = calls.next(), if !calls.is_empty() => {
                    out.push(reply);
                    quiet_from = tokio::time::Instant::now();
                }
                message = notifications.recv(), if queue_open => match message {
                    Some(message) => out.push(Some((ids.restore_queued(message), None))),
                    None => queue_open = false,
                },
                written = out.write_some(&mut write_half), if out.can_write() => {
                    if written.is_err() {
                        queue_open = false;
                        frames = None;
                    }
                }
                frame = next_frame(&mut frames), if out.has_room() => match frame {
                    Some(Ok(Frame::Line(line))) => {
                        out.push(refused_while_stopping(&line, &ids));
                        quiet_from = tokio::time::Instant::now();
                    }
                    // Anything else (the peer's EOF, a bad line): nothing more is read.
                    _ => frames = None,
                },
                _ = tokio::time::sleep_until(quiet_from + STOP_LINGER), if lingering => {}
            }
        }
    })
    .await;
    drop(frames);
    if drained.is_err() && !calls.is_empty() {
        tokio::spawn(async move { while calls.next().await.is_some() {} });
    }
    debug!(conn = conn_id.0, "connection closed");
}

/// The answer to a connection whose unfinished line was dropped over the shared budget.
fn line_dropped_reply() -> Option<Reply> {
    let error = RpcError::new(
        ErrorKind::Busy,
        "the daemon holds too many unfinished request lines; this connection's, begun the longest ago, was dropped",
    )
    .with_hint("send each request as one line ending in a newline, without pausing inside it");
    reply(MethodResponse::error(Id::Null, ErrorObjectOwned::from(error)))
}

/// The next frame of a reader still kept; never, once it is gone.
async fn next_frame(
    frames: &mut Option<FramedRead<OwnedReadHalf, LineDecoder>>,
) -> Option<Result<Frame, std::io::Error>> {
    match frames {
        Some(frames) => frames.next().await,
        None => std::future::pending().await,
    }
}

/// The answer to a request read once the daemon began to stop: `shutting_down`, as every
/// handler would give (see `rpc::api`), without dispatching it; none to a notification.
fn refused_while_stopping(line: &str, ids: &IdSwaps) -> Option<Reply> {
    let swapped = ids.swap(line.trim());
    let line = swapped.as_ref().map_or(line.trim(), |swapped| swapped.line.as_str());
    let object = serde_json::from_str::<std::collections::HashMap<String, Box<RawValue>>>(line).ok()?;
    let id = object.get("id")?;
    let id = serde_json::from_str::<Id<'_>>(id.get()).map(Id::into_owned).unwrap_or(Id::Null);
    let error = RpcError::not_started_while_stopping();
    restored(ids, swapped.as_ref(), reply(MethodResponse::error(id, ErrorObjectOwned::from(error))))
}

/// Whole reply and notification lines waiting to be written, in order. The connection writes
/// them when the socket takes bytes, as many lines at once as are ready (one `writev`).
#[derive(Default)]
struct Outbox {
    lines: VecDeque<(Vec<u8>, Option<MethodResponseNotifyTx>)>,
    /// Bytes of the first line already written.
    sent: usize,
    /// A write failed: the peer reads no more, and lines are dropped instead of queued.
    broken: bool,
}

impl Outbox {
    /// Lines written in one go, at most.
    const BATCH: usize = 64;

    fn push(&mut self, reply: Option<Reply>) {
        let Some((json, notify)) = reply else { return };
        if self.broken {
            if let Some(notify) = notify {
                notify.notify(false);
            }
            return;
        }
        let mut line = Vec::with_capacity(json.get().len() + 1);
        line.extend_from_slice(json.get().as_bytes());
        line.push(b'\n');
        self.lines.push_back((line, notify));
    }

    fn can_write(&self) -> bool {
        !self.broken && !self.lines.is_empty()
    }

    /// Whether more may be taken on: past [`OUTBOUND_QUEUE`] lines the connection reads no
    /// more requests and takes no more notifications until the peer reads (backpressure).
    fn has_room(&self) -> bool {
        self.lines.len() < OUTBOUND_QUEUE
    }

    /// Write what the socket takes now. Cancel-safe: a write that has not completed wrote
    /// nothing. An error (or a socket that takes nothing) breaks the outbox.
    async fn write_some(&mut self, socket: &mut OwnedWriteHalf) -> std::io::Result<()> {
        let slices: Vec<IoSlice<'_>> = self
            .lines
            .iter()
            .take(Self::BATCH)
            .enumerate()
            .map(|(i, (line, _))| IoSlice::new(if i == 0 { &line[self.sent..] } else { line }))
            .collect();
        let written = match socket.write_vectored(&slices).await {
            Ok(0) => Err(std::io::Error::from(std::io::ErrorKind::WriteZero)),
            other => other,
        };
        let mut written = match written {
            Ok(n) => n,
            Err(e) => {
                self.broken = true;
                for (_, notify) in self.lines.drain(..) {
                    if let Some(notify) = notify {
                        notify.notify(false);
                    }
                }
                return Err(e);
            }
        };
        while let Some((line, _)) = self.lines.front() {
            let left = line.len() - self.sent;
            if written < left {
                self.sent += written;
                break;
            }
            written -= left;
            self.sent = 0;
            if let Some((_, Some(notify))) = self.lines.pop_front() {
                notify.notify(true);
            }
        }
        Ok(())
    }
}

impl Connection {
    /// Handle one request line; its reply, if it gets one here. Subscription replies were
    /// already written by `accept`/`reject`, and notifications get none.
    async fn handle_line(self: Arc<Self>, line: String) -> Option<Reply> {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return None;
        }
        if trimmed.starts_with('[') {
            let error = RpcError::new(ErrorKind::InvalidRequest, "batch requests are not supported")
                .with_hint("send one request per line; requests on one connection may be pipelined");
            return reply(MethodResponse::error(Id::Null, ErrorObjectOwned::from(error)));
        }
        // An id jsonrpsee cannot carry (a negative number, say) is dispatched under a token
        // and put back, as written, into the reply.
        let parsed = serde_json::from_str::<Request>(trimmed);
        let carried = parsed.as_ref().is_ok_and(|request| !ids::reserved(&request.id));
        let swapped = if carried { None } else { self.ids.swap(trimmed) };
        let response = match &swapped {
            None => self.respond(trimmed, parsed).await,
            Some(swapped) => {
                drop(parsed);
                self.respond(&swapped.line, serde_json::from_str(&swapped.line)).await
            }
        };
        restored(&self.ids, swapped.as_ref(), reply(response?))
    }

    /// The response to the request `trimmed`, read as `parsed`; none to a notification.
    async fn respond(&self, trimmed: &str, parsed: Result<Request<'_>, serde_json::Error>) -> Option<MethodResponse> {
        let response = match parsed {
            Ok(request) => {
                // A bug in a handler must cost its caller an error, not a reply that never
                // comes, and must not touch any other call.
                let id = request.id().into_owned();
                let method = request.method_name().to_string();
                match std::panic::AssertUnwindSafe(self.dispatch(request)).catch_unwind().await {
                    Ok(response) => response,
                    Err(_) => {
                        tracing::error!(method, "a handler panicked");
                        let error = RpcError::new(
                            ErrorKind::Internal,
                            format!("the daemon hit a bug handling `{method}`; nothing else was affected"),
                        )
                        .with_hint("the daemon's log has the details; please report it");
                        MethodResponse::error(id, ErrorObjectOwned::from(error))
                    }
                }
            }
            Err(parse_error) => {
                // A notification has no `id` at all; one with an `id` that is not a string, a
                // number or null (an object, say) is an invalid request and gets an answer.
                // Values kept raw: an id such as `1e400`, a number no f64 holds, is still an id.
                let object = serde_json::from_str::<std::collections::HashMap<String, Box<RawValue>>>(trimmed).ok();
                let has_id = object.as_ref().is_some_and(|object| object.contains_key("id"));
                if !has_id && serde_json::from_str::<Notification<Option<&RawValue>>>(trimmed).is_ok() {
                    return None; // Notifications get no reply, by the JSON-RPC spec.
                }
                let invalid = |id| {
                    MethodResponse::error(
                        id,
                        ErrorObjectOwned::from(RpcError::new(
                            ErrorKind::InvalidRequest,
                            format!("not a JSON-RPC 2.0 request: {parse_error}"),
                        )),
                    )
                };
                match serde_json::from_str::<InvalidRequest>(trimmed) {
                    Ok(InvalidRequest { id }) => invalid(id),
                    // Valid JSON with an unusable id (an object, say): answered with a null id.
                    Err(_) if object.is_some() => invalid(Id::Null),
                    Err(_) => MethodResponse::error(
                        Id::Null,
                        ErrorObjectOwned::from(RpcError::new(
                            ErrorKind::ParseError,
                            format!("parse error: {parse_error}"),
                        )),
                    ),
                }
            }
        };
        Some(response)
    }

    async fn dispatch(&self, request: Request<'_>) -> MethodResponse {
        let id = request.id().into_owned();
        let params = request.params().into_owned();
        let mut extensions = Extensions::new();
        extensions.insert(PeerGone(self.closed.clone()));
        let max = MAX_RESPONSE_BYTES as usize;
        let Some((_, callback)) = self.methods.method_with_name(request.method_name()) else {
            let error = RpcError::new(ErrorKind::MethodNotFound, format!("unknown method `{}`", request.method_name()))
                .with_hint("method names look like `daemon.status`; see the protocol crate for the list");
            return MethodResponse::error(id, ErrorObjectOwned::from(error));
        };
        match callback {
            MethodCallback::Sync(call) => call(id, params, max, extensions),
            MethodCallback::Async(call) => call(id, params, self.conn_id, max, extensions).await,
            MethodCallback::Subscription(call) => {
                let Some(permit) = self.subscriptions.acquire() else {
                    let error = RpcError::new(
                        ErrorKind::Busy,
                        format!("this connection already holds {MAX_SUBSCRIPTIONS_PER_CONNECTION} subscriptions"),
                    );
                    return MethodResponse::error(id, ErrorObjectOwned::from(error));
                };
                let Some(place) = self.subscribed.take(&self.live_subscriptions) else {
                    let error = RpcError::new(
                        ErrorKind::Busy,
                        format!(
                            "the daemon already serves {} connections holding a subscription, half of its --max-connections",
                            self.subscribed.max
                        ),
                    )
                    .with_hint("close a subscribed connection you no longer read, or subscribe again on one that already holds a subscription");
                    return MethodResponse::error(id, ErrorObjectOwned::from(error));
                };
                extensions.insert(place);
                let _settling = self.subscribing.read().await;
                let settled = CancellationToken::new();
                extensions.insert(SubscriptionSettled(settled.clone()));
                let state = SubscriptionState {
                    conn_id: self.conn_id,
                    id_provider: &*self.id_provider,
                    subscription_permit: permit,
                };
                let response = call(id, params, self.sink.clone(), state, extensions).await;
                let _ = tokio::time::timeout(SETTLE_LIMIT, settled.cancelled()).await;
                response
            }
            MethodCallback::Unsubscription(call) => {
                // jsonrpsee answers `false` (no such subscription) to params it cannot read;
                // those are refused as every other method refuses bad params.
                if let Err(problem) = unsubscribe_params(params.as_str()) {
                    let error = RpcError::new(
                        ErrorKind::InvalidParams,
                        format!("invalid params for `{}`: {problem}", request.method_name()),
                    )
                    .with_hint("pass the id `events.subscribe` returned as the one positional param: [ID]");
                    return MethodResponse::error(id, ErrorObjectOwned::from(error));
                }
                let _settled = self.subscribing.write().await;
                call(id, params, self.conn_id, max, extensions)
            }
        }
    }
}

/// Whether `params` are what an unsubscription takes: one subscription id (a string or an
/// integer) in an array; else what is wrong with them.
fn unsubscribe_params(params: Option<&str>) -> Result<(), String> {
    let Some(params) = params else {
        return Err("the subscription id is missing".to_string());
    };
    match serde_json::from_str::<serde_json::Value>(params) {
        Ok(serde_json::Value::Array(items)) => match items.as_slice() {
            [serde_json::Value::String(_)] => Ok(()),
            [serde_json::Value::Number(n)] if n.is_u64() => Ok(()),
            [other] => Err(format!("a subscription id is a string or a non-negative integer, not {other}")),
            _ => Err(format!("expected one subscription id, got {} params", items.len())),
        },
        Ok(other) => Err(format!("expected an array holding the subscription id, got {other}")),
        Err(e) => Err(format!("params are not JSON: {e}")),
    }
}

/// `reply` with the id of the `swapped` request put back, if it was swapped.
fn restored(ids: &IdSwaps, swapped: Option<&Swapped>, reply: Option<Reply>) -> Option<Reply> {
    match (swapped, reply) {
        (Some(swapped), Some((json, notify))) => Some((ids.restore(swapped, json), notify)),
        (_, reply) => reply,
    }
}

fn reply(response: MethodResponse) -> Option<Reply> {
    let (json, notify, _) = response.is_method_call().then(|| response.into_parts())?;
    Some((json, notify))
}
