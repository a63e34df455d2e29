//! Concurrency benchmark (issue 17: every figure "holds with 8 clients at once, p99 reported"):
//! on one workspace of 1000 specs, whole-process times of `scafld --version`, `scafld status <id>
//! --json`, `scafld list --json` and a build step of 10 `true` criteria, first with one client
//! (median, min, max, beside their floors) and then with 8 client threads each running the real
//! client in a loop, started together (p50, p99 and max over every sample, beside the one-client
//! median and the floor's p50 and p99 under the same 8-client load: `scafld --version`, and ten
//! `sh -c true` plus one round trip for the build step). Prints figures only; asserts nothing
//! about timing.

use std::sync::Barrier;
use std::time::Duration;

use scafld_tests::TestEnv;
use scafld_tests::bench::{self, RUNS, Stats};

/// Clients at once (issue 17).
const CLIENTS: usize = 8;
/// Samples per client thread per command.
const PER_CLIENT: usize = 30;
/// Specs in the workspace, the build tasks included.
const SPECS: usize = 1000;
/// `true` criteria in a build step.
const CRITERIA: usize = 10;

/// What the 8 clients run, each kind in its own phase.
#[derive(Clone, Copy)]
enum Kind {
    Version,
    Status,
    List,
    Build,
    /// The build step's floor: `CRITERIA` shells and one round trip.
    BuildFloor,
}

const KINDS: [Kind; 5] = [Kind::Version, Kind::Status, Kind::List, Kind::Build, Kind::BuildFloor];

/// The build task that client `client` (`None`: the one-client baseline) steps in its run `i`.
fn build_task(client: Option<usize>, i: usize) -> String {
    match client {
        Some(c) => format!("c{c}-{i}"),
        None => format!("b-{i}"),
    }
}

/// Client `client`'s (`None`: the one-client baseline's) run `i` of `kind`, timed; each
/// client asks for its own spec and steps its own build tasks.
fn run(env: &TestEnv, kind: Kind, client: Option<usize>, i: usize) -> Duration {
    let (id, task) = (format!("bench-{:05}", 500 + client.unwrap_or(0)), build_task(client, i));
    let args = match kind {
        Kind::Version => vec!["--version"],
        Kind::Status => vec!["status", &id, "--json"],
        Kind::List => vec!["list", "--json"],
        Kind::Build => vec!["build", &task],
        Kind::BuildFloor => {
            return bench::shells(CRITERIA) + bench::time(env.scafld_command(&["daemon", "status", "--json"]));
        }
    };
    bench::time(env.scafld_command(&args))
}

/// One figure of the 8 clients, on one line: p50, p99 and max, beside the one-client median
/// and the floor's p50 and p99 under the same load.
fn report(what: &str, samples: &[Duration], alone: Stats, floor: Option<(&str, &[Duration])>) {
    let ms = |samples: &[Duration], p: f64| bench::percentile(samples, p).as_secs_f64() * 1000.0;
    let floor = floor
        .map(|(what, f)| {
            let (p50, p99) = (ms(f, 50.0), ms(f, 99.0));
            let above = format!(
                "above it by {:.2} ms at p50, {:.2} ms at p99",
                ms(samples, 50.0) - p50,
                ms(samples, 99.0) - p99
            );
            format!("\n    floor ({what}) under the same load: p50 {p50:.2} ms, p99 {p99:.2} ms; {above}")
        })
        .unwrap_or_default();
    println!(
        "{CLIENTS} clients: {what}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} runs (1 client median {:.2} ms){floor}",
        ms(samples, 50.0),
        ms(samples, 99.0),
        ms(samples, 100.0),
        samples.len(),
        alone.median
    );
}

fn main() {
    let mut env = TestEnv::new();
    let daemon = env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    // Every build step needs its own task with an open phase: prepare them all before timing,
    // and fill the workspace up to SPECS with generated tasks.
    let builds = RUNS + CLIENTS * PER_CLIENT;
    let tasks = (0..RUNS).map(|i| build_task(None, i));
    for task in tasks.chain((0..CLIENTS).flat_map(|c| (0..PER_CLIENT).map(move |i| build_task(Some(c), i)))) {
        bench::open_build(&env, &task, CRITERIA);
    }
    bench::generate(&env.work, 0..SPECS - builds);
    env.scafld(&["list", "--json"]).assert_code(0); // the index catches up
    bench::settle(&env.work.join(".scafld/runs"));
    println!("workspace: {SPECS} specs ({} generated, {builds} build tasks with phase 1 open)", SPECS - builds);

    // One client, and what the daemon spends per call of each kind.
    let mut daemon_cpu = Vec::new();
    let mut alone = |kind| {
        let (mut i, before) = (0, bench::cpu_time(daemon));
        let stats = bench::sample(RUNS, || {
            i += 1;
            run(&env, kind, None, i - 1)
        });
        daemon_cpu.push((bench::cpu_time(daemon) - before).as_secs_f64() * 1000.0 / RUNS as f64);
        stats
    };
    let [version, status, list, build, build_floor] = KINDS.map(&mut alone);
    println!(
        "daemon CPU per call, 1 client (user + system, over {RUNS} calls): status {:.2} ms, list {:.2} ms, build step {:.2} ms, the build floor's round trip {:.2} ms",
        daemon_cpu[1], daemon_cpu[2], daemon_cpu[3], daemon_cpu[4]
    );
    let shells = format!("{CRITERIA} sh -c true + 1 round trip");
    bench::report("1 client: status --json", status, "scafld --version", version);
    bench::report("1 client: list --json", list, "scafld --version", version);
    bench::report(&format!("1 client: build, {CRITERIA} criteria"), build, &shells, build_floor);

    // CLIENTS at once: every thread runs PER_CLIENT of one kind, then waits for the others
    // before the next kind, so each kind is measured under CLIENTS of itself.
    let barrier = Barrier::new(CLIENTS);
    let cpu_at_kind: Vec<std::sync::Mutex<Duration>> = KINDS.iter().map(|_| Default::default()).collect();
    let per_client: Vec<Vec<Vec<Duration>>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let (env, barrier, cpu_at_kind) = (&env, &barrier, &cpu_at_kind);
                scope.spawn(move || {
                    KINDS
                        .iter()
                        .enumerate()
                        .map(|(k, &kind)| {
                            // Once every client has finished the kind before, the leader
                            // marks the daemon's CPU time as this kind starts.
                            if barrier.wait().is_leader() {
                                *cpu_at_kind[k].lock().unwrap() = bench::cpu_time(daemon);
                            }
                            barrier.wait();
                            (0..PER_CLIENT).map(|i| run(env, kind, Some(client), i)).collect()
                        })
                        .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("a client thread")).collect()
    });
    let [loaded_version, loaded_status, loaded_list, loaded_build, loaded_floor] = std::array::from_fn(|k| {
        let mut samples: Vec<Duration> = per_client.iter().flat_map(|kinds| kinds[k].iter().copied()).collect();
        samples.sort();
        samples
    });
    let kind_ends = cpu_at_kind.iter().skip(1).map(|m| *m.lock().unwrap()).chain([bench::cpu_time(daemon)]);
    let per_call: Vec<f64> = cpu_at_kind
        .iter()
        .zip(kind_ends)
        .map(|(start, end)| (end - *start.lock().unwrap()).as_secs_f64() * 1000.0 / (CLIENTS * PER_CLIENT) as f64)
        .collect();
    println!(
        "daemon CPU per call, {CLIENTS} clients (over {} calls each): status {:.2} ms, list {:.2} ms, build step {:.2} ms, the build floor's round trip {:.2} ms",
        CLIENTS * PER_CLIENT,
        per_call[1],
        per_call[2],
        per_call[3],
        per_call[4]
    );
    let version_floor = Some(("scafld --version", loaded_version.as_slice()));
    report("scafld --version", &loaded_version, version, None);
    report("status --json", &loaded_status, status, version_floor);
    report("list --json", &loaded_list, list, version_floor);
    let build_what = format!("build, {CRITERIA} criteria");
    report(&build_what, &loaded_build, build, Some((&shells, loaded_floor.as_slice())));
}
