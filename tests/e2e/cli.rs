//! The `scafld` client: daemon control, auto-start, init, the JSON envelope and version checks.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::process::Command;

use scafld_tests::{RawClient, Run, TestEnv, git, tree, wait_until};
use serde_json::json;

#[test]
fn daemon_start_status_stop() {
    let env = TestEnv::new();
    let run = env.scafld(&["daemon", "status"]);
    run.assert_code(6);
    assert!(run.stderr.contains("no scafld daemon is answering"), "{}", run.stderr);

    let run = env.scafld(&["daemon", "start", "--json"]);
    run.assert_code(0);
    let started = run.json();
    assert_eq!(started["ok"], true);
    assert_eq!(started["command"], "daemon start");
    assert_eq!(started["result"]["already_running"], false);
    // `start` returns only once the socket answers.
    RawClient::connect(&env.socket).expect("socket answers after start returns");

    let again = env.scafld(&["daemon", "start", "--json"]).json();
    assert_eq!(again["result"]["already_running"], true);
    assert_eq!(again["result"]["pid"], started["result"]["pid"]);

    let status = env.scafld(&["daemon", "status", "--json"]);
    status.assert_code(0);
    let status = status.json();
    assert_eq!(status["result"]["pid"], started["result"]["pid"]);
    assert_eq!(status["error"], json!(null));
    let human = env.scafld(&["daemon", "status"]);
    assert!(human.stdout.contains("socket:") && human.stdout.contains("jobs:"), "{}", human.stdout);

    let stop = env.scafld(&["daemon", "stop", "--json"]);
    stop.assert_code(0);
    assert_eq!(stop.json()["result"]["stopped"], true);
    assert!(!env.socket.exists());
    let stop = env.scafld(&["daemon", "stop", "--json"]);
    assert_eq!(stop.json()["result"]["stopped"], false);
}

/// A path with a newline in it (a workspace's folder) is shown on its own line of `daemon
/// status`, the newline in caret notation, never as a line that passes for another.
#[test]
fn daemon_status_keeps_each_path_to_its_line() {
    let env = TestEnv::new();
    let odd = env.path("odd\nlog:        /forged");
    std::fs::create_dir_all(&odd).unwrap();
    let init = env.scafld_command(&["init"]).current_dir(&odd).output().unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let run = env.scafld(&["daemon", "status"]);
    run.assert_code(0);
    assert!(run.stdout.contains("odd^Jlog:        /forged"), "{}", run.stdout);
    assert!(!run.stdout.lines().any(|line| line.starts_with("log:        /forged")), "{}", run.stdout);
    assert_eq!(run.stdout.lines().filter(|line| line.starts_with("log:")).count(), 1, "{}", run.stdout);
}

#[test]
fn commands_start_the_daemon_unless_told_not_to() {
    let env = TestEnv::new();
    let mut off = env.scafld_command(&["init", "--json"]);
    off.env("SCAFLD_NO_AUTOSTART", "1");
    let run = off.output().unwrap();
    assert_eq!(run.status.code(), Some(6));
    let envelope: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(envelope["error"]["code"], "daemon_unreachable");
    assert!(envelope["error"]["hint"].as_str().unwrap().contains("scafld daemon start"));
    assert!(!env.work.join(".scafld").exists(), "nothing may change when the daemon is unreachable");

    let run = env.scafld(&["init", "--no-autostart"]);
    run.assert_code(6);
    assert!(run.stderr.contains("no scafld daemon is answering"), "{}", run.stderr);

    // The variable reads as every boolean one does (as `CI` does): these say "on"...
    for on in ["yes", "TRUE", "on"] {
        let run = env.scafld_command(&["init"]).env("SCAFLD_NO_AUTOSTART", on).output().unwrap();
        assert_eq!(run.status.code(), Some(6), "SCAFLD_NO_AUTOSTART={on}");
    }
    // ...and `false` (like `0`, `no`, `off` or empty) says "off": the daemon is started.
    let run = Run::from(env.scafld_command(&["init"]).env("SCAFLD_NO_AUTOSTART", "False").output().unwrap());
    run.assert_code(0);
    assert!(run.stderr.contains("started the daemon"), "{}", run.stderr);
    assert!(run.stdout.contains("initialized scafld workspace"), "{}", run.stdout);
}

/// An answer that cannot be written to stdout (a full disk, a closed descriptor) is not a
/// silent success: the loss is said on stderr and the command exits 1. A reader that closed
/// the pipe (`| head -1`) took what it wanted: that stays quiet, exit 0.
#[test]
fn output_that_cannot_be_written_is_an_error() {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let env = TestEnv::new();
    env.init();
    for args in [&["list", "--json"][..], &["list"][..]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let run = Run::from(env.scafld_command(args).stdout(full).output().unwrap());
        run.assert_code(1);
        assert!(run.stderr.contains("cannot write the output to stdout: No space left on device"), "{}", run.stderr);
    }
    let mut closed = env.scafld_command(&["list", "--json"]);
    closed.stdout(Stdio::null());
    // SAFETY: close(2) is async-signal-safe; the child starts with descriptor 1 closed.
    unsafe {
        closed.pre_exec(|| {
            nix::unistd::close(1).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let run = Run::from(closed.output().unwrap());
    run.assert_code(1);
    assert!(run.stderr.contains("cannot write the output to stdout: Bad file descriptor"), "{}", run.stderr);
    // A pipe whose reader is gone before the answer comes.
    let mut piped = env.scafld_command(&["list", "--json"]);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let run = Run::from(piped.stdout(writer).output().unwrap());
    run.assert_code(0);
    assert_eq!(run.stderr, "");
}

#[test]
fn init_creates_the_layout_and_is_idempotent() {
    let env = TestEnv::new();
    std::fs::write(env.work.join(".gitignore"), "target/\n").unwrap();
    let first = env.init();
    assert_eq!(first["ok"], true);
    let created: Vec<&str> =
        first["result"]["created"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for path in
        [".scafld/specs/drafts", ".scafld/specs/archive", ".scafld/runs", ".scafld/config.yaml", ".scafld/workspace_id"]
    {
        assert!(created.contains(&path), "{path} not created: {created:?}");
    }
    assert_eq!(first["result"]["updated"], json!([".gitignore"]));
    let gitignore = std::fs::read_to_string(env.work.join(".gitignore")).unwrap();
    assert!(gitignore.starts_with("target/\n"), "{gitignore}");
    assert!(gitignore.contains(".scafld/config.local.yaml\n") && gitignore.contains(".scafld/runs/\n"));
    let config = std::fs::read_to_string(env.work.join(".scafld/config.yaml")).unwrap();
    for key in ["absolute_timeout_seconds: 300", "idle_timeout_seconds: 0", "max_findings: 12", "max_bytes: 16384"] {
        assert!(config.contains(key), "config.yaml lacks {key}");
    }

    // A user's edit survives, and a second init changes nothing at all.
    std::fs::write(env.work.join(".scafld/config.yaml"), "version: \"1.0\"\n# mine\n").unwrap();
    let before = tree(&env.work);
    let second = env.init();
    assert_eq!(second["result"]["created"], json!([]));
    assert_eq!(second["result"]["updated"], json!([]));
    assert_eq!(second["result"]["workspace"]["workspace_id"], first["result"]["workspace"]["workspace_id"]);
    assert_eq!(tree(&env.work), before);
    let human = env.scafld(&["init"]);
    assert!(human.stdout.contains("already initialized"), "{}", human.stdout);
}

/// What stands where `init` needs a folder (a file named `.scafld`, a `.scafld/runs` link to
/// nothing) is named with what to do, not a bare "File exists"; a folder whose path is not
/// UTF-8 is named as such, not "not a directory".
#[test]
fn init_names_what_is_in_its_way() {
    let env = TestEnv::new();
    std::fs::write(env.work.join(".scafld"), "my notes\n").unwrap();
    let run = env.scafld(&["init", "--json"]);
    assert_ne!(run.code, 0);
    let message = run.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains(".scafld is in the way: it is a file where scafld needs a folder; move it aside"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(env.work.join(".scafld")).unwrap(), "my notes\n");

    std::fs::remove_file(env.work.join(".scafld")).unwrap();
    std::fs::create_dir(env.work.join(".scafld")).unwrap();
    std::os::unix::fs::symlink(env.path("gone"), env.work.join(".scafld/runs")).unwrap();
    let message = env.scafld(&["init", "--json"]).json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains(".scafld/runs is in the way: it is a link to nothing"), "{message}");

    use std::os::unix::ffi::OsStrExt;
    let odd = env.path("odd").join(std::ffi::OsStr::from_bytes(b"repo\xff"));
    std::fs::create_dir_all(&odd).unwrap();
    let run = Run::from(env.scafld_command(&["init", "--json"]).current_dir(&odd).output().unwrap());
    let error = run.json()["error"].clone();
    // The whole sentence, up to its end: what scafld needs of the path.
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("is not valid UTF-8, and scafld works only in folders whose paths are UTF-8 text"),
        "{error}"
    );
    assert!(!odd.join(".scafld").exists());
}

#[test]
fn usage_errors_exit_2_with_an_envelope() {
    let env = TestEnv::new();
    let run = env.scafld(&["no-such-command", "--json"]);
    run.assert_code(2);
    let envelope = run.json();
    assert_eq!(envelope["ok"], false);
    assert_eq!(envelope["error"]["code"], "usage");
    assert_eq!(envelope["error"]["exit_code"], 2);
    let run = env.scafld(&["daemon"]);
    run.assert_code(2);
    env.scafld(&["--help"]).assert_code(0);
    // The envelope's exit_code is always the process's: spawn/wait usage errors exit 64.
    for (args, code) in [
        (&["review", "wait", "--timeout", "-5", "--json"][..], 64),
        (&["review", "--diff", "--json"], 64),
        (&["build", "--bogus", "--json"], 2),
    ] {
        let run = env.scafld(args);
        run.assert_code(code);
        let envelope = run.json();
        assert_eq!(envelope["error"]["exit_code"], code, "{args:?}: {envelope}");
        assert!(!envelope["error"]["message"].as_str().unwrap().starts_with("error:"), "{envelope}");
    }
    assert_eq!(env.scafld(&["review", "wait", "--bogus", "--json"]).json()["command"], "review wait");
    // clap's advice survives into the envelope: the near miss, and the words a value may take.
    let hint = env.scafld(&["revew", "--json"]).json()["error"]["hint"].as_str().unwrap().to_string();
    assert!(hint.contains("a similar subcommand exists: 'review'"), "{hint}");
    let hint =
        env.scafld(&["review", "t", "--mode", "verfy", "--json"]).json()["error"]["hint"].as_str().unwrap().to_string();
    assert!(hint.contains("possible values: discover, verify"), "{hint}");
    // A missing required argument is named in the message itself, not only in the hint.
    let error = env.scafld(&["review", "accept", "t1", "--json"]).json()["error"].clone();
    let message = error["message"].as_str().unwrap();
    assert!(message.ends_with("were not provided: --reason <REASON>"), "{error}");
    assert!(!error["hint"].as_str().unwrap().contains("--reason"), "{error}");
}

/// Every on/off flag also takes a value after `=`, as the original tool's do: `1`, `true`,
/// `yes` or `on` for on, `0`, `false`, `no`, `off` or nothing for off, global or a command's
/// own. A word that says neither is a usage error naming the words. Before, clap refused any
/// value (exit 2, "unexpected value").
#[test]
fn on_off_flags_take_a_value_after_an_equals_sign() {
    let env = TestEnv::new();
    env.init();
    env.scafld(&["plan", "t1", "--command", "true"]).assert_code(0);
    for args in [&["--json=true", "list"][..], &["list", "--json=1"], &["--json=Yes", "list"], &["list", "--json"]] {
        let run = env.scafld(args);
        run.assert_code(0);
        assert_eq!(run.json()["result"]["tasks"][0]["task_id"], "t1", "{args:?}");
    }
    for args in [&["--json=false", "list"][..], &["list", "--json=off"], &["list", "--json="]] {
        let run = env.scafld(args);
        run.assert_code(0);
        assert!(run.stdout.starts_with("t1 "), "{args:?}: {}", run.stdout);
    }
    // A command's own flag: on closes a round (there is none yet), off opens one (the prompt).
    let on = env.scafld(&["harden", "t1", "--mark-passed=on"]);
    on.assert_code(1);
    assert!(on.stderr.contains("no harden round to mark passed"), "{}", on.stderr);
    let off = env.scafld(&["harden", "t1", "--mark-passed=no"]);
    off.assert_code(0);
    assert!(off.stdout.contains("round-1"), "{}", off.stdout);
    // Neither on nor off: refused before anything runs, in the mode the caller asked for.
    let run = env.scafld(&["list", "--json=maybe"]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("invalid value 'maybe'") && run.stderr.contains("say on (1, true, yes, on)"),
        "{}",
        run.stderr
    );
    let error = env.scafld(&["--json=1", "harden", "t1", "--mark-passed=2"]).json()["error"].clone();
    assert_eq!(error["exit_code"], 2, "{error}");
    assert!(error["message"].as_str().unwrap().contains("invalid value '2' for '--mark-passed"), "{error}");
}

/// `finalize --stdin` reads the request as the original tool's finalize transport sends it
/// (`{"task_id", "root", "base_ref", "scope_hint"}`): the task comes from there unless the
/// command line names it, a different one is refused, and a request that is not one such
/// object is a usage error. Before, `--stdin` itself was refused (exit 2).
#[test]
fn finalize_reads_its_request_on_stdin() {
    use std::process::Stdio;
    let env = TestEnv::new();
    env.init();
    env.scafld(&["plan", "t1", "--command", "true"]).assert_code(0);
    let with_stdin = |args: &[&str], input: &str| {
        let mut child = env
            .scafld_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        Run::from(child.wait_with_output().unwrap())
    };
    // The draft is refused by finalize for what it is: the task came from stdin.
    let run = with_stdin(&["finalize", "--stdin", "--json"], r#"{"task_id": "t1"}"#);
    let error = run.json()["error"].clone();
    assert_ne!(error["code"], "usage", "{error}");
    assert!(error["message"].as_str().unwrap().contains("t1"), "{error}");
    let run = with_stdin(&["finalize", "t1", "--stdin", "--json"], r#"{"task_id": "t2"}"#);
    run.assert_code(2);
    assert!(
        run.json()["error"]["message"].as_str().unwrap().contains("differs from the task_id `t2`"),
        "{}",
        run.stdout
    );
    let run = with_stdin(&["finalize", "--stdin", "--json"], r#"{"task": "t1"}"#);
    run.assert_code(2);
    assert!(run.json()["error"]["message"].as_str().unwrap().contains("not one JSON object"), "{}", run.stdout);
    // Empty stdin adds nothing: no task named anywhere.
    let run = with_stdin(&["finalize", "--stdin", "--json"], "");
    run.assert_code(2);
    assert!(run.json()["error"]["message"].as_str().unwrap().contains("a task id is required"), "{}", run.stdout);
}

/// A command of the original tool that scafld does not have (`adapter`, `update`, `config`)
/// is named as such with what to use instead, never a near miss such as `reconcile`.
#[test]
fn the_original_tools_commands_scafld_lacks_say_what_to_use_instead() {
    let env = TestEnv::new();
    for (command, instead) in
        [("adapter", "scafld handoff"), ("update", "scafld init"), ("config", ".scafld/config.yaml")]
    {
        let run = env.scafld(&[command, "codex", "build", "t1", "--json"]);
        run.assert_code(2);
        let error = run.json()["error"].clone();
        assert_eq!(error["message"], format!("scafld has no `{command}` command (the original tool's)"), "{error}");
        let hint = error["hint"].as_str().unwrap();
        assert!(hint.contains(instead) && !hint.contains("similar"), "{error}");
        let human = env.scafld(&[command]);
        human.assert_code(2);
        assert!(human.stderr.contains(&format!("scafld has no `{command}` command")), "{}", human.stderr);
    }
}

/// A command named without the subcommand it needs says so, naming the choices (before, the
/// message was the command's description: "Read receipts").
#[test]
fn a_missing_subcommand_is_named_as_missing_with_the_choices() {
    let env = TestEnv::new();
    for (command, choice) in [("daemon", "stop"), ("job", "wait"), ("receipt", "show")] {
        let run = env.scafld(&["--json", command]);
        run.assert_code(2);
        let error = run.json()["error"].clone();
        let message = error["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("`scafld {command}` needs a subcommand: one of ")), "{error}");
        assert!(message.contains(choice) && !message.contains("help"), "{error}");
        assert_eq!(error["exit_code"], 2, "{error}");
    }
    let human = env.scafld(&["receipt"]);
    human.assert_code(2);
    assert!(human.stderr.contains("`scafld receipt` needs a subcommand"), "{}", human.stderr);
}

/// A review subcommand after a flag (`review --json wait`) is read by `review` as a task: the
/// refusal says to put the flags after the subcommand, never to plan a task named `wait`, and
/// the word after a task is never called a subcommand. Before: "no spec for task `wait`" with
/// `scafld plan wait`, and "the subcommand 'greet' cannot be used with: --json, [TASK_ID]".
#[test]
fn a_review_subcommand_after_a_flag_says_to_put_the_flags_after_it() {
    let env = TestEnv::new();
    for (args, code, fixed) in [
        (&["review", "--json", "wait"][..], 64, "scafld review wait --json"),
        (&["review", "--json", "status", "greet"], 2, "scafld review status greet --json"),
    ] {
        let run = env.scafld(args);
        run.assert_code(code);
        let error = run.json()["error"].clone();
        let (message, hint) = (error["message"].as_str().unwrap(), error["hint"].as_str().unwrap());
        assert!(message.contains("put global flags after the subcommand"), "{args:?}: {error}");
        assert!(hint.contains(&format!("run `{fixed}`")) && !hint.contains("scafld plan"), "{args:?}: {error}");
        assert_eq!(error["exit_code"], code, "{error}");
    }
    let error = env.scafld(&["--json", "review", "cancel", "0123abcd"]).json()["error"].clone();
    let message = error["message"].as_str().unwrap();
    assert!(!message.contains("subcommand '0123abcd'"), "{error}");
    assert!(message.contains("`cancel` is none of its subcommands"), "{error}");
}

/// An error a person can act on says how: a `--root` that names no folder (or a file), a `--context-file`
/// that cannot be read.
#[test]
fn path_errors_say_what_to_do() {
    let env = TestEnv::new();
    let missing = env.path("nowhere").display().to_string();
    let error = env.scafld(&["--root", &missing, "list", "--json"]).json()["error"].clone();
    assert!(error["hint"].as_str().unwrap_or_default().contains("must be an existing folder"), "{error}");
    // A file is no folder: the hint is the same, never `scafld --root FILE init`, which fails.
    let file = env.path("notes.txt");
    std::fs::write(&file, "x").unwrap();
    let error = env.scafld(&["--root", &file.display().to_string(), "list", "--json"]).json()["error"].clone();
    assert!(error["message"].as_str().unwrap().ends_with("it is not a folder"), "{error}");
    assert!(error["hint"].as_str().unwrap_or_default().contains("must be an existing folder"), "{error}");
    let nope = env.path("nope.md").display().to_string();
    let run = env.scafld(&["review", "--diff", "HEAD~1..HEAD", "--context-file", &nope, "--json"]);
    run.assert_code(64);
    let error = run.json()["error"].clone();
    assert!(error["hint"].as_str().unwrap_or_default().contains("name a readable text file"), "{error}");
}

/// Every flag and argument of every command and subcommand says what it does.
#[test]
fn every_flag_has_help() {
    let env = TestEnv::new();
    fn walk(env: &TestEnv, path: Vec<String>, missing: &mut Vec<String>) {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = env.scafld(&args).stdout;
        let lines: Vec<&str> = help.lines().collect();
        let mut section = "";
        let mut subcommands = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if !line.starts_with(' ') && line.ends_with(':') {
                section = line;
                continue;
            }
            let item = line.trim_start();
            if item.is_empty() {
                continue;
            }
            let indent = line.len() - item.len();
            let described = |i: usize| {
                // Short help: `--flag <X>  description` on one line; long help: on the next.
                item.trim_end().contains("  ")
                    || lines.get(i + 1).is_some_and(|n| n.len() - n.trim_start().len() > indent && !n.trim().is_empty())
            };
            match section {
                "Commands:" if indent == 2 => {
                    let name = item.split_whitespace().next().unwrap_or_default();
                    if name != "help" {
                        subcommands.push(name.to_string());
                    }
                }
                "Options:" | "Arguments:"
                    if (indent == 2 || item.starts_with("--"))
                        && !described(i)
                        && !item.starts_with("-h, --help")
                        && !item.starts_with("-V, --version") =>
                {
                    missing.push(format!("scafld {}: {item}", path.join(" ")));
                }
                _ => {}
            }
        }
        for sub in subcommands {
            let mut next = path.clone();
            next.push(sub);
            walk(env, next, missing);
        }
    }
    let mut missing = Vec::new();
    walk(&env, Vec::new(), &mut missing);
    assert!(missing.is_empty(), "without a description:\n{}", missing.join("\n"));
}

#[test]
fn protocol_mismatch_is_explained() {
    let env = TestEnv::new();
    let listener = UnixListener::bind(&env.socket).unwrap();
    let socket = env.socket.clone();
    // A daemon from a future release: answers every request with protocol 999.
    let fake = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        std::fs::remove_file(&socket).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let request: serde_json::Value = serde_json::from_str(&line).unwrap();
        let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"protocol_version": 999, "daemon_version": "9.0.0", "pid": 1}});
        (&stream).write_all(format!("{reply}\n").as_bytes()).unwrap();
    });
    let run = env.scafld(&["daemon", "status", "--json"]);
    fake.join().unwrap();
    run.assert_code(6);
    let error = &run.json()["error"];
    assert_eq!(error["code"], "protocol_mismatch");
    let message = error["message"].as_str().unwrap();
    let ours = format!("protocol {}", scafld_protocol::PROTOCOL_VERSION);
    assert!(message.contains(&ours) && message.contains("protocol 999"), "{message}");
    assert!(message.contains("scafld daemon stop"), "{message}");
}

/// A daemon from a future release on `env`'s socket for one connection: `answer` gets the
/// request lines read so far and returns the replies to write (none: read another line).
/// Returns every line the client sent, up to its hanging up.
fn future_daemon(
    env: &TestEnv,
    mut answer: impl FnMut(&[serde_json::Value]) -> Vec<serde_json::Value> + Send + 'static,
) -> std::thread::JoinHandle<Vec<serde_json::Value>> {
    let listener = UnixListener::bind(&env.socket).unwrap();
    let socket = env.socket.clone();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        // Gone when this daemon is, as the real one's (the test's end waits for that).
        std::fs::remove_file(&socket).unwrap();
        // A deadline, so that a client waiting for an answer this script withholds fails the
        // test instead of hanging it.
        stream.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => return seen,
                Ok(_) => seen.push(serde_json::from_str(&line).unwrap()),
                Err(e) => panic!("the client neither sent more nor hung up: {e}; it sent {seen:?}"),
            }
            for reply in answer(&seen) {
                (&stream).write_all(format!("{reply}\n").as_bytes()).unwrap();
            }
        }
    })
}

fn hello_999(request: &serde_json::Value) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"protocol_version": 999, "daemon_version": "9.0.0", "pid": 1}})
}

/// A read-only call goes out right behind the handshake; a mismatched daemon's answer to it is
/// never used, even when it comes before the handshake's.
#[test]
fn a_pipelined_read_is_refused_by_a_daemon_of_another_protocol() {
    let env = TestEnv::new();
    let fake = future_daemon(&env, |seen| match seen {
        [hello, call] => {
            assert_eq!((hello["method"].as_str(), call["method"].as_str()), (Some("daemon.hello"), Some("task.list")));
            let tasks = json!({"tasks": [{"task_id": "from-the-future", "status": "draft", "title": "", "path": ""}]});
            vec![json!({"jsonrpc": "2.0", "id": call["id"], "result": tasks}), hello_999(hello)]
        }
        _ => Vec::new(),
    });
    std::fs::create_dir_all(env.work.join(".scafld/specs")).unwrap();
    let run = env.scafld(&["list", "--json"]);
    assert_eq!(fake.join().unwrap().len(), 2);
    run.assert_code(6);
    assert_eq!(run.json()["error"]["code"], "protocol_mismatch");
    assert!(!run.stdout.contains("from-the-future"), "{}", run.stdout);
}

/// Any other call waits for the handshake's answer, so a mismatched daemon never receives it.
#[test]
fn a_mutation_is_never_sent_before_the_handshake_is_answered() {
    let env = TestEnv::new();
    let fake = future_daemon(&env, |seen| match seen {
        [hello] => vec![hello_999(hello)],
        _ => Vec::new(),
    });
    std::fs::create_dir_all(env.work.join(".scafld/specs")).unwrap();
    let run = env.scafld(&["approve", "some-task", "--json"]);
    let sent = fake.join().unwrap();
    assert_eq!(sent.len(), 1, "only the handshake: {sent:?}");
    run.assert_code(6);
    assert_eq!(run.json()["error"]["code"], "protocol_mismatch");
}

/// Right after an upgrade the daemon still running speaks the old protocol: `daemon stop` must
/// still stop it (by SIGTERM, to the pid it names, only if that process is a scafldd).
#[test]
fn daemon_stop_stops_a_daemon_of_another_protocol() {
    let env = TestEnv::new();
    // A stand-in process named scafldd (the kernel's name for it is its file's), and a socket
    // on which a daemon of a future release answers the handshake with that process's pid.
    let fake = env.path("bin/scafldd");
    std::fs::create_dir_all(fake.parent().unwrap()).unwrap();
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let mut stand_in = std::process::Command::new(&fake).arg("300").spawn().unwrap();
    let pid = stand_in.id();
    let listener = UnixListener::bind(&env.socket).unwrap();
    let socket = env.socket.clone();
    let daemon = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(stream.try_clone().unwrap()).read_line(&mut line).unwrap();
        let request: serde_json::Value = serde_json::from_str(&line).unwrap();
        let hello = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"protocol_version": 999, "daemon_version": "9.0.0", "pid": pid}});
        (&stream).write_all(format!("{hello}\n").as_bytes()).unwrap();
        // Ends on SIGTERM alone; then the socket goes, as the real daemon's last step.
        let status = stand_in.wait().unwrap();
        std::fs::remove_file(&socket).unwrap();
        status
    });
    let run = env.scafld(&["daemon", "stop", "--json"]);
    run.assert_code(0);
    assert_eq!(run.json()["result"]["stopped"], true, "{}", run.stdout);
    assert_eq!(run.json()["result"]["pid"], pid);
    let status = daemon.join().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "{status:?}");
}

/// A daemon of another protocol naming a process that is not a scafldd gets no signal: the
/// mismatch is reported as it is.
#[test]
fn daemon_stop_never_signals_a_process_that_is_not_a_scafldd() {
    let env = TestEnv::new();
    let mut bystander = std::process::Command::new("sleep").arg("300").spawn().unwrap();
    let pid = bystander.id();
    let fake = future_daemon(&env, move |seen| match seen {
        [hello] => vec![
            json!({"jsonrpc": "2.0", "id": hello["id"], "result": {"protocol_version": 999, "daemon_version": "9.0.0", "pid": pid}}),
        ],
        _ => Vec::new(),
    });
    let run = env.scafld(&["daemon", "stop", "--json"]);
    fake.join().unwrap();
    run.assert_code(6);
    assert_eq!(run.json()["error"]["code"], "protocol_mismatch");
    assert!(bystander.try_wait().unwrap().is_none(), "the bystander was signalled");
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

#[test]
fn killed_daemon_is_detected_and_replaced_by_autostart() {
    let mut env = TestEnv::new();
    let pid = env.start_daemon();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    env.take_daemon().wait().unwrap();
    assert!(env.socket.exists(), "SIGKILL leaves the socket file behind");
    let run = env.scafld(&["daemon", "status"]);
    run.assert_code(6);
    let run = env.scafld(&["init", "--json"]);
    run.assert_code(0);
    assert!(run.stderr.contains("started the daemon"));
    wait_until("new daemon", || RawClient::connect(&env.socket).is_ok());
}

/// The exit codes the README's table gives, where they used to differ: an unknown task is a
/// usage error, approving outside git an unmet precondition (not "unreachable"), and `init`
/// says at once that approval will need git.
#[test]
fn exit_codes_follow_the_table() {
    let env = TestEnv::new();
    let init = env.scafld(&["init"]);
    init.assert_code(0);
    assert!(init.stdout.contains("warning:") && init.stdout.contains("git init"), "{}", init.stdout);
    let unknown = env.scafld(&["status", "nope", "--json"]);
    unknown.assert_code(2);
    assert_eq!(unknown.json()["error"]["code"], "not_found");
    std::fs::write(
        env.work.join(".scafld/specs/drafts/t.md"),
        "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n\n# T\n\n## Summary\n\nS.\n\n## Phase 1: Do\n\nObjective: do.\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n",
    )
    .unwrap();
    let approve = env.scafld(&["approve", "t", "--reason", "no git", "--json"]);
    approve.assert_code(1);
    let error = &approve.json()["error"];
    assert!(error["message"].as_str().unwrap().contains("not inside a git repository"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains("git init"), "{error}");
    // A workspace whose files cannot be used is reachable all the same: a broken config.yaml is
    // a runtime failure (1) naming the file to fix, not "unreachable".
    std::fs::write(env.work.join(".scafld/config.yaml"), "llm: [\n").unwrap();
    let harden = env.scafld(&["harden", "t", "--json"]);
    harden.assert_code(1);
    let error = &harden.json()["error"];
    assert_eq!(error["code"], "workspace_error", "{error}");
    assert!(error["hint"].as_str().unwrap().contains(".scafld/config.yaml"), "{error}");
    // A folder that is no workspace is what "unreachable" means: the daemon marks it so.
    let gone = env.path("no-such-workspace");
    let reply = env.client().call("task.status", json!({"root": gone, "task_id": "t"}));
    assert_eq!(reply["error"]["data"]["details"]["workspace_not_found"], true, "{reply}");
    std::fs::create_dir(&gone).unwrap();
    let reply = env.client().call("task.status", json!({"root": gone, "task_id": "t"}));
    assert_eq!(reply["error"]["data"]["details"]["workspace_not_found"], true, "{reply}");
}

/// Completions and man pages come from the one CLI definition.
#[test]
fn completions_and_man_pages_are_generated() {
    let env = TestEnv::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let run = env.scafld(&["completions", shell]);
        run.assert_code(0);
        assert!(run.stdout.contains("SCAFLD_COMPLETE") && run.stdout.contains("scafld"), "{shell}: {}", run.stdout);
    }
    env.scafld(&["completions", "tcsh"]).assert_code(2);
    // With --json, the script is one envelope's `script`, not bare text.
    let envelope = env.scafld(&["--json", "completions", "bash"]).json();
    assert_eq!(envelope["result"]["shell"], "bash", "{envelope}");
    assert!(envelope["result"]["script"].as_str().unwrap().contains("SCAFLD_COMPLETE"), "{envelope}");
    // A bare COMPLETE (set by other tools, CI systems) is not ours: it takes over nothing.
    for value in ["1", "bash"] {
        let run = scafld_tests::Run::from(
            env.scafld_command(&["--json", "--version"]).env("COMPLETE", value).output().unwrap(),
        );
        run.assert_code(0);
        assert!(run.stdout.starts_with("scafld "), "COMPLETE={value}: {}", run.stdout);
    }
    // What the script asks at completion time: commands and flags from the definition, task
    // ids from a daemon that runs, and nothing (no daemon started) when none does.
    let complete = |words: &[&str]| {
        let mut command = env.scafld_command(&[]);
        command.env("SCAFLD_COMPLETE", "fish").arg("--").args(words);
        scafld_tests::Run::from(command.output().unwrap())
    };
    let fin = complete(&["scafld", "fin"]);
    assert!(fin.stdout.lines().any(|l| l.starts_with("finalize")), "{}", fin.stdout);
    let flags = complete(&["scafld", "review", "t", "--min-att"]);
    assert!(flags.stdout.contains("--min-attack-angles"), "{}", flags.stdout);
    std::fs::create_dir_all(env.work.join(".scafld/specs/drafts")).unwrap();
    let silent = complete(&["scafld", "status", ""]);
    assert!(!silent.stdout.contains("greet"), "{}", silent.stdout);
    assert!(!env.socket.exists(), "completion never starts a daemon");
    env.init();
    std::fs::write(
        env.work.join(".scafld/specs/drafts/greet.md"),
        "---\nspec_version: '2.0'\ntask_id: greet\nstatus: draft\n---\n\n# Greet\n",
    )
    .unwrap();
    // The daemon's watcher indexes the new spec; completion reads the index.
    scafld_tests::wait_until("the task id completed", || {
        complete(&["scafld", "status", "gr"]).stdout.lines().any(|l| l == "greet")
    });
    let out = env.path("man");
    let run = env.scafld(&["man", "--out", out.to_str().unwrap(), "--json"]);
    run.assert_code(0);
    let pages = run.json()["result"]["pages"].clone();
    for page in ["scafld.1", "scafld-review-wait.1", "scafld-finalize.1", "scafldd.1"] {
        assert!(pages.as_array().unwrap().iter().any(|p| p == page), "{page}: {pages}");
        assert!(std::fs::read_to_string(out.join(page)).unwrap().starts_with(".ie"), "{page} is roff");
    }
    let daemon = std::fs::read_to_string(out.join("scafldd.1")).unwrap();
    assert!(daemon.contains("retention") && !daemon.contains("\\-\\-man"), "the hidden flag stays hidden");
    // A command's page lists the global flags its --help lists.
    for page in ["scafld-status.1", "scafld-review-wait.1", "scafld-job-wait.1"] {
        let text = std::fs::read_to_string(out.join(page)).unwrap().replace("\\-", "-");
        for flag in ["--json", "--root", "--no-autostart"] {
            assert!(text.contains(flag), "{page} lacks {flag}");
        }
    }
}

/// A page's name that is a FIFO is refused before anything is opened (it hung `man --out`
/// forever), `--force` or not, and no page is written.
#[test]
fn man_pages_are_never_written_into_a_fifo() {
    let env = TestEnv::new();
    let out = env.path("pages");
    std::fs::create_dir_all(&out).unwrap();
    let fifo = out.join("scafld-init.1");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for force in [false, true] {
        let mut args = vec!["man", "--out", out.to_str().unwrap(), "--json"];
        if force {
            args.push("--force");
        }
        let refused = env.scafld(&args);
        refused.assert_code(2);
        let error = refused.json()["error"].clone();
        assert!(error["message"].as_str().unwrap().contains("scafld-init.1 is a FIFO"), "{error}");
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1, "no page was written beside the FIFO");
    }
}

/// A `.gitignore` that is a symlink is left as it is, with a warning, wherever it leads: one
/// leading outside the workspace would have had `init` append to a file elsewhere on disk, and
/// git (2.32 and later) reads no `.gitignore` that is a symlink, so lines written through one
/// leading to a file of the work tree would ignore nothing while `init` said they were added.
#[test]
fn init_never_appends_through_a_gitignore_symlink() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    let outside = env.path("someone-elses-file");
    std::fs::write(&outside, "someone else's file\n").unwrap();
    let inside = env.work.join("ignores");
    std::fs::write(&inside, "target/\n").unwrap();
    for (target, kept) in [(&outside, "someone else's file\n"), (&inside, "target/\n")] {
        let link = env.work.join(".gitignore");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).unwrap();
        let run = env.scafld(&["init", "--json"]);
        run.assert_code(0);
        let result = run.json()["result"].clone();
        assert_eq!(std::fs::read_to_string(target).unwrap(), kept, "{result}");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert!(result["skipped"].as_array().unwrap().iter().any(|p| p == ".gitignore"), "{result}");
        let warned =
            result["warnings"].as_array().unwrap().iter().filter_map(serde_json::Value::as_str).collect::<Vec<_>>();
        let said = warned.iter().any(|w| {
            w.starts_with(".gitignore is a symlink")
                && w.contains("git does not read a .gitignore that is a symlink")
                && w.contains(".git/info/exclude")
        });
        assert!(said, "{result}");
    }
    // Why: git itself ignores nothing through the link, even with scafld's line in the file.
    std::fs::write(&inside, "target/\n.scafld/runs/\n").unwrap();
    let check = std::process::Command::new("git")
        .args(["check-ignore", "-q", ".scafld/runs/x"])
        .current_dir(&env.work)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1), "git read the linked .gitignore: {check:?}");
}

/// `man --out` follows `session --export`'s rule: an existing page is replaced only with
/// `--force`, a symlink named like a page is never written through (not even with `--force`),
/// and one refusal writes no page at all.
#[test]
fn man_pages_never_overwrite_a_file_or_write_through_a_symlink() {
    let env = TestEnv::new();
    let out = env.path("pages");
    let out_arg = out.to_str().unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let target = env.path("precious.txt");
    std::fs::write(&target, "precious notes").unwrap();
    std::os::unix::fs::symlink(&target, out.join("scafld-init.1")).unwrap();
    for force in [false, true] {
        let mut args = vec!["man", "--out", out_arg, "--json"];
        if force {
            args.push("--force");
        }
        let refused = env.scafld(&args);
        refused.assert_code(2);
        let error = refused.json()["error"].clone();
        assert!(error["message"].as_str().unwrap().contains("scafld-init.1 is a symlink"), "{error}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious notes");
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1, "no page was written beside the link");
    }
    std::fs::remove_file(out.join("scafld-init.1")).unwrap();
    std::fs::write(out.join("scafld.1"), "my own page").unwrap();
    let refused = env.scafld(&["man", "--out", out_arg, "--json"]);
    refused.assert_code(2);
    let error = refused.json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("scafld.1 already exists"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains("--force"), "{error}");
    assert_eq!(std::fs::read_to_string(out.join("scafld.1")).unwrap(), "my own page");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
    env.scafld(&["man", "--out", out_arg, "--force"]).assert_code(0);
    assert!(std::fs::read_to_string(out.join("scafld.1")).unwrap().starts_with(".ie"));
    // A file where the folder should be is a usage error that says so, --force or not.
    for force in [false, true] {
        let mut args = vec!["man", "--out", target.to_str().unwrap(), "--json"];
        if force {
            args.push("--force");
        }
        let refused = env.scafld(&args);
        refused.assert_code(2);
        assert!(refused.json()["error"]["message"].as_str().unwrap().contains("is not a folder"), "{}", refused.stdout);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious notes");
    }
    assert!(out.join("scafld-init.1").is_file());
}

/// `scafld demo` walks the whole gate in a temp folder of its own, through a private daemon
/// it stops, and touches nothing else: not HOME (the receipt key included), not the user's
/// daemon.
#[test]
fn the_demo_walks_the_gate_and_leaves_nothing_behind() {
    let env = TestEnv::new();
    let tmp = env.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut demo = env.scafld_command(&["demo"]);
    demo.env("TMPDIR", &tmp);
    let run = scafld_tests::Run::from(demo.output().unwrap());
    run.assert_code(0);
    for step in [
        "$ scafld harden greet --mark-passed",
        "blocked: a1 failed",
        "scripted stand-in",
        "blocked by the reviewer",
        "refused: no passing review",
        "pass (command)",
        "completed with receipt",
        "verified:",
    ] {
        assert!(run.stdout.contains(step), "{step}: {}", run.stdout);
    }
    let root = std::fs::read_dir(&tmp).unwrap().next().unwrap().unwrap().path();
    assert!(root.join("repo/.scafld/receipts/greet.json").is_file());
    // It names the archived spec file itself, not the archive folder.
    let spec = run.stdout.lines().find_map(|l| l.strip_prefix("  the spec:")).expect("a spec line").trim();
    assert!(spec.ends_with("/greet.md") && std::path::Path::new(spec).is_file(), "{}", run.stdout);
    assert!(!env.path("home/.config").exists(), "HOME untouched");
    assert!(!env.socket.exists(), "the user's daemon was never started");
    // Its private daemon is gone: nothing answers on its socket.
    assert!(std::os::unix::net::UnixStream::connect(root.join("scafldd.sock")).is_err());
}

/// An empty (or relative) `TMPDIR` is no folder to make throwaway files in: the demo uses
/// `/tmp`, never the folder it was started in (where its reviewer script was then not found).
#[test]
fn the_demo_with_an_empty_tmpdir_works_in_tmp() {
    let env = TestEnv::new();
    let here = env.path("here");
    std::fs::create_dir_all(&here).unwrap();
    let mut demo = env.scafld_command(&["--json", "demo"]);
    demo.env("TMPDIR", "").current_dir(&here);
    let run = scafld_tests::Run::from(demo.output().unwrap());
    run.assert_code(0);
    assert_eq!(std::fs::read_dir(&here).unwrap().count(), 0, "the demo wrote into the folder it was started in");
}

/// With `--json` the demo prints one envelope and nothing else on stdout: its steps are the
/// envelope's `steps`.
#[test]
fn the_demo_with_json_prints_one_envelope() {
    let env = TestEnv::new();
    let tmp = env.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut demo = env.scafld_command(&["--json", "demo"]);
    demo.env("TMPDIR", &tmp);
    let run = scafld_tests::Run::from(demo.output().unwrap());
    run.assert_code(0);
    let envelope = run.json();
    assert_eq!(envelope["command"], "demo", "{envelope}");
    let steps: Vec<&str> = envelope["result"]["steps"].as_array().unwrap().iter().filter_map(|s| s.as_str()).collect();
    for step in ["$ scafld harden greet --mark-passed", "blocked by the reviewer", "$ scafld verify --target HEAD"] {
        assert!(steps.iter().any(|s| s.contains(step)), "{step}: {steps:?}");
    }
    assert_eq!(envelope["result"]["kept"], false, "{envelope}");
    assert!(envelope["result"]["stop_command"].is_null(), "{envelope}");
    // Kept, the envelope says how to stop the daemon it left running, and that command does.
    let mut demo = env.scafld_command(&["--json", "demo", "--keep"]);
    demo.env("TMPDIR", &tmp);
    let run = Run::from(demo.output().unwrap());
    run.assert_code(0);
    let result = run.json()["result"].clone();
    let root = std::path::PathBuf::from(result["root"].as_str().unwrap());
    assert!(std::os::unix::net::UnixStream::connect(root.join("scafldd.sock")).is_ok(), "{result}");
    let stop = result["stop_command"].as_str().unwrap();
    let mut stopping = std::process::Command::new("sh");
    stopping.args(["-c", stop]).env("PATH", format!("{}:/usr/bin:/bin", scafld_tests::bin_dir().display()));
    assert!(stopping.output().unwrap().status.success(), "{stop}");
    wait_until("the kept daemon to stop", || {
        std::os::unix::net::UnixStream::connect(root.join("scafldd.sock")).is_err()
    });
}

/// `init --agents` appends the agent guide once, to AGENTS.md and an existing CLAUDE.md, and
/// keeps what the files said.
#[test]
fn init_agents_adds_the_guide_once() {
    let env = TestEnv::new();
    std::fs::write(env.work.join("CLAUDE.md"), "# house rules\nBe kind.").unwrap();
    let run = env.scafld(&["init", "--agents", "--json"]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    assert!(result["created"].as_array().unwrap().iter().any(|p| p == "AGENTS.md"), "{result}");
    assert!(result["updated"].as_array().unwrap().iter().any(|p| p == "CLAUDE.md"), "{result}");
    let claude = std::fs::read_to_string(env.work.join("CLAUDE.md")).unwrap();
    assert!(claude.starts_with("# house rules\nBe kind.\n\n<!-- scafld:agent-guide"), "{claude}");
    assert!(claude.contains("scafld review wait --timeout") && claude.contains("never sleep in a loop"));
    let again = env.scafld(&["init", "--agents", "--json"]).json()["result"].clone();
    assert!(again["skipped"].as_array().unwrap().iter().any(|p| p == "CLAUDE.md"), "{again}");
    assert_eq!(std::fs::read_to_string(env.work.join("CLAUDE.md")).unwrap(), claude);
}

/// Without a CLAUDE.md, `init --agents` creates AGENTS.md alone, as the README and the help say.
#[test]
fn init_agents_creates_no_claude_md() {
    let env = TestEnv::new();
    let result = env.scafld(&["init", "--agents", "--json"]).json()["result"].clone();
    assert!(result["created"].as_array().unwrap().iter().any(|p| p == "AGENTS.md"), "{result}");
    assert!(!env.work.join("CLAUDE.md").exists(), "{result}");
}

/// A user's symlinked CLAUDE.md stays a symlink: one leading outside the workspace is left as
/// it is, named in a warning, its target untouched; one leading to a file inside the workspace
/// gets the guide in that file (here AGENTS.md, which already has it: once).
#[test]
fn init_agents_never_replaces_a_symlink() {
    let env = TestEnv::new();
    let shared = env.path("shared-CLAUDE.md");
    std::fs::write(&shared, "# Shared team guide\n").unwrap();
    std::os::unix::fs::symlink(&shared, env.work.join("CLAUDE.md")).unwrap();
    let run = env.scafld(&["init", "--agents", "--json"]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    assert!(std::fs::symlink_metadata(env.work.join("CLAUDE.md")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_link(env.work.join("CLAUDE.md")).unwrap(), shared);
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), "# Shared team guide\n");
    assert!(result["skipped"].as_array().unwrap().iter().any(|p| p == "CLAUDE.md"), "{result}");
    let warned =
        result["warnings"].as_array().unwrap().iter().filter_map(serde_json::Value::as_str).collect::<Vec<_>>();
    assert!(warned.iter().any(|w| w.starts_with("CLAUDE.md is a symlink leading outside the workspace")), "{result}");
    let human = env.scafld(&["init", "--agents"]);
    assert!(
        human.stdout.contains("CLAUDE.md is a symlink") || human.stderr.contains("CLAUDE.md is a symlink"),
        "{}{}",
        human.stdout,
        human.stderr
    );

    std::fs::remove_file(env.work.join("CLAUDE.md")).unwrap();
    std::os::unix::fs::symlink("AGENTS.md", env.work.join("CLAUDE.md")).unwrap();
    env.scafld(&["init", "--agents", "--json"]).assert_code(0);
    assert_eq!(std::fs::read_link(env.work.join("CLAUDE.md")).unwrap(), std::path::Path::new("AGENTS.md"));
    let agents = std::fs::read_to_string(env.work.join("AGENTS.md")).unwrap();
    assert_eq!(agents.matches("<!-- scafld:agent-guide").count(), 1, "{agents}");
}

/// A guide link is followed only to a regular Markdown file of the work tree: a CLAUDE.md
/// leading to `.git/config`, an AGENTS.md leading to `.scafld/config.yaml` and a CLAUDE.md
/// leading to a folder are left as they are, each named in a warning with where it leads, and
/// what they lead to is untouched (git still reads its config); a link to `docs/guide.md` gets
/// the guide there.
#[test]
fn init_agents_follows_a_link_only_to_a_markdown_guide_of_the_work_tree() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    env.scafld(&["init"]).assert_code(0);
    let config = std::fs::read(env.work.join(".git/config")).unwrap();
    let yaml = std::fs::read(env.work.join(".scafld/config.yaml")).unwrap();
    std::os::unix::fs::symlink(".git/config", env.work.join("CLAUDE.md")).unwrap();
    std::os::unix::fs::symlink(".scafld/config.yaml", env.work.join("AGENTS.md")).unwrap();
    let run = env.scafld(&["init", "--agents", "--json"]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    assert_eq!(std::fs::read(env.work.join(".git/config")).unwrap(), config);
    assert_eq!(std::fs::read(env.work.join(".scafld/config.yaml")).unwrap(), yaml);
    scafld_tests::git(&env.work, &["status", "--short"]);
    let warned = |result: &serde_json::Value, start: &str| {
        result["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(serde_json::Value::as_str)
            .any(|w| w.starts_with(start))
    };
    assert!(warned(&result, "CLAUDE.md is a symlink to .git/config, inside git's store .git"), "{result}");
    assert!(warned(&result, "AGENTS.md is a symlink to .scafld/config.yaml, inside scafld's own .scafld/"), "{result}");
    assert!(result["updated"].as_array().unwrap().is_empty(), "{result}");

    // A link to a folder is left as it is too.
    std::fs::remove_file(env.work.join("CLAUDE.md")).unwrap();
    std::fs::remove_file(env.work.join("AGENTS.md")).unwrap();
    std::fs::create_dir_all(env.work.join("docs")).unwrap();
    std::os::unix::fs::symlink("docs", env.work.join("CLAUDE.md")).unwrap();
    let run = env.scafld(&["init", "--agents", "--json"]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    assert!(warned(&result, "CLAUDE.md is a symlink to docs, which is not a regular file"), "{result}");

    std::fs::remove_file(env.work.join("CLAUDE.md")).unwrap();
    std::fs::write(env.work.join("docs/guide.md"), "# Team guide\n").unwrap();
    std::os::unix::fs::symlink("docs/guide.md", env.work.join("CLAUDE.md")).unwrap();
    let run = env.scafld(&["init", "--agents", "--json"]);
    run.assert_code(0);
    assert!(run.json()["result"]["updated"].as_array().unwrap().iter().any(|p| p == "CLAUDE.md"));
    let guide = std::fs::read_to_string(env.work.join("docs/guide.md")).unwrap();
    assert!(guide.starts_with("# Team guide\n\n<!-- scafld:agent-guide"), "{guide}");
}

/// One guide file that cannot take the guide never fails `init --agents` half-way: in a fresh
/// folder whose AGENTS.md is a folder and whose CLAUDE.md is not UTF-8, init makes the
/// workspace, leaves both as they are and names each in a warning.
#[test]
fn init_agents_leaves_a_guide_it_cannot_use_with_a_warning() {
    let env = TestEnv::new();
    std::fs::create_dir(env.work.join("AGENTS.md")).unwrap();
    std::fs::write(env.work.join("CLAUDE.md"), b"# rules \xff\xfe\n").unwrap();
    let run = env.scafld(&["init", "--agents", "--json"]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    let warnings =
        result["warnings"].as_array().unwrap().iter().filter_map(serde_json::Value::as_str).collect::<Vec<_>>();
    assert!(warnings.iter().any(|w| w.starts_with("AGENTS.md is a directory, not a file")), "{result}");
    assert!(warnings.iter().any(|w| w.starts_with("CLAUDE.md is not UTF-8 text")), "{result}");
    assert!(env.work.join(".scafld/config.yaml").is_file(), "{result}");
    assert!(env.work.join("AGENTS.md").is_dir());
    assert_eq!(std::fs::read(env.work.join("CLAUDE.md")).unwrap(), b"# rules \xff\xfe\n");
}

/// A daemon that accepts but never answers (stopped, as one stuck looks): every command gives
/// up after the handshake's bound with exit 6 and names the way out by the pid in the state
/// directory's lock file. Before, `daemon status`, `daemon stop` and `list` blocked for ever.
#[test]
fn a_daemon_that_never_answers_is_reported_with_its_pid_not_waited_on() {
    use nix::sys::signal::{Signal, kill};
    let mut env = TestEnv::new();
    let pid = env.start_daemon();
    env.init();
    let daemon = nix::unistd::Pid::from_raw(pid as i32);
    kill(daemon, Signal::SIGSTOP).unwrap();
    let runs: Vec<_> = [&["daemon", "status"][..], &["daemon", "stop"], &["list"]]
        .into_iter()
        .map(|args| {
            let mut command = env.scafld_command(args);
            std::thread::spawn(move || scafld_tests::output_within(&mut command, std::time::Duration::from_secs(30)))
        })
        .collect();
    let runs: Vec<_> = runs.into_iter().map(|run| scafld_tests::Run::from(run.join().unwrap())).collect();
    kill(daemon, Signal::SIGCONT).unwrap();
    for run in runs {
        assert_eq!(run.code, 6, "{run:?}");
        assert!(run.stderr.contains("did not answer within 10s"), "{run:?}");
        assert!(run.stderr.contains(&format!("`kill -CONT {pid}` resumes it")), "{run:?}");
    }
    env.scafld(&["daemon", "status"]).assert_code(0);
}

/// A work tree git finds only through `GIT_DIR`/`GIT_WORK_TREE` (the daemon never sees the
/// caller's environment): approve's refusal names the variables, and its hint, a `.git` file
/// naming the git directory, is a way out; `git init`, the hint for a folder with no repository,
/// would only reinitialise GIT_DIR and loop.
#[test]
fn a_repository_found_only_through_git_dir_is_named_with_a_hint_that_works() {
    let env = TestEnv::new();
    let git_dir = env.path("elsewhere/repo.git");
    std::fs::create_dir_all(&git_dir).unwrap();
    git(&git_dir, &["init", "-q", "--bare"]);
    let with_env = |args: &[&str]| {
        let mut command = Command::new("git");
        command.args(args).current_dir(&env.work).env("GIT_DIR", &git_dir).env("GIT_WORK_TREE", &env.work);
        assert!(command.status().unwrap().success(), "git {args:?}");
    };
    with_env(&["config", "core.bare", "false"]);
    std::fs::write(env.work.join("f.txt"), "hi\n").unwrap();
    with_env(&["add", "f.txt"]);
    with_env(&["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "init"]);
    env.scafld(&["init"]).assert_code(0);
    std::fs::write(
        env.work.join(".scafld/specs/drafts/t.md"),
        "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\n---\n\n# T\n\n## Summary\n\nS.\n\n## Phase 1: Do\n\nObjective: do.\n\nAcceptance:\n- [ ] `a1` test - ok\n  - Command: `true`\n",
    )
    .unwrap();
    let mut approve = env.scafld_command(&["approve", "t", "--reason", "env", "--json"]);
    approve.env("GIT_DIR", &git_dir).env("GIT_WORK_TREE", &env.work);
    let refused = Run::from(approve.output().unwrap());
    refused.assert_code(1);
    let error = &refused.json()["error"];
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("GIT_DIR and GIT_WORK_TREE are set"), "{error}");
    let hint = error["hint"].as_str().unwrap();
    assert!(hint.contains("gitdir:") && !hint.contains("git init"), "{error}");
    // Following the hint: the `.git` file it names, written as it says.
    let command = &hint[hint.find("`printf").unwrap() + 1..];
    let command = &command[..command.find('`').unwrap()];
    assert!(Command::new("sh").args(["-c", command]).current_dir(&env.work).status().unwrap().success());
    let mut again = env.scafld_command(&["approve", "t", "--reason", "env"]);
    again.env("GIT_DIR", &git_dir).env("GIT_WORK_TREE", &env.work);
    Run::from(again.output().unwrap()).assert_code(0);
    // And git, without the variables, reads the same repository through it.
    assert!(git(&env.work, &["log", "--format=%s"]).contains("init"));
}

/// A daemon that does not say how many entries an export wrote (an older build's) is never
/// reported as having written none: the count is said to be unknown.
#[test]
fn an_export_whose_count_the_daemon_does_not_give_claims_no_count() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.work.join(".scafld/specs")).unwrap();
    let fake = future_daemon(&env, |seen| {
        let last = seen.last().unwrap();
        let id = last["id"].clone();
        let result = match last["method"].as_str() {
            Some("daemon.hello") => {
                json!({"protocol_version": scafld_protocol::PROTOCOL_VERSION, "daemon_version": "old",
                "pid": 1, "executable": scafld_tests::scafldd_identity()})
            }
            Some("task.session") => json!({"task_id": "t1", "entries": [], "exported": "/somewhere/ledger.json"}),
            other => panic!("unexpected call {other:?}"),
        };
        vec![json!({"jsonrpc": "2.0", "id": id, "result": result})]
    });
    let run = env.scafld(&["session", "t1", "--export"]);
    fake.join().unwrap();
    run.assert_code(0);
    assert!(!run.stdout.contains("exported 0"), "{}", run.stdout);
    assert!(
        run.stdout.contains("exported the ledger to /somewhere/ledger.json (the daemon did not say how many entries)"),
        "{}",
        run.stdout
    );
}

/// A daemon speaking another protocol answers at the socket: `doctor` fails its daemon row
/// with the restart as the fix, never "not running; any command starts it".
#[test]
fn doctor_reports_a_daemon_of_another_protocol() {
    let env = TestEnv::new();
    let fake = future_daemon(&env, |seen| match seen {
        [hello] => vec![hello_999(hello)],
        _ => Vec::new(),
    });
    let run = env.scafld(&["doctor", "--json"]);
    fake.join().unwrap();
    let report = run.json();
    let checks = report["result"]["checks"].as_array().or_else(|| report["error"]["details"]["checks"].as_array());
    let checks = checks.unwrap_or_else(|| panic!("{report}"));
    let daemon = checks.iter().find(|c| c["name"] == "daemon").unwrap();
    assert_eq!(daemon["health"], "fail", "{daemon}");
    assert!(daemon["detail"].as_str().unwrap().contains("protocol 999"), "{daemon}");
    assert_eq!(daemon["fix"], "scafld daemon stop, then scafld daemon start", "{daemon}");
    run.assert_code(1);
}

/// A template review against a daemon of another protocol exits 6, the template table's code
/// for a daemon it cannot use, as when none answers; the other families keep their own codes
/// for it (verify 2, review wait 5).
#[test]
fn a_template_review_against_a_daemon_of_another_protocol_exits_6() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    std::fs::create_dir_all(env.work.join(".scafld/specs")).unwrap();
    // A daemon of a future release for as many connections as a command makes: every line is
    // answered as the handshake.
    let listener = UnixListener::bind(&env.socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    let reply = hello_999(&serde_json::from_str(&line).unwrap());
                    line.clear();
                    if (&stream).write_all(format!("{reply}\n").as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    for (args, code) in [
        (&["review", "code", "--json"][..], 6),
        (&["verify", "--json"][..], 2),
        (&["review", "wait", "--json", "--session-key", "k"][..], 5),
    ] {
        let run = env.scafld(args);
        run.assert_code(code);
        assert_eq!(run.json()["error"]["code"], "protocol_mismatch", "{args:?}: {}", run.stdout);
    }
    std::fs::remove_file(&env.socket).unwrap();
}

/// A path the caller names is shown on one line in a human error, a newline in it as `^J`:
/// a file name cannot forge a line of scafld's own such as `next:`.
#[test]
fn a_newline_in_a_named_path_stays_on_its_error_line() {
    let env = TestEnv::new();
    env.init();
    let name = "f\nnext: scafld complete greet";
    std::fs::write(env.work.join(format!("{name}.json")), "not a receipt").unwrap();
    let root = format!("/nonexistent-scafld/{name}");
    let json = format!("{name}.json");
    for args in [
        vec!["--root", root.as_str(), "status", "greet"],
        vec!["receipt", "show", json.as_str()],
        vec!["man", "--out", json.as_str()],
    ] {
        let run = env.scafld(&args);
        assert!(run.stderr.contains("f^Jnext: scafld complete greet"), "{args:?}: {}", run.stderr);
        assert!(!run.stderr.lines().any(|l| l.starts_with("next:")), "{args:?}: {}", run.stderr);
    }
}

/// `--help` and `--version` are answers on stdout like any other: one that cannot be written
/// exits 1 and says so on stderr.
#[test]
fn help_and_version_that_cannot_be_written_fail() {
    let env = TestEnv::new();
    for args in [vec!["--version"], vec!["--help"], vec!["status", "--help"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let run = Run::from(env.scafld_command(&args).stdout(full).output().unwrap());
        run.assert_code(1);
        assert!(run.stderr.contains("cannot write the output to stdout"), "{args:?}: {}", run.stderr);
    }
}

/// Colour is decided per stream: stdout a terminal and stderr a file, the file gets no
/// escape codes (and the other way round).
#[test]
fn colour_is_decided_for_each_stream() {
    use std::os::fd::FromRawFd;
    let env = TestEnv::new();
    env.init();
    std::fs::write(
        env.work.join(".scafld/specs/drafts/t.md"),
        "---\nspec_version: '2.0'\ntask_id: t\nstatus: draft\nharden_status: not_run\nsize: small\nrisk_level: low\n---\n\n# T\n\n## Summary\n\nBroken.\n\n## Scope\n\n- `a.txt` - a file.\n\n## Phase 1: One\n\nObjective: one.\n\nAcceptance:\n- [ ] `a1` test - something\n  - Command:\n",
    )
    .unwrap();
    // A terminal for stdout: the main side is kept open (and drained by nobody: the command
    // prints little) so the child's writes succeed.
    // SAFETY: plain libc calls on a descriptor this test opens and owns.
    let (main, sub) = unsafe {
        let main = nix::libc::posix_openpt(nix::libc::O_RDWR | nix::libc::O_NOCTTY);
        assert!(main >= 0 && nix::libc::grantpt(main) == 0 && nix::libc::unlockpt(main) == 0);
        let mut name = [0 as nix::libc::c_char; 128];
        assert_eq!(nix::libc::ptsname_r(main, name.as_mut_ptr(), name.len()), 0);
        let sub = nix::libc::open(name.as_ptr(), nix::libc::O_RDWR | nix::libc::O_NOCTTY);
        assert!(sub >= 0);
        (std::fs::File::from_raw_fd(main), std::fs::File::from_raw_fd(sub))
    };
    let mut command = env.scafld_command(&["validate", "t"]);
    command.env_remove("NO_COLOR").stdout(sub).stderr(std::process::Stdio::piped());
    let run = Run::from(command.output().unwrap());
    drop(main);
    run.assert_code(3);
    assert!(run.stderr.contains("invalid"), "{}", run.stderr);
    assert!(!run.stderr.contains('\x1b'), "escape codes in a redirected stderr: {:?}", run.stderr);
}
