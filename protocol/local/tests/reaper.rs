//! The runner in a child subreaper (a test binary of its own: being one changes how the whole
//! process's children are reaped): what a run orphans with a cleared environment, out of its
//! group and without its token, dies with the run and is reaped; one that may belong to a run
//! still going waits for that run's end.

use std::time::{Duration, Instant};

use scafld_local::runner::{self, RunRequest};
use tokio_util::sync::CancellationToken;

fn request(command: &str, dir: &std::path::Path) -> RunRequest {
    RunRequest::new(command.into(), dir.to_path_buf(), std::env::vars().collect(), Duration::from_secs(20))
}

/// Live processes (zombies aside) whose command line is `sleep <marker>`.
fn sleepers(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == format!("sleep\0{marker}\0").as_bytes()))
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|pid| pid.parse().ok())
                .and_then(scafld_local::proc::stat)
                .is_some_and(|stat| !stat.is_dead())
        })
        .count()
}

/// Our children (every thread's).
fn children() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .flat_map(|t| {
            let list = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            list.split_whitespace().map(str::to_string).collect::<Vec<_>>()
        })
        .collect()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_run_orphans_dies_with_it_or_with_the_last_run_that_may_have_started_it() {
    scafld_local::reaper::become_subreaper().unwrap();
    tokio::spawn(scafld_local::reaper::reap_forever());
    let dir = tempfile::tempdir().unwrap();
    let escapes = |marker: &str| {
        format!(
            "env -i setsid sleep {marker} </dev/null >/dev/null 2>&1 & env -i sh -c '(setsid sleep {marker} </dev/null >/dev/null 2>&1 &)'; sleep 0.2"
        )
    };

    // Alone: gone once its run has ended, and reaped; the run's own status is intact.
    let outcome = runner::run(request(&escapes("4241"), dir.path()), CancellationToken::new(), |_| {}).await;
    assert_eq!((outcome.exit_code, outcome.kill_reason), (Some(0), None), "{:?}", outcome.stderr.text());
    until("the orphans to be killed", || sleepers("4241") == 0).await;
    until("the orphans to be reaped", || children().is_empty()).await;

    // Beside a run that began first and still goes: which of the two started them is unknown,
    // so they live until that one ends too.
    let go = dir.path().join("go");
    let waits = format!("while [ ! -e {} ]; do sleep 0.02; done", go.display());
    let first = tokio::spawn(runner::run(request(&waits, dir.path()), CancellationToken::new(), |_| {}));
    until("the first run to start", || !children().is_empty()).await;
    let second = runner::run(request(&escapes("4242"), dir.path()), CancellationToken::new(), |_| {}).await;
    assert_eq!(second.exit_code, Some(0));
    until("the orphans to start", || sleepers("4242") == 2).await;
    std::fs::write(&go, "").unwrap();
    assert_eq!(first.await.unwrap().exit_code, Some(0));
    until("the orphans to be killed with the last run", || sleepers("4242") == 0).await;
    until("the orphans to be reaped", || children().is_empty()).await;
}
