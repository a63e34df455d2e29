//! Newline-delimited JSON-RPC 2.0 over a Unix socket, dispatched into jsonrpsee [`Methods`].
//!
//! jsonrpsee ships no IPC transport, so this module does what its own server does per connection:
//! frame lines, parse requests, call the registered [`MethodCallback`]s and write the replies.
//! Each request line runs in its own task, so pipelined requests proceed concurrently and replies
//! may come back out of order (clients match them by id).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use jsonrpsee::core::id_providers::RandomIntegerIdProvider;
use jsonrpsee::core::server::{
    BoundedSubscriptions, ConnectionId, Extensions, MethodCallback, MethodResponse, MethodSink, Methods,
    SubscriptionState,
};
use jsonrpsee::core::traits::IdProvider;
use jsonrpsee::types::{ErrorObjectOwned, Id, InvalidRequest, Notification, Request};
use scafld_protocol::{ErrorKind, MAX_REQUEST_LINE_BYTES};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::error::RpcError;
use crate::rpc::framing::{Frame, LineDecoder};

/// Replies and notifications queued per connection before a slow reader stalls its senders.
const OUTBOUND_QUEUE: usize = 256;
/// Subscriptions one connection may hold.
const MAX_SUBSCRIPTIONS_PER_CONNECTION: u32 = 64;
/// Largest single reply.
const MAX_RESPONSE_BYTES: u32 = 64 * 1024 * 1024;
/// How long a closing connection waits for its in-flight calls and queued replies.
const CLOSE_GRACE: Duration = Duration::from_secs(10);
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
    /// Bytes of unfinished request lines held across all connections. Past it, a connection
    /// holding more than [`framing::SMALL_PARTIAL`] of them is told so and closed.
    pub partial_line_budget: usize,
    /// Connections open at once. Past it, the connection idle the longest (nothing in flight,
    /// no subscription) is closed to make room; when none is idle the new one gets `busy`.
    pub max_connections: usize,
    /// A connection that sends nothing and has no call in flight and no subscription for this
    /// long is closed.
    pub idle_timeout: Duration,
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

/// Accept connections until `shutdown` fires, then let every connection finish.
pub async fn serve(listener: UnixListener, methods: Methods, shutdown: CancellationToken, limits: Limits) {
    let connections = TaskTracker::new();
    let next_conn_id = AtomicUsize::new(1);
    let own_uid = nix::unistd::getuid().as_raw();
    let limits = Arc::new(limits);
    let partial_bytes = Arc::new(AtomicUsize::new(0));
    let idle = Arc::new(IdleConnections::default());
    let mut last_accept_warning: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let conn_id = ConnectionId(next_conn_id.fetch_add(1, Ordering::Relaxed));
                    let methods = methods.clone();
                    let shutdown = shutdown.clone();
                    let (limits, partial_bytes, idle) = (limits.clone(), partial_bytes.clone(), idle.clone());
                    let full = connections.len() >= limits.max_connections && !idle.evict_oldest();
                    // A new connection is idle until it sends something; registered here, in
                    // order, so a burst of new connections evicts the oldest first.
                    let evicted = CancellationToken::new();
                    idle.set(conn_id.0, Some(&evicted));
                    connections.spawn(async move {
                        match stream.peer_cred().map(|cred| cred.uid()) {
                            Ok(uid) if uid != own_uid => {
                                let message = format!("connection refused: peer uid {uid} is not the daemon's uid {own_uid}");
                                let error = RpcError::new(ErrorKind::PeerRefused, message).with_hint(
                                    "each user runs their own scafld daemon; connect to the socket of your own daemon",
                                );
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
                                let conn = ConnectionLimits { limits, partial_bytes, idle: idle.clone(), evicted };
                                serve_connection(stream, methods, conn_id, shutdown, conn).await
                            }
                            Err(e) => warn!("could not read peer credentials: {e}"),
                        }
                        idle.set(conn_id.0, None);
                    });
                }
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
    drop(listener);
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
    /// Subscription calls hold it shared until settled; unsubscriptions take it exclusively.
    subscribing: tokio::sync::RwLock<()>,
    id_provider: Arc<dyn IdProvider>,
}

/// The limits one connection works under, with the count of partial-line bytes it shares.
struct ConnectionLimits {
    limits: Arc<Limits>,
    partial_bytes: Arc<AtomicUsize>,
    idle: Arc<IdleConnections>,
    /// Cancelled when the connection is closed to make room for a new one.
    evicted: CancellationToken,
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

async fn serve_connection(
    stream: UnixStream,
    methods: Methods,
    conn_id: ConnectionId,
    shutdown: CancellationToken,
    limits: ConnectionLimits,
) {
    debug!(conn = conn_id.0, "connection opened");
    let (read_half, write_half) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Box<RawValue>>(OUTBOUND_QUEUE);
    // Subscriptions hold clones of the sender: more than the connection's own one means the
    // connection is subscribed (and so not idle).
    let senders = tx.downgrade();
    let drain = CancellationToken::new();
    let mut writer = tokio::spawn(write_lines(rx, write_half, drain.clone()));
    let conn = Arc::new(Connection {
        closed: CancellationToken::new(),
        methods,
        sink: MethodSink::new_with_limit(tx, MAX_RESPONSE_BYTES),
        conn_id,
        subscriptions: BoundedSubscriptions::new(MAX_SUBSCRIPTIONS_PER_CONNECTION),
        subscribing: tokio::sync::RwLock::new(()),
        id_provider: Arc::new(RandomIntegerIdProvider),
    });

    let in_flight = TaskTracker::new();
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.limits.in_flight_per_connection));
    let decoder = LineDecoder::new(MAX_REQUEST_LINE_BYTES)
        .with_shared_budget(limits.partial_bytes.clone(), limits.limits.partial_line_budget);
    let mut frames = FramedRead::new(read_half, decoder);
    let idle_timeout = limits.limits.idle_timeout;
    let evicted = limits.evicted.clone();
    // Signalled as each call finishes, so that idleness is judged again.
    let finished = Arc::new(tokio::sync::Notify::new());
    let daemon_stopping = loop {
        // No more than the cap in flight: wait for a slot before reading the next request.
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break true,
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let idle = tokio::time::sleep(idle_timeout);
        // Nothing in flight: every permit but the one just taken is free (a call gives its
        // permit back before it signals `finished`, so the two agree).
        let calls_in_flight = limits.limits.in_flight_per_connection - 1 - permits.available_permits();
        let is_idle = calls_in_flight == 0 && senders.strong_count() <= 1;
        limits.idle.set(conn_id.0, is_idle.then_some(&evicted));
        tokio::select! {
            _ = shutdown.cancelled() => break true,
            _ = idle, if is_idle => {
                info!(conn = conn_id.0, "closing a connection idle for {}s", idle_timeout.as_secs());
                break false;
            }
            _ = evicted.cancelled() => {
                info!(conn = conn_id.0, "closing the longest idle connection to make room for a new one");
                break false;
            }
            _ = finished.notified(), if !is_idle => continue,
            frame = frames.next() => match frame {
                Some(Ok(Frame::Line(line))) => {
                    let (conn, finished) = (conn.clone(), finished.clone());
                    in_flight.spawn(async move {
                        conn.handle_line(line).await;
                        drop(permit);
                        finished.notify_one();
                    });
                }
                Some(Ok(Frame::OverBudget)) => {
                    let error = RpcError::new(
                        ErrorKind::Busy,
                        "the daemon holds too many unfinished request lines; this connection's was dropped",
                    )
                    .with_hint("send each request as one line ending in a newline");
                    conn.send(MethodResponse::error(Id::Null, ErrorObjectOwned::from(error))).await;
                    break false;
                }
                Some(Ok(Frame::Oversized)) => {
                    let error = RpcError::new(
                        ErrorKind::OversizedRequest,
                        format!("request line exceeds the {MAX_REQUEST_LINE_BYTES}-byte limit and was discarded"),
                    );
                    conn.send(MethodResponse::error(Id::Null, ErrorObjectOwned::from(error))).await;
                }
                Some(Ok(Frame::NotUtf8)) => {
                    let error = RpcError::new(ErrorKind::ParseError, "parse error: the line is not valid UTF-8");
                    conn.send(MethodResponse::error(Id::Null, ErrorObjectOwned::from(error))).await;
                }
                Some(Err(e)) => {
                    debug!(conn = conn_id.0, "read error: {e}");
                    break false;
                }
                None => break false,
            },
        }
    };
    drop(frames); // gives its share of the partial-line budget back
    limits.idle.set(conn_id.0, None);
    conn.closed.cancel();
    in_flight.close();
    let _ = tokio::time::timeout(CLOSE_GRACE, in_flight.wait()).await;
    drop(conn);
    if !daemon_stopping {
        // The peer stopped sending (it may only have half-closed and still read): write what is
        // queued, then stop; the writer dropping the queue ends this connection's subscriptions.
        // When the daemon stops, subscription tasks end after forwarding the shutdown event.
        drain.cancel();
    }
    if tokio::time::timeout(CLOSE_GRACE, &mut writer).await.is_err() {
        writer.abort();
    }
    debug!(conn = conn_id.0, "connection closed");
}

/// Write queued messages as lines until every sender is gone, or until `drain` fires: then
/// write what is already queued and stop.
async fn write_lines(mut rx: mpsc::Receiver<Box<RawValue>>, write_half: OwnedWriteHalf, drain: CancellationToken) {
    let mut out = BufWriter::new(write_half);
    loop {
        let message = tokio::select! {
            biased;
            message = rx.recv() => message,
            _ = drain.cancelled() => rx.try_recv().ok(),
        };
        let Some(message) = message else { break };
        if out.write_all(message.get().as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err() {
            return;
        }
        if rx.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.flush().await;
}

impl Connection {
    async fn handle_line(&self, line: String) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return;
        }
        if trimmed.starts_with('[') {
            let error = RpcError::new(ErrorKind::InvalidRequest, "batch requests are not supported")
                .with_hint("send one request per line; requests on one connection may be pipelined");
            return self.send(MethodResponse::error(Id::Null, ErrorObjectOwned::from(error))).await;
        }
        let response = match serde_json::from_str::<Request>(trimmed) {
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
                let object = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(trimmed).ok();
                let has_id = object.as_ref().is_some_and(|object| object.contains_key("id"));
                if !has_id && serde_json::from_str::<Notification<Option<&RawValue>>>(trimmed).is_ok() {
                    return; // Notifications get no reply, by the JSON-RPC spec.
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
        self.send(response).await;
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
                let _settled = self.subscribing.write().await;
                call(id, params, self.conn_id, max, extensions)
            }
        }
    }

    /// Queue a reply. Subscription replies were already written by `accept`/`reject`.
    async fn send(&self, response: MethodResponse) {
        if !response.is_method_call() {
            return;
        }
        let (json, notify, _) = response.into_parts();
        let delivered = self.sink.send(json).await.is_ok();
        if let Some(notify) = notify {
            notify.notify(delivered);
        }
    }
}
