//! Workspace identity through the real binaries: a folder keeps what it ran across
//! `scafld init` (range reviews made before it, a build running while its id file is lost and
//! put back), never takes a new identity under a running job, and a git worktree whose
//! `.scafld` links to the main checkout's is the same workspace, with one stable id; a
//! `.scafld` never initialised is read without a write until a command that writes settles it.

use std::path::Path;
use std::process::Command;

use scafld_tests::{Run, TestEnv, git, wait_until};
use serde_json::{Value, json};

/// A shell loop that ends once `file` exists in the command's folder (no fixed sleep).
fn until(file: &str) -> String {
    format!("until test -f {file}; do sleep 0.02; done")
}

/// A draft spec whose phases each hold one criterion running `command`.
fn spec(task: &str, commands: &[&str]) -> String {
    let mut text = format!(
        "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\n---\n\n# Task {task}\n\n## Scope\n\n- `src/` - the change.\n"
    );
    for (n, command) in commands.iter().enumerate() {
        text.push_str(&format!(
            "\n## Phase {p}: Step {p}\n\nAcceptance:\n- [ ] `c{p}` test - step {p}\n  - Command: `{command}`\n",
            p = n + 1
        ));
    }
    text
}

fn id_file(root: &Path) -> String {
    std::fs::read_to_string(root.join(".scafld/workspace_id")).unwrap().trim().to_string()
}

fn job_state(env: &TestEnv, job: &str) -> Value {
    env.scafld(&["job", "status", job, "--json"]).json()["result"].clone()
}

/// `scafld args...` run in `dir` instead of the work directory.
fn scafld_in(env: &TestEnv, dir: &Path, args: &[&str]) -> Run {
    Run::from(env.scafld_command(args).current_dir(dir).output().unwrap())
}

/// A plain git repository reviews a range with `scafld review --diff` (its data in the state
/// dir), and `scafld init` follows while the reviewer still runs: the session is the folder's
/// all the same. Status, wait (by key and without one), the job list and the next round's
/// number find it, after a restart too.
#[test]
fn a_range_reviewed_before_scafld_init_stays_the_folders_after_it() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    git(&env.work, &["commit", "-q", "--allow-empty", "-m", "base"]);
    let base = git(&env.work, &["rev-parse", "HEAD"]);
    std::fs::write(env.work.join("lib.py"), "def f(x):\n    return x.y\n").unwrap();
    git(&env.work, &["add", "lib.py"]);
    git(&env.work, &["commit", "-q", "-m", "change"]);
    let head = git(&env.work, &["rev-parse", "HEAD"]);
    let release = env.path("release");
    let reviewer = env.path("reviewer.sh");
    let dossier = r#"{"verdict":"fail","mode":"discover","summary":"fail review","findings":[{"id":"null-check","severity":"high","blocks_completion":true,"summary":"Missing null check","location":{"path":"lib.py","line":2},"evidence":"reads input unchecked","impact":"crashes","validation":"call it with None"}],"attack_log":[{"target":"diff","attack":"trace callers","result":"clean"}],"budget":{}}"#;
    std::fs::write(
        &reviewer,
        format!(
            "#!/bin/sh\ncat > /dev/null\n{}\ncat <<'JSON'\n{dossier}\nJSON\n",
            until(&release.display().to_string())
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&reviewer).status().unwrap();
    let range = format!("{base}..{head}");
    let reviewer = reviewer.display().to_string();
    let review = |extra: &[&str]| {
        let mut args = vec!["review", "--diff", &range, "--reviewers", "command", "--provider-command", &reviewer];
        args.extend_from_slice(extra);
        env.scafld(&args)
    };
    let spawned = review(&["--detach", "--json"]);
    spawned.assert_code(0);
    let key = spawned.json()["session_key"].as_str().unwrap().to_string();
    let job = spawned.json()["job_ids"][0].as_str().unwrap().to_string();
    assert!(spawned.json()["kept_in"].as_str().unwrap().contains("/repos/repo-"), "{}", spawned.stdout);

    env.init();
    let status = env.scafld(&["review", "status", "--session-key", &key, "--json"]);
    status.assert_code(0);
    assert_eq!(
        (status.json()["result"]["range"].as_str(), status.json()["result"]["state"].as_str()),
        (Some(range.as_str()), Some("running"))
    );
    let jobs = env.scafld(&["job", "list", "--json"]).json()["result"]["jobs"].clone();
    assert!(jobs.as_array().unwrap().iter().any(|j| j["job_id"] == job.as_str()), "{jobs}");

    std::fs::write(&release, "").unwrap();
    let waited = env.scafld(&["review", "wait", "--session-key", &key, "--timeout", "30", "--json"]);
    waited.assert_code(1);
    assert_eq!(waited.json()["issues"][0]["file"], "lib.py", "{}", waited.stdout);
    let unnamed = env.scafld(&["review", "wait", "--timeout", "30", "--json"]);
    assert_eq!(unnamed.json()["session_key"], key.as_str(), "{}", unnamed.stdout);

    // The same range again, now in the workspace: the folder's next round.
    let again = review(&["--json"]);
    again.assert_code(1);
    assert_eq!(again.json()["consensus"]["iteration"], 2, "{}", again.stdout);

    env.scafld(&["daemon", "stop"]).assert_code(0);
    let after_restart = env.scafld(&["review", "status", "--session-key", &key, "--json"]);
    after_restart.assert_code(0);
    assert_eq!(after_restart.json()["result"]["state"], "resolved", "{}", after_restart.stdout);
}

/// `--root` naming a plain git repository (or a folder in one) reviews a range there as the
/// same command run inside it does, without `scafld init`; its sessions are found through
/// `--root` too. A folder in no repository is still refused, saying where a range review runs.
#[test]
fn a_range_review_runs_in_a_plain_repository_named_by_root() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    for text in ["a", "b"] {
        std::fs::create_dir_all(env.work.join("src")).unwrap();
        std::fs::write(env.work.join("src/a"), text).unwrap();
        git(&env.work, &["add", "-A"]);
        git(&env.work, &["commit", "-qm", text]);
    }
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let reviewer = env.path("reviewer.sh");
    std::fs::write(&reviewer, "#!/bin/sh\ncat > /dev/null\necho no dossier\n").unwrap();
    Command::new("chmod").arg("+x").arg(&reviewer).status().unwrap();
    let reviewer = reviewer.display().to_string();
    for root in [env.work.clone(), env.work.join("src")] {
        let root = root.display().to_string();
        let args = [
            "--root",
            &root,
            "review",
            "--diff",
            "HEAD~1..HEAD",
            "--reviewers",
            "command",
            "--provider-command",
            &reviewer,
            "--detach",
            "--json",
        ];
        let spawned = scafld_in(&env, &elsewhere, &args);
        spawned.assert_code(0);
        assert!(spawned.json()["kept_in"].as_str().unwrap().contains("/repos/repo-"), "{}", spawned.stdout);
        let key = spawned.json()["session_key"].as_str().unwrap().to_string();
        let status =
            scafld_in(&env, &elsewhere, &["--root", &root, "review", "status", "--session-key", &key, "--json"]);
        status.assert_code(0);
        assert_eq!(status.json()["result"]["range"], "HEAD~1..HEAD", "{}", status.stdout);
    }
    assert!(!env.work.join(".scafld").exists(), "nothing is written into the repository");

    let plain = elsewhere.display().to_string();
    let refused = scafld_in(&env, &elsewhere, &["--root", &plain, "review", "--diff", "HEAD~1..HEAD", "--json"]);
    refused.assert_code(1);
    assert!(refused.stdout.contains("review --diff runs in a git repository"), "{}", refused.stdout);
}

/// A build runs while `.scafld/workspace_id` is deleted and `scafld init` runs again in the
/// folder: the folder keeps its workspace (the id is put back and init says so), the next build
/// attaches to the running job instead of starting a second one, and the task's ledger keeps
/// its history. While a job runs, the folder is refused another workspace's identity, and
/// nothing is written.
#[test]
fn a_folder_keeps_its_workspace_and_running_build_when_its_id_file_is_lost() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    let runs = env.path("runs.log");
    let step = |file: &str| format!("echo run >> {}; {}", runs.display(), until(&env.path(file).display().to_string()));
    std::fs::write(env.work.join(".scafld/specs/drafts/long.md"), spec("long", &[&step("one"), &step("two")])).unwrap();
    env.scafld(&["approve", "long", "--reason", "tests skip hardening"]).assert_code(0);
    env.scafld(&["build", "long"]).assert_code(0);
    let id = id_file(&env.work);
    let started = env.scafld(&["build", "long", "--detach", "--json"]);
    let job = started.json()["result"]["job_id"].as_str().unwrap().to_string();
    wait_until("the step's command to run", || std::fs::read_to_string(&runs).is_ok_and(|t| t.lines().count() == 1));

    std::fs::remove_file(env.work.join(".scafld/workspace_id")).unwrap();
    let init = env.init();
    assert_eq!(init["result"]["workspace"]["workspace_id"], id.as_str(), "{init}");
    assert_eq!(id_file(&env.work), id);
    assert!(init["result"]["warnings"].to_string().contains("was missing"), "{init}");
    let attached = env.scafld(&["build", "long", "--detach", "--json"]);
    assert_eq!(
        (attached.json()["result"]["job_id"].as_str(), attached.json()["result"]["attached"].as_bool()),
        (Some(job.as_str()), Some(true)),
        "{}",
        attached.stdout
    );
    let listed = env.scafld(&["job", "list", "--json"]).json()["result"]["jobs"].clone();
    assert!(listed.as_array().unwrap().iter().any(|j| j["job_id"] == job.as_str()), "{listed}");
    std::fs::write(env.path("one"), "").unwrap();
    let finished = env.scafld(&["job", "wait", &job, "--timeout", "30", "--json"]);
    finished.assert_code(0);
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1, "the step ran once");
    let ledger = env.scafld(&["session", "long", "--json"]).json()["result"]["entries"].clone();
    let approval = ledger.as_array().unwrap().iter().find(|e| e["type"] == "approval").cloned().unwrap_or_default();
    assert!(approval.to_string().contains("tests skip hardening"), "the approval stays on record: {ledger}");

    // The next step runs, and the id file comes to name another workspace (one copied in from
    // elsewhere): the folder is refused that identity while the job of the one it holds runs,
    // and nothing is written; with the id back, the job ends as usual.
    let second = env.scafld(&["build", "long", "--detach", "--json"]);
    let second = second.json()["result"]["job_id"].as_str().unwrap().to_string();
    wait_until("the second step's command to run", || {
        std::fs::read_to_string(&runs).is_ok_and(|t| t.lines().count() == 2)
    });
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    git(&elsewhere, &["init", "-q"]);
    scafld_in(&env, &elsewhere, &["init"]).assert_code(0);
    let foreign = id_file(&elsewhere);
    std::fs::write(env.work.join(".scafld/workspace_id"), format!("{foreign}\n")).unwrap();
    let before = scafld_tests::tree(&env.work);
    for args in [&["status", "long", "--json"][..], &["init", "--json"][..]] {
        let refused = env.scafld(args);
        refused.assert_code(1);
        assert_eq!(refused.json()["error"]["code"], "busy", "{args:?}: {}", refused.stdout);
        let hint = refused.json()["error"]["hint"].as_str().unwrap_or_default().to_string();
        assert!(hint.contains(&format!("scafld job wait {second}")) && hint.contains(&id), "{hint}");
    }
    assert_eq!(scafld_tests::tree(&env.work), before, "a refused identity writes nothing");
    assert_eq!(job_state(&env, &second)["state"], "running");
    std::fs::write(env.work.join(".scafld/workspace_id"), format!("{id}\n")).unwrap();
    std::fs::write(env.path("two"), "").unwrap();
    env.scafld(&["job", "wait", &second, "--timeout", "30"]).assert_code(0);
    assert_eq!(env.scafld(&["status", "long", "--json"]).json()["result"]["status"], "review");
}

/// An id file rewritten by hand with an id nothing records (or one copied from another
/// machine) never parts a folder from its history: the folder keeps the workspace recorded
/// for it, so a blocked task whose spec was edited to say it passed is still the ledger's
/// blocked task; the command that put it back (`status`, `list`, `build`) says so once, as
/// `init` does.
#[test]
fn an_id_file_naming_an_unknown_workspace_keeps_the_folders_own_history() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/t1.md"), spec("t1", &["false"])).unwrap();
    env.scafld(&["approve", "t1", "--reason", "tests skip hardening"]).assert_code(0);
    env.scafld(&["build", "t1"]).assert_code(0);
    env.scafld(&["build", "t1"]).assert_code(3);
    let id = id_file(&env.work);
    let path = env.work.join(".scafld/specs/active/t1.md");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("- [ ] `", "- [x] `").replace("status: blocked", "status: review")).unwrap();
    let unknown = "0123456789abcdef0123456789abcdef";
    std::fs::write(env.work.join(".scafld/workspace_id"), format!("{unknown}\n")).unwrap();
    let said = format!("warning: .scafld/workspace_id named {unknown}, a workspace nothing here records");
    let status = env.scafld(&["status", "t1", "--json"]);
    let result = status.json()["result"].clone();
    assert_eq!(result["status"], "blocked", "the ledger still decides: {result}");
    assert_eq!(id_file(&env.work), id, "the folder's own id is put back");
    assert!(status.stderr.contains(&said), "{}", status.stderr);
    assert!(result["warnings"][0].as_str().unwrap_or_default().contains(&id), "{result}");
    let again = env.scafld(&["status", "t1", "--json"]);
    assert!(!again.stderr.contains("warning:") && again.json()["result"].get("warnings").is_none(), "said once");
    for args in [&["list"][..], &["build", "t1"]] {
        std::fs::write(env.work.join(".scafld/workspace_id"), format!("{unknown}\n")).unwrap();
        let run = env.scafld(args);
        assert!(run.stderr.contains(&said), "{args:?}: {}", run.stderr);
        assert!(!env.scafld(args).stderr.contains("warning:"), "{args:?}: said once");
    }
    std::fs::write(env.work.join(".scafld/workspace_id"), format!("{unknown}\n")).unwrap();
    let init = env.init();
    assert_eq!(init["result"]["workspace"]["workspace_id"], id.as_str(), "{init}");
    assert!(
        init["result"]["warnings"].to_string().contains(&format!("named {unknown}, a workspace nothing here records")),
        "{init}"
    );
}

/// A `.scafld` without an id file that nothing is recorded for (a vendored example, a fresh
/// clone) is read without writing into it or registering it, across a restart too; the first
/// command that writes settles it under the id the reads used. Once registered, a lost id
/// file comes back on a read, as for any workspace.
#[test]
fn reads_of_a_folder_never_initialised_write_nothing_until_a_command_writes() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    let example = env.work.join("docs/example");
    std::fs::create_dir_all(example.join(".scafld/specs/drafts")).unwrap();
    std::fs::write(example.join(".scafld/specs/drafts/t.md"), spec("t", &["true"])).unwrap();
    let recorded = || env.scafld(&["daemon", "status", "--json"]).json()["result"]["workspaces"].clone();
    let before = scafld_tests::tree(&env.work);
    // Every command that only reads, answered or refused (a draft has no packet to print and
    // no review session yet): none writes the id file or registers the folder.
    let read = || {
        for (args, code) in [
            (&["status", "t"][..], 0),
            (&["list"], 0),
            (&["validate", "t"], 0),
            (&["handoff", "t"], 0),
            (&["report"], 0),
            (&["session", "t"], 0),
            (&["review", "t", "--print-context"], 1),
            (&["review", "status", "t"], 2),
            (&["review", "wait", "--timeout", "0"], 64),
            (&["review", "history"], 0),
            (&["job", "list"], 0),
        ] {
            let run = scafld_in(&env, &example, args);
            assert_eq!(run.code, code, "{args:?}: {}{}", run.stdout, run.stderr);
            assert!(!example.join(".scafld/workspace_id").exists(), "{args:?} wrote the id file");
        }
    };
    read();
    env.scafld(&["daemon", "stop"]).assert_code(0);
    read();
    assert_eq!(scafld_tests::tree(&env.work), before, "a read wrote into the tree");
    assert_eq!(recorded().as_array().map(|w| w.len()), Some(1), "{}", recorded());

    scafld_in(&env, &example, &["approve", "t", "--reason", "tests skip hardening"]).assert_code(0);
    let id = id_file(&example);
    let root = example.canonicalize().unwrap().display().to_string();
    assert!(
        recorded().as_array().unwrap().iter().any(|w| w["root"] == root.as_str() && w["workspace_id"] == id.as_str())
    );
    std::fs::remove_file(example.join(".scafld/workspace_id")).unwrap();
    let status = scafld_in(&env, &example, &["status", "t", "--json"]);
    assert_eq!(status.json()["result"]["status"], "approved", "{}", status.stdout);
    assert_eq!(id_file(&example), id, "the registered folder's id is put back");
}

/// A git worktree whose `.scafld` is a symlink to the main checkout's: switching between the
/// two checkouts keeps the one id (it used to be rewritten at every switch, orphaning the
/// ledger), both read the same task history, and the record stays with the checkout whose
/// `.scafld` is the real folder, across a restart too.
#[test]
fn a_git_worktree_sharing_the_main_checkouts_scafld_keeps_one_id() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/shared.md"), spec("shared", &["true"])).unwrap();
    std::fs::write(env.work.join("README"), "main\n").unwrap();
    git(&env.work, &["add", "README"]);
    git(&env.work, &["commit", "-q", "-m", "base"]);
    env.scafld(&["approve", "shared", "--reason", "tests skip hardening"]).assert_code(0);
    let worktree = env.path("worktree");
    git(&env.work, &["worktree", "add", "-q", worktree.to_str().unwrap(), "-b", "side"]);
    std::os::unix::fs::symlink(env.work.join(".scafld"), worktree.join(".scafld")).unwrap();
    let id = id_file(&env.work);
    let entries = |dir: &Path| {
        let run = scafld_in(&env, dir, &["session", "shared", "--json"]);
        run.assert_code(0);
        run.json()["result"]["entries"].clone()
    };
    let history = entries(&env.work);
    for round in 0..3 {
        for dir in [&worktree, &env.work] {
            let status = scafld_in(&env, dir, &["status", "shared", "--json"]);
            status.assert_code(0);
            assert_eq!(status.json()["result"]["status"], "approved", "round {round} in {}", dir.display());
            assert_eq!(id_file(&env.work), id, "round {round} in {}", dir.display());
        }
    }
    assert_eq!(entries(&worktree), history);
    let main_root = env.work.canonicalize().unwrap().display().to_string();
    let recorded = || env.scafld(&["daemon", "status", "--json"]).json()["result"]["workspaces"].clone();
    let expected = json!([{"workspace_id": id, "root": main_root, "open": true}]);
    assert_eq!(recorded(), expected);

    // After a restart, the worktree first: nothing moves.
    env.scafld(&["daemon", "stop"]).assert_code(0);
    scafld_in(&env, &worktree, &["status", "shared"]).assert_code(0);
    env.scafld(&["status", "shared"]).assert_code(0);
    assert_eq!(id_file(&env.work), id);
    assert_eq!(entries(&worktree), history);
    assert_eq!(recorded(), expected);

    // Built in the worktree, next is the review, which cannot write its packet through the
    // link: named from the checkout the link leads to, where it runs as printed.
    scafld_in(&env, &worktree, &["build", "shared"]).assert_code(0);
    scafld_in(&env, &worktree, &["build", "shared"]).assert_code(0);
    let next = scafld_in(&env, &worktree, &["status", "shared", "--json"]).json()["result"]["next_command"].clone();
    let shown = format!("cd {main_root} && scafld review shared");
    assert_eq!(next, shown.as_str(), "in the worktree");
    let next = env.scafld(&["status", "shared", "--json"]).json()["result"]["next_command"].clone();
    assert_eq!(next, "scafld review shared", "in the main checkout");
}

/// A repository with task `task` approved (its one criterion runs `command`, its scope
/// `greet.txt`) and a git worktree of it on branch `side` whose `.scafld` is a symlink to the
/// main checkout's: the worktree, and the main checkout's canonical path.
fn worktree_sharing_scafld(env: &TestEnv, task: &str, command: &str) -> (std::path::PathBuf, String) {
    git(&env.work, &["init", "-q"]);
    env.init();
    let text = format!(
        "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\n---\n\n# Task {task}\n\n## Scope\n\n- `greet.txt` - the greeting.\n\n## Phase 1: Greet\n\nAcceptance:\n- [ ] `c1` test - it greets\n  - Command: `{command}`\n"
    );
    std::fs::write(env.work.join(format!(".scafld/specs/drafts/{task}.md")), text).unwrap();
    std::fs::write(env.work.join("README"), "main\n").unwrap();
    git(&env.work, &["add", "README"]);
    git(&env.work, &["commit", "-q", "-m", "base"]);
    env.scafld(&["approve", task, "--reason", "tests skip hardening"]).assert_code(0);
    let worktree = env.path("worktree");
    git(&env.work, &["worktree", "add", "-q", worktree.to_str().unwrap(), "-b", "side"]);
    std::os::unix::fs::symlink(env.work.join(".scafld"), worktree.join(".scafld")).unwrap();
    (worktree, env.work.canonicalize().unwrap().display().to_string())
}

/// A command line as scafld prints it, run by the shell in `dir` (`scafld` found on PATH).
fn shell_in(env: &TestEnv, dir: &Path, line: &str) -> Run {
    let mut command = Command::new("sh");
    env.apply_env(&mut command);
    let path = std::env::join_paths(
        std::iter::once(scafld_tests::bin_dir().to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    Run::from(command.env("PATH", path).args(["-c", line]).current_dir(dir).output().unwrap())
}

/// In a git worktree sharing the main checkout's `.scafld`, every hint naming `scafld
/// reconcile` (a build's answer whose spec was not updated, `list`, `report`, `status`,
/// reconcile's own refusal) names it from the main checkout, as the next action names a
/// command that writes, and run as printed in the worktree it puts the spec right. They
/// printed a plain `scafld reconcile <task>`, which fails there on the link.
#[test]
fn a_worktree_names_reconcile_from_the_main_checkout_on_every_surface() {
    let env = TestEnv::new();
    let (worktree, main_root) = worktree_sharing_scafld(&env, "t1", "grep -q hello greet.txt");
    env.scafld(&["build", "t1"]).assert_code(0);
    std::fs::write(worktree.join("greet.txt"), "hello\n").unwrap();
    let reconcile = format!("cd {main_root} && scafld reconcile t1");
    let built = scafld_in(&env, &worktree, &["build", "t1"]);
    built.assert_code(0);
    assert!(built.stdout.contains(&format!("`{reconcile}`")), "the build's answer:\n{}", built.stdout);
    let listed = scafld_in(&env, &worktree, &["list"]);
    assert!(listed.stdout.contains(&format!("`{reconcile}`")), "list:\n{}", listed.stdout);
    let report = scafld_in(&env, &worktree, &["report"]);
    let generic = format!("cd {main_root} && scafld reconcile <task>");
    assert!(report.stdout.contains(&generic), "report:\n{}", report.stdout);
    // Run plainly in the worktree it is refused on the link, and says where it runs.
    let refused = scafld_in(&env, &worktree, &["reconcile", "t1"]);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(refused.stderr.contains(&format!("`{reconcile}`")), "reconcile's refusal:\n{}", refused.stderr);
    // As printed, from the worktree, it works, and the file then says what the ledger does.
    shell_in(&env, &worktree, &reconcile).assert_code(0);
    let listed = scafld_in(&env, &worktree, &["list"]);
    assert!(!listed.stdout.contains("the file says"), "list after the reconcile:\n{}", listed.stdout);
    let status = scafld_in(&env, &worktree, &["status", "t1", "--json"]).json()["result"].clone();
    assert_eq!(status["status"], "review", "{status}");
}

/// A repository removed and made again at the same path, then `scafld init` there while a
/// freshly started daemon reopens the workspaces it knows: the new `.scafld` is a new
/// workspace, never the old one's (whose ledger would make a new draft read as approved, or a
/// new task's review as passed). Before, a reopen that came between init making `.scafld` and
/// writing its id gave the folder its old identity back, in about one run of four.
#[test]
fn a_repository_made_again_where_one_was_is_a_new_workspace() {
    let env = TestEnv::new();
    let repo = env.path("again");
    let draft = |repo: &Path| {
        let drafts = repo.join(".scafld/specs/drafts");
        std::fs::write(drafts.join("p.md"), spec("p", &["true"])).unwrap();
    };
    for round in 0..8 {
        let _ = std::fs::remove_dir_all(&repo);
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        scafld_in(&env, &repo, &["init"]).assert_code(0);
        draft(&repo);
        let status = scafld_in(&env, &repo, &["status", "p", "--json"]).json()["result"]["status"].clone();
        assert_eq!(status, "draft", "round {round}: a new repository's draft");
        scafld_in(&env, &repo, &["approve", "p", "--reason", "t"]).assert_code(0);
        scafld_in(&env, &repo, &["daemon", "stop"]).assert_code(0);
    }
}

/// A workspace's own `.scafld/` folder is never the root of another: `init` there (or below
/// it, or `--root` pointing there) is refused, naming the workspace, and writes nothing.
/// Commands run there work on the enclosing workspace, and a `.scafld` an older release
/// nested inside it is passed over with a warning instead of catching them.
#[test]
fn init_inside_a_workspaces_scafld_folder_is_refused_and_commands_there_find_the_workspace() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    let root = env.work.canonicalize().unwrap();
    std::fs::write(env.work.join(".scafld/specs/drafts/greet.md"), spec("greet", &["true"])).unwrap();
    let scafld = env.work.join(".scafld");
    let before = scafld_tests::tree(&env.work);
    let drafts = scafld.join("specs/drafts");
    for (dir, args) in [
        (scafld.clone(), vec!["init", "--json"]),
        (drafts.clone(), vec!["init", "--json"]),
        (env.work.clone(), vec!["init", "--root", ".scafld/specs", "--json"]),
    ] {
        let refused = scafld_in(&env, &dir, &args);
        refused.assert_code(2);
        let error = refused.json()["error"].clone();
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("inside the .scafld/ folder of the workspace {}", root.display())),
            "{message}"
        );
        assert!(error["hint"].as_str().unwrap().contains("already a workspace"), "{error}");
    }
    assert_eq!(scafld_tests::tree(&env.work), before, "a refused init writes nothing");
    // Nor in git's own store, which has no work tree.
    for dir in [env.work.join(".git"), env.work.join(".git/hooks")] {
        let refused = scafld_in(&env, &dir, &["init", "--json"]);
        refused.assert_code(2);
        let error = refused.json()["error"].clone();
        assert!(error["message"].as_str().unwrap().contains("inside git's own store"), "{error}");
        let hint = error["hint"].as_str().unwrap();
        let command = format!("scafld --root {} init", root.display());
        assert!(hint.contains(&format!("in the work tree: `{command}`")), "{error}");
        assert!(!dir.join(".scafld").exists(), "a refused init writes nothing");
        // The hint runs as printed, from where the refused command ran.
        let args: Vec<&str> = command.split(' ').skip(1).collect();
        scafld_in(&env, &dir, &args).assert_code(0);
    }

    let status = scafld_in(&env, &drafts, &["status", "greet", "--json"]);
    status.assert_code(0);
    assert_eq!(status.json()["result"]["task_id"], "greet");
    assert!(status.stderr.is_empty(), "{}", status.stderr);

    // What an older `init` left there: a workspace nested in the runner's folder.
    let nested = scafld.join(".scafld");
    std::fs::create_dir_all(nested.join("specs/drafts")).unwrap();
    let status = scafld_in(&env, &drafts, &["status", "greet", "--json"]);
    status.assert_code(0);
    assert_eq!(status.json()["result"]["task_id"], "greet");
    assert!(
        status.stderr.contains(&format!("warning: ignoring {}", root.join(".scafld/.scafld").display())),
        "{}",
        status.stderr
    );
    scafld_in(&env, &scafld.join("specs"), &["plan", "other"]).assert_code(0);
    assert!(env.work.join(".scafld/specs/drafts/other.md").is_file());
    assert!(!nested.join("specs/drafts/other.md").exists());
    // Named outright, it is refused, with the workspace to name instead.
    let explicit = env.scafld(&["status", "greet", "--root", ".scafld", "--json"]);
    explicit.assert_code(6);
    assert!(explicit.json()["error"]["hint"].as_str().unwrap().contains(&format!("--root {}", root.display())));
}

/// A fresh `scafld init`ed git workspace at `dir` with task `task`, approved and its phase
/// opened; its one criterion runs `command`.
fn opened(env: &TestEnv, dir: &Path, task: &str, command: &str) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q"]);
    scafld_in(env, dir, &["init"]).assert_code(0);
    std::fs::write(dir.join(format!(".scafld/specs/drafts/{task}.md")), spec(task, &[command])).unwrap();
    scafld_in(env, dir, &["approve", task, "--reason", "tests skip hardening"]).assert_code(0);
    scafld_in(env, dir, &["build", task]).assert_code(0);
}

/// A build runs while its workspace's folder is renamed and another workspace with the same
/// task id is moved into the old folder: the build's result goes to its own workspace at its
/// new folder (spec projected there, status review), and the workspace now at the old folder,
/// which never ran it, is left exactly as it was.
#[test]
fn a_build_whose_folder_is_renamed_ends_in_its_own_workspace_not_the_one_moved_in() {
    let env = TestEnv::new();
    let other = env.path("other");
    opened(&env, &other, "t", "test -f never-made");
    let release = env.path("release");
    opened(
        &env,
        &env.work,
        "t",
        &format!("touch {}; {}", env.path("ran").display(), until(&release.display().to_string())),
    );
    let started = env.scafld(&["build", "t", "--detach", "--json"]);
    let job = started.json()["result"]["job_id"].as_str().unwrap().to_string();
    wait_until("the step's command to run", || env.path("ran").exists());

    let moved = env.path("moved");
    std::fs::rename(&env.work, &moved).unwrap();
    std::fs::rename(&other, &env.work).unwrap();
    let before = scafld_tests::tree(&env.work);
    std::fs::write(&release, "").unwrap();
    let finished = scafld_in(&env, &moved, &["job", "wait", &job, "--timeout", "30", "--json"]);
    finished.assert_code(0);
    let message = finished.json()["result"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(!message.contains("missing"), "{}", finished.stdout);
    assert_eq!(scafld_tests::tree(&env.work), before, "the workspace moved in was written to");
    let text = std::fs::read_to_string(moved.join(".scafld/specs/active/t.md")).unwrap();
    assert!(text.contains("- [x] `c1`") && text.contains("status: review"), "{text}");
    assert_eq!(scafld_in(&env, &moved, &["status", "t", "--json"]).json()["result"]["status"], "review");
    assert_eq!(scafld_in(&env, &env.work, &["status", "t", "--json"]).json()["result"]["status"], "active");
}

/// The work directory as a git workspace whose task `t` is in review, its `src/lib.rs` built,
/// and a review of it started (detached) whose reviewer, once it ran, waits for the file
/// `release` to pass: the session's key.
fn reviewing(env: &TestEnv, release: &Path) -> String {
    let (reviewer, ran) = in_review(env, release);
    let spawned =
        env.scafld(&["review", "t", "--reviewers", "command", "--provider-command", &reviewer, "--detach", "--json"]);
    spawned.assert_code(0);
    wait_until("the reviewer to run", || ran.exists());
    spawned.json()["session_key"].as_str().unwrap().to_string()
}

/// [`reviewing`]'s workspace with no review started: the reviewer command, which touches the
/// returned file once it runs and passes once `release` exists.
fn in_review(env: &TestEnv, release: &Path) -> (String, std::path::PathBuf) {
    git(&env.work, &["init", "-q"]);
    git(&env.work, &["config", "user.email", "a@b"]);
    git(&env.work, &["config", "user.name", "a"]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/t.md"), spec("t", &["true"])).unwrap();
    std::fs::write(
        env.work.join(".scafld/config.local.yaml"),
        "review:\n  dossier:\n    min_attack_angles: 1\n  external:\n    absolute_max_seconds: 60\n    idle_timeout_seconds: 0\n",
    )
    .unwrap();
    env.scafld(&["approve", "t", "--reason", "tests skip hardening"]).assert_code(0);
    env.scafld(&["build", "t"]).assert_code(0);
    std::fs::create_dir_all(env.work.join("src")).unwrap();
    std::fs::write(env.work.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    assert_eq!(env.scafld(&["build", "t", "--json"]).json()["result"]["status"], "review");

    let ran = env.path("ran");
    let reviewer = env.path("reviewer.sh");
    let dossier = r#"{"verdict":"pass","mode":"discover","summary":"pass review","findings":[],"attack_log":[{"target":"diff","attack":"trace callers","result":"clean"}],"budget":{}}"#;
    std::fs::write(
        &reviewer,
        format!(
            "#!/bin/sh\ncat > /dev/null\ntouch {}\n{}\ncat <<'JSON'\n{dossier}\nJSON\n",
            ran.display(),
            until(&release.display().to_string())
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&reviewer).status().unwrap();
    (reviewer.display().to_string(), ran)
}

/// `scafld review t` waiting on its reviewer while the workspace's folder is renamed: the
/// client follows the session to the workspace's new folder (found by its id) and gives the
/// verdict, recorded there. Before, its next poll named the old folder and it ended with
/// "cannot use <old folder> as a workspace root" (exit 6), the verdict unsaid. The reviewer is
/// released once a poll after the move went through (the daemon then records the workspace
/// at its new folder) or the client ended.
#[test]
fn a_review_waited_on_while_its_folder_is_renamed_gives_its_verdict() {
    use std::io::BufRead;
    let env = TestEnv::new();
    let release = env.path("release");
    let (reviewer, _) = in_review(&env, &release);
    let mut review = env
        .scafld_command(&["review", "t", "--reviewers", "command", "--provider-command", &reviewer])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, said) = std::sync::mpsc::channel();
    let stderr = std::io::BufReader::new(review.stderr.take().unwrap());
    let reader = std::thread::spawn(move || stderr.lines().map_while(Result::ok).for_each(|l| drop(lines.send(l))));
    // The reviewer's activity is printed once a poll has come back pending.
    wait_until("the client to poll the running review", || said.try_iter().any(|l| l.contains("command reviewing")));
    let moved = env.path("moved");
    std::fs::rename(&env.work, &moved).unwrap();
    let manifest = env.state_dir.join("db.manifest.json");
    let moved_text = moved.display().to_string();
    wait_until("a poll after the move, or the client's end", || {
        std::fs::read_to_string(&manifest).is_ok_and(|m| m.contains(&moved_text))
            || review.try_wait().ok().flatten().is_some()
    });
    std::fs::write(&release, "").unwrap();
    let status = scafld_tests::wait_for_exit(&mut review, scafld_tests::DEADLINE);
    if status.is_none() {
        let _ = review.kill();
    }
    let output = review.wait_with_output().unwrap();
    reader.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let told = format!("{stdout}{}", said.try_iter().collect::<Vec<_>>().join("\n"));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{told}");
    assert!(stdout.contains("review t: pass"), "{told}");
    assert!(!env.work.exists(), "nothing was made at the old folder");
    let status = scafld_in(&env, &moved, &["status", "t", "--json"]);
    assert_eq!(status.json()["result"]["review_gate"], "pass", "{}", status.stdout);
}

/// `review.status` and `review.retry` naming a session from the folder it began in, after the
/// workspace's folder was renamed (a caller holding the old folder, as `scafld review`'s own
/// poll does: an editor, an agent on the socket), find its workspace by id as `review.wait`
/// does: the running review's status, then the retry of the reviewer that gave no verdict,
/// which passes in the moved workspace. Before, both refused the old folder ("cannot use
/// <old folder> as a workspace root") while a wait from it found the session.
#[test]
fn review_status_and_retry_from_a_renamed_folder_find_the_session_by_id() {
    let env = TestEnv::new();
    let release = env.path("release");
    let (reviewer, ran) = in_review(&env, &release);
    // The first run gives no verdict; the retry's passes.
    let failed = env.path("failed-once").display().to_string();
    let script = std::fs::read_to_string(&reviewer).unwrap();
    let once = format!("test -f {failed} || {{ touch {failed}; echo no dossier; exit 3; }}\ncat <<'JSON'");
    std::fs::write(&reviewer, script.replacen("cat <<'JSON'", &once, 1)).unwrap();
    let spawned =
        env.scafld(&["review", "t", "--reviewers", "command", "--provider-command", &reviewer, "--detach", "--json"]);
    spawned.assert_code(0);
    let key = spawned.json()["session_key"].as_str().unwrap().to_string();
    wait_until("the reviewer to run", || ran.exists());

    let old = env.work.display().to_string();
    let moved = env.path("moved");
    std::fs::rename(&env.work, &moved).unwrap();
    let mut client = env.client();
    let status = client.result("review.status", json!({"root": old, "session_key": key}));
    assert_eq!((status["session_key"].as_str(), status["state"].as_str()), (Some(key.as_str()), Some("running")));

    std::fs::write(&release, "").unwrap();
    let waited = client.result("review.wait", json!({"root": old, "session_key": key, "timeout_seconds": 30}));
    assert_ne!(waited["outcome"], "pending", "{waited}");
    let status = client.result("review.status", json!({"root": old, "session_key": key}));
    assert_eq!(status["state"], "resolved", "{status}");
    let caller = json!({"cwd": old, "env": {"PATH": std::env::var("PATH").unwrap_or_default()}});
    let retried = client.result("review.retry", json!({"root": old, "session_key": key, "caller": caller}));
    assert_eq!(retried["reviewers_spawned"], json!(["command"]), "{retried}");

    let waited = scafld_in(&env, &moved, &["review", "wait", "--session-key", &key, "--timeout", "30", "--json"]);
    waited.assert_code(0);
    assert!(!env.work.exists(), "nothing was made at the old folder");
    assert_eq!(scafld_in(&env, &moved, &["status", "t", "--json"]).json()["result"]["review_gate"], "pass");
}

/// A review runs while its workspace's folder is renamed and another workspace with the same
/// task id is moved into the old folder: the reviewer's report, written as it answers and as
/// the session settles, lands in its own workspace at its new folder, and the workspace now at
/// the old folder, which never ran that review, is left exactly as it was.
#[test]
fn a_review_whose_folder_is_renamed_reports_in_its_own_workspace_not_the_one_moved_in() {
    let env = TestEnv::new();
    let other = env.path("other");
    opened(&env, &other, "t", "true");
    let release = env.path("release");
    let key = reviewing(&env, &release);

    let moved = env.path("moved");
    std::fs::rename(&env.work, &moved).unwrap();
    std::fs::rename(&other, &env.work).unwrap();
    let before = scafld_tests::tree(&env.work);
    std::fs::write(&release, "").unwrap();
    let waited = scafld_in(&env, &moved, &["review", "wait", "--session-key", &key, "--timeout", "30", "--json"]);
    waited.assert_code(0);
    assert_eq!(scafld_tests::tree(&env.work), before, "the workspace moved in was written to");
    let report = std::fs::read_to_string(moved.join(".scafld/runs/t/review_report.md")).unwrap();
    assert!(report.contains(&key) && report.contains("## Consensus"), "{report}");
    assert_eq!(scafld_in(&env, &moved, &["status", "t", "--json"]).json()["result"]["review_gate"], "pass");
}

/// The same with a copy of the workspace put at the old folder (`mv ws ws-moved; cp -a
/// ws-moved ws`), its id file naming the same workspace: the review's verdict and report land
/// in the moved workspace, the one whose `.scafld` the daemon recorded, and the copy is left as
/// it was; the mutation guard, which reads the moved workspace's files, finds nothing changed.
/// Before, the copy at the old folder was taken for the workspace: the verdict was written
/// into it, and the guard, reading its files (copied, so written during the review), failed
/// the review on a change nobody made.
#[test]
fn a_review_whose_folder_is_moved_and_copied_back_reports_in_the_moved_one_not_the_copy() {
    let env = TestEnv::new();
    let release = env.path("release");
    let key = reviewing(&env, &release);
    let id = id_file(&env.work);

    let moved = env.path("moved");
    std::fs::rename(&env.work, &moved).unwrap();
    assert!(Command::new("cp").arg("-a").arg(&moved).arg(&env.work).status().unwrap().success());
    let before = scafld_tests::tree(&env.work);
    std::fs::write(&release, "").unwrap();
    let waited = scafld_in(&env, &moved, &["review", "wait", "--session-key", &key, "--timeout", "30", "--json"]);
    waited.assert_code(0);
    assert_eq!(scafld_tests::tree(&env.work), before, "the copy at the old folder was written to");
    let report = std::fs::read_to_string(moved.join(".scafld/runs/t/review_report.md")).unwrap();
    assert!(report.contains(&key) && report.contains("## Consensus"), "{report}");
    assert!(!report.contains("workspace-mutation"), "{report}");
    let status = scafld_in(&env, &moved, &["status", "t", "--json"]);
    assert_eq!(status.json()["result"]["review_gate"], "pass", "{}", status.stdout);
    assert_eq!(id_file(&moved), id, "the moved workspace keeps its id");
}

/// `mv ws ws-moved; cp -a ws-moved ws` while the daemon runs: the moved folder, whose `.scafld`
/// is the one recorded, keeps the workspace's id and history whichever folder is used first,
/// and the copy at the old path gets an id of its own. Before, the moved original was taken
/// for the copy (its recorded path still held the id) and lost its approval and build.
#[test]
fn a_workspace_moved_with_a_copy_left_at_its_old_folder_keeps_its_id_and_history() {
    let env = TestEnv::new();
    for copy_first in [false, true] {
        let (ws, moved) = (env.path(&format!("ws-{copy_first}")), env.path(&format!("moved-{copy_first}")));
        opened(&env, &ws, "t", "true");
        let id = id_file(&ws);
        std::fs::rename(&ws, &moved).unwrap();
        assert!(Command::new("cp").arg("-a").arg(&moved).arg(&ws).status().unwrap().success());
        let status = |dir: &Path| scafld_in(&env, dir, &["status", "t", "--json"]);
        let first = status(if copy_first { &ws } else { &moved });
        first.assert_code(0);
        let kept = status(&moved);
        assert_eq!(kept.json()["result"]["status"], "active", "copy first: {copy_first}: {}", kept.stdout);
        assert_eq!(id_file(&moved), id, "copy first: {copy_first}: the moved workspace took a new id");
        status(&ws).assert_code(0);
        assert_ne!(id_file(&ws), id, "copy first: {copy_first}: the copy kept the moved workspace's id");
        assert_eq!(status(&moved).json()["result"]["status"], "active", "copy first: {copy_first}");
    }
}

/// `mv repo repo.bak` and a fresh clone at the old path: the clone (a `.scafld` without an id
/// file where the workspace was recorded) is not the moved workspace; a read there takes
/// neither its id nor its history, and the moved checkout keeps both.
#[test]
fn a_fresh_clone_where_a_workspace_moved_from_does_not_take_its_id_or_history() {
    clone_where_a_workspace_moved_from(false);
}

/// The same with the daemon stopped while the folder moves and the clone is made: its next
/// start (autostarted by a read in the clone) does not reopen the recorded folder, which holds
/// the clone now, so it writes no id into the clone and keeps the moved workspace's record.
/// Before, the start settled the clone under a new id and retired the moved workspace's record.
#[test]
fn a_daemon_started_after_a_workspace_moved_and_was_cloned_in_its_place_writes_nothing_there() {
    clone_where_a_workspace_moved_from(true);
}

fn clone_where_a_workspace_moved_from(stopped: bool) {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    git(&env.work, &["config", "user.email", "a@b"]);
    git(&env.work, &["config", "user.name", "a"]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/t.md"), spec("t", &["true"])).unwrap();
    scafld_tests::commit_all(&env.work, "spec");
    env.scafld(&["approve", "t", "--reason", "tests skip hardening"]).assert_code(0);
    let id = id_file(&env.work);
    if stopped {
        env.scafld(&["daemon", "stop"]).assert_code(0);
    }
    let bak = env.path("work.bak");
    std::fs::rename(&env.work, &bak).unwrap();
    git(&env.path(""), &["clone", "-q", bak.to_str().unwrap(), env.work.to_str().unwrap()]);
    assert!(env.work.join(".scafld").is_dir() && !env.work.join(".scafld/workspace_id").exists());

    let status = env.scafld(&["status", "t", "--json"]);
    assert_eq!(status.json()["result"]["status"], "draft", "{}", status.stdout);
    if stopped {
        // The start reopens the recorded folders while it serves calls: until it passed this one.
        let log = env.state_dir.join("scafldd.log");
        wait_until("the start to pass over the clone, or settle it", || {
            let passed = std::fs::read_to_string(&log).is_ok_and(|text| text.contains("not reopening workspace"));
            passed || env.work.join(".scafld/workspace_id").exists()
        });
    }
    assert!(!env.work.join(".scafld/workspace_id").exists(), "the clone took an id");
    let workspaces = env.scafld(&["daemon", "status", "--json"]).json()["result"]["workspaces"].clone();
    assert!(workspaces.to_string().contains(&id), "the moved workspace's record was retired: {workspaces}");
    let history = scafld_in(&env, &bak, &["session", "t", "--json"]).json()["result"]["entries"].clone();
    assert!(history.to_string().contains("approval"), "the moved checkout lost its history: {history}");
    assert_eq!(id_file(&bak), id, "the moved checkout keeps its id");
    // The clone's first write gives it an id of its own.
    env.scafld(&["approve", "t", "--reason", "tests skip hardening"]).assert_code(0);
    assert_ne!(id_file(&env.work), id);
    assert_eq!(id_file(&bak), id);
}

/// The same where an older scafld recorded the workspace (its record knows only the folder's
/// path, not which `.scafld` it was): the clone cannot be told from the workspace's own folder
/// with its id file lost, so it is never taken for it. Neither its reads nor its first write
/// take the id or the history, which stay with the moved checkout whose id file names them;
/// the clone is told so, with how to claim the workspace were the folder its own.
#[test]
fn a_fresh_clone_where_an_older_scaflds_workspace_moved_from_does_not_take_its_history() {
    use scafld_daemon::store::{SledStore, Store, WorkspaceRecord};
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    git(&env.work, &["config", "user.email", "a@b"]);
    git(&env.work, &["config", "user.name", "a"]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/t.md"), spec("t", &["true"])).unwrap();
    scafld_tests::commit_all(&env.work, "spec");
    env.scafld(&["approve", "t", "--reason", "tests skip hardening"]).assert_code(0);
    env.scafld(&["build", "t"]).assert_code(0);
    let id = id_file(&env.work);
    let entries = || env.scafld(&["session", "t", "--json"]).json()["result"]["entries"].clone();
    let recorded = entries();
    env.scafld(&["daemon", "stop"]).assert_code(0);
    {
        // The record as an older scafld wrote it: the path alone.
        let store = SledStore::open(&env.state_dir.join("db")).unwrap();
        let root = env.work.canonicalize().unwrap().display().to_string();
        store.save_workspace(&WorkspaceRecord { id: id.clone(), root, scafld: None }).unwrap();
    }
    let bak = env.path("work.bak");
    std::fs::rename(&env.work, &bak).unwrap();
    git(&env.path(""), &["clone", "-q", bak.to_str().unwrap(), env.work.to_str().unwrap()]);
    assert!(env.work.join(".scafld").is_dir() && !env.work.join(".scafld/workspace_id").exists());

    let status = env.scafld(&["status", "t", "--json"]);
    let result = status.json()["result"].clone();
    assert_eq!(result["status"], "draft", "the clone took the moved workspace's history: {}", status.stdout);
    let claim = format!("echo {id} > .scafld/workspace_id");
    assert!(result["warnings"].to_string().contains(&claim), "{}", status.stdout);
    // The clone's first write settles it under an id of its own (the daemon's start does not:
    // the id file there does not name the record's workspace).
    env.scafld(&["approve", "t", "--reason", "tests skip hardening"]).assert_code(0);
    assert_ne!(id_file(&env.work), id, "the clone took the moved workspace's id");
    let clone = entries();
    assert!(!clone.to_string().contains("\"build"), "the clone holds the moved workspace's build: {clone}");
    let history = scafld_in(&env, &bak, &["session", "t", "--json"]).json()["result"]["entries"].clone();
    assert_eq!(history, recorded, "the moved checkout lost its history");
    assert_eq!(id_file(&bak), id, "the moved checkout keeps its id");
}

/// A workspace an older scafld recorded whose own folder lost its id file cannot be told from a
/// clone made in its place, so it is not given the history; the warning names the id, and
/// writing it back, as the warning says, brings the folder its workspace and ledger again.
#[test]
fn a_folder_an_older_scafld_recorded_claims_its_workspace_by_writing_its_id_back() {
    use scafld_daemon::store::{SledStore, Store, WorkspaceRecord};
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/t.md"), spec("t", &["true"])).unwrap();
    env.scafld(&["approve", "t", "--reason", "tests skip hardening"]).assert_code(0);
    let id = id_file(&env.work);
    env.scafld(&["daemon", "stop"]).assert_code(0);
    {
        let store = SledStore::open(&env.state_dir.join("db")).unwrap();
        let root = env.work.canonicalize().unwrap().display().to_string();
        store.save_workspace(&WorkspaceRecord { id: id.clone(), root, scafld: None }).unwrap();
    }
    std::fs::remove_file(env.work.join(".scafld/workspace_id")).unwrap();
    let status = env.scafld(&["status", "t", "--json"]);
    let claim = format!("echo {id} > .scafld/workspace_id");
    assert!(status.json()["result"]["warnings"].to_string().contains(&claim), "{}", status.stdout);
    std::fs::write(env.work.join(".scafld/workspace_id"), format!("{id}\n")).unwrap();
    let status = env.scafld(&["status", "t", "--json"]);
    assert_eq!(status.json()["result"]["status"], "approved", "{}", status.stdout);
    assert_eq!(id_file(&env.work), id);
}

/// `job cancel` in one workspace does not cancel another's job: it names the workspace the
/// job belongs to and how to cancel it there (exit 2), and the job runs on.
#[test]
fn job_cancel_in_one_workspace_refuses_another_workspaces_job() {
    let env = TestEnv::new();
    let release = env.path("release");
    opened(&env, &env.work, "t", &until(&release.display().to_string()));
    let started = env.scafld(&["build", "t", "--detach", "--json"]);
    let job = started.json()["result"]["job_id"].as_str().unwrap().to_string();
    let other = env.path("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q"]);
    scafld_in(&env, &other, &["init"]).assert_code(0);

    let refused = scafld_in(&env, &other, &["job", "cancel", &job, "--json"]);
    refused.assert_code(2);
    let root = env.work.canonicalize().unwrap().display().to_string();
    let hint = refused.json()["error"]["hint"].as_str().unwrap_or_default().to_string();
    assert!(hint.contains(&format!("scafld --root {root} job cancel {job}")), "{}", refused.stdout);
    assert_eq!(job_state(&env, &job)["state"], "running");
    env.scafld(&["job", "cancel", &job]).assert_code(0);
    env.scafld(&["job", "wait", &job, "--timeout", "30"]);
    assert_eq!(job_state(&env, &job)["state"], "cancelled");
}

/// A review refused in a git worktree sharing `.scafld` (its packet cannot be written through
/// the link) changes nothing: no attempt in the ledger, no session, and the main checkout's
/// passing review still lets the task complete. It used to record a review that gave no
/// verdict, which superseded the pass, so complete was refused and the task needed a new review.
#[test]
fn a_review_refused_in_a_worktree_records_nothing_and_the_pass_stands() {
    let env = TestEnv::new();
    let (worktree, _) = worktree_sharing_scafld(&env, "t1", "grep -q hello greet.txt");
    std::fs::write(env.work.join("greet.txt"), "hello\n").unwrap();
    git(&env.work, &["add", "greet.txt"]);
    git(&env.work, &["commit", "-q", "-m", "greet"]);
    std::fs::write(worktree.join("greet.txt"), "hello\n").unwrap();
    env.scafld(&["build", "t1"]).assert_code(0);
    env.scafld(&["build", "t1"]).assert_code(0);
    let script = crate::review::reviewer(&env, "pass", &crate::review::pass(), "");
    let review = ["review", "t1", "--min-attack-angles", "2", "--provider", "command", "--provider-command", &script];
    env.scafld(&review).assert_code(0);
    let next = env.scafld(&["status", "t1", "--json"]).json()["result"]["next_action"]["action"].clone();
    assert_eq!(next, "complete");
    let entries = || env.scafld(&["session", "t1", "--json"]).json()["result"]["entries"].clone();
    let sessions = || env.scafld(&["review", "status", "t1", "--json"]).json()["result"].clone();
    let (before, sessions_before) = (entries(), sessions());

    let refused = scafld_in(&env, &worktree, &review);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(refused.stderr.contains("cannot write the review packet"), "{}", refused.stderr);
    assert_eq!(entries(), before, "the ledger is as it was");
    assert_eq!(sessions(), sessions_before, "no session was added");
    let reviews = std::fs::read_dir(env.work.join(".scafld/reviews")).unwrap().count();
    assert_eq!(reviews, 1, "no packet folder is left behind");
    env.scafld(&["complete", "t1"]).assert_code(0);
    // And it says so, with where a review runs.
    assert!(refused.stderr.contains("nothing was recorded"), "{}", refused.stderr);
}

/// A build in a git worktree sharing `.scafld`, on files the main checkout does not have: the
/// next step no longer names `cd <main> && scafld review`, which judges the main checkout's
/// files and was refused at once there (stale evidence). It says to bring the changes there
/// first, naming what differs and that command; once they are merged, the review is named
/// again and runs as printed from the worktree.
#[test]
fn a_worktree_build_names_a_review_only_once_the_main_checkout_holds_its_changes() {
    let env = TestEnv::new();
    let (worktree, main_root) = worktree_sharing_scafld(&env, "t1", "grep -q hello greet.txt");
    env.scafld(&["build", "t1"]).assert_code(0);
    std::fs::write(worktree.join("greet.txt"), "hello\n").unwrap();
    let built = scafld_in(&env, &worktree, &["build", "t1", "--json"]);
    built.assert_code(0);
    assert_eq!(built.json()["result"]["next_command"], "none", "{}", built.stdout);
    let review = format!("cd {main_root} && scafld review t1");
    let next = || scafld_in(&env, &worktree, &["status", "t1", "--json"]).json()["result"]["next_action"].clone();
    let waiting = next();
    assert_eq!(waiting["action"], "review", "{waiting}");
    assert_eq!(waiting["command"], "none", "{waiting}");
    let reason = waiting["reason"].as_str().unwrap();
    assert!(reason.contains(&format!("`{review}`")) && reason.contains("greet.txt"), "{reason}");
    // Merged into the main checkout: the evidence is current there too.
    git(&worktree, &["add", "greet.txt"]);
    git(&worktree, &["commit", "-q", "-m", "greet"]);
    git(&env.work, &["merge", "-q", "side"]);
    let ready = next();
    assert_eq!(ready["command"], review.as_str(), "{ready}");
    let script = crate::review::reviewer(&env, "pass", &crate::review::pass(), "");
    let line = format!("{review} --min-attack-angles 2 --provider command --provider-command {script}");
    shell_in(&env, &worktree, &line).assert_code(0);
    assert_eq!(next()["action"], "complete");
}

/// In a git worktree sharing the main checkout's `.scafld`, `approve` is refused (exit 1,
/// nothing recorded) and names the approval run from the main checkout, as README says of the
/// commands that write there; run as printed, it approves with the main checkout's HEAD as the
/// baseline. Before, it succeeded: it recorded the worktree's HEAD (another branch) as the
/// baseline of the shared task, which the main checkout's review then diffed against, and left
/// the spec in drafts/.
#[test]
fn approve_in_a_worktree_sharing_scafld_is_refused_and_named_from_the_main_checkout() {
    let env = TestEnv::new();
    let (worktree, main_root) = worktree_sharing_scafld(&env, "t1", "true");
    git(&worktree, &["commit", "-q", "--allow-empty", "-m", "on side"]);
    std::fs::write(env.work.join(".scafld/specs/drafts/t2.md"), spec("t2", &["true"])).unwrap();
    let refused = scafld_in(&env, &worktree, &["approve", "t2", "--reason", "tests skip hardening"]);
    refused.assert_code(1);
    let approve = format!("cd {main_root} && scafld approve t2");
    assert!(refused.stderr.contains(&format!("`{approve}`")), "{}", refused.stderr);
    assert!(refused.stderr.contains("is a link to the workspace at"), "{}", refused.stderr);
    assert_eq!(env.scafld(&["status", "t2", "--json"]).json()["result"]["status"], "draft");
    assert!(env.work.join(".scafld/specs/drafts/t2.md").is_file());
    let amend = scafld_in(&env, &worktree, &["approve", "t1", "--amend", "--reason", "again"]);
    amend.assert_code(1);
    assert!(amend.stderr.contains(&format!("cd {main_root} && scafld approve t1 --amend")), "{}", amend.stderr);

    let approved = shell_in(&env, &worktree, &format!("{approve} --reason 'tests skip hardening' --json"));
    approved.assert_code(0);
    assert_eq!(approved.json()["result"]["head"], git(&env.work, &["rev-parse", "HEAD"]).as_str());
}

/// A linked worktree placed inside the main checkout (`.worktrees/feat`, git-ignored) is a
/// work tree of its own: discovery there stops with the worktree and the workspace above it
/// named, and how to choose (exit 6), rather than working on the main checkout's files and
/// running its criteria there; `scafld init` in the worktree gives it a workspace of its own.
/// A plain folder of the main checkout still finds its workspace.
#[test]
fn a_worktree_inside_the_main_checkout_does_not_silently_use_its_workspace() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    std::fs::write(env.work.join(".gitignore"), ".worktrees/\n").unwrap();
    git(&env.work, &["add", ".gitignore"]);
    git(&env.work, &["commit", "-q", "-m", "ignore"]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/t1.md"), spec("t1", &["true"])).unwrap();
    git(&env.work, &["worktree", "add", "-q", "-b", "feat", ".worktrees/feat"]);
    let worktree = env.work.join(".worktrees/feat");
    std::fs::create_dir_all(worktree.join("src")).unwrap();
    let main_root = env.work.canonicalize().unwrap().display().to_string();
    for dir in [worktree.clone(), worktree.join("src")] {
        let refused = scafld_in(&env, &dir, &["approve", "t1", "--reason", "tests skip hardening"]);
        refused.assert_code(6);
        assert!(refused.stderr.contains("is in the git worktree"), "{}", refused.stderr);
        assert!(refused.stderr.contains(&format!("inside the workspace {main_root}")), "{}", refused.stderr);
        assert!(refused.stderr.contains("run `scafld init` in"), "{}", refused.stderr);
    }
    assert_eq!(env.scafld(&["status", "t1", "--json"]).json()["result"]["status"], "draft");
    std::fs::create_dir_all(env.work.join("src")).unwrap();
    scafld_in(&env, &env.work.join("src"), &["status", "t1"]).assert_code(0);
    scafld_in(&env, &worktree, &["init"]).assert_code(0);
    let listed = scafld_in(&env, &worktree.join("src"), &["list", "--json"]);
    listed.assert_code(0);
    assert!(!listed.stdout.contains("\"t1\""), "the worktree's own workspace: {}", listed.stdout);
}

/// A linked worktree whose main repository moved: its `.git` file names a git directory that
/// is gone. `status` names that link and `git worktree repair`; before, it said the workspace
/// was not inside a git repository and to run `git init`, which fails there.
#[test]
fn a_worktree_whose_main_repository_moved_names_the_dangling_link_and_the_repair() {
    let env = TestEnv::new();
    let main = env.path("main");
    std::fs::create_dir_all(&main).unwrap();
    git(&main, &["init", "-q"]);
    git(&main, &["commit", "-q", "--allow-empty", "-m", "base"]);
    git(&main, &["worktree", "add", "-q", "-b", "feat", env.work.to_str().unwrap()]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/t1.md"), spec("t1", &["true"])).unwrap();
    env.scafld(&["approve", "t1", "--reason", "tests skip hardening"]).assert_code(0);
    env.scafld(&["build", "t1"]).assert_code(0);
    env.scafld(&["build", "t1"]).assert_code(0);
    std::fs::rename(&main, env.path("moved")).unwrap();
    let status = env.scafld(&["status", "t1"]);
    let said = format!("{}{}", status.stdout, status.stderr);
    assert!(said.contains("git worktree repair"), "{said}");
    assert!(said.contains(".git names the git directory"), "{said}");
    assert!(!said.contains("git init"), "{said}");
}

/// A deleted workspace is shown as gone, with why, at once and after a restart (before, it was
/// `open` until the restart and then `(closed)` for good, with no reason and no way to forget
/// it); `scafld daemon forget` forgets its record, refusing a workspace whose folder is there.
/// Its ledgers stay: the folder put back is the same workspace at the next command.
#[test]
fn a_deleted_workspace_is_shown_gone_and_can_be_forgotten() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let (kept, deleted) = (env.path("kept"), env.path("deleted"));
    opened(&env, &kept, "t", "true");
    opened(&env, &deleted, "t", "true");
    let id = id_file(&deleted);
    let copy = env.path("copy");
    let cp =
        |from: &Path, to: &Path| assert!(Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap().success());
    cp(&deleted, &copy);
    std::fs::remove_dir_all(&deleted).unwrap();
    let listed = |env: &TestEnv, root: &Path| {
        let status = env.scafld(&["daemon", "status", "--json"]).json()["result"]["workspaces"].clone();
        status.as_array().unwrap().iter().find(|w| w["root"] == root.display().to_string()).cloned()
    };
    let gone = format!("folder missing at {}", deleted.display());
    let shown = listed(&env, &deleted).expect("the deleted workspace is listed");
    assert_eq!((&shown["open"], &shown["gone"]), (&json!(false), &json!(gone)), "{shown}");
    assert_eq!(listed(&env, &kept).unwrap()["gone"], Value::Null);
    let human = env.scafld(&["daemon", "status"]);
    assert!(human.stdout.contains(&format!("(gone: {gone})")), "{}", human.stdout);
    env.client().result("daemon.shutdown", json!({}));
    assert!(env.take_daemon().wait().unwrap().success());
    env.start_daemon();
    assert_eq!(listed(&env, &deleted).unwrap()["gone"], json!(gone));

    let refused = env.scafld(&["daemon", "forget", &kept.display().to_string(), "--json"]);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(refused.stdout.contains("is not gone") || refused.stderr.contains("is not gone"), "{refused:?}");
    assert!(listed(&env, &kept).is_some());
    let forgot = env.scafld(&["daemon", "forget", &id[..8]]);
    forgot.assert_code(0);
    assert!(forgot.stdout.contains(&format!("forgot workspace {id}")), "{}", forgot.stdout);
    assert!(listed(&env, &deleted).is_none(), "a forgotten workspace is still listed");
    assert_ne!(env.scafld(&["daemon", "forget", &id]).code, 0, "forgotten twice");

    // Put back: the same workspace, its history kept.
    cp(&copy, &deleted);
    let status = scafld_in(&env, &deleted, &["status", "t", "--json"]);
    assert_eq!(status.json()["result"]["status"], "active", "{}", status.stdout);
    assert_eq!(id_file(&deleted), id);
    assert_eq!(listed(&env, &deleted).unwrap()["workspace_id"], json!(id));
}

/// After a workspace is moved, its jobs are listed at its folder now, after a restart too
/// (README "Moved"); before, each earlier job's `root` was the old, missing folder.
#[test]
fn a_moved_workspaces_jobs_are_listed_at_its_folder_now() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let (before, after) = (env.path("before"), env.path("after"));
    opened(&env, &before, "t", "true");
    scafld_in(&env, &before, &["build", "t"]).assert_code(0);
    std::fs::rename(&before, &after).unwrap();
    env.client().result("daemon.shutdown", json!({}));
    assert!(env.take_daemon().wait().unwrap().success());
    env.start_daemon();
    let run = scafld_in(&env, &after, &["job", "list", "--json"]);
    let jobs = run.json()["result"]["jobs"].clone();
    let jobs = jobs.as_array().unwrap();
    assert!(!jobs.is_empty(), "{}", run.stdout);
    assert!(jobs.iter().all(|j| j["root"] == after.display().to_string()), "{}", run.stdout);
    let job = jobs[0]["job_id"].as_str().unwrap();
    assert_eq!(job_state(&env, job)["root"], json!(after.display().to_string()));
}

/// A criterion that removes `.scafld` (`rm -rf .scafld`): the daemon makes no `.scafld` anew to
/// write the build's diagnostics into. (Before, it did, with no id file, and the next command
/// took the folder for a new workspace and retired the old one: status said to `plan` the task
/// in review, `session` found nothing, and `plan` made it anew.) The workspace is shown gone,
/// `plan` there is refused and makes nothing, the ledger keeps the result and says why its
/// diagnostics file is not there, and `.scafld` put back is the same workspace, task in review.
#[test]
fn a_criterion_removing_scafld_leaves_the_workspace_gone_not_replaced() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    std::fs::write(env.work.join(".scafld/specs/drafts/rm1.md"), spec("rm1", &["rm -rf .scafld"])).unwrap();
    env.scafld(&["approve", "rm1", "--reason", "tests skip hardening"]).assert_code(0);
    env.scafld(&["build", "rm1"]).assert_code(0);
    let id = id_file(&env.work);
    let backup = env.path("backup");
    let cp =
        |from: &Path, to: &Path| assert!(Command::new("cp").arg("-a").arg(from).arg(to).status().unwrap().success());
    cp(&env.work.join(".scafld"), &backup);

    let built = env.scafld(&["build", "rm1"]);
    assert!(!env.work.join(".scafld").exists(), "the daemon made .scafld anew: {built:?}");
    let workspaces = env.scafld(&["daemon", "status", "--json"]).json()["result"]["workspaces"].clone();
    let shown = workspaces.as_array().unwrap().iter().find(|w| w["workspace_id"] == id.as_str()).cloned();
    let gone = shown.unwrap_or_default()["gone"].as_str().unwrap_or_default().to_string();
    assert!(gone.starts_with("no .scafld in "), "{workspaces}");
    let plan = env.scafld(&["plan", "rm1"]);
    assert_ne!(plan.code, 0, "{plan:?}");
    assert!(!env.work.join(".scafld").exists(), "a refused plan made .scafld");

    cp(&backup, &env.work.join(".scafld"));
    let status = env.scafld(&["status", "rm1", "--json"]);
    assert_eq!(status.json()["result"]["status"], "review", "{}", status.stdout);
    assert_eq!(id_file(&env.work), id);
    let entries = env.scafld(&["session", "rm1", "--json"]).json()["result"]["entries"].clone();
    let ran = entries.as_array().unwrap().iter().rev().find(|e| e["type"] == "criterion").cloned().unwrap_or_default();
    assert_eq!(ran["diagnostic"], "", "{ran}");
    assert!(ran["diagnostic_error"].as_str().unwrap_or_default().contains(".scafld is gone"), "{ran}");
    let replanned = env.scafld(&["plan", "rm1"]);
    assert_ne!(replanned.code, 0, "a task with a history is planned anew: {replanned:?}");
}
