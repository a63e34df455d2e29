//! History benchmark: what a long-lived state database costs the daemon. Build steps of 10
//! `true` criteria, each in a task of its own (approve, open the phase, run it), are run one
//! after another; every few hundred steps it prints the daemon's RSS beside its floor, the RSS
//! of a daemon that has run one such step. Then the daemon is
//! stopped and the first call of one started afresh on the whole history (it opens and checks
//! the database before answering) is timed beside the same first call on a one-task history,
//! and its RSS printed after. `SCAFLD_BENCH_STEPS` sets the number of steps (default 2000).
//! Prints figures only.

use std::time::Duration;

use scafld_tests::TestEnv;
use scafld_tests::bench::{self, Stats};

/// The size of the files under `dir`, in MiB.
fn size_mib(dir: &std::path::Path) -> f64 {
    fn bytes(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir).into_iter().flatten().flatten().fold(0, |total, entry| {
            let meta = entry.metadata().unwrap();
            total + if meta.is_dir() { bytes(&entry.path()) } else { meta.len() }
        })
    }
    bytes(dir) as f64 / (1024.0 * 1024.0)
}

/// A workspace whose daemon has run `steps` build steps (tasks `h-0`, `h-1`, ...), calling
/// `every` after each step.
fn history(steps: usize, mut every: impl FnMut(&TestEnv, usize)) -> TestEnv {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    for step in 0..steps {
        let task = format!("h-{step}");
        bench::open_build(&env, &task, 10);
        env.scafld(&["build", &task]).assert_code(0);
        every(&env, step + 1);
    }
    env
}

/// The first call (`status h-0 --json`) of a daemon started afresh on `env`'s database,
/// over [`bench::RUNS`] restarts; and the daemon's RSS after the last.
fn first_call(env: &TestEnv) -> (Stats, f64) {
    let first = bench::sample(bench::RUNS, || {
        env.scafld(&["daemon", "stop"]).assert_code(0);
        bench::time(env.scafld_command(&["status", "h-0", "--json"]))
    });
    (first, bench::rss_mib(env.daemon_pid()))
}

fn main() {
    let steps: usize = std::env::var("SCAFLD_BENCH_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let report_every = (steps / 8).max(1);

    // The floors: a daemon holding a one-step history.
    let small = history(1, |_, _| {});
    let (small_first, small_rss) = first_call(&small);
    println!("floor: a daemon on a one-step history: RSS {small_rss:.1} MiB after its first call");

    let started = std::time::Instant::now();
    let big = history(steps, |env, done| {
        if done % report_every == 0 || done == steps {
            let rss = bench::rss_mib(env.daemon_pid());
            println!(
                "after {done:>6} steps: daemon RSS {rss:.1} MiB ({:+.1} above the floor); database {:.1} MiB",
                rss - small_rss,
                size_mib(&env.path("state"))
            );
        }
    });
    let per_step = started.elapsed() / steps as u32;
    println!("({steps} steps at {:.1} ms each, approve and phase opening included)", ms(per_step));

    let (big_first, big_rss) = first_call(&big);
    bench::report(
        &format!("first call with no daemon, {steps}-step history (status --json)"),
        big_first,
        "the same on a one-step history",
        small_first,
    );
    println!(
        "daemon RSS after that first call: {big_rss:.1} MiB ({:+.1} above a daemon on a one-step history)",
        big_rss - small_rss
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
