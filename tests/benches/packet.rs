//! Packet benchmark: a task whose diff touches 500 files (about 5 MB). Measures the
//! whole-process time of `scafld review --print-context` (snapshot, classification, diff,
//! packet rendering under the budget). Prints figures only.

use std::process::Command;
use std::time::{Duration, Instant};

use scafld_tests::TestEnv;

fn git(dir: &std::path::Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@b")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@b")
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}

fn main() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let src = env.work.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..500 {
        std::fs::write(src.join(format!("file_{i:03}.rs")), format!("// file {i}\n")).unwrap();
    }
    git(&env.work, &["init", "-q"]);
    git(&env.work, &["add", "."]);
    git(&env.work, &["commit", "-q", "-m", "base"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: big\nstatus: draft\n---\n\n# Big change\n\n## Scope\n\n- `src/` - everything\n\n## Phase 1: All\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/big.md"), spec).unwrap();
    env.scafld(&["approve", "big", "--reason", "bench"]).assert_code(0);
    env.scafld(&["build", "big"]).assert_code(0);
    let line = "let value = compute_something_reasonably_long(argument_one, argument_two);\n";
    for i in 0..500 {
        std::fs::write(src.join(format!("file_{i:03}.rs")), line.repeat(10_000 / line.len() + 1)).unwrap();
    }
    env.scafld(&["build", "big"]).assert_code(0);
    let mut samples: Vec<Duration> = (0..10)
        .map(|_| {
            let t = Instant::now();
            let run = env.scafld(&["review", "big", "--provider", "local", "--print-context"]);
            let elapsed = t.elapsed();
            run.assert_code(0);
            elapsed
        })
        .collect();
    samples.sort();
    let packet = env.scafld(&["review", "big", "--provider", "local", "--print-context"]).stdout;
    println!(
        "review packet for 500 changed files (~5 MB diff): median {:.0} ms, max {:.0} ms; packet {} bytes",
        samples[5].as_secs_f64() * 1000.0,
        samples[9].as_secs_f64() * 1000.0,
        packet.len()
    );
}
