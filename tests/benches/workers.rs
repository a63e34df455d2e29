//! Reviewer-worker benchmark: 50 queued review jobs served by 4 `scafld worker` processes with a
//! fast fake reviewer (jobs per second), the latency of `worker.claim` on a queue, and the time
//! from a worker's death to another worker's takeover (target: the lease plus under 1 s).
//! Prints figures only.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use scafld_tests::{RawClient, TestEnv};
use serde_json::{Value, json};

const JOBS: usize = 50;
const WORKERS: usize = 4;

/// A workspace with a one-commit range to review.
fn workspace(env: &TestEnv) -> String {
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    std::fs::write(env.work.join(".scafld/config.local.yaml"), "review:\n  dossier:\n    min_attack_angles: 1\n")
        .unwrap();
    std::fs::write(env.work.join(".gitignore"), ".scafld/\n").unwrap();
    scafld_tests::git(&env.work, &["add", "-A"]);
    scafld_tests::git(&env.work, &["commit", "-q", "-m", "base"]);
    let base = scafld_tests::git(&env.work, &["rev-parse", "HEAD"]);
    std::fs::write(env.work.join("lib.rs"), "pub fn f() {}\n").unwrap();
    scafld_tests::git(&env.work, &["add", "-A"]);
    scafld_tests::git(&env.work, &["commit", "-q", "-m", "change"]);
    format!("{base}..HEAD")
}

fn queue(client: &mut RawClient, root: &str, range: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            let spawned = client.result(
                "review.diff",
                json!({"root": root, "range": range, "reviewers": ["worker"], "caller": {"cwd": root, "env": {}}}),
            );
            spawned["session_key"].as_str().unwrap().to_string()
        })
        .collect()
}

fn settled(client: &mut RawClient, root: &str, key: &str) -> bool {
    let r = client.result("review.wait", json!({"root": root, "session_key": key, "timeout_seconds": 0.0}));
    r["outcome"] != "pending"
}

const DOSSIER: &str = r#"{"verdict":"pass","mode":"discover","summary":"fine","findings":[],"attack_log":[{"target":"diff","attack":"read","result":"clean"}],"budget":{}}"#;

fn percentile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let env = TestEnv::new();
    let range = workspace(&env);
    let root = env.work.display().to_string();
    let mut client = env.client();
    let reviewer = env.path("fast-reviewer.sh");
    std::fs::write(&reviewer, format!("#!/bin/sh\ncat > /dev/null\ncat <<'JSON'\n{DOSSIER}\nJSON\n")).unwrap();
    Command::new("chmod").arg("+x").arg(&reviewer).status().unwrap();

    // 1. Throughput: 50 queued jobs, 4 automated workers.
    let keys = queue(&mut client, &root, &range, JOBS);
    let started = Instant::now();
    let mut workers: Vec<Child> = (0..WORKERS)
        .map(|i| {
            env.scafld_command(&[
                "worker",
                "--provider",
                "command",
                "--provider-command",
                reviewer.to_str().unwrap(),
                "--timeout",
                "1",
                "--id",
                &format!("bench-{i}"),
            ])
            .stderr(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut pending = keys.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pending.is_empty() {
        assert!(Instant::now() < deadline, "{} reviews never settled; are the workers running?", pending.len());
        pending.retain(|k| !settled(&mut client, &root, k));
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed().as_secs_f64();
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    println!(
        "workers: {JOBS} jobs by {WORKERS} workers in {:.2} s = {:.1} jobs/s (each job: claim, run a sh reviewer, submit, consensus)",
        elapsed,
        JOBS as f64 / elapsed
    );

    // 2. Claim latency on a queue of 50 (claim + submit over one connection).
    queue(&mut client, &root, &range, JOBS);
    let mut latencies = Vec::new();
    for _ in 0..JOBS {
        let t = Instant::now();
        let claim = client.result(
            "worker.claim",
            json!({"worker_id": "raw", "provider": "agent", "timeout_seconds": 1.0, "caller": {"cwd": "/", "env": {}}}),
        );
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        let dossier: Value = serde_json::from_str(DOSSIER).unwrap();
        client.result(
            "worker.submit",
            json!({"job_id": claim["job_id"], "lease_token": claim["lease_token"], "dossier": dossier, "caller": {"cwd": "/", "env": {}}}),
        );
    }
    println!(
        "worker.claim latency (queue of {JOBS}): p50 {:.2} ms, p99 {:.2} ms",
        percentile(&mut latencies, 0.5),
        percentile(&mut latencies, 0.99)
    );

    // 3. Takeover: worker A claims with a 1 s lease and dies; worker B is already waiting.
    for lease in [1u64, 2] {
        queue(&mut client, &root, &range, 1);
        let a = client.result(
            "worker.claim",
            json!({"worker_id": "a", "provider": "agent", "lease_seconds": lease, "timeout_seconds": 1.0, "caller": {"cwd": "/", "env": {}}}),
        );
        let died = Instant::now();
        let mut b = env.client();
        let claim = b.result(
            "worker.claim",
            json!({"worker_id": "b", "provider": "agent", "timeout_seconds": 10.0, "caller": {"cwd": "/", "env": {}}}),
        );
        let takeover = died.elapsed().as_secs_f64();
        assert_eq!(claim["job_id"], a["job_id"], "B took over A's job");
        println!(
            "takeover after a worker's death: {takeover:.3} s with a {lease} s lease (lease + {:.0} ms)",
            (takeover - lease as f64) * 1000.0
        );
        let dossier: Value = serde_json::from_str(DOSSIER).unwrap();
        b.result(
            "worker.submit",
            json!({"job_id": claim["job_id"], "lease_token": claim["lease_token"], "dossier": dossier, "caller": {"cwd": "/", "env": {}}}),
        );
    }
}
