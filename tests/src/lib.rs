//! Test harness for the end-to-end suite: a hermetic environment (temp HOME, XDG dirs, state
//! directory and socket) in which the real `scafld` and `scafldd` binaries run, plus a raw
//! JSON-RPC client written with nothing but a Unix socket and serde_json.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tempfile::TempDir;

pub mod bench;

/// How long any single wait in a test may take before it fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Directory holding freshly built `scafld` and `scafldd` (built once per test run).
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let profile_dir = std::env::current_exe()
            .expect("test executable path")
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps")
            .to_path_buf();
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--workspace", "--bins", "--quiet", "--manifest-path"]).arg(&manifest);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        build.env("CARGO_TARGET_DIR", profile_dir.parent().expect("target dir"));
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "building the binaries failed");
        profile_dir
    })
}

pub fn scafld_bin() -> PathBuf {
    bin_dir().join("scafld")
}

pub fn scafldd_bin() -> PathBuf {
    bin_dir().join("scafldd")
}

/// The `executable` a daemon started from [`scafldd_bin`] names in its handshake: what a
/// stand-in daemon answers to pass for this build's (a client takes one naming no file, or
/// another, for a daemon of another build, and replaces it).
pub fn scafldd_identity() -> Value {
    use std::os::unix::fs::MetadataExt;
    let path = scafldd_bin();
    let meta = std::fs::metadata(&path).expect("the built scafldd");
    json!({"path": path.display().to_string(), "device": meta.dev(), "inode": meta.ino(), "size": meta.size(),
        "modified_seconds": meta.mtime(), "modified_nanos": meta.mtime_nsec()})
}

/// Set `path`'s modification time to `when` (as a checkout's files are aged, or as a tool
/// that puts a rewritten file's time back leaves it).
pub fn set_modified(path: &Path, when: std::time::SystemTime) {
    std::fs::File::options().append(true).open(path).unwrap().set_modified(when).unwrap();
}

/// Run `git args...` in `dir` (with a committer identity) and return its trimmed stdout;
/// panics with git's stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=scafld-tests", "-c", "user.email=tests@scafld.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Stage everything in `dir` and commit it as `message`.
pub fn commit_all(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", message]);
}

/// Poll `condition` until it holds; panic with `what` after [`DEADLINE`].
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Poll until `child` exits and return how; `None` once `within` has passed.
pub fn wait_for_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The output of `command`, failing the test (and killing the process) when it has not finished
/// `within`: for a process that must end quickly rather than hang (or keep serving).
#[track_caller]
pub fn output_within(command: &mut Command, within: Duration) -> Output {
    use std::io::Read as _;
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run the command");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let readers = (
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = out.read_to_end(&mut bytes);
            bytes
        }),
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = err.read_to_end(&mut bytes);
            bytes
        }),
    );
    let Some(status) = wait_for_exit(&mut child, within) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{command:?} did not finish within {within:?}");
    };
    let (stdout, stderr) = (readers.0.join().unwrap(), readers.1.join().unwrap());
    Output { status, stdout, stderr }
}

/// Every file and directory under `dir` with its content (directories end in `/`), to check
/// that something changed nothing.
pub fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            let key = path.strip_prefix(dir).unwrap().display().to_string();
            if path.is_dir() {
                files.insert(format!("{key}/"), Vec::new());
                stack.push(path);
            } else {
                files.insert(key, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// The result of running a command.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(output: Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// The JSON envelope printed with `--json`; every test that reads one also checks that it
    /// agrees with the exit code: `ok` exactly when it is 0, and an `error` with that exit code
    /// whenever it is not.
    #[track_caller]
    pub fn json(&self) -> Value {
        let envelope: Value = serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!("stdout is not one JSON document ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr)
        });
        if envelope.get("ok").is_some() {
            let ok = envelope["ok"] == true;
            assert_eq!(ok, self.code == 0, "`ok` and the exit code {} disagree:\n{}", self.code, self.stdout);
            if !ok {
                assert_eq!(envelope["error"]["exit_code"], self.code, "the error's exit code:\n{}", self.stdout);
            }
        }
        envelope
    }

    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "exit code\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }
}

/// A hermetic environment: every path the binaries resolve points inside one temp directory.
pub struct TestEnv {
    pub dir: TempDir,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    /// A workspace directory (not initialised) to run commands in.
    pub work: PathBuf,
    daemons: Vec<Child>,
}

impl Default for TestEnv {
    fn default() -> Self {
        TestEnv::new()
    }
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let dir = tempfile::Builder::new().prefix("scafld-e2e").tempdir().expect("temp dir");
        for sub in ["home", "run", "xdg-state", "work"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        TestEnv {
            socket: dir.path().join("run/scafldd.sock"),
            state_dir: dir.path().join("state"),
            work: dir.path().join("work"),
            dir,
            daemons: Vec::new(),
        }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// Environment shared by every process: nothing from the host but PATH.
    pub fn apply_env(&self, command: &mut Command) {
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path("home"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env("XDG_STATE_HOME", self.path("xdg-state"))
            .env("SCAFLD_SOCKET", &self.socket)
            .env("SCAFLD_STATE_DIR", &self.state_dir)
            .env("NO_COLOR", "1");
    }

    pub fn scafld_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(scafld_bin());
        self.apply_env(&mut command);
        command.args(args).current_dir(&self.work).stdin(Stdio::null());
        command
    }

    /// Run `scafld args...` in the work directory.
    pub fn scafld(&self, args: &[&str]) -> Run {
        Run::from(self.scafld_command(args).output().expect("run scafld"))
    }

    /// [`TestEnv::scafld`], failing the test (and killing the client) when it has not finished
    /// `within`: for calls that must answer quickly rather than hang.
    #[track_caller]
    pub fn scafld_within(&self, args: &[&str], within: Duration) -> Run {
        Run::from(output_within(&mut self.scafld_command(args), within))
    }

    pub fn daemon_command(&self) -> Command {
        let mut command = Command::new(scafldd_bin());
        self.apply_env(&mut command);
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        command
    }

    /// Start `scafldd` as a child of the test and wait until it answers.
    pub fn start_daemon(&mut self) -> u32 {
        self.start_daemon_with(&[])
    }

    /// [`TestEnv::start_daemon`] with extra environment variables for the daemon.
    pub fn start_daemon_with(&mut self, vars: &[(&str, &str)]) -> u32 {
        let child = self.daemon_command().envs(vars.iter().copied()).spawn().expect("spawn scafldd");
        self.adopt_daemon(child)
    }

    /// Keep `child`, a daemon started from [`TestEnv::daemon_command`], as one started here
    /// (killed with the environment), and wait until it answers.
    pub fn adopt_daemon(&mut self, child: Child) -> u32 {
        let pid = child.id();
        self.daemons.push(child);
        let socket = self.socket.clone();
        // The socket is bound before the database opens: its answer means start-up is over. A
        // connection alone proves nothing: the listener of a daemon killed while it started a
        // command lives on in that child until its exec, and resets what it queued.
        let answers = || {
            let Ok(mut client) = RawClient::connect(&socket) else { return false };
            let request = json!({"jsonrpc": "2.0", "id": 1, "method": "daemon.status", "params": {}});
            if client.writer.write_all(format!("{request}\n").as_bytes()).is_err() {
                return false;
            }
            matches!(client.try_read_wire(), Ok(Some(reply)) if reply["result"]["pid"] == pid)
        };
        let deadline = Instant::now() + DEADLINE;
        while !answers() {
            // A daemon that exited will never answer: say what it said.
            let child = self.daemons.last_mut().expect("the daemon just kept");
            if let Ok(Some(status)) = child.try_wait() {
                let mut said = String::new();
                if let Some(mut stderr) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut said);
                }
                panic!("the daemon exited ({status}) before it answered: {said}");
            }
            assert!(Instant::now() < deadline, "timed out waiting for the daemon to answer");
            std::thread::sleep(Duration::from_millis(5));
        }
        pid
    }

    /// Start `scafldd` so that a mode of 000 stops it as it stops any user. Run as root (whom
    /// such a mode does not stop), it starts without the capabilities that override modes
    /// (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), dropped from its bounding set by `setpriv`;
    /// `false`, with nothing started, when that cannot be done here.
    pub fn start_daemon_bound_by_modes(&mut self) -> bool {
        if !nix::unistd::Uid::effective().is_root() {
            self.start_daemon();
            return true;
        }
        const DROP: [&str; 2] = ["--bounding-set", "-dac_override,-dac_read_search"];
        let works = Command::new("setpriv").args(DROP).arg("true").output().is_ok_and(|out| out.status.success());
        if !works {
            return false;
        }
        let mut command = Command::new("setpriv");
        self.apply_env(&mut command);
        command.args(DROP).arg(scafldd_bin()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        self.daemons.push(command.spawn().expect("spawn setpriv scafldd"));
        let socket = self.socket.clone();
        wait_until("the daemon's socket", || RawClient::connect(&socket).is_ok());
        self.client().result("daemon.status", json!({}));
        true
    }

    /// Take ownership of the most recently started daemon child.
    pub fn take_daemon(&mut self) -> Child {
        self.daemons.pop().expect("a daemon was started")
    }

    /// The pid of the daemon answering now (`daemon status`).
    pub fn daemon_pid(&self) -> u32 {
        let status = self.scafld(&["daemon", "status", "--json"]);
        let pid = status.json()["result"]["pid"].as_u64().unwrap_or_else(|| panic!("{}", status.stdout));
        pid as u32
    }

    pub fn client(&self) -> RawClient {
        RawClient::connect(&self.socket).expect("connect to the daemon")
    }

    /// Initialise the work directory as a workspace (starting the daemon if needed).
    pub fn init(&self) -> Value {
        let run = self.scafld(&["init", "--json"]);
        run.assert_code(0);
        run.json()
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // Stop a daemon started by the client (auto-start) as well as our own children.
        // A daemon already stopping may have taken the connection into its backlog just before
        // closing its socket: the request then meets a reset, which is fine here.
        if let Ok(mut client) = RawClient::connect(&self.socket) {
            let shutdown = json!({"jsonrpc": "2.0", "id": 0, "method": "daemon.shutdown"}).to_string() + "\n";
            if client.writer.write_all(shutdown.as_bytes()).is_ok() {
                let _ = client.try_read_wire();
            }
        }
        for mut child in self.daemons.drain(..) {
            wait_for_exit(&mut child, Duration::from_secs(5));
            let _ = child.kill();
            let _ = child.wait();
        }
        let socket = self.socket.clone();
        let deadline = Instant::now() + Duration::from_secs(5);
        while socket.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Connect to `socket`, reaching paths over the 107-byte `sun_path` limit through
/// `/proc/self/fd/<dir>/<name>`.
pub fn connect_socket(socket: &Path) -> std::io::Result<UnixStream> {
    if socket.as_os_str().len() <= 107 {
        return UnixStream::connect(socket);
    }
    let dir = std::fs::File::open(socket.parent().expect("socket dir"))?;
    let alias = format!("/proc/self/fd/{}/{}", dir.as_raw_fd(), socket.file_name().unwrap().to_string_lossy());
    UnixStream::connect(alias)
}

/// A JSON-RPC client made of a socket and serde_json, as an editor plugin would write it.
pub struct RawClient {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    /// Messages read while looking for a particular reply.
    backlog: Vec<Value>,
}

impl RawClient {
    pub fn connect(socket: &Path) -> std::io::Result<RawClient> {
        let stream = connect_socket(socket)?;
        stream.set_read_timeout(Some(DEADLINE))?;
        Ok(RawClient { reader: BufReader::new(stream.try_clone()?), writer: stream, next_id: 1, backlog: Vec::new() })
    }

    pub fn send_line(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).unwrap();
        self.writer.write_all(b"\n").unwrap();
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// Send a request and return its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string());
        id
    }

    /// The next message from the daemon, whatever it is.
    pub fn read(&mut self) -> Value {
        if !self.backlog.is_empty() {
            return self.backlog.remove(0);
        }
        self.read_wire().expect("the daemon closed the connection")
    }

    /// The next line off the socket, as the daemon wrote it.
    pub fn read_line(&mut self) -> String {
        assert!(self.backlog.is_empty(), "messages were read before: {:?}", self.backlog);
        let mut line = String::new();
        let read = self.reader.read_line(&mut line).expect("read from the daemon");
        assert!(read > 0, "the daemon closed the connection");
        line
    }

    /// The next message off the socket; `None` at end of stream.
    pub fn read_wire(&mut self) -> Option<Value> {
        self.try_read_wire().expect("read from the daemon")
    }

    pub fn try_read_wire(&mut self) -> std::io::Result<Option<Value>> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        Ok(Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("daemon sent non-JSON ({e}): {line}"))))
    }

    /// The reply to request `id`, keeping other messages for later reads.
    pub fn reply(&mut self, id: u64) -> Value {
        if let Some(pos) = self.backlog.iter().position(|m| m["id"] == json!(id)) {
            return self.backlog.remove(pos);
        }
        loop {
            let message = self.read_wire().expect("the daemon closed the connection");
            if message["id"] == json!(id) {
                return message;
            }
            self.backlog.push(message);
        }
    }

    /// Call and return the whole reply object (`result` or `error`).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.reply(id)
    }

    /// Call and return `result`, panicking on an error reply.
    pub fn result(&mut self, method: &str, params: Value) -> Value {
        let reply = self.call(method, params);
        assert!(reply.get("error").is_none(), "{method} failed: {reply}");
        reply["result"].clone()
    }

    /// Wait for the next `events.event` notification and return its event.
    pub fn next_event(&mut self) -> Value {
        loop {
            let message = self.read();
            if message["method"] == "events.event" {
                return message["params"]["result"].clone();
            }
        }
    }
}
