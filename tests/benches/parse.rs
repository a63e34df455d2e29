//! Parser scaling: the time per line to parse and project specs of n and 8n lines in shapes
//! that are hard for a line scanner (blank lines inside criteria, runs of fences, thousands of
//! duplicate criteria, long lines). A linear parser shows a ratio near 1.0 between the two
//! sizes; a quadratic one near 8. Prints figures only (run by tests/fuzz-specs.sh).

use std::time::{Duration, Instant};

use scafld_daemon::domain::spec::{parse, project::project};

const RUNS: usize = 15;

fn timed(text: &str) -> Duration {
    let mut samples: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            let parsed = parse(text);
            let _ = project(text, &parsed.spec);
            t.elapsed()
        })
        .collect();
    samples.sort();
    samples[RUNS / 2]
}

fn main() {
    let head = "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n# T\n## Phase 1: A\nAcceptance:\n";
    let shapes: [(&str, String); 5] = [
        ("blank lines inside criteria", "- [ ] `d` test - t\n  - Command: true\n\n\n\n".to_string()),
        ("fence runs", "```\n## Phase 9: fenced\n```\n".to_string()),
        ("duplicate criteria", "- [ ] `dup` test - t\n  - Command: true\n  - Status: pass\n".to_string()),
        ("long lines", format!("Prose {}\n", "word ".repeat(200))),
        ("unclosed backticks", "- [ ] `c` test - t\n  - Command: `make &&\n    more\n".to_string()),
    ];
    println!("{:<30} {:>12} {:>12} {:>8}", "shape", "ns/line n", "ns/line 8n", "ratio");
    for (name, unit) in shapes {
        let small = format!("{head}{}", unit.repeat(1_000));
        let large = format!("{head}{}", unit.repeat(8_000));
        let per_line = |text: &str| timed(text).as_nanos() as f64 / text.lines().count() as f64;
        let (a, b) = (per_line(&small), per_line(&large));
        println!("{name:<30} {a:>12.1} {b:>12.1} {:>8.2}", b / a);
    }
    println!("floor: a linear parser stays near 1.0 (noise aside); quadratic work shows ~8.0");
}
