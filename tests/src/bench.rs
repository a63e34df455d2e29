//! Benchmark figures: each measured over many runs (median, min, max) and printed next to its
//! floor, the cost of the least the machine must do for it, measured in the same run.

use std::process::Command;
use std::time::{Duration, Instant};

/// Runs per figure (the issue asks for at least 15).
pub const RUNS: usize = 21;

/// Median, min and max of a set of samples, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        Stats { median: ms(samples[samples.len() / 2]), min: ms(samples[0]), max: ms(samples[samples.len() - 1]) }
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "median {:.2} ms (min {:.2}, max {:.2})", self.median, self.min, self.max)
    }
}

/// Time `runs` runs of `step` (each returns what it measured).
pub fn sample(runs: usize, mut step: impl FnMut() -> Duration) -> Stats {
    Stats::of((0..runs).map(|_| step()).collect())
}

/// The whole-process time of a command that must succeed.
pub fn time(mut command: Command) -> Duration {
    let t = Instant::now();
    let out = command.output().expect("run the command");
    let elapsed = t.elapsed();
    assert!(out.status.success(), "{command:?}: {}", String::from_utf8_lossy(&out.stderr));
    elapsed
}

/// `n` `sh -c true` spawned back to back: the floor of running `n` criteria.
pub fn shells(n: usize) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        assert!(Command::new("sh").args(["-c", "true"]).status().expect("sh").success());
    }
    t.elapsed()
}

/// One figure and its floor, on one line.
pub fn report(what: &str, figure: Stats, floor_what: &str, floor: Stats) {
    println!(
        "{what}: {figure}\n    floor ({floor_what}): {floor}; above the floor by {:.2} ms (median)",
        figure.median - floor.median
    );
}
