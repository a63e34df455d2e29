//! Signed receipts through the real binaries: `finalize` mints, anchors and writes one (and
//! repairs a half-finished write), `verify` accepts it at the commit that holds the work, and
//! every tampering fails with its own message and exit 3.

use scafld_tests::{Run, TestEnv, commit_all, git, wait_until};
use serde_json::Value;

use crate::gate::{opened, write};
use crate::review::{command_review, pass, reviewer};

const GREET: &str = "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs`\n";

/// Task `rev` reviewed with a pass, finalized, and its work committed.
fn finalized(env: &TestEnv) -> Value {
    finalized_with(env, GREET)
}

/// [`finalized`], its phase's acceptance lines `acceptance`.
fn finalized_with(env: &TestEnv, acceptance: &str) -> Value {
    opened(env, "src/lib.rs", acceptance);
    write(env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(env, &reviewer(env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    // The digest of the spec as finalize finds it (the daemon works from `/`, never from the
    // workspace, so a path read relative to its own folder would not find it).
    let sha =
        std::process::Command::new("sha256sum").arg(".scafld/specs/active/rev.md").current_dir(&env.work).output();
    let spec_sha = String::from_utf8_lossy(&sha.expect("run sha256sum").stdout)[..64].to_string();
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let result = run.json()["result"].clone();
    assert_eq!(result["receipt"]["body"]["spec_fingerprint"], spec_sha.as_str(), "{result}");
    commit_all(&env.work, "the work");
    result
}

fn verify(env: &TestEnv, args: &[&str]) -> Run {
    let mut all = vec!["verify"];
    all.extend_from_slice(args);
    all.push("--json");
    env.scafld(&all)
}

/// The detail of the first failed check, after asserting exit 3 and that it is `name`.
fn failed_check(run: &Run, name: &str) -> String {
    run.assert_code(3);
    let result = run.json()["result"].clone();
    assert_eq!(result["verified"], false, "{result}");
    let failed: Vec<&Value> = result["checks"].as_array().unwrap().iter().filter(|c| c["ok"] == false).collect();
    assert!(!failed.is_empty(), "{result}");
    assert_eq!(failed[0]["name"], name, "{result}");
    failed[0]["detail"].as_str().unwrap().to_string()
}

/// The daemon keeps the TMPDIR of the client that started it; once that folder was gone, every
/// `verify` failed, exit 2, "cannot make a folder for verify's diagnostics", naming neither
/// TMPDIR nor a fix. Its diagnostics now go under /tmp when that folder refuses them.
#[test]
fn verify_works_after_the_daemons_tmpdir_is_gone() {
    let mut env = TestEnv::new();
    let tmpdir = env.path("daemon-tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    env.start_daemon_with(&[("TMPDIR", tmpdir.to_str().unwrap())]);
    finalized(&env);
    verify(&env, &[".scafld/receipts/rev.json", "--target", "HEAD"]).assert_code(0);
    std::fs::remove_dir_all(&tmpdir).unwrap();
    let run = verify(&env, &[".scafld/receipts/rev.json", "--target", "HEAD"]);
    run.assert_code(0);
    assert_eq!(run.json()["result"]["verified"], true, "{run:?}");
}

#[test]
fn finalize_mints_an_anchored_receipt_and_is_idempotent() {
    let env = TestEnv::new();
    let result = finalized(&env);
    assert_eq!(result["finalized"], true);
    let body = &result["receipt"]["body"];
    assert_eq!(body["schema_version"], 1);
    assert_eq!(body["verdict"], "pass");
    assert_eq!(body["snapshot_mode"], "working_tree");
    assert_eq!(body["scope"], serde_json::json!(["src/lib.rs"]));
    assert_eq!(body["acceptance"][0]["id"], "a1");
    assert_eq!(body["acceptance"][0]["status"], "pass");
    assert!(body["file_digests"]["src/lib.rs"].as_str().unwrap().len() == 64, "{body}");
    assert_eq!(body["reviewer"]["provider"], "command");
    assert_eq!(body["independence"]["level"], "isolation_only");
    let signature = &result["receipt"]["signature"];
    assert_eq!(signature["alg"], "ed25519");
    assert!(signature["key_id"].as_str().unwrap().starts_with("ed25519:"));

    // The files, the key and the trust anchor.
    let receipt = std::fs::read_to_string(env.work.join(".scafld/receipts/rev.json")).unwrap();
    assert_eq!(std::fs::read_to_string(env.work.join(".scafld/receipts/latest.json")).unwrap(), receipt);
    let trusted: Value =
        serde_json::from_str(&std::fs::read_to_string(env.work.join(".scafld/trusted-keys.json")).unwrap()).unwrap();
    assert_eq!(trusted["keys"][0]["key_id"], signature["key_id"]);
    use std::os::unix::fs::PermissionsExt;
    let key = env.path("home/.config/scafld/keys/receipt-ed25519");
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);

    // Completed, with the anchor in the ledger before the completion.
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["status"], "completed");
    let ledger = env.scafld(&["session", "rev", "--json"]).json()["result"]["entries"].clone();
    let types: Vec<&str> = ledger.as_array().unwrap().iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(&types[types.len() - 2..], ["receipt", "complete"], "{types:?}");
    let anchor = &ledger.as_array().unwrap()[types.len() - 2];
    assert_eq!(anchor["ledger_head"], body["ledger_head"]);

    // Again: the same receipt, nothing new; a lost latest.json is written back.
    std::fs::remove_file(env.work.join(".scafld/receipts/latest.json")).unwrap();
    let again = env.scafld(&["finalize", "rev", "--json"]);
    again.assert_code(0);
    assert_eq!(again.json()["result"]["already"], true);
    assert_eq!(again.json()["result"]["receipt"], result["receipt"]);
    assert_eq!(std::fs::read_to_string(env.work.join(".scafld/receipts/latest.json")).unwrap(), receipt);

    // For a person.
    let shown = env.scafld(&["receipt", "show"]);
    shown.assert_code(0);
    // The receipt's own words, never the code's names for them.
    let words = ["(working_tree)", "independence: isolation_only"];
    for part in ["receipt for rev: pass", "scope: src/lib.rs", "reviewer: command", "pass  a1", "signed by ed25519:"]
        .into_iter()
        .chain(words)
    {
        assert!(shown.stdout.contains(part), "{part}: {}", shown.stdout);
    }
    env.scafld(&["receipt", "show", "/nonexistent.json"]).assert_code(1);
}

#[test]
fn verify_accepts_the_receipt_and_names_every_tampering() {
    let env = TestEnv::new();
    finalized(&env);
    let ok = verify(&env, &["--target", "HEAD"]);
    ok.assert_code(0);
    let checks = ok.json()["result"]["checks"].clone();
    assert!(checks.as_array().unwrap().iter().all(|c| c["ok"] == true), "{checks}");
    let human = env.scafld(&["verify", "--target", "HEAD"]);
    human.assert_code(0);
    assert!(human.stdout.contains("verified") && human.stdout.contains("files"), "{}", human.stdout);

    let receipt_text = std::fs::read_to_string(env.work.join(".scafld/receipts/rev.json")).unwrap();
    let tampered = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut value: Value = serde_json::from_str(&receipt_text).unwrap();
        edit(&mut value);
        let path = env.path(name);
        std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
        path.display().to_string()
    };
    // One byte of the body.
    let body = tampered("body.json", &|v| v["body"]["minted_at"] = "2020-01-01T00:00:00Z".into());
    let detail = failed_check(&verify(&env, &[&body, "--target", "HEAD"]), "signature");
    assert!(detail.contains("does not match the receipt body"), "{detail}");
    // A command written into a receipt no trusted key signed is never run.
    let marker = env.path("unsigned-command-ran");
    let touch = format!("touch {}", marker.display());
    let command = tampered("command.json", &|v| v["body"]["acceptance"][0]["command"] = touch.clone().into());
    let run = verify(&env, &[&command, "--target", "HEAD"]);
    failed_check(&run, "signature");
    let acceptance =
        run.json()["result"]["checks"].as_array().unwrap().iter().find(|c| c["name"] == "acceptance").cloned();
    assert!(acceptance.unwrap()["detail"].as_str().unwrap().contains("not re-run"), "{}", run.stdout);
    assert!(!marker.exists(), "an unsigned receipt's command ran");
    // A digest too short to be one (receipts are input): a clean failure, not a crash.
    let short = tampered("short.json", &|v| v["body"]["file_digests"]["src/lib.rs"] = "ab".into());
    let run = verify(&env, &[&short, "--target", "HEAD"]);
    run.assert_code(3);
    // The signature.
    let sig = tampered("sig.json", &|v| v["signature"]["sig"] = base64_of(&[1u8; 64]).into());
    let detail = failed_check(&verify(&env, &[&sig, "--target", "HEAD"]), "signature");
    assert!(detail.contains("does not match"), "{detail}");

    // The trust anchors: unknown, revoked, expired.
    let keys_text = std::fs::read_to_string(env.work.join(".scafld/trusted-keys.json")).unwrap();
    let keys = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut value: Value = serde_json::from_str(&keys_text).unwrap();
        edit(&mut value);
        let path = env.path(name);
        std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
        path.display().to_string()
    };
    let untrusted = keys("none.json", &|v| v["keys"] = serde_json::json!([]));
    let detail = failed_check(&verify(&env, &["--target", "HEAD", "--trusted-keys", &untrusted]), "signature");
    assert!(detail.contains("is not trusted"), "{detail}");
    let revoked = keys("revoked.json", &|v| v["keys"][0]["revoked"] = true.into());
    let detail = failed_check(&verify(&env, &["--target", "HEAD", "--trusted-keys", &revoked]), "signature");
    assert!(detail.contains("was revoked"), "{detail}");
    let expired = keys("expired.json", &|v| v["keys"][0]["expires_at"] = "2000-01-01T00:00:00Z".into());
    let detail = failed_check(&verify(&env, &["--target", "HEAD", "--trusted-keys", &expired]), "signature");
    assert!(detail.contains("expired"), "{detail}");
    // Lifecycle times are instants: revoked at the start of the minting day, written with an
    // offset whose text sorts after the receipt's UTC time, and an expiry that names no instant,
    // fail.
    let receipt: Value =
        serde_json::from_str(&std::fs::read_to_string(env.work.join(".scafld/receipts/rev.json")).unwrap()).unwrap();
    let minted = receipt["body"]["minted_at"].as_str().unwrap().to_string();
    // `<day>T23:59:59+23:59` is `<day>T00:00:59Z`: before the minting unless that was earlier.
    if &minted[11..19] > "00:00:59" {
        let offset = keys("offset.json", &|v| {
            v["keys"][0]["revoked"] = true.into();
            v["keys"][0]["revoked_at"] = format!("{}T23:59:59+23:59", &minted[..10]).into();
        });
        let detail = failed_check(&verify(&env, &["--target", "HEAD", "--trusted-keys", &offset]), "signature");
        assert!(detail.contains("was revoked at"), "{detail}");
    }
    // A `revoked_at` revokes without `"revoked": true` (or with `false`), and one that names
    // no instant fails closed.
    let past = keys("past.json", &|v| v["keys"][0]["revoked_at"] = "2000-01-01T00:00:00Z".into());
    let detail = failed_check(&verify(&env, &["--target", "HEAD", "--trusted-keys", &past]), "signature");
    assert!(detail.contains("was revoked at 2000-01-01T00:00:00Z"), "{detail}");
    let unflagged = keys("unflagged.json", &|v| {
        v["keys"][0]["revoked"] = false.into();
        v["keys"][0]["revoked_at"] = "garbage".into();
    });
    let detail = failed_check(&verify(&env, &["--target", "HEAD", "--trusted-keys", &unflagged]), "signature");
    assert!(detail.contains("revoked_at `garbage` is not an RFC 3339 time"), "{detail}");
    let garbage = keys("garbage.json", &|v| v["keys"][0]["expires_at"] = "garbage".into());
    let detail = failed_check(&verify(&env, &["--target", "HEAD", "--trusted-keys", &garbage]), "signature");
    assert!(detail.contains("expires_at `garbage` is not an RFC 3339 time"), "{detail}");

    // A base the target does not descend from.
    let branch = git(&env.work, &["rev-parse", "--abbrev-ref", "HEAD"]);
    let work = git(&env.work, &["rev-parse", "HEAD"]);
    git(&env.work, &["checkout", "-q", "--orphan", "elsewhere"]);
    git(&env.work, &["commit", "-qm", "unrelated"]);
    let detail =
        failed_check(&verify(&env, &["--material-only", "--target", "elsewhere", "--material-ref", &work]), "base");
    assert!(detail.contains("is not an ancestor of elsewhere"), "{detail}");
    git(&env.work, &["checkout", "-q", "-f", &branch]);

    // A scoped file changed after the receipt: its digest, and the acceptance command, fail.
    write(&env, "src/lib.rs", "pub fn hello() {}\n");
    git(&env.work, &["commit", "-qam", "drift"]);
    let run = verify(&env, &["--target", "HEAD"]);
    let detail = failed_check(&run, "files");
    assert!(detail.contains("src/lib.rs: digest differs"), "{detail}");
    let checks = run.json()["result"]["checks"].clone();
    let acceptance = checks.as_array().unwrap().iter().find(|c| c["name"] == "acceptance").unwrap().clone();
    assert_eq!(acceptance["ok"], false, "{checks}");
    assert!(acceptance["detail"].as_str().unwrap().contains("criterion `a1`"), "{acceptance}");
    let material_only = verify(&env, &["--target", "HEAD", "--material-only"]);
    let checks = material_only.json()["result"]["checks"].clone();
    let acceptance = checks.as_array().unwrap().iter().find(|c| c["name"] == "acceptance").unwrap().clone();
    assert_eq!(acceptance["ok"], true, "--material-only runs no command: {checks}");

    // The committed config can demand more independence than a same-host review gives; a
    // local file cannot lower it.
    let config = env.work.join(".scafld/config.yaml");
    let committed = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, committed.replace("min_independence: isolation_only", "min_independence: cross_vendor"))
        .unwrap();
    std::fs::write(env.work.join(".scafld/config.local.yaml"), "verify:\n  min_independence: isolation_only\n")
        .unwrap();
    let detail = failed_check(&verify(&env, &["--target", "HEAD~1", "--material-only"]), "independence");
    assert!(detail.contains("requires CrossVendor"), "{detail}");
    std::fs::write(&config, committed).unwrap();

    // CI fails closed without a target.
    let mut ci = env.scafld_command(&["verify", "--json"]);
    ci.env("CI", "true");
    let ci = Run::from(ci.output().unwrap());
    ci.assert_code(2);
    assert!(ci.json()["error"]["message"].as_str().unwrap().contains("needs --target"), "{}", ci.stdout);
}

/// A receipt signed by the trusted host key does not verify unless its body attests a pass:
/// a `fail` verdict, an open blocker, declared acceptance with no record, or a recorded
/// criterion that did not pass each fails the `verdict` check (exit 3), `--material-only` too.
#[test]
fn verify_fails_a_signed_receipt_that_does_not_attest_a_pass() {
    use scafld_protocol::receipt::{Blocker, Body, Envelope};
    use scafld_protocol::vocab::Verdict;
    type Edit<'a> = &'a dyn Fn(&mut Body);
    let env = TestEnv::new();
    finalized(&env);
    let text = std::fs::read_to_string(env.work.join(".scafld/receipts/rev.json")).unwrap();
    let envelope: Envelope = serde_json::from_str(&text).unwrap();
    let key = scafld_daemon::receipts::host_key(&env.path("home/.config/scafld/keys/receipt-ed25519"), false).unwrap();
    // Signing the body unchanged gives finalize's own signature: the key is the one it used.
    assert_eq!(scafld_daemon::receipts::sign(envelope.body.clone(), &key), envelope);
    let signed = |name: &str, edit: Edit| {
        let mut body = envelope.body.clone();
        edit(&mut body);
        let path = env.path(name);
        std::fs::write(&path, serde_json::to_string(&scafld_daemon::receipts::sign(body, &key)).unwrap()).unwrap();
        path.display().to_string()
    };
    let blocker = Blocker {
        id: "f1".into(),
        severity: "high".into(),
        location: "src/lib.rs".into(),
        summary: "broken".into(),
        validation: "read it".into(),
    };
    let cases: [(&str, Edit, &str); 4] = [
        ("fail.json", &|b| b.verdict = Verdict::Fail, "verdict is fail"),
        ("blocker.json", &|b| b.open_blockers = vec![blocker.clone()], "1 open blocking finding(s) (`f1`)"),
        ("none.json", &|b| b.acceptance.clear(), "declares acceptance but records no criterion"),
        ("failed.json", &|b| b.acceptance[0].status = "fail".into(), "did not pass: `a1` (fail)"),
    ];
    for (name, edit, says) in cases {
        let path = signed(name, edit);
        for extra in [&[][..], &["--material-only"][..]] {
            let mut args = vec![path.as_str(), "--target", "HEAD"];
            args.extend_from_slice(extra);
            let run = verify(&env, &args);
            let detail = failed_check(&run, "verdict");
            assert!(detail.contains(says), "{name}: {detail}");
            let checks = run.json()["result"]["checks"].clone();
            let signature = checks.as_array().unwrap().iter().find(|c| c["name"] == "signature").cloned().unwrap();
            assert_eq!(signature["ok"], true, "{name}: {checks}");
        }
    }
    verify(&env, &["--target", "HEAD"]).assert_code(0);
}

fn base64_of(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A receipt key `init` cannot make (no home to keep it in, or a folder where the key file
/// goes) is a warning naming why: the workspace is made, not left half-made behind a failed
/// `init`, and the next `init` that can make the key trusts it.
#[test]
fn init_warns_when_it_cannot_make_the_receipt_key() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    let key = env.path("home/.config/scafld/keys/receipt-ed25519");
    std::fs::create_dir_all(&key).unwrap();
    let run = env.scafld(&["init", "--json"]);
    run.assert_code(0);
    let warnings = run.json()["result"]["warnings"].to_string();
    assert!(
        warnings.contains("no receipt signing key was trusted") && warnings.contains("receipt-ed25519"),
        "{warnings}"
    );
    assert!(env.work.join(".scafld/workspace_id").exists() && !env.work.join(".scafld/trusted-keys.json").exists());

    std::fs::remove_dir(&key).unwrap();
    let mut homeless = env.scafld_command(&["init", "--json"]);
    homeless.env_remove("HOME");
    let run = Run::from(homeless.output().unwrap());
    run.assert_code(0);
    assert!(
        run.json()["result"]["warnings"]
            .to_string()
            .contains("none of SCAFLD_CONFIG_HOME, XDG_CONFIG_HOME and HOME is set"),
        "{}",
        run.stdout
    );

    let again = env.init();
    assert!(again["result"]["created"].as_array().unwrap().iter().any(|p| p == ".scafld/trusted-keys.json"), "{again}");
}

#[test]
fn init_creates_the_key_and_its_trust_and_init_ci_the_workflow() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    let first = env.init();
    let created = first["result"]["created"].as_array().unwrap().clone();
    assert!(created.iter().any(|p| p == ".scafld/trusted-keys.json"), "{first}");
    use std::os::unix::fs::PermissionsExt;
    let key = env.path("home/.config/scafld/keys/receipt-ed25519");
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    let again = env.init();
    assert!(again["result"]["skipped"].as_array().unwrap().iter().any(|p| p == ".scafld/trusted-keys.json"));
    assert!(!env.work.join(".github").exists(), "plain init writes no workflow");

    let ci = env.scafld(&["init", "--ci", "--json"]);
    ci.assert_code(0);
    assert!(
        ci.json()["result"]["created"].as_array().unwrap().iter().any(|p| p == ".github/workflows/scafld-verify.yml")
    );
    let workflow = env.work.join(".github/workflows/scafld-verify.yml");
    let text = std::fs::read_to_string(&workflow).unwrap();
    assert!(
        text.contains("pull_request_target") && text.contains("--material-only") && text.contains("scafld verify --ci")
    );
    // Both lanes take trust from the pull request's base, never from its checkout.
    assert!(text.contains("BASE_REF: ${{ github.event.pull_request.base.ref }}"), "{text}");
    assert_eq!(
        text.matches(r#"--target "refs/remotes/origin/${BASE_REF}" --trust-ref "refs/remotes/origin/${BASE_REF}""#)
            .count(),
        2,
        "{text}"
    );
    // The user's edits are theirs.
    std::fs::write(&workflow, "# mine\n").unwrap();
    let kept = env.scafld(&["init", "--ci", "--json"]);
    assert!(
        kept.json()["result"]["skipped"].as_array().unwrap().iter().any(|p| p == ".github/workflows/scafld-verify.yml")
    );
    assert_eq!(std::fs::read_to_string(&workflow).unwrap(), "# mine\n");

    // A key others can read is never trusted: init says so, with the fix (the workspace is
    // there already, so it warns rather than failing), and finalize refuses it.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let warned = env.scafld(&["init", "--json"]);
    warned.assert_code(0);
    let warnings = warned.json()["result"]["warnings"].to_string();
    assert!(warnings.contains("no receipt signing key was trusted") && warnings.contains("chmod 600"), "{warnings}");
}

/// A criterion whose evidence passed fails when finalize runs it again on the same files (it
/// reads a file outside the scope): nothing is minted, and the failure is the task's evidence
/// now, so the task is no longer "done": it is blocked, `complete` and `finalize` refuse it,
/// and the next action finalize prints (the build) is accepted. Repaired, built and reviewed
/// again, it finalizes.
#[test]
fn finalize_refuses_without_a_pass_and_mints_nothing_when_acceptance_fails() {
    let env = TestEnv::new();
    // The criterion also reads a file outside the task's scope, so it can fail at finalize
    // while the recorded evidence stays current.
    let flag = env.path("flag");
    let phase = format!(
        "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs && test ! -e {}`\n",
        flag.display()
    );
    opened(&env, "src/lib.rs", &phase);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let early = env.scafld(&["finalize", "rev", "--json"]);
    early.assert_code(4);
    assert!(early.json()["error"]["message"].as_str().unwrap().contains("cannot complete rev"), "{}", early.stdout);

    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    std::fs::write(&flag, "").unwrap();
    let blocked = env.scafld(&["finalize", "rev", "--json"]);
    blocked.assert_code(4);
    let result = blocked.json()["result"].clone();
    assert_eq!(result["finalized"], false, "{result}");
    assert!(result["blocked"].as_str().unwrap().contains("`a1` is fail"), "{result}");
    assert_eq!(result["criteria"][0]["status"], "fail");
    assert!(result.get("receipt").is_none());
    assert!(!env.work.join(".scafld/receipts").exists());
    assert_eq!(result["next_command"], "scafld build rev", "{result}");
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["status"], "blocked", "{status}");
    assert_eq!(status["next_action"]["command"], "scafld build rev", "{status}");
    assert!(status["next_action"]["reason"].as_str().unwrap().contains("repair `a1`"), "{status}");
    let complete = env.scafld(&["complete", "rev", "--json"]);
    complete.assert_code(4);
    assert!(complete.json()["error"]["message"].as_str().unwrap().contains("rev is blocked"), "{}", complete.stdout);
    env.scafld(&["finalize", "rev", "--json"]).assert_code(4);
    // Following the printed next action: the build runs the criterion (still failing), not a refusal.
    let build = env.scafld(&["build", "rev", "--json"]);
    build.assert_code(3);
    assert_eq!(build.json()["result"]["status"], "blocked", "{}", build.stdout);

    // Fixed, built and reviewed again: it finalizes.
    std::fs::remove_file(&flag).unwrap();
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    env.scafld(&["finalize", "rev"]).assert_code(0);
}

/// A task with `scope`, built and reviewed to a pass, whose criterion runs `change` once a flag
/// outside the scope is set; the flag is then set and finalize's refusal (exit 4) returned.
fn finalize_changing_while_running(env: &TestEnv, scope: &str, change: &str) -> Run {
    let flag = env.path("flag");
    let phase = format!(
        "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs && {{ test ! -e {} || {change}; }}`\n",
        flag.display()
    );
    opened(env, scope, &phase);
    write(env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(env, &reviewer(env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    std::fs::write(&flag, "").unwrap();
    let refused = env.scafld(&["finalize", "rev", "--json"]);
    refused.assert_code(4);
    refused
}

/// A scoped file changed while finalize's criteria run (here by the criterion itself, once a
/// flag outside the scope is set) is content no reviewer saw: finalize refuses (exit 4) naming
/// it, mints nothing and leaves the task in review; the next build re-runs the stale evidence.
#[test]
fn finalize_refuses_files_changed_while_its_criteria_ran() {
    let env = TestEnv::new();
    let refused = finalize_changing_while_running(&env, "src/lib.rs", "echo '// unreviewed' >> src/lib.rs");
    let error = refused.json()["error"].clone();
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("changed while its criteria ran") && message.contains("src/lib.rs (changed)"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains("scafld build rev"), "{error}");
    assert!(!env.work.join(".scafld/receipts/rev.json").exists());
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_ne!(status["status"], "completed", "{status}");
    assert_eq!(status["next_action"]["command"], "scafld build rev", "{status}");
}

/// A file whose name holds a newline, added in scope while finalize's criteria run: `--json`
/// carries its exact name in `error.details.changed_during_finalize` (a JSON string holds a
/// newline), while the message, text for a person, shows it in caret notation; `status --json`'s
/// `stale_changes` is exact too, and human `status` shows it on its line.
#[test]
fn finalize_names_a_file_changed_while_its_criteria_ran_exactly_in_json() {
    let env = TestEnv::new();
    let refused = finalize_changing_while_running(&env, "src/", "touch \"src/evil$(printf '\\nnext'): x\"");
    let error = refused.json()["error"].clone();
    assert!(env.work.join("src/evil\nnext: x").exists(), "{error}");
    assert_eq!(
        error["details"]["changed_during_finalize"],
        serde_json::json!(["src/evil\nnext: x (added)"]),
        "{error}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("src/evil^Jnext: x (added)") && !message.contains('\n'), "{error}");
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["stale_changes"], serde_json::json!(["src/evil\nnext: x (added)"]), "{status}");
    let shown = env.scafld(&["status", "rev"]).stdout;
    assert!(shown.contains("src/evil^Jnext: x (added)"), "{shown}");
    assert!(!shown.lines().any(|line| line.starts_with("next: x")), "{shown}");
}

/// A spec rewritten while finalize's criteria run (here by the criterion itself, once a flag
/// is set: its own Command loses the hook) no longer holds the approved contract: finalize
/// refuses (exit 4) naming the change with status's hint, mints nothing, records nothing.
#[test]
fn finalize_refuses_a_spec_whose_contract_changed_while_its_criteria_ran() {
    let env = TestEnv::new();
    let (flag, hook) = (env.path("flag"), env.path("hook.sh"));
    std::fs::write(
        &hook,
        format!("test ! -e {} || sed -i 's| \\&\\& sh [^`]*||' .scafld/specs/*/rev.md\n", flag.display()),
    )
    .unwrap();
    let phase = format!(
        "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs && sh {}`\n",
        hook.display()
    );
    opened(&env, "src/lib.rs", &phase);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let before = env.scafld(&["session", "rev", "--json"]).stdout;
    std::fs::write(&flag, "").unwrap();
    let refused = env.scafld(&["finalize", "rev", "--json"]);
    refused.assert_code(4);
    let error = refused.json()["error"].clone();
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("differ from the approved contract: `a1` changed"), "{error}");
    assert!(message.contains("changed while its criteria ran"), "{error}");
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["status"], "review", "{status}");
    let next = status["next_action"]["command"].as_str().unwrap();
    assert!(error["hint"].as_str().unwrap().contains(next), "{error} / {status}");
    assert!(!env.work.join(".scafld/receipts/rev.json").exists());
    assert_eq!(env.scafld(&["session", "rev", "--json"]).stdout, before, "finalize recorded nothing");
}

/// The criteria finalize runs again are the call's own commands, on record like a build's:
/// `daemon stop` kills them and finalize answers that the stop cut it short, recording
/// nothing; a daemon killed while they run leaves them to the next one, which kills them as it
/// starts. Before, both left the criterion running, orphaned, for as long as it liked.
#[test]
fn finalize_leaves_nothing_running_when_the_daemon_stops_or_dies() {
    use std::process::{Command, Stdio};
    let mut env = TestEnv::new();
    env.start_daemon();
    let slow = env.path("slow");
    let phase = format!(
        "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs && {{ test ! -e {} || sleep 1013; }}`\n",
        slow.display()
    );
    opened(&env, "src/lib.rs", &phase);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let before = env.scafld(&["session", "rev", "--json"]).stdout;
    std::fs::write(&slow, "").unwrap();
    let finalize = |env: &TestEnv| {
        let mut command: Command = env.scafld_command(&["finalize", "rev", "--json"]);
        let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        wait_until("finalize's criterion to run", || crate::exec::running("sleep 1013"));
        child
    };

    let stopped = finalize(&env);
    env.scafld(&["daemon", "stop"]).assert_code(0);
    env.take_daemon().wait().unwrap();
    assert!(!crate::exec::running("sleep 1013"), "a stopped daemon leaves finalize's criterion running");
    let answer = Run::from(stopped.wait_with_output().unwrap());
    let error = answer.json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("finalize rev was cut short and recorded nothing"), "{error}");

    let pid = env.start_daemon();
    assert_eq!(env.scafld(&["session", "rev", "--json"]).stdout, before, "the cut finalize recorded nothing");
    let cut_off = finalize(&env);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    env.take_daemon().wait().unwrap();
    assert!(!cut_off.wait_with_output().unwrap().status.success(), "a finalize whose daemon died never succeeds");
    assert!(crate::exec::running("sleep 1013"), "the orphan outlives the daemon until the next one starts");
    env.start_daemon();
    wait_until("the next daemon to kill the orphan", || !crate::exec::running("sleep 1013"));
    assert_eq!(env.scafld(&["session", "rev", "--json"]).stdout, before);
    std::fs::remove_file(&slow).unwrap();
    assert_eq!(env.scafld(&["finalize", "rev", "--json"]).json()["result"]["finalized"], true);

    // `verify` runs the receipt's commands the same way.
    commit_all(&env.work, "the work");
    std::fs::write(&slow, "").unwrap();
    let mut command = env.scafld_command(&["verify", "--json"]);
    let verifying = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_until("verify's criterion to run", || crate::exec::running("sleep 1013"));
    env.scafld(&["daemon", "stop"]).assert_code(0);
    env.take_daemon().wait().unwrap();
    assert!(!crate::exec::running("sleep 1013"), "a stopped daemon leaves verify's criterion running");
    let error = Run::from(verifying.wait_with_output().unwrap()).json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("verify was cut short"), "{error}");
}

/// Once finalize's run of a criterion fails again, the last review's pass no longer stands:
/// `status --json` keeps that review (its findings stay readable) but marks it
/// `superseded_by` the entry that reset the gate, beside `review_gate: not_started`, and the
/// human status calls it the last review, superseded; a new review is current again.
#[test]
fn a_review_superseded_by_a_failing_finalize_is_not_shown_as_the_gates_verdict() {
    let env = TestEnv::new();
    let flag = env.path("flag");
    let phase = format!(
        "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs && test ! -e {}`\n",
        flag.display()
    );
    opened(&env, "src/lib.rs", &phase);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!((&status["review_gate"], &status["review"]["verdict"]), (&"pass".into(), &"pass".into()), "{status}");
    assert!(status["review"].get("superseded_by").is_none(), "{status}");

    std::fs::write(&flag, "").unwrap();
    env.scafld(&["finalize", "rev", "--json"]).assert_code(4);
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["review_gate"], "not_started", "{status}");
    let entries = env.scafld(&["session", "rev", "--json"]).json()["result"]["entries"].clone();
    let failed = entries.as_array().unwrap().iter().rev().find(|e| e["type"] == "criterion").unwrap();
    assert_eq!(failed["status"], "fail", "{failed}");
    let entry = format!("entry-{}", failed["seq"]);
    assert_eq!(status["review"]["superseded_by"], entry.as_str(), "{status}");
    assert_eq!(status["review"]["verdict"], "pass", "the review itself is kept as it was: {status}");
    let human = env.scafld(&["status", "rev"]);
    assert!(
        human.stdout.contains(&format!("\nlast review (superseded by {entry}): pass by command")),
        "{}",
        human.stdout
    );
    assert!(!human.stdout.contains("\nreview: pass"), "{}", human.stdout);

    std::fs::remove_file(&flag).unwrap();
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["review_gate"], "pass", "{status}");
    assert!(status["review"].get("superseded_by").is_none(), "a new review is current: {status}");
}

/// A change signed with a key the protected branch never trusted, which adds that key to its
/// own trusted-keys.json (finalize does so) and keeps a weaker policy than the branch's: in CI
/// the keys and `verify.min_independence` are the base commit's, never the checkout's.
#[test]
fn ci_verify_takes_trust_and_policy_from_the_base_commit_not_the_change() {
    let env = TestEnv::new();
    opened(&env, "src/lib.rs", GREET);
    let keys_a = std::fs::read_to_string(env.work.join(".scafld/trusted-keys.json")).unwrap();
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    // Key B: a stranger's config folder, which finalize creates and trusts in the checkout.
    let mut finalize = env.scafld_command(&["finalize", "rev", "--json"]);
    finalize.env("SCAFLD_CONFIG_HOME", env.path("stranger"));
    let finalize = Run::from(finalize.output().unwrap());
    finalize.assert_code(0);
    let key_b = finalize.json()["result"]["receipt"]["signature"]["key_id"].as_str().unwrap().to_string();
    let keys_ab = std::fs::read_to_string(env.work.join(".scafld/trusted-keys.json")).unwrap();
    assert!(!keys_a.contains(&key_b) && keys_ab.contains(&key_b), "{keys_ab}");
    commit_all(&env.work, "the change, its receipt and its own key");

    // The protected branch: the commit the change started from, trusting key A only and
    // demanding cross-vendor independence.
    let base = env.path("base");
    git(&env.work, &["worktree", "add", "-q", "-b", "base", base.to_str().unwrap(), "HEAD~1"]);
    let config = std::fs::read_to_string(env.work.join(".scafld/config.yaml")).unwrap();
    let strict = config.replace("min_independence: isolation_only", "min_independence: cross_vendor");
    assert_ne!(strict, config);
    let commit_base = |keys: &str, config: &str, message: &str| {
        std::fs::create_dir_all(base.join(".scafld")).unwrap();
        std::fs::write(base.join(".scafld/trusted-keys.json"), keys).unwrap();
        std::fs::write(base.join(".scafld/config.yaml"), config).unwrap();
        git(&base, &["add", ".scafld/trusted-keys.json", ".scafld/config.yaml"]);
        git(&base, &["commit", "-qm", message]);
    };
    commit_base(&keys_a, &strict, "base trusts key A");

    // The checkout's own key is refused, naming the trust source and the way to add a key.
    for args in [
        &["--ci", "--material-only", "--target", "base", "--material-ref", "HEAD"][..],
        &["--ci", "--material-only", "--target", "base", "--trust-ref", "base", "--material-ref", "HEAD"][..],
        &["--material-only", "--target", "base", "--trust-ref", "base", "--material-ref", "HEAD"][..],
    ] {
        let run = verify(&env, args);
        let detail = failed_check(&run, "signature");
        for part in [
            format!("key {key_b} is not trusted by .scafld/trusted-keys.json at base ("),
            "the checkout's own .scafld/trusted-keys.json lists it".into(),
            "a commit to the protected branch adds it".into(),
        ] {
            assert!(detail.contains(&part), "{args:?}: {part}: {detail}");
        }
        let source = run.json()["result"]["trust_source"].as_str().unwrap().to_string();
        assert!(source.starts_with(".scafld/trusted-keys.json and .scafld/config.yaml at base ("), "{source}");
    }
    let human = env.scafld(&["verify", "--ci", "--material-only", "--target", "base", "--material-ref", "HEAD"]);
    human.assert_code(3);
    assert!(
        human.stdout.contains("trust: .scafld/trusted-keys.json and .scafld/config.yaml at base"),
        "{}",
        human.stdout
    );
    // In CI the checkout's own file is no anchor even when named.
    let own = verify(&env, &["--ci", "--target", "base", "--trusted-keys", ".scafld/trusted-keys.json"]);
    own.assert_code(2);
    assert!(own.json()["error"]["message"].as_str().unwrap().contains("no trust anchor"), "{}", own.stdout);
    // A developer's local verify reads the working tree, and says so.
    let local = verify(&env, &["--material-only", "--target", "base", "--material-ref", "HEAD"]);
    local.assert_code(0);
    let source = local.json()["result"]["trust_source"].as_str().unwrap().to_string();
    assert_eq!(source, ".scafld/trusted-keys.json and .scafld/config.yaml in the working tree");

    // Key B committed to the base: trusted. The base's policy still holds, whatever the
    // change's committed or uncommitted config says.
    commit_base(&keys_ab, &strict, "base trusts key B");
    let lowered = "verify:\n  min_independence: isolation_only\n";
    std::fs::write(env.work.join(".scafld/config.yaml"), lowered).unwrap();
    let run = verify(&env, &["--ci", "--material-only", "--target", "base", "--material-ref", "HEAD"]);
    let detail = failed_check(&run, "independence");
    assert!(detail.contains("requires CrossVendor (.scafld/config.yaml at base ("), "{detail}");
    let signature = run.json()["result"]["checks"][2].clone();
    assert_eq!(signature["name"], "signature");
    assert_eq!(signature["ok"], true, "{signature}");
    std::fs::write(env.work.join(".scafld/config.yaml"), &config).unwrap();

    // The base's own policy relaxed by a commit there: verified.
    commit_base(&keys_ab, &config, "base accepts isolation_only");
    verify(&env, &["--ci", "--material-only", "--target", "base", "--material-ref", "HEAD"]).assert_code(0);
    // The full lane runs the commands in a clean checkout of the change, as CI's is.
    let clean = env.path("clean");
    git(&env.work, &["worktree", "add", "-q", "--detach", clean.to_str().unwrap(), "HEAD"]);
    let clean = clean.to_str().unwrap();
    verify(&env, &["--ci", "--target", "base", "--material-ref", "HEAD", "--acceptance-root", clean]).assert_code(0);

    // A trust ref that does not resolve is a usage error, not a pass.
    let missing = verify(&env, &["--ci", "--target", "base", "--trust-ref", "nowhere"]);
    missing.assert_code(2);
    assert!(
        missing.json()["error"]["message"].as_str().unwrap().contains("trust anchor at nowhere"),
        "{}",
        missing.stdout
    );
}

/// A `--target` or `--material-ref` that git does not know is a usage error (exit 2) refused
/// before anything is checked or run, as a `--trust-ref` is, not a receipt that failed to
/// verify (exit 3) after its criteria ran.
#[test]
fn verify_refuses_an_unknown_target_before_running_anything() {
    let env = TestEnv::new();
    let marker = env.dir.path().join("criterion-ran");
    let acceptance = format!(
        "- [ ] `a1` test - greet is defined\n  - Command: `echo ran >> {}; grep -q greet src/lib.rs`\n",
        marker.display()
    );
    finalized_with(&env, &acceptance);
    let _ = std::fs::remove_file(&marker);
    for args in [&["--target", "nowhere"][..], &["--target", "HEAD", "--material-ref", "nowhere"][..]] {
        let run = verify(&env, args);
        let message = refused(&run, 2);
        let flag = args[args.len() - 2];
        assert!(message.contains(&format!("{flag} nowhere")) && message.contains("unknown revision"), "{message}");
        assert!(run.json()["error"]["hint"].as_str().unwrap().contains(&format!("pass {flag} a commit-ish")));
        assert!(!marker.exists(), "verify ran the receipt's criterion for {args:?}");
    }
    // Known revisions: the criterion runs again and the receipt verifies.
    verify(&env, &["--target", "HEAD"]).assert_code(0);
    assert!(marker.exists(), "the criterion runs once the target is known");
}

/// `--material-ref C` reads the files at C; the recorded acceptance commands must then run on
/// C's code too. They used to run in the working tree whatever it held (its HEAD another
/// commit), and `--acceptance-root`, the clean checkout to run them in, was no flag at all.
/// Now they run in a clean checkout of C: `--acceptance-root`, or the working tree when it is
/// one; anything else is refused before anything runs, and in that checkout the commands get
/// a fresh HOME and none of the caller's credentials.
#[test]
fn verify_runs_acceptance_only_in_a_clean_checkout_of_the_material_ref() {
    let env = TestEnv::new();
    let marker = env.path("criterion-ran");
    let acceptance = format!(
        "- [ ] `a1` test - greet is defined\n  - Command: `printf '%s,%s,%s,%s\\n' \"$(pwd -P)\" \"$GITHUB_TOKEN\" \"$MY_API_TOKEN\" \"$HOME\" >> {}; grep -q greet src/lib.rs`\n",
        marker.display()
    );
    finalized_with(&env, &acceptance);
    let _ = std::fs::remove_file(&marker);
    let work = git(&env.work, &["rev-parse", "HEAD"]);
    write(&env, "src/lib.rs", "pub fn hello() {}\n");
    git(&env.work, &["commit", "-qam", "drift"]);
    let ran = || std::fs::read_to_string(&marker).unwrap_or_default();
    let refusal = |args: &[&str], parts: &[&str], hint: &[&str]| {
        let run = verify(&env, args);
        let message = refused(&run, 2);
        for part in parts {
            assert!(message.contains(part), "{args:?}: {part}: {message}");
        }
        let shown = run.json()["error"]["hint"].as_str().unwrap_or_default().to_string();
        for part in hint {
            assert!(shown.contains(part), "{args:?}: {part}: {shown}");
        }
        assert_eq!(ran(), "", "{args:?} ran the receipt's criterion");
    };

    // The working tree holds other code than the material: refused, naming the ways on.
    refusal(
        &["--target", "HEAD", "--material-ref", &work],
        &[&format!("--material-ref {work} is commit {}", &work[..12]), "but the working tree has commit"],
        &["--acceptance-root", "git worktree add --detach", "--material-only"],
    );
    verify(&env, &["--material-only", "--target", "HEAD", "--material-ref", &work]).assert_code(0);

    // A clean checkout of the material, named relative to where the client runs.
    let clean = env.path("clean");
    git(&env.work, &["worktree", "add", "-q", "--detach", clean.to_str().unwrap(), &work]);
    let mut command = env.scafld_command(&[
        "verify",
        "--target",
        "HEAD",
        "--material-ref",
        &work,
        "--acceptance-root",
        "../clean",
        "--json",
    ]);
    command.env("GITHUB_TOKEN", "leaked").env("MY_API_TOKEN", "leaked");
    let run = Run::from(command.output().unwrap());
    run.assert_code(0);
    let checks = run.json()["result"]["checks"].clone();
    let check = checks.as_array().unwrap().iter().find(|c| c["name"] == "acceptance").unwrap().clone();
    assert!(check["detail"].as_str().unwrap().contains("pass in the clean checkout"), "{checks}");
    let line = ran();
    let fields: Vec<&str> = line.trim_end().split(',').collect();
    let clean_real = clean.canonicalize().unwrap();
    assert_eq!(fields[..3], [clean_real.to_str().unwrap(), "", ""], "{line}");
    assert_ne!(fields[3], env.path("home").to_str().unwrap(), "{line}");
    std::fs::remove_file(&marker).unwrap();

    // What the original refuses of the flag, each before anything runs.
    let root = clean.to_str().unwrap();
    refusal(&["--target", "HEAD", "--acceptance-root", root], &["needs --material-ref"], &["rev-parse HEAD"]);
    refusal(
        &["--target", "HEAD", "--material-ref", &work, "--acceptance-root", root, "--material-only"],
        &["--material-only runs none"],
        &[],
    );
    let nowhere = env.path("nowhere");
    refusal(
        &["--target", "HEAD", "--material-ref", &work, "--acceptance-root", nowhere.to_str().unwrap()],
        &["is not a folder"],
        &["git worktree add --detach"],
    );
    refusal(
        &["--target", "HEAD", "--material-ref", &work, "--acceptance-root", env.work.to_str().unwrap()],
        &["has commit", "checked out: the acceptance commands would run on other code"],
        &[],
    );
    // A folder within the checkout is clean too, but not where the workspace is: the commands
    // would run (and their paths resolve) there.
    let inner = clean.join(".scafld");
    assert!(inner.is_dir(), "the checkout holds the workspace's .scafld");
    refusal(
        &["--target", "HEAD", "--material-ref", &work, "--acceptance-root", inner.to_str().unwrap()],
        &["is not where the workspace's folder is in that checkout", clean_real.to_str().unwrap()],
        &["pass --acceptance-root"],
    );
    std::fs::write(clean.join("stray.txt"), "x").unwrap();
    refusal(
        &["--target", "HEAD", "--material-ref", &work, "--acceptance-root", root],
        &["is not a clean checkout of it: stray.txt (untracked)"],
        &["git worktree add --detach"],
    );
    std::fs::remove_file(clean.join("stray.txt")).unwrap();

    // The working tree at the material, but holding what a clean checkout does not (the
    // runner's own ignored files): refused too.
    git(&env.work, &["checkout", "-q", "--detach", &work]);
    refusal(&["--target", "HEAD", "--material-ref", "HEAD"], &["(ignored)", "is not a clean checkout"], &[]);
    // A fresh clone at the material is one: the commands run there, without --acceptance-root.
    let clone = env.path("clone");
    git(env.dir.path(), &["clone", "-q", env.work.to_str().unwrap(), clone.to_str().unwrap()]);
    git(&clone, &["checkout", "-q", "--detach", &work]);
    let mut command = env.scafld_command(&["verify", "--target", "HEAD", "--material-ref", "HEAD", "--json"]);
    let run = Run::from(command.current_dir(&clone).output().unwrap());
    run.assert_code(0);
    assert!(ran().starts_with(&format!("{},", clone.canonicalize().unwrap().display())), "{}", ran());
    assert_eq!(git(&clone, &["status", "--porcelain", "--ignored"]), "", "verify wrote into the clone");
}

/// The message of a refused call, after asserting its exit code.
fn refused(run: &Run, code: i32) -> String {
    run.assert_code(code);
    run.json()["error"]["message"].as_str().unwrap().to_string()
}

/// `--scope-hint` is read as the spec's Scope is: a hint outside the workspace, misspelled,
/// differing only in case, or holding no file is refused (no receipt that signs nothing), a
/// glob means its folder; and a receipt that signs no file (as an earlier release could mint)
/// is never verified, however its tree changes.
#[test]
fn finalize_refuses_a_scope_hint_that_binds_nothing_and_verify_refuses_a_receipt_that_signs_nothing() {
    let env = TestEnv::new();
    opened(&env, "src/lib.rs", GREET);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    std::fs::create_dir_all(env.work.join("empty")).unwrap();
    // Alone, a hint naming nothing is the hint's fault, never "the spec declares no scope" (exit 4).
    for (hint, says) in [("", "has an empty entry"), (".git", "names git's own store"), (".git/HEAD", "git's own")] {
        let message = refused(&env.scafld(&["finalize", "rev", "--scope-hint", hint, "--json"]), 2);
        assert!(message.starts_with("--scope-hint") && message.contains(says), "{hint}: {message}");
    }
    for (hint, says) in [
        ("/etc/passwd", "is outside the workspace"),
        ("../elsewhere.txt", "is outside the workspace"),
        ("typo.txt", "`typo.txt` matches nothing in the workspace"),
        ("SRC/lib.rs", "`src/lib.rs` differs only in case"),
        ("empty", "`empty` holds no file"),
        ("", "--scope-hint has an empty entry, which names nothing"),
        (" ", "--scope-hint has an empty entry, which names nothing"),
        (".git", "`.git` names git's own store"),
        (".git/HEAD", "`.git/HEAD` names git's own store"),
        (".env", "`.env` names a file kept from reviewers for its secrets"),
    ] {
        let run = env.scafld(&["finalize", "rev", "--scope-hint", "src/lib.rs", "--scope-hint", hint, "--json"]);
        let message = refused(&run, 2);
        assert!(message.contains(says), "{hint}: {message}");
        assert!(run.json()["error"]["hint"].as_str().unwrap().contains("--scope-hint"), "{}", run.stdout);
        assert!(!env.work.join(".scafld/receipts/rev.json").exists(), "{hint}: a receipt was minted");
    }
    assert_eq!(env.scafld(&["status", "rev", "--json"]).json()["result"]["status"], "review");
    // A glob means its folder, as in the spec's Scope.
    let run = env.scafld(&["finalize", "rev", "--scope-hint", "src/*.rs", "--json"]);
    run.assert_code(0);
    let body = run.json()["result"]["receipt"]["body"].clone();
    assert_eq!(body["scope"], serde_json::json!(["src"]), "{body}");
    assert!(body["file_digests"]["src/lib.rs"].is_string(), "{body}");
    commit_all(&env.work, "the work");
    verify(&env, &["--target", "HEAD"]).assert_code(0);

    // A receipt signing no file, signed by the trusted key (as an earlier release minted one
    // for a hint that matched nothing): refused, and says why, however the tree changes.
    let text = std::fs::read_to_string(env.work.join(".scafld/receipts/rev.json")).unwrap();
    let mut envelope: scafld_protocol::receipt::Envelope = serde_json::from_str(&text).unwrap();
    envelope.body.scope = vec!["/etc/passwd".into()];
    envelope.body.file_digests.clear();
    envelope.body.tree_sha = scafld_daemon::domain::receipt::tree_sha(&envelope.body.file_digests);
    envelope.body.reviewed_context_provenance.retain(|p| p.kind != "file");
    envelope.body.ignored_unreviewed.clear();
    let key = scafld_daemon::receipts::host_key(&env.path("home/.config/scafld/keys/receipt-ed25519"), false).unwrap();
    let empty = scafld_daemon::receipts::sign(envelope.body, &key);
    let path = env.path("empty.json");
    std::fs::write(&path, serde_json::to_string(&empty).unwrap()).unwrap();
    write(&env, "src/lib.rs", "pub fn greet() { backdoor() }\n");
    git(&env.work, &["commit", "-qam", "after the receipt"]);
    let run = verify(&env, &[path.to_str().unwrap(), "--target", "HEAD", "--material-only"]);
    let checks = run.json()["result"]["checks"].clone();
    let named = |name: &str| checks.as_array().unwrap().iter().find(|c| c["name"] == name).unwrap().clone();
    assert_eq!(named("signature")["ok"], true, "{checks}");
    let detail = failed_check(&run, "body");
    assert!(detail.contains("signs no file"), "{detail}");
    assert_eq!(named("files")["ok"], false, "{checks}");
    assert!(named("files")["detail"].as_str().unwrap().contains("signs no file"), "{checks}");
}

/// A scope entry that is a symlink inside the workspace is signed with what it points at, as
/// evidence is bound to it: a later change there fails `verify` (a link's text alone did not).
#[test]
fn a_receipt_signs_what_a_scoped_symlink_points_at() {
    let env = TestEnv::new();
    opened(&env, "lnk.d", "- [ ] `a1` test - greets\n  - Command: `grep -q hello real/greet.txt`\n");
    write(&env, "real/greet.txt", "hello\n");
    std::os::unix::fs::symlink("real", env.work.join("lnk.d")).unwrap();
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let signed = run.json()["result"]["receipt"]["body"]["file_digests"].clone();
    assert!(signed.get("real/greet.txt").is_some() && signed.get("lnk.d").is_some(), "{signed}");
    commit_all(&env.work, "the work");
    verify(&env, &["--target", "HEAD"]).assert_code(0);
    write(&env, "real/greet.txt", "hello, changed\n");
    git(&env.work, &["commit", "-qam", "changed behind the link"]);
    let detail = failed_check(&verify(&env, &["--target", "HEAD"]), "files");
    assert!(detail.contains("real/greet.txt: digest differs"), "{detail}");
}

/// A criterion's `Cwd` and `Timeout seconds` go into the receipt (signed) and `verify` runs it
/// again the same way: in its folder, under its own timeout (here longer than the configured
/// default, which would kill it). A criterion naming neither is recorded as the original
/// records it, without the fields; an edited folder fails the signature, and one outside the
/// checkout is never run.
#[test]
fn verify_runs_each_criterion_in_its_recorded_folder_under_its_own_timeout() {
    let env = TestEnv::new();
    let phase = "- [ ] `a1` test - greet is defined, seen from src\n  - Command: `grep -q greet lib.rs`\n  - Cwd: `src`\n\
                 - [ ] `a2` test - slower than the default timeout\n  - Command: `sleep 2`\n  - Timeout seconds: 60\n\
                 - [ ] `a3` test - from the root\n  - Command: `test -f src/lib.rs`\n";
    opened(&env, "src/lib.rs", phase);
    write(&env, ".scafld/config.local.yaml", "execution:\n  absolute_timeout_seconds: 1\n");
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let acceptance = run.json()["result"]["receipt"]["body"]["acceptance"].clone();
    assert_eq!(acceptance[0]["cwd"], "src", "{acceptance}");
    assert!(acceptance[0].get("timeout_seconds").is_none(), "{acceptance}");
    assert_eq!(acceptance[1]["timeout_seconds"], 60, "{acceptance}");
    assert!(acceptance[2].get("cwd").is_none() && acceptance[2].get("timeout_seconds").is_none(), "{acceptance}");
    commit_all(&env.work, "the work");
    let ok = verify(&env, &["--target", "HEAD"]);
    ok.assert_code(0);
    let checks = ok.json()["result"]["checks"].clone();
    let acceptance_check = checks.as_array().unwrap().iter().find(|c| c["name"] == "acceptance").unwrap().clone();
    assert!(acceptance_check["detail"].as_str().unwrap().contains("3 recorded command(s) pass"), "{checks}");

    let text = std::fs::read_to_string(env.work.join(".scafld/receipts/rev.json")).unwrap();
    let tampered = |name: &str, cwd: &str| {
        let mut value: Value = serde_json::from_str(&text).unwrap();
        value["body"]["acceptance"][0]["cwd"] = cwd.into();
        let path = env.path(name);
        std::fs::write(&path, serde_json::to_string(&value).unwrap()).unwrap();
        path.display().to_string()
    };
    // The folder is signed: another one fails the signature.
    let moved = tampered("moved.json", "");
    let detail = failed_check(&verify(&env, &[&moved, "--target", "HEAD", "--material-only"]), "signature");
    assert!(detail.contains("does not match the receipt body"), "{detail}");
    // One outside the checkout is never run (unsigned, nothing in the receipt runs at all).
    let outside = tampered("outside.json", "../..");
    let run = verify(&env, &[&outside, "--target", "HEAD"]);
    let checks = run.json()["result"]["checks"].clone();
    let acceptance_check = checks.as_array().unwrap().iter().find(|c| c["name"] == "acceptance").unwrap().clone();
    assert_eq!(acceptance_check["ok"], false, "{checks}");
    assert!(acceptance_check["detail"].as_str().unwrap().contains("not re-run"), "{checks}");
}

/// A criterion whose `Cwd` names the workspace root (`.`, `./`) is recorded as the root is:
/// without a `cwd`, the form the original's strict decoder reads; `./src/` is recorded as
/// `src`. `verify` runs each from where finalize ran it.
#[test]
fn a_cwd_naming_the_root_is_signed_as_the_root() {
    let env = TestEnv::new();
    let phase = "- [ ] `a1` test - from the root, said as `.`\n  - Command: `test -f src/lib.rs`\n  - Cwd: `.`\n\
                 - [ ] `a2` test - from the root, said as `./`\n  - Command: `test -f src/lib.rs`\n  - Cwd: `./`\n\
                 - [ ] `a3` test - from src\n  - Command: `grep -q greet lib.rs`\n  - Cwd: `./src/`\n";
    opened(&env, "src/lib.rs", phase);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let acceptance = run.json()["result"]["receipt"]["body"]["acceptance"].clone();
    assert!(acceptance[0].get("cwd").is_none() && acceptance[1].get("cwd").is_none(), "{acceptance}");
    assert_eq!(acceptance[2]["cwd"], "src", "{acceptance}");
    let written = std::fs::read_to_string(env.work.join(".scafld/receipts/rev.json")).unwrap();
    assert_eq!(written.matches("\"cwd\"").count(), 1, "{written}");
    commit_all(&env.work, "the work");
    let ok = verify(&env, &["--target", "HEAD"]);
    ok.assert_code(0);
    let checks = ok.json()["result"]["checks"].clone();
    let acceptance_check = checks.as_array().unwrap().iter().find(|c| c["name"] == "acceptance").unwrap().clone();
    assert!(acceptance_check["detail"].as_str().unwrap().contains("3 recorded command(s) pass"), "{checks}");
}

/// A task whose change deletes its scoped file gets a receipt: the deletion is signed (the
/// file as `deleted`) in a `base_delta` receipt and a working-tree one alike, and `verify`
/// passes while the file stays gone and fails once it is back.
#[test]
fn a_receipt_signs_a_deleted_file_and_verify_requires_it_gone() {
    for base_ref in [Some("HEAD"), None] {
        let env = TestEnv::new();
        write(&env, "greet.txt", "old\n");
        opened(&env, "greet.txt", "- [ ] `a1` test - gone\n  - Command: `test ! -e greet.txt`\n");
        std::fs::remove_file(env.work.join("greet.txt")).unwrap();
        assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
        command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"])
            .assert_code(0);
        let mut args = vec!["finalize", "rev", "--json"];
        args.extend(base_ref.map(|base| ["--base-ref", base]).iter().flatten());
        let run = env.scafld(&args);
        run.assert_code(0);
        let body = run.json()["result"]["receipt"]["body"].clone();
        let mode = if base_ref.is_some() { "base_delta" } else { "working_tree" };
        assert_eq!(body["snapshot_mode"], mode, "{body}");
        assert_eq!(body["file_digests"], serde_json::json!({"greet.txt": "deleted"}), "{mode}: {body}");
        let shown = env.scafld(&["receipt", "show"]);
        assert!(shown.stdout.contains("files: 1, 1 signed as deleted"), "{}", shown.stdout);
        commit_all(&env.work, "the work");
        let ok = verify(&env, &["--target", "HEAD"]);
        ok.assert_code(0);
        let checks = ok.json()["result"]["checks"].clone();
        let files = checks.as_array().unwrap().iter().find(|c| c["name"] == "files").unwrap().clone();
        assert!(files["detail"].as_str().unwrap().contains("1 of them absent as signed"), "{checks}");

        // Back again: the signed deletion no longer holds.
        write(&env, "greet.txt", "old\n");
        commit_all(&env.work, "undo");
        let detail = failed_check(&verify(&env, &["--target", "HEAD", "--material-only"]), "files");
        assert!(detail.contains("greet.txt: signed as deleted but present at HEAD"), "{mode}: {detail}");
    }
}

/// A `--scope-hint` naming a file the task deleted (there at the base, `--base-ref` or else the
/// approval commit, gone now; here staged by `git rm`) signs it as `deleted`, as the spec's
/// Scope naming it does, and the printed next (committing the signed files) works as written;
/// a hint that named nothing at the base either is still refused. Finalizing again with another
/// hint returns the anchored receipt and says the hint was not applied.
#[test]
fn a_scope_hint_naming_a_deleted_file_signs_it_deleted() {
    for base_ref in [Some("HEAD"), None] {
        let env = TestEnv::new();
        write(&env, "old.txt", "old\n");
        opened(&env, "src/lib.rs", GREET);
        write(&env, "src/lib.rs", "pub fn greet() {}\n");
        assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
        command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"])
            .assert_code(0);
        git(&env.work, &["rm", "-q", "old.txt"]);
        let mut args = vec!["finalize", "rev", "--scope-hint", "src/lib.rs", "--scope-hint"];
        let with_base = |args: &[&'static str]| {
            let mut args = args.to_vec();
            args.extend(base_ref.map(|base| ["--base-ref", base]).iter().flatten());
            args.push("--json");
            args
        };
        let message = refused(&env.scafld(&with_base(&[&args[..], &["never.txt"]].concat())), 2);
        assert!(message.contains("`never.txt` matches nothing in the workspace, nor at"), "{message}");
        args.push("old.txt");
        let run = env.scafld(&with_base(&args));
        run.assert_code(0);
        let result = run.json()["result"].clone();
        let body = result["receipt"]["body"].clone();
        assert_eq!(body["file_digests"]["old.txt"], "deleted", "{body}");
        assert!(body["file_digests"]["src/lib.rs"].is_string(), "{body}");
        let next = result["next_command"].as_str().unwrap();
        let verify_step = " && scafld verify .scafld/receipts/rev.json --target HEAD";
        let commit = next.strip_suffix(verify_step).unwrap_or_else(|| panic!("{next}"));
        let done = std::process::Command::new("sh")
            .args(["-c", commit])
            .current_dir(&env.work)
            .stdout(std::process::Stdio::null())
            .env("HOME", env.path("home"))
            .envs([
                ("GIT_AUTHOR_NAME", "t"),
                ("GIT_AUTHOR_EMAIL", "t@t"),
                ("GIT_COMMITTER_NAME", "t"),
                ("GIT_COMMITTER_EMAIL", "t@t"),
            ])
            .status()
            .unwrap();
        assert!(done.success(), "{base_ref:?}: {next}");
        verify(&env, &[".scafld/receipts/rev.json", "--target", "HEAD"]).assert_code(0);
        // Again with another hint: the anchored receipt stands, and the answer says the hint
        // was not applied (the same hints again: nothing to say).
        let again = env.scafld(&["finalize", "rev", "--scope-hint", "src/lib.rs", "--json"]);
        again.assert_code(0);
        let note = again.json()["result"]["note"].as_str().unwrap_or_default().to_string();
        assert!(note.contains("rev is already finalized with receipt .scafld/receipts/rev.json"), "{note}");
        assert!(note.contains("signed for scope old.txt, src/lib.rs") && note.contains("was not applied"), "{note}");
        let shown = env.scafld(&["finalize", "rev", "--scope-hint", "src/lib.rs"]);
        assert!(shown.stdout.contains("note: rev is already finalized"), "{}", shown.stdout);
        let same = env.scafld(&["finalize", "rev", "--scope-hint", "src/lib.rs", "--scope-hint", "old.txt", "--json"]);
        assert!(same.json()["result"].get("note").is_none(), "{}", same.stdout);
    }
}

/// A scope that is the whole workspace (a top-level glob in the spec's Scope; `--scope-hint`
/// `*`, `./`, `.` or the workspace's own path) is fingerprinted as such: every file but
/// `.scafld/`, signed as `.`, and `verify` holds the whole tree to it. A hint naming a path
/// inside the workspace through `..` is that path. None of them is called "no scope".
#[test]
fn a_whole_workspace_scope_is_fingerprinted_and_inside_paths_are_read_as_inside() {
    let env = TestEnv::new();
    // The criterion also reads a file outside the task's scope, so finalize can be stopped at
    // its acceptance run, after the scope was read, without minting anything.
    let flag = env.path("flag");
    let phase = format!(
        "- [ ] `a1` test - says hello\n  - Command: `grep -q hello greet.txt && test ! -e {}`\n",
        flag.display()
    );
    opened(&env, "*.txt", &phase);
    write(&env, "greet.txt", "hello\n");
    write(&env, "sub/f", "s\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let script = reviewer(&env, "pass", &pass(), "");
    command_review(&env, &script, &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let root = env.work.display().to_string();
    for hints in [&[][..], &["*"], &["./"], &[root.as_str()], &["."], &["sub/../sub/f"], &["sub/./f", "greet.txt"]] {
        std::fs::write(&flag, "").unwrap();
        let mut args = vec!["finalize", "rev", "--json"];
        for hint in hints {
            args.extend(["--scope-hint", hint]);
        }
        let run = env.scafld(&args);
        run.assert_code(4);
        assert!(
            run.json()["result"]["blocked"].as_str().unwrap_or_default().contains("`a1` is fail"),
            "{hints:?}: {}",
            run.stdout
        );
        // The failure is the task's evidence now: built and reviewed again for the next try.
        std::fs::remove_file(&flag).unwrap();
        assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
        command_review(&env, &script, &["--min-attack-angles", "2", "--json"]).assert_code(0);
    }
    assert!(!env.work.join(".scafld/receipts").exists());
    let run = env.scafld(&["finalize", "rev", "--scope-hint", ".", "--json"]);
    run.assert_code(0);
    let body = run.json()["result"]["receipt"]["body"].clone();
    assert_eq!(body["scope"], serde_json::json!(["."]), "{body}");
    let signed: Vec<&String> = body["file_digests"].as_object().unwrap().keys().collect();
    assert_eq!(signed, [".gitignore", "README.md", "greet.txt", "sub/f"], "{body}");
    commit_all(&env.work, "the work");
    verify(&env, &["--target", "HEAD"]).assert_code(0);
    write(&env, "other.txt", "new\n");
    commit_all(&env.work, "more");
    let detail = failed_check(&verify(&env, &["--target", "HEAD", "--material-only"]), "files");
    assert!(detail.contains("other.txt: in scope at HEAD but not signed"), "{detail}");
}

/// A criterion's `Cwd` must be a folder inside the checkout as it resolves, not only as it is
/// written: once the folder is a symlink leading out (here a later commit makes it one, and the
/// folder is outside the signed scope, so the files check cannot notice), `finalize` does not
/// run the command there and mints nothing, and `verify` does not run it there either and fails
/// (exit 3), naming the criterion, where before it ran the signed command outside and said
/// "verified".
#[test]
fn a_criterion_folder_linked_outside_the_checkout_is_never_run() {
    let env = TestEnv::new();
    let ran = env.path("ran-in");
    let phase = format!(
        "- [ ] `a1` test - greet is defined, seen from sub\n  - Command: `pwd -P > {}; grep -q greet ../src/lib.rs`\n  - Cwd: `sub`\n",
        ran.display()
    );
    opened(&env, "src/lib.rs", &phase);
    write(&env, "sub/keep", "x\n");
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    // Outside the checkout, a folder where the command would pass just as well.
    let outside = env.path("elsewhere/outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(env.path("elsewhere/src")).unwrap();
    std::fs::write(env.path("elsewhere/src/lib.rs"), "pub fn greet() {}\n").unwrap();
    let sub = env.work.join("sub");

    std::fs::remove_dir_all(&sub).unwrap();
    std::os::unix::fs::symlink(&outside, &sub).unwrap();
    std::fs::remove_file(&ran).unwrap();
    let blocked = env.scafld(&["finalize", "rev", "--json"]);
    blocked.assert_code(4);
    let result = blocked.json()["result"].clone();
    assert!(result["blocked"].as_str().unwrap().contains("`a1` is fail"), "{result}");
    let reason = result["criteria"][0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("not run") && reason.contains("leads outside the workspace"), "{result}");
    assert!(!ran.exists(), "finalize ran the command outside the workspace");
    assert!(!env.work.join(".scafld/receipts").exists());

    // The folder back, built and reviewed again: it finalizes, and verify runs the command in
    // the checkout's folder.
    std::fs::remove_file(&sub).unwrap();
    write(&env, "sub/keep", "x\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    env.scafld(&["finalize", "rev"]).assert_code(0);
    commit_all(&env.work, "the work");
    verify(&env, &["--target", "HEAD"]).assert_code(0);
    assert_eq!(std::fs::read_to_string(&ran).unwrap().trim(), sub.canonicalize().unwrap().display().to_string());

    // A later commit makes the folder a link leading out of the checkout.
    git(&env.work, &["rm", "-rq", "sub"]);
    std::os::unix::fs::symlink(&outside, &sub).unwrap();
    commit_all(&env.work, "sub leads elsewhere");
    std::fs::remove_file(&ran).unwrap();
    let detail = failed_check(&verify(&env, &["--target", "HEAD"]), "acceptance");
    assert!(detail.contains("criterion `a1`") && detail.contains("leads outside the workspace"), "{detail}");
    assert!(!ran.exists(), "verify ran the signed command outside the checkout");
}

/// A receipt or keys file that is a device, a FIFO or far too large is refused at once with a
/// message naming it, the limit and what to do, never read whole or waited on: the daemon stays
/// up (the same process) and answers the next call.
#[test]
fn verify_refuses_a_receipt_or_keys_file_that_is_no_small_regular_file_and_the_daemon_stays_up() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    commit_all(&env.work, "init");
    let pid = env.daemon_pid();
    let quickly = std::time::Duration::from_secs(30);
    let zero = env.path("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let fifo = env.path("fifo.json");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let big = env.path("big.json");
    std::fs::File::create(&big).unwrap().set_len(1 << 30).unwrap();
    let limit = "over the 8.0 MiB (8388608 bytes) a receipt may have";
    for (file, says) in
        [(&zero, "is a device, not a regular file"), (&fifo, "is a FIFO, not a regular file"), (&big, limit)]
    {
        let path = file.display().to_string();
        let run = env.scafld_within(&["verify", &path, "--target", "HEAD", "--json"], quickly);
        let detail = failed_check(&run, "receipt");
        assert!(detail.contains(&format!("the receipt {path} ")) && detail.contains(says), "{detail}");
        assert!(detail.contains("a receipt is at most 8.0 MiB"), "{detail}");
        assert_eq!(env.daemon_pid(), pid, "the daemon survived {path}");
        // `receipt show` (read by the client) refuses it the same way.
        let shown = env.scafld_within(&["receipt", "show", &path, "--json"], quickly);
        shown.assert_code(3);
        assert!(shown.json()["error"]["message"].as_str().unwrap().contains(says), "{}", shown.stdout);
    }
    // The trusted keys file: the same refusal, in the check that reads it.
    for (file, says) in [(&zero, "is a device"), (&fifo, "is a FIFO")] {
        let path = file.display().to_string();
        let run = env.scafld_within(&["verify", "--self-check", "--trusted-keys", &path, "--json"], quickly);
        let checks = run.json()["result"]["checks"].to_string();
        assert!(checks.contains(&format!("the trusted keys file {path} {says}")), "{checks}");
        assert_eq!(env.daemon_pid(), pid);
    }
}

/// What a test does to a fresh repository before its first commit.
type Setup = dyn Fn(&TestEnv);

/// Task `rev` on `src/a.txt` in a repository `configure` set up before its first commit,
/// built twice (the file written as `first`, then `second`) and reviewed with a pass.
fn reviewed_text(env: &TestEnv, configure: &Setup, first: &[u8], second: &[u8]) {
    git(&env.work, &["init", "-q"]);
    configure(env);
    std::fs::create_dir_all(env.work.join("src")).unwrap();
    std::fs::write(env.work.join("src/a.txt"), first).unwrap();
    commit_all(&env.work, "initial");
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\nharden_status: not_run\n---\n\n# Text\n\n## Summary\n\nLine endings.\n\n## Scope\n\n- `src/a.txt` - the text.\n\n## Phase 1: Do\n\nObjective: do it.\n\nAcceptance:\n- [ ] `a1` test - has line1\n  - Command: `grep -q line1 src/a.txt`\n";
    write(env, ".scafld/specs/drafts/rev.md", spec);
    env.scafld(&["approve", "rev", "--reason", "line endings"]).assert_code(0);
    env.scafld(&["build", "rev"]).assert_code(0);
    std::fs::write(env.work.join("src/a.txt"), second).unwrap();
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(env, &reviewer(env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run sha256sum");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout)[..64].to_string()
}

/// Where git converts content on its way in (`core.autocrlf`, a `.gitattributes` eol rule), a
/// receipt signs each file as git stores it, so the commit of exactly the finalized work
/// verifies; where nothing converts, the working tree's bytes are signed as they are.
#[test]
fn a_receipt_signs_what_git_stores_so_converted_line_endings_verify() {
    let autocrlf = |env: &TestEnv| {
        git(&env.work, &["config", "core.autocrlf", "true"]);
    };
    let eol_rule = |env: &TestEnv| write(env, ".gitattributes", "*.txt text eol=crlf\n");
    let nothing = |_: &TestEnv| {};
    let cases: [(&str, &Setup, bool); 3] =
        [("core.autocrlf", &autocrlf, true), (".gitattributes", &eol_rule, true), ("no conversion", &nothing, false)];
    for (name, configure, converts) in cases {
        let env = TestEnv::new();
        let worked = b"line1\r\nline2 changed\r\n";
        reviewed_text(&env, configure, b"line1\r\nline2\r\n", worked);
        let run = env.scafld(&["finalize", "rev", "--json"]);
        run.assert_code(0);
        let body = run.json()["result"]["receipt"]["body"].clone();
        let signed = if converts { sha256_hex(b"line1\nline2 changed\n") } else { sha256_hex(worked) };
        assert_eq!(body["file_digests"]["src/a.txt"], signed.as_str(), "{name}: {body}");
        commit_all(&env.work, "the work");
        assert_eq!(git(&env.work, &["status", "--porcelain", "src"]).trim(), "", "{name}");
        let ok = verify(&env, &["--target", "HEAD"]);
        ok.assert_code(0);
    }
}

/// With `core.trustctime` off, a committed file rewritten in place with the same size and its
/// modification time set back is clean to git's stat check: the receipt still signs the
/// content the criteria ran on and the review judged, not the commit's (which `verify
/// --target HEAD` then refuses until the work is committed).
#[test]
fn a_receipt_signs_a_file_rewritten_under_the_same_size_and_mtime_as_it_is() {
    let env = TestEnv::new();
    opened(&env, "src/lib.rs", GREET);
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let set_back = || scafld_tests::set_modified(&env.work.join("src/lib.rs"), an_hour_ago);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    set_back();
    commit_all(&env.work, "a first greet");
    git(&env.work, &["config", "core.trustctime", "false"]);
    let worked = b"pub fn greet(){ }\n";
    std::fs::write(env.work.join("src/lib.rs"), worked).unwrap();
    set_back();
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let body = run.json()["result"]["receipt"]["body"].clone();
    assert_eq!(body["file_digests"]["src/lib.rs"], sha256_hex(worked).as_str(), "{body}");
    failed_check(&verify(&env, &["--target", "HEAD"]), "files");
}

/// `finalize` of work not committed yet names committing the signed files first (`verify
/// --target HEAD` reads the commit): following it verifies. Once HEAD holds them, verify alone.
#[test]
fn finalize_of_uncommitted_work_says_to_commit_the_signed_files_before_verify() {
    let env = TestEnv::new();
    opened(&env, "src/lib.rs", GREET);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev"]);
    run.assert_code(0);
    let next = run.stdout.lines().find_map(|l| l.strip_prefix("next: ")).unwrap().to_string();
    let verify_step = " && scafld verify .scafld/receipts/rev.json --target HEAD";
    let commit = next.strip_suffix(verify_step).unwrap_or_else(|| panic!("{next}"));
    assert_eq!(commit, "git add -A -- src/lib.rs && git commit -m \"rev: the finalized work\" -- src/lib.rs", "{next}");
    // Verify alone would fail here: HEAD does not hold the work.
    failed_check(&verify(&env, &["--target", "HEAD"]), "files");
    let done = std::process::Command::new("sh")
        .args(["-c", commit])
        .current_dir(&env.work)
        .stdout(std::process::Stdio::null())
        .env("HOME", env.path("home"))
        .envs([
            ("GIT_AUTHOR_NAME", "t"),
            ("GIT_AUTHOR_EMAIL", "t@t"),
            ("GIT_COMMITTER_NAME", "t"),
            ("GIT_COMMITTER_EMAIL", "t@t"),
        ])
        .status()
        .unwrap();
    assert!(done.success());
    verify(&env, &[".scafld/receipts/rev.json", "--target", "HEAD"]).assert_code(0);
    let again = env.scafld(&["finalize", "rev", "--json"]);
    again.assert_code(0);
    assert_eq!(again.json()["result"]["next_command"], "scafld verify .scafld/receipts/rev.json --target HEAD");
}

/// A finalize cut short after its ledger append leaves a completed task without its receipt
/// file: status and handoff point at `finalize`, which writes it again; then nothing is next.
#[test]
fn a_finalized_task_without_its_receipt_file_points_at_finalize() {
    let env = TestEnv::new();
    finalized(&env);
    for name in ["rev.json", "latest.json"] {
        std::fs::remove_file(env.work.join(".scafld/receipts").join(name)).unwrap();
    }
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["status"], "completed", "{status}");
    assert_eq!(status["next_action"]["command"], "scafld finalize rev", "{status}");
    let handoff = env.scafld(&["handoff", "rev"]);
    assert!(handoff.stdout.contains("scafld finalize rev"), "{}", handoff.stdout);
    env.scafld(&["finalize", "rev"]).assert_code(0);
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["next_action"]["command"], "none", "{status}");
    verify(&env, &["--target", "HEAD"]).assert_code(0);
}

/// A finalize cut off by a crash mid-move (the archived spec written, the active one not yet
/// removed, no receipt file): the leftover comes first everywhere (status, handoff and list all
/// name reconcile, and list shows the ledger's status), then finalize writes the receipt.
#[test]
fn a_finalize_cut_off_mid_move_names_reconcile_first_everywhere() {
    let env = TestEnv::new();
    opened(&env, "src/lib.rs", GREET);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    env.scafld(&["build", "rev"]).assert_code(0);
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2"]).assert_code(0);
    let active = env.work.join(".scafld/specs/active/rev.md");
    let before = std::fs::read_to_string(&active).unwrap();
    env.scafld(&["finalize", "rev"]).assert_code(0);
    // What the crash left: the old file back beside the archived one, no receipt files.
    std::fs::write(&active, &before).unwrap();
    std::fs::remove_dir_all(env.work.join(".scafld/receipts")).unwrap();
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["next_action"]["command"], "scafld reconcile rev", "{status}");
    assert!(env.scafld(&["handoff", "rev"]).stdout.contains("scafld reconcile rev"));
    let listed = env.scafld(&["list"]).stdout;
    let line = listed.lines().find(|l| l.starts_with("rev ")).unwrap_or_default().to_string();
    assert!(line.contains("completed") && line.contains("scafld reconcile rev"), "{listed}");

    env.scafld(&["reconcile", "rev"]).assert_code(0);
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    assert_eq!(status["next_action"]["command"], "scafld finalize rev", "{status}");
    env.scafld(&["finalize", "rev"]).assert_code(0);
    assert_eq!(env.scafld(&["status", "rev", "--json"]).json()["result"]["next_action"]["command"], "none");
}

/// What the repository lacks is an unmet precondition (exit 1, with the way out), never
/// "workspace unreachable" (6): finalize before the first commit, a receipt file that is a
/// folder. Following the hint works.
#[test]
fn finalize_refusals_for_what_the_repository_lacks_exit_1_with_a_hint() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    let spec = format!(
        "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\nharden_status: not_run\n---\n\n# Gate\n\n## Summary\n\nNo commit yet.\n\n## Scope\n\n- `src/lib.rs` - the change.\n\n## Phase 1: Do\n\nObjective: do it.\n\nAcceptance:\n{GREET}"
    );
    write(&env, ".scafld/specs/drafts/rev.md", &spec);
    env.scafld(&["approve", "rev", "--reason", "unborn"]).assert_code(0);
    env.scafld(&["build", "rev"]).assert_code(0);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(1);
    let error = run.json()["error"].clone();
    assert_eq!(error["code"], "invalid_state", "{error}");
    assert_eq!(error["exit_code"], 1, "{error}");
    assert!(error["message"].as_str().unwrap().contains("no commit yet"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains("git commit"), "{error}");

    commit_all(&env.work, "the work");
    std::fs::create_dir_all(env.work.join(".scafld/receipts/rev.json")).unwrap();
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(1);
    let error = run.json()["error"].clone();
    assert_eq!(error["code"], "invalid_state", "{error}");
    assert!(error["hint"].as_str().unwrap().contains("scafld finalize rev"), "{error}");
    std::fs::remove_dir(env.work.join(".scafld/receipts/rev.json")).unwrap();
    let again = env.scafld(&["finalize", "rev", "--json"]);
    again.assert_code(0);
    assert_eq!(again.json()["result"]["already"], true);
    verify(&env, &["--target", "HEAD"]).assert_code(0);
}

/// A receipt signs the repository's own files: a scope reaching into a submodule is refused,
/// naming it (it could not be signed, so it could change under a verified receipt), and a
/// scope holding one whole is signed around it, the answer saying so.
#[test]
fn a_receipt_never_claims_a_submodule_it_cannot_sign() {
    let env = TestEnv::new();
    let upstream = env.path("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    git(&upstream, &["init", "-q"]);
    std::fs::write(upstream.join("lib.txt"), "v1\n").unwrap();
    commit_all(&upstream, "lib");
    git(&env.work, &["init", "-q"]);
    std::fs::write(env.work.join("greet.txt"), "hello\n").unwrap();
    git(&env.work, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", upstream.to_str().unwrap(), "sub"]);
    commit_all(&env.work, "initial");
    env.init();
    let spec = "---\nspec_version: '2.0'\ntask_id: rev\nstatus: draft\nharden_status: not_run\n---\n\n# Gate\n\n## Summary\n\nSub.\n\n## Scope\n\n- `greet.txt` - the greeting.\n- `sub/lib.txt` - the library.\n\n## Phase 1: Do\n\nObjective: do it.\n\nAcceptance:\n- [ ] `a1` test - greets\n  - Command: `grep -q hello greet.txt`\n";
    write(&env, ".scafld/specs/drafts/rev.md", spec);
    env.scafld(&["approve", "rev", "--reason", "sub"]).assert_code(0);
    env.scafld(&["build", "rev"]).assert_code(0);
    write(&env, "greet.txt", "hello, world\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let refused = env.scafld(&["finalize", "rev", "--json"]);
    refused.assert_code(4);
    let message = refused.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("reaches into the submodule `sub`"), "{message}");
    assert!(!env.work.join(".scafld/receipts/rev.json").exists(), "nothing minted");
    // A link into the submodule reaches into it as well.
    std::os::unix::fs::symlink("sub/lib.txt", env.work.join("link")).unwrap();
    let linked = env.scafld(&["finalize", "rev", "--scope-hint", "greet.txt", "--scope-hint", "link", "--json"]);
    linked.assert_code(4);
    let message = linked.json()["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains("reaches into the submodule `sub`"), "{message}");
    std::fs::remove_file(env.work.join("link")).unwrap();
    // So does a path through a link to the repository's top (`self -> .`).
    std::os::unix::fs::symlink(".", env.work.join("self")).unwrap();
    let through = env.scafld(&["finalize", "rev", "--scope-hint", "greet.txt", "--scope-hint", "self/sub/lib.txt"]);
    through.assert_code(4);
    std::fs::remove_file(env.work.join("self")).unwrap();
    let whole = env.scafld(&["finalize", "rev", "--scope-hint", ".", "--json"]);
    whole.assert_code(0);
    let result = whole.json()["result"].clone();
    assert!(result["note"].as_str().unwrap_or_default().contains("submodule content is not signed: sub"), "{result}");
    let digests = result["receipt"]["body"]["file_digests"].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert!(digests.contains(&"greet.txt".to_string()) && !digests.iter().any(|d| d.starts_with("sub")), "{digests:?}");
}

/// History rewritten after approval (an amend, a rebase) leaves the approval baseline commit
/// in the repository but no ancestor of HEAD: a receipt based on it could never verify, so
/// finalize refuses (exit 1) with the way out, and `--base-ref` signs against a commit HEAD
/// descends from, which verifies.
#[test]
fn finalize_refuses_a_baseline_head_no_longer_descends_from() {
    let env = TestEnv::new();
    opened(&env, "src/lib.rs", GREET);
    // The approval's commit, amended away (it stays in the object store, off HEAD's history).
    std::fs::write(env.work.join("README.md"), "# project, reworded\n").unwrap();
    git(&env.work, &["commit", "-qa", "--amend", "-m", "initial, amended"]);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    commit_all(&env.work, "the work");
    let refused = env.scafld(&["finalize", "rev", "--json"]);
    refused.assert_code(1);
    let error = refused.json()["error"].clone();
    assert!(error["message"].as_str().unwrap_or_default().contains("is not an ancestor of HEAD"), "{error}");
    assert!(error["hint"].as_str().unwrap_or_default().contains("--base-ref"), "{error}");
    env.scafld(&["finalize", "rev", "--base-ref", "HEAD~1"]).assert_code(0);
    verify(&env, &["--target", "HEAD"]).assert_code(0);
}

/// Finalize on an orphan branch (`git checkout --orphan`): before its first commit it says so,
/// not that the repository has none; after one, that HEAD's history shares no commit with the
/// approval baseline. Both name the soft reset onto the branch holding it, which, followed as
/// printed, lets finalize sign the work.
#[test]
fn finalize_on_an_orphan_branch_names_a_way_back_to_the_baseline() {
    let env = TestEnv::new();
    opened(&env, "src/lib.rs", GREET);
    let branch = git(&env.work, &["rev-parse", "--abbrev-ref", "HEAD"]);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    git(&env.work, &["checkout", "-q", "--orphan", "fresh"]);
    let reset = format!("git reset --soft {branch}");

    let unborn = env.scafld(&["finalize", "rev", "--json"]);
    unborn.assert_code(1);
    let error = unborn.json()["error"].clone();
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("fresh, an orphan branch") && !message.contains("repository has no commit"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains(&format!("`{reset}`")), "{error}");

    commit_all(&env.work, "the work, on the orphan branch");
    let orphan = env.scafld(&["finalize", "rev", "--json"]);
    orphan.assert_code(1);
    let error = orphan.json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("shares no commit with it"), "{error}");
    let hint = error["hint"].as_str().unwrap();
    assert!(hint.contains(&format!("`{reset}`")) && !hint.contains("merge-base"), "{error}");

    let words: Vec<&str> = reset.split(' ').skip(1).collect();
    git(&env.work, &words);
    env.scafld(&["finalize", "rev"]).assert_code(0);
}

/// A spec whose Scope is the single entry `*` declares the whole workspace, as `.` and `*.txt`
/// do: `validate` says so, and `finalize` fingerprints every file but `.scafld/`, signed as
/// `.`, where it said the spec "declares no scope to fingerprint" (exit 4).
#[test]
fn a_scope_of_a_bare_star_is_the_whole_workspace() {
    let env = TestEnv::new();
    opened(&env, "*", "- [ ] `a1` test - says hello\n  - Command: `grep -q hello greet.txt`\n");
    let valid = env.scafld(&["validate", "rev"]);
    valid.assert_code(0);
    assert!(
        valid.stdout.contains("`*` is a pattern: scafld binds evidence and review to the whole workspace"),
        "{}",
        valid.stdout
    );
    write(&env, "greet.txt", "hello\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let body = run.json()["result"]["receipt"]["body"].clone();
    assert_eq!(body["scope"], serde_json::json!(["."]), "{body}");
    let signed: Vec<&String> = body["file_digests"].as_object().unwrap().keys().collect();
    assert_eq!(signed, [".gitignore", "README.md", "greet.txt"], "{body}");
}

/// A file the scope names that git ignores (generated output) is there, and evidence and
/// review read it, but no commit holds it: finalize says so, for the Scope and for a
/// `--scope-hint` alike, and names the way to a receipt, tracking it, which then verifies.
/// Before, it said the scope "holds no file" and pointed at `--scope-hint gen.txt`, which was
/// refused the same way.
#[test]
fn finalize_of_a_scoped_file_git_ignores_names_tracking_it_as_the_way_to_a_receipt() {
    let env = TestEnv::new();
    write(&env, ".gitignore", "gen.txt\n");
    opened(&env, "gen.txt", "- [ ] `a1` test - generated\n  - Command: `grep -q hello gen.txt`\n");
    write(&env, "gen.txt", "hello\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    for (args, code) in
        [(vec!["finalize", "rev", "--json"], 4), (vec!["finalize", "rev", "--scope-hint", "gen.txt", "--json"], 2)]
    {
        let run = env.scafld(&args);
        let message = refused(&run, code);
        assert!(message.contains("git ignores") && !message.contains("holds no file"), "{args:?}: {message}");
        let hint = run.json()["error"]["hint"].as_str().unwrap().to_string();
        assert!(hint.contains("`git add -f -- gen.txt`") && hint.contains("scafld complete rev"), "{hint}");
    }
    assert!(!env.work.join(".scafld/receipts/rev.json").exists(), "nothing minted");
    git(&env.work, &["add", "-f", "--", "gen.txt"]);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    assert!(run.json()["result"]["receipt"]["body"]["file_digests"]["gen.txt"].is_string(), "{}", run.stdout);
    commit_all(&env.work, "the work");
    verify(&env, &["--target", "HEAD"]).assert_code(0);
}

/// A scoped file a sparse checkout leaves out of the work tree (tracked, unchanged, `git
/// status` clean) is the file its index entry holds: never shown to the reviewer as deleted,
/// and signed as the commit holds it, so `verify` passes. Before, it was a deletion everywhere
/// and the receipt signed it `deleted`.
#[test]
fn a_scoped_file_a_sparse_checkout_leaves_out_is_unchanged_not_deleted() {
    let env = TestEnv::new();
    write(&env, "a/f.txt", "hi\n");
    write(&env, "b/g.txt", "keep\n");
    opened(&env, "a/f.txt` - the file.\n- `b/g.txt", "- [ ] `a1` test - hello\n  - Command: `grep -q hello a/f.txt`\n");
    write(&env, "a/f.txt", "hello\n");
    git(&env.work, &["add", "a"]);
    git(&env.work, &["commit", "-qm", "work"]);
    git(&env.work, &["sparse-checkout", "set", "a", ".scafld"]);
    assert!(!env.work.join("b/g.txt").exists(), "left out by the sparse checkout");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let packet = env.scafld(&["review", "rev", "--print-context", "--json"]).json()["result"]["context"].clone();
    let packet = packet.as_str().unwrap();
    assert!(!packet.contains("b/g.txt b/b/g.txt") && !packet.contains("deleted file"), "{packet}");
    assert!(packet.contains("+hello"), "{packet}");
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let signed = run.json()["result"]["receipt"]["body"]["file_digests"].clone();
    assert_eq!(signed["b/g.txt"], sha256_hex(b"keep\n").as_str(), "{signed}");
    verify(&env, &["--target", "HEAD"]).assert_code(0);
}

/// A file over the 8 MiB a diff shows whose only change is its mode (`chmod +x`) shows the
/// mode change in the packet's diff as git does (`old mode`/`new mode`); before, the same size
/// and content showed nothing. And one a sparse checkout leaves out (changed since approval,
/// committed, not on disk) is the change from the tree to its index entry, with its sizes,
/// never a deleted file.
#[test]
fn a_large_file_shows_its_mode_change_and_a_sparse_one_is_never_deleted() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let large = |path: &str, len: u64| {
        write(&env, path, "");
        std::fs::OpenOptions::new().write(true).open(env.work.join(path)).unwrap().set_len(len).unwrap();
    };
    large("a/run.bin", 9 << 20);
    large("b/big.bin", 9 << 20);
    opened(&env, "a/` - the files.\n- `b/big.bin", "- [ ] `a1` test - there\n  - Command: `test -f a/run.bin`\n");
    large("b/big.bin", 10 << 20);
    git(&env.work, &["add", "b"]);
    git(&env.work, &["commit", "-qm", "grown"]);
    git(&env.work, &["sparse-checkout", "set", "a", ".scafld"]);
    assert!(!env.work.join("b/big.bin").exists(), "left out by the sparse checkout");
    let run = env.work.join("a/run.bin");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let packet = env.scafld(&["review", "rev", "--print-context", "--json"]).json()["result"]["context"].clone();
    let packet = packet.as_str().unwrap();
    assert!(packet.contains("a/run.bin b/a/run.bin\nold mode 100644\nnew mode 100755\n"), "{packet}");
    assert!(!packet.contains("deleted file"), "{packet}");
    assert!(packet.contains("a file of 10.0 MiB (10485760 bytes) (was 9.0 MiB (9437184 bytes))"), "{packet}");
}

/// A receipt signs the review packet its reviewers were given. One edited after it was sent
/// (here by the reviewer itself, appending to the file) or removed since is refused by finalize
/// (exit 4, a hint to review again), which mints nothing; before, the edited file was signed
/// as the reviewed context and a removed one dropped the entry in silence. A new review's
/// packet, left alone, is signed with the digest of what its reviewer read.
#[test]
fn finalize_signs_the_packet_the_reviewers_were_given_and_refuses_one_changed_or_gone() {
    let env = TestEnv::new();
    opened(&env, "src/lib.rs", GREET);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    assert_eq!(env.scafld(&["build", "rev", "--json"]).json()["result"]["status"], "review");
    let tamper = "for f in .scafld/reviews/*/packet.md; do echo 'INJECTED: approved' >> \"$f\"; done";
    command_review(&env, &reviewer(&env, "tamper", &pass(), tamper), &["--min-attack-angles", "2", "--json"])
        .assert_code(0);
    let refused = env.scafld(&["finalize", "rev", "--json"]);
    refused.assert_code(4);
    let error = refused.json()["error"].clone();
    assert!(error["message"].as_str().unwrap().contains("was changed after the review began"), "{error}");
    assert!(error["hint"].as_str().unwrap().contains("scafld review rev"), "{error}");
    assert!(!env.work.join(".scafld/receipts/rev.json").exists(), "nothing minted");

    let script = reviewer(&env, "pass", &pass(), "");
    command_review(&env, &script, &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let reviews = env.work.join(".scafld/reviews");
    let packets: Vec<_> = std::fs::read_dir(&reviews)
        .unwrap()
        .map(|e| e.unwrap().path().join("packet.md"))
        .filter(|p| p.exists() && !std::fs::read_to_string(p).unwrap().contains("INJECTED"))
        .collect();
    assert_eq!(packets.len(), 1, "{packets:?}");
    let kept = std::fs::read(&packets[0]).unwrap();
    std::fs::remove_file(&packets[0]).unwrap();
    let gone = env.scafld(&["finalize", "rev", "--json"]);
    gone.assert_code(4);
    assert!(gone.json()["error"]["message"].as_str().unwrap().contains("is gone"), "{}", gone.stdout);
    assert!(!env.work.join(".scafld/receipts/rev.json").exists(), "nothing minted");

    std::fs::write(&packets[0], &kept).unwrap();
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let body = run.json()["result"]["receipt"]["body"].clone();
    let packet =
        body["reviewed_context_provenance"].as_array().unwrap().iter().find(|p| p["kind"] == "packet").cloned();
    let read = std::fs::read(format!("{script}.packet")).unwrap();
    assert_eq!(packet.as_ref().unwrap()["sha256"], sha256_hex(&read).as_str(), "{body}");
    assert_eq!(packet.unwrap()["bytes"], read.len() as u64, "{body}");
}

/// `verify` in a fresh clone (as CI runs it) writes nothing into the checkout and registers
/// nothing: no workspace id, no run diagnostics under `.scafld/runs/`, while it still re-runs
/// the recorded criteria. Before, its reruns settled the clone as a workspace.
#[test]
fn verify_in_a_fresh_clone_writes_nothing_into_it() {
    let env = TestEnv::new();
    let marker = env.path("ran");
    let acceptance = format!(
        "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs && touch {}`\n",
        marker.display()
    );
    finalized_with(&env, &acceptance);
    std::fs::remove_file(&marker).unwrap();
    let clone = env.path("clone");
    git(&env.path(""), &["clone", "-q", env.work.to_str().unwrap(), clone.to_str().unwrap()]);
    // git's own store aside (reading may refresh its index).
    let files = |dir: &std::path::Path| {
        let mut all = scafld_tests::tree(dir);
        all.retain(|path, _| path != ".git/" && !path.starts_with(".git/"));
        all
    };
    let before = files(&clone);
    let known = env.client().result("workspace.list", serde_json::json!({}))["workspaces"].clone();
    let run = Run::from(
        env.scafld_command(&["verify", "--ci", "--target", "HEAD", "--json"]).current_dir(&clone).output().unwrap(),
    );
    run.assert_code(0);
    assert!(marker.exists(), "the recorded criterion ran");
    let after = files(&clone);
    let added: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    assert!(added.is_empty(), "verify wrote into the clone: {added:?}");
    assert_eq!(before, after);
    let now = env.client().result("workspace.list", serde_json::json!({}))["workspaces"].clone();
    assert_eq!(known, now, "verify registered the clone");
}

/// A manual criterion's receipt record left out the person's evidence: `build --criterion m1
/// --evidence-digest D --actor alice` recorded both in the ledger, but the signed receipt said
/// only `pass`, so nothing signed who vouched for it or with what. It now signs
/// `evidence_sha256`, `evidence_actor` and `evidence_recorded_at` (the original's names), and
/// the receipt still verifies.
#[test]
fn a_receipt_signs_a_manual_criterions_evidence_digest_actor_and_time() {
    let env = TestEnv::new();
    let phase = "- [ ] `m1` manual - a person signs off\n".to_string() + GREET;
    opened(&env, "src/lib.rs", &phase);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    env.scafld(&["build", "rev", "--json"]).assert_code(3);
    let digest = sha256_hex(b"signed-off screenshot");
    let args = ["--disposition", "pass", "--reason", "looked at it", "--evidence-digest", &digest, "--actor", "alice"];
    let mut recorded = vec!["build", "rev", "--criterion", "m1"];
    recorded.extend(args);
    env.scafld(&recorded).assert_code(0);
    let entries = env.scafld(&["session", "rev", "--json"]).json()["result"]["entries"].clone();
    let manual = entries.as_array().unwrap().iter().find(|e| e["type"] == "manual_evidence").expect("entry").clone();
    command_review(&env, &reviewer(&env, "pass", &pass(), ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    let run = env.scafld(&["finalize", "rev", "--json"]);
    run.assert_code(0);
    let body = run.json()["result"]["receipt"]["body"].clone();
    let m1 = body["acceptance"].as_array().unwrap().iter().find(|a| a["id"] == "m1").expect("m1").clone();
    assert_eq!(m1["status"], "pass", "{m1}");
    assert_eq!(m1["evidence_sha256"], digest.as_str(), "{m1}");
    assert_eq!(m1["evidence_actor"], "alice", "{m1}");
    assert_eq!(m1["evidence_recorded_at"], manual["recorded_at"], "{m1}");
    // A run criterion carries no person's evidence.
    let a1 = body["acceptance"].as_array().unwrap().iter().find(|a| a["id"] == "a1").expect("a1").clone();
    assert!(a1.get("evidence_actor").is_none() && a1.get("evidence_sha256").is_none(), "{a1}");
    // The file holds what was signed, and verifies; changing the actor breaks the signature.
    let path = env.work.join(".scafld/receipts/rev.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"evidence_actor\": \"alice\""), "{text}");
    commit_all(&env.work, "the work");
    verify(&env, &["--target", "HEAD"]).assert_code(0);
    let shown = env.scafld(&["receipt", "show"]).stdout;
    assert!(shown.contains(&format!("manual, by alice at {}", manual["recorded_at"].as_str().unwrap())), "{shown}");
    std::fs::write(&path, text.replace("\"evidence_actor\": \"alice\"", "\"evidence_actor\": \"mallory\"")).unwrap();
    commit_all(&env.work, "forged");
    let forged = verify(&env, &[".scafld/receipts/rev.json", "--target", "HEAD"]);
    assert!(failed_check(&forged, "signature").contains("does not match"), "{}", forged.stdout);
}

/// A receipt in the form the original tool writes: Go's `encoding/json` output of its
/// struct, indented (fields in declaration order, zero fields it tags `omitempty` left out, `<`, `>`, `&`
/// escaped as `\u003c`, `\u003e`, `\u0026`), signed over the canonical body (sorted keys,
/// compact, the same escapes). Its signature verifies here, a manual criterion's evidence
/// included; one word changed afterwards does not. (The original verifies by decoding into
/// its struct and signing that again, as this tool does: a zero field it never writes, such as
/// `"exit_code": 0`, is not part of what it signs.)
#[test]
fn a_receipt_the_original_wrote_verifies_its_signature_and_a_tampered_one_does_not() {
    let env = TestEnv::new();
    git(&env.work, &["init", "-q"]);
    env.init();
    let keys_path = env.work.join(".scafld/trusted-keys.json");
    let mut keys: Value = serde_json::from_str(&std::fs::read_to_string(&keys_path).unwrap()).unwrap();
    keys["keys"].as_array_mut().unwrap().push(serde_json::json!({
        "key_id": "ed25519:aY9AYo6xn2UPzKOTDBF7OES2x_QuVtnIqQ1sYTiJvHM",
        "alg": "ed25519",
        "public_key": "dB7E+Pcn/TblV9aMMH8coG1gEWQJYeniT6RHysxSDJo="
    }));
    std::fs::write(&keys_path, serde_json::to_string_pretty(&keys).unwrap()).unwrap();
    write(&env, "hello.txt", "hi\n");
    let receipts = env.work.join(".scafld/receipts");
    std::fs::create_dir_all(&receipts).unwrap();
    std::fs::write(receipts.join("original.json"), ORIGINAL_RECEIPT).unwrap();
    let forged = ORIGINAL_RECEIPT.replace("\"evidence_actor\": \"alice\"", "\"evidence_actor\": \"mallory\"");
    assert_ne!(forged, ORIGINAL_RECEIPT);
    std::fs::write(receipts.join("forged.json"), forged).unwrap();
    commit_all(&env.work, "receipts");
    let signature = |file: &str| {
        let run = verify(&env, &[file, "--target", "HEAD"]);
        let result = run.json()["result"].clone();
        let check = result["checks"].as_array().unwrap().iter().find(|c| c["name"] == "signature").cloned();
        check.unwrap_or_else(|| panic!("no signature check: {result}"))
    };
    let original = signature(".scafld/receipts/original.json");
    assert_eq!(original["ok"], true, "{original}");
    let forged = signature(".scafld/receipts/forged.json");
    assert_eq!(forged["ok"], false, "{forged}");
    assert!(forged["detail"].as_str().unwrap().contains("does not match the receipt body"), "{forged}");
}

/// A receipt in the original's form, signed outside this tool over its canonical body by a
/// fixed Ed25519 key (the public key is the one the test above trusts).
const ORIGINAL_RECEIPT: &str = r#"{
  "body": {
    "schema_version": 1,
    "task_id": "orig-task",
    "session_id": "sess-1",
    "verdict": "pass",
    "snapshot_mode": "working_tree",
    "base_commit": "1111111111111111111111111111111111111111",
    "head_commit": "2222222222222222222222222222222222222222",
    "scope": [
      "hello.txt"
    ],
    "tree_sha": "abababababababababababababababababababababababababababababababab",
    "file_digests": {
      "hello.txt": "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4"
    },
    "ignored_unreviewed": [],
    "reviewed_context_provenance": [
      {
        "kind": "file",
        "path": "hello.txt",
        "sha256": "98ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc48c5d3fb1107be4",
        "bytes": 3
      }
    ],
    "reviewer": {
      "provider": "codex"
    },
    "host_under_review": {
      "agent": "unknown"
    },
    "independence": {
      "level": "isolation_only",
      "distinct": false,
      "downgraded": "unknown_host",
      "reason": "isolation_only: reviewer \"codex\" ran in an isolated path"
    },
    "spec_fingerprint": "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
    "acceptance_declared": true,
    "acceptance": [
      {
        "id": "ac1",
        "phase_id": "phase1",
        "command": "test -f hello.txt \u0026\u0026 echo '\u003cok\u003e'",
        "expected_kind": "exit_code_zero",
        "status": "pass",
        "reason": "exit code was 0",
        "output_sha256": "efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef"
      },
      {
        "id": "m1",
        "expected_kind": "manual",
        "status": "pass",
        "reason": "manual evidence recorded",
        "evidence_sha256": "1212121212121212121212121212121212121212121212121212121212121212",
        "evidence_actor": "alice",
        "evidence_recorded_at": "2026-08-21T09:59:00Z"
      }
    ],
    "open_blockers": [],
    "mutation_guard": {
      "status": "clean",
      "scope": [
        "hello.txt"
      ]
    },
    "ledger_head": "3434343434343434343434343434343434343434343434343434343434343434",
    "minted_at": "2026-08-21T10:00:00Z"
  },
  "signature": {
    "alg": "ed25519",
    "key_id": "ed25519:aY9AYo6xn2UPzKOTDBF7OES2x_QuVtnIqQ1sYTiJvHM",
    "sig": "SCHU3xvh9kLefagjVGi6uBJV4iQq1SIEDARmn6podvX+aZNCVME0Se7/wrLJkveVXIbJVTEPbTi9oxkKAl60BA=="
  }
}
"#;
