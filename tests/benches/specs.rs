//! Spec benchmark on one generated workspace: whole-process medians of `scafld status <id>
//! --json` and `scafld list --json` with 1000 specs, the same commands of the Python scafld
//! 2.0.0 when `SCAFLD_PY` names its executable (tests/bench/specs.sh installs it), the
//! hand-edit-to-event latency, `list` once 200 of the tasks have ledgers (warm, and the first
//! call of a daemon started afresh), and daemon RSS with 10,000 specs indexed (200 of them
//! with ledgers). Prints figures only.

use std::process::Command;
use std::time::{Duration, Instant};

use scafld_tests::TestEnv;
use scafld_tests::bench::{self, Stats};
use serde_json::json;

const RUNS: usize = 30;

fn stats(mut command: impl FnMut() -> Command) -> Stats {
    bench::sample(RUNS, || bench::time(command()))
}

fn median(command: impl FnMut() -> Command) -> Duration {
    Duration::from_secs_f64(stats(command).median / 1000.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let python = std::env::var_os("SCAFLD_PY");
    Command::new("git").args(["init", "-q"]).current_dir(&env.work).status().unwrap();
    if let Some(py) = &python {
        assert!(Command::new(py).arg("init").current_dir(&env.work).output().unwrap().status.success());
    }
    env.init();
    bench::generate(&env.work, 0..1000);
    let t = Instant::now();
    env.scafld(&["list", "--json"]).assert_code(0);
    println!("first list after writing 1000 specs (index catch-up): {:.1} ms", ms(t.elapsed()));

    // The floor of every command: the client process itself.
    let floor = stats(|| env.scafld_command(&["--version"]));
    let status = stats(|| env.scafld_command(&["status", "bench-00500", "--json"]));
    let list = stats(|| env.scafld_command(&["list", "--json"]));
    bench::report("scafld (this) status --json, 1000 specs", status, "scafld --version", floor);
    bench::report("scafld (this) list --json, 1000 specs", list, "scafld --version", floor);
    let list_bytes = env.scafld(&["list", "--json"]).stdout.len();
    println!("    list --json prints {} KB", list_bytes / 1024);
    let (ours_status, ours_list) =
        (Duration::from_secs_f64(status.median / 1000.0), Duration::from_secs_f64(list.median / 1000.0));
    if let Some(py) = &python {
        let py_cmd = |args: &[&str]| {
            let mut c = Command::new(py);
            c.args(args).current_dir(&env.work).env("NO_COLOR", "1");
            c
        };
        let py_status = median(|| py_cmd(&["status", "bench-00500", "--json"]));
        let py_list = median(|| py_cmd(&["list"]));
        println!(
            "python scafld 2.0.0 status --json:        median {:.1} ms ({:.0}x slower)",
            ms(py_status),
            ms(py_status) / ms(ours_status)
        );
        println!(
            "python scafld 2.0.0 list:                 median {:.1} ms ({:.0}x slower)",
            ms(py_list),
            ms(py_list) / ms(ours_list)
        );
    } else {
        println!("(set SCAFLD_PY to the Python scafld 2.0.0 executable to compare; tests/bench/specs.sh does)");
    }

    // Hand edit -> task_changed notification.
    let mut subscriber = env.client();
    subscriber.result("events.subscribe", json!({}));
    let mut latencies = Vec::new();
    for n in 0..20 {
        let path = env.work.join(".scafld/specs/drafts/bench-00000.md");
        let text = bench::task_spec(0, "draft").replace("Bench task 0", &format!("Bench task 0 edit {n}"));
        let t = Instant::now();
        std::fs::write(&path, text).unwrap();
        loop {
            let event = subscriber.next_event();
            if event["kind"] == "task_changed" && event["task_id"] == "bench-00000" {
                break;
            }
        }
        latencies.push(t.elapsed());
    }
    latencies.sort();
    println!(
        "hand edit -> task_changed event: median {:.1} ms, max {:.1} ms (20 edits)",
        ms(latencies[10]),
        ms(latencies[19])
    );

    // The first call when no daemon runs: it starts one (and waits for it) before answering.
    let first = bench::sample(bench::RUNS, || {
        env.scafld(&["daemon", "stop"]).assert_code(0);
        bench::time(env.scafld_command(&["status", "bench-00500", "--json"]))
    });
    bench::report("first call with no daemon (status, 1000 specs)", first, "scafld --version", floor);

    // Ledgers: 200 of the 1000 tasks approved, so each has one; `list` shows the ledger's
    // status from the index's memory, and a daemon started afresh reads them from the store.
    for n in (1..1000).step_by(5) {
        env.scafld(&["approve", &format!("bench-{n:05}"), "--reason", "bench"]).assert_code(0);
    }
    let with_ledgers = stats(|| env.scafld_command(&["list", "--json"]));
    bench::report("scafld (this) list --json, 1000 specs, 200 with ledgers", with_ledgers, "scafld --version", floor);
    let first_list = bench::sample(bench::RUNS, || {
        env.scafld(&["daemon", "stop"]).assert_code(0);
        bench::time(env.scafld_command(&["list", "--json"]))
    });
    bench::report("first list with no daemon (1000 specs, 200 with ledgers)", first_list, "scafld --version", floor);
    let pid = env.daemon_pid();

    bench::generate(&env.work, 1000..10_000);
    let t = Instant::now();
    env.scafld(&["list", "--json"]).assert_code(0);
    println!("list catching up 9000 new specs: {:.0} ms", ms(t.elapsed()));
    let list_10k = median(|| env.scafld_command(&["list", "--json"]));
    println!(
        "scafld (this) list --json, 10000 specs: median {:.1} ms; daemon RSS {:.1} MiB",
        ms(list_10k),
        bench::rss_mib(pid)
    );
}
