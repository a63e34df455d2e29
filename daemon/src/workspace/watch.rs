//! One `notify` watcher for every open workspace. It watches `.scafld/specs/` (recursively: the
//! lifecycle folders and archive months, nothing else) and `.scafld/` itself for the config
//! files, and forwards changed paths, debounced, to the daemon.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// Quiet period that ends a burst of events (one save is several events).
pub const DEBOUNCE: Duration = Duration::from_millis(20);
/// Longest a burst is held back under a steady stream of events.
pub const MAX_DELAY: Duration = Duration::from_millis(100);

pub struct SpecWatcher {
    watcher: Mutex<RecommendedWatcher>,
}

impl SpecWatcher {
    /// Start the watcher; changed paths arrive on the returned channel.
    pub fn start() -> notify::Result<(SpecWatcher, mpsc::UnboundedReceiver<PathBuf>)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if matches!(event.kind, EventKind::Access(_)) {
                return;
            }
            for path in event.paths {
                let _ = tx.send(path);
            }
        })?;
        Ok((SpecWatcher { watcher: Mutex::new(watcher) }, rx))
    }

    pub fn watch_workspace(&self, root: &Path) -> notify::Result<()> {
        let mut watcher = crate::sync::lock(&self.watcher);
        watcher.watch(&root.join(".scafld/specs"), RecursiveMode::Recursive)?;
        watcher.watch(&root.join(".scafld"), RecursiveMode::NonRecursive)
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
