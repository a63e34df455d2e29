//! Benchmark figures: each measured over many runs (median, min, max) and printed next to its
//! floor, the cost of the least the machine must do for it, measured in the same run.

use std::ops::Range;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::TestEnv;

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

/// `runs` samples of a figure and of its floor taken in turn, so that a machine whose speed
/// drifts during the run weighs on both alike; also the median of the pairs' differences.
pub fn paired(
    runs: usize,
    mut figure: impl FnMut() -> Duration,
    mut floor: impl FnMut() -> Duration,
) -> (Stats, Stats, f64) {
    let (mut figures, mut floors, mut above) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let (f, b) = (figure(), floor());
        above.push(f.as_secs_f64() - b.as_secs_f64());
        figures.push(f);
        floors.push(b);
    }
    above.sort_by(f64::total_cmp);
    (Stats::of(figures), Stats::of(floors), above[above.len() / 2] * 1000.0)
}

/// What creating a folder and a small file in it costs in `dir`, median of 50: a build step
/// creates a file per criterion (its diagnostics) and one for the spec's atomic write, a task's
/// first step its diagnostics folder too, and on some file systems (ext4 without a journal,
/// for about half a minute after many deletions nearby) a create costs hundreds of
/// microseconds where it usually costs tens.
pub fn file_create(dir: &Path) -> Duration {
    let dir = dir.join("bench-creates");
    std::fs::create_dir_all(&dir).unwrap();
    let mut samples: Vec<Duration> = (0..50)
        .map(|i| {
            let t = Instant::now();
            let folder = dir.join(format!("d{i}"));
            std::fs::create_dir(&folder).unwrap();
            std::fs::write(folder.join("f"), [b'x'; 600]).unwrap();
            t.elapsed()
        })
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    samples.sort();
    samples[samples.len() / 2]
}

/// Wait, at most a minute, until creating a folder and a file in `dir` costs what it usually
/// does (under `SETTLED`; 20-70 us here), and say how long that took. After many deletions
/// nearby (the previous benchmark's workspace removed), ext4 without a journal scans the
/// recently deleted inodes on every create for a minute or so: a build step measured then
/// carries that cost, not its own.
pub fn settle(dir: &Path) {
    const SETTLED: Duration = Duration::from_micros(100);
    let (start, deadline) = (Instant::now(), Instant::now() + Duration::from_secs(60));
    let mut cost = file_create(dir);
    while cost > SETTLED && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1)); // a poll interval, under a deadline
        cost = file_create(dir);
    }
    if start.elapsed() > Duration::from_secs(1) {
        println!(
            "waited {:.0} s for creating a file to settle after recent deletions ({:.0} us now)",
            start.elapsed().as_secs_f64(),
            cost.as_secs_f64() * 1e6
        );
    }
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

/// CPU time process `pid` has used so far, all its threads together (user and system, from
/// `/proc/<pid>/stat`; the kernel counts it in clock ticks, 10 ms here, so measure over many
/// calls). What a daemon spends per call is what 8 clients on 2 cores queue behind.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read the process's stat");
    // The command name (field 2) may hold spaces; count fields after its closing parenthesis.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("a stat line") + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second: u64 = match Command::new("getconf").arg("CLK_TCK").output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(100),
        _ => 100,
    };
    Duration::from_nanos(ticks * 1_000_000_000 / per_second)
}

/// Resident memory of process `pid`, in MiB (`VmRSS`).
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read the process's status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .expect("a VmRSS line")
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .expect("a size in kB");
    kib / 1024.0
}

/// One figure and its floor, on one line.
pub fn report(what: &str, figure: Stats, floor_what: &str, floor: Stats) {
    println!(
        "{what}: {figure}\n    floor ({floor_what}): {floor}; above the floor by {:.2} ms (median)",
        figure.median - floor.median
    );
}

/// The sample at percentile `p` (0 to 100) of samples sorted ascending (nearest rank).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[index]
}

/// Task `n` of a generated large workspace (`bench-{n:05}`): 2 phases of 2 `true` criteria.
pub fn task_spec(n: usize, status: &str) -> String {
    let id = format!("bench-{n:05}");
    let mut text = format!(
        "---\nspec_version: '2.0'\ntask_id: {id}\ncreated: '2026-05-15T09:00:00Z'\nupdated: '2026-05-15T09:00:00Z'\n\
         status: {status}\nharden_status: not_run\nsize: small\nrisk_level: low\n---\n\n# Bench task {n}\n\n\
         ## Summary\n\nA generated task used to measure scafld on a large workspace.\n\n\
         ## Scope\n\n- `src/module_{n}.rs` - the code of task {n}.\n"
    );
    for phase in 1..=2 {
        text.push_str(&format!(
            "\n## Phase {phase}: Step {phase}\n\nStatus: pending\nDependencies: none\n\nObjective: Do step {phase}.\n\n\
             Changes:\n- `src/module_{n}.rs` - part {phase}.\n\nAcceptance:\n"
        ));
        for c in 1..=2 {
            text.push_str(&format!(
                "- [ ] `ac{phase}_{c}` test - check {c} of step {phase}\n  - Command: `true`\n  - Expected kind: `exit_code_zero`\n"
            ));
        }
    }
    text
}

/// Write the generated tasks `range` ([`task_spec`]) into the workspace `work`: 3 in 5 drafts,
/// the rest approved.
pub fn generate(work: &Path, range: Range<usize>) {
    for n in range {
        let (folder, status) = if n % 5 < 3 { ("drafts", "draft") } else { ("approved", "approved") };
        let path = work.join(".scafld/specs").join(folder).join(format!("bench-{n:05}.md"));
        std::fs::write(path, task_spec(n, status)).unwrap();
    }
}

/// A draft task with one phase of `criteria` `true` criteria, for the build benchmarks.
pub fn build_spec(task: &str, criteria: usize) -> String {
    let mut text = format!(
        "---\nspec_version: '2.0'\ntask_id: {task}\ncreated: '2026-05-15T09:00:00Z'\nupdated: '2026-05-15T09:00:00Z'\n\
         status: draft\nharden_status: not_run\nsize: small\nrisk_level: low\n---\n\n# {task}\n\n## Summary\n\nBench.\n\n\
         ## Phase 1: Only\n\nStatus: pending\nDependencies: none\n\nObjective: bench.\n\nChanges:\n- `a` - a\n\nAcceptance:\n"
    );
    for c in 0..criteria {
        text.push_str(&format!(
            "- [ ] `ac{c}` test - true {c}\n  - Command: `true`\n  - Expected kind: `exit_code_zero`\n"
        ));
    }
    text
}

/// Write `task` ([`build_spec`]) into `env`'s workspace, approve it and open its phase (the
/// first `scafld build`): the next `scafld build <task>` is a build step running its criteria.
pub fn open_build(env: &TestEnv, task: &str, criteria: usize) {
    std::fs::write(env.work.join(format!(".scafld/specs/drafts/{task}.md")), build_spec(task, criteria)).unwrap();
    env.scafld(&["approve", task, "--reason", "bench"]).assert_code(0);
    env.scafld(&["build", task]).assert_code(0);
}
