//! Build benchmark: whole-process time of `scafld build` running a phase of 1 and of 10 `true`
//! criteria, each next to its floor measured in the same run (that many `sh -c true` spawned
//! back to back, plus one client round trip), beside the Python scafld 2.0.0 when `SCAFLD_PY`
//! names it (tests/bench/build.sh installs it), and the ledger's append+flush latency. Then the
//! same step, and `status` of a task with evidence, in a repository of 3,000 committed files,
//! where both read the content evidence is bound to: there the floor also holds a `git status`
//! of the tree. Prints figures only.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use scafld_daemon::domain::ledger::LedgerEvent;
use scafld_daemon::store::{SledStore, Store};
use scafld_tests::TestEnv;
use scafld_tests::bench::{self, RUNS, Stats};

fn git_init(dir: &Path) {
    assert!(Command::new("git").args(["init", "-q"]).current_dir(dir).status().unwrap().success());
}

fn median(samples: Vec<Duration>) -> f64 {
    Stats::of(samples).median
}

/// A build step of `criteria` criteria and its floor (that many shells and one client round
/// trip), sampled in turn; and the median of the pairs' differences.
fn ours(env: &TestEnv, criteria: usize) -> (Stats, Stats, f64) {
    let mut i = 0;
    let step = || {
        let task = format!("t{criteria}-{i}");
        i += 1;
        bench::open_build(env, &task, criteria);
        bench::time(env.scafld_command(&["build", &task]))
    };
    let floor = || bench::shells(criteria) + bench::time(env.scafld_command(&["daemon", "status", "--json"]));
    bench::paired(RUNS, step, floor)
}

fn python(py: &std::ffi::OsStr, dir: &Path, criteria: usize) -> f64 {
    let samples = (0..RUNS)
        .map(|i| {
            let task = format!("p{criteria}-{i}");
            let run =
                |args: &[&str]| Command::new(py).args(args).current_dir(dir).env("NO_COLOR", "1").output().unwrap();
            // The Python tool wants every section of its own template: start from its plan,
            // swap in the same phase, and clear the template's TODO markers.
            assert!(run(&["plan", &task]).status.success());
            let path = dir.join(format!(".scafld/specs/drafts/{task}.md"));
            let planned = std::fs::read_to_string(&path).unwrap();
            let ours = bench::build_spec(&task, criteria);
            let phase = &ours[ours.find("## Phase 1:").unwrap()..];
            let (start, end) = (planned.find("## Phase 1:").unwrap(), planned.find("## Rollback").unwrap());
            let text = format!("{}{}\n{}", &planned[..start], phase.replace("Objective:", "Goal:"), &planned[end..]);
            std::fs::write(&path, text.replace("TODO: ", "").replace("TODO", "x")).unwrap();
            let approve = run(&["approve", &task]);
            assert!(approve.status.success(), "{}", String::from_utf8_lossy(&approve.stdout));
            let t = Instant::now();
            let out = run(&["build", &task]);
            let elapsed = t.elapsed();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
            elapsed
        })
        .collect();
    median(samples)
}

/// Folders and files per folder of the repository [`in_a_repository`] measures in.
const REPO_FOLDERS: usize = 300;
const REPO_FILES_PER_FOLDER: usize = 10;

/// A build step of one criterion and `status` of a task with evidence in a repository of
/// 3,000 committed files, whose whole tree is the task's scope: each reads the tree's content
/// now (a status walk), so each floor also holds `git status` of the same tree.
fn in_a_repository() {
    let mut env = TestEnv::new();
    env.start_daemon();
    git_init(&env.work);
    // Written an hour ago, as a checkout's files are older than its index: a file changed in the
    // second the index was written is "racily clean", and every status walk hashes it again.
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for folder in 0..REPO_FOLDERS {
        let dir = env.work.join(format!("src/m{folder:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for file in 0..REPO_FILES_PER_FOLDER {
            let path = dir.join(format!("f{file}.rs"));
            std::fs::write(&path, format!("// {folder}/{file}\n{}", "x".repeat(800))).unwrap();
            std::fs::File::options().append(true).open(&path).unwrap().set_modified(an_hour_ago).unwrap();
        }
    }
    scafld_tests::git(&env.work, &["add", "-A"]);
    scafld_tests::git(&env.work, &["commit", "-qm", "tree"]);
    // A repository's config is as old as its clone: the daemon keeps a repository open only
    // once its config files have settled (see `baseline/kept.rs`).
    std::fs::File::options()
        .append(true)
        .open(env.work.join(".git/config"))
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
    env.init();
    let files = REPO_FOLDERS * REPO_FILES_PER_FOLDER;
    let git_status = bench::sample(RUNS, || {
        let mut status = Command::new("git");
        status.args(["status", "--porcelain"]).current_dir(&env.work);
        bench::time(status)
    });
    println!("in a repository of {files} committed files: git status --porcelain: {git_status}");
    let (step, floor, above) = ours(&env, 1);
    bench::report(
        &format!("scafld (this) build, 1 criterion, {files} files"),
        step,
        "1 sh -c true + 1 round trip",
        floor,
    );
    println!(
        "    paired with its floor run by run: above it by {above:.2} ms (median); above it and a git status by {:.2} ms",
        above - git_status.median
    );
    // The first step `ours` ran: its evidence is on record.
    let task = "t1-0";
    let version = bench::sample(RUNS, || bench::time(env.scafld_command(&["--version"])));
    let status = bench::sample(RUNS, || bench::time(env.scafld_command(&["status", task, "--json"])));
    bench::report(
        &format!("scafld (this) status --json of a task with evidence, {files} files"),
        status,
        "scafld --version",
        version,
    );
    println!(
        "    above the floor and a git status by {:.2} ms (median)",
        status.median - version.median - git_status.median
    );
}

fn main() {
    let mut env = TestEnv::new();
    env.start_daemon();
    git_init(&env.work);
    env.init();
    bench::settle(&env.work.join(".scafld/runs"));
    // The floor: the shells the criteria need, and one client round trip to the daemon.
    let (one, floor_one, above_one) = ours(&env, 1);
    let (ten, floor_ten, above_ten) = ours(&env, 10);
    bench::report("scafld (this) build, 1 criterion", one, "1 sh -c true + 1 round trip", floor_one);
    println!("    paired with its floor run by run: above it by {above_one:.2} ms (median)");
    bench::report("scafld (this) build, 10 criteria", ten, "10 sh -c true + 1 round trip", floor_ten);
    println!("    paired with its floor run by run: above it by {above_ten:.2} ms (median)");
    println!(
        "    {:.2} ms per extra criterion ({:.2} for a bare sh -c true)",
        (ten.median - one.median) / 9.0,
        (floor_ten.median - floor_one.median) / 9.0
    );
    println!(
        "    creating a folder and a file in it costs {:.0} us in the workspace here (a step creates a file per criterion, and one more)",
        bench::file_create(&env.work.join(".scafld/runs")).as_secs_f64() * 1e6
    );
    let (one, ten) = (one.median, ten.median);
    if let Some(py) = std::env::var_os("SCAFLD_PY") {
        let dir = env.path("python-ws");
        std::fs::create_dir_all(&dir).unwrap();
        git_init(&dir);
        assert!(Command::new(&py).arg("init").current_dir(&dir).output().unwrap().status.success());
        let p1 = python(&py, &dir, 1);
        let p10 = python(&py, &dir, 10);
        println!("python scafld 2.0.0 build, 1 criterion: median {p1:.1} ms ({:.1}x this)", p1 / one);
        println!(
            "python scafld 2.0.0 build, 10 criteria: median {p10:.1} ms ({:.1}x this; {:.1} ms per extra criterion)",
            p10 / ten,
            (p10 - p1) / 9.0
        );
    } else {
        println!("(set SCAFLD_PY to the Python scafld 2.0.0 executable to compare; tests/bench/build.sh does)");
    }

    in_a_repository();

    let store = SledStore::open(&env.path("bench-db")).unwrap();
    let mut samples: Vec<Duration> = (0..2000)
        .map(|i| {
            let event = LedgerEvent::Build { status: "active".into(), reason: format!("bench {i}") };
            let t = Instant::now();
            store.append("ws", "task", "2026-01-01T00:00:00Z", vec![event]).unwrap();
            t.elapsed()
        })
        .collect();
    samples.sort();
    let at = |p: f64| bench::percentile(&samples, p).as_secs_f64() * 1e6;
    println!("ledger append+flush: p50 {:.0} us, p99 {:.0} us (2000 appends)", at(50.0), at(99.0));
}
