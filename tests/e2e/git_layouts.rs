//! Workspaces git keeps otherwise than as a work tree's top holding its `.git` folder: a `.git`
//! file naming a git directory elsewhere (`git init --separate-git-dir`), and a workspace in a
//! folder of a larger work tree (a monorepo's package). The task's change is read where git
//! keeps it and named as the workspace names it: the review is shown it, evidence goes stale
//! when the file changes, and a receipt signs the file as it is and verifies. A range review
//! names the range's files the same way; a binary file `.gitattributes` marks `-diff` is shown
//! as a binary change of its path.

use std::path::Path;

use scafld_tests::{Run, TestEnv, commit_all, git};
use serde_json::Value;

use crate::review::{command_review, pass, reviewer};

/// Task `rev`'s draft: scoped to `f.txt`, its one criterion checks it says hello.
const REV: &str = "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\nharden_status: not_run\n---\n\n# Layout\n\n## Summary\n\nSay hello.\n\n## Scope\n\n- `f.txt` - the greeting.\n\n## Phase 1: Do\n\nObjective: do it.\n\nAcceptance:\n- [ ] `a1` test - it says hello\n  - Command: `grep -q hello f.txt`\n";

/// Task `rev`, scoped to `f.txt`, approved and built to review with `f.txt` changed from `hi`
/// to `hello` (its criterion's command checks that); the workspace committed at `top` first.
fn built(env: &TestEnv, top: &Path) {
    env.init();
    commit_all(top, "scafld init");
    std::fs::write(env.work.join(".scafld/specs/drafts/rev.md"), REV).unwrap();
    let approved = env.scafld(&["approve", "rev", "--reason", "layout test", "--json"]);
    approved.assert_code(0);
    env.scafld(&["build", "rev"]).assert_code(0);
    std::fs::write(env.work.join("f.txt"), "hello\n").unwrap();
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
}

/// The review packet's section titled `title`, up to the next one.
fn section(packet: &str, title: &str) -> String {
    let start = packet.find(&format!("## {title}")).unwrap_or_else(|| panic!("no {title}:\n{packet}"));
    let rest = &packet[start + 3..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

/// The review is shown `f.txt`'s change as the task's; a pass, then the file broken: the
/// evidence is stale and complete refuses; put back, finalize signs it and verify at the
/// commit holding the work accepts the receipt.
fn reviewed_bound_and_signed(env: &TestEnv, top: &Path) -> Value {
    let packet = env.scafld(&["review", "rev", "--print-context"]);
    packet.assert_code(0);
    let changes = section(&packet.stdout, "Task Changes Since Approval Baseline");
    assert!(changes.contains("- `f.txt`"), "{changes}");
    assert!(changes.contains("diff --git a/f.txt b/f.txt") && changes.contains("+hello"), "{changes}");
    let ambient = section(&packet.stdout, "Ambient Workspace Drift Outside Task Scope");
    assert!(ambient.contains("- none"), "{ambient}");
    command_review(env, &reviewer(env, "pass", &pass(), ""), &["--min-attack-angles", "2"]).assert_code(0);

    std::fs::write(env.work.join("f.txt"), "broken\n").unwrap();
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["next_command"], "scafld build rev", "{status}");
    let complete = env.scafld(&["complete", "rev", "--json"]);
    complete.assert_code(4);
    assert!(complete.stderr.contains("stale") || complete.stdout.contains("stale"), "{}", complete.stdout);
    std::fs::write(env.work.join("f.txt"), "hello\n").unwrap();

    let finalized = env.scafld(&["finalize", "rev", "--json"]);
    finalized.assert_code(0);
    let body = finalized.json()["result"]["receipt"]["body"].clone();
    // sha256 of "hello\n": the file as it is, never `deleted`.
    let hello = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
    assert_eq!(body["file_digests"], serde_json::json!({"f.txt": hello}), "{body}");
    commit_all(top, "the work");
    env.scafld(&["verify", ".scafld/receipts/rev.json", "--target", "HEAD"]).assert_code(0);
    body
}

/// `.git` is a file naming the git directory elsewhere: the work tree is the folder holding
/// that file (libgit2 opening the git directory found would take its parent instead, and read
/// the git directory's own files as the workspace's).
#[test]
fn a_work_tree_whose_git_directory_is_elsewhere_is_read_where_its_git_file_is() {
    let env = TestEnv::new();
    let git_dir = env.path("elsewhere/repo.git");
    std::fs::create_dir_all(env.path("elsewhere")).unwrap();
    git(&env.work, &["init", "-q", "--separate-git-dir", &git_dir.display().to_string(), "."]);
    std::fs::write(env.work.join("f.txt"), "hi\n").unwrap();
    commit_all(&env.work, "initial");
    built(&env, &env.work.clone());
    let baseline = env.scafld(&["review", "rev", "--print-context"]).stdout;
    let baseline = section(&baseline, "Workspace Baseline Before Review");
    assert!(!baseline.contains("repo.git") && !baseline.contains("f.txt"), "read elsewhere: {baseline}");
    reviewed_bound_and_signed(&env, &env.work.clone());
}

/// The workspace is a folder of the work tree (`pkg/`): git's `pkg/f.txt` is the workspace's
/// `f.txt`, and a change elsewhere in the work tree is not the workspace's at all.
#[test]
fn a_workspace_in_a_folder_of_a_monorepo_names_its_files_as_it_does() {
    let mut env = TestEnv::new();
    let top = env.work.clone();
    git(&top, &["init", "-q"]);
    std::fs::create_dir_all(top.join("pkg")).unwrap();
    std::fs::write(top.join("pkg/f.txt"), "hi\n").unwrap();
    std::fs::write(top.join("r.txt"), "root\n").unwrap();
    commit_all(&top, "initial");
    env.work = top.join("pkg");
    built(&env, &top);
    std::fs::write(top.join("r.txt"), "another package's work\n").unwrap();
    let packet = env.scafld(&["review", "rev", "--print-context"]).stdout;
    assert!(!packet.contains("r.txt") && !packet.contains("pkg/"), "outside the workspace: {packet}");
    reviewed_bound_and_signed(&env, &top);
}

/// A nested git repository (`lib/`, not a submodule) in a workspace that is a folder of the
/// work tree (`pkg/`): its changes since approval are read through its own git, found where
/// the workspace names it. Before, it was looked for at the work tree's top (`lib/`, not
/// `pkg/lib/`), so the review was shown only the folder `lib`, its change never diffed.
#[test]
fn a_nested_repository_in_a_monorepo_package_is_read_through_its_own_git() {
    let mut env = TestEnv::new();
    let top = env.work.clone();
    git(&top, &["init", "-q"]);
    std::fs::create_dir_all(top.join("pkg")).unwrap();
    std::fs::write(top.join("r.txt"), "root\n").unwrap();
    commit_all(&top, "initial");
    env.work = top.join("pkg");
    env.init();
    commit_all(&top, "scafld init");
    let lib = env.work.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("x.txt"), "hello\n").unwrap();
    git(&lib, &["init", "-q"]);
    commit_all(&lib, "lib");
    let spec = "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\nharden_status: not_run\n---\n\n# Layout\n\n## Summary\n\nSay hello.\n\n## Scope\n\n- `lib` - the library.\n\n## Phase 1: Do\n\nObjective: do it.\n\nAcceptance:\n- [ ] `a1` test - it says hello\n  - Command: `grep -q hello lib/x.txt`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/rev.md"), spec).unwrap();
    env.scafld(&["approve", "rev", "--reason", "layout test"]).assert_code(0);
    env.scafld(&["build", "rev"]).assert_code(0);
    std::fs::write(lib.join("x.txt"), "hello\nthe task's change\n").unwrap();
    git(&lib, &["commit", "-qam", "the task's work"]);
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let packet = env.scafld(&["review", "rev", "--print-context"]);
    packet.assert_code(0);
    let changes = section(&packet.stdout, "Task Changes Since Approval Baseline");
    assert!(changes.contains("- `lib/x.txt`") && !changes.contains("- `lib`\n"), "{changes}");
    assert!(
        changes.contains("diff --git a/lib/x.txt b/lib/x.txt") && changes.contains("+the task's change"),
        "{changes}"
    );
}

/// A range review (`review --diff`) in a workspace that is a folder of the work tree names the
/// range's files as the workspace does (`f.txt`, never `pkg/f.txt`), and a change the range
/// makes elsewhere in the work tree is not shown. Before, the range's paths and patch labels
/// were the work tree's, and the other package's change was listed too.
#[test]
fn a_range_review_in_a_monorepo_package_names_the_workspaces_files() {
    let mut env = TestEnv::new();
    let top = env.work.clone();
    git(&top, &["init", "-q"]);
    std::fs::create_dir_all(top.join("pkg")).unwrap();
    std::fs::write(top.join("pkg/f.txt"), "hi\n").unwrap();
    std::fs::write(top.join("r.txt"), "root\n").unwrap();
    commit_all(&top, "initial");
    env.work = top.join("pkg");
    env.init();
    commit_all(&top, "scafld init");
    std::fs::write(top.join("pkg/f.txt"), "hello\n").unwrap();
    std::fs::write(top.join("r.txt"), "another package's work\n").unwrap();
    commit_all(&top, "the work");
    let script = reviewer(&env, "range", &pass(), "");
    let run =
        env.scafld(&["review", "--diff", "HEAD~1..HEAD", "--reviewers", "command", "--provider-command", &script]);
    let packet = std::fs::read_to_string(format!("{script}.packet"))
        .unwrap_or_else(|e| panic!("no packet ({e}): {}{}", run.stdout, run.stderr));
    assert!(packet.contains("diff --git a/f.txt b/f.txt") && packet.contains("+hello"), "{packet}");
    assert!(!packet.contains("pkg/") && !packet.contains("r.txt"), "outside the workspace: {packet}");
}

/// A binary file `.gitattributes` marks `-diff`, changed by the task: the review packet shows
/// it as a binary change of its path. Before, libgit2 did not read it and named its new side
/// `/dev/null`, which reads as the file deleted.
#[test]
fn a_binary_file_marked_minus_diff_is_shown_to_the_review_as_a_binary_change() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    std::fs::write(env.work.join(".gitattributes"), "*.bin -diff\n").unwrap();
    std::fs::write(env.work.join("a.bin"), b"one\0two").unwrap();
    commit_all(&env.work, "initial");
    env.init();
    commit_all(&env.work, "scafld init");
    let spec = "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\nharden_status: not_run\n---\n\n# Binary\n\n## Summary\n\nChange the data.\n\n## Scope\n\n- `a.bin` - the data.\n\n## Phase 1: Do\n\nObjective: do it.\n\nAcceptance:\n- [ ] `a1` test - the data is there\n  - Command: `test -s a.bin`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/rev.md"), spec).unwrap();
    env.scafld(&["approve", "rev", "--reason", "layout test"]).assert_code(0);
    env.scafld(&["build", "rev"]).assert_code(0);
    std::fs::write(env.work.join("a.bin"), b"one\0three").unwrap();
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let packet = env.scafld(&["review", "rev", "--print-context"]);
    packet.assert_code(0);
    let changes = section(&packet.stdout, "Task Changes Since Approval Baseline");
    assert!(changes.contains("diff --git a/a.bin b/a.bin"), "{changes}");
    assert!(changes.contains("Binary files a/a.bin and b/a.bin differ"), "{changes}");
    assert!(!changes.contains("/dev/null"), "{changes}");
}

/// `review --diff` run inside a repository of its own in the workspace's folder (an embedded
/// repository, as a submodule is) reviews that repository's range, the one `git log` there
/// shows. Before, the workspace above was found first and its repository's range reviewed.
#[test]
fn a_range_review_inside_a_nested_repository_reviews_that_repository() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    std::fs::write(env.work.join("top.txt"), "top\n").unwrap();
    commit_all(&env.work, "initial");
    let lib = env.work.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    git(&lib, &["init", "-q"]);
    std::fs::write(lib.join("x.txt"), "x\n").unwrap();
    commit_all(&lib, "lib initial");
    std::fs::write(lib.join("inner.txt"), "the inner change\n").unwrap();
    commit_all(&lib, "the inner commit");
    env.init();
    std::fs::write(env.work.join("top.txt"), "the outer change\n").unwrap();
    git(&env.work, &["add", ".scafld", "top.txt"]);
    git(&env.work, &["commit", "-qm", "the outer commit"]);
    let script = reviewer(&env, "range", &pass(), "");
    let run = scafld_in(
        &env,
        &lib,
        &["review", "--diff", "HEAD~1..HEAD", "--reviewers", "command", "--provider-command", &script],
    );
    let packet = std::fs::read_to_string(format!("{script}.packet"))
        .unwrap_or_else(|e| panic!("no packet ({e}): {}{}", run.stdout, run.stderr));
    assert!(packet.contains("diff --git a/inner.txt b/inner.txt"), "{packet}");
    assert!(!packet.contains("top.txt"), "the outer repository's range: {packet}");
    // A session key reaches its session from the nested repository and from the workspace
    // holding it alike: the outer range's session from inside `lib/`, the inner's from the top.
    let detached = |dir: &Path| {
        let args = ["review", "--diff", "HEAD~1..HEAD", "--reviewers", "command", "--provider-command", &script];
        let spawned = scafld_in(&env, dir, &[&args[..], &["--detach", "--json"]].concat()).json();
        spawned["result"]["session_key"].as_str().unwrap_or_else(|| panic!("{spawned}")).to_string()
    };
    for (started_in, asked_from) in [(&env.work, &lib), (&lib, &env.work)] {
        let key = detached(started_in);
        let status = scafld_in(&env, asked_from, &["review", "status", "--session-key", &key, "--json"]);
        status.assert_code(0);
    }
}

/// `scafld args...` run in `dir` instead of the work directory.
fn scafld_in(env: &TestEnv, dir: &Path, args: &[&str]) -> Run {
    Run::from(env.scafld_command(args).current_dir(dir).output().unwrap())
}

/// A workspace in a folder its repository ignores (`vendor/` in the top's `.gitignore`, a
/// vendored tool): git reports none of its files, so no edit there could make evidence stale
/// or reach a review. `init` warns and `approve` is refused, naming the rule's finder and the
/// ways out; made a repository of its own, the folder is read through its own git and the
/// change reaches the review. Before, neither said anything, and an edit after the build left
/// the evidence current and the packet's task changes `none`.
#[test]
fn a_workspace_in_a_folder_its_repository_ignores_is_refused_approval() {
    let mut env = TestEnv::new();
    let top = env.work.clone();
    git(&top, &["init", "-q"]);
    std::fs::write(top.join(".gitignore"), "vendor/\n").unwrap();
    std::fs::create_dir_all(top.join("vendor/tool")).unwrap();
    std::fs::write(top.join("vendor/tool/f.txt"), "hi\n").unwrap();
    commit_all(&top, "initial");
    env.work = top.join("vendor/tool");
    let init = env.init();
    let warnings = init["result"]["warnings"].to_string();
    assert!(
        warnings.contains("vendor/tool/, a folder its git repository") && warnings.contains("check-ignore"),
        "{init}"
    );
    std::fs::write(env.work.join(".scafld/specs/drafts/rev.md"), REV).unwrap();
    let refused = env.scafld(&["approve", "rev", "--reason", "layout test"]);
    refused.assert_code(1);
    assert!(refused.stderr.contains("ignores"), "{}", refused.stderr);
    assert!(refused.stderr.contains("check-ignore -v vendor/tool"), "{}", refused.stderr);
    assert_eq!(env.scafld(&["status", "rev", "--json"]).json()["result"]["status"], "draft");

    // A repository of its own: its files are read through its git.
    std::fs::remove_file(env.work.join(".scafld/specs/drafts/rev.md")).unwrap();
    git(&env.work, &["init", "-q"]);
    built(&env, &env.work.clone());
    let packet = env.scafld(&["review", "rev", "--print-context"]);
    let changes = section(&packet.stdout, "Task Changes Since Approval Baseline");
    assert!(changes.contains("- `f.txt`") && changes.contains("+hello"), "{changes}");
}

/// A monorepo with a workspace at its top and another in `pkg/inner`. The inner workspace's
/// runner moving its own spec (drafts, approved, active: `approve` and `build` there) is that
/// workspace's record, never a change of the outer task whose scope holds the folder, as the
/// outer workspace's own runner folders are not. Before, the outer task's evidence went stale
/// naming `pkg/inner/.scafld/specs/...`.
#[test]
fn another_workspaces_runner_folders_are_no_change_of_an_outer_task() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    let inner = env.work.join("pkg/inner");
    std::fs::create_dir_all(inner.join("src")).unwrap();
    std::fs::write(inner.join("src/a.txt"), "1\n").unwrap();
    scafld_in(&env, &inner, &["init"]).assert_code(0);
    let spec = |task: &str, scope: &str, command: &str| {
        format!(
            "---\nspec_version: '2.0'\ntask_id: {task}\nstatus: draft\n---\n\n# Task {task}\n\n## Scope\n\n- `{scope}` - the change.\n\n## Phase 1: Do\n\nAcceptance:\n- [ ] `c1` test - it is there\n  - Command: `{command}`\n"
        )
    };
    std::fs::write(env.work.join(".scafld/specs/drafts/outer.md"), spec("outer", "pkg", "test -f pkg/inner/src/a.txt"))
        .unwrap();
    std::fs::write(inner.join(".scafld/specs/drafts/inner.md"), spec("inner", "src/a.txt", "test -f src/a.txt"))
        .unwrap();
    commit_all(&env.work, "specs");
    env.scafld(&["approve", "outer", "--reason", "tests skip hardening"]).assert_code(0);
    env.scafld(&["build", "outer"]).assert_code(0);
    env.scafld(&["build", "outer"]).assert_code(0);
    let next = || env.scafld(&["status", "outer", "--json"]).json()["result"]["next_command"].clone();
    assert_eq!(next(), "scafld review outer");
    scafld_in(&env, &inner, &["approve", "inner", "--reason", "tests skip hardening"]).assert_code(0);
    scafld_in(&env, &inner, &["build", "inner"]).assert_code(0);
    assert!(inner.join(".scafld/specs/active/inner.md").is_file());
    let status = env.scafld(&["status", "outer"]);
    assert!(!status.stdout.contains("stale") && !status.stdout.contains("pkg/inner/.scafld"), "{}", status.stdout);
    assert_eq!(next(), "scafld review outer");
    // A file of the outer scope in the inner package still counts.
    std::fs::write(inner.join("src/a.txt"), "2\n").unwrap();
    assert_eq!(next(), "scafld build outer");
}

/// A folder named like a runner's (`.scafld/specs/...`) where no workspace is (a test fixture's
/// copy of one, with no id file beside it) is files of the task like any other: an edit there
/// makes the evidence stale. Only a nested workspace's own runner folders are passed over.
#[test]
fn a_fixture_shaped_like_a_runner_folder_is_files_of_the_task() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    let fixture = env.work.join("tests/fixtures/ws/.scafld/specs/active");
    std::fs::create_dir_all(&fixture).unwrap();
    std::fs::write(
        fixture.join("t.md"),
        "# a fixture spec
",
    )
    .unwrap();
    let spec = "---\nspec_version: '2.0'\ntask_id: fx\nstatus: draft\n---\n\n# Fixtures\n\n## Scope\n\n- `tests/fixtures` - the fixtures.\n\n## Phase 1: Do\n\nAcceptance:\n- [ ] `c1` test - it is there\n  - Command: `test -f tests/fixtures/ws/.scafld/specs/active/t.md`\n";
    std::fs::write(env.work.join(".scafld/specs/drafts/fx.md"), spec).unwrap();
    commit_all(&env.work, "fixtures");
    env.scafld(&["approve", "fx", "--reason", "tests skip hardening"]).assert_code(0);
    env.scafld(&["build", "fx"]).assert_code(0);
    env.scafld(&["build", "fx"]).assert_code(0);
    let next = || env.scafld(&["status", "fx", "--json"]).json()["result"]["next_command"].clone();
    assert_eq!(next(), "scafld review fx");
    std::fs::write(fixture.join("t.md"), "# a fixture spec, edited\n").unwrap();
    assert_eq!(next(), "scafld build fx", "an edit of the fixture left the evidence current");
}

/// A submodule's git directory (`.git/modules/<name>`) is git's own store whose work tree is
/// the submodule's folder: `scafld init` there, or below it, is refused (exit 2, nothing
/// written) naming that folder. Before, it was taken for a bare repository ("clone it").
#[test]
fn init_in_a_submodules_git_directory_names_the_submodules_work_tree() {
    let env = TestEnv::new();
    let sub = env.path("sub");
    std::fs::create_dir_all(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    std::fs::write(sub.join("s.txt"), "s\n").unwrap();
    commit_all(&sub, "s");
    git(&env.work, &["init", "-q"]);
    git(&env.work, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", sub.to_str().unwrap(), "sub"]);
    let store = env.work.join(".git/modules/sub");
    let before = scafld_tests::tree(&store);
    let tree = env.work.join("sub").canonicalize().unwrap();
    for dir in [store.clone(), store.join("refs")] {
        let init = scafld_in(&env, &dir, &["init"]);
        init.assert_code(2);
        assert!(init.stderr.contains("inside git's own store"), "{}", init.stderr);
        assert!(init.stderr.contains(&format!("`scafld --root {} init`", tree.display())), "{}", init.stderr);
        assert!(!init.stderr.contains("bare repositories"), "{}", init.stderr);
    }
    assert_eq!(scafld_tests::tree(&store), before, "init wrote into git's own store");
}

/// A bare repository is git's own store, with no work tree: `scafld init` there is refused as
/// inside a `.git/` folder (exit 2, nothing written), and a range review there says bare
/// repositories are not supported. Before, init made `.scafld/` and a `.gitignore` among git's
/// files (approve then failing "the git repository is bare", with no hint), and the review
/// said no git repository was there.
#[test]
fn a_bare_repository_is_refused_by_init_and_by_a_range_review() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    std::fs::write(env.work.join("a.txt"), "a\n").unwrap();
    commit_all(&env.work, "a");
    std::fs::write(env.work.join("a.txt"), "b\n").unwrap();
    commit_all(&env.work, "b");
    let bare = env.path("mirror.git");
    git(&env.work, &["clone", "-q", "--bare", ".", bare.to_str().unwrap()]);
    let before = scafld_tests::tree(&bare);
    for dir in [bare.clone(), bare.join("refs")] {
        let init = scafld_in(&env, &dir, &["init"]);
        init.assert_code(2);
        assert!(
            init.stderr.contains("inside git's own store") && init.stderr.contains("bare repositories"),
            "{}",
            init.stderr
        );
    }
    assert_eq!(scafld_tests::tree(&bare), before, "init wrote into the bare repository");
    let review = scafld_in(&env, &bare, &["review", "--diff", "HEAD~1..HEAD"]);
    review.assert_code(1);
    assert!(review.stderr.contains("does not support bare repositories"), "{}", review.stderr);
    assert!(!review.stderr.contains("runs in a git repository"), "{}", review.stderr);
}
