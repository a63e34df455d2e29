//! Snapshots of the human output of the everyday commands (`status`, `list`, `build`, `review`,
//! `review wait`), through the real binaries. Paths, ids, times and durations are normalised;
//! everything else must match `tests/e2e/snapshots/<name>.txt` byte for byte. After an intended
//! change, review the difference and rerun with `SCAFLD_UPDATE_SNAPSHOTS=1`.

use scafld_tests::TestEnv;

use super::providers::{DOSSIER, install_fakes};

fn snapshot(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/snapshots").join(format!("{name}.txt"));
    if std::env::var_os("SCAFLD_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("missing snapshot {}", path.display()));
    assert_eq!(actual, expected, "the output of `{name}` changed; review it and rerun with SCAFLD_UPDATE_SNAPSHOTS=1");
}

/// Replace what differs between runs: the temp directory, hex ids (workspace and session keys,
/// job suffixes, digests), RFC 3339 times, durations.
fn normalise(env: &TestEnv, text: &str) -> String {
    let text = text.replace(&env.dir.path().display().to_string(), "<TMP>");
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let run = |pred: fn(char) -> bool| chars[i..].iter().take_while(|c| pred(**c)).count();
        let word_start = i == 0 || !chars[i - 1].is_ascii_alphanumeric();
        let hex = run(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
        let time = chars[i..].iter().take(20).collect::<String>();
        if word_start && time.len() == 20 && is_time(&time) {
            out.push_str("<TIME>");
            i += 20;
        } else if word_start && hex >= 6 && chars[i..i + hex].iter().any(|c| c.is_ascii_alphabetic()) {
            out.push_str("<ID>");
            i += hex;
        } else if word_start && run(|c| c.is_ascii_digit()) >= 10 {
            out.push_str("<N>");
            i += run(|c| c.is_ascii_digit());
        } else if let Some(len) = duration_at(&chars[i..]).filter(|_| word_start) {
            out.push_str("<DUR>");
            i += len;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// The length of a duration at the start of `chars` (`3 ms`, `12ms`, `0.25s`), if there is one.
fn duration_at(chars: &[char]) -> Option<usize> {
    let digits = chars.iter().take_while(|c| c.is_ascii_digit() || **c == '.').count();
    if digits == 0 {
        return None;
    }
    let rest: String = chars[digits..].iter().take(4).collect();
    let unit = ["  ms", " ms", "ms", "s"].iter().find(|u| rest.starts_with(**u))?;
    let after = chars.get(digits + unit.len());
    (!after.is_some_and(|c| c.is_ascii_alphanumeric())).then_some(digits + unit.len())
}

/// `2026-11-25T12:49:40Z`
fn is_time(s: &str) -> bool {
    s.char_indices().all(|(i, c)| match i {
        4 | 7 => c == '-',
        10 => c == 'T',
        13 | 16 => c == ':',
        19 => c == 'Z',
        _ => c.is_ascii_digit(),
    })
}

#[test]
fn the_everyday_commands_read_as_before() {
    let mut env = TestEnv::new();
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: greet\nstatus: draft\n---\n\n# Greet the user\n\n## Phase 1: Write it\n\nAcceptance:\n- [ ] `a1` test - the file exists\n  - Command: `test -f greet.txt`\n- [ ] `a2` test - it says hello\n  - Command: `grep -q hello greet.txt`\n\n## Phase 2: Check it\n\nAcceptance:\n- [ ] `b1` test - one line\n  - Command: `test $(wc -l < greet.txt) -eq 1`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/greet.md"), spec).unwrap();
    let path = install_fakes(&env, &["codex"]);
    let human = |args: &[&str]| {
        let mut command = env.scafld_command(args);
        command.env("PATH", &path).env("FAKE_DOSSIER", DOSSIER).env("OPENAI_API_KEY", "from-the-caller");
        let output = command.output().unwrap();
        let text = format!(
            "$ scafld {}\n{}{}[exit {}]\n",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            output.status.code().unwrap_or(-1)
        );
        normalise(&env, &text)
    };
    let mut transcript = String::new();
    transcript.push_str(&human(&["list"]));
    transcript.push_str(&human(&["approve", "greet", "--reason", "snapshot"]));
    transcript.push_str(&human(&["status", "greet"]));
    transcript.push_str(&human(&["build", "greet"]));
    transcript.push_str(&human(&["build", "greet"]));
    std::fs::write(env.work.join("greet.txt"), "hello\n").unwrap();
    transcript.push_str(&human(&["build", "greet"]));
    transcript.push_str(&human(&["build", "greet"]));
    transcript.push_str(&human(&["status", "greet"]));
    transcript.push_str(&human(&["list"]));
    transcript.push_str(&human(&["review", "greet", "--provider", "codex", "--min-attack-angles", "1"]));
    transcript.push_str(&human(&["review", "wait", "--timeout", "30"]));
    transcript.push_str(&human(&["status", "greet"]));
    snapshot("everyday", &transcript);
}

/// Tables line up by terminal columns, not chars: a CJK criterion id (two columns a character)
/// in `build`'s rows pushes no later column right.
#[test]
fn wide_characters_keep_table_columns_aligned() {
    let mut env = TestEnv::new();
    env.start_daemon();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: wide\nstatus: draft\n---\n\n# Wide\n\n## Phase 1: Check\n\nAcceptance:\n- [ ] `検証検証` test - cjk id\n  - Command: `true`\n- [ ] `abcdefgh` test - ascii id of the same width\n  - Command: `true`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/wide.md"), spec).unwrap();
    // Where `text` starts on `line`, in terminal columns (CJK ideographs take two).
    let column = |line: &str, text: &str| {
        let before = &line[..line.find(text).unwrap_or_else(|| panic!("{text:?} in {line:?}"))];
        before.chars().map(|c| if ('\u{4E00}'..='\u{9FFF}').contains(&c) { 2 } else { 1 }).sum::<usize>()
    };
    env.scafld(&["approve", "wide", "--reason", "wide"]).assert_code(0);
    env.scafld(&["build", "wide"]);
    let build = env.scafld(&["build", "wide"]);
    let rows: Vec<&str> = build.stdout.lines().filter(|l| l.starts_with("  pass ")).collect();
    assert_eq!(rows.len(), 2, "{}", build.stdout);
    assert_eq!(column(rows[0], " true"), column(rows[1], " true"), "{}", build.stdout);
}
