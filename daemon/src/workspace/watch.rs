//! The asynchronous side of the change queue ([`Tripwire`]): wake when the kernel has events
//! for it, read them, and hand the changed paths to the daemon in debounced bursts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::tripwire::{QueueFd, Tripwire};

/// Quiet period that ends a burst of events (one save is several events).
pub const DEBOUNCE: Duration = Duration::from_millis(20);
/// Longest a burst is held back under a steady stream of events.
pub const MAX_DELAY: Duration = Duration::from_millis(100);

/// Read the queue whenever it is readable, forever: its paths reach the receiver
/// [`Tripwire::new`] returned. Ends only if the runtime cannot poll the queue.
pub async fn read_queue(wire: Arc<Tripwire>) -> std::io::Result<()> {
    // SAFETY: `QueueFd` holds the `Tripwire`, which owns the queue's descriptor: it stays open,
    // and the same, for as long as the `AsyncFd` lives.
    let queue = unsafe { AsyncFd::register_with_interest(QueueFd(wire.clone()), Interest::READABLE)? };
    loop {
        let mut ready = queue.readable().await?;
        // Read dry (a whole-workspace read may have taken the events first): the readiness
        // is cleared only as of this wake, so an event queued meanwhile wakes us again.
        wire.read_events();
        ready.clear_ready();
    }
}

/// Receive one burst: wait for a first path, then collect until [`DEBOUNCE`] passes without a
/// new one (or [`MAX_DELAY`] is reached). `None` when the channel closed.
pub async fn next_burst(rx: &mut mpsc::UnboundedReceiver<PathBuf>) -> Option<Vec<PathBuf>> {
    let first = rx.recv().await?;
    let mut paths = vec![first];
    let deadline = tokio::time::Instant::now() + MAX_DELAY;
    loop {
        let wait = DEBOUNCE.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(wait, rx.recv()).await {
            Ok(Some(path)) => {
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
            Ok(None) | Err(_) => return Some(paths),
        }
    }
}
