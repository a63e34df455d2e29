//! Newline-delimited JSON-RPC 2.0 over a Unix socket, dispatched into jsonrpsee [`Methods`].
//!
//! jsonrpsee ships no IPC transport, so this module does what its own server does per connection:
//! frame lines, parse requests, call the registered [`MethodCallback`]s and write the replies.
//! Each request line runs in its own task, so pipelined requests proceed concurrently and replies
//! may come back out of order (clients match them by id).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
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
const OUTBOUND_QUEUE: usize = 1024;
/// Subscriptions one connection may hold.
const MAX_SUBSCRIPTIONS_PER_CONNECTION: u32 = 64;
/// Largest single reply.
const MAX_RESPONSE_BYTES: u32 = 64 * 1024 * 1024;
/// How long a closing connection waits for its in-flight calls and queued replies.
const CLOSE_GRACE: Duration = Duration::from_secs(10);
/// How long unsubscriptions wait for a subscription call to settle. A bound only: a handler
/// future dropped before its first poll (runtime shutdown) never signals.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// Accept connections until `shutdown` fires, then let every connection finish.
pub async fn serve(listener: UnixListener, methods: Methods, shutdown: CancellationToken) {
    let connections = TaskTracker::new();
    let next_conn_id = AtomicUsize::new(1);
    let own_uid = nix::unistd::getuid().as_raw();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let conn_id = ConnectionId(next_conn_id.fetch_add(1, Ordering::Relaxed));
                    let methods = methods.clone();
                    let shutdown = shutdown.clone();
                    connections.spawn(async move {
                        match stream.peer_cred().map(|cred| cred.uid()) {
                            Ok(uid) if uid == own_uid => serve_connection(stream, methods, conn_id, shutdown).await,
                            Ok(uid) => refuse_peer(stream, uid, own_uid).await,
                            Err(e) => warn!("could not read peer credentials: {e}"),
                        }
                    });
                }
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    drop(listener);
    connections.close();
    connections.wait().await;
}

async fn refuse_peer(mut stream: UnixStream, uid: u32, own_uid: u32) {
    info!("refused a connection from uid {uid}");
    // Read what the peer sent first (bounded), so closing does not reset the connection
    // before our answer is read.
    let mut first = Vec::new();
    let mut limited = (&mut stream).take(64 * 1024);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut reader = tokio::io::BufReader::new(&mut limited);
        reader.read_until(b'\n', &mut first).await
    })
    .await;
    let error = RpcError::new(
        ErrorKind::PeerRefused,
        format!("connection refused: peer uid {uid} is not the daemon's uid {own_uid}"),
    )
    .with_hint("each user runs their own scafld daemon; connect to the socket of your own daemon");
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

async fn serve_connection(stream: UnixStream, methods: Methods, conn_id: ConnectionId, shutdown: CancellationToken) {
    debug!(conn = conn_id.0, "connection opened");
    let (read_half, write_half) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Box<RawValue>>(OUTBOUND_QUEUE);
    let mut writer = tokio::spawn(write_lines(rx, write_half));
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
    let mut frames = FramedRead::new(read_half, LineDecoder::new(MAX_REQUEST_LINE_BYTES));
    let daemon_stopping = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break true,
            frame = frames.next() => match frame {
                Some(Ok(Frame::Line(line))) => {
                    let conn = conn.clone();
                    in_flight.spawn(async move { conn.handle_line(line).await });
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
    conn.closed.cancel();
    in_flight.close();
    let _ = tokio::time::timeout(CLOSE_GRACE, in_flight.wait()).await;
    drop(conn);
    if daemon_stopping {
        // Subscription tasks end after forwarding the shutdown event; the writer then drains.
        if tokio::time::timeout(CLOSE_GRACE, &mut writer).await.is_err() {
            writer.abort();
        }
    } else {
        // The peer hung up: dropping the queue ends every subscription of this connection.
        writer.abort();
    }
    debug!(conn = conn_id.0, "connection closed");
}

async fn write_lines(mut rx: mpsc::Receiver<Box<RawValue>>, write_half: OwnedWriteHalf) {
    let mut out = BufWriter::new(write_half);
    while let Some(message) = rx.recv().await {
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
            Ok(request) => self.dispatch(request).await,
            Err(parse_error) => {
                if serde_json::from_str::<Notification<Option<&RawValue>>>(trimmed).is_ok() {
                    return; // Notifications get no reply, by the JSON-RPC spec.
                }
                match serde_json::from_str::<InvalidRequest>(trimmed) {
                    Ok(InvalidRequest { id }) => MethodResponse::error(
                        id,
                        ErrorObjectOwned::from(RpcError::new(
                            ErrorKind::InvalidRequest,
                            format!("not a JSON-RPC 2.0 request: {parse_error}"),
                        )),
                    ),
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
