//! Concurrency benchmark (issue 17: every figure "holds with 8 clients at once, p99 reported"):
//! on one workspace of 1000 specs, whole-process times of `scafld --version`, `scafld status <id>
//! --json`, `scafld list --json` and a build step of 10 `true` criteria, first with one client
//! (median, min, max, beside their floors) and then with 8 client threads each running the real
//! client in a loop, started together (p50, p99 and max over every sample, beside the one-client
//! median and the floor). Prints figures only; asserts nothing about timing.

use std::process::Command;
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
}

const KINDS: [Kind; 4] = [Kind::Version, Kind::Status, Kind::List, Kind::Build];

/// The build task that client `client` (`None`: the one-client baseline) steps in its run `i`.
fn build_task(client: Option<usize>, i: usize) -> String {
    match client {
        Some(c) => format!("c{c}-{i}"),
        None => format!("b-{i}"),
    }
}

/// Client `client`'s (`None`: the one-client baseline's) run `i` of `kind`; each client asks
/// for its own spec and steps its own build tasks.
fn command(env: &TestEnv, kind: Kind, client: Option<usize>, i: usize) -> Command {
    let (id, task) = (format!("bench-{:05}", 500 + client.unwrap_or(0)), build_task(client, i));
    let args = match kind {
        Kind::Version => vec!["--version"],
        Kind::Status => vec!["status", &id, "--json"],
        Kind::List => vec!["list", "--json"],
        Kind::Build => vec!["build", &task],
    };
    env.scafld_command(&args)
}

/// One figure of the 8 clients, on one line beside the one-client median and the floor.
fn report(what: &str, mut samples: Vec<Duration>, alone: Stats, floor: Option<(&str, Stats)>) {
    samples.sort();
    let ms = |p: f64| bench::percentile(&samples, p).as_secs_f64() * 1000.0;
    let floor = floor.map(|(what, f)| format!("; floor ({what}) median {:.2} ms", f.median)).unwrap_or_default();
    println!(
        "{CLIENTS} clients: {what}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} runs (1 client median {:.2} ms{floor})",
        ms(50.0),
        ms(99.0),
        ms(100.0),
        samples.len(),
        alone.median
    );
}

fn main() {
    let mut env = TestEnv::new();
    env.start_daemon();
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
    println!("workspace: {SPECS} specs ({} generated, {builds} build tasks with phase 1 open)", SPECS - builds);

    // One client.
    let alone = |kind| {
        let mut i = 0;
        bench::sample(RUNS, || {
            i += 1;
            bench::time(command(&env, kind, None, i - 1))
        })
    };
    let [version, status, list, build] = KINDS.map(alone);
    let round_trip = || bench::time(env.scafld_command(&["daemon", "status", "--json"]));
    let build_floor = bench::sample(RUNS, || bench::shells(CRITERIA) + round_trip());
    let shells = format!("{CRITERIA} sh -c true + 1 round trip");
    bench::report("1 client: status --json", status, "scafld --version", version);
    bench::report("1 client: list --json", list, "scafld --version", version);
    bench::report(&format!("1 client: build, {CRITERIA} criteria"), build, &shells, build_floor);

    // CLIENTS at once: every thread runs PER_CLIENT of one kind, then waits for the others
    // before the next kind, so each kind is measured under CLIENTS of itself.
    let barrier = Barrier::new(CLIENTS);
    let per_client: Vec<Vec<Vec<Duration>>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let (env, barrier) = (&env, &barrier);
                scope.spawn(move || {
                    KINDS
                        .iter()
                        .map(|&kind| {
                            barrier.wait();
                            (0..PER_CLIENT).map(|i| bench::time(command(env, kind, Some(client), i))).collect()
                        })
                        .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().expect("a client thread")).collect()
    });
    for (k, kind) in KINDS.into_iter().enumerate() {
        let samples = per_client.iter().flat_map(|kinds| kinds[k].iter().copied()).collect();
        let version_floor = Some(("scafld --version", version));
        match kind {
            Kind::Version => report("scafld --version", samples, version, None),
            Kind::Status => report("status --json", samples, status, version_floor),
            Kind::List => report("list --json", samples, list, version_floor),
            Kind::Build => report(&format!("build, {CRITERIA} criteria"), samples, build, Some((&shells, build_floor))),
        }
    }
}
