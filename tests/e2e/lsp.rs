//! `scafld lsp` through the real binary: a small LSP client of ours (Content-Length frames over
//! pipes) against a real daemon: buffer diagnostics at their 0-based lines (past a lone CR as
//! the editor counts them; cleared with an empty list, republished when the file changes on
//! disk, the file's once saved), review findings on the cited lines until resolved (a huge
//! line held within LSP's range), hover, document symbols, executeCommand with `$/progress`
//! (a command that fails outright shown in `window/showMessage` too), a
//! daemon restart (a spec no buffer holds, edited while no daemon ran, checked again), a
//! daemon that dies under a read of the server's own (no daemon started for it), every
//! broken spec published when the server starts, after a restart and when it first meets a
//! workspace in an opened spec, whenever it broke, a hung
//! daemon, a workspace opened through a linked path with a space and
//! non-ASCII in it (didClose back to the file's list), a spec of a folder never initialised
//! opened without a write, a clean exit, malformed messages and frames, requests with an
//! invalid id or no JSON-RPC version, a buffer too long as JSON, routine notes in the editor's
//! log rather than on stderr; and the Neovim reference client, headless (`nvim` must be
//! installed in CI; elsewhere its test is skipped with a notice).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use scafld_tests::{DEADLINE, TestEnv, wait_until};
use serde_json::{Value, json};

use crate::gate::{opened, write};
use crate::review::{ATTACKS, command_review, fail, reviewer, to_review};
use crate::specs::{spec_text, write_spec};

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// `scafld init`, and the files the specs' Scope names (`src/lib.rs`, `README.md`): an entry
/// naming nothing in the workspace is warned of in the editor, as `validate` warns of it.
fn init(env: &TestEnv) {
    env.init();
    for file in ["src/lib.rs", "README.md"] {
        let path = env.work.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "\n").unwrap();
    }
}

/// A running `scafld lsp` and our end of its pipes.
struct Lsp {
    child: Child,
    stdin: Option<ChildStdin>,
    messages: mpsc::Receiver<Value>,
    /// Messages read while looking for another one.
    backlog: Vec<Value>,
    /// Every message read, in short, for a failure to show what came.
    seen: Vec<String>,
    next_id: u64,
    /// Answer `window/workDoneProgress/create` with an error, as an editor refusing one may.
    refuse_progress: bool,
}

impl Lsp {
    /// Start `scafld lsp` in the work directory and initialise it with `root` as its workspace.
    fn start(env: &TestEnv, root: &Path) -> Lsp {
        Lsp::start_with(env, &env.work, root, &[])
    }

    /// [`Lsp::start`] run in `cwd` (outside any workspace, the server knows only `root`) with
    /// `vars` set.
    fn start_with(env: &TestEnv, cwd: &Path, root: &Path, vars: &[(&str, &str)]) -> Lsp {
        let mut lsp = Lsp::spawn(env, cwd, vars);
        lsp.initialize(root);
        lsp
    }

    /// `scafld lsp` started in `cwd` with `vars` set, not initialised yet.
    fn spawn(env: &TestEnv, cwd: &Path, vars: &[(&str, &str)]) -> Lsp {
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(env.path("lsp.stderr")).unwrap();
        let mut child = env
            .scafld_command(&["lsp"])
            .current_dir(cwd)
            .envs(vars.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn scafld lsp");
        let stdout = child.stdout.take().unwrap();
        let (tx, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            while let Some(message) = read_frame(&mut reader) {
                if tx.send(message).is_err() {
                    return;
                }
            }
        });
        Lsp {
            stdin: child.stdin.take(),
            child,
            messages,
            backlog: Vec::new(),
            seen: Vec::new(),
            next_id: 1,
            refuse_progress: false,
        }
    }

    /// `initialize` with `root` as the workspace, then `initialized`.
    fn initialize(&mut self, root: &Path) {
        let lsp = self;
        let id = lsp.request(
            "initialize",
            json!({"processId": null, "rootUri": uri(root), "capabilities": {"window": {"workDoneProgress": true}}}),
        );
        let init = lsp.response(id);
        let capabilities = &init["result"]["capabilities"];
        assert_eq!(capabilities["hoverProvider"], true, "{init}");
        assert_eq!(capabilities["executeCommandProvider"]["commands"][0], "scafld.build", "{init}");
        lsp.notify("initialized", json!({}));
    }

    fn send(&mut self, message: Value) {
        let body = message.to_string();
        self.send_raw(format!("Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes());
    }

    /// Bytes as they are, framed or not.
    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    /// The next `window/logMessage` of type `typ` (1 error, 2 warning, 3 info) whose message
    /// contains `needle`.
    fn logged(&mut self, typ: u64, needle: &str) -> String {
        let message = self.wait_for(&format!("a log message {typ} with {needle:?}"), |m| {
            m["method"] == "window/logMessage"
                && m["params"]["type"] == typ
                && m["params"]["message"].as_str().is_some_and(|t| t.contains(needle))
        });
        message["params"]["message"].as_str().unwrap().to_string()
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// The next message that satisfies `wanted` (others are kept for later); requests from the
    /// server (progress tokens) are answered as an editor would.
    fn wait_for(&mut self, what: &str, mut wanted: impl FnMut(&Value) -> bool) -> Value {
        if let Some(at) = self.backlog.iter().position(&mut wanted) {
            return self.backlog.remove(at);
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = match self.messages.recv_timeout(left) {
                Ok(message) => message,
                Err(e) => panic!("waiting for {what}: {e:?}; unread: {:#?}; read: {:#?}", self.backlog, self.seen),
            };
            let mut short = message.to_string();
            short.truncate(300);
            self.seen.push(short);
            if message.get("method").is_some() && message.get("id").is_some() {
                let refused = self.refuse_progress && message["method"] == "window/workDoneProgress/create";
                self.send(match refused {
                    true => json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": "no"}}),
                    false => json!({"jsonrpc": "2.0", "id": message["id"], "result": null}),
                });
            }
            if wanted(&message) {
                return message;
            }
            self.backlog.push(message);
        }
    }

    fn response(&mut self, id: u64) -> Value {
        self.wait_for(&format!("the response to request {id}"), |m| m["id"] == json!(id) && m.get("method").is_none())
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.response(id)
    }

    /// Drop what was published for `uri` and not read yet: what comes next is what a later
    /// wait sees (the server may publish one list twice, and a stale copy would answer a wait
    /// meant for the next change).
    fn forget(&mut self, uri: &str) {
        self.backlog.retain(|m| !(m["method"] == "textDocument/publishDiagnostics" && m["params"]["uri"] == uri));
    }

    /// The next diagnostics published for `uri` that satisfy `wanted`.
    fn diagnostics(&mut self, uri: &str, what: &str, mut wanted: impl FnMut(&[Value]) -> bool) -> Vec<Value> {
        let message = self.wait_for(what, |m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri
                && wanted(m["params"]["diagnostics"].as_array().unwrap())
        });
        message["params"]["diagnostics"].as_array().unwrap().clone()
    }

    fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "markdown", "version": 1, "text": text}}),
        );
    }

    /// Wait (bounded) for the process to end and return its exit code.
    fn exit_code(&mut self) -> i32 {
        let status = scafld_tests::wait_for_exit(&mut self.child, DEADLINE).expect("scafld lsp did not exit");
        status.code().unwrap_or(-1)
    }
}

impl Drop for Lsp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One Content-Length framed message; `None` at end of stream.
fn read_frame(reader: &mut impl BufRead) -> Option<Value> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("Content-Length: ") {
            length = value.parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length?];
    reader.read_exact(&mut body).ok()?;
    Some(serde_json::from_slice(&body).expect("the server sent JSON"))
}

/// The two-phase spec with a duplicated criterion id on line 66 (1-based) → LSP line 65.
fn broken(task_id: &str) -> String {
    spec_text(task_id, "draft").replace("`ac2_2` boundary", "`ac2_1` boundary")
}

const DUPLICATE_LINE: u64 = 65;

fn has_duplicate(diagnostics: &[Value]) -> bool {
    diagnostics.iter().any(|d| {
        d["range"]["start"]["line"] == DUPLICATE_LINE
            && d["severity"] == 1
            && d["source"] == "scafld"
            && d["message"].as_str().unwrap_or_default().contains("`ac2_1` is already used")
    })
}

#[test]
fn lsp_diagnostics_follow_the_buffer_and_the_file_on_disk() {
    let env = TestEnv::new();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    // Nobody answers: the server starts the daemon itself when the buffer needs checking.
    env.scafld(&["daemon", "stop"]).assert_code(0);
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);

    // The broken buffer (not the file: it is fine on disk) → the error at its 0-based line.
    lsp.open(&uri, &broken("greet"));
    let diagnostics = lsp.diagnostics(&uri, "the duplicate id", has_duplicate);
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), spec_text("greet", "draft"), "the server wrote the spec");

    // Fixed in the buffer (two quick edits, one check after the debounce) → an empty list.
    for (version, text) in [(2, broken("greet").replace("---\nspec", "---\n\nspec")), (3, spec_text("greet", "draft"))]
    {
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
        );
    }
    lsp.diagnostics(&uri, "the cleared list", |d| d.is_empty());
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": uri}, "text": spec_text("greet", "draft")}));
    lsp.diagnostics(&uri, "the saved buffer's empty list", |d| d.is_empty());

    // Someone else breaks the file on disk: the daemon's event republishes it.
    std::fs::write(&path, broken("greet")).unwrap();
    lsp.diagnostics(&uri, "the file's diagnostics", has_duplicate);
    // Another spec changed on disk while not open: it is published too.
    let other = write_spec(&env, "drafts", "other", &broken("other"));
    lsp.diagnostics(&crate::lsp::uri(&other), "the unopened spec's diagnostics", has_duplicate);

    // A whole-file problem (line 0 in scafld) lands on line 0.
    let wrong_id = spec_text("greet", "draft").replace("task_id: greet", "task_id: other-name");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 4}, "contentChanges": [{"text": wrong_id}]}),
    );
    let names_it = |d: &Value| d["message"].as_str().unwrap_or_default().contains("other-name");
    let diagnostics = lsp.diagnostics(&uri, "the file name problem", |d| d.iter().any(names_it));
    let problem = diagnostics.iter().find(|d| names_it(d)).unwrap();
    assert!(problem["range"]["start"]["line"].as_u64().unwrap() < 10, "{diagnostics:?}");
    assert!(!has_duplicate(&diagnostics), "{diagnostics:?}");
}

/// Opening a spec under a folder never `scafld init`ed (a vendored example with a `.scafld/` of
/// its own) writes nothing: no id file appears there, the daemon registers no workspace, and
/// the spec's diagnostics are shown all the same, for the buffer and for the file.
#[test]
fn lsp_opening_a_spec_of_a_folder_never_initialised_writes_nothing() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = env.work.join("docs/example/.scafld/specs/drafts/t.md");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, broken("t")).unwrap();
    let before = scafld_tests::tree(&env.work);
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);
    lsp.open(&uri, &broken("t"));
    lsp.diagnostics(&uri, "the example buffer's duplicate", has_duplicate);
    lsp.forget(&uri);
    lsp.notify("textDocument/didClose", json!({"textDocument": {"uri": uri}}));
    lsp.diagnostics(&uri, "the example file's duplicate", has_duplicate);
    let shutdown = lsp.call("shutdown", json!(null));
    assert!(shutdown["result"].is_null(), "{shutdown}");
    assert_eq!(scafld_tests::tree(&env.work), before, "opening a spec wrote into the tree");
    let workspaces = env.scafld(&["daemon", "status", "--json"]).json()["result"]["workspaces"].clone();
    let root = env.work.canonicalize().unwrap().display().to_string();
    assert_eq!(workspaces.as_array().map(|w| w.len()), Some(1), "{workspaces}");
    assert_eq!(workspaces[0]["root"], root.as_str(), "{workspaces}");
}

/// Once saved, a spec shows what `scafld validate` says of the file as written, even when the
/// editor wrote other bytes than its buffer's text (Latin-1 here): the file's change event,
/// come while the buffer was still unsaved, led to a check of the buffer; the save puts the
/// file's problem over it.
#[test]
fn lsp_shows_the_saved_files_problem_after_a_save() {
    let (env, path, mut lsp) = greet_open();
    let uri = uri(&path);
    // An error of the buffer's own, so that each check of it is published (and can be waited for).
    let edited = broken("greet").replace("Prose   with", "Prosé with");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": edited}]}),
    );
    lsp.diagnostics(&uri, "the edited buffer's duplicate", has_duplicate);
    lsp.forget(&uri);
    // What Latin-1 can hold, as Latin-1 (the title's dash is not Latin-1: `?`, as editors do).
    let latin1: Vec<u8> = edited.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')).collect();
    std::fs::write(&path, latin1).unwrap();
    let validate = env.scafld(&["validate", "greet"]);
    validate.assert_code(3);
    assert!(validate.stderr.contains("not valid UTF-8"), "{}", validate.stderr);
    lsp.diagnostics(&uri, "the unsaved buffer checked again on the file's event", has_duplicate);
    lsp.forget(&uri);
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": uri}, "text": edited}));
    let not_utf8 = |d: &[Value]| d.iter().any(|d| d["message"].as_str().unwrap_or_default().contains("UTF-8"));
    let saved = lsp.diagnostics(&uri, "the saved file's problem", not_utf8);
    assert!(!has_duplicate(&saved), "the buffer's list, not the file's: {saved:?}");
}

/// A Scope entry `scafld validate` calls an error (outside the workspace) is an error in the
/// editor too: for the spec when the server starts (what `validate --all` lists), for the
/// buffer as it is typed, and for the file once saved.
#[test]
fn lsp_shows_the_scope_errors_validate_shows() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let outside = spec_text("greet", "draft")
        .replace("- `src/lib.rs` - the code.", "- `src/lib.rs` - the code.\n- `/etc/passwd` - outside.");
    assert_ne!(outside, spec_text("greet", "draft"));
    let path = write_spec(&env, "drafts", "greet", &outside);
    let validated = env.scafld(&["validate", "greet", "--json"]);
    validated.assert_code(3);
    assert!(validated.stdout.contains("is outside the workspace"), "{}", validated.stdout);
    let scope_error = |d: &[Value]| {
        d.iter().any(|d| {
            d["severity"] == 1
                && d["message"].as_str().unwrap_or_default().contains("`/etc/passwd` is outside the workspace")
        })
    };
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);
    lsp.diagnostics(&uri, "the scope error when the server starts", scope_error);
    let clean = spec_text("greet", "draft");
    lsp.open(&uri, &clean);
    lsp.diagnostics(&uri, "the clean buffer's empty list", |d| d.is_empty());
    lsp.forget(&uri);
    // The buffer as typed: broken, then fixed again (the file keeps its error).
    let change = |lsp: &mut Lsp, version: u64, text: &str| {
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
        );
    };
    change(&mut lsp, 2, &outside);
    lsp.diagnostics(&uri, "the scope error of the buffer", scope_error);
    change(&mut lsp, 3, &clean);
    lsp.diagnostics(&uri, "the fixed buffer's empty list", |d| d.is_empty());
    lsp.forget(&uri);
    // Saved, it shows the file as written, which still names `/etc/passwd`.
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": uri}, "text": clean}));
    lsp.diagnostics(&uri, "the scope error of the saved file", scope_error);
}

/// The 0-based line of the first line holding `needle`, as LSP splits lines (`\r\n`, `\n` and
/// a lone `\r` each end one).
fn lsp_line_of(text: &str, needle: &str) -> u64 {
    let lines: Vec<&str> = text.split("\r\n").flat_map(|l| l.split(['\r', '\n'])).collect();
    lines.iter().position(|l| l.contains(needle)).unwrap() as u64
}

/// A stray CR (pasted text) ends a line for the editor but not for scafld: diagnostics, the
/// outline and hover land on the editor's lines, for the buffer and for the file on disk.
#[test]
fn lsp_places_lines_as_the_editor_counts_them_past_a_lone_cr() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let text = broken("greet").replace("Prose   with", "Prose\r  with");
    let path = write_spec(&env, "drafts", "greet", &text);
    let duplicate = lsp_line_of(&text, "`ac2_1` boundary");
    assert_eq!(duplicate, DUPLICATE_LINE + 1, "the CR puts it one line further down");
    let on_duplicate = |d: &[Value]| {
        d.iter().any(|d| d["range"]["start"]["line"] == duplicate && d["range"]["end"]["line"] == duplicate + 1)
    };
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);
    lsp.open(&uri, &text);
    lsp.diagnostics(&uri, "the buffer's duplicate on the editor's line", on_duplicate);

    let symbols = lsp.call("textDocument/documentSymbol", json!({"textDocument": {"uri": uri}}))["result"].clone();
    let phase = &symbols[1];
    assert_eq!(phase["selectionRange"]["start"]["line"], lsp_line_of(&text, "## Phase 2"), "{symbols}");
    assert_eq!(phase["children"][0]["selectionRange"]["start"]["line"], lsp_line_of(&text, "`ac2_1` test"));
    assert_eq!(phase["children"][1]["range"]["end"]["line"], lsp_line_of(&text, "grep -rn DEBUG") + 2, "{symbols}");
    let hover = lsp.call(
        "textDocument/hover",
        json!({"textDocument": {"uri": uri}, "position": {"line": lsp_line_of(&text, "## Phase 2"), "character": 3}}),
    );
    let shown = hover["result"]["contents"]["value"].as_str().unwrap_or_default();
    assert!(shown.contains("**Second** (phase2)"), "{hover}");

    // Closed: the file's diagnostics, on the file's lines.
    lsp.forget(&uri);
    lsp.notify("textDocument/didClose", json!({"textDocument": {"uri": uri}}));
    lsp.diagnostics(&uri, "the file's duplicate on the editor's line", on_duplicate);
}

#[test]
fn lsp_publishes_open_review_findings_on_the_cited_lines_until_resolved() {
    let env = TestEnv::new();
    to_review(&env);
    // The review runs from the editor (scafld.review), with the reviewer the config names.
    let script = reviewer(&env, "fail", &fail(), "");
    write(
        &env,
        ".scafld/config.local.yaml",
        &format!("review:\n  external:\n    provider: command\n    command: {script}\n"),
    );
    let spec = env.scafld(&["status", "rev", "--json"]).json()["result"]["path"].as_str().unwrap().to_string();
    let mut lsp = Lsp::start(&env, &env.work);
    let lib = uri(&env.work.join("src/lib.rs"));
    let id = lsp.request(
        "workspace/executeCommand",
        json!({"command": "scafld.review", "arguments": [uri(&env.work.join(spec))]}),
    );
    let review = lsp.response(id);
    assert_eq!(review["result"]["outcome"], "fail", "{review}");
    assert_eq!(review["result"]["review"]["verdict"], "fail", "{review}");
    let progress = |m: &Value, kind: &str| m["method"] == "$/progress" && m["params"]["value"]["kind"] == kind;
    let begin = lsp.wait_for("review progress begin", |m| progress(m, "begin"));
    assert_eq!(begin["params"]["value"]["title"], "scafld.review rev");
    // The failed review is said where the editor shows it: its progress end, and a message.
    let end = lsp.wait_for("review progress end", |m| progress(m, "end"));
    let ended = end["params"]["value"]["message"].as_str().unwrap_or_default();
    assert!(ended.starts_with("review failed"), "{end}");
    let shown = lsp.wait_for("the failed review shown", |m| m["method"] == "window/showMessage");
    assert_eq!(shown["params"]["type"], 1, "an error: {shown}");
    assert_eq!(shown["params"]["message"], format!("scafld.review rev: {ended}"), "{shown}");

    let findings = lsp.diagnostics(&lib, "the finding on src/lib.rs", |d| !d.is_empty());
    assert_eq!(findings.len(), 1, "{findings:?}");
    let finding = &findings[0];
    assert_eq!(finding["range"]["start"]["line"], 1, "line 2 in the dossier is LSP line 1");
    assert_eq!(finding["severity"], 1);
    assert_eq!(finding["source"], "scafld");
    assert_eq!(finding["code"], "greeting-ignored");
    assert_eq!(finding["message"], "flag value never printed");
    let related = finding["relatedInformation"][0]["location"]["uri"].as_str().unwrap();
    assert!(related.ends_with("/rev.md"), "{related}");
    // An editor started later sees the same finding at once.
    let mut later = Lsp::start(&env, &env.work);
    let at_start = later.diagnostics(&lib, "the finding at start-up", |d| !d.is_empty());
    assert_eq!(at_start, findings);
    drop(later);

    // The repair and a verify review marking it fixed: the finding is cleared.
    write(&env, "src/lib.rs", "pub fn greet() -> &'static str { \"hi\" }\n");
    env.scafld(&["build", "rev"]).assert_code(0);
    let fixed = format!(
        r#"{{"verdict":"pass","mode":"verify","summary":"s","findings":[{{"id":"greeting-ignored","severity":"high","blocks_completion":true,"status":"fixed","summary":"now printed"}}],"attack_log":{ATTACKS},"budget":{{}}}}"#
    );
    command_review(&env, &reviewer(&env, "verify", &fixed, ""), &["--min-attack-angles", "2", "--json"]).assert_code(0);
    lsp.diagnostics(&lib, "the resolved finding cleared", |d| d.is_empty());
}

/// A reviewer may cite any line (the dossier asks only `minimum: 1`): one past LSP's
/// `uinteger` (2^31-1) is still shown, at the last line a position can name, never at one a
/// client refuses.
#[test]
fn lsp_holds_a_finding_on_a_huge_line_within_the_protocols_range() {
    let env = TestEnv::new();
    to_review(&env);
    let far = fail().replace(r#""line":2"#, r#""line":3000000000"#);
    command_review(&env, &reviewer(&env, "far", &far, ""), &["--min-attack-angles", "2"]).assert_code(4);
    let mut lsp = Lsp::start(&env, &env.work);
    let lib = uri(&env.work.join("src/lib.rs"));
    lsp.open(&lib, "pub fn greet() {}\n");
    let findings = lsp.diagnostics(&lib, "the finding on src/lib.rs", |d| !d.is_empty());
    assert_eq!(findings[0]["code"], "greeting-ignored", "{findings:?}");
    let range = &findings[0]["range"];
    let max = json!(i32::MAX);
    assert_eq!((&range["start"]["line"], &range["end"]["line"]), (&max, &max), "{range}");
    assert_eq!((&range["start"]["character"], &range["end"]["character"]), (&json!(0), &json!(0)), "{range}");
}

/// Progress goes out only on a token the editor accepted: one that refuses
/// `window/workDoneProgress/create` gets no `$/progress`, and the command still answers.
#[test]
fn lsp_sends_no_progress_on_a_token_the_editor_refused() {
    let mut env = TestEnv::new();
    env.start_daemon();
    opened(&env, "src/lib.rs", "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs`\n");
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    let spec = uri(&env.work.join(status["path"].as_str().unwrap()));
    let mut lsp = Lsp::start(&env, &env.work);
    lsp.refuse_progress = true;
    let outcome = lsp.call("workspace/executeCommand", json!({"command": "scafld.build", "arguments": [spec]}));
    assert_eq!(outcome["result"]["status"], "review", "{outcome}");
    assert!(lsp.seen.iter().any(|m| m.contains("window/workDoneProgress/create")), "{:#?}", lsp.seen);
    assert!(!lsp.seen.iter().any(|m| m.contains("$/progress")), "{:#?}", lsp.seen);
}

/// A build whose acceptance fails is said to have failed where the editor shows it (Neovim
/// shows no command's result): its progress ends naming the criteria that failed and the
/// task's status, never "done", and a `window/showMessage` error says the same.
#[test]
fn lsp_says_a_build_whose_acceptance_failed_failed() {
    let mut env = TestEnv::new();
    env.start_daemon();
    opened(&env, "src/lib.rs", "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs`\n");
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    let spec = uri(&env.work.join(status["path"].as_str().unwrap()));
    let mut lsp = Lsp::start(&env, &env.work);
    let outcome = lsp.call("workspace/executeCommand", json!({"command": "scafld.build", "arguments": [spec]}));
    assert_eq!(outcome["result"]["status"], "blocked", "{outcome}");
    assert_eq!(outcome["result"]["failed"], 1, "{outcome}");
    let end = lsp.wait_for("progress end", |m| m["method"] == "$/progress" && m["params"]["value"]["kind"] == "end");
    assert_eq!(end["params"]["value"]["message"], "acceptance failed: a1; task blocked", "{end}");
    let shown = lsp.wait_for("the failure shown", |m| m["method"] == "window/showMessage");
    assert_eq!(shown["params"]["type"], 1, "an error: {shown}");
    assert_eq!(shown["params"]["message"], "scafld.build rev: acceptance failed: a1; task blocked", "{shown}");
}

/// A command that fails outright is shown too, not only answered with an error (which an
/// editor such as Neovim does not show): a `window/showMessage` error carries the daemon's
/// message and hint for a build of a draft not approved yet (its progress ends saying it
/// failed) and for the status of a task with no spec, and the server's own refusal of a file
/// that is no spec.
#[test]
fn lsp_shows_a_command_that_fails_outright() {
    let env = TestEnv::new();
    init(&env);
    let draft = uri(&write_spec(&env, "drafts", "greet", &spec_text("greet", "draft")));
    let mut lsp = Lsp::start(&env, &env.work);
    let shown = |lsp: &mut Lsp, command: &str, argument: &str| {
        let refused = lsp.call("workspace/executeCommand", json!({"command": command, "arguments": [argument]}));
        let message = refused["error"]["message"].as_str().unwrap_or_else(|| panic!("{refused}")).to_string();
        let shown = lsp.wait_for("the failure shown", |m| m["method"] == "window/showMessage");
        assert_eq!(shown["params"]["type"], 1, "an error: {shown}");
        (message, shown["params"]["message"].as_str().unwrap().to_string())
    };

    let (message, said) = shown(&mut lsp, "scafld.build", &draft);
    assert!(message.contains("approve") && message.contains("(hint: "), "the daemon's message and hint: {message}");
    assert_eq!(said, format!("scafld.build greet: failed: {message}"));
    let end = lsp.wait_for("progress end", |m| m["method"] == "$/progress" && m["params"]["value"]["kind"] == "end");
    assert_eq!(end["params"]["value"]["message"], format!("failed: {message}"), "{end}");

    let missing = draft.replace("/greet.md", "/nope.md");
    let (message, said) = shown(&mut lsp, "scafld.status", &missing);
    assert!(message.contains("no spec for task `nope`") && message.contains("(hint: "), "{message}");
    assert_eq!(said, format!("scafld.status nope: failed: {message}"));

    let readme = uri(&env.work.join("README.md"));
    let (message, said) = shown(&mut lsp, "scafld.review", &readme);
    assert_eq!(message, format!("{readme} is not a scafld spec"));
    assert_eq!(said, message);
}

#[test]
fn lsp_hover_symbols_and_commands_speak_for_the_daemon() {
    let mut env = TestEnv::new();
    env.start_daemon();
    let phase = "- [ ] `a1` test - greet is defined\n  - Command: `grep -q greet src/lib.rs`\n";
    opened(&env, "src/lib.rs", phase);
    write(&env, "src/lib.rs", "pub fn greet() {}\n");
    let status = env.scafld(&["status", "rev", "--json"]).json()["result"].clone();
    let path = env.work.join(status["path"].as_str().unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() as u64;
    let (phase_line, criterion_line) = (line_of("## Phase 1: Do"), line_of("`a1`"));
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);
    lsp.open(&uri, &text);
    lsp.diagnostics(&uri, "the open spec's diagnostics", |_| true);

    // Outline: the phase with its criterion, at their lines.
    let symbols = lsp.call("textDocument/documentSymbol", json!({"textDocument": {"uri": uri}}))["result"].clone();
    assert_eq!(symbols[0]["name"], "Phase 1: Do", "{symbols}");
    assert_eq!(symbols[0]["selectionRange"]["start"]["line"], phase_line);
    assert_eq!(symbols[0]["children"][0]["name"], "a1");
    assert_eq!(symbols[0]["children"][0]["selectionRange"]["start"]["line"], criterion_line);

    let hover = |lsp: &mut Lsp, line: u64| {
        let reply = lsp.call(
            "textDocument/hover",
            json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": 3}}),
        );
        reply["result"]["contents"]["value"].as_str().unwrap_or_default().to_string()
    };
    let before = hover(&mut lsp, criterion_line);
    assert!(before.contains("status: **pending**") && before.contains("no evidence yet"), "{before}");
    assert!(before.contains("command: `grep -q greet src/lib.rs`") && before.contains("expected: exit_code_zero"));

    // scafld.build through the editor: progress begins and ends, the outcome is the answer.
    let id = lsp.request("workspace/executeCommand", json!({"command": "scafld.build", "arguments": [uri]}));
    let outcome = lsp.response(id);
    assert_eq!(outcome["result"]["status"], "review", "{outcome}");
    assert_eq!(outcome["result"]["criteria"][0]["status"], "pass", "{outcome}");
    let kind = |m: &Value| m["method"] == "$/progress" && m["params"]["token"].is_string();
    let begin = lsp.wait_for("progress begin", |m| kind(m) && m["params"]["value"]["kind"] == "begin");
    assert_eq!(begin["params"]["value"]["title"], "scafld.build rev");
    lsp.wait_for("progress end", |m| kind(m) && m["params"]["value"]["kind"] == "end");

    // Hover now tells the run: exit code, duration, current evidence; the phase its progress.
    let after = hover(&mut lsp, criterion_line + 1);
    assert!(after.contains("status: **pass** (evidence current)"), "{after}");
    assert!(after.contains("last run: exit code 0, ") && after.contains(" ms"), "{after}");
    let heading = hover(&mut lsp, phase_line);
    assert!(heading.contains("1/1 criteria passed"), "{heading}");

    let status = lsp.call("workspace/executeCommand", json!({"command": "scafld.status", "arguments": [uri]}));
    assert_eq!(status["result"]["status"], "review", "{status}");
    let handoff = lsp.call("workspace/executeCommand", json!({"command": "scafld.handoff", "arguments": [uri]}));
    assert!(handoff["result"]["markdown"].as_str().unwrap().contains("rev"), "{handoff}");
    let lenses = lsp.call("textDocument/codeLens", json!({"textDocument": {"uri": uri}}));
    let commands: Vec<&str> =
        lenses["result"].as_array().unwrap().iter().map(|l| l["command"]["command"].as_str().unwrap()).collect();
    assert_eq!(commands, ["scafld.build", "scafld.review", "scafld.status", "scafld.handoff"]);

    // A daemon refusal is an LSP error carrying the daemon's message.
    let missing = uri.replace("/rev.md", "/nope.md");
    let refused = lsp.call("workspace/executeCommand", json!({"command": "scafld.status", "arguments": [missing]}));
    assert_eq!(refused["error"]["code"], -32803, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("no spec for task `nope`"), "{refused}");
    let unknown = lsp.call("workspace/executeCommand", json!({"command": "scafld.nope", "arguments": [uri]}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

#[test]
fn lsp_reconnects_after_a_daemon_restart_and_republishes() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &broken("greet"));
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);
    lsp.open(&uri, &broken("greet"));
    lsp.diagnostics(&uri, "the duplicate id", has_duplicate);

    let mut daemon = env.take_daemon();
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    lsp.wait_for("the lost daemon logged", |m| {
        m["method"] == "window/logMessage"
            && m["params"]["message"].as_str().unwrap_or_default().contains("lost the daemon")
    });
    // Only what the server says from now on counts.
    lsp.backlog.clear();
    // The server may start the daemon again itself meanwhile, for a request of its own (it
    // "starts the daemon when none answers"): a client's start joins whichever answers, where
    // a bare scafldd losing that race exits as a second daemon.
    env.scafld(&["daemon", "start"]).assert_code(0);
    lsp.diagnostics(&uri, "the buffer's diagnostics republished", has_duplicate);
    // Events flow again from the new daemon: the file fixed on disk, a new broken spec.
    std::fs::write(&path, spec_text("greet", "draft")).unwrap();
    lsp.diagnostics(&uri, "the file's empty list", |d| d.is_empty());
    let other = write_spec(&env, "drafts", "other", &broken("other"));
    lsp.diagnostics(&crate::lsp::uri(&other), "the new spec's diagnostics", has_duplicate);
}

/// A spec no buffer holds, shown clean, then broken on disk while no daemon runs (no event can
/// say so): after the restart its list is the file's as it is now, never the old clean one.
#[test]
fn lsp_checks_again_after_a_restart_a_spec_edited_while_no_daemon_ran() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);
    lsp.open(&uri, &spec_text("greet", "draft"));
    lsp.diagnostics(&uri, "the open buffer's empty list", |d| d.is_empty());
    // Shown by its events alone: broken, then mended (its list emptied).
    let other = write_spec(&env, "drafts", "other", &broken("other"));
    let other_uri = crate::lsp::uri(&other);
    lsp.diagnostics(&other_uri, "the other spec's duplicate id", has_duplicate);
    std::fs::write(&other, spec_text("other", "draft")).unwrap();
    lsp.diagnostics(&other_uri, "the other spec's empty list", |d| d.is_empty());

    let mut daemon = env.take_daemon();
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    lsp.logged(2, "lost the daemon");
    std::fs::write(&other, broken("other")).unwrap();
    lsp.backlog.clear();
    env.start_daemon();
    let first = lsp.diagnostics(&other_uri, "the other spec's first list after the restart", |_| true);
    assert!(has_duplicate(&first), "the file as it is now, not the clean list of before: {first:?}");
}

/// Specs broken where the server never looked: written before it started (the daemon indexed
/// them, no event said so) or while no daemon ran (nothing could). Each is published when the
/// server starts, and one broken while the daemon was down when it is back, no buffer open.
#[test]
fn lsp_publishes_every_broken_spec_when_it_starts_and_after_a_restart() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let indexed = write_spec(&env, "drafts", "indexed", &broken("indexed"));
    env.scafld(&["validate", "indexed"]).assert_code(3);
    let mut daemon = env.take_daemon();
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    // Bad front matter, written with no daemon to see it.
    let unseen = write_spec(&env, "drafts", "unseen", "---\nstatus: [draft\n---\n# Unseen\n");
    write_spec(&env, "drafts", "clean", &spec_text("clean", "draft"));
    env.start_daemon();
    // Autostart allowed, as an editor starts it: the server's own reads never start a daemon.
    // Had it started one while the test's was down, that daemon would have watched `later`
    // being broken and announced it, and would answer instead of the test's restarted one:
    // both are checked below.
    let mut lsp = Lsp::start_with(&env, &env.work, &env.work, &[]);
    lsp.diagnostics(&uri(&indexed), "the spec broken before the server started", has_duplicate);
    let errors = |d: &[Value]| d.iter().any(|d| d["severity"] == 1 && d["source"] == "scafld");
    lsp.diagnostics(&uri(&unseen), "the spec broken while no daemon ran", errors);

    let mut daemon = env.take_daemon();
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    lsp.logged(2, "lost the daemon");
    let later = write_spec(&env, "drafts", "later", &broken("later"));
    lsp.backlog.clear();
    assert!(scafld_tests::RawClient::connect(&env.socket).is_err(), "a daemon answers while the test's is down");
    let pid = env.start_daemon();
    assert_eq!(env.client().result("daemon.status", json!({}))["pid"], pid, "the test's daemon answers");
    lsp.diagnostics(&uri(&later), "the spec broken while the daemon was down", has_duplicate);
    assert!(!lsp.seen.iter().any(|m| m.contains("started the daemon")), "{:#?}", lsp.seen);
    // A clean spec nothing ever showed gets no list: nothing to clear.
    let clean = uri(&env.work.join(".scafld/specs/drafts/clean.md"));
    assert!(!lsp.seen.iter().any(|m| m.contains(&clean)), "{:#?}", lsp.seen);
}

/// A workspace the server first meets in a spec the editor opens (started outside it, with
/// another folder as its root): that spec's buffer is checked, and the workspace's other broken
/// specs are published as they would have been had it started there.
#[test]
fn lsp_publishes_the_broken_specs_of_a_workspace_first_met_in_an_opened_spec() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let other = write_spec(&env, "drafts", "other", &broken("other"));
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    let home = env.path("home");
    let mut lsp = Lsp::start_with(&env, &home, &home, &[]);
    let uri = uri(&path);
    lsp.open(&uri, &spec_text("greet", "draft"));
    lsp.diagnostics(&uri, "the open buffer's empty list", |d| d.is_empty());
    lsp.diagnostics(&crate::lsp::uri(&other), "the other spec's duplicate id", has_duplicate);
}

/// A daemon that crashes while the server reads what it announced: a script on `env`'s socket
/// (each connection answered in turn: the hello, the subscription, then a `task_changed` for
/// `greet`; a workspace-wide read refused, so that nothing else is read) that, once the server
/// asks to check `greet`, removes its socket and hangs up every connection. The server's read
/// fails and its retry finds no daemon: it starts none of its own accord, as README says of
/// a daemon stopped or crashed; the editor's next request does.
#[test]
fn lsp_starts_no_daemon_when_one_dies_under_a_read_of_its_own() {
    use std::io::Write;
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::sync::{Arc, Mutex};

    let env = TestEnv::new();
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    let listener = UnixListener::bind(&env.socket).unwrap();
    let socket = env.socket.clone();
    let root = env.work.canonicalize().unwrap().display().to_string();
    let open: Arc<Mutex<Vec<UnixStream>>> = Arc::default();
    let crash = {
        let (socket, open) = (socket.clone(), open.clone());
        move || {
            let _ = std::fs::remove_file(&socket);
            for stream in open.lock().unwrap().drain(..) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    };
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            if !socket.exists() {
                return;
            }
            open.lock().unwrap().push(stream.try_clone().unwrap());
            let (root, crash) = (root.clone(), crash.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    let request: Value = serde_json::from_str(&line).unwrap();
                    line.clear();
                    let (id, method) = (request["id"].clone(), request["method"].as_str().unwrap_or_default());
                    let mut replies = Vec::new();
                    match method {
                        "daemon.hello" => replies.push(json!({"jsonrpc": "2.0", "id": id, "result": {
                            "protocol_version": scafld_protocol::PROTOCOL_VERSION, "daemon_version": "script", "pid": 1,
                            "executable": scafld_tests::scafldd_identity()}})),
                        "events.subscribe" => {
                            replies.push(json!({"jsonrpc": "2.0", "id": id, "result": 7}));
                            replies.push(
                                json!({"jsonrpc": "2.0", "method": "events.event", "params": {"subscription": 7,
                                "result": {"kind": "task_changed", "workspace_id": "w", "root": root,
                                    "task_id": "greet", "status": "draft", "cause": "hand_edit"}}}),
                            );
                        }
                        "task.check" => return crash(),
                        _ => replies.push(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000,
                            "message": "not here", "data": {"kind": "not_found", "message": "not here"}}})),
                    }
                    for reply in replies {
                        if (&stream).write_all(format!("{reply}\n").as_bytes()).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let mut lsp = Lsp::start(&env, &env.work);
    // The failed read is reported once its retry found no daemon (a daemon it started would
    // have been started before then).
    lsp.logged(2, "read task greet");
    assert!(!env.socket.exists(), "a daemon was started at {}", env.socket.display());
    assert!(!lsp.seen.iter().any(|m| m.contains("started the daemon")), "{:#?}", lsp.seen);
    // A request of the editor's that needs the daemon starts one.
    lsp.call("textDocument/documentSymbol", json!({"textDocument": {"uri": uri(&path)}}));
    lsp.logged(3, "started the daemon");
}

/// A stopped (SIGSTOP) process, continued when dropped: a hung daemon, even if the test fails.
struct Stopped(nix::unistd::Pid);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        let raw = pid;
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        // A stop reaches each thread on its own: wait until every one of them is stopped.
        let all_stopped = || {
            std::fs::read_dir(format!("/proc/{raw}/task")).is_ok_and(|tasks| {
                tasks.flatten().all(|t| {
                    std::fs::read_to_string(t.path().join("stat"))
                        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')))
                })
            })
        };
        scafld_tests::wait_until("the daemon's threads to stop", all_stopped);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

#[test]
fn lsp_fails_a_request_to_a_hung_daemon_in_bounded_time_and_recovers() {
    let mut env = TestEnv::new();
    let daemon = env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);
    lsp.open(&uri, &spec_text("greet", "draft"));
    lsp.diagnostics(&uri, "the open spec's (empty) list", |d| d.is_empty());
    let symbols = json!({"textDocument": {"uri": uri}});

    let hung = Stopped::new(daemon);
    // The daemon accepts but never answers: an LSP error (not a frozen server) ...
    let failed = lsp.call("textDocument/documentSymbol", symbols.clone());
    assert_eq!(failed["error"]["code"], -32803, "{failed}");
    assert!(failed["error"]["message"].as_str().unwrap().contains("not responding"), "{failed}");
    // ... and the next request, over a new connection, too (the handshake is bounded as well).
    let again = lsp.call("textDocument/documentSymbol", symbols.clone());
    assert_eq!(again["error"]["code"], -32803, "{again}");
    assert!(again["error"]["message"].as_str().unwrap().contains("not responding"), "{again}");
    drop(hung);
    let answered = lsp.call("textDocument/documentSymbol", symbols);
    assert_eq!(answered["result"][0]["name"], "Phase 1: First", "{answered}");
}

/// A buffer's check that a hung daemon did not answer (as typed, or as saved) is made again
/// once the daemon answers, with nothing more from the editor: the hang never leaves a stale
/// list shown (a hung daemon keeps its events' subscription, so no reconnection says it).
#[test]
fn lsp_checks_again_what_a_hung_daemon_did_not_answer_once_it_answers() {
    let mut env = TestEnv::new();
    let daemon = env.start_daemon();
    init(&env);
    // Broken on disk: the buffer shows that once saved.
    let path = write_spec(&env, "drafts", "greet", &broken("greet"));
    let mut lsp = Lsp::start(&env, &env.work);
    let uri = uri(&path);
    let change = |lsp: &mut Lsp, version: u64, text: &str| {
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
        );
    };
    lsp.open(&uri, &broken("greet"));
    lsp.diagnostics(&uri, "the open spec's duplicate", has_duplicate);

    // Typed: the check of the broken text times out, and is made once the daemon answers.
    change(&mut lsp, 2, &spec_text("greet", "draft"));
    lsp.diagnostics(&uri, "the clean buffer's empty list", |d| d.is_empty());
    let hung = Stopped::new(daemon);
    change(&mut lsp, 3, &broken("greet"));
    assert!(lsp.logged(2, "cannot check").contains("not responding"));
    lsp.forget(&uri);
    drop(hung);
    lsp.diagnostics(&uri, "the typed duplicate, once the daemon answers", has_duplicate);

    // Saved: the file's list replaces the clean buffer's once the daemon answers.
    change(&mut lsp, 4, &spec_text("greet", "draft"));
    lsp.diagnostics(&uri, "the clean buffer's empty list", |d| d.is_empty());
    let hung = Stopped::new(daemon);
    lsp.notify("textDocument/didSave", json!({"textDocument": {"uri": uri}, "text": broken("greet")}));
    assert!(lsp.logged(2, "cannot validate").contains("not responding"));
    lsp.forget(&uri);
    drop(hung);
    lsp.diagnostics(&uri, "the saved file's duplicate, once the daemon answers", has_duplicate);
}

#[test]
fn lsp_follows_a_spec_opened_through_a_linked_path_with_a_space_and_non_ascii() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    std::os::unix::fs::symlink(&env.work, env.dir.path().join("my wörk")).unwrap();
    // The editor names the workspace by its real path but opens the spec through the link.
    let mut lsp = Lsp::start(&env, &env.work);
    let linked = format!("{}/my%20w%C3%B6rk/.scafld/specs/drafts/greet.md", uri(env.dir.path()));

    // A Markdown file outside .scafld/specs is no spec: nothing is published for it.
    write(&env, "notes.md", "# notes\n");
    let notes = uri(&env.work.join("notes.md"));
    lsp.open(&notes, "# notes\n");
    lsp.open(&linked, &spec_text("greet", "draft"));
    lsp.diagnostics(&linked, "the linked buffer's (empty) list", |d| d.is_empty());
    assert!(!lsp.backlog.iter().any(|m| m["params"]["uri"] == notes), "{:#?}", lsp.backlog);

    // The file changes on disk: republished on the URI the editor opened, not the real path.
    lsp.forget(&linked);
    std::fs::write(&path, broken("greet")).unwrap();
    lsp.diagnostics(&linked, "the file's diagnostics on the linked URI", has_duplicate);
    lsp.forget(&linked);
    std::fs::write(&path, spec_text("greet", "draft")).unwrap();
    lsp.diagnostics(&linked, "the fixed file's empty list", |d| d.is_empty());

    // The buffer breaks (with an error the file never had, so that only the buffer's own check
    // answers the wait), then closes unsaved: the file's (empty) list replaces the buffer's.
    let buffer = format!("{}\n## Notes\n\n```\n", broken("greet"));
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": linked, "version": 2}, "contentChanges": [{"text": buffer}]}),
    );
    let unclosed = |d: &[Value]| d.iter().any(|d| d["message"].as_str().unwrap_or_default().contains("never closed"));
    lsp.diagnostics(&linked, "the buffer's diagnostics", |d| has_duplicate(d) && unclosed(d));
    lsp.forget(&linked);
    lsp.notify("textDocument/didClose", json!({"textDocument": {"uri": linked}}));
    lsp.diagnostics(&linked, "the closed buffer back to the file's list", |d| d.is_empty());
    assert!(!lsp.backlog.iter().any(|m| m["params"]["uri"] == uri(&path)), "published under the real path too");

    // Protocol edges: a cancellation of nothing is ignored, an unknown request is
    // MethodNotFound, a path climbing out of .scafld/specs is no spec.
    lsp.notify("$/cancelRequest", json!({"id": 999}));
    let unknown = lsp.call(
        "textDocument/definition",
        json!({"textDocument": {"uri": linked}, "position": {"line": 0, "character": 0}}),
    );
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let outside = format!("{}/.scafld/specs/../../src/greet.md", uri(&env.work));
    let refused = lsp.call("workspace/executeCommand", json!({"command": "scafld.status", "arguments": [outside]}));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

/// Diagnostics go out under the URI exactly as the editor spelt it in didOpen (lower-case
/// escapes, an escaped `:`), also when the file changes on disk and they are republished,
/// never under scafld's own spelling of the same file's URI.
#[test]
fn lsp_publishes_under_the_editors_own_spelling_of_a_uri() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    std::os::unix::fs::symlink(&env.work, env.dir.path().join("wö:rk")).unwrap();
    let mut lsp = Lsp::start(&env, &env.work);
    let spelt = format!("{}/w%c3%b6%3ark/.scafld/specs/drafts/greet.md", uri(env.dir.path()));
    let ours = format!("{}/w%C3%B6:rk/.scafld/specs/drafts/greet.md", uri(env.dir.path()));

    lsp.open(&spelt, &spec_text("greet", "draft"));
    lsp.diagnostics(&spelt, "the buffer's (empty) list", |d| d.is_empty());
    lsp.forget(&spelt);
    std::fs::write(&path, broken("greet")).unwrap();
    lsp.diagnostics(&spelt, "the file's diagnostics on the editor's URI", has_duplicate);
    lsp.forget(&spelt);
    std::fs::write(&path, spec_text("greet", "draft")).unwrap();
    lsp.diagnostics(&spelt, "the fixed file's empty list", |d| d.is_empty());
    let published: Vec<&Value> =
        lsp.backlog.iter().filter(|m| m["method"] == "textDocument/publishDiagnostics").collect();
    assert!(
        !published.iter().any(|m| m["params"]["uri"] == ours.as_str()),
        "published under our spelling: {published:#?}"
    );
}

/// The same spec open through two paths (the workspace and a link to it) is two buffers, each
/// with its own text: checking one never clears or replaces the other's diagnostics.
#[test]
fn lsp_keeps_each_buffer_of_one_spec_its_own_diagnostics() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    std::os::unix::fs::symlink(&env.work, env.dir.path().join("link")).unwrap();
    let mut lsp = Lsp::start(&env, &env.work);
    let real = uri(&path);
    let linked = format!("{}/link/.scafld/specs/drafts/greet.md", uri(env.dir.path()));
    lsp.open(&real, &spec_text("greet", "draft"));
    lsp.diagnostics(&real, "the real buffer's (empty) list", |d| d.is_empty());
    lsp.open(&linked, &spec_text("greet", "draft"));
    lsp.diagnostics(&linked, "the linked buffer's (empty) list", |d| d.is_empty());
    let change = |uri: &str, version: u64, text: String| json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]});
    lsp.notify("textDocument/didChange", change(&real, 2, broken("greet")));
    lsp.diagnostics(&real, "the real buffer's duplicate", has_duplicate);
    lsp.notify("textDocument/didChange", change(&linked, 2, spec_text("greet", "draft") + "\n"));
    lsp.diagnostics(&linked, "the edited linked buffer's (empty) list", |d| d.is_empty());
    // Published before the linked buffer's list, had it been cleared.
    let cleared = lsp.backlog.iter().any(|m| {
        m["method"] == "textDocument/publishDiagnostics"
            && m["params"]["uri"] == real
            && !has_duplicate(m["params"]["diagnostics"].as_array().unwrap())
    });
    assert!(!cleared, "the real buffer's error was cleared: {:#?}", lsp.backlog);
}

/// A daemon, a workspace with the draft `greet`, and a server with it open and checked.
fn greet_open() -> (TestEnv, std::path::PathBuf, Lsp) {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    let mut lsp = Lsp::start(&env, &env.work);
    lsp.open(&uri(&path), &spec_text("greet", "draft"));
    lsp.diagnostics(&uri(&path), "the open spec's (empty) list", |d| d.is_empty());
    (env, path, lsp)
}

/// Child processes of `pid` (from /proc).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|c| c.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

#[test]
fn lsp_exits_cleanly_on_shutdown_and_exit_and_when_stdin_closes() {
    let (env, path, mut lsp) = greet_open();
    assert_eq!(children(lsp.child.id()), Vec::<u32>::new(), "the server started a process");
    let shutdown = lsp.call("shutdown", json!(null));
    assert!(shutdown.get("error").is_none() && shutdown["result"].is_null(), "{shutdown}");
    let after = lsp.call("textDocument/codeLens", json!({"textDocument": {"uri": uri(&path)}}));
    assert_eq!(after["error"]["code"], -32600, "requests after shutdown are refused: {after}");
    lsp.notify("exit", json!(null));
    assert_eq!(lsp.exit_code(), 0);

    // The editor just goes away: stdin closes and the server exits.
    let mut lsp = Lsp::start(&env, &env.work);
    let pid = lsp.child.id();
    lsp.stdin.take();
    assert_eq!(lsp.exit_code(), 0);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());

    // `exit` without `shutdown`: exit code 1, as the protocol says.
    let mut lsp = Lsp::start(&env, &env.work);
    lsp.notify("exit", json!(null));
    assert_eq!(lsp.exit_code(), 1);
}

/// A body that is not JSON, or not a JSON-RPC message, is answered as JSON-RPC says (-32700
/// with id null, -32600) and logged, and the server goes on serving; a stream it can no longer
/// split into messages (a header that is not `Name: value`) ends it with exit status 1 and
/// the reason on stderr and in the editor's log.
#[test]
fn lsp_answers_a_malformed_message_and_exits_non_zero_on_a_broken_frame() {
    let (env, path, mut lsp) = greet_open();

    let truncated = br#"{"jsonrpc": "2.0", "id": 99, "method": "textDocument/hover", "params": {"#;
    lsp.send_raw(&[format!("Content-Length: {}\r\n\r\n", truncated.len()).as_bytes(), truncated].concat());
    let parse_error = lsp.wait_for("the parse error", |m| m["error"]["code"] == -32700);
    assert_eq!(parse_error["id"], Value::Null, "{parse_error}");
    assert!(lsp.logged(1, "Parse error").contains("not JSON"));
    let not_a_message = br#"{"jsonrpc": "2.0", "id": 7, "method": 5}"#;
    lsp.send_raw(&[format!("Content-Length: {}\r\n\r\n", not_a_message.len()).as_bytes(), not_a_message].concat());
    let invalid = lsp.response(7);
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    // Still serving: a request after them is answered, a change still checked.
    let lenses = lsp.call("textDocument/codeLens", json!({"textDocument": {"uri": uri(&path)}}));
    assert!(lenses["result"].as_array().is_some_and(|l| !l.is_empty()), "{lenses}");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri(&path), "version": 2}, "contentChanges": [{"text": broken("greet")}]}),
    );
    lsp.diagnostics(&uri(&path), "the broken buffer's diagnostics", has_duplicate);

    lsp.send_raw(b"garbage\r\n\r\n{}");
    assert!(lsp.logged(1, "cannot read the editor's messages any more").contains("not `Name: value`"));
    assert_eq!(lsp.exit_code(), 1);
    let stderr = std::fs::read_to_string(env.path("lsp.stderr")).unwrap();
    assert!(stderr.contains("cannot read the editor's messages any more: a header line"), "{stderr}");
}

/// Two `Content-Length` headers on one frame (differing, or even the same) leave which one
/// delimits the body a guess: the server ends with exit status 1 and says why, as for any frame
/// it cannot delimit, never reading the body by the last one.
#[test]
fn lsp_exits_non_zero_on_a_frame_with_two_content_lengths() {
    let (env, _path, mut lsp) = greet_open();
    let body = br#"{"jsonrpc": "2.0", "id": 2, "method": "shutdown"}"#;
    lsp.send_raw(&[format!("Content-Length: {}\r\nContent-Length: 2\r\n\r\n", body.len()).as_bytes(), body].concat());
    let logged = lsp.logged(1, "cannot read the editor's messages any more");
    assert!(logged.contains("more than one Content-Length header"), "{logged}");
    assert_eq!(lsp.exit_code(), 1);
    let stderr = std::fs::read_to_string(env.path("lsp.stderr")).unwrap();
    assert!(stderr.contains("more than one Content-Length header"), "{stderr}");
}

/// The handshake's order is said plainly: a request before `initialize` gets -32002 naming its
/// method (never its params), a second `initialize` -32600 "already initialized"; the server
/// serves on.
#[test]
fn lsp_refuses_requests_out_of_the_handshakes_order_plainly() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    let mut lsp = Lsp::spawn(&env, &env.work, &[]);
    let early = lsp
        .call("textDocument/documentSymbol", json!({"textDocument": {"uri": uri(&path)}, "secret": "x".repeat(2000)}));
    assert_eq!(early["error"]["code"], -32002, "{early}");
    assert_eq!(
        early["error"]["message"], "server not initialized: textDocument/documentSymbol came before initialize",
        "{early}"
    );
    lsp.initialize(&env.work);
    let again = lsp.call("initialize", json!({"processId": null, "rootUri": uri(&env.work), "capabilities": {}}));
    assert_eq!(again["error"]["code"], -32600, "{again}");
    assert!(again["error"]["message"].as_str().unwrap().starts_with("already initialized"), "{again}");
    let lenses = lsp.call("textDocument/codeLens", json!({"textDocument": {"uri": uri(&path)}}));
    assert!(lenses["result"].as_array().is_some_and(|l| !l.is_empty()), "{lenses}");
}

/// An editor that gives up right after `initialize` (`shutdown` before `initialized`) has its
/// shutdown answered and the `exit` after it is a clean one (status 0).
#[test]
fn lsp_shut_down_before_initialized_exits_cleanly() {
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let mut lsp = Lsp::spawn(&env, &env.work, &[]);
    let id = lsp.request("initialize", json!({"processId": null, "rootUri": uri(&env.work), "capabilities": {}}));
    assert!(lsp.response(id)["result"]["capabilities"].is_object());
    let shutdown = lsp.call("shutdown", json!(null));
    assert!(shutdown.get("error").is_none() && shutdown["result"].is_null(), "{shutdown}");
    lsp.notify("exit", json!(null));
    assert_eq!(lsp.exit_code(), 0);
}

/// An editor that runs the server on every Markdown file (Helix, as README sets it up) gets
/// nothing, never an error, for one that is no spec: hover `null`, no symbols, no lenses.
#[test]
fn lsp_answers_nothing_for_a_markdown_file_that_is_no_spec() {
    let (env, _path, mut lsp) = greet_open();
    std::fs::write(env.work.join("README.md"), "# readme\n").unwrap();
    let readme = uri(&env.work.join("README.md"));
    lsp.open(&readme, "# readme\n");
    let hover = lsp
        .call("textDocument/hover", json!({"textDocument": {"uri": readme}, "position": {"line": 0, "character": 2}}));
    assert!(hover.get("error").is_none() && hover["result"].is_null(), "{hover}");
    for method in ["textDocument/documentSymbol", "textDocument/codeLens"] {
        let answer = lsp.call(method, json!({"textDocument": {"uri": readme}}));
        assert_eq!(answer["result"], json!([]), "{method}: {answer}");
    }
}

/// A request whose params do not fit its method is refused with -32602 and a sentence an
/// editor can show, never Rust's debug text of serde's error; the server goes on serving.
#[test]
fn lsp_refuses_invalid_params_with_a_plain_sentence() {
    let (_env, path, mut lsp) = greet_open();
    for (method, params, message) in [
        ("textDocument/hover", json!({}), "invalid params for textDocument/hover: missing field `textDocument`"),
        (
            "textDocument/codeLens",
            json!({"textDocument": {"uri": 5}}),
            "invalid params for textDocument/codeLens: invalid type: integer `5`, expected a string",
        ),
    ] {
        let refused = lsp.call(method, params);
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        assert_eq!(refused["error"]["message"], message, "{refused}");
    }
    let lenses = lsp.call("textDocument/codeLens", json!({"textDocument": {"uri": uri(&path)}}));
    assert!(lenses["result"].as_array().is_some_and(|l| !l.is_empty()), "{lenses}");
}

/// A request LSP cannot answer by its id (an object, an array, a number with a fraction), one
/// that does not say `"jsonrpc": "2.0"`, or a batch of them is an Invalid Request (-32600; id null when the id is
/// what is wrong), logged, and never acted on or dropped as a notification; integer and string
/// ids are served, and so is everything after the refusals.
#[test]
fn lsp_refuses_a_request_with_an_invalid_id_or_no_jsonrpc_version_and_goes_on() {
    let (_env, path, mut lsp) = greet_open(); // the daemon and workspace live to the end
    let lens = json!({"textDocument": {"uri": uri(&path)}});
    let frame = |body: &Value| {
        let body = body.to_string();
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    };
    // `shutdown` with an object id: read as a notification, it would be ignored; acted on, the
    // code lens request below would be refused as after a shutdown.
    let invalid_ids = [
        json!({"jsonrpc": "2.0", "id": {"n": 1}, "method": "shutdown"}),
        json!({"jsonrpc": "2.0", "id": [5], "method": "textDocument/codeLens", "params": lens}),
        json!({"jsonrpc": "2.0", "id": 1.5, "method": "textDocument/codeLens", "params": lens}),
    ];
    for body in &invalid_ids {
        lsp.send_raw(&frame(body));
        let refused = lsp.wait_for(&format!("the refusal of {body}"), |m| m.get("error").is_some());
        assert_eq!(
            (refused["id"].clone(), refused["error"]["code"].clone()),
            (Value::Null, json!(-32600)),
            "{body}: {refused}"
        );
        let said = refused["error"]["message"].as_str().unwrap();
        assert!(said.contains("neither an integer nor a string"), "{body}: {said}");
        assert!(lsp.logged(1, "refused a message").contains("neither an integer nor a string"));
    }
    // No version: refused by its (valid) id, where it was served before.
    lsp.send_raw(&frame(&json!({"id": 41, "method": "textDocument/codeLens", "params": lens})));
    let unversioned = lsp.response(41);
    assert_eq!(unversioned["error"]["code"], -32600, "{unversioned}");
    assert!(unversioned["error"]["message"].as_str().unwrap().contains(r#"no "jsonrpc": "2.0""#), "{unversioned}");
    lsp.send_raw(&frame(&json!({"jsonrpc": "1.0", "id": "old", "method": "textDocument/codeLens", "params": lens})));
    let old = lsp.wait_for("the refusal of version 1.0", |m| m["id"] == "old");
    assert_eq!(old["error"]["code"], -32600, "{old}");
    // A batch (an array of messages), which LSP does not have: refused as a batch, not as its
    // first message's "jsonrpc" member, and none of it acted on (the shutdown least of all).
    lsp.send_raw(&frame(&json!([{"jsonrpc": "2.0", "id": 9, "method": "shutdown"}])));
    let batch = lsp.wait_for("the refusal of a batch", |m| m.get("error").is_some() && m["id"].is_null());
    assert_eq!(batch["error"]["code"], -32600, "{batch}");
    let said = batch["error"]["message"].as_str().unwrap();
    assert!(said.contains("a JSON-RPC batch") && said.contains("LSP does not support"), "{said}");
    assert!(!said.contains("\"jsonrpc\" is"), "{said}");

    // Still serving, by a string id and an integer one; no shutdown happened.
    lsp.send_raw(&frame(&json!({"jsonrpc": "2.0", "id": "s-1", "method": "textDocument/codeLens", "params": lens})));
    let by_string = lsp.wait_for("the answer to id s-1", |m| m["id"] == "s-1");
    assert!(by_string["result"].as_array().is_some_and(|l| !l.is_empty()), "{by_string}");
    let by_integer = lsp.call("textDocument/codeLens", lens);
    assert!(by_integer["result"].as_array().is_some_and(|l| !l.is_empty()), "{by_integer}");
    let extra = lsp.backlog.iter().filter(|m| m.get("error").is_some()).collect::<Vec<_>>();
    assert!(extra.is_empty(), "one refusal per message: {extra:?}");
}

/// A buffer under the size limit whose JSON escaping (every `"` doubled) makes a request
/// longer than the daemon reads gets the documented size message, never the daemon's
/// discarded-line error; hover on it fails with the same words.
#[test]
fn lsp_reports_a_buffer_too_long_as_json_with_its_size() {
    let (_env, path, mut lsp) = greet_open(); // the daemon and workspace live to the end
    let quoted = spec_text("greet", "draft") + &"\"".repeat(6 << 20);
    assert!(quoted.len() < scafld_protocol::methods::MAX_CHECK_TEXT_BYTES);
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri(&path), "version": 2}, "contentChanges": [{"text": quoted}]}),
    );
    let shown = lsp.diagnostics(&uri(&path), "the size message", |d| !d.is_empty());
    let message = shown[0]["message"].as_str().unwrap();
    assert!(message.contains("as JSON") && message.contains("fits in 10485760 bytes"), "{message}");
    let hover = lsp.call(
        "textDocument/hover",
        json!({"textDocument": {"uri": uri(&path)}, "position": {"line": 0, "character": 0}}),
    );
    assert!(hover["error"]["message"].as_str().is_some_and(|m| m.contains("as JSON")), "{hover}");
}

/// Routine notes are the editor's log, not stderr (Neovim 0.7 logs every stderr line as an
/// error): the daemon the server started (info), the daemon lost (warning).
#[test]
fn lsp_logs_routine_notes_to_the_editor_not_to_stderr() {
    let env = TestEnv::new();
    scafld_tests::git(&env.work, &["init", "-q"]);
    std::fs::create_dir_all(env.work.join(".scafld/specs/drafts")).unwrap();
    let mut lsp = Lsp::start(&env, &env.work);
    lsp.logged(3, "started the daemon");
    env.scafld(&["daemon", "stop"]).assert_code(0);
    lsp.logged(2, "lost the daemon");
    let shutdown = lsp.call("shutdown", json!(null));
    assert!(shutdown["result"].is_null(), "{shutdown}");
    lsp.notify("exit", json!(null));
    assert_eq!(lsp.exit_code(), 0);
    let stderr = std::fs::read_to_string(env.path("lsp.stderr")).unwrap();
    assert_eq!(stderr, "", "nothing routine on stderr");
}

/// `nvim`, or `None` when this machine has none and may skip (never in CI).
fn nvim() -> Option<PathBuf> {
    let found = Command::new("nvim")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        assert!(!ci, "nvim is not installed; bash .ci/run installs it (apt-get install neovim)");
        eprintln!(
            "\n*** SKIPPED: nvim is not installed (apt-get install neovim); the Neovim client was not tested ***\n"
        );
        return None;
    }
    Some(PathBuf::from("nvim"))
}

#[test]
fn neovim_shows_a_broken_specs_diagnostic_and_clears_it_once_fixed() {
    let Some(nvim) = nvim() else { return };
    let mut env = TestEnv::new();
    env.start_daemon();
    init(&env);
    let path = write_spec(&env, "drafts", "greet", &broken("greet"));
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../client/editors/nvim");
    let results = env.path("nvim-results.txt");
    // Open the broken spec, wait for the diagnostic, fix the buffer, wait for none.
    let script = format!(
        r#"
vim.opt.runtimepath:append({plugin:?})
require("scafld").setup({{ cmd = {{ {scafld:?}, "lsp" }} }})
local out = io.open({results:?}, "w")
vim.cmd("edit " .. vim.fn.fnameescape({spec:?}))
local buf = vim.api.nvim_get_current_buf()
local seen = vim.wait(15000, function() return #vim.diagnostic.get(buf) > 0 end, 20)
for _, d in ipairs(vim.diagnostic.get(buf)) do
  out:write(string.format("diagnostic %d %d %s\n", d.lnum, d.severity, d.message))
end
-- What the client said while showing them (an underline out of range is an error here).
out:write("messages: " .. vim.fn.execute("messages"):gsub("\n", " | ") .. "\n")
if seen then
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  for i, l in ipairs(lines) do
    lines[i] = l:gsub("`ac2_1` boundary", "`ac2_2` boundary")
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  if vim.wait(15000, function() return #vim.diagnostic.get(buf) == 0 end, 20) then
    out:write("cleared\n")
  end
end
out:close()
vim.cmd("qa!")
"#,
        plugin = plugin.display().to_string(),
        scafld = scafld_tests::scafld_bin().display().to_string(),
        results = results.display().to_string(),
        spec = path.display().to_string(),
    );
    let script_path = env.path("test.lua");
    std::fs::write(&script_path, script).unwrap();
    let mut command = Command::new(nvim);
    env.apply_env(&mut command);
    let mut child = command
        .args(["--headless", "-u", "NONE", "-i", "NONE", "-n", "-c"])
        .arg(format!("luafile {}", script_path.display()))
        .current_dir(&env.work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run nvim");
    let Some(status) = scafld_tests::wait_for_exit(&mut child, DEADLINE * 2) else {
        let _ = child.kill();
        panic!("nvim did not finish; results so far: {:?}", std::fs::read_to_string(&results));
    };
    let text = std::fs::read_to_string(&results).unwrap_or_default();
    assert!(status.success(), "nvim: {status}; {text}");
    assert!(
        text.lines().any(|l| l.starts_with(&format!("diagnostic {DUPLICATE_LINE} 1 ")) && l.contains("`ac2_1` is already used")),
        "{text}\nlsp stderr: {}",
        std::fs::read_to_string(env.path("lsp.stderr")).unwrap_or_default()
    );
    assert!(text.lines().any(|l| l == "cleared"), "{text}");
    let messages = text.lines().find(|l| l.starts_with("messages:")).unwrap_or_default();
    assert!(!messages.contains("Error") && !messages.contains("outside range"), "{messages}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), broken("greet"), "nothing wrote the spec");
    // Neovim stopped its server on the way out: no `scafld lsp` of this environment is left.
    let marker = env.dir.path().display().to_string();
    wait_until("no scafld lsp left", || {
        std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()).all(|e| {
            let read = |name: &str| std::fs::read(e.path().join(name)).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&read("cmdline")).into_owned();
            let environ = String::from_utf8_lossy(&read("environ")).into_owned();
            !cmdline.ends_with("scafld\0lsp\0") || !environ.contains(&marker)
        })
    });
}

#[test]
fn task_check_validates_the_given_text_writes_nothing_and_bounds_its_size() {
    let env = TestEnv::new();
    init(&env);
    write_spec(&env, "drafts", "greet", &spec_text("greet", "draft"));
    let root = env.work.canonicalize().unwrap().display().to_string();
    let before = scafld_tests::tree(&env.work);
    let mut client = env.client();
    let checked = client.result("task.check", json!({"root": root, "task_id": "greet", "text": broken("greet")}));
    assert_eq!(checked["valid"], false);
    assert_eq!(checked["path"], ".scafld/specs/drafts/greet.md");
    assert_eq!(checked["diagnostics"][0]["line"], DUPLICATE_LINE + 1, "{checked}");
    assert_eq!(checked["phases"][1]["line"], 53, "the phase heading's line: {checked}");
    // Without text: the file, as task.validate reads it. A task with no file yet: its text.
    let file = client.result("task.check", json!({"root": root, "task_id": "greet"}));
    assert_eq!(file["valid"], true, "{file}");
    let new =
        client.result("task.check", json!({"root": root, "task_id": "fresh", "text": spec_text("fresh", "draft")}));
    assert_eq!((new["valid"].clone(), new["path"].clone()), (json!(true), json!("")), "{new}");
    let big = "x".repeat(scafld_protocol::methods::MAX_CHECK_TEXT_BYTES + 1);
    let refused = client.call("task.check", json!({"root": root, "task_id": "greet", "text": big}));
    assert_eq!(refused["error"]["data"]["kind"], "invalid_input", "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("at most 8388608 bytes"), "{refused}");
    assert_eq!(scafld_tests::tree(&env.work), before, "task.check wrote something");
}
