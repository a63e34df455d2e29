//! Socket benchmark: `daemon.status` round trips over the real socket with 1 and 8 concurrent
//! clients (p50/p99 and calls per second), and the whole-process wall time of
//! `scafld daemon status --json` against a warm daemon. Prints figures; asserts nothing.
//!
//! Run with `tests/bench/socket.sh` (or `cargo bench -p scafld-tests --bench socket`).

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use scafld_tests::bench::percentile;
use scafld_tests::{TestEnv, connect_socket};

const WARMUP: usize = 500;
const CALLS_PER_CLIENT: usize = 10_000;
const PROCESS_RUNS: usize = 200;

fn main() {
    let mut env = TestEnv::new();
    env.start_daemon();
    for clients in [1, 8] {
        round_trips(&env, clients);
    }
    whole_process(&env);
}

fn round_trips(env: &TestEnv, clients: usize) {
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let socket = env.socket.clone();
            std::thread::spawn(move || {
                let stream = connect_socket(&socket).expect("connect");
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                let mut line = String::new();
                let mut samples = Vec::with_capacity(CALLS_PER_CLIENT);
                for i in 0..WARMUP + CALLS_PER_CLIENT {
                    let request = format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"daemon.status\"}}\n");
                    let t = Instant::now();
                    writer.write_all(request.as_bytes()).unwrap();
                    line.clear();
                    reader.read_line(&mut line).unwrap();
                    if i >= WARMUP {
                        samples.push(t.elapsed());
                    }
                }
                samples
            })
        })
        .collect();
    let mut all: Vec<Duration> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let wall = started.elapsed();
    all.sort();
    println!(
        "daemon.status round trip, {clients} client(s): p50 {:.1} us, p99 {:.1} us, {:.0} calls/s ({} calls)",
        micros(percentile(&all, 50.0)),
        micros(percentile(&all, 99.0)),
        (clients * (WARMUP + CALLS_PER_CLIENT)) as f64 / wall.as_secs_f64(),
        all.len()
    );
}

fn whole_process(env: &TestEnv) {
    let mut samples = Vec::with_capacity(PROCESS_RUNS);
    for _ in 0..PROCESS_RUNS {
        let t = Instant::now();
        let output = env.scafld_command(&["daemon", "status", "--json"]).output().unwrap();
        samples.push(t.elapsed());
        assert!(output.status.success());
    }
    samples.sort();
    println!(
        "scafld daemon status --json, whole process: median {:.2} ms, p90 {:.2} ms ({PROCESS_RUNS} runs)",
        micros(percentile(&samples, 50.0)) / 1000.0,
        micros(percentile(&samples, 90.0)) / 1000.0,
    );
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
