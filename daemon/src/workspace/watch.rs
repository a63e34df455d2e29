//! The asynchronous side of the change queue ([`Tripwire`]): wake when the kernel has events
//! for it, read them, and hand the changed paths to the daemon in debounced bursts.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::tripwire::{Change, QueueFd, Tripwire};

/// Quiet period that ends a burst of events (one save is several events).
pub const DEBOUNCE: Duration = Duration::from_millis(20);
/// Longest a burst is held back under a steady stream of events.
pub const MAX_DELAY: Duration = Duration::from_millis(100);

/// Read the queue whenever it is readable, forever: its changes reach the receiver
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

/// Receive one burst: wait for a first change, then collect until [`DEBOUNCE`] passes without
/// a new one or [`MAX_DELAY`] is reached; each change once, in the order first seen. `None`
/// when the channel closed.
pub async fn next_burst(rx: &mut mpsc::UnboundedReceiver<Change>) -> Option<Vec<Change>> {
    let first = rx.recv().await?;
    let (mut seen, mut changes) = (HashSet::from([first.clone()]), vec![first]);
    let deadline = tokio::time::Instant::now() + MAX_DELAY;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        // A steady stream would otherwise hold the burst past its deadline.
        if left.is_zero() {
            return Some(changes);
        }
        match tokio::time::timeout(DEBOUNCE.min(left), rx.recv()).await {
            Ok(Some(change)) => {
                if seen.insert(change.clone()) {
                    changes.push(change);
                }
            }
            Ok(None) | Err(_) => return Some(changes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst holds each change once, in the order first seen (a save is several events for
    /// one path; a folder copied in is thousands, which a list scanned per change made
    /// quadratic).
    #[tokio::test]
    async fn a_burst_holds_each_change_once_in_order() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let change = |name: &str, folder: bool| Change {
            root: "/w".into(),
            path: format!("/w/{name}").into(),
            folder,
            judged: None,
        };
        for c in [change("a", false), change("b", false), change("a", false), change("b", true), change("b", false)] {
            tx.send(c).unwrap();
        }
        drop(tx);
        let burst = next_burst(&mut rx).await.unwrap();
        assert_eq!(burst, vec![change("a", false), change("b", false), change("b", true)]);
        assert_eq!(next_burst(&mut rx).await, None, "the channel closed");
    }
}
